//! Workspace checkpoints end to end: real runs of the bundled `fs` and
//! `shell` plugins (the shell's commands jailed) change a real workspace,
//! the runner checkpoints what they change into the trace, and a rewind
//! with restore puts the files back: from the library, `reson run
//! --restore-files` (also after `kill -9` of a run), the HTTP API, and a
//! trace moved into PostgreSQL. `reson traces diff` shows the changes.

use crate::support;
use crate::support::api as api_support;
use crate::support::postgres as pg;

use reson::agent::{AgentError, Hooks, RunConfig, Runner};
use reson::database::Database;
use reson::plugin::Runtime;
use reson::provider::PluginProvider;
use reson::tools::ToolRegistry;
use reson::trace::{Durability, FileTraceStore, Message, PgTraceStore, Role, TraceStore};
use reson::workspace::{Cause, Options, WorkspaceError};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use support::TestDir;

const MAIN: &str = "fn main() {\n    println!(\"hello\");\n}\n";
const BONJOUR: &str = "fn main() {\n    println!(\"bonjour\");\n}\n";

/// The demo's edit: `src/main.rs` greets with "bonjour", and
/// `notes/done.txt` says so.
fn edit_turns() -> Value {
    json!([
        { "text": "editing", "tool_calls": [
            { "name": "edit", "arguments":
                { "path": "src/main.rs", "old_string": "\"hello\"", "new_string": "\"bonjour\"" } },
            { "name": "write", "arguments":
                { "path": "notes/done.txt", "content": "renamed greeting to bonjour\n" } } ] },
        { "text": "done" }
    ])
}

/// A workspace with `src/main.rs`, granted read-write to `fs` and to
/// `shell` (which may run `cp` and `touch`), a file trace store.
struct Setup {
    dir: TestDir,
    runtime: Runtime,
    store: Arc<FileTraceStore>,
}

impl Setup {
    async fn new(turns: Value) -> Self {
        let dir = TestDir::new();
        dir.install(support::plugins(), "scripted")
            .install(support::plugins(), "fs")
            .install(support::plugins(), "shell");
        let ws = dir.workspace();
        std::fs::create_dir_all(ws.join("src")).unwrap();
        std::fs::write(ws.join("src/main.rs"), MAIN).unwrap();
        std::fs::write(ws.join("src/other.rs"), "// other\n").unwrap();
        let grants = "[plugins.fs]\ndirs = [{ path = \"workspace\", access = \"read-write\" }]\n\
                      [plugins.shell]\ndirs = [{ path = \"workspace\", access = \"read-write\" }]\n\
                      process = [\"cp *\", \"touch *\"]\nlimits = { timeout_ms = 20000 }\n\
                      [presets.writer]\n\
                      rules = [{ decision = \"allow\", tool = \"{write,edit,shell}\" }]\n";
        let runtime = dir.open_scripted(&json!({ "turns": turns }), grants).await;
        let store =
            Arc::new(FileTraceStore::open(dir.path().join("traces"), Durability::Batched).unwrap());
        Self { dir, runtime, store }
    }

    fn ws(&self) -> PathBuf {
        self.dir.workspace()
    }

    fn read(&self, path: &str) -> Option<String> {
        std::fs::read_to_string(self.ws().join(path)).ok()
    }

    fn set_turns(&self, turns: Value) {
        let script = json!({ "turns": turns }).to_string();
        std::fs::write(self.dir.path().join("script.json"), script).unwrap();
    }

    fn runner(&self) -> Runner {
        Runner::new(
            self.store.clone(),
            Arc::new(PluginProvider::new(self.runtime.clone(), "scripted")),
            ToolRegistry::new(self.runtime.clone()),
            Hooks::none(),
        )
    }

    async fn run(&self, messages: Vec<Message>, config: RunConfig) -> Result<String, AgentError> {
        let outcome = self.runner().run(messages, config).await?.wait().await?;
        Ok(outcome.trace_id)
    }

    /// Runs the edit to its end; the trace id.
    async fn edited(&self) -> String {
        let id = self.run(user("rename the greeting"), RunConfig::default()).await.unwrap();
        assert_eq!(self.read("src/main.rs").as_deref(), Some(BONJOUR));
        assert!(self.read("notes/done.txt").is_some());
        id
    }

