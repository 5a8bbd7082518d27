//! What the command jail costs per command: `true` spawned jailed and
//! unjailed, first alone (the jail's own setup: namespaces, bubblewrap's
//! mounts, the cgroup, the seccomp filter), forked by the jail's launcher
//! thread (`Jail::spawn` with jails made ahead off), started directly
//! (`Jail::command`) and in a jail made ahead (`Jail::make_ahead`, not
//! timed, then `Jail::spawn`), then through the whole host path (the
//! `shell` plugin's `true`, with `[sandbox] jail` off, and on with
//! `spare_jails` on and off).
//!
//! `cargo bench -p reson --bench jail` prints criterion's figures and, last,
//! the medians of interleaved rounds and the jail's cost per command, for
//! calls spaced by 50 ms (as between an agent's turns: the machine idles,
//! and moving a task into a cgroup then takes longest) and back to back,
//! and what a workspace the size of a source tree adds (the jail looks
//! for repositories a few levels down before every command), and the
//! first command of a host, in fresh processes of this bench: with the
//! jail made ready while a run's model thinks (`Runtime::prepare_run`),
//! and without.

#[path = "../../tests/support/mod.rs"]
mod support;

use criterion::{Criterion, criterion_group};
use reson::jail::{Jail, JailDir, JailSpec};
use reson::plugin::{CallContext, Runtime};
use std::hint::black_box;
use std::path::{Path, PathBuf};
use support::{median, ns_per_call};

const TRUE: &str = "/usr/bin/true";

fn spec_for(ws: &Path) -> JailSpec {
    JailSpec {
        dirs: vec![JailDir { path: ws.to_path_buf(), writable: true, metadata_writable: false }],
        search_path: vec![PathBuf::from("/usr/bin")],
        network: Vec::new(),
        max_processes: 64,
        cwd: ws.to_path_buf(),
    }
}

/// A workspace shaped like a source tree: 10 × 10 × 10 directories, 20
/// files in each directory of the middle level. Returns how many
/// directories and files it holds.
fn source_tree(root: &Path) -> (usize, usize) {
    let (mut dirs, mut files) = (0, 0);
    for a in 0..10 {
        for b in 0..10 {
            let middle = root.join(format!("module{a}/part{b}"));
            for c in 0..10 {
                std::fs::create_dir_all(middle.join(format!("leaf{c}"))).unwrap();
                dirs += 1;
            }
            for f in 0..20 {
                std::fs::write(middle.join(format!("file{f}.rs")), "").unwrap();
                files += 1;
            }
            dirs += 1;
        }
        dirs += 1;
    }
    (dirs, files)
}

async fn unjailed() {
    let status = tokio::process::Command::new(TRUE).status().await.unwrap();
    assert!(status.success());
}

/// Started directly: the host forks, the child joins its pids cgroup and
/// namespaces, then execs bubblewrap.
async fn jailed_directly(jail: &Jail, spec: &JailSpec) {
    let (mut command, guard) = jail.command(spec, Path::new(TRUE), &[], &[]).await.unwrap();
    let status = command.status().await.unwrap();
    assert!(status.success());
    drop(guard);
}

/// As the shell tool starts commands: forked by the jail's launcher thread,
/// already in the call's pids cgroup (cgroup v1).
async fn jailed(jail: &Jail, spec: &JailSpec) {
    let (mut child, guard) =
        jail.spawn_piped(spec, Path::new(TRUE), &[], &[], false).await.unwrap();
    assert!(child.wait().await.unwrap().success());
    drop(guard);
}

/// Commands started together, as an agent's parallel tool calls start them.
const AT_ONCE: usize = 4;

async fn at_once(jail: &Jail, spec: &JailSpec) {
    futures::future::join_all((0..AT_ONCE).map(|_| jailed(jail, spec))).await;
}

async fn shell_true(runtime: &Runtime, ws: &Path) {
    let args = serde_json::json!({ "command": "true", "cwd": ws });
    let out = runtime.call_tool("shell", &args.to_string(), &CallContext::default()).await;
    assert!(out.unwrap().text.starts_with("exit code 0"));
}

async fn shell_runtime(dir: &support::TestDir, jail: &str) -> Runtime {
    shell_runtime_with(dir, jail, true).await
}

async fn shell_runtime_with(dir: &support::TestDir, jail: &str, spares: bool) -> Runtime {
    dir.open(&format!(
        "[sandbox]\njail = \"{jail}\"\nspare_jails = {spares}\n[plugins.shell]\n\
         dirs = [{{ path = \"workspace\", access = \"read-write\" }}]\nprocess = [\"true\"]\n"
    ))
    .await
}

