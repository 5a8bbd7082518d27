//! MCP both ways, against MCP implementations nobody here wrote: the
//! official Python SDK as a client of `reson mcp serve` (stdio and HTTP)
//! and as a server whose tools Reson calls (MCPServer, FastMCP's successor),
//! and the inspector CLI from npm. Each misbehaviour of a hostile MCP server
//! is a test of its own. And what a web page elsewhere could send to
//! `reson mcp serve --http` through the user's browser, as raw requests
//! with forged `Origin` and `Host` headers (issue 21).

use crate::support;

// The stateless revision (2026-07-28), both ways.
#[path = "mcp/stateless.rs"]
mod stateless;

use reson::agent::{AgentEvent, Hooks, PendingApprovals, Permissions, RunConfig, Runner};
use reson::config::Config;
use reson::mcp::client::{McpTools, Status};
use reson::plugin::CallContext;
use reson::provider::PluginProvider;
use reson::tools::ToolRegistry;
use reson::trace::{Durability, FileTraceStore, Message, Role, TraceStore};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::TestDir;

const RESON: &str = env!("CARGO_BIN_EXE_reson");

// ---------------------------------------------------------------- serving

/// A secret the served config holds: it never leaves over MCP.
const SECRET: &str = "mcp-test-secret-9f8e7d6c5b4a";

/// A plugins dir with `echo` and the hostile guest's `spin`, `count` and
/// `env`, and a config the `reson` binary reads: echo and spin allowed,
/// count asks, env denied outright.
fn served_dir() -> TestDir {
    let dir = TestDir::new();
    dir.install(support::plugins(), "echo").install(support::test_plugins(), "hostile");
    let config = format!(
        r#"
plugins_dir = "plugins"
lock_file = "reson.lock"
cache_dir = "{cache}"

[permissions]
default = "ask"
approval_timeout_ms = 10000
rules = [
  {{ decision = "allow", tool = "{{echo,spin}}" }},
  {{ decision = "deny", tool = "env" }},
]

[plugins.hostile]
tools = ["spin", "count", "env"]
limits = {{ timeout_ms = 300 }}

[secrets]
MCP_TEST_SECRET = "{SECRET}"
"#,
        cache = support::cache_dir().display()
    );
    std::fs::write(dir.path().join("reson.toml"), config).unwrap();
    dir
}

/// The Python SDK's client (tests/mcp/client.py), driven line by line.
struct PyClient {
    _child: Killed,
    input: ChildStdin,
    output: BufReader<ChildStdout>,
}

impl PyClient {
    /// Connects over stdio to `reson mcp serve` in `dir`.
    fn stdio(dir: &TestDir, elicit: &str) -> Self {
        let config = dir.path().join("reson.toml");
        let config = config.to_str().unwrap();
        Self::start(&["--elicit", elicit, "--", RESON, "--config", config, "mcp", "serve"])
    }

    /// Connects to the streamable HTTP endpoint at `url`.
    fn http(url: &str, token: Option<&str>) -> Self {
        let mut args = vec!["--http", url];
        if let Some(token) = token {
            args.extend(["--token", token]);
        }
        Self::start(&args)
    }

    fn start(args: &[&str]) -> Self {
        let mut child = Command::new(support::mcp::python())
            .arg(support::mcp::script("client.py"))
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("starting the Python MCP client");
        let input = child.stdin.take().unwrap();
        let output = BufReader::new(child.stdout.take().unwrap());
        let mut client = Self { _child: Killed(child), input, output };
        assert_eq!(client.read(), json!({ "ready": true }), "the client connected");
        client
    }

    fn read(&mut self) -> Value {
        let mut line = String::new();
        self.output.read_line(&mut line).unwrap();
        assert!(!line.is_empty(), "the Python client ended early (see its stderr above)");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("client said {line:?}: {e}"))
    }

    fn send(&mut self, command: Value) -> Value {
        writeln!(self.input, "{command}").unwrap();
        self.read()
    }

    fn list(&mut self) -> Vec<Value> {
        self.send(json!({ "op": "list" }))["tools"].as_array().unwrap().clone()
    }

    fn names(&mut self) -> Vec<String> {
        self.list().iter().map(|t| t["name"].as_str().unwrap().to_owned()).collect()
    }

    fn call(&mut self, name: &str, args: Value) -> Value {
        self.send(json!({ "op": "call", "name": name, "args": args }))
    }
}

/// Replaces `echo.wasm` with the v2 build (a new description and output)
/// the way an editor saves: write beside, then rename.
fn replace_echo(dir: &TestDir) {
    let v2 = std::fs::read(support::test_plugins().join("echo-v2.wasm")).unwrap();
    let tmp = dir.plugins().join(".echo.wasm.tmp");
    std::fs::write(&tmp, v2).unwrap();
    std::fs::rename(tmp, dir.plugins().join("echo.wasm")).unwrap();
}

