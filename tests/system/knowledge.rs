//! Knowledge end to end: one conformance suite and one labelled ranking
//! corpus run against both stores (a `tantivy` index in a temporary
//! directory, and a real PostgreSQL of the harness), an index surviving a
//! writer killed mid-stream, the `reson knowledge` commands, the
//! `/api/knowledge` routes, and the built-in tools in real runs on the
//! `scripted` provider: a user's run and its sub-agent saving into that
//! user's scope, and a new goal getting the best matches attached.

use crate::support;
use crate::support::api as api_support;
use crate::support::postgres as pg;

use reson::agent::{Hooks, PendingApprovals, Permissions, RunConfig, Runner, SubAgentSettings};
use reson::config::Config;
use reson::database::Database;
use reson::knowledge::{
    Draft, FileKnowledgeStore, KnowledgeError, KnowledgeStore, MAX_CONTENT_BYTES, PgKnowledgeStore,
};
use reson::provider::PluginProvider;
use reson::scope::{Scope, Visible};
use reson::tools::ToolRegistry;
use reson::trace::{Durability, FileTraceStore, Message, Role, TraceStore};
use serde_json::{Value, json};
use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::time::Duration;
use support::TestDir;

fn user(uid: &str) -> Scope {
    Scope::User(uid.into())
}

fn seen_by(uid: &str) -> Visible {
    Visible::run(Some(uid), "default")
}

fn ids(hits: &[reson::knowledge::Hit]) -> Vec<&str> {
    hits.iter().map(|h| h.entry.id.as_str()).collect()
}

async fn files_store() -> (tempfile::TempDir, Arc<dyn KnowledgeStore>) {
    let dir = tempfile::tempdir().unwrap();
    let store = FileKnowledgeStore::new(dir.path().join("knowledge"));
    (dir, Arc::new(store))
}

async fn pg_store() -> Arc<dyn KnowledgeStore> {
    let url = pg::cluster().fresh_database().await;
    Arc::new(PgKnowledgeStore::new(Database::connect(&url).await.unwrap()))
}

