//! The hostile suite: guests that misbehave in every way we know of. Each
//! one is contained with the right typed error, the host stays up, and the
//! next call on the same plugin works.

mod support;

use reson::plugin::{CallContext, CallError, Limit, Runtime, ToolFailure, TrapKind};
use serde_json::json;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::{Duration, Instant};
use support::TestDir;

const TIMEOUT_MS: u64 = 1_000;
const MEMORY_MB: u64 = 32;
const OUTPUT_BYTES: u64 = 65_536;

fn hostile(extra: &str) -> (TestDir, Runtime) {
    let dir = TestDir::new();
    dir.install(support::test_plugins(), "hostile");
    std::fs::create_dir_all(dir.path().join("readonly")).unwrap();
    std::fs::create_dir_all(dir.path().join("outside")).unwrap();
    std::fs::write(dir.path().join("outside/secret.txt"), "TOP-SECRET").unwrap();
    let config = format!(
        r#"
        [plugins.hostile]
        dirs = [{{ path = "workspace", access = "read-write" }}, {{ path = "readonly", access = "read" }}]
        limits = {{ timeout_ms = {TIMEOUT_MS}, memory_mb = {MEMORY_MB}, output_bytes = {OUTPUT_BYTES} }}
        {extra}
        "#
    );
    let runtime = dir.open(&config);
    (dir, runtime)
}

fn call(rt: &Runtime, tool: &str, args: serde_json::Value) -> Result<String, CallError> {
    rt.call_tool(tool, &args.to_string(), &CallContext::default()).map(|o| o.text)
}

/// The plugin still serves after whatever came before.
fn assert_alive(rt: &Runtime) {
    assert_eq!(call(rt, "echo", json!({"text": "still here"})).unwrap(), "still here");
}

fn limit_of(err: CallError) -> Limit {
    match err {
        CallError::LimitExceeded { plugin, tool, limit } => {
            assert_eq!(plugin, "hostile");
            assert!(!tool.is_empty());
            limit
        }
        other => panic!("expected a limit, got {other:?}"),
    }
}

fn failure_of(err: CallError) -> ToolFailure {
    match err {
        CallError::Tool { failure, .. } => failure,
        other => panic!("expected a tool failure, got {other:?}"),
    }
}

#[test]
fn infinite_loop_hits_the_deadline() {
    let (_dir, rt) = hostile("");
    let start = Instant::now();
    let err = call(&rt, "spin", json!({})).unwrap_err();
    let took = start.elapsed();
    assert_eq!(limit_of(err.clone()), Limit::Timeout { ms: TIMEOUT_MS });
    assert!(took >= Duration::from_millis(TIMEOUT_MS), "stopped early: {took:?}");
    assert!(took < Duration::from_millis(TIMEOUT_MS * 3), "stopped late: {took:?}");
    assert!(err.to_string().contains("time limit of 1000 ms"), "{err}");
    assert_alive(&rt);
}

#[test]
fn loop_over_host_calls_hits_the_deadline() {
    let (_dir, rt) = hostile("");
    let start = Instant::now();
    let err = call(&rt, "host_spin", json!({})).unwrap_err();
    assert_eq!(limit_of(err), Limit::Timeout { ms: TIMEOUT_MS });
    assert!(start.elapsed() < Duration::from_millis(TIMEOUT_MS * 3));
    assert_alive(&rt);
}

#[test]
fn sleeping_in_a_host_call_is_cut_at_the_deadline() {
    let (_dir, rt) = hostile("");
    assert_eq!(call(&rt, "nap", json!({"ms": 10})).unwrap(), "slept 10 ms");
    let start = Instant::now();
    let err = call(&rt, "nap", json!({"ms": 60_000})).unwrap_err();
    assert_eq!(limit_of(err), Limit::Timeout { ms: TIMEOUT_MS });
    assert!(
        start.elapsed() < Duration::from_millis(TIMEOUT_MS * 3),
        "slept on: {:?}",
        start.elapsed()
    );
    assert_alive(&rt);
}

