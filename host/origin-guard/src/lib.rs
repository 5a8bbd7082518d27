//! # reson-origin-guard
//!
//! The checks in front of Reson's HTTP servers (`reson serve` and
//! `reson mcp serve --http`) against the web pages a user's browser opens.
//!
//! Both servers listen on loopback without a token by default, so anything
//! that makes the user's browser send them a request could use them. A
//! browser lets any page send "simple" cross-site requests (a `text/plain`
//! POST needs no CORS preflight), open a WebSocket to any address, and,
//! once its DNS name rebinds to 127.0.0.1, talk to the server as its own
//! origin. CORS stops none of these, so every request passes three checks
//! before anything else sees it:
//!
//! 1. `Host` must name this server: the address the connection arrived on
//!    (or `localhost` when that is a loopback address), with its port, or
//!    a name in `allowed_hosts`. A rebound name is neither: 421.
//! 2. `Origin`, when there is one, must be the server's own (`http` or
//!    `https` on an authority that passes check 1) or an allowed origin:
//!    403 otherwise, `Origin: null` included. Clients that are not
//!    browsers send no `Origin` and pass.
//! 3. A request that changes state and carries a body must say it is
//!    `application/json` (parameters such as `charset` allowed): 415
//!    otherwise, so no form or `text/plain` post is ever read as JSON.
//!
//! Serve the router with
//! `into_make_service_with_connect_info::<LocalAddr>()` and add
//! [`enforce`] as its outermost layer.
//!
//! It depends on nothing of Reson's, so any of its HTTP servers can use
//! it. It must never let a request through on a guess: what it cannot
//! place (no `Host`, an origin that does not parse) is refused.

use axum::body::HttpBody as _;
use axum::extract::connect_info::Connected;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::uri::{Authority, Uri};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::serve::IncomingStream;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use tokio::net::TcpListener;

/// A setting the guard cannot use.
#[derive(Debug, thiserror::Error)]
pub enum GuardError {
    /// An allowed host that is not `name` or `name:port`.
    #[error("allowed host {0:?} is not a host name or host:port")]
    Host(String),
    /// An allowed origin that is not `scheme://host[:port]`.
    #[error("allowed origin {0:?} is not an origin (scheme://host or scheme://host:port)")]
    Origin(String),
    /// `null` is what sandboxed frames and local files send, from anywhere.
    #[error("allowed origin \"null\" would let in every sandboxed frame and local file")]
    NullOrigin,
    /// `*` without a token would hand the server to every web page.
    #[error(
        "allowed origin \"*\" lets every web page call this server: it needs a token, so that \
         only its holders can"
    )]
    AnyOriginWithoutToken,
}

/// Why a request was turned away.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    /// `Host` names something else: a DNS-rebound name, say.
    #[error(
        "Host {0:?} does not name this server: use the address it listens on, or add the name to \
         allowed_hosts"
    )]
    Host(String),
    /// A page of another origin sent the request.
    #[error("requests from pages at {0:?} are refused: that origin is not allowed")]
    Origin(String),
    /// A state-changing body that is not declared as JSON.
    #[error("the request body must be sent as application/json, not {0:?}")]
    ContentType(String),
}

impl Refusal {
    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::Host(_) => StatusCode::MISDIRECTED_REQUEST,
            Self::Origin(_) => StatusCode::FORBIDDEN,
            Self::ContentType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
        }
    }

    /// The `code` of the JSON body.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Host(_) => "misdirected_request",
            Self::Origin(_) => "forbidden",
            Self::ContentType(_) => "unsupported_media_type",
        }
    }
}

impl IntoResponse for Refusal {
    /// `{"error":{"code":"...","message":"..."}}`, the shape of every error
    /// of `reson serve`; MCP clients get the same.
    fn into_response(self) -> Response {
        let body = serde_json::json!({
            "error": { "code": self.code(), "message": self.to_string() }
        });
        (
            self.status(),
            [(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))],
            body.to_string(),
        )
            .into_response()
    }
}

/// The address a connection arrived on: what its `Host` must name. With a
/// server bound to `0.0.0.0` or `::`, this is the machine's own address
/// the client reached, so every address of the machine works without
/// listing it. `None` when the OS could not tell; only `allowed_hosts`
/// pass then.
#[derive(Debug, Clone, Copy)]
pub struct LocalAddr(pub Option<SocketAddr>);

impl Connected<IncomingStream<'_, TcpListener>> for LocalAddr {
    fn connect_info(stream: IncomingStream<'_, TcpListener>) -> Self {
        LocalAddr(stream.io().local_addr().ok())
    }
}

