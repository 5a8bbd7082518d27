//! Branching a trace: run a task, continue it, rewind to an earlier message
//! with a different request, and regenerate an answer — four runs of one
//! `Runner` on one trace. Nothing is deleted: each rewind starts a branch in
//! the message tree and moves the head, and the main path follows the head.
//!
//! ```sh
//! cargo run -p reson --example rewind
//! ```
//!
//! Offline: the bundled `scripted` provider replays
//! `examples/scripts/rewind.json`. It picks its turn by how many assistant
//! messages the history holds, so a branch replays the script consistently
//! (and a regenerated answer is the same text; a real model would answer
//! anew). The tree is printed like `reson traces show` does.

#[path = "common/mod.rs"]
mod common;

use anyhow::{Context as _, Result};
use common::{Setup, heading};
use futures::StreamExt;
use futures::future::ready;
use reson::agent::{AgentEvent, Hooks, RunConfig, RunMode, RunOutcome, Runner};
use reson::tools::ToolRegistry;
use reson::trace::{FileTraceStore, Message, Role, TraceStore};

#[tokio::main]
async fn main() -> Result<()> {
    let setup = Setup::open(Some("rewind")).await?;
    let store = setup.trace_store()?;
    let runner = Runner::new(
        store.clone(),
        setup.provider(),
        ToolRegistry::new(setup.runtime.clone()),
        Hooks::none(),
    );

    heading("1. a new trace");
    let (mode, first) =
        run(&runner, Some("Write a one-line draft to draft.txt."), None, None).await?;
    let id = first.trace_id.clone();
    assert_eq!((mode, main_path(&store, &id).await?), (RunMode::New, vec![1, 2, 3, 4]));

    heading("2. continue after the head");
    let (mode, _) = run(&runner, Some("Now make it longer."), Some(&id), None).await?;
    assert_eq!((mode, main_path(&store, &id).await?), (RunMode::Continue, vec![1, 2, 3, 4, 5, 6]));

    // #2 is the assistant message that called `write`: the new message
    // follows its tool result, #3, so no call loses its result.
    heading("3. rewind after #2: a new branch");
    let (mode, _) =
        run(&runner, Some("Actually, keep it short; where is it?"), Some(&id), Some(2)).await?;
    assert_eq!((mode, main_path(&store, &id).await?), (RunMode::Rewind, vec![1, 2, 3, 7, 8]));
    assert_eq!(store.get_message(&id, 7).await?.and_then(|m| m.parent_sequence), Some(3));

    heading("4. regenerate the answer to #7");
    let (mode, _) = run(&runner, None, Some(&id), Some(7)).await?;
    assert_eq!((mode, main_path(&store, &id).await?), (RunMode::Regenerate, vec![1, 2, 3, 7, 9]));

    heading(&format!("message tree of {id} (* = main path)"));
    let messages = store.get_messages(&id).await?;
    let head = store.get_trace(&id).await?.and_then(|t| t.head_sequence);
    // This run has no images; a tool's would show under its message by name.
    print!("{}", reson::trace::render_tree(&messages, head, &|image| image.name.clone()));
    let all: Vec<u64> = messages.iter().map(|m| m.sequence).collect();
    assert_eq!(all, (1..=9).collect::<Vec<_>>(), "nothing deleted, no sequence reused");
    println!("\nok: main path 1 → 2 → 3 → 7 → 9; the other branches are kept");
    Ok(())
}

/// One run: `message` (none to regenerate) on trace `trace_id` (none for a
/// new one) after `after` (none to continue after the head). Prints the
/// mode and the answer.
async fn run(
    runner: &Runner,
    message: Option<&str>,
    trace_id: Option<&str>,
    after: Option<u64>,
) -> Result<(RunMode, RunOutcome)> {
    let messages = message.map(|m| Message::new(Role::User, m)).into_iter().collect();
    let config = RunConfig {
        trace_id: trace_id.map(str::to_owned),
        after_sequence: after,
        ..RunConfig::default()
    };
    if let Some(message) = message {
        println!("user: {message}");
    }
    let mut handle = runner.run(messages, config).await?;
    // TraceStarted says how the runner prepared the trace; the handle is a
    // stream of events, so stream combinators find it.
    let mode = handle
        .by_ref()
        .filter_map(|event| {
            ready(match event {
                AgentEvent::TraceStarted { mode, .. } => Some(mode),
                _ => None,
            })
        })
        .next()
        .await
        .context("the run reported no TraceStarted")?;
    let outcome = handle.wait().await?;
    println!("mode {mode:?}; assistant: {}", outcome.final_text.as_deref().unwrap_or_default());
    Ok((mode, outcome))
}

/// The sequences on the main path, from the root to the head.
async fn main_path(store: &FileTraceStore, id: &str) -> Result<Vec<u64>> {
    let head =
        store.get_trace(id).await?.and_then(|t| t.head_sequence).expect("a run moved the head");
    let path: Vec<u64> =
        store.get_main_path_messages(id, head).await?.iter().map(|m| m.sequence).collect();
    println!("main path: {path:?}");
    Ok(path)
}
