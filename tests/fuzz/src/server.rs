//! `server_request`: one HTTP request per input to a real `reson serve`
//! (`reson_server::Server`) started once per fuzzing process, written by
//! hand on a TCP socket so that malformed requests reach it too.
//!
//! The input is read byte by byte (one byte per choice, a length byte or
//! two before each run of bytes), never through `arbitrary`'s derive, so
//! that a seed is easy to write by hand: see `corpus/server_request`.
//!
//! The server has no plugins, so no run can start (every request for one
//! fails on the provider); its knowledge and experiences live in a temporary
//! directory, and whatever a request adds there is removed after it.

use arbitrary::{Arbitrary, Unstructured};
use reson_server::users::{Role, UserSettings, hash_token};
use reson_server::{Server, ServerConfig};
use reson_trace::{ContentPart, Durability, FileTraceStore, Message, Role as Author, Trace};
use reson_trace::{TraceMode, TraceStatus};
use serde_json::Value;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, LazyLock};
use std::time::Duration;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// The admin's token.
const ADMIN: &str = "fuzz-admin-token";
/// User `alice`'s token.
const ALICE: &str = "fuzz-alice-token";
/// The image the seeded trace keeps: its second message's.
const IMAGE: &str = "000002.png";
/// The largest body the server takes: small, so that inputs reach 413.
const MAX_BODY: usize = 4096;
/// How long one answer may take.
const DEADLINE: Duration = Duration::from_secs(10);

/// Names the server's bodies and queries use, for keys and string values:
/// bodies built from them get past `deny_unknown_fields`.
const WORDS: &[&str] = &[
    "messages",
    "role",
    "content",
    "task",
    "system_prompt",
    "provider",
    "model",
    "preset",
    "max_iterations",
    "budget",
    "max_tokens",
    "max_cost_usd",
    "max_duration_ms",
    "uid",
    "after_sequence",
    "restore_files",
    "force",
    "focus",
    "rule",
    "category",
    "condition",
    "tags",
    "scope",
    "confidence",
    "source",
    "id",
    "title",
    "answer",
    "user",
    "assistant",
    "system",
    "once",
    "always",
    "deny",
    "global",
    "user:alice",
    "agent:x",
    "manual",
    "feedback",
    "scripted",
    "default",
    "alice",
];

/// Query parameters of the routes, and values they take.
const QUERY_KEYS: &[&str] =
    &["status", "root_only", "limit", "offset", "mode", "since", "token", "q"];
const QUERY_WORDS: &[&str] = &[
    "running",
    "completed",
    "failed",
    "stopped",
    "true",
    "false",
    "all",
    "main_path",
    ADMIN,
    ALICE,
    "0",
    "1",
    "100",
    "1001",
];

/// The route templates of `host/server/src/routes/mod.rs` and the viewer's;
/// `{}` is a path parameter.
const ROUTES: &[&str] = &[
    "/api/health",
    "/api/plugins",
    "/api/traces",
    "/api/traces/running",
    "/api/traces/{}",
    "/api/traces/{}/messages",
    "/api/traces/{}/images/{}",
    "/api/traces/{}/run",
    "/api/traces/{}/stop",
    "/api/traces/{}/reflect",
    "/api/experiences",
    "/api/experiences/{}",
    "/api/knowledge",
    "/api/knowledge/{}",
    "/api/approvals",
    "/api/approvals/{}",
    "/api/traces/{}/watch",
    "/api/openapi.json",
    "/",
    "/assets/{}",
    "{}",
];

/// One byte's choice among `n`; 0 once the input is used up.
pub(crate) fn pick(u: &mut Unstructured, n: usize) -> arbitrary::Result<usize> {
    Ok(usize::from(u8::arbitrary(u)?) % n)
}

/// A length byte (or two, `wide`), then up to that many bytes.
fn bytes(u: &mut Unstructured, wide: bool) -> arbitrary::Result<Vec<u8>> {
    let len = if wide { usize::from(u16::arbitrary(u)?) } else { usize::from(u8::arbitrary(u)?) };
    Ok(u.bytes(len.min(u.len()))?.to_vec())
}

/// Bytes fit to stand in a request's head: no CR or LF, which would end
/// its line early and leave the server waiting for the rest of a request
/// that never comes. Anything else, spaces and controls included, goes.
fn raw(u: &mut Unstructured) -> arbitrary::Result<Vec<u8>> {
    Ok(bytes(u, false)?
        .into_iter()
        .map(|b| if b == b'\r' || b == b'\n' { b'?' } else { b })
        .collect())
}

