//! The permission checker at run time, the shell and webfetch plugins, and
//! what the model is offered and sent.

use crate::support;

use reson::agent::{
    AgentEvent, Answer, Hooks, PendingApprovals, Permissions, RunConfig, RunHandle, Runner,
};
use reson::plugin::{CallContext, CallError, Runtime, ToolFailure};
use reson::policy::{Decision, Rule, RuleSet};
use reson::provider::PluginProvider;
use reson::tools::ToolRegistry;
use reson::trace::{EventKind, FileTraceStore, Message, Role, TraceStore};
use serde_json::json;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::{Recording, TestDir};

struct Setup {
    dir: TestDir,
    runtime: Runtime,
    store: Arc<FileTraceStore>,
    provider: Arc<Recording>,
}

impl Setup {
    async fn new(turns: serde_json::Value) -> Self {
        let dir = TestDir::new();
        for plugin in ["scripted", "fs", "shell", "webfetch"] {
            dir.install(support::plugins(), plugin);
        }
        let script = dir.path().join("script.json");
        std::fs::write(&script, json!({ "turns": turns }).to_string()).unwrap();
        let runtime = dir
            .open(&format!(
                r#"
            [plugins.scripted]
            dirs = [{{ path = ".", access = "read" }}]
            config = {{ script = "{}" }}
            [plugins.shell]
            dirs = [{{ path = "workspace", access = "read-write" }}]
            process = ["echo *", "touch *"]
            [plugins.hostile]
            dirs = [{{ path = "workspace", access = "read-write" }}]
            [plugins.fs]
            dirs = [{{ path = "workspace", access = "read-write" }}]
            "#,
                script.display()
            ))
            .await;
        // The hostile guest comes after the bundled plugins, so the names it
        // shares with them (read, write) stay theirs.
        dir.install(support::test_plugins(), "hostile");
        runtime.rescan().await.unwrap();
        let store = Arc::new(
            FileTraceStore::open(dir.path().join("traces"), reson::trace::Durability::Batched)
                .unwrap(),
        );
        let provider = Arc::new(Recording::new(PluginProvider::new(runtime.clone(), "scripted")));
        Self { dir, runtime, store, provider }
    }

    fn runner(&self, rules: RuleSet, approvals: Arc<PendingApprovals>) -> Runner {
        Runner::new(
            self.store.clone(),
            self.provider.clone(),
            ToolRegistry::new(self.runtime.clone()),
            Hooks::none(),
        )
        .with_permissions(Permissions::new(rules, approvals))
    }

    async fn decisions(&self, trace_id: &str) -> Vec<String> {
        self.store
            .events_after(trace_id, 0)
            .await
            .unwrap()
            .into_iter()
            .filter_map(|e| match e.kind {
                EventKind::PermissionDecided { decision, .. } => Some(decision),
                _ => None,
            })
            .collect()
    }

    async fn tool_texts(&self, trace_id: &str) -> Vec<String> {
        self.store
            .get_messages(trace_id)
            .await
            .unwrap()
            .iter()
            .filter(|m| m.role == Role::Tool)
            .map(Message::text)
            .collect()
    }
}

fn shell(command: &str) -> serde_json::Value {
    json!({ "tool_calls": [{ "name": "shell", "arguments": { "command": command } }] })
}

fn rules(rules: &[(Decision, &str, Option<&str>)], default: Decision) -> RuleSet {
    let rules: Vec<Rule> = rules
        .iter()
        .map(|(decision, tool, pattern)| Rule {
            decision: *decision,
            tool: (*tool).into(),
            pattern: pattern.map(Into::into),
            examples: Vec::new(),
            counter_examples: Vec::new(),
        })
        .collect();
    RuleSet::compile(&rules).unwrap().with_default(default)
}