/// An origin as browsers send it, compared by (scheme, host, port).
#[derive(Debug, PartialEq, Eq)]
struct Origin {
    scheme: String,
    host: String,
    /// The scheme's default port when none is written; `None` for schemes
    /// without one.
    port: Option<u16>,
}

/// What [`enforce`] lets through, from the server's settings.
#[derive(Debug)]
pub struct Guard {
    /// `allowed_hosts`: a name, on any port unless one is given.
    hosts: Vec<(String, Option<u16>)>,
    origins: Vec<Origin>,
    /// `*` was allowed (with a token).
    any_origin: bool,
}

impl Guard {
    /// A guard that lets in `allowed_hosts` (`name` or `name:port`) besides
    /// the server's own addresses, and pages of `allowed_origins`
    /// (`scheme://host[:port]`, or `*` for any when `token` is set)
    /// besides its own.
    pub fn new(
        allowed_hosts: &[String],
        allowed_origins: &[String],
        token: bool,
    ) -> Result<Self, GuardError> {
        let hosts = allowed_hosts
            .iter()
            .map(|entry| authority(entry.trim()).ok_or_else(|| GuardError::Host(entry.clone())))
            .collect::<Result<_, _>>()?;
        let mut origins = Vec::new();
        let mut any_origin = false;
        for entry in allowed_origins {
            match entry.trim() {
                "*" if token => any_origin = true,
                "*" => return Err(GuardError::AnyOriginWithoutToken),
                text if text.eq_ignore_ascii_case("null") => return Err(GuardError::NullOrigin),
                text => {
                    origins.push(origin(text).ok_or_else(|| GuardError::Origin(entry.clone()))?)
                }
            }
        }
        Ok(Self { hosts, origins, any_origin })
    }

    /// Whether `request`, received on `local`, may go on.
    pub fn check(&self, request: &Request, local: Option<SocketAddr>) -> Result<(), Refusal> {
        self.check_host(request, local)?;
        self.check_origin(request.headers(), local)?;
        check_content_type(request)
    }

    fn check_host(&self, request: &Request, local: Option<SocketAddr>) -> Result<(), Refusal> {
        // HTTP/2 carries the authority in the URI rather than in `Host`.
        let given = match request.headers().get(header::HOST) {
            Some(value) => shown(value),
            None => request.uri().authority().map(|a| a.to_string()).unwrap_or_default(),
        };
        // Plain HTTP is all these servers speak: no port means 80.
        let ours = authority(&given)
            .is_some_and(|(host, port)| self.is_ours(&host, port.unwrap_or(80), local));
        if ours { Ok(()) } else { Err(Refusal::Host(given)) }
    }

    fn check_origin(&self, headers: &HeaderMap, local: Option<SocketAddr>) -> Result<(), Refusal> {
        let Some(value) = headers.get(header::ORIGIN) else { return Ok(()) };
        if self.any_origin {
            return Ok(());
        }
        let given = shown(value);
        let allowed = origin(&given).is_some_and(|o| {
            self.origins.contains(&o)
                || (matches!(o.scheme.as_str(), "http" | "https")
                    && o.port.is_some_and(|port| self.is_ours(&o.host, port, local)))
        });
        if allowed { Ok(()) } else { Err(Refusal::Origin(given)) }
    }

    /// Whether `host:port` names this server: the address the connection
    /// arrived on (or `localhost`, when that is loopback), or an allowed
    /// name. A name the DNS answers for cannot be trusted to be us: only
    /// the user can say it is.
    fn is_ours(&self, host: &str, port: u16, local: Option<SocketAddr>) -> bool {
        let arrived_on = local.is_some_and(|local| {
            let ip = local.ip().to_canonical();
            port == local.port()
                && match host.parse::<IpAddr>() {
                    Ok(given) => given.to_canonical() == ip,
                    Err(_) => host == "localhost" && ip.is_loopback(),
                }
        });
        arrived_on
            || self
                .hosts
                .iter()
                .any(|(name, allowed)| name == host && allowed.is_none_or(|p| p == port))
    }
}

/// A body with a method that changes state is read as JSON by the
/// handlers: it must say it is JSON, or a browser could send it from any
/// page as a form or `text/plain`, which needs no preflight.
fn check_content_type(request: &Request) -> Result<(), Refusal> {
    if request.method().is_safe() || request.body().size_hint().exact() == Some(0) {
        return Ok(());
    }
    let given = request.headers().get(header::CONTENT_TYPE).map(shown).unwrap_or_default();
    let essence = given.split(';').next().unwrap_or_default().trim();
    if essence.eq_ignore_ascii_case("application/json") {
        Ok(())
    } else {
        Err(Refusal::ContentType(given))
    }
}

