//! The section of `reson.toml` the server reads: `[server]`.

use serde::{Deserialize, Serialize};

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
