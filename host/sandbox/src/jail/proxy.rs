//! The only way out of a jail's network namespace: an HTTP proxy the host
//! runs on a socket made inside the jail, which connects only to the
//! `host:port` pairs the grant names. It speaks `CONNECT` (HTTPS and any
//! TCP protocol) and plain HTTP requests in absolute form, which is what
//! `HTTP_PROXY`/`HTTPS_PROXY` make curl, git, cargo, pip and npm send.
//! The host's browser sends its requests through one too, with a
//! [`Reach`] of its own.

use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

/// The largest request head the proxy reads.
const MAX_HEAD_BYTES: usize = 16 << 10;
/// Connections one jail may hold open through the proxy at once.
const MAX_CONNECTIONS: usize = 64;
/// How long connecting to an allowed host may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// One `host:port` a jailed command may reach; the host may start with
/// `*.` for its subdomains.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetworkRule {
    host: String,
    port: u16,
}

/// A `command_network` entry that is not `host:port`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not `host:port` (a port is required; `*.host:port` for subdomains)")]
pub struct NetworkRuleError(String);

impl NetworkRule {
    /// Parses `host:port`, `[v6]:port` or `*.host:port`.
    pub fn parse(text: &str) -> Result<Self, NetworkRuleError> {
        let bad = || NetworkRuleError(text.to_owned());
        let (host, port) = split_host_port(text).ok_or_else(bad)?;
        let wildcard_ok = host.strip_prefix("*.").unwrap_or(&host);
        if wildcard_ok.is_empty() || wildcard_ok.contains(['*', '/', '@', ' ']) {
            return Err(bad());
        }
        Ok(Self { host, port })
    }

    fn matches(&self, host: &str, port: u16) -> bool {
        let host = host.to_ascii_lowercase();
        port == self.port
            && match self.host.strip_prefix("*.") {
                Some(domain) => host.strip_suffix(domain).is_some_and(|rest| rest.ends_with('.')),
                None => host == self.host,
            }
    }
}

impl std::fmt::Display for NetworkRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// What a proxy lets through.
pub(crate) trait Reach: Send + Sync + 'static {
    /// Whether a connection to `host:port` may be made; `url` is the
    /// request's absolute URL for a plain HTTP request, `None` for a
    /// `CONNECT`. The error is the message the client gets.
    fn check(&self, host: &str, port: u16, url: Option<&reqwest::Url>) -> Result<(), String>;

    /// Whether a plain HTTP request is sent upstream with `Connection:
    /// close`, so that the client cannot send a request for another host
    /// down the same connection (a browser pools its proxy connections).
    fn one_request_per_connection(&self) -> bool {
        false
    }
}

impl Reach for Vec<NetworkRule> {
    fn check(&self, host: &str, port: u16, _url: Option<&reqwest::Url>) -> Result<(), String> {
        if self.iter().any(|r| r.matches(host, port)) {
            return Ok(());
        }
        let allowed = self.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ");
        Err(format!(
            "reson jail: {host}:{port} is not in this plugin's command_network grant (allowed: \
             {allowed})"
        ))
    }
}

fn split_host_port(text: &str) -> Option<(String, u16)> {
    let (host, port) = text.rsplit_once(':')?;
    let host = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
    let port = port.parse().ok().filter(|p| *p != 0)?;
    (!host.is_empty()).then(|| (host.to_ascii_lowercase(), port))
}

/// Serves the proxy on `listener` until the future is dropped, which
/// drops every connection with it.
pub(crate) async fn serve<R: Reach>(listener: TcpListener, reach: std::sync::Arc<R>) {
    let mut connections = JoinSet::new();
    while let Ok((client, _)) = listener.accept().await {
        while connections.try_join_next().is_some() {}
        // Each connection holds two of the host's descriptors.
        if connections.len() >= MAX_CONNECTIONS {
            continue;
        }
        let reach = reach.clone();
        connections.spawn(async move {
            let _ = handle(client, &*reach).await;
        });
    }
}

