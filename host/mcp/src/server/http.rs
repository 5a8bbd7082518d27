//! Streamable HTTP at `/mcp`, on axum. Loopback by default; bound beyond
//! it, every request must carry the bearer token. Every request passes
//! [`reson_origin_guard`] first, as the MCP specification asks: a foreign
//! `Origin` gets 403, a `Host` that does not name the server 421.

use super::{McpServer, ServeError};
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use reson_origin_guard::{Guard, LocalAddr};
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
    /// Origins (`scheme://host[:port]`) of pages that may call the server
    /// from a browser besides its own; `*` for any, with a token only.
    pub allowed_origins: Vec<String>,
    /// Names (`name` or `name:port`) the server is reached by, besides the
    /// address a connection arrives on and `localhost` over loopback.
    pub allowed_hosts: Vec<String>,
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
        if !options.addr.ip().is_loopback() && options.token.is_none() {
            return Err(ServeError::NoToken(options.addr));
        }
        let guard =
            Guard::new(&options.allowed_hosts, &options.allowed_origins, options.token.is_some())?;
        let stop = CancellationToken::new();
        // The guard in front checks `Host` against the address each
        // connection arrived on, which rmcp's fixed list of loopback names
        // cannot: it would refuse the names the user allowed.
        let config = StreamableHttpServerConfig::default()
            .with_cancellation_token(stop.child_token())
            .with_sse_keep_alive(Some(std::time::Duration::from_secs(15)))
            .disable_allowed_hosts();
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
        let router = router.layer(axum::middleware::from_fn_with_state(
            Arc::new(guard),
            reson_origin_guard::enforce,
        ));
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
        axum::serve(self.listener, self.router.into_make_service_with_connect_info::<LocalAddr>())
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