/// What every client sees, whichever transport: the offered tools with
/// descriptions and schemas, results, a schema failure, a denied call, a
/// limit, and list_changed after a plugin is replaced.
fn serves_through_the_rules(client: &mut PyClient, dir: &TestDir) {
    let tools = client.list();
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["count", "echo", "spin"], "env is denied outright, goal is a run's own");
    let echo = &tools[1];
    assert_eq!(echo["description"], "Returns the given text unchanged.");
    assert_eq!(echo["inputSchema"]["properties"]["text"]["type"], "string");

    let hi = client.call("echo", json!({ "text": "hi" }));
    assert_eq!(hi, json!({ "isError": false, "text": "hi", "structured": null }));
    let object = client.call("echo", json!({ "text": "{\"a\":1}" }));
    assert_eq!(object["structured"], json!({ "a": 1 }), "a JSON object result is structured too");

    let leak = client.call("echo", json!({ "text": format!("key {SECRET}") }));
    assert_eq!(leak["text"], "key [REDACTED]", "results pass the redaction point");

    let invalid = client.call("echo", json!({ "txt": "hi" }));
    assert_eq!(invalid["isError"], true);
    assert!(invalid["text"].as_str().unwrap().contains("invalid arguments"), "{invalid}");

    let denied = client.call("env", json!({}));
    assert!(denied["error"].as_str().unwrap().contains("unknown tool `env`"), "{denied}");

    let started = Instant::now();
    let spin = client.call("spin", json!({}));
    assert_eq!(spin["isError"], true);
    assert!(spin["text"].as_str().unwrap().contains("time limit of 300 ms"), "{spin}");
    assert!(started.elapsed() < Duration::from_millis(300) + support::MARGIN);

    replace_echo(dir);
    assert_eq!(
        client.send(json!({ "op": "wait_list_changed", "secs": 20 })),
        json!({ "changed": true })
    );
    let tools = client.list();
    assert_eq!(tools[1]["description"], "Returns the given text prefixed with `v2:`.");
    assert_eq!(client.call("echo", json!({ "text": "hi" }))["text"], "v2:hi");
}

#[test]
fn the_python_sdk_uses_reson_over_stdio() {
    let dir = served_dir();
    let mut client = PyClient::stdio(&dir, "none");
    serves_through_the_rules(&mut client, &dir);
}

#[test]
fn an_ask_without_elicitation_is_denied_and_says_why() {
    let dir = served_dir();
    let mut client = PyClient::stdio(&dir, "none");
    let count = client.call("count", json!({}));
    assert_eq!(count["isError"], true);
    let text = count["text"].as_str().unwrap();
    assert!(text.contains("needs approval") && text.contains("elicitation"), "{text}");
}

#[test]
fn an_ask_becomes_an_elicitation() {
    let dir = served_dir();
    let mut yes = PyClient::stdio(&dir, "accept");
    assert_eq!(
        yes.call("count", json!({})),
        json!({ "isError": false, "text": "1", "structured": null })
    );
    let mut no = PyClient::stdio(&dir, "decline");
    let denied = no.call("count", json!({}));
    assert_eq!(denied["isError"], true);
    assert!(denied["text"].as_str().unwrap().contains("the user denied"), "{denied}");
}

/// `reson mcp serve --http`, its address read from its first line.
struct HttpServer {
    _child: Killed,
    url: String,
}

impl HttpServer {
    fn start(dir: &TestDir, addr: &str, token: Option<&str>) -> Result<Self, String> {
        Self::start_with(dir, addr, token, &[])
    }

    /// With `args` after `--http ADDR`.
    fn start_with(
        dir: &TestDir,
        addr: &str,
        token: Option<&str>,
        args: &[&str],
    ) -> Result<Self, String> {
        let mut command = Command::new(RESON);
        command
            .arg("--config")
            .arg(dir.path().join("reson.toml"))
            .args(["mcp", "serve", "--http", addr])
            .args(args)
            .env_remove("RESON_MCP_TOKEN")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(token) = token {
            command.env("RESON_MCP_TOKEN", token);
        }
        let mut child = command.spawn().unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let Some(url) = line.trim().strip_prefix("serving MCP on ") else {
            let mut err = String::new();
            std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
            let _ = child.wait();
            return Err(err);
        };
        Ok(Self { url: url.to_owned(), _child: Killed(child) })
    }
}

#[test]
fn the_python_sdk_uses_reson_over_streamable_http() {
    let dir = served_dir();
    let server = HttpServer::start(&dir, "127.0.0.1:0", None).unwrap();
    let mut client = PyClient::http(&server.url, None);
    serves_through_the_rules(&mut client, &dir);
}