/// Drives a run, answering approval requests in order from `answers`
/// (`None`: leave it unanswered). Returns the number of requests seen.
async fn drive(
    mut handle: RunHandle,
    approvals: &PendingApprovals,
    answers: &[Option<Answer>],
) -> (String, usize) {
    let id = handle.trace_id().to_owned();
    let mut asked = 0;
    while let Some(event) = handle.next_event().await {
        if let AgentEvent::ApprovalNeeded { request } = event {
            if let Some(Some(answer)) = answers.get(asked) {
                assert!(approvals.answer(&request.id, *answer));
            }
            asked += 1;
        }
    }
    handle.wait().await.unwrap();
    (id, asked)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approve_once_then_always_then_remembered() {
    let s = Setup::new(
        json!([shell("echo one"), shell("echo two"), shell("echo three"), { "text": "done" }]),
    )
    .await;
    let approvals = PendingApprovals::new(Duration::from_secs(30));
    let runner = s.runner(
        rules(&[(Decision::Ask, "shell", Some("echo *"))], Decision::Deny),
        approvals.clone(),
    );
    let handle =
        runner.run(vec![Message::new(Role::User, "go")], RunConfig::default()).await.unwrap();
    let (id, asked) = drive(handle, &approvals, &[Some(Answer::Once), Some(Answer::Always)]).await;
    assert_eq!(asked, 2, "the third call matched an `always` answer and was not asked");
    assert_eq!(s.decisions(&id).await, ["ask-once", "ask-always", "ask-remembered"]);
    let outputs = s.tool_texts(&id).await;
    assert!(outputs.iter().all(|t| t.starts_with("exit code 0")), "{outputs:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_or_unanswered_ask_does_not_run() {
    // A timeout covers every ask of its approvals: the denial gets a long
    // one, so that it is never late, and only the ask left unanswered
    // waits under a short one.
    let cases = [
        (Some(Answer::Deny), Duration::from_secs(30), "denied", "the user denied this call"),
        (None, Duration::from_millis(300), "timeout", "no one approved this call"),
    ];
    for (answer, timeout, case, output) in cases {
        let marker = format!("marker-{case}");
        let s = Setup::new(json!([shell(&format!("touch {marker}")), { "text": "done" }])).await;
        let approvals = PendingApprovals::new(timeout);
        let runner =
            s.runner(rules(&[(Decision::Ask, "shell", None)], Decision::Allow), approvals.clone());
        let handle =
            runner.run(vec![Message::new(Role::User, "go")], RunConfig::default()).await.unwrap();
        let (id, asked) = drive(handle, &approvals, &[answer]).await;
        assert_eq!(asked, 1);
        assert_eq!(s.decisions(&id).await, [format!("ask-{case}")]);
        assert!(!s.dir.workspace().join(&marker).exists(), "the {case} call ran");
        let outputs = s.tool_texts(&id).await;
        assert!(outputs[0].contains(output), "{outputs:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shell_command_the_rules_deny_never_runs() {
    let s =
        Setup::new(json!([shell("touch marker"), shell("echo allowed"), { "text": "done" }])).await;
    let approvals = PendingApprovals::new(Duration::from_secs(1));
    let set = rules(
        &[(Decision::Allow, "shell", None), (Decision::Deny, "shell", Some("touch *"))],
        Decision::Ask,
    );
    let handle = s
        .runner(set, approvals.clone())
        .run(vec![Message::new(Role::User, "go")], RunConfig::default())
        .await
        .unwrap();
    let (id, asked) = drive(handle, &approvals, &[]).await;
    assert_eq!(asked, 0);
    assert!(!s.dir.workspace().join("marker").exists(), "the denied command ran");
    assert_eq!(s.decisions(&id).await, ["deny", "allow"]);
    let outputs = s.tool_texts(&id).await;
    assert!(
        outputs[0].contains("permission denied for `shell` (rule deny shell \"touch *\")"),
        "{outputs:?}"
    );
    assert_eq!(outputs[1], "exit code 0\nallowed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preset_without_shell_never_offers_it() {
    let s = Setup::new(json!([{ "text": "hi" }, { "text": "hi again" }])).await;
    let approvals = PendingApprovals::new(Duration::from_secs(1));
    let config = s.dir.config("");
    let (_, explore) = config.preset("explore").unwrap();
    let handle = s
        .runner(explore, approvals.clone())
        .run(vec![Message::new(Role::User, "look")], RunConfig::default())
        .await
        .unwrap();
    drive(handle, &approvals, &[]).await;
    let (_, default) = config.preset("default").unwrap();
    let handle = s
        .runner(default, approvals.clone())
        .run(vec![Message::new(Role::User, "look")], RunConfig::default())
        .await
        .unwrap();
    drive(handle, &approvals, &[]).await;
    let requests = s.provider.requests();
    let offered = |i: usize| requests[i].tools.iter().map(|t| t.name.clone()).collect::<Vec<_>>();
    assert!(
        !offered(0).contains(&"shell".to_owned()) && !offered(0).contains(&"write".to_owned()),
        "{:?}",
        offered(0)
    );
    assert!(offered(0).contains(&"read".to_owned()));
    assert!(offered(1).contains(&"shell".to_owned()), "{:?}", offered(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_arguments_never_reach_the_plugin() {
    let s = Setup::new(json!([
        { "tool_calls": [{ "name": "write", "arguments": { "path": 5, "content": "x" } }] },
        { "tool_calls": [{ "name": "write", "arguments": { "path": "made.txt", "content": "x" } }] },
        { "text": "done" }
    ])).await;
    let approvals = PendingApprovals::new(Duration::from_secs(1));
    let handle = s
        .runner(rules(&[], Decision::Allow), approvals.clone())
        .run(vec![Message::new(Role::User, "w")], RunConfig::default())
        .await
        .unwrap();
    let (id, _) = drive(handle, &approvals, &[]).await;
    let outputs = s.tool_texts(&id).await;
    assert!(
        outputs[0].contains("invalid arguments for `write`") && outputs[0].contains("/path"),
        "{outputs:?}"
    );
    assert!(s.dir.workspace().join("made.txt").exists(), "the corrected call ran");
    // Only the corrected call reached a plugin: the fs tool wrote once.
    assert_eq!(outputs.iter().filter(|o| o.starts_with("wrote")).count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_result_images_reach_the_provider_as_image_parts() {
    let s = Setup::new(json!([
        { "tool_calls": [{ "name": "remember", "arguments": { "text": "see image", "image": true } }] },
        { "text": "I see it" }
    ])).await;
    let approvals = PendingApprovals::new(Duration::from_secs(1));
    let handle = s
        .runner(rules(&[], Decision::Allow), approvals.clone())
        .run(vec![Message::new(Role::User, "img")], RunConfig::default())
        .await
        .unwrap();
    drive(handle, &approvals, &[]).await;
    let requests = s.provider.requests();
    let tool = requests[1].messages.iter().find(|m| m.role == Role::Tool).unwrap();
    assert_eq!(tool.content.len(), 2, "{:?}", tool.content);
    use base64::Engine as _;
    let red = std::fs::read(support::root().join("tests/guests/picture/src/red.png")).unwrap();
    let data = base64::engine::general_purpose::STANDARD.encode(red);
    assert_eq!(
        tool.content[1],
        reson::trace::ContentPart::ImageUrl { url: format!("data:image/png;base64,{data}") }
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_result_memory_shapes_the_history_sent() {
    let remember = |text: &str, memory: Option<&str>, once: bool| json!({ "tool_calls": [{ "name": "remember", "arguments": { "text": text, "memory": memory, "once": once } }] });
    let s = Setup::new(json!([
        remember("FULL-A", Some("mem-A"), false),
        remember("FULL-B", None, true),
        { "text": "done" }
    ]))
    .await;
    let approvals = PendingApprovals::new(Duration::from_secs(1));
    let handle = s
        .runner(rules(&[], Decision::Allow), approvals.clone())
        .run(vec![Message::new(Role::User, "r")], RunConfig::default())
        .await
        .unwrap();
    drive(handle, &approvals, &[]).await;
    // A copy: the guard must not be held across the store calls below.
    let requests = s.provider.requests();
    let sent =
        |i: usize| requests[i].messages.iter().map(Message::text).collect::<Vec<_>>().join("|");
    assert!(sent(1).contains("FULL-A"), "the newest result goes in full: {}", sent(1));
    assert!(
        sent(2).contains("mem-A") && !sent(2).contains("FULL-A"),
        "later, its memory: {}",
        sent(2)
    );
    assert!(sent(2).contains("FULL-B"));
    let stored = s.store.list_traces(&Default::default()).await.unwrap().remove(0);
    let all: Vec<String> =
        s.store.get_messages(&stored.id).await.unwrap().iter().map(Message::text).collect();
    assert!(all.contains(&"FULL-A".to_owned()), "the trace keeps the full output");
}

/// Serves one HTML page to every request.
fn html_server() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut buf = [0u8; 4096];
            let _ = stream.read(&mut buf);
            let body = "<html><head><script>evil()</script></head><body><h1>Hello</h1><p>Readable <b>text</b>.</p></body></html>";
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                body.len()
            );
            let _ = stream.write_all(head.as_bytes());
            let _ = stream.write_all(body.as_bytes());
        }
    });
    addr
}

#[tokio::test]
async fn webfetch_reaches_only_granted_hosts_and_returns_readable_text() {
    let addr = html_server();
    let dir = TestDir::new();
    dir.install(support::plugins(), "webfetch");
    let rt = dir.open(&format!("[plugins.webfetch]\nhttp = [\"{addr}\"]\n")).await;
    let ctx = CallContext::default();
    let page = rt
        .call_tool("webfetch", &json!({ "url": format!("http://{addr}/") }).to_string(), &ctx)
        .await
        .unwrap();
    assert!(
        page.text.contains("# Hello") && page.text.contains("Readable **text**."),
        "{}",
        page.text
    );
    assert!(!page.text.contains("evil"), "scripts are dropped: {}", page.text);
    let text = rt
        .call_tool(
            "webfetch",
            &json!({ "url": format!("http://{addr}/"), "format": "text" }).to_string(),
            &ctx,
        )
        .await
        .unwrap();
    assert!(text.text.contains("Hello") && !text.text.contains("**"), "{}", text.text);

    let refused = rt
        .call_tool("webfetch", &json!({ "url": "http://127.0.0.1:9/" }).to_string(), &ctx)
        .await
        .unwrap_err();
    match refused {
        CallError::Tool { failure: ToolFailure::Denied(message), .. } => {
            assert!(message.contains("not granted"), "{message}")
        }
        other => panic!("expected a denial, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_during_an_approval_asks_nothing_more_and_runs_nothing_more() {
    let touch = |marker: &str| json!({ "name": "shell", "arguments": { "command": format!("touch {marker}") } });
    let s = Setup::new(json!([
        { "tool_calls": [touch("marker-one"), { "name": "goal", "arguments": { "action": "add", "description": "after stop" } }, touch("marker-two"), touch("marker-three")] },
        { "text": "done" }
    ])).await;
    // A second approval, unanswered, would hold the run this long.
    let approvals = PendingApprovals::new(Duration::from_secs(30));
    let runner =
        s.runner(rules(&[(Decision::Ask, "shell", None)], Decision::Allow), approvals.clone());
    let mut handle =
        runner.run(vec![Message::new(Role::User, "go")], RunConfig::default()).await.unwrap();
    let id = handle.trace_id().to_owned();
    let started = Instant::now();
    let mut asked = 0;
    while let Some(event) = handle.next_event().await {
        if let AgentEvent::ApprovalNeeded { request } = event {
            asked += 1;
            // The user stops the run, then approves what was on screen.
            assert!(runner.stop(&id));
            approvals.answer(&request.id, Answer::Once);
        }
    }
    let outcome = handle.wait().await.unwrap();
    assert_eq!(outcome.status, reson::trace::TraceStatus::Stopped);
    assert_eq!(asked, 1, "a stopped run asked for more approvals");
    assert!(started.elapsed() < support::MARGIN, "took {:?}", started.elapsed());
    for marker in ["marker-one", "marker-two", "marker-three"] {
        assert!(!s.dir.workspace().join(marker).exists(), "{marker} ran after the stop");
    }
    let outputs = s.tool_texts(&id).await;
    assert_eq!(outputs.len(), 4, "every call has a result: {outputs:?}");
    let goals = s.store.get_goals(&id).await.unwrap().render();
    assert!(!goals.contains("after stop"), "the goal call ran after the stop: {goals}");
    let messages = s.store.get_messages(&id).await.unwrap();
    let assistant = messages.iter().find(|m| !m.tool_calls.is_empty()).unwrap();
    let results: Vec<_> =
        messages.iter().filter(|m| m.role == Role::Tool).map(|m| m.tool_call_id.clone()).collect();
    let calls: Vec<_> = assistant.tool_calls.iter().map(|c| Some(c.id.clone())).collect();
    assert_eq!(results, calls, "results are stored in call order");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_while_an_approval_waits_ends_the_run_at_once() {
    let s = Setup::new(json!([shell("touch marker"), { "text": "done" }])).await;
    // Nobody answers, and the approval would wait this long.
    let approvals = PendingApprovals::new(Duration::from_secs(30));
    let runner =
        s.runner(rules(&[(Decision::Ask, "shell", None)], Decision::Allow), approvals.clone());
    let mut handle =
        runner.run(vec![Message::new(Role::User, "go")], RunConfig::default()).await.unwrap();
    let id = handle.trace_id().to_owned();
    let mut stopped = None;
    let mut last = None;
    while let Some(event) = handle.next_event().await {
        if let AgentEvent::ApprovalNeeded { .. } = &event {
            stopped = Some(Instant::now());
            handle.stop();
        }
        last = Some(event);
    }
    let stopped = stopped.expect("the call was put up for approval");
    let outcome = handle.wait().await.unwrap();
    let took = stopped.elapsed();
    assert!(took < support::MARGIN, "the run waited {took:?} for the approval after the stop");
    assert_eq!(outcome.status, reson::trace::TraceStatus::Stopped);
    assert!(
        matches!(
            last,
            Some(AgentEvent::Finished { status: reson::trace::TraceStatus::Stopped, .. })
        ),
        "{last:?}"
    );
    assert!(!s.dir.workspace().join("marker").exists(), "the call ran after the stop");
    let trace = s.store.get_trace(&id).await.unwrap().unwrap();
    assert_eq!(trace.status, reson::trace::TraceStatus::Stopped);
    assert_eq!(s.tool_texts(&id).await.len(), 1, "the call that waited has a result");
}

/// A directory for the real binary: `scripted`, `fs` and `shell`, both
/// tools granted `workspace/` (shell may run `ls`), under the built-in
/// `default` preset (writes and commands ask), the script in
/// `script.json`, and `extra` config.
fn cli_dir(turns: serde_json::Value, extra: &str) -> TestDir {
    let dir = TestDir::new();
    for plugin in ["scripted", "fs", "shell"] {
        dir.install(support::plugins(), plugin);
    }
    std::fs::write(dir.path().join("script.json"), json!({ "turns": turns }).to_string()).unwrap();
    std::fs::write(
        dir.path().join("reson.toml"),
        format!(
            "traces_dir = \"traces\"\n\
             [plugins.fs]\ndirs = [{{ path = \"workspace\", access = \"read-write\" }}]\n\
             [plugins.shell]\ndirs = [{{ path = \"workspace\", access = \"read-write\" }}]\n\
             process = [\"ls *\"]\n{extra}"
        ),
    )
    .unwrap();
    dir
}

fn write_turn(files: &[(&str, &str)]) -> serde_json::Value {
    let calls: Vec<_> = files
        .iter()
        .map(|(path, content)| json!({ "name": "write", "arguments": { "path": path, "content": content } }))
        .collect();
    json!({ "text": "writing", "tool_calls": calls })
}

/// With no terminal (stdin and stderr not one, as in CI or a script), an
/// `ask` is answered at once: denied by default, with one line naming the
/// flag and the rule, and the run exits 3; `--approve once` or
/// `[permissions] unattended = "all"` allow instead.
#[test]
fn with_no_terminal_an_ask_is_answered_at_once_by_the_chosen_policy() {
    let turns = json!([write_turn(&[("a.txt", "hello"), ("b.txt", "world")]), { "text": "done" }]);
    let dir = cli_dir(turns.clone(), "");
    let run = |dir: &TestDir, extra: &[&str]| {
        let started = Instant::now();
        let mut args = vec!["run", "write two files", "--script", "script.json"];
        args.extend_from_slice(extra);
        let out = support::reson_cli(dir.path(), &args);
        let said = format!(
            "status {}\nstdout:\n{}\nstderr:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        // An ask used to wait 60 s each before it was denied.
        assert!(started.elapsed() < Duration::from_secs(45), "a silent wait: {said}");
        (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned(), said)
    };

    let (code, err, said) = run(&dir, &[]);
    assert_eq!(code, Some(3), "denied for want of an answer: {said}");
    assert_eq!(err.matches("denied write(").count(), 2, "one line per ask: {said}");
    assert!(err.contains("--approve once|all"), "names the flag: {said}");
    assert!(
        err.contains("rule `ask {write,edit,shell,webfetch,run_code}`"),
        "names the rule: {said}"
    );
    assert!(err.contains("2 calls were denied for want of an answer"), "{said}");
    assert!(!dir.path().join("workspace/a.txt").exists(), "nothing ran");
    assert!(said.contains("no one is there to give it"), "the model is told why: {said}");

    let (code, err, said) = run(&dir, &["--approve", "once"]);
    assert_eq!(code, Some(0), "{said}");
    assert!(err.contains("allowed write(") && err.contains("--approve once"), "{said}");
    assert_eq!(std::fs::read_to_string(dir.path().join("workspace/b.txt")).unwrap(), "world");

    let configured = cli_dir(turns, "[permissions]\nunattended = \"all\"\n");
    let (code, _, said) = run(&configured, &[]);
    assert_eq!(code, Some(0), "{said}");
    assert!(configured.path().join("workspace/a.txt").exists(), "{said}");
}

/// At a terminal, the question shows what the call will do (the path and
/// size of a write; a command as it will run, its program resolved) and
/// takes one key.
#[test]
fn at_a_terminal_the_question_shows_what_the_call_does_and_takes_one_key() {
    let turns = json!([
        write_turn(&[("notes.txt", "hello")]),
        { "text": "listing", "tool_calls": [{ "name": "shell", "arguments": { "command": "'/bin/ls' -l" } }] },
        { "text": "done" },
    ]);
    let dir = cli_dir(turns, "");
    let command = format!(
        "{} --cache-dir {} run 'write a note' --script script.json; echo EXIT=$?; sleep 600",
        env!("CARGO_BIN_EXE_reson"),
        support::cache_dir().display()
    );
    let tmux = support::Tmux::start(dir.path(), &command);
    tmux.until(
        "? allow write: notes.txt (5 bytes) (rule: ask {write,edit,shell,webfetch,run_code})",
    );
    tmux.key("y");
    tmux.until("allowed once");
    tmux.until("? allow shell: run `ls -l`");
    tmux.key("n");
    let screen = tmux.until("EXIT=");
    assert!(screen.contains("EXIT=0"), "{screen}");
    assert!(screen.contains("the user denied this call of `shell`"), "{screen}");
    assert_eq!(std::fs::read_to_string(dir.path().join("workspace/notes.txt")).unwrap(), "hello");
}