#[test]
fn a_cancelled_call_stops_promptly() {
    let (_dir, rt) = hostile("");
    let cancel = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let context = CallContext { cancel: Some(cancel.clone()), ..CallContext::default() };
    let flag = cancel.clone();
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        flag.store(true, std::sync::atomic::Ordering::SeqCst);
    });
    for (tool, args) in [("nap", json!({"ms": 60_000})), ("spin", json!({}))] {
        cancel.store(false, std::sync::atomic::Ordering::SeqCst);
        let start = Instant::now();
        if tool == "spin" {
            let flag = cancel.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(200));
                flag.store(true, std::sync::atomic::Ordering::SeqCst);
            });
        }
        let err = rt.call_tool(tool, &args.to_string(), &context).unwrap_err();
        assert!(matches!(err, CallError::Cancelled { .. }), "{tool}: {err:?}");
        assert!(
            start.elapsed() < Duration::from_millis(TIMEOUT_MS),
            "{tool}: {:?}",
            start.elapsed()
        );
    }
    assert_alive(&rt);
}

#[test]
fn memory_bomb_hits_the_memory_cap() {
    let (_dir, rt) = hostile("");
    let err = call(&rt, "grow", json!({})).unwrap_err();
    assert_eq!(limit_of(err), Limit::Memory { bytes: MEMORY_MB << 20 });
    assert_alive(&rt);
}

#[test]
fn stack_overflow_is_a_typed_trap() {
    let (_dir, rt) = hostile("");
    assert_eq!(call(&rt, "recurse", json!({"depth": 3})).unwrap(), "depth: 3");
    match call(&rt, "recurse", json!({"depth": 100_000_000u64})).unwrap_err() {
        CallError::Trapped { plugin, tool, trap } => {
            assert_eq!((plugin.as_str(), tool.as_str()), ("hostile", "recurse"));
            assert_eq!(trap, TrapKind::StackOverflow);
        }
        other => panic!("expected a trap, got {other:?}"),
    }
    assert_alive(&rt);
}

#[test]
fn panic_carries_its_message() {
    let (_dir, rt) = hostile("");
    match call(&rt, "panic", json!({"message": "boom at the guest"})).unwrap_err() {
        CallError::Trapped { trap: TrapKind::Panic(message), .. } => {
            assert!(message.contains("boom at the guest"), "{message}");
        }
        other => panic!("expected a panic trap, got {other:?}"),
    }
    assert_alive(&rt);
}

#[test]
fn output_flood_hits_the_output_cap() {
    let (_dir, rt) = hostile("");
    assert_eq!(call(&rt, "flood", json!({"bytes": 1000})).unwrap().len(), 1000);
    let err = call(&rt, "flood", json!({"bytes": 100_000})).unwrap_err();
    assert_eq!(limit_of(err), Limit::Output { returned: 100_000, bytes: OUTPUT_BYTES });
    assert_alive(&rt);
}

#[test]
fn reads_outside_the_grant_are_refused() {
    let (dir, rt) = hostile("");
    let ws = dir.workspace();
    let outside = dir.path().canonicalize().unwrap().join("outside/secret.txt");
    std::os::unix::fs::symlink(&outside, ws.join("link")).unwrap();
    std::fs::write(ws.join("mine.txt"), "inside").unwrap();
    assert_eq!(call(&rt, "read", json!({"path": ws.join("mine.txt")})).unwrap(), "inside");
    assert_eq!(
        call(&rt, "read", json!({"path": "mine.txt"})).unwrap(),
        "inside",
        "relative to cwd"
    );

    let attempts = [
        outside.to_string_lossy().into_owned(),
        format!("{}/../outside/secret.txt", ws.display()),
        "../outside/secret.txt".to_owned(),
        format!("{}/link", ws.display()),
        "/etc/passwd".to_owned(),
    ];
    for path in attempts {
        let err = call(&rt, "read", json!({ "path": path })).unwrap_err();
        let failure = failure_of(err.clone());
        assert!(!format!("{failure:?}").contains("TOP-SECRET"), "{path}: leaked");
        assert!(
            matches!(failure, ToolFailure::Denied(_) | ToolFailure::Failed(_)),
            "{path}: {failure:?}"
        );
        assert_alive(&rt);
    }
}

