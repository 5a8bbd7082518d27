//! Everything the command line prints goes through [`clean`]: secrets are
//! redacted, and control characters (which a guest, a model or a file name
//! could use to rewrite what the terminal shows) are escaped.

use reson::text::{Lines, escape_controls};

/// `text` as it may reach a terminal: redacted, with every control
/// character except newline and tab written as a visible escape.
pub(crate) fn clean(text: &str) -> String {
    escape_controls(&reson::redact::redact(text), Lines::Keep).into_owned()
}

/// A field that must stay on its line (a tool's name or arguments, a
/// plugin's version, an error in a listing): line breaks are escaped too,
/// so what a model or a guest wrote cannot add lines that look like the
/// host's own (an approval prompt, a result). [`clean`] still runs on the
/// whole line.
pub(crate) fn one_line(text: &str) -> String {
    escape_controls(text, Lines::Escape).into_owned()
}

/// Exit status of a process whose output reader went away, as if SIGPIPE
/// had ended it (Rust ignores the signal, so writes fail instead).
const BROKEN_PIPE_STATUS: i32 = 128 + 13;

/// Writes `text` to stdout at once. A reader that went away (`reson tool
/// list | head`) ends the process quietly, as it would any Unix tool.
pub(crate) fn write_out(text: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_all(text.as_bytes()).and_then(|()| out.flush())
        && e.kind() == std::io::ErrorKind::BrokenPipe
    {
        std::process::exit(BROKEN_PIPE_STATUS);
    }
}

/// `println!` through [`clean`].
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::cli::term::write_out(&($crate::cli::term::clean(&format!($($arg)*)) + "\n"))
    };
}

/// `eprintln!` through [`clean`].
macro_rules! say_err {
    ($($arg:tt)*) => { eprintln!("{}", $crate::cli::term::clean(&format!($($arg)*))) };
}

/// `print!` through [`clean`].
macro_rules! say_part {
    ($($arg:tt)*) => { $crate::cli::term::write_out(&$crate::cli::term::clean(&format!($($arg)*))) };
}

pub(crate) use {say, say_err, say_part};

#[cfg(test)]
mod tests {
    use super::{clean, one_line};

    #[test]
    fn terminal_text_keeps_its_lines_and_loses_its_escapes() {
        assert_eq!(clean("a\x1b[2Jb\nc"), "a\\u{1b}[2Jb\nc");
        assert_eq!(one_line("{\"a\":\n1}\r\n"), "{\"a\":\\u{a}1}\\u{d}\\u{a}");
    }
}
