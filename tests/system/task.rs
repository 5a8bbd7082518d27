//! Plan parsers as real components, and the task agent executing plans on
//! the real scripted provider.

use crate::support;

use reson::agent::{
    AgentBuilder, AgentError, BasicAgent, FailurePolicy, HookDecision, HookEvent, HookPoint, Hooks,
    Plan, PlanParser, PluginPlanParser, StepStatus, TaskAgent,
};
use reson::plugin::Runtime;
use reson::provider::PluginProvider;
use reson::tools::ToolRegistry;
use reson::trace::{FileTraceStore, GoalStatus, TraceMode, TraceStore};
use serde_json::json;
use std::sync::{Arc, Mutex};
use support::TestDir;

struct Setup {
    dir: TestDir,
    runtime: Runtime,
    store: Arc<FileTraceStore>,
}

impl Setup {
    async fn new(script: serde_json::Value) -> Self {
        let dir = TestDir::new();
        for plugin in ["scripted", "fs", "echo", "json-plan", "markdown-plan"] {
            dir.install(support::plugins(), plugin);
        }
        let script_path = dir.path().join("script.json");
        std::fs::write(&script_path, script.to_string()).unwrap();
        let runtime = dir.open(&format!(
            "[permissions]\ndefault = \"allow\"\n\
             [plugins.scripted]\ndirs = [{{ path = \".\", access = \"read\" }}]\nconfig = {{ script = \"{}\" }}\n\
             [plugins.fs]\ndirs = [{{ path = \"workspace\", access = \"read-write\" }}]\n",
            script_path.display()
        ))
        .await;
        let store = Arc::new(
            FileTraceStore::open(dir.path().join("traces"), reson::trace::Durability::Batched)
                .unwrap(),
        );
        Self { dir, runtime, store }
    }

    fn parser(&self, name: &str) -> PluginPlanParser {
        PluginPlanParser::new(self.runtime.clone(), name)
    }

    fn task_agent(&self, hooks: Hooks, policy: FailurePolicy) -> TaskAgent {
        let bundle = AgentBuilder::new()
            .provider(Arc::new(PluginProvider::new(self.runtime.clone(), "scripted")))
            .tools(ToolRegistry::new(self.runtime.clone()))
            .hooks(hooks)
            .store(self.store.clone())
            .build()
            .unwrap();
        let agent = Arc::new(BasicAgent::new("task", "Work through the plan."));
        TaskAgent::new(agent, bundle, Arc::new(self.parser("json-plan")))
            .unwrap()
            .with_failure_policy(policy)
    }
}

fn descriptions(plan: &Plan) -> Vec<(String, Option<usize>)> {
    plan.steps.iter().map(|s| (s.description.clone(), s.parent)).collect()
}

async fn parse_err(parser: &PluginPlanParser, raw: &str) -> String {
    match parser.parse(raw, "goal").await {
        Err(AgentError::PlanParse(message)) => message,
        other => panic!("expected a plan parse error for {raw:?}, got {other:?}"),
    }
}

#[tokio::test]
async fn json_plan_accepts_every_format() {
    let s = Setup::new(json!({ "turns": [] })).await;
    let p = s.parser("json-plan");
    let bare = r#"{"steps": [{"description": "a"}, {"description": "b"}]}"#;
    let fenced = format!("Here you go:\n```json\n{bare}\n```\nGood luck.");
    let prose = format!("My plan is {bare} and that is all.");
    for raw in [bare.to_owned(), fenced, prose] {
        let plan = p.parse(&raw, "goal").await.unwrap();
        assert_eq!(descriptions(&plan), [("a".into(), None), ("b".into(), None)], "{raw}");
    }
    let nested =
        r#"{"steps": [{"description": "a", "steps": ["a1", {"description": "a2"}]}, "b"]}"#;
    let plan = p.parse(nested, "goal").await.unwrap();
    assert_eq!(
        descriptions(&plan),
        [("a".into(), None), ("a1".into(), Some(0)), ("a2".into(), Some(0)), ("b".into(), None)]
    );
    assert_eq!(plan.goal, "goal");
}

