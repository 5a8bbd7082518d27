//! Recorded effects and `reson traces replay`: a run records each plugin
//! call's host calls with the trace; a replay runs the calls again
//! offline against them and reports "identical" or the first divergence.
//!
//! The demo's run (the bundled `fs` plugin) replays identically, and a
//! changed `fs` build is caught at its `edit`; `http`, `process`, the
//! clocks and randomness are answered from the recording with the world
//! gone; recordings survive `kill -9` of `reson run` and move with
//! `traces migrate`.

use crate::support;
use crate::support::postgres as pg;

use reson::capability::effects::{Blob, Effect, Effects, ProcessOutcome};
use reson::plugin::{CallContext, Runtime};
use reson::replay::{CallRecording, EFFECTS, record_key};
use reson::trace::{Durability, FileTraceStore, PgTraceStore, Role, TraceStore};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Mutex;
use support::TestDir;

/// `reson ARGS` in `dir`, with its `reson.toml` and the shared cache.
fn reson(dir: &Path, args: &[&str]) -> Output {
    reson_command(dir, args).output().unwrap()
}

fn reson_command(dir: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_reson"));
    command
        .current_dir(dir)
        .args(["--cache-dir", &support::cache_dir().to_string_lossy()])
        .args(args)
        .env_remove("RESON_CONFIG")
        .env_remove("RESON_PLUGINS_DIR");
    command
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A directory set up as examples/demo.sh does: a copy of
/// examples/workspace, the bundled plugins, `fs` granted the workspace.
fn demo_dir(store: &str) -> tempfile::TempDir {
    // Commands plugins start run in the jail, which needs bubblewrap.
    support::apt::ensure(|| Path::new(reson::jail::DEFAULT_BWRAP).exists(), &["bubblewrap"]);
    let dir = tempfile::tempdir().unwrap();
    copy_workspace(&dir.path().join("workspace"));
    std::fs::write(
        dir.path().join("reson.toml"),
        format!(
            r#"plugins_dir = "{}"
lock_file = "reson.lock"
traces_dir = "traces"
{store}
[permissions]
rules = [{{ decision = "allow", tool = "{{write,edit}}", pattern = "{{src,notes}}/**", examples = ["src/main.rs", "notes/done.txt"], counter_examples = ["../outside.txt", "/etc/passwd"] }}]

[plugins.fs]
dirs = [{{ path = "workspace", access = "read-write" }}]
limits = {{ timeout_ms = 5000 }}
"#,
            support::plugins().display()
        ),
    )
    .unwrap();
    dir
}

/// `to` as examples/workspace is, modification times too (`glob` lists
/// newest first): what the demo's run starts from.
fn copy_workspace(to: &Path) {
    let _ = std::fs::remove_dir_all(to);
    let status = Command::new("cp")
        .args(["-r", "--preserve=timestamps"])
        .arg(support::root().join("examples/workspace"))
        .arg(to)
        .status()
        .unwrap();
    assert!(status.success());
}

/// The only trace in `dir`'s store.
fn only_trace(dir: &Path, config: &[&str]) -> String {
    let out = reson(dir, &[config, &["traces", "list", "--json"]].concat());
    assert!(out.status.success(), "{}", stderr(&out));
    let traces: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(traces.as_array().unwrap().len(), 1, "{traces}");
    traces[0]["id"].as_str().unwrap().to_owned()
}

fn demo_run(dir: &Path) -> String {
    let script = support::root().join("examples/scripts/rename-greeting.json");
    let out = reson(
        dir,
        &["run", "Rename the greeting to bonjour", "--script", &script.to_string_lossy()],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    only_trace(dir, &[])
}

/// A plugins directory holding only an `fs` built with `feature`:
/// `changed-edit`, whose `edit` reports its work in other words, or
/// `changed-write`, whose `edit` writes another file and says the same.
fn changed_fs(feature: &str) -> PathBuf {
    static BUILD: Mutex<()> = Mutex::new(());
    let _one_at_a_time = BUILD.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let root = support::root();
    let out = root.join("target").join(format!("{feature}-fs-plugins"));
    // Built apart (a debug build compiles fastest), so that the bundled
    // build's artifacts stay as they are.
    support::plugins();
    let target = root.join("target/wasm-changed-fs");
    let status = Command::new("cargo")
        // Without debug info: with it this second build took 0.5 GB.
        .env("CARGO_PROFILE_DEV_DEBUG", "false")
        .args(["build", "--quiet", "--target", "wasm32-wasip2", "-p", "fs"])
        .args(["--features", feature])
        .arg("--manifest-path")
        .arg(root.join("plugins/Cargo.toml"))
        .arg("--target-dir")
        .arg(&target)
        .status()
        .unwrap();
    assert!(status.success(), "building fs with {feature}");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::copy(target.join("wasm32-wasip2/debug/fs.wasm"), out.join("fs.wasm")).unwrap();
    std::fs::copy(root.join("plugins/fs/reson-plugin.toml"), out.join("fs.toml")).unwrap();
    out
}

#[test]
fn the_demo_replays_identically_and_a_changed_edit_is_caught_at_its_call() {
    let dir = demo_dir("");
    let d = dir.path();
    let id = demo_run(d);
    let main_rs = d.join("workspace/src/main.rs");
    assert!(std::fs::read_to_string(&main_rs).unwrap().contains("bonjour"));

    // The five fs calls were recorded; the five goal calls (built-ins) not.
    let store = FileTraceStore::open(d.join("traces"), Durability::Batched).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let records = rt.block_on(store.list_records(&id, Some(EFFECTS))).unwrap();
    let tools: Vec<String> = records
        .iter()
        .map(|r| serde_json::from_value::<CallRecording>(r.body.clone()).unwrap().tool)
        .collect();
    assert_eq!(tools.len(), 5, "{tools:?}");
    for tool in ["glob", "grep", "read", "edit", "write"] {
        assert!(tools.iter().any(|t| t == tool), "{tool} in {tools:?}");
    }

    // The workspace says "bonjour" now; the replay's scratch copy is
    // rebuilt from the trace's checkpoints as the run found it, or the
    // edit of "hello" would fail.
    let out = reson(d, &["traces", "replay", &id]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    assert_eq!(stdout(&out).trim(), "identical (5 calls, 5 skipped)");
    // The report is kept in the trace, for the viewer.
    let kept = rt.block_on(store.list_records(&id, Some(reson::replay::REPORT_KIND))).unwrap();
    assert_eq!(kept.len(), 1);
    assert_eq!(kept[0].body["summary"], "identical (5 calls, 5 skipped)");
    assert_eq!(kept[0].body["report"]["replayed"], 5);
    let now = std::fs::read_to_string(&main_rs).unwrap();
    assert!(
        now.contains("bonjour") && !now.contains("\"hello\""),
        "the replay wrote a scratch copy"
    );

    let out = reson(d, &["traces", "replay", &id, "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let report: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!((report["replayed"].as_u64(), report["divergence"].is_null()), (Some(5), true));

    // A changed build of fs: caught at the edit, with a diff.
    let changed = changed_fs("changed-edit").to_string_lossy().into_owned();
    let out = reson(d, &["traces", "replay", &id, "--plugins", &changed, "--json"]);
    assert_eq!(out.status.code(), Some(1), "{}{}", stdout(&out), stderr(&out));
    let report: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let divergence = &report["divergence"];
    assert_eq!(divergence["tool"], "edit", "{report}");
    assert_eq!(divergence["difference"], "output", "{report}");
    assert_ne!(divergence["recorded_sha256"], divergence["replayed_sha256"]);
    let diff = divergence["diff"].as_str().unwrap();
    assert!(diff.contains("- replaced 1 occurrence in"), "{diff}");
    assert!(diff.contains("+ edited "), "{diff}");
    let messages = rt.block_on(store.get_messages(&id)).unwrap();
    let edit_message = messages
        .iter()
        .find(|m| m.role == Role::Assistant && m.tool_calls.iter().any(|c| c.name == "edit"))
        .unwrap();
    assert_eq!(divergence["sequence"].as_u64(), Some(edit_message.sequence));
    assert_eq!(report["replayed"].as_u64(), Some(4), "glob, grep, read, then the edit");

    let out = reson(d, &["traces", "replay", &id, "--plugins", &changed]);
    assert_eq!(out.status.code(), Some(1));
    let text = stdout(&out);
    assert!(text.contains("diverged at call") && text.contains("`edit` (plugin fs)"), "{text}");
    assert!(text.contains("the plugin changed since the recording"), "{text}");

    // From the message after the edit on, the changed build is not reached.
    let after = (edit_message.sequence + 1).to_string();
    let out = reson(d, &["traces", "replay", &id, "--plugins", &changed, "--from", &after]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    assert_eq!(stdout(&out).trim(), "identical (0 calls, 1 skipped)");

    // A build whose edit writes something else but says the same: caught
    // by the files the edit's message left, against the run's checkpoint.
    let writes = changed_fs("changed-write").to_string_lossy().into_owned();
    let out = reson(d, &["traces", "replay", &id, "--plugins", &writes, "--json"]);
    assert_eq!(out.status.code(), Some(1), "{}{}", stdout(&out), stderr(&out));
    let report: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let divergence = &report["divergence"];
    assert_eq!(divergence["difference"], "files", "{report}");
    assert_eq!(divergence["sequence"].as_u64(), Some(edit_message.sequence), "{report}");
    let paths: Vec<&str> =
        divergence["paths"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert_eq!(paths.len(), 1, "{paths:?}");
    assert!(paths[0].ends_with("src/main.rs"), "{paths:?}");
    let out = reson(d, &["traces", "replay", &id, "--plugins", &writes]);
    assert!(
        stdout(&out).contains("the files after its message's calls differ"),
        "{}",
        stdout(&out)
    );

    let out = reson(d, &["traces", "replay", "tr_none"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("no trace tr_none"), "{}", stderr(&out));
}

#[test]
fn a_file_read_whose_content_changed_since_is_a_divergence() {
    // Without checkpoints the replay runs on the workspace as it is now,
    // where src/main.rs already says "bonjour": the digests recorded when
    // `grep` and `read` opened it tell the replay that this is not what
    // they read.
    let dir = demo_dir("[checkpoints]\nenabled = false\n");
    let d = dir.path();
    let id = demo_run(d);
    let store = FileTraceStore::open(d.join("traces"), Durability::Batched).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let messages = rt.block_on(store.get_messages(&id)).unwrap();
    let reading = messages
        .iter()
        .find(|m| m.role == Role::Assistant && m.tool_calls.iter().any(|c| c.name == "read"))
        .unwrap();
    let from = reading.sequence.to_string();
    // Only the edit is left changed (a file the run wrote later would be
    // a read the recording lacks, found first or not by directory order).
    std::fs::remove_file(d.join("workspace/notes/done.txt")).unwrap();
    let out = reson(d, &["traces", "replay", &id, "--from", &from, "--json"]);
    assert_eq!(out.status.code(), Some(1), "{}{}", stdout(&out), stderr(&out));
    let report: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let divergence = &report["divergence"];
    assert_eq!(divergence["sequence"].as_u64(), Some(reading.sequence), "{report}");
    assert_eq!(divergence["difference"], "effect", "{report}");
    assert_eq!(divergence["divergence"]["kind"], "file-read", "{report}");
    let asked = divergence["divergence"]["asked"].as_str().unwrap();
    assert!(asked.ends_with("src/main.rs"), "{report}");
    assert_eq!(divergence["divergence"]["why"], "its content differs from the recording");
    assert_eq!(report["copied_as_now"].as_array().map(Vec::len), Some(1), "{report}");
}

/// A local HTTP server that answers every request with `hit N`, counting.
async fn counting_server() -> (String, tokio::task::JoinHandle<()>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        let mut hits = 0;
        loop {
            let Ok((mut socket, _)) = listener.accept().await else { return };
            let mut request = vec![0; 4096];
            let _ = socket.read(&mut request).await;
            hits += 1;
            let body = format!("hit {hits}");
            let answer = format!(
                "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = socket.write_all(answer.as_bytes()).await;
        }
    });
    (format!("127.0.0.1:{}", addr.port()), server)
}

async fn hostile(grant: &str) -> (TestDir, Runtime) {
    let dir = TestDir::new();
    dir.install(support::test_plugins(), "hostile");
    let runtime = dir
        .open(&format!(
            "[plugins.hostile]\ndirs = [{{ path = \"workspace\", access = \"read-write\" }}]\n{grant}"
        ))
        .await;
    (dir, runtime)
}

/// Calls `tool` with `effects`; the text, or the error's message.
async fn call(rt: &Runtime, tool: &str, args: Value, effects: &Effects) -> String {
    let context = CallContext { effects: Some(effects.clone()), ..CallContext::default() };
    match rt.call_tool(tool, &args.to_string(), &context).await {
        Ok(out) => out.text,
        Err(e) => e.to_string(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_is_answered_from_the_recording_once_the_server_is_gone() {
    let (addr, server) = counting_server().await;
    let (_dir, rt) = hostile(&format!("http = [\"{addr}\"]")).await;
    let url = format!("http://{addr}/page");
    let recording = Effects::record();
    let live = call(&rt, "http", json!({ "url": url }), &recording).await;
    assert_eq!(live, "status: 200\nhit 1");
    let effects = recording.effects();
    let http: Vec<&Effect> = effects.iter().filter(|e| e.kind() == "http").collect();
    assert_eq!(http.len(), 1, "{effects:?}");
    assert_eq!(recording.call().unwrap().plugin, "hostile");
    // Streamed, two bytes a read: recorded as the guest read it.
    let streamed_recording = Effects::record();
    let streamed_args = json!({ "url": url, "stream": true, "read_bytes": 2 });
    let streamed = call(&rt, "http", streamed_args.clone(), &streamed_recording).await;
    assert_eq!(streamed, "status: 200\nhit 2");

    // Offline: the server is gone.
    server.abort();
    let _ = server.await;
    let offline = call(&rt, "http", json!({ "url": url }), &Effects::record()).await;
    assert!(!offline.starts_with("status:"), "the server still answers: {offline}");

    let replay = Effects::replay(effects.clone());
    let replayed = call(&rt, "http", json!({ "url": url }), &replay).await;
    assert_eq!(replayed, live);
    assert_eq!((replay.divergence(), replay.unused()), (None, Vec::new()));
    let replay = Effects::replay(streamed_recording.effects());
    assert_eq!(call(&rt, "http", streamed_args, &replay).await, streamed);
    assert_eq!((replay.divergence(), replay.unused()), (None, Vec::new()));

    // A request the recording lacks: an error for the guest, a divergence.
    let replay = Effects::replay(effects.clone());
    let other = format!("http://{addr}/other");
    let answer = call(&rt, "http", json!({ "url": other }), &replay).await;
    assert!(answer.contains("replay: no recorded response to GET"), "{answer}");
    let divergence = replay.divergence().unwrap();
    assert_eq!((divergence.kind.as_str(), divergence.asked), ("http", format!("GET {other}")));
    assert_eq!(replay.unused().len(), 1, "the recorded request was left unused");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_clocks_and_randomness_replay_with_the_recorded_values() {
    let (_dir, rt) = hostile("").await;
    let recording = Effects::record();
    let first = call(&rt, "entropy", json!({}), &recording).await;
    let second = call(&rt, "entropy", json!({}), &Effects::record()).await;
    assert!(first.starts_with("wall=") && first != second, "{first} / {second}");
    let effects = recording.effects();
    for kind in ["wall-clock", "monotonic-clock"] {
        assert!(effects.iter().any(|e| e.kind() == kind), "{kind} in {effects:?}");
    }
    assert!(
        effects.iter().any(|e| e.kind().contains("random") || e.kind() == "insecure-seed"),
        "the hash seed came from wasi:random: {effects:?}"
    );

    for _ in 0..2 {
        let replay = Effects::replay(effects.clone());
        assert_eq!(call(&rt, "entropy", json!({}), &replay).await, first);
        assert_eq!(replay.divergence(), None);
    }

    // With nothing recorded, the first value asked for is the divergence.
    let replay = Effects::replay(Vec::new());
    call(&rt, "entropy", json!({}), &replay).await;
    let divergence = replay.divergence().unwrap();
    assert!(divergence.why.contains("no more values"), "{divergence}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_warm_instance_records_each_call_into_its_own_log() {
    let dir = TestDir::new();
    let from = support::test_plugins();
    std::fs::copy(from.join("hostile.wasm"), dir.plugins().join("warm.wasm")).unwrap();
    let manifest = std::fs::read_to_string(from.join("hostile.toml")).unwrap();
    let manifest = manifest.replace("name = \"hostile\"", "name = \"warm\"");
    std::fs::write(dir.plugins().join("warm.toml"), manifest + "\n[instance]\nkeep_warm = true\n")
        .unwrap();
    let rt = dir.open("").await;
    let clock_reads = |e: &Effects| e.effects().iter().filter(|e| e.kind() == "wall-clock").count();
    let (first, second) = (Effects::record(), Effects::record());
    assert_eq!(call(&rt, "count", json!({}), &first).await, "1");
    call(&rt, "entropy", json!({}), &first).await;
    let recorded = first.effects().len();
    assert_eq!(clock_reads(&first), 1);
    assert_eq!(call(&rt, "count", json!({}), &Effects::default()).await, "2", "still warm");
    call(&rt, "entropy", json!({}), &second).await;
    assert_eq!(call(&rt, "count", json!({}), &second).await, "3", "still warm");
    assert_eq!((first.effects().len(), clock_reads(&second)), (recorded, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_command_is_answered_without_running() {
    let (dir, rt) = hostile("process = [\"touch *\", \"echo *\"]").await;
    let ws = dir.workspace();
    let args = json!({ "program": "echo", "args": ["hello", "replay"] });
    let recording = Effects::record();
    assert_eq!(call(&rt, "exec", args.clone(), &recording).await, "hello replay\n");
    let mut effects = recording.effects();
    let found = effects.iter_mut().find(|e| e.kind() == "process");
    let Some(Effect::Process { command, outcome }) = found else { panic!("no process effect") };
    assert_eq!(command.argv, ["echo", "hello", "replay"]);
    // What the replay answers is the recording's, whatever really runs.
    let ProcessOutcome::Output { stdout, .. } = outcome else { panic!("the echo did not run") };
    *stdout = Blob::new(b"from the recording\n");
    let replay = Effects::replay(effects.clone());
    assert_eq!(call(&rt, "exec", args, &replay).await, "from the recording\n");
    assert_eq!(replay.divergence(), None);

    // A command the recording lacks does not run.
    let touch = json!({ "program": "touch", "args": [ws.join("made").to_string_lossy()] });
    let replay = Effects::replay(effects);
    let answer = call(&rt, "exec", touch, &replay).await;
    assert!(answer.contains("replay: no recorded run of `touch"), "{answer}");
    assert!(!ws.join("made").exists(), "the command never ran");
    assert_eq!(replay.divergence().unwrap().kind, "process");
}

/// `reson run --json` with `script`, killed with SIGKILL once its trace
/// holds the result of call `call_id`. Returns the trace id.
fn run_killed_after(
    rt: &tokio::runtime::Runtime,
    dir: &Path,
    script: &Value,
    call_id: &str,
) -> String {
    let path = dir.join("script.json");
    std::fs::write(&path, script.to_string()).unwrap();
    let mut child = reson_command(dir, &["run", "--json", "--script", &path.to_string_lossy()])
        .arg("write it down")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let store = FileTraceStore::open(dir.join("traces"), Durability::Batched).unwrap();
    let started = std::time::Instant::now();
    let id = loop {
        let done = rt.block_on(async {
            let traces = store.list_traces(&Default::default()).await.ok()?;
            let id = traces.first()?.id.clone();
            let messages = store.get_messages(&id).await.ok()?;
            messages.iter().any(|m| m.tool_call_id.as_deref() == Some(call_id)).then_some(id)
        });
        if done.is_some() || started.elapsed().as_secs() >= 60 {
            break done;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    child.kill().unwrap();
    child.wait().unwrap();
    id.expect("the call finished within a minute")
}

#[test]
fn recordings_survive_kill_9_and_move_with_traces_migrate() {
    let rt =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let dir = demo_dir("");
    let d = dir.path();
    let script = json!({ "turns": [
        { "text": "noting", "tool_calls": [{ "id": "call_w", "name": "write",
          "arguments": { "path": "notes/killed.txt", "content": "written before the kill\n" } }] },
        { "text": "slow", "delay_ms": 30000 }
    ]});
    let id = run_killed_after(&rt, d, &script, "call_w");

    let files = FileTraceStore::open(d.join("traces"), Durability::Batched).unwrap();
    let key = record_key("call_w");
    let record = rt.block_on(files.get_record(&id, EFFECTS, &key)).unwrap();
    let recording: CallRecording = serde_json::from_value(record.clone().unwrap()).unwrap();
    assert_eq!((recording.tool.as_str(), recording.plugin.as_str()), ("write", "fs"));
    assert!(recording.output.ok, "{:?}", recording.output);
    let out = reson(d, &["traces", "replay", &id]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    assert_eq!(stdout(&out).trim(), "identical (1 call, 0 skipped)");

    // Files -> PostgreSQL -> files: the recording goes along, and the
    // replay reads it from the database.
    let url = rt.block_on(pg::cluster().fresh_database());
    let out = reson(d, &["traces", "migrate", "--to", "postgres", "--url", &url]);
    assert!(out.status.success(), "{}", stderr(&out));
    let in_db = rt.block_on(async {
        let db = PgTraceStore::new(reson::database::Database::connect(&url).await.unwrap());
        db.get_record(&id, EFFECTS, &key).await.unwrap()
    });
    assert_eq!(in_db, record);
    std::fs::write(
        d.join("pg.toml"),
        format!(
            "plugins_dir = \"{}\"\nlock_file = \"reson.lock\"\n[store]\nkind = \"postgres\"\n\
             url = \"{url}\"\n[plugins.fs]\ndirs = [{{ path = \"workspace\", access = \"read-write\" }}]\n",
            support::plugins().display()
        ),
    )
    .unwrap();
    let out = reson(d, &["--config", "pg.toml", "traces", "replay", &id, "--json"]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    let report: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(report["replayed"].as_u64(), Some(1), "{report}");
    let out =
        reson(d, &["--config", "pg.toml", "traces", "migrate", "--to", "file", "--dir", "fresh"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let fresh = FileTraceStore::open(d.join("fresh"), Durability::Batched).unwrap();
    assert_eq!(rt.block_on(fresh.get_record(&id, EFFECTS, &key)).unwrap(), record);
}