async fn handle(mut client: TcpStream, reach: &impl Reach) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(4096);
    let (head_len, target, connect, request_line, url) = loop {
        let mut chunk = [0u8; 4096];
        let n = client.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut request = httparse::Request::new(&mut headers);
        match request.parse(&buf) {
            Ok(httparse::Status::Complete(len)) => {
                let method = request.method.unwrap_or_default();
                let path = request.path.unwrap_or_default();
                let parsed = target_of(method, path);
                let Some((host, port, origin_form)) = parsed else {
                    return refuse(
                        &mut client,
                        400,
                        "the proxy takes CONNECT host:port or an absolute http:// URL",
                    )
                    .await;
                };
                let line = (method != "CONNECT").then(|| {
                    format!("{method} {origin_form} HTTP/1.{}\r\n", request.version.unwrap_or(1))
                });
                let url = (method != "CONNECT").then(|| reqwest::Url::parse(path).ok()).flatten();
                break (len, (host, port), method == "CONNECT", line, url);
            }
            Ok(httparse::Status::Partial) if buf.len() < MAX_HEAD_BYTES => {}
            _ => return refuse(&mut client, 400, "malformed or oversized request head").await,
        }
    };
    let (host, port) = target;
    if let Err(message) = reach.check(&host, port, url.as_ref()) {
        return refuse(&mut client, 403, &message).await;
    }
    let upstream = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect((host.as_str(), port)));
    let mut upstream = match upstream.await {
        Ok(Ok(stream)) => stream,
        Ok(Err(e)) => return refuse(&mut client, 502, &format!("{host}:{port}: {e}")).await,
        Err(_) => return refuse(&mut client, 504, &format!("{host}:{port}: timed out")).await,
    };
    if connect {
        client.write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n").await?;
        upstream.write_all(&buf[head_len..]).await?;
    } else {
        // The request line goes out in origin form; the headers after it
        // are the client's own.
        let headers_start = buf.iter().position(|&b| b == b'\n').map_or(head_len, |i| i + 1);
        upstream.write_all(request_line.unwrap_or_default().as_bytes()).await?;
        if reach.one_request_per_connection() {
            upstream.write_all(&closing_head(&buf[headers_start..head_len])).await?;
            upstream.write_all(&buf[head_len..]).await?;
        } else {
            upstream.write_all(&buf[headers_start..]).await?;
        }
    }
    tokio::io::copy_bidirectional(&mut client, &mut upstream).await?;
    Ok(())
}

/// The header lines of a request head (ending in an empty line) with its
/// connection headers replaced by `Connection: close`.
fn closing_head(headers: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(headers.len() + 19);
    for line in headers.split_inclusive(|&b| b == b'\n') {
        let name = line.split(|&b| b == b':').next().unwrap_or_default();
        let hop = [&b"connection"[..], b"proxy-connection", b"keep-alive"]
            .iter()
            .any(|h| name.eq_ignore_ascii_case(h));
        if hop || line == b"\r\n" || line == b"\n" {
            continue;
        }
        out.extend_from_slice(line);
    }
    out.extend_from_slice(b"Connection: close\r\n\r\n");
    out
}

/// The host, port and origin-form target of a proxy request.
fn target_of(method: &str, path: &str) -> Option<(String, u16, String)> {
    if method == "CONNECT" {
        let (host, port) = split_host_port(path)?;
        return Some((host, port, String::new()));
    }
    let url = reqwest::Url::parse(path).ok()?;
    if url.scheme() != "http" {
        return None;
    }
    let host = url.host_str()?.trim_start_matches('[').trim_end_matches(']').to_ascii_lowercase();
    let port = url.port_or_known_default()?;
    let origin_form = match url.query() {
        Some(query) => format!("{}?{query}", url.path()),
        None => url.path().to_owned(),
    };
    Some((host, port, origin_form))
}

async fn refuse(client: &mut TcpStream, status: u16, message: &str) -> std::io::Result<()> {
    let reason = match status {
        403 => "Forbidden",
        502 => "Bad Gateway",
        504 => "Gateway Timeout",
        _ => "Bad Request",
    };
    let response = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{message}\n",
        message.len() + 1
    );
    client.write_all(response.as_bytes()).await?;
    client.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_match_their_host_and_port_only() {
        let exact = NetworkRule::parse("Crates.io:443").unwrap();
        assert!(exact.matches("crates.io", 443));
        assert!(exact.matches("CRATES.IO", 443));
        assert!(!exact.matches("crates.io", 80));
        assert!(!exact.matches("static.crates.io", 443));
        assert!(!exact.matches("crates.io.evil.example", 443));
        let wild = NetworkRule::parse("*.example.org:443").unwrap();
        assert!(wild.matches("docs.example.org", 443));
        assert!(!wild.matches("example.org", 443));
        assert!(!wild.matches("evilexample.org", 443));
        let v6 = NetworkRule::parse("[::1]:8080").unwrap();
        assert!(v6.matches("::1", 8080));
        assert_eq!(v6.to_string(), "[::1]:8080");
        for bad in ["crates.io", "crates.io:0", ":443", "a*b.org:1", "user@host:22", "h:port"] {
            assert!(NetworkRule::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_closing_head_drops_connection_headers() {
        let head = b"Host: a\r\nProxy-Connection: keep-alive\r\nAccept: */*\r\n\r\n";
        assert_eq!(closing_head(head), b"Host: a\r\nAccept: */*\r\nConnection: close\r\n\r\n");
    }

    #[test]
    fn requests_name_their_target() {
        assert_eq!(
            target_of("CONNECT", "crates.io:443"),
            Some(("crates.io".into(), 443, "".into()))
        );
        assert_eq!(
            target_of("GET", "http://Example.org/a?b=1"),
            Some(("example.org".into(), 80, "/a?b=1".into()))
        );
        assert_eq!(target_of("GET", "/relative"), None);
        assert_eq!(target_of("GET", "file:///etc/passwd"), None);
    }
}
