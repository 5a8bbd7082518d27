//! Hot reload: plugins replaced, broken, added and removed while calls run;
//! and `reson serve` following `reson plugins install` without a restart.

use crate::support;
use crate::support::api::{Api, ServerProcess, echo_turn, reson, set_script, text_turn};
use reson::capability::effects::Effects;
use reson::plugin::{CallContext, CallError, PluginStatus, Runtime};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use support::{TestDir, replace, wait_for};
use tokio_util::sync::CancellationToken;

const ARGS: &str = r#"{"text":"ping"}"#;

fn status(rt: &Runtime, name: &str) -> Option<PluginStatus> {
    rt.plugins().into_iter().find(|p| p.name == name).map(|p| p.status)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replacing_a_plugin_under_load_fails_no_call() {
    let dir = TestDir::new();
    dir.install(support::plugins(), "echo");
    let rt = dir.open("").await;
    let _watcher = rt.watch().unwrap();
    let generation = rt.plugins()[0].generation;

    let stop = CancellationToken::new();
    // Each caller's answers from the old version, and all from the new.
    let old: Vec<_> = (0..2).map(|_| Arc::new(AtomicUsize::new(0))).collect();
    let new = Arc::new(AtomicUsize::new(0));
    let callers: Vec<_> = old
        .iter()
        .map(|old| {
            let (rt, stop, old, new) = (rt.clone(), stop.clone(), old.clone(), new.clone());
            tokio::spawn(async move {
                let mut outputs = Vec::new();
                let mut failures = Vec::new();
                while !stop.is_cancelled() {
                    match rt.call_tool("echo", ARGS, &CallContext::default()).await {
                        Ok(out) => {
                            let version = if out.text == "v2:ping" { &new } else { &old };
                            version.fetch_add(1, Ordering::SeqCst);
                            outputs.push(out.text)
                        }
                        Err(e) => failures.push(e.to_string()),
                    }
                }
                (outputs, failures)
            })
        })
        .collect();

    wait_for("an old answer to every caller", || old.iter().all(|n| n.load(Ordering::SeqCst) > 0))
        .await;
    let v2 = std::fs::read(support::test_plugins().join("echo-v2.wasm")).unwrap();
    replace(&v2, &dir.plugins().join("echo.wasm"));
    wait_for("the new generation", || rt.plugins()[0].generation > generation).await;
    wait_for("an answer from the new version", || new.load(Ordering::SeqCst) > 0).await;
    stop.cancel();

    let mut all = Vec::new();
    for caller in callers {
        let (outputs, failures) = caller.await.unwrap();
        assert!(failures.is_empty(), "calls failed during the reload: {failures:?}");
        all.extend(outputs);
    }
    let first_new = all.iter().position(|o| o == "v2:ping").expect("new calls see the new version");
    assert!(first_new > 0, "calls before the swap saw the old version");
    assert!(all.iter().all(|o| o == "ping" || o == "v2:ping"));
    assert_eq!(rt.call_tool("echo", ARGS, &CallContext::default()).await.unwrap().text, "v2:ping");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_replacement_keeps_the_last_good_version_serving() {
    let dir = TestDir::new();
    dir.install(support::plugins(), "echo");
    let rt = dir.open("").await;
    let _watcher = rt.watch().unwrap();

    replace(b"\0asm garbage that is no component", &dir.plugins().join("echo.wasm"));
    wait_for("the failed reload to be reported", || {
        matches!(status(&rt, "echo"), Some(PluginStatus::Stale(_)))
    })
    .await;
    let Some(PluginStatus::Stale(error)) = status(&rt, "echo") else { unreachable!() };
    assert!(error.contains("echo.wasm"), "{error}");
    assert_eq!(rt.call_tool("echo", ARGS, &CallContext::default()).await.unwrap().text, "ping");

    // A good file afterwards clears the error.
    let v2 = std::fs::read(support::test_plugins().join("echo-v2.wasm")).unwrap();
    replace(&v2, &dir.plugins().join("echo.wasm"));
    wait_for("recovery", || status(&rt, "echo") == Some(PluginStatus::Ready)).await;
    assert_eq!(rt.call_tool("echo", ARGS, &CallContext::default()).await.unwrap().text, "v2:ping");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_files_load_and_removed_files_unload() {
    let dir = TestDir::new();
    let rt = dir.open("").await;
    let _watcher = rt.watch().unwrap();
    assert!(rt.plugins().is_empty());

    // Manifest first, then the component, as a copy tool would.
    std::fs::copy(support::plugins().join("echo.toml"), dir.plugins().join("echo.toml")).unwrap();
    replace(
        &std::fs::read(support::plugins().join("echo.wasm")).unwrap(),
        &dir.plugins().join("echo.wasm"),
    );
    wait_for("the new plugin", || status(&rt, "echo") == Some(PluginStatus::Ready)).await;
    assert_eq!(rt.call_tool("echo", ARGS, &CallContext::default()).await.unwrap().text, "ping");

    std::fs::remove_file(dir.plugins().join("echo.wasm")).unwrap();
    wait_for("the unload", || status(&rt, "echo").is_none()).await;
    let err = rt.call_tool("echo", ARGS, &CallContext::default()).await.unwrap_err();
    assert!(matches!(err, CallError::UnknownTool { .. }), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_running_across_a_reload_finishes_on_its_generation() {
    let dir = TestDir::new();
    dir.install(support::test_plugins(), "hostile");
    // Longer than `wait_for` waits for the reload: the spin outlives any
    // reload the test sees, and ends when the test cancels it.
    let rt = dir.open("[plugins.hostile]\nlimits = { timeout_ms = 90000 }\n").await;
    let _watcher = rt.watch().unwrap();
    let generation = rt.plugins()[0].generation;

    let (stop, effects) = (CancellationToken::new(), Effects::record());
    let context = CallContext {
        cancel: Some(stop.clone()),
        effects: Some(effects.clone()),
        ..CallContext::default()
    };
    let slow = {
        let rt = rt.clone();
        tokio::spawn(async move { rt.call_tool("spin", "{}", &context).await })
    };
    // The runtime names the plugin serving a call once it enters the guest.
    wait_for("the call to start", || effects.call().is_some()).await;
    // Same component, new manifest text: a reload of the running plugin.
    let manifest = dir.plugins().join("hostile.toml");
    let text = std::fs::read_to_string(&manifest).unwrap();
    std::fs::write(&manifest, format!("{text}\n# touched\n")).unwrap();
    wait_for("the reload", || rt.plugins()[0].generation > generation).await;
    assert!(!slow.is_finished(), "the running call was not cut short by the reload");
    stop.cancel();
    // Not an error from the reload: the call still ran on its own
    // generation's instance, which heeded its cancel.
    let err = slow.await.unwrap().unwrap_err();
    assert!(matches!(err, CallError::Cancelled { .. }), "it ran until cancelled: {err:?}");
}

/// A plugin package as `reson plugins install` takes it: `echo.wasm` with
/// `bytes`, and the bundled echo's manifest with `version` and `more`
/// appended.
fn package(under: &Path, bytes: &[u8], version: &str, more: &str) -> PathBuf {
    let dir = under.join(version);
    std::fs::create_dir_all(&dir).unwrap();
    let manifest = std::fs::read_to_string(support::plugins().join("echo.toml")).unwrap();
    let manifest = manifest.replace("version = \"0.1.0\"", &format!("version = \"{version}\""));
    std::fs::write(dir.join("echo.toml"), format!("{manifest}\n{more}")).unwrap();
    std::fs::write(dir.join("echo.wasm"), bytes).unwrap();
    dir.join("echo.wasm")
}

/// Runs `reson` on the server's directory (its config, plugins and lock
/// file), which must succeed; its stdout.
async fn reson_ok(dir: &Path, args: &[&str]) -> String {
    let out = reson(dir).args(args).output().await.unwrap();
    let (stdout, stderr) =
        (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "reson {args:?}: {stdout}{stderr}");
    stdout.into_owned()
}

/// Polls `/api/plugins` until `echo` satisfies `done`; its entry. The
/// promise is 2 s after the install; 20 s leaves room for a busy machine.
async fn echo_until(api: &Api, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    let start = Instant::now();
    loop {
        let plugins = api.get("/api/plugins").await.expect(200);
        let echo = plugins.as_array().unwrap().iter().find(|p| p["name"] == "echo").cloned();
        if let Some(echo) = echo.filter(|e| done(e)) {
            return echo;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "{what}: /api/plugins says {plugins:#}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Starts a run whose scripted model calls `echo` with `ping`; the tool
/// result it stored.
async fn echo_run(api: &Api) -> (String, String) {
    let id = api.start("echo ping", json!({})).await;
    api.finish(&id, 0).await;
    let messages = api.messages(&id, "main_path").await;
    let tool = messages["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .unwrap_or_else(|| panic!("no tool result in {messages:#}"));
    let text = tool["content"].as_array().unwrap().iter().filter_map(|p| p["text"].as_str());
    (id, text.collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reson_serve_follows_installs_and_holds_back_what_asks_for_more() {
    let dir = crate::support::api::dir_with(&["scripted"]);
    let script = set_script(dir.path(), json!([echo_turn("ping"), text_turn("done")]));
    dir.config(&crate::support::api::config(&format!(
        "[plugins.scripted]\ndirs = [{{ path = \".\", access = \"read\" }}]\n\
         config = {{ script = \"{}\" }}\n",
        script.display()
    )));
    let packages = tempfile::tempdir().unwrap();
    let v1_bytes = std::fs::read(support::plugins().join("echo.wasm")).unwrap();
    let v2_bytes = std::fs::read(support::test_plugins().join("echo-v2.wasm")).unwrap();
    let v1 = package(packages.path(), &v1_bytes, "0.1.0", "");
    let v2 = package(packages.path(), &v2_bytes, "0.2.0", "");
    // v1's code again, now asking for the network: more than the lock allows.
    let more =
        package(packages.path(), &v1_bytes, "0.3.0", "[requests]\nhttp = [\"example.com\"]\n");

    let server = ServerProcess::start(dir.path(), &[]).await;
    let api = &server.api;
    let path = |p: &Path| p.to_string_lossy().into_owned();

    // A new plugin.
    reson_ok(dir.path(), &["plugins", "install", &path(&v1)]).await;
    echo_until(api, "v1 loaded", |e| e["version"] == "0.1.0" && e["status"]["state"] == "ready")
        .await;
    let (first, text) = echo_run(api).await;
    assert_eq!(text, "ping");

    // A new build of it: announced on the watch sockets, and the next
    // run calls the new code.
    let mut watcher = api.watch(&first, api.last_event(&first).await).await;
    reson_ok(dir.path(), &["plugins", "install", &path(&v2)]).await;
    let announced = watcher.until_kind("plugins_changed").await;
    assert_eq!(announced["plugins"][0]["name"], "echo", "{announced}");
    assert_eq!(announced["plugins"][0]["change"], "replaced", "{announced}");
    assert_eq!(announced["plugins"][0]["version"], "0.2.0", "{announced}");
    echo_until(api, "v2 serving", |e| e["version"] == "0.2.0").await;
    assert_eq!(echo_run(api).await.1, "v2:ping");

    // One that asks for more waits for `accept`; v2 keeps serving.
    reson_ok(dir.path(), &["plugins", "install", &path(&more)]).await;
    let held = echo_until(api, "v3 held back", |e| e["status"]["state"] == "stale").await;
    let why = held["status"]["error"].as_str().unwrap();
    assert!(why.contains("reson plugins accept echo"), "{why}");
    assert_eq!(held["version"], "0.2.0", "the previous version serves: {held}");
    assert_eq!(echo_run(api).await.1, "v2:ping");

    // Accepted in another process: the server sees the lock file change.
    reson_ok(dir.path(), &["plugins", "accept", "echo"]).await;
    echo_until(api, "v3 accepted", |e| e["version"] == "0.3.0" && e["status"]["state"] == "ready")
        .await;
    assert_eq!(echo_run(api).await.1, "ping");

    let log = server.output.lock().unwrap().join("\n");
    assert!(log.contains("plugins changed: echo replaced 0.2.0"), "the server's log: {log}");
}
