//! 1,000 concurrent sessions in one process: each runs 3 turns on the real
//! scripted provider component (200 ms of model latency per turn, spent
//! asleep inside the guest) with one call of the real echo tool component
//! per turn. Once on the in-memory trace store, twice on the file store in
//! a temp dir (`batched`: a write survives a kill at once and is fsync'd
//! moments later; `immediate`: no write returns before its fsync, the
//! fsyncs group-committed across traces), once on PostgreSQL (a throwaway
//! durable cluster on a Unix socket, fsync on). Prints wall time against a
//! single session, peak OS threads, peak RSS and CPU per loop iteration.
//! `cargo bench -p reson --bench concurrency`.

#[path = "../../tests/support/mod.rs"]
mod support;

use support::postgres as pg;

use criterion::{Criterion, criterion_group, criterion_main};
use reson::agent::{AgentBuilder, AgentSession, BasicAgent, Hooks, RuntimeBundle};
use reson::database::{Database, DatabaseOptions};
use reson::plugin::Runtime;
use reson::provider::PluginProvider;
use reson::tools::ToolRegistry;
use reson::trace::{Durability, FileTraceStore, MemoryTraceStore, PgTraceStore, TraceStore};
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};

// The `reson` binary's allocator: the system one spends a quarter of this
// run's CPU contending for its arenas across threads.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const SESSIONS: usize = 1_000;
const TURNS: usize = 3;
const MODEL_DELAY_MS: u64 = 200;
/// Loop iterations per turn: the model asks for echo, then answers.
const ITERATIONS_PER_TURN: usize = 2;

