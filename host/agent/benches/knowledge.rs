//! Knowledge search latency on 100k entries (`KNOWLEDGE_ENTRIES` sets
//! another count): the `tantivy` file store and
//! the PostgreSQL store (a throwaway durable cluster of the test harness),
//! each filled once with the same synthetic entries (a varied vocabulary:
//! titles, notes of several sentences, tags, made-up service and host
//! names), then searched with queries of two to four words in three
//! scopes, ten hits each.
//!
//! `KNOWLEDGE_STORES=postgres` (or `files`) measures one store alone.
//!
//! `cargo bench -p reson-agent --bench knowledge` prints criterion's
//! figures, then `== figures ==`: p50 and p95 of single searches on each
//! store (target: p50 under 20 ms), and how long each took to fill.

#[path = "../../../tests/support/postgres.rs"]
mod pg;

use criterion::{Criterion, criterion_group, criterion_main};
use reson_agent::knowledge::{Draft, FileKnowledgeStore, KnowledgeStore, PgKnowledgeStore};
use reson_agent::scope::{Scope, Visible};
use reson_trace::database::Database;
use std::hint::black_box;
use std::time::{Duration, Instant};
use tokio::runtime::Runtime;

/// Entries each store is filled with, unless `KNOWLEDGE_ENTRIES` says
/// otherwise (to see how a search grows: 10k, 100k, 1M).
fn entries() -> usize {
    std::env::var("KNOWLEDGE_ENTRIES").ok().and_then(|n| n.parse().ok()).unwrap_or(100_000)
}
/// Whether `KNOWLEDGE_STORES` (a comma-separated list; both stores when
/// unset) names `store`: filling the file store with 1M entries takes
/// minutes that a look at PostgreSQL alone can skip.
fn wanted(store: &str) -> bool {
    std::env::var("KNOWLEDGE_STORES")
        .map_or(true, |list| list.split(',').any(|s| s.trim() == store))
}
const BATCH: usize = 10_000;
/// Single searches timed for the percentiles, per store.
const SAMPLES: usize = 400;

#[rustfmt::skip]
const NOUNS: &[&str] = &[
    "database", "backup", "replica", "index", "query", "migration", "schema", "table", "cache",
    "queue", "worker", "scheduler", "deployment", "release", "rollback", "pipeline", "build",
    "artifact", "image", "container", "cluster", "node", "pod", "service", "gateway", "proxy",
    "certificate", "secret", "token", "password", "key", "vault", "policy", "role", "permission",
    "account", "user", "session", "cookie", "header", "request", "response", "endpoint", "route",
    "handler", "middleware", "timeout", "retry", "backoff", "limit", "quota", "budget", "alert",
    "dashboard", "metric", "trace", "log", "span", "incident", "outage", "postmortem", "runbook",
    "oncall", "rotation", "schedule", "calendar", "meeting", "review", "approval", "branch",
    "commit", "merge", "conflict", "rebase", "tag", "version", "dependency", "crate", "package",
    "library", "module", "function", "struct", "trait", "macro", "test", "fixture", "benchmark",
    "profile", "flamegraph", "memory", "leak", "thread", "lock", "deadlock", "channel", "socket",
    "connection", "pool", "driver", "parser", "tokenizer", "compiler", "linker", "toolchain",
    "editor", "terminal", "shell", "script", "cron", "job", "batch", "stream", "event", "topic",
    "partition", "offset", "consumer", "producer", "bucket", "object", "upload", "download",
    "disk", "volume", "snapshot", "filesystem", "permission", "network", "firewall", "subnet",
    "dns", "record", "domain", "email", "template", "notification", "webhook", "payment",
    "invoice", "customer", "order", "shipment", "inventory", "report", "export", "import",
    "spreadsheet", "chart", "frontend", "component", "stylesheet", "theme", "font", "layout",
    "accessibility", "translation", "locale", "timezone", "timestamp", "calendar", "holiday",
];
#[rustfmt::skip]
const VERBS: &[&str] = &[
    "configure", "restore", "rotate", "upgrade", "debug", "monitor", "tune", "migrate", "deploy",
    "rollback", "cache", "invalidate", "throttle", "retry", "shard", "replicate", "compress",
    "encrypt", "decrypt", "sign", "verify", "validate", "parse", "render", "schedule", "cancel",
    "archive", "prune", "vacuum", "reindex", "profile", "benchmark", "bisect", "patch", "review",
    "approve", "merge", "release", "tag", "build", "package", "install", "bootstrap", "provision",
];
#[rustfmt::skip]
const ADJECTIVES: &[&str] = &[
    "slow", "flaky", "nightly", "weekly", "stale", "broken", "missing", "duplicate", "large",
    "small", "remote", "local", "internal", "public", "private", "legacy", "new", "default",
    "custom", "shared", "primary", "secondary", "temporary", "permanent", "encrypted", "signed",
    "failing", "healthy", "degraded", "expired", "pending", "blocked", "concurrent", "idempotent",
];
#[rustfmt::skip]
const TEAMS: &[&str] = &[
    "payments", "search", "billing", "identity", "platform", "mobile", "web", "data", "infra",
    "support", "growth", "security", "storage", "messaging", "analytics", "checkout",
];
#[rustfmt::skip]
const TOOLS: &[&str] = &[
    "postgres", "redis", "kafka", "nginx", "envoy", "kubectl", "helm", "terraform", "ansible",
    "docker", "podman", "cargo", "rustc", "clippy", "pytest", "ruff", "npm", "webpack", "vite",
    "grafana", "prometheus", "loki", "jaeger", "sentry", "vault", "consul", "git", "gerrit",
    "jenkins", "bazel", "make", "cmake", "systemd", "journald", "rsync", "restic", "barman",
];

