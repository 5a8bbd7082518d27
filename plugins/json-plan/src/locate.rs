//! Finding the plan object in the answer, wherever the model put it.

use reson_sdk::plan::ParseError;
use serde_json::{Deserializer, Value};

/// The error when the answer holds no JSON object at all.
pub const NO_OBJECT: &str = "no JSON object with \"steps\" found in the answer";

/// The value of `steps` in the first JSON object of `raw` that has that key.
///
/// Every `{` that could start an object is tried with a streaming
/// deserializer, which stops at the end of the object: that skips prose
/// before and after it, and code fence lines around it, without knowing
/// anything about them. Nested objects are tried too, so a plan wrapped in
/// another object (`{"plan": {"steps": ...}}`) is found.
pub fn steps_value(raw: &str) -> Result<Value, ParseError> {
    let mut first_broken = None;
    let mut saw_object = false;
    for start in candidates(raw) {
        match Deserializer::from_str(&raw[start..]).into_iter::<Value>().next() {
            Some(Ok(Value::Object(mut object))) => match object.remove("steps") {
                Some(steps) => return Ok(steps),
                None => saw_object = true,
            },
            Some(Err(error)) => {
                first_broken.get_or_insert_with(|| syntax_error(raw, start, &error));
            }
            // A candidate starts with `{`, so the deserializer always finds
            // the start of a value, which can only be an object.
            Some(Ok(_)) | None => {}
        }
    }
    // A broken object is more likely the plan than a valid one without
    // `steps` (say, a step the model quoted), so its error is more useful.
    Err(match first_broken {
        Some(error) => error,
        None if saw_object => ParseError::MissingField("steps".to_owned()),
        None => ParseError::NoPlan(NO_OBJECT.to_owned()),
    })
}

/// Offsets of the `{` in `raw` that could start a JSON object: those
/// followed, after JSON whitespace, by a key or the end of the object. That
/// leaves out braces in prose and templates (`{name}`), which would
/// otherwise be reported as broken JSON.
fn candidates(raw: &str) -> impl Iterator<Item = usize> + '_ {
    raw.match_indices('{').map(|(start, _)| start).filter(|&start| {
        raw[start + 1..].trim_start_matches([' ', '\t', '\n', '\r']).starts_with(['"', '}'])
    })
}

