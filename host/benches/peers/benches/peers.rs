//! The same JSON echo (parse `{"text": …}`, return the text, as
//! plugins/echo does), in one process and one run, as a Reson tool and on
//! what a user might pick instead: bare wasmtime 48 on the same component,
//! Extism 1.30 and wasmi 2.0 on core modules, and native Rust.
//!
//! `bash host/benches/peers/run.sh` builds the guests and runs it. It prints
//! criterion's figures and, last, an `== figures ==` summary measured in
//! interleaved rounds: µs per call, calls/s, each figure's ratio to Reson's
//! fresh and kept-warm call, the goals, and where the time goes; then every
//! figure again, one call at a time from a task of the runtime in a busy
//! host, as an agent's calls come (there Reson's fresh call enters the
//! spare instance made after the last).

use criterion::{Criterion, criterion_group, criterion_main};
use reson_sandbox::config::PluginsConfig;
use reson_sandbox::plugin::{CallContext, Options, Runtime};
use serde::Deserialize;
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::sync::LazyLock;
use std::time::{Duration, Instant};
use tokio::runtime::Handle;
use wasmtime::component::{Component, HasSelf, Linker, ResourceTable};
use wasmtime::{Config as WasmtimeConfig, Engine, InstanceAllocationStrategy};
use wasmtime::{PoolingAllocationConfig, Store};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

mod bare {
    wasmtime::component::bindgen!({
        path: "../../../wit",
        world: "reson:plugin/tool-plugin",
        imports: { default: async },
        exports: { default: async },
    });
}
use bare::reson::plugin::{config, http, log, process, types};

const ARGS: &str = r#"{"text":"hello from the benchmark"}"#;
const TEXT: &str = "hello from the benchmark";

/// [`ARGS`] in the form the generated bindings take.
static BARE_ARGS: LazyLock<String> = LazyLock::new(|| ARGS.to_owned());

/// The repository root: this crate is host/benches/peers.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).ancestors().nth(3).expect("repository root").into()
}

/// A build output of run.sh under the repository's `target/`.
fn built(relative: &str) -> PathBuf {
    let path = root().join("target").join(relative);
    assert!(path.is_file(), "{} is missing: run `bash host/benches/peers/run.sh`", path.display());
    path
}

/// Arguments of `echo`, as in plugins/echo.
#[derive(Deserialize)]
struct EchoArgs {
    text: String,
}

/// The echo in native Rust: the floor every sandbox adds to.
fn native_echo(args: &str) -> Result<String, serde_json::Error> {
    serde_json::from_str::<EchoArgs>(args).map(|a| a.text)
}

