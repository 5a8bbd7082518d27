//! `mcp_server`: one MCP session per input with `reson mcp serve`'s server
//! (`reson_mcp::server::McpServer`), over its stdio transport on in-memory
//! pipes, serving one plugin-free tool, `echo`.
//!
//! The input is a sequence of lines, each read byte by byte as in
//! [`crate::server`]: a request, notification, client response or batch
//! built from MCP's method names and JSON of its words, or raw bytes (real
//! messages as seeds, or garbage).

use crate::server::{json, pick, text};
use arbitrary::{Arbitrary, Unstructured};
use reson_agent::tools::{ToolContext, ToolRegistry, ToolResult, ToolSource};
use reson_mcp::server::McpServer;
use reson_sandbox::plugin::ToolSpec;
use reson_trace::ToolCall;
use serde_json::{Value, json as j};
use std::collections::HashMap;
use std::sync::{Arc, LazyLock};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::sync::mpsc;

/// How long an answer, or the end of a session once its input ended, may
/// take.
const DEADLINE: Duration = Duration::from_secs(10);

/// The most lines one session sends.
const MAX_LINES: usize = 16;

/// MCP's methods, client's and server's, known and unknown to rmcp.
const METHODS: &[&str] = &[
    "initialize",
    "ping",
    "tools/list",
    "tools/call",
    "notifications/initialized",
    "notifications/cancelled",
    "notifications/progress",
    "notifications/roots/list_changed",
    "resources/list",
    "resources/read",
    "resources/templates/list",
    "resources/subscribe",
    "prompts/list",
    "prompts/get",
    "completion/complete",
    "logging/setLevel",
    "server/discover",
    "subscriptions/listen",
    "tasks/get",
    "tasks/cancel",
    "elicitation/create",
    "sampling/createMessage",
    "roots/list",
    "notifications/other",
];

/// Keys and words of MCP's params.
const WORDS: &[&str] = &[
    "protocolVersion",
    "capabilities",
    "clientInfo",
    "name",
    "version",
    "arguments",
    "text",
    "cursor",
    "_meta",
    "progressToken",
    "requestId",
    "reason",
    "elicitation",
    "form",
    "inputResponses",
    "reson/approval",
    "action",
    "accept",
    "decline",
    "content",
    "always",
    "uri",
    "level",
    "echo",
    "shout",
    "2026-07-28",
    "2025-11-25",
    "2025-06-18",
    "2025-03-26",
    "2024-11-05",
    "io.modelcontextprotocol/protocolVersion",
    "io.modelcontextprotocol/clientCapabilities",
    "io.modelcontextprotocol/clientInfo",
    "tools",
    "listChanged",
];

