//! What a JavaScript tool (componentize-js, StarlingMonkey) costs next to a
//! Rust one serving the same `echo`: a fresh-instance call through the host
//! path against a call on a kept-warm instance (for both, and whether the
//! kept one slows down call after call), a plugin load from the
//! compiled-code cache, and one compile.
//!
//! `cargo bench -p reson --bench js_tool` installs componentize-js from npm
//! into target/toolchains/js if needed (as the tests do), prints criterion's
//! figures and, last, a `== figures ==` summary measured in the same run.

#[path = "../../tests/support/mod.rs"]
mod support;

use criterion::{Criterion, criterion_group, criterion_main};
use reson::plugin::{CallContext, Runtime};
use std::hint::black_box;
use std::path::Path;
use std::time::{Duration, Instant};

const ARGS: &str = r#"{"text":"hello from the benchmark"}"#;

/// A runtime serving `wasm` as plugin `hostile` (both guests list `echo`),
/// with its instances kept warm between calls if `warm`.
async fn runtime(dir: &support::TestDir, wasm: &Path, warm: bool) -> Runtime {
    std::fs::copy(wasm, dir.plugins().join("hostile.wasm")).unwrap();
    let mut manifest =
        std::fs::read_to_string(support::test_plugins().join("hostile.toml")).unwrap();
    if warm {
        manifest.push_str("\n[instance]\nkeep_warm = true\n");
    }
    std::fs::write(dir.plugins().join("hostile.toml"), manifest).unwrap();
    dir.open("").await
}

/// What a reload compiles: nothing (a load from the cache), the component
/// with its functions already compiled (a rebuild after a small change),
/// or everything.
#[derive(Clone, Copy, PartialEq)]
enum Compile {
    Nothing,
    Component,
    Everything,
}