/// Set in a child process of this bench, to `cold` or `prepared` and the
/// plugins' directory: the child times its first jailed command.
const FIRST: &str = "RESON_BENCH_FIRST_COMMAND";

/// A model turn: the time a run's preparation has before its first call.
const TURN: std::time::Duration = std::time::Duration::from_millis(500);

/// In a child: a host's first command, the shell tool's `true`, after a
/// model turn; with the jail made ready during that turn when `prepared`.
/// Prints the nanoseconds it took.
fn first_command(mode: &str) {
    let (mode, plugins) = mode.split_once(':').expect("mode:plugins");
    let rt =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        let dir = support::TestDir::new();
        dir.install(Path::new(plugins), "shell");
        let ws = dir.workspace().canonicalize().unwrap();
        let runtime = shell_runtime(&dir, "on").await;
        if mode == "prepared" {
            runtime.prepare_run("first", &["shell".to_owned()]);
        }
        tokio::time::sleep(TURN).await;
        let start = std::time::Instant::now();
        shell_true(&runtime, &ws).await;
        println!("{}", start.elapsed().as_nanos());
    });
}

/// Medians of `rounds` fresh hosts' first commands, cold and prepared,
/// interleaved.
fn first_commands(rounds: usize) -> (f64, f64) {
    let exe = std::env::current_exe().unwrap();
    let plugins = support::plugins().to_string_lossy().into_owned();
    let run = |mode: &str| {
        let out = std::process::Command::new(&exe)
            .env(FIRST, format!("{mode}:{plugins}"))
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap().trim().parse::<f64>().unwrap()
    };
    let (mut cold, mut prepared) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        cold.push(run("cold"));
        prepared.push(run("prepared"));
    }
    (median(cold), median(prepared))
}