/// A header's text for comparing and for messages. A value that is not
/// visible ASCII names nothing allowed, so its bytes need not be kept.
fn shown(value: &HeaderValue) -> String {
    value.to_str().unwrap_or("(not visible ASCII)").to_owned()
}

/// `host[:port]` as compared: lower case, without IPv6 brackets or the
/// trailing dot of a fully qualified name. `None` for anything else (a
/// user part, an empty host, a port that is not one).
fn authority(text: &str) -> Option<(String, Option<u16>)> {
    let parsed: Authority = text.parse().ok()?;
    // `http` takes a port that is not a number of 16 bits as no port.
    let port_written = parsed.as_str().len() > parsed.host().len();
    if parsed.as_str().contains('@') || (port_written && parsed.port_u16().is_none()) {
        return None;
    }
    let host = parsed.host().trim_start_matches('[').trim_end_matches(']');
    let host = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
    (!host.is_empty()).then_some((host, parsed.port_u16()))
}

/// An origin, `scheme://host[:port]` with nothing after it (but a `/`).
fn origin(text: &str) -> Option<Origin> {
    let uri: Uri = text.parse().ok()?;
    if uri.path_and_query().is_some_and(|p| !matches!(p.as_str(), "" | "/")) {
        return None;
    }
    let scheme = uri.scheme_str()?.to_ascii_lowercase();
    let (host, port) = authority(uri.authority()?.as_str())?;
    let default = match scheme.as_str() {
        "http" => Some(80),
        "https" => Some(443),
        _ => None,
    };
    Some(Origin { scheme, host, port: port.or(default) })
}

