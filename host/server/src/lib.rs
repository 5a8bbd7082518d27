//! # reson-server
//!
//! The HTTP + WebSocket API of `reson serve`: runs start in the background
//! and are watched over a WebSocket; approvals are answered over HTTP; a
//! viewer page is served at `/`.
//!
//! ```no_run
//! use reson_sandbox::config::PluginsConfig;
//! use reson_sandbox::plugin::{Options, Runtime};
//! use reson_server::{Server, ServerConfig};
//! use reson_trace::{Durability, FileTraceStore};
//! use std::sync::Arc;
//!
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! // `reson::config::Config` reads every section of the file; with it,
//! // `ServerConfig::from_config(&config)` takes `[server]` and the rest.
//! let plugins: PluginsConfig = toml::from_str(&std::fs::read_to_string("reson.toml")?)?;
//! let server_config = ServerConfig::default();
//! let runtime = Runtime::open(Options::from_config(plugins)).await?;
//! let store = Arc::new(FileTraceStore::open(".reson/traces", Durability::Batched)?);
//! let server = Server::bind(runtime, store, server_config).await?;
//! println!("listening on http://{}", server.local_addr());
//! server.serve(async { tokio::signal::ctrl_c().await.unwrap_or_default() }).await?;
//! # Ok(())
//! # }
//! ```
//!
//! Every request passes [`reson_origin_guard`] first: pages of other
//! sites and DNS-rebound names are refused, and bodies must be JSON. Every
//! route under `/api` takes the bearer token when one is set; every
//! error is `{"error":{"code":"...","message":"..."}}`; every body and
//! frame the server sends passes through [`reson_text::redact`].
//!
//! Several servers may share one PostgreSQL database: give each the
//! database in [`ServerConfig::database`] (and the
//! [`PgTraceStore`](reson_trace::PgTraceStore) on it as its store). A run
//! is then owned by one host through a lease, stopped and watched from any
//! host, and continued by another when its host dies.
//!
//! It depends on `reson-agent` (runs), `reson-mcp` (the MCP tools runs
//! get), `reson-sandbox`, `reson-trace`, `reson-text` and
//! `reson-origin-guard`; nothing depends on it but the `reson` facade and
//! binary. It must never answer before the origin guard and the token have
//! passed, nor send a byte that has not passed the redaction point.

mod access;
mod attachments;
mod auth;
mod caller;
mod cluster;
pub mod config;
mod error;
mod events;
mod extract;
mod registry;
mod reloads;
mod response;
mod routes;
mod runs;
mod state;
pub mod users;
mod viewer;

#[cfg(test)]
#[path = "../../../tests/support/postgres.rs"]
mod test_cluster;

pub use caller::Caller;
pub use config::{RunDefaults, ServerConfig};
pub use error::ApiError;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::header;
use axum::middleware::{from_fn_with_state, map_response};
use axum::response::IntoResponse;
use axum::routing::get;
use registry::Runs;
use reson_agent::agent::{PendingApprovals, SubAgentSettings};
use reson_agent::tools::ToolRegistry;
use reson_origin_guard::LocalAddr;
use reson_sandbox::plugin::Runtime;
use reson_trace::TraceStore;
use state::AppState;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower_http::limit::RequestBodyLimitLayer;

/// How long the server waits at start for the configured MCP servers.
const MCP_START_WAIT: Duration = Duration::from_secs(20);

/// How long a shutdown waits for the stopped runs to end, then for the
/// watchers to close their sockets.
const SHUTDOWN_WAIT: Duration = Duration::from_secs(10);

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
        let experiences: Arc<dyn reson_agent::experience::ExperienceStore> = match &config.database
        {
            Some(db) => Arc::new(reson_agent::experience::PgExperienceStore::new(db.clone())),
            None => {
                Arc::new(reson_agent::experience::FileExperienceStore::from_config(&config.agent))
            }
        };
        let knowledge: Arc<dyn reson_agent::knowledge::KnowledgeStore> = match &config.database {
            Some(db) => Arc::new(reson_agent::knowledge::PgKnowledgeStore::new(db.clone())),
            None => {
                Arc::new(reson_agent::knowledge::FileKnowledgeStore::from_config(&config.agent))
            }
        };
        let tools = ToolRegistry::configured(&runtime, &config.agent, experiences)
            .map_err(|e| ApiError::Config(e.to_string()))?
            .with_configured_knowledge(knowledge.clone(), &config.agent);
        let tools = reson_mcp::client::with_configured(
            tools,
            &config.mcp,
            &runtime.options().config,
            MCP_START_WAIT,
        )
        .await;
        let sub_agents = SubAgentSettings::from_config(&config.agent).map_err(ApiError::Config)?;
        let telemetry = reson_agent::telemetry::Telemetry::from_config(&config.agent.telemetry)
            .map_err(|e| ApiError::Config(e.to_string()))?;
        let users = Arc::new(config.users()?);
        let channels = Arc::new(events::Channels::default());
        let watchers = TaskTracker::new();
        let cluster = config.database.clone().map(|db| cluster::Cluster::new(db, config.lease));
        let runs = Runs::with_cluster(cluster.clone());
        let state = AppState {
            runtime,
            tools,
            knowledge,
            sub_agents,
            telemetry,
            traces: access::Traces::new(Arc::new(events::NotifyingStore::new(
                store,
                channels.clone(),
                runs.clone(),
            ))),
            approvals: PendingApprovals::new(config.approval_timeout),
            questions: reson_agent::agent::human::PendingQuestions::new(
                config.agent.human.timeout(),
            ),
            runs,
            channels,
            closing: CancellationToken::new(),
            watchers: watchers.clone(),
            users,
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
        let app = app.layer(from_fn_with_state(guard, reson_origin_guard::enforce));
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
            tokio::spawn(cluster.clone().listen(Arc::new(state.clone()), state.closing.clone()));
        }
        tokio::spawn(reloads::announce(
            state.runtime.clone(),
            state.channels.clone(),
            state.closing.clone(),
        ));
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
        state.traces.unscoped().sync().await?;
        if let Err(e) = state.telemetry.shutdown(SHUTDOWN_WAIT).await {
            tracing::warn!("{e}");
        }
        Ok(())
    }
}
