//! `reson serve` (issue 11) from the outside: the real binary on an
//! ephemeral 127.0.0.1 port over the real bundled plugins, driven with a
//! real HTTP client and a real WebSocket client. Every route and error of
//! the contract, runs watched live, reconnects with `since`, approvals over
//! HTTP, stop and continue, rewind and regenerate against the CLI, the
//! token, SIGTERM and kill -9. And (issue 21) what a web page elsewhere
//! could send through the user's browser, written as raw requests with
//! forged `Origin` and `Host` headers: refused on every route, the
//! WebSocket included, while the server's own page, the origins and names
//! the config allows and clients without `Origin` get through.

use crate::support;
use crate::support::api as api_support;

use api_support::{
    Api, End, ServerProcess, WAIT, Watcher, echo_turn, events, events_file, ids, kinds, refused,
    reson, set_script, text_turn,
};
use futures::SinkExt;
use reqwest::Method;
use reson::agent::INTERRUPTED;
use reson::trace::{Durability, FileTraceStore, Role, TraceStatus, TraceStore};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::time::{Duration, Instant};
use support::TestDir;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

/// A server over a directory holding the scripted provider (its script
/// granted in the config) and `plugins`, with `extra` config.
struct Fixture {
    dir: TestDir,
    server: ServerProcess,
}

impl Fixture {
    async fn new(plugins: &[&str], extra: &str, turns: Value) -> Self {
        Self::with_args(plugins, extra, turns, &[]).await
    }

    async fn with_args(plugins: &[&str], extra: &str, turns: Value, args: &[&str]) -> Self {
        let dir = api_support::dir_with(&[&["scripted"], plugins].concat());
        let script = set_script(dir.path(), turns);
        let grant = format!(
            "[plugins.scripted]\ndirs = [{{ path = \".\", access = \"read\" }}]\n\
             config = {{ script = \"{}\" }}\n{extra}",
            script.display()
        );
        dir.config(&api_support::config(&grant));
        let server = ServerProcess::start(dir.path(), args).await;
        Self { dir, server }
    }

    fn api(&self) -> &Api {
        &self.server.api
    }

    fn traces(&self) -> PathBuf {
        self.dir.path().join("traces")
    }

    fn store(&self) -> FileTraceStore {
        FileTraceStore::open(self.traces(), Durability::Batched).unwrap()
    }

    fn script(&self, turns: Value) {
        set_script(self.dir.path(), turns);
    }
}

/// Asserts `ids` is exactly `from..=to`.
fn assert_contiguous(ids: &[u64], from: u64, to: u64) {
    assert_eq!(ids, (from..=to).collect::<Vec<_>>(), "event ids with a gap or a duplicate");
}

/// The text of a message as the API serializes it (its text parts joined).
fn text(message: &Value) -> String {
    let parts = message["content"].as_array().unwrap();
    parts.iter().filter_map(|p| p["text"].as_str()).collect()
}

fn texts(messages: &Value) -> Vec<String> {
    messages["messages"].as_array().unwrap().iter().map(text).collect()
}

fn trace_finished(frames: &[Value]) -> &Value {
    frames.iter().rev().find(|f| f["kind"] == "trace_finished").expect("a trace_finished frame")
}

/// The `permission_decided` decisions of trace `id`, from its events file.
fn decisions(f: &Fixture, id: &str) -> Vec<Value> {
    events_file(&f.traces(), id)
        .into_iter()
        .filter(|e| e["kind"] == "permission_decided")
        .map(|e| e["decision"].clone())
        .collect()
}

