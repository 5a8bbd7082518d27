//! `json-plan`: parses a plan the model wrote as JSON.
//!
//! ```json
//! {"steps": [
//!   {"description": "Find where the greeting is built",
//!    "steps": ["Search for \"Hello\"", {"description": "Read the matches"}]},
//!   "Rename it"
//! ]}
//! ```
//!
//! - A step is `{"description": "..."}`, with optional nested `"steps"`, or a
//!   plain string as a shorthand for `{"description": "..."}`. Other fields
//!   are ignored; descriptions are trimmed.
//! - Sub-steps are flattened depth first: a step, then its sub-steps (and
//!   theirs), then its next sibling. Each sub-step's `parent` is its parent's
//!   index in that list, so parents always come before their children.
//! - The object may stand alone, sit in a fenced code block, or be surrounded
//!   by prose: the plan is the first `{` in the answer that starts a valid
//!   JSON object with a `steps` key.
//!
//! Errors, checked in this order:
//!
//! - no object with `steps`, but some candidate object is broken:
//!   `syntax("invalid JSON at line L column C: ...")`, for the first broken
//!   one, with its position in the whole answer;
//! - only objects without `steps`: `missing-field("steps")`;
//! - no JSON object at all: `no-plan(...)`;
//! - `steps` (or a step's `steps`) not an array: `syntax(...)`;
//! - no steps: `empty`;
//! - a step that is neither a string nor an object with a non-blank string
//!   `description`: `step-without-description(i)`, `i` being its index in
//!   the flattened list.

mod locate;
mod steps;

use reson_sdk::plan::{ParseError, Plan};

fn parse(raw: String, _goal: String) -> Result<Plan, ParseError> {
    let steps = locate::steps_value(&raw)?;
    Ok(Plan { steps: steps::flatten(&steps)? })
}

reson_sdk::export_plan_parser!(parse);

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(raw: &str) -> Result<Plan, ParseError> {
        parse(raw.to_owned(), "the goal".to_owned())
    }

    #[test]
    fn a_fenced_plan_amid_prose_is_parsed_and_flattened() {
        let raw = "I'll do it in two parts.\n\n```json\n{\"steps\": [\n  {\"description\": \" Find it \", \"steps\": [\"grep\"]},\n  \"Rename it\"\n]}\n```\nDone.";
        let steps: Vec<_> = parsed(raw)
            .unwrap()
            .steps
            .into_iter()
            .map(|step| (step.description, step.parent))
            .collect();
        assert_eq!(
            steps,
            [
                ("Find it".to_owned(), None),
                ("grep".to_owned(), Some(0)),
                ("Rename it".to_owned(), None)
            ]
        );
    }

    #[test]
    fn errors_of_finding_and_of_flattening_are_returned() {
        assert!(matches!(parsed("no plan"), Err(ParseError::NoPlan(_))));
        assert!(matches!(parsed(r#"{"steps": [}"#), Err(ParseError::Syntax(_))));
        assert!(matches!(parsed(r#"{"goal": "x"}"#), Err(ParseError::MissingField(_))));
        assert!(matches!(parsed(r#"{"steps": {}}"#), Err(ParseError::Syntax(_))));
        assert!(matches!(parsed(r#"{"steps": []}"#), Err(ParseError::Empty)));
        assert!(matches!(
            parsed(r#"{"steps": [" "]}"#),
            Err(ParseError::StepWithoutDescription(0))
        ));
    }
}
