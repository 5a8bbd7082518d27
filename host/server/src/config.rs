//! The section of `reson.toml` the server reads, `[server]`, and the
//! settings a server is bound with.

use crate::error::ApiError;
use crate::users::{UserSettings, Users};
use axum::http::{HeaderValue, Method, header};
use reson_agent::config::AgentConfig;
use reson_mcp::client::McpConfig;
use reson_origin_guard::Guard;
use reson_trace::config::TraceConfig;
use reson_trace::database::Database;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;
use tower_http::cors::{AllowOrigin, CorsLayer};

/// `[server]`: the HTTP API of `reson serve`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerSettings {
    /// Where to listen. Anything but a loopback address needs a token.
    pub addr: std::net::SocketAddr,
    /// A bearer token that lets its holder in as an admin without a user
    /// name; none by default. `RESON_SERVER_TOKEN` or `--token` set it too.
    #[serde(skip_serializing)]
    pub token: Option<String>,
    /// Users by name, each with the SHA-256 of their token and a role:
    /// `[server.users.alice] token_sha256 = "…", role = "user"`.
    pub users: BTreeMap<String, UserSettings>,
    /// A file of users' hashed tokens that `reson users add|revoke` edit;
    /// changes count from the next request, without a restart. Relative
    /// to the config file.
    pub token_file: Option<PathBuf>,
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
            users: BTreeMap::new(),
            token_file: None,
            cors_origins: Vec::new(),
            allowed_hosts: Vec::new(),
            max_body_bytes: 1 << 20,
            max_ws_message_bytes: 64 << 10,
            approval_timeout_ms: None,
        }
    }
}

/// The shortest lease: it is renewed every third of it.
const MIN_LEASE: Duration = Duration::from_millis(300);

/// What a run started over the API uses when the request does not say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunDefaults {
    /// Provider plugin.
    pub provider: String,
    /// Model name passed to the provider.
    pub model: String,
    /// Permission preset.
    pub preset: String,
    /// A new trace's system prompt.
    pub system_prompt: Option<String>,
    /// Most model calls in one run (a preset's own cap still holds).
    pub max_iterations: u32,
}

impl Default for RunDefaults {
    fn default() -> Self {
        Self {
            provider: "scripted".into(),
            model: String::new(),
            preset: "default".into(),
            system_prompt: None,
            max_iterations: 50,
        }
    }
}

/// How the server listens and what it accepts.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Where to listen; port 0 picks a free one.
    pub addr: SocketAddr,
    /// A bearer token that makes its holder an admin with no user name.
    /// This, `users` or `token_file` is required off loopback; with none
    /// of them every request is an admin's.
    pub token: Option<String>,
    /// Users by name, with their hashed tokens and roles.
    pub users: BTreeMap<String, UserSettings>,
    /// The token file (see [`crate::users`]), read again when it changes.
    pub token_file: Option<PathBuf>,
    /// Origins of other pages that may call the server from a browser
    /// (`*` for any, with a token only); CORS is off when empty. Any other
    /// `Origin` is refused.
    pub cors_origins: Vec<String>,
    /// Names (`name` or `name:port`) the server is reached by, besides the
    /// address a connection arrives on and `localhost` over loopback; any
    /// other `Host` is refused.
    pub allowed_hosts: Vec<String>,
    /// The largest request body.
    pub max_body_bytes: usize,
    /// The largest message a WebSocket client may send; a larger one
    /// closes the socket with 1009.
    pub max_ws_message_bytes: usize,
    /// How long an approval waits for its answer before the call is denied.
    pub approval_timeout: Duration,
    /// For requests that do not say.
    pub defaults: RunDefaults,
    /// The database shared with other hosts, when the store is PostgreSQL:
    /// runs take leases in it and hosts notify each other through it.
    /// `None`: this server is alone on its store.
    pub database: Option<Database>,
    /// How long a run's lease lasts without a heartbeat: when its host
    /// dies, another may continue the trace after this long.
    pub lease: Duration,
    /// How runs go: permission rules, presets, sub-agents, skills,
    /// experiences. [`ServerConfig::from_config`] takes them from the file;
    /// the default has no rules (an unmatched call asks) and the built-in
    /// presets only.
    pub agent: AgentConfig,
    /// The MCP servers whose tools runs may call; none by default.
    pub mcp: McpConfig,
    /// Where the PDFs sent with run requests are put, each for the moment
    /// the `pdf` plugin reads it; the plugin must be granted it (`reson
    /// serve` does both). `None`: PDF attachments are refused.
    pub uploads_dir: Option<std::path::PathBuf>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        let store = reson_trace::config::StoreConfig::default();
        Self::from_settings(&ServerSettings::default(), 60_000, store.lease_ms)
    }
}

