//! The stores on PostgreSQL as the CLI and the library use them: `reson
//! run` and `reson traces` on `[store] kind = "postgres"`, `reson traces
//! migrate` between the file store and the database (lossless, both ways,
//! idempotent), experiences on the database (appends, ratings from several
//! hosts at once, the markdown export and import), and the errors of a
//! database that cannot be reached.
//!
//! Every test runs against a real PostgreSQL, a throwaway cluster of the
//! harness (tests/support/postgres.rs), and the real `reson` binary.

use crate::support;
use crate::support::api as api_support;
use crate::support::postgres as pg;

use reson::database::Database;
use reson::experience::{
    Experience, ExperienceError, ExperienceStore, FileExperienceStore, PgExperienceStore, Rating,
    Tags,
};
use reson::trace::{
    AgentMode, Durability, EventKind, FileTraceStore, GoalTree, MemoryTraceStore, Message,
    PgTraceStore, Role, ToolCall, Trace, TraceFilter, TraceMode, TraceStatus, TraceStore,
    copy_traces,
};
use serde_json::{Value, json};
use std::path::Path;
use std::process::{Command, Output};
use std::sync::Arc;

/// `reson ARGS` in `dir`, with its `reson.toml`, the bundled plugins and
/// the shared compiled-code cache.
fn reson(dir: &Path, args: &[&str]) -> Output {
    reson_env(dir, args, &[])
}

fn reson_env(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_reson"))
        .current_dir(dir)
        .args(args)
        .env("RESON_PLUGINS_DIR", support::plugins())
        .env("RESON_CACHE_DIR", support::cache_dir())
        .env_remove("RESON_CONFIG")
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A directory whose `reson.toml` puts the stores in a fresh database.
async fn on_postgres() -> (tempfile::TempDir, String) {
    let url = pg::cluster().fresh_database().await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("reson.toml"),
        format!("[store]\nkind = \"postgres\"\nurl = \"{url}\"\n"),
    )
    .unwrap();
    (dir, url)
}

fn experience(id: &str, intent: &[&str], state: &[&str], rule: &str) -> Experience {
    let tags = Tags {
        intent: intent.iter().map(|s| s.to_string()).collect(),
        state: state.iter().map(|s| s.to_string()).collect(),
    };
    let mut e = Experience::new("tr_learnt", "tool_usage", tags, rule);
    e.id = id.to_owned();
    e.created_at = "2026-11-23T16:00:00Z".into();
    e
}

/// The same operations on both stores give the same answers.
async fn exercise(store: &dyn ExperienceStore) -> Vec<Experience> {
    assert!(store.is_empty().await.unwrap());
    store
        .append(vec![
            experience("exp_a", &["build"], &["rust"], "Run cargo check first."),
            experience("exp_b", &["Build"], &[], "Read the error from the top."),
            experience("exp_c", &["deploy"], &["go"], "Tag before you push."),
        ])
        .await
        .unwrap();
    store
        .append(vec![experience("exp_d", &[], &["RUST"], "Mind the borrow checker.")])
        .await
        .unwrap();
    assert!(!store.is_empty().await.unwrap());

    // A batch with a taken id appends nothing, not even its new ones.
    let err = store
        .append(vec![
            experience("exp_new", &["x"], &[], "Never stored."),
            experience("exp_b", &["x"], &[], "A second exp_b."),
        ])
        .await
        .unwrap_err();
    assert!(matches!(&err, ExperienceError::DuplicateId(id) if id == "exp_b"), "{err}");
    let err = store.append(vec![experience("exp_e", &[], &[], "  ")]).await.unwrap_err();
    assert!(matches!(err, ExperienceError::Invalid(_)), "{err}");

    let rated = store.rate("exp_b", Rating::Helpful).await.unwrap();
    assert_eq!((rated.metrics.helpful, rated.metrics.harmful), (2, 0));
    let rated = store.rate("exp_a", Rating::Harmful).await.unwrap();
    assert_eq!((rated.metrics.helpful, rated.metrics.harmful), (1, 1));
    let err = store.rate("exp_none", Rating::Helpful).await.unwrap_err();
    assert!(matches!(err, ExperienceError::UnknownId(_)), "{err}");

    let all = store.list().await.unwrap();
    let ids: Vec<&str> = all.iter().map(|e| e.id.as_str()).collect();
    assert_eq!(ids, ["exp_a", "exp_b", "exp_c", "exp_d"], "insertion order");
    // Ranking: intent, then state, then helpful minus harmful, then order.
    let ranked = store.relevant(&["build".into()], &["rust".into()], 10).await.unwrap();
    let ids: Vec<&str> = ranked.iter().map(|e| e.id.as_str()).collect();
    assert_eq!(ids, ["exp_a", "exp_b", "exp_d"]);
    let ranked = store.relevant(&["BUILD".into()], &[], 1).await.unwrap();
    assert_eq!(ranked[0].id, "exp_b", "a tie on tags goes to the better rated");
    assert!(store.relevant(&["cook".into()], &[], 5).await.unwrap().is_empty());
    all
}

