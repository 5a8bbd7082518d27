//! MCP 2026-07-28, the stateless revision, both ways: requests built by
//! hand on the wire (HTTP and stdio) against `reson mcp serve`, and Reson
//! as a client of servers of either revision.

use super::*;

const MODERN: &str = "2026-07-28";

/// The `_meta` every 2026-07-28 request carries, for `version`.
fn meta(version: &str) -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": version,
        "io.modelcontextprotocol/clientInfo": { "name": "wire-test", "version": "1" },
        "io.modelcontextprotocol/clientCapabilities": {},
    })
}

/// A JSON-RPC request with `params` (and their `_meta` for `version`).
fn request(id: u64, method: &str, mut params: Value, version: &str) -> Value {
    params["_meta"] = meta(version);
    json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params })
}

/// Posts `body` to `url` as a stateless client does: the version and the
/// method (and its name) also as headers. The status, the headers and the
/// JSON-RPC messages of the answer (a JSON body, or an event stream).
async fn post(
    url: &str,
    body: &Value,
    version: &str,
    origin: Option<&str>,
) -> (u16, reqwest::header::HeaderMap, Vec<Value>) {
    let method = body["method"].as_str().unwrap();
    let mut post = reqwest::Client::new()
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("mcp-protocol-version", version)
        .header("mcp-method", method)
        .body(body.to_string());
    if let Some(name) = body["params"]["name"].as_str() {
        post = post.header("mcp-name", name);
    }
    if let Some(origin) = origin {
        post = post.header("origin", origin);
    }
    let response = post.send().await.unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let text = response.text().await.unwrap();
    (status, headers, messages(&text))
}

async fn messages_of(response: reqwest::Response) -> Vec<Value> {
    messages(&response.text().await.unwrap())
}

/// The JSON-RPC messages of a body: one JSON value, or the `data:` lines
/// of an event stream.
fn messages(text: &str) -> Vec<Value> {
    if let Ok(value) = serde_json::from_str::<Value>(text) {
        return vec![value];
    }
    text.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter(|d| !d.trim().is_empty())
        .map(|d| serde_json::from_str(d.trim()).unwrap_or_else(|e| panic!("{d}: {e}")))
        .collect()
}

/// The one answer (result or error) to request `id` among `messages`.
fn answer(messages: &[Value], id: u64) -> Value {
    messages
        .iter()
        .find(|m| m["id"] == id)
        .unwrap_or_else(|| panic!("no answer to {id} in {messages:?}"))
        .clone()
}

