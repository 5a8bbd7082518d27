//! Whether answering for another user's trace takes longer than answering
//! for a missing one (a timing oracle of its existence): an in-process
//! `reson serve` over the file store with two users; Bob asks
//! `GET /api/traces/{id}` for Alice's trace, for a missing id and for his
//! own, interleaved, and the medians are printed with their ratio.
//! `cargo bench -p reson --bench api_access`.

#[path = "../../tests/support/mod.rs"]
mod support;

use reson::api::users::{Role, TokenFile};
use std::time::{Duration, Instant};
use support::api as api_support;

// The `reson` binary's allocator, so the figures are the server's.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const ROUNDS: usize = 2_000;
const MISSING: &str = "tr_000000000000";

fn median(times: &mut [Duration]) -> f64 {
    times.sort_unstable();
    times[times.len() / 2].as_secs_f64() * 1e6
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let (dir, toml) = api_support::load_dir();
        let tokens = TokenFile::new(dir.path().join("tokens.toml"));
        let (_, alice) = tokens.add("alice", Role::User).unwrap();
        let (_, bob) = tokens.add("bob", Role::User).unwrap();
        let toml = format!("{toml}\n[server]\ntoken_file = {:?}\n", tokens.path());
        let server = api_support::InProcess::start(&dir, &toml).await;
        let alice = server.api.with_token(Some(&alice));
        let bob = server.api.with_token(Some(&bob));
        let hers = alice.start("alice's work", serde_json::json!({})).await;
        alice.finish(&hers, 0).await;
        let his = bob.start("bob's work", serde_json::json!({})).await;
        bob.finish(&his, 0).await;

        let paths = [hers.as_str(), MISSING, his.as_str()].map(|id| format!("/api/traces/{id}"));
        let mut times: [Vec<Duration>; 3] = Default::default();
        for round in 0..ROUNDS + 100 {
            for (i, path) in paths.iter().enumerate() {
                let started = Instant::now();
                let reply = bob.get(path).await;
                let took = started.elapsed();
                assert_eq!(reply.status, if i == 2 { 200 } else { 404 }, "{path}: {}", reply.text);
                // The first rounds warm the connection and the caches.
                if round >= 100 {
                    times[i].push(took);
                }
            }
        }
        server.stop().await;
        let [theirs, missing, own] = times.each_mut().map(|t| median(t));
        println!("== figures ({ROUNDS} rounds, interleaved; medians) ==");
        println!("another user's trace (404)   {theirs:.1} µs");
        println!("a missing trace (404)        {missing:.1} µs");
        println!("the caller's own trace (200) {own:.1} µs");
        println!("another's / missing          {:.2}x", theirs / missing);
    });
}