/// A field of /proc/self/status, in its own unit (kB for memory).
fn status_field(name: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(name)?.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// User + system CPU time of the whole process.
fn cpu_time() -> Duration {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes a whole `rusage` into the pointer it is given.
    let usage = unsafe {
        libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr());
        usage.assume_init()
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1_000);
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

fn bundle(runtime: &Runtime, store: Arc<dyn TraceStore>) -> RuntimeBundle {
    AgentBuilder::new()
        .provider(Arc::new(PluginProvider::new(runtime.clone(), "scripted")))
        .tools(ToolRegistry::new(runtime.clone()))
        .hooks(Hooks::none())
        .store(store)
        .build()
        .expect("complete bundle")
}

async fn session(bundle: RuntimeBundle) {
    let agent = Arc::new(BasicAgent::new("bench", "You echo what you are told."));
    let mut session = AgentSession::new(agent, bundle).expect("session");
    for turn in 0..TURNS {
        let outcome = session.submit_turn(&format!("echo turn {turn}")).await.expect("turn");
        assert_eq!(outcome.tool_calls, 1);
        assert_eq!(outcome.text, format!("turn {turn} done"));
    }
}

/// Runs `sessions` sessions at once; their wall time.
async fn wave(bundle: &RuntimeBundle, sessions: usize) -> Duration {
    let start = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..sessions {
        set.spawn(session(bundle.clone()));
    }
    let mut done = 0;
    while let Some(finished) = set.join_next().await {
        finished.expect("session task");
        done += 1;
    }
    assert_eq!(done, sessions, "every session completes");
    start.elapsed()
}

struct Figures {
    wall: Duration,
    threads: usize,
    cpu_per_iteration: Duration,
}

fn measured(tokio: &tokio::runtime::Runtime, bundle: &RuntimeBundle) -> Figures {
    let cpu = cpu_time();
    let (wall, threads) = tokio.block_on(async {
        let threads = support::ThreadPeak::start();
        let wall = wave(bundle, SESSIONS).await;
        (wall, threads.stop().await)
    });
    let iterations = (SESSIONS * TURNS * ITERATIONS_PER_TURN) as u32;
    Figures { wall, threads, cpu_per_iteration: (cpu_time() - cpu) / iterations }
}

fn bench(c: &mut Criterion) {
    let dir = support::TestDir::new();
    dir.install(support::plugins(), "scripted").install(support::plugins(), "echo");
    let turns: Vec<serde_json::Value> = (0..TURNS)
        .flat_map(|turn| {
            [
                json!({ "delay_ms": MODEL_DELAY_MS,
                        "tool_calls": [{ "name": "echo", "arguments": { "text": format!("turn {turn}") } }] }),
                json!({ "text": format!("turn {turn} done") }),
            ]
        })
        .collect();
    let script = dir.path().join("script.json");
    std::fs::write(&script, json!({ "turns": turns }).to_string()).unwrap();
    // Each session's model call holds an instance while it waits, as a
    // real provider's does while its request is out.
    let config = format!(
        "[sandbox]\nmax_instances = {}\nmax_memory_mb = 64\n\n[plugins.scripted]\n\
         dirs = [{{ path = \".\", access = \"read\" }}]\nconfig = {{ script = \"{}\" }}\n",
        SESSIONS + 64,
        script.display()
    );
    let tokio = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let runtime = tokio.block_on(dir.open(&config));
    let memory = bundle(&runtime, Arc::new(MemoryTraceStore::new()));
    let traces = tempfile::tempdir().unwrap();
    let file = bundle(
        &runtime,
        Arc::new(FileTraceStore::open(traces.path().join("b"), Durability::Batched).unwrap()),
    );
    let fsynced = bundle(
        &runtime,
        Arc::new(FileTraceStore::open(traces.path().join("i"), Durability::Immediate).unwrap()),
    );
    let database = tokio.block_on(async {
        let url = pg::durable_cluster().fresh_database().await;
        Database::connect_with(&DatabaseOptions::new(url).max_connections(32)).await.unwrap()
    });
    let postgres = bundle(&runtime, Arc::new(PgTraceStore::new(database)));

    let single = tokio.block_on(wave(&memory, 1));
    let in_memory = measured(&tokio, &memory);
    let on_files = measured(&tokio, &file);
    let on_fsynced = measured(&tokio, &fsynced);
    let on_postgres = measured(&tokio, &postgres);
    // Before criterion's own rounds, which keep adding traces to the
    // in-memory store.
    let peak_rss_mib = status_field("VmHWM:") as f64 / 1024.0;

    let mut group = c.benchmark_group("concurrency");
    // A wave takes seconds: ten of them, each timed alone, are enough.
    group
        .sample_size(10)
        .sampling_mode(criterion::SamplingMode::Flat)
        .warm_up_time(Duration::from_millis(1))
        .measurement_time(Duration::from_secs(10));
    group.bench_function("1000 sessions x 3 turns, in-memory store", |b| {
        b.iter_custom(|n| (0..n).map(|_| tokio.block_on(wave(&memory, SESSIONS))).sum())
    });
    group.bench_function("1000 sessions x 3 turns, file store", |b| {
        b.iter_custom(|n| (0..n).map(|_| tokio.block_on(wave(&file, SESSIONS))).sum())
    });
    group.bench_function("1000 sessions x 3 turns, file store, immediate", |b| {
        b.iter_custom(|n| (0..n).map(|_| tokio.block_on(wave(&fsynced, SESSIONS))).sum())
    });
    group.bench_function("1000 sessions x 3 turns, PostgreSQL store", |b| {
        b.iter_custom(|n| (0..n).map(|_| tokio.block_on(wave(&postgres, SESSIONS))).sum())
    });
    group.finish();

    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!("\n== figures ==");
    println!("one session, in-memory store:        {:>8.1} ms", ms(single));
    let targets = [
        ("in-memory", &in_memory, "target <= 900 ms"),
        ("files, batched", &on_files, "target <= 3 s"),
        ("files, immediate", &on_fsynced, "target <= 3 s"),
        ("postgres", &on_postgres, "target <= 5 s"),
    ];
    for (name, f, target) in targets {
        println!(
            "{SESSIONS} sessions, {name:<16} store: {:>8.1} ms = {:.2}x one session ({target})",
            ms(f.wall),
            f.wall.as_secs_f64() / single.as_secs_f64(),
        );
        println!("  peak OS threads:                   {:>8}      (target <= 64)", f.threads);
        println!(
            "  CPU per loop iteration:            {:>8.3} ms  ({} iterations on 2 cores)",
            ms(f.cpu_per_iteration),
            SESSIONS * TURNS * ITERATIONS_PER_TURN
        );
    }
    println!(
        "  file store over in-memory:         {:>8.1} ms wall, {:.3} ms CPU per iteration",
        ms(on_files.wall.saturating_sub(in_memory.wall)),
        ms(on_files.cpu_per_iteration.saturating_sub(in_memory.cpu_per_iteration))
    );
    println!(
        "  files, immediate over in-memory:   {:>8.1} ms wall, {:.3} ms CPU per iteration",
        ms(on_fsynced.wall.saturating_sub(in_memory.wall)),
        ms(on_fsynced.cpu_per_iteration.saturating_sub(in_memory.cpu_per_iteration))
    );
    println!(
        "  PostgreSQL over in-memory:         {:>8.1} ms wall, {:.3} ms CPU per iteration (host side)",
        ms(on_postgres.wall.saturating_sub(in_memory.wall)),
        ms(on_postgres.cpu_per_iteration.saturating_sub(in_memory.cpu_per_iteration))
    );
    println!("peak RSS of the process:             {peak_rss_mib:>8.1} MiB (target <= 1536)");
}

criterion_group!(benches, bench);
criterion_main!(benches);
