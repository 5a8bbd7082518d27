//! JavaScript tools through the real host: a project made, built and
//! installed by the CLI in a temporary directory outside the repository and
//! called; the example tool (`examples/js-tool`, using `http` and `config`);
//! and the hostile cases for a StarlingMonkey guest (deadline, memory cap,
//! files outside the grant), each with its typed error. componentize-js comes
//! from npm through `support::js`, installed once into target/toolchains/js.

use crate::support;

use reson::plugin::{CallContext, CallError, Limit, PluginStatus, Runtime, ToolFailure, TrapKind};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::{Duration, Instant};
use support::TestDir;
use support::llm_server::{LlmServer, Reply};
use tokio_util::sync::CancellationToken;

const TIMEOUT_MS: u64 = 1_000;
const MEMORY_MB: u64 = 64;
const OUTPUT_BYTES: u64 = 65_536;

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

async fn hostile_wasm() -> &'static Path {
    static WASM: tokio::sync::OnceCell<PathBuf> = tokio::sync::OnceCell::const_new();
    WASM.get_or_init(|| async {
        let wasm = support::js::guest("hostile", "hostile");
        // Compile once, before the tests run in parallel: each would
        // otherwise compile the 12 MB engine at the same time.
        let (_dir, _runtime) = open_hostile(&wasm).await;
        wasm
    })
    .await
}

async fn open_hostile(wasm: &Path) -> (TestDir, Runtime) {
    open_hostile_with(wasm, MEMORY_MB).await
}

async fn open_hostile_with(wasm: &Path, memory_mb: u64) -> (TestDir, Runtime) {
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
        limits = {{ timeout_ms = {TIMEOUT_MS}, memory_mb = {memory_mb}, output_bytes = {OUTPUT_BYTES} }}
        "#
    )).await;
    (dir, runtime)
}

async fn hostile() -> (TestDir, Runtime) {
    open_hostile(hostile_wasm().await).await
}

async fn call(rt: &Runtime, tool: &str, args: serde_json::Value) -> Result<String, CallError> {
    rt.call_tool(tool, &args.to_string(), &CallContext::default()).await.map(|o| o.text)
}

/// The plugin still serves after whatever came before.
async fn assert_alive(rt: &Runtime) {
    assert_eq!(call(rt, "echo", json!({"text": "still here"})).await.unwrap(), "still here");
}

fn limit_of(err: CallError) -> Limit {
    match err {
        CallError::LimitExceeded { plugin, limit, .. } if plugin == "hostile" => limit,
        other => panic!("expected a limit, got {other:?}"),
    }
}

#[tokio::test]
async fn js_infinite_loop_hits_the_deadline() {
    let (_dir, rt) = hostile().await;
    for tool in ["spin", "host_spin"] {
        let start = Instant::now();
        let err = call(&rt, tool, json!({})).await.unwrap_err();
        let took = start.elapsed();
        assert!(err.to_string().contains("time limit of 1000 ms"), "{tool}: {err}");
        assert_eq!(limit_of(err), Limit::Timeout { ms: TIMEOUT_MS }, "{tool}");
        assert!(took >= Duration::from_millis(TIMEOUT_MS), "{tool} stopped early: {took:?}");
        let bound = Duration::from_millis(TIMEOUT_MS) + support::MARGIN;
        assert!(took < bound, "{tool} stopped late: {took:?}");
        assert_alive(&rt).await;
    }
}

#[tokio::test]
async fn js_memory_bomb_hits_the_memory_cap() {
    let (_dir, rt) = hostile().await;
    let err = call(&rt, "grow", json!({})).await.unwrap_err();
    assert_eq!(limit_of(err), Limit::Memory { bytes: MEMORY_MB << 20 });
    assert_alive(&rt).await;
}

#[tokio::test]
async fn js_memory_cap_below_what_the_engine_needs_fails_the_load_and_says_why() {
    // The engine's own heap does not fit in 4 MiB: `list()` cannot run, so
    // the plugin serves nothing, and says it was the memory limit.
    let (_dir, rt) = open_hostile_with(hostile_wasm().await, 4).await;
    let info = rt.plugins().into_iter().find(|p| p.name == "hostile").expect("listed");
    match info.status {
        PluginStatus::Failed(reason) => {
            assert!(reason.contains("memory limit of 4 MiB"), "{reason}")
        }
        other => panic!("expected a failed load, got {other:?}"),
    }
    assert!(matches!(
        call(&rt, "echo", json!({"text": "hi"})).await,
        Err(CallError::UnknownTool { .. })
    ));
}

