//! The provider components against real HTTP servers on 127.0.0.1 that
//! speak each protocol: answers, tool-call round trips through the whole
//! agent loop, SSE streams split anywhere, retries, errors, deadlines,
//! secrets, and a trace that moves between providers.

use crate::support;

use reson::agent::{
    AgentError, AgentEvent, HookDecision, HookEvent, HookPoint, Hooks, RunConfig, Runner,
};
use reson::plugin::Runtime;
use reson::provider::{LlmParams, PluginProvider, ProviderError};
use reson::tools::ToolRegistry;
use reson::trace::{EventKind, FileTraceStore, Message, Role, TraceStore};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;
use support::TestDir;
use support::llm_server::{self, LlmServer, Recorded, Reply};

const SECRET: &str = "sk-test-9f8e7d6c5b4a";

/// How one protocol's server talks.
trait Protocol {
    const PLUGIN: &'static str;
    /// Whether the API carries tool-call ids (Gemini matches by name).
    const IDS: bool = true;
    const KEY: &'static str;
    /// The `base_url` setting for a server at `url`.
    fn base_url(url: &str) -> String;
    fn text(text: &str, prompt: u64, completion: u64) -> Reply;
    fn tool_call(id: &str, name: &str, args: Value) -> Reply;
    /// A streamed tool call whose arguments are split across events, and
    /// usage at the end; every piece is written separately.
    fn streamed_tool_call(id: &str, name: &str, args: Value) -> Reply;
    fn streamed_text(text: &str) -> Reply;
    /// A stream cut off in the middle of an event.
    fn cut_stream() -> Reply;
    /// One answer calling several tools, in this order.
    fn tool_calls(calls: &[(&str, &str, Value)]) -> Reply;
    /// An answer the content filter emptied.
    fn filtered() -> Reply;
    fn error(status: u16, message: &str) -> Reply;
    /// The secret as the server should see it, in the request.
    fn sent_key(request: &Recorded) -> Option<String>;
    /// The tool results the request carries: (call id, text).
    fn tool_results(request: &Recorded) -> Vec<(String, String)>;
}

struct OpenAi;
struct Anthropic;
struct Gemini;

