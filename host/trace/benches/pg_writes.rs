//! The PostgreSQL store under the write load of 1,000 concurrent runs:
//! each creates its trace, then for 3 turns stores 4 messages with their
//! `message_added` events and updates the trace's metadata, as the agent
//! loop does, all at once, on a throwaway durable cluster (fsync and
//! synchronous commit on, Unix socket) through a pool of 32 connections.
//! Measured with writes group-committed across traces (the store's
//! default) and with each write committed alone (as before), each on a
//! fresh database; prints wall time, commits and commits per second.
//! `cargo bench -p reson-trace --bench pg_writes`.

#[cfg(unix)]
#[path = "../../../tests/support/postgres.rs"]
mod pg;

#[cfg(unix)]
criterion::criterion_main!(unix::benches);

#[cfg(not(unix))]
fn main() {
    eprintln!("pg_writes runs on Unix only: its PostgreSQL cluster listens on a Unix socket");
}

#[cfg(unix)]
mod unix {
    use criterion::{Criterion, criterion_group};
    use reson_trace::database::{Database, DatabaseOptions};
    use reson_trace::{Message, PgTraceStore, Role, Trace, TraceMode, TraceStore};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::{Duration, Instant};

    const TRACES: usize = 1_000;
    const TURNS: usize = 3;
    const MESSAGES_PER_TURN: usize = 4;
    /// The create, then per turn the messages and the metadata update.
    const WRITES_PER_TRACE: usize = 1 + TURNS * (MESSAGES_PER_TURN + 1);

    /// One wave: `TRACES` runs writing at once; returns its wall time.
    async fn wave(store: &Arc<PgTraceStore>, wave: usize) -> Duration {
        let start = Instant::now();
        let runs: Vec<_> = (0..TRACES)
            .map(|i| {
                let store = Arc::clone(store);
                tokio::spawn(async move {
                    let mut trace = Trace::new(TraceMode::Agent, "fix the bug", "default");
                    trace.id = format!("w{wave}-{i}");
                    store.create_trace(&trace).await.unwrap();
                    for turn in 0..TURNS {
                        for m in 0..MESSAGES_PER_TURN {
                            let text = format!("turn {turn}, message {m}: {}", "x".repeat(200));
                            store
                                .add_message_with_event(
                                    &mut trace,
                                    Message::new(Role::User, text),
                                    None,
                                )
                                .await
                                .unwrap();
                        }
                        trace.updated_at_ms += 1;
                        store.update_trace(&trace).await.unwrap();
                    }
                })
            })
            .collect();
        for run in runs {
            run.await.unwrap();
        }
        start.elapsed()
    }

    /// A wave's wall time and the write transactions it committed.
    struct Figures {
        wall: Duration,
        commits: u64,
    }

    fn bench(c: &mut Criterion) {
        let tokio = tokio::runtime::Runtime::new().unwrap();
        let store = |grouped: bool| {
            tokio.block_on(async {
                let url = super::pg::durable_cluster().fresh_database().await;
                let options = DatabaseOptions::new(url).max_connections(32);
                let db = Database::connect_with(&options).await.unwrap();
                Arc::new(if grouped {
                    PgTraceStore::new(db)
                } else {
                    PgTraceStore::one_commit_per_write(db)
                })
            })
        };
        let grouped = store(true);
        let alone = store(false);
        let waves = AtomicUsize::new(0);
        let measured = |store: &Arc<PgTraceStore>| {
            let before = store.write_commits();
            let wall = tokio.block_on(wave(store, waves.fetch_add(1, Ordering::Relaxed)));
            Figures { wall, commits: store.write_commits() - before }
        };
        let on_alone = measured(&alone);
        let on_grouped = measured(&grouped);

        let mut group = c.benchmark_group("pg_writes");
        // A wave takes seconds: ten of them, each timed alone, are enough.
        group
            .sample_size(10)
            .sampling_mode(criterion::SamplingMode::Flat)
            .warm_up_time(Duration::from_millis(1))
            .measurement_time(Duration::from_secs(10));
        for (name, store) in [("one commit per write", &alone), ("group commit", &grouped)] {
            group.bench_function(format!("1000 traces x 3 turns, {name}"), |b| {
                b.iter_custom(|n| {
                    (0..n)
                        .map(|_| tokio.block_on(wave(store, waves.fetch_add(1, Ordering::Relaxed))))
                        .sum()
                })
            });
        }
        group.finish();

        let writes = TRACES * WRITES_PER_TRACE;
        println!("\n== figures ==");
        println!(
            "{TRACES} traces x {TURNS} turns at once, {writes} writes, durable PostgreSQL, 32 connections"
        );
        for (name, f) in [("one commit per write", &on_alone), ("group commit", &on_grouped)] {
            let secs = f.wall.as_secs_f64();
            println!(
                "  {name:<21} {:>8.1} ms, {:>6} commits = {:>7.0} commits/s, {:>7.0} writes/s",
                secs * 1e3,
                f.commits,
                f.commits as f64 / secs,
                writes as f64 / secs,
            );
        }
        println!(
            "  group commit / one commit per write: {:.2}x the wall time",
            on_grouped.wall.as_secs_f64() / on_alone.wall.as_secs_f64()
        );
    }

    criterion_group!(benches, bench);
}