/// A syntax error for `error`, met while parsing `raw` from byte `start`.
///
/// serde_json places the error within the text it was given, counting
/// columns in bytes; the model sees the whole answer, so the position is
/// moved to it and the column counted in characters.
fn syntax_error(raw: &str, start: usize, error: &serde_json::Error) -> ParseError {
    let parsed = &raw[start..];
    let line_start = match error.line() {
        0 | 1 => 0,
        line => parsed.match_indices('\n').nth(line - 2).map_or(parsed.len(), |(at, _)| at + 1),
    };
    let at = start + (line_start + error.column()).min(parsed.len());
    let before = &raw.as_bytes()[..at];
    let line = 1 + before.iter().filter(|&&byte| byte == b'\n').count();
    let column_start =
        before.iter().rposition(|&byte| byte == b'\n').map_or(0, |newline| newline + 1);
    // Counting the bytes that start a UTF-8 sequence counts characters even
    // if `at` falls inside one.
    let column = before[column_start..].iter().filter(|&&byte| byte & 0xC0 != 0x80).count();
    let text = error.to_string();
    let suffix = format!(" at line {} column {}", error.line(), error.column());
    let message = text.strip_suffix(&suffix).unwrap_or(&text);
    ParseError::Syntax(format!("invalid JSON at line {line} column {column}: {message}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `steps` value found in `raw`, as compact JSON.
    fn found(raw: &str) -> String {
        steps_value(raw).unwrap().to_string()
    }

    fn syntax(raw: &str) -> String {
        match steps_value(raw) {
            Err(ParseError::Syntax(message)) => message,
            other => panic!("expected a syntax error, got {other:?}"),
        }
    }

    #[test]
    fn a_bare_object_is_found() {
        assert_eq!(found(r#"{"steps": ["a"]}"#), r#"["a"]"#);
        assert_eq!(found("\n  {\n\"steps\": []}\n"), "[]");
    }

    #[test]
    fn an_object_in_a_fenced_block_is_found() {
        let tagged = "Here is the plan:\n```json\n{\"steps\": [\"a\", \"b\"]}\n```\nGood luck.";
        assert_eq!(found(tagged), r#"["a","b"]"#);
        let untagged = "```\n{\"steps\": [\"a\"]}\n```";
        assert_eq!(found(untagged), r#"["a"]"#);
    }

    #[test]
    fn an_object_amid_prose_is_found() {
        let raw = r#"Sure! The plan is {"steps": ["a"]} and then we are done."#;
        assert_eq!(found(raw), r#"["a"]"#);
    }

    #[test]
    fn the_first_object_with_steps_wins() {
        let raw =
            r#"A step looks like {"description": "x"}. Plan: {"steps": ["a"]} or {"steps": ["b"]}"#;
        assert_eq!(found(raw), r#"["a"]"#);
    }

    #[test]
    fn a_plan_nested_in_another_object_is_found() {
        assert_eq!(found(r#"{"plan": {"steps": ["a"]}}"#), r#"["a"]"#);
    }

    #[test]
    fn braces_in_prose_are_not_candidates() {
        let raw = "Fill in {name} and {} later: {\"steps\": [\"a\"]}";
        assert_eq!(found(raw), r#"["a"]"#);
        assert!(matches!(steps_value("Fill in {name} or { x }."), Err(ParseError::NoPlan(_))));
    }

    #[test]
    fn a_valid_plan_wins_over_an_earlier_broken_object() {
        let raw = r#"Not this: {"steps": [,]}. This: {"steps": ["a"]}"#;
        assert_eq!(found(raw), r#"["a"]"#);
    }

    #[test]
    fn broken_json_is_a_syntax_error_placed_in_the_whole_answer() {
        let raw = "Plan:\n```json\n{\"steps\": [\n  {\"description\": \"a\"},\n]}\n```";
        assert_eq!(syntax(raw), "invalid JSON at line 5 column 1: trailing comma");
        // On the object's first line the prose before it counts too.
        assert_eq!(
            syntax(r#"Plan: {"steps": [x]}"#),
            "invalid JSON at line 1 column 18: expected value"
        );
    }

    #[test]
    fn columns_count_characters_not_bytes() {
        assert_eq!(
            syntax(r#"Planë: {"steps": [x]}"#),
            "invalid JSON at line 1 column 19: expected value"
        );
        assert_eq!(
            syntax("{\"steps\": [\"é\", x]}"),
            "invalid JSON at line 1 column 17: expected value"
        );
    }

    #[test]
    fn a_truncated_answer_is_a_syntax_error() {
        let raw = "{\"steps\": [{\"description\": \"a\"}, {\"descr";
        assert_eq!(syntax(raw), "invalid JSON at line 1 column 40: EOF while parsing a string");
    }

    #[test]
    fn a_broken_object_wins_over_one_without_steps() {
        let raw = r#"{"description": "a"} then {"steps": ["b",]}"#;
        assert_eq!(syntax(raw), "invalid JSON at line 1 column 42: trailing comma");
    }

    #[test]
    fn objects_without_steps_are_a_missing_field() {
        for raw in [r#"{"step": ["a"]}"#, "{}", r#"[{"description": "a"}]"#] {
            match steps_value(raw) {
                Err(ParseError::MissingField(field)) => assert_eq!(field, "steps", "{raw}"),
                other => panic!("{raw}: expected a missing field, got {other:?}"),
            }
        }
    }

    #[test]
    fn no_object_at_all_is_no_plan() {
        for raw in ["", "I cannot plan this.", r#"["a", "b"]"#, "```json\n```"] {
            match steps_value(raw) {
                Err(ParseError::NoPlan(message)) => assert_eq!(message, NO_OBJECT, "{raw}"),
                other => panic!("{raw}: expected no plan, got {other:?}"),
            }
        }
    }
}
