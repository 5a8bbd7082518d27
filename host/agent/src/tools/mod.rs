//! One registry for every tool a model can call: plugin tools served by the
//! plugin runtime, the host's built-ins (`goal`; `agent` and `evaluate`
//! when the runner has sub-agents; `skill` with skills, `get_experience`
//! with experiences), and the tools of other sources ([`ToolSource`]: the
//! tools of MCP servers, `SERVER__tool`).

pub mod agent;
pub mod evaluate;
pub mod experience;
pub mod goal;
pub mod skill;

use crate::experience::Experiences;
use crate::skills::Skills;
use reson_sandbox::plugin::{CallContext, CallError, Image, Runtime, ToolSpec};
use reson_trace::ToolCall;
use std::sync::Arc;

/// Tools served from outside the sandbox and the built-ins, such as the
/// tools of MCP servers. They come after plugin tools: a name a built-in
/// or a plugin serves stays theirs.
#[async_trait::async_trait]
pub trait ToolSource: Send + Sync {
    /// The tools on offer now.
    fn specs(&self) -> Vec<ToolSpec>;
    /// Runs tool `name`; `None` when this source does not serve it.
    async fn call(&self, name: &str, arguments: &str, context: &CallContext) -> Option<ToolResult>;
    /// Ticks when the tools on offer may have changed.
    fn changes(&self) -> tokio::sync::watch::Receiver<u64>;
}

/// The result of one tool call, as it goes back to the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolResult {
    /// Text for the model (an error message when `ok` is false).
    pub text: String,
    /// Whether the tool succeeded.
    pub ok: bool,
    /// A summary that replaces `text` in later history.
    pub long_term_memory: Option<String>,
    /// Send `text` once, then only the summary.
    pub include_output_only_once: bool,
    /// Images that go to the model with the text.
    pub images: Vec<Image>,
}

impl ToolResult {
    /// A failed call's result: `text` tells the model what went wrong.
    pub fn error(text: String) -> Self {
        Self {
            text,
            ok: false,
            long_term_memory: None,
            include_output_only_once: false,
            images: Vec::new(),
        }
    }

    /// A successful call's plain text result.
    pub fn text(text: String) -> Self {
        Self { ok: true, ..Self::error(text) }
    }
}

/// The tools on offer to a run.
#[derive(Clone, Default)]
pub struct ToolRegistry {
    runtime: Option<Runtime>,
    allow: Option<Vec<String>>,
    skills: Option<Arc<Skills>>,
    experiences: Option<Arc<Experiences>>,
    sources: Vec<Arc<dyn ToolSource>>,
}

impl ToolRegistry {
    /// The plugin tools of `runtime` plus the built-ins.
    pub fn new(runtime: Runtime) -> Self {
        Self { runtime: Some(runtime), ..Self::default() }
    }

    /// The registry a run gets from `config`: the plugin tools of
    /// `runtime`, skills, and the experiences in `experiences` (the store
    /// [`Stores::open`](crate::store::Stores::open) gives).
    pub fn configured(
        runtime: &Runtime,
        config: &impl AsRef<crate::config::AgentConfig>,
        experiences: Arc<dyn crate::experience::ExperienceStore>,
    ) -> Result<Self, crate::skills::SkillError> {
        Ok(Self::new(runtime.clone())
            .with_skills(Arc::new(Skills::from_config(config)?))
            .with_experiences(Arc::new(Experiences::configured(runtime, experiences, config))))
    }

    /// Adds the tools of `source`. A name a built-in or a plugin serves
    /// stays theirs.
    pub fn with_source(mut self, source: Arc<dyn ToolSource>) -> Self {
        self.sources.push(source);
        self
    }

    /// Ticks when the tools on offer may have changed (a plugin reloaded,
    /// an MCP server's list changed).
    pub fn changes(&self) -> Vec<tokio::sync::watch::Receiver<u64>> {
        let runtime = self.runtime.as_ref().map(Runtime::changes);
        runtime.into_iter().chain(self.sources.iter().map(|s| s.changes())).collect()
    }

    /// The other sources' tools on offer: those no built-in, plugin tool
    /// or earlier source serves (names compared without case), each with
    /// its source.
    fn source_specs(&self, plugin_tools: &[ToolSpec]) -> Vec<(ToolSpec, &Arc<dyn ToolSource>)> {
        let mut taken: std::collections::HashSet<String> = plugin_tools
            .iter()
            .map(|t| t.name.to_ascii_lowercase())
            .chain(reson_sandbox::plugin::RESERVED_TOOL_NAMES.iter().map(|s| s.to_string()))
            .collect();
        let mut specs = Vec::new();
        for source in &self.sources {
            for spec in source.specs() {
                if taken.insert(spec.name.to_ascii_lowercase()) {
                    specs.push((spec, source));
                }
            }
        }
        specs
    }

