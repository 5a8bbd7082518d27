//! `reson serve` for the system tests and the load bench: a server on an
//! ephemeral 127.0.0.1 port over a [`TestDir`] holding the real bundled
//! plugins, an HTTP client and a WebSocket client that speak the routes of
//! issue 11.

#![allow(dead_code, reason = "the tests and the bench use different subsets")]

use crate::support::{self, TestDir};
use futures::{SinkExt, StreamExt};
use reqwest::Method;
use reson::api::{Server, ServerConfig};
use reson::trace::{Durability, FileTraceStore};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::net::TcpStream;
use tokio::process::{Child, Command};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::{self, Message as Frame};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

/// The longest any test waits for something it expects; past it the test
/// fails rather than hangs.
pub const WAIT: Duration = Duration::from_secs(60);

/// `reson.toml` for a server: the scripted provider replays `script.json`
/// in the directory; `echo`, `nap` and `flood` run without asking, and
/// preset `careful` asks before every `echo`. `extra` is appended.
pub fn config(extra: &str) -> String {
    format!(
        r#"
[permissions]
rules = [
  {{ decision = "allow", tool = "echo" }},
  {{ decision = "allow", tool = "nap" }},
  {{ decision = "allow", tool = "flood" }},
]

[presets.careful]
rules = [{{ decision = "ask", tool = "echo" }}]

{extra}
"#
    )
}

/// A directory with `plugins` installed from the bundled set, or from the
/// test guests for `hostile`.
pub fn dir_with(plugins: &[&str]) -> TestDir {
    let dir = TestDir::new();
    for plugin in plugins {
        let from = if *plugin == "hostile" { support::test_plugins() } else { support::plugins() };
        dir.install(from, plugin);
    }
    dir
}

/// Writes the scripted provider's turns to `script.json` in `dir`. The
/// provider reads the file on every model call, so a test may change the
/// script between runs.
pub fn set_script(dir: &Path, turns: Value) -> PathBuf {
    let path = dir.join("script.json");
    std::fs::write(&path, json!({ "turns": turns }).to_string()).unwrap();
    path
}

/// A turn that calls `echo` with `text`.
pub fn echo_turn(text: &str) -> Value {
    json!({ "text": format!("echoing {text}"), "tool_calls": [{ "name": "echo", "arguments": { "text": text } }] })
}

/// A turn that answers `text` and calls nothing.
pub fn text_turn(text: &str) -> Value {
    json!({ "text": text })
}

/// The `reson` command with this directory's config, plugins, compiled-code
/// cache and traces.
pub fn reson(dir: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_reson"));
    command
        .args(["--config", &dir.join("reson.toml").to_string_lossy()])
        .args(["--plugins-dir", &dir.join("plugins").to_string_lossy()])
        .args(["--cache-dir", &support::cache_dir().to_string_lossy()])
        .args(["--traces-dir", &dir.join("traces").to_string_lossy()]);
    command
}

/// A `reson::api::Server` in this process on 127.0.0.1:0, over the
/// directory's plugins and its `traces/`.
pub struct InProcess {
    pub api: Api,
    shutdown: tokio_util::sync::CancellationToken,
    serving: tokio::task::JoinHandle<Result<(), reson::api::ApiError>>,
}

impl InProcess {
    /// Opens the runtime on `dir` with `toml` as its config and serves it.
    pub async fn start(dir: &TestDir, toml: &str) -> Self {
        let options = dir.options(toml);
        let config = ServerConfig {
            addr: "127.0.0.1:0".parse().unwrap(),
            ..ServerConfig::from_config(&dir.config(toml))
        };
        let runtime = reson::plugin::Runtime::open(options).await.expect("runtime opens");
        let traces = dir.path().join("traces");
        let store = Arc::new(FileTraceStore::open(traces, Durability::Batched).unwrap());
        let server = Server::bind(runtime, store, config).await.expect("the server binds");
        let api = Api::new(format!("http://{}", server.local_addr()), None);
        let shutdown = tokio_util::sync::CancellationToken::new();
        let stopped = shutdown.clone();
        let serving = tokio::spawn(server.serve(async move { stopped.cancelled().await }));
        Self { api, shutdown, serving }
    }

