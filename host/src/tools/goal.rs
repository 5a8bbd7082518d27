//! The built-in `goal` tool: the model plans and tracks its work as a goal
//! tree kept in the trace. It runs in the host, on the trace's own tree.

use crate::plugin::ToolSpec;
use crate::trace::GoalTree;
use schemars::JsonSchema;
use serde::Deserialize;

/// The tool's name.
pub const NAME: &str = "goal";

/// Arguments of `goal`: one action per call.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(tag = "action", rename_all = "snake_case", deny_unknown_fields)]
enum GoalAction {
    /// Add a goal under the current goal (at the top level when none is current).
    Add {
        /// What the goal is.
        description: String,
    },
    /// Add a goal as the last child of `goal_id`.
    Under {
        /// The parent goal, such as `g1`.
        goal_id: String,
        /// What the goal is.
        description: String,
    },
    /// Add a goal right after `goal_id`, as its sibling.
    After {
        /// The sibling goal.
        goal_id: String,
        /// What the goal is.
        description: String,
    },
    /// Make `goal_id` the current goal.
    Focus {
        /// The goal to work on.
        goal_id: String,
    },
    /// Complete the current goal.
    Done {
        /// What was achieved.
        summary: String,
    },
    /// Give up the current goal.
    Abandon {
        /// Why.
        reason: String,
    },
}

/// The tool's spec.
pub fn spec() -> ToolSpec {
    ToolSpec {
        name: NAME.to_owned(),
        description:
            "Plan and track your work as a tree of goals. Actions: add (under the current \
                      goal), under, after, focus, done (with a summary), abandon (with a reason). \
                      Returns the updated tree."
                .to_owned(),
        input_schema: serde_json::to_value(schemars::schema_for!(GoalAction))
            .expect("a derived schema serialises"),
        plugin: "builtin".to_owned(),
    }
}

/// Applies one call to `tree`. `Err` is a message for the model; the tree
/// is unchanged then.
pub fn apply(tree: &mut GoalTree, arguments: &str) -> Result<String, String> {
    let action: GoalAction = serde_json::from_str(arguments)
        .map_err(|e| format!("Error: invalid goal arguments: {e}"))?;
    let done = match action {
        GoalAction::Add { description } => tree.add(&description).map(|id| format!("added {id}")),
        GoalAction::Under { goal_id, description } => {
            tree.under(&goal_id, &description).map(|id| format!("added {id} under {goal_id}"))
        }
        GoalAction::After { goal_id, description } => {
            tree.after(&goal_id, &description).map(|id| format!("added {id} after {goal_id}"))
        }
        GoalAction::Focus { goal_id } => {
            tree.focus(&goal_id).map(|()| format!("focused {goal_id}"))
        }
        GoalAction::Done { summary } => {
            tree.done(&summary).map(|()| "completed the current goal".to_owned())
        }
        GoalAction::Abandon { reason } => {
            tree.abandon(&reason).map(|()| "abandoned the current goal".to_owned())
        }
    };
    match done {
        Ok(what) => Ok(format!("{what}\n{}", tree.render())),
        Err(e) => Err(format!("Error: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_change_the_tree_and_errors_leave_it_alone() {
        let mut tree = GoalTree::new();
        let out = apply(&mut tree, r#"{"action":"add","description":"ship it"}"#).unwrap();
        assert!(out.starts_with("added g1\n"), "{out}");
        apply(&mut tree, r#"{"action":"focus","goal_id":"g1"}"#).unwrap();
        apply(&mut tree, r#"{"action":"add","description":"write tests"}"#).unwrap();
        assert_eq!(tree.get("g2").unwrap().parent_id.as_deref(), Some("g1"));
        let before = tree.clone();
        let err = apply(&mut tree, r#"{"action":"focus","goal_id":"g9"}"#).unwrap_err();
        assert!(err.contains("g9"), "{err}");
        let err = apply(&mut tree, r#"{"action":"fly"}"#).unwrap_err();
        assert!(err.contains("invalid goal arguments"), "{err}");
        assert_eq!(tree, before);
        apply(&mut tree, r#"{"action":"done","summary":"shipped"}"#).unwrap();
        assert_eq!(tree.get("g1").unwrap().summary.as_deref(), Some("shipped"));
    }

    #[test]
    fn the_spec_schema_lists_every_action() {
        let schema = spec().input_schema.to_string();
        for action in ["add", "under", "after", "focus", "done", "abandon"] {
            assert!(schema.contains(&format!("\"{action}\"")), "{action} missing from {schema}");
        }
    }
}
