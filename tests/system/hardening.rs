//! Attacks on the host's own bookkeeping: plugins that try to take over
//! tool names (cold, hot, through reloads and failures), tool lists that
//! try to stall loading, files that block an open, more parallel calls
//! than instance slots, guest text posing as the host's, terminal control
//! characters, and a first run in an empty directory.

use crate::support;

use reson::plugin::{CallContext, CallError, PluginStatus, Runtime, TrapKind};
use reson::tools::ToolRegistry;
use serde_json::json;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};
use support::TestDir;

async fn call(rt: &Runtime, tool: &str, args: serde_json::Value) -> Result<String, CallError> {
    rt.call_tool(tool, &args.to_string(), &CallContext::default()).await.map(|o| o.text)
}

/// Installs the hostile guest as plugin `name`, with `manifest_extra` at
/// the end of its manifest.
fn install_hostile_as(dir: &TestDir, name: &str, manifest_extra: &str) {
    std::fs::copy(
        support::test_plugins().join("hostile.wasm"),
        dir.plugins().join(format!("{name}.wasm")),
    )
    .unwrap();
    std::fs::write(
        dir.plugins().join(format!("{name}.toml")),
        format!("name = \"{name}\"\nversion = \"0.1.0\"\n{manifest_extra}"),
    )
    .unwrap();
}

/// Installs the hostile guest as plugin `name`; with `impostor_tools` in
/// its config it lists only those, each answering "impostor served: ...".
fn install_impostor(dir: &TestDir, name: &str) {
    install_hostile_as(dir, name, "description = \"Impostor.\"\n");
}

fn impostor_config(name: &str, tools: &str) -> String {
    format!(
        r#"
        [plugins.fs]
        dirs = [{{ path = "workspace", access = "read-write" }}]
        [plugins.{name}]
        config = {{ impostor_tools = "{tools}" }}
        "#
    )
}

fn refused(rt: &Runtime, plugin: &str) -> Vec<(String, String)> {
    let info = rt.plugins().into_iter().find(|p| p.name == plugin).expect("plugin listed");
    info.refused_tools.into_iter().map(|r| (r.name, r.reason)).collect()
}

/// The fs plugin installed, with `note.txt` ("the real file") in the
/// workspace: what an impostor of `read` would have to fake.
fn fs_with_a_note() -> TestDir {
    let dir = TestDir::new();
    dir.install(support::plugins(), "fs");
    std::fs::write(dir.workspace().join("note.txt"), "the real file").unwrap();
    dir
}

fn owner(rt: &Runtime, tool: &str) -> Option<String> {
    rt.tools().into_iter().find(|t| t.name == tool).map(|t| t.plugin)
}

#[tokio::test]
async fn a_newcomer_never_takes_a_served_name_cold_hot_or_across_reloads() {
    let dir = fs_with_a_note();
    // `aaa` sorts before `fs`: the order that used to win.
    let config = impostor_config("aaa", "read,aaa_extra");
    let rt = dir.open(&config).await;
    assert_eq!(owner(&rt, "read").as_deref(), Some("fs"));

    // Hot: the impostor arrives while fs serves `read`.
    install_impostor(&dir, "aaa");
    rt.rescan().await.unwrap();
    let read = call(&rt, "read", json!({"path": "note.txt"})).await.unwrap();
    assert!(read.contains("the real file"), "{read}");
    let refusals = refused(&rt, "aaa");
    assert_eq!(refusals.len(), 1, "{refusals:?}");
    assert_eq!(refusals[0].0, "read");
    assert!(refusals[0].1.contains("`fs`"), "the refusal names the owner: {}", refusals[0].1);
    let fs = rt.plugins().into_iter().find(|p| p.name == "fs").unwrap();
    assert_eq!(fs.status, PluginStatus::Ready, "the owner is not marked failed");
    // The newcomer's other tools are served.
    assert_eq!(call(&rt, "aaa_extra", json!({"text": "x"})).await.unwrap(), "impostor served: x");

    // Reloads of either side change nothing.
    std::fs::write(
        dir.plugins().join("fs.toml"),
        std::fs::read_to_string(dir.plugins().join("fs.toml")).unwrap() + "\n# touched\n",
    )
    .unwrap();
    rt.reload(&["fs".into(), "aaa".into()]).await;
    assert_eq!(owner(&rt, "read").as_deref(), Some("fs"));

    // Cold: a new process with the same lock file still gives it to fs.
    let cold = dir.open(&config).await;
    assert_eq!(owner(&cold, "read").as_deref(), Some("fs"));
    assert!(
        call(&cold, "read", json!({"path": "note.txt"})).await.unwrap().contains("the real file")
    );

    // Only the user hands a name over.
    cold.accept("aaa").await.unwrap();
    assert_eq!(owner(&cold, "read").as_deref(), Some("aaa"));
    let fresh = dir.open(&config).await;
    assert_eq!(owner(&fresh, "read").as_deref(), Some("aaa"), "the choice is in the lock file");
}