#[tokio::test]
async fn js_output_flood_hits_the_output_cap() {
    let (_dir, rt) = hostile().await;
    assert_eq!(call(&rt, "flood", json!({"bytes": 1000})).await.unwrap().len(), 1000);
    let err = call(&rt, "flood", json!({"bytes": 100_000})).await.unwrap_err();
    assert_eq!(limit_of(err), Limit::Output { returned: 100_000, bytes: OUTPUT_BYTES });
    assert_alive(&rt).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn js_cancelled_spin_stops_promptly() {
    let (_dir, rt) = hostile().await;
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        trigger.cancel();
    });
    let context = CallContext { cancel: Some(cancel), ..CallContext::default() };
    let start = Instant::now();
    let err = rt.call_tool("spin", "{}", &context).await.unwrap_err();
    assert!(matches!(err, CallError::Cancelled { .. }), "{err:?}");
    let bound = Duration::from_millis(200) + support::MARGIN;
    assert!(start.elapsed() < bound, "{:?}", start.elapsed());
    assert_alive(&rt).await;
}

#[tokio::test]
async fn js_reads_outside_the_grant_are_refused_by_the_host() {
    let (dir, rt) = hostile().await;
    let ws = dir.workspace();
    let outside = dir.path().canonicalize().unwrap().join("outside/secret.txt");
    std::os::unix::fs::symlink(&outside, ws.join("link")).unwrap();
    std::fs::write(ws.join("mine.txt"), "inside").unwrap();
    assert_eq!(call(&rt, "read", json!({"path": ws.join("mine.txt")})).await.unwrap(), "inside");
    assert_eq!(call(&rt, "read", json!({"path": "mine.txt"})).await.unwrap(), "inside", "relative");

    let attempts = [
        outside.to_string_lossy().into_owned(),
        format!("{}/../outside/secret.txt", ws.display()),
        "../outside/secret.txt".to_owned(),
        format!("{}/link", ws.display()),
        "/etc/passwd".to_owned(),
    ];
    for path in attempts {
        match call(&rt, "read", json!({ "path": path })).await.expect_err(&path) {
            CallError::Tool { failure: ToolFailure::Denied(message), .. } => {
                assert!(!message.contains("TOP-SECRET"), "{path}: leaked");
                // The guest offered the path to WASI, and the host's
                // filesystem said no.
                assert!(message.contains("not-permitted"), "{path}: {message}");
            }
            other => panic!("{path}: expected the tool's denial, got {other:?}"),
        }
        assert_alive(&rt).await;
    }
}

#[tokio::test]
async fn js_exception_is_a_typed_trap_and_the_plugin_recovers() {
    let (_dir, rt) = hostile().await;
    for _ in 0..3 {
        match call(&rt, "throw", json!({})).await.unwrap_err() {
            CallError::Trapped { plugin, tool, trap } => {
                assert_eq!((plugin.as_str(), tool.as_str()), ("hostile", "throw"));
                assert!(!matches!(trap, TrapKind::StackOverflow), "{trap:?}");
            }
            other => panic!("expected a trap, got {other:?}"),
        }
        assert_alive(&rt).await;
    }
}

#[tokio::test]
async fn js_runaway_recursion_is_contained() {
    let (_dir, rt) = hostile().await;
    assert_eq!(call(&rt, "recurse", json!({"depth": 3})).await.unwrap(), "depth: 3");
    // SpiderMonkey's own limit throws (the uncaught exception traps), or
    // the wasm stack overflows first: a trap either way, never the host.
    let err = call(&rt, "recurse", json!({"depth": 100_000_000u64})).await.unwrap_err();
    assert!(matches!(err, CallError::Trapped { .. }), "{err:?}");
    assert_alive(&rt).await;
}

