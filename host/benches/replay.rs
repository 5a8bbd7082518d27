//! Replay: how many recorded `fs` calls per second `replay` runs again
//! against their recordings (a trace of many `read` calls, each through
//! the whole host path), and what recording effects costs a plugin call
//! (`echo` with and without a recorder).
//!
//! `cargo bench -p reson --bench replay --profile dev` prints criterion's
//! figures and, last, the medians of interleaved rounds.

#[path = "../../tests/support/mod.rs"]
mod support;

use criterion::{Criterion, criterion_group, criterion_main};
use reson::capability::effects::Effects;
use reson::plugin::{CallContext, Runtime};
use reson::replay::{CallRecording, EFFECTS, record_key, replay};
use reson::tools::{ToolContext, ToolSource};
use reson::trace::{MemoryTraceStore, Message, Role, ToolCall, Trace, TraceMode, TraceStore};
use std::hint::black_box;
use support::{median, ns_per_call};

/// Recorded `read` calls in the replayed trace.
const CALLS: usize = 100;

/// A trace of `CALLS` recorded `read` calls of the `fs` plugin.
async fn recorded_trace(store: &MemoryTraceStore, runtime: &Runtime) -> String {
    let mut trace = Trace::new(TraceMode::Agent, "read a lot", "default");
    store.create_trace(&trace).await.unwrap();
    store.add_message(&mut trace, Message::new(Role::User, "read"), None).await.unwrap();
    for i in 0..CALLS {
        let arguments = serde_json::json!({ "path": "notes.txt" }).to_string();
        let call = ToolCall { id: format!("call_{i}"), name: "read".into(), arguments };
        let mut asking = Message::new(Role::Assistant, "");
        asking.tool_calls = vec![call.clone()];
        store.add_message(&mut trace, asking, None).await.unwrap();
        let effects = Effects::record();
        let mut context = ToolContext {
            call_id: call.id.clone(),
            effects: Some(effects.clone()),
            ..ToolContext::default()
        };
        let result = ToolSource::call(runtime, &call, &mut context).await;
        assert!(result.ok, "{}", result.text);
        let recording = CallRecording::new(&call, &result, &effects).unwrap();
        let value = serde_json::to_value(&recording).unwrap();
        store.put_record(&trace.id, EFFECTS, &record_key(&call.id), &value).await.unwrap();
        let answer = Message::tool_result(&call, result.text);
        store.add_message(&mut trace, answer, None).await.unwrap();
    }
    trace.id
}

async fn replay_all(store: &MemoryTraceStore, id: &str, runtime: &Runtime) {
    let report = replay(store, id, runtime, None, 0).await.unwrap();
    assert!(report.identical() && report.replayed == CALLS, "{report}");
}

async fn echo(runtime: &Runtime, effects: Option<Effects>) {
    let context = CallContext { effects, ..CallContext::default() };
    let out = runtime.call_tool("echo", r#"{"text":"hi"}"#, &context).await.unwrap();
    assert_eq!(out.text, "hi");
}

fn bench(c: &mut Criterion) {
    let rt =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let dir = support::TestDir::new();
    dir.install(support::plugins(), "fs").install(support::plugins(), "echo");
    std::fs::write(dir.workspace().join("notes.txt"), "one\ntwo\nthree\n".repeat(50)).unwrap();
    let runtime = rt.block_on(
        dir.open("[plugins.fs]\ndirs = [{ path = \"workspace\", access = \"read-write\" }]\n"),
    );
    let store = MemoryTraceStore::new();
    let id = rt.block_on(recorded_trace(&store, &runtime));

    let mut group = c.benchmark_group("replay");
    group.sample_size(10);
    group.bench_function(format!("replay {CALLS} fs calls"), |b| {
        b.to_async(&rt).iter(|| replay_all(black_box(&store), &id, &runtime))
    });
    group.bench_function("echo, no recorder", |b| b.to_async(&rt).iter(|| echo(&runtime, None)));
    group.bench_function("echo, recording", |b| {
        b.to_async(&rt).iter(|| echo(&runtime, Some(Effects::record())))
    });
    group.finish();

    // Interleaved rounds, so drift on a shared machine hits all alike.
    let (mut replays, mut bare, mut recorded) = (Vec::new(), Vec::new(), Vec::new());
    rt.block_on(async {
        for _ in 0..7 {
            replays.push(ns_per_call(async || replay_all(&store, &id, &runtime).await, 1).await);
            bare.push(ns_per_call(async || echo(&runtime, None).await, 50).await);
            let record = async || echo(&runtime, Some(Effects::record())).await;
            recorded.push(ns_per_call(record, 50).await);
        }
    });
    let (replay_ns, bare, recorded) = (median(replays), median(bare), median(recorded));
    println!("\n== figures ==");
    println!("replay of {CALLS} fs `read` calls:  {:>9.2} ms", replay_ns / 1e6);
    println!("replay speed:                   {:>9.0} calls/s", CALLS as f64 / (replay_ns / 1e9));
    println!("echo, no recorder:              {:>9.1} µs", bare / 1e3);
    println!("echo, recording:                {:>9.1} µs", recorded / 1e3);
    println!(
        "recording overhead per call:    {:>9.1} µs ({:+.1} %)",
        (recorded - bare) / 1e3,
        (recorded / bare - 1.0) * 100.0
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);
