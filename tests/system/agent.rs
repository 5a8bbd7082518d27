//! The agent core end to end: the runner on the real `scripted` provider
//! component and real tool plugins, a file trace store, sessions and hooks,
//! run handles (events as a stream, stop on drop, detach), and a real
//! `reson run` process killed mid-run.

use crate::support;

use futures::StreamExt;
use futures::future::ready;
use reson::agent::memory::SessionMemory;
use reson::agent::{
    AgentBuilder, AgentError, AgentEvent, AgentSession, BasicAgent, HookDecision, HookEvent,
    HookPoint, Hooks, INTERRUPTED, RunConfig, RunOutcome, Runner,
};
use reson::plugin::Runtime;
use reson::provider::{LlmParams, PluginProvider};
use reson::tools::ToolRegistry;
use reson::trace::{Durability, FileTraceStore, Message, Role, TraceStatus, TraceStore};
use serde_json::json;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};
use support::TestDir;

/// A plugins directory with the scripted provider, fs, echo and hostile,
/// and a trace store, all in one temp dir.
struct Setup {
    dir: TestDir,
    runtime: Runtime,
    store: Arc<FileTraceStore>,
}

impl Setup {
    async fn new(script: serde_json::Value) -> Self {
        Self::with_config(script, "").await
    }

    async fn with_config(script: serde_json::Value, extra: &str) -> Self {
        let dir = TestDir::new();
        dir.install(support::plugins(), "scripted")
            .install(support::plugins(), "fs")
            .install(support::plugins(), "echo");
        let fs = "[plugins.fs]\ndirs = [{ path = \"workspace\", access = \"read-write\" }]\n";
        let runtime = dir.open_scripted(&script, &format!("{fs}{extra}")).await;
        // The hostile guest comes after the bundled plugins, so the names it
        // shares with them (read, write, echo) stay theirs.
        dir.install(support::test_plugins(), "hostile");
        runtime.rescan().await.unwrap();
        let store =
            Arc::new(FileTraceStore::open(dir.path().join("traces"), Durability::Batched).unwrap());
        Self { dir, runtime, store }
    }

    /// A setup whose model may run `make` on `makefile` in the workspace,
    /// through the bundled shell plugin.
    async fn with_makefile(script: serde_json::Value, makefile: &str) -> Self {
        let shell = "[plugins.shell]\ndirs = [{ path = \"workspace\", access = \"read-write\" }]\n\
                     process = [\"make *\"]\n";
        let s = Self::with_config(script, shell).await;
        std::fs::write(s.dir.workspace().join("Makefile"), makefile).unwrap();
        s.dir.install(support::plugins(), "shell");
        s.runtime.rescan().await.unwrap();
        s
    }

    /// Runs `messages` to the end on a runner without hooks.
    async fn run_to_end(
        &self,
        messages: Vec<Message>,
        config: RunConfig,
    ) -> Result<RunOutcome, AgentError> {
        self.runner(Hooks::none()).run(messages, config).await.unwrap().wait().await
    }

    fn set_script(&self, script: serde_json::Value) {
        std::fs::write(self.dir.path().join("script.json"), script.to_string()).unwrap();
    }

    fn runner(&self, hooks: Hooks) -> Runner {
        Runner::new(
            self.store.clone(),
            Arc::new(PluginProvider::new(self.runtime.clone(), "scripted")),
            ToolRegistry::new(self.runtime.clone()),
            hooks,
        )
    }

    async fn main_path(&self, trace_id: &str) -> Vec<Message> {
        let trace = self.store.get_trace(trace_id).await.unwrap().unwrap();
        self.store.get_main_path_messages(trace_id, trace.head_sequence.unwrap()).await.unwrap()
    }
}

fn user(text: &str) -> Vec<Message> {
    vec![Message::new(Role::User, text)]
}

fn text_turn(text: &str) -> serde_json::Value {
    json!({ "text": text })
}

fn echo_turn(text: &str) -> serde_json::Value {
    json!({ "tool_calls": [{ "name": "echo", "arguments": { "text": text } }] })
}

