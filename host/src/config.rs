//! The user's `reson.toml`, composed from the sections each crate owns:
//! the sandbox's ([`PluginsConfig`]: plugins, grants, secrets), the trace
//! stores' ([`TraceConfig`]), the agent's ([`AgentConfig`]: permissions,
//! presets, budgets, sub-agents, skills, experiences, knowledge, compaction,
//! checkpoints, telemetry), MCP's
//! ([`McpConfig`]) and the server's ([`ServerSettings`]).
//!
//! The file is read once, whole, so an unknown key anywhere is refused
//! with its position; each crate then gets its own section, through
//! `AsRef`, and never sees the others.

pub use reson_agent::config::{
    AgentConfig, CheckpointsConfig, ExperiencesConfig, HumanConfig, KnowledgeConfig,
    LspServerConfig, PermissionsConfig, SkillsConfig, SubAgentsConfig, TelemetryConfig,
};
pub use reson_mcp::client::config::McpConfig;
pub use reson_sandbox::config::{
    Access, DirGrant, JailMode, Limits, PluginGrant, PluginsConfig, PluginsTable, SandboxConfig,
    SecretConfig, TrustedKey,
};
pub use reson_server::config::ServerSettings;
pub use reson_trace::config::{StoreConfig, StoreKind, TraceConfig};

use reson_agent::agent::compaction::CompactionConfig;
use reson_agent::policy::{Budget, Preset, RuleSet};
use reson_mcp::client::ServerConfig as McpServerConfig;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Why a configuration file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not valid TOML for this schema.
    #[error("invalid config {path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What is wrong, with the position.
        message: String,
    },
}

/// The parsed `reson.toml`, one section per owner. Relative paths in it
/// are relative to the file.
#[derive(Debug, Clone)]
pub struct Config {
    /// Plugins, the sandbox, grants and secrets.
    pub plugins: PluginsConfig,
    /// Where traces live.
    pub traces: TraceConfig,
    /// How runs go: permissions, presets, budgets, sub-agents, skills,
    /// experiences, compaction.
    pub agent: AgentConfig,
    /// MCP servers whose tools runs may call.
    pub mcp: McpConfig,
    /// `reson serve`: where it listens and what it accepts.
    pub server: ServerSettings,
}

/// The file as written: every key at its place, so that serde names an
/// unknown one with its line and column.
#[derive(Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct Document {
    plugins_dir: Option<PathBuf>,
    cache_dir: Option<PathBuf>,
    lock_file: Option<PathBuf>,
    traces_dir: Option<PathBuf>,
    #[serde(default)]
    store: StoreConfig,
    #[serde(default)]
    sandbox: SandboxConfig,
    #[serde(default)]
    plugins: PluginsTable,
    #[serde(default)]
    permissions: PermissionsConfig,
    #[serde(default)]
    presets: BTreeMap<String, Preset>,
    #[serde(default)]
    budget: Budget,
    #[serde(default)]
    sub_agents: SubAgentsConfig,
    #[serde(default)]
    human: HumanConfig,
    #[serde(default)]
    lsp: BTreeMap<String, LspServerConfig>,
    #[serde(default, skip_serializing)]
    secrets: BTreeMap<String, SecretConfig>,
    #[serde(default)]
    server: ServerSettings,
    #[serde(default)]
    skills: SkillsConfig,
    #[serde(default)]
    experiences: ExperiencesConfig,
    #[serde(default)]
    knowledge: KnowledgeConfig,
    #[serde(default)]
    compaction: CompactionConfig,
    #[serde(default)]
    checkpoints: CheckpointsConfig,
    #[serde(default)]
    telemetry: TelemetryConfig,
    #[serde(default)]
    mcp: BTreeMap<String, McpServerConfig>,
}