    /// A rewind to after message 1 with the files restored, answered by
    /// a plain text turn.
    async fn rewind(&self, id: &str, force: bool) -> Result<String, AgentError> {
        self.set_turns(json!([{ "text": "starting over" }]));
        let config = RunConfig {
            trace_id: Some(id.to_owned()),
            after_sequence: Some(1),
            restore_files: true,
            force_restore: force,
            ..RunConfig::default()
        };
        self.run(user("start over"), config).await
    }

    /// `reson ARGS` on this directory.
    fn reson(&self, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_reson"));
        command
            .args(["--config", &self.dir.path().join("reson.toml").to_string_lossy()])
            .args(["--plugins-dir", &self.dir.plugins().to_string_lossy()])
            .args(["--cache-dir", &support::cache_dir().to_string_lossy()])
            .args(["--traces-dir", &self.dir.path().join("traces").to_string_lossy()])
            .args(args);
        command
    }

    fn output(&self, args: &[&str]) -> Output {
        self.reson(args).stdin(Stdio::null()).output().unwrap()
    }
}

fn user(text: &str) -> Vec<Message> {
    vec![Message::new(Role::User, text)]
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rewind_with_restore_puts_the_files_back() {
    let s = Setup::new(edit_turns()).await;
    let id = s.edited().await;
    let checkpoints = reson::workspace::checkpoints(&*s.store, &id).await.unwrap();
    let causes: Vec<(&str, &Cause)> =
        checkpoints.iter().map(|(k, c)| (k.as_str(), &c.cause)).collect();
    let calls = Cause::Calls { calls: vec!["call_0_0".into(), "call_0_1".into()] };
    assert_eq!(causes, [("000000", &Cause::Base), ("000004", &calls)]);

    let rewound = s.rewind(&id, false).await.unwrap();
    assert_eq!(rewound, id);
    assert_eq!(s.read("src/main.rs").as_deref(), Some(MAIN));
    assert!(!s.ws().join("notes/done.txt").exists());
    let all = reson::workspace::checkpoints(&*s.store, &id).await.unwrap();
    let restore = all.iter().find(|(key, _)| key == "000001").expect("a restore checkpoint");
    assert_eq!(restore.1.cause, Cause::Restore { to: 1 });

    // The old branch is still there to go back to.
    // Two answers precede the new message on that branch: the third turn answers.
    s.set_turns(json!([{ "text": "-" }, { "text": "-" }, { "text": "back" }]));
    let back = RunConfig {
        trace_id: Some(id.clone()),
        after_sequence: Some(5),
        restore_files: true,
        ..RunConfig::default()
    };
    s.run(user("the first way was right"), back).await.unwrap();
    assert_eq!(s.read("src/main.rs").as_deref(), Some(BONJOUR));
    assert_eq!(s.read("notes/done.txt").as_deref(), Some("renamed greeting to bonjour\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restore_refuses_an_outside_change_and_writes_nothing() {
    let s = Setup::new(edit_turns()).await;
    let id = s.edited().await;
    std::fs::write(s.ws().join("src/main.rs"), "// edited by hand\n").unwrap();
    let head = s.store.get_trace(&id).await.unwrap().unwrap().head_sequence;

    let err = s.rewind(&id, false).await.unwrap_err();
    match &err {
        AgentError::Checkpoint(WorkspaceError::Conflicts { paths, .. }) => {
            assert_eq!(paths, &[s.ws().join("src/main.rs")]);
        }
        other => panic!("{other}"),
    }
    assert!(err.to_string().contains("src/main.rs"), "{err}");
    assert_eq!(s.read("src/main.rs").as_deref(), Some("// edited by hand\n"));
    assert!(s.read("notes/done.txt").is_some(), "nothing was written");
    let trace = s.store.get_trace(&id).await.unwrap().unwrap();
    assert_eq!(trace.head_sequence, head, "the run did not start");

    // The command line says the same, with its own exit code.
    let out = s.output(&["run", "--trace", &id, "--after", "1", "--restore-files", "again"]);
    assert_eq!(out.status.code(), Some(7), "{}", stderr(&out));
    assert!(stderr(&out).contains("src/main.rs"), "{}", stderr(&out));
    assert!(stderr(&out).contains("--force overwrites them"), "{}", stderr(&out));
    assert_eq!(s.read("src/main.rs").as_deref(), Some("// edited by hand\n"));

    // Forced, it overwrites.
    s.rewind(&id, true).await.unwrap();
    assert_eq!(s.read("src/main.rs").as_deref(), Some(MAIN));
    assert!(!s.ws().join("notes/done.txt").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_jailed_command_wrote_is_restored_too() {
    let ws_turns = json!([
        { "text": "copying", "tool_calls": [
            { "name": "shell", "arguments": { "command": "cp src/other.rs src/main.rs", "cwd": "@WS@" } },
            { "name": "shell", "arguments": { "command": "touch made-by-a-command.txt", "cwd": "@WS@" } } ] },
        { "text": "done" }
    ]);
    let s = Setup::new(json!([])).await;
    let turns = ws_turns.to_string().replace("@WS@", &s.ws().to_string_lossy());
    s.set_turns(serde_json::from_str(&turns).unwrap());
    let id = s.run(user("copy"), RunConfig::default()).await.unwrap();
    assert_eq!(s.read("src/main.rs").as_deref(), Some("// other\n"), "the command ran");
    assert!(s.ws().join("made-by-a-command.txt").exists());

    s.rewind(&id, false).await.unwrap();
    assert_eq!(s.read("src/main.rs").as_deref(), Some(MAIN));
    assert!(!s.ws().join("made-by-a-command.txt").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoints_survive_kill_9_and_restore_works_after() {
    let s = Setup::new(json!([])).await;
    let mut turns = edit_turns();
    turns[1] = json!({ "text": "slow", "delay_ms": 30000 });
    let script = s.dir.path().join("slow.json");
    std::fs::write(&script, json!({ "turns": turns }).to_string()).unwrap();
    let mut child = s
        .reson(&["run", "--json", "--preset", "writer", "--script", &script.to_string_lossy()])
        .arg("rename the greeting")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // The second model request starts once the calls' checkpoint is in.
    let mut id = None;
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let event: Value = serde_json::from_str(&line.unwrap()).unwrap();
        if event["type"] == "trace_started" {
            id = event["trace_id"].as_str().map(str::to_owned);
        }
        if event["type"] == "model_request" && event["iteration"] == 2 {
            child.kill().unwrap();
            break;
        }
    }
    let status = child.wait().unwrap();
    assert!(!status.success(), "killed mid-run: {status}");
    let id = id.expect("the run started");
    assert_eq!(s.read("src/main.rs").as_deref(), Some(BONJOUR));

    let answer = s.dir.path().join("answer.json");
    std::fs::write(&answer, json!({ "turns": [{ "text": "over" }] }).to_string()).unwrap();
    let out = s.output(&[
        "run",
        "--trace",
        &id,
        "--after",
        "1",
        "--restore-files",
        "--script",
        &answer.to_string_lossy(),
        "start over",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(s.read("src/main.rs").as_deref(), Some(MAIN));
    assert!(!s.ws().join("notes/done.txt").exists());
    // It says which files it put back.
    let said = stderr(&out);
    assert!(said.contains("restored 2 files:"), "{said}");
    assert!(
        said.contains(&format!("  wrote   {}", s.ws().join("src/main.rs").display())),
        "{said}"
    );
    assert!(
        said.contains(&format!("  removed {}", s.ws().join("notes/done.txt").display())),
        "{said}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn traces_diff_shows_what_changed_between_two_messages() {
    let s = Setup::new(edit_turns()).await;
    let id = s.edited().await;

    let out = s.output(&["traces", "diff", &id, "--from", "1", "--to", "5"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("M "), "{text}");
    assert!(text.contains("src/main.rs"), "{text}");
    assert!(text.contains("-    println!(\"hello\");\n+    println!(\"bonjour\");"), "{text}");
    assert!(text.contains("A ") && text.contains("notes/done.txt"), "{text}");
    assert!(text.contains("+renamed greeting to bonjour"), "{text}");

    let stat = stdout(&s.output(&["traces", "diff", &id, "--from", "1", "--to", "5", "--stat"]));
    assert!(!stat.contains("bonjour\");"), "no text diffs: {stat}");
    assert_eq!(stat.lines().count(), 2, "{stat}");

    let out = s.output(&["traces", "diff", &id, "--from", "5", "--to", "1", "--json"]);
    let files: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let changes: Vec<(&str, &str)> = files
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["path"].as_str().unwrap(), f["change"].as_str().unwrap()))
        .collect();
    assert_eq!(changes, [("notes/done.txt", "removed"), ("src/main.rs", "modified")]);

    let same = stdout(&s.output(&["traces", "diff", &id, "--from", "4", "--to", "5"]));
    assert!(same.contains("no files changed"), "{same}");
    let bad = s.output(&["traces", "diff", &id, "--from", "1", "--to", "99"]);
    assert_eq!(bad.status.code(), Some(2), "{}", stderr(&bad));
    assert!(stderr(&bad).contains("no message 99"), "{}", stderr(&bad));

    // `traces show` names the checkpoints.
    let shown = stdout(&s.output(&["traces", "show", &id]));
    assert!(shown.contains("000004  calls call_0_0, call_0_1: 2 files"), "{shown}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoints_move_to_postgres_and_restore_from_there() {
    let s = Setup::new(edit_turns()).await;
    let id = s.edited().await;
    s.store.sync().await.unwrap();
    let url = pg::cluster().fresh_database().await;
    let out = s.output(&["traces", "migrate", "--to", "postgres", "--url", &url]);
    assert!(out.status.success(), "{}", stderr(&out));

    let db = PgTraceStore::new(Database::connect(&url).await.unwrap());
    let restored =
        reson::workspace::restore(&db, &id, 1, false, &Options::default()).await.unwrap();
    assert_eq!(restored.written, [s.ws().join("src/main.rs")]);
    assert_eq!(restored.removed, [s.ws().join("notes/done.txt")]);
    assert_eq!(s.read("src/main.rs").as_deref(), Some(MAIN));
    // The database holds the restore too: back to after the edit, no conflict.
    reson::workspace::restore(&db, &id, 5, false, &Options::default()).await.unwrap();
    assert_eq!(s.read("src/main.rs").as_deref(), Some(BONJOUR));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_restores_files_and_answers_409_on_a_conflict() {
    let s = Setup::new(edit_turns()).await;
    let id = s.edited().await;
    let toml = std::fs::read_to_string(s.dir.path().join("reson.toml")).unwrap();
    let server = api_support::InProcess::start(&s.dir, &toml).await;
    let api = &server.api;

    std::fs::write(s.ws().join("src/main.rs"), "// by hand\n").unwrap();
    let body = json!({ "after_sequence": 1, "restore_files": true,
                       "messages": [{ "role": "user", "content": "again" }] });
    let message = api
        .post(&format!("/api/traces/{id}/run"), body.clone())
        .await
        .expect_error(409, "conflict");
    assert!(message.contains("src/main.rs"), "{message}");
    assert_eq!(s.read("src/main.rs").as_deref(), Some("// by hand\n"));

    std::fs::write(s.ws().join("src/main.rs"), BONJOUR).unwrap();
    s.set_turns(json!([{ "text": "over" }]));
    let since = api.last_event(&id).await;
    let started = api.run(&id, body).await;
    assert_eq!(started["mode"], "rewind");
    api.finish(&id, since).await;
    assert_eq!(s.read("src/main.rs").as_deref(), Some(MAIN));
    assert!(!s.ws().join("notes/done.txt").exists());
    server.stop().await;
}

/// The trace store's own directory is never checkpointed, even inside a
/// granted directory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trace_store_inside_the_workspace_is_left_out() {
    let s = Setup::new(edit_turns()).await;
    let traces = s.ws().join("traces");
    let store = Arc::new(FileTraceStore::open(&traces, Durability::Batched).unwrap());
    let runner = Runner::new(
        store.clone(),
        Arc::new(PluginProvider::new(s.runtime.clone(), "scripted")),
        ToolRegistry::new(s.runtime.clone()),
        Hooks::none(),
    );
    let mut config = RunConfig::default();
    config.checkpoints.skip = vec![traces.clone()];
    let id = runner.run(user("go"), config).await.unwrap().wait().await.unwrap().trace_id;
    let checkpoints = reson::workspace::checkpoints(&*store, &id).await.unwrap();
    let paths: Vec<&String> =
        checkpoints.iter().flat_map(|(_, c)| c.roots.values().flat_map(|p| p.keys())).collect();
    assert!(!paths.is_empty());
    assert!(paths.iter().all(|p| !p.starts_with("traces")), "{paths:?}");
    assert!(Path::new(&traces).join(&id).exists());
}
