//! The overhead of spawning a sub-agent: a parent's `agent` call whose
//! child has one scripted turn (sub-trace created, the child's model call
//! through the real scripted provider component, result back, the parent's
//! goal tree and collaborators updated), against the same parent making a
//! built-in `goal` call instead, on a two-worker tokio runtime, with a file
//! trace store (group-committed fsync) and with the in-memory store.
//! `cargo bench -p reson --bench sub_agent`; the last two lines are the
//! figures, with their target.

#[path = "../../tests/support/mod.rs"]
mod support;

use criterion::{Criterion, criterion_group, criterion_main};
use reson::agent::{Hooks, RunConfig, Runner, SubAgentSettings};
use reson::provider::PluginProvider;
use reson::tools::ToolRegistry;
use reson::trace::{Durability, FileTraceStore, MemoryTraceStore, Message, Role, TraceStore};
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let dir = support::TestDir::new();
    dir.install(support::plugins(), "scripted");
    let script = dir.path().join("script.json");
    let parent = |call: serde_json::Value| json!([{ "tool_calls": [call] }, { "text": "done" }]);
    std::fs::write(
        &script,
        json!({
            "turns": parent(json!({ "name": "agent", "arguments": { "task": "child task" } })),
            "agents": [
                { "match": "child task", "turns": [{ "text": "child done" }] },
                { "match": "baseline", "turns":
                    parent(json!({ "name": "goal", "arguments": { "action": "add", "description": "x" } })) }
            ]
        })
        .to_string(),
    )
    .unwrap();
    let runtime = rt.block_on(dir.open(&format!(
        "[plugins.scripted]\ndirs = [{{ path = \".\", access = \"read\" }}]\nconfig = {{ script = \"{}\" }}\n",
        script.display()
    )));
    let file: Arc<dyn TraceStore> =
        Arc::new(FileTraceStore::open(dir.path().join("traces"), Durability::Batched).unwrap());
    let memory: Arc<dyn TraceStore> = Arc::new(MemoryTraceStore::new());
    let runner = |store: &Arc<dyn TraceStore>| {
        Runner::new(
            store.clone(),
            Arc::new(PluginProvider::new(runtime.clone(), "scripted")),
            ToolRegistry::new(runtime.clone()),
            Hooks::none(),
        )
        .with_sub_agents(SubAgentSettings::default())
    };
    let (on_file, in_memory) = (runner(&file), runner(&memory));
    let run = |runner: &Runner, task: &str| {
        rt.block_on(async {
            let start = Instant::now();
            let outcome = runner
                .run(vec![Message::new(Role::User, task)], RunConfig::default())
                .await
                .unwrap()
                .wait()
                .await
                .unwrap();
            assert_eq!(outcome.final_text.as_deref(), Some("done"));
            start.elapsed()
        })
    };

    let mut group = c.benchmark_group("sub-agent");
    group.sample_size(20);
    group.bench_function("parent run with one agent call (child: one turn)", |b| {
        b.iter_custom(|n| (0..n).map(|_| run(&on_file, "parent")).sum::<Duration>())
    });
    group.bench_function("parent run with one goal call instead", |b| {
        b.iter_custom(|n| (0..n).map(|_| run(&on_file, "baseline")).sum::<Duration>())
    });
    group.finish();

    println!("\n== figures ==");
    for (store, runner) in [("file", &on_file), ("memory", &in_memory)] {
        // Interleaved, so both sides see the same machine.
        let (mut with, mut without): (Vec<Duration>, Vec<Duration>) =
            (0..60).map(|_| (run(runner, "parent"), run(runner, "baseline"))).unzip();
        with.sort();
        without.sort();
        let overhead = with[30].saturating_sub(without[30]);
        println!(
            "{store} store: parent run {:.3} ms with an agent call, {:.3} ms with a goal call \
             (medians); sub-agent spawn overhead {:.3} ms  (target <= 2 ms)",
            with[30].as_secs_f64() * 1e3,
            without[30].as_secs_f64() * 1e3,
            overhead.as_secs_f64() * 1e3
        );
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
