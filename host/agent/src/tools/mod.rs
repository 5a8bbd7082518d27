//! One registry for every tool a model can call, whatever its source: the
//! host's built-ins (`goal`; `skill` with skills, `get_experience` with
//! experiences, `knowledge_save` and `knowledge_search` with knowledge;
//! `agent` and `evaluate` when the runner has sub-agents),
//! plugin tools served by the plugin runtime, and any other
//! [`ToolSource`] (the tools of MCP servers, `SERVER__tool`).

pub mod agent;
pub mod ask_human;
pub mod evaluate;
pub mod experience;
pub mod goal;
pub mod knowledge;
pub mod lsp;
mod plugin;
pub mod skill;
mod source;

pub use source::{Dispatch, Extensions, ToolContext, ToolSource};

use crate::experience::Experiences;
use crate::knowledge::Knowledge;
use crate::skills::Skills;
use reson_sandbox::plugin::{CallContext, Image, Limit, RESERVED_TOOL_NAMES, Runtime, ToolSpec};
use reson_trace::ToolCall;
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;

/// The spec of a built-in tool whose arguments are `T`.
pub(crate) fn builtin_spec<T: schemars::JsonSchema>(name: &str, description: &str) -> ToolSpec {
    ToolSpec {
        name: name.to_owned(),
        description: description.to_owned(),
        input_schema: serde_json::to_value(schemars::schema_for!(T))
            .expect("a derived schema serialises")
            .into(),
        plugin: "builtin".to_owned(),
    }
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
    /// The sandbox limit that stopped the call, if one did.
    pub limit: Option<Limit>,
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
            limit: None,
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
    allow: Option<Vec<String>>,
    skills: Option<Arc<Skills>>,
    experiences: Option<Arc<Experiences>>,
    knowledge: Option<Arc<Knowledge>>,
    /// Built-ins after `goal`, `skill`, `get_experience` and the knowledge
    /// tools.
    builtins: Vec<Arc<dyn ToolSource>>,
    /// The plugin runtime's tools, then the sources added after, in order.
    sources: Vec<Arc<dyn ToolSource>>,
}

impl ToolRegistry {
    /// The plugin tools of `runtime` plus the built-ins.
    pub fn new(runtime: Runtime) -> Self {
        Self::builtins_only().with_source(Arc::new(runtime))
    }

    /// The registry a run gets from `config`: the plugin tools of
    /// `runtime`, skills, and the experiences in `experiences` (the store
    /// [`Stores::open`](crate::store::Stores::open) gives). The tools of
    /// MCP servers are a source of their own, added by the caller.
    pub fn configured(
        runtime: &Runtime,
        config: &impl AsRef<crate::config::AgentConfig>,
        experiences: Arc<dyn crate::experience::ExperienceStore>,
    ) -> Result<Self, crate::skills::SkillError> {
        let agent = config.as_ref();
        let registry = Self::new(runtime.clone())
            .with_skills(Arc::new(Skills::from_config(config)?))
            .with_experiences(Arc::new(Experiences::configured(runtime, experiences, config)));
        let servers = lsp::LanguageServers::configured(
            runtime,
            &agent.lsp,
            &agent.base_dir,
            agent.search_path.as_ref(),
        );
        Ok(match servers {
            Some(servers) => registry.with_builtin(Arc::new(servers)),
            None => registry,
        })
    }

    /// Adds the tools of `source`, after every source already here. A name
    /// a built-in or an earlier source serves stays theirs (ASCII case
    /// ignored), and the built-ins' reserved names are never served.
    pub fn with_source(mut self, source: Arc<dyn ToolSource>) -> Self {
        self.sources.push(source);
        self
    }

    /// Adds a built-in source: it comes before the plugin tools and every
    /// other source, and may serve the reserved names.
    pub(crate) fn with_builtin(mut self, source: Arc<dyn ToolSource>) -> Self {
        self.builtins.push(source);
        self
    }

    /// Ticks when the tools on offer may have changed (a plugin reloaded,
    /// an MCP server's list changed).
    pub fn changes(&self) -> Vec<tokio::sync::watch::Receiver<u64>> {
        self.sources().iter().filter_map(|s| s.changes()).collect()
    }

    /// Only the built-ins.
    pub fn builtins_only() -> Self {
        Self::default()
    }

    /// Tells every source that a run of `trace_id` starts, offering `tools`.
    pub fn run_started(&self, trace_id: &str, tools: &[String]) {
        for source in self.sources() {
            source.run_started(trace_id, tools);
        }
    }

