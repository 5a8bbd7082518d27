//! The trace viewer page of `reson serve` in a real headless Chromium
//! (Debian's package, installed when missing) against the real server in
//! this process, on the bundled plugins and the scripted provider.
//! Screenshots go to `target/viewer/`.

use crate::support;
use crate::support::chromium;

use chromium::{Chromium, Watched};
use futures::StreamExt;
use reson::api::{Server, ServerConfig};
use reson::trace::{Durability, FileTraceStore, TraceStore};
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use support::TestDir;
use tokio_tungstenite::tungstenite::Message as Frame;

mod views;

const WAIT: Duration = Duration::from_secs(60);

/// `reson serve` in this process over a throwaway directory: `echo` runs
/// without asking, except under preset `careful`, which asks.
struct Served {
    dir: TestDir,
    base: String,
    http: reqwest::Client,
    token: Option<String>,
    shutdown: tokio::sync::oneshot::Sender<()>,
    serving: tokio::task::JoinHandle<Result<(), reson::api::ApiError>>,
}

impl Served {
    async fn start(turns: Value) -> Self {
        Self::start_with(turns, None).await
    }

    /// With `token`, every `/api` request needs it.
    async fn start_with(turns: Value, token: Option<&str>) -> Self {
        let dir = TestDir::new();
        dir.install(support::plugins(), "scripted").install(support::plugins(), "echo");
        let script = dir.path().join("script.json");
        std::fs::write(&script, json!({ "turns": turns }).to_string()).unwrap();
        Self::serve(dir, "127.0.0.1:0".parse().unwrap(), token).await
    }

    /// Serves `dir` (plugins, script and traces) on `addr`.
    async fn serve(dir: TestDir, addr: SocketAddr, token: Option<&str>) -> Self {
        let toml = format!(
            r#"
                [permissions]
                rules = [{{ decision = "allow", tool = "echo" }}]
                [presets.careful]
                rules = [{{ decision = "ask", tool = "echo" }}]
                [plugins.scripted]
                dirs = [{{ path = ".", access = "read" }}]
                config = {{ script = "{}" }}
                "#,
            dir.path().join("script.json").display()
        );
        Self::serve_config(dir, addr, token, &toml).await
    }

