//! The sections of `reson.toml` the agent reads: `[permissions]`,
//! `[presets.NAME]`, `[budget]`, `[sub_agents]`, `[skills]`,
//! `[experiences]`, `[knowledge]`, `[compaction]`, `[checkpoints]` and
//! `[telemetry]`.

use crate::policy::{Budget, Decision, Preset, Rule, RuleError, RuleSet, SearchPath};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// What `reson.toml` says about runs. Relative paths are relative to the
/// file.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct AgentConfig {
    /// Permission rules for tool calls, checked by the host.
    pub permissions: PermissionsConfig,
    /// User presets by name; they override built-ins of the same name.
    pub presets: BTreeMap<String, Preset>,
    /// What a run and all its sub-agents may spend together.
    pub budget: Budget,
    /// Limits on sub-agents (the `agent` and `evaluate` tools).
    pub sub_agents: SubAgentsConfig,
    /// Questions to people (the `ask_human` tool).
    pub human: HumanConfig,
    /// Language servers for `lsp_diagnostics`, by name (`[lsp.python]`).
    pub lsp: BTreeMap<String, LspServerConfig>,
    /// Where project skills live.
    pub skills: SkillsConfig,
    /// The experiences file and how runs use it.
    pub experiences: ExperiencesConfig,
    /// The knowledge index and how runs use it.
    pub knowledge: KnowledgeConfig,
    /// When and how a run's history is compacted.
    pub compaction: CompactionConfig,
    /// Workspace checkpoints around calls that can write.
    pub checkpoints: CheckpointsConfig,
    /// OpenTelemetry export of runs' spans and metrics.
    pub telemetry: TelemetryConfig,
    /// The directory relative paths resolve against.
    #[serde(skip)]
    pub base_dir: PathBuf,
    /// Where `shell` rules resolve program names: `[sandbox]
    /// command_path`, which the sandbox's section owns.
    #[serde(skip)]
    pub search_path: Option<SearchPath>,
}

impl AgentConfig {
    /// Checks what the types alone cannot. Permission rules are compiled
    /// and their examples checked here, so a rule that does not do what
    /// its examples say is a config error, not a surprise at run time.
    pub fn validate(&self) -> Result<(), String> {
        self.budget.validate().map_err(|e| format!("[budget]: {e}"))?;
        self.sub_agents.validate().map_err(|e| format!("[sub_agents]: {e}"))?;
        self.telemetry.validate().map_err(|e| format!("[telemetry]: {e}"))?;
        let global = self.rule_set().map_err(|e| format!("[permissions]: {e}"))?;
        for (name, preset) in &self.presets {
            let preset = Preset { name: name.clone(), ..preset.clone() };
            preset.rule_set(&global).map_err(|e| format!("[presets.{name}]: {e}"))?;
        }
        Ok(())
    }

    /// The rules in force under preset `name` (a user preset, else a
    /// built-in), with the preset itself.
    pub fn preset(&self, name: &str) -> Result<(Preset, RuleSet), String> {
        let preset = Preset::resolve(name, &self.presets).map_err(|e| e.to_string())?;
        let global = self.rule_set().map_err(|e| e.to_string())?;
        let rules = preset.rule_set(&global).map_err(|e| e.to_string())?;
        Ok((preset, rules))
    }

    /// The global rules, matching `shell` commands with programs resolved
    /// on the search path.
    pub fn rule_set(&self) -> Result<RuleSet, RuleError> {
        let rules = self.permissions.rule_set()?;
        Ok(match &self.search_path {
            Some(path) => rules.with_search_path(path.clone()),
            None => rules,
        })
    }

    /// Resolves a path from the file against the file's directory.
    pub fn resolve(&self, path: &Path) -> PathBuf {
        if path.is_absolute() { path.to_path_buf() } else { self.base_dir.join(path) }
    }
}

impl AsRef<AgentConfig> for AgentConfig {
    fn as_ref(&self) -> &AgentConfig {
        self
    }
}