    /// Shuts the server down as SIGTERM would, and waits for it.
    pub async fn stop(self) {
        self.shutdown.cancel();
        let served = tokio::time::timeout(WAIT, self.serving).await;
        served.expect("the server did not shut down in time").unwrap().expect("it served");
    }
}

/// A `reson serve` process on 127.0.0.1:0, killed when dropped.
pub struct ServerProcess {
    pub child: Child,
    pub api: Api,
    /// What it printed on stdout and stderr after its first line.
    pub output: Arc<Mutex<Vec<String>>>,
}

impl ServerProcess {
    /// Starts `reson serve --addr 127.0.0.1:0 ARGS` on `dir` and reads its
    /// address from its first line.
    pub async fn start(dir: &Path, args: &[&str]) -> Self {
        Self::start_with(dir, args, &[]).await
    }

    /// [`start`](Self::start) with `env` set for the process.
    pub async fn start_with(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Self {
        let mut command = reson(dir);
        command
            .args(["serve", "--addr", "127.0.0.1:0"])
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = command.spawn().expect("starting reson serve");
        let output = Arc::new(Mutex::new(Vec::new()));
        let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
        drain(child.stderr.take().unwrap(), output.clone());
        let first = tokio::time::timeout(WAIT, stdout.next_line()).await;
        let first = match first {
            Ok(Ok(Some(line))) => line,
            other => {
                let status = child.wait().await;
                panic!(
                    "reson serve printed no first line ({other:?}); exit {status:?}; stderr {:?}",
                    output.lock().unwrap()
                )
            }
        };
        let base = first
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("first line {first:?} is not `listening on http://ADDR`"));
        assert!(base.starts_with("http://127.0.0.1:") && !base.ends_with(":0"), "{first}");
        let output2 = output.clone();
        tokio::spawn(async move {
            while let Ok(Some(line)) = stdout.next_line().await {
                output2.lock().unwrap().push(line);
            }
        });
        Self { child, api: Api::new(base, None), output }
    }

    /// Sends `signal` (`TERM`, `KILL`, ...) to the process.
    pub fn signal(&self, signal: &str) {
        let pid = self.child.id().expect("still running").to_string();
        let status =
            std::process::Command::new("kill").args([&format!("-{signal}"), &pid]).status();
        assert!(status.unwrap().success());
    }

    /// Waits for the process to exit; its exit code.
    pub async fn exit_code(&mut self) -> Option<i32> {
        let status = tokio::time::timeout(WAIT, self.child.wait()).await;
        status.expect("reson serve did not exit in time").unwrap().code()
    }
}

fn drain(stream: impl tokio::io::AsyncRead + Unpin + Send + 'static, to: Arc<Mutex<Vec<String>>>) {
    tokio::spawn(async move {
        let mut lines = BufReader::new(stream).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            to.lock().unwrap().push(line);
        }
    });
}

/// A client of one server: base URL and, when set, the bearer token it
/// sends.
#[derive(Clone)]
pub struct Api {
    pub base: String,
    pub token: Option<String>,
    http: reqwest::Client,
}

/// An HTTP answer, read whole.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub text: String,
}

impl Reply {
    /// The body as JSON; fails the test when it is not JSON.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or_else(|e| {
            panic!("status {}: body is not JSON ({e}): {}", self.status, self.text)
        })
    }

    /// Asserts the status; the body as JSON.
    pub fn expect(&self, status: u16) -> Value {
        assert_eq!(self.status, status, "body: {}", self.text);
        self.json()
    }

    /// Asserts the status and the error shape
    /// `{"error":{"code":..,"message":..}}` (nothing else, a message that
    /// says something); the message.
    pub fn expect_error(&self, status: u16, code: &str) -> String {
        let body = self.expect(status);
        let error = &body["error"];
        assert_eq!(body.as_object().unwrap().len(), 1, "only `error`: {body}");
        assert_eq!(error.as_object().map(|o| o.len()), Some(2), "code and message: {body}");
        assert_eq!(error["code"], code, "{body}");
        let message = error["message"].as_str().expect("a message").to_owned();
        assert!(!message.trim().is_empty(), "{body}");
        message
    }
}

