//! The calls of one assistant message and the branches of a trace, on the
//! real `scripted` provider, real tool plugins and a file trace store: tools
//! the model invented get an error at once, results keep the order of the
//! calls whatever order they finish in, and each branch has its own goal
//! tree, in the library and through `reson run` / `reson traces show`.

mod support;

use reson::agent::{
    AgentEvent, Answer, Hooks, PendingApprovals, Permissions, RunConfig, RunHandle, RunMode, Runner,
};
use reson::plugin::Runtime;
use reson::policy::{Decision, Rule, RuleSet};
use reson::provider::PluginProvider;
use reson::tools::ToolRegistry;
use reson::trace::{
    Durability, EventKind, FileTraceStore, GoalStatus, GoalTree, Message, Role, TraceStore,
};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::TestDir;

struct Setup {
    dir: TestDir,
    runtime: Runtime,
    store: Arc<FileTraceStore>,
}

impl Setup {
    async fn new(turns: Value) -> Self {
        let dir = TestDir::new();
        dir.install(support::plugins(), "scripted").install(support::plugins(), "echo");
        let script = dir.path().join("script.json");
        std::fs::write(&script, json!({ "turns": turns }).to_string()).unwrap();
        let runtime = dir
            .open(&format!(
                r#"
            [plugins.scripted]
            dirs = [{{ path = ".", access = "read" }}]
            config = {{ script = "{}" }}
            [plugins.hostile]
            dirs = [{{ path = "workspace", access = "read-write" }}]
            "#,
                script.display()
            ))
            .await;
        // The hostile guest comes after the bundled echo, which keeps `echo`.
        dir.install(support::test_plugins(), "hostile");
        runtime.rescan().await.unwrap();
        let store =
            Arc::new(FileTraceStore::open(dir.path().join("traces"), Durability::Batched).unwrap());
        Self { dir, runtime, store }
    }

    fn set_turns(&self, turns: Value) {
        let script = json!({ "turns": turns }).to_string();
        std::fs::write(self.dir.path().join("script.json"), script).unwrap();
    }

    fn runner(&self, tools: ToolRegistry) -> Runner {
        Runner::new(
            self.store.clone(),
            Arc::new(PluginProvider::new(self.runtime.clone(), "scripted")),
            tools,
            Hooks::none(),
        )
    }

    async fn tool_results(&self, trace_id: &str) -> Vec<Message> {
        let trace = self.store.get_trace(trace_id).await.unwrap().unwrap();
        let path = self
            .store
            .get_main_path_messages(trace_id, trace.head_sequence.unwrap())
            .await
            .unwrap();
        path.into_iter().filter(|m| m.role == Role::Tool).collect()
    }
}

fn rules(rules: &[(Decision, &str)], default: Decision) -> RuleSet {
    let rules: Vec<Rule> = rules
        .iter()
        .map(|(decision, tool)| Rule {
            decision: *decision,
            tool: (*tool).into(),
            pattern: None,
            examples: Vec::new(),
            counter_examples: Vec::new(),
        })
        .collect();
    RuleSet::compile(&rules).unwrap().with_default(default)
}

fn call(name: &str, arguments: Value) -> Value {
    json!({ "name": name, "arguments": arguments })
}

fn user(text: &str) -> Vec<Message> {
    vec![Message::new(Role::User, text)]
}

/// Everything a run reports, with the approvals it asked for answered by
/// `answer` (none: left to time out).
async fn drive(
    mut handle: RunHandle,
    approvals: &PendingApprovals,
    answer: Option<Answer>,
) -> Vec<AgentEvent> {
    let mut events = Vec::new();
    while let Some(event) = handle.next_event().await {
        if let (AgentEvent::ApprovalNeeded { request }, Some(answer)) = (&event, answer) {
            assert!(approvals.answer(&request.id, answer));
        }
        events.push(event);
    }
    handle.wait().await.unwrap();
    events
}