impl Protocol for OpenAi {
    const PLUGIN: &'static str = "openai";
    const KEY: &'static str = "OPENAI_API_KEY";
    fn base_url(url: &str) -> String {
        format!("{url}/v1")
    }
    fn text(text: &str, prompt: u64, completion: u64) -> Reply {
        llm_server::openai::text(text, prompt, completion)
    }
    fn tool_call(id: &str, name: &str, args: Value) -> Reply {
        llm_server::openai::tool_call(id, name, args)
    }
    fn streamed_tool_call(id: &str, name: &str, args: Value) -> Reply {
        let args = args.to_string();
        let (a, b) = args.split_at(args.len() / 2);
        let chunk = |delta: Value, finish: Value| {
            format!(
                "data: {}\n\n",
                json!({ "id": "c", "object": "chat.completion.chunk", "model": "gpt-test",
                "choices": [{ "index": 0, "delta": delta, "finish_reason": finish }] })
            )
        };
        let first = chunk(
            json!({ "role": "assistant", "tool_calls": [{ "index": 0, "id": id, "type": "function", "function": { "name": name, "arguments": a } }] }),
            Value::Null,
        );
        let second = chunk(
            json!({ "tool_calls": [{ "index": 0, "function": { "arguments": b } }] }),
            Value::Null,
        );
        let (s1, s2) = second.split_at(17);
        Reply::sse([
            first,
            s1.to_owned(),
            s2.to_owned(),
            chunk(json!({}), json!("tool_calls")),
            format!(
                "data: {}\n\n",
                json!({ "id": "c", "object": "chat.completion.chunk", "choices": [], "usage": { "prompt_tokens": 30, "completion_tokens": 7, "total_tokens": 37 } })
            ),
            "data: [DONE]\n\n".to_owned(),
        ])
    }
    fn streamed_text(text: &str) -> Reply {
        let mut pieces: Vec<String> = text
            .split_inclusive(' ')
            .map(|w| format!("data: {}\n\n", json!({ "object": "chat.completion.chunk", "choices": [{ "index": 0, "delta": { "content": w }, "finish_reason": null }] })))
            .collect();
        pieces.push(format!("data: {}\n\n", json!({ "object": "chat.completion.chunk", "choices": [{ "index": 0, "delta": {}, "finish_reason": "stop" }], "usage": { "prompt_tokens": 40, "completion_tokens": 3 } })));
        pieces.push("data: [DONE]\n\n".into());
        Reply::sse(pieces)
    }
    fn cut_stream() -> Reply {
        Reply::sse(["data: {\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hal".to_owned()])
    }
    fn tool_calls(calls: &[(&str, &str, Value)]) -> Reply {
        let calls: Vec<Value> = calls
            .iter()
            .map(|(id, name, args)| json!({ "id": id, "type": "function", "function": { "name": name, "arguments": args.to_string() } }))
            .collect();
        Reply::json(
            200,
            &json!({
                "id": "chatcmpl-3", "object": "chat.completion", "model": "gpt-test",
                "choices": [{ "index": 0, "finish_reason": "tool_calls", "message": { "role": "assistant", "content": null, "tool_calls": calls } }],
                "usage": { "prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15 }
            }),
        )
    }
    fn filtered() -> Reply {
        Reply::json(
            200,
            &json!({
                "id": "chatcmpl-4", "object": "chat.completion", "model": "gpt-test",
                "choices": [{ "index": 0, "finish_reason": "content_filter", "message": { "role": "assistant", "content": null } }],
                "usage": { "prompt_tokens": 10, "completion_tokens": 0, "total_tokens": 10 }
            }),
        )
    }
    fn error(status: u16, message: &str) -> Reply {
        llm_server::openai::error(status, message)
    }
    fn sent_key(request: &Recorded) -> Option<String> {
        request.header("authorization").and_then(|v| v.strip_prefix("Bearer ")).map(str::to_owned)
    }
    fn tool_results(request: &Recorded) -> Vec<(String, String)> {
        request.json()["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["role"] == "tool")
            .map(|m| {
                (
                    m["tool_call_id"].as_str().unwrap().to_owned(),
                    m["content"].as_str().unwrap_or("").to_owned(),
                )
            })
            .collect()
    }
}

impl Protocol for Anthropic {
    const PLUGIN: &'static str = "anthropic";
    const KEY: &'static str = "ANTHROPIC_API_KEY";
    fn base_url(url: &str) -> String {
        url.to_owned()
    }
    fn text(text: &str, prompt: u64, completion: u64) -> Reply {
        Reply::json(
            200,
            &json!({
                "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test",
                "content": [{ "type": "text", "text": text }], "stop_reason": "end_turn", "stop_sequence": null,
                "usage": { "input_tokens": prompt, "output_tokens": completion, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0 }
            }),
        )
    }
    fn tool_call(id: &str, name: &str, args: Value) -> Reply {
        Reply::json(
            200,
            &json!({
                "id": "msg_2", "type": "message", "role": "assistant", "model": "claude-test",
                "content": [{ "type": "text", "text": "Let me check." }, { "type": "tool_use", "id": id, "name": name, "input": args }],
                "stop_reason": "tool_use", "stop_sequence": null, "usage": { "input_tokens": 10, "output_tokens": 5 }
            }),
        )
    }
    fn streamed_tool_call(id: &str, name: &str, args: Value) -> Reply {
        let args = args.to_string();
        let (a, b) = args.split_at(args.len() / 2);
        let event = |kind: &str, data: Value| format!("event: {kind}\ndata: {data}\n\n");
        let delta = event(
            "content_block_delta",
            json!({ "type": "content_block_delta", "index": 0, "delta": { "type": "input_json_delta", "partial_json": b } }),
        );
        let (d1, d2) = delta.split_at(25);
        Reply::sse([
            event(
                "message_start",
                json!({ "type": "message_start", "message": { "id": "msg_3", "type": "message", "role": "assistant", "model": "claude-test", "content": [], "stop_reason": null, "usage": { "input_tokens": 30, "output_tokens": 1, "cache_read_input_tokens": 4 } } }),
            ),
            event(
                "content_block_start",
                json!({ "type": "content_block_start", "index": 0, "content_block": { "type": "tool_use", "id": id, "name": name, "input": {} } }),
            ),
            event(
                "content_block_delta",
                json!({ "type": "content_block_delta", "index": 0, "delta": { "type": "input_json_delta", "partial_json": a } }),
            ),
            d1.to_owned(),
            d2.to_owned(),
            event("content_block_stop", json!({ "type": "content_block_stop", "index": 0 })),
            event(
                "message_delta",
                json!({ "type": "message_delta", "delta": { "stop_reason": "tool_use", "stop_sequence": null }, "usage": { "output_tokens": 7 } }),
            ),
            event("message_stop", json!({ "type": "message_stop" })),
        ])
    }
    fn streamed_text(text: &str) -> Reply {
        let event = |kind: &str, data: Value| format!("event: {kind}\ndata: {data}\n\n");
        let mut pieces = vec![
            event(
                "message_start",
                json!({ "type": "message_start", "message": { "id": "msg_4", "type": "message", "role": "assistant", "model": "claude-test", "content": [], "stop_reason": null, "usage": { "input_tokens": 40, "output_tokens": 1 } } }),
            ),
            event(
                "content_block_start",
                json!({ "type": "content_block_start", "index": 0, "content_block": { "type": "text", "text": "" } }),
            ),
        ];
        pieces.extend(text.split_inclusive(' ').map(|w| {
            event("content_block_delta", json!({ "type": "content_block_delta", "index": 0, "delta": { "type": "text_delta", "text": w } }))
        }));
        pieces
            .push(event("content_block_stop", json!({ "type": "content_block_stop", "index": 0 })));
        pieces.push(event("message_delta", json!({ "type": "message_delta", "delta": { "stop_reason": "end_turn" }, "usage": { "output_tokens": 3 } })));
        pieces.push(event("message_stop", json!({ "type": "message_stop" })));
        Reply::sse(pieces)
    }
    fn cut_stream() -> Reply {
        Reply::sse(["event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"type\":\"mess".to_owned()])
    }
    fn tool_calls(calls: &[(&str, &str, Value)]) -> Reply {
        let blocks: Vec<Value> = calls
            .iter()
            .map(|(id, name, args)| json!({ "type": "tool_use", "id": id, "name": name, "input": args }))
            .collect();
        Reply::json(
            200,
            &json!({
                "id": "msg_5", "type": "message", "role": "assistant", "model": "claude-test",
                "content": blocks, "stop_reason": "tool_use", "stop_sequence": null,
                "usage": { "input_tokens": 10, "output_tokens": 5 }
            }),
        )
    }
    fn filtered() -> Reply {
        Reply::json(
            200,
            &json!({
                "id": "msg_6", "type": "message", "role": "assistant", "model": "claude-test",
                "content": [], "stop_reason": "refusal", "stop_sequence": null,
                "usage": { "input_tokens": 10, "output_tokens": 0 }
            }),
        )
    }
    fn error(status: u16, message: &str) -> Reply {
        let kind = match status {
            401 => "authentication_error",
            429 => "rate_limit_error",
            400 => "invalid_request_error",
            _ => "api_error",
        };
        Reply::json(
            status,
            &json!({ "type": "error", "error": { "type": kind, "message": message } }),
        )
    }
    fn sent_key(request: &Recorded) -> Option<String> {
        request.header("x-api-key").map(str::to_owned)
    }
    fn tool_results(request: &Recorded) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for m in request.json()["messages"].as_array().unwrap() {
            for block in m["content"].as_array().into_iter().flatten() {
                if block["type"] == "tool_result" {
                    let text = block["content"]
                        .as_array()
                        .and_then(|c| c.first())
                        .and_then(|c| c["text"].as_str())
                        .or_else(|| block["content"].as_str())
                        .unwrap_or("");
                    out.push((block["tool_use_id"].as_str().unwrap().to_owned(), text.to_owned()));
                }
            }
        }
        out
    }
}

impl Protocol for Gemini {
    const PLUGIN: &'static str = "gemini";
    const KEY: &'static str = "GEMINI_API_KEY";
    const IDS: bool = false;
    fn base_url(url: &str) -> String {
        format!("{url}/v1beta")
    }
    fn text(text: &str, prompt: u64, completion: u64) -> Reply {
        Reply::json(
            200,
            &json!({
                "candidates": [{ "content": { "role": "model", "parts": [{ "text": text }] }, "finishReason": "STOP", "index": 0 }],
                "usageMetadata": { "promptTokenCount": prompt, "candidatesTokenCount": completion, "totalTokenCount": prompt + completion },
                "modelVersion": "gemini-test"
            }),
        )
    }
    fn tool_call(_id: &str, name: &str, args: Value) -> Reply {
        Reply::json(
            200,
            &json!({
                "candidates": [{ "content": { "role": "model", "parts": [{ "functionCall": { "name": name, "args": args } }] }, "finishReason": "STOP", "index": 0 }],
                "usageMetadata": { "promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15 }
            }),
        )
    }
    fn streamed_tool_call(_id: &str, name: &str, args: Value) -> Reply {
        // Gemini sends a call whole; the event itself is split on the wire.
        let call = format!(
            "data: {}\r\n\r\n",
            json!({ "candidates": [{ "content": { "role": "model", "parts": [{ "functionCall": { "name": name, "args": args } }] }, "index": 0 }] })
        );
        let (a, b) = call.split_at(call.len() / 2);
        Reply::sse([
            a.to_owned(),
            b.to_owned(),
            format!(
                "data: {}\r\n\r\n",
                json!({ "candidates": [{ "content": { "role": "model", "parts": [{ "text": "" }] }, "finishReason": "STOP", "index": 0 }], "usageMetadata": { "promptTokenCount": 30, "candidatesTokenCount": 7, "cachedContentTokenCount": 4 } })
            ),
        ])
    }
    fn streamed_text(text: &str) -> Reply {
        let words: Vec<&str> = text.split_inclusive(' ').collect();
        let last = words.len() - 1;
        Reply::sse(words.iter().enumerate().map(|(i, w)| {
            let mut chunk = json!({ "candidates": [{ "content": { "role": "model", "parts": [{ "text": w }] }, "index": 0 }] });
            if i == last {
                chunk["candidates"][0]["finishReason"] = json!("STOP");
                chunk["usageMetadata"] = json!({ "promptTokenCount": 40, "candidatesTokenCount": 3 });
            }
            format!("data: {chunk}\n\n")
        }))
    }
    fn cut_stream() -> Reply {
        Reply::sse(["data: {\"candidates\": [{\"content\": {\"role\": \"mod".to_owned()])
    }
    fn tool_calls(calls: &[(&str, &str, Value)]) -> Reply {
        let parts: Vec<Value> = calls
            .iter()
            .map(|(_, name, args)| json!({ "functionCall": { "name": name, "args": args } }))
            .collect();
        Reply::json(
            200,
            &json!({
                "candidates": [{ "content": { "role": "model", "parts": parts }, "finishReason": "STOP", "index": 0 }],
                "usageMetadata": { "promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15 }
            }),
        )
    }
    fn filtered() -> Reply {
        Reply::json(
            200,
            &json!({
                "candidates": [{ "finishReason": "SAFETY", "index": 0, "safetyRatings": [
                    { "category": "HARM_CATEGORY_DANGEROUS_CONTENT", "probability": "HIGH", "blocked": true }] }],
                "usageMetadata": { "promptTokenCount": 10, "totalTokenCount": 10 }
            }),
        )
    }
    fn error(status: u16, message: &str) -> Reply {
        let name = match status {
            401 => "UNAUTHENTICATED",
            429 => "RESOURCE_EXHAUSTED",
            400 => "INVALID_ARGUMENT",
            _ => "INTERNAL",
        };
        Reply::json(
            status,
            &json!({ "error": { "code": status, "message": message, "status": name } }),
        )
    }
    fn sent_key(request: &Recorded) -> Option<String> {
        request.header("x-goog-api-key").map(str::to_owned)
    }
    fn tool_results(request: &Recorded) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for turn in request.json()["contents"].as_array().unwrap() {
            for part in turn["parts"].as_array().into_iter().flatten() {
                if let Some(response) = part.get("functionResponse") {
                    let text = response["response"]["content"].as_str().unwrap_or("").to_owned();
                    out.push((response["name"].as_str().unwrap().to_owned(), text));
                }
            }
        }
        out
    }
}

struct Setup {
    dir: TestDir,
    runtime: Runtime,
    store: Arc<FileTraceStore>,
}

impl Setup {
    /// The provider plugin `P` pointed at `server`, plus the echo tool.
    async fn new<P: Protocol>(server: &LlmServer, extra: &str) -> Self {
        let dir = TestDir::new();
        dir.install(support::plugins(), P::PLUGIN).install(support::plugins(), "echo");
        let runtime = dir.open(&format!(
            r#"
            [permissions]
            default = "allow"
            [secrets]
            {key} = "{SECRET}"
            [plugins.{plugin}]
            http = ["{addr}"]
            secrets = ["{key}"]
            config = {{ base_url = "{base}", price_input_per_mtok = "1000", price_output_per_mtok = "2000" }}
            {extra}
            "#,
            key = P::KEY,
            plugin = P::PLUGIN,
            addr = server.addr,
            base = P::base_url(&server.url()),
        ))
        .await;
        let store = Arc::new(
            FileTraceStore::open(dir.path().join("traces"), reson::trace::Durability::Batched)
                .unwrap(),
        );
        Self { dir, runtime, store }
    }

