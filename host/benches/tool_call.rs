//! Tool-call cost through the whole host path against the bare async
//! wasmtime fresh-instance call of the same component, a kept instance's
//! call against a live bare instance's (with and without the epoch checks
//! the host's deadlines need), plugin load from the
//! compiled-code cache against a compile, and tool-call throughput with a
//! fresh instance per call and many callers on a two-worker runtime. A
//! fresh call made in a task enters the spare instance its plugin made
//! after the last call (`[sandbox] spare_instances`, the default); the same
//! call with the instance built on its path is measured beside it, from a
//! task of the runtime as an agent's calls come, spaced: in a host busy
//! with other tasks, and after the host idled; and back to back from
//! outside any task, where no spare is made.
//!
//! `cargo bench -p reson --bench tool_call` prints criterion's figures and,
//! last, the ratios and the throughput measured interleaved in one run.

#[path = "../../tests/support/mod.rs"]
mod support;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use reson::plugin::{CallContext, Runtime};
use std::hint::black_box;
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};
use support::{median, ns_per_call};
use wasmtime::component::{Component, HasSelf, Linker, ResourceTable};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, Store};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

mod bare {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "reson:plugin/tool-plugin",
        imports: { default: async },
        exports: { default: async },
    });
}
use bare::reson::plugin::{config, http, log, process, types};

/// The least a host can give the echo component: WASI and import stubs.
struct Bare {
    wasi: WasiCtx,
    table: ResourceTable,
}

impl WasiView for Bare {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}
impl types::Host for Bare {}
impl log::Host for Bare {
    async fn log(&mut self, _: log::Level, _: String) {}
}
impl config::Host for Bare {
    async fn get(&mut self, _: String) -> Option<String> {
        None
    }
    async fn all(&mut self) -> Vec<(String, String)> {
        Vec::new()
    }
}
impl http::HostBodyStream for Bare {
    async fn read(
        &mut self,
        _: wasmtime::component::Resource<http::BodyStream>,
        _: u32,
    ) -> Result<Option<Vec<u8>>, http::HttpError> {
        Ok(None)
    }
    async fn drop(
        &mut self,
        _: wasmtime::component::Resource<http::BodyStream>,
    ) -> wasmtime::Result<()> {
        Ok(())
    }
}
impl http::Host for Bare {
    async fn send(&mut self, _: http::Request) -> Result<http::Response, http::HttpError> {
        Err(http::HttpError::Denied(String::new()))
    }
    async fn send_streaming(
        &mut self,
        _: http::Request,
    ) -> Result<http::StreamingResponse, http::HttpError> {
        Err(http::HttpError::Denied(String::new()))
    }
}
impl process::Host for Bare {
    async fn run(&mut self, _: process::Command) -> Result<process::Output, process::ProcessError> {
        Err(process::ProcessError::Denied(String::new()))
    }
}

struct BareEcho {
    engine: Engine,
    pre: bare::ToolPluginPre<Bare>,
}

impl BareEcho {
    fn new(wasm: &std::path::Path, epochs: bool) -> Self {
        // The host's pool settings (plugin/engine.rs), so that the ratio
        // measures what the host adds, not how its pool is tuned.
        let mut pool = PoolingAllocationConfig::default();
        pool.decommit_batch_size(16).table_keep_resident(64 << 10);
        if PoolingAllocationConfig::is_pagemap_scan_available() {
            pool.pagemap_scan(wasmtime::Enabled::Yes).linear_memory_keep_resident(1 << 20);
        }
        let mut config = Config::new();
        config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        // Off, as bare wasmtime comes: a guest that loops then runs until
        // the process ends. On, as the host has it for its deadlines: every
        // function entry and loop of the guest checks the epoch.
        config.epoch_interruption(epochs);
        let engine = Engine::new(&config).unwrap();
        let component = Component::from_file(&engine, wasm).unwrap();
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker).unwrap();
        // Interface by interface: the echo component imports no browser.
        types::add_to_linker::<_, HasSelf<_>>(&mut linker, |s| s).unwrap();
        log::add_to_linker::<_, HasSelf<_>>(&mut linker, |s| s).unwrap();
        config::add_to_linker::<_, HasSelf<_>>(&mut linker, |s| s).unwrap();
        http::add_to_linker::<_, HasSelf<_>>(&mut linker, |s| s).unwrap();
        process::add_to_linker::<_, HasSelf<_>>(&mut linker, |s| s).unwrap();
        let pre = bare::ToolPluginPre::new(linker.instantiate_pre(&component).unwrap()).unwrap();
        Self { engine, pre }
    }

    async fn instance(&self) -> LiveEcho {
        let state = Bare { wasi: WasiCtx::builder().build(), table: ResourceTable::new() };
        let mut store = Store::new(&self.engine, state);
        store.set_epoch_deadline(u64::MAX);
        let plugin = self.pre.instantiate_async(&mut store).await.unwrap();
        LiveEcho { store, plugin }
    }

    /// A call on a fresh instance, as the host calls by default.
    async fn call(&self, args: &String) -> String {
        self.instance().await.call(args).await
    }
}

