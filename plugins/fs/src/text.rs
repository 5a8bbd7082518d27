//! The text transformations behind `read` and `edit`, kept apart from any
//! file-system call.

use reson_sdk::ToolError;
use std::path::Path;

/// How many lines `read` shows when no limit is given.
pub const DEFAULT_READ_LIMIT: usize = 2000;

/// `count` followed by `noun`, with an `s` unless the count is one.
pub fn plural(count: usize, noun: &str) -> String {
    if count == 1 { format!("1 {noun}") } else { format!("{count} {noun}s") }
}

/// Lines `offset..offset + limit` (1-based) of `text`, numbered like `cat -n`.
/// A last line such as `(lines 1-40 of 120)` says when the file goes on
/// beyond what is shown, so the model knows to page further.
pub fn number_lines(
    text: &str,
    offset: Option<usize>,
    limit: Option<usize>,
    path: &Path,
) -> Result<String, ToolError> {
    let offset = offset.unwrap_or(1);
    let limit = limit.unwrap_or(DEFAULT_READ_LIMIT);
    if offset == 0 {
        return Err(ToolError::invalid("offset is 1-based: the first line is 1"));
    }
    if limit == 0 {
        return Err(ToolError::invalid("limit must be at least 1"));
    }
    let lines: Vec<&str> = text.lines().collect();
    let total = lines.len();
    if total == 0 && offset == 1 {
        return Ok(format!("({} is empty)", path.display()));
    }
    if offset > total {
        return Err(ToolError::invalid(format!(
            "offset {offset} is past the end of {}, which has {}",
            path.display(),
            plural(total, "line")
        )));
    }
    let end = total.min(offset - 1 + limit);
    let mut out: Vec<String> = lines[offset - 1..end]
        .iter()
        .zip(offset..)
        .map(|(line, number)| format!("{number:>6}\t{line}"))
        .collect();
    if offset > 1 || end < total {
        out.push(format!("(lines {offset}-{end} of {total})"));
    }
    Ok(out.join("\n"))
}

/// Refuses edits that could not mean anything, before the file is read.
pub fn check_edit(old: &str, new: &str) -> Result<(), ToolError> {
    if old.is_empty() {
        return Err(ToolError::invalid(
            "old_string is empty; to create or overwrite a whole file, use write",
        ));
    }
    if old == new {
        return Err(ToolError::invalid(
            "old_string and new_string are identical, so there is nothing to change",
        ));
    }
    Ok(())
}

/// Replaces `old` by `new` in `content` (`old` being non-empty, see
/// [`check_edit`]). Unless `replace_all` is set, `old` must occur exactly
/// once, so that an edit never lands on a place the model did not mean.
/// Returns the new content and the number of replacements.
pub fn replace(
    content: &str,
    old: &str,
    new: &str,
    replace_all: bool,
    path: &Path,
) -> Result<(String, usize), ToolError> {
    let path = path.display();
    match content.matches(old).count() {
        0 => Err(ToolError::invalid(format!(
            "old_string was not found in {path}; read the file to check the exact text, \
             including whitespace and indentation"
        ))),
        1 => Ok((content.replacen(old, new, 1), 1)),
        count if replace_all => Ok((content.replace(old, new), count)),
        count => Err(ToolError::invalid(format!(
            "old_string matches {count} times in {path}; include more context to make it \
             unique, or set replace_all"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PATH: &str = "/g/notes.txt";

    fn numbered(text: &str, offset: Option<usize>, limit: Option<usize>) -> String {
        number_lines(text, offset, limit, Path::new(PATH)).unwrap()
    }

    fn invalid(result: Result<impl std::fmt::Debug, ToolError>) -> String {
        match result {
            Err(ToolError::InvalidArguments(message)) => message,
            other => panic!("expected invalid arguments, got {other:?}"),
        }
    }

    #[test]
    fn whole_file_is_numbered_without_a_range_line() {
        assert_eq!(numbered("a\nb\n", None, None), "     1\ta\n     2\tb");
        assert_eq!(numbered("a\r\nno newline", None, None), "     1\ta\n     2\tno newline");
    }

    #[test]
    fn partial_ranges_end_with_the_range_line() {
        let text: String = (1..=10).map(|n| format!("l{n}\n")).collect();
        assert_eq!(numbered(&text, Some(9), None), "     9\tl9\n    10\tl10\n(lines 9-10 of 10)");
        assert_eq!(numbered(&text, None, Some(2)), "     1\tl1\n     2\tl2\n(lines 1-2 of 10)");
        assert_eq!(numbered(&text, Some(10), Some(5)), "    10\tl10\n(lines 10-10 of 10)");
        assert!(!numbered(&text, Some(1), Some(10)).contains("(lines"));
    }

    #[test]
    fn numbers_wider_than_six_digits_still_show() {
        let text = "x\n".repeat(1_000_001);
        let out = numbered(&text, Some(1_000_001), None);
        assert!(out.starts_with("1000001\tx\n"), "{out}");
    }

    #[test]
    fn the_default_limit_is_2000_lines() {
        let text = "x\n".repeat(2500);
        let out = numbered(&text, None, None);
        assert_eq!(out.lines().count(), 2001);
        assert!(out.ends_with("(lines 1-2000 of 2500)"));
    }

    #[test]
    fn empty_files_and_bad_ranges() {
        assert_eq!(numbered("", None, None), "(/g/notes.txt is empty)");
        assert_eq!(
            invalid(number_lines("a\nb\n", Some(3), None, Path::new(PATH))),
            "offset 3 is past the end of /g/notes.txt, which has 2 lines"
        );
        assert_eq!(
            invalid(number_lines("", Some(2), None, Path::new(PATH))),
            "offset 2 is past the end of /g/notes.txt, which has 0 lines"
        );
        invalid(number_lines("a", Some(0), None, Path::new(PATH)));
        invalid(number_lines("a", None, Some(0), Path::new(PATH)));
    }

    #[test]
    fn a_unique_match_is_replaced() {
        let (text, count) = replace("let a = 1;\n", "1", "2", false, Path::new(PATH)).unwrap();
        assert_eq!((text.as_str(), count), ("let a = 2;\n", 1));
    }

    #[test]
    fn several_matches_need_replace_all() {
        assert_eq!(
            invalid(replace("x x x", "x", "y", false, Path::new(PATH))),
            "old_string matches 3 times in /g/notes.txt; include more context to make it \
             unique, or set replace_all"
        );
        let (text, count) = replace("x x x", "x", "yy", true, Path::new(PATH)).unwrap();
        assert_eq!((text.as_str(), count), ("yy yy yy", 3));
    }

    #[test]
    fn matches_are_counted_without_overlap() {
        let (text, count) = replace("aaaa", "aa", "b", true, Path::new(PATH)).unwrap();
        assert_eq!((text.as_str(), count), ("bb", 2));
    }

    #[test]
    fn a_missing_match_says_so() {
        let message = invalid(replace("abc", "z", "y", false, Path::new(PATH)));
        assert!(message.starts_with("old_string was not found in /g/notes.txt"), "{message}");
    }

    #[test]
    fn meaningless_edits_are_refused() {
        assert!(invalid(check_edit("", "x")).contains("old_string is empty"));
        assert!(invalid(check_edit("x", "x")).contains("identical"));
        check_edit("x", "").unwrap();
    }

    #[test]
    fn plurals() {
        assert_eq!(plural(1, "line"), "1 line");
        assert_eq!(plural(0, "byte"), "0 bytes");
    }
}