    fn runner<P: Protocol>(&self, hooks: Hooks) -> Runner {
        Runner::new(
            self.store.clone(),
            Arc::new(PluginProvider::new(self.runtime.clone(), P::PLUGIN)),
            ToolRegistry::new(self.runtime.clone()).only(vec!["echo".into()]),
            hooks,
        )
    }
}

fn config(stream: bool) -> RunConfig {
    RunConfig {
        params: LlmParams { model: "test-model".into(), stream, ..LlmParams::default() },
        retry_base_delay: Duration::from_millis(10),
        max_retries: 2,
        ..RunConfig::default()
    }
}

fn user(text: &str) -> Vec<Message> {
    vec![Message::new(Role::User, text)]
}

/// Every byte the host wrote for this setup: the traces and the lock file
/// (the config, which holds the secret, is the test's own).
fn written(dir: &TestDir) -> String {
    let mut all =
        String::from_utf8_lossy(&std::fs::read(dir.path().join("reson.lock")).unwrap_or_default())
            .into_owned();
    for entry in walk(&dir.path().join("traces")) {
        all.push_str(&String::from_utf8_lossy(&std::fs::read(entry).unwrap_or_default()));
    }
    all
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else if path.extension().is_none_or(|e| e != "wasm") {
            files.push(path);
        }
    }
    files
}

async fn tool_round_trip<P: Protocol>(stream: bool) {
    let args = json!({ "text": "ping from the model" });
    let first = if stream {
        P::streamed_tool_call("call_1", "echo", args)
    } else {
        P::tool_call("call_1", "echo", args)
    };
    let last =
        if stream { P::streamed_text("all done now") } else { P::text("all done now", 50, 4) };
    let server = LlmServer::start(vec![first, last]);
    let s = Setup::new::<P>(&server, "").await;
    let mut handle =
        s.runner::<P>(Hooks::none()).run(user("echo something"), config(stream)).await.unwrap();
    let mut deltas = 0;
    while let Some(event) = handle.next_event().await {
        if matches!(event, AgentEvent::TextDelta { .. }) {
            deltas += 1;
        }
    }
    let outcome = handle.wait().await.unwrap();
    assert_eq!(outcome.final_text.as_deref(), Some("all done now"));
    if stream {
        assert!(deltas >= 3, "text deltas reach the event stream as they arrive ({deltas})");
    }
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(P::sent_key(&requests[0]).as_deref(), Some(SECRET), "the host filled in the secret");
    let results = P::tool_results(&requests[1]);
    assert_eq!(results.len(), 1);
    let key = if P::IDS { "call_1" } else { "echo" };
    assert_eq!(results[0].0, key, "the result answers its call");
    assert_eq!(results[0].1, "ping from the model");
    let trace = s.store.get_trace(&outcome.trace_id).await.unwrap().unwrap();
    assert!(trace.totals.usage.prompt_tokens > 0 && trace.totals.cost > 0.0, "{:?}", trace.totals);
    assert!(!written(&s.dir).contains(SECRET), "the secret was written somewhere");
}

async fn retries_then_succeeds<P: Protocol>() {
    let server = LlmServer::start(vec![
        P::error(429, "slow down").header("retry-after", "0"),
        P::error(500, "boom"),
        P::text("finally", 5, 1),
    ]);
    let s = Setup::new::<P>(&server, "").await;
    let retries = Arc::new(AtomicU32::new(0));
    let counter = retries.clone();
    let hooks = Hooks::none().on(HookPoint::OnRetry, move |_: &HookEvent| {
        counter.fetch_add(1, Ordering::SeqCst);
        HookDecision::Continue
    });
    let outcome =
        s.runner::<P>(hooks).run(user("hi"), config(false)).await.unwrap().wait().await.unwrap();
    assert_eq!(outcome.final_text.as_deref(), Some("finally"));
    assert_eq!(server.requests().len(), 3);
    assert_eq!(retries.load(Ordering::SeqCst), 2);
    // Each failed attempt is kept in the trace, with its error.
    let failed = failed_attempts(&s, &outcome.trace_id).await;
    assert_eq!(failed.iter().map(|f| (f.0, f.2)).collect::<Vec<_>>(), [(1, true), (2, true)]);
    assert!(failed[1].1.contains("boom"), "{failed:?}");
}

/// The failed model attempts stored in trace `id`: (attempt, error,
/// retrying).
async fn failed_attempts(s: &Setup, id: &str) -> Vec<(u32, String, bool)> {
    s.store
        .events_after(id, 0)
        .await
        .unwrap()
        .into_iter()
        .filter_map(|e| match e.kind {
            EventKind::ModelFailed { attempt, error, retrying, .. } => {
                Some((attempt, error, retrying))
            }
            _ => None,
        })
        .collect()
}

async fn failure<P: Protocol>(replies: Vec<Reply>, stream: bool) -> (AgentError, usize, Setup) {
    let server = LlmServer::start(replies);
    let s = Setup::new::<P>(&server, "[plugins.echo]\n").await;
    let err = s
        .runner::<P>(Hooks::none())
        .run(user("hi"), config(stream))
        .await
        .unwrap()
        .wait()
        .await
        .unwrap_err();
    let count = server.requests().len();
    (err, count, s)
}

async fn errors_are_typed<P: Protocol>() {
    let (err, requests, s) = failure::<P>(vec![P::error(401, "bad key")], false).await;
    assert!(matches!(err, AgentError::Llm(ProviderError::Auth(_))), "{err:?}");
    assert_eq!(requests, 1, "auth errors are not retried");
    assert!(!err.is_recoverable());
    assert!(!err.to_string().contains(SECRET) && !written(&s.dir).contains(SECRET));

    let (err, requests, _) =
        failure::<P>(vec![Reply::raw(200, "application/json", "{\"choices\": [ {")], false).await;
    assert!(matches!(err, AgentError::Llm(ProviderError::InvalidResponse(_))), "{err:?}");
    assert_eq!(requests, 1);

    // A whole event that is not JSON is the server's fault: not retried.
    let (err, requests, _) = failure::<P>(vec![Reply::sse(["data: {\"not json\n\n"])], true).await;
    assert!(matches!(err, AgentError::Llm(ProviderError::InvalidResponse(_))), "{err:?}");
    assert_eq!(requests, 1);
}

/// `reply` without its last `drop` pieces: a stream that a 200 began and
/// the connection ended early.
fn truncated(mut reply: Reply, drop: usize) -> Reply {
    reply.chunks.truncate(reply.chunks.len() - drop);
    reply
}

async fn cut_streams_are_retried<P: Protocol>() {
    // Cut mid-event, and cut between events after some text went out.
    for cut in [P::cut_stream(), truncated(P::streamed_text("partial words that never end"), 2)] {
        let server = LlmServer::start(vec![cut, P::streamed_text("the whole answer")]);
        let s = Setup::new::<P>(&server, "").await;
        let mut handle = s.runner::<P>(Hooks::none()).run(user("hi"), config(true)).await.unwrap();
        let mut retries = Vec::new();
        while let Some(event) = handle.next_event().await {
            if let AgentEvent::Retrying { attempt, error, .. } = event {
                retries.push((attempt, error));
            }
        }
        let outcome = handle.wait().await.unwrap();
        assert_eq!(outcome.final_text.as_deref(), Some("the whole answer"));
        assert_eq!(server.requests().len(), 2);
        assert_eq!(retries.len(), 1, "{retries:?}");
        assert!(retries[0].1.starts_with("network error"), "{retries:?}");
        assert_eq!((outcome.iterations, outcome.requests), (1, 2), "the failed attempt counts");
        let trace = s.store.get_trace(&outcome.trace_id).await.unwrap().unwrap();
        assert_eq!(trace.totals.requests, 2);
        let stored: Vec<_> = s.store.get_messages(&outcome.trace_id).await.unwrap();
        let answer = stored.iter().find(|m| m.role == Role::Assistant).unwrap();
        assert_eq!((answer.text().as_str(), answer.attempts), ("the whole answer", 2));
    }
    // Cut every time: the retries run out and the run fails, every request
    // counted.
    let server = LlmServer::start(vec![P::cut_stream(), P::cut_stream(), P::cut_stream()]);
    let s = Setup::new::<P>(&server, "").await;
    let handle = s.runner::<P>(Hooks::none()).run(user("hi"), config(true)).await.unwrap();
    let trace_id = handle.trace_id().to_owned();
    let err = handle.wait().await.unwrap_err();
    assert!(matches!(err, AgentError::Llm(ProviderError::Network(_))), "{err:?}");
    assert!(err.is_recoverable());
    assert_eq!(server.requests().len(), 3);
    assert_eq!(s.store.get_trace(&trace_id).await.unwrap().unwrap().totals.requests, 3);
    let failed = failed_attempts(&s, &trace_id).await;
    let retried: Vec<(u32, bool)> = failed.iter().map(|f| (f.0, f.2)).collect();
    assert_eq!(retried, [(1, true), (2, true), (3, false)], "the last is not retried");
}

/// A server that ignores the request to stream answers with one JSON body:
/// a whole answer, not a stream cut short.
async fn a_whole_answer_to_a_streamed_request_is_taken<P: Protocol>() {
    let server = LlmServer::start(vec![P::text("whole anyway", 5, 2), P::text("again", 1, 1)]);
    let s = Setup::new::<P>(&server, "").await;
    let outcome = s
        .runner::<P>(Hooks::none())
        .run(user("hi"), config(true))
        .await
        .unwrap()
        .wait()
        .await
        .unwrap();
    assert_eq!(outcome.final_text.as_deref(), Some("whole anyway"));
    assert_eq!((server.requests().len(), outcome.requests), (1, 1));
}

async fn filtered_answers_are_typed_errors<P: Protocol>() {
    let (err, requests, s) = failure::<P>(vec![P::filtered(), P::text("never", 1, 1)], false).await;
    assert!(matches!(err, AgentError::Llm(ProviderError::ContentFiltered(_))), "{err:?}");
    assert_eq!(requests, 1, "a blocked request is not retried");
    assert!(!err.is_recoverable());
    let text = err.to_string();
    assert!(text.contains("content filter") && text.contains(P::PLUGIN), "{text}");
    let trace = &s.store.list_traces(&reson::trace::TraceFilter::default()).await.unwrap()[0];
    assert_eq!(trace.status, reson::trace::TraceStatus::Failed);
    assert_eq!(trace.error_message.as_deref(), Some(text.as_str()));
    assert_eq!(trace.totals.requests, 1);
    assert!(
        s.store.get_messages(&trace.id).await.unwrap().iter().all(|m| m.role != Role::Assistant)
    );
}

/// Two calls of one tool, the first slower: results are stored and sent in
/// the order of the calls, not the order they finished.
async fn results_follow_the_call_order<P: Protocol>() {
    let server = LlmServer::start(vec![
        P::tool_calls(&[
            ("call_slow", "nap", json!({ "ms": 700 })),
            ("call_fast", "nap", json!({ "ms": 1 })),
        ]),
        P::text("both slept", 5, 1),
    ]);
    let s = Setup::new::<P>(&server, "").await;
    s.dir.install(support::test_plugins(), "hostile");
    let runtime = Runtime::open(
        s.dir.options(&std::fs::read_to_string(s.dir.path().join("reson.toml")).unwrap()),
    )
    .await
    .unwrap();
    let runner = Runner::new(
        s.store.clone(),
        Arc::new(PluginProvider::new(runtime.clone(), P::PLUGIN)),
        ToolRegistry::new(runtime).only(vec!["nap".into()]),
        Hooks::none(),
    );
    let mut handle = runner.run(user("nap twice"), config(false)).await.unwrap();
    let mut finished = Vec::new();
    while let Some(event) = handle.next_event().await {
        if let AgentEvent::ToolFinished { output, .. } = event {
            finished.push(output);
        }
    }
    let outcome = handle.wait().await.unwrap();
    assert_eq!(finished, ["slept 1 ms", "slept 700 ms"], "events go out as calls finish");
    let stored: Vec<String> = s
        .store
        .get_messages(&outcome.trace_id)
        .await
        .unwrap()
        .into_iter()
        .filter(|m| m.role == Role::Tool)
        .map(|m| m.text())
        .collect();
    assert_eq!(stored, ["slept 700 ms", "slept 1 ms"]);
    let sent = P::tool_results(&server.requests()[1]);
    let texts: Vec<&str> = sent.iter().map(|(_, text)| text.as_str()).collect();
    assert_eq!(texts, ["slept 700 ms", "slept 1 ms"], "the server sees them in call order");
    if P::IDS {
        let ids: Vec<&str> = sent.iter().map(|(id, _)| id.as_str()).collect();
        assert_eq!(ids, ["call_slow", "call_fast"]);
    }
}

async fn a_slow_stream_meets_the_deadline<P: Protocol>() {
    let server = LlmServer::start(vec![
        // Unbounded, the stream would last well past the bound below.
        P::streamed_text("one two three four five six").paced(Duration::from_secs(1)),
    ]);
    let s = Setup::new::<P>(&server, "").await;
    let mut options =
        s.dir.options(&std::fs::read_to_string(s.dir.path().join("reson.toml")).unwrap());
    options.config.plugins.get_mut(P::PLUGIN).unwrap().limits.timeout_ms = Some(1200);
    let runtime = Runtime::open(options).await.unwrap();
    let runner = Runner::new(
        s.store.clone(),
        Arc::new(PluginProvider::new(runtime.clone(), P::PLUGIN)),
        ToolRegistry::builtins_only(),
        Hooks::none(),
    );
    let started = std::time::Instant::now();
    let err = runner
        .run(user("hi"), RunConfig { max_retries: 0, ..config(true) })
        .await
        .unwrap()
        .wait()
        .await
        .unwrap_err();
    let bound = Duration::from_millis(1200) + support::MARGIN;
    assert!(started.elapsed() < bound, "{:?}", started.elapsed());
    let text = err.to_string();
    assert!(text.contains("time limit of 1200 ms") || text.contains("timed out"), "{text}");
}

async fn an_ungranted_host_is_refused<P: Protocol>() {
    let server = LlmServer::start(vec![P::text("never", 1, 1)]);
    let s = Setup::new::<P>(&server, "").await;
    let mut options =
        s.dir.options(&std::fs::read_to_string(s.dir.path().join("reson.toml")).unwrap());
    options.config.plugins.get_mut(P::PLUGIN).unwrap().http = vec!["127.0.0.1:1".into()];
    let runtime = Runtime::open(options).await.unwrap();
    let runner = Runner::new(
        s.store.clone(),
        Arc::new(PluginProvider::new(runtime, P::PLUGIN)),
        ToolRegistry::builtins_only(),
        Hooks::none(),
    );
    let err = runner.run(user("hi"), config(false)).await.unwrap().wait().await.unwrap_err();
    assert!(err.to_string().contains("not granted"), "{err}");
    assert!(server.requests().is_empty(), "nothing reached the server");
}

macro_rules! protocol_tests {
    ($module:ident, $protocol:ty) => {
        mod $module {
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_tool_call_round_trip_through_the_loop() {
                tool_round_trip::<$protocol>(false).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_streamed_round_trip_with_arguments_split_across_chunks() {
                tool_round_trip::<$protocol>(true).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn rate_limits_and_server_errors_are_retried() {
                retries_then_succeeds::<$protocol>().await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn auth_malformed_and_cut_streams_are_typed_errors() {
                errors_are_typed::<$protocol>().await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_stream_slower_than_the_deadline_is_stopped() {
                a_slow_stream_meets_the_deadline::<$protocol>().await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_host_not_granted_is_refused() {
                an_ungranted_host_is_refused::<$protocol>().await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_stream_cut_after_200_is_retried_and_every_request_counted() {
                cut_streams_are_retried::<$protocol>().await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_json_answer_to_a_streamed_request_is_not_retried() {
                a_whole_answer_to_a_streamed_request_is_taken::<$protocol>().await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn an_answer_the_content_filter_emptied_is_a_typed_error() {
                filtered_answers_are_typed_errors::<$protocol>().await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn parallel_results_are_stored_and_sent_in_call_order() {
                results_follow_the_call_order::<$protocol>().await;
            }
        }
    };
}

protocol_tests!(openai, OpenAi);
protocol_tests!(anthropic, Anthropic);
protocol_tests!(gemini, Gemini);

/// The `picture` guest's PNGs, as it embeds them.
fn guest_png(name: &str) -> Vec<u8> {
    std::fs::read(support::root().join(format!("tests/guests/picture/src/{name}.png"))).unwrap()
}

fn base64(data: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(data)
}

/// The largest image the image runs let through: `red` and `blue` (about
/// 70 bytes) pass, `noise` (12 KB) does not.
const IMAGE_CAP: u64 = 1_000;

/// A run in which the model calls `picture` twice in one answer (two good
/// images; then one too large, one not an image type, one corrupt and a
/// good one), then answers in a stream. Returns the second request, after
/// checking what the trace kept.
async fn image_round_trip<P: Protocol>(model: &str) -> Value {
    let server = LlmServer::start(vec![
        P::tool_calls(&[
            ("call_1", "picture", json!({ "caption": "first", "images": ["red", "blue"] })),
            (
                "call_2",
                "picture",
                json!({ "caption": "second", "images": ["noise", "svg", "corrupt", "red"] }),
            ),
        ]),
        P::streamed_text("a red square and a blue bar"),
    ]);
    let s = Setup::new::<P>(&server, "").await;
    s.dir.install(support::test_plugins(), "picture");
    let runtime = Runtime::open(
        s.dir.options(&std::fs::read_to_string(s.dir.path().join("reson.toml")).unwrap()),
    )
    .await
    .unwrap();
    let runner = Runner::new(
        s.store.clone(),
        Arc::new(PluginProvider::new(runtime.clone(), P::PLUGIN)),
        ToolRegistry::new(runtime).only(vec!["picture".into()]),
        Hooks::none(),
    );
    let mut config = RunConfig { max_image_bytes: IMAGE_CAP, ..config(true) };
    config.params.model = model.into();
    let outcome = runner.run(user("show me"), config).await.unwrap().wait().await.unwrap();
    assert_eq!(outcome.final_text.as_deref(), Some("a red square and a blue bar"));
    let requests = server.requests();
    assert_eq!(requests.len(), 2);

    // The trace keeps the images beside the tool messages, not in them.
    let dir = s.dir.path().join("traces").join(&outcome.trace_id).join("messages");
    assert_eq!(std::fs::read(dir.join("000003-1.png")).unwrap(), guest_png("red"));
    assert_eq!(std::fs::read(dir.join("000003-2.png")).unwrap(), guest_png("blue"));
    assert_eq!(std::fs::read(dir.join("000004.png")).unwrap(), guest_png("red"));
    let log = dir.with_file_name("messages.jsonl");
    let json = std::fs::read_to_string(log).unwrap();
    assert!(json.contains("\"000004.png\""), "{json}");
    assert!(!json.contains("base64"), "{json}");
    // Usage figures pass through: the trace's totals are the server's.
    let trace = s.store.get_trace(&outcome.trace_id).await.unwrap().unwrap();
    assert_eq!(trace.totals.usage.prompt_tokens, 10 + 40, "{:?}", trace.totals);
    requests[1].json()
}

/// The notes the second call's result carries for its three bad images.
fn assert_bad_image_notes(text: &str) {
    let notes = [
        "[image 1 of this result left out: the image is 12420 bytes, over the limit of 1000 bytes]",
        "[image 2 of this result left out: \"image/svg+xml\" is not an image type the host passes \
         on (image/png, image/jpeg, image/gif or image/webp)]",
        "[image 3 of this result left out: the bytes are not a valid image/png image",
    ];
    let mut at = 0;
    for note in notes {
        let found = text[at..].find(note).unwrap_or_else(|| panic!("{note:?} in {text:?}"));
        at += found + note.len();
    }
}

/// Decodes every base64 image of `value` found at `pointer`s and compares.
fn assert_decodes(value: &Value, pointer: &str, png: &str) {
    use base64::Engine as _;
    let data = value.pointer(pointer).and_then(Value::as_str).unwrap_or_else(|| {
        panic!("no {pointer} in {value:#}");
    });
    let data = data.strip_prefix("data:image/png;base64,").unwrap_or(data);
    let bytes = base64::engine::general_purpose::STANDARD.decode(data).unwrap();
    assert_eq!(bytes, guest_png(png), "{pointer}");
}

/// Chat Completions takes text only in a tool message: the images follow
/// the run of tool messages as one user message, each group introduced by
/// the call it came from.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_images_reach_openai_in_a_user_message_after_the_tool_results() {
    let sent = image_round_trip::<OpenAi>("test-model").await;
    let messages = sent["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 5, "{sent:#}");
    assert_eq!(messages[2], json!({"role": "tool", "tool_call_id": "call_1", "content": "first"}));
    assert_eq!(messages[3]["role"], "tool");
    assert_eq!(messages[3]["tool_call_id"], "call_2");
    let text = messages[3]["content"].as_str().unwrap();
    assert!(text.starts_with("second\n"), "{text}");
    assert_bad_image_notes(text);
    let image = |png: &str| {
        json!({"type": "image_url",
               "image_url": {"url": format!("data:image/png;base64,{}", base64(&guest_png(png)))}})
    };
    assert_eq!(
        messages[4],
        json!({"role": "user", "content": [
            {"type": "text", "text": "Images from the result of tool call call_1:"},
            image("red"), image("blue"),
            {"type": "text", "text": "Images from the result of tool call call_2:"},
            image("red"),
        ]})
    );
    assert_decodes(&messages[4], "/content/2/image_url/url", "blue");
}

/// Anthropic takes images inside the `tool_result` block, as base64 sources.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_images_reach_anthropic_as_image_blocks_in_the_tool_result() {
    let sent = image_round_trip::<Anthropic>("test-model").await;
    let messages = sent["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 3, "{sent:#}");
    let image = |png: &str| {
        json!({"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                          "data": base64(&guest_png(png))}})
    };
    let results = &messages[2];
    assert_eq!(results["role"], "user");
    assert_eq!(
        results["content"][0],
        json!({"type": "tool_result", "tool_use_id": "call_1", "content": [
            {"type": "text", "text": "first"}, image("red"), image("blue"),
        ]})
    );
    let second = &results["content"][1];
    assert_eq!(second["tool_use_id"], "call_2");
    let blocks = second["content"].as_array().unwrap();
    assert_eq!(blocks.len(), 5, "{second:#}");
    assert_eq!(blocks[0], json!({"type": "text", "text": "second"}));
    let notes: String = blocks[1..4].iter().map(|b| b["text"].as_str().unwrap()).collect();
    assert_bad_image_notes(&notes);
    assert_eq!(blocks[4], image("red"));
    assert_decodes(results, "/content/0/content/2/source/data", "blue");
}

/// Gemini: each `functionResponse` part is followed, in the same user
/// turn, by its images as `inlineData` parts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_images_reach_gemini_as_inline_data_after_each_function_response() {
    let sent = image_round_trip::<Gemini>("test-model").await;
    let contents = sent["contents"].as_array().unwrap();
    assert_eq!(contents.len(), 3, "{sent:#}");
    let image = |png: &str| json!({"inlineData": {"mimeType": "image/png", "data": base64(&guest_png(png))}});
    let turn = &contents[2];
    assert_eq!(turn["role"], "user");
    let parts = turn["parts"].as_array().unwrap();
    assert_eq!(parts.len(), 5, "{turn:#}");
    assert_eq!(
        parts[0],
        json!({"functionResponse": {"name": "picture", "response": {"content": "first"}}})
    );
    assert_eq!(parts[1], image("red"));
    assert_eq!(parts[2], image("blue"));
    assert_eq!(parts[3]["functionResponse"]["name"], "picture");
    let text = parts[3]["functionResponse"]["response"]["content"].as_str().unwrap();
    assert!(text.starts_with("second\n"), "{text}");
    assert_bad_image_notes(text);
    assert_eq!(parts[4], image("red"));
    assert_decodes(turn, "/parts/2/inlineData/data", "blue");
}

/// Gemini 3 takes the images inside the `functionResponse` ("multimodal
/// function responses"), each named and referred to from the response.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_images_reach_gemini_3_inside_the_function_response() {
    let sent = image_round_trip::<Gemini>("gemini-3-pro-preview").await;
    let parts = sent["contents"][2]["parts"].as_array().unwrap();
    assert_eq!(parts.len(), 2, "{sent:#}");
    let image = |png: &str, display: &str| {
        json!({"inlineData": {"mimeType": "image/png", "data": base64(&guest_png(png)),
                              "displayName": display}})
    };
    let reference = |display: &str| json!({"$ref": display});
    assert_eq!(
        parts[0],
        json!({"functionResponse": {
            "name": "picture",
            "response": {"content": "first",
                         "images": [reference("picture-2-1.img"), reference("picture-2-2.img")]},
            "parts": [image("red", "picture-2-1.img"), image("blue", "picture-2-2.img")],
        }})
    );
    let second = &parts[1]["functionResponse"];
    assert_bad_image_notes(second["response"]["content"].as_str().unwrap());
    assert_eq!(second["parts"], json!([image("red", "picture-3-1.img")]));
    assert_decodes(&parts[0], "/functionResponse/parts/1/inlineData/data", "blue");
}

/// A trace started on OpenAI (with a tool call whose id Anthropic would
/// reject) continues on Anthropic: ids rewritten consistently, results
/// grouped after their calls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trace_moves_from_openai_to_anthropic_to_gemini() {
    let odd_id = "call:abc.123/xyz";
    let openai = LlmServer::start(vec![
        OpenAi::tool_call(odd_id, "echo", json!({ "text": "hi" })),
        OpenAi::text("done", 5, 1),
    ]);
    let first = Setup::new::<OpenAi>(&openai, "").await;
    let outcome = first
        .runner::<OpenAi>(Hooks::none())
        .run(user("start"), config(false))
        .await
        .unwrap()
        .wait()
        .await
        .unwrap();

    let anthropic = LlmServer::start(vec![Anthropic::text("continued", 5, 1)]);
    let second = Setup::new::<Anthropic>(&anthropic, "").await;
    let runner = Runner::new(
        first.store.clone(),
        Arc::new(PluginProvider::new(second.runtime.clone(), "anthropic")),
        ToolRegistry::new(second.runtime.clone()).only(vec!["echo".into()]),
        Hooks::none(),
    );
    let cont = RunConfig { trace_id: Some(outcome.trace_id.clone()), ..config(false) };
    let outcome = runner.run(user("and now?"), cont).await.unwrap().wait().await.unwrap();
    assert_eq!(outcome.final_text.as_deref(), Some("continued"));

    let body = anthropic.requests()[0].json();
    let messages = body["messages"].as_array().unwrap();
    let roles: Vec<&str> = messages.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert!(roles.windows(2).all(|w| w[0] != w[1]), "roles alternate: {roles:?}");
    let tool_use = messages
        .iter()
        .flat_map(|m| m["content"].as_array().into_iter().flatten())
        .find(|b| b["type"] == "tool_use")
        .unwrap();
    let id = tool_use["id"].as_str().unwrap();
    assert!(id.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'), "{id}");
    let results = Anthropic::tool_results(&anthropic.requests()[0]);
    assert_eq!(results, [(id.to_owned(), "hi".to_owned())], "the result still answers its call");
    // The stored trace keeps the original id.
    let stored = first.store.get_messages(&outcome.trace_id).await.unwrap();
    assert!(stored.iter().any(|m| m.tool_calls.iter().any(|c| c.id == odd_id)));

    // And on to Gemini: calls and results as function parts, turns alternating.
    let gemini = LlmServer::start(vec![Gemini::text("and on", 5, 1)]);
    let third = Setup::new::<Gemini>(&gemini, "").await;
    let runner = Runner::new(
        first.store.clone(),
        Arc::new(PluginProvider::new(third.runtime.clone(), "gemini")),
        ToolRegistry::new(third.runtime.clone()).only(vec!["echo".into()]),
        Hooks::none(),
    );
    let cont = RunConfig { trace_id: Some(outcome.trace_id.clone()), ..config(false) };
    assert_eq!(
        runner.run(user("last"), cont).await.unwrap().wait().await.unwrap().final_text.as_deref(),
        Some("and on")
    );
    let body = gemini.requests()[0].json();
    let roles: Vec<&str> =
        body["contents"].as_array().unwrap().iter().map(|c| c["role"].as_str().unwrap()).collect();
    assert!(roles.windows(2).all(|w| w[0] != w[1]), "roles alternate: {roles:?}");
    assert_eq!(Gemini::tool_results(&gemini.requests()[0]), [("echo".to_owned(), "hi".to_owned())]);
}

#[test]
fn reson_run_talks_to_a_configured_base_url_and_prints_deltas() {
    let server = LlmServer::start(vec![OpenAi::streamed_text("hello from the stream")]);
    let dir = TestDir::new();
    dir.install(support::plugins(), "openai");
    dir.config(&format!(
        "[plugins.openai]\nhttp = [\"{}\"]\nsecrets = [\"OPENAI_API_KEY\"]\nconfig = {{ base_url = \"{}/v1\" }}\n",
        server.addr,
        server.url()
    ));
    let reson = |key: Option<&str>| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_reson"));
        cmd.args(["--config", &dir.path().join("reson.toml").to_string_lossy()])
            .args(["--plugins-dir", &dir.plugins().to_string_lossy()])
            .args(["--cache-dir", &support::cache_dir().to_string_lossy()])
            .args(["--traces-dir", &dir.path().join("traces").to_string_lossy()])
            .args(["run", "--provider", "openai", "--model", "gpt-test", "say hello"])
            .env_remove("OPENAI_API_KEY");
        if let Some(key) = key {
            cmd.env("OPENAI_API_KEY", key);
        }
        cmd.output().unwrap()
    };
    let out = reson(Some(SECRET));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("hello from the stream"), "{stdout}");
    assert_eq!(OpenAi::sent_key(&server.requests()[0]).as_deref(), Some(SECRET));
    assert_eq!(server.requests()[0].json()["model"], "gpt-test");

    let out = reson(None);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("OPENAI_API_KEY"), "the error names the missing key: {stderr}");
    assert_eq!(server.requests().len(), 1, "without a key nothing was sent");
}

/// Gemini blocks in two ways besides a SAFETY finish: the prompt, with
/// `promptFeedback.blockReason` and no candidate; and a stream whose only
/// chunk says SAFETY. Both fail the run once, typed, not retried.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_blocked_prompts_and_streams_are_typed_errors_not_retried() {
    let blocked_prompt = Reply::json(
        200,
        &json!({
            "promptFeedback": { "blockReason": "SAFETY", "safetyRatings": [
                { "category": "HARM_CATEGORY_HARASSMENT", "probability": "HIGH" }] },
            "usageMetadata": { "promptTokenCount": 8, "totalTokenCount": 8 },
            "modelVersion": "gemini-test"
        }),
    );
    let (err, requests, _) =
        failure::<Gemini>(vec![blocked_prompt, Gemini::text("no", 1, 1)], false).await;
    assert!(matches!(err, AgentError::Llm(ProviderError::ContentFiltered(_))), "{err:?}");
    assert_eq!(requests, 1);

    let blocked_stream = Reply::sse([format!(
        "data: {}\r\n\r\n",
        json!({ "candidates": [{ "finishReason": "SAFETY", "index": 0 }],
                "usageMetadata": { "promptTokenCount": 8, "totalTokenCount": 8 } })
    )]);
    let (err, requests, _) =
        failure::<Gemini>(vec![blocked_stream, Gemini::streamed_text("no")], true).await;
    assert!(matches!(err, AgentError::Llm(ProviderError::ContentFiltered(_))), "{err:?}");
    assert_eq!(requests, 1);

    // Text that came before the filter stopped it is an answer, cut short.
    let cut_short = Reply::json(
        200,
        &json!({ "candidates": [{ "content": { "role": "model", "parts": [{ "text": "Here is" }] },
                 "finishReason": "SAFETY", "index": 0 }] }),
    );
    let server = LlmServer::start(vec![cut_short]);
    let s = Setup::new::<Gemini>(&server, "").await;
    let outcome = s
        .runner::<Gemini>(Hooks::none())
        .run(user("hi"), config(false))
        .await
        .unwrap()
        .wait()
        .await
        .unwrap();
    assert_eq!(outcome.final_text.as_deref(), Some("Here is"));
}

/// `reson run` against the local server for `provider`, configured with
/// its base URL and key; returns the process's output.
fn reson_run<P: Protocol>(server: &LlmServer, dir: &TestDir, prompt: &str) -> std::process::Output {
    dir.config(&format!(
        "[plugins.{plugin}]\nhttp = [\"{addr}\"]\nsecrets = [\"{key}\"]\nconfig = {{ base_url = \"{base}\" }}\n",
        plugin = P::PLUGIN,
        key = P::KEY,
        addr = server.addr,
        base = P::base_url(&server.url()),
    ));
    std::process::Command::new(env!("CARGO_BIN_EXE_reson"))
        .args(["--config", &dir.path().join("reson.toml").to_string_lossy()])
        .args(["--plugins-dir", &dir.plugins().to_string_lossy()])
        .args(["--cache-dir", &support::cache_dir().to_string_lossy()])
        .args(["--traces-dir", &dir.path().join("traces").to_string_lossy()])
        .args(["run", "--provider", P::PLUGIN, "--model", "test-model", prompt])
        .env(P::KEY, SECRET)
        .output()
        .unwrap()
}

#[test]
fn reson_run_marks_the_text_of_a_failed_attempt_as_discarded() {
    let server = LlmServer::start(vec![
        truncated(OpenAi::streamed_text("partial words that never end"), 2),
        OpenAi::streamed_text("the real answer"),
    ]);
    let dir = TestDir::new();
    dir.install(support::plugins(), "openai");
    let out = reson_run::<OpenAi>(&server, &dir, "say something");
    let (stdout, stderr) =
        (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let partial = stdout.find("partial words").expect("the partial text was streamed");
    let discarded = stdout.find("[discarded").expect("the partial text is marked discarded");
    let answer = stdout.rfind("the real answer").expect("the answer follows");
    assert!(partial < discarded && discarded < answer, "{stdout}");
    assert!(
        stdout[discarded..].lines().nth(1).is_some_and(|l| l.starts_with("the real answer")),
        "the retry's text starts on its own line: {stdout}"
    );
    assert!(stderr.contains("attempt 2"), "{stderr}");
    assert!(stderr.contains("1 model call, 2 requests"), "{stderr}");
    assert_eq!(server.requests().len(), 2);
}

#[test]
fn reson_run_shows_a_gemini_safety_block_as_a_failure() {
    let server = LlmServer::start(vec![Gemini::filtered(), Gemini::text("never", 1, 1)]);
    let dir = TestDir::new();
    dir.install(support::plugins(), "gemini");
    let out = reson_run::<Gemini>(&server, &dir, "something blocked");
    let (stdout, stderr) =
        (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!out.status.success(), "{stdout}\n{stderr}");
    let said = format!("{stdout}{stderr}");
    assert_eq!(said.matches("blocked by the provider's content filter").count(), 1, "once: {said}");
    assert!(stderr.contains("failed"), "{stderr}");
    assert_eq!(server.requests().len(), 1, "not retried");
    let shown = std::process::Command::new(env!("CARGO_BIN_EXE_reson"))
        .args(["--traces-dir", &dir.path().join("traces").to_string_lossy()])
        .args(["--config", &dir.path().join("reson.toml").to_string_lossy()])
        .args(["traces", "list"])
        .output()
        .unwrap();
    let list = String::from_utf8_lossy(&shown.stdout);
    assert!(list.contains("failed"), "{list}");
}
