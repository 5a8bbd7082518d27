//! Sub-agents: the `agent` tool hands work to sub-agents, each a trace of
//! its own under the calling goal; `evaluate` has an evaluator sub-agent
//! judge a goal's result. Here a parent explores three notes with three
//! read-only sub-agents at once, completes its goal, has it evaluated, and
//! answers, all under one budget for the whole tree.
//!
//! ```sh
//! cargo run -p reson --example sub_agents
//! ```
//!
//! Offline: the bundled `scripted` provider replays
//! `examples/scripts/sub_agents.json`, whose `agents` entries script each
//! sub-agent by its task.

#[path = "common/mod.rs"]
mod common;

use anyhow::{Result, ensure};
use common::{Setup, heading};
use futures::StreamExt;
use reson::agent::{
    AgentEvent, Hooks, PendingApprovals, Permissions, RunConfig, Runner, SubAgentSettings,
};
use reson::policy::Budget;
use reson::tools::ToolRegistry;
use reson::trace::{Message, Role, TraceFilter, TraceStatus, TraceStore};
use std::time::Duration;

/// One line per event, a sub-agent's indented under the call that started it.
fn show(event: &AgentEvent, depth: usize) {
    let indent = "  │ ".repeat(depth);
    match event {
        AgentEvent::SubAgent { sub_trace_id, event, .. } => {
            if let AgentEvent::TraceStarted { .. } = **event {
                println!("{indent}  │ sub-agent {sub_trace_id} started");
            }
            show(event, depth + 1);
        }
        AgentEvent::ToolStarted { name, arguments, .. } => println!("{indent}→ {name} {arguments}"),
        AgentEvent::ToolFinished { name, ok, output, .. } => {
            // A sub-agent call's result is JSON: its first line says nothing.
            let first = output.lines().find(|l| l.trim().len() > 1).unwrap_or_default().trim();
            println!("{indent}{} {name}: {first}", if *ok { "←" } else { "✗" });
        }
        AgentEvent::MessageAdded { message } if message.role == Role::Assistant => {
            let text = message.text();
            if !text.is_empty() {
                println!("{indent}{text}");
            }
        }
        AgentEvent::Finished { status, .. } => println!("{indent}└ {status:?}"),
        _ => {}
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    let setup = Setup::open(Some("sub_agents")).await?;
    std::fs::create_dir(setup.workspace.join("notes"))?;
    for (name, text) in [
        ("alpha", "Launch in May, after the beta."),
        ("beta", "Risks: load on day one; support staffing."),
        ("gamma", "Budget: 40k, half for hosting."),
    ] {
        std::fs::write(setup.workspace.join(format!("notes/{name}.txt")), text)?;
    }
    let config = &setup.config;
    let (_, rules) = config.preset("default").map_err(anyhow::Error::msg)?;
    let store = setup.trace_store()?;
    // Every sub-agent is held to this runner's tools and rules as well as
    // its own preset's; an `ask` anywhere in the tree comes here.
    let runner = Runner::new(
        store.clone(),
        setup.provider(),
        ToolRegistry::new(setup.runtime.clone()),
        Hooks::none(),
    )
    .with_permissions(Permissions::new(rules, PendingApprovals::new(Duration::from_secs(5))))
    .with_sub_agents(SubAgentSettings::from_config(config).map_err(anyhow::Error::msg)?);
    let budget = Budget {
        max_tokens: Some(10_000),
        max_cost_usd: Some(0.05),
        max_duration_ms: Some(60_000),
    };
    let run = RunConfig { budget, ..RunConfig::default() };

    heading("the run, sub-agents indented");
    let task = "Survey the notes in notes/.";
    println!("user: {task}");
    let mut handle = runner.run(vec![Message::new(Role::User, task)], run).await?;
    while let Some(event) = handle.next().await {
        show(&event, 0);
    }
    let outcome = handle.wait().await?;
    ensure!(outcome.status == TraceStatus::Completed, "the run ended {:?}", outcome.status);

    heading("the tree");
    let parent = store.get_trace(&outcome.trace_id).await?.expect("the trace");
    let goals = store.get_goals(&parent.id).await?;
    let g1 = goals.get("g1").expect("the root goal");
    println!("{}", goals.render().trim_end());
    let mut children = store
        .list_traces(&TraceFilter {
            parent_trace_id: Some(parent.id.clone()),
            ..Default::default()
        })
        .await?;
    children.sort_by_key(|t| t.created_at_ms);
    let (mut tokens, mut cost) = (parent.totals.usage, parent.totals.cost);
    for child in &children {
        println!(
            "  {} ({}) {:?}: {} tokens, ${:.3} — {}",
            child.id,
            child.agent_type,
            child.status,
            child.totals.usage.prompt_tokens + child.totals.usage.completion_tokens,
            child.totals.cost,
            child.task.lines().next().unwrap_or_default()
        );
        tokens += child.totals.usage;
        cost += child.totals.cost;
    }
    // The goal counts what was spent while it was in focus, its
    // sub-agents included; the parent's last answers came after it closed.
    println!(
        "whole tree: {} tokens, ${cost:.3}; goal g1 (while in focus, sub-agents included): {} \
         tokens, ${:.3}",
        tokens.prompt_tokens + tokens.completion_tokens,
        g1.cumulative_stats.usage.prompt_tokens + g1.cumulative_stats.usage.completion_tokens,
        g1.cumulative_stats.cost
    );
    for c in &parent.context.collaborators {
        println!("collaborator {} {:?}: {}", c.name, c.status, c.summary.as_deref().unwrap_or(""));
    }

    heading("checks");
    let messages = store.get_messages(&parent.id).await?;
    let result = |tool: &str| {
        let call = messages.iter().flat_map(|m| &m.tool_calls).find(|c| c.name == tool);
        let call = call.expect("the call");
        messages.iter().find(|m| m.tool_call_id.as_deref() == Some(call.id.as_str())).unwrap()
    };
    let explore: serde_json::Value = serde_json::from_str(&result("agent").text())?;
    let summaries: Vec<&str> = explore["results"]
        .as_array()
        .expect("results")
        .iter()
        .map(|r| r["summary"].as_str().unwrap_or_default())
        .collect();
    println!("explore results, in order: {summaries:?}");
    ensure!(summaries[0].starts_with("alpha") && summaries[2].starts_with("gamma"));
    // Each child's model call alone took 300 ms: together they overlapped.
    let took = result("agent").duration_ms;
    let own: u64 =
        children.iter().filter(|c| c.agent_type == "explore").map(|c| c.totals.duration_ms).sum();
    println!("the explore call took {took} ms; its three children {own} ms between them");
    ensure!(took < own, "the children ran one after another");
    let verdict: serde_json::Value = serde_json::from_str(&result("evaluate").text())?;
    println!("verdict: passed={} reasons={}", verdict["passed"], verdict["reasons"]);
    ensure!(verdict["passed"] == true);
    ensure!(
        children.len() == 4 && children.iter().all(|c| c.parent_goal_id.as_deref() == Some("g1"))
    );
    ensure!(g1.sub_trace_ids.len() == 4, "the goal lists every sub-trace");
    ensure!(g1.cumulative_stats.cost > g1.self_stats.cost, "the children's cost is in the goal's");
    println!("ok: 3 explorers in parallel and an evaluator, linked both ways, within the budget");
    Ok(())
}
