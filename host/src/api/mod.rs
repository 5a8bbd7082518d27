//! The HTTP + WebSocket API of `reson serve`: runs start in the background
//! and are watched over a WebSocket; approvals are answered over HTTP; a
//! viewer page is served at `/`.
//!
//! ```no_run
//! use reson::api::{Server, ServerConfig};
//! use reson::config::Config;
//! use reson::plugin::{Options, Runtime};
//! use reson::trace::{Durability, FileTraceStore};
//! use std::sync::Arc;
//!
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! let config = Config::load("reson.toml".as_ref())?;
//! let server_config = ServerConfig::from_config(&config);
//! let runtime = Runtime::open(Options::from_config(config)).await?;
//! let store = Arc::new(FileTraceStore::open(".reson/traces", Durability::Batched)?);
//! let server = Server::bind(runtime, store, server_config).await?;
//! println!("listening on http://{}", server.local_addr());
//! server.serve(async { tokio::signal::ctrl_c().await.unwrap_or_default() }).await?;
//! # Ok(())
//! # }
//! ```
//!
//! Every request passes [`crate::origin_guard`] first: pages of other
//! sites and DNS-rebound names are refused, and bodies must be JSON. Every
//! route under `/api` takes the bearer token when one is set; every
//! error is `{"error":{"code":"...","message":"..."}}`; every body and
//! frame the server sends passes through [`crate::redact`].
//!
//! Several servers may share one PostgreSQL database: give each the
//! database in [`ServerConfig::database`] (and the
//! [`PgTraceStore`](crate::trace::PgTraceStore) on it as its store). A run
//! is then owned by one host through a lease, stopped and watched from any
//! host, and continued by another when its host dies.

mod auth;
mod cluster;
mod error;
mod events;
mod extract;
mod routes;
mod runs;
mod state;
mod viewer;

pub use error::ApiError;

use crate::agent::{PendingApprovals, SubAgentSettings};
use crate::config::Config;
use crate::database::Database;
use crate::origin_guard::{self, Guard, LocalAddr};
use crate::plugin::Runtime;
use crate::trace::TraceStore;
use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderValue, Method, header};
use axum::middleware::{from_fn_with_state, map_response};
use axum::response::IntoResponse;
use axum::routing::get;
use state::{AppState, Runs};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower_http::cors::{AllowOrigin, CorsLayer};
use tower_http::limit::RequestBodyLimitLayer;

/// How long the server waits at start for the configured MCP servers.
const MCP_START_WAIT: Duration = Duration::from_secs(20);

/// How long a shutdown waits for the stopped runs to end, then for the
/// watchers to close their sockets.
const SHUTDOWN_WAIT: Duration = Duration::from_secs(10);

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
    /// The bearer token of every `/api` request; required off loopback.
    pub token: Option<String>,
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
}

impl Default for ServerConfig {
    fn default() -> Self {
        let store = crate::config::StoreConfig::default();
        Self::from_settings(&crate::config::ServerSettings::default(), 60_000, store.lease_ms)
    }
}

impl ServerConfig {
    /// The `[server]` table of `config`, and `[store] lease_ms`. The
    /// database is for the caller to set, once opened.
    pub fn from_config(config: &Config) -> Self {
        Self::from_settings(
            &config.server,
            config.permissions.approval_timeout_ms,
            config.store.lease_ms,
        )
    }

    fn from_settings(
        server: &crate::config::ServerSettings,
        approval_timeout_ms: u64,
        lease_ms: u64,
    ) -> Self {
        Self {
            addr: server.addr,
            token: server.token.clone(),
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
        }
    }

    /// Refuses what would be unsafe: a token that is empty, a non-loopback
    /// address without a token, any origin without a token; and allowed
    /// hosts or origins that do not parse. [`Server::bind`] checks it too.
    pub fn validate(&self) -> Result<(), ApiError> {
        if self.token.as_deref().is_some_and(|t| t.trim().is_empty()) {
            return Err(ApiError::Config("the server token is empty".into()));
        }
        self.guard()?;
        if self.database.is_some() && self.lease < MIN_LEASE {
            return Err(ApiError::Config(format!(
                "[store] lease_ms is {} ms: a lease must last at least {} ms, three heartbeats",
                self.lease.as_millis(),
                MIN_LEASE.as_millis()
            )));
        }
        if !self.addr.ip().is_loopback() && self.token.is_none() {
            return Err(ApiError::Config(format!(
                "{} is not a loopback address: set a token (--token, RESON_SERVER_TOKEN or \
                 [server] token) so that only its holders can run agents here",
                self.addr
            )));
        }
        Ok(())
    }

    /// What every request is checked against before the routes see it.
    fn guard(&self) -> Result<Guard, ApiError> {
        Guard::new(&self.allowed_hosts, &self.cors_origins, self.token.is_some())
            .map_err(|e| ApiError::Config(format!("[server] {e}")))
    }

    /// The CORS layer, when origins are set.
    fn cors(&self) -> Result<Option<CorsLayer>, ApiError> {
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
                .allow_methods([Method::GET, Method::POST])
                .allow_headers([header::AUTHORIZATION, header::CONTENT_TYPE]),
        ))
    }
}