fn names(result: &Value) -> Vec<&str> {
    result["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect()
}

/// What a stateless client sees over HTTP: discovery, the sorted tool list
/// with its cache hints, calls through the rules, the spec's errors, no
/// session, and the Origin check as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stateless_http_client_discovers_lists_and_calls_through_the_rules() {
    let dir = served_dir();
    let server = HttpServer::start(&dir, "127.0.0.1:0", None).unwrap();
    let url = server.url.as_str();

    let (status, headers, messages) =
        post(url, &request(1, "server/discover", json!({}), MODERN), MODERN, None).await;
    assert_eq!(status, 200);
    assert!(headers.get("mcp-session-id").is_none(), "2026-07-28 has no session");
    let discovered = &answer(&messages, 1)["result"];
    assert_eq!(discovered["resultType"], "complete");
    let versions = discovered["supportedVersions"].as_array().unwrap();
    for version in ["2025-06-18", "2025-11-25", MODERN] {
        assert!(versions.contains(&json!(version)), "{version} in {versions:?}");
    }
    assert_eq!(discovered["capabilities"]["tools"]["listChanged"], true);
    assert_eq!(discovered["_meta"]["io.modelcontextprotocol/serverInfo"]["name"], "reson");

    let (status, headers, messages) =
        post(url, &request(2, "tools/list", json!({}), MODERN), MODERN, None).await;
    assert_eq!(status, 200);
    assert!(headers.get("mcp-session-id").is_none());
    let listed = &answer(&messages, 2)["result"];
    assert_eq!(names(listed), ["count", "echo", "spin"], "sorted; env denied outright");
    assert_eq!(listed["resultType"], "complete");
    assert_eq!(listed["ttlMs"], 0);
    assert_eq!(listed["cacheScope"], "private");
    assert_eq!(listed["tools"][1]["inputSchema"]["properties"]["text"]["type"], "string");

    let call = |id, name: &str, args: Value| {
        request(id, "tools/call", json!({ "name": name, "arguments": args }), MODERN)
    };
    let (_, _, messages) = post(url, &call(3, "echo", json!({ "text": "hi" })), MODERN, None).await;
    let hi = &answer(&messages, 3)["result"];
    assert_eq!(hi["resultType"], "complete");
    assert_eq!(hi["isError"], false);
    assert_eq!(hi["content"][0]["text"], "hi");
    let (_, _, messages) =
        post(url, &call(4, "echo", json!({ "text": "{\"a\":[1]}" })), MODERN, None).await;
    assert_eq!(answer(&messages, 4)["result"]["structuredContent"], json!({ "a": [1] }));
    let (_, _, messages) =
        post(url, &call(40, "echo", json!({ "text": "[1,2]" })), MODERN, None).await;
    let array = &answer(&messages, 40)["result"];
    assert_eq!(array["structuredContent"], json!([1, 2]), "any JSON value on 2026-07-28");
    assert_eq!(array["content"][0]["text"], "[1,2]");
    let (_, _, messages) =
        post(url, &call(5, "echo", json!({ "text": format!("key {SECRET}") })), MODERN, None).await;
    assert_eq!(answer(&messages, 5)["result"]["content"][0]["text"], "key [REDACTED]");

    // Bad input: invalid arguments are a tool error; an unknown (or
    // denied) tool and an unknown revision are the spec's protocol errors.
    let (_, _, messages) = post(url, &call(6, "echo", json!({ "txt": "hi" })), MODERN, None).await;
    let invalid = &answer(&messages, 6)["result"];
    assert_eq!(invalid["isError"], true);
    assert!(invalid["content"][0]["text"].as_str().unwrap().contains("invalid arguments"));
    let (_, _, messages) = post(url, &call(7, "env", json!({})), MODERN, None).await;
    let unknown = &answer(&messages, 7)["error"];
    assert_eq!(unknown["code"], -32602);
    assert!(unknown["message"].as_str().unwrap().contains("unknown tool `env`"), "{unknown}");
    let (status, _, messages) =
        post(url, &request(8, "tools/list", json!({}), "2099-01-01"), "2099-01-01", None).await;
    assert_eq!(status, 400);
    let unsupported = &answer(&messages, 8)["error"];
    assert_eq!(unsupported["code"], -32022, "UnsupportedProtocolVersionError");
    assert_eq!(unsupported["data"]["requested"], "2099-01-01");
    assert!(unsupported["data"]["supported"].as_array().unwrap().contains(&json!(MODERN)));

    // `ask`: a client that takes no elicitation cannot be asked, and is
    // told what to do; one that does gets the question in an
    // input-required result and sends the call again with its answer.
    let (_, _, messages) = post(url, &call(9, "count", json!({})), MODERN, None).await;
    let asked = &answer(&messages, 9)["result"];
    assert_eq!(asked["isError"], true);
    let text = asked["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("does not support elicitation") && text.contains("rule"), "{text}");
    let eliciting = |id, answer: Option<&str>| {
        let mut params = json!({ "name": "count", "arguments": {} });
        if let Some(action) = answer {
            params["inputResponses"] = json!({ "reson/approval": {
                "action": action, "content": { "always": false } } });
        }
        let mut body = request(id, "tools/call", params, MODERN);
        body["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"] =
            json!({ "elicitation": { "form": {} } });
        body
    };
    let (_, _, messages) = post(url, &eliciting(20, None), MODERN, None).await;
    let question = &answer(&messages, 20)["result"];
    assert_eq!(question["resultType"], "input_required", "{question}");
    let elicit = &question["inputRequests"]["reson/approval"];
    assert_eq!(elicit["method"], "elicitation/create");
    assert_eq!(elicit["params"]["mode"], "form");
    assert!(elicit["params"]["message"].as_str().unwrap().contains("`count`"), "{elicit}");
    assert_eq!(elicit["params"]["requestedSchema"]["properties"]["always"]["type"], "boolean");
    let (_, _, messages) = post(url, &eliciting(21, Some("accept")), MODERN, None).await;
    let ran = &answer(&messages, 21)["result"];
    assert_eq!((&ran["resultType"], &ran["isError"]), (&json!("complete"), &json!(false)), "{ran}");
    let (_, _, messages) = post(url, &eliciting(22, Some("decline")), MODERN, None).await;
    let declined = &answer(&messages, 22)["result"];
    assert_eq!(declined["isError"], true);
    assert!(declined["content"][0]["text"].as_str().unwrap().contains("denied"), "{declined}");

    // The Origin check applies to stateless requests as to sessions.
    let (status, _, _) =
        post(url, &call(10, "echo", json!({ "text": "x" })), MODERN, Some("https://evil.example"))
            .await;
    assert_eq!(status, 403);

    // An older client still negotiates a session, as before.
    let init = json!({ "jsonrpc": "2.0", "id": 11, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": { "name": "old", "version": "1" } } });
    let (status, headers, messages) = post(url, &init, "2025-06-18", None).await;
    assert_eq!(status, 200);
    assert!(headers.get("mcp-session-id").is_some(), "a legacy client gets its session");
    let negotiated = &answer(&messages, 11)["result"];
    assert_eq!(negotiated["protocolVersion"], "2025-06-18");
    assert!(negotiated.get("resultType").is_none(), "legacy results keep their old shape");
    let session = headers.get("mcp-session-id").unwrap().to_str().unwrap().to_owned();
    let legacy_call = json!({ "jsonrpc": "2.0", "id": 12, "method": "tools/call",
        "params": { "name": "echo", "arguments": { "text": "[1,2]" } } });
    let response = reqwest::Client::new()
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("mcp-protocol-version", "2025-06-18")
        .header("mcp-session-id", session)
        .body(legacy_call.to_string())
        .send()
        .await
        .unwrap();
    let legacy = answer(&messages_of(response).await, 12)["result"].clone();
    assert_eq!(legacy["content"][0]["text"], "[1,2]");
    assert!(legacy.get("structuredContent").is_none(), "an object only, before 2026-07-28");
    assert!(legacy.get("resultType").is_none());
}

/// `subscriptions/listen` over HTTP: acknowledged, then a replaced plugin
/// is heard as `notifications/tools/list_changed` on the same stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listener_hears_that_a_replaced_plugin_changed_the_tools() {
    let dir = served_dir();
    let server = HttpServer::start(&dir, "127.0.0.1:0", None).unwrap();
    let listen = request(
        1,
        "subscriptions/listen",
        json!({ "notifications": { "toolsListChanged": true } }),
        MODERN,
    );
    let mut response = reqwest::Client::new()
        .post(&server.url)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("mcp-protocol-version", MODERN)
        .header("mcp-method", "subscriptions/listen")
        .body(listen.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let mut seen = String::new();
    let mut next = async |seen: &mut String, method: &str| {
        tokio::time::timeout(Duration::from_secs(30), async {
            loop {
                if let Some(found) = messages(seen).into_iter().find(|m| m["method"] == method) {
                    return found;
                }
                let chunk = response.chunk().await.unwrap().expect("the stream stays open");
                seen.push_str(&String::from_utf8_lossy(&chunk));
            }
        })
        .await
        .unwrap_or_else(|_| panic!("no {method} in {seen:?}"))
    };
    let ack = next(&mut seen, "notifications/subscriptions/acknowledged").await;
    assert_eq!(ack["params"]["notifications"]["toolsListChanged"], true);
    assert_eq!(ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], 1);
    replace_echo(&dir);
    let changed = next(&mut seen, "notifications/tools/list_changed").await;
    assert_eq!(changed["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], 1);
    let (_, _, messages) =
        post(&server.url, &request(2, "tools/list", json!({}), MODERN), MODERN, None).await;
    let echo = &answer(&messages, 2)["result"]["tools"][1];
    assert_eq!(echo["description"], "Returns the given text prefixed with `v2:`.");
}

/// `reson mcp serve` on stdio, driven line by line.
struct Stdio {
    _child: Killed,
    input: ChildStdin,
    output: BufReader<ChildStdout>,
}

impl Stdio {
    fn start(dir: &TestDir) -> Self {
        let mut child = Command::new(RESON)
            .arg("--config")
            .arg(dir.path().join("reson.toml"))
            .args(["mcp", "serve"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let input = child.stdin.take().unwrap();
        let output = BufReader::new(child.stdout.take().unwrap());
        Self { _child: Killed(child), input, output }
    }

    fn send(&mut self, message: &Value) {
        writeln!(self.input, "{message}").unwrap();
    }

    /// The next message on stdout.
    fn read(&mut self) -> Value {
        let mut line = String::new();
        self.output.read_line(&mut line).unwrap();
        assert!(!line.is_empty(), "the server ended");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{line:?}: {e}"))
    }

    /// Sends `message` and reads up to its answer.
    fn ask(&mut self, message: &Value) -> Value {
        self.send(message);
        loop {
            let read = self.read();
            if read["id"] == message["id"] {
                return read;
            }
        }
    }
}

/// The same without a session on stdio: no `initialize`, the revision in
/// each request's `_meta`, and a listener that hears a replaced plugin.
#[test]
fn a_stateless_stdio_client_is_served_without_a_handshake() {
    let dir = served_dir();
    let mut server = Stdio::start(&dir);
    let discovered = server.ask(&request(1, "server/discover", json!({}), MODERN));
    assert!(
        discovered["result"]["supportedVersions"].as_array().unwrap().contains(&json!(MODERN)),
        "{discovered}"
    );
    let listed = server.ask(&request(2, "tools/list", json!({}), MODERN));
    assert_eq!(names(&listed["result"]), ["count", "echo", "spin"]);
    assert_eq!(listed["result"]["ttlMs"], 0);
    assert_eq!(listed["result"]["cacheScope"], "private");
    let call = |id, args: Value| {
        request(id, "tools/call", json!({ "name": "echo", "arguments": args }), MODERN)
    };
    let hi = server.ask(&call(3, json!({ "text": "hi" })));
    assert_eq!(hi["result"]["content"][0]["text"], "hi");
    assert_eq!(hi["result"]["resultType"], "complete");
    let invalid = server.ask(&call(4, json!({ "text": 1 })));
    assert_eq!(invalid["result"]["isError"], true);
    let unsupported = server.ask(&request(5, "tools/list", json!({}), "2099-01-01"));
    assert_eq!(unsupported["error"]["code"], -32022, "{unsupported}");
    let missing = server.ask(&json!({ "jsonrpc": "2.0", "id": 6, "method": "tools/list" }));
    assert_eq!(missing["error"]["code"], -32602, "no _meta: {missing}");

    server.send(&request(
        7,
        "subscriptions/listen",
        json!({ "notifications": { "toolsListChanged": true } }),
        MODERN,
    ));
    let ack = server.read();
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged", "{ack}");
    replace_echo(&dir);
    let changed = server.read();
    assert_eq!(changed["method"], "notifications/tools/list_changed", "{changed}");
    assert_eq!(changed["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], 7);
    let hi = server.ask(&call(8, json!({ "text": "hi" })));
    assert_eq!(hi["result"]["content"][0]["text"], "v2:hi");
}

/// Reson as a client: 2026-07-28 with Reson's own server (stdio and HTTP)
/// and the Python SDK's; `initialize` of 2025-11-25 with the reference
/// server `server-everything`, which does not know `server/discover`.
/// Tools work either way, and a replaced plugin reaches the client through
/// its listener.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reson_speaks_2026_07_28_where_it_can_and_falls_back_where_not() {
    let served = served_dir();
    let http = HttpServer::start(&served, "127.0.0.1:0", None).unwrap();
    let hostile = [
        support::mcp::python().display().to_string(),
        support::mcp::script("hostile_server.py").display().to_string(),
    ];
    let own = [
        RESON.to_owned(),
        "--config".into(),
        served.path().join("reson.toml").display().to_string(),
        "mcp".into(),
        "serve".into(),
    ];
    let everything =
        ["node".to_owned(), support::mcp::everything().display().to_string(), "stdio".into()];
    let dir = TestDir::new();
    let config = dir.config(&format!(
        "[mcp.own]\ncommand = {}\n[mcp.web]\nurl = \"{}\"\n[mcp.py]\ncommand = {}\n[mcp.old]\ncommand = {}\n",
        serde_json::to_string(&own).unwrap(),
        http.url,
        serde_json::to_string(&hostile).unwrap(),
        serde_json::to_string(&everything).unwrap(),
    ));
    let mcp = started(&config).await;
    let protocols: Vec<(String, Option<String>, Status)> =
        mcp.servers().into_iter().map(|s| (s.name, s.protocol, s.status)).collect();
    assert_eq!(
        protocols,
        [
            ("old".into(), Some("2025-11-25".into()), Status::Ready),
            ("own".into(), Some(MODERN.into()), Status::Ready),
            ("py".into(), Some(MODERN.into()), Status::Ready),
            ("web".into(), Some(MODERN.into()), Status::Ready),
        ]
    );
    assert_eq!(call(&mcp, "own__echo", json!({ "text": "a" })).await.text, "a");
    assert_eq!(call(&mcp, "web__echo", json!({ "text": "b" })).await.text, "b");
    assert_eq!(call(&mcp, "py__echo", json!({ "text": "c" })).await.text, "c");
    assert_eq!(call(&mcp, "old__echo", json!({ "message": "d" })).await.text, "Echo: d");
    let invalid = call(&mcp, "own__echo", json!({ "text": 1 })).await;
    assert!(!invalid.ok && invalid.text.contains("invalid arguments"), "{}", invalid.text);

    let mut changes = mcp.changes();
    replace_echo(&served);
    let described = |mcp: &McpTools, name: &str| {
        mcp.specs().into_iter().find(|t| t.name == name).unwrap().description
    };
    tokio::time::timeout(Duration::from_secs(30), async {
        while !(described(&mcp, "own__echo").contains("v2")
            && described(&mcp, "web__echo").contains("v2"))
        {
            changes.changed().await.unwrap();
        }
    })
    .await
    .expect("both listeners heard the change");
    assert_eq!(call(&mcp, "web__echo", json!({ "text": "b" })).await.text, "v2:b");
}

/// `reson tool list|call` with MCP servers configured: listed beside the
/// plugins' tools, marked with their server; called with the plugin tools'
/// output and exit codes, under the preset's rules.
#[test]
fn reson_tool_lists_and_calls_mcp_tools_under_the_rules() {
    let dir = TestDir::new();
    dir.install(support::plugins(), "echo");
    let argv = [
        support::mcp::python().display().to_string(),
        support::mcp::script("hostile_server.py").display().to_string(),
    ];
    let config = format!(
        r#"plugins_dir = "plugins"
cache_dir = "{}"
[permissions]
default = "ask"
rules = [
  {{ decision = "allow", tool = "{{echo,hostile__echo,hostile__add,hostile__huge}}" }},
  {{ decision = "deny", tool = "hostile__wipe" }},
]
[mcp.hostile]
command = {}
output_bytes = 1000
"#,
        support::cache_dir().display(),
        serde_json::to_string(&argv).unwrap()
    );
    std::fs::write(dir.path().join("reson.toml"), config).unwrap();
    let reson = |args: &[&str]| {
        let out = Command::new(RESON)
            .arg("--config")
            .arg(dir.path().join("reson.toml"))
            .arg("tool")
            .args(args)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        (out.status.code().unwrap(), text(&out.stdout), text(&out.stderr))
    };

    let (code, stdout, stderr) = reson(&["list"]);
    assert_eq!(code, 0, "{stderr}");
    let line = |name: &str| {
        stdout
            .lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("{name} in {stdout}"))
            .to_owned()
    };
    assert!(line("echo").contains("[echo]"), "{stdout}");
    assert!(line("hostile__echo").contains("[mcp:hostile]"), "{stdout}");
    assert!(stdout.contains("not served: hostile__bad name\\u{1b}[31m"), "{stdout}");
    let (code, stdout, _) = reson(&["list", "--json"]);
    assert_eq!(code, 0);
    let listed: Vec<Value> = serde_json::from_str(&stdout).unwrap();
    let add = listed.iter().find(|t| t["name"] == "hostile__add").unwrap();
    assert_eq!(add["plugin"], "mcp:hostile");
    assert_eq!(add["input_schema"]["properties"]["a"]["type"], "integer");

    let (code, stdout, stderr) = reson(&["call", "hostile__echo", r#"{"text":"over mcp"}"#]);
    assert_eq!((code, stdout.as_str()), (0, "over mcp\n"), "{stderr}");
    let (code, stdout, _) = reson(&["call", "hostile__add", r#"{"a":2,"b":3}"#, "--json"]);
    assert_eq!(code, 0);
    let out: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(serde_json::from_str::<Value>(out["text"].as_str().unwrap()).unwrap()["sum"], 5);
    let (code, _, stderr) = reson(&["call", "echo", r#"{"text":"plugin"}"#]);
    assert_eq!(code, 0, "plugin tools as before: {stderr}");

    // Errors: each clear, each with the plugin tools' exit code.
    let (code, _, stderr) = reson(&["call", "hostile__nope", "{}"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("no MCP server serves `hostile__nope`"), "{stderr}");
    assert!(stderr.contains("offers: ") && stderr.contains("hostile__add"), "{stderr}");
    let (code, _, stderr) = reson(&["call", "hostile__add", r#"{"a":"two","b":3}"#]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("invalid arguments for `hostile__add`"), "{stderr}");
    let (code, _, stderr) = reson(&["call", "hostile__add", "[1]"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("not a JSON object"), "{stderr}");
    let (code, _, stderr) = reson(&["call", "hostile__wipe", r#"{"path":"/"}"#]);
    assert_eq!(code, 3, "{stderr}");
    assert!(stderr.contains("permission denied for `hostile__wipe`"), "{stderr}");
    let (code, _, stderr) = reson(&["call", "hostile__pid", "{}"]);
    assert_eq!(code, 3, "ask, with no one at a terminal: {stderr}");
    assert!(stderr.contains("needs approval"), "{stderr}");
    let (code, _, stderr) = reson(&["call", "hostile__huge", r#"{"size":5000}"#]);
    assert_eq!(code, 4, "{stderr}");
    assert!(stderr.contains("output limit of 1000 bytes"), "{stderr}");
}
