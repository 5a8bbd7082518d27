//! JavaScript tools through the real host: a project made, built and
//! installed by the CLI in a temporary directory outside the repository and
//! called; the example tool (`examples/js-tool`, using `http` and `config`);
//! and the hostile cases for a StarlingMonkey guest (deadline, memory cap,
//! files outside the grant), each with its typed error. componentize-js comes
//! from npm through `support::js`, installed once into target/toolchains/js.

mod support;

use reson::plugin::{CallContext, CallError, Limit, Runtime, ToolFailure, TrapKind};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::{Duration, Instant};
use support::TestDir;
use support::llm_server::{LlmServer, Reply};

const TIMEOUT_MS: u64 = 1_000;
const MEMORY_MB: u64 = 64;

/// `reson` with the JavaScript toolchain on PATH and the shared
/// compiled-code cache.
fn reson(cwd: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_reson"))
        .current_dir(cwd)
        .env_remove("RESON_CONFIG")
        .env_remove("RESON_PLUGINS_DIR")
        .env("PATH", support::js::path_with_toolchain())
        .args(["--cache-dir", &support::cache_dir().to_string_lossy()])
        .args(args)
        .output()
        .expect("running reson")
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

fn ok(out: &Output) -> String {
    assert!(out.status.success(), "{}", text(out));
    text(out)
}

/// The exit code and what was printed.
fn exit(out: &Output) -> (i32, String) {
    (out.status.code().expect("reson exited"), text(out))
}

// ---------------------------------------------------------------------------
// The hostile JavaScript guest, built once per run (and reused across runs
// while its sources are unchanged, so its compiled code stays cached).

fn hostile_wasm() -> &'static Path {
    static WASM: OnceLock<PathBuf> = OnceLock::new();
    WASM.get_or_init(|| {
        let wasm = support::js::guest("hostile", "hostile");
        // Compile once, before the tests run in parallel: each would
        // otherwise compile the 12 MB engine at the same time.
        let (_dir, _runtime) = open_hostile(&wasm);
        wasm
    })
}

fn open_hostile(wasm: &Path) -> (TestDir, Runtime) {
    let dir = TestDir::new();
    std::fs::copy(wasm, dir.plugins().join("hostile.wasm")).unwrap();
    std::fs::write(
        dir.plugins().join("hostile.toml"),
        "name = \"hostile\"\nversion = \"0.1.0\"\ndescription = \"Misbehaves.\"\n\
         [requests]\ndirs = \"read-write\"\n",
    )
    .unwrap();
    std::fs::create_dir_all(dir.path().join("outside")).unwrap();
    std::fs::write(dir.path().join("outside/secret.txt"), "TOP-SECRET").unwrap();
    let runtime = dir.open(&format!(
        r#"
        [plugins.hostile]
        dirs = [{{ path = "workspace", access = "read-write" }}]
        limits = {{ timeout_ms = {TIMEOUT_MS}, memory_mb = {MEMORY_MB} }}
        "#
    ));
    (dir, runtime)
}

fn hostile() -> (TestDir, Runtime) {
    open_hostile(hostile_wasm())
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
        CallError::LimitExceeded { plugin, limit, .. } if plugin == "hostile" => limit,
        other => panic!("expected a limit, got {other:?}"),
    }
}

#[test]
fn js_infinite_loop_hits_the_deadline() {
    let (_dir, rt) = hostile();
    for tool in ["spin", "host_spin"] {
        let start = Instant::now();
        let err = call(&rt, tool, json!({})).unwrap_err();
        let took = start.elapsed();
        assert!(err.to_string().contains("time limit of 1000 ms"), "{tool}: {err}");
        assert_eq!(limit_of(err), Limit::Timeout { ms: TIMEOUT_MS }, "{tool}");
        assert!(took >= Duration::from_millis(TIMEOUT_MS), "{tool} stopped early: {took:?}");
        assert!(took < Duration::from_millis(TIMEOUT_MS * 3), "{tool} stopped late: {took:?}");
        assert_alive(&rt);
    }
}

#[test]
fn js_memory_bomb_hits_the_memory_cap() {
    let (_dir, rt) = hostile();
    let err = call(&rt, "grow", json!({})).unwrap_err();
    assert_eq!(limit_of(err), Limit::Memory { bytes: MEMORY_MB << 20 });
    assert_alive(&rt);
}

#[test]
fn js_reads_outside_the_grant_are_refused_by_the_host() {
    let (dir, rt) = hostile();
    let ws = dir.workspace();
    let outside = dir.path().canonicalize().unwrap().join("outside/secret.txt");
    std::os::unix::fs::symlink(&outside, ws.join("link")).unwrap();
    std::fs::write(ws.join("mine.txt"), "inside").unwrap();
    assert_eq!(call(&rt, "read", json!({"path": ws.join("mine.txt")})).unwrap(), "inside");
    assert_eq!(call(&rt, "read", json!({"path": "mine.txt"})).unwrap(), "inside", "relative");

    let attempts = [
        outside.to_string_lossy().into_owned(),
        format!("{}/../outside/secret.txt", ws.display()),
        "../outside/secret.txt".to_owned(),
        format!("{}/link", ws.display()),
        "/etc/passwd".to_owned(),
    ];
    for path in attempts {
        match call(&rt, "read", json!({ "path": path })).expect_err(&path) {
            CallError::Tool { failure: ToolFailure::Denied(message), .. } => {
                assert!(!message.contains("TOP-SECRET"), "{path}: leaked");
                // The guest offered the path to WASI, and the host's
                // filesystem said no.
                assert!(message.contains("not-permitted"), "{path}: {message}");
            }
            other => panic!("{path}: expected the tool's denial, got {other:?}"),
        }
        assert_alive(&rt);
    }
}

#[test]
fn js_exception_is_a_typed_trap_and_the_plugin_recovers() {
    let (_dir, rt) = hostile();
    for _ in 0..3 {
        match call(&rt, "throw", json!({})).unwrap_err() {
            CallError::Trapped { plugin, tool, trap } => {
                assert_eq!((plugin.as_str(), tool.as_str()), ("hostile", "throw"));
                assert!(!matches!(trap, TrapKind::StackOverflow), "{trap:?}");
            }
            other => panic!("expected a trap, got {other:?}"),
        }
        assert_alive(&rt);
    }
}

#[test]
fn js_failures_in_a_row_leave_the_host_healthy() {
    let (_dir, rt) = hostile();
    for tool in ["grow", "throw", "spin", "grow"] {
        assert!(call(&rt, tool, json!({})).is_err(), "{tool}");
    }
    assert_alive(&rt);
}