fn bench(c: &mut Criterion) {
    let rt =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let (on_dir, off_dir) = (support::TestDir::new(), support::TestDir::new());
    let fresh_dir = support::TestDir::new();
    for dir in [&on_dir, &off_dir, &fresh_dir] {
        dir.install(support::plugins(), "shell");
    }
    let ws = on_dir.workspace().canonicalize().unwrap();
    let off_ws = off_dir.workspace().canonicalize().unwrap();
    let fresh_ws = fresh_dir.workspace().canonicalize().unwrap();
    // Jails made on each command's path; `ahead` makes them ahead.
    let jail = Jail::default().spares(false);
    let ahead = Jail::default();
    let spec = spec_for(&ws);
    let tree = tempfile::tempdir().unwrap();
    let tree_path = tree.path().canonicalize().unwrap();
    let (tree_dirs, tree_files) = source_tree(&tree_path);
    let tree_spec = spec_for(&tree_path);
    let on = rt.block_on(shell_runtime(&on_dir, "on"));
    let off = rt.block_on(shell_runtime(&off_dir, "off"));
    let on_fresh = rt.block_on(shell_runtime_with(&fresh_dir, "on", false));
    rt.block_on(jailed(&jail, &spec));
    assert!(rt.block_on(ahead.make_ahead(&spec, Path::new(TRUE))), "jails are made ahead here");

    let mut group = c.benchmark_group("jail");
    group.bench_function("true, unjailed spawn", |b| b.to_async(&rt).iter(unjailed));
    group.bench_function("true, jailed spawn", |b| {
        b.to_async(&rt).iter(|| async { jailed(black_box(&jail), &spec).await })
    });
    group.bench_function("true, jailed spawn, started directly", |b| {
        b.to_async(&rt).iter(|| async { jailed_directly(black_box(&jail), &spec).await })
    });
    group.bench_function("shell `true`, jail off", |b| {
        b.to_async(&rt).iter(|| async { shell_true(black_box(&off), &off_ws).await })
    });
    group.bench_function("shell `true`, jail on", |b| {
        b.to_async(&rt).iter(|| async { shell_true(black_box(&on), &ws).await })
    });
    group.bench_function("shell `true`, jail on, spare_jails off", |b| {
        b.to_async(&rt).iter(|| async { shell_true(black_box(&on_fresh), &fresh_ws).await })
    });
    group.finish();

    // Interleaved rounds, so drift on a shared machine hits all alike.
    // Spaced: a command after a pause (as between an agent's turns), when
    // the launcher is ready; back to back: the next command comes as soon
    // as the last ends, and starts directly while the launcher moves on.
    let rounds = |spaced: bool| {
        let mut figures = [(); 9].map(|()| Vec::new());
        rt.block_on(async {
            for _ in 0..9 {
                figures[0].push(time(spaced, async || unjailed().await).await);
                figures[1].push(time(spaced, async || jailed(&jail, &spec).await).await);
                figures[2].push(time(spaced, async || jailed_directly(&jail, &spec).await).await);
                figures[3].push(time_ahead(spaced, &ahead, &spec).await);
                figures[4].push(time(spaced, async || shell_true(&off, &off_ws).await).await);
                figures[5].push(time(spaced, async || shell_true(&on, &ws).await).await);
                figures[6]
                    .push(time(spaced, async || shell_true(&on_fresh, &fresh_ws).await).await);
                figures[7].push(time(spaced, async || jailed(&jail, &tree_spec).await).await);
                figures[8].push(time(spaced, async || at_once(&jail, &spec).await).await);
            }
        });
        figures.map(median)
    };
    let spaced = rounds(true);
    let back_to_back = rounds(false);
    let (cold, prepared) = first_commands(9);
    println!("\n== figures ==");
    println!(
        "a host's first command (shell tool `true`, after a {} ms model turn, medians of 9 \
         fresh hosts each): {:.2} ms cold, {:.2} ms with the jail made ready during the turn",
        TURN.as_millis(),
        cold / 1e6,
        prepared / 1e6
    );
    for (
        name,
        [bare, jailed, direct, made_ahead, tool_off, tool_on, tool_fresh, in_tree, together],
    ) in [("spaced by 50 ms", spaced), ("back to back", back_to_back)]
    {
        println!("-- {name}");
        println!("`true` unjailed spawn:           {:>7.2} ms", bare / 1e6);
        println!("`true` jailed (Jail::spawn):     {:>7.2} ms", jailed / 1e6);
        println!("  jail cost per command:         {:>7.2} ms", (jailed - bare) / 1e6);
        println!("`true` jailed, started directly: {:>7.2} ms", direct / 1e6);
        println!("  jail cost per command:         {:>7.2} ms", (direct - bare) / 1e6);
        println!("`true` jailed, made ahead:       {:>7.2} ms", made_ahead / 1e6);
        println!("  jail cost per command:         {:>7.2} ms", (made_ahead - bare) / 1e6);
        println!("shell tool `true`, jail off:     {:>7.2} ms", tool_off / 1e6);
        println!("shell tool `true`, jail on:      {:>7.2} ms", tool_on / 1e6);
        println!(
            "  jail on / off (tool call):     {:>7.2}x (+{:.2} ms per call)",
            tool_on / tool_off,
            (tool_on - tool_off) / 1e6
        );
        println!(
            "shell tool `true`, no spares:    {:>7.2} ms (spare_jails = false)",
            tool_fresh / 1e6
        );
        println!(
            "  jail on / off (tool call):     {:>7.2}x (+{:.2} ms per call)",
            tool_fresh / tool_off,
            (tool_fresh - tool_off) / 1e6
        );
        println!(
            "`true` jailed, source tree:      {:>7.2} ms (+{:.2} ms over an empty workspace: \
             {tree_dirs} directories, {tree_files} files)",
            in_tree / 1e6,
            (in_tree - jailed) / 1e6
        );
        println!(
            "{AT_ONCE} `true` jailed at once:      {:>7.2} ms until the last exits ({:.2}x one alone)",
            together / 1e6,
            together / jailed
        );
    }
}

/// The mean time of a call: 12 calls each after a pause of 50 ms that is
/// not counted, or 30 back to back.
async fn time(spaced: bool, mut f: impl AsyncFnMut()) -> f64 {
    if !spaced {
        return ns_per_call(f, 30).await;
    }
    let calls = 12;
    let mut total = std::time::Duration::ZERO;
    for _ in 0..calls {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        let start = std::time::Instant::now();
        f().await;
        total += start.elapsed();
    }
    total.as_nanos() as f64 / calls as f64
}

/// [`time`] of `true` in a jail of `spec` made ahead: spaced, each after a
/// pause in which its jail is made (not counted); back to back, each as
/// soon as the last ended, in the jail made ahead if it is ready by then.
async fn time_ahead(spaced: bool, jail: &Jail, spec: &JailSpec) -> f64 {
    if !spaced {
        return ns_per_call(async || jailed(jail, spec).await, 30).await;
    }
    let calls = 12;
    let mut total = std::time::Duration::ZERO;
    for _ in 0..calls {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert!(jail.make_ahead(spec, Path::new(TRUE)).await);
        let start = std::time::Instant::now();
        jailed(jail, spec).await;
        total += start.elapsed();
    }
    total.as_nanos() as f64 / calls as f64
}

criterion_group!(benches, bench);

fn main() {
    if let Ok(mode) = std::env::var(FIRST) {
        first_command(&mode);
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