fn pick<'a>(rng: &mut fastrand::Rng, words: &[&'a str]) -> &'a str {
    words[rng.usize(..words.len())]
}

fn sentence(rng: &mut fastrand::Rng) -> String {
    let service = format!("{}-{}", pick(rng, TEAMS), rng.u32(1..400));
    match rng.u8(..6) {
        0 => format!(
            "To {} the {} {} of {service}, run {} with the {} flag.",
            pick(rng, VERBS),
            pick(rng, ADJECTIVES),
            pick(rng, NOUNS),
            pick(rng, TOOLS),
            pick(rng, NOUNS)
        ),
        1 => format!(
            "The {} {} on host {}{:02} fails when the {} is {}; {} it first.",
            pick(rng, ADJECTIVES),
            pick(rng, NOUNS),
            pick(rng, TEAMS),
            rng.u8(1..60),
            pick(rng, NOUNS),
            pick(rng, ADJECTIVES),
            pick(rng, VERBS)
        ),
        2 => format!(
            "Never {} a {} {} in production without a {} from the {} team.",
            pick(rng, VERBS),
            pick(rng, ADJECTIVES),
            pick(rng, NOUNS),
            pick(rng, NOUNS),
            pick(rng, TEAMS)
        ),
        3 => format!(
            "{service} keeps its {} in {}, and {} them every {} hours.",
            pick(rng, NOUNS),
            pick(rng, TOOLS),
            pick(rng, VERBS),
            rng.u8(1..48)
        ),
        4 => format!(
            "If the {} {} times out, raise the {} {} to {} seconds and {} the {}.",
            pick(rng, NOUNS),
            pick(rng, NOUNS),
            pick(rng, NOUNS),
            pick(rng, NOUNS),
            rng.u16(5..600),
            pick(rng, VERBS),
            pick(rng, NOUNS)
        ),
        _ => format!(
            "Ask {} about the {} {}: they own {} and the {} runbook.",
            pick(rng, TEAMS),
            pick(rng, ADJECTIVES),
            pick(rng, NOUNS),
            service,
            pick(rng, NOUNS)
        ),
    }
}

fn draft(rng: &mut fastrand::Rng, i: usize) -> Draft {
    let title = format!(
        "{} the {} {} in {}",
        pick(rng, VERBS),
        pick(rng, ADJECTIVES),
        pick(rng, NOUNS),
        pick(rng, TEAMS)
    );
    let content: Vec<String> = (0..rng.usize(2..7)).map(|_| sentence(rng)).collect();
    let tags: Vec<&str> = (0..rng.usize(1..4)).map(|_| pick(rng, TOOLS)).collect();
    // A tenth of the entries belong to each of ten users; the rest are
    // global.
    let scope = match i % 20 {
        0..10 => Scope::User(format!("user{}", i % 10)),
        _ => Scope::Global,
    };
    Draft {
        id: Some(format!("kn_bench_{i:06}")),
        ..Draft::new(scope, &title, &content.join(" "), &tags)
    }
}