#[tokio::test]
async fn js_commands_run_only_when_granted() {
    let (_dir, rt) = hostile().await;
    for (program, args) in [("cat", json!(["/etc/passwd"])), ("/bin/sh", json!(["-c", "id"]))] {
        match call(&rt, "run", json!({"program": program, "args": args})).await.unwrap_err() {
            CallError::Tool { failure: ToolFailure::Denied(message), .. } => {
                // The host's process import refused it (`denied`), rather
                // than the command failing to start.
                assert!(message.starts_with("denied: "), "{program}: {message}");
                assert!(!message.contains("root:"), "{program}: ran");
            }
            other => panic!("{program}: expected a denial, got {other:?}"),
        }
    }
    assert_alive(&rt).await;
}

#[tokio::test]
async fn js_failures_in_a_row_leave_the_host_healthy() {
    let (_dir, rt) = hostile().await;
    for tool in ["grow", "throw", "spin", "grow"] {
        assert!(call(&rt, tool, json!({})).await.is_err(), "{tool}");
    }
    assert_alive(&rt).await;
}

// ---------------------------------------------------------------------------
// Made, built, installed and called through the CLI, outside the repository.

/// The component `reson plugins build` made in `project` (checked there).
fn build(project: &Path, name: &str) -> PathBuf {
    let built = ok(&reson(project, &["plugins", "build"]));
    let wasm = project.join("dist").join(format!("{name}.wasm"));
    assert!(built.contains(&format!("dist/{name}.wasm")), "{built}");
    assert!(wasm.is_file() && project.join(format!("dist/{name}.toml")).is_file());
    wasm
}