    /// Only the built-ins.
    pub fn builtins_only() -> Self {
        Self::default()
    }

    /// Offers only the named tools (built-ins included by name).
    pub fn only(mut self, names: Vec<String>) -> Self {
        self.allow = Some(names);
        self
    }

    /// Offers `skills`: their prompt goes into new traces' system prompts
    /// and the `skill` tool loads them.
    pub fn with_skills(mut self, skills: Arc<Skills>) -> Self {
        self.skills = Some(skills);
        self
    }

    /// Offers `experiences`: new traces get the relevant ones and the
    /// `get_experience` tool searches them.
    pub fn with_experiences(mut self, experiences: Arc<Experiences>) -> Self {
        self.experiences = Some(experiences);
        self
    }

    /// The skills on offer.
    pub fn skills(&self) -> Option<&Arc<Skills>> {
        self.skills.as_ref()
    }

    /// The experiences on offer.
    pub fn experiences(&self) -> Option<&Arc<Experiences>> {
        self.experiences.as_ref()
    }

    /// Whether `name` passes this registry's `only` list.
    pub(crate) fn offered(&self, name: &str) -> bool {
        self.allow.as_ref().is_none_or(|names| names.iter().any(|n| n == name))
    }

    /// Specs of every tool on offer, built-ins first.
    pub fn specs(&self) -> Vec<ToolSpec> {
        let plugin_tools = self.runtime.as_ref().map(Runtime::tools).unwrap_or_default();
        let skill = self.skills.as_deref().map(skill::spec);
        let experience = self.experiences.as_ref().map(|_| experience::spec());
        let source_tools: Vec<ToolSpec> =
            self.source_specs(&plugin_tools).into_iter().map(|(spec, _)| spec).collect();
        std::iter::once(goal::spec())
            .chain(skill)
            .chain(experience)
            .chain(plugin_tools)
            .chain(source_tools)
            .filter(|t| self.offered(&t.name))
            .collect()
    }

    /// Whether `name` is a built-in the runner executes itself.
    pub fn is_builtin(name: &str) -> bool {
        [goal::NAME, agent::NAME, evaluate::NAME].contains(&name)
    }

    /// Runs a plugin tool, or the `skill` or `get_experience` built-in.
    /// Every failure becomes a result the model can read and act on; none
    /// ends the run.
    pub async fn call(&self, call: &ToolCall, context: &CallContext) -> ToolResult {
        let unknown = || {
            let names: Vec<String> = self.specs().into_iter().map(|t| t.name).collect();
            ToolResult::error(format!(
                "Error: unknown tool `{}`. Available tools: {}",
                call.name,
                names.join(", ")
            ))
        };
        if !self.offered(&call.name) {
            return unknown();
        }
        let builtin = match (call.name.as_str(), &self.skills, &self.experiences) {
            (skill::NAME, Some(skills), _) => Some(skill::call(skills, &call.arguments)),
            (experience::NAME, _, Some(found)) => {
                Some(experience::call(found, &call.arguments).await)
            }
            _ => None,
        };
        if let Some(result) = builtin {
            return result.map_or_else(ToolResult::error, ToolResult::text);
        }
        let plugin_tools = self.runtime.as_ref().map(Runtime::tools).unwrap_or_default();
        if let Some((_, source)) =
            self.source_specs(&plugin_tools).into_iter().find(|(spec, _)| spec.name == call.name)
        {
            return source.call(&call.name, &call.arguments, context).await.unwrap_or_else(unknown);
        }
        let Some(runtime) = &self.runtime else { return unknown() };
        match runtime.call_tool(&call.name, &call.arguments, context).await {
            Ok(out) => ToolResult {
                text: out.text,
                ok: true,
                long_term_memory: out.long_term_memory,
                include_output_only_once: out.include_output_only_once,
                images: out.images,
            },
            Err(CallError::UnknownTool { .. }) => unknown(),
            Err(e) => ToolResult::error(format!("Error: {e}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_builtin_name_is_reserved_from_plugins() {
        for name in [goal::NAME, agent::NAME, evaluate::NAME, skill::NAME, experience::NAME] {
            assert!(reson_sandbox::plugin::RESERVED_TOOL_NAMES.contains(&name), "{name}");
        }
        for name in [goal::NAME, agent::NAME, evaluate::NAME] {
            assert!(ToolRegistry::is_builtin(name));
        }
    }
}