/// What every store must do, whatever keeps the entries.
async fn conformance(store: &dyn KnowledgeStore) {
    // Empty: nothing listed or found, and a clear error for a missing id.
    assert!(store.list(&Visible::everything()).await.unwrap().is_empty());
    assert!(store.search("anything", &Visible::everything(), 5).await.unwrap().is_empty());
    let err = store.remove("kn_missing", &Visible::everything()).await.unwrap_err();
    assert!(matches!(err, KnowledgeError::UnknownId(_)), "{err}");
    assert_eq!(err.to_string(), "no knowledge entry kn_missing");
    assert!(matches!(
        store.get("kn_missing", &Visible::everything()).await,
        Err(KnowledgeError::UnknownId(_))
    ));

    let backups = store
        .save(Draft::new(
            Scope::Global,
            "Nightly PostgreSQL backups",
            "The database is dumped every night with pg_dump; restore with pg_restore.",
            &["postgres", "ops"],
        ))
        .await
        .unwrap();
    assert!(backups.id.starts_with("kn_"), "{}", backups.id);
    assert_eq!(backups.created_at, backups.updated_at);
    assert_eq!(backups.tags, ["postgres", "ops"]);
    let mention = store
        .save(Draft::new(
            Scope::Global,
            "Disk usage on the database host",
            "The disk fills up when old backups are not pruned; the alert fires at 85 percent.",
            &[],
        ))
        .await
        .unwrap();
    let ann = store
        .save(Draft::new(
            user("ann"),
            "Ann's editor",
            "Ann uses helix with backups disabled.",
            &["editor"],
        ))
        .await
        .unwrap();
    let bob = store
        .save(Draft::new(user("bob"), "Bob's backups", "Bob keeps backups on a USB disk.", &[]))
        .await
        .unwrap();
    let coder = store
        .save(Draft::new(
            Scope::Agent("coder".into()),
            "Coder agent conventions",
            "Run the formatter before every commit.",
            &["style"],
        ))
        .await
        .unwrap();

    // Get and list, by scope; another user's entry is as absent as none.
    assert_eq!(store.get(&backups.id, &Visible::everything()).await.unwrap(), backups);
    assert_eq!(store.get(&ann.id, &seen_by("ann")).await.unwrap(), ann);
    assert!(matches!(store.get(&bob.id, &seen_by("ann")).await, Err(KnowledgeError::UnknownId(_))));
    let all: Vec<String> =
        store.list(&Visible::everything()).await.unwrap().into_iter().map(|e| e.id).collect();
    assert_eq!(all, [&backups.id, &mention.id, &ann.id, &bob.id, &coder.id].map(String::as_str));
    let anns: Vec<String> =
        store.list(&seen_by("ann")).await.unwrap().into_iter().map(|e| e.id).collect();
    assert_eq!(anns, [&backups.id, &mention.id, &ann.id].map(String::as_str));
    let coders = Visible::run(None, "coder");
    assert_eq!(store.list(&coders).await.unwrap().len(), 3);

    // Ranking: a title match beats a content mention; stems match
    // ("backup" finds "backups"); other users' entries stay out.
    let hits = store.search("backup", &seen_by("ann"), 10).await.unwrap();
    assert_eq!(ids(&hits)[0], backups.id, "{:?}", ids(&hits));
    assert!(ids(&hits).contains(&mention.id.as_str()), "{:?}", ids(&hits));
    assert!(!ids(&hits).contains(&bob.id.as_str()), "another user's entry: {:?}", ids(&hits));
    assert!(hits.windows(2).all(|w| w[0].score >= w[1].score), "best first");
    assert!(hits.iter().all(|h| h.score > 0.0));
    let mention_hit = hits.iter().find(|h| h.entry.id == mention.id).unwrap();
    assert!(mention_hit.snippet.contains("backups are not pruned"), "{}", mention_hit.snippet);
    // Tags are searched; the limit holds.
    assert_eq!(ids(&store.search("editor", &seen_by("ann"), 5).await.unwrap()), [ann.id.as_str()]);
    assert_eq!(store.search("backups", &Visible::everything(), 1).await.unwrap().len(), 1);
    assert_eq!(ids(&store.search("formatter", &coders, 5).await.unwrap()), [coder.id.as_str()]);
    assert!(store.search("formatter", &seen_by("ann"), 5).await.unwrap().is_empty());

    // Text that is query syntax elsewhere is only words here.
    for odd in
        ["", "   ", "\"", "AND", "title:", "a:b:c", "((", "*", "-", "!!!", "' OR 1=1 --", "\0"]
    {
        let found = store.search(odd, &Visible::everything(), 5).await;
        assert!(found.is_ok(), "{odd:?}: {found:?}");
    }
    for odd in [
        "\"nightly postgresql",
        "title:backups AND (restore",
        "pg_restore OR -dump",
        "postgresql: \"restore\" AND NOT",
        "backups'); DROP TABLE knowledge; --",
    ] {
        let hits = store.search(odd, &Visible::everything(), 5).await.unwrap();
        assert!(ids(&hits).contains(&backups.id.as_str()), "{odd:?}: {:?}", ids(&hits));
    }

    // An update keeps the id and the creation time; the old words go.
    let updated = store
        .save(Draft {
            id: Some(backups.id.clone()),
            ..Draft::new(
                Scope::Global,
                "Nightly PostgreSQL backups",
                "Backups use barman now.",
                &["postgres"],
            )
        })
        .await
        .unwrap();
    assert_eq!(
        (updated.id.as_str(), updated.created_at.as_str()),
        (backups.id.as_str(), backups.created_at.as_str())
    );
    assert!(updated.updated_at >= backups.updated_at);
    let stored = store.get(&backups.id, &Visible::everything()).await.unwrap();
    assert_eq!(stored, updated);
    assert!(store.search("pg_restore", &Visible::everything(), 5).await.unwrap().is_empty());
    assert_eq!(
        ids(&store.search("barman", &Visible::everything(), 5).await.unwrap()),
        [backups.id.as_str()]
    );
    assert_eq!(store.list(&Visible::everything()).await.unwrap().len(), 5);

    // Bad input is refused whole, and nothing is written.
    let huge = "word ".repeat(MAX_CONTENT_BYTES / 5 + 1);
    let err = store.save(Draft::new(Scope::Global, "Huge", &huge, &[])).await.unwrap_err();
    assert!(matches!(err, KnowledgeError::TooLarge { field: "content", .. }), "{err}");
    assert!(err.to_string().contains("32768"), "{err}");
    let err = store.save(Draft::new(Scope::Global, "", "content", &[])).await.unwrap_err();
    assert!(err.to_string().contains("needs a title"), "{err}");
    let err = store.save(Draft::new(Scope::Global, "t", "nul \0 byte", &[])).await.unwrap_err();
    assert!(matches!(err, KnowledgeError::Invalid(_)), "{err}");
    let batch = vec![
        Draft::new(Scope::Global, "Fine", "a good entry", &[]),
        Draft::new(Scope::Global, "Empty", " ", &[]),
    ];
    assert!(store.save_all(batch).await.is_err());
    let twice =
        Draft { id: Some("kn_twice".into()), ..Draft::new(Scope::Global, "Twice", "x", &[]) };
    let err = store.save_all(vec![twice.clone(), twice]).await.unwrap_err();
    assert!(err.to_string().contains("id kn_twice is given twice"), "{err}");
    assert_eq!(
        store.list(&Visible::everything()).await.unwrap().len(),
        5,
        "a refused batch wrote nothing"
    );

    // Remove: only within the caller's scopes; once.
    let err = store.remove(&bob.id, &seen_by("ann")).await.unwrap_err();
    assert!(matches!(err, KnowledgeError::UnknownId(_)), "{err}");
    assert!(store.get(&bob.id, &Visible::everything()).await.is_ok(), "ann cannot remove bob's");
    assert_eq!(store.remove(&mention.id, &Visible::everything()).await.unwrap().id, mention.id);
    assert!(matches!(
        store.get(&mention.id, &Visible::everything()).await,
        Err(KnowledgeError::UnknownId(_))
    ));
    assert!(
        !ids(&store.search("pruned", &Visible::everything(), 5).await.unwrap())
            .contains(&mention.id.as_str())
    );
    assert!(matches!(
        store.remove(&mention.id, &Visible::everything()).await,
        Err(KnowledgeError::UnknownId(_))
    ));

    ids_are_per_scope(store).await;
}

