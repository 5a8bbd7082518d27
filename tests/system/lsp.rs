//! `lsp_diagnostics` with a real language server: python-lsp-server with
//! pyflakes (installed from PyPI by the test), started in the command jail
//! with read-only access to the workspace, kept for the run and ended with
//! it; and a server that dies mid-run, started again.

use crate::support;
use reson::agent::{Hooks, RunConfig, Runner};
use reson::provider::PluginProvider;
use reson::tools::ToolRegistry;
use reson::trace::{FileTraceStore, Message, Role, TraceStore};
use serde_json::json;
use std::sync::Arc;
use support::TestDir;

/// The processes running now (the jail's and the server's) whose command
/// line names `venv`'s pylsp, by pid.
fn servers(venv: &std::path::Path) -> std::collections::BTreeSet<u32> {
    let needle = venv.join("bin/pylsp").to_string_lossy().into_owned();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let pid = e.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
            String::from_utf8_lossy(&cmdline).contains(&needle).then_some(pid)
        })
        .collect()
}

/// The directories a server run by `venv`'s Python reads besides the
/// workspace: the venv, and the Python it was made from (pyenv's, say,
/// which the jail does not show by itself).
fn python_dirs(venv: &std::path::Path) -> String {
    let cfg = std::fs::read_to_string(venv.join("pyvenv.cfg")).unwrap();
    let home = cfg.lines().find_map(|l| l.strip_prefix("home = ")).expect("the venv's Python");
    let python = std::path::Path::new(home).parent().unwrap().canonicalize().unwrap();
    format!("\"{}\", \"{}\"", venv.display(), python.display())
}

/// A runner on the scripted provider playing `turns`, with the tools the
/// config gives (`extra` adds the `[lsp]` servers), and its store.
async fn runner(
    dir: &TestDir,
    turns: serde_json::Value,
    extra: &str,
) -> (Runner, Arc<FileTraceStore>) {
    let runtime = dir.open_scripted(&json!({ "turns": turns }), extra).await;
    let config = dir.config(&format!(
        "[permissions]\ndefault = \"allow\"\n[plugins.scripted]\ndirs = [{{ path = \".\", access = \"read\" }}]\nconfig = {{ script = \"{}\" }}\n{extra}",
        dir.path().join("script.json").display()
    ));
    let store = dir.store();
    let experiences =
        Arc::new(reson::experience::FileExperienceStore::new(dir.path().join("experiences.jsonl")));
    let tools = ToolRegistry::configured(&runtime, &config, experiences).unwrap();
    let provider = Arc::new(PluginProvider::new(runtime.clone(), "scripted"));
    (Runner::new(store.clone(), provider, tools, Hooks::none()), store)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_files_are_checked_by_a_jailed_pylsp_kept_for_the_run() {
    let venv = support::python::pylsp_venv();
    let dir = TestDir::new();
    dir.install(support::plugins(), "scripted");
    let ws = dir.workspace();
    std::fs::write(ws.join("bad.py"), "import os\n\n\ndef f():\n    return undefined_name\n")
        .unwrap();
    std::fs::write(ws.join("good.py"), "def g(x):\n    return x + 1\n").unwrap();
    std::fs::write(ws.join("notes.txt"), "not code\n").unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("far.py"), "import sys\n").unwrap();
    let far = outside.path().join("far.py");
    let turns = json!([
        { "tool_calls": [{ "name": "lsp_diagnostics", "arguments": { "files": ["bad.py", "good.py"] } }] },
        { "tool_calls": [{ "name": "lsp_diagnostics", "arguments": { "files": ["notes.txt", far.to_string_lossy()] } }] },
        { "tool_calls": [{ "name": "lsp_diagnostics", "arguments": { "files": ["bad.py"] } }] },
        { "text": "checked" }
    ]);
    let extra = format!(
        "[lsp.python]\ncommand = [\"{pylsp}\"]\nextensions = [\"py\"]\ndirs = [\"workspace\", {dirs}]\n",
        pylsp = venv.join("bin/pylsp").display(),
        dirs = python_dirs(venv),
    );
    let (runner, store) = runner(&dir, turns, &extra).await;
    let mut handle = runner
        .run(vec![Message::new(Role::User, "check the code")], RunConfig::default())
        .await
        .unwrap();
    let mut seen = Vec::new();
    while let Some(event) = handle.next_event().await {
        if let reson::agent::AgentEvent::ToolFinished { .. } = event {
            seen.push(servers(venv));
        }
    }
    let outcome = handle.wait().await.unwrap();
    assert_eq!(outcome.final_text.as_deref(), Some("checked"));
    let results: Vec<String> = store
        .get_messages(&outcome.trace_id)
        .await
        .unwrap()
        .iter()
        .filter(|m| m.role == Role::Tool)
        .map(Message::text)
        .collect();
    let first: Vec<&str> = results[0].lines().collect();
    assert!(
        first.contains(&"bad.py:1:1: warning: 'os' imported but unused [pyflakes]"),
        "{first:?}"
    );
    assert!(
        first.iter().any(|l| l.starts_with("bad.py:5:12: error: undefined name 'undefined_name'")),
        "{first:?}"
    );
    assert!(first.contains(&"good.py: no diagnostics"), "{first:?}");
    assert!(
        results[1].contains(
            "Error: no language server is configured for `.txt` files; [lsp] has python (py)"
        ),
        "{}",
        results[1]
    );
    assert!(results[1].contains("is outside the directories of [lsp.python]"), "{}", results[1]);
    assert!(results[2].contains("'os' imported but unused"), "asked again: {}", results[2]);
    // One server for the run, kept between its calls.
    assert!(!seen[0].is_empty() && seen.iter().all(|s| s == &seen[0]), "{seen:?}");
    // The run ended: so did its server.
    assert!(servers(venv).is_empty(), "the language server outlived its run");
}