impl ServerConfig {
    /// The `[server]` table of `config`, `[store] lease_ms`, and the
    /// sections of runs and MCP. The database is for the caller to set,
    /// once opened.
    pub fn from_config<C>(config: &C) -> Self
    where
        C: AsRef<ServerSettings> + AsRef<AgentConfig> + AsRef<TraceConfig> + AsRef<McpConfig>,
    {
        let (agent, traces): (&AgentConfig, &TraceConfig) = (config.as_ref(), config.as_ref());
        let server: &ServerSettings = config.as_ref();
        Self {
            token_file: server.token_file.as_deref().map(|path| agent.resolve(path)),
            agent: agent.clone(),
            mcp: AsRef::<McpConfig>::as_ref(config).clone(),
            ..Self::from_settings(
                config.as_ref(),
                agent.permissions.approval_timeout_ms,
                traces.store.lease_ms,
            )
        }
    }

    fn from_settings(server: &ServerSettings, approval_timeout_ms: u64, lease_ms: u64) -> Self {
        Self {
            addr: server.addr,
            token: server.token.clone(),
            users: server.users.clone(),
            token_file: server.token_file.clone(),
            cors_origins: server.cors_origins.clone(),
            allowed_hosts: server.allowed_hosts.clone(),
            max_body_bytes: server.max_body_bytes,
            max_ws_message_bytes: server.max_ws_message_bytes,
            approval_timeout: Duration::from_millis(
                server.approval_timeout_ms.unwrap_or(approval_timeout_ms),
            ),
            defaults: RunDefaults::default(),
            database: None,
            lease: Duration::from_millis(lease_ms),
            agent: AgentConfig::default(),
            mcp: McpConfig::default(),
            uploads_dir: None,
        }
    }

    /// Whether requests must carry a token: one is set, or users are.
    pub fn has_tokens(&self) -> bool {
        self.token.is_some() || !self.users.is_empty() || self.token_file.is_some()
    }

    /// Refuses what would be unsafe: a token that is empty, a non-loopback
    /// address without a token, any origin without a token; users whose
    /// entries are wrong (a hash that is not a SHA-256, a malformed token
    /// file); and allowed hosts or origins that do not parse.
    /// [`Server::bind`] checks it too.
    pub fn validate(&self) -> Result<(), ApiError> {
        if self.token.as_deref().is_some_and(|t| t.trim().is_empty()) {
            return Err(ApiError::Config("the server token is empty".into()));
        }
        self.users()?;
        self.guard()?;
        if self.database.is_some() && self.lease < MIN_LEASE {
            return Err(ApiError::Config(format!(
                "[store] lease_ms is {} ms: a lease must last at least {} ms, three heartbeats",
                self.lease.as_millis(),
                MIN_LEASE.as_millis()
            )));
        }
        if !self.addr.ip().is_loopback() && !self.has_tokens() {
            return Err(ApiError::Config(format!(
                "{} is not a loopback address: set a token (--token, RESON_SERVER_TOKEN, \
                 [server] token, [server.users] or [server] token_file) so that only its \
                 holders can run agents here",
                self.addr
            )));
        }
        Ok(())
    }