/// The middleware: runs [`Guard::check`] on every request and answers a
/// refusal itself, so that no handler, upgrade or CORS preflight sees it.
pub async fn enforce(
    State(guard): State<Arc<Guard>>,
    ConnectInfo(LocalAddr(local)): ConnectInfo<LocalAddr>,
    request: Request,
    next: Next,
) -> Response {
    match guard.check(&request, local) {
        Ok(()) => next.run(request).await,
        Err(refusal) => {
            tracing::warn!("refused {} {}: {refusal}", request.method(), request.uri().path());
            refusal.into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;

    const LOOPBACK: &str = "127.0.0.1:8000";

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| (*s).to_owned()).collect()
    }

    /// A guard allowing `reson.lan` on any port, `proxy.example` on 8443
    /// and pages of `http://app.example:3000`.
    fn guard() -> Guard {
        let hosts = strings(&["reson.lan", "Proxy.Example.:8443"]);
        Guard::new(&hosts, &strings(&["http://app.example:3000"]), false).unwrap()
    }

    fn request(method: &str, headers: &[(&str, &str)], body: &'static str) -> Request {
        let mut builder = Request::builder().method(method).uri("/api/traces");
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        builder.body(Body::from(body)).unwrap()
    }

    fn check(headers: &[(&str, &str)], local: &str) -> Result<(), Refusal> {
        guard().check(&request("GET", headers, ""), Some(local.parse().unwrap()))
    }

    #[test]
    fn settings_that_cannot_be_used_are_refused() {
        let new = |hosts: &[&str], origins: &[&str], token| {
            Guard::new(&strings(hosts), &strings(origins), token)
                .map(|_| ())
                .map_err(|e| e.to_string())
        };
        assert!(new(&["a b"], &[], false).unwrap_err().contains("\"a b\""));
        assert!(new(&["user@host"], &[], false).is_err());
        assert!(new(&["host:99999"], &[], false).is_err());
        assert!(new(&[], &["app.example"], false).unwrap_err().contains("not an origin"));
        assert!(new(&[], &["http://app.example/path"], false).is_err());
        assert!(new(&[], &["null"], true).unwrap_err().contains("sandboxed"));
        assert!(new(&[], &["*"], false).unwrap_err().contains("needs a token"));
        assert!(new(&[], &["*"], true).is_ok());
        assert!(new(&["[::1]:8000", "reson.lan"], &["https://app.example/"], false).is_ok());
    }

    #[test]
    fn the_host_must_name_the_address_the_connection_arrived_on() {
        for host in ["127.0.0.1:8000", "localhost:8000", "LocalHost.:8000"] {
            assert!(check(&[("host", host)], LOOPBACK).is_ok(), "{host}");
        }
        for host in [
            "evil.example:8000",
            "127.0.0.1:8001",
            "127.0.0.1",
            "localhost",
            "127.1:8000",
            "",
            "a@127.0.0.1:8000",
        ] {
            let refusal = check(&[("host", host)], LOOPBACK).unwrap_err();
            assert_eq!(refusal.status(), StatusCode::MISDIRECTED_REQUEST, "{host}");
        }
        assert!(check(&[], LOOPBACK).is_err(), "no Host at all");
        // Bound to `::`: the machine's address the client reached, by number.
        assert!(check(&[("host", "192.168.1.5:8000")], "192.168.1.5:8000").is_ok());
        assert!(check(&[("host", "192.168.1.5:8000")], "[::ffff:192.168.1.5]:8000").is_ok());
        assert!(check(&[("host", "[::1]:8000")], "[::1]:8000").is_ok());
        assert!(check(&[("host", "localhost:8000")], "[::ffff:127.0.0.1]:8000").is_ok());
        assert!(check(&[("host", "localhost:8000")], "192.168.1.5:8000").is_err(), "not loopback");
        assert!(check(&[("host", "10.0.0.1:8000")], "192.168.1.5:8000").is_err());
        // Names the config allows.
        for host in ["reson.lan:8000", "RESON.LAN:1234", "reson.lan", "proxy.example:8443"] {
            assert!(check(&[("host", host)], LOOPBACK).is_ok(), "{host}");
        }
        assert!(check(&[("host", "proxy.example:8000")], LOOPBACK).is_err(), "another port");
        let unknown = guard().check(&request("GET", &[("host", "reson.lan:8000")], ""), None);
        assert!(unknown.is_ok(), "allowed names need no local address");
        let unknown = guard().check(&request("GET", &[("host", LOOPBACK)], ""), None);
        assert!(unknown.is_err(), "an address that cannot be read is no one's");
    }

    #[test]
    fn an_origin_must_be_the_servers_own_or_allowed() {
        let with = |origin: &str| check(&[("host", LOOPBACK), ("origin", origin)], LOOPBACK);
        for own in [
            "http://127.0.0.1:8000",
            "http://localhost:8000",
            "https://localhost:8000",
            "http://reson.lan:8000",
            "http://app.example:3000",
            "HTTP://APP.EXAMPLE:3000",
            "https://proxy.example:8443",
        ] {
            assert!(with(own).is_ok(), "{own}");
        }
        for foreign in [
            "http://evil.example",
            "null",
            "http://127.0.0.1:8001",
            "http://127.0.0.1",
            "http://app.example",
            "https://app.example:3000",
            "ws://127.0.0.1:8000",
            "chrome-extension://abcdef",
            "http://127.0.0.1:8000/path",
            "",
        ] {
            let refusal = with(foreign).unwrap_err();
            assert_eq!(refusal.status(), StatusCode::FORBIDDEN, "{foreign}");
        }
        let any = Guard::new(&[], &strings(&["*"]), true).unwrap();
        let page = request("GET", &[("host", LOOPBACK), ("origin", "null")], "");
        assert!(any.check(&page, Some(LOOPBACK.parse().unwrap())).is_ok());
    }

    #[test]
    fn a_body_that_changes_state_must_be_json() {
        let guard = guard();
        let local = Some(LOOPBACK.parse().unwrap());
        let send = |method: &str, kind: Option<&str>, body: &'static str| {
            let mut headers = vec![("host", LOOPBACK)];
            headers.extend(kind.map(|k| ("content-type", k)));
            guard.check(&request(method, &headers, body), local)
        };
        for kind in [
            "application/json",
            "application/json; charset=utf-8",
            "Application/JSON;charset=UTF-8",
        ] {
            assert!(send("POST", Some(kind), "{}").is_ok(), "{kind}");
        }
        for kind in [
            Some("text/plain"),
            Some("application/x-www-form-urlencoded"),
            Some("application/jsonx"),
            None,
        ] {
            for method in ["POST", "PUT", "PATCH", "DELETE"] {
                let refusal = send(method, kind, "{}").unwrap_err();
                assert_eq!(
                    refusal.status(),
                    StatusCode::UNSUPPORTED_MEDIA_TYPE,
                    "{method} {kind:?}"
                );
            }
        }
        assert!(send("POST", Some("text/plain"), "").is_ok(), "no body, nothing to read");
        assert!(send("GET", Some("text/plain"), "{}").is_ok(), "a GET changes nothing");
    }

    #[tokio::test]
    async fn a_refusal_is_json_with_its_code() {
        let response = Refusal::Origin("http://evil.example".into()).into_response();
        assert_eq!(response.status(), StatusCode::FORBIDDEN);
        assert_eq!(response.headers()[header::CONTENT_TYPE], "application/json");
        let body = axum::body::to_bytes(response.into_body(), 1 << 16).await.unwrap();
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body["error"]["code"], "forbidden");
        assert!(body["error"]["message"].as_str().unwrap().contains("evil.example"), "{body}");
    }
}
