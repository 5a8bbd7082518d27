//! Plan parsers: turning a model's planning answer into a [`Plan`]. The
//! parsing itself runs in a plan-parser component.

use super::plan::{Plan, Step};
use crate::agent::AgentError;
use async_trait::async_trait;
use reson_sandbox::contract::bindings::plan_parser::exports::reson::plugin::plan_parser as wit;
use reson_sandbox::plugin::Runtime;

/// Something that parses plans.
#[async_trait]
pub trait PlanParser: Send + Sync {
    /// The parser's name (its plugin).
    fn name(&self) -> &str;
    /// How the model should write the plan, for the planning prompt.
    fn format_hint(&self) -> String;
    /// Parses the model's answer for `goal`.
    async fn parse(&self, raw: &str, goal: &str) -> Result<Plan, AgentError>;
}

/// A plan parser served by a plan-parser plugin.
#[derive(Clone)]
pub struct PluginPlanParser {
    runtime: Runtime,
    plugin: String,
}

impl PluginPlanParser {
    /// The plan parser plugin `plugin` of `runtime`.
    pub fn new(runtime: Runtime, plugin: impl Into<String>) -> Self {
        Self { runtime, plugin: plugin.into() }
    }
}

#[async_trait]
impl PlanParser for PluginPlanParser {
    fn name(&self) -> &str {
        &self.plugin
    }

    fn format_hint(&self) -> String {
        match self.plugin.as_str() {
            "json-plan" => {
                "Answer with a JSON object {\"steps\": [{\"description\": \"...\"}, ...]}; \
                            a step may have nested \"steps\"."
                    .into()
            }
            "markdown-plan" => "Answer with a numbered markdown list, one step per item; \
                                indent sub-steps under their step."
                .into(),
            _ => "Answer with the plan's steps in order.".into(),
        }
    }

    async fn parse(&self, raw: &str, goal: &str) -> Result<Plan, AgentError> {
        let parsed = self.runtime.parse_plan(&self.plugin, raw, goal).await?;
        let plan = parsed.map_err(|e| {
            let why = match e {
                wit::ParseError::NoPlan(m) | wit::ParseError::Syntax(m) => m,
                wit::ParseError::MissingField(field) => format!("missing field `{field}`"),
                wit::ParseError::Empty => "the plan has no steps".into(),
                wit::ParseError::StepWithoutDescription(i) => {
                    format!("step {i} has no description")
                }
            };
            AgentError::PlanParse(format!("{}: {why}", self.plugin))
        })?;
        let steps = plan
            .steps
            .into_iter()
            .enumerate()
            .map(|(i, s)| Step::new(i, s.description, s.parent.map(|p| p as usize)))
            .collect();
        Ok(Plan { goal: goal.to_owned(), steps })
    }
}
