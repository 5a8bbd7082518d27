//! The user's `reson.toml`: where plugins live and what each one is granted.
//!
//! Nothing here can be widened by a plugin or a model: a plugin gets the
//! intersection of what its manifest requests and what this file grants.

use crate::policy::{
    CommandError, DEFAULT_COMMAND_PATH, Decision, Rule, RuleSet, SearchPath, UrlPattern,
};
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

/// The parsed `reson.toml`. Relative paths in it are relative to the file.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Directory holding `<name>.wasm` + `<name>.toml` pairs.
    pub plugins_dir: Option<PathBuf>,
    /// Directory for compiled code, keyed by digest and engine settings.
    pub cache_dir: Option<PathBuf>,
    /// The lock file pinning each plugin's digest and requests.
    pub lock_file: Option<PathBuf>,
    /// Where traces are stored when `[store] kind = "file"`.
    pub traces_dir: Option<PathBuf>,
    /// Which store keeps traces and experiences: files (the default) or
    /// PostgreSQL.
    #[serde(default)]
    pub store: StoreConfig,
    /// Engine-wide sandbox settings.
    #[serde(default)]
    pub sandbox: SandboxConfig,
    /// Grants per plugin name. A plugin not listed here is granted nothing
    /// beyond computing and logging.
    #[serde(default)]
    pub plugins: BTreeMap<String, PluginGrant>,
    /// Permission rules for tool calls, checked by the host.
    #[serde(default)]
    pub permissions: PermissionsConfig,
    /// User presets by name; they override built-ins of the same name.
    #[serde(default)]
    pub presets: BTreeMap<String, crate::policy::Preset>,
    /// What a run and all its sub-agents may spend together.
    #[serde(default)]
    pub budget: crate::policy::Budget,
    /// Limits on sub-agents (the `agent` and `evaluate` tools).
    #[serde(default)]
    pub sub_agents: SubAgentsConfig,
    /// Secrets by name, for plugins granted those names: a value
    /// (`NAME = "value"`) or a table (`[secrets.NAME] value = "..."`,
    /// `urls = [...]`) that binds the secret to the URLs it may be sent to.
    /// Environment variables of the same name take precedence over values.
    #[serde(default, skip_serializing)]
    pub secrets: BTreeMap<String, SecretConfig>,
    /// `reson serve`: where it listens and what it accepts.
    #[serde(default)]
    pub server: ServerSettings,
    /// Where project skills live.
    #[serde(default)]
    pub skills: SkillsConfig,
    /// The experiences file and how runs use it.
    #[serde(default)]
    pub experiences: ExperiencesConfig,
    /// When and how a run's history is compacted.
    #[serde(default)]
    pub compaction: crate::agent::compaction::CompactionConfig,
    /// MCP servers whose tools runs may call, by name (`[mcp.NAME]`).
    #[serde(default)]
    pub mcp: BTreeMap<String, crate::mcp::client::ServerConfig>,
    #[serde(skip)]
    base_dir: PathBuf,
}