/// A language server that speaks just enough of the protocol: it publishes
/// one diagnostic naming itself for each file opened, and dies on
/// `crash.fake`.
const FAKE_SERVER: &str = r#"
import json, os, sys
me = os.urandom(4).hex()
def read():
    length = None
    while True:
        line = sys.stdin.buffer.readline()
        if not line:
            sys.exit(0)
        line = line.strip()
        if not line:
            break
        key, _, value = line.partition(b":")
        if key.lower() == b"content-length":
            length = int(value)
    return json.loads(sys.stdin.buffer.read(length))
def send(message):
    body = json.dumps(message).encode()
    sys.stdout.buffer.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
    sys.stdout.buffer.flush()
while True:
    message = read()
    method = message.get("method")
    if method == "textDocument/didOpen":
        uri = message["params"]["textDocument"]["uri"]
        if uri.endswith("crash.fake"):
            sys.exit(3)
        diagnostic = {"range": {"start": {"line": 0, "character": 0}}, "severity": 3, "message": "seen by " + me}
        send({"jsonrpc": "2.0", "method": "textDocument/publishDiagnostics", "params": {"uri": uri, "diagnostics": [diagnostic]}})
    elif "id" in message:
        send({"jsonrpc": "2.0", "id": message["id"], "result": {"capabilities": {}} if method == "initialize" else None})
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_dies_is_started_again_at_the_next_call() {
    let venv = support::python::pylsp_venv();
    let dir = TestDir::new();
    dir.install(support::plugins(), "scripted");
    let ws = dir.workspace();
    std::fs::write(ws.join("server.py"), FAKE_SERVER).unwrap();
    for name in ["a.fake", "crash.fake", "b.fake"] {
        std::fs::write(ws.join(name), "text\n").unwrap();
    }
    let call = |file: &str| json!({ "tool_calls": [{ "name": "lsp_diagnostics", "arguments": { "files": [file] } }] });
    let turns = json!([call("a.fake"), call("crash.fake"), call("b.fake"), { "text": "done" }]);
    let extra = format!(
        "[lsp.fake]\ncommand = [\"{py}\", \"{script}\"]\nextensions = [\"fake\"]\ndirs = [\"workspace\", {dirs}]\n",
        py = venv.join("bin/python").display(),
        script = ws.join("server.py").display(),
        dirs = python_dirs(venv),
    );
    let (runner, store) = runner(&dir, turns, &extra).await;
    let outcome = runner
        .run(vec![Message::new(Role::User, "check")], RunConfig::default())
        .await
        .unwrap()
        .wait()
        .await
        .unwrap();
    let results: Vec<String> = store
        .get_messages(&outcome.trace_id)
        .await
        .unwrap()
        .iter()
        .filter(|m| m.role == Role::Tool)
        .map(Message::text)
        .collect();
    let seen_by = |text: &str| text.split("seen by ").nth(1).map(str::to_owned);
    let first = seen_by(&results[0]).unwrap_or_else(|| panic!("{}", results[0]));
    assert!(results[0].starts_with("a.fake:1:1: information: seen by "), "{}", results[0]);
    assert!(results[1].contains("crash.fake: [lsp.fake] ended before it published diagnostics; it is started again at the next call"), "{}", results[1]);
    let second = seen_by(&results[2]).unwrap_or_else(|| panic!("{}", results[2]));
    assert_ne!(first, second, "a new server answered after the crash");
}