    /// Serves `dir` with `toml` as its config.
    async fn serve_config(dir: TestDir, addr: SocketAddr, token: Option<&str>, toml: &str) -> Self {
        let runtime = dir.open(toml).await;
        let store: Arc<dyn TraceStore> =
            Arc::new(FileTraceStore::open(dir.path().join("traces"), Durability::Batched).unwrap());
        // The file's rules and presets reach the server's runs through its
        // config, as `reson serve` gives them.
        let config = ServerConfig {
            addr,
            token: token.map(str::to_owned),
            ..ServerConfig::from_config(&dir.config(toml))
        };
        let server = Server::bind(runtime, store, config).await.expect("the server binds");
        let base = format!("http://{}", server.local_addr());
        let (shutdown, stop) = tokio::sync::oneshot::channel::<()>();
        let serving = tokio::spawn(server.serve(async move {
            let _ = stop.await;
        }));
        let http = reqwest::Client::builder().timeout(WAIT).build().unwrap();
        Self { dir, base, http, token: token.map(str::to_owned), shutdown, serving }
    }

    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let request = self.http.request(method, format!("{}{path}", self.base));
        match &self.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    }

    async fn get(&self, path: &str) -> Value {
        let response = self.request(reqwest::Method::GET, path).send().await.unwrap();
        let status = response.status();
        let text = response.text().await.unwrap();
        assert!(status.is_success(), "GET {path}: {status} {text}");
        serde_json::from_str(&text).unwrap()
    }

    async fn post(&self, path: &str, body: Value) -> Value {
        let response = self
            .request(reqwest::Method::POST, path)
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        let status = response.status();
        let text = response.text().await.unwrap();
        assert!(status.is_success(), "POST {path}: {status} {text}");
        serde_json::from_str(&text).unwrap()
    }

    /// Starts a run on a new trace; its id.
    async fn start_run(&self, body: Value) -> String {
        let reply = self.post("/api/traces", body).await;
        reply["trace_id"].as_str().expect("a trace id").to_owned()
    }

    async fn last_event(&self, id: &str) -> u64 {
        self.get(&format!("/api/traces/{id}")).await["trace"]["last_event_id"].as_u64().unwrap()
    }

    /// Waits, over the API's own WebSocket, for the first `trace_finished`
    /// after event `since`; its status.
    async fn finished(&self, id: &str, since: u64) -> String {
        let mut url = format!("ws{}/api/traces/{id}/watch?since={since}", &self.base[4..]);
        if let Some(token) = &self.token {
            url.push_str(&format!("&token={token}"));
        }
        let (mut ws, _) = tokio_tungstenite::connect_async(url).await.expect("watching");
        loop {
            let frame =
                tokio::time::timeout(WAIT, ws.next()).await.expect("trace_finished in time");
            if let Some(Ok(Frame::Text(text))) = frame {
                let event: Value = serde_json::from_str(&text).unwrap();
                if event["kind"] == "trace_finished" {
                    return event["status"].as_str().unwrap().to_owned();
                }
            } else if !matches!(frame, Some(Ok(Frame::Ping(_) | Frame::Pong(_)))) {
                panic!("the watch socket ended: {frame:?}");
            }
        }
    }

    /// Waits until the server no longer counts the trace as running: its
    /// run ends just after `trace_finished` is sent, and a continue before
    /// that is refused with 409.
    async fn idle(&self, id: &str) {
        let deadline = tokio::time::Instant::now() + WAIT;
        while self.get(&format!("/api/traces/{id}")).await["running"] != json!(false) {
            assert!(tokio::time::Instant::now() < deadline, "{id} still runs");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Every message of the trace, all branches.
    async fn messages(&self, id: &str) -> Vec<Value> {
        let all = self.get(&format!("/api/traces/{id}/messages?mode=all")).await;
        all["messages"].as_array().unwrap().clone()
    }

    /// Shuts the server down; its directory, to serve again.
    async fn stop(self) -> TestDir {
        self.shutdown.send(()).unwrap();
        tokio::time::timeout(WAIT, self.serving)
            .await
            .expect("the server shuts down in time")
            .unwrap()
            .expect("the server ends cleanly");
        self.dir
    }
}

/// The sequence of the one message of `role` whose text is `text`.
fn sequence_of(messages: &[Value], role: &str, text: &str) -> u64 {
    let found: Vec<_> = messages
        .iter()
        .filter(|m| {
            m["role"] == role
                && m["content"].as_array().is_some_and(|c| c.iter().any(|p| p["text"] == text))
        })
        .collect();
    assert_eq!(found.len(), 1, "one {role} message {text:?} in {messages:#?}");
    found[0]["sequence"].as_u64().unwrap()
}

fn assert_no_problems(page: &Watched) {
    let problems = page.problems();
    assert!(problems.is_empty(), "the page had problems: {problems:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_lists_traces_and_shows_the_branches_of_a_rewind() {
    let served =
        Served::start(json!([{ "text": "first answer" }, { "text": "second answer" }])).await;
    let id = served
        .start_run(
            json!({ "messages": [{ "role": "user", "content": "hello" }], "task": "branching" }),
        )
        .await;
    assert_eq!(served.finished(&id, 0).await, "completed");
    served.idle(&id).await;
    let since = served.last_event(&id).await;
    served
        .post(
            &format!("/api/traces/{id}/run"),
            json!({ "messages": [{ "role": "user", "content": "more" }] }),
        )
        .await;
    assert_eq!(served.finished(&id, since).await, "completed");
    served.idle(&id).await;
    let messages = served.messages(&id).await;
    let first_answer = sequence_of(&messages, "assistant", "first answer");
    let since = served.last_event(&id).await;
    let rewind = json!({ "after_sequence": first_answer, "messages": [{ "role": "user", "content": "instead" }] });
    let reply = served.post(&format!("/api/traces/{id}/run"), rewind).await;
    assert_eq!(reply["mode"], "rewind", "{reply}");
    assert_eq!(served.finished(&id, since).await, "completed");
    let messages = served.messages(&id).await;
    let (more, instead) =
        (sequence_of(&messages, "user", "more"), sequence_of(&messages, "user", "instead"));

    let browser = Chromium::launch().await;
    let page = browser.page().await;
    page.open(&format!("{}/", served.base)).await;
    let row = format!("#traces tr[data-trace-id='{id}']");
    page.wait_for(&format!("document.querySelector(\"{row}\")"), "the trace in the list").await;
    let cells: Vec<String> = page
        .eval(&format!("[...document.querySelector(\"{row}\").cells].map(c => c.textContent)"))
        .await;
    assert_eq!(cells[0], "completed", "{cells:?}");
    assert!(cells[1].starts_with("branching"), "{cells:?}");
    assert_eq!(cells[2], messages.len().to_string(), "every message on every branch: {cells:?}");

    // The status filter: nothing failed, then every trace again.
    page.eval::<bool>("(s => { s.value = 'failed'; s.dispatchEvent(new Event('change')); return true; })(document.getElementById('status-filter'))").await;
    page.wait_for("!document.getElementById('no-traces').hidden", "an empty list of failed traces")
        .await;
    page.eval::<bool>("(s => { s.value = ''; s.dispatchEvent(new Event('change')); return true; })(document.getElementById('status-filter'))").await;
    page.wait_for(&format!("document.querySelector(\"{row}\")"), "the trace listed again").await;

    page.click(&format!("{row} a")).await;
    page.wait_for(
        &format!("document.querySelector('#messages [data-seq=\"{instead}\"]')"),
        "the rewound branch",
    )
    .await;
    // Two children of one message, each starting a branch; the rewind's is
    // the main path and the old one stays visible.
    let children: Vec<(u64, String)> = page
        .eval(&format!(
            "[...document.querySelectorAll('#messages [data-parent=\"{first_answer}\"]')].map(m => [Number(m.dataset.seq), m.dataset.main])"
        ))
        .await;
    assert_eq!(children, vec![(more, "false".to_owned()), (instead, "true".to_owned())]);
    let branches: Vec<(String, bool)> = page
        .eval("[...document.querySelectorAll('#messages .branches > .branch')].map(b => [b.querySelector('.branch-label').textContent, b.classList.contains('on-main')])")
        .await;
    assert_eq!(branches.len(), 2, "{branches:?}");
    assert!(!branches[0].1 && branches[1].1, "{branches:?}");
    let main_path: Vec<u64> = page
        .eval("[...document.querySelectorAll('#messages [data-main=\"true\"]')].map(m => Number(m.dataset.seq))")
        .await;
    assert_eq!(main_path.first(), Some(&1), "{main_path:?}");
    assert!(
        main_path.contains(&first_answer)
            && main_path.contains(&instead)
            && !main_path.contains(&more)
    );
    let status: String = page.eval("document.getElementById('trace-view').dataset.status").await;
    assert_eq!(status, "completed");
    // The goal tree as the server has it, with statuses and stats; the
    // trace completed, so what it left in progress shows as open.
    let tree = &served.get(&format!("/api/traces/{id}")).await["goal_tree"];
    let left_open =
        |status: &str| if status == "in_progress" { "pending" } else { status }.to_owned();
    let goals: Vec<(String, String)> = tree["goals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| (g["id"].as_str().unwrap().to_owned(), left_open(g["status"].as_str().unwrap())))
        .collect();
    assert!(!goals.is_empty(), "the task is the root goal: {tree}");
    let shown: Vec<(String, String)> = page
        .eval("[...document.querySelectorAll('#goals li.goal')].map(g => [g.dataset.goalId, g.dataset.status])")
        .await;
    assert_eq!(shown, goals);
    let current: usize =
        page.eval("document.querySelectorAll('#goals li.goal.current').length").await;
    assert_eq!(current, 0, "a completed trace has no current goal");
    let stats: String =
        page.eval("document.querySelector('#goals li.goal .stats').textContent").await;
    assert!(stats.contains(" messages · ") && stats.contains(" requests"), "{stats}");

    page.screenshot("branches").await;
    assert_no_problems(&page);
    browser.close().await;
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_follows_a_run_live_and_answers_its_approval_by_click() {
    let turns = json!([
        { "text": "I will echo.", "tool_calls": [{ "name": "echo", "arguments": { "text": "hi there" } }] },
        { "delay_ms": 300, "text": "All done: the echo answered, word by word." },
    ]);
    let served = Served::start(turns).await;
    let id = served
        .start_run(json!({ "messages": [{ "role": "user", "content": "echo something" }], "preset": "careful" }))
        .await;

    let browser = Chromium::launch().await;
    let page = browser.page().await;
    page.open(&format!("{}/#/traces/{id}", served.base)).await;
    page.wait_for(
        "document.getElementById('trace-view').dataset.live === 'true'",
        "the live socket",
    )
    .await;
    // The run waits on the ask; the page lists it from GET /api/approvals.
    let once = format!("li.approval[data-trace-id='{id}'] button[data-answer='once']");
    page.wait_for(&format!("document.querySelector(\"{once}\")"), "the pending approval").await;
    let tool: String = page
        .eval(&format!(
            "document.querySelector(\"li.approval[data-trace-id='{id}'] strong\").textContent"
        ))
        .await;
    assert_eq!(tool, "echo");
    let answered = "[...document.querySelectorAll('#messages article.role-assistant .text')].some(t => t.textContent.startsWith('All done'))";
    assert!(!page.eval::<bool>(answered).await, "the run cannot have gone on before the approval");
    page.eval::<bool>("(window.sameDocument = true)").await;

    page.click(&once).await;
    page.wait_for(answered, "the final answer, live").await;
    page.wait_for(
        "document.getElementById('trace-view').dataset.status === 'completed'",
        "the finished status",
    )
    .await;
    assert!(page.eval::<bool>("window.sameDocument === true").await, "the page was not reloaded");
    page.wait_for("document.getElementById('approvals').hidden", "the approval gone from the page")
        .await;
    // The answer was streamed (the server may merge its deltas into one
    // frame); once stored, it shows as a message and the stream is closed.
    page.wait_for(
        "Number(document.getElementById('stream').dataset.deltas) > 0",
        "streamed deltas",
    )
    .await;
    assert!(
        page.eval::<bool>("document.getElementById('stream').hidden").await,
        "the stream is closed"
    );
    let result: String =
        page.eval("document.querySelector('#messages article.role-tool pre').textContent").await;
    assert!(result.contains("hi there"), "{result}");
    let events: Vec<String> = page
        .eval("[...document.querySelectorAll('#events li strong')].map(e => e.textContent)")
        .await;
    assert!(
        events.contains(&"permission decided".to_owned())
            && events.contains(&"trace finished".to_owned()),
        "{events:?}"
    );

    // The click reached the server: the ask was answered once, not timed out.
    let decisions: Vec<String> = reson_decisions(&served, &id).await;
    assert_eq!(decisions, ["ask-once"]);
    assert!(served.get("/api/approvals").await["approvals"].as_array().unwrap().is_empty());

    page.screenshot("live").await;
    assert_no_problems(&page);
    browser.close().await;
    served.stop().await;
}

/// The permission decisions in the trace's events.
async fn reson_decisions(served: &Served, id: &str) -> Vec<String> {
    let store =
        FileTraceStore::open(served.dir.path().join("traces"), Durability::Batched).unwrap();
    store
        .events_after(id, 0)
        .await
        .unwrap()
        .into_iter()
        .filter_map(|e| match e.kind {
            reson::trace::EventKind::PermissionDecided { decision, .. } => Some(decision),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn markup_from_the_model_a_tool_or_a_user_is_shown_as_text() {
    let user = "<img src=x onerror=\"window.pwned = 'user'\">";
    let model =
        "<img src=x onerror=\"window.pwned = 'model'\"><script>window.pwned = 'script'</script>";
    let arguments = "<b onmouseover=window.pwned='tool'>bold</b>";
    let turns = json!([
        { "text": model, "tool_calls": [{ "name": "echo", "arguments": { "text": arguments } }] },
        { "text": "<style>body { display: none }</style>" },
    ]);
    let served = Served::start(turns).await;
    let id = served
        .start_run(json!({ "messages": [{ "role": "user", "content": user }], "task": user }))
        .await;
    assert_eq!(served.finished(&id, 0).await, "completed");
    let messages = served.messages(&id).await;
    let user_seq = sequence_of(&messages, "user", user);
    let model_seq = sequence_of(&messages, "assistant", model);

    let browser = Chromium::launch().await;
    let page = browser.page().await;
    page.open(&format!("{}/", served.base)).await;
    let row = format!("#traces tr[data-trace-id='{id}']");
    page.wait_for(&format!("document.querySelector(\"{row}\")"), "the trace in the list").await;
    let task: String = page.eval(&format!("document.querySelector(\"{row} a\").textContent")).await;
    assert_eq!(task, user);
    page.click(&format!("{row} a")).await;
    page.wait_for(
        "document.getElementById('trace-view').dataset.live === 'true'",
        "the trace view",
    )
    .await;
    page.wait_for("document.querySelector('#messages article.role-tool')", "every message").await;
    // Opening the collapsed tool call and result shows their text too.
    page.eval::<bool>(
        "[...document.querySelectorAll('#messages details')].forEach(d => d.open = true) || true",
    )
    .await;
    let shown: Vec<String> = page
        .eval(&format!(
            "[document.querySelector('#trace-title').textContent,
              document.querySelector('[data-seq=\"{user_seq}\"] .text').textContent,
              document.querySelector('[data-seq=\"{model_seq}\"] .text').textContent,
              document.querySelector('[data-seq=\"{model_seq}\"] details pre').textContent,
              document.querySelector('#messages article.role-tool pre').textContent]"
        ))
        .await;
    assert_eq!(shown[0], user);
    assert_eq!(shown[1], user);
    assert_eq!(shown[2], model);
    assert!(shown[3].contains(arguments), "{shown:?}");
    assert!(shown[4].contains(arguments), "{shown:?}");
    let injected: Value = page
        .eval(
            "({ pwned: window.pwned ?? null,
                elements: document.querySelectorAll('main img, main script, main b, main style').length,
                visible: getComputedStyle(document.body).display })",
        )
        .await;
    assert_eq!(injected, json!({ "pwned": null, "elements": 0, "visible": "block" }));
    // Every other view of the trace draws the same text as text.
    for tab in ["timeline", "costs", "graph", "files", "decisions"] {
        page.click(&format!("#tab-button-{tab}")).await;
        page.wait_for(&format!("document.getElementById('tab-{tab}').dataset.drawn"), tab).await;
        let injected: Value = page
            .eval(
                "({ pwned: window.pwned ?? null,
                    elements: document.querySelectorAll('main img, main script, main b, main style').length })",
            )
            .await;
        assert_eq!(injected, json!({ "pwned": null, "elements": 0 }), "{tab}");
    }
    let details: Vec<String> = page
        .eval("[...document.querySelectorAll('.tl-row .tl-detail')].map(d => d.textContent)")
        .await;
    assert!(details.iter().any(|d| d.contains(arguments)), "the echo's summary: {details:?}");

    page.screenshot("markup-as-text").await;
    assert_no_problems(&page);
    browser.close().await;
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_asks_for_the_token_and_sends_it_to_the_api_and_the_socket() {
    let token = "s3cret-viewer-token";
    let served = Served::start_with(json!([{ "text": "hello back" }]), Some(token)).await;
    let id =
        served.start_run(json!({ "messages": [{ "role": "user", "content": "hello" }] })).await;
    assert_eq!(served.finished(&id, 0).await, "completed");

    let browser = Chromium::launch().await;
    let page = browser.page().await;
    page.open(&format!("{}/", served.base)).await;
    page.wait_for("document.getElementById('token-dialog').open", "the token prompt").await;
    page.wait_problem(|p| p.contains("401"), "the API refusing the page at first").await;
    let input = page.page.find_element("#token-input").await.unwrap();
    input.click().await.unwrap();
    input.type_str(token).await.unwrap();
    page.click("#token-form button[type=submit]").await;

    let row = format!("#traces tr[data-trace-id='{id}']");
    page.wait_for(&format!("document.querySelector(\"{row}\")"), "the list, with the token").await;
    let kept: String = page.eval("sessionStorage.getItem('reson.token')").await;
    assert_eq!(kept, token);
    page.click(&format!("{row} a")).await;
    page.wait_for(
        "document.getElementById('trace-view').dataset.live === 'true'",
        "the socket, with ?token=",
    )
    .await;
    page.wait_for(
        "[...document.querySelectorAll('#messages .text')].some(t => t.textContent === 'hello back')",
        "the messages",
    )
    .await;
    // A request sent without the token would have been refused: the
    // only failures are those before it was given.
    let problems = page.problems();
    assert!(problems.iter().all(|p| p.contains("401")), "{problems:#?}");
    browser.close().await;
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_resumes_its_socket_after_a_drop_with_nothing_missed_or_repeated() {
    let served =
        Served::start(json!([{ "text": "before the drop" }, { "text": "after the drop" }])).await;
    let id =
        served.start_run(json!({ "messages": [{ "role": "user", "content": "hello" }] })).await;
    assert_eq!(served.finished(&id, 0).await, "completed");
    served.idle(&id).await;

    let browser = Chromium::launch().await;
    let page = browser.page().await;
    page.open(&format!("{}/#/traces/{id}", served.base)).await;
    page.wait_for(
        "document.getElementById('trace-view').dataset.live === 'true'",
        "the live socket",
    )
    .await;

    // The server goes away (closing the socket), comes back on the same
    // address and the trace is continued: the page reconnects by itself.
    let addr: SocketAddr = served.base["http://".len()..].parse().unwrap();
    let dir = served.stop().await;
    page.wait_for(
        "document.getElementById('trace-view').dataset.live === 'false'",
        "the drop noticed",
    )
    .await;
    let served = Served::serve(dir, addr, None).await;
    let since = served.last_event(&id).await;
    let reply = served
        .post(
            &format!("/api/traces/{id}/run"),
            json!({ "messages": [{ "role": "user", "content": "again" }] }),
        )
        .await;
    assert_eq!(reply["mode"], "continue", "{reply}");
    assert_eq!(served.finished(&id, since).await, "completed");
    page.wait_for(
        "[...document.querySelectorAll('#messages .text')].some(t => t.textContent === 'after the drop')",
        "the continued run, after reconnecting",
    )
    .await;
    page.wait_for(
        "document.getElementById('trace-view').dataset.status === 'completed'",
        "the finished status",
    )
    .await;
    let shown: Vec<u64> = page
        .eval("[...document.querySelectorAll('#events li')].map(e => Number(e.dataset.eventId))")
        .await;
    let last = served.last_event(&id).await;
    assert_eq!(
        shown,
        (since + 1..=last).collect::<Vec<_>>(),
        "every event after the page opened, once"
    );
    assert!(
        page.eval::<bool>("document.getElementById('trace-view').dataset.live === 'true'").await
    );

    // While the server was away, only its absence was reported.
    let problems = page.problems();
    let outage = [
        "ERR_CONNECTION_REFUSED",
        "WebSocket connection",
        "ERR_CONNECTION_RESET",
        "ERR_EMPTY_RESPONSE",
    ];
    assert!(problems.iter().all(|p| outage.iter().any(|o| p.contains(o))), "{problems:#?}");
    page.screenshot("resumed").await;
    browser.close().await;
    served.stop().await;
}

/// A tool's image is shown as an image: fetched with the token from the
/// image route (an `<img>` alone could not send it) and drawn from a
/// `blob:` URL the page's policy allows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_image_is_shown_as_an_image() {
    use base64::Engine as _;
    let token = "s3cret-viewer-image-token";
    let served = Served::start_with(json!([{ "text": "unused" }]), Some(token)).await;
    let png = std::fs::read(support::root().join("tests/guests/picture/src/blue.png")).unwrap();
    let store =
        FileTraceStore::open(served.dir.path().join("traces"), Durability::Batched).unwrap();
    let mut trace = reson::trace::Trace::new(reson::trace::TraceMode::Agent, "look", "default");
    store.create_trace(&trace).await.unwrap();
    let user = reson::trace::Message::new(reson::trace::Role::User, "take one");
    store.add_message(&mut trace, user, None).await.unwrap();
    let call =
        reson::trace::ToolCall { id: "c1".into(), name: "picture".into(), arguments: "{}".into() };
    let mut shot = reson::trace::Message::tool_result(&call, "taken");
    let data = base64::engine::general_purpose::STANDARD.encode(&png);
    shot.content
        .push(reson::trace::ContentPart::ImageUrl { url: format!("data:image/png;base64,{data}") });
    store.add_message(&mut trace, shot, None).await.unwrap();

    let browser = Chromium::launch().await;
    let page = browser.page().await;
    page.open(&format!("{}/", served.base)).await;
    page.wait_for("document.getElementById('token-dialog').open", "the token prompt").await;
    let input = page.page.find_element("#token-input").await.unwrap();
    input.click().await.unwrap();
    input.type_str(token).await.unwrap();
    page.click("#token-form button[type=submit]").await;
    let row = format!("#traces tr[data-trace-id='{}']", trace.id);
    page.wait_for(&format!("document.querySelector(\"{row}\")"), "the list").await;
    page.click(&format!("{row} a")).await;
    let img = "document.querySelector('#messages article.role-tool img.msg-image')";
    page.wait_for(&format!("{img}.src.startsWith('blob:')"), "the image, fetched").await;
    let shown: Value = page
        .eval(&format!(
            "{img}.decode().then(() => ({{ size: [{img}.naturalWidth, {img}.naturalHeight],
                alt: {img}.alt,
                caption: {img}.closest('figure').querySelector('figcaption').textContent }}))"
        ))
        .await;
    assert_eq!(
        shown,
        json!({ "size": [3, 1], "alt": format!("image 000002.png (3×1, {} bytes)", png.len()),
                "caption": "000002.png" })
    );
    page.screenshot("tool-image").await;
    let problems = page.problems();
    assert!(problems.iter().all(|p| p.contains("401")), "{problems:#?}");
    browser.close().await;
    served.stop().await;
}
