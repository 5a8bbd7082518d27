//! Everything the command line prints goes through [`clean`]: secrets are
//! redacted, and control characters (which a guest, a model or a file name
//! could use to rewrite what the terminal shows) are escaped.

/// `text` as it may reach a terminal: redacted, with every control
/// character except newline and tab, and every bidirectional override,
/// written as a visible `\u{..}` escape.
pub(crate) fn clean(text: &str) -> String {
    let text = reson::redact::redact(text);
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if (c.is_control() && c != '\n' && c != '\t') || is_bidi_control(c) {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    out
}

/// Characters that reorder how text is displayed without being control
/// characters in Unicode's sense.
fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
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
    fn control_characters_are_escaped_but_lines_stay() {
        assert_eq!(clean("a\x1b[2Jb\rc\u{7}"), "a\\u{1b}[2Jb\\u{d}c\\u{7}");
        assert_eq!(clean("line\n\tindented"), "line\n\tindented");
        assert_eq!(clean("evil\u{202e}txt.exe"), "evil\\u{202e}txt.exe");
        assert_eq!(clean("héllo ✓"), "héllo ✓");
    }
}
