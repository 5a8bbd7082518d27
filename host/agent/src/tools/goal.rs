//! The built-in `goal` tool: the model plans and tracks its work as a goal
//! tree kept in the trace. It runs in the host, in call order, on the
//! run's own tree.

use crate::knowledge::Knowledge;
use crate::scope::Visible;
use crate::tools::{Dispatch, ToolContext, ToolResult, ToolSource};
use async_trait::async_trait;
use reson_sandbox::plugin::ToolSpec;
use reson_trace::{GoalError, GoalTree, Message, ToolCall};
use schemars::JsonSchema;
use serde::Deserialize;

/// The tool's name.
pub const NAME: &str = "goal";

/// What a `goal` call does.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
enum Action {
    /// Add a goal under the current goal (at the top level when none is current).
    Add,
    /// Add a goal as the last child of `goal_id`.
    Under,
    /// Add a goal right after `goal_id`, as its sibling.
    After,
    /// Make `goal_id` the current goal.
    Focus,
    /// Complete the current goal, with a `summary`.
    Done,
    /// Give up the current goal, with a `reason`.
    Abandon,
}

/// Arguments of `goal`: one action per call. A flat object, as every
/// provider API wants for tool parameters; which fields an action needs is
/// checked when it runs.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct GoalArgs {
    /// The action.
    action: Action,
    /// What the goal is (add, under, after).
    description: Option<String>,
    /// The goal acted on, such as `g1` (under, after, focus).
    goal_id: Option<String>,
    /// What was achieved (done).
    summary: Option<String>,
    /// Why it is given up (abandon).
    reason: Option<String>,
}

/// The tool's spec. Built once: every model request offers it, and
/// deriving its schema costs more than the rest of the request.
pub fn spec() -> ToolSpec {
    static SPEC: std::sync::OnceLock<ToolSpec> = std::sync::OnceLock::new();
    SPEC.get_or_init(build_spec).clone()
}

fn build_spec() -> ToolSpec {
    ToolSpec {
        name: NAME.to_owned(),
        description:
            "Plan and track your work as a tree of goals. Actions: add (under the current \
                      goal; needs description), under and after (need goal_id and description), \
                      focus (needs goal_id), done (needs summary), abandon (needs reason). Returns \
                      the updated tree."
                .to_owned(),
        input_schema: serde_json::to_value(schemars::schema_for!(GoalArgs))
            .expect("a derived schema serialises")
            .into(),
        plugin: "builtin".to_owned(),
    }
}

/// Applies one call to `tree`. `Err` is a message for the model; the tree
/// is unchanged then.
pub fn apply(tree: &mut GoalTree, arguments: &str) -> Result<String, String> {
    let args: GoalArgs = serde_json::from_str(arguments)
        .map_err(|e| format!("Error: invalid goal arguments: {e}"))?;
    let need = |field: &Option<String>, name: &str| {
        field.clone().ok_or_else(|| format!("Error: goal action {:?} needs `{name}`", args.action))
    };
    let done = match args.action {
        Action::Add => {
            tree.add(&need(&args.description, "description")?).map(|id| format!("added {id}"))
        }
        Action::Under => {
            let (goal_id, description) =
                (need(&args.goal_id, "goal_id")?, need(&args.description, "description")?);
            tree.under(&goal_id, &description).map(|id| format!("added {id} under {goal_id}"))
        }
        Action::After => {
            let (goal_id, description) =
                (need(&args.goal_id, "goal_id")?, need(&args.description, "description")?);
            tree.after(&goal_id, &description).map(|id| format!("added {id} after {goal_id}"))
        }
        Action::Focus => {
            let goal_id = need(&args.goal_id, "goal_id")?;
            tree.focus(&goal_id).map(|()| format!("focused {goal_id}"))
        }
        Action::Done => tree
            .done(&need(&args.summary, "summary")?)
            .map(|()| "completed the current goal".to_owned()),
        Action::Abandon => tree
            .abandon(&need(&args.reason, "reason")?)
            .map(|()| "abandoned the current goal".to_owned()),
    };
    match done {
        Ok(what) => Ok(format!("{what}\n{}", tree.render())),
        Err(e) => Err(format!("Error: {e}")),
    }
}