/// A Reson runtime on a plugins directory holding only `echo`, with
/// `[instance] keep_warm` when `keep_warm`.
async fn reson(dir: &Path, keep_warm: bool) -> Runtime {
    let plugins = dir.join("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    std::fs::copy(built("plugins/echo.wasm"), plugins.join("echo.wasm")).unwrap();
    let mut manifest = std::fs::read_to_string(built("plugins/echo.toml")).unwrap();
    if keep_warm {
        manifest.push_str("\n[instance]\nkeep_warm = true\n");
    }
    std::fs::write(plugins.join("echo.toml"), manifest).unwrap();
    let mut options = Options::from_config(PluginsConfig::default());
    options.plugins_dir = plugins;
    // The tests' compiled-code cache: the echo component compiles once.
    options.cache_dir = root().join("target/test-cache");
    options.lock_file = dir.join("reson.lock");
    Runtime::open(options).await.unwrap()
}

/// The least a host can give the echo component: WASI and import stubs
/// (as host/benches/tool_call.rs).
struct Bare {
    wasi: WasiCtx,
    table: ResourceTable,
}

impl Bare {
    fn new() -> Self {
        Self { wasi: WasiCtx::builder().build(), table: ResourceTable::new() }
    }
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

/// The echo component on bare async wasmtime 48, with the host's pool
/// settings (plugin/engine.rs), so that ratios measure what Reson adds.
struct BareEcho {
    engine: Engine,
    pre: bare::ToolPluginPre<Bare>,
}

/// One instance of the echo component, entered call after call.
struct LiveEcho {
    store: Store<Bare>,
    plugin: bare::ToolPlugin,
}

impl BareEcho {
    fn new(wasm: &Path) -> Self {
        let mut pool = PoolingAllocationConfig::default();
        pool.decommit_batch_size(16).table_keep_resident(64 << 10);
        if PoolingAllocationConfig::is_pagemap_scan_available() {
            pool.pagemap_scan(wasmtime::Enabled::Yes).linear_memory_keep_resident(1 << 20);
        }
        let mut config = WasmtimeConfig::new();
        config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        let engine = Engine::new(&config).unwrap();
        let component = Component::from_file(&engine, wasm).unwrap();
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker).unwrap();
        types::add_to_linker::<_, HasSelf<_>>(&mut linker, |s| s).unwrap();
        log::add_to_linker::<_, HasSelf<_>>(&mut linker, |s| s).unwrap();
        config::add_to_linker::<_, HasSelf<_>>(&mut linker, |s| s).unwrap();
        http::add_to_linker::<_, HasSelf<_>>(&mut linker, |s| s).unwrap();
        process::add_to_linker::<_, HasSelf<_>>(&mut linker, |s| s).unwrap();
        let pre = bare::ToolPluginPre::new(linker.instantiate_pre(&component).unwrap()).unwrap();
        Self { engine, pre }
    }

    async fn instance(&self) -> LiveEcho {
        let mut store = Store::new(&self.engine, Bare::new());
        store.set_epoch_deadline(u64::MAX);
        let plugin = self.pre.instantiate_async(&mut store).await.unwrap();
        LiveEcho { store, plugin }
    }

    /// `echo(ARGS)` on a fresh instance, as Reson calls by default.
    async fn call_fresh(&self) -> String {
        self.instance().await.call().await
    }
}

impl LiveEcho {
    /// `echo(ARGS)`.
    async fn call(&mut self) -> String {
        let ctx = bare::exports::reson::plugin::tool::CallContext {
            call_id: String::new(),
            trace_id: None,
            cwd: None,
        };
        self.plugin
            .reson_plugin_tool()
            .call_call(&mut self.store, "echo", &BARE_ARGS, &ctx)
            .await
            .unwrap()
            .unwrap()
            .text
    }
}

/// The echo as an Extism plugin (its PDK on a core module), compiled once.
struct ExtismEcho {
    compiled: extism::CompiledPlugin,
    live: extism::Plugin,
}

impl ExtismEcho {
    fn new(wasm: &Path) -> Self {
        let wasm = std::fs::read(wasm).unwrap();
        // The guest imports no WASI; Extism then links none.
        let compiled =
            extism::PluginBuilder::new(wasm.as_slice()).with_wasi(false).compile().unwrap();
        let live = extism::Plugin::new_from_compiled(&compiled).unwrap();
        Self { compiled, live }
    }

    /// `Plugin::call` on the live plugin.
    fn call(&mut self, args: &str) -> String {
        self.live.call::<&str, String>("echo", args).unwrap()
    }

    /// A plugin created from the compiled module, then called.
    fn create_and_call(&self, args: &str) -> String {
        let mut plugin = extism::Plugin::new_from_compiled(&self.compiled).unwrap();
        plugin.call::<&str, String>("echo", args).unwrap()
    }
}

/// The echo core module instantiated on wasmi, entered call after call:
/// `alloc`, write the arguments, `echo`, read the text, `dealloc`.
struct WasmiEcho {
    store: wasmi::Store<()>,
    memory: wasmi::Memory,
    alloc: wasmi::TypedFunc<u32, u32>,
    echo: wasmi::TypedFunc<(u32, u32), u64>,
    dealloc: wasmi::TypedFunc<(u32, u32), ()>,
}

impl WasmiEcho {
    fn new(wasm: &Path) -> Self {
        let engine = wasmi::Engine::default();
        let module = wasmi::Module::new(&engine, std::fs::read(wasm).unwrap()).unwrap();
        let mut store = wasmi::Store::new(&engine, ());
        let instance =
            wasmi::Linker::<()>::new(&engine).instantiate_and_start(&mut store, &module).unwrap();
        let memory = instance.get_memory(&store, "memory").unwrap();
        let alloc = instance.get_typed_func(&store, "alloc").unwrap();
        let echo = instance.get_typed_func(&store, "echo").unwrap();
        let dealloc = instance.get_typed_func(&store, "dealloc").unwrap();
        Self { store, memory, alloc, echo, dealloc }
    }

    fn call(&mut self, args: &str) -> String {
        let len = u32::try_from(args.len()).unwrap();
        let at = self.alloc.call(&mut self.store, len).unwrap();
        self.memory.write(&mut self.store, at as usize, args.as_bytes()).unwrap();
        let packed = self.echo.call(&mut self.store, (at, len)).unwrap();
        assert_ne!(packed, 0, "the guest refused {args}");
        let (at, len) = ((packed >> 32) as u32, packed as u32);
        let text = self.memory.data(&self.store)[at as usize..][..len as usize].to_vec();
        self.dealloc.call(&mut self.store, (at, len)).unwrap();
        String::from_utf8(text).unwrap()
    }
}

/// Every way the echo runs, each timed over `n` calls in a row.
struct Peers {
    tokio: Handle,
    reson_fresh: Runtime,
    reson_warm: Runtime,
    bare: BareEcho,
    live: LiveEcho,
    extism: ExtismEcho,
    wasmi: WasmiEcho,
}

/// One way the echo runs: a figure of the summary.
#[derive(Clone, Copy)]
enum Figure {
    ResonFresh,
    ResonWarm,
    BareFresh,
    BareLive,
    Extism,
    ExtismCreate,
    Wasmi,
    Native,
}

impl Figure {
    /// Every figure, in the order they are measured and printed.
    const ALL: [Figure; 8] = [
        Self::ResonFresh,
        Self::ResonWarm,
        Self::BareFresh,
        Self::BareLive,
        Self::Extism,
        Self::ExtismCreate,
        Self::Wasmi,
        Self::Native,
    ];

    fn name(self) -> &'static str {
        match self {
            Self::ResonFresh => "Reson host path, fresh instance",
            Self::ResonWarm => "Reson host path, kept warm",
            Self::BareFresh => "bare wasmtime 48, fresh instance",
            Self::BareLive => "bare wasmtime 48, live instance",
            Self::Extism => "Extism 1.30, Plugin::call (live plugin)",
            Self::ExtismCreate => "Extism 1.30, plugin creation + call",
            Self::Wasmi => "wasmi 2.0, live instance",
            Self::Native => "native Rust (serde_json)",
        }
    }
}

