//! Text that came from a guest, a model or a file name, made safe to show:
//! control characters (which could move the cursor, clear or retitle a
//! terminal, or forge a log line) and bidirectional overrides (which
//! reorder what is displayed) are written as visible `\u{..}` escapes.

use std::borrow::Cow;

/// Whether line breaks and tabs are kept (terminal output) or escaped too
/// (one-line log records, where a newline would forge another record).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lines {
    /// Keep `\n` and `\t`.
    Keep,
    /// Escape them like any other control character.
    Escape,
}

/// `text` with unsafe characters escaped; borrowed when there are none.
pub fn escape_controls(text: &str, lines: Lines) -> Cow<'_, str> {
    let unsafe_char = |c: char| {
        let kept = lines == Lines::Keep && (c == '\n' || c == '\t');
        (c.is_control() && !kept) || is_bidi_control(c)
    };
    if !text.chars().any(unsafe_char) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if unsafe_char(c) {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// Characters that reorder how text is displayed without being control
/// characters in Unicode's sense.
fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped() {
        let keep = |t| escape_controls(t, Lines::Keep).into_owned();
        assert_eq!(keep("a\x1b[2Jb\rc\u{7}"), "a\\u{1b}[2Jb\\u{d}c\\u{7}");
        assert_eq!(keep("line\n\tindented"), "line\n\tindented");
        assert_eq!(keep("evil\u{202e}txt.exe"), "evil\\u{202e}txt.exe");
        assert_eq!(keep("héllo ✓"), "héllo ✓");
        assert!(matches!(escape_controls("plain", Lines::Keep), Cow::Borrowed(_)));
        assert_eq!(escape_controls("a\nb", Lines::Escape), "a\\u{a}b");
    }
}
