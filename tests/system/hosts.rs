//! Several `reson serve` hosts on one PostgreSQL database: two real server
//! processes on a fresh database of a throwaway cluster, driven over HTTP
//! and WebSocket. A run started on one host is listed, watched and stopped
//! from the other; a second run of it elsewhere is refused; when its host
//! is killed, the other continues it once the lease has expired, healing
//! the cut tool call, with nothing lost.

use crate::support;
use crate::support::api as api_support;
use crate::support::postgres as pg;

use api_support::{Api, ServerProcess, WAIT, echo_turn, ids, kinds, set_script, text_turn};
use reson::agent::INTERRUPTED;
use serde_json::{Value, json};
use std::time::{Duration, Instant};
use support::TestDir;

/// How long a lease lasts without a heartbeat, in these tests: long enough
/// that what a test checks right after a kill still comes before the lease
/// ends on a machine busy building (1.5 s was not, beside a release build).
const LEASE_MS: u64 = 5000;

/// A directory holding the scripted provider, `plugins` and a config whose
/// `[store]` is a fresh database; its script plays `turns`. The database's
/// URL.
async fn shared_dir(plugins: &[&str], turns: Value) -> (TestDir, String) {
    let url = pg::cluster().fresh_database().await;
    (dir_on(&url, plugins, turns), url)
}

/// [`shared_dir`] on the database at `url`.
fn dir_on(url: &str, plugins: &[&str], turns: Value) -> TestDir {
    let dir = api_support::dir_with(&[&["scripted"], plugins].concat());
    let script = set_script(dir.path(), turns);
    dir.config(&api_support::config(&format!(
        "[plugins.scripted]\ndirs = [{{ path = \".\", access = \"read\" }}]\n\
         config = {{ script = \"{}\" }}\n\
         [store]\nkind = \"postgres\"\nurl = \"{url}\"\nlease_ms = {LEASE_MS}\n",
        script.display()
    )));
    dir
}

/// Two hosts on the directory's database.
async fn two_hosts(dir: &TestDir) -> (ServerProcess, ServerProcess) {
    let a = ServerProcess::start(dir.path(), &[]).await;
    let b = ServerProcess::start(dir.path(), &[]).await;
    (a, b)
}

fn text(message: &Value) -> String {
    let parts = message["content"].as_array().unwrap();
    parts.iter().filter_map(|p| p["text"].as_str()).collect()
}

fn texts(messages: &Value) -> Vec<String> {
    messages["messages"].as_array().unwrap().iter().map(text).collect()
}