fn queries(rng: &mut fastrand::Rng) -> Vec<String> {
    (0..200)
        .map(|_| match rng.u8(..3) {
            0 => format!("{} {}", pick(rng, VERBS), pick(rng, NOUNS)),
            1 => format!("{} {} {}", pick(rng, ADJECTIVES), pick(rng, NOUNS), pick(rng, TOOLS)),
            _ => format!(
                "how to {} the {} {} {}",
                pick(rng, VERBS),
                pick(rng, NOUNS),
                pick(rng, NOUNS),
                pick(rng, TEAMS)
            ),
        })
        .collect()
}

/// Fills `store` with the entries; how long it took.
fn fill(rt: &Runtime, store: &dyn KnowledgeStore) -> Duration {
    let mut rng = fastrand::Rng::with_seed(7);
    let started = Instant::now();
    let entries = entries();
    for first in (0..entries).step_by(BATCH) {
        let drafts = (first..(first + BATCH).min(entries)).map(|i| draft(&mut rng, i)).collect();
        rt.block_on(store.save_all(drafts)).expect("the entries save");
    }
    started.elapsed()
}

/// The scopes searches run in: all, a user's run, a run without users.
fn scopes() -> [Visible; 3] {
    [Visible::everything(), Visible::run(Some("user3"), "default"), Visible::run(None, "default")]
}

/// p50 and p95 of single searches, in milliseconds.
fn percentiles(rt: &Runtime, store: &dyn KnowledgeStore, queries: &[String]) -> (f64, f64) {
    let scopes = scopes();
    let mut took: Vec<f64> = (0..SAMPLES)
        .map(|i| {
            let started = Instant::now();
            let hits = rt
                .block_on(store.search(&queries[i % queries.len()], &scopes[i % 3], 10))
                .expect("the search runs");
            black_box(hits);
            started.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    took.sort_by(f64::total_cmp);
    (took[took.len() / 2], took[took.len() * 95 / 100])
}

fn bench(c: &mut Criterion) {
    let rt =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let queries = queries(&mut fastrand::Rng::with_seed(11));
    let scopes = scopes();

    let dir = tempfile::tempdir().unwrap();
    let mut stores: Vec<(&str, Box<dyn KnowledgeStore>, Duration)> = Vec::new();
    if wanted("files") {
        let files = FileKnowledgeStore::new(dir.path().join("knowledge"));
        let filled = fill(&rt, &files);
        let found = rt.block_on(files.search(&queries[0], &Visible::everything(), 10)).unwrap();
        assert!(!found.is_empty(), "the queries find entries");
        stores.push(("files (tantivy)", Box::new(files), filled));
    }
    if wanted("postgres") {
        let db = rt.block_on(async {
            let url = pg::durable_cluster().fresh_database().await;
            Database::connect(&url).await.unwrap()
        });
        let postgres = PgKnowledgeStore::new(db);
        let filled = fill(&rt, &postgres);
        stores.push(("PostgreSQL", Box::new(postgres), filled));
    }
    assert!(!stores.is_empty(), "KNOWLEDGE_STORES names files, postgres or both");

    for (name, store, _) in &stores {
        let mut i = 0;
        c.bench_function(&format!("knowledge search, {name}, {} entries", entries()), |b| {
            b.iter(|| {
                i += 1;
                let query = &queries[i % queries.len()];
                black_box(rt.block_on(store.search(query, &scopes[i % 3], 10)).unwrap())
            })
        });
    }

    let entries = entries();
    println!("\n== figures ==");
    for (name, store, filled) in &stores {
        let (p50, p95) = percentiles(&rt, &**store, &queries);
        println!(
            "knowledge search, {name}, {entries} entries: p50 {p50:.2} ms, p95 {p95:.2} ms \
             (target p50 < 20 ms); filled in {:.1} s",
            filled.as_secs_f64()
        );
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(30).measurement_time(Duration::from_secs(5));
    targets = bench
}
criterion_main!(benches);