impl Peers {
    /// How long `n` calls of `figure` take.
    fn time(&mut self, figure: Figure, n: u64) -> Duration {
        let (tokio, ctx) = (self.tokio.clone(), CallContext::default());
        let start = Instant::now();
        match figure {
            Figure::ResonFresh | Figure::ResonWarm => {
                let runtime = match figure {
                    Figure::ResonFresh => &self.reson_fresh,
                    _ => &self.reson_warm,
                };
                tokio.block_on(async {
                    for _ in 0..n {
                        drop(black_box(runtime.call_tool("echo", ARGS, &ctx).await.unwrap()));
                    }
                })
            }
            Figure::BareFresh => tokio.block_on(async {
                for _ in 0..n {
                    drop(black_box(self.bare.call_fresh().await));
                }
            }),
            Figure::BareLive => tokio.block_on(async {
                for _ in 0..n {
                    drop(black_box(self.live.call().await));
                }
            }),
            Figure::Extism => (0..n).for_each(|_| drop(black_box(self.extism.call(ARGS)))),
            Figure::ExtismCreate => {
                (0..n).for_each(|_| drop(black_box(self.extism.create_and_call(ARGS))))
            }
            Figure::Wasmi => (0..n).for_each(|_| drop(black_box(self.wasmi.call(ARGS)))),
            Figure::Native => {
                (0..n).for_each(|_| drop(black_box(native_echo(black_box(ARGS)).unwrap())))
            }
        }
        start.elapsed()
    }

