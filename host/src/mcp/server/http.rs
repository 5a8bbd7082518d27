//! Streamable HTTP at `/mcp`, on axum. Loopback by default; bound beyond
//! it, every request must carry the bearer token.

use super::{McpServer, ServeError};
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use std::net::SocketAddr;
use std::sync::Arc;
use subtle::ConstantTimeEq as _;
use tokio_util::sync::CancellationToken;

/// The path the endpoint is served at.
pub const PATH: &str = "/mcp";

/// Where and how to serve.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// The address to bind.
    pub addr: SocketAddr,
    /// The bearer token every request must carry; required beyond loopback.
    pub token: Option<String>,
}

/// A bound server: its address, and a token that stops it.
pub struct Bound {
    /// The address it listens on (the real port when 0 was asked for).
    pub addr: SocketAddr,
    listener: tokio::net::TcpListener,
    router: axum::Router,
    stop: CancellationToken,
}

impl McpServer {
    /// Binds the HTTP endpoint; [`Bound::serve`] then serves it.
    pub async fn bind_http(&self, options: HttpOptions) -> Result<Bound, ServeError> {
        let loopback = options.addr.ip().is_loopback();
        if !loopback && options.token.is_none() {
            return Err(ServeError::NoToken(options.addr));
        }
        let stop = CancellationToken::new();
        let mut config = StreamableHttpServerConfig::default()
            .with_cancellation_token(stop.child_token())
            .with_sse_keep_alive(Some(std::time::Duration::from_secs(15)));
        if !loopback {
            // The token, not the Host header, decides who gets in: a
            // server bound beyond loopback is reached under names this
            // process cannot know.
            config = config.disable_allowed_hosts();
        }
        let server = self.clone();
        let service = StreamableHttpService::new(
            move || Ok(server.session()),
            Arc::new(LocalSessionManager::default()),
            config,
        );
        let mut router = axum::Router::new().nest_service(PATH, service);
        if let Some(token) = options.token {
            router = router.layer(axum::middleware::from_fn_with_state(Arc::new(token), bearer));
        }
        let listener = tokio::net::TcpListener::bind(options.addr).await?;
        let addr = listener.local_addr()?;
        Ok(Bound { addr, listener, router, stop })
    }
}

impl Bound {
    /// Serves until `shutdown` completes.
    pub async fn serve(
        self,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> Result<(), ServeError> {
        let stop = self.stop;
        axum::serve(self.listener, self.router)
            .with_graceful_shutdown(async move {
                shutdown.await;
                stop.cancel();
            })
            .await?;
        Ok(())
    }
}

/// Lets through requests that carry the token, compared in constant time.
async fn bearer(State(token): State<Arc<String>>, request: Request, next: Next) -> Response {
    let given = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    if bool::from(given.as_bytes().ct_eq(token.as_bytes())) {
        next.run(request).await
    } else {
        (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer")],
            "bearer token required\n",
        )
            .into_response()
    }
}