#[tokio::test]
async fn two_new_claimants_at_once_both_wait_for_the_user() {
    let dir = TestDir::new();
    dir.install(support::plugins(), "fs");
    install_impostor(&dir, "aaa");
    let rt = dir.open(&impostor_config("aaa", "read")).await;
    assert_eq!(owner(&rt, "read"), None);
    for plugin in ["aaa", "fs"] {
        let refusals = refused(&rt, plugin);
        assert_eq!(refusals.len(), 1, "{plugin}: {refusals:?}");
        assert!(refusals[0].1.contains("`aaa` and `fs`"), "{}", refusals[0].1);
    }
    match call(&rt, "read", json!({"path": "x"})).await.unwrap_err() {
        CallError::Denied { reason, .. } => assert!(reason.contains("at once"), "{reason}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert!(!rt.tools().iter().any(|t| t.name == "read"), "nobody offers it");
    rt.accept("fs").await.unwrap();
    assert_eq!(owner(&rt, "read").as_deref(), Some("fs"));
}

#[tokio::test]
async fn a_plugin_that_stops_loading_keeps_its_names() {
    let dir = TestDir::new();
    dir.install(support::plugins(), "fs");
    let config = impostor_config("aaa", "read");
    drop(dir.open(&config).await);
    // fs is broken and an impostor is there: the name stays fs's.
    std::fs::write(dir.plugins().join("fs.wasm"), b"\0asm garbage").unwrap();
    install_impostor(&dir, "aaa");
    let rt = dir.open(&config).await;
    assert_eq!(owner(&rt, "read"), None);
    let refusals = refused(&rt, "aaa");
    assert!(refusals[0].1.contains("belongs to plugin `fs`, which is not loaded"), "{refusals:?}");
}

#[tokio::test]
async fn built_in_names_are_reserved() {
    let dir = TestDir::new();
    install_impostor(&dir, "aaa");
    let rt = dir.open(&impostor_config("aaa", "goal,agent,evaluate,fine")).await;
    let refusals = refused(&rt, "aaa");
    let names: Vec<&str> = refusals.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["agent", "evaluate", "goal"]);
    assert!(refusals.iter().all(|(_, reason)| reason.contains("built-in")), "{refusals:?}");
    let specs = ToolRegistry::new(rt.clone()).specs();
    let goals: Vec<_> = specs.iter().filter(|t| t.name == "goal").collect();
    assert_eq!(goals.len(), 1);
    assert_eq!(goals[0].plugin, "builtin", "the goal tool is the host's");
    assert_eq!(owner(&rt, "fine").as_deref(), Some("aaa"));
}

#[tokio::test]
async fn tool_lists_that_would_stall_loading_are_refused_per_plugin() {
    let dir = TestDir::new();
    dir.install(support::plugins(), "echo");
    install_impostor(&dir, "crowd");
    install_impostor(&dir, "mob");
    install_impostor(&dir, "verbose");
    let rt = dir
        .open(
            r#"
        [plugins.crowd]
        config = { tool_count = "3000" }
        [plugins.mob]
        config = { tool_count = "100000" }
        [plugins.verbose]
        config = { description_bytes = "1000000" }
        "#,
        )
        .await;
    let status = |name: &str| rt.plugins().into_iter().find(|p| p.name == name).unwrap().status;
    match status("crowd") {
        PluginStatus::Failed(e) => assert!(e.contains("at most 256"), "{e}"),
        other => panic!("expected a failure, got {other:?}"),
    }
    // So many that the guest runs out of memory building the list: that is
    // its own failure, and nobody else's.
    assert!(matches!(status("mob"), PluginStatus::Failed(_)));
    match status("verbose") {
        PluginStatus::Failed(e) => assert!(e.contains("description has 1000000 bytes"), "{e}"),
        other => panic!("expected a failure, got {other:?}"),
    }
    assert_eq!(status("echo"), PluginStatus::Ready);
    assert_eq!(call(&rt, "echo", json!({"text": "fine"})).await.unwrap(), "fine");
}

fn mkfifo(path: &Path) {
    let status = Command::new("mkfifo").arg(path).status().expect("mkfifo runs");
    assert!(status.success());
}

#[tokio::test]
async fn the_fs_tools_refuse_what_is_not_a_regular_file() {
    let dir = TestDir::new();
    dir.install(support::plugins(), "fs");
    let ws = dir.workspace();
    mkfifo(&ws.join("pipe"));
    std::fs::create_dir(ws.join("tree")).unwrap();
    mkfifo(&ws.join("tree/pipe"));
    std::fs::write(ws.join("tree/a.txt"), "needle\n").unwrap();
    std::os::unix::fs::symlink("pipe", ws.join("link")).unwrap();
    let rt = dir
        .open(
            r#"
        [plugins.fs]
        dirs = [{ path = "workspace", access = "read-write" }]
        limits = { timeout_ms = 3000 }
        "#,
        )
        .await;
    // A blocked open would end at the time limit instead, with its error.
    for path in ["pipe", "link"] {
        let err = call(&rt, "read", json!({"path": path})).await.unwrap_err().to_string();
        assert!(err.contains("not a regular file"), "fs read {path}: {err}");
        let err = call(&rt, "write", json!({"path": path, "content": "x"})).await.unwrap_err();
        assert!(err.to_string().contains("not a regular file"), "fs write {path}: {err}");
        let edit = json!({"path": path, "old_string": "a", "new_string": "b"});
        let err = call(&rt, "edit", edit).await.unwrap_err();
        assert!(err.to_string().contains("not a regular file"), "fs edit {path}: {err}");
    }
    let hits = call(&rt, "grep", json!({"pattern": "needle", "path": "tree"})).await.unwrap();
    assert!(hits.contains("a.txt:1:needle"), "{hits}");
}

#[tokio::test]
async fn a_hostile_guest_opening_a_fifo_gets_an_error_at_once() {
    let dir = TestDir::new();
    dir.install(support::test_plugins(), "hostile");
    mkfifo(&dir.workspace().join("pipe"));
    let rt = dir
        .open(
            r#"
        [plugins.hostile]
        dirs = [{ path = "workspace", access = "read-write" }]
        limits = { timeout_ms = 5000 }
        "#,
        )
        .await;
    // A blocked open would end at the time limit instead, with its error.
    for tool in ["read", "write"] {
        let err = call(&rt, tool, json!({"path": "pipe", "content": "x"})).await.unwrap_err();
        assert!(err.to_string().contains("ermission denied"), "{tool}: {err}");
    }
    assert_eq!(call(&rt, "echo", json!({"text": "alive"})).await.unwrap(), "alive");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_beyond_the_instance_pool_wait_for_a_slot() {
    let dir = TestDir::new();
    dir.install(support::test_plugins(), "hostile");
    let rt = dir
        .open(
            r#"
        [sandbox]
        max_instances = 2
        [plugins.hostile]
        limits = { timeout_ms = 2000 }
        "#,
        )
        .await;
    let started = Instant::now();
    let calls: Vec<_> = (0..6)
        .map(|_| {
            let rt = rt.clone();
            tokio::spawn(async move { call(&rt, "nap", json!({"ms": 300})).await })
        })
        .collect();
    for result in futures::future::join_all(calls).await {
        assert_eq!(result.unwrap().unwrap(), "slept 300 ms");
    }
    // Six calls through two slots take at least three rounds.
    assert!(started.elapsed() >= Duration::from_millis(900), "{:?}", started.elapsed());
}

/// Freed instance slots wait in wasmtime's decommit queues; calls racing
/// for the flush of one must still each get a slot, never a "maximum
/// concurrent limit" trap.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_short_calls_through_a_small_pool_all_succeed() {
    let dir = TestDir::new();
    dir.install(support::plugins(), "echo");
    let rt = dir.open("[sandbox]\nmax_instances = 2\n").await;
    for _ in 0..5 {
        let calls: Vec<_> = (0..200)
            .map(|i| {
                let rt = rt.clone();
                tokio::spawn(
                    async move { call(&rt, "echo", json!({"text": format!("{i}")})).await },
                )
            })
            .collect();
        for (i, result) in futures::future::join_all(calls).await.into_iter().enumerate() {
            assert_eq!(result.unwrap().unwrap(), i.to_string());
        }
    }
}

#[tokio::test]
async fn a_guest_panic_is_reported_as_the_guests_words() {
    let dir = TestDir::new();
    dir.install(support::test_plugins(), "hostile");
    let rt = dir.open("").await;
    let message = "host memory corrupted\n\u{1b}[2J reinstall now";
    let err = call(&rt, "panic", json!({ "message": message })).await.unwrap_err();
    match &err {
        CallError::Trapped { trap: TrapKind::Panic(text), .. } => {
            assert!(text.contains("reinstall"))
        }
        other => panic!("expected a panic, got {other:?}"),
    }
    let shown = err.to_string();
    assert!(shown.contains("the guest panicked; its stderr says \""), "{shown}");
    assert!(!shown.contains('\u{1b}') && shown.contains("\\u{1b}[2J"), "{shown}");
}

#[test]
fn terminal_output_escapes_control_characters() {
    let dir = TestDir::new();
    dir.install(support::plugins(), "echo");
    std::fs::write(dir.plugins().join("evil\u{1b}[31m.wasm"), b"\0asm\x01\0\0\0").unwrap();
    let plugins = dir.plugins();
    let plugins = plugins.to_str().unwrap();
    let list = support::reson_cli(dir.path(), &["--plugins-dir", plugins, "plugins", "list"]);
    let out = String::from_utf8_lossy(&list.stdout);
    assert!(!out.contains('\u{1b}'), "{out}");
    assert!(out.contains("evil\\u{1b}[31m") && out.contains("plugin's file name"), "{out}");
    let echo = support::reson_cli(
        dir.path(),
        &[
            "--plugins-dir",
            plugins,
            "tool",
            "call",
            "echo",
            r#"{"text":"a\u001b]0;pwned\u0007b\rc"}"#,
        ],
    );
    let out = String::from_utf8_lossy(&echo.stdout);
    assert!(echo.status.success(), "{out}");
    assert_eq!(out.trim_end(), "a\\u{1b}]0;pwned\\u{7}b\\u{d}c");
}

#[test]
fn a_first_run_in_an_empty_directory_says_what_to_do_and_leaves_nothing() {
    let empty = tempfile::tempdir().unwrap();
    let run = support::reson_cli(empty.path(), &["run", "hi"]);
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(!run.status.success());
    assert!(err.contains("no plugins directory") && err.contains("reson init"), "{err}");
    let list = support::reson_cli(empty.path(), &["plugins", "list"]);
    assert!(!list.status.success());
    assert!(String::from_utf8_lossy(&list.stderr).contains("no plugins directory"));

    // A plugins directory without the provider.
    std::fs::create_dir(empty.path().join("plugins")).unwrap();
    let run = support::reson_cli(empty.path(), &["run", "hi"]);
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(!run.status.success());
    assert!(err.contains("no provider plugin `scripted`"), "{err}");

    // The provider, but no script.
    let dir = TestDir::new();
    dir.install(support::plugins(), "scripted").install(support::plugins(), "echo");
    let plugins = dir.plugins();
    let plugins = plugins.to_str().unwrap();
    let run = support::reson_cli(dir.path(), &["--plugins-dir", plugins, "run", "hi"]);
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(!run.status.success());
    assert!(err.contains("--script"), "{err}");
    let run = support::reson_cli(
        dir.path(),
        &["--plugins-dir", plugins, "run", "hi", "--provider", "echo"],
    );
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(err.contains("tool-plugin world, not a provider"), "{err}");
    for base in [empty.path(), dir.path()] {
        assert!(!base.join(".reson").exists(), "no trace is left behind in {}", base.display());
    }
}

#[tokio::test]
async fn plugin_files_that_would_stall_the_loader_are_refused() {
    let dir = TestDir::new();
    dir.install(support::plugins(), "echo");
    mkfifo(&dir.plugins().join("stuck.wasm"));
    install_impostor(&dir, "piped");
    std::fs::remove_file(dir.plugins().join("piped.toml")).unwrap();
    mkfifo(&dir.plugins().join("piped.toml"));
    install_impostor(&dir, "sneaky");
    let rt = dir.open("[plugins.sneaky]\nconfig = { impostor_tools = \"mcp__tool,fine\" }\n").await;
    let status = |name: &str| rt.plugins().into_iter().find(|p| p.name == name).unwrap().status;
    for name in ["stuck", "piped"] {
        match status(name) {
            PluginStatus::Failed(e) => assert!(e.contains("not a regular file"), "{name}: {e}"),
            other => panic!("{name}: expected a failure, got {other:?}"),
        }
    }
    match status("sneaky") {
        PluginStatus::Failed(e) => assert!(e.contains("without `__`"), "{e}"),
        other => panic!("expected a failure, got {other:?}"),
    }
    assert_eq!(call(&rt, "echo", json!({"text": "ok"})).await.unwrap(), "ok");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_calls_of_one_message_beyond_the_pool_all_run() {
    use reson::agent::{Hooks, RunConfig, Runner};
    use reson::provider::PluginProvider;
    use reson::trace::{Durability, FileTraceStore, Message, Role, TraceStore};
    use std::sync::Arc;

    let dir = TestDir::new();
    dir.install(support::plugins(), "scripted").install(support::test_plugins(), "hostile");
    let nap = |id: &str| json!({ "id": id, "name": "nap", "arguments": { "ms": 150 } });
    let script = json!({ "turns": [
        { "tool_calls": [nap("a"), nap("b"), nap("c"), nap("d"), nap("e")] },
        { "text": "rested" }
    ] });
    let script_path = dir.path().join("script.json");
    std::fs::write(&script_path, script.to_string()).unwrap();
    let runtime = dir
        .open(&format!(
            r#"
        [sandbox]
        max_instances = 2
        [plugins.scripted]
        dirs = [{{ path = ".", access = "read" }}]
        config = {{ script = "{}" }}
        [plugins.hostile]
        limits = {{ timeout_ms = 2000 }}
        "#,
            script_path.display()
        ))
        .await;
    let store =
        Arc::new(FileTraceStore::open(dir.path().join("traces"), Durability::Batched).unwrap());
    let runner = Runner::new(
        store.clone(),
        Arc::new(PluginProvider::new(runtime.clone(), "scripted")),
        ToolRegistry::new(runtime),
        Hooks::none(),
    );
    let outcome = runner
        .run(vec![Message::new(Role::User, "nap five times")], RunConfig::default())
        .await
        .unwrap()
        .wait()
        .await
        .unwrap();
    assert_eq!(outcome.final_text.as_deref(), Some("rested"));
    let trace = store.get_trace(&outcome.trace_id).await.unwrap().unwrap();
    let path = store
        .get_main_path_messages(&outcome.trace_id, trace.head_sequence.unwrap())
        .await
        .unwrap();
    let results: Vec<String> =
        path.iter().filter(|m| m.role == Role::Tool).map(Message::text).collect();
    assert_eq!(results, vec!["slept 150 ms"; 5], "every call ran; none hit an instance limit");
}

#[tokio::test]
async fn a_name_differing_only_by_case_is_the_same_name() {
    let dir = fs_with_a_note();
    let config = impostor_config("aaa", "Read,Goal,AGENT,Fine")
        + "[plugins.bbb]\nconfig = { impostor_tools = \"READ,gOAL,fINE\" }\n"
        + "[plugins.ccc]\nconfig = { impostor_tools = \"twice,TWICE\" }\n";
    // Hot: the impostors arrive while fs serves `read`; cold: a new process.
    let hot = dir.open(&config).await;
    for name in ["aaa", "bbb", "ccc"] {
        install_impostor(&dir, name);
    }
    hot.rescan().await.unwrap();
    for rt in [hot, dir.open(&config).await] {
        let mut refusals = refused(&rt, "aaa");
        refusals.extend(refused(&rt, "bbb"));
        refusals.sort();
        let names: Vec<&str> = refusals.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            ["AGENT", "Fine", "Goal", "READ", "Read", "fINE", "gOAL"],
            "{refusals:?}"
        );
        for (name, reason) in &refusals {
            let expected = match name.to_ascii_lowercase().as_str() {
                "read" => "`fs`",
                "fine" => "at once",
                _ => "built-in",
            };
            assert!(reason.contains(expected), "{name}: {reason}");
        }
        for spelling in ["Read", "READ", "Goal", "gOAL", "Fine", "fINE"] {
            assert_eq!(owner(&rt, spelling), None, "{spelling} is served");
            let err = call(&rt, spelling, json!({"text": "x"})).await.unwrap_err().to_string();
            assert!(!err.contains("impostor served"), "{spelling}: {err}");
        }
        assert!(
            call(&rt, "read", json!({"path": "note.txt"})).await.unwrap().contains("the real file")
        );
        let ccc = rt.plugins().into_iter().find(|p| p.name == "ccc").unwrap();
        match ccc.status {
            PluginStatus::Failed(reason) => assert!(reason.contains("listed twice"), "{reason}"),
            other => panic!("a list naming one tool twice loaded: {other:?}"),
        }
    }
}

/// Opens `fifo` for writing without blocking, which frees a reader stuck in
/// its open; a no-op when no reader waits.
fn release_readers(fifo: &Path) {
    use std::os::unix::fs::OpenOptionsExt;
    let _ = std::fs::OpenOptions::new().write(true).custom_flags(libc::O_NONBLOCK).open(fifo);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fifo_swapped_in_after_the_check_still_cannot_block_an_open() {
    let dir = TestDir::new();
    dir.install(support::test_plugins(), "hostile");
    let ws = dir.workspace();
    mkfifo(&ws.join("pipe"));
    std::fs::write(ws.join("x"), "plain").unwrap();
    let rt = dir
        .open(
            r#"
        [plugins.hostile]
        dirs = [{ path = "workspace", access = "read-write" }]
        limits = { timeout_ms = 1000 }
        "#,
        )
        .await;
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    // Another process sharing the directory swaps the FIFO and a regular
    // file under `x` as fast as it can: the check and the open each see one
    // of them. A thread of its own stands in for that process.
    let swapper = std::thread::spawn({
        let (pipe, plain, x, swap) =
            (ws.join("pipe"), ws.join("plain"), ws.join("x"), ws.join("swap"));
        let done = done.clone();
        move || {
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                let _ = std::fs::hard_link(&pipe, &swap);
                let _ = std::fs::rename(&swap, &x);
                let _ = std::fs::write(&plain, "plain");
                let _ = std::fs::rename(&plain, &x);
            }
        }
    });
    let watchdog = tokio::spawn({
        let rt = rt.clone();
        async move {
            let mut slowest = Duration::ZERO;
            let deadline = Instant::now() + Duration::from_secs(8);
            while Instant::now() < deadline {
                let started = Instant::now();
                let _ = call(&rt, "read", json!({"path": "x"})).await;
                slowest = slowest.max(started.elapsed());
            }
            slowest
        }
    });
    // A stuck call would never end: free it late, so the test reports
    // instead of hanging.
    let started = Instant::now();
    while !watchdog.is_finished() {
        tokio::time::sleep(Duration::from_millis(200)).await;
        if started.elapsed() > Duration::from_secs(12) {
            release_readers(&ws.join("pipe"));
        }
    }
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    swapper.join().unwrap();
    let slowest = watchdog.await.unwrap();
    let bound = Duration::from_millis(1000) + support::MARGIN;
    assert!(slowest < bound, "a read of `x` blocked for {slowest:?}");
}

#[tokio::test]
async fn special_files_behind_symlinks_subdirectories_and_sockets_are_refused_at_once() {
    let dir = TestDir::new();
    dir.install(support::test_plugins(), "hostile");
    let ws = dir.workspace();
    std::fs::create_dir(ws.join("sub")).unwrap();
    mkfifo(&ws.join("sub/pipe"));
    std::os::unix::fs::symlink("sub", ws.join("dirlink")).unwrap();
    std::os::unix::fs::symlink("sub/pipe", ws.join("pipelink")).unwrap();
    let _socket = std::os::unix::net::UnixListener::bind(ws.join("sock")).unwrap();
    std::fs::write(ws.join("sub/plain"), "plain text").unwrap();
    let rt = dir
        .open(
            r#"
        [plugins.hostile]
        dirs = [{ path = "workspace", access = "read-write" }]
        limits = { timeout_ms = 5000 }
        "#,
        )
        .await;
    for path in ["sub/pipe", "dirlink/pipe", "pipelink", "dirlink/../pipelink", "sock"] {
        // `write` opens with create and truncate flags, `read` without.
        // A blocked open would end at the time limit instead, with its error.
        for tool in ["read", "write"] {
            let err = call(&rt, tool, json!({"path": path, "content": "x"})).await.unwrap_err();
            assert!(err.to_string().contains("ermission denied"), "{tool} {path}: {err}");
        }
    }
    // Regular files and directories still open, through the same links.
    assert_eq!(call(&rt, "read", json!({"path": "dirlink/plain"})).await.unwrap(), "plain text");
    call(&rt, "write", json!({"path": "dirlink/new", "content": "made"})).await.unwrap();
    assert_eq!(std::fs::read_to_string(ws.join("sub/new")).unwrap(), "made");
    let err = call(&rt, "read", json!({"path": "missing"})).await.unwrap_err().to_string();
    assert!(err.contains("No such file") || err.contains("not found"), "{err}");
}

#[test]
fn a_tool_call_cannot_forge_lines_of_the_terminal_view() {
    let dir = TestDir::new();
    for plugin in ["scripted", "echo"] {
        dir.install(support::plugins(), plugin);
    }
    // Whitespace between JSON tokens may be any newline: the arguments
    // parse, and printed raw they would add lines the host never wrote.
    let forged = "{\"text\":\n\"hi\"}\n✗ nothing ran\napproval needed for echo({\"text\":\"harmless\"}); waiting for an answer\n";
    let script = dir.path().join("script.json");
    let call = |name: &str| json!({ "name": name, "arguments": forged });
    let turns = json!({ "turns": [
        { "tool_calls": [call("echo"), call("not\nreal")] },
        { "text": "done" }
    ]});
    std::fs::write(&script, turns.to_string()).unwrap();
    std::fs::write(
        dir.path().join("reson.toml"),
        "[permissions]\napproval_timeout_ms = 100\nrules = [{ decision = \"ask\", tool = \"echo\" }]\n",
    )
    .unwrap();
    let plugins = dir.plugins();
    let run = support::reson_cli(
        dir.path(),
        &[
            "--plugins-dir",
            plugins.to_str().unwrap(),
            "run",
            "--script",
            script.to_str().unwrap(),
            "go",
        ],
    );
    let out =
        String::from_utf8_lossy(&run.stdout).into_owned() + &String::from_utf8_lossy(&run.stderr);
    let forged_lines: Vec<&str> = out
        .lines()
        .filter(|l| {
            l.starts_with("approval needed for echo({\"text\":\"harmless")
                || l.starts_with("✗ nothing")
        })
        .collect();
    assert!(forged_lines.is_empty(), "forged lines {forged_lines:?} in:\n{out}");
    assert!(out.contains("→ echo({\"text\":\\u{a}\"hi\"}\\u{a}✗ nothing ran"), "{out}");
    assert!(out.contains("denied echo({\"text\":\\u{a}"), "the ask's line: {out}");

    // The stored trace shows the model's names on their lines too.
    let id = out.lines().find_map(|l| l.strip_prefix("trace ")).unwrap();
    let id = id.split_whitespace().next().unwrap();
    let show = support::reson_cli(dir.path(), &["traces", "show", id]);
    let shown = String::from_utf8_lossy(&show.stdout);
    assert!(show.status.success(), "{shown}");
    assert!(shown.contains("not\\u{a}real({"), "{shown}");
    assert!(!shown.lines().any(|l| l.starts_with("real")), "{shown}");
}

/// Waits until the watcher has done what `done` checks.
async fn settled(what: &str, done: impl Fn() -> bool) {
    support::wait_for(what, done).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_briefly_gone_during_an_update_keeps_its_names() {
    let dir = fs_with_a_note();
    let config = impostor_config("aaa", "read");
    let rt = dir.open(&config).await;
    let _watcher = rt.watch().unwrap();
    install_impostor(&dir, "aaa");
    settled("the impostor", || rt.plugins().iter().any(|p| p.name == "aaa")).await;
    assert_eq!(owner(&rt, "read").as_deref(), Some("fs"));
    // An update that removes the old files before writing the new ones:
    // the watcher reloads while fs is gone.
    let saved: Vec<(std::path::PathBuf, Vec<u8>)> = ["fs.wasm", "fs.toml"]
        .iter()
        .map(|f| (dir.plugins().join(f), std::fs::read(dir.plugins().join(f)).unwrap()))
        .collect();
    for (path, _) in &saved {
        std::fs::remove_file(path).unwrap();
    }
    settled("fs go", || !rt.plugins().iter().any(|p| p.name == "fs")).await;
    assert_eq!(owner(&rt, "read"), None, "the impostor took `read` while fs was away");
    let err = call(&rt, "read", json!({"path": "note.txt"})).await.unwrap_err().to_string();
    assert!(!err.contains("impostor"), "{err}");
    for (path, bytes) in &saved {
        std::fs::write(path, bytes).unwrap();
    }
    settled("fs return", || owner(&rt, "read").is_some()).await;
    assert_eq!(owner(&rt, "read").as_deref(), Some("fs"));
    assert!(
        call(&rt, "read", json!({"path": "note.txt"})).await.unwrap().contains("the real file")
    );
    let cold = dir.open(&config).await;
    assert_eq!(owner(&cold, "read").as_deref(), Some("fs"), "the lock file still says fs");
}

/// Installs the hostile guest as `name` with `[instance] keep_warm`.
fn install_warm(dir: &TestDir, name: &str) {
    install_hostile_as(
        dir,
        name,
        "[limits]\ntimeout_ms = 3000\nmemory_mb = 64\n[instance]\nkeep_warm = true\n",
    );
}

#[tokio::test]
async fn instances_are_fresh_per_call_unless_the_manifest_keeps_them_warm() {
    let dir = TestDir::new();
    dir.install(support::test_plugins(), "hostile");
    let rt = dir.open("").await;
    for _ in 0..3 {
        assert_eq!(call(&rt, "count", json!({})).await.unwrap(), "1", "a fresh instance per call");
    }

    let dir = TestDir::new();
    install_warm(&dir, "warm");
    let rt = dir.open("").await;
    let mut counts = Vec::new();
    for _ in 0..3 {
        counts.push(call(&rt, "count", json!({})).await.unwrap());
    }
    assert_eq!(counts, ["1", "2", "3"], "one instance served every call");
    // Each call gets its own deadline: two naps that together outlast one
    // call's limit both finish.
    assert_eq!(call(&rt, "nap", json!({"ms": 2000})).await.unwrap(), "slept 2000 ms");
    assert_eq!(call(&rt, "nap", json!({"ms": 2000})).await.unwrap(), "slept 2000 ms");
    assert_eq!(
        call(&rt, "count", json!({})).await.unwrap(),
        "4",
        "the same instance after the naps"
    );
    // A call that hits a limit or traps is never kept: the next is fresh.
    assert!(matches!(call(&rt, "spin", json!({})).await, Err(CallError::LimitExceeded { .. })));
    assert_eq!(call(&rt, "count", json!({})).await.unwrap(), "1");
    assert!(matches!(
        call(&rt, "panic", json!({"message": "x"})).await,
        Err(CallError::Trapped { .. })
    ));
    assert_eq!(call(&rt, "count", json!({})).await.unwrap(), "1");
    // A tool error is an ordinary answer: the instance stays.
    assert!(call(&rt, "read", json!({"path": "/nope"})).await.is_err());
    assert_eq!(call(&rt, "count", json!({})).await.unwrap(), "2");
    // An instance whose memory grew past half its cap is let go before its
    // state makes a later call run out; a small one stays.
    call(&rt, "hoard", json!({"mb": 1})).await.unwrap();
    assert_eq!(call(&rt, "count", json!({})).await.unwrap(), "3");
    call(&rt, "hoard", json!({"mb": 40})).await.unwrap();
    assert_eq!(call(&rt, "count", json!({})).await.unwrap(), "1");
    // A new generation starts over.
    rt.accept("warm").await.unwrap();
    let fresh = dir.open("").await;
    assert_eq!(call(&fresh, "count", json!({})).await.unwrap(), "1");
}

/// A call's memory is put back when its instance ends (the pages it wrote
/// copied back from the image or zeroed in place, or decommitted beyond
/// what the pool keeps resident), so the next instance in the same slot
/// reads none of it: small and large secrets, on either side of the
/// kept-resident size, several times over.
#[tokio::test]
async fn a_fresh_instance_never_reads_what_an_earlier_call_left_in_memory() {
    let dir = TestDir::new();
    dir.install(support::test_plugins(), "hostile");
    let rt = dir.open("").await;
    for _ in 0..3 {
        for bytes in [4 << 10, 256 << 10, 4 << 20] {
            let at = call(&rt, "stash", json!({"bytes": bytes})).await.unwrap();
            let at: u64 = at.parse().unwrap();
            let found = call(&rt, "peek", json!({"at": at, "bytes": bytes})).await.unwrap();
            assert_eq!(found, "0", "{bytes} bytes stashed at {at} were seen by the next call");
        }
    }

    // `peek` finds a secret that is there: an instance kept between calls
    // sees its own.
    let dir = TestDir::new();
    install_warm(&dir, "warm");
    let rt = dir.open("").await;
    let at = call(&rt, "stash", json!({"bytes": 4096})).await.unwrap();
    let found = call(&rt, "peek", json!({"at": at.parse::<u64>().unwrap(), "bytes": 4096})).await;
    assert_eq!(found.unwrap(), "256");
}

/// An HTTP server that answers no request until `count` are waiting, then
/// all of them: only calls that run at the same time get through.
fn barrier_server(count: usize) -> String {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        let mut waiting = Vec::new();
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let _ = stream.read(&mut [0u8; 4096]);
            waiting.push(stream);
            if waiting.len() == count {
                for mut stream in waiting.drain(..) {
                    let _ = stream.write_all(
                        b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nin",
                    );
                }
            }
        }
    });
    addr
}

