//! Tool-call cost through the whole host path against the bare wasmtime
//! fresh-instance call of the same component, and plugin load from the
//! compiled-code cache against a compile.
//!
//! `cargo bench -p reson --bench tool_call` prints criterion's figures and,
//! last, the ratios measured interleaved in one run.

#[path = "../../tests/support/mod.rs"]
mod support;

use criterion::{Criterion, criterion_group, criterion_main};
use reson::plugin::{CallContext, Runtime};
use std::hint::black_box;
use std::time::{Duration, Instant};
use wasmtime::component::{Component, HasSelf, Linker, ResourceTable};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, Store};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

mod bare {
    wasmtime::component::bindgen!({ path: "../wit", world: "reson:plugin/tool-plugin" });
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
    fn log(&mut self, _: log::Level, _: String) {}
}
impl config::Host for Bare {
    fn get(&mut self, _: String) -> Option<String> {
        None
    }
    fn all(&mut self) -> Vec<(String, String)> {
        Vec::new()
    }
}
impl http::HostBodyStream for Bare {
    fn read(
        &mut self,
        _: wasmtime::component::Resource<http::BodyStream>,
        _: u32,
    ) -> Result<Option<Vec<u8>>, http::HttpError> {
        Ok(None)
    }
    fn drop(&mut self, _: wasmtime::component::Resource<http::BodyStream>) -> wasmtime::Result<()> {
        Ok(())
    }
}
impl http::Host for Bare {
    fn send(&mut self, _: http::Request) -> Result<http::Response, http::HttpError> {
        Err(http::HttpError::Denied(String::new()))
    }
    fn send_streaming(
        &mut self,
        _: http::Request,
    ) -> Result<http::StreamingResponse, http::HttpError> {
        Err(http::HttpError::Denied(String::new()))
    }
}
impl process::Host for Bare {
    fn run(&mut self, _: process::Command) -> Result<process::Output, process::ProcessError> {
        Err(process::ProcessError::Denied(String::new()))
    }
}

struct BareEcho {
    engine: Engine,
    pre: bare::ToolPluginPre<Bare>,
}

impl BareEcho {
    fn new(wasm: &std::path::Path) -> Self {
        let mut config = Config::new();
        config.allocation_strategy(InstanceAllocationStrategy::Pooling(
            PoolingAllocationConfig::default(),
        ));
        let engine = Engine::new(&config).unwrap();
        let component = Component::from_file(&engine, wasm).unwrap();
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker).unwrap();
        bare::ToolPlugin::add_to_linker::<_, HasSelf<_>>(&mut linker, |s| s).unwrap();
        let pre = bare::ToolPluginPre::new(linker.instantiate_pre(&component).unwrap()).unwrap();
        Self { engine, pre }
    }

    fn call(&self, args: &String) -> String {
        let state = Bare { wasi: WasiCtx::builder().build(), table: ResourceTable::new() };
        let mut store = Store::new(&self.engine, state);
        store.set_epoch_deadline(u64::MAX);
        let plugin = self.pre.instantiate(&mut store).unwrap();
        let ctx = bare::exports::reson::plugin::tool::CallContext {
            call_id: String::new(),
            trace_id: None,
            cwd: None,
        };
        plugin.reson_plugin_tool().call_call(&mut store, "echo", args, &ctx).unwrap().unwrap().text
    }
}

const ARGS: &str = r#"{"text":"hello from the benchmark"}"#;

fn host_runtime(dir: &support::TestDir) -> Runtime {
    dir.install(support::plugins(), "echo");
    dir.open("")
}

/// The echo plugin with `[instance] keep_warm`, in a directory of its own.
fn warm_runtime(dir: &support::TestDir) -> Runtime {
    dir.install(support::plugins(), "echo");
    let manifest = dir.plugins().join("echo.toml");
    let text = std::fs::read_to_string(&manifest).unwrap();
    std::fs::write(&manifest, format!("{text}\n[instance]\nkeep_warm = true\n")).unwrap();
    dir.open("")
}

