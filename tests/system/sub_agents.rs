//! Sub-agents end to end: the `agent` and `evaluate` tools on the real
//! `scripted` provider (one script per trace: parent and each child) and
//! real tool plugins, file traces, least privilege attacked, budgets across
//! a tree, and a real `reson run` killed while a child runs.

use crate::support;

use reson::agent::Hooks;
use reson::agent::{
    AgentError, AgentEvent, Answer, PendingApprovals, Permissions, RunConfig, RunOutcome, Runner,
    SubAgentSettings,
};
use reson::config::Config;
use reson::plugin::Runtime;
use reson::policy::Budget;
use reson::provider::PluginProvider;
use reson::tools::ToolRegistry;
use reson::trace::{
    AgentMode, CollaboratorStatus, Durability, FileTraceStore, GoalKind, Message, Role, Trace,
    TraceStatus, TraceStore,
};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;
use support::TestDir;

struct Setup {
    dir: TestDir,
    runtime: Runtime,
    config: Config,
    store: Arc<FileTraceStore>,
}

impl Setup {
    /// Scripted, fs and echo, every call allowed unless `extra` says
    /// otherwise.
    async fn new(script: Value, extra: &str) -> Self {
        let dir = TestDir::new();
        dir.install(support::plugins(), "scripted")
            .install(support::plugins(), "fs")
            .install(support::plugins(), "echo");
        let fs = "[plugins.fs]\ndirs = [{ path = \"workspace\", access = \"read-write\" }]\n";
        let runtime = dir.open_scripted(&script, &format!("{fs}{extra}")).await;
        let store =
            Arc::new(FileTraceStore::open(dir.path().join("traces"), Durability::Batched).unwrap());
        let config = Config::load(&dir.path().join("reson.toml")).unwrap();
        Self { dir, runtime, config, store }
    }

    fn config(&self) -> &Config {
        &self.config
    }

    fn set_script(&self, script: Value) {
        std::fs::write(self.dir.path().join("script.json"), script.to_string()).unwrap();
    }

    /// A runner with sub-agents, under preset `preset` of the config, asks
    /// going to `approvals`.
    fn runner(&self, preset: &str, approvals: Arc<PendingApprovals>) -> Runner {
        let (_, rules) = self.config().preset(preset).unwrap();
        let settings = SubAgentSettings::from_config(self.config()).unwrap();
        Runner::new(
            self.store.clone(),
            Arc::new(PluginProvider::new(self.runtime.clone(), "scripted")),
            ToolRegistry::new(self.runtime.clone()),
            Hooks::none(),
        )
        .with_permissions(Permissions::new(rules, approvals))
        .with_sub_agents(settings)
    }

    fn default_runner(&self) -> Runner {
        self.runner("default", PendingApprovals::new(Duration::from_secs(30)))
    }

    async fn trace(&self, id: &str) -> Trace {
        self.store.get_trace(id).await.unwrap().expect("the trace exists")
    }

    async fn messages(&self, id: &str) -> Vec<Message> {
        self.store.get_messages(id).await.unwrap()
    }

    /// The results of the calls of tool `name` in trace `id`, in order.
    async fn results_of(&self, id: &str, name: &str) -> Vec<Message> {
        let messages = self.messages(id).await;
        let calls: Vec<String> = messages
            .iter()
            .flat_map(|m| &m.tool_calls)
            .filter(|c| c.name == name)
            .map(|c| c.id.clone())
            .collect();
        messages
            .into_iter()
            .filter(|m| m.role == Role::Tool && calls.contains(m.tool_call_id.as_ref().unwrap()))
            .collect()
    }
}

/// Runs to the end, keeping every event.
async fn run_all(
    runner: &Runner,
    task: &str,
    config: RunConfig,
) -> (Vec<AgentEvent>, Result<RunOutcome, AgentError>) {
    let mut handle = runner.run(vec![Message::new(Role::User, task)], config).await.unwrap();
    let mut events = Vec::new();
    let wait = async {
        while let Some(event) = handle.next_event().await {
            events.push(event);
        }
    };
    tokio::time::timeout(Duration::from_secs(60), wait).await.expect("the run ended in time");
    (events, handle.wait().await)
}

fn agent_call(arguments: Value) -> Value {
    json!({ "tool_calls": [{ "name": "agent", "arguments": arguments }] })
}