/// One bare instance entered call after call: what a kept instance of the
/// host is measured against.
struct LiveEcho {
    store: Store<Bare>,
    plugin: bare::ToolPlugin,
}

impl LiveEcho {
    async fn call(&mut self, args: &String) -> String {
        let ctx = bare::exports::reson::plugin::tool::CallContext {
            call_id: String::new(),
            trace_id: None,
            cwd: None,
        };
        self.plugin
            .reson_plugin_tool()
            .call_call(&mut self.store, "echo", args, &ctx)
            .await
            .unwrap()
            .unwrap()
            .text
    }
}

const ARGS: &str = r#"{"text":"hello from the benchmark"}"#;

/// [`ARGS`] in the form the generated bindings take.
static BARE_ARGS: LazyLock<String> = LazyLock::new(|| ARGS.to_owned());

/// Callers running at once in the throughput figures.
const CALLERS: usize = 64;

async fn host_runtime(dir: &support::TestDir) -> Runtime {
    dir.install(support::plugins(), "echo");
    dir.open("").await
}

/// The echo plugin, each fresh call's instance built on its path
/// (`[sandbox] spare_instances = false`).
async fn built_runtime(dir: &support::TestDir) -> Runtime {
    dir.install(support::plugins(), "echo");
    dir.open("[sandbox]\nspare_instances = false\n").await
}

/// What the host does between two spaced calls.
#[derive(Clone, Copy)]
enum Pause {
    /// Other tasks run for 50 µs (yielding to them): a busy host.
    Busy,
    /// Nothing for 1 ms: the workers park.
    Idle,
}

/// The median latency of `calls` echo calls, each after `pause`.
async fn spaced(runtime: &Runtime, pause: Pause, calls: usize) -> f64 {
    let ctx = CallContext::default();
    let mut times = Vec::with_capacity(calls);
    for _ in 0..calls {
        match pause {
            Pause::Busy => {
                let until = Instant::now() + Duration::from_micros(50);
                while Instant::now() < until {
                    tokio::task::yield_now().await;
                }
            }
            Pause::Idle => tokio::time::sleep(Duration::from_millis(1)).await,
        }
        let start = Instant::now();
        drop(black_box(runtime.call_tool("echo", ARGS, &ctx).await.unwrap()));
        times.push(start.elapsed().as_nanos() as f64);
    }
    median(times)
}

/// The echo plugin with `[instance] keep_warm`, in a directory of its own.
async fn warm_runtime(dir: &support::TestDir) -> Runtime {
    dir.install(support::plugins(), "echo");
    let manifest = dir.plugins().join("echo.toml");
    let text = std::fs::read_to_string(&manifest).unwrap();
    std::fs::write(&manifest, format!("{text}\n[instance]\nkeep_warm = true\n")).unwrap();
    dir.open("").await
}