const VERSIONS: &[&str] = &["2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];

/// The params a client would send, with fuzzed parts.
fn good_params(u: &mut Unstructured, method: &str) -> arbitrary::Result<Value> {
    let version = VERSIONS[pick(u, VERSIONS.len())?];
    let capabilities = match pick(u, 3)? {
        0 => j!({}),
        1 => j!({ "elicitation": { "form": {} } }),
        _ => json(u, WORDS, 1)?,
    };
    let info = j!({ "name": "fuzz", "version": "1" });
    let mut params = match method {
        "initialize" => {
            j!({ "protocolVersion": version, "capabilities": capabilities, "clientInfo": info })
        }
        "tools/call" => {
            let name = match pick(u, 4)? {
                0 | 1 => "echo".to_owned(),
                2 => "shout".to_owned(),
                _ => text(u)?,
            };
            let arguments = match pick(u, 3)? {
                0 => j!({ "text": text(u)? }),
                _ => json(u, WORDS, 1)?,
            };
            j!({ "name": name, "arguments": arguments })
        }
        _ => j!({}),
    };
    // The inline metadata of 2026-07-28, which takes the place of the
    // handshake.
    if bool::arbitrary(u)? {
        params["_meta"] = j!({
            "io.modelcontextprotocol/protocolVersion": version,
            "io.modelcontextprotocol/clientCapabilities": capabilities,
            "io.modelcontextprotocol/clientInfo": info,
        });
    }
    Ok(params)
}

/// One JSON-RPC message.
fn message(u: &mut Unstructured) -> arbitrary::Result<Value> {
    let mut object = serde_json::Map::new();
    match pick(u, 8)? {
        0..=5 => object.insert("jsonrpc".into(), "2.0".into()),
        6 => object.insert("jsonrpc".into(), "1.0".into()),
        _ => None,
    };
    // A request (an id), a notification (none) or a response (an id, a
    // result or an error).
    let kind = pick(u, 4)?;
    if kind != 1 {
        let id = match pick(u, 8)? {
            0 | 1 => usize::from(u8::arbitrary(u)?).into(),
            2 => i64::arbitrary(u)?.into(),
            3 => text(u)?.into(),
            4 => Value::Null,
            5 => 1.5.into(),
            _ => json(u, WORDS, 3)?,
        };
        object.insert("id".into(), id);
    }
    if kind == 3 {
        let (key, value) = match pick(u, 3)? {
            0 => ("result", json(u, WORDS, 1)?),
            1 => ("result", j!({ "action": "decline" })),
            _ => ("error", j!({ "code": i64::arbitrary(u)?, "message": text(u)? })),
        };
        object.insert(key.into(), value);
        return Ok(Value::Object(object));
    }
    let method = match METHODS.get(usize::from(u8::arbitrary(u)?)) {
        Some(method) => (*method).to_owned(),
        None => text(u)?,
    };
    let params = match pick(u, 4)? {
        0 => None,
        1 => Some(json(u, WORDS, 0)?),
        _ => Some(good_params(u, &method)?),
    };
    object.insert("method".into(), method.into());
    if let Some(params) = params {
        object.insert("params".into(), params);
    }
    Ok(Value::Object(object))
}

/// A session's input: the lines the client sends.
#[derive(Debug)]
pub struct Session {
    lines: Vec<Vec<u8>>,
}

impl<'a> Arbitrary<'a> for Session {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        let mut lines = Vec::new();
        while !u.is_empty() && lines.len() < MAX_LINES {
            let line = match pick(u, 6)? {
                0..=2 => message(u)?.to_string().into_bytes(),
                3 => {
                    let n = pick(u, 4)?;
                    Value::Array((0..n).map(|_| message(u)).collect::<Result<_, _>>()?)
                        .to_string()
                        .into_bytes()
                }
                // Raw: a real message in a seed, or anything at all. A
                // newline inside would make it two lines.
                _ => {
                    let len = usize::from(u16::arbitrary(u)?);
                    let bytes = u.bytes(len.min(u.len()))?;
                    bytes.iter().map(|&b| if b == b'\n' { b' ' } else { b }).collect()
                }
            };
            lines.push(line);
        }
        Ok(Session { lines })
    }
}

/// `echo` and `shout`: the `text` back, after the schema check every call
/// passes. The rules let `echo` run and make `shout` ask.
struct Echo;

#[async_trait::async_trait]
impl ToolSource for Echo {
    fn specs(&self) -> Vec<ToolSpec> {
        let schema = j!({
            "type": "object",
            "properties": { "text": { "type": "string" } },
            "required": ["text"],
            "additionalProperties": false,
        });
        ["echo", "shout"]
            .map(|name| ToolSpec {
                name: name.into(),
                description: "Says the text back.".into(),
                input_schema: schema.clone().into(),
                plugin: "fuzz".into(),
            })
            .into()
    }

    async fn call(&self, call: &ToolCall, _context: &mut ToolContext<'_>) -> ToolResult {
        match serde_json::from_str::<Value>(&call.arguments) {
            Ok(arguments) => {
                ToolResult::text(arguments["text"].as_str().unwrap_or_default().into())
            }
            Err(e) => ToolResult::error(format!("bad arguments: {e}")),
        }
    }
}

/// The server and the runtime its sessions run on.
struct Target {
    runtime: tokio::runtime::Runtime,
    server: McpServer,
}

static TARGET: LazyLock<Target> = LazyLock::new(|| {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    // `echo` runs without asking; `shout` asks a client that can be asked
    // (this one declines), and is denied for any other.
    let config: reson_agent::config::AgentConfig =
        toml::from_str("[permissions]\nrules = [{ decision = \"allow\", tool = \"echo\" }]\n")
            .expect("the rules parse");
    let (_, rules) = config.preset("default").expect("the default preset");
    let tools = ToolRegistry::builtins_only().with_source(Arc::new(Echo));
    let server = McpServer::new(tools, rules, Duration::from_secs(5));
    Target { runtime, server }
});

