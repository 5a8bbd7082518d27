//! What a Python guest (componentize-py) costs next to a Rust one, through
//! the whole host path: component size, per-call latency with a fresh
//! instance per call, plugin load from the compiled-code cache, and a
//! compile from nothing and with its functions already compiled (a tool
//! rebuilt after a small change).
//!
//! `cargo bench -p reson --bench python_tool` installs componentize-py
//! under target/toolchains/python if needed, builds the hostile-py test
//! guest (its `py_echo` tool) and prints criterion's figures and, last, a
//! `== figures ==` summary measured in the same run.

#[path = "../../tests/support/mod.rs"]
mod support;

use criterion::{Criterion, criterion_group, criterion_main};
use reson::plugin::{CallContext, Runtime};
use sha2::{Digest, Sha256};
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const ARGS: &str = r#"{"text":"hello from the benchmark"}"#;

/// The Python guest as plugin `py-echo` in `out`, built from a copy in
/// `scratch` (componentize-py leaves `__pycache__` beside its sources).
fn build_python(out: &Path, scratch: &Path) {
    let root = support::root();
    let wasm = out.join("py-echo.wasm");
    std::fs::copy(root.join("tests/guests/hostile-py/app.py"), scratch.join("app.py")).unwrap();
    let status = Command::new(support::python::toolchain_bin().join("componentize-py"))
        .arg("--wit-path")
        .arg(root.join("wit"))
        .args(["--world", "tool-plugin", "componentize", "app", "--python-path"])
        .arg(scratch)
        .arg("--output")
        .arg(&wasm)
        .current_dir(scratch)
        .status()
        .expect("running componentize-py");
    assert!(status.success(), "componentize-py failed");
    std::fs::write(
        out.join("py-echo.toml"),
        "name = \"py-echo\"\nversion = \"0.1.0\"\ndescription = \"Python echo.\"\n",
    )
    .unwrap();
}

/// What a reload finds compiled before it starts.
#[derive(Clone, Copy, PartialEq)]
enum Cached {
    /// The component's compiled code: a load from the cache.
    Component,
    /// Only its functions (the per-function cache): a component rebuilt
    /// after a small change.
    Functions,
    /// Nothing: the first load of a component on a new toolchain.
    Nothing,
}

/// Reloads `plugin` with a manifest that differs each time, so the load is
/// real; the wasm is unchanged, so its code comes from the caches `cached`
/// leaves in place.
struct Reloader<'a> {
    rt: &'a tokio::runtime::Runtime,
    runtime: &'a Runtime,
    plugin: &'static str,
    manifest: PathBuf,
    original: String,
    flip: u64,
}