    /// What `figure` answers for [`ARGS`].
    async fn answer(&mut self, figure: Figure) -> String {
        let ctx = CallContext::default();
        match figure {
            Figure::ResonFresh => {
                self.reson_fresh.call_tool("echo", ARGS, &ctx).await.unwrap().text
            }
            Figure::ResonWarm => self.reson_warm.call_tool("echo", ARGS, &ctx).await.unwrap().text,
            Figure::BareFresh => self.bare.call_fresh().await,
            Figure::BareLive => self.live.call().await,
            Figure::Extism => self.extism.call(ARGS),
            Figure::ExtismCreate => self.extism.create_and_call(ARGS),
            Figure::Wasmi => self.wasmi.call(ARGS),
            Figure::Native => native_echo(ARGS).unwrap(),
        }
    }

    /// The latencies (ns) of `calls` calls of `figure` one at a time, each
    /// after 50 µs of other tasks (yielding to them): a busy host, as in
    /// host/benches/tool_call.rs. Made from a task of the runtime, as an
    /// agent's calls are, so that Reson makes its spares.
    async fn spaced(&mut self, figure: Figure, calls: usize) -> Vec<f64> {
        let mut times = Vec::with_capacity(calls);
        for _ in 0..calls {
            let until = Instant::now() + Duration::from_micros(50);
            while Instant::now() < until {
                tokio::task::yield_now().await;
            }
            let start = Instant::now();
            drop(black_box(self.answer(figure).await));
            times.push(start.elapsed().as_nanos() as f64);
        }
        times
    }
}

/// The middle of `v` once sorted.
fn median(v: Vec<f64>) -> f64 {
    quantiles(v, [0.5])[0]
}

/// The values the fractions `qs` of the way through `v` once sorted.
fn quantiles<const N: usize>(mut v: Vec<f64>, qs: [f64; N]) -> [f64; N] {
    v.sort_by(f64::total_cmp);
    qs.map(|q| v[((v.len() - 1) as f64 * q).round() as usize])
}