fn median_ns(mut f: impl FnMut(), rounds: usize, per_round: usize) -> Vec<f64> {
    (0..rounds)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..per_round {
                f();
            }
            start.elapsed().as_nanos() as f64 / per_round as f64
        })
        .collect()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn bench(c: &mut Criterion) {
    let dir = support::TestDir::new();
    let runtime = host_runtime(&dir);
    let bare = BareEcho::new(&support::plugins().join("echo.wasm"));
    let args = ARGS.to_owned();
    let ctx = CallContext::default();
    assert_eq!(bare.call(&args), runtime.call_tool("echo", ARGS, &ctx).unwrap().text);

    let warm_dir = support::TestDir::new();
    let warm = warm_runtime(&warm_dir);
    assert_eq!(warm.call_tool("echo", ARGS, &ctx).unwrap().text, "hello from the benchmark");

    let mut calls = c.benchmark_group("tool-call");
    calls.bench_function("host path, instance kept warm", |b| {
        b.iter(|| black_box(warm.call_tool("echo", ARGS, &ctx).unwrap()))
    });
    calls.bench_function("host path (lookup, schema, grants, fresh instance)", |b| {
        b.iter(|| black_box(runtime.call_tool("echo", ARGS, &ctx).unwrap()))
    });
    calls
        .bench_function("bare wasmtime fresh instance", |b| b.iter(|| black_box(bare.call(&args))));
    calls.finish();

    // Reloading with a manifest that differs each time forces a load; the
    // wasm is unchanged, so its compiled code comes from the cache.
    let manifest = dir.plugins().join("echo.toml");
    let original = std::fs::read_to_string(&manifest).unwrap();
    let mut flip = 0u64;
    let mut reload = |purge_cache: bool| {
        flip += 1;
        std::fs::write(&manifest, format!("{original}\n# {flip}\n")).unwrap();
        if purge_cache {
            for entry in std::fs::read_dir(runtime.options().cache_dir.clone()).unwrap() {
                let path = entry.unwrap().path();
                let sha = runtime.plugins()[0].sha256.clone().unwrap();
                if path.file_name().unwrap().to_string_lossy().starts_with(&sha) {
                    std::fs::remove_file(path).unwrap();
                }
            }
        }
        let start = Instant::now();
        runtime.reload(&["echo".to_owned()]);
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
    for _ in 0..15 {
        kept.extend(median_ns(
            || drop(black_box(warm.call_tool("echo", ARGS, &ctx).unwrap())),
            1,
            500,
        ));
        host.extend(median_ns(
            || drop(black_box(runtime.call_tool("echo", ARGS, &ctx).unwrap())),
            1,
            500,
        ));
        raw.extend(median_ns(|| drop(black_box(bare.call(&args))), 1, 500));
    }
    let (host, raw, kept) = (median(host), median(raw), median(kept));
    let cached = median((0..30).map(|_| reload(false).as_nanos() as f64).collect());
    let compiled = median((0..5).map(|_| reload(true).as_nanos() as f64).collect());
    println!("\n== figures ==");
    println!("tool call, host path:        {:>9.1} µs", host / 1e3);
    println!("tool call, bare wasmtime:    {:>9.1} µs", raw / 1e3);
    println!("ratio host / bare:           {:>9.3}  (target <= 1.25)", host / raw);
    println!("tool call, instance kept:    {:>9.1} µs", kept / 1e3);
    println!("fresh / kept:                {:>9.1}x", host / kept);
    println!("plugin load from cache:      {:>9.3} ms  (target <= 1 ms)", cached / 1e6);
    println!("plugin load with compile:    {:>9.3} ms", compiled / 1e6);
    println!("compile / cache:             {:>9.1}x", compiled / cached);
}

criterion_group!(benches, bench);
criterion_main!(benches);
