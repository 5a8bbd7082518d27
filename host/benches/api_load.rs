//! `reson serve` under load, on loopback: 50 concurrent runs on the real
//! scripted provider (400 ms of model time, one call of the real echo
//! tool each), every run watched by 4 WebSockets from its start — 200
//! watchers on one in-process server over the durable file store. Asserts
//! that every watcher got each of its trace's event ids from 1 to the last
//! exactly once; prints the delivery latency of the events (p50, p99, max)
//! and the total time. `cargo bench -p reson --bench api_load`.

#[path = "../../tests/support/mod.rs"]
mod support;

use support::api as api_support;

use std::time::Instant;

// The `reson` binary's allocator, so the figures are the server's.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const RUNS: usize = 50;
const WATCHERS_PER_RUN: usize = 4;

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let (dir, toml) = api_support::load_dir();
        let server = api_support::InProcess::start(&dir, &toml).await;
        // One run first, so that plugin instances and the store are warm.
        api_support::load(&server.api, 1, 1).await;

        let load = api_support::load(&server.api, RUNS, WATCHERS_PER_RUN).await;
        let shutdown = Instant::now();
        server.stop().await;
        println!("== figures ==");
        println!("runs at once                     {RUNS}");
        println!("watchers                         {}", RUNS * WATCHERS_PER_RUN);
        println!("events delivered (none lost)     {}", load.events);
        println!("live frames delivered (deltas)   {}", load.live_frames);
        println!(
            "event delivery latency, p50/p99  {:.1} ms / {:.1} ms (max {:.1} ms, {} events timed)",
            load.percentile(50),
            load.percentile(99),
            load.latencies_ms.last().unwrap(),
            load.latencies_ms.len()
        );
        println!("total, first request to last trace_finished  {:.2} s", load.took.as_secs_f64());
        println!(
            "shutdown                         {:.0} ms",
            shutdown.elapsed().as_secs_f64() * 1e3
        );
    });
}