impl Config {
    /// Reads and parses `path`.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| ConfigError::Read { path: path.to_path_buf(), source })?;
        let mut config = Self::parse(&text)
            .map_err(|message| ConfigError::Parse { path: path.to_path_buf(), message })?;
        config.base_dir =
            path.parent().map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from("."));
        Ok(config)
    }

    /// Parses TOML text; relative paths resolve against the current
    /// directory. Permission rules are compiled and their examples checked
    /// here, so a rule that does not do what its examples say is a config
    /// error, not a surprise at run time.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut config: Self = toml::from_str(text).map_err(|e| e.to_string())?;
        config.base_dir = PathBuf::from(".");
        for (name, secret) in &config.secrets {
            for pattern in secret.urls.iter().flatten() {
                UrlPattern::parse(pattern).map_err(|e| format!("[secrets.{name}]: {e}"))?;
            }
        }
        config.sandbox.search_path().map_err(|e| format!("[sandbox]: {e}"))?;
        config.budget.validate().map_err(|e| format!("[budget]: {e}"))?;
        config.sub_agents.validate().map_err(|e| format!("[sub_agents]: {e}"))?;
        config.store.validate().map_err(|e| format!("[store]: {e}"))?;
        for (name, server) in &config.mcp {
            server.check(name)?;
        }
        let global = config.rule_set().map_err(|e| format!("[permissions]: {e}"))?;
        for (name, preset) in &config.presets {
            let preset = crate::policy::Preset { name: name.clone(), ..preset.clone() };
            preset.rule_set(&global).map_err(|e| format!("[presets.{name}]: {e}"))?;
        }
        Ok(config)
    }

    /// The rules in force under preset `name` (a user preset, else a
    /// built-in), with the preset itself.
    pub fn preset(&self, name: &str) -> Result<(crate::policy::Preset, RuleSet), String> {
        let preset =
            crate::policy::Preset::resolve(name, &self.presets).map_err(|e| e.to_string())?;
        let global = self.rule_set().map_err(|e| e.to_string())?;
        let rules = preset.rule_set(&global).map_err(|e| e.to_string())?;
        Ok((preset, rules))
    }

    /// The global rules, matching `shell` commands with programs resolved
    /// on `[sandbox] command_path`.
    pub(crate) fn rule_set(&self) -> Result<RuleSet, crate::policy::RuleError> {
        let rules = self.permissions.rule_set()?;
        Ok(match self.sandbox.search_path() {
            Ok(path) => rules.with_search_path(path),
            Err(_) => rules,
        })
    }

    /// Resolves a path from this file against the file's directory.
    pub fn resolve(&self, path: &Path) -> PathBuf {
        if path.is_absolute() { path.to_path_buf() } else { self.base_dir.join(path) }
    }

    /// The grant for `plugin`, or the empty grant.
    pub fn grant(&self, plugin: &str) -> PluginGrant {
        self.plugins.get(plugin).cloned().unwrap_or_default()
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
    pub child_budget: crate::policy::Budget,
}

impl Default for SubAgentsConfig {
    fn default() -> Self {
        Self { max_depth: 3, max_fan_out: 8, child_budget: crate::policy::Budget::default() }
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

/// `[store]`: where traces and experiences live.
///
/// ```toml
/// [store]
/// kind = "postgres"
/// url = "postgres://reson@db.internal/reson"
/// password_env = "RESON_DB_PASSWORD"   # or password_secret = "db" ([secrets.db])
/// ```
#[derive(Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct StoreConfig {
    /// `file` (traces under `traces_dir`, experiences in
    /// `[experiences] path`) or `postgres`.
    pub kind: StoreKind,
    /// The database, for `postgres`. Keep the password out of it: URLs end
    /// up in shell histories and logs. Serialized without its password.
    #[serde(serialize_with = "serialize_redacted_url")]
    pub url: Option<String>,
    /// An environment variable holding the database password.
    pub password_env: Option<String>,
    /// A `[secrets]` entry holding the database password.
    pub password_secret: Option<String>,
    /// Most connections one host opens.
    pub max_connections: u32,
    /// How long a host's claim on a running trace lasts without a
    /// heartbeat: when the host dies, another may continue the trace after
    /// this long.
    pub lease_ms: u64,
}

/// Which store `[store]` names.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum StoreKind {
    /// Files on this machine: the embedded default.
    #[default]
    File,
    /// A PostgreSQL database several hosts may share.
    Postgres,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            kind: StoreKind::File,
            url: None,
            password_env: None,
            password_secret: None,
            max_connections: 16,
            lease_ms: 15_000,
        }
    }
}

impl std::fmt::Debug for StoreConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let url = self.url.as_ref().map(|u| crate::database::DatabaseOptions::new(u).display_url());
        f.debug_struct("StoreConfig")
            .field("kind", &self.kind)
            .field("url", &url)
            .field("password_env", &self.password_env)
            .field("password_secret", &self.password_secret)
            .field("max_connections", &self.max_connections)
            .field("lease_ms", &self.lease_ms)
            .finish()
    }
}

