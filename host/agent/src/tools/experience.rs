//! The built-in `get_experience` tool: the model searches the lessons of
//! past runs by intent and state tags.

use crate::experience::{self, Experiences};
use crate::scope::Visible;
use crate::tools::{ToolContext, ToolResult, ToolSource};
use async_trait::async_trait;
use reson_sandbox::plugin::ToolSpec;
use reson_trace::ToolCall;
use schemars::JsonSchema;
use serde::Deserialize;

/// The tool's name.
pub const NAME: &str = "get_experience";

/// Arguments of `get_experience`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct GetArgs {
    /// What you are trying to do, as short words (build, debug, refactor, ...).
    #[serde(default)]
    intent: Vec<String>,
    /// The situation, as short words (rust, git, config, ...).
    #[serde(default)]
    state: Vec<String>,
}

/// The tool's spec.
pub fn spec() -> ToolSpec {
    ToolSpec {
        name: NAME.to_owned(),
        description: "Look up lessons from past runs by intent and state tags; the best \
                      matches come first, each with its id."
            .to_owned(),
        input_schema: serde_json::to_value(schemars::schema_for!(GetArgs))
            .expect("a derived schema serialises")
            .into(),
        plugin: "builtin".to_owned(),
    }
}

/// Runs one call, among the experiences `visible` sees; those found count
/// one more use. `Err` is a message for the model.
pub async fn call(
    experiences: &Experiences,
    visible: &Visible,
    arguments: &str,
) -> Result<String, String> {
    let args: GetArgs = serde_json::from_str(arguments)
        .map_err(|e| format!("Error: invalid get_experience arguments: {e}"))?;
    if args.intent.is_empty() && args.state.is_empty() {
        return Err("Error: give at least one intent or state tag".into());
    }
    let failed = |e: experience::ExperienceError| format!("Error: {e}");
    let k = experiences.top_k.max(5);
    let found = experiences
        .store
        .relevant_in(visible, &args.intent, &args.state, k)
        .await
        .map_err(failed)?;
    if found.is_empty() {
        return Ok("No experience matches these tags.".into());
    }
    let ids: Vec<String> = found.iter().map(|e| e.id.clone()).collect();
    experiences.store.record_use(&ids).await.map_err(failed)?;
    Ok(experience::render_list(&found.iter().collect::<Vec<_>>()))
}

#[async_trait]
impl ToolSource for Experiences {
    fn specs(&self) -> Vec<ToolSpec> {
        vec![spec()]
    }

    /// Outside a run (no scopes in the context) the global and agent
    /// experiences are seen ([`Visible::default`]).
    async fn call(&self, call: &ToolCall, context: &mut ToolContext<'_>) -> ToolResult {
        let visible = context.extensions.get::<Visible>().map(|v| (*v).clone()).unwrap_or_default();
        self::call(self, &visible, &call.arguments)
            .await
            .map_or_else(ToolResult::error, ToolResult::text)
    }
}