#[tokio::test]
async fn json_plan_errors_say_which() {
    let s = Setup::new(json!({ "turns": [] })).await;
    let p = s.parser("json-plan");
    assert!(
        parse_err(&p, r#"{"steps": [{"description": "a"},]}"#)
            .await
            .contains("invalid JSON at line 1")
    );
    assert_eq!(parse_err(&p, r#"{"todo": []}"#).await, "json-plan: missing field `steps`");
    assert_eq!(parse_err(&p, r#"{"steps": []}"#).await, "json-plan: the plan has no steps");
    assert_eq!(
        parse_err(&p, r#"{"steps": [{"description": "a"}, {"note": "x"}]}"#).await,
        "json-plan: step 1 has no description"
    );
    assert!(parse_err(&p, "I will just do it.").await.contains("no JSON object with \"steps\""));
    assert!(parse_err(&p, r#"{"steps": 3}"#).await.contains("`steps` must be an array"));
}

#[tokio::test]
async fn markdown_plan_reads_lists_and_nesting() {
    let s = Setup::new(json!({ "turns": [] })).await;
    let p = s.parser("markdown-plan");
    let numbered = "# Plan\n\n1. Read the code\n2. Fix the bug\n   - write a test\n   - change the line\n3. Ship\n";
    let plan = p.parse(numbered, "goal").await.unwrap();
    assert_eq!(
        descriptions(&plan),
        [
            ("Read the code".into(), None),
            ("Fix the bug".into(), None),
            ("write a test".into(), Some(1)),
            ("change the line".into(), Some(1)),
            ("Ship".into(), None)
        ]
    );
    let checkboxes = "- [ ] first\n- [x] second\n";
    assert_eq!(
        descriptions(&p.parse(checkboxes, "g").await.unwrap()),
        [("first".into(), None), ("second".into(), None)]
    );
    assert!(
        parse_err(&p, "No list here, just prose.")
            .await
            .contains("no numbered, bulleted or checkbox list found")
    );
    assert_eq!(parse_err(&p, "1. one\n2.\n").await, "markdown-plan: step 1 has no description");
}

fn plan_turn(steps: &[&str]) -> serde_json::Value {
    let steps: Vec<_> = steps.iter().map(|d| json!({ "description": d })).collect();
    json!({ "text": format!("```json\n{}\n```", json!({ "steps": steps })) })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_is_planned_executed_and_mirrored_into_the_goal_tree() {
    let s = Setup::new(json!({ "turns": [
        plan_turn(&["Write the file", "Read it back"]),
        { "tool_calls": [{ "name": "write", "arguments": { "path": "out.txt", "content": "42" } }] },
        { "text": "Wrote out.txt." },
        { "tool_calls": [{ "name": "read", "arguments": { "path": "out.txt" } }] },
        { "text": "It says 42." }
    ]})).await;
    let fired = Arc::new(Mutex::new(Vec::new()));
    let seen = fired.clone();
    let hooks = Hooks::none().on(HookPoint::OnPlanStepComplete, move |e: &HookEvent| {
        seen.lock().unwrap().push(e.step_index.unwrap());
        HookDecision::Continue
    });
    let mut task = s.task_agent(hooks, FailurePolicy::Stop);
    let mut statuses = Vec::new();
    let outcome = task
        .run("Store the answer", |plan| {
            statuses.push(
                plan.steps.iter().map(|st| st.status().to_string()).collect::<Vec<_>>().join(","),
            )
        })
        .await
        .unwrap();
    assert!(outcome.succeeded);
    assert_eq!(*fired.lock().unwrap(), [0, 1], "the hook fires once per step, with its index");
    assert_eq!(
        statuses,
        [
            "pending,pending",
            "running,pending",
            "completed,pending",
            "completed,running",
            "completed,completed"
        ]
    );
    let StepStatus::Completed { response } = outcome.plan.steps[1].status() else { panic!() };
    assert_eq!(response, "It says 42.");
    assert_eq!(std::fs::read_to_string(s.dir.workspace().join("out.txt")).unwrap(), "42");

    let trace_id = outcome.trace_id.unwrap();
    let trace = s.store.get_trace(&trace_id).await.unwrap().unwrap();
    assert_eq!(trace.mode, TraceMode::Task);
    let goals = s.store.get_goals(&trace_id).await.unwrap();
    let root = &goals.goals()[0];
    assert_eq!(
        (root.description.as_str(), root.status),
        ("Store the answer", GoalStatus::Completed)
    );
    let steps: Vec<_> =
        goals.goals().iter().skip(1).map(|g| (g.description.as_str(), g.status)).collect();
    assert_eq!(
        steps,
        [("Write the file", GoalStatus::Completed), ("Read it back", GoalStatus::Completed)]
    );
    assert_eq!(goals.goals()[2].summary.as_deref(), Some("It says 42."));
    let by_goal = s.store.get_messages_by_goal(&trace_id, &goals.goals()[2].id).await.unwrap();
    assert!(
        by_goal.iter().any(|m| m.text() == "It says 42."),
        "the step's messages carry its goal"
    );
}

/// A plan of three steps where the second fails (the script errors).
fn failing_script() -> serde_json::Value {
    json!({ "turns": [
        { "text": "one done" },
        { "error": { "kind": "bad-request", "message": "step two cannot be done" } },
        { "text": "three done" }
    ]})
}

fn external_plan() -> Plan {
    Plan::from_descriptions("three things", ["one", "two", "three"])
}

fn statuses(plan: &Plan) -> Vec<&'static str> {
    plan.steps
        .iter()
        .map(|s| match s.status() {
            StepStatus::Completed { .. } => "completed",
            StepStatus::Failed { .. } => "failed",
            StepStatus::Skipped => "skipped",
            StepStatus::Pending => "pending",
            StepStatus::Running => "running",
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failure_policy_stop_skips_the_rest() {
    let s = Setup::new(failing_script()).await;
    let outcome = s
        .task_agent(Hooks::none(), FailurePolicy::Stop)
        .execute_plan(external_plan(), |_| {})
        .await
        .unwrap();
    assert!(!outcome.succeeded);
    assert_eq!(statuses(&outcome.plan), ["completed", "failed", "skipped"]);
    let StepStatus::Failed { error } = outcome.plan.steps[1].status() else { panic!() };
    assert!(error.contains("step two cannot be done"), "{error}");
    let goals = s.store.get_goals(outcome.trace_id.as_deref().unwrap()).await.unwrap();
    let failed = goals.goals().iter().find(|g| g.description == "two").unwrap();
    assert_eq!(failed.status, GoalStatus::Abandoned);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failure_policy_continue_runs_every_step() {
    // A failed turn adds no answer, so "three" meets the same scripted error.
    let s = Setup::new(failing_script()).await;
    let outcome = s
        .task_agent(Hooks::none(), FailurePolicy::Continue)
        .execute_plan(external_plan(), |_| {})
        .await
        .unwrap();
    assert_eq!(statuses(&outcome.plan), ["completed", "failed", "failed"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failure_policy_skip_skips_the_failed_steps_children_only() {
    let s = Setup::new(json!({ "turns": [
        { "error": { "kind": "bad-request", "message": "no" } }
    ]}))
    .await;
    let mut plan = Plan::from_descriptions("g", ["parent"]);
    plan.steps.push(reson::agent::Step::new(1, "child", Some(0)));
    plan.steps.push(reson::agent::Step::new(2, "sibling", None));
    let outcome =
        s.task_agent(Hooks::none(), FailurePolicy::Skip).execute_plan(plan, |_| {}).await.unwrap();
    assert_eq!(statuses(&outcome.plan)[..2], ["failed", "skipped"]);
    assert_ne!(statuses(&outcome.plan)[2], "skipped", "a sibling still runs");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocking_step_hook_stops_the_task() {
    let s = Setup::new(json!({ "turns": [{ "text": "one" }, { "text": "two" }] })).await;
    let hooks = Hooks::none().on(HookPoint::OnPlanStepComplete, |e: &HookEvent| {
        if e.step_index == Some(0) {
            HookDecision::Block("review needed".into())
        } else {
            HookDecision::Continue
        }
    });
    let err = s
        .task_agent(hooks, FailurePolicy::Continue)
        .execute_plan(Plan::from_descriptions("g", ["one", "two"]), |_| {})
        .await
        .unwrap_err();
    assert!(matches!(err, AgentError::HookBlocked { .. }), "{err:?}");
}

/// Answers every question with `answer`, keeping what was asked.
struct Answering {
    answer: &'static str,
    asked: Mutex<Vec<String>>,
}

#[async_trait::async_trait]
impl reson::agent::human::Asker for Answering {
    async fn ask(
        &self,
        question: &reson::agent::human::Question,
        announce: &reson::agent::human::AnnounceQuestion,
    ) -> Option<(String, String)> {
        announce(question);
        self.asked.lock().unwrap().push(question.question.clone());
        Some((self.answer.to_owned(), "the test".to_owned()))
    }
}

/// A step of a task may ask the person (`ask_human`, offered by
/// `AgentBuilder::asker`): the answer comes back to the step, and the
/// question is a trace under the task's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_asks_the_person_and_goes_on_with_the_answer() {
    let s = Setup::new(json!({ "turns": [
        { "tool_calls": [{ "name": "ask_human", "arguments": { "question": "Which colour?", "choices": ["red", "blue"] } }] },
        { "text": "Painting it." },
    ]}))
    .await;
    let asker = Arc::new(Answering { answer: "blue", asked: Mutex::new(Vec::new()) });
    let bundle = AgentBuilder::new()
        .provider(Arc::new(PluginProvider::new(s.runtime.clone(), "scripted")))
        .tools(ToolRegistry::new(s.runtime.clone()))
        .hooks(Hooks::none())
        .store(s.store.clone())
        .asker(asker.clone())
        .build()
        .unwrap();
    let agent = Arc::new(BasicAgent::new("task", "Work through the plan."));
    assert!(bundle.tool_specs(agent.as_ref()).iter().any(|t| t.name == "ask_human"));
    let mut task = TaskAgent::new(agent, bundle, Arc::new(s.parser("json-plan"))).unwrap();
    let plan = Plan::from_descriptions("paint the logo", ["Paint it"]);
    let outcome = task.execute_plan(plan, |_| {}).await.unwrap();
    assert!(outcome.succeeded);
    assert_eq!(*asker.asked.lock().unwrap(), ["Which colour?"]);
    let trace_id = outcome.trace_id.unwrap();
    let messages = s.store.get_messages(&trace_id).await.unwrap();
    let result = messages.iter().find(|m| m.role == reson::trace::Role::Tool).unwrap().text();
    assert!(result.contains("blue"), "{result}");
    let filter =
        reson::trace::TraceFilter { parent_trace_id: Some(trace_id.clone()), ..Default::default() };
    let questions = s.store.list_traces(&filter).await.unwrap();
    assert_eq!(questions.len(), 1, "the question is a trace under the task's");
    assert_eq!(questions[0].task, "Which colour?");

    // Without an asker, a task offers no `ask_human`.
    let plain = AgentBuilder::new()
        .provider(Arc::new(PluginProvider::new(s.runtime.clone(), "scripted")))
        .tools(ToolRegistry::new(s.runtime.clone()))
        .hooks(Hooks::none())
        .store(s.store.clone())
        .build()
        .unwrap();
    let agent = BasicAgent::new("task", "Work through the plan.");
    assert!(!plain.tool_specs(&agent).iter().any(|t| t.name == "ask_human"));
}

#[tokio::test]
async fn cli_task_runs_a_given_plan_and_prints_the_step_table() {
    let s = Setup::new(json!({ "turns": [{ "text": "listed" }, { "text": "read" }] })).await;
    let plan = s.dir.path().join("plan.md");
    std::fs::write(&plan, "1. List the files\n2. Read one\n").unwrap();
    let script = s.dir.path().join("script.json");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_reson"))
        .args(["--config", &s.dir.path().join("reson.toml").to_string_lossy()])
        .args(["--plugins-dir", &s.dir.plugins().to_string_lossy()])
        .args(["--cache-dir", &support::cache_dir().to_string_lossy()])
        .args(["--traces-dir", &s.dir.path().join("traces").to_string_lossy()])
        .args([
            "task",
            "Look around",
            "--parser",
            "markdown-plan",
            "--plan",
            &plan.to_string_lossy(),
        ])
        .args(["--script", &script.to_string_lossy()])
        .output()
        .unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("[1/2] running List the files"), "{stdout}");
    assert!(stdout.contains("[2/2] completed Read one: read"), "{stdout}");
    assert!(
        stdout.ends_with("  1  completed  List the files\n  2  completed  Read one\n"),
        "{stdout}"
    );
}