fn serialize_redacted_url<S: serde::Serializer>(
    url: &Option<String>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    url.as_ref()
        .map(|u| crate::database::DatabaseOptions::new(u).display_url())
        .serialize(serializer)
}

impl StoreConfig {
    fn validate(&self) -> Result<(), String> {
        match (self.kind, &self.url) {
            (StoreKind::Postgres, None) => {
                Err("kind = \"postgres\" needs url = \"postgres://...\"".into())
            }
            (StoreKind::Postgres, Some(url))
                if !url.starts_with("postgres://") && !url.starts_with("postgresql://") =>
            {
                Err("url must start with postgres:// or postgresql://".into())
            }
            _ if self.password_env.is_some() && self.password_secret.is_some() => {
                Err("give password_env or password_secret, not both".into())
            }
            _ if self.lease_ms < 1_000 => Err("lease_ms must be at least 1000".into()),
            _ => Ok(()),
        }
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

/// One entry of `[secrets]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(from = "SecretEntry")]
pub struct SecretConfig {
    /// The value, used when the environment has no variable of this name.
    pub value: Option<String>,
    /// URL patterns (`[scheme://]host[:port][/path-prefix]`) the secret may
    /// be sent to. Unbound (`None`), it may go only to URLs that the
    /// plugin's own `http` grant names by an exact host (not `*` or
    /// `*.domain`).
    pub urls: Option<Vec<String>>,
}

/// `NAME = "value"` or `[secrets.NAME]`.
#[derive(Deserialize)]
#[serde(untagged)]
enum SecretEntry {
    Value(String),
    Table(SecretTable),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SecretTable {
    value: Option<String>,
    urls: Option<Vec<String>>,
}

impl From<SecretEntry> for SecretConfig {
    fn from(entry: SecretEntry) -> Self {
        match entry {
            SecretEntry::Value(value) => Self { value: Some(value), urls: None },
            SecretEntry::Table(SecretTable { value, urls }) => Self { value, urls },
        }
    }
}

/// `[permissions]`: the host's rules for tool calls.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct PermissionsConfig {
    /// The decision when no rule matches.
    pub default: Decision,
    /// How long a headless approval waits for an answer before denying.
    pub approval_timeout_ms: u64,
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
            rules: Vec::new(),
            exec_vectors: Vec::new(),
        }
    }
}

impl PermissionsConfig {
    /// The global rules, compiled.
    pub fn rule_set(&self) -> Result<RuleSet, crate::policy::RuleError> {
        Ok(RuleSet::compile(&self.rules)?
            .with_default(self.default)
            .with_exec_vectors(self.exec_vectors.clone()))
    }
}

/// `[server]`: the HTTP API of `reson serve`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerSettings {
    /// Where to listen. Anything but a loopback address needs a token.
    pub addr: std::net::SocketAddr,
    /// The bearer token every `/api` request must carry; none by default.
    /// `RESON_SERVER_TOKEN` or `--token` set it too.
    #[serde(skip_serializing)]
    pub token: Option<String>,
    /// Origins of other pages allowed to call the API from a browser
    /// (`scheme://host[:port]`; CORS headers are sent to them). A request
    /// with any other `Origin` is refused with 403, WebSockets included.
    /// `"*"` lets in any page and needs a token. None by default: only
    /// the page the server serves may.
    pub cors_origins: Vec<String>,
    /// Names the server is reached by, besides the address a connection
    /// arrives on (and `localhost` over loopback): `name` (any port) or
    /// `name:port`. A request whose `Host` is anything else is refused
    /// with 421, so a DNS name rebound to this machine gets nothing. A
    /// server bound to `0.0.0.0` or `::` answers on each of the machine's
    /// addresses by number; the names it is reached by go here.
    pub allowed_hosts: Vec<String>,
    /// The largest request body.
    pub max_body_bytes: usize,
    /// The largest message a WebSocket client may send.
    pub max_ws_message_bytes: usize,
    /// How long an approval waits for an answer over HTTP before the call
    /// is denied [default: `[permissions] approval_timeout_ms`].
    pub approval_timeout_ms: Option<u64>,
}

