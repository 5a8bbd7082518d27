//! Workspace checkpoint costs on a 10,000-file workspace (small files in
//! 100 directories): the checkpoints before and after a write-capable call
//! that changes one file (inotify says which; only that one is stat'ed and
//! hashed), and the base checkpoint (every file hashed and kept once).
//!
//! `cargo bench -p reson --bench checkpoint --profile dev` prints
//! criterion's figure and, last, one summary line per figure with its
//! target. Checkpoints go to an in-memory store (the checkpoint's own
//! cost) and to the file store with its default batched durability.

use criterion::{Criterion, criterion_group, criterion_main};
use reson::trace::{
    Durability, FileTraceStore, MemoryTraceStore, MessageTree, Trace, TraceMode, TraceStore,
};
use reson::workspace::{Options, Workspace};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::runtime::Runtime;

const DIRS: usize = 100;
const FILES_PER_DIR: usize = 100;

static NONCE: AtomicU64 = AtomicU64::new(0);

fn workspace(root: &Path) {
    for d in 0..DIRS {
        let dir = root.join(format!("pkg{d:03}"));
        std::fs::create_dir_all(&dir).unwrap();
        for f in 0..FILES_PER_DIR {
            std::fs::write(
                dir.join(format!("file{f:03}.rs")),
                format!("// {d} {f}\nfn f() {{}}\n"),
            )
            .unwrap();
        }
    }
}

fn percentile(mut v: Vec<f64>, p: usize) -> f64 {
    v.sort_by(f64::total_cmp);
    v[(v.len() * p / 100).min(v.len() - 1)]
}

async fn new_trace(store: &dyn TraceStore) -> String {
    let trace = Trace::new(TraceMode::Agent, "bench", "default");
    store.create_trace(&trace).await.unwrap();
    trace.id
}

/// A workspace whose base is taken; the next sequence to use.
async fn opened(store: &dyn TraceStore, root: &Path) -> (Workspace, String, u64) {
    let id = new_trace(store).await;
    let mut ws = Workspace::new(&id, Options::default());
    ws.before(store, &MessageTree::new(), 1, &[root.to_path_buf()]).await.unwrap();
    ws.after(store, 2, vec!["base".into()]).await.unwrap();
    (ws, id, 3)
}

/// Before + after one call that rewrites one file, the write not counted.
async fn around_a_call(store: &dyn TraceStore, ws: &mut Workspace, root: &Path, seq: u64) -> f64 {
    let roots = [root.to_path_buf()];
    let start = Instant::now();
    ws.before(store, &MessageTree::new(), seq, &roots).await.unwrap();
    let before = start.elapsed();
    let file = root.join(format!("pkg{:03}/file{:03}.rs", seq as usize % DIRS, seq as usize % 97));
    // Never the same bytes twice, whichever workspace wrote the file last.
    let nonce = NONCE.fetch_add(1, Ordering::Relaxed);
    std::fs::write(&file, format!("// changed at {seq}, write {nonce}\n")).unwrap();
    let start = Instant::now();
    let key = ws.after(store, seq + 1, vec![format!("call_{seq}")]).await.unwrap();
    let took = before + start.elapsed();
    assert!(key.is_some(), "the change is recorded");
    took.as_nanos() as f64
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let work = tempfile::tempdir().unwrap();
    let root: PathBuf = work.path().join("ws");
    workspace(&root);
    let root = root.canonicalize().unwrap();

    let memory = MemoryTraceStore::new();
    let (mut ws, _, mut seq) = rt.block_on(opened(&memory, &root));
    c.bench_function("checkpoint before+after a call, 10k files, memory store", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let ns = rt.block_on(around_a_call(&memory, &mut ws, &root, seq));
                seq += 2;
                total += Duration::from_nanos(ns as u64);
            }
            total
        })
    });
    let (mem_p50, mem_p95) = figures(&rt, &memory, &mut ws, &root, &mut seq);

    let files = FileTraceStore::open(work.path().join("traces"), Durability::Batched).unwrap();
    let (mut fws, _, mut fseq) = rt.block_on(opened(&files, &root));
    let (file_p50, file_p95) = figures(&rt, &files, &mut fws, &root, &mut fseq);

    let base = |store: &dyn TraceStore| {
        let samples = (0..3)
            .map(|_| {
                let start = Instant::now();
                rt.block_on(opened(store, &root));
                start.elapsed().as_nanos() as f64
            })
            .collect();
        percentile(samples, 50)
    };
    let base_memory = base(&memory);
    let base_files = base(&files);

    let ms = |ns: f64| ns / 1e6;
    println!("\n== figures ==");
    println!(
        "checkpoint around a call, 10k files, 1 changed, memory store: p50 {:>7.3} ms, p95 {:>7.3} ms  (target <= 1 ms)",
        ms(mem_p50),
        ms(mem_p95)
    );
    println!(
        "checkpoint around a call, 10k files, 1 changed, file store:   p50 {:>7.3} ms, p95 {:>7.3} ms",
        ms(file_p50),
        ms(file_p95)
    );
    println!("base checkpoint, 10k files, memory store:  {:>9.3} ms median", ms(base_memory));
    println!("base checkpoint, 10k files, file store:    {:>9.3} ms median", ms(base_files));
}

/// p50 and p95 of 300 calls.
fn figures(
    rt: &Runtime,
    store: &dyn TraceStore,
    ws: &mut Workspace,
    root: &Path,
    seq: &mut u64,
) -> (f64, f64) {
    let samples: Vec<f64> = (0..300)
        .map(|_| {
            let ns = rt.block_on(around_a_call(store, ws, root, *seq));
            *seq += 2;
            ns
        })
        .collect();
    (percentile(samples.clone(), 50), percentile(samples, 95))
}

criterion_group!(benches, bench);
criterion_main!(benches);
