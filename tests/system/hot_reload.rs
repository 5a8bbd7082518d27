//! Hot reload: plugins replaced, broken, added and removed while calls run.

use crate::support;

use reson::plugin::{CallContext, CallError, PluginStatus, Runtime};
use std::time::Duration;
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
    let callers: Vec<_> = (0..2)
        .map(|_| {
            let (rt, stop) = (rt.clone(), stop.clone());
            tokio::spawn(async move {
                let mut outputs = Vec::new();
                let mut failures = Vec::new();
                while !stop.is_cancelled() {
                    match rt.call_tool("echo", ARGS, &CallContext::default()).await {
                        Ok(out) => outputs.push(out.text),
                        Err(e) => failures.push(e.to_string()),
                    }
                }
                (outputs, failures)
            })
        })
        .collect();

    tokio::time::sleep(Duration::from_millis(200)).await;
    let v2 = std::fs::read(support::test_plugins().join("echo-v2.wasm")).unwrap();
    replace(&v2, &dir.plugins().join("echo.wasm"));
    wait_for("the new generation", || rt.plugins()[0].generation > generation).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
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
    let rt = dir.open("[plugins.hostile]\nlimits = { timeout_ms = 1500 }\n").await;
    let _watcher = rt.watch().unwrap();
    let generation = rt.plugins()[0].generation;

    let slow = {
        let rt = rt.clone();
        tokio::spawn(async move { rt.call_tool("spin", "{}", &CallContext::default()).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    // Same component, new manifest text: a reload of the running plugin.
    let manifest = dir.plugins().join("hostile.toml");
    let text = std::fs::read_to_string(&manifest).unwrap();
    std::fs::write(&manifest, format!("{text}\n# touched\n")).unwrap();
    wait_for("the reload", || rt.plugins()[0].generation > generation).await;
    assert!(!slow.is_finished(), "the running call was not cut short by the reload");
    let err = slow.await.unwrap().unwrap_err();
    assert!(err.to_string().contains("time limit of 1500 ms"), "it ran to its own deadline: {err}");
}