/// The TypeScript SDK's client on 2025-11-25, with a session, is told of
/// a new build of a plugin whose tool list reads the same as before (only
/// its code, here its manifest, changed): what it calls is new even when
/// what it lists is not.
#[test]
fn the_typescript_sdk_hears_list_changed_when_a_plugin_is_rebuilt() {
    let dir = served_dir();
    let server = HttpServer::start(&dir, "127.0.0.1:0", None).unwrap();
    let sdk = support::mcp::inspector().join("../sdk");
    let mut child = Command::new("node")
        .arg(support::mcp::script("ts_client.mjs"))
        .arg(&sdk)
        .arg(&server.url)
        .arg("60")
        .stdout(Stdio::piped())
        .spawn()
        .expect("starting the TypeScript MCP client");
    let mut output = BufReader::new(child.stdout.take().unwrap());
    let _child = Killed(child);
    let mut read = || {
        let mut line = String::new();
        output.read_line(&mut line).unwrap();
        assert!(!line.is_empty(), "the TypeScript client ended early (see its stderr above)");
        serde_json::from_str::<Value>(&line).unwrap_or_else(|e| panic!("{line:?}: {e}"))
    };
    let ready = read();
    assert_eq!(ready["protocol"], "2025-11-25", "{ready}");
    assert!(ready["session"].is_string(), "a session: {ready}");
    assert_eq!(ready["tools"], json!(["count", "echo", "spin"]));

    // The same component, a new manifest version: a new generation with
    // the very same tool list.
    let manifest = dir.plugins().join("echo.toml");
    let text = std::fs::read_to_string(&manifest).unwrap().replace("0.1.0", "0.1.1");
    support::replace(text.as_bytes(), &manifest);
    let after = read();
    assert_eq!(after["changed"], true, "no list_changed within 60 s: {after}");
    assert_eq!(after["tools"], json!(["count", "echo", "spin"]));
    assert_eq!(after["echo"], "hi");
}

#[test]
fn http_beyond_loopback_needs_a_bearer_token() {
    let dir = served_dir();
    let err = HttpServer::start(&dir, "0.0.0.0:0", None).err().expect("refused without a token");
    assert!(err.contains("needs a bearer token"), "{err}");

    let token = "s3cret-token-for-mcp-tests";
    let server = HttpServer::start(&dir, "0.0.0.0:0", Some(token)).unwrap();
    let port = server.url.rsplit(':').next().unwrap().trim_end_matches("/mcp");
    let url = format!("http://127.0.0.1:{port}/mcp");
    let status = tokio::runtime::Runtime::new().unwrap().block_on(async {
        let body = json!({ "jsonrpc": "2.0", "id": 1, "method": "ping" });
        let post = reqwest::Client::new()
            .post(&url)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .body(body.to_string());
        post.send().await.unwrap().status()
    });
    assert_eq!(status, 401, "a request without the token is turned away");
    let mut client = PyClient::http(&url, Some(token));
    assert_eq!(client.names(), ["count", "echo", "spin"]);
}

/// An `initialize` as written on the wire, sent to `addr` with `Host:
/// host`, `Origin: origin` when given, and the body typed `content_type`.
/// The status, the head and as much body as came with it (all of it when
/// its length is declared).
fn initialize(
    addr: &str,
    host: &str,
    origin: Option<&str>,
    content_type: &str,
) -> (u16, String, String) {
    use std::io::Read;
    let body = json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": { "name": "a-page", "version": "1" } } })
    .to_string();
    let origin = origin.map(|o| format!("Origin: {o}\r\n")).unwrap_or_default();
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {host}\r\n{origin}Accept: application/json, text/event-stream\r\n\
         Content-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let mut socket = std::net::TcpStream::connect(addr).unwrap();
    socket.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    socket.write_all(request.as_bytes()).unwrap();
    let mut read = Vec::new();
    loop {
        let mut chunk = [0u8; 4096];
        let n = socket.read(&mut chunk).expect("an answer within 30 s");
        read.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&read).into_owned();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length = head.lines().find_map(|l| {
                let l = l.to_ascii_lowercase();
                l.strip_prefix("content-length:").map(|v| v.trim().parse::<usize>().unwrap())
            });
            // A stream (the answer of an accepted initialize) is not read.
            if n == 0 || length.is_none_or(|len| body.len() >= len) {
                let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
                return (status, head.to_owned(), body.to_owned());
            }
        }
        assert!(n > 0, "the connection closed before an answer: {text:?}");
    }
}

