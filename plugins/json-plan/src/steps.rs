//! Turning the `steps` tree into the flat list of the contract.

use reson_sdk::plan::{ParseError, PlanStep};
use serde_json::Value;

/// Flattens `steps`, the value of the plan's `steps` key, depth first: a
/// step, then its sub-steps (and theirs), then its next sibling.
pub fn flatten(steps: &Value) -> Result<Vec<PlanStep>, ParseError> {
    let Value::Array(items) = steps else {
        return Err(ParseError::Syntax("`steps` must be an array".to_owned()));
    };
    if items.is_empty() {
        return Err(ParseError::Empty);
    }
    let mut flat = Vec::new();
    push_all(items, None, &mut flat)?;
    Ok(flat)
}

/// Appends `items`, children of the step at `parent`, and their sub-steps.
/// The recursion is bounded by serde_json's nesting limit.
fn push_all(
    items: &[Value],
    parent: Option<u32>,
    flat: &mut Vec<PlanStep>,
) -> Result<(), ParseError> {
    for item in items {
        // Indices fit: a guest's memory is 32-bit, and each step takes bytes.
        let index = flat.len() as u32;
        let (description, sub_steps) = match item {
            Value::String(text) => (Some(text.as_str()), None),
            Value::Object(fields) => {
                (fields.get("description").and_then(Value::as_str), fields.get("steps"))
            }
            _ => (None, None),
        };
        let description = description
            .map(str::trim)
            .filter(|description| !description.is_empty())
            .ok_or(ParseError::StepWithoutDescription(index))?;
        flat.push(PlanStep { description: description.to_owned(), parent });
        match sub_steps {
            None => {}
            Some(Value::Array(sub_steps)) => push_all(sub_steps, Some(index), flat)?,
            Some(_) => {
                return Err(ParseError::Syntax(format!(
                    "`steps` of step {index} must be an array"
                )));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The flattened steps as `(description, parent)` pairs: the generated
    /// types do not implement `PartialEq`.
    fn flat(steps: Value) -> Vec<(String, Option<u32>)> {
        flatten(&steps).unwrap().into_iter().map(|step| (step.description, step.parent)).collect()
    }

    fn error(steps: Value) -> ParseError {
        match flatten(&steps) {
            Err(error) => error,
            Ok(flat) => panic!("expected an error, got {flat:?}"),
        }
    }

    fn without_description(steps: Value) -> u32 {
        match error(steps) {
            ParseError::StepWithoutDescription(index) => index,
            other => panic!("expected a step without description, got {other:?}"),
        }
    }

    fn step(description: &str, parent: Option<u32>) -> (String, Option<u32>) {
        (description.to_owned(), parent)
    }

    #[test]
    fn objects_and_strings_are_steps() {
        let steps =
            json!([{"description": "a"}, "b", {"description": "c", "id": 3, "done": false}]);
        assert_eq!(flat(steps), [step("a", None), step("b", None), step("c", None)]);
    }

    #[test]
    fn descriptions_are_trimmed() {
        let steps = json!(["  a \n", {"description": "\tb "}]);
        assert_eq!(flat(steps), [step("a", None), step("b", None)]);
    }

    #[test]
    fn sub_steps_are_flattened_depth_first_after_their_parent() {
        let steps = json!([
            {"description": "a", "steps": [
                {"description": "a1", "steps": ["a1x", "a1y"]},
                "a2",
            ]},
            "b",
            {"description": "c", "steps": ["c1"]},
            {"description": "d", "steps": []},
        ]);
        assert_eq!(
            flat(steps),
            [
                step("a", None),
                step("a1", Some(0)),
                step("a1x", Some(1)),
                step("a1y", Some(1)),
                step("a2", Some(0)),
                step("b", None),
                step("c", None),
                step("c1", Some(6)),
                step("d", None),
            ]
        );
    }

    #[test]
    fn steps_must_be_an_array() {
        for steps in [json!("a"), json!({"description": "a"}), json!(null), json!(3)] {
            match error(steps) {
                ParseError::Syntax(message) => assert_eq!(message, "`steps` must be an array"),
                other => panic!("expected a syntax error, got {other:?}"),
            }
        }
    }

    #[test]
    fn sub_steps_must_be_an_array() {
        match error(json!(["a", {"description": "b", "steps": "b1"}])) {
            ParseError::Syntax(message) => {
                assert_eq!(message, "`steps` of step 1 must be an array")
            }
            other => panic!("expected a syntax error, got {other:?}"),
        }
    }

    #[test]
    fn no_steps_is_empty() {
        assert!(matches!(error(json!([])), ParseError::Empty));
    }

    #[test]
    fn a_step_without_description_is_named_by_its_flattened_index() {
        assert_eq!(without_description(json!([{"title": "a"}])), 0);
        assert_eq!(without_description(json!(["a", ""])), 1);
        assert_eq!(without_description(json!(["a", {"description": " \n\t"}])), 1);
        assert_eq!(without_description(json!(["a", {"description": 7}])), 1);
        assert_eq!(without_description(json!(["a", {"description": null}])), 1);
        assert_eq!(without_description(json!(["a", 7])), 1);
        assert_eq!(without_description(json!(["a", null, ""])), 1);
        let nested = json!([{"description": "a", "steps": ["a1", {"steps": ["x"]}]}, ""]);
        assert_eq!(without_description(nested), 2);
    }
}
