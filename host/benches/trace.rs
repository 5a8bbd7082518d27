//! Trace store costs: the durable writes of one agent-loop step in files,
//! in PostgreSQL and in memory, the main path and rewind point of a
//! 100k-message trace in memory, and the same main path read from disk and
//! from PostgreSQL (a throwaway durable cluster on a Unix socket, fsync on).
//!
//! `cargo bench -p reson --bench trace` prints criterion's figures and,
//! last, one summary line per figure with its target.
//!
//! The store is async; each measured call is driven by `block_on` on a
//! current-thread tokio runtime, which adds well under a microsecond to a
//! step of hundreds.

#[path = "../../tests/support/postgres.rs"]
mod pg;

use criterion::{Criterion, criterion_group, criterion_main};
use reson::database::Database;
use reson::trace::{
    Durability, EventKind, FileTraceStore, GoalTree, MemoryTraceStore, Message, MessageTree,
    PgTraceStore, Role, ToolCall, Trace, TraceMode, TraceSnapshot, TraceStore, Usage,
};
use std::hint::black_box;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};
use tokio::runtime::Runtime;

const BIG: u64 = 100_000;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn assistant_with_call(i: u64) -> Message {
    let mut m = Message::new(
        Role::Assistant,
        "Let me look at the file that defines the parser first. ".repeat(5),
    );
    m.tool_calls = vec![ToolCall {
        id: format!("call_{i}"),
        name: "read".into(),
        arguments: r#"{"path":"src/parser/mod.rs","offset":0,"limit":200}"#.into(),
    }];
    m.usage = Usage {
        prompt_tokens: 12_000,
        completion_tokens: 80,
        cache_read_tokens: 11_000,
        ..Usage::default()
    };
    m.cost = 0.004;
    m.duration_ms = 900;
    m
}

fn tool_result(call: &ToolCall) -> Message {
    let mut m =
        Message::tool_result(call, "fn parse(input: &str) -> Result<Ast, Error> {\n".repeat(40));
    m.duration_ms = 3;
    m
}

/// One step of the agent loop as the store sees it: the model's message
/// with a tool call and the tool's result, each stored with the event that
/// announces it (one write each), and the tool's start and end events.
async fn step(store: &dyn TraceStore, trace: &mut Trace, i: u64) {
    let (call, _) =
        store.add_message_with_event(trace, assistant_with_call(i), None).await.unwrap();
    let tool = &call.tool_calls[0];
    store
        .append_event(
            trace,
            EventKind::ToolStarted {
                call_id: tool.id.clone(),
                name: tool.name.clone(),
                arguments: tool.arguments.clone(),
            },
        )
        .await
        .unwrap();
    store.add_message_with_event(trace, tool_result(tool), None).await.unwrap();
    store
        .append_event(
            trace,
            EventKind::ToolFinished {
                call_id: tool.id.clone(),
                name: tool.name.clone(),
                ok: true,
                summary: "40 lines".into(),
            },
        )
        .await
        .unwrap();
}

/// `store` with a new trace in it.
fn with_trace<S: TraceStore>(rt: &Runtime, store: S) -> (S, Trace) {
    let trace = Trace::new(TraceMode::Agent, "benchmark", "default");
    rt.block_on(store.create_trace(&trace)).unwrap();
    (store, trace)
}

fn new_store(rt: &Runtime, dir: &Path, durability: Durability) -> (FileTraceStore, Trace) {
    with_trace(rt, FileTraceStore::open(dir, durability).unwrap())
}

/// A 100k-message trace: a chain of steps (user, assistant with a tool
/// call, result), with a two-message side branch every 1000 messages.
fn big_trace(trace_id: &str) -> Vec<Message> {
    let mut messages = Vec::with_capacity(BIG as usize);
    let mut head = None;
    let push = |mut m: Message, parent: Option<u64>, messages: &mut Vec<Message>| {
        let seq = messages.len() as u64 + 1;
        m.sequence = seq;
        m.parent_sequence = parent;
        m.trace_id = trace_id.to_owned();
        m.id = format!("{trace_id}-{seq:04}");
        messages.push(m);
        seq
    };
    while (messages.len() as u64) < BIG - 6 {
        let i = messages.len() as u64;
        if i % 1000 == 999 {
            let a = push(Message::new(Role::User, "try another way"), head, &mut messages);
            push(Message::new(Role::Assistant, "ok"), Some(a), &mut messages);
        }
        let user = push(Message::new(Role::User, "go on"), head, &mut messages);
        let call = assistant_with_call(i);
        let result = tool_result(&call.tool_calls[0]);
        let call = push(call, Some(user), &mut messages);
        head = Some(push(result, Some(call), &mut messages));
    }
    messages
}

