//! The hostile suite: guests that misbehave in every way we know of. Each
//! one is contained with the right typed error, the host stays up, and the
//! next call on the same plugin works.

use crate::support;

use reson::capability::effects::Effects;
use reson::plugin::{CallContext, CallError, Limit, Runtime, ToolFailure, TrapKind};
use serde_json::json;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::{Duration, Instant};
use support::TestDir;
use tokio_util::sync::CancellationToken;

const TIMEOUT_MS: u64 = 1_000;
const MEMORY_MB: u64 = 32;
const OUTPUT_BYTES: u64 = 65_536;

async fn hostile(extra: &str) -> (TestDir, Runtime) {
    let limits = format!(
        "timeout_ms = {TIMEOUT_MS}, memory_mb = {MEMORY_MB}, output_bytes = {OUTPUT_BYTES}"
    );
    hostile_limited(&limits, extra).await
}

/// [`hostile`] under `limits` (the inside of the plugin's `limits` table).
async fn hostile_limited(limits: &str, extra: &str) -> (TestDir, Runtime) {
    let dir = TestDir::new();
    dir.install(support::test_plugins(), "hostile");
    std::fs::create_dir_all(dir.path().join("readonly")).unwrap();
    std::fs::create_dir_all(dir.path().join("outside")).unwrap();
    std::fs::write(dir.path().join("outside/secret.txt"), "TOP-SECRET").unwrap();
    let config = format!(
        r#"
        [plugins.hostile]
        dirs = [{{ path = "workspace", access = "read-write" }}, {{ path = "readonly", access = "read" }}]
        limits = {{ {limits} }}
        {extra}
        "#
    );
    let runtime = dir.open(&config).await;
    (dir, runtime)
}

async fn call(rt: &Runtime, tool: &str, args: serde_json::Value) -> Result<String, CallError> {
    rt.call_tool(tool, &args.to_string(), &CallContext::default()).await.map(|o| o.text)
}

/// The plugin still serves after whatever came before.
async fn assert_alive(rt: &Runtime) {
    assert_eq!(call(rt, "echo", json!({"text": "still here"})).await.unwrap(), "still here");
}

/// Waits until the call recording into `effects` has its instance slot
/// and is entering the guest: the runtime names the plugin serving it
/// only then.
async fn until_in_guest(effects: &Effects) {
    support::wait_for("the call to enter the guest", || effects.call().is_some()).await;
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

#[tokio::test]
async fn infinite_loop_hits_the_deadline() {
    let (_dir, rt) = hostile("").await;
    let start = Instant::now();
    let err = call(&rt, "spin", json!({})).await.unwrap_err();
    let took = start.elapsed();
    assert_eq!(limit_of(err.clone()), Limit::Timeout { ms: TIMEOUT_MS });
    assert!(took >= Duration::from_millis(TIMEOUT_MS), "stopped early: {took:?}");
    assert!(took < Duration::from_millis(TIMEOUT_MS) + support::MARGIN, "stopped late: {took:?}");
    assert!(err.to_string().contains("time limit of 1000 ms"), "{err}");
    assert_alive(&rt).await;
}

#[tokio::test]
async fn loop_over_host_calls_hits_the_deadline() {
    let (_dir, rt) = hostile("").await;
    let start = Instant::now();
    let err = call(&rt, "host_spin", json!({})).await.unwrap_err();
    assert_eq!(limit_of(err), Limit::Timeout { ms: TIMEOUT_MS });
    assert!(start.elapsed() < Duration::from_millis(TIMEOUT_MS) + support::MARGIN);
    assert_alive(&rt).await;
}

#[tokio::test]
async fn sleeping_in_a_host_call_is_cut_at_the_deadline() {
    let (_dir, rt) = hostile("").await;
    assert_eq!(call(&rt, "nap", json!({"ms": 10})).await.unwrap(), "slept 10 ms");
    let start = Instant::now();
    let err = call(&rt, "nap", json!({"ms": 60_000})).await.unwrap_err();
    assert_eq!(limit_of(err), Limit::Timeout { ms: TIMEOUT_MS });
    assert!(
        start.elapsed() < Duration::from_millis(TIMEOUT_MS) + support::MARGIN,
        "slept on: {:?}",
        start.elapsed()
    );
    assert_alive(&rt).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_call_stops_promptly() {
    let (_dir, rt) = hostile("").await;
    for (tool, args) in [("nap", json!({"ms": 60_000})), ("spin", json!({}))] {
        let cancel = CancellationToken::new();
        let context = CallContext { cancel: Some(cancel.clone()), ..CallContext::default() };
        let start = Instant::now();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            cancel.cancel();
        });
        let err = rt.call_tool(tool, &args.to_string(), &context).await.unwrap_err();
        assert!(matches!(err, CallError::Cancelled { .. }), "{tool}: {err:?}");
        assert!(
            start.elapsed() < Duration::from_millis(200) + support::MARGIN,
            "{tool}: {:?}",
            start.elapsed()
        );
    }
    assert_alive(&rt).await;
}