fn approvals_asked(events: &[AgentEvent]) -> usize {
    events.iter().filter(|e| matches!(e, AgentEvent::ApprovalNeeded { .. })).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invented_tool_gets_an_error_at_once_and_is_never_asked_about() {
    // Every way a name can be one the model was not offered: made up, a
    // registered tool the registry hides, one the rules deny outright, the
    // right name in the wrong case, a name with a control character.
    let s = Setup::new(json!([
        { "tool_calls": [
            call("teleport", json!({ "to": "mars" })),
            call("nap", json!({ "ms": 5000 })),
            call("flood", json!({ "bytes": 10 })),
            call("ECHO", json!({ "text": "loud" })),
            call("echo\u{0}", json!({ "text": "nul" })),
        ] },
        { "text": "I see." }
    ]))
    .await;
    // `ask` by default, and no one to answer: any request would wait 30 s.
    let approvals = PendingApprovals::new(Duration::from_secs(30));
    let tools = ToolRegistry::new(s.runtime.clone()).only(vec![
        "goal".into(),
        "echo".into(),
        "flood".into(),
    ]);
    let runner = s.runner(tools).with_permissions(Permissions::new(
        rules(&[(Decision::Deny, "flood")], Decision::Ask),
        approvals.clone(),
    ));
    let started = Instant::now();
    let handle = runner.run(user("go somewhere"), RunConfig::default()).await.unwrap();
    let id = handle.trace_id().to_owned();
    let events = drive(handle, &approvals, None).await;
    assert!(started.elapsed() < Duration::from_secs(4), "waited {:?}", started.elapsed());
    assert_eq!(approvals_asked(&events), 0, "no approval was asked for");
    let results = s.tool_results(&id).await;
    let names: Vec<_> = results.iter().map(|m| m.name.clone().unwrap()).collect();
    assert_eq!(names, ["teleport", "nap", "flood", "ECHO", "echo\u{0}"], "in call order");
    for result in &results {
        let text = result.text();
        let name = result.name.as_deref().unwrap();
        assert!(text.starts_with(&format!("Error: unknown tool `{name}`")), "{text}");
        assert!(text.ends_with("Offered tools: goal, echo."), "{text}");
    }
    // Nothing unknown reached the permission checker.
    let decided = s
        .store
        .events_after(&id, 0)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| matches!(e.kind, EventKind::PermissionDecided { .. }))
        .count();
    assert_eq!(decided, 0);
    let finished: Vec<bool> = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ToolFinished { ok, .. } => Some(*ok),
            _ => None,
        })
        .collect();
    assert_eq!(finished, [false; 5]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_permissions_an_invented_tool_is_still_unknown() {
    let s = Setup::new(json!([
        { "tool_calls": [call("rm_rf", json!({})), call("echo", json!({ "text": "real" }))] },
        { "text": "ok" }
    ]))
    .await;
    let runner = s.runner(ToolRegistry::new(s.runtime.clone()).only(vec!["echo".into()]));
    let outcome = runner.run(user("go"), RunConfig::default()).await.unwrap().wait().await.unwrap();
    let texts: Vec<String> =
        s.tool_results(&outcome.trace_id).await.iter().map(Message::text).collect();
    assert_eq!(
        texts,
        [
            "Error: unknown tool `rm_rf`: no tool of that name was offered. Offered tools: echo.",
            "real"
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn denied_goal_unknown_and_parallel_plugin_calls_stay_in_call_order() {
    let s = Setup::new(json!([
        { "tool_calls": [
            call("nap", json!({ "ms": 600 })),
            call("echo", json!({ "text": "asked and denied" })),
            call("goal", json!({ "action": "add", "description": "sleep well" })),
            call("nap", json!({ "ms": 1 })),
            call("zap", json!({})),
            call("echo", json!({ "text": "asked and denied again" })),
            call("nap", json!({ "ms": 200 })),
        ] },
        { "text": "rested" }
    ]))
    .await;
    let approvals = PendingApprovals::new(Duration::from_secs(30));
    let runner = s.runner(ToolRegistry::new(s.runtime.clone())).with_permissions(Permissions::new(
        rules(&[(Decision::Ask, "echo")], Decision::Allow),
        approvals.clone(),
    ));
    let handle = runner.run(user("rest"), RunConfig::default()).await.unwrap();
    let id = handle.trace_id().to_owned();
    let events = drive(handle, &approvals, Some(Answer::Deny)).await;
    assert_eq!(approvals_asked(&events), 2);

    let results = s.tool_results(&id).await;
    let texts: Vec<String> = results.iter().map(Message::text).collect();
    assert_eq!(texts[0], "slept 600 ms");
    assert!(texts[1].starts_with("Error: the user denied this call of `echo`"), "{texts:?}");
    assert!(texts[2].starts_with("added g2"), "{texts:?}");
    assert_eq!(texts[3], "slept 1 ms");
    assert!(texts[4].starts_with("Error: unknown tool `zap`"), "{texts:?}");
    assert!(texts[5].starts_with("Error: the user denied this call of `echo`"), "{texts:?}");
    assert_eq!(texts[6], "slept 200 ms");
    assert_eq!(texts.len(), 7);
    // Each answers its call, in the order of the calls, one after another
    // on the path.
    let path = s.store.get_main_path_messages(&id, results[6].sequence).await.unwrap();
    let calls = &path.iter().find(|m| !m.tool_calls.is_empty()).unwrap().tool_calls;
    let answered: Vec<_> = results.iter().map(|m| m.tool_call_id.clone().unwrap()).collect();
    let asked: Vec<_> = calls.iter().map(|c| c.id.clone()).collect();
    assert_eq!(answered, asked);
    assert!(results.windows(2).all(|w| w[1].parent_sequence == Some(w[0].sequence)));
    // The goal result carries the tree it made; the others none.
    assert!(results[2].goals.as_ref().is_some_and(|t| t.get("g2").is_some()));
    assert!(results.iter().enumerate().all(|(i, m)| (i == 2) == m.goals.is_some()));
    // Live events went out as the calls ended: the long nap last.
    let finished: Vec<String> = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ToolFinished { output, .. } => Some(output.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(finished.len(), 7);
    assert_eq!(finished.last().map(String::as_str), Some("slept 600 ms"), "{finished:?}");
    // The stored events summarise the messages (their first 200
    // characters), in the same order.
    let summaries: Vec<String> = texts.iter().map(|t| t.chars().take(200).collect()).collect();
    let stored: Vec<String> = s
        .store
        .events_after(&id, 0)
        .await
        .unwrap()
        .into_iter()
        .filter_map(|e| match e.kind {
            EventKind::ToolFinished { summary, .. } => Some(summary),
            _ => None,
        })
        .collect();
    assert_eq!(stored, summaries);
}

async fn goals_of(store: &FileTraceStore, id: &str) -> GoalTree {
    store.get_goals(id).await.unwrap()
}

/// The first run of the goal tests: plans a goal, completes it, answers;
/// turn 3 is for a later continue of the same branch.
fn planning_turns() -> Value {
    json!([
        { "tool_calls": [
            call("goal", json!({ "action": "add", "description": "write the draft" })),
            call("goal", json!({ "action": "focus", "goal_id": "g2" })),
        ] },
        { "tool_calls": [call("goal", json!({ "action": "done", "summary": "drafted" }))] },
        { "text": "finished" },
        { "text": "more on the old branch" }
    ])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_branch_has_its_own_goal_tree() {
    let s = Setup::new(planning_turns()).await;
    let runner = s.runner(ToolRegistry::new(s.runtime.clone()));
    let first = runner
        .run(user("write a draft"), RunConfig::default())
        .await
        .unwrap()
        .wait()
        .await
        .unwrap();
    let id = first.trace_id;
    let tree = goals_of(&s.store, &id).await;
    assert_eq!(tree.get("g2").unwrap().status, GoalStatus::Completed);
    let old_leaf = s.store.get_trace(&id).await.unwrap().unwrap().head_sequence.unwrap();
    assert_eq!(old_leaf, 7);

    // A rewind to the first message starts from the initial tree.
    s.set_turns(json!([{ "text": "starting over" }]));
    let rewind =
        RunConfig { trace_id: Some(id.clone()), after_sequence: Some(1), ..RunConfig::default() };
    let mut handle = runner.run(user("try again"), rewind).await.unwrap();
    let mut changed = Vec::new();
    while let Some(event) = handle.next_event().await {
        match event {
            AgentEvent::TraceStarted { mode, .. } => assert_eq!(mode, RunMode::Rewind),
            AgentEvent::GoalChanged { tree } => changed.push(tree),
            _ => {}
        }
    }
    handle.wait().await.unwrap();
    assert_eq!(changed, ["[>] g1 write a draft (current)\n"]);
    let tree = goals_of(&s.store, &id).await;
    assert_eq!(tree.goals().len(), 1, "{}", tree.render());
    assert_eq!(tree.current().unwrap().id, "g1");
    // Its stats are the new branch's: messages 1, 8 and 9.
    assert_eq!(tree.get("g1").unwrap().cumulative_stats.messages, 3);
    assert_eq!(tree.get("g1").unwrap().cumulative_stats.requests, 1);

    // Going on from the old branch's last message brings its goals back.
    s.set_turns(planning_turns());
    let old = RunConfig {
        trace_id: Some(id.clone()),
        after_sequence: Some(old_leaf),
        ..RunConfig::default()
    };
    let outcome = runner.run(user("and more"), old).await.unwrap().wait().await.unwrap();
    assert_eq!(outcome.final_text.as_deref(), Some("more on the old branch"));
    let tree = goals_of(&s.store, &id).await;
    let g2 = tree.get("g2").unwrap();
    assert_eq!((g2.status, g2.summary.as_deref()), (GoalStatus::Completed, Some("drafted")));
    // A continue stays on this branch and keeps them.
    s.set_turns(json!([{}, {}, {}, {}, { "text": "still here" }]));
    let cont = RunConfig { trace_id: Some(id.clone()), ..RunConfig::default() };
    runner.run(user("still?"), cont).await.unwrap().wait().await.unwrap();
    assert!(goals_of(&s.store, &id).await.get("g2").is_some());

    // A regenerate of the first answer is a branch of its own too.
    s.set_turns(json!([{ "text": "regenerated" }]));
    let regen =
        RunConfig { trace_id: Some(id.clone()), after_sequence: Some(1), ..RunConfig::default() };
    let outcome = runner.run(Vec::new(), regen).await.unwrap().wait().await.unwrap();
    assert_eq!(outcome.final_text.as_deref(), Some("regenerated"));
    assert_eq!(goals_of(&s.store, &id).await.goals().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn goal_results_stored_without_snapshots_are_replayed() {
    let s = Setup::new(planning_turns()).await;
    let runner = s.runner(ToolRegistry::new(s.runtime.clone()));
    let id = runner
        .run(user("write a draft"), RunConfig::default())
        .await
        .unwrap()
        .wait()
        .await
        .unwrap()
        .trace_id;
    // As an older host stored them: no snapshot in any message, and a
    // goal call that failed (its arguments would change the tree if replayed).
    let log = s.dir.path().join("traces").join(&id).join("messages.jsonl");
    let mut lines = String::new();
    for line in std::fs::read_to_string(&log).unwrap().lines() {
        let mut message: Value = serde_json::from_str(line).unwrap();
        message.as_object_mut().unwrap().remove("goals");
        if message["sequence"] == 6 {
            assert_eq!(message["name"], "goal");
            message["content"] =
                json!([{ "type": "text", "text": "Error: permission denied for `goal`." }]);
        }
        lines.push_str(&format!("{message}\n"));
    }
    std::fs::write(&log, lines).unwrap();

    s.set_turns(planning_turns());
    let old =
        RunConfig { trace_id: Some(id.clone()), after_sequence: Some(7), ..RunConfig::default() };
    runner.run(user("and more"), old).await.unwrap().wait().await.unwrap();
    let tree = goals_of(&s.store, &id).await;
    let g2 = tree.get("g2").unwrap();
    assert_eq!(
        g2.status,
        GoalStatus::InProgress,
        "the denied `done` was not replayed: {}",
        tree.render()
    );
    assert_eq!(tree.current().unwrap().id, "g2");
}

fn reson(dir: &TestDir, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_reson"))
        .args(["--config", &dir.path().join("reson.toml").to_string_lossy()])
        .args(["--plugins-dir", &dir.plugins().to_string_lossy()])
        .args(["--cache-dir", &support::cache_dir().to_string_lossy()])
        .args(["--traces-dir", &dir.path().join("traces").to_string_lossy()])
        .args(args)
        .output()
        .unwrap()
}

fn script(dir: &TestDir, name: &str, turns: Value) -> String {
    let path: PathBuf = dir.path().join(format!("{name}.json"));
    std::fs::write(&path, json!({ "turns": turns }).to_string()).unwrap();
    path.to_string_lossy().into_owned()
}

/// `reson run` with `args`, which must succeed; returns the trace id.
fn run_ok(dir: &TestDir, args: &[&str]) -> String {
    let out = reson(dir, &[&["run"], args].concat());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let line = stderr.lines().find(|l| l.starts_with("trace ")).unwrap();
    line.split_whitespace().nth(1).unwrap().to_owned()
}

fn goals_shown(dir: &TestDir, id: &str, at: Option<&str>) -> String {
    let mut args = vec!["traces", "show", id];
    args.extend(at.iter().flat_map(|at| ["--at", *at]));
    let out = reson(dir, &args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    text[text.find("\ngoals").unwrap()..].to_owned()
}

#[test]
fn reson_traces_show_gives_each_branch_its_goal_tree() {
    let dir = TestDir::new();
    dir.install(support::plugins(), "scripted");
    dir.config("");
    let plan = script(&dir, "plan", planning_turns());
    let fresh = script(&dir, "fresh", json!([{ "text": "starting over" }]));
    let id = run_ok(&dir, &["--script", &plan, "write a draft"]);
    let completed = "[x] g2 write the draft — drafted";
    assert!(goals_shown(&dir, &id, None).contains(completed));

    run_ok(&dir, &["--script", &fresh, "--trace", &id, "--after", "1", "try again"]);
    let main = goals_shown(&dir, &id, None);
    // The trace is not running: nothing is in progress, nothing current.
    assert_eq!(main, "\ngoals:\n[ ] g1 write a draft\n");
    let old = goals_shown(&dir, &id, Some("7"));
    assert!(old.starts_with("\ngoals (branch ending at 7):\n"), "{old}");
    assert!(old.contains(completed), "{old}");
    // Part way along the old branch: g2 added and focused, not yet done.
    assert!(goals_shown(&dir, &id, Some("4")).contains("[ ] g2 write the draft\n"));
    let out = reson(&dir, &["traces", "show", &id, "--at", "99"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no message 99"));

    // Back on the old branch, its tree is the main one again.
    run_ok(&dir, &["--script", &plan, "--trace", &id, "--after", "7", "and more"]);
    assert!(goals_shown(&dir, &id, None).contains(completed));
    // A regenerate of the first answer leaves the plan behind again.
    run_ok(&dir, &["--script", &fresh, "--trace", &id, "--after", "1"]);
    assert_eq!(goals_shown(&dir, &id, None), "\ngoals:\n[ ] g1 write a draft\n");
    assert!(goals_shown(&dir, &id, Some("11")).contains(completed));
}