#[test]
fn a_page_elsewhere_cannot_initialize_and_a_rebound_name_is_refused() {
    let dir = served_dir();
    let any = HttpServer::start_with(&dir, "127.0.0.1:0", None, &["--allowed-origin", "*"]);
    let err = any.err().expect("any origin without a token is refused");
    assert!(err.contains("needs a token"), "{err}");
    let allow = ["--allowed-origin", "http://app.example:3000", "--allowed-host", "mcp.example"];
    let server = HttpServer::start_with(&dir, "127.0.0.1:0", None, &allow).unwrap();
    let addr = server.url.trim_start_matches("http://").trim_end_matches("/mcp").to_owned();
    let port = addr.rsplit(':').next().unwrap().to_owned();
    let rebound = format!("evil.example:{port}");
    let json = "application/json";

    let refused = [
        (addr.clone(), Some("http://evil.example".to_owned()), json, 403, "forbidden"),
        (addr.clone(), Some("null".to_owned()), json, 403, "forbidden"),
        (addr.clone(), Some("http://127.0.0.1:1".to_owned()), json, 403, "forbidden"),
        (rebound.clone(), None, json, 421, "misdirected_request"),
        (rebound.clone(), Some(format!("http://{rebound}")), json, 421, "misdirected_request"),
        (addr.clone(), None, "text/plain", 415, "unsupported_media_type"),
        (addr.clone(), Some(format!("http://{addr}")), "text/plain", 415, "unsupported_media_type"),
    ];
    for (host, origin, kind, status, code) in refused {
        let (got, head, body) = initialize(&addr, &host, origin.as_deref(), kind);
        assert_eq!(got, status, "{host} {origin:?} {kind}: {head}\n{body}");
        assert!(!head.to_ascii_lowercase().contains("mcp-session-id"), "no session: {head}");
        let body: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(body["error"]["code"], code, "{body}");
    }

    // The server's own origin, the allowed origin and name, and clients
    // without `Origin` start a session.
    let localhost = format!("localhost:{port}");
    let alias = format!("mcp.example:{port}");
    let accepted = [
        (addr.clone(), None),
        (addr.clone(), Some(format!("http://{addr}"))),
        (addr.clone(), Some("http://app.example:3000".to_owned())),
        (localhost.clone(), Some(format!("http://{localhost}"))),
        (alias.clone(), Some(format!("http://{alias}"))),
    ];
    for (host, origin) in accepted {
        let (status, head, body) = initialize(&addr, &host, origin.as_deref(), json);
        assert_eq!(status, 200, "{host} {origin:?}: {head}\n{body}");
        assert!(head.to_ascii_lowercase().contains("mcp-session-id"), "{head}");
    }
}

/// `reson mcp serve` over stdio, spoken to line by line. Its answers are
/// read on a thread, so one that never comes fails the test instead of
/// hanging it.
struct StdioServer {
    _child: Killed,
    input: ChildStdin,
    answers: std::sync::mpsc::Receiver<String>,
}

impl StdioServer {
    fn start(dir: &TestDir) -> Self {
        let mut child = Command::new(RESON)
            .arg("--config")
            .arg(dir.path().join("reson.toml"))
            .args(["mcp", "serve"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let input = child.stdin.take().unwrap();
        let output = BufReader::new(child.stdout.take().unwrap());
        let (sender, answers) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in output.lines().map_while(Result::ok) {
                if sender.send(line).is_err() {
                    break;
                }
            }
        });
        Self { _child: Killed(child), input, answers }
    }

    fn send(&mut self, line: &str) {
        self.input.write_all(line.as_bytes()).unwrap();
        self.input.write_all(b"\n").unwrap();
        self.input.flush().unwrap();
    }

    /// The next response or error, past the server's own requests and
    /// notifications.
    fn answer(&mut self) -> Value {
        loop {
            let line = self.answers.recv_timeout(Duration::from_secs(60));
            let line = line.expect("no answer within 60 s");
            let message: Value = serde_json::from_str(&line).unwrap();
            if message.get("method").is_none() {
                return message;
            }
        }
    }
}

#[test]
fn a_stdio_line_over_the_limit_is_answered_with_an_error() {
    let dir = served_dir();
    let mut server = StdioServer::start(&dir);
    server.send(
        &json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": { "name": "stdio-test", "version": "1" } } })
        .to_string(),
    );
    assert_eq!(server.answer()["id"], 1);
    server.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);

    // Arguments that take a call past the 16 MiB a line may hold.
    let big = "x".repeat(17 << 20);
    let call = |text: &str| format!(r#"{{"name":"echo","arguments":{{"text":"{text}"}}}}"#);
    server.send(&format!(
        r#"{{"jsonrpc":"2.0","id":42,"method":"tools/call","params":{}}}"#,
        call(&big)
    ));
    let answer = server.answer();
    assert_eq!((&answer["id"], &answer["error"]["code"]), (&json!(42), &json!(-32600)), "{answer}");
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(message.contains("over the limit of 16777216 bytes"), "{message}");

    // An id after the arguments is past what is read of the line: null.
    server.send(&format!(
        r#"{{"jsonrpc":"2.0","method":"tools/call","params":{},"id":43}}"#,
        call(&big)
    ));
    let answer = server.answer();
    assert!(answer.get("id").is_some_and(Value::is_null), "{answer}");
    assert_eq!(answer["error"]["code"], -32600);

    // The session goes on.
    server.send(&format!(
        r#"{{"jsonrpc":"2.0","id":44,"method":"tools/call","params":{}}}"#,
        call("still here")
    ));
    let answer = server.answer();
    assert_eq!(answer["id"], 44, "{answer}");
    assert_eq!(answer["result"]["content"][0]["text"], "still here", "{answer}");
}