/// A bound server, not yet serving.
pub struct Server {
    listener: TcpListener,
    app: Router,
    state: AppState,
    watchers: TaskTracker,
    cluster: Option<Arc<cluster::Cluster>>,
}

impl Server {
    /// Binds `config.addr` and prepares the routes: runs on `runtime`'s
    /// plugins, traces in `store` (shared with other hosts when
    /// `config.database` is set).
    pub async fn bind(
        runtime: Runtime,
        store: Arc<dyn TraceStore>,
        config: ServerConfig,
    ) -> Result<Server, ApiError> {
        config.validate()?;
        let guard = Arc::new(config.guard()?);
        let cors = config.cors()?;
        let listener = TcpListener::bind(config.addr)
            .await
            .map_err(|source| ApiError::Bind { addr: config.addr, source })?;
        // The experiences live where the traces do, as `Stores::open` has it.
        let experiences: Arc<dyn crate::experience::ExperienceStore> = match &config.database {
            Some(db) => Arc::new(crate::experience::PgExperienceStore::new(db.clone())),
            None => Arc::new(crate::experience::FileExperienceStore::from_config(
                &runtime.options().config,
            )),
        };
        let tools = crate::mcp::client::configured_registry(&runtime, experiences, MCP_START_WAIT)
            .await
            .map_err(|e| ApiError::Config(e.to_string()))?;
        let sub_agents =
            SubAgentSettings::from_config(&runtime.options().config).map_err(ApiError::Config)?;
        let channels = Arc::new(events::Channels::default());
        let watchers = TaskTracker::new();
        let cluster = config.database.clone().map(|db| cluster::Cluster::new(db, config.lease));
        let runs = Runs::with_cluster(cluster.clone());
        let state = AppState {
            runtime,
            tools,
            sub_agents,
            store: Arc::new(events::NotifyingStore::new(store, channels.clone(), runs.clone())),
            approvals: PendingApprovals::new(config.approval_timeout),
            runs,
            channels,
            closing: CancellationToken::new(),
            watchers: watchers.clone(),
            config: Arc::new(config),
        };
        let (api, openapi) = routes::api(&state).split_for_parts();
        let document = openapi.to_json().map_err(|e| ApiError::Internal(e.to_string()))?;
        let document: Arc<str> = document.into();
        let openapi_route = Router::new()
            .route(
                "/api/openapi.json",
                get(move || async move {
                    ([(header::CONTENT_TYPE, "application/json")], document.to_string())
                }),
            )
            .route_layer(from_fn_with_state(state.clone(), auth::require_header));
        let limit = state.config.max_body_bytes;
        let mut app = Router::new()
            .merge(api)
            .merge(openapi_route)
            .merge(viewer::routes())
            .fallback(|| async { ApiError::NotFound("no such route".into()).into_response() })
            .layer(DefaultBodyLimit::disable())
            .layer(RequestBodyLimitLayer::new(limit))
            .layer(map_response(move |response| async move { error::json_errors(response, limit) }))
            .with_state(state.clone());
        if let Some(cors) = cors {
            app = app.layer(cors);
        }
        // Outermost: a refused request reaches no handler, upgrade or CORS
        // preflight.
        let app = app.layer(from_fn_with_state(guard, origin_guard::enforce));
        Ok(Server { listener, app, state, watchers, cluster })
    }

    /// The address it listens on (with the real port when bound to port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.listener.local_addr().expect("a bound listener has an address")
    }

    /// Serves until `shutdown` resolves, then stops running traces (they
    /// end `stopped`, and a later run continues them), waits for them, and
    /// closes the WebSockets.
    pub async fn serve(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ApiError> {
        let Server { listener, app, state, watchers, cluster } = self;
        if let Some(cluster) = &cluster {
            // Both end when the server closes, after its runs have ended.
            tokio::spawn(cluster.clone().heartbeat(state.closing.clone()));
            tokio::spawn(cluster.clone().listen(
                state.runs.clone(),
                state.channels.clone(),
                state.closing.clone(),
            ));
        }
        let closing = state.clone();
        let graceful = async move {
            shutdown.await;
            if !closing.runs.stop_all(SHUTDOWN_WAIT).await {
                tracing::warn!("some runs had not ended {SHUTDOWN_WAIT:?} after their stop");
            }
            closing.closing.cancel();
        };
        axum::serve(listener, app.into_make_service_with_connect_info::<LocalAddr>())
            .with_graceful_shutdown(graceful)
            .await
            .map_err(|e| ApiError::Internal(format!("serving: {e}")))?;
        // Upgraded sockets outlive their HTTP connections: wait for them.
        watchers.close();
        if tokio::time::timeout(SHUTDOWN_WAIT, watchers.wait()).await.is_err() {
            tracing::warn!(
                "some WebSocket clients had not closed {SHUTDOWN_WAIT:?} after shutdown"
            );
        }
        if let Some(cluster) = &cluster {
            cluster.released(SHUTDOWN_WAIT).await;
        }
        state.store.sync().await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[tokio::test]
    async fn a_shared_store_needs_a_lease_of_a_few_heartbeats() {
        let url = crate::database::test_cluster::cluster().fresh_database().await;
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