/// `[lsp.NAME]`: a language server `lsp_diagnostics` starts, in the
/// command jail, for files of its extensions.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct LspServerConfig {
    /// Program and arguments; a bare name is looked up on `[sandbox]
    /// command_path`, never on `PATH`.
    pub command: Vec<String>,
    /// The file extensions it serves, without the dot (`["py"]`).
    pub extensions: Vec<String>,
    /// The directories it reads, read-only (relative to the config): the
    /// first is the workspace it starts in, and the files the model names
    /// must be in one of them [default: the config's directory].
    #[serde(default)]
    pub dirs: Vec<PathBuf>,
    /// Names of environment variables it gets from Reson's; no others.
    #[serde(default)]
    pub env: Vec<String>,
    /// How long to wait for a file's diagnostics, in milliseconds
    /// [default: 20000].
    pub timeout_ms: Option<u64>,
}

/// `[human]`: questions the model puts to a person (`ask_human`).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct HumanConfig {
    /// How long a run waits for an answer; after it the run goes on and
    /// the question stays open, an answer given later continuing the
    /// trace [default: 600000, ten minutes].
    pub timeout_ms: u64,
}

impl Default for HumanConfig {
    fn default() -> Self {
        Self { timeout_ms: 600_000 }
    }
}

impl HumanConfig {
    /// The timeout as a duration.
    pub fn timeout(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.timeout_ms)
    }
}

/// `[sub_agents]`: how deep and how wide sub-agents may go, and what
/// each may spend at most.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct SubAgentsConfig {
    /// Deepest nesting: a root agent is at depth 0, and an agent at this
    /// depth may not start sub-agents.
    pub max_depth: u32,
    /// Most sub-agents one agent runs at once.
    pub max_fan_out: usize,
    /// A cap on each sub-agent's budget, under what its parent has left.
    pub child_budget: Budget,
}

impl Default for SubAgentsConfig {
    fn default() -> Self {
        Self { max_depth: 3, max_fan_out: 8, child_budget: Budget::default() }
    }
}

impl SubAgentsConfig {
    fn validate(&self) -> Result<(), String> {
        if self.max_fan_out == 0 {
            return Err("max_fan_out must be at least 1".into());
        }
        self.child_budget.validate().map_err(|e| format!("child_budget: {e}"))
    }
}

/// `[skills]`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct SkillsConfig {
    /// Directories of project skills (`*.md`), relative to the config file.
    pub dirs: Vec<PathBuf>,
}

impl Default for SkillsConfig {
    fn default() -> Self {
        Self { dirs: vec![PathBuf::from("skills")] }
    }
}

/// `[experiences]`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ExperiencesConfig {
    /// The file, relative to the config file.
    pub path: PathBuf,
    /// Most experiences put into a new trace's first message (0: none).
    pub top_k: usize,
    /// Provider plugin of the tagging call; the run's when unset.
    pub utility_provider: Option<String>,
    /// Model of the tagging call; the run's when unset.
    pub utility_model: Option<String>,
}

impl Default for ExperiencesConfig {
    fn default() -> Self {
        Self {
            path: PathBuf::from(".reson/experiences.md"),
            top_k: 3,
            utility_provider: None,
            utility_model: None,
        }
    }
}

/// `[knowledge]`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct KnowledgeConfig {
    /// Offer the `knowledge_save` and `knowledge_search` tools and attach
    /// knowledge to new goals.
    pub enabled: bool,
    /// The index directory of the file store, relative to the config file
    /// (with `[store] kind = "postgres"` the database holds knowledge).
    pub path: PathBuf,
    /// Most entries attached to a new goal (0: none).
    pub attach: usize,
}

impl Default for KnowledgeConfig {
    fn default() -> Self {
        Self { enabled: true, path: PathBuf::from(".reson/knowledge"), attach: 3 }
    }
}

/// `[permissions]`: the host's rules for tool calls.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct PermissionsConfig {
    /// The decision when no rule matches.
    pub default: Decision,
    /// How long an approval put to the API (`reson serve`) or a library
    /// caller waits for an answer before denying.
    pub approval_timeout_ms: u64,
    /// How `reson run` and `reson task` answer an `ask` with no terminal
    /// to put it to: at once, `never` (deny, the default), `once` or `all`.
    pub unattended: Unattended,
    /// Rules; the last that matches a call decides it.
    pub rules: Vec<Rule>,
    /// Programs (`git`, `find`, `python`, `sh`, ...) whose exec vectors
    /// `shell` allow patterns may cover; they never do otherwise.
    pub exec_vectors: Vec<String>,
}

