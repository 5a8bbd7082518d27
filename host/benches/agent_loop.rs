//! Loop overhead per iteration: the runner with the real scripted provider
//! component and the echo tool component, every message and event written
//! to a file trace store (group-committed fsync, synced at the end of the
//! run), on a two-worker tokio runtime; then the same loop with
//! OpenTelemetry off (the default: no exporter) and on (exporting to an
//! OTLP/HTTP receiver on 127.0.0.1, to a collector that is down, and to one
//! that never answers), interleaved, so their ratios are from one run.
//! `cargo bench -p reson --bench agent_loop`.

#[path = "../../tests/support/mod.rs"]
mod support;

use criterion::{Criterion, criterion_group, criterion_main};
use reson::agent::{Hooks, RunConfig, Runner};
use reson::config::TelemetryConfig;
use reson::provider::PluginProvider;
use reson::telemetry::Telemetry;
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
    let exporting_to = |endpoint: String| {
        let config =
            TelemetryConfig { otlp_endpoint: Some(endpoint), ..TelemetryConfig::default() };
        let telemetry = rt.block_on(async { Telemetry::from_config(&config).unwrap() });
        assert!(telemetry.is_on());
        runner.clone().with_telemetry(telemetry)
    };
    let exporting = exporting_to(rt.block_on(otlp_receiver()));
    // Nothing listens on a port just freed; a listener that never accepts
    // past the kernel's backlog never answers.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let down = exporting_to(format!("http://{}", closed.local_addr().unwrap()));
    drop(closed);
    let silent_listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent = exporting_to(format!("http://{}", silent_listener.local_addr().unwrap()));
    let per_iteration = |runner: &Runner| {
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
        b.iter_custom(|n| (0..n).map(|_| per_iteration(&runner)).sum::<Duration>())
    });
    group.bench_function("one iteration, exporting OpenTelemetry", |b| {
        b.iter_custom(|n| (0..n).map(|_| per_iteration(&exporting)).sum::<Duration>())
    });
    group.finish();

    let (mut off, mut on, mut to_down, mut to_silent) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..30 {
        off.push(per_iteration(&runner));
        on.push(per_iteration(&exporting));
        to_down.push(per_iteration(&down));
        to_silent.push(per_iteration(&silent));
    }
    drop(silent_listener);
    let (off, on) = (median_ms(off), median_ms(on));
    let (to_down, to_silent) = (median_ms(to_down), median_ms(to_silent));
    println!("\n== figures ==");
    println!("agent loop, median per iteration: {off:>8.3} ms  (target <= 1 ms)");
    println!(
        "  with OpenTelemetry exporting:   {on:>8.3} ms  ({:.3}x; off, the default, is the line above)",
        on / off
    );
    println!("    to a collector that is down:  {to_down:>8.3} ms  ({:.3}x)", to_down / off);
    println!("    to one that never answers:    {to_silent:>8.3} ms  ({:.3}x)", to_silent / off);
}

fn median_ms(mut samples: Vec<Duration>) -> f64 {
    samples.sort();
    samples[samples.len() / 2].as_secs_f64() * 1e3
}

/// An OTLP/HTTP receiver on 127.0.0.1 that takes every export; its base URL.
async fn otlp_receiver() -> String {
    let ok = || async { Vec::<u8>::new() };
    let app = axum::Router::new()
        .route("/v1/traces", axum::routing::post(ok))
        .route("/v1/metrics", axum::routing::post(ok));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

criterion_group!(benches, bench);
criterion_main!(benches);