impl Default for ServerSettings {
    fn default() -> Self {
        Self {
            addr: std::net::SocketAddr::from(([127, 0, 0, 1], 8000)),
            token: None,
            cors_origins: Vec::new(),
            allowed_hosts: Vec::new(),
            max_body_bytes: 1 << 20,
            max_ws_message_bytes: 64 << 10,
            approval_timeout_ms: None,
        }
    }
}

/// Engine-wide settings. Changing them changes the compiled-code cache key.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct SandboxConfig {
    /// Count fuel, so that plugins with a `fuel` limit can be held to it.
    /// Costs some speed for every plugin.
    pub fuel: bool,
    /// Most plugin instances alive at once (the pooling allocator's size).
    pub max_instances: u32,
    /// The largest memory any plugin may be granted, in MiB.
    pub max_memory_mb: u64,
    /// Default limits for plugins that set none.
    pub defaults: Limits,
    /// The fixed search path for the programs plugins run and for the
    /// program names in `shell` permission rules: absolute directories,
    /// searched in order. Never the host's or a guest's `PATH`.
    pub command_path: Vec<PathBuf>,
    /// Whether the commands plugins start run in the OS jail
    /// ([`crate::jail`]): `"on"` (the default) or `"off"`, which runs them
    /// with all of the host's rights and is warned about on every call.
    pub jail: JailMode,
    /// Where bubblewrap is, for the jail.
    pub bwrap: PathBuf,
}

/// `[sandbox] jail`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum JailMode {
    /// Every command runs jailed, or not at all.
    #[default]
    On,
    /// Commands run unjailed, with the host's rights.
    Off,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        Self {
            fuel: false,
            max_instances: 64,
            max_memory_mb: 1024,
            defaults: Limits::default(),
            command_path: DEFAULT_COMMAND_PATH.iter().map(PathBuf::from).collect(),
            jail: JailMode::On,
            bwrap: PathBuf::from(crate::jail::DEFAULT_BWRAP),
        }
    }
}

impl SandboxConfig {
    /// `command_path`, checked.
    pub fn search_path(&self) -> Result<SearchPath, CommandError> {
        SearchPath::new(&self.command_path)
    }
}

/// Access to a directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Access {
    /// No access.
    #[default]
    None,
    /// Read files and list directories.
    Read,
    /// Read, create, change and delete.
    ReadWrite,
}

/// A directory the user grants to a plugin.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct DirGrant {
    /// Host directory (relative to the config file).
    pub path: PathBuf,
    /// The most the plugin may do there.
    pub access: Access,
    /// Where the guest sees it; defaults to the absolute host path, so paths
    /// a model reads in one tool's output work in another's arguments.
    pub mount: Option<String>,
    /// What commands may do to `.git` and `.reson` in a writable directory:
    /// read-only unless this says `"read-write"` (`git commit` on purpose).
    #[serde(default = "read_only")]
    pub metadata: Access,
}

fn read_only() -> Access {
    Access::Read
}

/// Resource limits. `None` means "no opinion": the tighter of the
/// plugin's request and the user's grant wins, then the host default.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// Wall-clock deadline of one call, including time in host calls.
    pub timeout_ms: Option<u64>,
    /// Linear memory cap of one instance, in MiB.
    pub memory_mb: Option<u64>,
    /// Fuel per call (only when `sandbox.fuel` is on).
    pub fuel: Option<u64>,
    /// Cap on the bytes a call may return.
    pub output_bytes: Option<u64>,
    /// Processes and threads the commands of one call may hold at once.
    pub max_processes: Option<u32>,
}

