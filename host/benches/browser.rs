//! What the host's browser costs through the bundled `browser` plugin, on
//! a local page: a navigate + read round trip (two tool calls: load the
//! page, read it as Markdown), a viewport screenshot, and a trace's first
//! call: with the start of a browser (Chromium and its profile), and in a
//! browser kept up between traces (`[sandbox] warm_browser_ms`), where it
//! makes a browser context.
//!
//! `cargo bench -p reson --bench browser` prints criterion's figures and,
//! last, the medians of interleaved rounds.

#[path = "../../tests/support/mod.rs"]
mod support;

use axum::Router;
use axum::response::Html;
use axum::routing::get;
use criterion::{Criterion, criterion_group, criterion_main};
use reson::plugin::{CallContext, Runtime};
use serde_json::json;
use std::path::Path;
use std::time::{Duration, Instant};
use support::{median, ns_per_call};

const PAGE: &str = r#"<html><head><title>Bench</title></head><body>
<h1>Results</h1><p>Some text with a <a href="/other">link</a>.</p>
<ul><li>one</li><li>two</li><li>three</li></ul>
<form><label for="q">Query</label><input id="q" name="q"><button>Go</button></form>
</body></html>"#;

async fn site() -> String {
    let app = Router::new()
        .route("/", get(|| async { Html(PAGE) }))
        .route("/other", get(|| async { Html("<title>Other</title><p>other</p>") }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    base
}

async fn call(runtime: &Runtime, trace: &str, tool: &str, args: serde_json::Value) -> String {
    let context = CallContext { trace_id: Some(trace.to_owned()), ..CallContext::default() };
    runtime.call_tool(tool, &args.to_string(), &context).await.unwrap().text
}

async fn round_trip(runtime: &Runtime, url: &str) {
    call(runtime, "bench", "browser_navigate", json!({ "url": url })).await;
    let text = call(runtime, "bench", "browser_read", json!({})).await;
    assert!(text.contains("# Results"), "{text}");
}

async fn screenshot(runtime: &Runtime) {
    let context = CallContext { trace_id: Some("bench".into()), ..CallContext::default() };
    let out = runtime.call_tool("browser_screenshot", "{}", &context).await.unwrap();
    assert!(out.images[0].data.starts_with(b"\x89PNG"));
}

fn bench(c: &mut Criterion) {
    support::apt::ensure(
        || Path::new(reson::capability::browser::CHROMIUM).exists(),
        &["chromium"],
    );
    let rt =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let dir = support::TestDir::new();
    dir.install(support::plugins(), "browser");
    let base = rt.block_on(site());
    let runtime = rt.block_on(dir.open(&format!("[plugins.browser]\nbrowser = [\"{base}/*\"]\n")));
    let url = format!("{base}/");

    let started = Instant::now();
    rt.block_on(call(&runtime, "first", "browser_navigate", json!({ "url": url })));
    let first = started.elapsed();
    rt.block_on(runtime.close_browser("first"));
    // A run that offers the browser tools starts its browser as it starts
    // (`prepare_run`): the first call comes after the model's first
    // answer, here at once and after a model turn of `turn`.
    let first_after = |trace: &str, turn: Duration| {
        let tools = ["browser_navigate".to_owned()];
        let entered = rt.enter();
        runtime.prepare_run(trace, &tools);
        drop(entered);
        rt.block_on(async { tokio::time::sleep(turn).await });
        let started = Instant::now();
        rt.block_on(call(&runtime, trace, "browser_navigate", json!({ "url": url })));
        let took = started.elapsed();
        rt.block_on(runtime.close_browser(trace));
        took
    };
    let ahead_at_once = first_after("ahead-0", Duration::ZERO);
    let ahead_after_turn = first_after("ahead-1", Duration::from_secs(1));
    rt.block_on(round_trip(&runtime, &url));

    // A trace's first call, each in a new trace: a browser of its own
    // against a context in the kept browser (already up: one trace
    // started it), the call made at once, or after a model turn of 1 s
    // in a run that made its context and first page ahead.
    let kept_dir = support::TestDir::new();
    kept_dir.install(support::plugins(), "browser");
    let kept = rt.block_on(kept_dir.open(&format!(
        "[plugins.browser]\nbrowser = [\"{base}/*\"]\n[sandbox]\nwarm_browser_ms = 600000\n"
    )));
    let first_in = |runtime: &Runtime, trace: &str, prepare: bool| {
        if prepare {
            let entered = rt.enter();
            runtime.prepare_run(trace, &["browser_navigate".to_owned()]);
            drop(entered);
            rt.block_on(async { tokio::time::sleep(Duration::from_secs(1)).await });
        }
        let started = Instant::now();
        rt.block_on(call(runtime, trace, "browser_navigate", json!({ "url": url })));
        let took = started.elapsed().as_nanos() as f64;
        rt.block_on(runtime.close_browser(trace));
        took
    };
    first_in(&kept, "warm-up", false);
    let (mut own_firsts, mut kept_firsts, mut kept_ahead) = (Vec::new(), Vec::new(), Vec::new());
    // Seven of each, fifteen contexts in all: under the sixteen one kept
    // browser serves.
    for round in 0..7 {
        own_firsts.push(first_in(&runtime, &format!("own-{round}"), false));
        kept_firsts.push(first_in(&kept, &format!("kept-{round}"), false));
        kept_ahead.push(first_in(&kept, &format!("kept-ahead-{round}"), true));
    }
    rt.block_on(kept.close_browsers());

    let mut group = c.benchmark_group("browser");
    group.sample_size(20).measurement_time(Duration::from_secs(10));
    group.bench_function("navigate + read", |b| {
        b.to_async(&rt).iter(|| async { round_trip(&runtime, &url).await })
    });
    group.bench_function("screenshot (viewport)", |b| {
        b.to_async(&rt).iter(|| async { screenshot(&runtime).await })
    });
    group.finish();

    // Interleaved rounds, so drift on a shared machine hits both alike.
    let (mut trips, mut shots) = (Vec::new(), Vec::new());
    rt.block_on(async {
        for _ in 0..7 {
            trips.push(ns_per_call(async || round_trip(&runtime, &url).await, 5).await);
            shots.push(ns_per_call(async || screenshot(&runtime).await, 5).await);
        }
    });
    rt.block_on(runtime.close_browsers());
    println!("\n== figures ==");
    println!(
        "first call of a trace (browser start + navigate): {:>8.1} ms",
        first.as_secs_f64() * 1e3
    );
    println!(
        "  started with its run, the call at once:         {:>8.1} ms",
        ahead_at_once.as_secs_f64() * 1e3
    );
    println!(
        "  started with its run, the call after a 1 s turn: {:>7.1} ms",
        ahead_after_turn.as_secs_f64() * 1e3
    );
    println!(
        "first call of a new trace, medians of 7 interleaved: own browser {:.1} ms; in the kept \
         browser {:.1} ms, after a 1 s turn of a run {:.1} ms",
        median(own_firsts) / 1e6,
        median(kept_firsts) / 1e6,
        median(kept_ahead) / 1e6
    );
    println!("navigate + read round trip (2 tool calls):       {:>8.1} ms", median(trips) / 1e6);
    println!("viewport screenshot (1 tool call, 1280x900 PNG):  {:>8.1} ms", median(shots) / 1e6);
}

criterion_group!(benches, bench);
criterion_main!(benches);