    /// What every request is checked against before the routes see it.
    pub(crate) fn guard(&self) -> Result<Guard, ApiError> {
        Guard::new(&self.allowed_hosts, &self.cors_origins, self.has_tokens())
            .map_err(|e| ApiError::Config(format!("[server] {e}")))
    }

    /// Who may call the API, from the token, the users and the token file.
    pub(crate) fn users(&self) -> Result<Users, ApiError> {
        Users::new(self.token.clone(), &self.users, self.token_file.as_deref())
            .map_err(|e| ApiError::Config(format!("[server] {e}")))
    }

    /// The CORS layer, when origins are set.
    pub(crate) fn cors(&self) -> Result<Option<CorsLayer>, ApiError> {
        if self.cors_origins.is_empty() {
            return Ok(None);
        }
        let origins = if self.cors_origins.iter().any(|o| o == "*") {
            AllowOrigin::any()
        } else {
            let parsed: Result<Vec<HeaderValue>, _> =
                self.cors_origins.iter().map(|o| HeaderValue::from_str(o)).collect();
            AllowOrigin::list(parsed.map_err(|e| ApiError::Config(format!("cors_origins: {e}")))?)
        };
        Ok(Some(
            CorsLayer::new()
                .allow_origin(origins)
                .allow_methods([Method::GET, Method::POST, Method::DELETE])
                .allow_headers([header::AUTHORIZATION, header::CONTENT_TYPE]),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sections of one file, as the binary composes them.
    struct Config {
        server: ServerSettings,
        agent: AgentConfig,
        traces: TraceConfig,
        mcp: McpConfig,
    }

    impl Config {
        fn parse(text: &str) -> Result<Self, toml::de::Error> {
            #[derive(serde::Deserialize)]
            struct Server {
                #[serde(default)]
                server: ServerSettings,
            }
            Ok(Self {
                server: toml::from_str::<Server>(text)?.server,
                agent: toml::from_str(text)?,
                traces: toml::from_str(text)?,
                mcp: toml::from_str(text)?,
            })
        }
    }

    impl AsRef<ServerSettings> for Config {
        fn as_ref(&self) -> &ServerSettings {
            &self.server
        }
    }

    impl AsRef<AgentConfig> for Config {
        fn as_ref(&self) -> &AgentConfig {
            &self.agent
        }
    }

    impl AsRef<TraceConfig> for Config {
        fn as_ref(&self) -> &TraceConfig {
            &self.traces
        }
    }

    impl AsRef<McpConfig> for Config {
        fn as_ref(&self) -> &McpConfig {
            &self.mcp
        }
    }

    #[test]
    fn defaults_are_loopback_with_the_documented_limits() {
        let config = ServerConfig::default();
        assert_eq!(config.addr.to_string(), "127.0.0.1:8000");
        assert_eq!((config.max_body_bytes, config.max_ws_message_bytes), (1 << 20, 64 << 10));
        assert_eq!(config.approval_timeout, Duration::from_secs(60));
        assert_eq!(config.defaults.provider, "scripted");
        assert!(config.validate().is_ok());
    }

    #[test]
    fn off_loopback_a_token_is_required() {
        let open =
            ServerConfig { addr: "0.0.0.0:8000".parse().unwrap(), ..ServerConfig::default() };
        let err = open.validate().unwrap_err();
        assert!(err.to_string().contains("not a loopback address"), "{err}");
        let guarded = ServerConfig { token: Some("tok-123".into()), ..open.clone() };
        assert!(guarded.validate().is_ok());
        let empty = ServerConfig { token: Some(" ".into()), ..open };
        assert!(empty.validate().unwrap_err().to_string().contains("empty"));
        let ipv6 = ServerConfig { addr: "[::1]:0".parse().unwrap(), ..ServerConfig::default() };
        assert!(ipv6.validate().is_ok());
    }

    #[test]
    fn users_or_a_token_file_guard_a_public_address_too() {
        let dir = tempfile::tempdir().unwrap();
        let open =
            ServerConfig { addr: "0.0.0.0:8000".parse().unwrap(), ..ServerConfig::default() };
        let hash = crate::users::hash_token("alice-token");
        let user = crate::users::UserSettings { token_sha256: hash, role: Default::default() };
        let users = BTreeMap::from([("alice".to_owned(), user)]);
        assert!(ServerConfig { users, ..open.clone() }.validate().is_ok());
        let file = dir.path().join("tokens.toml");
        let with_file = ServerConfig { token_file: Some(file.clone()), ..open.clone() };
        assert!(with_file.validate().is_ok(), "a token file not written yet lets no one in");
        std::fs::write(&file, "not toml [").unwrap();
        let err = with_file.validate().unwrap_err().to_string();
        assert!(err.starts_with("[server] malformed token file"), "{err}");
        let config = Config::parse(
            "[server]\ntoken_file = \"tokens.toml\"\n[server.users.bob]\ntoken_sha256 = \"abc\"\n",
        )
        .unwrap();
        let err = ServerConfig::from_config(&config).validate().unwrap_err().to_string();
        assert!(err.contains("user bob: the token hash must be 64 lowercase hex digits"), "{err}");
    }

    #[tokio::test]
    async fn a_shared_store_needs_a_lease_of_a_few_heartbeats() {
        let url = crate::test_cluster::cluster().fresh_database().await;
        let db = Database::connect(&url).await.unwrap();
        let short = ServerConfig { lease: Duration::from_millis(100), ..ServerConfig::default() };
        assert!(short.validate().is_ok(), "a server alone on its store takes no lease");
        let shared = ServerConfig { database: Some(db), ..short };
        let err = shared.validate().unwrap_err();
        assert!(err.to_string().contains("lease_ms is 100 ms"), "{err}");
        let longer = ServerConfig { lease: Duration::from_millis(1500), ..shared };
        assert!(longer.validate().is_ok());
        assert_eq!(ServerConfig::default().lease, Duration::from_secs(15));
        let config = Config::parse("[store]\nlease_ms = 2500\n").unwrap();
        assert_eq!(ServerConfig::from_config(&config).lease, Duration::from_millis(2500));
    }

    #[test]
    fn server_settings_come_from_the_config() {
        let config = Config::parse(
            "[permissions]\napproval_timeout_ms = 1500\n[server]\nmax_body_bytes = 10\n",
        )
        .unwrap();
        let server = ServerConfig::from_config(&config);
        assert_eq!(server.approval_timeout, Duration::from_millis(1500));
        assert_eq!(server.max_body_bytes, 10);
        assert!(
            ServerConfig { cors_origins: vec!["bad\norigin".into()], ..server.clone() }
                .cors()
                .is_err()
        );
    }

    #[test]
    fn allowed_hosts_and_origins_are_checked_before_binding() {
        let config = Config::parse(
            "[server]\nallowed_hosts = [\"reson.lan\"]\ncors_origins = [\"http://app.example:3000\"]\n",
        )
        .unwrap();
        let server = ServerConfig::from_config(&config);
        assert_eq!(server.allowed_hosts, ["reson.lan"]);
        assert!(server.validate().is_ok());
        let error = |config: ServerConfig| config.validate().unwrap_err().to_string();
        let bad_host = ServerConfig { allowed_hosts: vec!["a b".into()], ..server.clone() };
        assert!(error(bad_host).starts_with("[server] allowed host \"a b\""));
        let any = ServerConfig { cors_origins: vec!["*".into()], ..server.clone() };
        assert!(error(any.clone()).contains("needs a token"));
        assert!(ServerConfig { token: Some("tok-123".into()), ..any }.validate().is_ok());
        let null = ServerConfig { cors_origins: vec!["null".into()], ..server };
        assert!(error(null).contains("null"));
    }
}
