//! Skills, compaction and experiences in one offline run:
//!
//! 1. an agent runs with the built-in skills in its system prompt and loads
//!    one more with the `skill` tool, in an 8,000-token window: its history
//!    is compacted at level 1 (finished goals left out) and then level 2
//!    (a summary message; nothing is deleted);
//! 2. `reflect` turns the trace into an experience in `experiences.md`,
//!    on a side branch (the head does not move);
//! 3. a new run on a similar task gets that experience in its first
//!    message, under `## Relevant experience`.
//!
//! ```sh
//! cargo run -p reson --example learning
//! ```
//!
//! Offline: the `scripted` provider replays `examples/scripts/learning.json`,
//! whose `models` section answers the tagging (`utility`), summary
//! (`summarizer`) and reflection (`reflector`) calls.

#[path = "common/mod.rs"]
mod common;

use anyhow::Result;
use common::{Setup, heading};
use reson::agent::compaction::CompactionConfig;
use reson::agent::{AgentEvent, Hooks, RunConfig, Runner};
use reson::experience::{self, Experiences, FileExperienceStore};
use reson::provider::LlmParams;
use reson::skills::Skills;
use reson::tools::ToolRegistry;
use reson::trace::{Message, Role, TraceStore};
use std::sync::Arc;

#[tokio::main]
async fn main() -> Result<()> {
    let setup = Setup::open(Some("learning")).await?;
    let store = setup.trace_store()?;
    let experiences_file = FileExperienceStore::new(setup.dir.path().join(".reson/experiences.md"));
    let mut experiences = Experiences::new(Arc::new(experiences_file.clone()));
    experiences.utility_model = "utility".into();
    // The tools the script calls, so that plugins added to the bundle do
    // not change what a request counts.
    let offered = ["goal", "read", "write", "skill", "get_experience"];
    let tools = ToolRegistry::new(setup.runtime.clone())
        .only(offered.map(str::to_owned).to_vec())
        .with_skills(Arc::new(Skills::load(&[])?))
        .with_experiences(Arc::new(experiences));
    let runner = Runner::new(store.clone(), setup.provider(), tools, Hooks::none());
    let config = RunConfig {
        skills: Some(vec!["planning".into()]),
        compaction: CompactionConfig {
            context_window: Some(6_000),
            model: Some("summarizer".into()),
            ..CompactionConfig::default()
        },
        ..RunConfig::default()
    };

    heading("1. a run that compacts");
    let task =
        Message::new(Role::User, "Write three facts about Reson to notes.txt and summarise them.");
    let mut run = runner.run(vec![task], config.clone()).await?;
    let mut levels = Vec::new();
    while let Some(event) = run.next_event().await {
        match event {
            AgentEvent::ToolStarted { name, .. } => println!("→ {name}"),
            AgentEvent::Compacted { level, sequences, tokens_before, tokens_after, .. } => {
                println!(
                    "[compacted at level {level}: {} messages, {tokens_before} → {tokens_after} tokens]",
                    sequences.len()
                );
                levels.push(level);
            }
            _ => {}
        }
    }
    let outcome = run.wait().await?;
    println!("{}", outcome.final_text.clone().unwrap_or_default());
    assert!(levels.contains(&1) && levels.contains(&2), "compacted at both levels: {levels:?}");
    let trace = store.get_trace(&outcome.trace_id).await?.expect("the trace");
    let all = store.get_messages(&trace.id).await?;
    assert_eq!(all.len() as u64, trace.last_sequence, "every message is still in the trace");

    heading("2. reflect");
    let params = LlmParams { model: "reflector".into(), ..LlmParams::default() };
    let reflection = experience::reflect(
        &*store,
        &*setup.provider(),
        params,
        &experiences_file,
        &trace.id,
        Some("tool use"),
    )
    .await?;
    let after = store.get_trace(&trace.id).await?.expect("the trace");
    assert_eq!(after.head_sequence, trace.head_sequence, "the head did not move");
    println!("{}", std::fs::read_to_string(experiences_file.path())?);

    heading("3. a new run gets the experience");
    let task = Message::new(Role::User, "Summarise notes.txt.");
    let outcome = runner.run(vec![task], config).await?.wait().await?;
    let first = store.get_message(&outcome.trace_id, 1).await?.expect("the first message");
    println!("{}", first.text());
    let id = &reflection.experiences[0].id;
    assert!(first.text().contains(&format!("## Relevant experience\n- [{id}]")));
    Ok(())
}