fn idle(rt: &Runtime, plugin: &str) -> usize {
    rt.plugins().into_iter().find(|p| p.name == plugin).map_or(0, |p| p.idle_instances)
}

/// Four `http` calls of `hostile` at once, each at `addr`.
async fn four_at_once(rt: &Runtime, addr: &str) {
    let mut calls = tokio::task::JoinSet::new();
    for _ in 0..4 {
        let (rt, url) = (rt.clone(), format!("http://{addr}/"));
        calls.spawn(async move { call(&rt, "http", json!({ "url": url })).await });
    }
    for answer in calls.join_all().await {
        assert_eq!(answer.unwrap(), "status: 200\nin", "every call ran beside the idle instance");
    }
}

/// Instances kept warm live beside the calls' slots: with four slots and
/// an idle instance of another plugin, four calls still run at once. Each
/// waits at a server that answers only when all four are there, so a call
/// left waiting for a slot the idle instance held would end the test at
/// the calls' deadline (the guest's own, 2 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_instances_never_take_a_slot_from_a_call() {
    let addr = barrier_server(4);
    let config = |extra: &str| {
        format!(
            "[sandbox]\nmax_instances = 4\n[plugins.hostile]\nhttp = [\"{addr}\"]\n\
             tools = [\"http\"]\n{extra}"
        )
    };

    let dir = TestDir::new();
    install_warm(&dir, "w1");
    dir.install(support::test_plugins(), "hostile");
    let rt = dir.open(&config("[plugins.w1]\nconfig = { impostor_tools = \"a1\" }\n")).await;
    for _ in 0..2 {
        assert_eq!(call(&rt, "a1", json!({"text": "k"})).await.unwrap(), "impostor served: k");
    }
    assert_eq!(idle(&rt, "w1"), 1, "an instance kept warm");
    four_at_once(&rt, &addr).await;
    assert_eq!(idle(&rt, "w1"), 1, "still kept, for w1's next call");
}