#[tokio::test]
async fn memory_bomb_hits_the_memory_cap() {
    let (_dir, rt) = hostile("").await;
    let err = call(&rt, "grow", json!({})).await.unwrap_err();
    assert_eq!(limit_of(err), Limit::Memory { bytes: MEMORY_MB << 20 });
    assert_alive(&rt).await;
}

#[tokio::test]
async fn stack_overflow_is_a_typed_trap() {
    let (_dir, rt) = hostile("").await;
    assert_eq!(call(&rt, "recurse", json!({"depth": 3})).await.unwrap(), "depth: 3");
    match call(&rt, "recurse", json!({"depth": 100_000_000u64})).await.unwrap_err() {
        CallError::Trapped { plugin, tool, trap } => {
            assert_eq!((plugin.as_str(), tool.as_str()), ("hostile", "recurse"));
            assert_eq!(trap, TrapKind::StackOverflow);
        }
        other => panic!("expected a trap, got {other:?}"),
    }
    assert_alive(&rt).await;
}

#[tokio::test]
async fn panic_carries_its_message() {
    let (_dir, rt) = hostile("").await;
    match call(&rt, "panic", json!({"message": "boom at the guest"})).await.unwrap_err() {
        CallError::Trapped { trap: TrapKind::Panic(message), .. } => {
            assert!(message.contains("boom at the guest"), "{message}");
        }
        other => panic!("expected a panic trap, got {other:?}"),
    }
    assert_alive(&rt).await;
}

#[tokio::test]
async fn output_flood_hits_the_output_cap() {
    let (_dir, rt) = hostile("").await;
    assert_eq!(call(&rt, "flood", json!({"bytes": 1000})).await.unwrap().len(), 1000);
    let err = call(&rt, "flood", json!({"bytes": 100_000})).await.unwrap_err();
    assert_eq!(limit_of(err), Limit::Output { returned: 100_000, bytes: OUTPUT_BYTES });
    assert_alive(&rt).await;
}

#[tokio::test]
async fn reads_outside_the_grant_are_refused() {
    let (dir, rt) = hostile("").await;
    let ws = dir.workspace();
    let outside = dir.path().canonicalize().unwrap().join("outside/secret.txt");
    std::os::unix::fs::symlink(&outside, ws.join("link")).unwrap();
    std::fs::write(ws.join("mine.txt"), "inside").unwrap();
    assert_eq!(call(&rt, "read", json!({"path": ws.join("mine.txt")})).await.unwrap(), "inside");
    assert_eq!(
        call(&rt, "read", json!({"path": "mine.txt"})).await.unwrap(),
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
        let err = call(&rt, "read", json!({ "path": path })).await.unwrap_err();
        let failure = failure_of(err.clone());
        assert!(!format!("{failure:?}").contains("TOP-SECRET"), "{path}: leaked");
        assert!(
            matches!(failure, ToolFailure::Denied(_) | ToolFailure::Failed(_)),
            "{path}: {failure:?}"
        );
        assert_alive(&rt).await;
    }
}