    /// Tells every source that a run of `trace_id` ended.
    pub async fn run_ended(&self, trace_id: &str) {
        for source in self.sources() {
            source.run_ended(trace_id).await;
        }
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

    /// Offers `knowledge`: the `knowledge_save` and `knowledge_search`
    /// tools, and new goals get the best matching entries.
    pub fn with_knowledge(mut self, knowledge: Arc<Knowledge>) -> Self {
        self.knowledge = Some(knowledge);
        self
    }

    /// Offers the knowledge in `store` as `[knowledge]` says (nothing when
    /// it is disabled).
    pub fn with_configured_knowledge(
        self,
        store: Arc<dyn crate::knowledge::KnowledgeStore>,
        config: &impl AsRef<crate::config::AgentConfig>,
    ) -> Self {
        let config = &config.as_ref().knowledge;
        if !config.enabled {
            return self;
        }
        self.with_knowledge(Arc::new(Knowledge { store, attach: config.attach }))
    }

    /// The knowledge on offer.
    pub fn knowledge(&self) -> Option<&Arc<Knowledge>> {
        self.knowledge.as_ref()
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
    fn offered(&self, name: &str) -> bool {
        self.allow.as_ref().is_none_or(|names| names.iter().any(|n| n == name))
    }

    /// Every source, first claim first.
    fn sources(&self) -> Vec<Arc<dyn ToolSource>> {
        let goal: Arc<dyn ToolSource> =
            Arc::new(goal::GoalTool { knowledge: self.knowledge.clone() });
        let skills = self.skills.clone().map(|s| s as Arc<dyn ToolSource>);
        let experiences = self.experiences.clone().map(|e| e as Arc<dyn ToolSource>);
        let knowledge = self.knowledge.clone().map(|k| k as Arc<dyn ToolSource>);
        std::iter::once(goal)
            .chain(skills)
            .chain(experiences)
            .chain(knowledge)
            .chain(self.builtins.iter().cloned())
            .chain(self.sources.iter().cloned())
            .collect()
    }

    /// Every source with the specs it serves: built-ins first, then the
    /// others in order, none taking a name served before it.
    fn served(&self) -> Vec<(Arc<dyn ToolSource>, Vec<ToolSpec>)> {
        let sources = self.sources();
        let builtins = sources.len() - self.sources.len();
        let mut taken = HashSet::new();
        sources
            .into_iter()
            .enumerate()
            .map(|(i, source)| {
                if i == builtins {
                    taken.extend(RESERVED_TOOL_NAMES.iter().map(|n| n.to_string()));
                }
                let (kept, _) = claim(source.specs(), &taken);
                taken.extend(kept.iter().map(|t| t.name.to_ascii_lowercase()));
                (source, kept)
            })
            .collect()
    }

    /// Specs of every tool on offer: `goal`, `skill` and `get_experience`
    /// first, then plugin tools and the other sources, then the sub-agent
    /// tools. Only the display order: the built-ins' claim on their names
    /// comes before everyone's.
    pub fn specs(&self) -> Vec<ToolSpec> {
        self.listing().into_iter().map(|(spec, _)| spec).collect()
    }

    /// Every tool on offer with its source, in the order of [`Self::specs`].
    fn listing(&self) -> Vec<(ToolSpec, Arc<dyn ToolSource>)> {
        let mut served = self.served();
        let first = served.len() - self.sources.len() - self.builtins.len();
        let late: Vec<_> = served.drain(first..first + self.builtins.len()).collect();
        served
            .into_iter()
            .chain(late)
            .flat_map(|(source, specs)| specs.into_iter().map(move |t| (t, source.clone())))
            .filter(|(t, _)| self.offered(&t.name))
            .collect()
    }

    /// The tools on offer now, listed once: every source's specs are built
    /// (plugin schemas cloned) per listing, so a run lists them once per
    /// message, not once per call.
    pub(crate) fn on_offer(&self) -> OnOffer {
        let listing = self.listing();
        let names = listing.iter().map(|(t, _)| t.name.clone()).collect();
        OnOffer { names, sources: listing.into_iter().map(|(t, s)| (t.name, s)).collect() }
    }

    /// Specs of the tools on offer that work outside a run (all but those
    /// that need a run's goal tree or start runs), as an MCP client gets.
    pub fn standalone_specs(&self) -> Vec<ToolSpec> {
        self.served()
            .into_iter()
            .filter(|(source, _)| !source.needs_run())
            .flat_map(|(_, specs)| specs)
            .filter(|t| self.offered(&t.name))
            .collect()
    }

    /// How calls of `name` are scheduled; `None` when it is not on offer.
    pub fn dispatch(&self, name: &str) -> Option<Dispatch> {
        self.on_offer().dispatch(name)
    }

    /// The result for a call of `name` that a crash or stop cut off, as
    /// its source has it; `None` for the usual one.
    pub(crate) async fn interrupted(
        &self,
        call: &ToolCall,
        trace: &mut reson_trace::Trace,
        store: &dyn reson_trace::TraceStore,
    ) -> Option<String> {
        let source =
            self.served().into_iter().find(|(_, specs)| specs.iter().any(|t| t.name == call.name));
        source?.0.interrupted(call, trace, store).await
    }

    /// Runs a tool outside a run, as an MCP client's call does. Every
    /// failure becomes a result the model can read and act on.
    pub async fn call(&self, call: &ToolCall, context: &CallContext) -> ToolResult {
        self.on_offer().call(call, &mut ToolContext::from(context)).await
    }
}

/// The tools on offer at one moment, by name, with the source of each.
pub(crate) struct OnOffer {
    /// In the order of [`ToolRegistry::specs`], for the unknown-tool text.
    names: Vec<String>,
    sources: HashMap<String, Arc<dyn ToolSource>>,
}

impl OnOffer {
    /// How calls of `name` are scheduled; `None` when it is not on offer.
    pub(crate) fn dispatch(&self, name: &str) -> Option<Dispatch> {
        self.sources.get(name).map(|s| s.dispatch())
    }

    /// The directories the calls `calls` can change, each once.
    pub(crate) fn writes<'a>(&self, calls: impl IntoIterator<Item = &'a ToolCall>) -> Vec<PathBuf> {
        let mut dirs: Vec<PathBuf> = Vec::new();
        for call in calls {
            let Some(source) = self.sources.get(&call.name) else { continue };
            for dir in source.writes(&call.name) {
                if !dirs.contains(&dir) {
                    dirs.push(dir);
                }
            }
        }
        dirs
    }

    /// Runs a tool with all a run gives it. Every failure becomes a result
    /// the model can read and act on; none ends the run.
    pub(crate) async fn call(&self, call: &ToolCall, context: &mut ToolContext<'_>) -> ToolResult {
        match self.sources.get(&call.name) {
            Some(source) => source.call(call, context).await,
            None => unknown_tool(&call.name, &self.names),
        }
    }
}

/// The result of a call of a tool not on offer.
pub(crate) fn unknown_tool(name: &str, offered: &[String]) -> ToolResult {
    ToolResult::error(format!(
        "Error: unknown tool `{name}`: no tool of that name was offered. Offered tools: {}.",
        offered.join(", ")
    ))
}

/// Splits `specs` into those whose names (ASCII case ignored) are not in
/// `taken` (lowercase), and the others.
fn claim(specs: Vec<ToolSpec>, taken: &HashSet<String>) -> (Vec<ToolSpec>, Vec<ToolSpec>) {
    specs.into_iter().partition(|t| !taken.contains(&t.name.to_ascii_lowercase()))
}

/// Splits the specs of a source that comes after the plugins into those it
/// may serve and those it may not: a reserved name, or one in `served`
/// (the names of the built-ins and plugin tools), ASCII case ignored.
pub fn unclaimed(specs: Vec<ToolSpec>, served: &[String]) -> (Vec<ToolSpec>, Vec<ToolSpec>) {
    let taken: HashSet<String> = served
        .iter()
        .map(|s| s.to_ascii_lowercase())
        .chain(RESERVED_TOOL_NAMES.iter().map(|s| s.to_string()))
        .collect();
    claim(specs, &taken)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_builtin_name_is_reserved_from_plugins() {
        for name in [
            goal::NAME,
            agent::NAME,
            evaluate::NAME,
            skill::NAME,
            experience::NAME,
            knowledge::SAVE,
            knowledge::SEARCH,
            ask_human::NAME,
            lsp::NAME,
        ] {
            assert!(reson_sandbox::plugin::RESERVED_TOOL_NAMES.contains(&name), "{name}");
        }
    }

    #[test]
    fn the_goal_tool_is_not_served_outside_a_run() {
        let registry = ToolRegistry::builtins_only();
        assert_eq!(registry.dispatch(goal::NAME), Some(Dispatch::InOrder));
        assert!(registry.standalone_specs().is_empty());
    }
}
