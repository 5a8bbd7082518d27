//! `lsp_diagnostics` with a real language server: python-lsp-server with
//! pyflakes (installed from PyPI by the test), started in the command jail
//! with read-only access to the workspace, kept for the run and ended with
//! it.

use crate::support;
use reson::agent::{Hooks, RunConfig, Runner};
use reson::provider::PluginProvider;
use reson::tools::ToolRegistry;
use reson::trace::{Durability, FileTraceStore, Message, Role, TraceStore};
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
    // The server reads the workspace, its venv, and the Python the venv
    // was made from (pyenv's, say, which the jail does not show by itself).
    let cfg = std::fs::read_to_string(venv.join("pyvenv.cfg")).unwrap();
    let home = cfg.lines().find_map(|l| l.strip_prefix("home = ")).expect("the venv's Python");
    let python = std::path::Path::new(home).parent().unwrap().canonicalize().unwrap();
    let extra = format!(
        "[lsp.python]\ncommand = [\"{pylsp}\"]\nextensions = [\"py\"]\ndirs = [\"workspace\", \"{venv}\", \"{python}\"]\n",
        pylsp = venv.join("bin/pylsp").display(),
        venv = venv.display(),
        python = python.display(),
    );
    let runtime = dir.open_scripted(&json!({ "turns": turns }), &extra).await;
    let config = dir.config(&format!(
        "[permissions]\ndefault = \"allow\"\n[plugins.scripted]\ndirs = [{{ path = \".\", access = \"read\" }}]\nconfig = {{ script = \"{}\" }}\n{extra}",
        dir.path().join("script.json").display()
    ));
    let store =
        Arc::new(FileTraceStore::open(dir.path().join("traces"), Durability::Batched).unwrap());
    let experiences =
        Arc::new(reson::experience::FileExperienceStore::new(dir.path().join("experiences.jsonl")));
    let tools = ToolRegistry::configured(&runtime, &config, experiences).unwrap();
    let runner = Runner::new(
        store.clone(),
        Arc::new(PluginProvider::new(runtime.clone(), "scripted")),
        tools,
        Hooks::none(),
    );
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
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !servers(venv).is_empty() {
        assert!(std::time::Instant::now() < deadline, "the language server outlived its run");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}
