//! A task agent: the model writes a plan, the `json-plan` parser component
//! turns it into steps, and each step runs as one turn of a session that
//! uses the `fs` tools. The plan is mirrored into the trace's goal tree.
//!
//! ```sh
//! cargo run -p reson --example task_agent
//! ```
//!
//! Offline: the bundled `scripted` provider replays
//! `examples/scripts/task_agent.json`, whose first turn answers the planning
//! prompt with a JSON plan in a fenced block (one step has a sub-step).

#[path = "common/mod.rs"]
mod common;

use anyhow::Result;
use common::{Setup, heading};
use reson::agent::{
    AgentBuilder, BasicAgent, HookDecision, HookEvent, HookPoint, Hooks, PluginPlanParser,
    StepStatus, TaskAgent,
};
use reson::tools::ToolRegistry;
use reson::trace::{GoalStatus, TraceStore};
use std::sync::{Arc, Mutex};

#[tokio::main]
async fn main() -> Result<()> {
    let setup = Setup::open(Some("task_agent")).await?;
    let store = setup.trace_store()?;

    let completed = Arc::new(Mutex::new(Vec::new()));
    let seen = completed.clone();
    let hooks = Hooks::none().on(HookPoint::OnPlanStepComplete, move |event: &HookEvent| {
        let index = event.step_index.expect("plan-step hooks carry the step");
        println!("  [hook] step {index} complete");
        seen.lock().expect("no hook panicked").push(index);
        HookDecision::Continue
    });
    let bundle = AgentBuilder::new()
        .provider(setup.provider())
        .tools(ToolRegistry::new(setup.runtime.clone()))
        .hooks(hooks)
        .store(store.clone())
        .build()?;
    let agent = Arc::new(BasicAgent::new(
        "task",
        "You work through a plan one step at a time, using the tools.",
    ));
    let parser = Arc::new(PluginPlanParser::new(setup.runtime.clone(), "json-plan"));
    let mut task = TaskAgent::new(agent, bundle, parser)?;

    let goal = "Greet the world in hello.txt and record the work";
    heading("planning and executing");
    println!("goal: {goal}");
    let mut shown = false;
    let outcome = task
        .run(goal, |plan| {
            // Called after every status change; the first call is the parsed plan.
            if !shown {
                println!("parsed plan:\n{}", plan.render());
                shown = true;
            }
        })
        .await?;

    heading("plan");
    print!("{}", outcome.plan.render());
    for step in &outcome.plan.steps {
        if let StepStatus::Completed { response } = step.status() {
            println!("step {}: {response}", step.index);
        }
    }
    let trace_id = outcome.trace_id.as_deref().expect("the steps ran in a trace");
    let goals = store.get_goals(trace_id).await?;
    heading(&format!("goal tree of trace {trace_id}"));
    print!("{}", goals.render());

    heading("checks");
    assert!(outcome.succeeded);
    assert_eq!(outcome.plan.steps.len(), 3);
    assert_eq!(outcome.plan.steps[1].parent, Some(0), "the sub-step nests under step 0");
    for step in &outcome.plan.steps {
        assert!(
            matches!(step.status(), StepStatus::Completed { .. }),
            "step {} is {}",
            step.index,
            step.status()
        );
        let goal = goals.goals().iter().find(|g| g.description == step.description);
        assert_eq!(goal.map(|g| g.status), Some(GoalStatus::Completed), "{}", step.description);
    }
    assert_eq!(*completed.lock().expect("no hook panicked"), [0, 1, 2]);
    assert_eq!(std::fs::read_to_string(setup.workspace.join("hello.txt"))?, "Hello, world!\n");
    assert!(setup.workspace.join("done.md").exists());
    println!("ok: all 3 steps completed, the hook fired for steps 0, 1, 2");
    Ok(())
}