/// An instance kept warm, or a spare made ahead, holds its granted
/// directories open. After one is replaced (moved away, made again), the
/// next call goes to a fresh instance and sees the new directory, as it
/// would with none kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_after_its_directory_was_replaced_sees_the_new_one() {
    // In a task, as a run's calls are made: only there are spares made.
    tokio::spawn(directory_replaced_under_idle_instances()).await.unwrap();
}

async fn directory_replaced_under_idle_instances() {
    for (instance, what) in [("[instance]\nkeep_warm = true\n", "kept warm"), ("", "spare")] {
        let dir = TestDir::new();
        install_hostile_as(&dir, "h", &format!("[requests]\ndirs = \"read\"\n{instance}"));
        let rt =
            dir.open("[plugins.h]\ndirs = [{ path = \"workspace\", access = \"read\" }]\n").await;
        let workspace = dir.workspace();
        std::fs::write(workspace.join("note.txt"), "old").unwrap();
        assert_eq!(call(&rt, "read", json!({"path": "note.txt"})).await.unwrap(), "old");
        support::wait_for(&format!("an instance {what}"), || idle(&rt, "h") == 1).await;
        std::fs::rename(&workspace, dir.path().join("moved-away")).unwrap();
        std::fs::create_dir(&workspace).unwrap();
        std::fs::write(workspace.join("note.txt"), "new").unwrap();
        assert_eq!(call(&rt, "read", json!({"path": "note.txt"})).await.unwrap(), "new", "{what}");
    }
}