/// Text from bytes, invalid UTF-8 replaced.
pub(crate) fn text(u: &mut Unstructured) -> arbitrary::Result<String> {
    Ok(String::from_utf8_lossy(&bytes(u, false)?).into_owned())
}

/// `text` percent-encoded for a path or query: it always parses.
fn encoded(text: &[u8]) -> String {
    text.iter()
        .map(|&b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// A JSON value, its keys and many of its strings from `words`; containers
/// end at a few levels.
pub fn json(u: &mut Unstructured, words: &[&str], depth: usize) -> arbitrary::Result<Value> {
    let word = |u: &mut Unstructured| -> arbitrary::Result<String> {
        let i = usize::from(u8::arbitrary(u)?);
        Ok(match words.get(i) {
            Some(word) => (*word).to_owned(),
            None => text(u)?,
        })
    };
    let deeper = depth < 5;
    Ok(match pick(u, 8)? {
        0 => Value::Null,
        1 => Value::Bool(bool::arbitrary(u)?),
        2 => i64::arbitrary(u)?.into(),
        3 => u64::arbitrary(u)?.into(),
        4 => serde_json::Number::from_f64(f64::arbitrary(u)?).map_or(Value::Null, Value::Number),
        5 => Value::String(word(u)?),
        6 if deeper => {
            let n = pick(u, 4)?;
            Value::Array((0..n).map(|_| json(u, words, depth + 1)).collect::<Result<_, _>>()?)
        }
        7 if deeper => {
            let n = pick(u, 6)?;
            let mut object = serde_json::Map::new();
            for _ in 0..n {
                let key = word(u)?;
                object.insert(key, json(u, words, depth + 1)?);
            }
            Value::Object(object)
        }
        _ => Value::Null,
    })
}

/// A header's value: a known one, absent, or raw bytes.
#[derive(Debug, Clone, PartialEq)]
enum Header {
    Absent,
    Known(usize),
    Raw(Vec<u8>),
}

impl Header {
    fn read(u: &mut Unstructured, known: usize) -> arbitrary::Result<Self> {
        Ok(match pick(u, known + 2)? {
            0 => Header::Absent,
            1 => Header::Raw(raw(u)?),
            k => Header::Known(k - 2),
        })
    }
}

/// A request body.
#[derive(Debug)]
enum Body {
    Empty,
    /// Any bytes, up to a little over the limit.
    Bytes(Vec<u8>),
    /// JSON built from [`WORDS`].
    Json(Value),
}

/// One request, as the fuzzer chose it.
#[derive(Debug)]
pub struct Request {
    /// A method name (the known ones, or raw bytes).
    method: Vec<u8>,
    route: usize,
    /// The path parameters, already encoded (or raw).
    params: [Vec<u8>; 2],
    /// The query string, without `?`; none when empty.
    query: Vec<u8>,
    /// 0 none, 1 admin, 2 alice, 3 a wrong token, 4 another scheme.
    auth: Header,
    /// 0 `application/json`, 1 with a charset, 2 `text/plain`, 3 upper case.
    content_type: Header,
    /// 0 our own, 1 `localhost`, 2 a foreign page, 3 `null`.
    origin: Header,
    /// 0 our address, 1 `localhost`, 2 a foreign name, 3 no port; absent
    /// is no `Host` at all.
    host: Header,
    /// The headers of a WebSocket upgrade.
    upgrade: bool,
    /// `Transfer-Encoding: chunked` rather than `Content-Length`.
    chunked: bool,
    body: Body,
    /// Something in the head went in raw: the server's HTTP parser may
    /// refuse it before the API sees it.
    raw: bool,
}

const METHODS: &[&str] = &["GET", "POST", "DELETE", "PUT", "PATCH", "HEAD", "OPTIONS"];

impl<'a> Arbitrary<'a> for Request {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        let mut is_raw = false;
        let method = match pick(u, METHODS.len() + 1)? {
            i if i < METHODS.len() => METHODS[i].as_bytes().to_vec(),
            _ => {
                is_raw = true;
                // No space: the HTTP/2 preface must stay out of reach.
                raw(u)?.into_iter().filter(|b| *b != b' ').collect()
            }
        };
        let route = pick(u, ROUTES.len())?;
        // A parameter as the whole path may not start with `/`.
        is_raw |= ROUTES[route] == "{}";
        let mut param = |u: &mut Unstructured| -> arbitrary::Result<Vec<u8>> {
            Ok(match pick(u, 7)? {
                0 => b"{admin}".to_vec(),
                1 => b"{alice}".to_vec(),
                2 => IMAGE.as_bytes().to_vec(),
                3 => encoded(&bytes(u, false)?).into_bytes(),
                4 => {
                    is_raw = true;
                    raw(u)?
                }
                5 => format!("ap_{}", encoded(&bytes(u, false)?)).into_bytes(),
                _ => Vec::new(),
            })
        };
        let params = [param(u)?, param(u)?];
        let query = match pick(u, 3)? {
            0 => Vec::new(),
            1 => {
                let mut pairs = Vec::new();
                for _ in 0..pick(u, 5)? {
                    let key = match QUERY_KEYS.get(usize::from(u8::arbitrary(u)?)) {
                        Some(key) => (*key).to_owned(),
                        None => encoded(&bytes(u, false)?),
                    };
                    let value = match pick(u, 3)? {
                        0 => i64::arbitrary(u)?.to_string(),
                        1 => QUERY_WORDS[pick(u, QUERY_WORDS.len())?].to_owned(),
                        _ => encoded(&bytes(u, false)?),
                    };
                    pairs.push(format!("{key}={value}"));
                }
                pairs.join("&").into_bytes()
            }
            _ => {
                is_raw = true;
                raw(u)?
            }
        };
        let auth = Header::read(u, 4)?;
        let content_type = Header::read(u, 4)?;
        let origin = Header::read(u, 4)?;
        let host = match pick(u, 6)? {
            // Mostly our own: most requests should get past the guard.
            0..=2 => Header::Known(0),
            _ => Header::read(u, 4)?,
        };
        is_raw |=
            [&auth, &content_type, &origin, &host].iter().any(|h| matches!(h, Header::Raw(_)));
        let flags = u8::arbitrary(u)?;
        let body = match pick(u, 4)? {
            0 => Body::Empty,
            1 => Body::Bytes(bytes(u, true)?),
            2 => Body::Json(json(u, WORDS, 0)?),
            // An object: what every route with a body takes.
            _ => {
                let mut object = serde_json::Map::new();
                for _ in 0..pick(u, 6)? {
                    let key = WORDS[pick(u, WORDS.len())?].to_owned();
                    object.insert(key, json(u, WORDS, 1)?);
                }
                Body::Json(Value::Object(object))
            }
        };
        Ok(Request {
            method,
            route,
            params,
            query,
            auth,
            content_type,
            origin,
            host,
            upgrade: flags & 1 != 0,
            chunked: flags & 2 != 0,
            body,
            raw: is_raw,
        })
    }
}

/// A response as it came off the socket.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

/// The server, started on first use, with the ids of the traces seeded
/// into its store.
struct Target {
    runtime: tokio::runtime::Runtime,
    addr: SocketAddr,
    /// A trace of no user's (the admin's) and one of alice's.
    traces: [String; 2],
    _dir: tempfile::TempDir,
}

static TARGET: LazyLock<Target> = LazyLock::new(Target::start);

impl Target {
    fn start() -> Self {
        // In memory where there is a tmpfs: every knowledge save commits.
        let shm = std::path::Path::new("/dev/shm");
        let dir = if shm.is_dir() { tempfile::tempdir_in(shm) } else { tempfile::tempdir() };
        let dir = dir.expect("a temporary directory");
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a tokio runtime");
        let (addr, traces) = runtime.block_on(Self::serve(dir.path()));
        Target { runtime, addr, traces, _dir: dir }
    }

    async fn serve(dir: &std::path::Path) -> (SocketAddr, [String; 2]) {
        let plugins_dir = dir.join("plugins");
        std::fs::create_dir_all(&plugins_dir).expect("the plugins directory");
        let options = reson_sandbox::plugin::Options {
            config: Default::default(),
            lock_file: plugins_dir.join("reson.lock"),
            plugins_dir,
            cache_dir: dir.join("cache"),
            observer: None,
        };
        let runtime = reson_sandbox::plugin::Runtime::open(options).await.expect("the runtime");
        let store = Arc::new(
            FileTraceStore::open(dir.join("traces"), Durability::Batched).expect("the store"),
        );
        let traces = [seed(&*store, None).await, seed(&*store, Some("alice")).await];
        let alice = UserSettings { token_sha256: hash_token(ALICE), role: Role::User };
        let mut config = ServerConfig {
            addr: "127.0.0.1:0".parse().expect("an address"),
            token: Some(ADMIN.into()),
            users: BTreeMap::from([("alice".to_owned(), alice)]),
            max_body_bytes: MAX_BODY,
            ..ServerConfig::default()
        };
        config.agent.base_dir = dir.to_path_buf();
        let server = Server::bind(runtime, store, config).await.expect("the server binds");
        let addr = server.local_addr();
        tokio::spawn(server.serve(std::future::pending()));
        (addr, traces)
    }

    /// `request` as bytes on the wire.
    fn encode(&self, request: &Request) -> Vec<u8> {
        let port = self.addr.port();
        let mut path = ROUTES[request.route].as_bytes().to_vec();
        for param in &request.params {
            let param = match param.as_slice() {
                b"{admin}" => self.traces[0].as_bytes(),
                b"{alice}" => self.traces[1].as_bytes(),
                other => other,
            };
            if let Some(at) = path.windows(2).position(|w| w == b"{}") {
                path.splice(at..at + 2, param.iter().copied());
            }
        }
        if !request.query.is_empty() {
            path.push(b'?');
            path.extend_from_slice(&request.query);
        }
        let mut head = Vec::new();
        head.extend_from_slice(&request.method);
        head.push(b' ');
        head.extend_from_slice(&path);
        head.extend_from_slice(b" HTTP/1.1\r\n");
        let mut header = |name: &str, value: &[u8]| {
            head.extend_from_slice(name.as_bytes());
            head.extend_from_slice(b": ");
            head.extend_from_slice(value);
            head.extend_from_slice(b"\r\n");
        };
        let mut put = |name: &str, value: &Header, known: &[String]| match value {
            Header::Absent => {}
            Header::Known(i) => header(name, known[*i].as_bytes()),
            Header::Raw(bytes) => header(name, bytes),
        };
        let ours = |scheme: &str| format!("{scheme}127.0.0.1:{port}");
        let hosts = [
            ours(""),
            format!("localhost:{port}"),
            format!("evil.example:{port}"),
            "127.0.0.1".into(),
        ];
        put("Host", &request.host, &hosts);
        let tokens = [
            format!("Bearer {ADMIN}"),
            format!("Bearer {ALICE}"),
            "Bearer nope".into(),
            format!("Basic {ADMIN}"),
        ];
        put("Authorization", &request.auth, &tokens);
        let types = [
            "application/json",
            "application/json; charset=utf-8",
            "text/plain",
            "APPLICATION/JSON",
        ]
        .map(String::from);
        put("Content-Type", &request.content_type, &types);
        let origins = [
            ours("http://"),
            format!("http://localhost:{port}"),
            "http://evil.example".into(),
            "null".into(),
        ];
        put("Origin", &request.origin, &origins);
        let mut lines: Vec<(&str, &[u8])> = Vec::new();
        if request.upgrade {
            lines.extend([
                ("Connection", &b"Upgrade"[..]),
                ("Upgrade", b"websocket"),
                ("Sec-WebSocket-Version", b"13"),
                ("Sec-WebSocket-Key", b"dGhlIHNhbXBsZSBub25jZQ=="),
            ]);
        } else {
            lines.push(("Connection", b"close"));
        }
        let body = request.body_bytes();
        let length = body.len().to_string();
        if request.chunked {
            lines.push(("Transfer-Encoding", b"chunked"));
        } else {
            lines.push(("Content-Length", length.as_bytes()));
        }
        for (name, value) in lines {
            header(name, value);
        }
        head.extend_from_slice(b"\r\n");
        if request.chunked {
            // Two chunks, so that a body is read across them.
            let (first, second) = body.split_at(body.len() / 2);
            for chunk in [first, second] {
                if !chunk.is_empty() {
                    head.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
                    head.extend_from_slice(chunk);
                    head.extend_from_slice(b"\r\n");
                }
            }
            head.extend_from_slice(b"0\r\n\r\n");
        } else {
            head.extend_from_slice(&body);
        }
        head
    }
}

impl Request {
    fn body_bytes(&self) -> Vec<u8> {
        match &self.body {
            Body::Empty => Vec::new(),
            Body::Bytes(bytes) => bytes.clone(),
            Body::Json(value) => value.to_string().into_bytes(),
        }
    }

    fn method_is(&self, name: &str) -> bool {
        self.method == name.as_bytes()
    }
}

/// A completed trace with a user message and an assistant message that
/// holds an image, as runs leave them.
async fn seed(store: &dyn reson_trace::TraceStore, uid: Option<&str>) -> String {
    const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";
    let mut trace = Trace::new(TraceMode::Agent, "say hello", "default");
    trace.uid = uid.map(str::to_owned);
    store.create_trace(&trace).await.expect("a trace");
    let first = store.add_message(&mut trace, Message::new(Author::User, "hello"), None).await;
    let first = first.expect("a message").sequence;
    let mut answer = Message::new(Author::Assistant, "a picture");
    answer.content.push(ContentPart::ImageUrl { url: format!("data:image/png;base64,{PNG}") });
    store.add_message(&mut trace, answer, Some(first)).await.expect("a message");
    trace.status = TraceStatus::Completed;
    store.update_trace(&trace).await.expect("the trace ends");
    trace.id
}

/// Sends `bytes` on a connection of its own and reads one response.
async fn exchange(addr: SocketAddr, bytes: &[u8], head: bool) -> Result<Response, String> {
    let mut socket = tokio::net::TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    socket.write_all(bytes).await.map_err(|e| format!("writing: {e}"))?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    // The head.
    let end = loop {
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break at;
        }
        let n = socket.read(&mut chunk).await.map_err(|e| format!("reading: {e}"))?;
        if n == 0 {
            return Err(format!("closed before a whole head: {:?}", String::from_utf8_lossy(&buf)));
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let text = std::str::from_utf8(&buf[..end]).map_err(|e| format!("a head not UTF-8: {e}"))?;
    let mut lines = text.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .strip_prefix("HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse::<u16>().ok())
        .ok_or_else(|| format!("a bad status line {status_line:?}"))?;
    let headers = lines
        .map(|line| {
            let (name, value) =
                line.split_once(':').ok_or(format!("a bad header line {line:?}"))?;
            Ok((name.to_owned(), value.trim().to_owned()))
        })
        .collect::<Result<Vec<_>, String>>()?;
    let mut response = Response { status, headers, body: Vec::new() };
    let mut rest = buf[end + 4..].to_vec();
    if head || status == 101 || status == 204 || status == 304 {
        return Ok(response);
    }
    let chunked =
        response.header("transfer-encoding").is_some_and(|t| t.eq_ignore_ascii_case("chunked"));
    let length = response.header("content-length").map(str::parse::<usize>);
    loop {
        if chunked {
            if let Some(body) = dechunk(&rest)? {
                response.body = body;
                return Ok(response);
            }
        } else if let Some(length) = &length {
            let length = *length.as_ref().map_err(|e| format!("a bad Content-Length: {e}"))?;
            if rest.len() >= length {
                rest.truncate(length);
                response.body = rest;
                return Ok(response);
            }
        }
        let n = socket.read(&mut chunk).await.map_err(|e| format!("reading the body: {e}"))?;
        if n == 0 {
            if chunked || length.is_some() {
                return Err(format!("closed inside the body of a {status}"));
            }
            response.body = rest;
            return Ok(response);
        }
        rest.extend_from_slice(&chunk[..n]);
    }
}

/// The body of a whole chunked encoding; `None` while it is not all here.
fn dechunk(mut data: &[u8]) -> Result<Option<Vec<u8>>, String> {
    let mut body = Vec::new();
    loop {
        let Some(eol) = data.windows(2).position(|w| w == b"\r\n") else { return Ok(None) };
        let size = std::str::from_utf8(&data[..eol]).map_err(|e| e.to_string())?;
        let size = size.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size, 16).map_err(|e| format!("a bad chunk size: {e}"))?;
        data = &data[eol + 2..];
        if size == 0 {
            return Ok(data.windows(2).any(|w| w == b"\r\n").then_some(body));
        }
        if data.len() < size + 2 {
            return Ok(None);
        }
        body.extend_from_slice(&data[..size]);
        data = &data[size + 2..];
    }
}

/// Sends `request` and checks the answer; then removes what it added and
/// checks that the server still answers. Panics on a finding.
pub fn run(request: &Request) {
    let target = &*TARGET;
    target.runtime.block_on(async {
        let bytes = target.encode(request);
        let head = request.method_is("HEAD");
        let response = tokio::time::timeout(DEADLINE, exchange(target.addr, &bytes, head)).await;
        let response = match response {
            Ok(Ok(response)) => response,
            Ok(Err(e)) => {
                panic!("no whole response: {e}\nsent {:?}", String::from_utf8_lossy(&bytes))
            }
            Err(_) => {
                panic!("no response in {DEADLINE:?}\nsent {:?}", String::from_utf8_lossy(&bytes))
            }
        };
        check(request, &response, &bytes);
        clean_up(target, request, &response).await;
        let health = send(target.addr, "GET", "/api/health").await;
        assert_eq!(
            health.status,
            200,
            "the server stopped answering after {:?}",
            String::from_utf8_lossy(&bytes)
        );
    });
}

/// The checks on one answer.
fn check(request: &Request, response: &Response, sent: &[u8]) {
    let context = || {
        format!(
            "sent {:?}\ngot {} {:?}",
            String::from_utf8_lossy(sent),
            response.status,
            String::from_utf8_lossy(&response.body)
        )
    };
    assert!(response.status < 500, "a server error\n{}", context());
    let known = |h: &Header, set: &[usize]| matches!(h, Header::Known(k) if set.contains(k));
    if !request.raw {
        // The guard's order: Host, then Origin, then the body's type.
        let host_ok = known(&request.host, &[0, 1]);
        let host_bad = request.host == Header::Absent || known(&request.host, &[2, 3]);
        let origin_ok = request.origin == Header::Absent || known(&request.origin, &[0, 1]);
        let origin_bad = known(&request.origin, &[2, 3]);
        let json = known(&request.content_type, &[0, 1, 3]);
        let safe = ["GET", "HEAD", "OPTIONS"].iter().any(|m| request.method_is(m));
        let has_body = request.chunked || !request.body_bytes().is_empty();
        if host_bad {
            assert_eq!(response.status, 421, "a foreign Host let in\n{}", context());
        } else if host_ok && origin_bad {
            assert_eq!(response.status, 403, "a foreign Origin let in\n{}", context());
        } else if host_ok && origin_ok && !safe && has_body && !json {
            assert_eq!(response.status, 415, "a body not declared JSON let in\n{}", context());
        }
        // No token, a wrong one or another scheme: no /api route answers.
        let api = ROUTES[request.route].starts_with("/api/");
        let no_token = matches!(request.auth, Header::Absent) || known(&request.auth, &[2, 3]);
        let token_in_query = String::from_utf8_lossy(&request.query).contains("fuzz-");
        if api && no_token && !token_in_query {
            assert!(
                !(200..300).contains(&response.status) && response.status != 101,
                "let in without a token\n{}",
                context()
            );
        }
    }
    if request.method_is("HEAD") || response.status == 101 {
        return;
    }
    if response.status >= 400 {
        if response.body.is_empty() && request.raw {
            // The HTTP parser's own refusal of a malformed head.
            return;
        }
        let json: Value = serde_json::from_slice(&response.body)
            .unwrap_or_else(|e| panic!("an error body that is not JSON ({e})\n{}", context()));
        let error = &json["error"];
        assert!(
            error["code"].is_string() && error["message"].is_string(),
            "an error not of the API's shape\n{}",
            context()
        );
        let content_type = response.header("content-type").unwrap_or_default();
        assert!(
            content_type.starts_with("application/json"),
            "an error as {content_type:?}\n{}",
            context()
        );
    } else if (200..300).contains(&response.status)
        && response.header("content-type") == Some("application/json")
    {
        serde_json::from_slice::<Value>(&response.body)
            .unwrap_or_else(|e| panic!("a JSON answer that does not parse ({e})\n{}", context()));
    }
}

/// Removes the knowledge entry or experience a request added, so that the
/// store does not grow over a run.
async fn clean_up(target: &Target, request: &Request, response: &Response) {
    if response.status != 201 {
        return;
    }
    let kind = match ROUTES[request.route] {
        "/api/knowledge" => "knowledge",
        "/api/experiences" => "experiences",
        _ => return,
    };
    let json: Value = serde_json::from_slice(&response.body).expect("a 201 body is JSON");
    let id = json["id"].as_str().expect("what was added has an id");
    // An id may name entries of several scopes: remove them all.
    for _ in 0..8 {
        let path = format!("/api/{kind}/{}", encoded(id.as_bytes()));
        let removed = send(target.addr, "DELETE", &path).await;
        if removed.status != 200 {
            assert_eq!(
                removed.status,
                404,
                "removing {path}: {:?}",
                String::from_utf8_lossy(&removed.body)
            );
            return;
        }
    }
}

/// A plain request with the admin's token.
async fn send(addr: SocketAddr, method: &str, path: &str) -> Response {
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {ADMIN}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
    );
    let response = tokio::time::timeout(DEADLINE, exchange(addr, request.as_bytes(), false)).await;
    response.expect("an answer in time").unwrap_or_else(|e| panic!("{method} {path}: {e}"))
}
