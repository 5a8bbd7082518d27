//! The bundled `search` plugin through real runs (scripted provider), each
//! backend answered by a local server speaking its API's real response
//! shape: the request is the API's, the key is filled in by the host for
//! the granted host only, the results come back ranked and marked as
//! untrusted, and a refusal names the secret to fix.

use crate::support;
use crate::support::llm_server::{LlmServer, Reply};
use reson::agent::RunConfig;
use reson::trace::{Message, Role, TraceStore};
use serde_json::{Value, json};
use support::TestDir;

const BRAVE_KEY: &str = "brave-key-9f2c";
const TAVILY_KEY: &str = "tvly-key-71ab";

/// Runs one `search` call against `server` as `backend`; the tool's result
/// and every byte the run wrote to its trace.
async fn search_with(backend: &str, server: &LlmServer, arguments: Value) -> (String, String) {
    let dir = TestDir::new();
    dir.install(support::plugins(), "scripted").install(support::plugins(), "search");
    let turns = json!([
        { "tool_calls": [{ "name": "search", "arguments": arguments }] },
        { "text": "done" }
    ]);
    let extra = format!(
        r#"
        [secrets]
        BRAVE_API_KEY = "{BRAVE_KEY}"
        TAVILY_API_KEY = "{TAVILY_KEY}"
        [plugins.search]
        http = ["{addr}"]
        secrets = ["BRAVE_API_KEY", "TAVILY_API_KEY"]
        config = {{ backend = "{backend}", base_url = "{url}" }}
        "#,
        addr = server.addr,
        url = server.url(),
    );
    let runtime = dir.open_scripted(&json!({ "turns": turns }), &extra).await;
    let store = dir.store();
    let runner = TestDir::scripted_runner(&runtime, store.clone());
    let handle = runner
        .run(vec![Message::new(Role::User, "look it up")], RunConfig::default())
        .await
        .unwrap();
    let outcome = handle.wait().await.unwrap();
    assert_eq!(outcome.final_text.as_deref(), Some("done"));
    let messages = store.get_messages(&outcome.trace_id).await.unwrap();
    let result = messages.iter().find(|m| m.role == Role::Tool).expect("the search result").text();
    store.sync().await.unwrap();
    let mut written = String::new();
    for entry in support::files_under(&dir.path().join("traces")) {
        written.push_str(&String::from_utf8_lossy(&std::fs::read(entry).unwrap_or_default()));
    }
    (result, written)
}

/// The titles of a result, in order.
fn titles(result: &str) -> Vec<String> {
    result
        .split("\u{27e6}untrusted search result:\n")
        .skip(1)
        .map(|r| r.lines().next().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_backend_is_asked_its_way_and_its_results_come_back_ranked_and_marked() {
    // SearXNG's JSON format.
    let searx = LlmServer::start(vec![Reply::json(
        200,
        &json!({
            "query": "wasm components", "number_of_results": 0,
            "results": [
                { "url": "https://component-model.bytecodealliance.org/", "title": "The WebAssembly Component Model", "content": "An introduction", "engine": "duckduckgo", "score": 2.0 },
                { "url": "https://wasmtime.dev/", "title": "Wasmtime", "content": "A fast and secure runtime", "engine": "bing", "score": 1.0 }
            ],
            "answers": [], "corrections": [], "infoboxes": [], "suggestions": [], "unresponsive_engines": []
        }),
    )]);
    let (result, _) = search_with("searxng", &searx, json!({ "query": "wasm components" })).await;
    assert!(result.starts_with("2 results from searxng, best first."), "{result}");
    assert_eq!(titles(&result), ["The WebAssembly Component Model", "Wasmtime"]);
    let sent = &searx.requests()[0];
    assert_eq!(
        (sent.method.as_str(), sent.path.as_str()),
        ("GET", "/search?q=wasm+components&format=json")
    );
    assert_eq!(sent.header("authorization"), None, "no key for searxng");

    // Brave's web search, its key in its header.
    let brave = LlmServer::start(vec![Reply::json(
        200,
        &json!({
            "type": "search",
            "query": { "original": "rust book" },
            "web": { "type": "search", "results": [
                { "title": "The <strong>Rust</strong> Programming Language", "url": "https://doc.rust-lang.org/book/", "description": "by Steve Klabnik &amp; Carol Nichols", "language": "en", "family_friendly": true },
                { "title": "Rust by Example", "url": "https://doc.rust-lang.org/rust-by-example/", "description": "A collection of runnable examples" },
                { "title": "Third", "url": "https://third.example/", "description": "not asked for" }
            ] }
        }),
    )]);
    let (result, written) =
        search_with("brave", &brave, json!({ "query": "rust book", "count": 2 })).await;
    assert_eq!(titles(&result), ["The Rust Programming Language", "Rust by Example"], "{result}");
    assert!(result.contains("by Steve Klabnik & Carol Nichols"), "{result}");
    let sent = &brave.requests()[0];
    assert_eq!(sent.path, "/res/v1/web/search?q=rust+book&count=2");
    assert_eq!(sent.header("x-subscription-token"), Some(BRAVE_KEY), "the host filled in the key");
    assert!(!written.contains(BRAVE_KEY), "the key reached the trace");

    // Tavily: a POST with the key as a bearer token.
    let tavily = LlmServer::start(vec![Reply::json(
        200,
        &json!({
            "query": "bubblewrap", "follow_up_questions": null, "answer": null, "images": [],
            "results": [{ "title": "containers/bubblewrap", "url": "https://github.com/containers/bubblewrap", "content": "Low-level unprivileged sandboxing tool", "score": 0.98, "raw_content": null }],
            "response_time": 1.1
        }),
    )]);
    let (result, written) =
        search_with("tavily", &tavily, json!({ "query": "bubblewrap", "count": 4 })).await;
    assert!(result.starts_with("1 result from tavily"), "{result}");
    let sent = &tavily.requests()[0];
    assert_eq!((sent.method.as_str(), sent.path.as_str()), ("POST", "/search"));
    assert_eq!(sent.json(), json!({ "query": "bubblewrap", "max_results": 4 }));
    assert_eq!(sent.header("authorization"), Some(format!("Bearer {TAVILY_KEY}").as_str()));
    assert!(!written.contains(TAVILY_KEY), "the key reached the trace");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_and_a_malformed_answer_end_in_errors_that_say_what_to_fix() {
    let brave = LlmServer::start(vec![Reply::json(
        401,
        &json!({ "type": "ErrorResponse", "error": { "code": "SUBSCRIPTION_TOKEN_INVALID", "status": 401 } }),
    )]);
    let (result, _) = search_with("brave", &brave, json!({ "query": "x" })).await;
    assert!(
        result.contains("refused (401)") && result.contains("secret `BRAVE_API_KEY`"),
        "{result}"
    );

    let searx = LlmServer::start(vec![Reply::raw(
        200,
        "text/html",
        "<html>the HTML page, not the JSON format</html>",
    )]);
    let (result, _) = search_with("searxng", &searx, json!({ "query": "x" })).await;
    assert!(result.contains("search (searxng): the searxng answer is not JSON"), "{result}");

    let unused = LlmServer::start(Vec::new());
    let (result, _) = search_with("searxng", &unused, json!({ "query": "  " })).await;
    assert!(result.contains("query must not be empty"), "{result}");
    assert!(unused.requests().is_empty(), "nothing was sent");
}