/// The `goal` tool as a source: it needs the run's goal tree in hand.
/// With knowledge, each goal it adds gets the best matching entries.
pub(crate) struct GoalTool {
    pub(crate) knowledge: Option<std::sync::Arc<Knowledge>>,
}

#[async_trait]
impl ToolSource for GoalTool {
    fn specs(&self) -> Vec<ToolSpec> {
        vec![spec()]
    }

    async fn call(&self, call: &ToolCall, context: &mut ToolContext<'_>) -> ToolResult {
        let Some(goals) = context.goals.as_deref_mut() else {
            return ToolResult::error(format!("Error: `{NAME}` works only inside a run"));
        };
        let before: Vec<String> = goals.goals().iter().map(|g| g.id.clone()).collect();
        let applied = match apply(goals, &call.arguments) {
            Ok(text) => text,
            Err(e) => return ToolResult::error(e),
        };
        let Some(knowledge) = &self.knowledge else {
            return ToolResult::text(applied);
        };
        let added: Vec<(String, String)> = goals
            .goals()
            .iter()
            .filter(|g| !before.contains(&g.id))
            .map(|g| (g.id.clone(), g.description.clone()))
            .collect();
        if added.is_empty() {
            return ToolResult::text(applied);
        }
        let visible = context.extensions.get::<Visible>().map(|v| (*v).clone()).unwrap_or_default();
        for (id, description) in added {
            let found = knowledge.for_goal(&visible, &description).await;
            if !found.is_empty() {
                // The goal was just added, so it is there.
                let _ = goals.attach_knowledge(&id, found);
            }
        }
        // The same first line, then the tree with the knowledge attached.
        let first = applied.lines().next().unwrap_or_default();
        ToolResult::text(format!("{first}\n{}", goals.render()))
    }

    fn dispatch(&self) -> Dispatch {
        Dispatch::InOrder
    }

    fn needs_run(&self) -> bool {
        true
    }
}

/// A new trace's tree: its task as the root goal, in focus.
pub fn initial(task: &str) -> Result<GoalTree, GoalError> {
    let mut tree = GoalTree::new();
    tree.ensure_root(if task.is_empty() { "the task" } else { task })?;
    Ok(tree)
}

/// The goal tree of the branch `path` (root first) of a trace whose task
/// is `task`: from the snapshots in its `goal` results, or, for results
/// stored without one, by applying their calls again (`apply` depends only
/// on the tree, so it gives the same tree; failed calls changed nothing).
pub fn branch_tree(path: &[Message], task: &str) -> Result<GoalTree, GoalError> {
    Ok(GoalTree::of_branch(path, initial(task)?, |tree, call, result| {
        if call.name == NAME && !result.text().starts_with("Error") {
            let _ = apply(tree, &call.arguments);
        }
    }))
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
        let err = apply(&mut tree, r#"{"action":"under","goal_id":"g1"}"#).unwrap_err();
        assert_eq!(err, "Error: goal action Under needs `description`");
        assert_eq!(tree, before);
        apply(&mut tree, r#"{"action":"done","summary":"shipped"}"#).unwrap();
        assert_eq!(tree.get("g1").unwrap().summary.as_deref(), Some("shipped"));
    }

    #[test]
    fn the_spec_schema_is_a_flat_object_listing_every_action() {
        let schema = spec().input_schema;
        assert_eq!(schema["type"], "object", "providers want an object at the root");
        let schema = schema.to_string();
        for action in ["add", "under", "after", "focus", "done", "abandon"] {
            assert!(schema.contains(&format!("\"{action}\"")), "{action} missing from {schema}");
        }
    }
}