/// After a call in a fresh instance made in a task (as a run's are), the
/// plugin's next instance is made ahead, off the call's path (`[sandbox]
/// spare_instances`, on by default), and the next call enters it: a
/// never-used instance, as fresh as one built for it. A reload starts
/// over; the setting off, or a caller outside any task, no instance waits.
#[tokio::test]
async fn the_next_call_enters_a_never_used_instance_made_ahead() {
    tokio::spawn(spares_made_ahead()).await.unwrap();
    // This test's own body runs outside any task (`block_on`).
    let dir = TestDir::new();
    dir.install(support::test_plugins(), "hostile");
    let rt = dir.open("").await;
    assert_eq!(call(&rt, "count", json!({})).await.unwrap(), "1");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(idle(&rt, "hostile"), 0, "a caller outside any task: none made");
}

async fn spares_made_ahead() {
    let dir = TestDir::new();
    dir.install(support::test_plugins(), "hostile");
    let rt = dir.open("").await;
    assert_eq!(idle(&rt, "hostile"), 0, "nothing is made before a call");
    for _ in 0..3 {
        assert_eq!(call(&rt, "count", json!({})).await.unwrap(), "1", "a never-used instance");
        // On this test's one thread the spare is made once the test waits,
        // so right after a call that took it there is none.
        assert_eq!(idle(&rt, "hostile"), 0, "the call entered the spare");
        support::wait_for("a spare made after the call", || idle(&rt, "hostile") == 1).await;
    }
    // What a call leaves in memory, the spare made after it never sees.
    let at = call(&rt, "stash", json!({"bytes": 4096})).await.unwrap();
    support::wait_for("a spare made after the stash", || idle(&rt, "hostile") == 1).await;
    let found = call(&rt, "peek", json!({"at": at.parse::<u64>().unwrap(), "bytes": 4096})).await;
    assert_eq!(found.unwrap(), "0");
    // A call that traps leaves a spare as well, itself never entered again.
    assert!(matches!(call(&rt, "spin", json!({})).await, Err(CallError::LimitExceeded { .. })));
    support::wait_for("a spare after a trap", || idle(&rt, "hostile") == 1).await;
    assert_eq!(call(&rt, "count", json!({})).await.unwrap(), "1");
    // A new generation has no spare until its first call.
    support::wait_for("a spare before the reload", || idle(&rt, "hostile") == 1).await;
    let generation = |rt: &Runtime| {
        rt.plugins().into_iter().find(|p| p.name == "hostile").map(|p| p.generation).unwrap()
    };
    let before = generation(&rt);
    let manifest = dir.plugins().join("hostile.toml");
    let text = std::fs::read_to_string(&manifest).unwrap();
    std::fs::write(&manifest, format!("{text}\n# changed\n")).unwrap();
    rt.reload(&["hostile".to_owned()]).await;
    assert!(generation(&rt) > before, "a new generation");
    assert_eq!(idle(&rt, "hostile"), 0, "the old generation's spare went with it");
    assert_eq!(call(&rt, "count", json!({})).await.unwrap(), "1");

    let dir = TestDir::new();
    dir.install(support::test_plugins(), "hostile");
    let rt = dir.open("[sandbox]\nspare_instances = false\n").await;
    assert_eq!(call(&rt, "count", json!({})).await.unwrap(), "1");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(idle(&rt, "hostile"), 0, "spare_instances = false: none made");
}

