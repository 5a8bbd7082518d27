//! What the command jail costs per command: `true` spawned jailed and
//! unjailed, first alone (the jail's own setup: namespaces, bubblewrap's
//! mounts, the cgroup, the seccomp filter), then through the whole host
//! path (the `shell` plugin's `true`, with `[sandbox] jail` on and off).
//!
//! `cargo bench -p reson --bench jail` prints criterion's figures and, last,
//! the medians of interleaved rounds and the jail's cost per command.

#[path = "../../tests/support/mod.rs"]
mod support;

use criterion::{Criterion, criterion_group, criterion_main};
use reson::jail::{Jail, JailDir, JailSpec};
use reson::plugin::{CallContext, Runtime};
use std::hint::black_box;
use std::path::{Path, PathBuf};
use support::{median, ns_per_call};

const TRUE: &str = "/usr/bin/true";

fn spec(ws: &Path) -> JailSpec {
    JailSpec {
        dirs: vec![JailDir { path: ws.to_path_buf(), writable: true, metadata_writable: false }],
        search_path: vec![PathBuf::from("/usr/bin")],
        network: Vec::new(),
        max_processes: 64,
        cwd: ws.to_path_buf(),
    }
}

async fn unjailed() {
    let status = tokio::process::Command::new(TRUE).status().await.unwrap();
    assert!(status.success());
}

async fn jailed(jail: &Jail, spec: &JailSpec) {
    let (mut command, guard) = jail.command(spec, Path::new(TRUE), &[], &[]).await.unwrap();
    let status = command.status().await.unwrap();
    assert!(status.success());
    drop(guard);
}

async fn shell_true(runtime: &Runtime, ws: &Path) {
    let args = serde_json::json!({ "command": "true", "cwd": ws });
    let out = runtime.call_tool("shell", &args.to_string(), &CallContext::default()).await;
    assert!(out.unwrap().text.starts_with("exit code 0"));
}

async fn shell_runtime(dir: &support::TestDir, jail: &str) -> Runtime {
    dir.open(&format!(
        "[sandbox]\njail = \"{jail}\"\n[plugins.shell]\n\
         dirs = [{{ path = \"workspace\", access = \"read-write\" }}]\nprocess = [\"true\"]\n"
    ))
    .await
}

fn bench(c: &mut Criterion) {
    let rt =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let (on_dir, off_dir) = (support::TestDir::new(), support::TestDir::new());
    for dir in [&on_dir, &off_dir] {
        dir.install(support::plugins(), "shell");
    }
    let ws = on_dir.workspace().canonicalize().unwrap();
    let off_ws = off_dir.workspace().canonicalize().unwrap();
    let jail = Jail::default();
    let spec = spec(&ws);
    let on = rt.block_on(shell_runtime(&on_dir, "on"));
    let off = rt.block_on(shell_runtime(&off_dir, "off"));
    rt.block_on(jailed(&jail, &spec));

    let mut group = c.benchmark_group("jail");
    group.bench_function("true, unjailed spawn", |b| b.to_async(&rt).iter(unjailed));
    group.bench_function("true, jailed spawn", |b| {
        b.to_async(&rt).iter(|| async { jailed(black_box(&jail), &spec).await })
    });
    group.bench_function("shell `true`, jail off", |b| {
        b.to_async(&rt).iter(|| async { shell_true(black_box(&off), &off_ws).await })
    });
    group.bench_function("shell `true`, jail on", |b| {
        b.to_async(&rt).iter(|| async { shell_true(black_box(&on), &ws).await })
    });
    group.finish();

    // Interleaved rounds, so drift on a shared machine hits all alike.
    let (mut bare, mut jail_spawn, mut tool_off, mut tool_on) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    rt.block_on(async {
        for _ in 0..9 {
            bare.push(ns_per_call(async || unjailed().await, 30).await);
            jail_spawn.push(ns_per_call(async || jailed(&jail, &spec).await, 30).await);
            tool_off.push(ns_per_call(async || shell_true(&off, &off_ws).await, 30).await);
            tool_on.push(ns_per_call(async || shell_true(&on, &ws).await, 30).await);
        }
    });
    let (bare, jail_spawn) = (median(bare), median(jail_spawn));
    let (tool_off, tool_on) = (median(tool_off), median(tool_on));
    println!("\n== figures ==");
    println!("`true` unjailed spawn:        {:>9.2} ms", bare / 1e6);
    println!("`true` jailed spawn:          {:>9.2} ms", jail_spawn / 1e6);
    println!("jail cost per command:        {:>9.2} ms", (jail_spawn - bare) / 1e6);
    println!("shell tool `true`, jail off:  {:>9.2} ms", tool_off / 1e6);
    println!("shell tool `true`, jail on:   {:>9.2} ms", tool_on / 1e6);
    println!(
        "jail on / off (tool call):    {:>9.2}x  (+{:.2} ms per call)",
        tool_on / tool_off,
        (tool_on - tool_off) / 1e6
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);