/// Reloads `hostile` after touching its manifest, compiling what `compile`
/// says; returns how long the reload took.
fn reload(
    rt: &tokio::runtime::Runtime,
    runtime: &Runtime,
    dir: &support::TestDir,
    flip: &mut u64,
    compile: Compile,
) -> Duration {
    let manifest = dir.plugins().join("hostile.toml");
    let text = std::fs::read_to_string(&manifest).unwrap();
    *flip += 1;
    std::fs::write(&manifest, format!("{text}\n# {flip}\n")).unwrap();
    if compile != Compile::Nothing {
        support::forget_compiled(runtime, "hostile", compile == Compile::Everything);
    }
    let start = Instant::now();
    rt.block_on(runtime.reload(&["hostile".to_owned()]));
    let took = start.elapsed();
    let from_cache = runtime.plugins()[0].from_cache;
    assert_eq!(from_cache, compile == Compile::Nothing, "{:?}", runtime.plugins()[0].status);
    took
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn bench(c: &mut Criterion) {
    let rt =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let js_wasm = support::js::guest("hostile", "hostile");
    let rust_wasm = support::test_plugins().join("hostile.wasm");
    let (js_dir, rust_dir) = (support::TestDir::new(), support::TestDir::new());
    let js = rt.block_on(runtime(&js_dir, &js_wasm, false));
    let rust = rt.block_on(runtime(&rust_dir, &rust_wasm, false));
    let (warm_dir, rust_warm_dir) = (support::TestDir::new(), support::TestDir::new());
    let js_warm = rt.block_on(runtime(&warm_dir, &js_wasm, true));
    let rust_warm = rt.block_on(runtime(&rust_warm_dir, &rust_wasm, true));
    let ctx = CallContext::default();
    let ctx = &ctx;
    let call =
        async |runtime: &Runtime| black_box(runtime.call_tool("echo", ARGS, ctx).await.unwrap());
    assert_eq!(rt.block_on(call(&js)).text, rt.block_on(call(&rust)).text);

    let mut calls = c.benchmark_group("fresh-instance call");
    for (label, runtime) in [
        ("JavaScript echo", &js),
        ("JavaScript echo, kept warm", &js_warm),
        ("Rust echo", &rust),
        ("Rust echo, kept warm", &rust_warm),
    ] {
        calls.bench_function(label, |b| {
            b.to_async(&rt).iter(|| async move {
                black_box(runtime.call_tool("echo", ARGS, ctx).await.unwrap())
            })
        });
    }
    calls.finish();

    let mut flip = 0;
    let mut load = c.benchmark_group("plugin load from cache");
    load.sample_size(10);
    load.bench_function("JavaScript", |b| {
        b.iter_custom(|n| {
            (0..n).map(|_| reload(&rt, &js, &js_dir, &mut flip, Compile::Nothing)).sum()
        })
    });
    load.bench_function("Rust", |b| {
        b.iter_custom(|n| {
            (0..n).map(|_| reload(&rt, &rust, &rust_dir, &mut flip, Compile::Nothing)).sum()
        })
    });
    load.finish();

    let per_call = |runtime: &Runtime| {
        rt.block_on(async {
            let mut samples = Vec::with_capacity(200);
            for _ in 0..200 {
                let start = Instant::now();
                drop(call(runtime).await);
                samples.push(start.elapsed());
            }
            median(samples)
        })
    };
    // Interleaved rounds, so that a busy moment of the machine falls on all
    // four alike.
    let mut rounds = [const { Vec::new() }; 4];
    for _ in 0..5 {
        for (i, runtime) in [&js, &js_warm, &rust, &rust_warm].into_iter().enumerate() {
            rounds[i].push(per_call(runtime));
        }
    }
    let [js_call, warm_call, rust_call, rust_warm_call] = rounds.map(median);
    // Whether a kept instance's calls get slower as its heap fills: the
    // median of each 200 calls in a row on one instance.
    let drift = |runtime: &Runtime| -> Vec<String> {
        (0..10).map(|_| format!("{:.3}", per_call(runtime).as_secs_f64() * 1e3)).collect()
    };
    let (js_drift, rust_drift) = (drift(&js_warm), drift(&rust_warm));
    let js_load =
        median((0..15).map(|_| reload(&rt, &js, &js_dir, &mut flip, Compile::Nothing)).collect());
    let rust_load = median(
        (0..15).map(|_| reload(&rt, &rust, &rust_dir, &mut flip, Compile::Nothing)).collect(),
    );
    let js_compile = reload(&rt, &js, &js_dir, &mut flip, Compile::Everything);
    let rust_compile = reload(&rt, &rust, &rust_dir, &mut flip, Compile::Everything);
    let js_recompile = reload(&rt, &js, &js_dir, &mut flip, Compile::Component);
    let rust_recompile = reload(&rt, &rust, &rust_dir, &mut flip, Compile::Component);
    let kb = |p: &Path| std::fs::metadata(p).unwrap().len() / 1024;
    println!("\n== figures ==");
    println!("                    {:>12} {:>12}", "JavaScript", "Rust");
    println!("component size      {:>9} KB {:>9} KB", kb(&js_wasm), kb(&rust_wasm));
    println!(
        "fresh call          {:>9.3} ms {:>9.3} ms",
        js_call.as_secs_f64() * 1e3,
        rust_call.as_secs_f64() * 1e3
    );
    println!(
        "kept-warm call      {:>9.3} ms {:>9.3} ms",
        warm_call.as_secs_f64() * 1e3,
        rust_warm_call.as_secs_f64() * 1e3
    );
    println!(
        "kept / fresh        {:>11.2}x {:>11.2}x",
        warm_call.as_secs_f64() / js_call.as_secs_f64(),
        rust_warm_call.as_secs_f64() / rust_call.as_secs_f64()
    );
    println!("kept, each 200 calls in a row (ms): JavaScript {}", js_drift.join(" "));
    println!("                                    Rust       {}", rust_drift.join(" "));
    println!(
        "load from cache     {:>9.3} ms {:>9.3} ms",
        js_load.as_secs_f64() * 1e3,
        rust_load.as_secs_f64() * 1e3
    );
    println!(
        "load with compile   {:>9.3} s  {:>9.3} s",
        js_compile.as_secs_f64(),
        rust_compile.as_secs_f64()
    );
    println!(
        "  functions cached  {:>9.3} s  {:>9.3} s",
        js_recompile.as_secs_f64(),
        rust_recompile.as_secs_f64()
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);