/// A fresh call made in a task answers before its instance is dropped
/// (its memory reset, its slot freed): that happens once the caller
/// waits. With one instance slot, every call in a row from a task still
/// finds the slot free, and so does a caller outside any task after them.
#[tokio::test]
async fn a_fresh_calls_instance_is_freed_once_its_caller_waits() {
    let dir = TestDir::new();
    dir.install(support::test_plugins(), "hostile");
    let rt = dir.open("[sandbox]\nmax_instances = 1\n").await;
    let in_task = rt.clone();
    let calls = tokio::spawn(async move {
        for _ in 0..5 {
            let at = call(&in_task, "stash", json!({"bytes": 4096})).await.unwrap();
            let at: u64 = at.parse().unwrap();
            let found = call(&in_task, "peek", json!({"at": at, "bytes": 4096})).await;
            assert_eq!(found.unwrap(), "0", "a call never sees a used instance");
        }
    });
    let freed = "a call waited for a slot its caller's last call never freed";
    tokio::time::timeout(Duration::from_secs(60), calls).await.expect(freed).unwrap();
    let outside = tokio::time::timeout(Duration::from_secs(60), call(&rt, "count", json!({})));
    assert_eq!(outside.await.expect(freed).unwrap(), "1");
}

#[test]
fn plugins_list_shows_every_grant_that_widens_a_command() {
    let dir = TestDir::new();
    dir.install(support::plugins(), "shell");
    std::fs::write(
        dir.path().join("reson.toml"),
        "[plugins.shell]\nprocess = [\"find *\"]\nenv = [\"RUST_LOG\"]\nexec_vectors = [\"find\"]\n",
    )
    .unwrap();
    let config = dir.path().join("reson.toml");
    let plugins = dir.plugins();
    let list = support::reson_cli(
        dir.path(),
        &[
            "--config",
            config.to_str().unwrap(),
            "--plugins-dir",
            plugins.to_str().unwrap(),
            "plugins",
            "list",
        ],
    );
    let out = String::from_utf8_lossy(&list.stdout);
    assert!(out.contains("    env     RUST_LOG"), "{out}");
    assert!(out.contains("    exec    find (may run other programs)"), "{out}");
}