fn sequences(path: &[Message]) -> Vec<u64> {
    path.iter().map(|m| m.sequence).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_calls_tools_and_persists_every_step() {
    let s = Setup::new(json!({ "turns": [
        { "text": "writing", "tool_calls": [
            { "name": "write", "arguments": { "path": "a.txt", "content": "hi" } },
            { "name": "read", "arguments": { "path": "a.txt" } } ] },
        text_turn("done")
    ]}))
    .await;
    let runner = s.runner(Hooks::none());
    let streaming = RunConfig {
        params: LlmParams { stream: true, ..LlmParams::default() },
        ..RunConfig::default()
    };
    let mut handle = runner.run(user("write a file"), streaming).await.unwrap();
    let mut kinds = Vec::new();
    while let Some(event) = handle.next_event().await {
        kinds.push(serde_json::to_value(&event).unwrap()["type"].as_str().unwrap().to_owned());
    }
    let outcome = handle.wait().await.unwrap();
    assert_eq!(outcome.status, TraceStatus::Completed);
    assert_eq!(outcome.final_text.as_deref(), Some("done"));
    assert_eq!(outcome.iterations, 2);
    assert_eq!(std::fs::read_to_string(s.dir.workspace().join("a.txt")).unwrap(), "hi");
    for kind in [
        "trace_started",
        "model_request",
        "text_delta",
        "tool_started",
        "tool_finished",
        "message_added",
        "finished",
    ] {
        assert!(kinds.iter().any(|k| k == kind), "no {kind} event in {kinds:?}");
    }

    let path = s.main_path(&outcome.trace_id).await;
    let roles: Vec<Role> = path.iter().map(|m| m.role).collect();
    assert_eq!(roles, [Role::User, Role::Assistant, Role::Tool, Role::Tool, Role::Assistant]);
    assert_eq!(sequences(&path), [1, 2, 3, 4, 5]);
    assert!(path.iter().all(|m| m.id == format!("{}-{:04}", outcome.trace_id, m.sequence)));
    let results: Vec<String> = path[2..4].iter().map(Message::text).collect();
    assert!(results.iter().any(|t| t.starts_with("wrote 2 bytes")), "{results:?}");
    let trace = s.store.get_trace(&outcome.trace_id).await.unwrap().unwrap();
    assert_eq!(trace.status, TraceStatus::Completed);
    assert_eq!(trace.result_summary.as_deref(), Some("done"));
    let events = s.store.events_after(&outcome.trace_id, 0).await.unwrap();
    assert!(events.windows(2).all(|w| w[0].id < w[1].id), "event ids increase");
    assert!(path.iter().all(|m| m.goal_id.is_some()), "every message carries the current goal");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn continue_rewind_and_regenerate_build_the_right_main_paths() {
    let s = Setup::new(
        json!({ "turns": [echo_turn("one"), text_turn("first answer"), text_turn("second answer")] }),
    ).await;
    let runner = s.runner(Hooks::none());
    let first =
        runner.run(user("start"), RunConfig::default()).await.unwrap().wait().await.unwrap();
    let id = first.trace_id.clone();
    assert_eq!(sequences(&s.main_path(&id).await), [1, 2, 3, 4]);

    // Continue: appends after the head.
    let cont = RunConfig { trace_id: Some(id.clone()), ..RunConfig::default() };
    runner.run(user("more"), cont).await.unwrap().wait().await.unwrap();
    let path = s.main_path(&id).await;
    assert_eq!(sequences(&path), [1, 2, 3, 4, 5, 6]);
    assert_eq!(path[5].text(), "second answer");

    // Rewind onto the assistant message with a tool call: extended past
    // its result, so the new message follows #3, not #2.
    let rewind =
        RunConfig { trace_id: Some(id.clone()), after_sequence: Some(2), ..RunConfig::default() };
    runner.run(user("instead"), rewind).await.unwrap().wait().await.unwrap();
    let path = s.main_path(&id).await;
    assert_eq!(sequences(&path), [1, 2, 3, 7, 8]);
    assert_eq!(path[3].parent_sequence, Some(3));
    assert_eq!(path[4].text(), "first answer", "the script replays by the branch's history");

    // Regenerate: rewind with no new message; the model answers #7 again.
    let regen =
        RunConfig { trace_id: Some(id.clone()), after_sequence: Some(7), ..RunConfig::default() };
    runner.run(Vec::new(), regen).await.unwrap().wait().await.unwrap();
    assert_eq!(sequences(&s.main_path(&id).await), [1, 2, 3, 7, 9]);

    // Nothing was deleted and no sequence was reused.
    let all = s.store.get_messages(&id).await.unwrap();
    assert_eq!(sequences(&all), (1..=9).collect::<Vec<_>>());

    let bad =
        RunConfig { trace_id: Some(id.clone()), after_sequence: Some(99), ..RunConfig::default() };
    let err = runner.run(user("x"), bad).await.err().unwrap();
    assert!(err.to_string().contains("has no message 99"), "{err}");
    let missing = RunConfig { trace_id: Some("tr_nope".into()), ..RunConfig::default() };
    assert!(
        runner
            .run(user("x"), missing)
            .await
            .err()
            .unwrap()
            .to_string()
            .contains("no trace tr_nope")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_doom_loop_ends_the_run_with_a_clear_error() {
    let s = Setup::new(
        json!({ "turns": [echo_turn("same"), echo_turn("same"), echo_turn("same"), text_turn("never")] }),
    ).await;
    let err = s.run_to_end(user("loop"), RunConfig::default()).await.unwrap_err();
    assert!(matches!(err, AgentError::LimitExceeded(_)), "{err:?}");
    assert!(err.to_string().contains("doom loop: the same tool call echo"), "{err}");
    let trace = s.store.list_traces(&Default::default()).await.unwrap().remove(0);
    assert_eq!(trace.status, TraceStatus::Failed);
    assert!(trace.error_message.unwrap().contains("doom loop"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_iterations_and_an_exhausted_script_fail_clearly() {
    let s = Setup::new(json!({ "turns": [echo_turn("a"), echo_turn("b"), echo_turn("c")] })).await;
    let runner = s.runner(Hooks::none());
    let config = RunConfig { max_iterations: 2, ..RunConfig::default() };
    let err = runner.run(user("go"), config).await.unwrap().wait().await.unwrap_err();
    assert!(err.to_string().contains("max_iterations (2)"), "{err}");

    let err = runner.run(user("go"), RunConfig::default()).await.unwrap().wait().await.unwrap_err();
    assert!(
        err.to_string().contains("the script has 3 turns and this request needs turn 4"),
        "{err}"
    );
    assert!(!err.is_recoverable());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn model_mistakes_go_back_to_the_model() {
    let s = Setup::new(json!({ "turns": [
        { "tool_calls": [
            { "name": "nope", "arguments": {} },
            { "name": "echo", "arguments": { "text": 5 } },
            { "name": "echo", "arguments": "{not json" } ] },
        text_turn("recovered")
    ]}))
    .await;
    let outcome = s.run_to_end(user("go"), RunConfig::default()).await.unwrap();
    assert_eq!(outcome.status, TraceStatus::Completed);
    let path = s.main_path(&outcome.trace_id).await;
    let results: Vec<String> =
        path.iter().filter(|m| m.role == Role::Tool).map(Message::text).collect();
    assert!(
        results.iter().any(|r| r.contains("unknown tool `nope`") && r.contains("echo")),
        "{results:?}"
    );
    assert!(
        results.iter().any(|r| r.contains("invalid arguments for `echo`") && r.contains("/text")),
        "{results:?}"
    );
    assert!(results.iter().any(|r| r.contains("not valid JSON")), "{results:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_calls_of_one_message_run_concurrently() {
    let meet = |id: &str| json!({ "id": id, "name": "shell", "arguments": { "command": format!("make -s {id}") } });
    // Each call marks its arrival, then waits for the other two: one after
    // another, the first would wait until its command timed out (30 s).
    let s = Setup::with_makefile(
        json!({ "turns": [{ "tool_calls": [meet("a"), meet("b"), meet("c")] }, text_turn("met")] }),
        ".PHONY: a b c\na b c:\n\ttouch $@\n\tuntil [ -e a ] && [ -e b ] && [ -e c ]; do sleep 0.05; done\n\techo met\n",
    ).await;
    let outcome = s.run_to_end(user("meet"), RunConfig::default()).await.unwrap();
    assert_eq!(outcome.status, TraceStatus::Completed);
    let path = s.main_path(&outcome.trace_id).await;
    let tools: Vec<String> =
        path.iter().filter(|m| m.role == Role::Tool).map(Message::text).collect();
    assert_eq!(tools, ["exit code 0\nmet"; 3]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accounting_sums_every_token_kind_and_cost() {
    let usage = |p: u64, c: u64| json!({ "prompt_tokens": p, "completion_tokens": c, "reasoning_tokens": 1, "cache_read_tokens": 2, "cache_write_tokens": 3 });
    let s = Setup::new(json!({ "turns": [
        { "tool_calls": [{ "name": "echo", "arguments": { "text": "x" } }], "usage": usage(100, 10), "cost": 0.25 },
        { "text": "ok", "usage": usage(200, 20), "cost": 0.5 }
    ]})).await;
    let outcome = s.run_to_end(user("count"), RunConfig::default()).await.unwrap();
    assert_eq!(outcome.usage.prompt_tokens, 300);
    assert!((outcome.cost - 0.75).abs() < 1e-9);
    let trace = s.store.get_trace(&outcome.trace_id).await.unwrap().unwrap();
    let u = trace.totals.usage;
    assert_eq!(
        (
            u.prompt_tokens,
            u.completion_tokens,
            u.reasoning_tokens,
            u.cache_read_tokens,
            u.cache_write_tokens
        ),
        (300, 30, 2, 4, 6)
    );
    assert!((trace.totals.cost - 0.75).abs() < 1e-9);
    assert_eq!(trace.totals.messages, 4);
    let path = s.main_path(&outcome.trace_id).await;
    assert_eq!(path[1].usage.prompt_tokens, 100);
    assert_eq!(path[3].usage.completion_tokens, 20);
    let goals = s.store.get_goals(&outcome.trace_id).await.unwrap();
    let root = &goals.goals()[0];
    assert_eq!(goals.cumulative(&root.id).unwrap().usage.prompt_tokens, 300);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_ends_the_run_and_a_continue_picks_it_up() {
    let s = Setup::new(
        json!({ "turns": [{ "text": "thinking", "delay_ms": 800 }, text_turn("after")] }),
    )
    .await;
    let runner = s.runner(Hooks::none());
    let mut handle = runner.run(user("slow"), RunConfig::default()).await.unwrap();
    let id = handle.trace_id().to_owned();
    while let Some(event) = handle.next_event().await {
        if matches!(event, AgentEvent::ModelRequest { .. }) {
            assert!(runner.stop(&id));
            break;
        }
    }
    let outcome = handle.wait().await.unwrap();
    assert_eq!(outcome.status, TraceStatus::Stopped);
    let trace = s.store.get_trace(&id).await.unwrap().unwrap();
    assert_eq!(trace.status, TraceStatus::Stopped);
    assert!(!runner.stop(&id), "no longer running");
    let roles: Vec<Role> = s.main_path(&id).await.iter().map(|m| m.role).collect();
    assert_eq!(roles, [Role::User], "the model call in flight was cancelled");

    let cont = RunConfig { trace_id: Some(id.clone()), ..RunConfig::default() };
    let outcome = runner.run(user("go on"), cont).await.unwrap().wait().await.unwrap();
    assert_eq!(outcome.status, TraceStatus::Completed);
    let path = s.main_path(&id).await;
    assert_eq!(path.iter().map(Message::text).collect::<Vec<_>>(), ["slow", "go on", "thinking"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_handle_is_a_stream_of_its_events() {
    let s = Setup::new(json!({ "turns": [echo_turn("streamed"), text_turn("done")] })).await;
    let runner = s.runner(Hooks::none());
    let mut handle = runner.run(user("stream it"), RunConfig::default()).await.unwrap();
    // Stream combinators work on the handle itself: the tool events only,
    // up to the end of the first call.
    let tool_events: Vec<AgentEvent> = handle
        .by_ref()
        .filter(|e| {
            ready(matches!(e, AgentEvent::ToolStarted { .. } | AgentEvent::ToolFinished { .. }))
        })
        .take(2)
        .collect()
        .await;
    assert!(
        matches!(&tool_events[0], AgentEvent::ToolStarted { name, .. } if name == "echo"),
        "{tool_events:?}"
    );
    assert!(
        matches!(&tool_events[1], AgentEvent::ToolFinished { ok: true, output, .. } if output == "streamed"),
        "{tool_events:?}"
    );
    // The rest of the run, to the end of the stream.
    let rest: Vec<AgentEvent> = handle.by_ref().collect().await;
    assert!(rest.iter().any(|e| matches!(e, AgentEvent::ModelRequest { .. })), "{rest:?}");
    assert!(
        matches!(rest.last(), Some(AgentEvent::Finished { status: TraceStatus::Completed, .. })),
        "the stream ends with Finished: {rest:?}"
    );
    assert!(handle.next().await.is_none(), "an ended stream stays ended");
    let outcome = handle.wait().await.unwrap();
    assert_eq!(outcome.status, TraceStatus::Completed);
    assert_eq!(outcome.final_text.as_deref(), Some("done"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_run_handle_stops_the_run_and_a_continue_finishes_it() {
    let s =
        Setup::new(json!({ "turns": [echo_turn("one"), { "text": "slow", "delay_ms": 10000 }] }))
            .await;
    let runner = s.runner(Hooks::none());
    let mut handle = runner.run(user("echo then think"), RunConfig::default()).await.unwrap();
    let id = handle.trace_id().to_owned();
    while let Some(event) = handle.next_event().await {
        if matches!(event, AgentEvent::ModelRequest { iteration: 2 }) {
            break;
        }
    }
    let dropped = Instant::now();
    drop(handle);
    // Nothing but the drop stops it: left alone, the model call would hold
    // the trace `running` for 10 s.
    loop {
        let status = s.store.get_trace(&id).await.unwrap().unwrap().status;
        if status != TraceStatus::Running {
            assert_eq!(status, TraceStatus::Stopped);
            break;
        }
        assert!(
            dropped.elapsed() < support::MARGIN,
            "the run went on after its handle was dropped"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The trace is stopped; the run lets go of it as it ends.
    while runner.stop(&id) {
        assert!(dropped.elapsed() < support::MARGIN, "the stopped run never ended");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let roles: Vec<Role> = s.main_path(&id).await.iter().map(|m| m.role).collect();
    assert_eq!(
        roles,
        [Role::User, Role::Assistant, Role::Tool],
        "the model call in flight was cut"
    );

    s.set_script(json!({ "turns": [echo_turn("one"), text_turn("fast now")] }));
    let cont = RunConfig { trace_id: Some(id.clone()), ..RunConfig::default() };
    let outcome = runner.run(Vec::new(), cont).await.unwrap().wait().await.unwrap();
    assert_eq!(outcome.status, TraceStatus::Completed);
    assert_eq!(s.main_path(&id).await.last().unwrap().text(), "fast now");
    assert_eq!(s.store.get_trace(&id).await.unwrap().unwrap().status, TraceStatus::Completed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_detached_run_goes_on_without_its_handle() {
    let s = Setup::new(json!({ "turns": [echo_turn("alone"), text_turn("finished alone")] })).await;
    let runner = s.runner(Hooks::none());
    let handle = runner.run(user("go on your own"), RunConfig::default()).await.unwrap();
    let id = handle.trace_id().to_owned();
    // Nobody takes its events: the run must not stall or stop for that.
    let task = handle.detach();
    let outcome = task.await.expect("the run's task").unwrap();
    assert_eq!(outcome.status, TraceStatus::Completed);
    assert_eq!(outcome.final_text.as_deref(), Some("finished alone"));
    assert_eq!(s.store.get_trace(&id).await.unwrap().unwrap().status, TraceStatus::Completed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hooks_observe_and_can_block() {
    let s = Setup::new(json!({ "turns": [echo_turn("x"), text_turn("done")] })).await;
    let requests = Arc::new(AtomicU32::new(0));
    let counter = requests.clone();
    let hooks = Hooks::none().on(HookPoint::PreRequest, move |_: &HookEvent| {
        counter.fetch_add(1, Ordering::SeqCst);
        HookDecision::Continue
    });
    s.runner(hooks).run(user("go"), RunConfig::default()).await.unwrap().wait().await.unwrap();
    assert_eq!(requests.load(Ordering::SeqCst), 2);

    let errors = Arc::new(AtomicU32::new(0));
    let seen = errors.clone();
    let blocking = Hooks::none()
        .on(HookPoint::PostRequest, |e: &HookEvent| {
            if e.iteration == 2 {
                HookDecision::Block("budget spent".into())
            } else {
                HookDecision::Continue
            }
        })
        .on(HookPoint::OnError, move |_: &HookEvent| {
            seen.fetch_add(1, Ordering::SeqCst);
            HookDecision::Continue
        });
    let err = s
        .runner(blocking)
        .run(user("go"), RunConfig::default())
        .await
        .unwrap()
        .wait()
        .await
        .unwrap_err();
    match &err {
        AgentError::HookBlocked { point, reason } => {
            assert_eq!((point.as_str(), reason.as_str()), ("post-request", "budget spent"))
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(errors.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retryable_provider_errors_fire_on_retry_then_fail() {
    let s = Setup::new(
        json!({ "turns": [{ "error": { "kind": "rate-limited", "message": "slow down", "retry_after_ms": 10 } }] }),
    ).await;
    let retries = Arc::new(AtomicU32::new(0));
    let counter = retries.clone();
    let hooks = Hooks::none().on(HookPoint::OnRetry, move |_: &HookEvent| {
        counter.fetch_add(1, Ordering::SeqCst);
        HookDecision::Continue
    });
    let config = RunConfig { max_retries: 2, ..RunConfig::default() };
    let err = s.runner(hooks).run(user("go"), config).await.unwrap().wait().await.unwrap_err();
    assert_eq!(retries.load(Ordering::SeqCst), 2);
    assert!(err.to_string().contains("rate limited: slow down"), "{err}");
    assert!(err.is_recoverable());

    s.set_script(json!({ "turns": [{ "error": { "kind": "auth", "message": "bad key" } }] }));
    let retries = Arc::new(AtomicU32::new(0));
    let counter = retries.clone();
    let hooks = Hooks::none().on(HookPoint::OnRetry, move |_: &HookEvent| {
        counter.fetch_add(1, Ordering::SeqCst);
        HookDecision::Continue
    });
    let err = s
        .runner(hooks)
        .run(user("go"), RunConfig::default())
        .await
        .unwrap()
        .wait()
        .await
        .unwrap_err();
    assert_eq!(retries.load(Ordering::SeqCst), 0, "auth errors are not retried");
    assert!(!err.is_recoverable());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn goal_tree_is_kept_and_reminded_at_the_tail() {
    let add = json!({ "tool_calls": [{ "name": "goal", "arguments": { "action": "add", "description": "sub" } }] });
    let mut turns = vec![add];
    turns.extend((0..3).map(|i| echo_turn(&format!("step {i}"))));
    turns.push(text_turn("end"));
    let s = Setup::new(json!({ "turns": turns })).await;
    let config = RunConfig { goal_reminder_every: 2, ..RunConfig::default() };
    let outcome =
        s.runner(Hooks::none()).run(user("plan"), config).await.unwrap().wait().await.unwrap();
    let goals = s.store.get_goals(&outcome.trace_id).await.unwrap();
    assert_eq!(goals.goals().len(), 2, "a root goal for the task plus the added one");
    assert_eq!(goals.goals()[0].description, "plan");
    let path = s.main_path(&outcome.trace_id).await;
    let reminders: Vec<&Message> =
        path.iter().filter(|m| m.synthetic && m.role == Role::User).collect();
    assert_eq!(reminders.len(), 2, "iterations 3 and 5");
    assert!(reminders[0].text().starts_with("<goal-tree>\n[>] g1 plan"), "{}", reminders[0].text());
    let first = path.iter().position(|m| m.synthetic).unwrap();
    assert_eq!(path[first - 1].role, Role::Tool, "appended at the tail, after the last result");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_builder_refuses_an_incomplete_bundle() {
    let s = Setup::new(json!({ "turns": [] })).await;
    let provider = Arc::new(PluginProvider::new(s.runtime.clone(), "scripted"));
    let store: Arc<dyn TraceStore> = s.store.clone();
    let cases = [
        (
            AgentBuilder::new()
                .tools(ToolRegistry::builtins_only())
                .hooks(Hooks::none())
                .store(store.clone()),
            "provider",
        ),
        (
            AgentBuilder::new()
                .provider(provider.clone())
                .hooks(Hooks::none())
                .store(store.clone()),
            "tools",
        ),
        (
            AgentBuilder::new()
                .provider(provider.clone())
                .tools(ToolRegistry::builtins_only())
                .store(store.clone()),
            "hooks",
        ),
        (
            AgentBuilder::new()
                .provider(provider)
                .tools(ToolRegistry::builtins_only())
                .hooks(Hooks::none()),
            "trace store",
        ),
    ];
    for (builder, missing) in cases {
        match builder.build() {
            Err(AgentError::Config(message)) => assert!(message.contains(missing), "{message}"),
            other => panic!("expected a config error for {missing}, got {:?}", other.err()),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_submit_turns_with_hooks_and_memory() {
    let s =
        Setup::new(json!({ "turns": [echo_turn("hi"), text_turn("first"), text_turn("second")] }))
            .await;
    let turns = Arc::new(AtomicU32::new(0));
    let counter = turns.clone();
    let bundle = AgentBuilder::new()
        .provider(Arc::new(PluginProvider::new(s.runtime.clone(), "scripted")))
        .tools(ToolRegistry::new(s.runtime.clone()))
        .hooks(Hooks::none().on(HookPoint::OnTurnEnd, move |_: &HookEvent| {
            counter.fetch_add(1, Ordering::SeqCst);
            HookDecision::Continue
        }))
        .store(s.store.clone())
        .params(LlmParams { model: "scripted-1".into(), ..LlmParams::default() })
        .build()
        .unwrap();
    let agent = Arc::new(BasicAgent::new("helper", "You help.").with_tools(vec!["echo".into()]));
    assert_eq!(
        bundle.tool_specs(agent.as_ref()).iter().map(|t| t.name.as_str()).collect::<Vec<_>>(),
        ["echo"]
    );
    let memory = SessionMemory::in_memory("s1").unwrap();
    memory.set("user", "name", "Ada").await.unwrap();
    let mut session = AgentSession::with_memory(agent.clone(), bundle.clone(), memory);
    let first = session.submit_turn("hello").await.unwrap();
    let second = session.submit_turn("again").await.unwrap();
    assert_eq!((first.turn, first.text.as_str(), first.tool_calls), (1, "first", 1));
    assert_eq!((second.turn, second.text.as_str()), (2, "second"));
    assert_eq!(first.trace_id, second.trace_id, "a session is one trace");
    assert_eq!(session.turn_index(), 2);
    assert_eq!(turns.load(Ordering::SeqCst), 2);
    let trace = s.store.get_trace(&first.trace_id).await.unwrap().unwrap();
    assert_eq!(trace.agent_type, "helper");
    let prompt = trace.context.extra["system_prompt"].as_str().unwrap();
    assert_eq!(prompt, "You help.\n\n<session-context>\n[user]\nname: Ada\n</session-context>");

    // Another session's memory is its own.
    let other = AgentSession::new(agent, bundle).unwrap();
    assert!(other.memory().snapshot().await.unwrap().is_empty());
    assert_eq!(other.system_prompt().await.unwrap(), "You help.");
}

fn reson_run(s: &Setup, script: &serde_json::Value, args: &[&str]) -> std::process::Child {
    let path: PathBuf = s.dir.path().join(format!("run-{}.json", fastrand_name()));
    std::fs::write(&path, script.to_string()).unwrap();
    Command::new(env!("CARGO_BIN_EXE_reson"))
        .args(["--config", &s.dir.path().join("reson.toml").to_string_lossy()])
        .args(["--plugins-dir", &s.dir.plugins().to_string_lossy()])
        .args(["--cache-dir", &support::cache_dir().to_string_lossy()])
        .args(["--traces-dir", &s.dir.path().join("traces").to_string_lossy()])
        .args(["run", "--json", "--script", &path.to_string_lossy()])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn fastrand_name() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64
}

/// Reads the child's JSON events until one of type `kind`, then kills it
/// with SIGKILL. Returns the trace id.
fn kill_at(mut child: std::process::Child, kind: &str) -> String {
    let stdout = child.stdout.take().unwrap();
    let mut trace_id = None;
    for line in BufReader::new(stdout).lines() {
        let event: serde_json::Value = serde_json::from_str(&line.unwrap()).unwrap();
        if event["type"] == "trace_started" {
            trace_id = event["trace_id"].as_str().map(str::to_owned);
        }
        if event["type"] == kind {
            child.kill().unwrap();
            child.wait().unwrap();
            return trace_id.expect("trace_started comes first");
        }
    }
    panic!("the run ended before a {kind} event: {:?}", child.wait_with_output());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_killed_during_a_tool_call_is_healed_on_continue() {
    let s = Setup::with_config(
        json!({ "turns": [] }),
        "[plugins.hostile]\nlimits = { timeout_ms = 2000 }\n",
    )
    .await;
    let script = json!({ "turns": [
        { "text": "spinning", "tool_calls": [{ "id": "call_spin", "name": "spin", "arguments": {} }] },
        text_turn("recovered")
    ]});
    let id = kill_at(reson_run(&s, &script, &["spin please"]), "tool_started");

    let trace = s.store.get_trace(&id).await.unwrap().expect("the killed trace loads");
    assert_eq!(trace.status, TraceStatus::Running, "it never got to finish");
    let before = s.store.get_messages(&id).await.unwrap();
    assert_eq!(before.len(), 2, "user and assistant were persisted before the kill");

    let out = reson_run(&s, &script, &["--trace", &id, "go on"]).wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let path = s.main_path(&id).await;
    assert_eq!(path[..2], before[..], "nothing persisted before the kill was lost");
    let healed = &path[2];
    assert_eq!((healed.role, healed.tool_call_id.as_deref()), (Role::Tool, Some("call_spin")));
    assert!(healed.synthetic && healed.text() == INTERRUPTED);
    assert_eq!(path[3].text(), "go on");
    assert_eq!(path.last().unwrap().text(), "recovered");
    assert_eq!(s.store.get_trace(&id).await.unwrap().unwrap().status, TraceStatus::Completed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_killed_during_a_model_call_continues_without_loss() {
    let s = Setup::new(json!({ "turns": [] })).await;
    let slow = json!({ "turns": [echo_turn("one"), { "text": "slow", "delay_ms": 10000 }] });
    let id = kill_at(reson_run(&s, &slow, &["echo then think"]), "tool_finished");
    // The kill lands while the second model call sleeps, or just before it.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let before = s.store.get_messages(&id).await.unwrap();
    assert!(before.len() >= 2, "{before:?}");

    let fast = json!({ "turns": [echo_turn("one"), text_turn("fast now")] });
    let out = reson_run(&s, &fast, &["--trace", &id]).wait_with_output();
    let out = out.unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let path = s.main_path(&id).await;
    assert_eq!(path[..before.len()], before[..], "nothing persisted before the kill was lost");
    assert_eq!(path.last().unwrap().text(), "fast now");
    let all = s.store.get_messages(&id).await.unwrap();
    assert!(
        all.windows(2).all(|w| w[0].sequence + 1 == w[1].sequence),
        "sequences stay dense and unique"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_stops_a_cli_run_cleanly_and_traces_show_renders_the_trees() {
    let s = Setup::new(json!({ "turns": [] })).await;
    let slow = json!({ "turns": [echo_turn("one"), { "text": "slow", "delay_ms": 10000 }] });
    let mut child = reson_run(&s, &slow, &["think slowly"]);
    let stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let mut trace_id = String::new();
    let mut requests = 0;
    for line in lines.by_ref() {
        let event: serde_json::Value = serde_json::from_str(&line.unwrap()).unwrap();
        if event["type"] == "trace_started" {
            trace_id = event["trace_id"].as_str().unwrap().to_owned();
        }
        if event["type"] == "model_request" {
            requests += 1;
            if requests == 2 {
                break;
            }
        }
    }
    let started = Instant::now();
    let status = Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    assert!(status.success());
    let rest: Vec<String> = lines.map(Result::unwrap).collect();
    let exit = child.wait().unwrap();
    assert_eq!(exit.code(), Some(130), "a stopped run exits 130: {rest:?}");
    assert!(started.elapsed() < support::MARGIN, "it waited for the slow model call to end");
    assert!(rest.iter().any(|l| l.contains(r#""status":"stopped""#)), "{rest:?}");
    assert_eq!(s.store.get_trace(&trace_id).await.unwrap().unwrap().status, TraceStatus::Stopped);

    // A rewind onto the user message makes a branch; show draws both.
    let answer = json!({ "turns": [text_turn("branch answer")] });
    let out = reson_run(&s, &answer, &["--trace", &trace_id, "--after", "1", "another way"])
        .wait_with_output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let show = Command::new(env!("CARGO_BIN_EXE_reson"))
        .args([
            "--traces-dir",
            &s.dir.path().join("traces").to_string_lossy(),
            "traces",
            "show",
            &trace_id,
        ])
        .output()
        .unwrap();
    let text = String::from_utf8(show.stdout).unwrap();
    assert!(text.contains("* #1 user: think slowly"), "{text}");
    assert!(text.contains("    #2 assistant:  → echo({"), "the old branch, indented: {text}");
    assert!(text.contains("*   #4 user: another way"), "the new branch, on the main path: {text}");
    assert!(text.contains("*   #5 assistant: branch answer"), "{text}");
    // The trace completed: its goal is no longer being worked on.
    assert!(text.contains("goals:\n[ ] g1 think slowly\n"), "{text}");
    let list = Command::new(env!("CARGO_BIN_EXE_reson"))
        .args([
            "--traces-dir",
            &s.dir.path().join("traces").to_string_lossy(),
            "traces",
            "list",
            "--json",
        ])
        .output()
        .unwrap();
    let traces: serde_json::Value = serde_json::from_slice(&list.stdout).unwrap();
    assert_eq!(traces[0]["id"], trace_id.as_str());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_run_of_a_running_trace_is_refused_before_it_touches_the_trace() {
    // The call holds until the test opens the gate, so that the trace runs
    // for as long as the checks take.
    let s = Setup::with_makefile(
        json!({ "turns": [
            { "tool_calls": [{ "name": "shell", "arguments": { "command": "make -s held" } }] },
            text_turn("done")
        ]}),
        "held:\n\tuntil [ -e gate ]; do sleep 0.05; done\n\techo released\n",
    )
    .await;
    let runner = s.runner(Hooks::none());
    let mut handle = runner.run(user("hold"), RunConfig::default()).await.unwrap();
    let id = handle.trace_id().to_owned();
    while let Some(event) = handle.next_event().await {
        if matches!(event, AgentEvent::ToolStarted { .. }) {
            break;
        }
    }
    // While the call runs: a continue (which would heal the call in flight
    // as interrupted and add a message) and a rewind (which would move the
    // head and the goal tree) of the same trace.
    let cont = RunConfig { trace_id: Some(id.clone()), ..RunConfig::default() };
    let err =
        runner.run(user("intruder"), cont).await.err().expect("a continue of a running trace");
    assert!(err.to_string().contains("already running"), "{err}");
    let rewind =
        RunConfig { trace_id: Some(id.clone()), after_sequence: Some(1), ..RunConfig::default() };
    let err =
        runner.run(user("other branch"), rewind).await.err().expect("a rewind of a running trace");
    assert!(err.to_string().contains("already running"), "{err}");
    std::fs::write(s.dir.workspace().join("gate"), "").unwrap();
    let outcome = handle.wait().await.unwrap();
    assert_eq!(outcome.status, TraceStatus::Completed);
    let all = s.store.get_messages(&id).await.unwrap();
    let texts: Vec<String> = all.iter().map(Message::text).collect();
    assert_eq!(texts, ["hold", "", "exit code 0\nreleased", "done"], "{all:#?}");
    assert!(all.iter().all(|m| !m.synthetic), "nothing was healed");
}

/// Runs are tasks, not threads: 200 runs at once, each with a tool call
/// that sleeps 100 ms in the guest, share a pool of 16 instances (the
/// model calls take slots too) and overlap, where one after another they
/// would take 200 × 100 ms.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_runs_with_sleeping_tool_calls_overlap() {
    // It counts the process's threads.
    if !support::alone(module_path!(), "two_hundred_runs_with_sleeping_tool_calls_overlap") {
        return;
    }
    const RUNS: usize = 200;
    let script = json!({ "turns": [
        { "tool_calls": [{ "name": "nap", "arguments": { "ms": 100 } }] },
        { "text": "rested" },
    ]});
    let setup = Setup::with_config(script, "[sandbox]\nmax_instances = 16").await;
    let runner = setup.runner(Hooks::none());

    let threads = support::ThreadPeak::start();
    let start = Instant::now();
    let mut handles = Vec::with_capacity(RUNS);
    for i in 0..RUNS {
        let task = Message::new(Role::User, format!("rest {i}"));
        handles.push(runner.run(vec![task], RunConfig::default()).await.unwrap());
    }
    let outcomes = futures::future::join_all(handles.into_iter().map(|h| h.wait())).await;
    let took = start.elapsed();
    let peak = threads.stop().await;

    for outcome in outcomes {
        let outcome = outcome.unwrap();
        assert_eq!(outcome.status, TraceStatus::Completed);
        assert_eq!(outcome.final_text.as_deref(), Some("rested"));
    }
    assert!(
        took >= Duration::from_millis(100 * (RUNS as u64).div_ceil(16)),
        "more than 16 instances ran at once: {took:?}"
    );
    let in_turn = Duration::from_millis(100 * RUNS as u64);
    assert!(took < in_turn, "the runs did not overlap: {took:?}");
    assert!(peak <= 64, "{peak} OS threads at the peak");
}
