//! The built-in `skill` tool: loads a skill's instructions into the
//! conversation when the model decides it needs them.

use crate::skills::Skills;
use crate::tools::{ToolContext, ToolResult, ToolSource};
use async_trait::async_trait;
use reson_sandbox::plugin::{Schema, ToolSpec};
use reson_trace::ToolCall;
use schemars::JsonSchema;
use serde::Deserialize;

/// The tool's name.
pub const NAME: &str = "skill";

/// Arguments of `skill`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct SkillArgs {
    /// The skill's name.
    name: String,
}

/// The tool's spec, listing the skills it can load.
pub fn spec(skills: &Skills) -> ToolSpec {
    let names: Vec<&str> = skills.all().iter().map(|s| s.name.as_str()).collect();
    ToolSpec {
        name: NAME.to_owned(),
        description: format!(
            "Load a skill's instructions into the conversation. Skills: {}.",
            names.join(", ")
        ),
        input_schema: schema(),
        plugin: "builtin".to_owned(),
    }
}

/// The arguments' schema, derived once: the spec is built at every listing.
fn schema() -> Schema {
    static SCHEMA: std::sync::OnceLock<Schema> = std::sync::OnceLock::new();
    SCHEMA
        .get_or_init(|| {
            serde_json::to_value(schemars::schema_for!(SkillArgs))
                .expect("a derived schema serialises")
                .into()
        })
        .clone()
}

/// Runs one call. `Err` is a message for the model.
pub fn call(skills: &Skills, arguments: &str) -> Result<String, String> {
    let args: SkillArgs = serde_json::from_str(arguments)
        .map_err(|e| format!("Error: invalid skill arguments: {e}"))?;
    let skill = skills.get(args.name.trim()).map_err(|e| format!("Error: {e}"))?;
    Ok(format!("## Skill: {}\n{}\n\n{}", skill.name, skill.description, skill.body))
}

#[async_trait]
impl ToolSource for Skills {
    fn specs(&self) -> Vec<ToolSpec> {
        vec![spec(self)]
    }

    async fn call(&self, call: &ToolCall, _: &mut ToolContext<'_>) -> ToolResult {
        self::call(self, &call.arguments).map_or_else(ToolResult::error, ToolResult::text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loads_a_skill_and_names_the_others_when_unknown() {
        let skills = Skills::load(&[]).unwrap();
        let out = call(&skills, r#"{"name":"research"}"#).unwrap();
        assert!(out.starts_with("## Skill: research\n"), "{out}");
        let err = call(&skills, r#"{"name":"cooking"}"#).unwrap_err();
        assert_eq!(err, "Error: no skill `cooking` (skills: browser, planning, research)");
        assert!(call(&skills, "{}").unwrap_err().contains("invalid skill arguments"));
        assert!(spec(&skills).description.contains("browser, planning, research"));
    }
}