async fn flood(dir: &TestDir, mib: u32) -> Result<(usize, String), String> {
    use reson::provider::{ChatRequest, Delta, LlmParams, PluginProvider, complete};
    use reson::trace::{Message, Role};
    let runtime = dir.open(&format!("[plugins.flood]\nconfig = {{ mib = \"{mib}\" }}\n")).await;
    let provider = PluginProvider::new(runtime, "flood");
    let request = ChatRequest {
        messages: vec![Message::new(Role::User, "hi")],
        tools: Vec::new(),
        params: LlmParams { stream: true, ..LlmParams::default() },
    };
    let mut received = 0;
    let cancel = tokio_util::sync::CancellationToken::new();
    let answer = complete(&provider, request, cancel, |delta| {
        if let Delta::Text { text } = delta {
            received += text.len();
        }
    })
    .await;
    match answer {
        Ok(response) => Ok((received, response.message.text())),
        Err(e) => Err(format!("{e} (after {received} bytes of deltas)")),
    }
}

/// The host holds each streamed delta until its reader takes it: a provider
/// streaming without end must not be able to fill the host's memory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_streaming_without_end_is_stopped_at_its_output_cap() {
    let dir = TestDir::new();
    dir.install(support::test_plugins(), "flood");
    let error = flood(&dir, 256).await.expect_err("256 MiB of deltas is over the 1 MiB cap");
    assert!(error.contains("output limit of 1048576 bytes"), "{error}");
    let received: usize =
        error.rsplit("after ").next().and_then(|n| n.split(' ').next()?.parse().ok()).unwrap();
    assert!(received <= 1 << 20, "{received} bytes of deltas got past the cap");

    // A stream that stays within the cap goes through whole.
    let (received, text) = flood(&dir, 1).await.expect("1 MiB of deltas is within the cap");
    assert_eq!((received, text.as_str()), (1 << 20, "done"));
}

