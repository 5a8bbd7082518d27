//! The file trace store under 1,000 traces written at once (tokio
//! multi-thread), as 1,000 concurrent sessions write them: each trace is
//! created, then gets 3 turns of 4 messages of a few KiB of JSON (the
//! user's, a tool call, its result, the answer), each with its event, as
//! the runner writes them (`add_message_with_event`).
//! Once with [`Durability::Batched`], once with [`Durability::Immediate`],
//! in a temp dir. Prints wall time and CPU (user + system, whole process)
//! per message stored. Then one trace's effect records, filed one per tool
//! call and read back each in turn as a replay does, at two sizes: the
//! time per read stays flat if each line is read once, and would grow
//! with the log if every read scanned it.
//! `nice -n 10 cargo bench -p reson-trace --bench file_writes`.

use criterion::{Criterion, criterion_group, criterion_main};
use reson_trace::{
    Durability, FileTraceStore, Message, Role, ToolCall, Trace, TraceFilter, TraceMode, TraceStore,
};
use std::sync::Arc;
use std::time::{Duration, Instant};

const TRACES: usize = 1_000;
const TURNS: usize = 3;
const MESSAGES_PER_TURN: usize = 4;

/// User + system CPU time of the whole process.
#[cfg(unix)]
fn cpu_time() -> Option<Duration> {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes a whole `rusage` into the pointer it is given.
    let usage = unsafe {
        libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr());
        usage.assume_init()
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1_000);
    Some(tv(usage.ru_utime) + tv(usage.ru_stime))
}

/// Neither std nor libc tells a process's CPU time on Windows.
#[cfg(not(unix))]
fn cpu_time() -> Option<Duration> {
    None
}

/// A few KiB of text, different per message so that nothing compresses
/// into a shared shape.
fn body(trace: usize, n: usize) -> String {
    let line = format!("trace {trace}, message {n}: the quick brown fox jumps over the lazy dog. ");
    line.repeat(2_500 / line.len() + 1)
}

/// One session's writes: create, then 3 turns of a user message, a tool
/// call, its result and the answer, each followed by its event.
async fn session(store: Arc<FileTraceStore>, n: usize) {
    let mut trace = Trace::new(TraceMode::Agent, "write a trace", "default");
    store.create_trace(&trace).await.unwrap();
    for turn in 0..TURNS {
        let call = ToolCall {
            id: format!("call_{turn}"),
            name: "echo".into(),
            arguments: serde_json::json!({ "text": body(n, turn) }).to_string(),
        };
        let mut asks = Message::new(Role::Assistant, "");
        asks.tool_calls = vec![call.clone()];
        let messages = [
            Message::new(Role::User, body(n, turn)),
            asks,
            Message::tool_result(&call, body(n, turn + 1)),
            Message::new(Role::Assistant, body(n, turn + 2)),
        ];
        for message in messages {
            store.add_message_with_event(&mut trace, message, None).await.unwrap();
        }
    }
}

/// Writes [`TRACES`] sessions at once into a fresh store; wall time and
/// process CPU (where it is known), the store's last syncs included.
async fn round(durability: Durability) -> (Duration, Option<Duration>) {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(FileTraceStore::open(dir.path(), durability).unwrap());
    let (wall, cpu) = (Instant::now(), cpu_time());
    let sessions: Vec<_> =
        (0..TRACES).map(|n| tokio::spawn(session(Arc::clone(&store), n))).collect();
    for s in sessions {
        s.await.unwrap();
    }
    store.sync().await.unwrap();
    let taken = (wall.elapsed(), cpu_time().zip(cpu).map(|(now, before)| now - before));
    let traces = store.list_traces(&TraceFilter::default()).await.unwrap();
    assert_eq!(traces.len(), TRACES);
    for trace in traces.iter().step_by(97) {
        let written = store.get_messages(&trace.id).await.unwrap();
        assert_eq!(written.len(), TURNS * MESSAGES_PER_TURN);
    }
    taken
}

/// Files `records` effect records (a few hundred bytes each) to one trace,
/// then reads each back in order from a store opened afresh (its index
/// cold); the time per read.
async fn records_read_back(records: usize) -> Duration {
    let dir = tempfile::tempdir().unwrap();
    let store = FileTraceStore::open(dir.path(), Durability::Batched).unwrap();
    let trace = Trace::new(TraceMode::Agent, "replay me", "default");
    store.create_trace(&trace).await.unwrap();
    let effects = |i: usize| {
        serde_json::json!({ "reads": [{ "path": format!("src/file_{i}.rs"), "sha256": "ab".repeat(32) }],
                            "output": body(i, 0)[..200] })
    };
    for i in 0..records {
        store.put_record(&trace.id, "effects", &format!("call_{i}"), &effects(i)).await.unwrap();
    }
    store.sync().await.unwrap();
    let store = FileTraceStore::open(dir.path(), Durability::Batched).unwrap();
    let start = Instant::now();
    for i in 0..records {
        let found = store.get_record(&trace.id, "effects", &format!("call_{i}")).await.unwrap();
        assert_eq!(found, Some(effects(i)));
    }
    start.elapsed() / records as u32
}

fn file_writes(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let messages = (TRACES * TURNS * MESSAGES_PER_TURN) as u32;
    let durabilities = [("batched", Durability::Batched), ("immediate", Durability::Immediate)];
    // One round each first, for the figures: a round takes seconds, and
    // `cargo bench ... -- figures` (a filter no benchmark matches) prints
    // them alone.
    println!("== figures ==");
    for (name, durability) in durabilities {
        let (wall, cpu) = rt.block_on(round(durability));
        let cpu = cpu.map_or("not measured".to_owned(), |cpu| {
            format!("{:.1} us per message", (cpu / messages).as_secs_f64() * 1e6)
        });
        println!(
            "{name}: {TRACES} traces x {TURNS} turns x {MESSAGES_PER_TURN} messages + events: \
             wall {:.2} s ({:.1} us per message), CPU {cpu}",
            wall.as_secs_f64(),
            (wall / messages).as_secs_f64() * 1e6,
        );
    }
    let (small, large) = (1_000, 4_000);
    let (per_small, per_large) =
        rt.block_on(async { (records_read_back(small).await, records_read_back(large).await) });
    println!(
        "records read back in turn, one trace: {:.1} us per read of {small}, {:.1} us per read \
         of {large} ({:.2}x: 1 is linear, {}x would be a scan per read)",
        per_small.as_secs_f64() * 1e6,
        per_large.as_secs_f64() * 1e6,
        per_large.as_secs_f64() / per_small.as_secs_f64(),
        large / small,
    );
    let mut group = c.benchmark_group("file_writes");
    group.sample_size(10).measurement_time(Duration::from_secs(20));
    for (name, durability) in durabilities {
        group.bench_function(format!("{TRACES}_traces_{name}"), |b| {
            b.to_async(&rt).iter_custom(|iters| async move {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    total += round(durability).await.0;
                }
                total
            })
        });
    }
    group.finish();
}

criterion_group!(benches, file_writes);
criterion_main!(benches);