/// The `id` of a line that is one JSON-RPC request the server must answer:
/// an object with `jsonrpc` 2.0, a `method` and an integer or string id,
/// and not a `subscriptions/listen`, whose answer comes when the client
/// ends it.
fn request_id(line: &[u8]) -> Option<Value> {
    // A repeated key is read differently by each parser: not counted.
    if String::from_utf8_lossy(line).matches("\"id\"").count() != 1 {
        return None;
    }
    // Only a line that is one JSON value: the server ignores one with
    // bytes after a valid message as text that is not JSON.
    let line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
    let value: Value = serde_json::from_slice(line).ok()?;
    let method = value.get("method")?.as_str()?;
    let id = value.get("id")?;
    let usable = id.is_string() || id.is_i64();
    let response = value.get("result").is_some() || value.get("error").is_some();
    (value["jsonrpc"] == "2.0" && usable && !response && method != "subscriptions/listen")
        .then(|| id.clone())
}

/// The JSON value a line starts with, past a byte-order mark: the server
/// skips the mark too, and may answer a message that has bytes after it.
fn parse(line: &[u8]) -> Option<Value> {
    let line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
    serde_json::Deserializer::from_slice(line).into_iter().next()?.ok()
}

/// An id as the server reads it: a number without a fraction (`0.0`) is
/// the integer it equals, and is answered as one.
fn id_key(id: &Value) -> String {
    match id.as_f64() {
        Some(n) if n.fract() == 0.0 && n.abs() < 9e15 => format!("{}", n as i64),
        _ => id.to_string(),
    }
}

/// Every id a line carries, for the check that no answer names another.
fn ids_in(line: &[u8]) -> Vec<Value> {
    match parse(line) {
        Some(Value::Array(items)) => items.iter().filter_map(|i| i.get("id").cloned()).collect(),
        Some(value) => value.get("id").cloned().into_iter().collect(),
        None => Vec::new(),
    }
}

/// Checks one line the server wrote, and answers it when it is a request
/// of the server's. Returns it when it is a response.
fn read_answer(line: &str, replies: &mpsc::WeakUnboundedSender<Vec<u8>>) -> Option<Value> {
    let message: Value = serde_json::from_str(line)
        .unwrap_or_else(|e| panic!("a line that is not JSON ({e}): {line}"));
    assert_eq!(message["jsonrpc"], "2.0", "not JSON-RPC 2.0: {line}");
    if let Some(method) = message.get("method") {
        assert!(method.is_string(), "a method that is not a string: {line}");
        if let Some(id) = message.get("id") {
            let reply = match method.as_str() {
                Some("elicitation/create") => {
                    j!({ "jsonrpc": "2.0", "id": id, "result": { "action": "decline" } })
                }
                _ => {
                    j!({ "jsonrpc": "2.0", "id": id, "error": { "code": -32601, "message": "no" } })
                }
            };
            if let Some(replies) = replies.upgrade() {
                let _ = replies.send(format!("{reply}\n").into_bytes());
            }
        }
        return None;
    }
    assert!(message.get("id").is_some(), "a response without an id: {line}");
    match (message.get("result"), message.get("error")) {
        (Some(_), None) => {}
        (None, Some(error)) => {
            assert!(error["code"].is_i64(), "an error code that is not an integer: {line}");
            assert!(error["message"].is_string(), "an error without a message: {line}");
        }
        _ => panic!("a response with neither or both of result and error: {line}"),
    }
    Some(message)
}