#[test]
fn a_js_tool_is_made_built_installed_and_called_from_outside_the_repository() {
    let outside = tempfile::tempdir().unwrap();
    let project = outside.path().join("greeter");
    let project_arg = project.to_string_lossy().into_owned();
    let made =
        ok(&reson(outside.path(), &["plugins", "new", "hello-js", "--lang", "js", &project_arg]));
    assert!(made.contains("reson plugins build"), "{made}");
    for file in ["reson-plugin.toml", "README.md", "app.js", "package.json", "wit/worlds.wit"] {
        assert!(project.join(file).is_file(), "{file} is missing");
    }
    let package: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(project.join("package.json")).unwrap())
            .unwrap();
    assert_eq!(package["name"], "hello-js");
    assert_eq!(
        package["devDependencies"]["@bytecodealliance/componentize-js"],
        support::js::COMPONENTIZE_JS
    );
    let readme = std::fs::read_to_string(project.join("README.md")).unwrap();
    for command in
        ["npm install", "reson plugins build", "reson plugins install", "reson tool call hello_js"]
    {
        assert!(readme.contains(command), "{readme}");
    }

    build(&project, "hello-js");

    let plugins = outside.path().join("plugins");
    let plugins_arg = plugins.to_string_lossy().into_owned();
    ok(&reson(
        outside.path(),
        &["--plugins-dir", &plugins_arg, "plugins", "install", &project_arg],
    ));
    assert!(plugins.join("hello-js.wasm").is_file() && plugins.join("hello-js.toml").is_file());

    let call = |args: &str| {
        exit(&reson(
            outside.path(),
            &["--plugins-dir", &plugins_arg, "tool", "call", "hello_js", args],
        ))
    };
    let (code, said) = call(r#"{"who":"Ada"}"#);
    assert_eq!((code, said.trim()), (0, "Hello, Ada!"));
    let (code, said) = call(r#"{"who":"Grace"}"#);
    assert_eq!((code, said.trim()), (0, "Hello, Grace!"));
    // The tool's own refusal is a tool error (exit 1) the model can read...
    let (code, said) = call(r#"{"who":"  "}"#);
    assert_eq!(code, 1, "{said}");
    assert!(said.contains("invalid arguments") && said.contains("`who` is empty"), "{said}");
    // ...and arguments off the tool's schema never reach it (exit 2).
    let (code, said) = call(r#"{"whom":"Ada"}"#);
    assert_eq!(code, 2, "{said}");

    let listed = ok(&reson(outside.path(), &["--plugins-dir", &plugins_arg, "plugins", "list"]));
    assert!(listed.contains("hello-js") && listed.contains("ready"), "{listed}");
}

#[test]
fn a_js_build_without_its_toolchain_says_how_to_install_it() {
    let outside = tempfile::tempdir().unwrap();
    let project = outside.path().join("p");
    ok(&reson(
        outside.path(),
        &["plugins", "new", "lonely", "--lang", "js", &project.to_string_lossy()],
    ));
    let build_with_path = |path: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_reson"))
            .current_dir(&project)
            .env("PATH", path)
            .args(["plugins", "build"])
            .output()
            .expect("running reson");
        assert_eq!(out.status.code(), Some(6), "{}", text(&out));
        assert!(!project.join("dist/lonely.wasm").exists());
        text(&out)
    };
    // Node is there, componentize-js is not.
    let node = Command::new("sh").args(["-c", "command -v node"]).output().unwrap();
    let node_dir = Path::new(String::from_utf8_lossy(&node.stdout).trim())
        .parent()
        .expect("node is on PATH")
        .to_path_buf();
    let said = build_with_path(&node_dir.to_string_lossy());
    assert!(said.contains("needs componentize-js"), "{said}");
    assert!(said.contains("npm install"), "{said}");
    assert!(
        said.contains(&format!(
            "@bytecodealliance/componentize-js@{}",
            support::js::COMPONENTIZE_JS
        )),
        "{said}"
    );
    // Not even Node.
    let empty = tempfile::tempdir().unwrap();
    let said = build_with_path(&empty.path().to_string_lossy());
    assert!(said.contains("needs Node.js"), "{said}");
}

#[test]
fn a_js_source_that_does_not_parse_fails_the_build() {
    let outside = tempfile::tempdir().unwrap();
    let project = outside.path().join("p");
    ok(&reson(
        outside.path(),
        &["plugins", "new", "broken", "--lang", "js", &project.to_string_lossy()],
    ));
    std::fs::write(project.join("app.js"), "export const tool = {\n  list() { return [ };\n")
        .unwrap();
    let out = reson(&project, &["plugins", "build"]);
    let (code, said) = exit(&out);
    assert_eq!(code, 6, "{said}");
    assert!(said.contains("componentize-js failed"), "{said}");
    assert!(!project.join("dist/broken.wasm").exists());
}

// ---------------------------------------------------------------------------
// The example: `examples/js-tool` (`rates`), copied out of the repository
// and built as its README says.

fn example_project() -> &'static Path {
    static PROJECT: OnceLock<tempfile::TempDir> = OnceLock::new();
    PROJECT
        .get_or_init(|| {
            let dir = tempfile::tempdir().unwrap();
            let source = support::root().join("examples/js-tool");
            for entry in std::fs::read_dir(&source).unwrap() {
                let entry = entry.unwrap();
                std::fs::copy(entry.path(), dir.path().join(entry.file_name())).unwrap();
            }
            ok(&reson(dir.path(), &["wit", "wit"]));
            build(dir.path(), "rates");
            dir
        })
        .path()
}

/// A directory with `rates` installed and `reson.toml` holding `plugin`
/// (the `[plugins.rates]` table's body).
fn rates_dir(plugin: &str) -> tempfile::TempDir {
    let project = example_project();
    let dir = tempfile::tempdir().unwrap();
    ok(&reson(
        dir.path(),
        &[
            "--plugins-dir",
            &dir.path().join("plugins").to_string_lossy(),
            "plugins",
            "install",
            &project.to_string_lossy(),
        ],
    ));
    std::fs::write(
        dir.path().join("reson.toml"),
        format!(
            "plugins_dir = \"plugins\"\nlock_file = \"reson.lock\"\n\n[plugins.rates]\n{plugin}\n"
        ),
    )
    .unwrap();
    dir
}

fn convert(dir: &Path, args: serde_json::Value) -> (i32, String) {
    exit(&reson(dir, &["--config", "reson.toml", "tool", "call", "convert", &args.to_string()]))
}

#[test]
fn the_js_example_converts_through_its_granted_http_and_config() {
    let server = LlmServer::start(vec![
        Reply::json(200, &json!({"base": "USD", "rates": {"EUR": 0.92, "JPY": 151.3}})),
        Reply::json(200, &json!({"base": "EUR", "rates": {"USD": 1.087}})),
        Reply::json(503, &json!({"error": "down"})),
    ]);
    let dir = rates_dir(&format!(
        "http = [\"{}\"]\nconfig = {{ rates_url = \"{}/rates\" }}",
        server.addr,
        server.url()
    ));
    let (code, said) = convert(dir.path(), json!({"amount": 100, "from": "USD", "to": "EUR"}));
    assert_eq!((code, said.trim()), (0, "100 USD = 92.00 EUR (rate 0.92)"));
    let (code, said) = convert(dir.path(), json!({"amount": 2, "from": "EUR", "to": "GBP"}));
    assert_eq!(code, 1, "{said}");
    assert!(said.contains("invalid arguments: no rate from EUR to GBP"), "{said}");
    let (code, said) = convert(dir.path(), json!({"amount": 1, "from": "USD", "to": "EUR"}));
    assert_eq!(code, 1, "{said}");
    assert!(said.contains("rates service answered 503"), "{said}");
    let requests = server.requests();
    let paths: Vec<_> = requests.iter().map(|r| r.path.as_str()).collect();
    assert_eq!(paths, ["/rates?base=USD", "/rates?base=EUR", "/rates?base=USD"]);
    assert_eq!(requests[0].header("accept"), Some("application/json"));

    // Off the schema (a lowercase code): the tool never runs, no request.
    let (code, said) = convert(dir.path(), json!({"amount": 1, "from": "usd", "to": "EUR"}));
    assert_eq!(code, 2, "{said}");
    assert_eq!(server.requests().len(), 3);
}

#[test]
fn the_js_example_is_refused_what_it_was_not_granted() {
    let server = LlmServer::start(vec![Reply::json(200, &json!({"rates": {"EUR": 0.92}}))]);
    let args = json!({"amount": 1, "from": "USD", "to": "EUR"});
    // The URL is configured but its host is not granted: the host refuses.
    let dir = rates_dir(&format!("config = {{ rates_url = \"{}/rates\" }}", server.url()));
    let (code, said) = convert(dir.path(), args.clone());
    assert_eq!(code, 3, "{said}");
    assert!(said.contains("denied") && said.contains("rates service"), "{said}");
    // A grant for another port of the same address is no grant for this one.
    let other = rates_dir(&format!(
        "http = [\"127.0.0.1:1\"]\nconfig = {{ rates_url = \"{}/rates\" }}",
        server.url()
    ));
    let (code, said) = convert(other.path(), args.clone());
    assert_eq!(code, 3, "{said}");
    // Granted but not configured: the tool says what is missing.
    let unset = rates_dir(&format!("http = [\"{}\"]", server.addr));
    let (code, said) = convert(unset.path(), args);
    assert_eq!(code, 1, "{said}");
    assert!(said.contains("no `rates_url`"), "{said}");
    assert!(server.requests().is_empty(), "a refused request reached the server");
}

// ---------------------------------------------------------------------------
// Loaded from the compiled-code cache; what that and a call cost is the
// `js_tool` bench's to print (`cargo bench -p reson --bench js_tool`).

#[tokio::test]
async fn a_js_tool_loads_from_the_cache_and_answers_fresh_and_kept_warm() {
    let js = hostile_wasm().await;
    let manifest = std::fs::read_to_string(support::test_plugins().join("hostile.toml")).unwrap();
    let warm = format!("{manifest}\n[instance]\nkeep_warm = true\n");
    for manifest in [manifest.as_str(), &warm] {
        let dir = TestDir::new();
        std::fs::copy(js, dir.plugins().join("hostile.wasm")).unwrap();
        std::fs::write(dir.plugins().join("hostile.toml"), manifest).unwrap();
        let config =
            "[plugins.hostile]\ndirs = [{ path = \"workspace\", access = \"read-write\" }]";
        let runtime = dir.open(config).await;
        // Compiling the engine takes seconds: a load must never do it again.
        assert!(runtime.plugins()[0].from_cache, "{:?}", runtime.plugins()[0].status);
        for _ in 0..3 {
            assert_alive(&runtime).await;
        }
    }
}
