//! The database going away mid-run: a real run (the `scripted` provider
//! component, real tool plugins) on a `PgTraceStore` whose PostgreSQL
//! server is stopped as a crash would stop it, then started again.

use crate::support;
use crate::support::postgres as pg;

use reson::agent::{AgentEvent, Hooks, RunConfig, Runner};
use reson::database::{Database, DatabaseOptions};
use reson::provider::PluginProvider;
use reson::tools::ToolRegistry;
use reson::trace::{EventKind, Message, PgTraceStore, Role, TraceStatus, TraceStore};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use support::TestDir;

/// Long enough for any step here; a run that hangs fails the test instead.
const IN_TIME: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_fails_cleanly_when_the_database_goes_away_and_continues_once_it_is_back() {
    // The first turn takes a while to answer and calls two real tools: an
    // echo, stored at once, and a nap, during which the database goes.
    let script = json!({ "turns": [
        { "text": "looking", "delay_ms": 300, "tool_calls": [
            { "name": "echo", "arguments": { "text": "one" } },
            { "name": "nap", "arguments": { "ms": 3000 } } ] },
        { "text": "done" }
    ]});
    let dir = TestDir::new();
    dir.install(support::plugins(), "scripted").install(support::plugins(), "echo");
    let runtime =
        dir.open_scripted(&script, "[plugins.hostile]\nlimits = { timeout_ms = 20000 }\n").await;
    dir.install(support::test_plugins(), "hostile");
    runtime.rescan().await.unwrap();

    // Durable: with `synchronous_commit = off` a crash may lose commits
    // that were already acknowledged, which is not what is tested here.
    let cluster = pg::Cluster::start(pg::Durability::Durable);
    let url = cluster.fresh_database().await;
    // A store call waits at most this long for a connection once the
    // server is gone.
    let options = DatabaseOptions::new(url).acquire_timeout(Duration::from_secs(2));
    let store = Arc::new(PgTraceStore::new(Database::connect_with(&options).await.unwrap()));
    let runner = Runner::new(
        store.clone(),
        Arc::new(PluginProvider::new(runtime.clone(), "scripted")),
        ToolRegistry::new(runtime.clone()),
        Hooks::none(),
    );

    let mut handle =
        runner.run(vec![Message::new(Role::User, "go")], RunConfig::default()).await.unwrap();
    let mut trace_id = None;
    let echoed = async {
        while let Some(event) = handle.next_event().await {
            match event {
                AgentEvent::TraceStarted { trace_id: id, .. } => trace_id = Some(id),
                AgentEvent::MessageAdded { message } if message.name.as_deref() == Some("echo") => {
                    return;
                }
                _ => {}
            }
        }
        panic!("the run ended before the echo's result was stored");
    };
    tokio::time::timeout(IN_TIME, echoed).await.expect("the echo's result in time");
    let trace_id = trace_id.expect("the run started a trace");

    // The nap is running: the server goes away under the run.
    cluster.stop();
    let ended =
        tokio::time::timeout(IN_TIME, handle.wait()).await.expect("the run ends, not hangs");
    let err = ended.expect_err("a run that cannot store its steps fails");
    let text = err.to_string();
    assert!(text.contains("database"), "the error names the database: {text}");
    assert!(!text.contains("panicked"), "{text}");
    assert!(store.get_trace(&trace_id).await.is_err(), "the store reports the outage");

    // Back: everything stored is whole, each message with its event.
    cluster.start_server();
    let trace = store.get_trace(&trace_id).await.unwrap().expect("the trace loads");
    let messages = store.get_messages(&trace_id).await.unwrap();
    let announced: Vec<u64> = store
        .events_after(&trace_id, 0)
        .await
        .unwrap()
        .into_iter()
        .filter_map(|e| match e.kind {
            EventKind::MessageAdded { message } => Some(message.sequence),
            _ => None,
        })
        .collect();
    let stored: Vec<u64> = messages.iter().map(|m| m.sequence).collect();
    assert_eq!(announced, stored, "every stored message has its message_added event");
    assert_eq!(trace.last_sequence, *stored.last().unwrap());
    let roles: Vec<Role> = messages.iter().map(|m| m.role).collect();
    assert_eq!(roles, [Role::User, Role::Assistant, Role::Tool], "the nap's result never made it");

    // Continuing heals the nap's call and finishes the trace.
    let again = RunConfig { trace_id: Some(trace_id.clone()), ..RunConfig::default() };
    let run = runner.run(vec![Message::new(Role::User, "go on")], again).await.unwrap();
    let outcome = tokio::time::timeout(IN_TIME, run.wait()).await.expect("in time").unwrap();
    assert_eq!(outcome.status, TraceStatus::Completed);
    assert_eq!(outcome.final_text.as_deref(), Some("done"));
    let trace = store.get_trace(&trace_id).await.unwrap().unwrap();
    assert_eq!(trace.status, TraceStatus::Completed);
    let path = store.get_main_path_messages(&trace_id, trace.head_sequence.unwrap()).await.unwrap();
    let healed = path
        .iter()
        .find(|m| m.name.as_deref() == Some("nap"))
        .expect("the nap's call has a result");
    assert!(healed.synthetic, "{healed:?}");
    assert_eq!(path.last().unwrap().text(), "done");
}