#[test]
fn writes_into_a_read_only_grant_are_refused() {
    let (dir, rt) = hostile("");
    let ro = dir.path().join("readonly").canonicalize().unwrap();
    let ws = dir.workspace();
    assert_eq!(
        call(&rt, "write", json!({"path": ws.join("ok.txt"), "content": "yes"})).unwrap(),
        "wrote 3 bytes"
    );
    assert_eq!(std::fs::read_to_string(ws.join("ok.txt")).unwrap(), "yes");
    let err = call(&rt, "write", json!({"path": ro.join("no.txt"), "content": "x"})).unwrap_err();
    failure_of(err);
    assert!(!ro.join("no.txt").exists());
    let err =
        call(&rt, "write", json!({"path": dir.path().join("outside/new.txt"), "content": "x"}))
            .unwrap_err();
    failure_of(err);
    assert!(!dir.path().join("outside/new.txt").exists());
    assert_alive(&rt);
}

#[test]
fn the_host_environment_is_not_inherited() {
    let (_dir, rt) = hostile("");
    assert!(std::env::vars().count() > 0);
    assert_eq!(call(&rt, "env", json!({})).unwrap(), "vars: 0");
}

#[test]
fn sockets_are_closed() {
    let (_dir, rt) = hostile("");
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    failure_of(call(&rt, "connect", json!({ "addr": addr })).unwrap_err());
    assert!(listener.accept().is_err(), "the guest reached the listener");
    assert_alive(&rt);
}

/// A one-request-at-a-time HTTP server that counts the requests it saw.
fn http_server() -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let hits = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = hits.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut buf = [0u8; 4096];
            let _ = stream.read(&mut buf);
            seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let _ = stream.write_all(
                b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\nconnection: close\r\n\r\nhello",
            );
        }
    });
    (format!("127.0.0.1:{port}"), hits)
}

#[test]
fn http_reaches_only_granted_hosts() {
    let (addr, hits) = http_server();
    let (_dir, rt) = hostile("");
    let err = call(&rt, "http", json!({"url": format!("http://{addr}/x")})).unwrap_err();
    match failure_of(err) {
        ToolFailure::Denied(message) => assert!(message.contains("not granted"), "{message}"),
        other => panic!("expected a denial, got {other:?}"),
    }
    assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 0, "the request went out");
    assert_alive(&rt);

    let (_dir, granted) = hostile(&format!("http = [\"{addr}\"]"));
    assert_eq!(
        call(&granted, "http", json!({"url": format!("http://{addr}/x")})).unwrap(),
        "status: 200\nhello"
    );
    assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 1);
    let other_port = format!("http://127.0.0.1:1/{}", "x");
    failure_of(call(&granted, "http", json!({ "url": other_port })).unwrap_err());
}

#[test]
fn processes_run_only_when_granted() {
    let (dir, rt) = hostile("");
    let marker = dir.path().join("marker");
    let touch = json!({"program": "touch", "args": [marker]});
    match failure_of(call(&rt, "exec", touch.clone()).unwrap_err()) {
        ToolFailure::Denied(message) => assert!(message.contains("touch"), "{message}"),
        other => panic!("expected a denial, got {other:?}"),
    }
    assert!(!marker.exists());

    let (_dir, granted) = hostile(r#"process = ["echo *"]"#);
    assert_eq!(call(&granted, "exec", json!({"program": "echo", "args": ["hi"]})).unwrap(), "hi\n");
    failure_of(call(&granted, "exec", touch).unwrap_err());
    assert!(!marker.exists());
    assert_alive(&granted);
}

#[test]
fn fuel_limits_compute_when_enabled() {
    let dir = TestDir::new();
    dir.install(support::test_plugins(), "hostile");
    let rt = dir.open(
        r#"
        [sandbox]
        fuel = true
        [plugins.hostile]
        limits = { fuel = 50000000, timeout_ms = 60000 }
        "#,
    );
    let start = Instant::now();
    assert_eq!(
        limit_of(call(&rt, "spin", json!({})).unwrap_err()),
        Limit::Fuel { units: 50_000_000 }
    );
    assert!(start.elapsed() < Duration::from_secs(30), "fuel, not the deadline, stopped it");
    assert_alive(&rt);
}

#[test]
fn many_failures_in_a_row_leave_the_host_healthy() {
    let (_dir, rt) = hostile("");
    for _ in 0..20 {
        call(&rt, "panic", json!({"message": "again"})).unwrap_err();
        call(&rt, "recurse", json!({"depth": 100_000_000u64})).unwrap_err();
        assert_alive(&rt);
    }
}
