//! Everything the command line prints goes through [`clean`]: secrets are
//! redacted, and control characters (which a guest, a model or a file name
//! could use to rewrite what the terminal shows) are escaped.

use reson::text::{Lines, escape_controls};

/// `text` as it may reach a terminal: redacted, with every control
/// character except newline and tab written as a visible escape.
pub(crate) fn clean(text: &str) -> String {
    escape_controls(&reson::redact::redact(text), Lines::Keep).into_owned()
}

/// `println!` through [`clean`].
macro_rules! say {
    ($($arg:tt)*) => { println!("{}", $crate::cli::term::clean(&format!($($arg)*))) };
}

/// `eprintln!` through [`clean`].
macro_rules! say_err {
    ($($arg:tt)*) => { eprintln!("{}", $crate::cli::term::clean(&format!($($arg)*))) };
}

/// `print!` through [`clean`].
macro_rules! say_part {
    ($($arg:tt)*) => { print!("{}", $crate::cli::term::clean(&format!($($arg)*))) };
}

pub(crate) use {say, say_err, say_part};

#[cfg(test)]
mod tests {
    use super::clean;

    #[test]
    fn terminal_text_keeps_its_lines_and_loses_its_escapes() {
        assert_eq!(clean("a\x1b[2Jb\nc"), "a\\u{1b}[2Jb\nc");
    }
}