impl Api {
    pub fn new(base: impl Into<String>, token: Option<&str>) -> Self {
        let http = reqwest::Client::builder().timeout(WAIT).build().unwrap();
        Self { base: base.into(), token: token.map(str::to_owned), http }
    }

    /// The same server with another token (or none).
    pub fn with_token(&self, token: Option<&str>) -> Self {
        Self { token: token.map(str::to_owned), ..self.clone() }
    }

    /// Sends a request with a raw body (sent as JSON).
    pub async fn send(&self, method: Method, path: &str, body: Option<Vec<u8>>) -> Reply {
        let mut request = self.http.request(method, format!("{}{path}", self.base));
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request.header("content-type", "application/json").body(body);
        }
        let response = request.send().await.unwrap_or_else(|e| panic!("{path}: {e}"));
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let text = response.text().await.unwrap();
        Reply { status, headers, text }
    }

    /// The `host:port` the server listens on.
    pub fn addr(&self) -> &str {
        self.base.trim_start_matches("http://")
    }

    /// Sends `request` as written (head and body, every header the test
    /// wants, forged ones included) over a fresh connection, and reads the
    /// answer: its head, then its body up to its length or the end of the
    /// connection. A 101 ends with its head. A request may also be only a
    /// head that declares a body: a server that refuses the body without
    /// reading it closes the connection, and a client still writing that
    /// body may see the reset before the answer, although the answer was
    /// sent first.
    pub async fn send_raw(&self, request: &[u8]) -> Reply {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut socket = tokio::net::TcpStream::connect(self.addr()).await.unwrap();
        socket.write_all(request).await.unwrap();
        let mut read = Vec::new();
        let answer = async {
            loop {
                let mut chunk = [0u8; 4096];
                let n = socket.read(&mut chunk).await.unwrap();
                read.extend_from_slice(&chunk[..n]);
                let text = String::from_utf8_lossy(&read).into_owned();
                if let Some((head, body)) = text.split_once("\r\n\r\n") {
                    let length = head.lines().find_map(|l| {
                        l.to_ascii_lowercase()
                            .strip_prefix("content-length:")
                            .map(|v| v.trim().parse::<usize>().unwrap())
                    });
                    let switching = head.starts_with("HTTP/1.1 101");
                    if n == 0 || switching || length.is_some_and(|len| body.len() >= len) {
                        return (head.to_owned(), body.to_owned());
                    }
                }
                assert!(n > 0, "the connection closed before an answer: {text:?}");
            }
        };
        let (head, text) =
            tokio::time::timeout(Duration::from_secs(30), answer).await.expect("an answer");
        let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
        let mut headers = reqwest::header::HeaderMap::new();
        for line in head.lines().skip(1) {
            if let Some((name, value)) = line.split_once(':') {
                headers.append(
                    reqwest::header::HeaderName::from_bytes(name.trim().as_bytes()).unwrap(),
                    value.trim().parse().unwrap(),
                );
            }
        }
        Reply { status, headers, text }
    }

    pub async fn get(&self, path: &str) -> Reply {
        self.send(Method::GET, path, None).await
    }

    pub async fn post(&self, path: &str, body: Value) -> Reply {
        self.send(Method::POST, path, Some(body.to_string().into_bytes())).await
    }

    /// `POST /api/traces` with one user message and `extra` fields; the
    /// trace id.
    pub async fn start(&self, message: &str, extra: Value) -> String {
        let mut body = json!({ "messages": [{ "role": "user", "content": message }] });
        for (key, value) in extra.as_object().unwrap() {
            body[key] = value.clone();
        }
        let reply = self.post("/api/traces", body).await.expect(201);
        assert_eq!(reply["status"], "started", "{reply}");
        reply["trace_id"].as_str().expect("a trace id").to_owned()
    }

    /// `GET /api/traces/{id}`, which must answer 200.
    pub async fn trace(&self, id: &str) -> Value {
        self.get(&format!("/api/traces/{id}")).await.expect(200)
    }

    /// The trace's `last_event_id`.
    pub async fn last_event(&self, id: &str) -> u64 {
        self.trace(id).await["trace"]["last_event_id"].as_u64().unwrap()
    }

    /// `GET /api/traces/{id}/messages?mode=MODE`.
    pub async fn messages(&self, id: &str, mode: &str) -> Value {
        self.get(&format!("/api/traces/{id}/messages?mode={mode}")).await.expect(200)
    }

    /// `POST /api/traces/{id}/run` with `body`; the answer, 200.
    pub async fn run(&self, id: &str, body: Value) -> Value {
        let reply = self.post(&format!("/api/traces/{id}/run"), body).await.expect(200);
        assert_eq!((reply["trace_id"].as_str(), &reply["status"]), (Some(id), &json!("started")));
        reply
    }

    /// Watches the trace's events after `since` until the next
    /// `trace_finished`, then until the server no longer counts the run as
    /// running; every frame received.
    pub async fn finish(&self, id: &str, since: u64) -> Vec<Value> {
        let mut watcher = self.watch(id, since).await;
        watcher.until_kind("trace_finished").await;
        self.settled(id).await;
        watcher.frames
    }

    /// Polls `GET /api/traces/{id}` until `running` is false.
    pub async fn settled(&self, id: &str) {
        let until = tokio::time::Instant::now() + WAIT;
        while self.trace(id).await["running"] != false {
            assert!(tokio::time::Instant::now() < until, "{id} still runs");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// The WebSocket URL of `path` (`?token=` is added by the caller).
    pub fn ws_url(&self, path: &str) -> String {
        format!("ws{}{path}", self.base.strip_prefix("http").unwrap())
    }

    /// Opens `/api/traces/{id}/watch?since=SINCE`, sending the token (if
    /// any) in the query.
    pub async fn watch(&self, id: &str, since: u64) -> Watcher {
        let mut path = format!("/api/traces/{id}/watch?since={since}");
        if let Some(token) = &self.token {
            path.push_str(&format!("&token={token}"));
        }
        self.connect(&path, None).await.unwrap_or_else(|e| panic!("watching {id}: {e}"))
    }

    /// Opens a WebSocket on `path`, with `bearer` as an Authorization header.
    pub async fn connect(
        &self,
        path: &str,
        bearer: Option<&str>,
    ) -> Result<Watcher, tungstenite::Error> {
        let mut request = self.ws_url(path).into_client_request()?;
        if let Some(token) = bearer {
            request
                .headers_mut()
                .insert("authorization", format!("Bearer {token}").parse().unwrap());
        }
        let (ws, _) = tokio::time::timeout(WAIT, tokio_tungstenite::connect_async(request))
            .await
            .expect("the WebSocket handshake did not end in time")?;
        Ok(Watcher { ws, frames: Vec::new() })
    }

    /// Polls `GET /api/approvals` until one is pending for `trace`; it.
    pub async fn pending_approval(&self, trace: &str) -> Value {
        let until = tokio::time::Instant::now() + WAIT;
        loop {
            let list = self.get("/api/approvals").await.expect(200);
            let found =
                list["approvals"].as_array().unwrap().iter().find(|a| a["trace_id"] == trace);
            if let Some(found) = found {
                return found.clone();
            }
            assert!(tokio::time::Instant::now() < until, "no approval for {trace} came");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// The status of a WebSocket handshake refused before the upgrade, and
/// the body.
pub fn refused(result: Result<Watcher, tungstenite::Error>) -> (u16, Value) {
    match result {
        Err(tungstenite::Error::Http(response)) => {
            let body = response.body().as_deref().unwrap_or_default();
            let body = serde_json::from_slice(body).unwrap_or_else(|e| {
                panic!("refusal body is not JSON ({e}): {}", String::from_utf8_lossy(body))
            });
            (response.status().as_u16(), body)
        }
        Err(other) => panic!("expected an HTTP refusal, got {other}"),
        Ok(_) => panic!("expected an HTTP refusal, the socket opened"),
    }
}

/// One WebSocket client of `/watch`, keeping every frame it read.
pub struct Watcher {
    pub ws: WebSocketStream<MaybeTlsStream<TcpStream>>,
    pub frames: Vec<Value>,
}

/// How a socket ended.
#[derive(Debug)]
pub enum End {
    /// A close frame, with its code.
    Closed(Option<CloseFrame>),
    /// The connection ended without one (or with an error).
    Dropped(String),
}

impl Watcher {
    /// The next JSON text frame; `Err` when the socket ends. Fails the test
    /// after [`WAIT`].
    pub async fn next(&mut self) -> Result<Value, End> {
        loop {
            let frame = tokio::time::timeout(WAIT, self.ws.next()).await;
            let frame = frame.unwrap_or_else(|_| {
                panic!("no frame in {WAIT:?}; the last ones: {:#?}", self.last_frames())
            });
            match frame {
                Some(Ok(Frame::Text(text))) => {
                    let value: Value = serde_json::from_str(&text)
                        .unwrap_or_else(|e| panic!("frame is not JSON ({e}): {text}"));
                    self.frames.push(value.clone());
                    return Ok(value);
                }
                Some(Ok(Frame::Close(frame))) => return Err(End::Closed(frame)),
                Some(Ok(Frame::Ping(_) | Frame::Pong(_))) => {}
                Some(Ok(other)) => panic!("unexpected frame {other:?}"),
                Some(Err(e)) => return Err(End::Dropped(e.to_string())),
                None => return Err(End::Dropped("end of stream".into())),
            }
        }
    }

    /// Reads until a frame satisfies `pred`; that frame.
    pub async fn until(&mut self, pred: impl Fn(&Value) -> bool) -> Value {
        loop {
            match self.next().await {
                Ok(frame) if pred(&frame) => return frame,
                Ok(_) => {}
                Err(end) => panic!("socket ended ({end:?}) after {:#?}", self.last_frames()),
            }
        }
    }

    /// Reads until a frame of `kind`; that frame.
    pub async fn until_kind(&mut self, kind: &str) -> Value {
        self.until(|f| f["kind"] == kind).await
    }

    /// Reads (and keeps) frames until the socket ends; how it ended.
    pub async fn end(&mut self) -> End {
        loop {
            match self.next().await {
                Ok(_) => {}
                Err(end) => return end,
            }
        }
    }

    /// Sends a text frame of `len` bytes.
    pub async fn send_text(&mut self, len: usize) -> Result<(), tungstenite::Error> {
        self.ws.send(Frame::text("x".repeat(len))).await
    }

    /// Closes the socket cleanly.
    pub async fn close(mut self) {
        let _ = self.ws.close(None).await;
    }

    /// The last few frames read, for failure messages.
    fn last_frames(&self) -> &[Value] {
        &self.frames[self.frames.len().saturating_sub(5)..]
    }

    /// The ids of the persisted events read so far.
    pub fn ids(&self) -> Vec<u64> {
        ids(&self.frames)
    }
}

/// The ids of the persisted events among `frames`, in order.
pub fn ids(frames: &[Value]) -> Vec<u64> {
    frames.iter().filter_map(|f| f.get("id").map(|id| id.as_u64().unwrap())).collect()
}

/// The persisted events among `frames`.
pub fn events(frames: &[Value]) -> Vec<Value> {
    frames.iter().filter(|f| f.get("id").is_some()).cloned().collect()
}

/// The `kind`s of `frames`, in order.
pub fn kinds(frames: &[Value]) -> Vec<String> {
    frames.iter().map(|f| f["kind"].as_str().unwrap().to_owned()).collect()
}

/// The lines of the trace's `events.jsonl`, as JSON.
pub fn events_file(traces: &Path, id: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(traces.join(id).join("events.jsonl")).unwrap();
    text.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// A directory and its config for [`load`]: each run asks `echo` once
/// after 300 ms of model time, then answers after 100 ms more, so nearly
/// all of a run's events are appended after its watchers subscribed.
pub fn load_dir() -> (TestDir, String) {
    let dir = dir_with(&["scripted", "echo"]);
    let slow_echo = json!({ "text": "echoing", "delay_ms": 300,
        "tool_calls": [{ "name": "echo", "arguments": { "text": "load" } }] });
    let script = set_script(dir.path(), json!([slow_echo, { "text": "done", "delay_ms": 100 }]));
    let toml = config(&format!(
        "[plugins.scripted]\ndirs = [{{ path = \".\", access = \"read\" }}]\n\
         config = {{ script = \"{}\" }}\n",
        script.display()
    ));
    (dir, toml)
}

/// What [`load`] saw.
pub struct Load {
    /// Persisted events delivered, over all watchers.
    pub events: usize,
    /// Live-only frames (deltas) delivered, over all watchers.
    pub live_frames: usize,
    /// Delivery latency of each event appended after its watcher's socket
    /// opened, in ms: the receive time minus the event's `at_ms`.
    pub latencies_ms: Vec<f64>,
    /// From the first request to the last watcher's `trace_finished`.
    pub took: Duration,
}

/// Milliseconds since the Unix epoch, the clock of `at_ms`.
fn epoch_ms() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs_f64() * 1000.0
}

/// Starts `runs` runs at once over `api` (a [`load_dir`] server), each
/// watched from event 0 by `per_run` WebSockets opened as soon as its id
/// is known. Asserts that every run completes and that every watcher got
/// each event id from 1 to its trace's last exactly once, in order.
///
/// Latency is the receive time minus `at_ms`, the wall-clock stamp the
/// runner gives an event as it appends it: client and server share this
/// machine's clock, and `at_ms` is truncated to the millisecond, so a
/// figure is at most 1 ms above the true one. Events appended before the
/// socket opened are a catch-up read, not a delivery, and are left out.
pub async fn load(api: &Api, runs: usize, per_run: usize) -> Load {
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for run in 0..runs {
        let api = api.clone();
        tasks.spawn(async move {
            let id = api.start(&format!("load {run}"), json!({})).await;
            let watchers = (0..per_run).map(|_| async {
                let mut watcher = api.watch(&id, 0).await;
                let opened = epoch_ms();
                let mut latencies = Vec::new();
                loop {
                    let frame = watcher.next().await.unwrap_or_else(|end| {
                        panic!("{id}: the socket ended ({end:?}) before trace_finished")
                    });
                    if let Some(at) = frame.get("at_ms").and_then(Value::as_u64) {
                        let received = epoch_ms();
                        if at as f64 > opened {
                            latencies.push(received - at as f64);
                        }
                    }
                    if frame["kind"] == "trace_finished" {
                        assert_eq!(frame["status"], "completed", "{id}: {frame}");
                        break;
                    }
                }
                (watcher, latencies)
            });
            let watchers = futures::future::join_all(watchers).await;
            let last = api.last_event(&id).await;
            let mut seen = (0, 0, Vec::new());
            for (watcher, latencies) in watchers {
                let ids = watcher.ids();
                assert_eq!(ids, (1..=last).collect::<Vec<_>>(), "{id}: a gap or a duplicate");
                seen.0 += ids.len();
                seen.1 += watcher.frames.len() - ids.len();
                seen.2.extend(latencies);
                watcher.close().await;
            }
            seen
        });
    }
    let mut load =
        Load { events: 0, live_frames: 0, latencies_ms: Vec::new(), took: Duration::ZERO };
    while let Some(done) = tasks.join_next().await {
        let (events, live, latencies) = done.expect("a run's watchers failed");
        load.events += events;
        load.live_frames += live;
        load.latencies_ms.extend(latencies);
    }
    load.took = started.elapsed();
    load.latencies_ms.sort_by(f64::total_cmp);
    load
}

impl Load {
    /// The `p`th percentile latency, in ms.
    pub fn percentile(&self, p: usize) -> f64 {
        let sorted = &self.latencies_ms;
        assert!(!sorted.is_empty(), "no event was delivered live");
        sorted[(sorted.len() * p / 100).min(sorted.len() - 1)]
    }
}