#[test]
fn the_inspector_cli_lists_and_calls_resons_tools() {
    let dir = served_dir();
    let inspector = support::mcp::inspector();
    let run = |extra: &[&str]| {
        // It reads `../package.json` from its working directory.
        let out = Command::new("node")
            .current_dir(inspector.join("build"))
            .arg("cli.js")
            .arg("--cli")
            .arg("-e")
            .arg(format!("RESON_CONFIG={}", dir.path().join("reson.toml").display()))
            .args([RESON, "mcp", "serve"])
            .args(extra)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
        let start = stdout.find('{').expect("JSON on stdout");
        serde_json::from_str::<Value>(&stdout[start..]).unwrap()
    };
    let listed = run(&["--method", "tools/list"]);
    let names: Vec<&str> =
        listed["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["count", "echo", "spin"]);
    let called =
        run(&["--method", "tools/call", "--tool-name", "echo", "--tool-arg", "text=hello"]);
    assert_eq!(called["content"][0]["text"], "hello");
    assert_ne!(called["isError"], true);
}

/// The conformance suite (server mode) against `reson mcp serve --http`:
/// every scenario Reson can pass passes, and the rest are the listed
/// expected failures (tests/mcp/conformance-expected-failures.yaml says
/// why). Release 0.1.16 has scenarios up to 2025-11-25 only; 2026-07-28 is
/// checked on the wire by `stateless`.
#[test]
fn the_conformance_suite_passes_but_for_the_listed_fixtures() {
    let dir = served_dir();
    let server = HttpServer::start(&dir, "127.0.0.1:0", None).unwrap();
    let (node, suite) = support::mcp::conformance();
    let results = dir.path().join("conformance");
    let out = Command::new(node)
        .arg(suite)
        .args(["server", "--url", &server.url, "--expected-failures"])
        .arg(support::mcp::script("conformance-expected-failures.yaml"))
        .arg("-o")
        .arg(&results)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("Baseline check passed"), "{stdout}");
    for passing in ["server-initialize", "ping", "tools-list", "dns-rebinding-protection"] {
        assert!(stdout.contains(&format!("✓ {passing}:")), "{passing} passes: {stdout}");
    }
}

// ------------------------------------------------------ MCP servers as tools

/// A config whose `[mcp.hostile]` runs tests/mcp/hostile_server.py with
/// `args` after the script, plus `extra` lines in that table.
fn hostile_config(dir: &TestDir, args: &[&str], extra: &str) -> Config {
    let mut argv = vec![
        support::mcp::python().display().to_string(),
        support::mcp::script("hostile_server.py").display().to_string(),
    ];
    argv.extend(args.iter().map(|a| a.to_string()));
    dir.config(&format!(
        "[permissions]\ndefault = \"allow\"\n[mcp.hostile]\ncommand = {}\n{extra}\n",
        serde_json::to_string(&argv).unwrap()
    ))
}

async fn started(config: &Config) -> McpTools {
    let mcp = McpTools::start(&config.mcp, &config.plugins);
    mcp.settled(Duration::from_secs(60)).await;
    mcp
}

async fn call(mcp: &McpTools, name: &str, args: Value) -> reson::tools::ToolResult {
    mcp.call(name, &args.to_string(), &CallContext::default()).await.expect("an MCP tool")
}

fn status(mcp: &McpTools) -> Status {
    mcp.servers()[0].status.clone()
}