fn bench(c: &mut Criterion) {
    // As host/benches/tool_call.rs: this machine's two cores.
    let tokio =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let (fresh_dir, warm_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let reson_fresh = tokio.block_on(reson(fresh_dir.path(), false));
    let reson_warm = tokio.block_on(reson(warm_dir.path(), true));
    let bare = BareEcho::new(&built("plugins/echo.wasm"));
    let live = tokio.block_on(bare.instance());
    let guests = "wasm/wasm32-unknown-unknown/release";
    let mut peers = Peers {
        tokio: tokio.handle().clone(),
        reson_fresh,
        reson_warm,
        bare,
        live,
        extism: ExtismEcho::new(&built(&format!("{guests}/extism_echo.wasm"))),
        wasmi: WasmiEcho::new(&built(&format!("{guests}/core_echo.wasm"))),
    };
    // Every peer does the same work: a second call shows a live instance
    // is still right after its first.
    for figure in Figure::ALL {
        for _ in 0..2 {
            assert_eq!(tokio.block_on(peers.answer(figure)), TEXT, "{}", figure.name());
        }
    }
    assert!(native_echo("{\"text\":1}").is_err());

    let mut group = c.benchmark_group("echo");
    group.warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(3));
    for figure in Figure::ALL {
        group.bench_function(figure.name(), |b| b.iter_custom(|n| peers.time(figure, n)));
    }
    group.finish();

    // Interleaved rounds in this one run: noise hits every figure alike.
    let mut samples = vec![Vec::new(); Figure::ALL.len()];
    for _ in 0..15 {
        for (figure, samples) in Figure::ALL.into_iter().zip(&mut samples) {
            samples.push(peers.time(figure, 500).as_nanos() as f64 / 500.0);
        }
    }
    let ns: Vec<f64> = samples.into_iter().map(median).collect();
    // `ALL` lists the figures in declaration order.
    let at = |figure: Figure| ns[figure as usize];
    let (fresh, warm) = (at(Figure::ResonFresh), at(Figure::ResonWarm));
    println!("\n== figures ==");
    println!(
        "{:<42} {:>9} {:>10} {:>12} {:>12}",
        "echo, one caller", "µs/call", "calls/s", "/ Reson fresh", "/ Reson warm"
    );
    for (figure, ns) in Figure::ALL.into_iter().zip(&ns) {
        println!(
            "{:<42} {:>9.2} {:>10.0} {:>12.3}x {:>11.3}x",
            figure.name(),
            ns / 1e3,
            1e9 / ns,
            ns / fresh,
            ns / warm
        );
    }
    let (bare_fresh, bare_live) = (at(Figure::BareFresh), at(Figure::BareLive));
    let (extism, extism_new) = (at(Figure::Extism), at(Figure::ExtismCreate));
    let native = at(Figure::Native);
    let verdict = |met: bool| if met { "met" } else { "MISSED" };
    println!(
        "goal: Reson fresh faster than Extism Plugin::call: {:.2} vs {:.2} µs: {}",
        fresh / 1e3,
        extism / 1e3,
        verdict(fresh < extism)
    );
    println!(
        "goal: Reson kept warm within 1.2x of bare wasmtime live: {:.3}x: {}",
        warm / bare_live,
        verdict(warm <= 1.2 * bare_live)
    );
    println!("where the time goes (differences of the medians above, µs per call):");
    let rows = [
        ("JSON round trip in native Rust", native),
        ("component call on a live instance beyond native", bare_live - native),
        ("fresh instance: store + instantiate (bare)", bare_fresh - bare_live),
        ("Reson's layers on a fresh call", fresh - bare_fresh),
        ("Reson's layers on a kept-warm call", warm - bare_live),
        ("Extism Plugin::call beyond native", extism - native),
        ("Extism plugin creation", extism_new - extism),
    ];
    for (stage, ns) in rows {
        println!("  {stage:<50} {:>8.2}", ns / 1e3);
    }

    // The same figures one call at a time from a task, in rounds
    // interleaved as above; the peers come back for the next group. Single
    // calls in a busy host spread widely (after the scheduler's system
    // calls, caches are cold or not), so the quartiles of every call are
    // printed beside the median of the rounds' medians.
    let (_peers, rounds) = tokio
        .block_on(tokio.spawn(async move {
            let mut rounds = vec![Vec::new(); Figure::ALL.len()];
            for _ in 0..7 {
                for (figure, rounds) in Figure::ALL.into_iter().zip(&mut rounds) {
                    rounds.push(peers.spaced(figure, 200).await);
                }
            }
            (peers, rounds)
        }))
        .unwrap();
    let spaced: Vec<f64> = rounds
        .iter()
        .map(|rounds| median(rounds.iter().map(|calls| median(calls.clone())).collect()))
        .collect();
    let at = |figure: Figure| spaced[figure as usize];
    let (fresh, warm) = (at(Figure::ResonFresh), at(Figure::ResonWarm));
    println!(
        "\n{:<42} {:>9} {:>13} {:>12} {:>17}",
        "echo, one call at a time in a busy host",
        "µs/call",
        "/ Reson fresh",
        "/ Reson warm",
        "calls' p25 / p75"
    );
    for ((figure, ns), rounds) in Figure::ALL.into_iter().zip(&spaced).zip(&rounds) {
        let [p25, p75] = quantiles(rounds.concat(), [0.25, 0.75]);
        println!(
            "{:<42} {:>9.2} {:>12.3}x {:>11.3}x {:>8.2} / {:>6.2}",
            figure.name(),
            ns / 1e3,
            ns / fresh,
            ns / warm,
            p25 / 1e3,
            p75 / 1e3
        );
    }
    let extism = at(Figure::Extism);
    println!(
        "goal, in a busy host: Reson fresh (its spare) faster than Extism Plugin::call: \
         {:.2} vs {:.2} µs: {}",
        fresh / 1e3,
        extism / 1e3,
        verdict(fresh < extism)
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);