/// The same trace written to disk in the store's layout, directly: the
/// store's own writes would take minutes for 100k messages, and the
/// measurement is of reading.
fn write_big_trace(rt: &Runtime, dir: &Path) -> (FileTraceStore, String, u64) {
    let (store, mut trace) = new_store(rt, dir, Durability::Batched);
    let messages = big_trace(&trace.id);
    // One message a line, as the store appends them.
    let log = std::fs::File::create(dir.join(&trace.id).join("messages.jsonl")).unwrap();
    let mut log = std::io::BufWriter::new(log);
    for m in &messages {
        serde_json::to_writer(&mut log, m).unwrap();
        log.write_all(b"\n").unwrap();
    }
    log.flush().unwrap();
    let head = messages.last().unwrap().sequence;
    trace.last_sequence = head;
    trace.head_sequence = Some(head);
    rt.block_on(store.update_trace(&trace)).unwrap();
    (store, trace.id, head)
}

/// A PostgreSQL store on a fresh database of the durable cluster.
fn pg_store(rt: &Runtime) -> PgTraceStore {
    rt.block_on(async {
        let url = pg::durable_cluster().fresh_database().await;
        PgTraceStore::new(Database::connect(&url).await.unwrap())
    })
}

fn fsync_cost(dir: &Path) -> Vec<f64> {
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("fsync-probe"))
        .unwrap();
    (0..50)
        .map(|_| {
            file.write_all(&[b'x'; 300]).unwrap();
            let start = Instant::now();
            file.sync_data().unwrap();
            start.elapsed().as_nanos() as f64
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let work = tempfile::tempdir().unwrap();

    let mut steps = c.benchmark_group("loop-step-writes");
    for (name, durability) in
        [("batched", Durability::Batched), ("immediate", Durability::Immediate)]
    {
        let dir = work.path().join(name);
        let (store, mut trace) = new_store(&rt, &dir, durability);
        let mut i = 0;
        if durability == Durability::Immediate {
            steps.sample_size(10);
        }
        steps.bench_function(name, |b| {
            b.iter(|| {
                i += 1;
                rt.block_on(step(&store, &mut trace, i));
            })
        });
        rt.block_on(store.sync()).unwrap();
    }
    let (store, mut trace) = with_trace(&rt, pg_store(&rt));
    let mut i = 0;
    steps.sample_size(30);
    steps.bench_function("postgres", |b| {
        b.iter(|| {
            i += 1;
            rt.block_on(step(&store, &mut trace, i));
        })
    });
    drop(store);
    let (store, mut trace) = with_trace(&rt, MemoryTraceStore::new());
    let mut i = 0;
    steps.sample_size(100);
    steps.bench_function("memory", |b| {
        b.iter(|| {
            i += 1;
            rt.block_on(step(&store, &mut trace, i));
        })
    });
    drop(store);
    steps.finish();

    let messages = big_trace("tr_bench");
    let tree = MessageTree::from_messages(&messages);
    let head = messages.last().unwrap().sequence;
    let rewind_to = messages
        .iter()
        .rev()
        .find(|m| !m.tool_calls.is_empty() && m.sequence < head / 2)
        .unwrap()
        .sequence;
    assert_eq!(tree.rewind_point(rewind_to), rewind_to + 1);
    let mut big = c.benchmark_group("message-tree-100k");
    big.bench_function("main path + rewind point", |b| {
        b.iter(|| (black_box(tree.main_path(head)), black_box(tree.rewind_point(rewind_to))))
    });
    big.bench_function("build from messages", |b| {
        b.iter(|| black_box(MessageTree::from_messages(&messages)))
    });
    big.finish();

    // Summary, measured here so each line has its own median.
    let per_step = |store: &dyn TraceStore, trace: &mut Trace, sync: bool, rounds: u64| {
        let samples = (0..rounds)
            .map(|i| {
                let start = Instant::now();
                rt.block_on(async {
                    step(store, trace, i).await;
                    if sync {
                        store.sync().await.unwrap();
                    }
                });
                start.elapsed().as_nanos() as f64
            })
            .collect();
        rt.block_on(store.sync()).unwrap();
        median(samples)
    };
    let on_disk = |durability: Durability, sync: bool, rounds: u64| {
        let dir = tempfile::tempdir_in(work.path()).unwrap();
        let (store, mut trace) = new_store(&rt, dir.path(), durability);
        per_step(&store, &mut trace, sync, rounds)
    };
    let fsync = median(fsync_cost(work.path()));
    let batched = on_disk(Durability::Batched, false, 500);
    let batched_synced = on_disk(Durability::Batched, true, 50);
    let immediate = on_disk(Durability::Immediate, false, 50);
    let (store, mut trace) = with_trace(&rt, pg_store(&rt));
    let postgres = per_step(&store, &mut trace, false, 200);
    drop(store);
    let (store, mut trace) = with_trace(&rt, MemoryTraceStore::new());
    let memory = per_step(&store, &mut trace, false, 500);
    drop(store);
    let in_memory = median(
        (0..50)
            .map(|_| {
                let start = Instant::now();
                black_box((tree.main_path(head), tree.rewind_point(rewind_to)));
                start.elapsed().as_nanos() as f64
            })
            .collect(),
    );
    let build = median(
        (0..5)
            .map(|_| {
                let start = Instant::now();
                black_box(MessageTree::from_messages(&messages));
                start.elapsed().as_nanos() as f64
            })
            .collect(),
    );

    // The same 100k messages in PostgreSQL, stored as one imported snapshot.
    let store = pg_store(&rt);
    let mut big_pg = Trace::new(TraceMode::Agent, "benchmark", "default");
    big_pg.id = "tr_bench_pg".into();
    let mut pg_messages = messages.clone();
    for m in &mut pg_messages {
        m.trace_id = big_pg.id.clone();
    }
    big_pg.last_sequence = head;
    big_pg.head_sequence = Some(head);
    let snapshot = TraceSnapshot {
        trace: big_pg,
        messages: pg_messages,
        events: Vec::new(),
        goals: GoalTree::default(),
        images: Vec::new(),
        objects: Vec::new(),
        records: Vec::new(),
    };
    rt.block_on(store.import_trace(&snapshot)).unwrap();
    let on_path: std::collections::HashSet<u64> = tree.main_path(head).into_iter().collect();
    let mb = snapshot
        .messages
        .iter()
        .filter(|m| on_path.contains(&m.sequence))
        .map(|m| serde_json::to_string(m).unwrap().len())
        .sum::<usize>()
        / 1_000_000;
    drop(snapshot);
    let from_postgres = median(
        (0..5)
            .map(|_| {
                let start = Instant::now();
                let path = rt.block_on(store.get_main_path_messages("tr_bench_pg", head)).unwrap();
                let took = start.elapsed().as_nanos() as f64;
                assert_eq!(path.last().map(|m| m.sequence), Some(head));
                took
            })
            .collect(),
    );
    let path_only = median(
        (0..5)
            .map(|_| {
                let start = Instant::now();
                let path = rt.block_on(store.main_path_sequences("tr_bench_pg", head)).unwrap();
                let took = start.elapsed().as_nanos() as f64;
                assert_eq!(path, tree.main_path(head));
                took
            })
            .collect(),
    );
    drop(store);
    drop(messages);

    let disk = tempfile::tempdir_in(work.path()).unwrap();
    let (store, id, head) = write_big_trace(&rt, disk.path());
    let from_disk = median(
        (0..3)
            .map(|_| {
                let start = Instant::now();
                let path = rt.block_on(store.get_main_path_messages(&id, head)).unwrap();
                let took = start.elapsed().as_nanos() as f64;
                assert_eq!(path.last().map(|m| m.sequence), Some(head));
                took
            })
            .collect(),
    );
    let main_path_len = rt.block_on(store.get_main_path_messages(&id, head)).unwrap().len();
    let get = median(
        (0..20)
            .map(|_| {
                let start = Instant::now();
                black_box(rt.block_on(store.get_trace(&id)).unwrap());
                start.elapsed().as_nanos() as f64
            })
            .collect(),
    );
    drop(store);
    let ms = |ns: f64| Duration::from_nanos(ns as u64).as_secs_f64() * 1e3;
    println!("\n== figures ==");
    println!("fsync (300 B append + fdatasync):         {:>9.3} ms median", ms(fsync));
    println!(
        "loop step writes, batched (default):      {:>9.3} ms median  (target <= 1 ms)",
        ms(batched)
    );
    println!("loop step writes, batched + sync():       {:>9.3} ms median", ms(batched_synced));
    println!("loop step writes, immediate:              {:>9.3} ms median", ms(immediate));
    println!("loop step writes, PostgreSQL (durable):   {:>9.3} ms median", ms(postgres));
    println!("loop step writes, in memory:              {:>9.3} ms median", ms(memory));
    println!(
        "100k tree: main path + rewind point:      {:>9.3} ms median  (target <= 50 ms)",
        ms(in_memory)
    );
    println!("100k tree: build from messages:           {:>9.3} ms median", ms(build));
    println!(
        "100k trace from disk: main path ({main_path_len} msgs): {:>9.3} ms median",
        ms(from_disk)
    );
    println!("100k trace from disk: get (reconciled):   {:>9.3} ms median", ms(get));
    println!(
        "100k trace in PostgreSQL: main path (the walk, sequences): {:>7.3} ms median  (target <= 50 ms)",
        ms(path_only)
    );
    println!(
        "100k trace in PostgreSQL: main path with its messages ({mb} MB of JSON): {:>7.3} ms median",
        ms(from_postgres)
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);
