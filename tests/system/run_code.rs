//! The bundled `run-code` plugin (CPython built by componentize-py, which
//! the tests install from PyPI): `run_code` through real runs (scripted
//! provider) returns stdout, the last expression's value and the images the
//! code shows or saves; an interpreter is kept only for calls that ask, only
//! for their own trace, and only until the run ends; hostile code (a fork
//! bomb, an endless loop, a 2 GB allocation and one past the cap, `/etc/passwd`, a socket,
//! `ctypes`, `os.system`, `subprocess`, an ungranted fetch) each ends in a
//! clear error inside its call, and the next call is served.

use crate::support;
use reson::agent::RunConfig;
use reson::plugin::{CallContext, Runtime};
use reson::trace::{FileTraceStore, Message, Role, TraceStore};
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::Arc;
use support::TestDir;

/// Python that draws a `width` x `height` red PNG with the standard library.
const PNG: &str = "import struct, zlib
def png(width, height):
    rows = b''.join(b'\\x00' + b'\\xff\\x00\\x00' * width for _ in range(height))
    def chunk(kind, data):
        return struct.pack('>I', len(data)) + kind + data + struct.pack('>I', zlib.crc32(kind + data))
    header = struct.pack('>IIBBBBB', width, height, 8, 2, 0, 0, 0)
    return b'\\x89PNG\\r\\n\\x1a\\n' + chunk(b'IHDR', header) + chunk(b'IDAT', zlib.compress(rows)) + chunk(b'IEND', b'')
";

fn call(arguments: Value) -> Value {
    json!({ "tool_calls": [{ "name": "run_code", "arguments": arguments }] })
}

/// A directory with the scripted provider and run-code.
fn setup() -> TestDir {
    let dir = TestDir::new();
    dir.install(support::plugins(), "scripted").install(support::plugins_with_python(), "run-code");
    dir
}

/// run-code's config: the workspace granted as `access`, then `extra`.
fn grant(access: &str, extra: &str) -> String {
    format!(
        "[plugins.run-code]\ndirs = [{{ path = \"workspace\", access = \"{access}\" }}]\n{extra}"
    )
}

/// Runs `messages` to its end (continuing `trace` when given); its id.
async fn run(
    runtime: &Runtime,
    store: &Arc<FileTraceStore>,
    text: &str,
    trace: Option<String>,
) -> String {
    let runner = TestDir::scripted_runner(runtime, store.clone());
    let config = RunConfig { trace_id: trace, ..RunConfig::default() };
    let handle = runner.run(vec![Message::new(Role::User, text)], config).await.unwrap();
    let outcome = handle.wait().await.expect("the run survives its code");
    outcome.trace_id
}

