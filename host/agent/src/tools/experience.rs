//! The built-in `get_experience` tool: the model searches the lessons of
//! past runs by intent and state tags.

use crate::experience::{self, Experiences};
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
            .expect("a derived schema serialises"),
        plugin: "builtin".to_owned(),
    }
}

/// Runs one call. `Err` is a message for the model.
pub async fn call(experiences: &Experiences, arguments: &str) -> Result<String, String> {
    let args: GetArgs = serde_json::from_str(arguments)
        .map_err(|e| format!("Error: invalid get_experience arguments: {e}"))?;
    if args.intent.is_empty() && args.state.is_empty() {
        return Err("Error: give at least one intent or state tag".into());
    }
    let all = experiences.store.list().await.map_err(|e| format!("Error: {e}"))?;
    let found = experience::rank(&all, &args.intent, &args.state, experiences.top_k.max(5));
    if found.is_empty() {
        return Ok("No experience matches these tags.".into());
    }
    Ok(experience::render_list(&found))
}

#[async_trait]
impl ToolSource for Experiences {
    fn specs(&self) -> Vec<ToolSpec> {
        vec![spec()]
    }

    async fn call(&self, call: &ToolCall, _: &mut ToolContext<'_>) -> ToolResult {
        self::call(self, &call.arguments).await.map_or_else(ToolResult::error, ToolResult::text)
    }
}
