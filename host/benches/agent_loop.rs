//! Loop overhead per iteration: the runner with the real scripted provider
//! component and the echo tool component, every message and event written
//! to a file trace store (group-committed fsync, synced at the end of the
//! run), on a two-worker tokio runtime. `cargo bench -p reson --bench
//! agent_loop`.

#[path = "../../tests/support/mod.rs"]
mod support;

use criterion::{Criterion, criterion_group, criterion_main};
use reson::agent::{Hooks, RunConfig, Runner};
use reson::provider::PluginProvider;
use reson::tools::ToolRegistry;
use reson::trace::{Durability, FileTraceStore, Message, Role};
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};

const TOOL_TURNS: usize = 20;

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let dir = support::TestDir::new();
    dir.install(support::plugins(), "scripted").install(support::plugins(), "echo");
    let mut turns: Vec<serde_json::Value> = (0..TOOL_TURNS)
        .map(|i| json!({ "tool_calls": [{ "name": "echo", "arguments": { "text": format!("step {i}") } }] }))
        .collect();
    turns.push(json!({ "text": "done" }));
    let script = dir.path().join("script.json");
    std::fs::write(&script, json!({ "turns": turns }).to_string()).unwrap();
    let runtime = rt.block_on(dir.open(&format!(
        "[plugins.scripted]\ndirs = [{{ path = \".\", access = \"read\" }}]\nconfig = {{ script = \"{}\" }}\n",
        script.display()
    )));
    let store =
        Arc::new(FileTraceStore::open(dir.path().join("traces"), Durability::Batched).unwrap());
    let runner = Runner::new(
        store,
        Arc::new(PluginProvider::new(runtime.clone(), "scripted")),
        ToolRegistry::new(runtime),
        Hooks::none(),
    );
    let per_iteration = || {
        rt.block_on(async {
            let start = Instant::now();
            let outcome = runner
                .run(vec![Message::new(Role::User, "echo twenty times")], RunConfig::default())
                .await
                .unwrap()
                .wait()
                .await
                .unwrap();
            assert_eq!(outcome.iterations as usize, TOOL_TURNS + 1);
            start.elapsed() / outcome.iterations
        })
    };

    let mut group = c.benchmark_group("agent-loop");
    group.sample_size(20);
    group.bench_function("one iteration (model + echo tool + durable trace)", |b| {
        b.iter_custom(|n| (0..n).map(|_| per_iteration()).sum::<Duration>())
    });
    group.finish();

    let mut samples: Vec<Duration> = (0..30).map(|_| per_iteration()).collect();
    samples.sort();
    println!("\n== figures ==");
    println!(
        "agent loop, median per iteration: {:>8.3} ms  (target <= 1 ms)",
        samples[15].as_secs_f64() * 1e3
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);