#[tokio::test]
async fn writes_into_a_read_only_grant_are_refused() {
    let (dir, rt) = hostile("").await;
    let ro = dir.path().join("readonly").canonicalize().unwrap();
    let ws = dir.workspace();
    assert_eq!(
        call(&rt, "write", json!({"path": ws.join("ok.txt"), "content": "yes"})).await.unwrap(),
        "wrote 3 bytes"
    );
    assert_eq!(std::fs::read_to_string(ws.join("ok.txt")).unwrap(), "yes");
    let err =
        call(&rt, "write", json!({"path": ro.join("no.txt"), "content": "x"})).await.unwrap_err();
    failure_of(err);
    assert!(!ro.join("no.txt").exists());
    let err =
        call(&rt, "write", json!({"path": dir.path().join("outside/new.txt"), "content": "x"}))
            .await
            .unwrap_err();
    failure_of(err);
    assert!(!dir.path().join("outside/new.txt").exists());
    assert_alive(&rt).await;
}

#[tokio::test]
async fn the_host_environment_is_not_inherited() {
    let (_dir, rt) = hostile("").await;
    assert!(std::env::vars().count() > 0);
    assert_eq!(call(&rt, "env", json!({})).await.unwrap(), "vars: 0");
}

#[tokio::test]
async fn sockets_are_closed() {
    let (_dir, rt) = hostile("").await;
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    failure_of(call(&rt, "connect", json!({ "addr": addr })).await.unwrap_err());
    assert!(listener.accept().is_err(), "the guest reached the listener");
    assert_alive(&rt).await;
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

#[tokio::test]
async fn http_reaches_only_granted_hosts() {
    let (addr, hits) = http_server();
    let (_dir, rt) = hostile("").await;
    let err = call(&rt, "http", json!({"url": format!("http://{addr}/x")})).await.unwrap_err();
    match failure_of(err) {
        ToolFailure::Denied(message) => assert!(message.contains("not granted"), "{message}"),
        other => panic!("expected a denial, got {other:?}"),
    }
    assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 0, "the request went out");
    assert_alive(&rt).await;

    let (_dir, granted) = hostile(&format!("http = [\"{addr}\"]")).await;
    assert_eq!(
        call(&granted, "http", json!({"url": format!("http://{addr}/x")})).await.unwrap(),
        "status: 200\nhello"
    );
    assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 1);
    let other_port = format!("http://127.0.0.1:1/{}", "x");
    failure_of(call(&granted, "http", json!({ "url": other_port })).await.unwrap_err());
}