impl Config {
    /// Reads and parses `path`.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| ConfigError::Read { path: path.to_path_buf(), source })?;
        let mut config = Self::parse(&text)
            .map_err(|message| ConfigError::Parse { path: path.to_path_buf(), message })?;
        config.set_base_dir(
            path.parent().map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from(".")),
        );
        Ok(config)
    }

    /// Parses TOML text; relative paths resolve against the current
    /// directory. Each section is checked by its owner.
    pub fn parse(text: &str) -> Result<Self, String> {
        let document: Document = toml::from_str(text).map_err(|e| e.to_string())?;
        let mut config = Self::from(document);
        config.set_base_dir(PathBuf::from("."));
        config.plugins.validate()?;
        config.traces.validate()?;
        config.agent.validate()?;
        config.mcp.validate()?;
        Ok(config)
    }

    fn set_base_dir(&mut self, dir: PathBuf) {
        self.plugins.base_dir.clone_from(&dir);
        self.traces.base_dir.clone_from(&dir);
        self.agent.base_dir = dir;
        // Checkpoints of a workspace that holds the trace store would
        // record the trace writing itself.
        self.agent.checkpoints.skip = vec![self.traces.traces_dir()];
    }

    /// The rules in force under preset `name` (a user preset, else a
    /// built-in), with the preset itself.
    pub fn preset(&self, name: &str) -> Result<(Preset, RuleSet), String> {
        self.agent.preset(name)
    }

    /// Resolves a path from this file against the file's directory.
    pub fn resolve(&self, path: &Path) -> PathBuf {
        self.plugins.resolve(path)
    }

    /// The grant for `plugin`, or the empty grant.
    pub fn grant(&self, plugin: &str) -> PluginGrant {
        self.plugins.grant(plugin)
    }
}

impl Default for Config {
    /// The settings of an empty file, paths relative to the current
    /// directory.
    fn default() -> Self {
        let mut config = Self::parse("").expect("an empty file is a valid config");
        config.set_base_dir(PathBuf::new());
        config
    }
}

impl From<Document> for Config {
    fn from(d: Document) -> Self {
        let search_path = d.sandbox.search_path().ok();
        Self {
            plugins: PluginsConfig {
                plugins_dir: d.plugins_dir,
                cache_dir: d.cache_dir,
                lock_file: d.lock_file,
                sandbox: d.sandbox,
                plugins: d.plugins,
                secrets: d.secrets,
                base_dir: PathBuf::new(),
            },
            traces: TraceConfig {
                traces_dir: d.traces_dir,
                store: d.store,
                base_dir: PathBuf::new(),
            },
            agent: AgentConfig {
                permissions: d.permissions,
                presets: d.presets,
                budget: d.budget,
                sub_agents: d.sub_agents,
                human: d.human,
                lsp: d.lsp,
                skills: d.skills,
                experiences: d.experiences,
                knowledge: d.knowledge,
                compaction: d.compaction,
                checkpoints: d.checkpoints,
                telemetry: d.telemetry,
                base_dir: PathBuf::new(),
                search_path,
            },
            mcp: McpConfig { servers: d.mcp },
            server: d.server,
        }
    }
}

impl Serialize for Config {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let c = self.clone();
        Document {
            plugins_dir: c.plugins.plugins_dir,
            cache_dir: c.plugins.cache_dir,
            lock_file: c.plugins.lock_file,
            traces_dir: c.traces.traces_dir,
            store: c.traces.store,
            sandbox: c.plugins.sandbox,
            plugins: c.plugins.plugins,
            permissions: c.agent.permissions,
            presets: c.agent.presets,
            budget: c.agent.budget,
            sub_agents: c.agent.sub_agents,
            human: c.agent.human,
            lsp: c.agent.lsp,
            secrets: BTreeMap::new(),
            server: c.server,
            skills: c.agent.skills,
            experiences: c.agent.experiences,
            knowledge: c.agent.knowledge,
            compaction: c.agent.compaction,
            checkpoints: c.agent.checkpoints,
            telemetry: c.agent.telemetry,
            mcp: c.mcp.servers,
        }
        .serialize(serializer)
    }
}