#[tokio::test]
async fn experiences_on_postgres_behave_as_the_markdown_file_does() {
    let url = pg::cluster().fresh_database().await;
    let db = Database::connect(&url).await.unwrap();
    let on_postgres = exercise(&PgExperienceStore::new(db)).await;
    let dir = tempfile::tempdir().unwrap();
    let on_file = exercise(&FileExperienceStore::new(dir.path().join("experiences.md"))).await;
    assert_eq!(on_postgres, on_file);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ratings_and_appends_from_two_hosts_at_once_are_all_counted() {
    let url = pg::cluster().fresh_database().await;
    // Two pools: what two hosts on one database have.
    let hosts = [
        Arc::new(PgExperienceStore::new(Database::connect(&url).await.unwrap())),
        Arc::new(PgExperienceStore::new(Database::connect(&url).await.unwrap())),
    ];
    hosts[0].append(vec![experience("exp_shared", &["x"], &[], "Shared.")]).await.unwrap();
    let mut tasks = Vec::new();
    for (h, host) in hosts.iter().enumerate() {
        for i in 0..40 {
            let host = host.clone();
            tasks.push(tokio::spawn(async move {
                let rating = if i % 4 == 0 { Rating::Harmful } else { Rating::Helpful };
                host.rate("exp_shared", rating).await.unwrap();
                let rule = format!("Lesson {i} of host {h}.");
                host.append(vec![experience(&format!("exp_{h}_{i}"), &["x"], &[], &rule)])
                    .await
                    .unwrap();
            }));
        }
    }
    for task in tasks {
        task.await.unwrap();
    }
    let all = hosts[1].list().await.unwrap();
    assert_eq!(all.len(), 81, "no append lost");
    let shared = all.iter().find(|e| e.id == "exp_shared").unwrap();
    // Helpful once at creation, then 30 helpful and 10 harmful per host.
    assert_eq!((shared.metrics.helpful, shared.metrics.harmful), (61, 20));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn experiences_export_to_markdown_and_import_back_unchanged() {
    let (dir, url) = on_postgres().await;
    let d = dir.path();
    // Hand-written fields, a multi-line rule with a `---` line, odd times:
    // all kept through the database.
    std::fs::write(
        d.join("mine.md"),
        "# Our lessons\n\n\
         ---\nid: exp_hand\ncategory: environment\nreviewed_by: ada\n\
         tags:\n  intent: [build]\n  state: [rust, cargo]\nmetrics: {helpful: 3, harmful: 1}\n\
         created_at: last spring\n---\nRun cargo check first.\n\\---\nThen cargo test.\n\n\
         ---\nid: exp_plain\ncategory: logic_flow\n---\nTag before you push.\n",
    )
    .unwrap();
    let out = reson(d, &["experiences", "import", "mine.md"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).starts_with("2 experiences imported"), "{}", stdout(&out));
    // Again: identical, so nothing to do.
    let out = reson(d, &["experiences", "import", "mine.md"]);
    assert!(stdout(&out).starts_with("0 experiences imported"), "{}", stdout(&out));
    let out = reson(d, &["experiences", "rate", "exp_plain", "harmful"]);
    assert_eq!(stdout(&out).trim(), "exp_plain: helpful 0, harmful 1");

    let out = reson(d, &["experiences", "export", "--out", "exported.md"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let from_file = FileExperienceStore::new(d.join("exported.md")).list().await.unwrap();
    let db = Database::connect(&url).await.unwrap();
    let from_db = PgExperienceStore::new(db).list().await.unwrap();
    assert_eq!(from_file, from_db);
    assert_eq!(from_db.len(), 2);
    assert_eq!(from_db[0].rule, "Run cargo check first.\n---\nThen cargo test.");
    assert_eq!(from_db[0].created_at, "last spring");
    let exported = std::fs::read_to_string(d.join("exported.md")).unwrap();
    assert!(exported.contains("reviewed_by: ada"), "{exported}");
    // To stdout, the same text.
    assert_eq!(stdout(&reson(d, &["experiences", "export"])), exported);

    // An import that disagrees with what is stored writes nothing.
    let changed = exported.replace("Tag before you push.", "Push, then tag.");
    std::fs::write(d.join("changed.md"), changed).unwrap();
    let out = reson(d, &["experiences", "import", "changed.md"]);
    assert_eq!(out.status.code(), Some(7), "{}", stderr(&out));
    assert!(stderr(&out).contains("experience exp_plain differs"), "{}", stderr(&out));
    let out = reson(d, &["experiences", "import", "nothing-here.md"]);
    assert_eq!(out.status.code(), Some(2));
    std::fs::write(d.join("broken.md"), "---\nid: [unclosed\n---\nrule\n").unwrap();
    let out = reson(d, &["experiences", "import", "broken.md"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("broken.md:"), "{}", stderr(&out));
    let listed = stdout(&reson(d, &["experiences", "list"]));
    assert!(listed.contains("Tag before you push.") && !listed.contains("Push, then tag."));
}

/// A root trace with a rewind branch, tool calls, events and goals, and
/// two sub-traces (one of them the sub-trace's own sub-agent), written
/// through the store's API as runs write them.
async fn branchy_traces(store: &dyn TraceStore) -> Vec<String> {
    let mut root = Trace::new(TraceMode::Agent, "plan a trip", "default");
    store.create_trace(&root).await.unwrap();
    store.append_event(&mut root, EventKind::TraceStarted).await.unwrap();
    let mut goals = GoalTree::new();
    let top = goals.ensure_root("plan a trip").unwrap();
    let book = goals.under(&top, "book the train").unwrap();
    store.add_message(&mut root, Message::new(Role::User, "plan a trip"), None).await.unwrap();
    let call = ToolCall { id: "call_1".into(), name: "agent".into(), arguments: "{}".into() };
    let mut asking = Message::new(Role::Assistant, "");
    asking.tool_calls = vec![call.clone()];
    asking.goal_id = Some(book.clone());
    let asked = store.add_message(&mut root, asking, None).await.unwrap();
    store
        .append_event(&mut root, EventKind::MessageAdded { message: asked.clone() })
        .await
        .unwrap();

    let mut child = Trace::new(TraceMode::Agent, "book the train", "worker");
    child.parent_trace_id = Some(root.id.clone());
    child.parent_goal_id = Some(book.clone());
    store.create_trace(&child).await.unwrap();
    store.add_message(&mut child, Message::new(Role::User, "book it"), None).await.unwrap();
    store.add_message(&mut child, Message::new(Role::Assistant, "booked"), None).await.unwrap();
    let mut grandchild = Trace::new(TraceMode::Agent, "check the seat", "worker");
    grandchild.parent_trace_id = Some(child.id.clone());
    store.create_trace(&grandchild).await.unwrap();
    store.add_message(&mut grandchild, Message::new(Role::User, "seat?"), None).await.unwrap();
    child.status = TraceStatus::Completed;
    store.update_trace(&child).await.unwrap();
    goals.link_sub_trace(&book, &child.id, AgentMode::Delegate).unwrap();
    store.save_goals(&root.id, &goals).await.unwrap();

    store.add_message(&mut root, Message::tool_result(&call, "booked"), None).await.unwrap();
    store.add_message(&mut root, Message::new(Role::Assistant, "done"), None).await.unwrap();
    // A rewind onto the first message: a second branch.
    store.add_message(&mut root, Message::new(Role::User, "by bus"), Some(1)).await.unwrap();
    store.add_message(&mut root, Message::new(Role::Assistant, "bus it is"), None).await.unwrap();
    store
        .append_event(
            &mut root,
            EventKind::TraceFinished { status: TraceStatus::Completed, error: None },
        )
        .await
        .unwrap();
    root.status = TraceStatus::Completed;
    store.update_trace(&root).await.unwrap();
    store.sync().await.unwrap();
    vec![root.id, child.id, grandchild.id]
}

async fn snapshots(store: &dyn TraceStore, ids: &[String]) -> Vec<Value> {
    let mut all = Vec::new();
    for id in ids {
        let snapshot = store.export_trace(id).await.unwrap().expect("the trace is there");
        all.push(serde_json::to_value(snapshot).unwrap());
    }
    all
}

#[tokio::test]
async fn traces_copy_between_file_and_memory_stores_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let files = FileTraceStore::open(dir.path().join("a"), Durability::Batched).unwrap();
    let ids = branchy_traces(&files).await;
    let original = snapshots(&files, &ids).await;

    let memory = MemoryTraceStore::new();
    let done = copy_traces(&files, &memory).await.unwrap();
    assert_eq!(done.copied.len(), 3);
    assert_eq!(snapshots(&memory, &ids).await, original);
    // What crashes leave behind: a create cut short (no meta.json) and a
    // staging directory of an import cut short. Neither is a trace.
    std::fs::create_dir_all(dir.path().join("b").join(&ids[2]).join("messages")).unwrap();
    std::fs::create_dir_all(dir.path().join("b/.import-cut")).unwrap();
    std::fs::write(dir.path().join("b/.import-cut/meta.json"), "{").unwrap();
    let back = FileTraceStore::open(dir.path().join("b"), Durability::Immediate).unwrap();
    assert!(back.list_traces(&TraceFilter::default()).await.unwrap().is_empty());
    let done = copy_traces(&memory, &back).await.unwrap();
    assert_eq!((done.copied.len(), done.identical.len()), (3, 0));
    assert_eq!(snapshots(&back, &ids).await, original);
    // The copy is a working trace: it continues where the original stopped.
    let mut root = back.get_trace(&ids[0]).await.unwrap().unwrap();
    let next = back.add_message(&mut root, Message::new(Role::User, "more"), None).await.unwrap();
    assert_eq!(next.sequence, 7);
    let event = back.append_event(&mut root, EventKind::TraceStarted).await.unwrap();
    assert_eq!(event.id, 4);
    let path = back.get_main_path_messages(&ids[0], next.sequence).await.unwrap();
    let path: Vec<u64> = path.iter().map(|m| m.sequence).collect();
    assert_eq!(path, [1, 5, 6, 7]);
    // No staging directory of its own is left behind, and a second import
    // is refused.
    let names: Vec<String> = std::fs::read_dir(dir.path().join("b"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.') && n != ".import-cut")
        .collect();
    assert!(names.is_empty(), "{names:?}");
    let snapshot = files.export_trace(&ids[1]).await.unwrap().unwrap();
    assert!(matches!(
        back.import_trace(&snapshot).await,
        Err(reson::trace::TraceError::AlreadyExists(_))
    ));
    assert!(matches!(
        memory.import_trace(&snapshot).await,
        Err(reson::trace::TraceError::AlreadyExists(_))
    ));
    let listed = back.list_traces(&TraceFilter::default()).await.unwrap();
    assert_eq!(listed.len(), 3);

    // A snapshot no store could have written is refused by both, and
    // nothing of it is kept.
    let mut bad = snapshot.clone();
    bad.trace.id = "tr_bad".into();
    for m in &mut bad.messages {
        m.trace_id = "tr_bad".into();
    }
    bad.messages[1].parent_sequence = Some(bad.messages[1].sequence);
    let stores: [&dyn TraceStore; 2] = [&back, &memory];
    for store in stores {
        let err = store.import_trace(&bad).await.unwrap_err();
        assert!(matches!(err, reson::trace::TraceError::Corrupt { .. }), "{err}");
        assert!(store.get_trace("tr_bad").await.unwrap().is_none());
    }
    let mut other = snapshot.clone();
    other.trace.id = "tr_other".into();
    let err = back.import_trace(&other).await.unwrap_err();
    assert!(err.to_string().contains("belongs to trace"), "{err}");
    assert!(!dir.path().join("b/tr_bad").exists() && !dir.path().join("b/tr_other").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn traces_migrate_to_postgres_and_back_is_lossless_and_idempotent() {
    let (dir, url) = on_postgres().await;
    let d = dir.path();
    let files = FileTraceStore::open(d.join(".reson/traces"), Durability::Batched).unwrap();
    let ids = branchy_traces(&files).await;
    let original = snapshots(&files, &ids).await;

    let out = reson(d, &["traces", "migrate", "--to", "postgres"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).starts_with("3 traces copied"), "{}", stdout(&out));
    let db = PgTraceStore::new(Database::connect(&url).await.unwrap());
    assert_eq!(snapshots(&db, &ids).await, original);
    // Twice: everything is there already.
    let out = reson(d, &["traces", "migrate", "--to", "postgres"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).starts_with("0 traces copied"), "{}", stdout(&out));
    assert!(stdout(&out).contains("3 already there"), "{}", stdout(&out));

    // `traces show` reads the database now: the same JSON as from the files.
    let shown = |args: &[&str]| -> Value {
        let out = reson(d, args);
        assert!(out.status.success(), "{}", stderr(&out));
        serde_json::from_str(&stdout(&out)).unwrap()
    };
    let from_db = shown(&["traces", "show", &ids[0], "--json"]);
    std::fs::write(d.join("files.toml"), "").unwrap();
    let from_files = shown(&["--config", "files.toml", "traces", "show", &ids[0], "--json"]);
    assert_eq!(from_db, from_files);
    let text = stdout(&reson(d, &["traces", "show", &ids[0]]));
    assert!(text.contains("#5 user: by bus"), "{text}");
    assert!(text.contains(&format!("→ {}", ids[1])), "the sub-agents are listed: {text}");
    let listed = shown(&["traces", "list", "--json"]);
    assert_eq!(listed.as_array().unwrap().len(), 3);

    // Back into a fresh directory: identical.
    let out = reson(d, &["traces", "migrate", "--to", "file", "--dir", "fresh"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).starts_with("3 traces copied"), "{}", stdout(&out));
    let fresh = FileTraceStore::open(d.join("fresh"), Durability::Batched).unwrap();
    assert_eq!(snapshots(&fresh, &ids).await, original);

    // A trace that moved on in the files differs from the database's copy:
    // reported, left alone, nonzero exit.
    let mut root = files.get_trace(&ids[0]).await.unwrap().unwrap();
    files.add_message(&mut root, Message::new(Role::User, "later"), None).await.unwrap();
    let out = reson(d, &["traces", "migrate", "--to", "postgres", "--url", &url]);
    assert_eq!(out.status.code(), Some(7), "{}", stderr(&out));
    assert!(stderr(&out).contains(&format!("{}: differs", ids[0])), "{}", stderr(&out));
    assert!(stdout(&out).contains("2 already there, 1 differing"), "{}", stdout(&out));
    assert_eq!(snapshots(&db, &ids).await, original, "the database's copy is untouched");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reson_run_on_postgres_keeps_its_trace_in_the_database() {
    let (dir, url) = on_postgres().await;
    let d = dir.path();
    let lesson = json!({ "experiences": [
        { "category": "logic_flow", "rule": "Greet first.", "tags": { "intent": ["greet"] } }
    ]});
    let script = json!({
        "turns": [{ "text": "hello from the database" }, { "text": "hello again" }],
        "models": { "reflector": { "turns": [{ "text": lesson.to_string() }] } }
    });
    std::fs::write(d.join("script.json"), script.to_string()).unwrap();
    let out = reson(d, &["run", "--script", "script.json", "--json", "hi"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let started: Value = serde_json::from_str(stdout(&out).lines().next().unwrap()).unwrap();
    let id = started["trace_id"].as_str().unwrap().to_owned();

    let db = PgTraceStore::new(Database::connect(&url).await.unwrap());
    let trace = db.get_trace(&id).await.unwrap().expect("the trace is in the database");
    assert_eq!(trace.status, TraceStatus::Completed);
    let messages = db.get_messages(&id).await.unwrap();
    assert_eq!(messages.last().unwrap().text(), "hello from the database");

    let listed = stdout(&reson(d, &["traces", "list"]));
    assert!(listed.contains(&id) && listed.contains("completed"), "{listed}");
    let shown = stdout(&reson(d, &["traces", "show", &id]));
    assert!(shown.contains("assistant: hello from the database"), "{shown}");
    // A continue reads it back from the database.
    let out = reson(d, &["run", "--script", "script.json", "--trace", &id, "again"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let after = db.get_messages(&id).await.unwrap();
    assert_eq!(after.len(), messages.len() + 2);
    assert_eq!(after.last().unwrap().text(), "hello again");

    // Reflection reads the trace there and learns into the database.
    let out =
        reson(d, &["traces", "reflect", &id, "--script", "script.json", "--model", "reflector"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("1 experiences added to the PostgreSQL"), "{}", stderr(&out));
    let listed = stdout(&reson(d, &["experiences", "list"]));
    assert!(listed.contains("Greet first."), "{listed}");
    assert!(!d.join(".reson").exists(), "nothing is written to files");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_on_postgres_learns_into_and_lists_the_database_experiences() {
    let url = pg::cluster().fresh_database().await;
    let dir = api_support::dir_with(&["scripted"]);
    let d = dir.path();
    std::fs::write(
        d.join("reson.toml"),
        format!("[store]\nkind = \"postgres\"\nurl = \"{url}\"\nlease_ms = 1500\n"),
    )
    .unwrap();
    let lesson = json!({ "experiences": [
        { "category": "logic_flow", "rule": "Say hello first.", "tags": { "intent": ["greet"] } }
    ]});
    let script = json!({
        "turns": [{ "text": "hello" }],
        "models": { "reflector": { "turns": [{ "text": lesson.to_string() }] } }
    });
    std::fs::write(d.join("script.json"), script.to_string()).unwrap();
    let server = api_support::ServerProcess::start(
        d,
        &["--script", &d.join("script.json").to_string_lossy()],
    )
    .await;
    let id = server.api.start("hi", json!({})).await;
    server.api.finish(&id, 0).await;
    let path = format!("/api/traces/{id}/reflect");
    let reflected = server.api.post(&path, json!({ "model": "reflector" })).await.expect(200);
    let learnt = reflected["experiences"][0]["id"].as_str().unwrap().to_owned();

    let listed = server.api.get("/api/experiences").await.expect(200);
    assert_eq!(listed["experiences"][0]["id"], learnt.as_str(), "{listed}");
    assert_eq!(listed["experiences"][0]["rule"], "Say hello first.");
    assert!(!d.join(".reson/experiences.md").exists(), "nothing goes to the file");
    let db = PgExperienceStore::new(Database::connect(&url).await.unwrap());
    assert_eq!(db.list().await.unwrap()[0].id, learnt);
}

#[tokio::test]
async fn a_database_that_cannot_be_reached_is_a_one_line_error_without_its_password() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let nowhere = d.join("no-socket-here");
    std::fs::write(
        d.join("reson.toml"),
        format!(
            "[store]\nkind = \"postgres\"\nurl = \"postgres://reson:pw-in-url-42@localhost/x?host={}\"\n",
            nowhere.display()
        ),
    )
    .unwrap();
    for args in
        [&["traces", "list"][..], &["experiences", "list"], &["traces", "migrate", "--to", "file"]]
    {
        let out = reson(d, args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(6), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(err.starts_with("error: cannot open the"), "{err}");
        assert!(err.contains("cannot connect to postgres://reson:"), "{err}");
        assert!(!err.contains("pw-in-url-42"), "{err}");
    }

    // Migrating needs a database, even when the store is files.
    let out = reson(d, &["--config", "/dev/null", "traces", "migrate", "--to", "postgres"]);
    assert_eq!(out.status.code(), Some(6));
    assert!(stderr(&out).contains("give --url or set [store] url"), "{}", stderr(&out));

    // A password variable that is not set is named; its value never shows.
    let (dir, _) = on_postgres().await;
    let d = dir.path();
    let mut toml = std::fs::read_to_string(d.join("reson.toml")).unwrap();
    toml.push_str("password_env = \"RESON_TEST_DB_PASSWORD\"\n");
    std::fs::write(d.join("reson.toml"), toml).unwrap();
    let out = reson(d, &["traces", "list"]);
    assert_eq!(out.status.code(), Some(6));
    assert!(
        stderr(&out).contains("password_env names RESON_TEST_DB_PASSWORD, which is not set"),
        "{}",
        stderr(&out)
    );
    // Set (the test cluster trusts local connections, so any will do).
    let out = reson_env(d, &["traces", "list"], &[("RESON_TEST_DB_PASSWORD", "s3cret-value-77")]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!stdout(&out).contains("s3cret-value-77") && !stderr(&out).contains("s3cret-value-77"));
}

/// A trace with a tool's images: `traces show` says where each image is,
/// a file beside its message or a row in PostgreSQL, and `traces migrate`
/// carries the bytes both ways.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn traces_migrate_carries_images_and_show_says_where_they_are() {
    use base64::Engine as _;
    let (dir, url) = on_postgres().await;
    let d = dir.path();
    let red = std::fs::read(support::root().join("tests/guests/picture/src/red.png")).unwrap();
    let blue = std::fs::read(support::root().join("tests/guests/picture/src/blue.png")).unwrap();
    let files = FileTraceStore::open(d.join(".reson/traces"), Durability::Batched).unwrap();
    let mut trace = Trace::new(TraceMode::Agent, "take two pictures", "default");
    files.create_trace(&trace).await.unwrap();
    files.add_message(&mut trace, Message::new(Role::User, "take two"), None).await.unwrap();
    let call = ToolCall { id: "c1".into(), name: "picture".into(), arguments: "{}".into() };
    let mut shot = Message::tool_result(&call, "taken");
    for png in [&red, &blue] {
        let data = base64::engine::general_purpose::STANDARD.encode(png);
        shot.content.push(reson::trace::ContentPart::ImageUrl {
            url: format!("data:image/png;base64,{data}"),
        });
    }
    files.add_message(&mut trace, shot, None).await.unwrap();
    let id = trace.id.clone();
    // The file store's `show` names the files, beside the message.
    std::fs::write(d.join("files.toml"), "").unwrap();
    let out = reson(d, &["--config", "files.toml", "traces", "show", &id]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let messages = d.join(".reson/traces").join(&id).join("messages");
    for (name, png, size) in [("000002-1.png", &red, "2x2"), ("000002-2.png", &blue, "3x1")] {
        let path = messages.join(name);
        let line = format!("image: {} (image/png, {size}, {} bytes)", path.display(), png.len());
        assert!(text.contains(&line), "{line:?} in {text}");
        assert_eq!(&std::fs::read(&path).unwrap(), png);
    }

    let out = reson(d, &["traces", "migrate", "--to", "postgres"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let db = PgTraceStore::new(Database::connect(&url).await.unwrap());
    assert_eq!(db.get_image(&id, "000002-2.png").await.unwrap().as_ref(), Some(&blue));
    let text = stdout(&reson(d, &["traces", "show", &id]));
    let line = format!("image: <000002-1.png stored in postgres, {} bytes>", red.len());
    assert!(text.contains(&line), "{line:?} in {text}");

    let out = reson(d, &["traces", "migrate", "--to", "file", "--dir", "fresh"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let back = d.join("fresh").join(&id).join("messages");
    assert_eq!(std::fs::read(back.join("000002-1.png")).unwrap(), red);
    assert_eq!(std::fs::read(back.join("000002-2.png")).unwrap(), blue);
    let fresh = FileTraceStore::open(d.join("fresh"), Durability::Batched).unwrap();
    assert_eq!(
        fresh.export_trace(&id).await.unwrap(),
        files.export_trace(&id).await.unwrap(),
        "the round trip changed nothing"
    );
}

/// `[store] durability = "immediate"`: a run on the file store waits for
/// its fsyncs and leaves the same trace; a durability the store does not
/// know is refused at start, naming the key.
#[test]
fn the_file_store_durability_is_chosen_in_the_config() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("script.json"), json!({ "turns": [{ "text": "synced" }] }).to_string())
        .unwrap();
    std::fs::write(d.join("reson.toml"), "[store]\ndurability = \"immediate\"\n").unwrap();
    let out = reson(d, &["run", "--script", "script.json", "--json", "hi"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let shown = stdout(&reson(d, &["traces", "list"]));
    assert!(shown.contains("completed"), "{shown}");
    assert_eq!(std::fs::read_dir(d.join(".reson/traces")).unwrap().count(), 1);

    std::fs::write(d.join("reson.toml"), "[store]\ndurability = \"someday\"\n").unwrap();
    let out = reson(d, &["run", "--script", "script.json", "hi"]);
    assert!(!out.status.success());
    let said = stderr(&out);
    assert!(said.contains("durability") && said.contains("someday"), "{said}");
}
