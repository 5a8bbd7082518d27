//! `[mcp.NAME]` in `reson.toml`: one MCP server whose tools a run may call.

use reson_sandbox::config::DirGrant;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// What `reson.toml` says about MCP servers: the `[mcp.NAME]` tables.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default)]
pub struct McpConfig {
    /// The servers whose tools runs may call, by name.
    #[serde(rename = "mcp")]
    pub servers: BTreeMap<String, ServerConfig>,
}

impl McpConfig {
    /// Checks every server's table.
    pub fn validate(&self) -> Result<(), String> {
        self.servers.iter().try_for_each(|(name, server)| server.check(name))
    }
}

impl AsRef<McpConfig> for McpConfig {
    fn as_ref(&self) -> &McpConfig {
        self
    }
}

/// Default deadline of one call to an MCP server's tool.
pub const DEFAULT_TIMEOUT_MS: u64 = 30_000;
/// Default time a server has to start and list its tools.
pub const DEFAULT_START_TIMEOUT_MS: u64 = 30_000;
/// Default cap on the text one call may return.
pub const DEFAULT_OUTPUT_BYTES: u64 = 1 << 20;

/// One MCP server: a child process speaking stdio (`command`) or a
/// streamable HTTP endpoint (`url`), exactly one of them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    /// Program and arguments of a stdio server. The program is looked up
    /// on `[sandbox] command_path`, never on `PATH`.
    pub command: Option<Vec<String>>,
    /// The streamable HTTP endpoint; requests go to this URL only.
    pub url: Option<String>,
    /// Names of the environment variables the child gets from Reson's own
    /// environment; it gets no others.
    #[serde(default)]
    pub env: Vec<String>,
    /// Deadline of one call, in milliseconds.
    pub timeout_ms: Option<u64>,
    /// Time the server has to start and list its tools, in milliseconds.
    pub start_timeout_ms: Option<u64>,
    /// Cap on the bytes of text one call may return.
    pub output_bytes: Option<u64>,
    /// Set to false to keep the server stopped.
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Directories a stdio server may use, as a plugin's `dirs` (relative to
    /// the config). Naming any, or `network`, or `jail = true`, runs the
    /// server in the command jail ([`reson_sandbox::jail`]); otherwise it runs with
    /// the host's rights, and `reson mcp list` says so.
    #[serde(default)]
    pub dirs: Vec<DirGrant>,
    /// `host:port` pairs a jailed server may reach, through the jail's proxy.
    #[serde(default)]
    pub network: Vec<String>,
    /// Jail the server even when it names no `dirs` or `network`.
    #[serde(default)]
    pub jail: bool,
    /// Processes and threads a jailed server may hold at once.
    pub max_processes: Option<u32>,
    /// Directories its tools change (relative to the config): a run
    /// checkpoints them around each call of its tools, so a rewind can
    /// restore them.
    #[serde(default)]
    pub writes: Vec<PathBuf>,
}

fn yes() -> bool {
    true
}

impl ServerConfig {
    /// Checks the entry named `name`; the message says what to fix.
    pub fn check(&self, name: &str) -> Result<(), String> {
        let valid_name = !name.is_empty()
            && name.len() <= 32
            && !name.contains("__")
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if !valid_name {
            return Err(format!(
                "[mcp.{name}]: a server name is 1-32 letters, digits, `-` or `_`, without `__` \
                 (its tools are named `NAME__tool`)"
            ));
        }
        match (&self.command, &self.url) {
            (Some(argv), None) if argv.first().is_some_and(|p| !p.is_empty()) => Ok(()),
            (Some(_), None) => Err(format!("[mcp.{name}]: `command` names no program")),
            (None, Some(url)) => match reqwest::Url::parse(url) {
                Ok(u) if matches!(u.scheme(), "http" | "https") => Ok(()),
                _ => Err(format!("[mcp.{name}]: `url` must be an http or https URL")),
            },
            _ => Err(format!("[mcp.{name}]: give exactly one of `command` and `url`")),
        }?;
        if let Some(bad) = self.env.iter().find(|v| v.is_empty() || v.contains('=')) {
            return Err(format!("[mcp.{name}]: `env` lists variable names; {bad:?} is not one"));
        }
        if self.jailed() && self.url.is_some() {
            return Err(format!(
                "[mcp.{name}]: `dirs`, `network` and `jail` confine a stdio server's process; an \
                 HTTP server has none here"
            ));
        }
        for rule in &self.network {
            reson_sandbox::jail::NetworkRule::parse(rule)
                .map_err(|e| format!("[mcp.{name}]: network: {e}"))?;
        }
        Ok(())
    }

    /// Whether the server's process runs in the command jail.
    pub fn jailed(&self) -> bool {
        self.jail || !self.dirs.is_empty() || !self.network.is_empty()
    }

    /// The deadline of one call.
    pub fn timeout(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.timeout_ms.unwrap_or(DEFAULT_TIMEOUT_MS))
    }

    /// The time the server has to start and list its tools.
    pub fn start_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.start_timeout_ms.unwrap_or(DEFAULT_START_TIMEOUT_MS))
    }

    /// The output cap of one call.
    pub fn output_cap(&self) -> u64 {
        self.output_bytes.unwrap_or(DEFAULT_OUTPUT_BYTES)
    }
}
