//! A conversation with an agent: an `AgentBuilder` bundles the provider,
//! the tools, hooks and a trace store; a `BasicAgent` names its prompt and
//! tools; an `AgentSession` submits turns that all continue one trace, with
//! session memory appended to the system prompt.
//!
//! ```sh
//! cargo run -p reson --example agent_session
//! ```
//!
//! Offline: the bundled `scripted` provider replays
//! `examples/scripts/agent_session.json`. Two hooks count turns and model
//! requests, and the example checks the counts.

#[path = "common/mod.rs"]
mod common;

use anyhow::Result;
use common::{Setup, heading};
use reson::agent::memory::SessionMemory;
use reson::agent::{
    AgentBuilder, AgentSession, BasicAgent, HookDecision, HookEvent, HookPoint, Hooks,
};
use reson::tools::ToolRegistry;
use reson::trace::TraceStore;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

#[tokio::main]
async fn main() -> Result<()> {
    let setup = Setup::open(Some("agent_session")).await?;
    let store = setup.trace_store()?;

    // Hooks run inside the run's task, not on main's; shared counters let
    // main read what they saw.
    let turns = Arc::new(AtomicU32::new(0));
    let requests = Arc::new(AtomicU32::new(0));
    let (turns_seen, requests_seen) = (turns.clone(), requests.clone());
    let hooks = Hooks::none()
        .on(HookPoint::OnTurnEnd, move |event: &HookEvent| {
            turns_seen.fetch_add(1, Ordering::SeqCst);
            println!("  [hook] turn {} ended", event.turn.unwrap_or_default());
            HookDecision::Continue
        })
        .on(HookPoint::PreRequest, move |event: &HookEvent| {
            requests_seen.fetch_add(1, Ordering::SeqCst);
            println!("  [hook] model request, iteration {} of this turn", event.iteration);
            HookDecision::Continue
        });
    let bundle = AgentBuilder::new()
        .provider(setup.provider())
        .tools(ToolRegistry::new(setup.runtime.clone()))
        .hooks(hooks)
        .store(store.clone())
        .build()?;
    let agent = Arc::new(
        BasicAgent::new("helper", "You are a helpful assistant. Keep notes in the workspace.")
            .with_tools(vec!["read".into(), "write".into()]),
    );
    let offered: Vec<String> =
        bundle.tool_specs(agent.as_ref()).into_iter().map(|t| t.name).collect();
    println!("agent `helper` is offered: {}", offered.join(", "));

    // Memory set before the first turn is in the first prompt.
    let memory = SessionMemory::in_memory("example-session")?;
    memory.set("user", "name", "Ada").await?;
    memory.set("user", "likes", ["Rust", "tea"]).await?;
    let mut session = AgentSession::with_memory(agent, bundle, memory);
    heading("system prompt (agent prompt + session memory)");
    println!("{}", session.system_prompt().await?);

    heading("turns");
    let mut outcomes = Vec::new();
    for input in ["Hi, I'm Ada. Please note that I prefer Rust.", "What did you note?"] {
        println!("user: {input}");
        let outcome = session.submit_turn(input).await?;
        println!(
            "assistant (turn {}, {} tool call(s), {} prompt tokens): {}",
            outcome.turn, outcome.tool_calls, outcome.usage.prompt_tokens, outcome.text
        );
        outcomes.push(outcome);
    }

    heading("session memory after the turns");
    session.memory().set("notes", "file", "note.txt").await?;
    println!("{}", session.memory().snapshot().await?.render());

    heading("checks");
    let trace_id = session.trace_id().expect("a turn ran").to_owned();
    let trace = store.get_trace(&trace_id).await?.expect("the session's trace exists");
    println!(
        "trace {trace_id}: {} messages, agent `{}`, {} prompt tokens over the session",
        trace.totals.messages,
        trace.agent_type,
        session.usage().prompt_tokens
    );
    assert_eq!(turns.load(Ordering::SeqCst), 2, "one OnTurnEnd per turn");
    assert_eq!(requests.load(Ordering::SeqCst), 4, "each turn: a tool call, then the answer");
    assert_eq!(session.turn_index(), 2);
    assert!(outcomes.iter().all(|o| o.trace_id == trace_id), "a session is one trace");
    assert_eq!(outcomes.iter().map(|o| o.tool_calls).collect::<Vec<_>>(), [1, 1]);
    assert_eq!(outcomes[1].text, "The note says: Ada prefers Rust.");
    assert_eq!(trace.totals.messages, 8, "per turn: user, assistant, tool, assistant");
    assert_eq!(session.usage().prompt_tokens, 120 + 160 + 190 + 230);
    assert_eq!(std::fs::read_to_string(setup.workspace.join("note.txt"))?, "Ada prefers Rust.\n");
    println!("ok: 2 turns, 4 model requests, one trace");
    Ok(())
}