/// The same id in two scopes is two entries: each reader's id names the
/// nearest they see (their own, then the global one), a save or remove
/// touches only that one, and no search or list mixes in another's.
async fn ids_are_per_scope(store: &dyn KnowledgeStore) {
    let save = async |scope: Scope, title: &str| {
        let draft = Draft { id: Some("plan".into()), ..Draft::new(scope, title, "zebra", &[]) };
        store.save(draft).await.unwrap()
    };
    let title = async |reader: &str| match store.get("plan", &seen_by(reader)).await {
        Ok(entry) => entry.title,
        Err(e) => e.to_string(),
    };
    let found = async |reader: &str| -> Vec<String> {
        let hits = store.search("zebra", &seen_by(reader), 10).await.unwrap();
        let mut titles: Vec<String> = hits.into_iter().map(|h| h.entry.title).collect();
        titles.sort();
        titles
    };
    save(user("ann"), "Ann's plan").await;
    let bobs = save(user("bob"), "Bob's plan").await;
    assert_eq!(bobs.id, "plan");
    assert_eq!(title("ann").await, "Ann's plan");
    assert_eq!(title("bob").await, "Bob's plan");
    assert_eq!(title("carl").await, "no knowledge entry plan");
    assert_eq!(found("ann").await, ["Ann's plan"]);
    assert_eq!(found("bob").await, ["Bob's plan"]);
    save(Scope::Global, "Everyone's plan").await;
    assert_eq!(title("ann").await, "Ann's plan", "one's own is nearer than the global one");
    assert_eq!(title("carl").await, "Everyone's plan");
    assert_eq!(found("ann").await, ["Ann's plan", "Everyone's plan"]);
    // Bob's new version replaces his own only.
    let again = save(user("bob"), "Bob's new plan").await;
    assert_eq!(again.created_at, bobs.created_at);
    assert_eq!(title("ann").await, "Ann's plan");
    let listed = store.list(&seen_by("ann")).await.unwrap();
    assert!(!listed.iter().any(|e| e.title.starts_with("Bob")), "{listed:?}");
    // A remove takes the nearest only.
    assert_eq!(store.remove("plan", &seen_by("bob")).await.unwrap().title, "Bob's new plan");
    assert_eq!(title("bob").await, "Everyone's plan");
    assert_eq!(title("ann").await, "Ann's plan");
    let everything = store.list(&Visible::everything()).await.unwrap();
    assert_eq!(everything.iter().filter(|e| e.id == "plan").count(), 2, "{everything:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_file_store_conforms_and_reopens_with_its_entries() {
    let (dir, store) = files_store().await;
    conformance(&*store).await;
    let before = store.list(&Visible::everything()).await.unwrap();
    let reopened = FileKnowledgeStore::new(dir.path().join("knowledge"));
    assert_eq!(reopened.list(&Visible::everything()).await.unwrap(), before);
    assert_eq!(reopened.search("barman", &Visible::everything(), 5).await.unwrap().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_postgres_store_conforms() {
    conformance(&*pg_store().await).await;
}

/// Entries of a team's knowledge base: (id, title, tags, content).
const CORPUS: &[(&str, &str, &[&str], &str)] = &[
    (
        "pg-backup",
        "Nightly PostgreSQL backups",
        &["postgres", "backup"],
        "The database is dumped every night at 02:00 with pg_dump in custom format to /srv/backups and kept for 14 days. Restore with pg_restore --clean into a fresh database.",
    ),
    (
        "pg-vacuum",
        "Autovacuum tuning for the events table",
        &["postgres", "performance"],
        "The events table grows by millions of rows a day; set autovacuum_vacuum_scale_factor to 0.02 on it so that dead tuples are cleaned before bloat slows the queries.",
    ),
    (
        "deploy",
        "Deploying the API service",
        &["deploy", "kubernetes"],
        "Deploys go through the release pipeline: tag the commit, the pipeline builds the image and rolls it out to the cluster with kubectl rollout; watch the rollout status before announcing it.",
    ),
    (
        "rollback",
        "Rolling back a bad release",
        &["deploy", "incident"],
        "If error rates climb after a release, run kubectl rollout undo on the api deployment and open an incident; do not hotfix forward during an outage.",
    ),
    (
        "rust-build",
        "Speeding up Rust builds in CI",
        &["rust", "ci"],
        "Share compiled artefacts between jobs with sccache, build dependencies at opt-level 1, and avoid running the whole workspace test suite on every push.",
    ),
    (
        "rust-msrv",
        "Minimum supported Rust version",
        &["rust"],
        "The workspace pins rust-version 1.95; check that a new crate compiles on that toolchain before adding it to Cargo.toml.",
    ),
    (
        "git-branches",
        "Branch naming conventions",
        &["git"],
        "Feature branches are named feat/short-description and fixes fix/issue-number; never push directly to main, open a merge request instead.",
    ),
    (
        "git-lfs",
        "Large files in git",
        &["git", "storage"],
        "Binary assets over 10 MB go through Git LFS; run git lfs track for the extension before committing, or the pre-receive hook rejects the push.",
    ),
    (
        "python-venv",
        "Python virtual environments",
        &["python"],
        "Create the environment with python3 -m venv .venv and install from requirements.lock with pip install -r; never install packages into the system interpreter.",
    ),
    (
        "python-lint",
        "Python linting with ruff",
        &["python", "lint"],
        "Run ruff check --fix before committing; the CI job fails on any lint warning, and ruff format replaces black in this repository.",
    ),
    (
        "node",
        "Node.js version for the frontend",
        &["javascript", "frontend"],
        "The frontend builds with Node 20; use npm ci rather than npm install so that the lockfile is respected, and npm run build produces the static bundle.",
    ),
    (
        "css",
        "Dark mode colours",
        &["frontend", "design"],
        "The dark theme uses CSS custom properties defined in theme.css; never hard-code hex colours in components, reference --color-surface and --color-text.",
    ),
    (
        "oncall",
        "On-call rotation",
        &["oncall", "team"],
        "The on-call engineer changes every Monday at 10:00; the schedule lives in the pager tool, and swaps must be announced in the team channel.",
    ),
    (
        "disk-alerts",
        "Disk space alerts on build machines",
        &["monitoring", "disk"],
        "Build machines alert at 85 percent disk usage; clean old docker images with docker image prune and remove stale target directories.",
    ),
    (
        "docker",
        "Docker image size",
        &["docker"],
        "Use multi-stage builds and a distroless runtime image; the final image of the API must stay under 150 MB.",
    ),
    (
        "tls",
        "Renewing TLS certificates",
        &["tls", "security"],
        "Certificates are issued by the ACME client on the edge proxy and renew automatically 30 days before expiry; if renewal fails, check that port 80 is reachable for the HTTP challenge.",
    ),
    (
        "secrets",
        "Where secrets are kept",
        &["security", "secrets"],
        "API keys and database passwords live in the vault under kv/prod; applications read them at start-up, and nothing secret is committed to the repository.",
    ),
    (
        "ssh",
        "SSH access to production",
        &["security", "ssh"],
        "Production hosts accept only short-lived SSH certificates signed by the bastion; request one with the access tool, valid for eight hours.",
    ),
    (
        "logs",
        "Log retention",
        &["logging", "compliance"],
        "Application logs are kept for 30 days in the log cluster and one year in cold storage, as the compliance policy requires; personal data is masked before logging.",
    ),
    (
        "metrics",
        "Prometheus metric naming",
        &["monitoring", "metrics"],
        "Counters end in _total, durations are in seconds with the _seconds suffix, and labels must have bounded cardinality: never put user ids in labels.",
    ),
    (
        "time",
        "Timestamps and time zones",
        &["time", "data"],
        "Store every timestamp in UTC as RFC 3339; convert to the user's time zone only when displaying it.",
    ),
    (
        "pagination",
        "API pagination",
        &["api", "design"],
        "List endpoints return at most 100 items and a next_cursor; clients pass the cursor to get the next page. Offsets are not supported because they skip rows under concurrent inserts.",
    ),
    (
        "api-errors",
        "API error format",
        &["api"],
        "Errors are JSON objects with code and message fields; the code is a stable snake_case string clients can match, the message is for humans.",
    ),
    (
        "rate-limit",
        "Rate limits of the public API",
        &["api", "limits"],
        "Each token may send 600 requests per minute; over that the API answers 429 with a Retry-After header, and clients must back off.",
    ),
    (
        "flags",
        "Feature flags",
        &["release"],
        "New features ship behind a flag in the flags service, off by default; remove the flag within two releases after it is fully rolled out.",
    ),
    (
        "migrations",
        "Database schema migrations",
        &["postgres", "migrations"],
        "Migrations are SQL files applied in order at start-up; never edit one that has shipped, add a new one instead, and keep each compatible with the previous release.",
    ),
    (
        "redis",
        "Redis cache invalidation",
        &["redis", "cache"],
        "Cache keys carry a version prefix; bump the prefix to invalidate everything at once instead of running FLUSHALL in production.",
    ),
    (
        "queue",
        "Background job queue",
        &["jobs", "queue"],
        "Background work goes through the job queue with at-least-once delivery, so every job handler must be idempotent; failed jobs retry five times with exponential backoff.",
    ),
    (
        "email",
        "Sending transactional email",
        &["email"],
        "Transactional email goes through the mail provider's API with the templates in templates/email; test with the sandbox domain, which delivers nothing.",
    ),
    (
        "commit-style",
        "Commit message style",
        &["git", "preferences"],
        "Commit subjects stay under 50 characters in the imperative mood, with the reason for the change in the body.",
    ),
    (
        "reviews",
        "Code review expectations",
        &["review", "team"],
        "Every change needs one approval; reviewers answer within one working day, and the author merges after the pipeline is green.",
    ),
    (
        "bench",
        "Running benchmarks",
        &["performance", "rust"],
        "Run criterion benchmarks with cargo bench on an idle machine and compare against the saved baseline; noisy neighbours make the numbers useless.",
    ),
    (
        "flaky",
        "Dealing with flaky tests",
        &["testing", "ci"],
        "A flaky test is quarantined with an issue link the same day it is found and fixed within a week; never retry a whole pipeline to hide it.",
    ),
    (
        "dns",
        "DNS changes",
        &["dns", "network"],
        "DNS records are managed as code in the infra repository; lower the TTL to 300 seconds a day before moving a record to a new address.",
    ),
    (
        "vpn",
        "VPN for remote work",
        &["network", "remote"],
        "Connect to the office VPN with WireGuard using the config from the access portal; split tunnelling sends only internal ranges through it.",
    ),
    (
        "laptop",
        "New laptop setup",
        &["onboarding"],
        "New engineers install the dotfiles repository, enable disk encryption, and request accounts for the pager, the vault and the code host on their first day.",
    ),
];

/// Questions as a person would ask them, and the entry that answers each.
const QUERIES: &[(&str, &str)] = &[
    ("how do I restore the database from a dump", "pg-backup"),
    ("table bloat and dead tuples", "pg-vacuum"),
    ("undo a broken release during an outage", "rollback"),
    ("how are services deployed to the cluster", "deploy"),
    ("make the Rust build faster in CI", "rust-build"),
    ("push rejected for a big binary file", "git-lfs"),
    ("which Node version, npm ci or npm install", "node"),
    ("pip requirements and virtual env", "python-venv"),
    ("certificate expiry and renewal failing", "tls"),
    ("where are API keys and passwords stored", "secrets"),
    ("build machine disk is full", "disk-alerts"),
    ("counter names and label cardinality", "metrics"),
    ("next page cursor for list endpoints", "pagination"),
    ("429 too many requests Retry-After", "rate-limit"),
    ("idempotent job handlers and retries", "queue"),
    ("quarantine a flaky test", "flaky"),
    ("lower the TTL before moving a DNS record", "dns"),
    ("edit a migration that already shipped", "migrations"),
    ("who is on call this week", "oncall"),
    ("shrink the docker image", "docker"),
];

/// Loads the corpus and counts the queries whose entry is in the top 3;
/// prints each miss.
async fn top3_hits(store: &dyn KnowledgeStore) -> usize {
    let drafts = CORPUS
        .iter()
        .map(|(id, title, tags, content)| Draft {
            id: Some(id.to_string()),
            ..Draft::new(Scope::Global, title, content, tags)
        })
        .collect();
    store.save_all(drafts).await.unwrap();
    let mut found = 0;
    for (query, want) in QUERIES {
        let hits = store.search(query, &Visible::everything(), 3).await.unwrap();
        if ids(&hits).contains(want) {
            found += 1;
        } else {
            println!("miss: {query:?} wanted {want}, got {:?}", ids(&hits));
        }
    }
    println!(
        "{} ranking: {found}/{} queries with the right entry in the top 3",
        store.describe(),
        QUERIES.len()
    );
    found
}

/// At least 18 of the 20 (90%).
const TOP3_AT_LEAST: usize = 18;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_file_store_ranks_the_right_entry_in_the_top_three() {
    let (_dir, store) = files_store().await;
    let found = top3_hits(&*store).await;
    assert!(found >= TOP3_AT_LEAST, "{found}/{} in the top 3", QUERIES.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_postgres_store_ranks_the_right_entry_in_the_top_three() {
    let store = pg_store().await;
    let found = top3_hits(&*store).await;
    assert!(found >= TOP3_AT_LEAST, "{found}/{} in the top 3", QUERIES.len());
}

/// On PostgreSQL, entries holding every word of the query come first once
/// there are as many as the hits asked for: an entry with one of the words
/// in its title (the heaviest place) is left out then, and found when the
/// search asks for more hits than the entries with every word.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_enough_entries_with_every_word_come_before_those_with_some() {
    let store = pg_store().await;
    let mut drafts: Vec<Draft> = (0..3)
        .map(|i| Draft {
            id: Some(format!("both-{i}")),
            ..Draft::new(
                Scope::Global,
                &format!("note {i}"),
                "the replica lagged behind while the vacuum ran",
                &[],
            )
        })
        .collect();
    drafts.push(Draft {
        id: Some("title".into()),
        ..Draft::new(Scope::Global, "Replica", "how the standby is set up", &[])
    });
    store.save_all(drafts).await.unwrap();
    let hits = store.search("replica vacuum", &Visible::everything(), 3).await.unwrap();
    let mut found = ids(&hits);
    found.sort_unstable();
    assert_eq!(found, ["both-0", "both-1", "both-2"]);
    let hits = store.search("replica vacuum", &Visible::everything(), 4).await.unwrap();
    assert!(ids(&hits).contains(&"title"), "{:?}", ids(&hits));
}

/// The writer of the kill test: saves entries into the index named by
/// `KNOWLEDGE_WRITER_DIR` one by one, printing each id once saved, until
/// it is killed. Ignored unless the kill test runs it.
#[tokio::test]
#[ignore = "run by a_writer_killed_mid_stream_loses_nothing_it_saved"]
async fn knowledge_writer_child() {
    let Ok(dir) = std::env::var("KNOWLEDGE_WRITER_DIR") else { return };
    let store = FileKnowledgeStore::new(dir);
    for i in 0.. {
        let draft = Draft::new(
            Scope::Global,
            &format!("note {i}"),
            &format!("written before the kill {i}"),
            &[],
        );
        let entry = store.save(draft).await.unwrap();
        println!("saved {}", entry.id);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_killed_mid_stream_loses_nothing_it_saved() {
    let dir = tempfile::tempdir().unwrap();
    let index = dir.path().join("knowledge");
    let writer = support::test_name(module_path!(), "knowledge_writer_child");
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", &writer, "--ignored", "--nocapture", "--test-threads=1"])
        .env("KNOWLEDGE_WRITER_DIR", &index)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut saved = Vec::new();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    while saved.len() < 8 {
        let line = lines.next().expect("the writer saves").unwrap();
        if let Some(id) = line.strip_prefix("saved ") {
            saved.push(id.to_owned());
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let store = FileKnowledgeStore::new(&index);
    let listed: Vec<String> =
        store.list(&Visible::everything()).await.unwrap().into_iter().map(|e| e.id).collect();
    for id in &saved {
        assert!(listed.contains(id), "{id} was saved before the kill but is gone: {listed:?}");
    }
    // The dead writer's lock does not block the next one.
    let after =
        store.save(Draft::new(Scope::Global, "after the kill", "still writable", &[])).await;
    assert!(after.is_ok(), "{after:?}");
    assert_eq!(
        store.search("kill", &Visible::everything(), 100).await.unwrap().len(),
        listed.len() + 1
    );
}

fn reson(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_reson"))
        .args(["--config", &dir.join("reson.toml").to_string_lossy()])
        .args(args)
        .env_remove("RESON_CONFIG")
        .output()
        .unwrap()
}

fn json_out(out: &Output) -> Value {
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// `reson knowledge` in a directory whose `reson.toml` is `toml`.
fn cli_scenario(toml: &str) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("reson.toml"), toml).unwrap();
    let d = dir.path();
    let added = json_out(&reson(
        d,
        &[
            "knowledge",
            "add",
            "Release checklist",
            "Tag, build, roll out.",
            "--tag",
            "release",
            "--json",
        ],
    ));
    let id = added["id"].as_str().unwrap().to_owned();
    assert_eq!((added["scope"].as_str(), &added["tags"]), (Some("global"), &json!(["release"])));
    let mine = json_out(&reson(
        d,
        &[
            "knowledge",
            "add",
            "Ann's release habits",
            "Ann releases on Tuesdays.",
            "--user",
            "ann",
            "--json",
        ],
    ));
    assert_eq!(mine["scope"], "user:ann");

    let all = json_out(&reson(d, &["knowledge", "list", "--json"]));
    assert_eq!(all.as_array().unwrap().len(), 2);
    let bobs = json_out(&reson(d, &["knowledge", "list", "--user", "bob", "--json"]));
    assert_eq!(bobs.as_array().unwrap().len(), 1, "bob sees the global entry only: {bobs}");

    let hits = json_out(&reson(d, &["knowledge", "search", "release: \"checklist", "--json"]));
    assert_eq!(hits[0]["entry"]["id"], id.as_str(), "{hits}");
    assert!(hits[0]["score"].as_f64().unwrap() > 0.0);
    let text = reson(d, &["knowledge", "search", "releases tuesdays"]);
    assert!(String::from_utf8_lossy(&text.stdout).contains("Ann's release habits"));

    let removed = reson(d, &["knowledge", "remove", &id]);
    assert!(removed.status.success(), "{}", String::from_utf8_lossy(&removed.stderr));
    let again = reson(d, &["knowledge", "remove", &id]);
    assert_eq!(again.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&again.stderr).contains(&format!("no knowledge entry {id}")));
    let empty = reson(d, &["knowledge", "add", " ", "content"]);
    assert_eq!(empty.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&empty.stderr).contains("needs a title"));
    let scope = reson(d, &["knowledge", "add", "t", "c", "--scope", "team:x"]);
    assert_eq!(scope.status.code(), Some(2));
    assert_eq!(json_out(&reson(d, &["knowledge", "list", "--json"])).as_array().unwrap().len(), 1);
}

#[test]
fn the_cli_adds_lists_searches_and_removes_on_files() {
    cli_scenario("");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_adds_lists_searches_and_removes_on_postgres() {
    let url = pg::cluster().fresh_database().await;
    tokio::task::spawn_blocking(move || {
        cli_scenario(&format!("[store]\nkind = \"postgres\"\nurl = \"{url}\"\n"))
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_saves_searches_and_removes() {
    let dir = api_support::dir_with(&[]);
    let server = api_support::InProcess::start(&dir, &api_support::config("")).await;
    let api = &server.api;
    let saved = api
        .post(
            "/api/knowledge",
            json!({ "title": "Staging database", "content": "Staging runs on db-staging:5432.", "tags": ["staging"] }),
        )
        .await
        .expect(201);
    let id = saved["id"].as_str().unwrap().to_owned();
    assert_eq!(saved["scope"], "global");
    api.post("/api/knowledge", json!({ "title": "Ann only", "content": "x", "scope": "user:ann" }))
        .await
        .expect(201);

    let found = api.get("/api/knowledge?q=staging%20AND%20%22db&limit=5").await.expect(200);
    assert_eq!(found["entries"][0]["id"], id.as_str(), "{found}");
    assert!(found["entries"][0]["snippet"].as_str().unwrap().contains("db-staging"));
    let listed = api.get("/api/knowledge").await.expect(200);
    assert_eq!(listed["entries"].as_array().unwrap().len(), 2);
    assert!(listed["entries"][0].get("score").is_none());

    // Updating keeps the id.
    let updated = api
        .post(
            "/api/knowledge",
            json!({ "id": id, "title": "Staging database", "content": "Moved to db-stage-2." }),
        )
        .await
        .expect(201);
    assert_eq!((&updated["id"], &updated["created_at"]), (&saved["id"], &saved["created_at"]));

    // Bad input: clear errors, nothing written.
    api.post("/api/knowledge", json!({ "title": "", "content": "x" }))
        .await
        .expect_error(422, "unprocessable");
    let big = "x".repeat(MAX_CONTENT_BYTES + 1);
    let err = api
        .post("/api/knowledge", json!({ "title": "big", "content": big }))
        .await
        .expect_error(422, "unprocessable");
    assert!(err.contains("32768"), "{err}");
    api.post("/api/knowledge", json!({ "title": "t", "content": "c", "scope": "team:x" }))
        .await
        .expect_error(422, "unprocessable");
    api.get("/api/knowledge?limit=0").await.expect_error(400, "bad_request");
    assert_eq!(api.get("/api/knowledge").await.expect(200)["entries"].as_array().unwrap().len(), 2);

    let removed =
        api.send(reqwest::Method::DELETE, &format!("/api/knowledge/{id}"), None).await.expect(200);
    assert_eq!(removed["id"], id.as_str());
    let err = api
        .send(reqwest::Method::DELETE, &format!("/api/knowledge/{id}"), None)
        .await
        .expect_error(404, "not_found");
    assert!(err.contains(&id), "{err}");
    server.stop().await;
}

/// A runner over the `scripted` provider with knowledge in `store` and
/// sub-agents.
async fn knowledge_runner(
    dir: &TestDir,
    script: Value,
    store: Arc<dyn KnowledgeStore>,
) -> (Runner, Arc<FileTraceStore>) {
    dir.install(support::plugins(), "scripted");
    let runtime = dir.open_scripted(&script, "").await;
    let config = Config::load(&dir.path().join("reson.toml")).unwrap();
    let traces =
        Arc::new(FileTraceStore::open(dir.path().join("traces"), Durability::Batched).unwrap());
    let (_, rules) = config.preset("default").unwrap();
    let tools = ToolRegistry::new(runtime.clone()).with_configured_knowledge(store, &config);
    let runner = Runner::new(
        traces.clone(),
        Arc::new(PluginProvider::new(runtime, "scripted")),
        tools,
        Hooks::none(),
    )
    .with_permissions(Permissions::new(rules, PendingApprovals::new(Duration::from_secs(30))))
    .with_sub_agents(SubAgentSettings::from_config(&config).unwrap());
    (runner, traces)
}

async fn runs_save_into_their_users_scope(store: Arc<dyn KnowledgeStore>) {
    store
        .save(Draft::new(
            Scope::Global,
            "Staging database",
            "Staging runs on db-staging:5432.",
            &["staging"],
        ))
        .await
        .unwrap();
    store
        .save(Draft::new(
            user("bob"),
            "Bob's staging password hint",
            "The staging hint is in bob's notes.",
            &["staging"],
        ))
        .await
        .unwrap();
    let call = |name: &str, arguments: Value| json!({ "tool_calls": [{ "name": name, "arguments": arguments }] });
    let script = json!({
        "agents": [{ "match": "record the port", "turns": [
            call("knowledge_save", json!({ "title": "Staging port", "content": "Staging listens on 5432.", "tags": ["staging"] })),
            { "text": "saved" },
        ]}],
        "turns": [
            call("goal", json!({ "action": "add", "description": "connect to the staging database" })),
            call("knowledge_search", json!({ "query": "staging" })),
            call("agent", json!({ "task": "record the port of staging" })),
            { "text": "done" },
        ],
    });
    let dir = TestDir::new();
    let (runner, traces) = knowledge_runner(&dir, script, store.clone()).await;
    let config = RunConfig { uid: Some("ann".into()), ..RunConfig::default() };
    let outcome = runner
        .run(vec![Message::new(Role::User, "check staging")], config)
        .await
        .unwrap()
        .wait()
        .await
        .unwrap();

    // The new goal got the global entry, not bob's, and the model saw it
    // with the tree.
    let messages = traces.get_messages(&outcome.trace_id).await.unwrap();
    let tool_text = |name: &str| {
        messages
            .iter()
            .find(|m| m.role == Role::Tool && m.name.as_deref() == Some(name))
            .map(|m| m.text())
            .unwrap_or_else(|| panic!("no {name} result"))
    };
    let goal = tool_text("goal");
    assert!(goal.contains("knowledge [") && goal.contains("Staging database"), "{goal}");
    assert!(!goal.contains("Bob"), "{goal}");
    let trace = traces.get_trace(&outcome.trace_id).await.unwrap().unwrap();
    let tree = traces.get_goals(&trace.id).await.unwrap();
    let added =
        tree.goals().iter().find(|g| g.description == "connect to the staging database").unwrap();
    assert_eq!(added.knowledge.len(), 1, "{:?}", added.knowledge);
    assert_eq!(added.knowledge[0].title, "Staging database");
    let searched = tool_text("knowledge_search");
    assert!(searched.starts_with("Stored knowledge: 1 entry"), "{searched}");
    assert!(!searched.contains("Bob"), "{searched}");

    // The sub-agent's note is in ann's scope, from the sub-agent's trace.
    let mut anns = store.list(&seen_by("ann")).await.unwrap();
    anns.retain(|e| e.scope == user("ann"));
    assert_eq!(anns.len(), 1, "{anns:?}");
    assert_eq!(anns[0].title, "Staging port");
    let source = anns[0].source.clone().expect("a run's note names its trace");
    assert_ne!(source.trace_id, outcome.trace_id, "the sub-agent saved it");
    let child = traces.get_trace(&source.trace_id).await.unwrap().unwrap();
    assert_eq!(child.parent_trace_id.as_deref(), Some(outcome.trace_id.as_str()));
    assert!(store.search("port", &seen_by("bob"), 5).await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_users_run_and_its_sub_agent_save_into_that_users_scope_on_files() {
    let (_dir, store) = files_store().await;
    runs_save_into_their_users_scope(store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_users_run_and_its_sub_agent_save_into_that_users_scope_on_postgres() {
    runs_save_into_their_users_scope(pg_store().await).await;
}