impl From<Config> for PluginsConfig {
    fn from(config: Config) -> Self {
        config.plugins
    }
}

impl AsRef<PluginsConfig> for Config {
    fn as_ref(&self) -> &PluginsConfig {
        &self.plugins
    }
}

impl AsRef<TraceConfig> for Config {
    fn as_ref(&self) -> &TraceConfig {
        &self.traces
    }
}

impl AsRef<AgentConfig> for Config {
    fn as_ref(&self) -> &AgentConfig {
        &self.agent
    }
}

impl AsRef<McpConfig> for Config {
    fn as_ref(&self) -> &McpConfig {
        &self.mcp
    }
}

impl AsRef<ServerSettings> for Config {
    fn as_ref(&self) -> &ServerSettings {
        &self.server
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use reson_agent::policy::{DEFAULT_COMMAND_PATH, Decision};

    #[test]
    fn parses_a_full_config() {
        let config = Config::parse(
            r#"
            plugins_dir = "plugins"
            [sandbox]
            fuel = true
            [plugins.fs]
            dirs = [{ path = "ws", access = "read-write" }]
            limits = { timeout_ms = 500 }
            config = { greeting = "hi" }
            "#,
        )
        .unwrap();
        let fs = config.grant("fs");
        assert!(config.plugins.sandbox.fuel);
        assert_eq!(fs.dirs[0].access, Access::ReadWrite);
        assert_eq!(fs.limits.timeout_ms, Some(500));
        assert!(fs.enabled);
        let other = config.grant("other");
        assert!(other.enabled && other.dirs.is_empty() && other.http.is_empty());
    }

    #[test]
    fn rule_examples_are_checked_when_the_config_loads() {
        let ok = r#"
            [permissions]
            rules = [{ decision = "allow", tool = "shell", pattern = "git *", examples = ["git status"] }]
        "#;
        assert!(Config::parse(ok).is_ok());
        let bad = ok.replace("git status", "gti status");
        let err = Config::parse(&bad).unwrap_err();
        assert!(err.contains("[permissions]") && err.contains("gti status"), "{err}");
        let bad_preset = r#"
            [presets.review]
            rules = [{ decision = "deny", tool = "shell", pattern = "rm *", counter_examples = ["rm -rf /"] }]
        "#;
        let err = Config::parse(bad_preset).unwrap_err();
        assert!(err.contains("[presets.review]") && err.contains("rm -rf /"), "{err}");
    }

    #[test]
    fn secrets_are_values_or_bound_tables() {
        let config = Config::parse(
            r#"
            [secrets]
            PLAIN = "plain-value-1"
            [secrets.BOUND]
            urls = ["api.example.com", "https://other.example/v1"]
            "#,
        )
        .unwrap();
        assert_eq!(
            config.plugins.secrets["PLAIN"],
            SecretConfig { value: Some("plain-value-1".into()), urls: None }
        );
        assert_eq!(config.plugins.secrets["BOUND"].value, None);
        assert_eq!(config.plugins.secrets["BOUND"].urls.as_deref().map(<[String]>::len), Some(2));
        let err = Config::parse("[secrets.K]\nurls = [\"ex*ample.com\"]\n").unwrap_err();
        assert!(err.contains("[secrets.K]") && err.contains("ex*ample.com"), "{err}");
        assert!(Config::parse("[secrets.K]\nurl = [\"example.com\"]\n").is_err());
    }

    #[test]
    fn command_settings_parse_and_the_search_path_is_checked() {
        let config = Config::parse(
            r#"
            [sandbox]
            command_path = ["/usr/bin"]
            [permissions]
            exec_vectors = ["find"]
            [plugins.shell]
            process = ["git *"]
            env = ["RUST_LOG"]
            exec_vectors = ["git"]
            "#,
        )
        .unwrap();
        assert_eq!(config.plugins.sandbox.command_path, [PathBuf::from("/usr/bin")]);
        assert_eq!(config.agent.permissions.exec_vectors, ["find"]);
        let shell = config.grant("shell");
        assert_eq!((shell.env, shell.exec_vectors), (vec!["RUST_LOG".into()], vec!["git".into()]));
        assert_eq!(
            Config::default().plugins.sandbox.command_path,
            DEFAULT_COMMAND_PATH.iter().map(PathBuf::from).collect::<Vec<_>>()
        );
        let err = Config::parse("[sandbox]\ncommand_path = [\"bin\"]\n").unwrap_err();
        assert!(err.contains("[sandbox]") && err.contains("`bin` is not an absolute"), "{err}");
    }

    #[test]
    fn the_search_path_reaches_the_rules() {
        use serde_json::json;
        let rules = r#"
            [permissions]
            default = "allow"
            rules = [{ decision = "deny", tool = "shell", pattern = "rm *" }]
        "#;
        let (_, set) = Config::parse(rules).unwrap().preset("default").unwrap();
        let rm = json!({ "command": "/usr/bin/rm -f x" });
        assert_eq!(set.decide("shell", &rm).decision, Decision::Deny);
        // With a search path that does not give /usr/bin/rm, that path is
        // not the program `rm`.
        let elsewhere = format!("[sandbox]\ncommand_path = [\"/nonexistent\"]\n{rules}");
        let (_, set) = Config::parse(&elsewhere).unwrap().preset("default").unwrap();
        assert_ne!(set.decide("shell", &rm).decision, Decision::Deny);
    }

    #[test]
    fn the_server_table_has_safe_defaults() {
        let config = Config::parse("").unwrap();
        assert_eq!(config.server.addr.to_string(), "127.0.0.1:8000");
        assert_eq!(
            (config.server.max_body_bytes, config.server.max_ws_message_bytes),
            (1 << 20, 1 << 16)
        );
        assert!(config.server.token.is_none() && config.server.cors_origins.is_empty());
        assert!(config.server.allowed_hosts.is_empty());
        let config = Config::parse(
            "[server]\naddr = \"0.0.0.0:9000\"\ntoken = \"t0ken-abc\"\ncors_origins = [\"http://localhost:3000\"]\nallowed_hosts = [\"reson.lan\"]\napproval_timeout_ms = 500\n",
        )
        .unwrap();
        assert_eq!(config.server.allowed_hosts, ["reson.lan"]);
        assert_eq!(config.server.addr.port(), 9000);
        assert_eq!(config.server.token.as_deref(), Some("t0ken-abc"));
        assert_eq!(config.server.approval_timeout_ms, Some(500));
        let err = Config::parse("[server]\naddr = \"localhost\"\n").unwrap_err();
        assert!(err.contains("addr") || err.contains("socket"), "{err}");
        assert!(
            !toml::to_string(&config).unwrap().contains("t0ken-abc"),
            "the token is never written"
        );
    }

    #[test]
    fn learning_sections_have_defaults_and_parse() {
        let config = Config::default();
        assert_eq!(config.agent.skills.dirs, [PathBuf::from("skills")]);
        assert_eq!(config.agent.experiences.path, PathBuf::from(".reson/experiences.md"));
        assert_eq!(config.agent.compaction.threshold, 0.8);
        let config = Config::parse(
            "[skills]\ndirs = [\"a\"]\n[experiences]\ntop_k = 1\nutility_model = \"small\"\n\
             [compaction]\ncontext_window = 2000\nmodel = \"summarizer\"\n",
        )
        .unwrap();
        assert_eq!(config.agent.experiences.top_k, 1);
        assert_eq!(config.agent.compaction.context_window, Some(2000));
        assert!(Config::parse("[compaction]\nwindow = 1\n").is_err());
    }

    #[test]
    fn rejects_unknown_keys_with_position() {
        let err = Config::parse("[plugins.fs]\ndirz = []\n").unwrap_err();
        assert!(err.contains("dirz") && err.contains("line 2"), "{err}");
        // Every crate's section, and the file's top level, the same way.
        for (text, key) in [
            ("plugins_dir = \"p\"\ntraces_dri = \"t\"\n", "traces_dri"),
            ("[store]\nknd = \"file\"\n", "knd"),
            ("[permissions]\ndefualt = \"allow\"\n", "defualt"),
            ("[mcp.a]\ncomand = [\"x\"]\n", "comand"),
            ("[server]\nadr = \"127.0.0.1:1\"\n", "adr"),
        ] {
            let err = Config::parse(text).unwrap_err();
            assert!(err.contains(key) && err.contains("line 2"), "{text}: {err}");
        }
    }

    #[test]
    fn the_plugins_table_holds_the_signature_policy_beside_the_grants() {
        let key = "ed25519:xes4Ydwwk8UVmYdwCUCmyfKDqWwjf7XpIjxFduoc1z0=";
        let config = Config::parse(&format!(
            "[plugins]\nrequire_signature = true\n\
             trusted_keys = [\"{key}\", {{ name = \"bob\", key = \"keys/bob.pub\" }}]\n\
             [plugins.fs]\ntools = [\"read\"]\n"
        ))
        .unwrap();
        let table = &config.plugins.plugins;
        assert!(table.require_signature);
        assert_eq!(
            table.trusted_keys,
            [
                TrustedKey { name: None, key: key.into() },
                TrustedKey { name: Some("bob".into()), key: "keys/bob.pub".into() }
            ]
        );
        assert_eq!(table.keys().collect::<Vec<_>>(), ["fs"]);
        assert_eq!(config.grant("fs").tools, Some(vec!["read".into()]));
        let again = Config::parse(&toml::to_string(&config).unwrap()).unwrap();
        assert_eq!(again.plugins.plugins.trusted_keys, table.trusted_keys);
        assert!(again.plugins.plugins.require_signature);

        for (text, wanted) in [
            ("[plugins]\ntrusted_keys = [\"ed25519:AAAA\"]\n", "3 bytes, not 32"),
            // 32 bytes, but no curve point: no signature could verify.
            (
                "[plugins]\ntrusted_keys = [\"ed25519:AQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\"]\n",
                "not an Ed25519 public key",
            ),
            ("[plugins]\ntrusted_keys = [{ name = \"a\", kye = \"x\" }]\n", "kye"),
            ("[plugins]\nrequire_signature = \"yes\"\n", "line 2"),
            ("[plugins]\nrequire_signature = true\n", "trusted_keys is empty"),
            (
                "[plugins]\ntrusted_keys = [{ name = \"a\", key = \"x\" }, \
                 { name = \"a\", key = \"y\" }]\n",
                "the name `a` is used twice",
            ),
        ] {
            let err = Config::parse(text).unwrap_err();
            assert!(err.contains(wanted), "{text}: {err}");
        }
    }

    #[test]
    fn each_crate_gets_its_own_section() {
        let config = Config::parse(
            "plugins_dir = \"p\"\ntraces_dir = \"t\"\n[budget]\nmax_tokens = 5\n\
             [server]\nmax_body_bytes = 7\n[mcp.a]\nurl = \"http://127.0.0.1:1/mcp\"\n",
        )
        .unwrap();
        let plugins: &PluginsConfig = config.as_ref();
        let traces: &TraceConfig = config.as_ref();
        let agent: &AgentConfig = config.as_ref();
        let mcp: &McpConfig = config.as_ref();
        let server: &ServerSettings = config.as_ref();
        assert_eq!(plugins.plugins_dir.as_deref(), Some(Path::new("p")));
        assert_eq!(traces.traces_dir(), Path::new("./t"));
        assert_eq!(agent.budget.max_tokens, Some(5));
        assert!(mcp.servers.contains_key("a"));
        assert_eq!(server.max_body_bytes, 7);
        // The composed file serialises back to what it read.
        let again = Config::parse(&toml::to_string(&config).unwrap()).unwrap();
        assert_eq!(again.server.max_body_bytes, 7);
        assert_eq!(again.agent.budget, config.agent.budget);
    }
}