/// Open files and streams are descriptors of the host process, shared by
/// every call: a guest holding as many as it can get is stopped at a cap,
/// and the host goes on serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_cannot_hold_the_hosts_descriptors() {
    // It counts the process's open descriptors.
    if !support::alone(module_path!(), "a_guest_cannot_hold_the_hosts_descriptors") {
        return;
    }
    let dir = TestDir::new();
    dir.install(support::test_plugins(), "hostile");
    std::fs::write(dir.workspace().join("f.txt"), "x").unwrap();
    let rt = dir
        .open(
            r#"
        [plugins.hostile]
        dirs = [{ path = "workspace", access = "read" }]
        "#,
        )
        .await;
    let fds = || std::fs::read_dir("/proc/self/fd").unwrap().count();
    let before = fds();
    let hold = json!({"path": "f.txt", "count": 100_000});
    let (held, echoed) = tokio::join!(call(&rt, "hold_files", hold), async {
        tokio::time::sleep(Duration::from_millis(50)).await;
        call(&rt, "echo", json!({"text": "still here"})).await
    });
    let error = held.expect_err("100,000 handles are over the cap");
    assert!(
        matches!(
            error,
            CallError::LimitExceeded { limit: reson::plugin::Limit::Handles { max: 256 }, .. }
        ),
        "{error:?}"
    );
    assert!(error.to_string().contains("limit of 256 open files, streams and other handles"));
    assert_eq!(echoed.unwrap(), "still here");
    // Every handle went with the call.
    assert!(fds() <= before + 4, "{} descriptors left open", fds() - before);
}

/// Each refusal is a line in the audit log: a guest asking for what it may
/// not have, thousands of times in one call, writes only the first ones.
#[test]
fn a_guest_asking_again_and_again_cannot_flood_the_audit_log() {
    let dir = TestDir::new();
    dir.install(support::test_plugins(), "hostile");
    let plugins = dir.plugins().to_string_lossy().into_owned();
    let args = r#"{"url": "http://blocked.example/", "times": 5000}"#;
    let run =
        support::reson_cli(dir.path(), &["--plugins-dir", &plugins, "tool", "call", "knock", args]);
    let out = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "{out}");
    assert_eq!(out.trim_end(), "denied 5000 of 5000");
    let log = String::from_utf8_lossy(&run.stderr);
    let lines = log.lines().filter(|l| l.contains("denied")).count();
    assert_eq!(lines, 100, "{} bytes of log", log.len());
    assert!(log.contains("further refusals in this call are not logged"), "{log}");
}

/// A reader that goes away (`reson tool list | head`) ends the command
/// quietly, with the status SIGPIPE would give, not with a panic.
#[test]
fn output_to_a_closed_pipe_ends_the_command_quietly() {
    let dir = TestDir::new();
    dir.install(support::plugins(), "echo");
    let mut child = Command::new(env!("CARGO_BIN_EXE_reson"))
        .current_dir(dir.path())
        .env_remove("RESON_CONFIG")
        .env_remove("RESON_PLUGINS_DIR")
        .args(["--cache-dir", &support::cache_dir().to_string_lossy()])
        .args(["--plugins-dir", &dir.plugins().to_string_lossy(), "tool", "list"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("running reson");
    // Closed before the command writes a byte.
    drop(child.stdout.take());
    let run = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(run.status.code(), Some(141), "{err}");
}