/// Runs one session and checks it. Panics on a finding.
pub fn run(session: &Session) {
    let target = &*TARGET;
    target.runtime.block_on(async {
        let (client_out, server_in) = tokio::io::duplex(1 << 16);
        let (server_out, client_in) = tokio::io::duplex(1 << 16);
        let server = target.server.clone();
        let serving = tokio::spawn(async move { server.serve_lines(server_in, server_out).await });

        // One writer for the session's lines and the replies to the
        // server's requests; the input ends when this function's sender
        // goes (the reader's is weak).
        let (writes, mut to_write) = mpsc::unbounded_channel::<Vec<u8>>();
        let writer = tokio::spawn(async move {
            let mut client_out = client_out;
            while let Some(line) = to_write.recv().await {
                if client_out.write_all(&line).await.is_err() {
                    return;
                }
            }
        });
        let (answers, mut answered) = mpsc::unbounded_channel::<Value>();
        let replies = writes.downgrade();
        let reader = tokio::spawn(async move {
            let mut lines = BufReader::new(client_in).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if let Some(answer) = read_answer(&line, &replies) {
                    let _ = answers.send(answer);
                }
            }
        });

        let mut sent: HashMap<String, usize> = HashMap::new();
        let mut tracked = Vec::new();
        for line in &session.lines {
            for id in ids_in(line) {
                *sent.entry(id_key(&id)).or_default() += 1;
            }
            tracked.extend(request_id(line).map(|id| id_key(&id)));
            let mut line = line.clone();
            line.push(b'\n');
            let _ = writes.send(line);
        }
        let shown: Vec<String> =
            session.lines.iter().map(|l| String::from_utf8_lossy(l).into_owned()).collect();
        // An id sent twice may be answered once for each: only unique ones
        // are waited for.
        tracked.retain(|id| sent.get(id) == Some(&1));
        let mut counts: HashMap<String, usize> = HashMap::new();
        let count = |answer: &Value, counts: &mut HashMap<String, usize>| {
            *counts.entry(id_key(&answer["id"])).or_default() += 1;
        };
        let deadline = tokio::time::Instant::now() + DEADLINE;
        while !tracked.iter().all(|id| counts.contains_key(id)) {
            match tokio::time::timeout_at(deadline, answered.recv()).await {
                Ok(Some(answer)) => count(&answer, &mut counts),
                Ok(None) | Err(_) => break,
            }
        }
        let missing: Vec<&String> = tracked.iter().filter(|id| !counts.contains_key(*id)).collect();
        assert!(missing.is_empty(), "requests {missing:?} got no answer; sent {shown:#?}");

        // The session still lists its tools: a request that carries its
        // own metadata works whether a handshake happened or not.
        let list = j!({ "jsonrpc": "2.0", "id": "fuzz-final-list", "method": "tools/list", "params": {
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
                "io.modelcontextprotocol/clientInfo": { "name": "fuzz", "version": "1" },
            }
        }});
        let _ = writes.send(format!("{list}\n").into_bytes());
        let listed = loop {
            match tokio::time::timeout(DEADLINE, answered.recv()).await {
                Ok(Some(answer)) if answer["id"] == "fuzz-final-list" => break answer,
                Ok(Some(answer)) => count(&answer, &mut counts),
                Ok(None) => panic!("the session ended before tools/list; sent {shown:#?}"),
                Err(_) => panic!("tools/list got no answer in {DEADLINE:?}; sent {shown:#?}"),
            }
        };
        let tools = listed["result"]["tools"].as_array();
        assert!(
            tools.is_some_and(|t| t.iter().any(|t| t["name"] == "echo")),
            "tools/list did not list echo: {listed}; sent {shown:#?}"
        );
        // With a repeated `id` key the server answers the first, where
        // `ids_in` keeps the last: such a session's ids are not counted.
        let repeated = session.lines.iter().any(|l| {
            String::from_utf8_lossy(l).matches("\"id\"").count() > 1
        });
        for (id, count) in counts.iter().filter(|_| !repeated) {
            let times = sent.get(id).copied().unwrap_or_default();
            assert!(
                id == "null" || *count <= times,
                "{count} answers to id {id}, sent {times} times; sent {shown:#?}"
            );
        }
        // A `subscriptions/listen` lasts until the client cancels it, and
        // rmcp waits 5 s for it once the input ends: a client cancels first.
        let listens = session.lines.iter().filter_map(|line| parse(line)).filter(|message| {
            message["method"] == "subscriptions/listen" && message.get("id").is_some()
        });
        for listen in listens {
            let cancel = j!({ "jsonrpc": "2.0", "method": "notifications/cancelled",
                "params": { "requestId": listen["id"] } });
            let _ = writes.send(format!("{cancel}\n").into_bytes());
        }
        drop(writes);
        let ended = tokio::time::timeout(DEADLINE, serving).await;
        assert!(ended.is_ok(), "the session did not end with its input; sent {shown:#?}");
        writer.await.expect("the writer ends");
        reader.await.expect("every line the server wrote is well formed");
    });
}