/// How long `calls` calls take, spread over [`CALLERS`] tasks that each
/// call `one` in a loop, all at once.
async fn spread<F, Fut>(calls: u64, one: F) -> Duration
where
    F: Fn() -> Fut + Clone + Send + 'static,
    Fut: Future<Output = ()> + Send,
{
    let callers = CALLERS as u64;
    let start = Instant::now();
    let tasks: Vec<_> = (0..callers)
        .map(|i| {
            let one = one.clone();
            let share = calls / callers + u64::from(i < calls % callers);
            tokio::spawn(async move {
                for _ in 0..share {
                    one().await;
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    start.elapsed()
}

fn bench(c: &mut Criterion) {
    // The workers the throughput figures run on: this machine's two cores.
    let rt =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let dir = support::TestDir::new();
    let runtime = rt.block_on(host_runtime(&dir));
    let bare = Arc::new(BareEcho::new(&support::plugins().join("echo.wasm"), false));
    let bare_epochs = BareEcho::new(&support::plugins().join("echo.wasm"), true);
    let ctx = CallContext::default();
    assert_eq!(
        rt.block_on(bare.call(&BARE_ARGS)),
        rt.block_on(runtime.call_tool("echo", ARGS, &ctx)).unwrap().text
    );

    let warm_dir = support::TestDir::new();
    let warm = rt.block_on(warm_runtime(&warm_dir));
    let built_dir = support::TestDir::new();
    let built = rt.block_on(built_runtime(&built_dir));
    assert_eq!(
        rt.block_on(warm.call_tool("echo", ARGS, &ctx)).unwrap().text,
        "hello from the benchmark"
    );

    let (warm_ref, runtime_ref, bare_ref, ctx_ref) = (&warm, &runtime, &*bare, &ctx);
    let mut calls = c.benchmark_group("tool-call");
    calls.bench_function("host path, instance kept warm", |b| {
        b.to_async(&rt).iter(|| async move {
            black_box(warm_ref.call_tool("echo", ARGS, ctx_ref).await.unwrap())
        })
    });
    calls.bench_function("host path (lookup, schema, grants, fresh instance)", |b| {
        b.to_async(&rt).iter(|| async move {
            black_box(runtime_ref.call_tool("echo", ARGS, ctx_ref).await.unwrap())
        })
    });
    calls.bench_function("bare async wasmtime fresh instance", |b| {
        b.to_async(&rt).iter(|| async move { black_box(bare_ref.call(&BARE_ARGS).await) })
    });
    calls.finish();

    // One echo call on a runtime, for the callers of the throughput figures.
    let echo_call = |runtime: &Runtime| {
        let runtime = runtime.clone();
        move || {
            let runtime = runtime.clone();
            async move {
                let out = runtime.call_tool("echo", ARGS, &CallContext::default()).await;
                drop(black_box(out.unwrap()));
            }
        }
    };
    let host_call = echo_call(&runtime);
    let built_call = echo_call(&built);
    let bare_call = {
        let bare = bare.clone();
        move || {
            let bare = bare.clone();
            async move { drop(black_box(bare.call(&BARE_ARGS).await)) }
        }
    };
    let mut throughput = c.benchmark_group("tool-call throughput");
    throughput.throughput(Throughput::Elements(1));
    throughput.bench_function(format!("host path, {CALLERS} callers"), |b| {
        b.to_async(&rt).iter_custom(|n| spread(n, host_call.clone()))
    });
    throughput.bench_function(format!("bare async wasmtime, {CALLERS} callers"), |b| {
        b.to_async(&rt).iter_custom(|n| spread(n, bare_call.clone()))
    });
    throughput.finish();

    // Reloading with a manifest that differs each time forces a load; the
    // wasm is unchanged, so its compiled code comes from the cache.
    let manifest = dir.plugins().join("echo.toml");
    let original = std::fs::read_to_string(&manifest).unwrap();
    let mut flip = 0u64;
    let mut reload = |purge_cache: bool| {
        flip += 1;
        std::fs::write(&manifest, format!("{original}\n# {flip}\n")).unwrap();
        if purge_cache {
            support::forget_compiled(&runtime, "echo", true);
        }
        let start = Instant::now();
        rt.block_on(runtime.reload(&["echo".to_owned()]));
        let took = start.elapsed();
        let info = &runtime.plugins()[0];
        assert_eq!(info.from_cache, !purge_cache, "{:?}", info.status);
        took
    };
    let mut load = c.benchmark_group("plugin-load");
    load.sample_size(10);
    load.bench_function("from compiled cache", |b| {
        b.iter_custom(|n| (0..n).map(|_| reload(false)).sum::<Duration>())
    });
    load.bench_function("compile", |b| {
        b.iter_custom(|n| (0..n).map(|_| reload(true)).sum::<Duration>())
    });
    load.finish();

    // Ratios from interleaved rounds in this one run: noise hits both sides.
    let (mut host, mut raw, mut kept) = (Vec::new(), Vec::new(), Vec::new());
    let mut host_built = Vec::new();
    let (mut live, mut live_epochs) = (Vec::new(), Vec::new());
    let mut instance = rt.block_on(bare.instance());
    let mut instance_epochs = rt.block_on(bare_epochs.instance());
    let (mut host_rate, mut raw_rate, mut built_rate) = (Vec::new(), Vec::new(), Vec::new());
    rt.block_on(async {
        for _ in 0..15 {
            kept.push(
                ns_per_call(
                    async || drop(black_box(warm.call_tool("echo", ARGS, &ctx).await)),
                    500,
                )
                .await,
            );
            host.push(
                ns_per_call(
                    async || drop(black_box(runtime.call_tool("echo", ARGS, &ctx).await)),
                    500,
                )
                .await,
            );
            host_built.push(
                ns_per_call(
                    async || drop(black_box(built.call_tool("echo", ARGS, &ctx).await)),
                    500,
                )
                .await,
            );
            raw.push(ns_per_call(async || drop(black_box(bare.call(&BARE_ARGS).await)), 500).await);
            for (instance, times) in
                [(&mut instance, &mut live), (&mut instance_epochs, &mut live_epochs)]
            {
                times.push(
                    ns_per_call(async || drop(black_box(instance.call(&BARE_ARGS).await)), 500)
                        .await,
                );
            }
        }
        for _ in 0..5 {
            let calls = 20_000;
            host_rate.push(calls as f64 / spread(calls, host_call.clone()).await.as_secs_f64());
            raw_rate.push(calls as f64 / spread(calls, bare_call.clone()).await.as_secs_f64());
            built_rate.push(calls as f64 / spread(calls, built_call.clone()).await.as_secs_f64());
        }
    });
    // Spaced calls from a task on a worker, as a run's calls come: there a
    // spare is made on the worker's own thread once the caller waits.
    let runtimes = [runtime.clone(), built.clone(), warm.clone()];
    let spaced_figures = rt
        .block_on(rt.spawn(async move {
            let mut figures = [(); 6].map(|()| Vec::new());
            for _ in 0..7 {
                for (i, pause) in [Pause::Busy, Pause::Idle].into_iter().enumerate() {
                    let calls = if matches!(pause, Pause::Busy) { 200 } else { 50 };
                    for (j, runtime) in runtimes.iter().enumerate() {
                        figures[i * 3 + j].push(spaced(runtime, pause, calls).await);
                    }
                }
            }
            figures.map(median)
        }))
        .unwrap();
    let (host, raw, kept) = (median(host), median(raw), median(kept));
    let host_built = median(host_built);
    let (live, live_epochs) = (median(live), median(live_epochs));
    let (host_rate, raw_rate, built_rate) =
        (median(host_rate), median(raw_rate), median(built_rate));
    let cached = median((0..30).map(|_| reload(false).as_nanos() as f64).collect());
    let compiled = median((0..5).map(|_| reload(true).as_nanos() as f64).collect());
    println!("\n== figures ==");
    println!(
        "tool call, host path:        {:>9.1} µs  (fresh, back to back, outside a task)",
        host / 1e3
    );
    println!(
        "the same, spares off:        {:>9.1} µs  (spare_instances = false)",
        host_built / 1e3
    );
    for (i, pause) in ["in a busy host (50 µs of other tasks)", "after the host idled 1 ms"]
        .into_iter()
        .enumerate()
    {
        let [spare, built, kept] = [0, 1, 2].map(|j| spaced_figures[i * 3 + j] / 1e3);
        println!(
            "a call {pause}, median: spare {spare:.1} µs, built on its path {built:.1} µs \
             ({:.2}x), kept warm {kept:.1} µs",
            built / spare
        );
    }
    println!("tool call, bare wasmtime:    {:>9.1} µs", raw / 1e3);
    println!("ratio host / bare:           {:>9.3}  (target <= 1.25)", host / raw);
    println!("tool call, instance kept:    {:>9.1} µs", kept / 1e3);
    println!("tool call, bare live instance: {:>7.1} µs", live / 1e3);
    println!("ratio kept / bare live:      {:>9.3}  (target <= 1.2)", kept / live);
    println!("the same, bare with epochs:  {:>9.1} µs", live_epochs / 1e3);
    println!("ratio kept / bare + epochs:  {:>9.3}", kept / live_epochs);
    println!("fresh / kept:                {:>9.1}x", host / kept);
    println!(
        "throughput, host path:       {:>9.0} calls/s  ({CALLERS} callers, 2 workers; target >= 10000)",
        host_rate
    );
    println!("throughput, spares off:      {:>9.0} calls/s", built_rate);
    println!("throughput, bare wasmtime:   {:>9.0} calls/s", raw_rate);
    println!("plugin load from cache:      {:>9.3} ms  (target <= 1 ms)", cached / 1e6);
    println!("plugin load with compile:    {:>9.3} ms", compiled / 1e6);
    println!("compile / cache:             {:>9.1}x", compiled / cached);
}

criterion_group!(benches, bench);
criterion_main!(benches);