fn json_of(message: &Message) -> Value {
    serde_json::from_str(&message.text())
        .unwrap_or_else(|e| panic!("not a structured result ({e}): {}", message.text()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explore_runs_children_in_parallel_and_delegate_runs_one_all_linked_both_ways() {
    let child = |answer: &str| json!([{ "text": answer, "delay_ms": 300, "usage": { "prompt_tokens": 10, "completion_tokens": 5 }, "cost": 0.01 }]);
    let s = Setup::new(
        json!({
            "turns": [
                agent_call(json!({ "task": ["survey alpha", "survey beta", "survey gamma"] })),
                agent_call(json!({ "task": "survey delta", "messages": [{ "content": "context first" }] })),
                { "text": "all surveyed" }
            ],
            "agents": [
                { "match": "survey alpha", "turns": child("alpha is fine") },
                { "match": "survey beta", "turns": child("beta is fine") },
                { "match": "survey gamma", "turns": child("gamma is fine") },
                { "match": "context first", "turns": child("delta is fine") }
            ]
        }),
        "",
    )
    .await;
    let runner = s.default_runner();
    let config = RunConfig { goal_reminder_every: 1, ..RunConfig::default() };
    let (events, outcome) = run_all(&runner, "survey everything", config).await;
    let outcome = outcome.unwrap();
    assert_eq!(outcome.status, TraceStatus::Completed);
    assert_eq!(outcome.final_text.as_deref(), Some("all surveyed"));

    let results = s.results_of(&outcome.trace_id, "agent").await;
    assert_eq!(results.len(), 2);
    // Three children of 300 ms each, run at once.
    assert!(results[0].duration_ms < 800, "the explore call took {} ms", results[0].duration_ms);
    let explore = json_of(&results[0]);
    assert_eq!(explore["mode"], "explore");
    let summaries: Vec<&str> = explore["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["summary"].as_str().unwrap())
        .collect();
    assert_eq!(
        summaries,
        ["alpha is fine", "beta is fine", "gamma is fine"],
        "in the tasks' order"
    );
    let first = &explore["results"][0];
    assert_eq!(first["status"], "completed");
    assert_eq!(first["task"], "survey alpha");
    assert_eq!(first["stats"]["tokens"], 15);
    assert_eq!(first["stats"]["model_requests"], 1);
    let delegate = json_of(&results[1]);
    assert_eq!(delegate["mode"], "delegate");
    assert_eq!(delegate["results"][0]["summary"], "delta is fine");

    // Linked both ways: each child names the parent and its goal; the goal
    // names every child.
    let ids: Vec<String> = explore["results"]
        .as_array()
        .unwrap()
        .iter()
        .chain(delegate["results"].as_array().unwrap())
        .map(|r| r["sub_trace_id"].as_str().unwrap().to_owned())
        .collect();
    let goals = s.store.get_goals(&outcome.trace_id).await.unwrap();
    let g1 = goals.get("g1").unwrap();
    assert_eq!(g1.kind, GoalKind::AgentCall);
    assert_eq!(g1.agent_mode, Some(AgentMode::Delegate), "the last call's mode");
    assert_eq!(g1.sub_trace_ids, ids);
    for id in &ids {
        let child = s.trace(id).await;
        assert_eq!(child.parent_trace_id.as_deref(), Some(outcome.trace_id.as_str()));
        assert_eq!(child.parent_goal_id.as_deref(), Some("g1"));
        assert_eq!(child.status, TraceStatus::Completed);
        assert_eq!(child.agent_type, "default");
    }
    let delta = s.messages(&ids[3]).await;
    assert_eq!(delta[0].text(), "context first", "context goes before the task");
    assert_eq!(delta[1].text(), "survey delta");
    // The goal's cumulative stats hold its children's spending.
    assert_eq!(g1.cumulative_stats.usage.prompt_tokens, 40);
    assert!((g1.cumulative_stats.cost - 0.04).abs() < 1e-9, "{}", g1.cumulative_stats.cost);
    assert_eq!(g1.self_stats.usage.prompt_tokens, 0);

    // Collaborators are kept and shown with the goal tree.
    let parent = s.trace(&outcome.trace_id).await;
    let collaborators = &parent.context.collaborators;
    assert_eq!(collaborators.len(), 4);
    assert!(collaborators.iter().all(|c| c.status == CollaboratorStatus::Completed));
    assert_eq!(collaborators[1].summary.as_deref(), Some("beta is fine"));
    let reminders: Vec<String> = s
        .messages(&outcome.trace_id)
        .await
        .into_iter()
        .filter(|m| m.synthetic && m.role == Role::User)
        .map(|m| m.text())
        .collect();
    let last = reminders.last().unwrap();
    assert!(
        last.contains("## Active Collaborators\n- default#1 (agent, completed, trace "),
        "{last}"
    );
    assert!(last.contains("survey gamma — gamma is fine"), "{last}");

    // Every child's events came through the parent's stream, tagged.
    for id in &ids {
        let tagged = events.iter().any(|e| {
            matches!(e, AgentEvent::SubAgent { sub_trace_id, event, .. }
                if sub_trace_id == id && matches!(**event, AgentEvent::Finished { .. }))
        });
        assert!(tagged, "no finished event for {id}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn continue_from_resumes_a_child_where_it_stopped() {
    let child = json!({ "match": "draft the notes", "turns": [{ "text": "first half" }, { "text": "second half" }] });
    let s = Setup::new(
        json!({ "turns": [agent_call(json!({ "task": "draft the notes" })), { "text": "half done" }],
                "agents": [child.clone()] }),
        "",
    )
    .await;
    let runner = s.default_runner();
    let (_, first) = run_all(&runner, "write notes", RunConfig::default()).await;
    let first = first.unwrap();
    let result = json_of(&s.results_of(&first.trace_id, "agent").await[0]);
    let child_id = result["results"][0]["sub_trace_id"].as_str().unwrap().to_owned();

    s.set_script(json!({
        "turns": [
            agent_call(json!({ "task": "draft the notes" })),
            { "text": "half done" },
            agent_call(json!({ "task": "now the rest", "continue_from": child_id })),
            { "text": "all done" }
        ],
        "agents": [child]
    }));
    let again = RunConfig { trace_id: Some(first.trace_id.clone()), ..RunConfig::default() };
    let mut handle =
        runner.run(vec![Message::new(Role::User, "finish them")], again).await.unwrap();
    while handle.next_event().await.is_some() {}
    assert_eq!(handle.wait().await.unwrap().final_text.as_deref(), Some("all done"));

    let results = s.results_of(&first.trace_id, "agent").await;
    let resumed = json_of(&results[1]);
    assert_eq!(resumed["results"][0]["sub_trace_id"], child_id.as_str());
    assert_eq!(resumed["results"][0]["summary"], "second half");
    let texts: Vec<String> = s.messages(&child_id).await.iter().map(Message::text).collect();
    assert_eq!(texts, ["draft the notes", "first half", "now the rest", "second half"]);
    let goals = s.store.get_goals(&first.trace_id).await.unwrap();
    assert_eq!(
        goals.get("g1").unwrap().sub_trace_ids,
        std::slice::from_ref(&child_id),
        "one child, continued"
    );

    // Only a caller's own sub-agent can be continued, and the refusal of
    // a trace that exists is word for word that of one that does not.
    const MISSING: &str = "tr_000000000000";
    s.set_script(json!({ "turns": [
        agent_call(json!({ "task": "take over", "continue_from": first.trace_id })),
        agent_call(json!({ "task": "take over", "continue_from": MISSING })),
        { "text": "refused" }
    ]}));
    let (_, other) = run_all(&runner, "another root", RunConfig::default()).await;
    let other = other.unwrap();
    let refused = s.results_of(&other.trace_id, "agent").await;
    assert_eq!(
        refused[0].text(),
        format!(
            "Error: this agent has no sub-agent {} to continue; continue_from takes a \
             sub_trace_id this agent's calls returned",
            first.trace_id
        )
    );
    assert_eq!(
        refused[0].text().replace(&first.trace_id, "ID"),
        refused[1].text().replace(MISSING, "ID"),
        "another's trace answers as a missing one"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_never_gets_a_tool_or_a_decision_its_parent_lacks() {
    let write = |path: &str| json!({ "tool_calls": [{ "name": "write", "arguments": { "path": path, "content": "x" } }] });
    let s = Setup::new(
        json!({
            "turns": [
                agent_call(json!({ "task": "widen: write a file", "agent_type": "default" })),
                { "text": "parent done" }
            ],
            "agents": [
                { "match": "widen", "turns": [write("widened.txt"), { "text": "child done" }] },
                { "match": "explorer", "turns": [write("explored.txt"), { "text": "child done" }] },
                { "match": "eager", "turns": [write("eager.txt"), { "text": "child done" }] }
            ]
        }),
        r#"
        [presets.eager]
        rules = [{ decision = "allow", tool = "*" }]
        [presets.writer]
        rules = [{ decision = "allow", tool = "*" }]
        [presets.cautious]
        allowed_tools = ["read", "glob", "agent"]
        "#,
    )
    .await;
    let denied = |text: String| {
        assert!(text.starts_with("Error: unknown tool `write`"), "{text}");
    };

    // A parent without `write` cannot get it through a wider preset.
    let cautious = s.runner("cautious", PendingApprovals::new(Duration::from_secs(30)));
    let (_, outcome) = run_all(&cautious, "parent", RunConfig::default()).await;
    let parent = outcome.unwrap().trace_id;
    let result = json_of(&s.results_of(&parent, "agent").await[0]);
    let child = result["results"][0]["sub_trace_id"].as_str().unwrap().to_owned();
    denied(s.results_of(&child, "write").await[0].text());
    assert!(!s.trace(&child).await.tools.contains(&"write".to_owned()));
    assert!(!s.dir.workspace().join("widened.txt").exists());

    // An `explore` child of a parent that may write cannot.
    s.set_script(json!({
        "turns": [agent_call(json!({ "task": "explorer: look", "agent_type": "explore" })), { "text": "parent done" }],
        "agents": [{ "match": "explorer", "turns": [write("explored.txt"), { "text": "child done" }] }]
    }));
    let writer = s.runner("writer", PendingApprovals::new(Duration::from_secs(30)));
    let (_, outcome) = run_all(&writer, "parent", RunConfig::default()).await;
    let parent = outcome.unwrap().trace_id;
    let result = json_of(&s.results_of(&parent, "agent").await[0]);
    let child = result["results"][0]["sub_trace_id"].as_str().unwrap().to_owned();
    denied(s.results_of(&child, "write").await[0].text());
    assert!(!s.dir.workspace().join("explored.txt").exists());

    // A child whose preset allows what its parent must ask about still
    // asks: the root's approver gets the request, and its "no" holds.
    s.set_script(json!({
        "turns": [agent_call(json!({ "task": "eager: write", "agent_type": "eager" })), { "text": "parent done" }],
        "agents": [{ "match": "eager", "turns": [write("eager.txt"), { "text": "child done" }] }]
    }));
    let approvals = PendingApprovals::new(Duration::from_secs(30));
    let asking = s.runner("default", approvals.clone());
    let mut handle =
        asking.run(vec![Message::new(Role::User, "parent")], RunConfig::default()).await.unwrap();
    let mut asked = Vec::new();
    while let Some(event) = handle.next_event().await {
        if let Some(request) = event.approval_request() {
            assert!(matches!(event, AgentEvent::SubAgent { .. }), "asked through the parent");
            asked.push(request.clone());
            assert!(approvals.answer(&request.id, Answer::Deny));
        }
    }
    let parent = handle.wait().await.unwrap().trace_id;
    assert_eq!(asked.len(), 1);
    let result = json_of(&s.results_of(&parent, "agent").await[0]);
    let child = result["results"][0]["sub_trace_id"].as_str().unwrap().to_owned();
    assert_eq!(asked[0].trace_id, child, "the request names the child");
    assert_eq!(asked[0].tool, "write");
    assert_eq!(
        s.results_of(&child, "write").await[0].text(),
        "Error: the user denied this call of `write`."
    );
    assert!(!s.dir.workspace().join("eager.txt").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn depth_and_fan_out_limits_refuse_with_clear_errors() {
    let s = Setup::new(
        json!({
            "turns": [
                agent_call(json!({ "task": ["a", "b", "c"] })),
                agent_call(json!({ "task": "nest once" })),
                { "text": "parent done" }
            ],
            "agents": [{ "match": "nest once", "turns": [
                agent_call(json!({ "task": "nest twice" })),
                { "text": "child done" }
            ]}]
        }),
        "[sub_agents]\nmax_depth = 1\nmax_fan_out = 2\n",
    )
    .await;
    let runner = s.default_runner();
    let (_, outcome) = run_all(&runner, "go deep", RunConfig::default()).await;
    let parent = outcome.unwrap().trace_id;
    let results = s.results_of(&parent, "agent").await;
    assert_eq!(
        results[0].text(),
        "Error: fan-out limit: 3 more sub-agents would make 3 running at once, and at most 2 may \
         run (sub_agents.max_fan_out); give fewer tasks"
    );
    let nested = json_of(&results[1]);
    let child = nested["results"][0]["sub_trace_id"].as_str().unwrap().to_owned();
    assert_eq!(
        s.results_of(&child, "agent").await[0].text(),
        "Error: sub-agent depth limit reached: this agent is at depth 1 and sub-agents may go 1 \
         deep (sub_agents.max_depth); do the work yourself"
    );
    let filter =
        reson::trace::TraceFilter { parent_trace_id: Some(child.clone()), ..Default::default() };
    assert!(s.store.list_traces(&filter).await.unwrap().is_empty(), "no grandchild exists");
    // Nothing from the refused explore call was started either.
    let filter = reson::trace::TraceFilter { parent_trace_id: Some(parent), ..Default::default() };
    assert_eq!(s.store.list_traces(&filter).await.unwrap().len(), 1);
    assert!(Config::parse("[sub_agents]\nmax_fan_out = 0\n").unwrap_err().contains("[sub_agents]"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_used_up_in_a_child_stops_child_and_parent_and_the_totals_add_up() {
    let usage = |prompt: u64| json!({ "prompt_tokens": prompt, "completion_tokens": 10 });
    let s = Setup::new(
        json!({
            "turns": [
                { "tool_calls": [{ "name": "agent", "arguments": { "task": "spend a lot" } }], "usage": usage(20), "cost": 0.5 },
                { "text": "never reached" }
            ],
            "agents": [{ "match": "spend a lot", "turns": [
                { "tool_calls": [{ "name": "echo", "arguments": { "text": "x" } }], "usage": usage(70), "cost": 0.25 },
                { "text": "never reached" }
            ]}]
        }),
        "",
    )
    .await;
    let runner = s.default_runner();
    let config = RunConfig {
        budget: Budget { max_tokens: Some(100), ..Budget::default() },
        ..RunConfig::default()
    };
    let (_, outcome) = run_all(&runner, "spend", config).await;
    let reason = "budget exhausted: max_tokens of the trace tree (110 tokens spent of 100)";
    match outcome {
        Err(AgentError::LimitExceeded(why)) => assert_eq!(why, reason),
        other => panic!("{other:?}"),
    }
    let roots: Vec<Trace> = s
        .store
        .list_traces(&reson::trace::TraceFilter { roots_only: true, ..Default::default() })
        .await
        .unwrap();
    let parent = &roots[0];
    assert_eq!(parent.status, TraceStatus::Failed);
    assert_eq!(parent.error_message.as_deref(), Some(&*format!("limit exceeded: {reason}")));
    let result = json_of(&s.results_of(&parent.id, "agent").await[0]);
    let child = s.trace(result["results"][0]["sub_trace_id"].as_str().unwrap()).await;
    assert_eq!(child.status, TraceStatus::Failed);
    assert_eq!(child.error_message.as_deref(), Some(&*format!("limit exceeded: {reason}")));
    assert_eq!(result["results"][0]["status"], "failed");
    assert_eq!(result["results"][0]["stats"]["tokens"], 80);

    // The totals add up: the parent's own, the child's, and the goal's
    // cumulative that holds both.
    let own = parent.totals.usage.prompt_tokens + parent.totals.usage.completion_tokens;
    let child_tokens = child.totals.usage.prompt_tokens + child.totals.usage.completion_tokens;
    assert_eq!((own, child_tokens), (30, 80));
    let g1 = s.store.get_goals(&parent.id).await.unwrap().get("g1").unwrap().clone();
    let cumulative = g1.cumulative_stats.usage;
    assert_eq!(cumulative.prompt_tokens + cumulative.completion_tokens, 110);
    assert!((g1.cumulative_stats.cost - 0.75).abs() < 1e-9);

    // A budget with nothing left is not carved for a child: the call is
    // refused before any child exists.
    s.set_script(json!({ "turns": [
        { "tool_calls": [{ "name": "agent", "arguments": { "task": "spend a lot" } }], "usage": usage(20), "cost": 0.5 },
        { "text": "never reached" }
    ]}));
    let config = RunConfig {
        budget: Budget { max_cost_usd: Some(0.5), ..Budget::default() },
        ..RunConfig::default()
    };
    let (_, outcome) = run_all(&runner, "spend", config).await;
    assert!(
        matches!(outcome, Err(AgentError::LimitExceeded(ref why)) if why.contains("max_cost_usd")),
        "{outcome:?}"
    );
    let newest = &s.store.list_traces(&Default::default()).await.unwrap()[0];
    assert_eq!(
        s.results_of(&newest.id, "agent").await[0].text(),
        "Error: budget exhausted: no max_cost_usd left to give a sub-agent ($0.50 spent of $0.50)"
    );
    // And a budget below zero is refused where it is given.
    let negative = RunConfig {
        budget: Budget { max_cost_usd: Some(-1.0), ..Budget::default() },
        ..RunConfig::default()
    };
    let Err(err) = runner.run(vec![Message::new(Role::User, "x")], negative).await else {
        panic!("a negative budget ran")
    };
    assert!(err.to_string().contains("max_cost_usd must be a finite number"), "{err}");
    let err = Config::parse("[sub_agents]\nchild_budget = { max_cost_usd = -0.1 }\n").unwrap_err();
    assert!(err.contains("[sub_agents]: child_budget: invalid budget"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cap_per_child_stops_only_the_child() {
    let s = Setup::new(
        json!({
            "turns": [agent_call(json!({ "task": "spend a lot" })), { "text": "parent goes on" }],
            "agents": [{ "match": "spend a lot", "turns": [
                { "tool_calls": [{ "name": "echo", "arguments": { "text": "x" } }], "usage": { "prompt_tokens": 70 } },
                { "text": "never reached" }
            ]}]
        }),
        "[sub_agents]\nchild_budget = { max_tokens = 50 }\n",
    )
    .await;
    let (_, outcome) = run_all(&s.default_runner(), "spend", RunConfig::default()).await;
    let outcome = outcome.unwrap();
    assert_eq!(outcome.final_text.as_deref(), Some("parent goes on"));
    let result = json_of(&s.results_of(&outcome.trace_id, "agent").await[0]);
    assert_eq!(
        result["results"][0]["error"],
        "limit exceeded: budget exhausted: max_tokens of this sub-agent's share (70 tokens spent of 50)"
    );
    assert!(result["results"][0]["resume"].as_str().unwrap().contains("continue_from"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evaluate_judges_a_completed_goal_with_a_sub_agent() {
    let s = Setup::new(
        json!({
            "turns": [
                { "tool_calls": [{ "name": "goal", "arguments": { "action": "done", "summary": "wrote hello.txt" } }] },
                { "tool_calls": [{ "name": "evaluate", "arguments": { "target_goal_id": "g1" } }] },
                { "text": "evaluated" }
            ],
            "agents": [{ "match": "Evaluate goal g1", "turns": [
                { "text": "{\"passed\": true, \"reasons\": [\"hello.txt is there\"], \"suggestions\": [\"add a newline\"]}" }
            ]}]
        }),
        "",
    )
    .await;
    let (_, outcome) = run_all(&s.default_runner(), "write hello", RunConfig::default()).await;
    let parent = outcome.unwrap().trace_id;
    let verdict = json_of(&s.results_of(&parent, "evaluate").await[0]);
    assert_eq!(verdict["passed"], true);
    assert_eq!(verdict["reasons"], json!(["hello.txt is there"]));
    assert_eq!(verdict["suggestions"], json!(["add a newline"]));
    assert_eq!(verdict["target_goal_id"], "g1");
    let evaluator = s.trace(verdict["sub_trace_id"].as_str().unwrap()).await;
    assert_eq!(evaluator.parent_trace_id.as_deref(), Some(parent.as_str()));
    assert_eq!(evaluator.agent_type, "explore", "an evaluator only reads");
    assert!(evaluator.task.starts_with(
        "Evaluate goal g1: \"write hello\" (status: completed). Its result: wrote hello.txt"
    ));

    // An unknown goal is refused before any evaluator runs.
    s.set_script(json!({ "turns": [
        { "tool_calls": [{ "name": "evaluate", "arguments": { "target_goal_id": "g9" } }] },
        { "text": "ok" }
    ]}));
    let (_, outcome) = run_all(&s.default_runner(), "again", RunConfig::default()).await;
    let parent = outcome.unwrap().trace_id;
    assert_eq!(
        s.results_of(&parent, "evaluate").await[0].text(),
        "Error: there is no goal g9 to evaluate"
    );
}

fn reson_run(s: &Setup, script: &Value, args: &[&str]) -> std::process::Child {
    let name = format!("run-{}.json", s.dir.path().read_dir().unwrap().count());
    let path = s.dir.path().join(name);
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_killed_while_a_child_runs_heals_and_the_child_resumes() {
    let s = Setup::new(json!({ "turns": [] }), "").await;
    let slow_child =
        json!({ "match": "slow survey", "turns": [{ "text": "too late", "delay_ms": 60000 }] });
    let first = json!({
        "turns": [agent_call(json!({ "task": "slow survey" })), { "text": "unused" }],
        "agents": [slow_child]
    });
    let mut process = reson_run(&s, &first, &["survey it"]);
    let stdout = process.stdout.take().unwrap();
    let (mut parent, mut child) = (None, None);
    for line in BufReader::new(stdout).lines() {
        let event: Value = serde_json::from_str(&line.unwrap()).unwrap();
        if event["type"] == "trace_started" {
            parent = event["trace_id"].as_str().map(str::to_owned);
        }
        // The child's model call is under way: kill the whole process.
        if event["type"] == "sub_agent" && event["event"]["type"] == "model_request" {
            child = event["sub_trace_id"].as_str().map(str::to_owned);
            process.kill().unwrap();
            break;
        }
    }
    process.wait().unwrap();
    let (parent, child) = (parent.expect("a parent"), child.expect("a child event"));
    assert_eq!(s.trace(&child).await.status, TraceStatus::Running, "it never finished");

    let second = json!({
        "turns": [
            agent_call(json!({ "task": "slow survey" })),
            agent_call(json!({ "task": "finish the survey", "continue_from": child })),
            { "text": "survey finished" }
        ],
        "agents": [{ "match": "slow survey", "turns": [{ "text": "survey done" }] }]
    });
    let output = reson_run(&s, &second, &["--trace", &parent, "go on"]).wait_with_output().unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));

    let results = s.results_of(&parent, "agent").await;
    assert_eq!(results.len(), 2);
    assert!(results[0].synthetic, "the cut call was healed");
    let healed = json_of(&results[0]);
    assert_eq!(healed["mode"], "delegate");
    assert_eq!(healed["results"][0]["sub_trace_id"], child.as_str());
    assert_eq!(healed["results"][0]["status"], "interrupted");
    assert_eq!(healed["results"][0]["stats"]["model_requests"], 0);
    let resume = healed["results"][0]["resume"].as_str().unwrap();
    assert!(resume.contains(&format!("continue_from = \"{child}\"")), "{resume}");

    let resumed = json_of(&results[1]);
    assert_eq!(resumed["results"][0]["sub_trace_id"], child.as_str());
    assert_eq!(resumed["results"][0]["status"], "completed");
    assert_eq!(resumed["results"][0]["summary"], "survey done");
    assert_eq!(s.trace(&child).await.status, TraceStatus::Completed);
    let parent_trace = s.trace(&parent).await;
    assert_eq!(parent_trace.result_summary.as_deref(), Some("survey finished"));
    let collaborators = &parent_trace.context.collaborators;
    assert_eq!(collaborators.len(), 1, "one sub-agent, continued: {collaborators:?}");
    assert_eq!(collaborators[0].status, CollaboratorStatus::Completed);

    // `traces show` puts the child under its goal with status and totals.
    let show = Command::new(env!("CARGO_BIN_EXE_reson"))
        .args(["--traces-dir", &s.dir.path().join("traces").to_string_lossy()])
        .args(["traces", "show", &parent])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&show.stdout);
    assert!(text.contains(&format!("  g1 → {child}  default  completed  ")), "{text}");
    assert!(text.contains("tree totals: "), "{text}");
    // Costs as the run's summary writes them (nothing spent: `$0.00`),
    // never `$0.0000`.
    assert!(text.contains(" msgs, ") && text.contains(", $0.00, "), "{text}");
    assert!(!text.contains("$0.0000"), "{text}");
    let list = Command::new(env!("CARGO_BIN_EXE_reson"))
        .args(["--traces-dir", &s.dir.path().join("traces").to_string_lossy()])
        .args(["traces", "list", "--roots"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&list.stdout);
    assert!(text.contains(&parent) && !text.contains(&child), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_while_children_run_stops_them_and_says_how_to_resume() {
    let slow =
        |name: &str| json!({ "match": name, "turns": [{ "text": "late", "delay_ms": 60000 }] });
    let s = Setup::new(
        json!({
            "turns": [agent_call(json!({ "task": ["slow one", "slow two"] })), { "text": "unused" }],
            "agents": [slow("slow one"), slow("slow two")]
        }),
        "",
    )
    .await;
    let runner = s.default_runner();
    let mut handle =
        runner.run(vec![Message::new(Role::User, "go")], RunConfig::default()).await.unwrap();
    let mut asking = 0;
    while let Some(event) = handle.next_event().await {
        if let AgentEvent::SubAgent { event, .. } = &event
            && matches!(**event, AgentEvent::ModelRequest { .. })
        {
            asking += 1;
            if asking == 2 {
                break;
            }
        }
    }
    let started = std::time::Instant::now();
    handle.stop();
    let outcome = handle.wait().await.unwrap();
    assert!(started.elapsed() < support::MARGIN, "took {:?}", started.elapsed());
    assert_eq!(outcome.status, TraceStatus::Stopped);
    let result = json_of(&s.results_of(&outcome.trace_id, "agent").await[0]);
    for child in result["results"].as_array().unwrap() {
        assert_eq!(child["status"], "stopped");
        let id = child["sub_trace_id"].as_str().unwrap();
        assert!(child["resume"].as_str().unwrap().contains(id));
        assert_eq!(s.trace(id).await.status, TraceStatus::Stopped);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_no_approver_a_childs_ask_is_denied_never_self_answered() {
    let s = Setup::new(
        json!({
            "turns": [agent_call(json!({ "task": "write it", "agent_type": "default" })), { "text": "done" }],
            "agents": [{ "match": "write it", "turns": [
                { "tool_calls": [{ "name": "write", "arguments": { "path": "x.txt", "content": "x" } }] },
                { "text": "tried" }
            ]}]
        }),
        "",
    )
    .await;
    // A library runner with no permissions at all: the parent may do
    // anything, but its `default` child asks before writing, and no one
    // is there to answer.
    let runner = Runner::new(
        s.store.clone(),
        Arc::new(PluginProvider::new(s.runtime.clone(), "scripted")),
        ToolRegistry::new(s.runtime.clone()),
        Hooks::none(),
    )
    .with_sub_agents(SubAgentSettings::default());
    let (events, outcome) = run_all(&runner, "parent", RunConfig::default()).await;
    let parent = outcome.unwrap().trace_id;
    assert!(!events.iter().any(|e| e.approval_request().is_some()), "nobody was asked");
    let result = json_of(&s.results_of(&parent, "agent").await[0]);
    let child = result["results"][0]["sub_trace_id"].as_str().unwrap().to_owned();
    assert_eq!(
        s.results_of(&child, "write").await[0].text(),
        "Error: no one approved this call of `write` in time; it was denied."
    );
    assert!(!s.dir.workspace().join("x.txt").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_time_budget_cuts_a_child_mid_call_and_fails_the_tree() {
    let s = Setup::new(
        json!({
            "turns": [agent_call(json!({ "task": "take forever" })), { "text": "unused" }],
            "agents": [{ "match": "take forever", "turns": [{ "text": "late", "delay_ms": 60000 }] }]
        }),
        "",
    )
    .await;
    let config = RunConfig {
        budget: Budget { max_duration_ms: Some(1500), ..Budget::default() },
        ..RunConfig::default()
    };
    let started = std::time::Instant::now();
    let (_, outcome) = run_all(&s.default_runner(), "hurry", config).await;
    let bound = Duration::from_millis(1500) + support::MARGIN;
    assert!(started.elapsed() < bound, "took {:?}", started.elapsed());
    let Err(AgentError::LimitExceeded(why)) = outcome else { panic!("{outcome:?}") };
    assert!(why.starts_with("budget exhausted: max_duration_ms of the trace tree ("), "{why}");
    assert!(why.ends_with(" spent of 1500 ms)"), "{why}");
    let roots = s.store.list_traces(&Default::default()).await.unwrap();
    let child = roots.iter().find(|t| t.parent_trace_id.is_some()).unwrap();
    assert_eq!(child.status, TraceStatus::Failed);
    assert!(child.error_message.as_deref().unwrap().contains("max_duration_ms"));
}