#[tokio::test]
async fn processes_run_only_when_granted() {
    let (dir, rt) = hostile("").await;
    let marker = dir.path().join("marker");
    let touch = json!({"program": "touch", "args": [marker]});
    match failure_of(call(&rt, "exec", touch.clone()).await.unwrap_err()) {
        ToolFailure::Denied(message) => assert!(message.contains("touch"), "{message}"),
        other => panic!("expected a denial, got {other:?}"),
    }
    assert!(!marker.exists());

    // A jailed command's start is host work a loaded machine can stall far
    // past the guests' 1 s deadline; what is tested here is the grant.
    let (_dir, granted) = hostile_limited("timeout_ms = 60000", r#"process = ["echo *"]"#).await;
    assert_eq!(
        call(&granted, "exec", json!({"program": "echo", "args": ["hi"]})).await.unwrap(),
        "hi\n"
    );
    failure_of(call(&granted, "exec", touch).await.unwrap_err());
    assert!(!marker.exists());
    assert_alive(&granted).await;
}

#[tokio::test]
async fn fuel_limits_compute_when_enabled() {
    let dir = TestDir::new();
    dir.install(support::test_plugins(), "hostile");
    let rt = dir
        .open(
            r#"
        [sandbox]
        fuel = true
        [plugins.hostile]
        limits = { fuel = 50000000, timeout_ms = 60000 }
        "#,
        )
        .await;
    // Fuel, not the deadline, stopped it: that would be a time limit.
    assert_eq!(
        limit_of(call(&rt, "spin", json!({})).await.unwrap_err()),
        Limit::Fuel { units: 50_000_000 }
    );
    assert_alive(&rt).await;
}

#[tokio::test]
async fn many_failures_in_a_row_leave_the_host_healthy() {
    let (_dir, rt) = hostile("").await;
    for _ in 0..20 {
        call(&rt, "panic", json!({"message": "again"})).await.unwrap_err();
        call(&rt, "recurse", json!({"depth": 100_000_000u64})).await.unwrap_err();
        assert_alive(&rt).await;
    }
}

/// More calls than instance slots wait their turn rather than fail, and
/// calls sleeping in the guest overlap on a couple of workers instead of
/// holding a thread each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_sleeping_calls_overlap_on_few_threads() {
    // It counts the process's threads.
    if !support::alone(module_path!(), "two_hundred_sleeping_calls_overlap_on_few_threads") {
        return;
    }
    const CALLS: usize = 200;
    const NAP_MS: u64 = 100;
    let (_dir, rt) = hostile("[sandbox]\nmax_instances = 16").await;
    assert_alive(&rt).await;

    let threads = support::ThreadPeak::start();

    let start = Instant::now();
    let mut calls = tokio::task::JoinSet::new();
    for _ in 0..CALLS {
        let rt = rt.clone();
        calls.spawn(async move { call(&rt, "nap", json!({ "ms": NAP_MS })).await });
    }
    let mut done = 0;
    while let Some(result) = calls.join_next().await {
        threads.sample();
        assert_eq!(result.unwrap().unwrap(), format!("slept {NAP_MS} ms"));
        done += 1;
    }
    let took = start.elapsed();
    let peak = threads.stop().await;

    assert_eq!(done, CALLS);
    assert!(
        took >= Duration::from_millis(NAP_MS * (CALLS as u64).div_ceil(16)),
        "more than 16 calls ran at once: {took:?}"
    );
    let in_turn = Duration::from_millis(NAP_MS * CALLS as u64);
    assert!(took < in_turn, "the calls did not overlap: {took:?}");
    assert!(peak <= 64, "{peak} OS threads at the peak");
    assert_alive(&rt).await;
}

/// A guest that never stops computing gives its worker back at every epoch
/// tick: on a single-threaded runtime another call runs to its end while
/// the spin is still going.
#[tokio::test]
async fn a_spinning_guest_yields_its_worker_to_other_calls() {
    // Far past how long the echo may take on a slow machine: only an echo
    // that waited for the spin to end sees it end.
    let (_dir, rt) = hostile_limited("timeout_ms = 30000", "").await;
    assert_alive(&rt).await;
    let (stop, effects) = (CancellationToken::new(), Effects::record());
    let context = CallContext {
        cancel: Some(stop.clone()),
        effects: Some(effects.clone()),
        ..CallContext::default()
    };
    let spin = tokio::spawn({
        let rt = rt.clone();
        async move { rt.call_tool("spin", "{}", &context).await }
    });
    until_in_guest(&effects).await;
    assert_eq!(call(&rt, "echo", json!({"text": "meanwhile"})).await.unwrap(), "meanwhile");
    assert!(!spin.is_finished(), "the echo waited for the spin to end");
    stop.cancel();
    let err = spin.await.unwrap().unwrap_err();
    assert!(matches!(err, CallError::Cancelled { .. }), "{err:?}");
}