/// The texts of the tool results on trace `id`'s main path.
async fn tool_texts(api: &Api, id: &str) -> Vec<String> {
    api.messages(id, "main_path").await["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(text)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_plugins_openapi_and_unknown_routes() {
    let lessons = json!({ "experiences": [{ "category": "logic_flow", "rule": "Greet first.",
        "tags": { "intent": ["greet"], "state": [] } }] });
    let f = Fixture::new(&["echo"], "", json!([text_turn("hi"), text_turn(&lessons.to_string())]))
        .await;
    let api = f.api();
    let health = api.get("/api/health").await.expect(200);
    assert_eq!(health, json!({ "status": "ok", "version": "0.1.0", "running": 0 }));

    let plugins = api.get("/api/plugins").await.expect(200);
    let cli = reson(f.dir.path()).args(["plugins", "list", "--json"]).output().await.unwrap();
    assert!(cli.status.success(), "{}", String::from_utf8_lossy(&cli.stderr));
    let cli: Value = serde_json::from_slice(&cli.stdout).unwrap();
    assert_eq!(plugins, cli, "GET /api/plugins is `reson plugins list --json`");
    let names: Vec<&str> =
        plugins.as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert!(names.contains(&"echo") && names.contains(&"scripted"), "{names:?}");

    api.get("/api/no-such-route").await.expect_error(404, "not_found");
    api.post("/api/traces/tr_000000000000/nothing", json!({})).await.expect_error(404, "not_found");

    // Reflection writes experiences from a side branch (the head stays);
    // a model answer that is not experiences writes nothing.
    let id = api.start("hi", json!({})).await;
    api.finish(&id, 0).await;
    let trace = format!("/api/traces/{id}");
    let head = api.get(&trace).await.expect(200)["trace"]["head_sequence"].clone();
    let reflected = api.post(&format!("{trace}/reflect"), json!({ "focus": "greetings" })).await;
    let reflected = reflected.expect(200);
    assert_eq!(reflected["experiences"][0]["rule"], "Greet first.");
    assert_eq!(reflected["experiences"][0]["metrics"]["helpful"], 1);
    assert_eq!(api.get(&trace).await.expect(200)["trace"]["head_sequence"], head);
    let listed = api.get("/api/experiences").await.expect(200);
    assert_eq!(listed["experiences"], reflected["experiences"]);
    f.script(json!([text_turn("hi"), text_turn("nothing learnt")]));
    let bad = api.post(&format!("{trace}/reflect"), json!({})).await;
    let message = bad.expect_error(422, "unprocessable");
    assert!(message.contains("not valid"), "{message}");
    assert_eq!(api.get("/api/experiences").await.expect(200), listed, "nothing was written");
    let unknown = api.post("/api/traces/tr_000000000000/reflect", json!({})).await;
    unknown.expect_error(404, "not_found");

    let doc = api.get("/api/openapi.json").await.expect(200);
    assert!(doc["openapi"].as_str().unwrap().starts_with("3.1"), "{}", doc["openapi"]);
    let routes = [
        ("get", "/api/health"),
        ("get", "/api/plugins"),
        ("get", "/api/traces"),
        ("post", "/api/traces"),
        ("get", "/api/traces/running"),
        ("get", "/api/traces/{id}"),
        ("get", "/api/traces/{id}/messages"),
        ("post", "/api/traces/{id}/run"),
        ("post", "/api/traces/{id}/stop"),
        ("post", "/api/traces/{id}/reflect"),
        ("get", "/api/traces/{id}/watch"),
        ("get", "/api/experiences"),
        ("get", "/api/approvals"),
        ("post", "/api/approvals/{id}"),
    ];
    let paths = doc["paths"].as_object().expect("paths");
    for (method, path) in routes {
        assert!(
            paths.get(path).and_then(|p| p.get(method)).is_some(),
            "{} {path} missing from the OpenAPI document; it has {:?}",
            method.to_uppercase(),
            paths.keys().collect::<Vec<_>>()
        );
    }
    assert!(doc["components"]["schemas"].as_object().is_some_and(|s| !s.is_empty()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_with_a_real_tool_call_is_watched_to_completion() {
    let f = Fixture::new(&["echo"], "", json!([echo_turn("hello"), text_turn("done")])).await;
    let api = f.api();
    let id = api.start("say hello", json!({ "task": "greet" })).await;
    let frames = api.finish(&id, 0).await;

    let persisted = events(&frames);
    assert_contiguous(&ids(&frames), 1, persisted.len() as u64);
    assert_eq!(persisted, events_file(&f.traces(), &id), "the frames are events.jsonl's lines");
    let kinds = kinds(&persisted);
    assert!(kinds.contains(&"trace_started".to_owned()), "{kinds:?}");
    assert_eq!(kinds.last().map(String::as_str), Some("trace_finished"));
    assert_eq!(trace_finished(&frames)["status"], "completed");
    let started = persisted.iter().find(|e| e["kind"] == "tool_started").expect("tool_started");
    assert_eq!((&started["name"], &started["call_id"]), (&json!("echo"), &json!("call_0_0")));
    let finished = persisted.iter().find(|e| e["kind"] == "tool_finished").expect("tool_finished");
    assert_eq!((&finished["name"], &finished["ok"]), (&json!("echo"), &json!(true)));
    let decided = persisted.iter().find(|e| e["kind"] == "permission_decided").unwrap();
    assert_eq!(decided["decision"], "allow");

    // The messages over HTTP are the store's.
    let messages = api.messages(&id, "main_path").await;
    assert_eq!(texts(&messages), ["say hello", "echoing hello", "hello", "done"]);
    let roles: Vec<&Value> =
        messages["messages"].as_array().unwrap().iter().map(|m| &m["role"]).collect();
    assert_eq!(roles, ["user", "assistant", "tool", "assistant"]);
    assert_eq!(messages["head_sequence"], 4);
    let store = f.store();
    let stored = store.get_main_path_messages(&id, 4).await.unwrap();
    assert_eq!(messages["messages"], serde_json::to_value(&stored).unwrap());
    let all = api.messages(&id, "all").await;
    assert_eq!(
        all["messages"],
        serde_json::to_value(store.get_messages(&id).await.unwrap()).unwrap()
    );
    let added: Vec<Value> = persisted
        .iter()
        .filter(|e| e["kind"] == "message_added")
        .map(|e| e["message"].clone())
        .collect();
    assert_eq!(
        added,
        messages["messages"].as_array().unwrap()[..],
        "message_added carries each message"
    );

    let detail = api.trace(&id).await;
    let trace = store.get_trace(&id).await.unwrap().unwrap();
    assert_eq!(trace.status, TraceStatus::Completed);
    assert_eq!(detail["trace"], serde_json::to_value(&trace).unwrap());
    assert_eq!(detail["trace"]["task"], "greet");
    assert_eq!(
        detail["goal_tree"],
        serde_json::to_value(store.get_goals(&id).await.unwrap()).unwrap()
    );
    assert_eq!((&detail["sub_traces"], &detail["running"]), (&json!([]), &json!(false)));
    assert_eq!(api.get("/api/traces/running").await.expect(200), json!({ "traces": [] }));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn traces_are_listed_newest_first_with_filters_and_paging() {
    let f = Fixture::new(&["echo"], "", json!([text_turn("ok")])).await;
    let api = f.api();
    let mut made = Vec::new();
    for task in ["one", "two", "three"] {
        let id = api.start(task, json!({})).await;
        api.finish(&id, 0).await;
        made.push(id);
    }
    let listed = |body: &Value| -> Vec<String> {
        body["traces"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["id"].as_str().unwrap().to_owned())
            .collect()
    };
    let all = api.get("/api/traces").await.expect(200);
    assert_eq!(listed(&all), [made[2].clone(), made[1].clone(), made[0].clone()]);
    assert_eq!(all["total"], 3);
    let cli = reson(f.dir.path()).args(["traces", "list", "--json"]).output().await.unwrap();
    let cli: Value = serde_json::from_slice(&cli.stdout).unwrap();
    assert_eq!(all["traces"], cli, "traces as `reson traces list --json` shows them");

    let page = api.get("/api/traces?limit=2&offset=0").await.expect(200);
    assert_eq!(
        (listed(&page), &page["total"]),
        (vec![made[2].clone(), made[1].clone()], &json!(3))
    );
    let page = api.get("/api/traces?limit=2&offset=2").await.expect(200);
    assert_eq!((listed(&page), &page["total"]), (vec![made[0].clone()], &json!(3)));
    let done = api.get("/api/traces?status=completed&root_only=true").await.expect(200);
    assert_eq!(done["total"], 3);
    let running = api.get("/api/traces?status=running").await.expect(200);
    assert_eq!((listed(&running).len(), &running["total"]), (0, &json!(0)));

    for bad in ["status=bogus", "limit=ten", "offset=-1", "root_only=maybe"] {
        api.get(&format!("/api/traces?{bad}")).await.expect_error(400, "bad_request");
    }
    let id = &made[0];
    api.get(&format!("/api/traces/{id}/messages?mode=bogus"))
        .await
        .expect_error(400, "bad_request");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watcher_that_drops_mid_run_gets_every_event_once_after_reconnecting() {
    let slow = json!({ "text": "slow", "delay_ms": 1500, "tool_calls": [{ "name": "echo", "arguments": { "text": "two" } }] });
    let f = Fixture::new(&["echo"], "", json!([echo_turn("one"), slow, text_turn("done")])).await;
    let api = f.api();
    let id = api.start("go", json!({})).await;

    let mut first = api.watch(&id, 0).await;
    first.until_kind("tool_finished").await;
    let seen = first.ids();
    let last = *seen.last().unwrap();
    // Gone without a close frame, as a dropped connection goes.
    drop(first);

    let mut second = api.watch(&id, last).await;
    second.until_kind("trace_finished").await;
    let rest = second.ids();
    assert_eq!(rest.first(), Some(&(last + 1)), "the reconnect resumes right after {last}");
    let all: Vec<u64> = seen.iter().chain(&rest).copied().collect();
    let file = events_file(&f.traces(), &id);
    assert_contiguous(&all, 1, file.len() as u64);
    assert!(
        events(&second.frames)
            .iter()
            .any(|e| e["kind"] == "message_added" && text(&e["message"]) == "slow"),
        "the second socket saw the delayed turn"
    );
    assert_eq!(events(&second.frames), file[last as usize..]);

    // A third, after the end, replays the same tail and nothing else.
    let mut third = api.watch(&id, last).await;
    third.until_kind("trace_finished").await;
    assert_eq!(third.ids(), rest);
    // Live-only frames carry no id and are not replayed.
    assert!(third.frames.iter().all(|f| f.get("id").is_some()), "{:#?}", third.frames);
    assert!(
        !kinds(&second.frames).contains(&"approval_needed".to_owned()),
        "nothing asked in this run"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approvals_are_answered_over_http_and_time_out_to_a_denial() {
    // The timeout covers every ask: the answered ones get a long one, so
    // that the round trips before each answer never outlast it, and the
    // ask left unanswered has a server of its own below.
    let turns = json!([echo_turn("a"), echo_turn("b"), text_turn("done")]);
    let f = Fixture::new(&["echo"], "[server]\napproval_timeout_ms = 30000\n", turns).await;
    let api = f.api();
    let id = api.start("ask me", json!({ "preset": "careful" })).await;

    let a = api.pending_approval(&id).await;
    let keys: Vec<&String> = a.as_object().unwrap().keys().collect();
    assert_eq!(keys.len(), 6, "id, trace_id, call_id, tool, arguments, rule: {a}");
    assert_eq!((&a["tool"], &a["call_id"]), (&json!("echo"), &json!("call_0_0")));
    let arguments: Value = serde_json::from_str(a["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(arguments, json!({ "text": "a" }));
    assert!(a["rule"].as_str().unwrap().contains("echo"), "{a}");
    // Watching from here: the next asks arrive live.
    let mut watcher = api.watch(&id, 0).await;

    let answer = |id: &Value, answer: &str| {
        let path = format!("/api/approvals/{}", id.as_str().unwrap());
        let body = json!({ "answer": answer });
        async move { api.post(&path, body).await }
    };
    answer(&a["id"], "maybe").await.expect_error(422, "unprocessable");
    assert_eq!(
        answer(&a["id"], "once").await.expect(200),
        json!({ "id": a["id"], "answer": "once" })
    );
    answer(&a["id"], "once").await.expect_error(404, "not_found");
    answer(&json!("ap_00000000000000000000000000000000"), "deny")
        .await
        .expect_error(404, "not_found");
    answer(&json!("1"), "deny").await.expect_error(404, "not_found");

    let b = watcher.until_kind("approval_needed").await;
    assert!(b.get("id").is_none(), "live frames carry no event id: {b}");
    let b = b["request"].clone();
    assert_eq!(b["call_id"], "call_1_0");
    assert_ne!(b["id"], a["id"], "approval ids are unique");
    let listed = api.get("/api/approvals").await.expect(200);
    assert!(listed["approvals"].as_array().unwrap().contains(&b), "{listed}");
    answer(&b["id"], "deny").await.expect(200);
    let finished = watcher.until_kind("trace_finished").await;
    assert_eq!(finished["status"], "completed");
    let listed = api.get("/api/approvals").await.expect(200);
    assert_eq!(listed, json!({ "approvals": [] }));
    assert_eq!(decisions(&f, &id), ["ask-once", "ask-denied"]);
    let tools = tool_texts(api, &id).await;
    assert_eq!(tools[0], "a");
    assert!(tools[1].contains("denied") || tools[1].contains("Denied"), "{tools:?}");
    // What the model said after the first answer streamed to the watcher.
    let streamed: String = watcher
        .frames
        .iter()
        .filter(|f| f["kind"] == "text_delta")
        .map(|f| f["text"].as_str().unwrap())
        .collect();
    assert_eq!(streamed, "echoing bdone");

    let turns = json!([text_turn("ready"), echo_turn("c"), text_turn("done")]);
    let f = Fixture::new(&["echo"], "[server]\napproval_timeout_ms = 2000\n", turns).await;
    let api = f.api();
    let id = api.start("ask me", json!({ "preset": "careful" })).await;
    // The ask comes in a continue, once the watcher is there to see it
    // live, however soon it times out.
    let mut watcher = api.watch(&id, 0).await;
    watcher.until_kind("trace_finished").await;
    api.settled(&id).await;
    api.run(&id, json!({ "messages": [{ "role": "user", "content": "now ask" }] })).await;
    let c = watcher.until_kind("approval_needed").await["request"].clone();
    assert_eq!(c["call_id"], "call_1_0");
    let finished = watcher.until_kind("trace_finished").await;
    assert_eq!(finished["status"], "completed");
    let late = format!("/api/approvals/{}", c["id"].as_str().unwrap());
    api.post(&late, json!({ "answer": "once" })).await.expect_error(404, "not_found");
    let listed = api.get("/api/approvals").await.expect(200);
    assert_eq!(listed, json!({ "approvals": [] }));
    assert_eq!(decisions(&f, &id), ["ask-timeout"]);
    let tools = tool_texts(api, &id).await;
    assert!(tools[0].contains("denied") || tools[0].contains("Denied"), "{tools:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_run_continues_to_completion_on_the_same_socket() {
    let f = Fixture::new(&["echo"], "", json!([{ "text": "slow", "delay_ms": 30000 }])).await;
    let api = f.api();
    let id = api.start("think", json!({})).await;
    let mut watcher = api.watch(&id, 0).await;
    watcher.until_kind("message_added").await;

    // While it runs.
    assert_eq!(api.get("/api/health").await.expect(200)["running"], 1);
    let running = api.get("/api/traces/running").await.expect(200);
    assert_eq!(running["traces"][0]["id"], id.as_str(), "{running}");
    assert_eq!(api.get("/api/traces?status=running").await.expect(200)["total"], 1);
    assert_eq!(api.trace(&id).await["running"], true);
    let again = api.post(&format!("/api/traces/{id}/run"), json!({})).await;
    again.expect_error(409, "conflict");

    let stopping = Instant::now();
    let reply = api.post(&format!("/api/traces/{id}/stop"), json!({})).await.expect(200);
    assert_eq!(reply, json!({ "trace_id": id, "status": "stopping" }));
    let finished = watcher.until_kind("trace_finished").await;
    assert_eq!(finished["status"], "stopped");
    assert!(stopping.elapsed() < support::MARGIN, "the stop waited for the model call");
    api.settled(&id).await;
    let detail = api.trace(&id).await;
    assert_eq!(
        (&detail["trace"]["status"], &detail["running"]),
        (&json!("stopped"), &json!(false))
    );
    api.post(&format!("/api/traces/{id}/stop"), json!({})).await.expect_error(409, "conflict");
    assert_eq!(api.get("/api/health").await.expect(200)["running"], 0);

    f.script(json!([text_turn("fast now")]));
    let reply = api.run(&id, json!({})).await;
    assert_eq!(reply["mode"], "continue");
    let finished = watcher.until_kind("trace_finished").await;
    assert_eq!(finished["status"], "completed");
    api.settled(&id).await;
    assert_contiguous(&watcher.ids(), 1, events_file(&f.traces(), &id).len() as u64);
    assert_eq!(texts(&api.messages(&id, "main_path").await), ["think", "fast now"]);

    // A continue with a new message, and one naming the head, continue too.
    f.script(json!([text_turn("fast now"), text_turn("and again"), text_turn("third")]));
    let head = api.trace(&id).await["trace"]["head_sequence"].as_u64().unwrap();
    let body = json!({ "messages": [{ "role": "user", "content": "more" }] });
    assert_eq!(api.run(&id, body).await["mode"], "continue");
    watcher.until_kind("trace_finished").await;
    api.settled(&id).await;
    let body =
        json!({ "after_sequence": head + 2, "messages": [{ "role": "user", "content": "on" }] });
    assert_eq!(api.run(&id, body).await["mode"], "continue");
    watcher.until_kind("trace_finished").await;
    assert_eq!(
        texts(&api.messages(&id, "main_path").await),
        ["think", "fast now", "more", "and again", "on", "third"]
    );
}

/// The message tree of a trace, without ids and times: what a rewind or a
/// regenerate decides.
fn tree(all: &Value) -> Vec<Value> {
    all["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            json!([
                m["sequence"],
                m["parent_sequence"],
                m["role"],
                m["content"],
                m["tool_calls"],
                m["tool_call_id"],
                m["synthetic"]
            ])
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rewind_and_regenerate_over_http_make_the_trees_the_cli_makes() {
    let turns = json!([echo_turn("x"), text_turn("first answer")]);
    let f = Fixture::new(&["echo"], "", turns).await;
    let api = f.api();
    let user = |text: &str| json!({ "messages": [{ "role": "user", "content": text }] });

    let id = api.start("first", json!({})).await;
    api.finish(&id, 0).await;
    let steps = [
        (json!({ "after_sequence": 1, "messages": user("second")["messages"] }), "rewind"),
        (json!({ "after_sequence": 1 }), "regenerate"),
        (json!({ "after_sequence": 2, "messages": user("third")["messages"] }), "rewind"),
    ];
    for (body, mode) in steps {
        let since = api.last_event(&id).await;
        assert_eq!(api.run(&id, body).await["mode"], mode);
        let frames = api.finish(&id, since).await;
        assert_eq!(trace_finished(&frames)["status"], "completed");
    }

    let cli = |args: &[&str]| {
        let mut command = reson(f.dir.path());
        command.arg("run").args(args);
        async move {
            let out = command.output().await.unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
            assert!(out.status.success(), "{stderr}");
            stderr
        }
    };
    let stderr = cli(&["first"]).await;
    let line = stderr.lines().find(|l| l.starts_with("trace ")).expect("the trace line");
    let other = line.split_whitespace().nth(1).unwrap().to_owned();
    cli(&["--trace", &other, "--after", "1", "second"]).await;
    cli(&["--trace", &other, "--after", "1"]).await;
    cli(&["--trace", &other, "--after", "2", "third"]).await;

    let http_tree = tree(&api.messages(&id, "all").await);
    let cli_tree = tree(&api.messages(&other, "all").await);
    assert_eq!(http_tree, cli_tree);
    assert_eq!(http_tree.len(), 13, "{http_tree:#?}");
    let heads = (api.trace(&id).await, api.trace(&other).await);
    assert_eq!(heads.0["trace"]["head_sequence"], heads.1["trace"]["head_sequence"]);
    // The rewind after the assistant's call went past its result.
    assert_eq!(http_tree[11][1], 3, "{:#?}", http_tree[11]);

    // An after_sequence off the tree is refused and changes nothing.
    let before = api.messages(&id, "all").await;
    let off = api.post(&format!("/api/traces/{id}/run"), json!({ "after_sequence": 99 })).await;
    off.expect_error(400, "bad_request");
    assert_eq!(api.messages(&id, "all").await, before);
    assert_eq!(api.trace(&id).await["trace"]["status"], "completed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_json_errors_and_change_nothing() {
    let f = Fixture::new(&["echo"], "", json!([text_turn("ok")])).await;
    let api = f.api();
    let id = api.start("one", json!({})).await;
    api.finish(&id, 0).await;
    let count = || async { api.get("/api/traces").await.expect(200)["total"].clone() };
    let none = "tr_000000000000";

    api.get(&format!("/api/traces/{none}")).await.expect_error(404, "not_found");
    api.get(&format!("/api/traces/{none}/messages")).await.expect_error(404, "not_found");
    api.post(&format!("/api/traces/{none}/run"), json!({})).await.expect_error(404, "not_found");
    api.post(&format!("/api/traces/{none}/stop"), json!({})).await.expect_error(404, "not_found");
    let (status, body) = refused(api.connect(&format!("/api/traces/{none}/watch"), None).await);
    assert_eq!((status, &body["error"]["code"]), (404, &json!("not_found")), "{body}");
    api.get("/api/traces/..%2F..%2Fetc/messages").await.expect_error(404, "not_found");

    let message = |text: &str| json!([{ "role": "user", "content": text }]);
    let send = |body: &str| api.send(Method::POST, "/api/traces", Some(body.as_bytes().to_vec()));
    send("{\"messages\": [").await.expect_error(422, "unprocessable");
    send(r#"{"messages": "hello"}"#).await.expect_error(422, "unprocessable");
    send(r#"{"messages": [{"role": "user", "content": "x"}], "max_iterations": "ten"}"#)
        .await
        .expect_error(422, "unprocessable");
    send(r#"{"messages": []}"#).await.expect_error(400, "bad_request");
    let unknown =
        api.post("/api/traces", json!({ "messages": message("x"), "provider": "nope" })).await;
    assert!(unknown.expect_error(400, "bad_request").contains("nope"));
    let unknown =
        api.post("/api/traces", json!({ "messages": message("x"), "preset": "nope" })).await;
    assert!(unknown.expect_error(400, "bad_request").contains("nope"));
    let run = format!("/api/traces/{id}/run");
    api.send(Method::POST, &run, Some(b"[".to_vec())).await.expect_error(422, "unprocessable");
    api.post(&run, json!({ "after_sequence": "one" })).await.expect_error(422, "unprocessable");

    // Over the 1 MiB default body limit, refused from its declared length.
    let head = format!(
        "POST /api/traces HTTP/1.1\r\nHost: {}\r\n\
         Content-Type: application/json\r\nContent-Length: 1100000\r\n\r\n",
        api.addr()
    );
    let big = api.send_raw(head.as_bytes()).await;
    big.expect_error(413, "payload_too_large");
    assert_eq!(count().await, 1, "no bad request made a trace");
    assert_eq!(texts(&api.messages(&id, "all").await), ["one", "ok"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_token_guards_every_api_route_and_the_websocket() {
    const TOKEN: &str = "s3cret-token-0f9e8d";
    let f = Fixture::with_args(&["echo"], "", json!([text_turn("ok")]), &["--token", TOKEN]).await;
    let api = f.api().with_token(Some(TOKEN));
    let id = api.start("one", json!({})).await;
    api.finish(&id, 0).await;

    let routes = [
        (Method::GET, "/api/health".to_owned(), 200),
        (Method::GET, "/api/plugins".to_owned(), 200),
        (Method::GET, "/api/traces".to_owned(), 200),
        (Method::GET, "/api/traces/running".to_owned(), 200),
        (Method::GET, format!("/api/traces/{id}"), 200),
        (Method::GET, format!("/api/traces/{id}/messages"), 200),
        (Method::POST, "/api/traces".to_owned(), 400),
        (Method::POST, format!("/api/traces/{id}/run"), 400),
        (Method::POST, format!("/api/traces/{id}/stop"), 409),
        (Method::POST, "/api/traces/tr_000000000000/reflect".to_owned(), 404),
        (Method::GET, "/api/experiences".to_owned(), 200),
        (Method::GET, "/api/approvals".to_owned(), 200),
        (Method::POST, "/api/approvals/1".to_owned(), 404),
        (Method::GET, "/api/openapi.json".to_owned(), 200),
        (Method::GET, "/api/traces/tr_000000000000".to_owned(), 404),
    ];
    let body = |method: &Method, path: &str| match (method, path) {
        (&Method::POST, "/api/traces") => Some(br#"{"messages": []}"#.to_vec()),
        (&Method::POST, p) if p.ends_with("/run") => Some(br#"{"after_sequence": 99}"#.to_vec()),
        (&Method::POST, p) if p.starts_with("/api/approvals") => {
            Some(br#"{"answer": "once"}"#.to_vec())
        }
        (&Method::POST, _) => Some(b"{}".to_vec()),
        _ => None,
    };
    for (method, path, status) in &routes {
        for wrong in [None, Some("wrong-token-123456"), Some("")] {
            let reply = api.with_token(wrong).send(method.clone(), path, body(method, path)).await;
            reply.expect_error(401, "unauthorized");
            let challenge = reply.headers.get("www-authenticate").map(|v| v.to_str().unwrap());
            assert!(
                challenge.is_some_and(|c| c.starts_with("Bearer")),
                "{method} {path}: {challenge:?}"
            );
        }
        let reply = api.send(method.clone(), path, body(method, path)).await;
        assert_eq!(reply.status, *status, "{method} {path}: {}", reply.text);
    }
    // `?token=` is for the WebSocket only.
    let query = api.with_token(None).get(&format!("/api/health?token={TOKEN}")).await;
    query.expect_error(401, "unauthorized");

    let watch = format!("/api/traces/{id}/watch");
    let bare = api.with_token(None);
    let (status, body) = refused(bare.connect(&watch, None).await);
    assert_eq!((status, &body["error"]["code"]), (401, &json!("unauthorized")));
    let (status, _) = refused(bare.connect(&format!("{watch}?token=nope-nope-nope"), None).await);
    assert_eq!(status, 401);
    let (status, _) = refused(bare.connect(&watch, Some("nope-nope-nope")).await);
    assert_eq!(status, 401);
    let mut by_query = api.watch(&id, 0).await;
    by_query.until_kind("trace_finished").await;
    let mut by_header = bare.connect(&watch, Some(TOKEN)).await.expect("the header opens it too");
    by_header.until_kind("trace_finished").await;

    // The page holds no data: it needs no token.
    let page = bare.get("/").await;
    assert_eq!(page.status, 200, "{}", page.text);
    assert!(page.text.to_lowercase().contains("<html"), "{}", page.text);

    // The token may come from the environment instead.
    let env = ServerProcess::start_with(f.dir.path(), &[], &[("RESON_SERVER_TOKEN", TOKEN)]).await;
    env.api.get("/api/health").await.expect_error(401, "unauthorized");
    env.api.with_token(Some(TOKEN)).get("/api/health").await.expect(200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_loopback_address_without_a_token_is_refused() {
    let dir = api_support::dir_with(&["scripted"]);
    dir.config(&api_support::config(""));
    let mut command = reson(dir.path());
    command.args(["serve", "--addr", "0.0.0.0:0"]).env_remove("RESON_SERVER_TOKEN");
    let out = tokio::time::timeout(WAIT, command.kill_on_drop(true).output()).await;
    let out =
        out.expect("reson serve on 0.0.0.0 without a token started instead of refusing").unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("token") && stderr.contains("0.0.0.0"), "{stderr}");
    assert!(out.stdout.is_empty(), "it never listened: {}", String::from_utf8_lossy(&out.stdout));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_frames_over_the_limit_close_with_1009_and_idle_watchers_block_nothing() {
    // Eight tool results of 900 KB: over 7 MB of events, more than the
    // socket buffers of a watcher that never reads can hold.
    const FLOODS: usize = 8;
    // Each a different call: the same one thrice would end the run as a loop.
    let flood = |i: usize| json!({ "tool_calls": [{ "name": "flood", "arguments": { "bytes": 900_000 + i } }] });
    let mut turns: Vec<Value> = (0..FLOODS).map(flood).collect();
    turns.push(text_turn(&"w ".repeat(20_000)));
    let asks_floods = "[presets.flooding]\nrules = [{ decision = \"ask\", tool = \"flood\" }]\n";
    let f = Fixture::new(&["hostile"], asks_floods, json!(turns)).await;
    let api = f.api();
    let id = api.start("flood me", json!({ "preset": "flooding" })).await;
    // The run waits on this until the watchers are there.
    let ask = api.pending_approval(&id).await;

    let mut limited = api.watch(&id, 0).await;
    limited.ws.send(tokio_tungstenite::tungstenite::Message::text("ignored")).await.unwrap();
    limited.send_text(64 * 1024 + 1).await.unwrap();
    match limited.end().await {
        End::Closed(Some(frame)) => assert_eq!(u16::from(frame.code), 1009, "{frame:?}"),
        other => panic!("expected a 1009 close, got {other:?}"),
    }

    let mut idle = api.watch(&id, 0).await;
    let mut reader = api.watch(&id, 0).await;
    let path = format!("/api/approvals/{}", ask["id"].as_str().unwrap());
    api.post(&path, json!({ "answer": "always" })).await.expect(200);
    // A reader that falls behind is closed with 1008 and told to reconnect
    // with `since`; it loses no event doing so.
    let (mut seen, mut deltas, mut reconnects) = (Vec::new(), 0, 0);
    loop {
        match reader.next().await {
            Ok(frame) if frame["kind"] == "trace_finished" => {
                assert_eq!(frame["status"], "completed", "{frame}");
                break;
            }
            Ok(_) => {}
            Err(End::Closed(Some(close))) if u16::from(close.code) == 1008 => {
                assert!(close.reason.contains("since"), "{close:?}");
                reconnects += 1;
                seen.extend(reader.ids());
                deltas += reader.frames.len() - reader.ids().len();
                reader = api.watch(&id, seen.last().copied().unwrap_or(0)).await;
            }
            Err(end) => panic!("the reader's socket ended: {end:?}"),
        }
    }
    seen.extend(reader.ids());
    deltas += reader.frames.len() - reader.ids().len();
    let file = events_file(&f.traces(), &id);
    assert_contiguous(&seen, 1, file.len() as u64);
    assert!(deltas > 0, "deltas stream live ({reconnects} reconnects)");
    let decisions: Vec<Value> = file
        .iter()
        .filter(|e| e["kind"] == "permission_decided")
        .map(|e| e["decision"].clone())
        .collect();
    let mut expected = vec![json!("ask-always")];
    expected.extend(vec![json!("ask-remembered"); FLOODS - 1]);
    assert_eq!(decisions, expected, "`always` covered the later calls");
    api.settled(&id).await;
    assert_eq!(api.get("/api/health").await.expect(200)["running"], 0);

    // The idle watcher, read only now, lost nothing it was sent: it has a
    // gapless prefix, then either the rest or a close telling it to resume.
    let ended = loop {
        match idle.next().await {
            Ok(frame) if frame["kind"] == "trace_finished" => break None,
            Ok(_) => {}
            Err(end) => break Some(end),
        }
    };
    let got = idle.ids();
    assert_contiguous(&got, 1, got.len() as u64);
    match ended {
        None => assert_eq!(got.len(), file.len()),
        Some(End::Closed(Some(close))) => assert_eq!(u16::from(close.code), 1008, "{close:?}"),
        Some(other) => panic!("the idle watcher's socket ended: {other:?}"),
    }
}

/// `reson serve` started on the command line with `--script`, over a
/// directory that grants the scripted provider nothing itself.
async fn serve_with_script(plugins: &[&str], turns: Value) -> (TestDir, ServerProcess) {
    let dir = api_support::dir_with(&[&["scripted"], plugins].concat());
    dir.config(&api_support::config(""));
    let script = set_script(dir.path(), turns);
    let script = script.to_string_lossy().into_owned();
    let server = ServerProcess::start(dir.path(), &["--script", &script]).await;
    (dir, server)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_running_traces_closes_sockets_and_exits_0() {
    let slow = json!({ "text": "slow", "delay_ms": 30000 });
    let (dir, mut server) = serve_with_script(&["echo"], json!([echo_turn("one"), slow])).await;
    let id = server.api.start("go", json!({})).await;
    let mut watcher = server.api.watch(&id, 0).await;
    watcher.until_kind("tool_finished").await;

    let signalled = Instant::now();
    server.signal("TERM");
    let end = watcher.end().await;
    assert!(matches!(end, End::Closed(_)), "the server closes the socket: {end:?}");
    assert_eq!(server.exit_code().await, Some(0), "{:?}", server.output.lock().unwrap());
    assert!(signalled.elapsed() < support::MARGIN, "it waited for the model call");
    assert_eq!(trace_finished(&watcher.frames)["status"], "stopped");
    let store = FileTraceStore::open(dir.path().join("traces"), Durability::Batched).unwrap();
    assert_eq!(store.get_trace(&id).await.unwrap().unwrap().status, TraceStatus::Stopped);

    // Stopped, not lost: a new server continues it.
    let script = set_script(dir.path(), json!([echo_turn("one"), text_turn("done")]));
    let server = ServerProcess::start(dir.path(), &["--script", &script.to_string_lossy()]).await;
    let since = server.api.last_event(&id).await;
    assert_eq!(server.api.run(&id, json!({})).await["mode"], "continue");
    let frames = server.api.finish(&id, since).await;
    assert_eq!(trace_finished(&frames)["status"], "completed");
    let messages = server.api.messages(&id, "main_path").await;
    assert_eq!(texts(&messages), ["go", "echoing one", "one", "done"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_killed_during_a_tool_call_heals_the_trace_on_continue() {
    let nap = json!({ "text": "napping", "tool_calls": [{ "id": "call_nap", "name": "nap", "arguments": { "ms": 1800 } }] });
    let (dir, mut server) =
        serve_with_script(&["hostile"], json!([nap, text_turn("recovered")])).await;
    let id = server.api.start("nap please", json!({})).await;
    let mut watcher = server.api.watch(&id, 0).await;
    watcher.until_kind("tool_started").await;
    server.signal("KILL");
    assert_eq!(server.exit_code().await, None, "killed by the signal");
    assert!(matches!(watcher.end().await, End::Dropped(_) | End::Closed(_)));

    let store = FileTraceStore::open(dir.path().join("traces"), Durability::Batched).unwrap();
    let trace = store.get_trace(&id).await.unwrap().expect("the killed trace loads");
    assert_eq!(trace.status, TraceStatus::Running, "it never got to finish");
    let before = store.get_messages(&id).await.unwrap();
    assert_eq!(before.len(), 2, "user and assistant were persisted before the kill");
    let events_before = events_file(&dir.path().join("traces"), &id);

    let script = dir.path().join("script.json").to_string_lossy().into_owned();
    let server = ServerProcess::start(dir.path(), &["--script", &script]).await;
    assert_eq!(server.api.trace(&id).await["running"], false, "nothing runs it after a restart");
    let since = server.api.last_event(&id).await;
    assert_eq!(since, events_before.len() as u64);
    assert_eq!(server.api.run(&id, json!({})).await["mode"], "continue");
    let frames = server.api.finish(&id, since).await;
    assert_eq!(trace_finished(&frames)["status"], "completed");

    let path = store
        .get_main_path_messages(
            &id,
            store.get_trace(&id).await.unwrap().unwrap().head_sequence.unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(path[..2], before[..], "nothing persisted before the kill was lost");
    let healed = &path[2];
    assert_eq!((healed.role, healed.tool_call_id.as_deref()), (Role::Tool, Some("call_nap")));
    assert!(healed.synthetic && healed.text() == INTERRUPTED, "{healed:?}");
    assert_eq!(path.last().unwrap().text(), "recovered");
    let after = events_file(&dir.path().join("traces"), &id);
    assert_eq!(after[..events_before.len()], events_before[..]);
    assert_contiguous(&ids(&after), 1, after.len() as u64);
}

/// The load bench's check at a small scale, on a server in this process:
/// concurrent runs, several watchers each, every event to every watcher.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_watcher_of_concurrent_runs_gets_every_event_once() {
    let (dir, toml) = api_support::load_dir();
    let server = api_support::InProcess::start(&dir, &toml).await;
    let load = api_support::load(&server.api, 6, 4).await;
    assert!(load.events >= 6 * 4 * 9, "{} events", load.events);
    assert!(load.percentile(99) < 5_000.0, "p99 {} ms", load.percentile(99));
    server.stop().await;
}

/// A client that sees `trace_finished` may continue at once: the run no
/// longer counts as running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trace_can_be_continued_as_soon_as_its_run_is_seen_to_finish() {
    let turns: Vec<Value> = (0..5).map(|i| text_turn(&format!("answer {i}"))).collect();
    let f = Fixture::new(&["echo"], "", json!(turns)).await;
    let api = f.api();
    let id = api.start("go", json!({})).await;
    let mut watcher = api.watch(&id, 0).await;
    for round in 0..4 {
        watcher.until_kind("trace_finished").await;
        let body = json!({ "messages": [{ "role": "user", "content": format!("again {round}") }] });
        let reply = api.post(&format!("/api/traces/{id}/run"), body).await;
        assert_eq!(reply.status, 200, "round {round}, right after trace_finished: {}", reply.text);
    }
    watcher.until_kind("trace_finished").await;
}

// ------------------------------------- pages of other sites, rebound names

/// A page on another site, as a browser names it in `Origin`.
const EVIL: &str = "http://evil.example";
/// The origin and the host name [`ALLOWING`] lets in.
const FRIEND: &str = "http://friend.example:3000";
const ALIAS: &str = "reson.example";
/// `[server]` letting in pages of [`FRIEND`] and the name [`ALIAS`].
const ALLOWING: &str = "[server]\ncors_origins = [\"http://friend.example:3000\"]\nallowed_hosts = [\"reson.example\"]\n";

/// Header lines, as `(name, value)`.
type Headers<'a> = &'a [(&'a str, &'a str)];

/// A request as it goes on the wire: `Host: host`, the `extra` headers,
/// and `body` with its content type, if any.
fn raw(
    method: &str,
    path: &str,
    host: &str,
    extra: Headers,
    body: Option<(&str, &str)>,
) -> Vec<u8> {
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n");
    for (name, value) in extra {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    let body = body.map_or("", |(kind, body)| {
        head.push_str(&format!("Content-Type: {kind}\r\nContent-Length: {}\r\n", body.len()));
        body
    });
    format!("{head}\r\n{body}").into_bytes()
}

/// Every route of the API, as `(METHOD, path)` with each `{param}` set to
/// `trace` (`1` for an approval): the OpenAPI document's, so that a new
/// route is covered without a change here, then the document itself, the
/// viewer's files and the fallback.
async fn every_route(api: &Api, trace: &str) -> Vec<(String, String)> {
    let doc = api.get("/api/openapi.json").await.expect(200);
    let mut routes = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        let id = if path.starts_with("/api/approvals/") { "1" } else { trace };
        let path: Vec<&str> = path
            .split('/')
            .map(|segment| if segment.starts_with('{') { id } else { segment })
            .collect();
        for method in item.as_object().unwrap().keys() {
            if ["get", "post", "put", "patch", "delete"].contains(&method.as_str()) {
                routes.push((method.to_uppercase(), path.join("/")));
            }
        }
    }
    assert!(routes.len() >= 14, "the document lists too few routes: {routes:?}");
    for (method, path) in [
        ("GET", "/api/openapi.json"),
        ("GET", "/"),
        ("GET", "/assets/app.js"),
        ("GET", "/api/no-such-route"),
        ("POST", "/api/no-such-route"),
    ] {
        routes.push((method.to_owned(), path.to_owned()));
    }
    routes
}

/// A body that would make a state-changing route do something: start a
/// run, continue one, reflect, answer.
fn effective(method: &str, path: &str) -> Option<(&'static str, String)> {
    let body = match path {
        _ if method == "GET" => return None,
        "/api/traces" => json!({ "messages": [{ "role": "user", "content": "from elsewhere" }] }),
        p if p.starts_with("/api/approvals/") => json!({ "answer": "always" }),
        _ => json!({}),
    };
    Some(("application/json", body.to_string()))
}

/// A body the route itself turns down, so the status says its handler ran.
fn harmless(method: &str, path: &str) -> Option<(&'static str, String)> {
    let body = match path {
        _ if method == "GET" => return None,
        "/api/traces" => json!({ "messages": [] }),
        p if p.ends_with("/run") => json!({ "after_sequence": 99 }),
        p if p.starts_with("/api/approvals/") => json!({ "answer": "once" }),
        _ => json!({}),
    };
    Some(("application/json", body.to_string()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_of_other_sites_and_rebound_names_reach_no_route() {
    let f = Fixture::new(&["echo"], ALLOWING, json!([text_turn("ok"), text_turn("again")])).await;
    let api = f.api();
    let id = api.start("one", json!({})).await;
    api.finish(&id, 0).await;
    let before = (api.get("/api/traces").await.expect(200), api.messages(&id, "all").await);
    let addr = api.addr().to_owned();
    let port = addr.rsplit(':').next().unwrap();
    let rebound = format!("evil.example:{port}");
    let rebound_page = format!("http://{rebound}");
    let other_port = format!("http://127.0.0.1:{}", port.parse::<u16>().unwrap() ^ 1);

    // Each with the body that would have done something, had it got in.
    let turned_away: [(&str, Headers, u16, &str); 7] = [
        (&addr, &[("Origin", EVIL)], 403, "forbidden"),
        (&addr, &[("Origin", "null")], 403, "forbidden"),
        (&addr, &[("Origin", &other_port)], 403, "forbidden"),
        (&addr, &[("Origin", "http://127.0.0.1")], 403, "forbidden"),
        (&rebound, &[], 421, "misdirected_request"),
        (&rebound, &[("Origin", &rebound_page)], 421, "misdirected_request"),
        ("127.0.0.1", &[], 421, "misdirected_request"),
    ];
    let routes = every_route(api, &id).await;
    for (method, path) in &routes {
        for (host, headers, status, code) in &turned_away {
            let request = raw(
                method,
                path,
                host,
                headers,
                effective(method, path).as_ref().map(|(k, b)| (*k, b.as_str())),
            );
            let reply = api.send_raw(&request).await;
            let context = format!("{method} {path} with Host {host} and {headers:?}");
            assert_eq!(reply.status, *status, "{context}: {}", reply.text);
            let message = reply.expect_error(*status, code);
            assert!(message.contains(if *status == 403 { "origin" } else { "Host" }), "{message}");
        }
    }
    assert_eq!(
        (api.get("/api/traces").await.expect(200), api.messages(&id, "all").await),
        before,
        "no refused request started, continued or answered anything"
    );

    // The server's own pages, the allowed origin and name, and clients
    // without `Origin` reach the same handlers.
    let own = format!("http://{addr}");
    let localhost = format!("localhost:{port}");
    let localhost_page = format!("http://{localhost}");
    let alias = format!("{ALIAS}:{port}");
    let alias_page = format!("http://{alias}");
    let allowed: [(&str, Headers); 6] = [
        (&addr, &[("Origin", FRIEND)]),
        (&addr, &[("Origin", &own)]),
        (&addr, &[("Origin", &localhost_page)]),
        (&localhost, &[]),
        (&alias, &[("Origin", &alias_page)]),
        (&addr, &[("Origin", "HTTP://Friend.Example:3000")]),
    ];
    for (method, path) in every_route(api, "tr_000000000000").await {
        let body = harmless(&method, &path);
        let body = body.as_ref().map(|(k, b)| (*k, b.as_str()));
        let baseline = api.send_raw(&raw(&method, &path, &addr, &[], body)).await;
        assert!(
            ![403, 415, 421].contains(&baseline.status),
            "{method} {path} without Origin: {} {}",
            baseline.status,
            baseline.text
        );
        for (host, headers) in &allowed {
            let reply = api.send_raw(&raw(&method, &path, host, headers, body)).await;
            assert_eq!(
                reply.status, baseline.status,
                "{method} {path} with Host {host} and {headers:?}: {}",
                reply.text
            );
        }
    }
    assert_eq!(api.get("/api/traces").await.expect(200)["total"], 1);

    // A WebSocket handshake is not subject to CORS: the server checks it.
    let watch = format!("/api/traces/{id}/watch?since=0");
    let upgrade = [
        ("Upgrade", "websocket"),
        ("Connection", "Upgrade"),
        ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
        ("Sec-WebSocket-Version", "13"),
    ];
    let handshake = |host: &str, origin: Option<&str>| {
        let mut headers = upgrade.to_vec();
        headers.extend(origin.map(|o| ("Origin", o)));
        // `raw` asks to close; a handshake must not.
        let request = String::from_utf8(raw("GET", &watch, host, &headers, None)).unwrap();
        request.replace("Connection: close\r\n", "").into_bytes()
    };
    for (host, origin, status) in [
        (addr.as_str(), Some(EVIL), 403),
        (&addr, Some("null"), 403),
        (&rebound, Some(rebound_page.as_str()), 421),
        (&rebound, None, 421),
        (&addr, Some(own.as_str()), 101),
        (&addr, Some(FRIEND), 101),
        (&addr, None, 101),
    ] {
        let reply = api.send_raw(&handshake(host, origin)).await;
        assert_eq!(reply.status, status, "upgrade from {origin:?} to {host}: {}", reply.text);
    }
    // And through a real WebSocket client.
    let mut request = api.ws_url(&watch).into_client_request().unwrap();
    request.headers_mut().insert("origin", EVIL.parse().unwrap());
    let opened = tokio_tungstenite::connect_async(request).await;
    let (status, body) = refused(opened.map(|(ws, _)| Watcher { ws, frames: Vec::new() }));
    assert_eq!((status, &body["error"]["code"]), (403, &json!("forbidden")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_not_sent_as_json_is_refused_and_starts_nothing() {
    let f = Fixture::new(&["echo"], "", json!([text_turn("ok")])).await;
    let api = f.api();
    let id = api.start("one", json!({})).await;
    api.finish(&id, 0).await;
    let before = (api.get("/api/traces").await.expect(200), api.messages(&id, "all").await);
    let addr = api.addr().to_owned();
    let own = format!("http://{addr}");

    // What a page may send without a preflight, and what else is not JSON.
    let kinds = [
        "text/plain",
        "text/plain;charset=UTF-8",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        "application/jsonp",
        "application/json-seq",
    ];
    let posts: Vec<(String, String)> =
        every_route(api, &id).await.into_iter().filter(|(m, _)| m != "GET").collect();
    assert!(posts.len() >= 5, "{posts:?}");
    for (method, path) in &posts {
        let (_, body) = effective(method, path).unwrap();
        for kind in kinds {
            for origin in [None, Some(own.as_str())] {
                let headers: Vec<(&str, &str)> =
                    origin.map(|o| ("Origin", o)).into_iter().collect();
                let reply =
                    api.send_raw(&raw(method, path, &addr, &headers, Some((kind, &body)))).await;
                let message = reply.expect_error(415, "unsupported_media_type");
                assert!(
                    message.contains("application/json"),
                    "{method} {path} as {kind}: {message}"
                );
            }
        }
        // A body with no type at all, as a `Blob` of no type is sent.
        let untyped = format!(
            "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
             Content-Length: {}\r\n\r\n{body}",
            body.len()
        );
        api.send_raw(untyped.as_bytes()).await.expect_error(415, "unsupported_media_type");
    }
    assert_eq!(
        (api.get("/api/traces").await.expect(200), api.messages(&id, "all").await),
        before,
        "nothing refused started or changed anything"
    );

    // JSON with its charset is JSON; a POST with no body needs no type.
    let (_, body) = effective("POST", "/api/traces").unwrap();
    let typed = Some(("Application/JSON; charset=utf-8", body.as_str()));
    let reply = api.send_raw(&raw("POST", "/api/traces", &addr, &[], typed)).await.expect(201);
    let started = reply["trace_id"].as_str().unwrap();
    api.finish(started, 0).await;
    let stop = format!("/api/traces/{id}/stop");
    let reply = api.send_raw(&raw("POST", &stop, &addr, &[("Origin", &own)], None)).await;
    reply.expect_error(409, "conflict");
    assert_eq!(api.get("/api/traces").await.expect(200)["total"], 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_elsewhere_cannot_stop_a_running_trace_and_an_allowed_one_can() {
    let f = Fixture::new(&["echo"], ALLOWING, json!([{ "text": "slow", "delay_ms": 30000 }])).await;
    let api = f.api();
    let id = api.start("think", json!({})).await;
    let mut watcher = api.watch(&id, 0).await;
    watcher.until_kind("message_added").await;
    let addr = api.addr().to_owned();
    let port = addr.rsplit(':').next().unwrap();
    let rebound = format!("evil.example:{port}");
    let stop = format!("/api/traces/{id}/stop");
    let json = Some(("application/json", "{}"));
    let plain = Some(("text/plain", "{}"));
    for (host, origin, body, status) in [
        (addr.as_str(), Some(EVIL), None, 403),
        (&addr, Some(EVIL), json, 403),
        (&addr, Some(EVIL), plain, 403),
        (&addr, Some("null"), None, 403),
        (&rebound, None, None, 421),
        (&rebound, Some(format!("http://{rebound}").as_str()), json, 421),
    ] {
        let headers: Vec<(&str, &str)> = origin.map(|o| ("Origin", o)).into_iter().collect();
        let reply = api.send_raw(&raw("POST", &stop, host, &headers, body)).await;
        assert_eq!(reply.status, status, "stop from {origin:?} to {host}: {}", reply.text);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let detail = api.trace(&id).await;
    assert_eq!((&detail["running"], &detail["trace"]["status"]), (&json!(true), &json!("running")));
    assert_eq!(api.get("/api/health").await.expect(200)["running"], 1);

    // The page the config allows may.
    let reply = api.send_raw(&raw("POST", &stop, &addr, &[("Origin", FRIEND)], None)).await;
    assert_eq!(reply.expect(200), json!({ "trace_id": id, "status": "stopping" }));
    assert_eq!(
        reply.headers.get("access-control-allow-origin").map(|v| v.to_str().unwrap()),
        Some(FRIEND),
        "and is told so by CORS"
    );
    assert_eq!(watcher.until_kind("trace_finished").await["status"], "stopped");
}

/// An image kept beside a message is served with its own type, never
/// sniffed, behind the token like every trace route; a name that is not
/// one of the trace's images is a 404, whatever file has that name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_image_is_served_with_its_type_behind_the_token() {
    use base64::Engine as _;
    const TOKEN: &str = "s3cret-token-image-77";
    let f = Fixture::with_args(&[], "", json!([text_turn("ok")]), &["--token", TOKEN]).await;
    let png = std::fs::read(support::root().join("tests/guests/picture/src/red.png")).unwrap();
    let store = f.store();
    let mut trace = reson::trace::Trace::new(reson::trace::TraceMode::Agent, "look", "default");
    store.create_trace(&trace).await.unwrap();
    let mut message = reson::trace::Message::new(Role::User, "this one:");
    let data = base64::engine::general_purpose::STANDARD.encode(&png);
    message
        .content
        .push(reson::trace::ContentPart::ImageUrl { url: format!("data:image/png;base64,{data}") });
    store.add_message(&mut trace, message, None).await.unwrap();
    let id = &trace.id;
    // A file beside it that is no image of the trace.
    let messages = f.traces().join(id).join("messages");
    std::fs::write(messages.join("000009.svg"), "<svg onload='alert(1)'/>").unwrap();
    std::fs::write(messages.join("000009.html"), "<script>alert(1)</script>").unwrap();

    let api = f.api().with_token(Some(TOKEN));
    let listed = api.messages(id, "all").await;
    let part = &listed["messages"][0]["content"][1];
    assert_eq!(part["type"], "image", "{listed}");
    assert_eq!(part["name"], "000001.png");
    assert_eq!(part["bytes"], png.len());
    assert_eq!((&part["width"], &part["height"]), (&json!(2), &json!(2)));

    let url = |name: &str| format!("{}/api/traces/{id}/images/{name}", api.base);
    let http = reqwest::Client::new();
    let reply = http.get(url("000001.png")).bearer_auth(TOKEN).send().await.unwrap();
    assert_eq!(reply.status(), 200);
    let header = |name: &str| reply.headers()[name].to_str().unwrap().to_owned();
    assert_eq!(header("content-type"), "image/png");
    assert_eq!(header("x-content-type-options"), "nosniff");
    assert_eq!(reply.bytes().await.unwrap().as_ref(), png.as_slice());

    let no_token = http.get(url("000001.png")).send().await.unwrap();
    assert_eq!(no_token.status(), 401);
    for name in ["000009.svg", "000009.html", "000001.json", "000002.png", "..%2Fmeta.json"] {
        let reply = api.get(&format!("/api/traces/{id}/images/{name}")).await;
        reply.expect_error(404, "not_found");
    }
    let reply = api.get("/api/traces/tr_000000000000/images/000001.png").await;
    reply.expect_error(404, "not_found");
}
