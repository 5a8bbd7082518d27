//! Streaming a run: `Runner::run` returns as soon as the trace is prepared
//! with a `RunHandle`, a `futures::Stream` of every `AgentEvent` as it
//! happens — the answer as text deltas while the model is still "talking",
//! tool calls starting and finishing, each message as it is persisted, and
//! the end.
//!
//! ```sh
//! cargo run -p reson --example streaming_events
//! ```
//!
//! Offline: the bundled `scripted` provider replays
//! `examples/scripts/streaming_events.json`; asked to stream, it emits its
//! reasoning and text word by word before answering.

#[path = "common/mod.rs"]
mod common;

use anyhow::Result;
use common::{Setup, heading};
use futures::StreamExt;
use reson::agent::{AgentEvent, Hooks, RunConfig, Runner};
use reson::provider::LlmParams;
use reson::tools::ToolRegistry;
use reson::trace::{Message, Role, TraceStatus};
use std::io::Write;

#[tokio::main]
async fn main() -> Result<()> {
    let setup = Setup::open(Some("streaming_events")).await?;
    let runner = Runner::new(
        setup.trace_store()?,
        setup.provider(),
        ToolRegistry::new(setup.runtime.clone()),
        Hooks::none(),
    );
    let config = RunConfig {
        system_prompt: Some("You write short poems into files.".into()),
        params: LlmParams { stream: true, ..LlmParams::default() },
        ..RunConfig::default()
    };
    let task = "Write a haiku about sandboxes to haiku.txt.";
    heading("events as they arrive");
    println!("user: {task}");
    let mut handle = runner.run(vec![Message::new(Role::User, task)], config).await?;

    let mut stdout = std::io::stdout();
    // Which delta line is open, so the next event starts on a fresh line.
    let mut open_line: Option<&str> = None;
    let (mut events, mut text_deltas) = (0, 0);
    let mut first_delta = None;
    let mut finished = None;
    // The text streamed by the latest model call; it must add up to the answer.
    let mut streamed = String::new();
    while let Some(event) = handle.next().await {
        events += 1;
        let delta = match &event {
            AgentEvent::TextDelta { text } => Some(("text", text)),
            AgentEvent::ReasoningDelta { text } => Some(("reasoning", text)),
            _ => None,
        };
        if let Some((kind, text)) = delta {
            if open_line != Some(kind) {
                if open_line.is_some() {
                    println!();
                }
                print!("  {kind}: ");
                open_line = Some(kind);
            }
            print!("{text}");
            stdout.flush()?;
            if kind == "text" {
                text_deltas += 1;
                first_delta.get_or_insert(events);
                streamed.push_str(text);
            }
            continue;
        }
        if open_line.take().is_some() {
            println!();
        }
        match event {
            AgentEvent::TraceStarted { trace_id, mode } => {
                println!("[trace_started] {trace_id} ({mode:?})")
            }
            AgentEvent::ModelRequest { iteration } => {
                streamed.clear();
                println!("[model_request] iteration {iteration}")
            }
            AgentEvent::MessageAdded { message } => {
                let role = serde_json::to_value(message.role)?;
                println!("[message_added] #{} {}", message.sequence, role.as_str().unwrap_or("?"))
            }
            AgentEvent::ToolStarted { name, arguments, .. } => {
                println!("[tool_started] {name} {arguments}")
            }
            AgentEvent::ToolFinished { name, ok, output, .. } => {
                println!("[tool_finished] {name} ok={ok}: {output}")
            }
            AgentEvent::GoalChanged { tree } => println!("[goal_changed] {}", tree.trim_end()),
            AgentEvent::Finished { status, error } => {
                finished = Some(events);
                println!(
                    "[finished] {status:?}{}",
                    error.map(|e| format!(": {e}")).unwrap_or_default()
                )
            }
            // The rest (retries, approvals, and any event added later)
            // print as the JSON `reson run --json` writes.
            other => println!("{}", serde_json::to_string(&other)?),
        }
    }
    let outcome = handle.wait().await?;

    heading("checks");
    println!(
        "{events} events, {text_deltas} text deltas, {} model calls, final answer: {}",
        outcome.iterations,
        outcome.final_text.as_deref().unwrap_or_default()
    );
    assert_eq!(outcome.status, TraceStatus::Completed);
    assert!(text_deltas > 1, "the answer arrived in pieces");
    let (first_delta, finished) = (first_delta.expect("deltas"), finished.expect("a Finished"));
    assert!(first_delta < finished, "deltas arrive before the end");
    assert_eq!(finished, events, "Finished is the last event");
    assert_eq!(Some(streamed.as_str()), outcome.final_text.as_deref(), "deltas add up");
    assert!(setup.workspace.join("haiku.txt").exists());
    println!("ok: text streamed in {text_deltas} deltas before Finished");
    Ok(())
}