/// Waits for the server's status to satisfy `ok`, on its change events.
async fn until(mcp: &McpTools, ok: impl Fn(&Status) -> bool) {
    let mut changes = mcp.changes();
    tokio::time::timeout(Duration::from_secs(60), async {
        while !ok(&status(mcp)) {
            changes.changed().await.unwrap();
        }
    })
    .await
    .unwrap_or_else(|_| panic!("status stayed {:?}", status(mcp)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_servers_tools_are_namespaced_and_never_take_a_name() {
    let dir = TestDir::new();
    dir.install(support::plugins(), "echo");
    let config = hostile_config(&dir, &[], "");
    let mut options = dir.options("");
    options.config = config.plugins.clone();
    let runtime = reson::plugin::Runtime::open(options).await.unwrap();
    let mcp = started(&config).await;
    assert_eq!(status(&mcp), Status::Ready);
    let registry = ToolRegistry::new(runtime).with_source(Arc::new(mcp.clone()));
    let names: Vec<String> = registry.specs().into_iter().map(|t| t.name).collect();
    assert_eq!(names.iter().filter(|n| *n == "goal").count(), 1, "{names:?}");
    assert!(names.contains(&"echo".to_owned()) && names.contains(&"hostile__goal".to_owned()));
    assert!(!names.iter().any(|n| n.contains("bad")), "{names:?}");
    let refused = &mcp.servers()[0].refused;
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert!(refused[0].reason.contains("not 1-128 letters"), "{refused:?}");

    let echo = |text: &str| reson::trace::ToolCall {
        id: "1".into(),
        name: "echo".into(),
        arguments: json!({ "text": text }).to_string(),
    };
    let out = registry.call(&echo("plugin"), &CallContext::default()).await;
    assert_eq!(out.text, "plugin", "the plugin still answers `echo`");
    let goal = registry.specs().into_iter().find(|t| t.name == "goal").unwrap();
    assert_eq!(goal.plugin, "builtin", "the built-in keeps `goal`");
    assert_eq!(call(&mcp, "hostile__echo", json!({ "text": "remote" })).await.text, "remote");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_output_from_an_mcp_server_hits_the_output_cap() {
    let dir = TestDir::new();
    let mcp = started(&hostile_config(&dir, &[], "output_bytes = 100000")).await;
    let out = call(&mcp, "hostile__huge", json!({ "size": 4_000_000 })).await;
    assert!(!out.ok);
    assert!(
        out.text.contains("output limit of 100000 bytes"),
        "{}",
        &out.text[..200.min(out.text.len())]
    );
    assert_eq!(call(&mcp, "hostile__huge", json!({ "size": 10 })).await.text, "xxxxxxxxxx");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_mcp_tool_times_out_and_the_server_keeps_serving() {
    let dir = TestDir::new();
    let mcp = started(&hostile_config(&dir, &[], "timeout_ms = 1000")).await;
    let started = Instant::now();
    let out = call(&mcp, "hostile__hang", json!({})).await;
    assert!(out.text.contains("time limit of 1000 ms"), "{}", out.text);
    assert!(started.elapsed() < Duration::from_millis(1000) + support::MARGIN);
    assert_eq!(
        call(&mcp, "hostile__echo", json!({ "text": "still here" })).await.text,
        "still here"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_hangs_at_start_is_down_and_says_so() {
    let dir = TestDir::new();
    let mcp = started(&hostile_config(&dir, &["hang-at-start"], "start_timeout_ms = 1000")).await;
    until(&mcp, |s| matches!(s, Status::Down { .. })).await;
    let Status::Down { error, .. } = status(&mcp) else { unreachable!() };
    assert!(error.contains("did not start"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_dies_mid_call_fails_clearly_and_is_restarted() {
    let dir = TestDir::new();
    let mcp = started(&hostile_config(&dir, &[], "")).await;
    let first_pid = call(&mcp, "hostile__pid", json!({})).await.text;
    let died = call(&mcp, "hostile__die", json!({})).await;
    assert!(!died.ok);
    assert!(died.text.contains("MCP server `hostile`"), "{}", died.text);
    until(&mcp, |s| *s != Status::Ready).await;
    let meanwhile = call(&mcp, "hostile__echo", json!({ "text": "x" })).await;
    assert!(!meanwhile.ok && meanwhile.text.contains("cannot take calls"), "{}", meanwhile.text);
    until(&mcp, |s| *s == Status::Ready).await;
    let second_pid = call(&mcp, "hostile__pid", json!({})).await.text;
    assert_ne!(first_pid, second_pid, "a new process serves");
    assert_eq!(call(&mcp, "hostile__echo", json!({ "text": "back" })).await.text, "back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_server_gets_only_the_listed_environment() {
    let dir = TestDir::new();
    let mcp = started(&hostile_config(&dir, &[], "env = [\"CARGO_MANIFEST_DIR\"]")).await;
    let names: Vec<String> =
        serde_json::from_str(&call(&mcp, "hostile__env", json!({})).await.text).unwrap();
    assert!(names.contains(&"CARGO_MANIFEST_DIR".to_owned()), "{names:?}");
    // Python sets LC_CTYPE itself when it finds the C locale.
    assert!(names.iter().all(|n| n == "CARGO_MANIFEST_DIR" || n == "LC_CTYPE"), "{names:?}");
}

/// The grants a jailed hostile server needs to run at all: the venv, the
/// interpreter it links to, and the script, read-only.
fn interpreter_dirs() -> String {
    let venv = support::mcp::python().parent().unwrap().parent().unwrap().to_path_buf();
    let real = support::mcp::python().canonicalize().unwrap();
    let prefix = real.parent().unwrap().parent().unwrap().to_path_buf();
    let scripts = support::mcp::script("hostile_server.py").parent().unwrap().to_path_buf();
    [venv, prefix, scripts]
        .iter()
        .map(|d| format!("{{ path = {:?}, access = \"read\" }}", d.display().to_string()))
        .collect::<Vec<_>>()
        .join(", ")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_server_with_grants_runs_jailed_and_one_without_says_it_is_not() {
    let dir = TestDir::new();
    std::fs::create_dir_all(dir.path().join("outside")).unwrap();
    let secret = dir.path().join("outside/secret.txt");
    std::fs::write(&secret, "mcp-jail-secret").unwrap();
    let ws = dir.workspace().canonicalize().unwrap();
    let extra = format!(
        "dirs = [{}, {{ path = \"workspace\", access = \"read-write\" }}]",
        interpreter_dirs()
    );
    let mcp = started(&hostile_config(&dir, &[], &extra)).await;
    assert_eq!(status(&mcp), Status::Ready, "the jailed server starts");
    let info = &mcp.servers()[0];
    assert!(info.confinement.starts_with("jailed:"), "{}", info.confinement);
    let peek = |path: &std::path::Path| json!({ "path": path });
    let read = call(&mcp, "hostile__peek", peek(&secret)).await.text;
    assert!(read.starts_with("error:") && !read.contains("mcp-jail-secret"), "{read}");
    let home = std::env::var("HOME").unwrap();
    let bashrc = std::path::Path::new(&home).join(".bashrc");
    let read = call(&mcp, "hostile__peek", peek(&bashrc)).await.text;
    assert!(read.starts_with("error:"), "$HOME is out of reach: {read}");
    let planted = |path: &std::path::Path| json!({ "path": path, "text": "x" });
    let out = call(&mcp, "hostile__plant", planted(&ws.join("ok.txt"))).await.text;
    assert_eq!(out, "written");
    assert!(ws.join("ok.txt").exists());
    let escape = dir.path().join("outside/planted.txt");
    let out = call(&mcp, "hostile__plant", planted(&escape)).await.text;
    assert!(out.starts_with("error:") && !escape.exists(), "{out}");
    let pid: u32 = call(&mcp, "hostile__pid", json!({})).await.text.parse().unwrap();
    assert!(pid < 10, "the server sees its own PID namespace: pid {pid}");

    let open = TestDir::new();
    let mcp = started(&hostile_config(&open, &[], "")).await;
    let info = &mcp.servers()[0];
    assert!(info.confinement.starts_with("unjailed"), "{}", info.confinement);
    let read = call(&mcp, "hostile__peek", peek(&secret)).await.text;
    assert_eq!(read, "mcp-jail-secret", "an unjailed server has the host's rights");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_mcp_server_is_reached_at_its_url() {
    // Port 0: a port picked here and bound by the server later could be
    // another test's by then.
    let mut server = Killed(
        Command::new(support::mcp::python())
            .arg(support::mcp::script("hostile_server.py"))
            .args(["http", "0"])
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    // uvicorn says when it listens, and on which port.
    let mut stderr = BufReader::new(server.0.stderr.take().unwrap());
    let mut line = String::new();
    let port = loop {
        line.clear();
        assert!(stderr.read_line(&mut line).unwrap() > 0, "the server ended");
        if let Some((_, rest)) = line.split_once("running on http://127.0.0.1:") {
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            break digits.parse::<u16>().unwrap();
        }
    };
    let dir = TestDir::new();
    let config = dir.config(&format!("[mcp.web]\nurl = \"http://127.0.0.1:{port}/mcp\"\n"));
    let mcp = started(&config).await;
    assert_eq!(status(&mcp), Status::Ready);
    let sum = call(&mcp, "web__add", json!({ "a": 2, "b": 3 })).await.text;
    assert_eq!(serde_json::from_str::<Value>(&sum).unwrap(), json!({ "sum": 5 }));
}

/// A child process killed when the test ends, passed or not.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn bad_mcp_config_is_refused_with_the_fix() {
    for (toml, expected) in [
        ("[mcp.a__b]\ncommand = [\"x\"]", "without `__`"),
        ("[mcp.x]\ncommand = [\"x\"]\nurl = \"http://127.0.0.1/\"", "exactly one of"),
        ("[mcp.x]\nurl = \"file:///etc/passwd\"", "http or https"),
        ("[mcp.x]\ncommand = []", "names no program"),
        ("[mcp.x]\ncommand = [\"x\"]\nenv = [\"A=b\"]", "variable names"),
        ("[mcp.x]\ncommand = [\"x\"]\nnetwork = [\"crates.io\"]", "not `host:port`"),
        ("[mcp.x]\nurl = \"http://127.0.0.1/\"\njail = true", "an HTTP server has none"),
    ] {
        let err = Config::parse(toml).err().unwrap_or_else(|| panic!("{toml} parsed"));
        assert!(err.contains(expected), "{toml}: {err}");
    }
}

/// The rules decide MCP tools as they do plugin tools, whatever a tool's
/// description tells the model.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scripted_run_calls_mcp_tools_through_the_rules() {
    let dir = TestDir::new();
    dir.install(support::plugins(), "scripted");
    let script = json!({ "turns": [
        { "tool_calls": [
            { "name": "hostile__add", "arguments": { "a": 2, "b": 40 } },
            { "name": "hostile__wipe", "arguments": { "path": "/" } } ] },
        { "text": "done" }
    ]});
    let script_path = dir.path().join("script.json");
    std::fs::write(&script_path, script.to_string()).unwrap();
    let argv = [
        support::mcp::python().display().to_string(),
        support::mcp::script("hostile_server.py").display().to_string(),
    ];
    let toml = format!(
        r#"
[permissions]
default = "ask"
rules = [{{ decision = "allow", tool = "hostile__add" }}]
[plugins.scripted]
dirs = [{{ path = ".", access = "read" }}]
config = {{ script = "{}" }}
[mcp.hostile]
command = {}
"#,
        script_path.display(),
        serde_json::to_string(&argv).unwrap()
    );
    let runtime = dir.open(&toml).await;
    let config = dir.config(&toml);
    let mcp = started(&config).await;
    let wipe = mcp.specs().into_iter().find(|t| t.name == "hostile__wipe").unwrap();
    assert!(wipe.description.starts_with("[from MCP server `hostile`] "), "{}", wipe.description);
    assert!(!wipe.description.contains('\u{1b}'), "escapes are escaped: {}", wipe.description);

    let store =
        Arc::new(FileTraceStore::open(dir.path().join("traces"), Durability::Batched).unwrap());
    let (_, rules) = config.preset("default").unwrap();
    // No one answers: an `ask` is denied when the wait ends.
    let approvals = PendingApprovals::new(Duration::from_millis(200));
    let runner = Runner::new(
        store.clone(),
        Arc::new(PluginProvider::new(runtime.clone(), "scripted")),
        ToolRegistry::new(runtime.clone()).with_source(Arc::new(mcp)),
        Hooks::none(),
    )
    .with_permissions(Permissions::new(rules, approvals));
    let mut handle =
        runner.run(vec![Message::new(Role::User, "go")], RunConfig::default()).await.unwrap();
    let mut finished = Vec::new();
    while let Some(event) = handle.next_event().await {
        if let AgentEvent::ToolFinished { name, ok, output, .. } = event {
            finished.push((name, ok, output));
        }
    }
    let trace_id = handle.trace_id().to_owned();
    handle.wait().await.unwrap();
    assert_eq!(finished.len(), 2, "{finished:?}");
    // The denied call finishes first: the allowed one runs after every
    // call of the message has its ruling.
    finished.sort();
    let (add, wipe) = (&finished[0], &finished[1]);
    assert_eq!((add.0.as_str(), add.1), ("hostile__add", true));
    assert!(add.2.contains("42"), "{add:?}");
    assert_eq!((wipe.0.as_str(), wipe.1), ("hostile__wipe", false));
    assert!(wipe.2.contains("no one approved"), "{wipe:?}");
    let trace = store.get_trace(&trace_id).await.unwrap().unwrap();
    let path = store.get_main_path_messages(&trace_id, trace.head_sequence.unwrap()).await.unwrap();
    assert!(path.iter().all(|m| !m.text().contains("wiped")), "the wipe never ran");
}

#[test]
fn reson_mcp_list_shows_servers_status_and_tools() {
    let dir = TestDir::new();
    let argv = [
        support::mcp::python().display().to_string(),
        support::mcp::script("hostile_server.py").display().to_string(),
    ];
    let config = format!(
        "plugins_dir = \"plugins\"\ncache_dir = \"{}\"\n[mcp.hostile]\ncommand = {}\n[mcp.off]\ncommand = [\"true\"]\nenabled = false\n",
        support::cache_dir().display(),
        serde_json::to_string(&argv).unwrap()
    );
    std::fs::write(dir.path().join("reson.toml"), config).unwrap();
    let out = Command::new(RESON)
        .arg("--config")
        .arg(dir.path().join("reson.toml"))
        .args(["mcp", "list"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("hostile  ") && stdout.contains("[ready]"), "{stdout}");
    assert!(stdout.contains("    protocol: MCP 2026-07-28\n"), "the Python SDK's: {stdout}");
    assert!(
        stdout.contains("  hostile__echo\n") && stdout.contains("  hostile__wipe\n"),
        "{stdout}"
    );
    assert!(stdout.contains("not served: hostile__bad name\\u{1b}[31m"), "{stdout}");
    assert!(stdout.contains("off  true  [disabled]"), "{stdout}");
}

/// Even a same-origin redirect (which rmcp's default client would follow)
/// leaves the configured URL unchanged: requests go there only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_mcp_server_cannot_redirect_reson_elsewhere() {
    use std::io::Read as _;
    let redirector = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = redirector.local_addr().unwrap().port();
    let paths = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let seen = paths.clone();
    std::thread::spawn(move || {
        for stream in redirector.incoming() {
            let mut stream = stream.unwrap();
            let mut buf = [0u8; 8192];
            let n = stream.read(&mut buf).unwrap_or(0);
            let head = String::from_utf8_lossy(&buf[..n]);
            let path = head.split_whitespace().nth(1).unwrap_or("").to_owned();
            seen.lock().unwrap().push(path);
            let reply = "HTTP/1.1 307 Temporary Redirect\r\nLocation: /elsewhere\r\n\
                         Content-Length: 0\r\nConnection: close\r\n\r\n";
            let _ = stream.write_all(reply.as_bytes());
        }
    });
    let dir = TestDir::new();
    let config = dir.config(&format!("[mcp.web]\nurl = \"http://127.0.0.1:{port}/mcp\"\n"));
    let mcp = started(&config).await;
    until(&mcp, |s| matches!(s, Status::Down { .. })).await;
    let paths = paths.lock().unwrap().clone();
    assert!(!paths.is_empty() && paths.iter().all(|p| p == "/mcp"), "requests went to {paths:?}");
}