/// A call waiting for an instance slot is cancelled at once, without
/// waiting for the slot, and the call holding the slot is not disturbed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_waiting_for_a_slot_can_be_cancelled() {
    // The holder naps until the test ends it, so that the slot is held
    // however slowly the waiter comes to be cancelled.
    let (_dir, rt) = hostile_limited("timeout_ms = 120000", "[sandbox]\nmax_instances = 1").await;
    let (release, effects) = (CancellationToken::new(), Effects::record());
    let context = CallContext {
        cancel: Some(release.clone()),
        effects: Some(effects.clone()),
        ..CallContext::default()
    };
    let holder = tokio::spawn({
        let rt = rt.clone();
        async move { rt.call_tool("nap", r#"{"ms":60000}"#, &context).await }
    });
    until_in_guest(&effects).await;
    let cancel = CancellationToken::new();
    let context = CallContext { cancel: Some(cancel.clone()), ..CallContext::default() };
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        cancel.cancel();
    });
    let err = rt.call_tool("echo", r#"{"text":"x"}"#, &context).await.unwrap_err();
    assert!(matches!(err, CallError::Cancelled { .. }), "{err:?}");
    // It ended while the slot was still held: it never waited for it.
    assert!(!holder.is_finished(), "the holder was cancelled with it, or it waited for the slot");
    release.cancel();
    let err = holder.await.unwrap().unwrap_err();
    assert!(matches!(err, CallError::Cancelled { .. }), "{err:?}");
    assert_alive(&rt).await;
}

/// A payload for the `raw-output` guest: mode 0, the 36-byte return area of
/// `result<tool-output, tool-error>`, then the bytes its pointers (offsets
/// here) point into. See tests/guests/raw-output.
fn raw_answer(area: &[(usize, u32)], bytes: &[u8], heap: &[u8]) -> String {
    let mut payload = vec![0u8; 37];
    for &(at, value) in area {
        payload[1 + at..5 + at].copy_from_slice(&value.to_le_bytes());
    }
    for (i, &b) in bytes.iter().enumerate() {
        payload[1 + i] |= b;
    }
    payload.extend_from_slice(heap);
    let hex: String = payload.iter().map(|b| format!("{b:02x}")).collect();
    json!({ "p": hex }).to_string()
}

#[tokio::test]
async fn malformed_answers_across_the_wit_boundary_end_in_an_error_naming_the_tool() {
    let dir = TestDir::new();
    dir.install(support::test_plugins(), "raw-output");
    let rt = dir.open("").await;
    let call = |args: String| {
        let rt = &rt;
        async move { rt.call_tool("output", &args, &CallContext::default()).await }
    };
    let well_formed = raw_answer(&[(8, 5)], &[], b"hello");
    assert_eq!(call(well_formed.clone()).await.unwrap().text, "hello");
    let refused = raw_answer(&[(4, 3), (8, 0), (12, 8)], &[1], b"bad args");
    match call(refused).await.unwrap_err() {
        CallError::Tool { failure: ToolFailure::Failed(message), .. } => {
            assert_eq!(message, "bad args")
        }
        other => panic!("expected the guest's own error, got {other:?}"),
    }
    let hostile = [
        ("not UTF-8", raw_answer(&[(8, 3)], &[], b"\xff\xfe\x80")),
        ("a length past memory", raw_answer(&[(8, 0x7fff_ffff)], &[], b"x")),
        ("a result discriminant of 7", raw_answer(&[], &[7], b"")),
        ("a return area past memory", {
            let hex: String =
                [1u8, 0xf0, 0xff, 0xff, 0xff].iter().map(|b| format!("{b:02x}")).collect();
            json!({ "p": hex }).to_string()
        }),
        ("a trap", json!({ "p": "02" }).to_string()),
    ];
    for (what, args) in hostile {
        let err = call(args).await.expect_err(what);
        let message = err.to_string();
        assert!(message.contains("raw-output") || message.contains("output"), "{what}: {message}");
        eprintln!("{what}: {message}");
        assert_eq!(call(well_formed.clone()).await.unwrap().text, "hello", "after {what}");
    }
}