/// What the user grants one plugin.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PluginGrant {
    /// Set to false to keep the plugin unloaded.
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Directories, preopened for WASI.
    #[serde(default)]
    pub dirs: Vec<DirGrant>,
    /// URL patterns: `host[:port][/path-prefix]`, `*.host` for subdomains.
    #[serde(default)]
    pub http: Vec<String>,
    /// Command-line globs such as `git *`, matched against the canonical
    /// command line (program resolved on `[sandbox] command_path`).
    #[serde(default)]
    pub process: Vec<String>,
    /// Environment variables the plugin may pass to commands, by exact
    /// name, beyond the safe built-ins (`LANG`, `LC_*`, `TZ`, `NO_COLOR`,
    /// `TERM`, `COLUMNS`).
    #[serde(default)]
    pub env: Vec<String>,
    /// Programs (`git`, `find`, `python`, `sh`, ...) whose exec vectors
    /// (`git -c`, `find -exec`, `python -c`, any use of `sh`) may run when
    /// a granted pattern matches.
    #[serde(default)]
    pub exec_vectors: Vec<String>,
    /// `host:port` pairs (`*.host:port` for subdomains) the plugin's
    /// commands may reach, through the jail's proxy; none by default.
    #[serde(default)]
    pub command_network: Vec<String>,
    /// Processes and threads one call's commands may hold at once; the
    /// same as `limits.max_processes` (the tighter of the two holds).
    pub max_processes: Option<u32>,
    /// Names of secrets the plugin may reference.
    #[serde(default)]
    pub secrets: Vec<String>,
    /// Only these tools of the plugin are offered; all when unset.
    pub tools: Option<Vec<String>>,
    /// Limits the user sets for this plugin.
    #[serde(default)]
    pub limits: Limits,
    /// Non-secret settings the plugin reads through `config`.
    #[serde(default)]
    pub config: BTreeMap<String, String>,
}

fn yes() -> bool {
    true
}

impl Default for PluginGrant {
    fn default() -> Self {
        Self {
            enabled: true,
            dirs: Vec::new(),
            http: Vec::new(),
            process: Vec::new(),
            env: Vec::new(),
            exec_vectors: Vec::new(),
            command_network: Vec::new(),
            max_processes: None,
            secrets: Vec::new(),
            tools: None,
            limits: Limits::default(),
            config: BTreeMap::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!(config.sandbox.fuel);
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
            config.secrets["PLAIN"],
            SecretConfig { value: Some("plain-value-1".into()), urls: None }
        );
        assert_eq!(config.secrets["BOUND"].value, None);
        assert_eq!(config.secrets["BOUND"].urls.as_deref().map(<[String]>::len), Some(2));
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
        assert_eq!(config.sandbox.command_path, [PathBuf::from("/usr/bin")]);
        assert_eq!(config.permissions.exec_vectors, ["find"]);
        let shell = config.grant("shell");
        assert_eq!((shell.env, shell.exec_vectors), (vec!["RUST_LOG".into()], vec!["git".into()]));
        assert_eq!(Config::default().sandbox.command_path, DEFAULT_COMMAND_PATH.map(PathBuf::from));
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
        assert_eq!(config.skills.dirs, [PathBuf::from("skills")]);
        assert_eq!(config.experiences.path, PathBuf::from(".reson/experiences.md"));
        assert_eq!(config.compaction.threshold, 0.8);
        let config = Config::parse(
            "[skills]\ndirs = [\"a\"]\n[experiences]\ntop_k = 1\nutility_model = \"small\"\n\
             [compaction]\ncontext_window = 2000\nmodel = \"summarizer\"\n",
        )
        .unwrap();
        assert_eq!(config.experiences.top_k, 1);
        assert_eq!(config.compaction.context_window, Some(2000));
        assert!(Config::parse("[compaction]\nwindow = 1\n").is_err());
    }

    #[test]
    fn rejects_unknown_keys_with_position() {
        let err = Config::parse("[plugins.fs]\ndirz = []\n").unwrap_err();
        assert!(err.contains("dirz"), "{err}");
    }
}