/// The ids of the traces `api` lists as running.
async fn running(api: &Api) -> Vec<String> {
    let list = api.get("/api/traces/running").await.expect(200);
    list["traces"].as_array().unwrap().iter().map(|t| t["id"].as_str().unwrap().into()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_on_one_host_is_listed_watched_refused_and_stopped_from_the_other() {
    let slow = json!({ "text": "slow", "delay_ms": 30000 });
    let (dir, _) = shared_dir(&["echo"], json!([echo_turn("one"), slow])).await;
    let (a, b) = two_hosts(&dir).await;
    let id = a.api.start("go", json!({})).await;
    let mut watcher = b.api.watch(&id, 0).await;
    watcher.until_kind("tool_finished").await;

    assert_eq!(running(&b.api).await, std::slice::from_ref(&id), "B lists A's run");
    assert_eq!(running(&a.api).await, std::slice::from_ref(&id));
    assert_eq!(b.api.trace(&id).await["running"], true);
    let again = b.api.post(&format!("/api/traces/{id}/run"), json!({})).await;
    let message = again.expect_error(409, "conflict");
    assert!(message.contains("another host"), "{message}");
    assert_eq!(b.api.get("/api/health").await.expect(200)["running"], 0, "none runs on B");

    let stopping = Instant::now();
    let reply = b.api.post(&format!("/api/traces/{id}/stop"), json!({})).await.expect(200);
    assert_eq!(reply, json!({ "trace_id": id, "status": "stopping" }));
    let finished = watcher.until_kind("trace_finished").await;
    assert_eq!(finished["status"], "stopped", "A's run ended stopped");
    assert!(stopping.elapsed() < support::MARGIN, "the stop waited for the model call");
    // Every event A stored reached B's watcher, in order, once; the text
    // deltas stayed on A.
    let last = a.api.last_event(&id).await;
    assert_eq!(watcher.ids(), (1..=last).collect::<Vec<_>>(), "a gap or a duplicate");
    assert!(!kinds(&watcher.frames).iter().any(|k| k.ends_with("_delta")), "live frames stay on A");

    // Seen to finish on B, the trace continues on B at once.
    set_script(dir.path(), json!([echo_turn("one"), text_turn("done")]));
    assert_eq!(b.api.run(&id, json!({})).await["mode"], "continue");
    let finished = watcher.until_kind("trace_finished").await;
    assert_eq!(finished["status"], "completed");
    b.api.settled(&id).await;
    a.api.settled(&id).await;
    assert!(running(&a.api).await.is_empty());
    let stop = a.api.post(&format!("/api/traces/{id}/stop"), json!({})).await;
    stop.expect_error(409, "conflict");
    let unknown = b.api.post("/api/traces/nosuchtrace/stop", json!({})).await;
    unknown.expect_error(404, "not_found");
    let last = b.api.last_event(&id).await;
    assert_eq!(watcher.ids(), (1..=last).collect::<Vec<_>>());
    assert_eq!(
        texts(&a.api.messages(&id, "main_path").await),
        ["go", "echoing one", "one", "done"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_a_host_is_killed_another_continues_its_trace_after_the_lease() {
    let nap = json!({ "text": "napping",
        "tool_calls": [{ "id": "call_nap", "name": "nap", "arguments": { "ms": 20000 } }] });
    let (dir, _) = shared_dir(&["hostile"], json!([nap, text_turn("recovered")])).await;
    let (mut a, b) = two_hosts(&dir).await;
    let id = a.api.start("nap please", json!({})).await;
    let mut watcher = b.api.watch(&id, 0).await;
    watcher.until_kind("tool_started").await;
    let before = b.api.messages(&id, "all").await;
    assert_eq!(texts(&before), ["nap please", "napping"]);

    a.signal("KILL");
    let killed = Instant::now();
    assert_eq!(a.exit_code().await, None, "killed by the signal");
    // A's lease outlives it: the trace still runs as far as B can tell.
    let early = b.api.post(&format!("/api/traces/{id}/run"), json!({})).await;
    early.expect_error(409, "conflict");
    assert_eq!(b.api.trace(&id).await["running"], true);

    let since = b.api.last_event(&id).await;
    let taken = loop {
        let reply = b.api.post(&format!("/api/traces/{id}/run"), json!({})).await;
        if reply.status == 200 {
            break reply.json();
        }
        reply.expect_error(409, "conflict");
        assert!(killed.elapsed() < WAIT, "the lease never expired");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(taken["mode"], "continue");
    let bound = Duration::from_millis(LEASE_MS) + support::MARGIN;
    assert!(killed.elapsed() < bound, "{:?}", killed.elapsed());
    let frames = b.api.finish(&id, since).await;
    assert_eq!(
        frames.iter().rev().find(|f| f["kind"] == "trace_finished").unwrap()["status"],
        "completed"
    );
    assert_eq!(ids(&frames), (since + 1..=b.api.last_event(&id).await).collect::<Vec<_>>());

    let after = b.api.messages(&id, "main_path").await;
    let path = after["messages"].as_array().unwrap();
    assert_eq!(path[..2], before["messages"].as_array().unwrap()[..], "nothing was lost");
    let healed = &path[2];
    assert_eq!((&healed["role"], &healed["tool_call_id"]), (&json!("tool"), &json!("call_nap")));
    assert_eq!((text(healed), &healed["synthetic"]), (INTERRUPTED.to_owned(), &json!(true)));
    assert_eq!(text(path.last().unwrap()), "recovered");
    // The watcher on B saw A's events and then B's, with no gap.
    watcher.until_kind("trace_finished").await;
    let last = b.api.last_event(&id).await;
    assert_eq!(watcher.ids(), (1..=last).collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_that_cannot_reach_its_database_does_not_start_and_hides_the_password() {
    let dir = api_support::dir_with(&["scripted"]);
    let nowhere = tempfile::tempdir().unwrap();
    dir.config(&api_support::config(&format!(
        "[store]\nkind = \"postgres\"\nurl = \"postgres://reson:pw-secret-42@localhost/x?host={}\"\n",
        nowhere.path().display()
    )));
    let out = tokio::time::timeout(
        WAIT,
        api_support::reson(dir.path()).args(["serve", "--addr", "127.0.0.1:0"]).output(),
    )
    .await
    .expect("it gives up in time")
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(String::from_utf8_lossy(&out.stdout).is_empty(), "it never listened");
    assert!(stderr.contains("cannot connect to postgres://reson:"), "{stderr}");
    assert!(!stderr.contains("pw-secret-42"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_shut_down_releases_its_leases_for_the_others_at_once() {
    let slow = json!({ "text": "slow", "delay_ms": 30000 });
    let (dir, url) = shared_dir(&["echo"], json!([slow])).await;
    let (mut a, b) = two_hosts(&dir).await;
    let id = a.api.start("go", json!({})).await;
    let mut watcher = b.api.watch(&id, 0).await;
    watcher.until_kind("message_added").await;
    let db = sqlx::PgPool::connect(&url).await.unwrap();
    let leases = || sqlx::query_scalar::<_, i64>("SELECT count(*) FROM run_leases").fetch_one(&db);
    assert_eq!(leases().await.unwrap(), 1);

    a.signal("TERM");
    assert_eq!(a.exit_code().await, Some(0));
    assert_eq!(watcher.until_kind("trace_finished").await["status"], "stopped");
    assert_eq!(leases().await.unwrap(), 0, "released, not left to expire");
    assert!(running(&b.api).await.is_empty());
    set_script(dir.path(), json!([text_turn("done")]));
    assert_eq!(b.api.run(&id, json!({})).await["mode"], "continue");
    assert_eq!(watcher.until_kind("trace_finished").await["status"], "completed");
    assert_eq!(texts(&b.api.messages(&id, "main_path").await), ["go", "done"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_outage_stops_the_runs_it_fences_and_the_hosts_recover() {
    // Durable: with commits not flushed, a crash of the server would lose
    // the trace's beginning, which is not what this test is about.
    let cluster = pg::Cluster::start(pg::Durability::Durable);
    let url = cluster.fresh_database().await;
    let slow = json!({ "text": "slow", "delay_ms": 30000 });
    let dir = dir_on(&url, &["echo"], json!([slow]));
    let (a, b) = two_hosts(&dir).await;
    let id = a.api.start("go", json!({})).await;
    let mut watcher = a.api.watch(&id, 0).await;
    watcher.until_kind("message_added").await;

    cluster.stop();
    // The lease cannot be renewed: A stops the run rather than risk
    // running it beside a host that took it over. Its end cannot be
    // written, and the run ends all the same.
    let until = Instant::now() + WAIT;
    while a.api.get("/api/health").await.expect(200)["running"] != 0 {
        assert!(Instant::now() < until, "the run outlived its lease");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The run is stopped before the warning is logged, and the log comes
    // through a pipe: it may not be there yet.
    let fenced = format!("the lease of trace {id} could not be renewed");
    support::wait_for(&format!("\"{fenced}\" in the host's log"), || {
        a.output.lock().unwrap().iter().any(|line| line.contains(&fenced))
    })
    .await;
    let down = b.api.get("/api/traces/running").await;
    let message = down.expect_error(500, "internal");
    assert!(message.contains("database"), "{message}");

    cluster.start_server();
    // Both hosts reconnect by themselves; the trace, whose end was never
    // written, continues on B once the lease has expired, and A's watcher
    // (its listener connected again) sees B's events.
    set_script(dir.path(), json!([text_turn("done")]));
    let until = Instant::now() + WAIT;
    let since = loop {
        let reply = a.api.get(&format!("/api/traces/{id}")).await;
        if reply.status == 200 {
            break reply.json()["trace"]["last_event_id"].as_u64().unwrap();
        }
        assert!(Instant::now() < until, "A never read the database again: {}", reply.text);
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let mut watcher = a.api.watch(&id, since).await;
    let started = loop {
        let reply = b.api.post(&format!("/api/traces/{id}/run"), json!({})).await;
        if reply.status == 200 {
            break reply.json();
        }
        assert!(Instant::now() < until, "never continued: {}", reply.text);
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(started["mode"], "continue");
    assert_eq!(watcher.until_kind("trace_finished").await["status"], "completed");
    assert_eq!(texts(&a.api.messages(&id, "main_path").await), ["go", "done"]);
}