impl Reloader<'_> {
    fn reload(&mut self, cached: Cached) -> Duration {
        self.flip += 1;
        std::fs::write(&self.manifest, format!("{}\n# {}\n", self.original, self.flip)).unwrap();
        let info = |rt: &Runtime| {
            rt.plugins().into_iter().find(|p| p.name == self.plugin).expect("plugin loaded")
        };
        if cached != Cached::Component {
            support::forget_compiled(self.runtime, self.plugin, cached == Cached::Nothing);
        }
        let start = Instant::now();
        self.rt.block_on(self.runtime.reload(&[self.plugin.to_owned()]));
        let took = start.elapsed();
        assert_eq!(info(self.runtime).from_cache, cached == Cached::Component);
        took
    }
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn bench(c: &mut Criterion) {
    let rt =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let dir = support::TestDir::new();
    let scratch = dir.path().join("py-src");
    std::fs::create_dir_all(&scratch).unwrap();
    build_python(&dir.plugins(), &scratch);
    dir.install(support::plugins(), "echo");
    let runtime = rt.block_on(dir.open(""));
    let ctx = CallContext::default();
    for tool in ["echo", "py_echo"] {
        assert_eq!(
            rt.block_on(runtime.call_tool(tool, ARGS, &ctx)).unwrap().text,
            "hello from the benchmark",
            "{tool}"
        );
    }

    let mut calls = c.benchmark_group("fresh-instance call");
    let (runtime_ref, ctx_ref) = (&runtime, &ctx);
    for (label, tool) in [("rust echo", "echo"), ("python echo", "py_echo")] {
        calls.bench_function(label, |b| {
            b.to_async(&rt).iter(|| async move {
                black_box(runtime_ref.call_tool(tool, ARGS, ctx_ref).await.unwrap())
            })
        });
    }
    calls.finish();

    let reloader = |plugin: &'static str| {
        let manifest = dir.plugins().join(format!("{plugin}.toml"));
        let original = std::fs::read_to_string(&manifest).unwrap();
        Reloader { rt: &rt, runtime: &runtime, plugin, manifest, original, flip: 0 }
    };
    let (mut rust, mut python) = (reloader("echo"), reloader("py-echo"));
    let mut load = c.benchmark_group("plugin load from cache");
    load.sample_size(10);
    load.bench_function("rust echo", |b| {
        b.iter_custom(|n| (0..n).map(|_| rust.reload(Cached::Component)).sum::<Duration>())
    });
    load.bench_function("python echo", |b| {
        b.iter_custom(|n| (0..n).map(|_| python.reload(Cached::Component)).sum::<Duration>())
    });
    load.finish();

    // The same component with `[instance] keep_warm`, in a directory of
    // its own (the tool names would clash).
    let warm_dir = support::TestDir::new();
    std::fs::copy(dir.plugins().join("py-echo.wasm"), warm_dir.plugins().join("py-echo.wasm"))
        .unwrap();
    std::fs::write(
        warm_dir.plugins().join("py-echo.toml"),
        "name = \"py-echo\"\nversion = \"0.1.0\"\n[instance]\nkeep_warm = true\n",
    )
    .unwrap();
    let warm = rt.block_on(warm_dir.open(""));
    let per_call_on = |runtime: &Runtime, tool: &str| {
        rt.block_on(async {
            let mut samples = Vec::with_capacity(200);
            for _ in 0..200 {
                let start = Instant::now();
                black_box(runtime.call_tool(tool, ARGS, &ctx).await.unwrap());
                samples.push(start.elapsed());
            }
            median(samples)
        })
    };
    let per_call = |tool: &str| per_call_on(&runtime, tool);
    let size = |name: &str| std::fs::metadata(dir.plugins().join(name)).unwrap().len() as f64;
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!("\n== figures ==");
    println!("{:<34}{:>14}{:>14}", "", "rust echo", "python echo");
    println!("{:<34}{:>11.1} KB{:>11.1} MB", "component size", size("echo.wasm") / 1e3, {
        size("py-echo.wasm") / 1e6
    });
    println!(
        "{:<34}{:>11.3} ms{:>11.3} ms",
        "per call (fresh instance)",
        ms(per_call("echo")),
        ms(per_call("py_echo"))
    );
    println!(
        "{:<34}{:>14}{:>11.3} ms",
        "per call (instance kept warm)",
        "-",
        ms(per_call_on(&warm, "py_echo"))
    );
    println!(
        "{:<34}{:>11.3} ms{:>11.3} ms",
        "plugin load from cache",
        ms(median((0..20).map(|_| rust.reload(Cached::Component)).collect())),
        ms(median((0..20).map(|_| python.reload(Cached::Component)).collect()))
    );
    // What every load paid before the digest was remembered by the
    // file's identity; a cached load no longer reads or hashes the file.
    let read_and_hash = |name: &str| {
        median(
            (0..10)
                .map(|_| {
                    let start = Instant::now();
                    let bytes = std::fs::read(dir.plugins().join(name)).unwrap();
                    black_box(Sha256::digest(&bytes));
                    start.elapsed()
                })
                .collect(),
        )
    };
    println!(
        "{:<34}{:>11.3} ms{:>11.3} ms",
        "  read + SHA-256 it no longer pays",
        ms(read_and_hash("echo.wasm")),
        ms(read_and_hash("py-echo.wasm"))
    );
    println!(
        "{:<34}{:>11.3} ms{:>11.3} ms",
        "plugin load, compiling everything",
        ms(median((0..3).map(|_| rust.reload(Cached::Nothing)).collect())),
        ms(python.reload(Cached::Nothing))
    );
    println!(
        "{:<34}{:>11.3} ms{:>11.3} ms",
        "  its functions already compiled",
        ms(median((0..3).map(|_| rust.reload(Cached::Functions)).collect())),
        ms(median((0..3).map(|_| python.reload(Cached::Functions)).collect()))
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);