impl Default for PermissionsConfig {
    fn default() -> Self {
        Self {
            default: Decision::Ask,
            approval_timeout_ms: 60_000,
            unattended: Unattended::Never,
            rules: Vec::new(),
            exec_vectors: Vec::new(),
        }
    }
}

impl PermissionsConfig {
    /// The global rules, compiled.
    pub fn rule_set(&self) -> Result<RuleSet, RuleError> {
        Ok(RuleSet::compile(&self.rules)?
            .with_default(self.default)
            .with_exec_vectors(self.exec_vectors.clone()))
    }
}

/// How and when to compact; `[compaction]` in `reson.toml`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct CompactionConfig {
    /// Compact at all.
    pub enabled: bool,
    /// The model's context window in tokens; known models' own when unset
    /// (see [`context_window`](crate::agent::compaction::context_window)).
    pub context_window: Option<u64>,
    /// Compact when the request exceeds this share of the window.
    pub threshold: f64,
    /// The model of the level-2 summary call; the run's when unset.
    pub model: Option<String>,
}

impl Default for CompactionConfig {
    fn default() -> Self {
        Self { enabled: true, context_window: None, threshold: 0.8, model: None }
    }
}

/// `[checkpoints]`: what tool calls change in the directories they may
/// write is recorded with the trace, so a rewind can restore it.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct CheckpointsConfig {
    /// Take checkpoints at all.
    pub enabled: bool,
    /// Files larger than this are recorded by digest only (not restorable).
    pub max_file_bytes: u64,
    /// Directories never indexed: the trace store's, set by the host.
    #[serde(skip)]
    pub skip: Vec<PathBuf>,
}

impl Default for CheckpointsConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            max_file_bytes: reson_workspace::DEFAULT_MAX_FILE_BYTES,
            skip: Vec::new(),
        }
    }
}

impl CheckpointsConfig {
    /// The options of the checkpoints taken under it.
    pub fn options(&self) -> reson_workspace::Options {
        reson_workspace::Options { max_file_bytes: self.max_file_bytes, skip: self.skip.clone() }
    }
}

/// The `[telemetry]` section of `reson.toml`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct TelemetryConfig {
    /// The collector's OTLP/HTTP base URL (`http://localhost:4318`):
    /// spans go to `/v1/traces`, metrics to `/v1/metrics`. When unset,
    /// the standard `OTEL_EXPORTER_OTLP_ENDPOINT` (and the per-signal
    /// variables) are used; with neither, nothing is exported.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub otlp_endpoint: Option<String>,
    /// Put message contents on the spans (prompts, answers, tool arguments
    /// and results), redacted. Off by default: contents may be private.
    pub capture_content: bool,
}

impl TelemetryConfig {
    /// Checks the endpoint is an `http` or `https` URL.
    pub fn validate(&self) -> Result<(), String> {
        let Some(endpoint) = &self.otlp_endpoint else { return Ok(()) };
        let url = reqwest::Url::parse(endpoint)
            .map_err(|e| format!("otlp_endpoint {endpoint:?} is not a URL: {e}"))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(format!("otlp_endpoint {endpoint:?} must be an http or https URL"));
        }
        Ok(())
    }
}

/// How an `ask` is answered when no one is there to answer it (no
/// terminal: CI, a script): at once, by the user's choice, never by a
/// silent wait. `reson run --approve`, `[permissions] unattended`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Unattended {
    /// Deny the call (the default).
    #[default]
    Never,
    /// Allow the call, as "once" at a terminal would.
    Once,
    /// Allow the call and, for the rest of the run, every call the same
    /// rule asks about, as "always" at a terminal would.
    All,
}

impl std::fmt::Display for Unattended {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Never => "never",
            Self::Once => "once",
            Self::All => "all",
        })
    }
}

impl std::str::FromStr for Unattended {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "never" => Ok(Self::Never),
            "once" => Ok(Self::Once),
            "all" => Ok(Self::All),
            other => Err(format!("`{other}` is not one of never, once, all")),
        }
    }
}
