//! Reading one line of the answer: how far it is indented and whether it is
//! a list item.

/// The columns a tab advances to a multiple of, as in CommonMark.
const TAB_STOP: usize = 4;

/// The most digits of an ordered list marker, as in CommonMark; longer
/// numbers (years, amounts) start prose, not items.
const MAX_NUMBER_DIGITS: usize = 9;

/// The checkbox marks of a task list item.
const CHECKBOXES: [&str; 3] = ["[ ]", "[x]", "[X]"];

/// A line split into its indentation, in columns, and the rest.
pub fn split_indent(line: &str) -> (usize, &str) {
    let body = line.trim_start_matches([' ', '\t']);
    let indent = line[..line.len() - body.len()].chars().fold(0, |column, c| {
        if c == '\t' { column / TAB_STOP * TAB_STOP + TAB_STOP } else { column + 1 }
    });
    (indent, body)
}

/// The text of the list item `body` (a line without its indentation), after
/// its marker and checkbox, or `None` when `body` is not a list item.
///
/// A marker is `-`, `*`, `+`, or a number followed by `.` or `)`, and must
/// be followed by whitespace or end the line, so `**bold**`, `-1` and `1.5`
/// are not items.
pub fn item_text(body: &str) -> Option<&str> {
    if is_thematic_break(body) {
        return None;
    }
    let after_marker = body.strip_prefix(['-', '*', '+']).or_else(|| after_number(body))?;
    if !(after_marker.is_empty() || after_marker.starts_with([' ', '\t'])) {
        return None;
    }
    let text = after_marker.trim_start();
    let unchecked = CHECKBOXES.iter().find_map(|checkbox| {
        text.strip_prefix(checkbox).filter(|rest| rest.is_empty() || rest.starts_with([' ', '\t']))
    });
    Some(unchecked.unwrap_or(text).trim())
}

/// What follows the `1.` or `1)` that starts `body`.
fn after_number(body: &str) -> Option<&str> {
    let digits = body.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 || digits > MAX_NUMBER_DIGITS {
        return None;
    }
    body[digits..].strip_prefix(['.', ')'])
}

/// Whether `body` is a horizontal rule (`---`, `* * *`, `___`), which would
/// otherwise read as an item whose text is the rest of the rule.
fn is_thematic_break(body: &str) -> bool {
    let mut marks = body.chars().filter(|c| !c.is_whitespace());
    let Some(mark @ ('-' | '*' | '_')) = marks.next() else {
        return false;
    };
    let mut count = 1;
    for other in marks {
        if other != mark {
            return false;
        }
        count += 1;
    }
    count >= 3
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indentation_counts_spaces_and_tabs_to_the_next_stop() {
        assert_eq!(split_indent("- a"), (0, "- a"));
        assert_eq!(split_indent("   1. a"), (3, "1. a"));
        assert_eq!(split_indent("\t- a"), (4, "- a"));
        assert_eq!(split_indent("  \t- a"), (4, "- a"));
        assert_eq!(split_indent("\t  - a"), (6, "- a"));
        assert_eq!(split_indent("    "), (4, ""));
    }

    #[test]
    fn numbered_markers_end_with_a_dot_or_a_parenthesis() {
        assert_eq!(item_text("1. Read"), Some("Read"));
        assert_eq!(item_text("12) Read"), Some("Read"));
        assert_eq!(item_text("3.\tRead  "), Some("Read"));
        assert_eq!(item_text("123456789. Read"), Some("Read"));
    }

    #[test]
    fn bullet_markers_are_dash_star_and_plus() {
        assert_eq!(item_text("- Read"), Some("Read"));
        assert_eq!(item_text("* Read"), Some("Read"));
        assert_eq!(item_text("+ Read"), Some("Read"));
    }

    #[test]
    fn checkboxes_are_dropped_checked_or_not() {
        assert_eq!(item_text("- [ ] Read"), Some("Read"));
        assert_eq!(item_text("- [x] Read"), Some("Read"));
        assert_eq!(item_text("* [X] Read"), Some("Read"));
        assert_eq!(item_text("1. [ ] Read"), Some("Read"));
        // Only a checkbox followed by whitespace is one.
        assert_eq!(item_text("- [x]Read"), Some("[x]Read"));
        assert_eq!(item_text("- [link](url)"), Some("[link](url)"));
    }

    #[test]
    fn markers_alone_are_items_without_text() {
        for body in ["1.", "2)", "-", "*", "+ ", "- [ ]", "- [x]  ", "1. [ ]"] {
            assert_eq!(item_text(body), Some(""), "{body}");
        }
    }

    #[test]
    fn markers_must_be_followed_by_whitespace() {
        for body in ["-1 degrees", "**Bold**", "*emphasis*", "+1", "1.5 hours", "1,2", "a. b"] {
            assert_eq!(item_text(body), None, "{body}");
        }
        assert_eq!(item_text("1234567890. Read"), None);
    }

    #[test]
    fn prose_and_headings_are_not_items() {
        for body in ["Plan:", "# Steps", "## 1. Setup", "> - quoted", "| a | b |", ""] {
            assert_eq!(item_text(body), None, "{body}");
        }
    }

    #[test]
    fn horizontal_rules_are_not_items() {
        for body in ["---", "***", "___", "- - -", "* * * *", "-----"] {
            assert_eq!(item_text(body), None, "{body}");
        }
        assert_eq!(item_text("- -"), Some("-"));
        assert_eq!(item_text("- * -"), Some("* -"));
    }
}