async fn tool_results(store: &Arc<FileTraceStore>, trace: &str) -> Vec<Message> {
    let messages = store.get_messages(trace).await.unwrap();
    messages.into_iter().filter(|m| m.role == Role::Tool).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_gets_output_values_and_images_and_keeps_an_interpreter_only_when_asked() {
    let dir = setup();
    std::fs::write(dir.workspace().join("sales.csv"), "north,10\nsouth,20\neast,30\n").unwrap();
    let turns = vec![
        call(
            json!({ "code": "import csv\nrows = list(csv.reader(open('sales.csv')))\nprint(len(rows), 'rows')\nsum(int(r[1]) for r in rows)" }),
        ),
        call(
            json!({ "code": format!("{PNG}open('chart.png', 'wb').write(png(3, 2))\nshow(png(2, 5))") }),
        ),
        call(json!({ "code": "x = 41", "keep": true })),
        call(json!({ "code": "x + 1", "keep": true })),
        call(json!({ "code": "x" })),
        json!({ "text": "done" }),
        // The continued run: the kept interpreter went with the first run.
        call(json!({ "code": "x", "keep": true })),
        json!({ "text": "again" }),
    ];
    let runtime = dir.open_scripted(&json!({ "turns": turns }), &grant("read-write", "")).await;
    let store = dir.store();
    let trace = run(&runtime, &store, "analyse the sales", None).await;
    let results = tool_results(&store, &trace).await;
    let texts: Vec<String> = results.iter().map(Message::text).collect();
    assert_eq!(texts[0], "stdout:\n3 rows\nvalue: 60");

    let sizes = support::image_sizes(&results[1]);
    assert_eq!(sizes, [(2, 5), (3, 2)], "the shown image, then the saved one: {}", texts[1]);
    let saved = std::fs::read(dir.workspace().join("chart.png")).unwrap();
    assert!(saved.starts_with(b"\x89PNG"), "the file is in the granted workspace");

    assert_eq!(texts[2], "[a new kept interpreter]\n(no output)");
    assert_eq!(texts[3], "[kept interpreter, call 2]\nvalue: 42");
    assert!(texts[4].contains("NameError: name 'x' is not defined"), "fresh: {}", texts[4]);
    assert!(texts[4].contains("File \"<code>\", line 1"), "{}", texts[4]);
    assert_eq!(run_code_sessions(&runtime), 0, "the run ended: its interpreter went");

    // A replay keeps an interpreter of its own for the calls that kept one,
    // so they come out as they did, and ends it.
    let report = reson::replay::replay(&*store, &trace, &runtime, None, 0).await.unwrap();
    assert_eq!((report.replayed, report.divergence.is_none()), (5, true), "{report}");
    assert_eq!(run_code_sessions(&runtime), 0, "the replay's interpreter went with it");

    run(&runtime, &store, "once more", Some(trace.clone())).await;
    let results = tool_results(&store, &trace).await;
    let last = results.last().unwrap().text();
    assert!(
        last.contains("[a new kept interpreter]") && last.contains("NameError"),
        "a later run of the trace starts a new interpreter: {last}"
    );
}

fn run_code_sessions(runtime: &Runtime) -> usize {
    runtime.plugins().into_iter().find(|p| p.name == "run-code").unwrap().trace_sessions
}

async fn call_in(runtime: &Runtime, trace: Option<&str>, code: &str, keep: bool) -> String {
    let context = CallContext { trace_id: trace.map(str::to_owned), ..CallContext::default() };
    let args = json!({ "code": code, "keep": keep }).to_string();
    match runtime.call_tool("run_code", &args, &context).await {
        Ok(output) => output.text,
        Err(error) => error.to_string(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_interpreter_belongs_to_one_trace_and_ends_with_it() {
    let dir = setup();
    let runtime = dir.open(&grant("read", "")).await;
    assert!(call_in(&runtime, Some("a"), "secret = 'alpha'", true).await.contains("new kept"));
    let other = call_in(&runtime, Some("b"), "secret", true).await;
    assert!(other.contains("new kept") && other.contains("NameError"), "trace b: {other}");
    assert_eq!(run_code_sessions(&runtime), 2);
    let again = call_in(&runtime, Some("a"), "secret", true).await;
    assert!(again.ends_with("value: 'alpha'"), "trace a keeps its own: {again}");
    let fresh = call_in(&runtime, Some("a"), "secret", false).await;
    assert!(fresh.contains("NameError"), "a call that does not ask gets a fresh one: {fresh}");
    for _ in 0..2 {
        let untraced = call_in(&runtime, None, "secret = 1", true).await;
        assert!(untraced.contains("new kept"), "a call outside a trace keeps nothing: {untraced}");
    }

    runtime.end_trace("a").await;
    assert_eq!(run_code_sessions(&runtime), 1, "only trace b's is left");
    let after = call_in(&runtime, Some("a"), "secret", true).await;
    assert!(after.contains("new kept") && after.contains("NameError"), "{after}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_eight_traces_the_one_asked_longest_ago_gives_its_interpreter_up() {
    let dir = setup();
    let runtime = dir.open(&grant("read", "")).await;
    for n in 0..8 {
        call_in(&runtime, Some(&format!("t{n}")), &format!("mark = {n}"), true).await;
    }
    // t0 asks again, so t1 is now the one asked longest ago.
    assert!(call_in(&runtime, Some("t0"), "mark", true).await.ends_with("value: 0"));
    let ninth = call_in(&runtime, Some("t8"), "mark = 8", true).await;
    assert!(ninth.starts_with("[a new kept interpreter]"), "{ninth}");
    assert_eq!(run_code_sessions(&runtime), 8);
    let again = call_in(&runtime, Some("t8"), "mark", true).await;
    assert!(again.ends_with("value: 8"), "the ninth trace keeps its interpreter: {again}");
    assert!(call_in(&runtime, Some("t0"), "mark", true).await.ends_with("value: 0"));
    let given_up = call_in(&runtime, Some("t1"), "mark", true).await;
    assert!(
        given_up.contains("[a new kept interpreter]") && given_up.contains("NameError"),
        "t1's went, and its next call is told so: {given_up}"
    );
}

/// A one-shot HTTP server answering `body`; its address.
fn serve_once(body: &'static str) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        let mut request = [0u8; 4096];
        let _ = stream.read(&mut request).unwrap();
        let response = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(response.as_bytes()).unwrap();
    });
    format!("http://{address}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_code_ends_in_clear_errors_and_the_next_call_is_served() {
    let dir = setup();
    // A listener no guest may reach: nothing must connect to it.
    let bystander = TcpListener::bind("127.0.0.1:0").unwrap();
    bystander.set_nonblocking(true).unwrap();
    let port = bystander.local_addr().unwrap().port();
    let granted = serve_once("granted page");
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "fork bomb",
            "import os\nwhile True:\n    os.fork()".into(),
            "AttributeError: module 'os' has no attribute 'fork'",
        ),
        ("endless loop", "while True:\n    pass".into(), "exceeded its time limit of 4000 ms"),
        // More than a 32-bit guest can address: Python's own MemoryError.
        ("2 GB", "block = bytearray(2 * 1024**3 - 1)".into(), "MemoryError"),
        // Past the plugin's cap: the host ends the call.
        (
            "500 MB",
            "block = bytearray(500 * 1024**2)".into(),
            "exceeded its memory limit of 128 MiB",
        ),
        ("passwd", "open('/etc/passwd').read()".into(), "FileNotFoundError"),
        (
            "socket",
            format!("import socket\nsocket.socket().connect(('127.0.0.1', {port}))"),
            "PermissionError",
        ),
        ("ctypes", "import ctypes".into(), "ModuleNotFoundError: No module named 'ctypes'"),
        (
            "os.system",
            "import os\nos.system('id')".into(),
            "AttributeError: module 'os' has no attribute 'system'",
        ),
        (
            "subprocess",
            "import subprocess\nsubprocess.run(['id'])".into(),
            "wasi does not support processes",
        ),
        (
            "ungranted fetch",
            format!("fetch('http://127.0.0.1:{port}/')"),
            "is not granted to plugin `run-code`",
        ),
        ("granted fetch", format!("fetch('{granted}/page').text()"), "value: 'granted page'"),
        ("the next call", "print(1)".into(), "stdout:\n1"),
    ];
    let mut turns: Vec<Value> =
        cases.iter().map(|(_, code, _)| call(json!({ "code": code }))).collect();
    turns.push(json!({ "text": "survived" }));
    let extra =
        format!("limits = {{ timeout_ms = 4000, memory_mb = 128 }}\nhttp = [\"{granted}/*\"]\n");
    let runtime = dir.open_scripted(&json!({ "turns": turns }), &grant("read", &extra)).await;
    let store = dir.store();
    let trace = run(&runtime, &store, "try everything", None).await;
    let results = tool_results(&store, &trace).await;
    assert_eq!(results.len(), cases.len());
    for ((name, _, expected), result) in cases.iter().zip(&results) {
        let text = result.text();
        assert!(text.contains(expected), "{name}: expected {expected:?} in {text}");
    }
    assert!(
        matches!(bystander.accept(), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "no guest connected to the listener"
    );
    let stored = store.get_trace(&trace).await.unwrap().expect("the trace");
    assert_eq!(stored.status, reson::trace::TraceStatus::Completed);
}
