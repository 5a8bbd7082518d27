//! The built-in `evaluate` tool: an evaluator sub-agent judges whether a
//! goal's result meets its requirement. This module is its contract with
//! the model: the arguments, the evaluator's mission and the verdict.

use crate::tools::agent::{ContextMessage, SubAgentStats};
use reson_sandbox::plugin::ToolSpec;
use reson_trace::Goal;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The tool's name.
pub const NAME: &str = "evaluate";

/// Arguments of `evaluate`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EvaluateArgs {
    /// The goal to judge, such as `g2`; the current goal when unset.
    #[serde(default)]
    pub target_goal_id: Option<String>,
    /// Context for the evaluator (the result to judge, criteria).
    #[serde(default)]
    pub messages: Vec<ContextMessage>,
    /// An evaluator's sub_trace_id: continue that evaluation.
    #[serde(default)]
    pub continue_from: Option<String>,
}

impl EvaluateArgs {
    /// Parses the model's arguments; the error is a message for the model.
    pub fn parse(arguments: &str) -> Result<Self, String> {
        serde_json::from_str(arguments)
            .map_err(|e| format!("Error: invalid evaluate arguments: {e}"))
    }
}

/// What the evaluator is asked.
pub fn mission(goal: &Goal) -> String {
    let outcome = match (&goal.summary, &goal.abandon_reason) {
        (Some(summary), _) => format!("Its result: {summary}"),
        (None, Some(reason)) => format!("It was abandoned: {reason}"),
        (None, None) => "It has no recorded result yet.".to_owned(),
    };
    format!(
        "Evaluate goal {}: \"{}\" (status: {}). {outcome}\nJudge whether the result meets the \
         requirement; check the work with your tools where you can. Answer with only a JSON \
         object: {{\"passed\": true|false, \"reasons\": [\"...\"], \"suggestions\": [\"...\"]}}.",
        goal.id, goal.description, goal.status
    )
}

/// The evaluator's judgement.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    /// Whether the result meets the requirement.
    pub passed: bool,
    /// Why.
    #[serde(default)]
    pub reasons: Vec<String>,
    /// What would make it pass, or better.
    #[serde(default)]
    pub suggestions: Vec<String>,
}

impl Verdict {
    /// Reads the evaluator's final answer: a JSON object (alone, or in a
    /// fenced block). Anything else is a failed verdict that says so: an
    /// evaluation that cannot be read must not pass.
    pub fn from_answer(answer: &str) -> Self {
        let start = answer.find('{');
        let end = answer.rfind('}');
        let parsed = match (start, end) {
            (Some(start), Some(end)) if start < end => {
                serde_json::from_str::<Verdict>(&answer[start..=end]).ok()
            }
            _ => None,
        };
        parsed.unwrap_or_else(|| Verdict {
            passed: false,
            reasons: vec![format!(
                "the evaluator's answer is not a verdict: {}",
                answer.chars().take(200).collect::<String>()
            )],
            suggestions: Vec::new(),
        })
    }
}

/// The result of an `evaluate` call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvaluateResult {
    /// The goal judged.
    pub target_goal_id: String,
    /// The evaluator's trace: give it as `continue_from` to continue.
    pub sub_trace_id: String,
    /// `completed`, `failed`, `stopped` or `interrupted`.
    pub status: String,
    /// The verdict; none when the evaluator did not finish.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub verdict: Option<Verdict>,
    /// Why the evaluator failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// What the evaluator spent.
    pub stats: SubAgentStats,
    /// How to resume it, when it did not complete.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resume: Option<String>,
}

/// The tool's spec, built once.
pub fn spec() -> ToolSpec {
    static SPEC: std::sync::OnceLock<ToolSpec> = std::sync::OnceLock::new();
    SPEC.get_or_init(|| ToolSpec {
        name: NAME.to_owned(),
        description: "Have an evaluator sub-agent judge whether a goal's result meets its \
                      requirement. `target_goal_id` (default: the current goal), optional \
                      `messages` (context) and `continue_from`. Returns passed, reasons, \
                      suggestions and the evaluator's sub_trace_id."
            .to_owned(),
        input_schema: serde_json::to_value(schemars::schema_for!(EvaluateArgs))
            .expect("a derived schema serialises")
            .into(),
        plugin: "builtin".to_owned(),
    })
    .clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_verdict_is_read_from_json_and_anything_else_fails() {
        let v = Verdict::from_answer(
            "Here:\n```json\n{\"passed\": true, \"reasons\": [\"tests pass\"]}\n```",
        );
        assert_eq!(
            v,
            Verdict { passed: true, reasons: vec!["tests pass".into()], suggestions: Vec::new() }
        );
        let v = Verdict::from_answer("looks fine to me");
        assert!(!v.passed);
        assert_eq!(v.reasons, ["the evaluator's answer is not a verdict: looks fine to me"]);
        assert!(!Verdict::from_answer(r#"{"passed": "yes"}"#).passed);
    }

    #[test]
    fn unknown_arguments_are_refused() {
        assert!(EvaluateArgs::parse(r#"{"target_goal_id": "g1"}"#).is_ok());
        let err = EvaluateArgs::parse(r#"{"goal": "g1"}"#).unwrap_err();
        assert!(err.contains("unknown field `goal`"), "{err}");
    }
}
