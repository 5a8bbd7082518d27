//! Python tools through the real host. A project is made by `reson plugins
//! new --lang python` in a temporary directory outside the repository,
//! built with componentize-py (installed by the test setup into
//! target/toolchains/python), installed and called by the `reson` binary;
//! the example in examples/python-tool reads a page over granted `http`
//! with its site from `config`; and a hostile Python guest
//! (tests/guests/hostile-py) meets the same deadline, memory cap and file
//! grants as a Rust one, each with its typed error.

use crate::support;

use reson::plugin::{CallContext, CallError, Limit, PluginStatus, Runtime, ToolFailure, TrapKind};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};
use support::TestDir;
use support::llm_server::{LlmServer, Reply};

fn reson_with_path(cwd: &Path, path: &std::ffi::OsStr, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_reson"))
        .current_dir(cwd)
        .env_remove("RESON_CONFIG")
        .env_remove("RESON_PLUGINS_DIR")
        .env_remove("VIRTUAL_ENV")
        .env("PATH", path)
        .args(["--cache-dir", &support::cache_dir().to_string_lossy()])
        .args(args)
        .output()
        .expect("running reson")
}

/// `reson ARGS` in `cwd`, with componentize-py on its PATH.
fn reson(cwd: &Path, args: &[&str]) -> Output {
    reson_with_path(cwd, &support::python::path_with_toolchain(), args)
}

fn ok(out: &Output) -> String {
    let text =
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{text}");
    text
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `reson plugins build DIR`, then `reson plugins install DIR` into
/// `plugins`; returns the component's path in `dist/`.
fn build_and_install(project: &Path, plugins: &Path) -> PathBuf {
    let built = ok(&reson(project, &["plugins", "build", &project.to_string_lossy()]));
    let wasm = built.trim().strip_prefix("built ").expect("build says what it built").to_owned();
    let plugins_arg = plugins.to_string_lossy();
    ok(&reson(project, &["--plugins-dir", &plugins_arg, "plugins", "install", "."]));
    PathBuf::from(wasm)
}

/// Copies the files of `from` (not its subdirectories) into `to`.
fn copy_files(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_file() {
            std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
        }
    }
}

#[tokio::test]
async fn a_python_tool_is_made_built_installed_and_called_from_outside_the_repository() {
    let outside = tempfile::tempdir().unwrap();
    let project = outside.path().join("greeter");
    let project_arg = project.to_string_lossy().into_owned();
    let made = ok(&reson(
        outside.path(),
        &["plugins", "new", "py-greeter", "--lang", "python", &project_arg],
    ));
    assert!(made.contains("reson plugins build"), "{made}");
    for file in ["reson-plugin.toml", "README.md", "app.py", ".gitignore", "wit/worlds.wit"] {
        assert!(project.join(file).is_file(), "{file} is missing");
    }
    let app = std::fs::read_to_string(project.join("app.py")).unwrap();
    assert!(app.contains("\"py_greeter\"") && !app.contains("{{"), "{app}");
    let readme = std::fs::read_to_string(project.join("README.md")).unwrap();
    for command in ["reson plugins build", "reson plugins install", "reson tool call py_greeter"] {
        assert!(readme.contains(command), "{readme}");
    }

    let plugins = outside.path().join("plugins");
    let wasm = build_and_install(&project, &plugins);
    assert_eq!(wasm, project.join("dist/py-greeter.wasm"));
    assert!(plugins.join("py-greeter.wasm").is_file() && plugins.join("py-greeter.toml").is_file());

    let plugins_arg = plugins.to_string_lossy().into_owned();
    let call = |args: &str| {
        reson(outside.path(), &["--plugins-dir", &plugins_arg, "tool", "call", "py_greeter", args])
    };
    let greeted = call(r#"{"who":"Ada"}"#);
    assert_eq!(ok(&greeted).trim(), "Hello, Ada!");
    let again = call(r#"{"who":"Grace"}"#);
    assert_eq!(ok(&again).trim(), "Hello, Grace!");
    // The tool's own refusal comes back typed (exit 1), the schema's before
    // Python runs at all (exit 2).
    let empty = call(r#"{"who":"  "}"#);
    assert_eq!(empty.status.code(), Some(1), "{}", stderr(&empty));
    assert!(stderr(&empty).contains("`who` is empty"), "{}", stderr(&empty));
    let schema = call(r#"{"whom":"Ada"}"#);
    assert_eq!(schema.status.code(), Some(2), "{}", stderr(&schema));
}

#[test]
fn building_without_componentize_py_says_how_to_install_it() {
    let outside = tempfile::tempdir().unwrap();
    let project = outside.path().join("p");
    let project_arg = project.to_string_lossy().into_owned();
    ok(&reson(outside.path(), &["plugins", "new", "nopy", "--lang", "python", &project_arg]));
    let empty_path = outside.path().join("empty-bin");
    std::fs::create_dir(&empty_path).unwrap();
    let out =
        reson_with_path(&project, empty_path.as_os_str(), &["plugins", "build", &project_arg]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.contains("needs componentize-py"), "{err}");
    let pinned = format!("pip install componentize-py=={}", support::python::COMPONENTIZE_PY);
    assert!(err.contains(&pinned), "{err}");
    assert!(!project.join("dist").exists(), "nothing was built");

    // A `wit/` that lost its contract is a broken project, told how to
    // mend it; a project with no `wit/` at all builds against the host's.
    for file in std::fs::read_dir(project.join("wit")).unwrap() {
        std::fs::remove_file(file.unwrap().path()).unwrap();
    }
    let out = reson(&project, &["plugins", "build", &project_arg]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.contains("holds no contract") && err.contains("reson wit"), "{err}");
    std::fs::remove_dir(project.join("wit")).unwrap();
    let out =
        reson_with_path(&project, empty_path.as_os_str(), &["plugins", "build", &project_arg]);
    let err = stderr(&out);
    assert!(err.contains("has no wit/: building against this host's contract"), "{err}");
    assert!(err.contains("needs componentize-py"), "{err}");
    assert!(!project.join("wit").exists(), "the project is left as it was");
}

#[test]
fn the_project_s_own_venv_is_used_and_a_relative_project_path_builds() {
    let outside = tempfile::tempdir().unwrap();
    ok(&reson(outside.path(), &["plugins", "new", "local-venv", "--lang", "python", "p"]));
    let venv_bin = outside.path().join("p/.venv/bin");
    std::fs::create_dir_all(&venv_bin).unwrap();
    std::os::unix::fs::symlink(
        support::python::toolchain_bin().join("componentize-py"),
        venv_bin.join("componentize-py"),
    )
    .unwrap();
    // Nothing on PATH: only the project's .venv can build it.
    let empty_path = outside.path().join("empty-bin");
    std::fs::create_dir(&empty_path).unwrap();
    let built = reson_with_path(outside.path(), empty_path.as_os_str(), &["plugins", "build", "p"]);
    assert_eq!(ok(&built).trim(), "built p/dist/local-venv.wasm");
    let wasm = std::fs::read(outside.path().join("p/dist/local-venv.wasm")).unwrap();
    assert!(wasm.starts_with(b"\0asm") && wasm.len() > 1 << 20, "{} bytes", wasm.len());
}

#[test]
fn a_python_syntax_error_fails_the_build_with_python_s_message() {
    let outside = tempfile::tempdir().unwrap();
    let project = outside.path().join("p");
    let project_arg = project.to_string_lossy().into_owned();
    ok(&reson(outside.path(), &["plugins", "new", "broken", "--lang", "python", &project_arg]));
    std::fs::write(project.join("app.py"), "def oops(:\n").unwrap();
    // Without `wit/`, componentize-py gets the host's contract: it reads it
    // before the module, so Python's error shows the contract was whole.
    std::fs::remove_dir_all(project.join("wit")).unwrap();
    let out = reson(&project, &["plugins", "build", &project_arg]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.contains("componentize-py failed") && err.contains("SyntaxError"), "{err}");
    assert!(err.contains("building against this host's contract"), "{err}");
    assert!(!project.join("dist/broken.wasm").exists());
}

/// The example project, copied out of the repository, with its contract
/// from `reson wit`, built and installed into `home/plugins`.
fn example_in(home: &Path) {
    let project = home.join("word-stats");
    copy_files(&support::root().join("examples/python-tool"), &project);
    ok(&reson(home, &["wit", &project.join("wit").to_string_lossy()]));
    build_and_install(&project, &home.join("plugins"));
}

#[test]
fn the_example_counts_words_over_granted_http_with_its_site_from_config() {
    let home = tempfile::tempdir().unwrap();
    example_in(home.path());
    let page = "The cat and the dog and the bird.\nThe end.\n";
    let server = LlmServer::start(vec![Reply::raw(200, "text/plain", page)]);
    let other = LlmServer::start(vec![Reply::raw(200, "text/plain", "other site")]);
    let config = |grant: &str, base: &str| {
        std::fs::write(
            home.path().join("reson.toml"),
            format!(
                "plugins_dir = \"plugins\"\n[plugins.word-stats]\nhttp = [{grant:?}]\n\
                 config = {{ base_url = {base:?}, top = \"2\" }}\n"
            ),
        )
        .unwrap();
    };
    let call = || {
        reson(
            home.path(),
            &["--config", "reson.toml", "tool", "call", "word_stats", r#"{"path":"/docs/page"}"#],
        )
    };

    config(&server.addr, &server.url());
    let counted = ok(&call());
    assert_eq!(counted.trim(), "10 words, 6 distinct; most common: the (4), and (2)");
    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!((requests[0].method.as_str(), requests[0].path.as_str()), ("GET", "/docs/page"));

    // The site in config is not the granted one: the host refuses, nothing is sent.
    config(&server.addr, &other.url());
    let refused = call();
    assert_eq!(refused.status.code(), Some(3), "{}", stderr(&refused));
    assert!(stderr(&refused).contains("the host refused"), "{}", stderr(&refused));
    assert!(other.requests().is_empty(), "a request reached the ungranted site");

    // Without its setting the tool says which one it needs.
    std::fs::write(
        home.path().join("reson.toml"),
        format!("plugins_dir = \"plugins\"\n[plugins.word-stats]\nhttp = [{:?}]\n", server.addr),
    )
    .unwrap();
    let unset = call();
    assert_eq!(unset.status.code(), Some(1), "{}", stderr(&unset));
    assert!(stderr(&unset).contains("no `base_url` setting"), "{}", stderr(&unset));
    assert_eq!(server.requests().len(), 1);
}

const TIMEOUT_MS: u64 = 1_000;
const MEMORY_MB: u64 = 64;
const OUTPUT_BYTES: u64 = 65_536;

/// The hostile Python guest, built once per run by `reson plugins build`
/// and compiled once into the shared cache.
async fn hostile_build() -> &'static Path {
    static DIST: tokio::sync::OnceCell<PathBuf> = tokio::sync::OnceCell::const_new();
    DIST.get_or_init(|| async {
        let project = Path::new(env!("CARGO_TARGET_TMPDIR")).join("hostile-py");
        if project.exists() {
            std::fs::remove_dir_all(&project).unwrap();
        }
        copy_files(&support::root().join("tests/guests/hostile-py"), &project);
        std::fs::write(
            project.join("reson-plugin.toml"),
            "name = \"hostile-py\"\nversion = \"0.1.0\"\n\
             description = \"Misbehaving Python tools.\"\n[requests]\ndirs = \"read-write\"\n\
             http = [\"127.0.0.1\"]\nprocess = [\"*\"]\n",
        )
        .unwrap();
        ok(&reson(&project, &["wit", "wit"]));
        ok(&reson(&project, &["plugins", "build", "."]));
        let dist = project.join("dist");
        // Compiling an 18 MB component takes a while: do it once, before
        // the tests that share it race to.
        TestDir::new().install(&dist, "hostile-py").open("").await;
        dist
    })
    .await
}

/// A runtime serving the hostile Python guest with a read-write workspace
/// and a read-only directory, and a secret outside both.
async fn hostile() -> (TestDir, Runtime) {
    hostile_with(&format!(
        "timeout_ms = {TIMEOUT_MS}, memory_mb = {MEMORY_MB}, output_bytes = {OUTPUT_BYTES}"
    ))
    .await
}

async fn hostile_with(limits: &str) -> (TestDir, Runtime) {
    hostile_granting(limits, "").await
}

/// As [`hostile`], with `grants` added to the plugin's table.
async fn hostile_granting(limits: &str, grants: &str) -> (TestDir, Runtime) {
    let dir = TestDir::new();
    dir.install(hostile_build().await, "hostile-py");
    std::fs::create_dir_all(dir.path().join("readonly")).unwrap();
    std::fs::create_dir_all(dir.path().join("outside")).unwrap();
    std::fs::write(dir.path().join("outside/secret.txt"), "TOP-SECRET").unwrap();
    let rt = dir.open(&format!(
        r#"
        [plugins.hostile-py]
        dirs = [{{ path = "workspace", access = "read-write" }}, {{ path = "readonly", access = "read" }}]
        limits = {{ {limits} }}
        {grants}
        "#
    )).await;
    (dir, rt)
}

async fn call(rt: &Runtime, tool: &str, args: serde_json::Value) -> Result<String, CallError> {
    rt.call_tool(tool, &args.to_string(), &CallContext::default()).await.map(|o| o.text)
}

async fn assert_alive(rt: &Runtime) {
    assert_eq!(call(rt, "py_echo", json!({"text": "still here"})).await.unwrap(), "still here");
}

fn limit_of(err: CallError) -> Limit {
    match err {
        CallError::LimitExceeded { plugin, limit, .. } => {
            assert_eq!(plugin, "hostile-py");
            limit
        }
        other => panic!("expected a limit, got {other:?}"),
    }
}

fn denial_of(err: CallError) -> String {
    match err {
        CallError::Tool { failure: ToolFailure::Denied(message), .. } => message,
        other => panic!("expected the tool's denial, got {other:?}"),
    }
}

#[tokio::test]
async fn python_loops_hit_the_deadline_even_when_they_catch_everything() {
    let (_dir, rt) = hostile().await;
    for tool in ["py_spin", "py_stubborn"] {
        let start = Instant::now();
        let err = call(&rt, tool, json!({})).await.unwrap_err();
        let took = start.elapsed();
        assert_eq!(limit_of(err), Limit::Timeout { ms: TIMEOUT_MS }, "{tool}");
        assert!(took >= Duration::from_millis(TIMEOUT_MS), "{tool} stopped early: {took:?}");
        let bound = Duration::from_millis(TIMEOUT_MS) + support::MARGIN;
        assert!(took < bound, "{tool} stopped late: {took:?}");
        assert_alive(&rt).await;
    }
}

#[tokio::test]
async fn python_sleep_is_cut_at_the_deadline() {
    let (_dir, rt) = hostile().await;
    assert_eq!(call(&rt, "py_nap", json!({"ms": 10})).await.unwrap(), "slept 10 ms");
    let start = Instant::now();
    let err = call(&rt, "py_nap", json!({"ms": 60_000})).await.unwrap_err();
    assert_eq!(limit_of(err), Limit::Timeout { ms: TIMEOUT_MS });
    let bound = Duration::from_millis(TIMEOUT_MS) + support::MARGIN;
    assert!(start.elapsed() < bound, "{:?}", start.elapsed());
    assert_alive(&rt).await;
}

#[tokio::test]
async fn python_memory_bombs_hit_the_memory_cap() {
    let (_dir, rt) = hostile().await;
    assert_eq!(call(&rt, "py_grow_once", json!({"mb": 1})).await.unwrap(), "1048576");
    // Many small allocations, and one too large for the cap at once.
    for (tool, args) in [("py_grow", json!({})), ("py_grow_once", json!({"mb": 200}))] {
        let err = call(&rt, tool, args).await.unwrap_err();
        assert_eq!(limit_of(err), Limit::Memory { bytes: MEMORY_MB << 20 }, "{tool}");
        assert_alive(&rt).await;
    }
}

#[tokio::test]
async fn python_reads_outside_the_grant_are_refused() {
    let (dir, rt) = hostile().await;
    let ws = dir.workspace();
    let outside = dir.path().canonicalize().unwrap().join("outside/secret.txt");
    std::os::unix::fs::symlink(&outside, ws.join("link")).unwrap();
    std::fs::write(ws.join("mine.txt"), "inside").unwrap();
    assert_eq!(call(&rt, "py_read", json!({"path": ws.join("mine.txt")})).await.unwrap(), "inside");
    assert_eq!(call(&rt, "py_read", json!({"path": "mine.txt"})).await.unwrap(), "inside");

    let attempts = [
        outside.to_string_lossy().into_owned(),
        format!("{}/../outside/secret.txt", ws.display()),
        "../outside/secret.txt".to_owned(),
        "link".to_owned(),
        "/etc/passwd".to_owned(),
    ];
    for path in &attempts {
        let denial = denial_of(call(&rt, "py_read", json!({ "path": path })).await.unwrap_err());
        assert!(denial.contains("Error"), "{path}: {denial}");
        assert!(!denial.contains("TOP-SECRET"), "{path}: leaked");
        assert_alive(&rt).await;
    }
    // Nor can the guest see what lies outside by listing it.
    for path in ["/", "/etc", &dir.path().canonicalize().unwrap().join("outside").to_string_lossy()]
    {
        denial_of(call(&rt, "py_listdir", json!({ "path": path })).await.unwrap_err());
    }
    // An exception the tool does not catch is a typed trap naming it.
    match call(&rt, "py_read_unguarded", json!({"path": outside})).await.unwrap_err() {
        CallError::Trapped { trap: TrapKind::Panic(message), tool, .. } => {
            assert_eq!(tool, "py_read_unguarded");
            assert!(message.contains("FileNotFoundError"), "{message}");
            assert!(message.contains("read_unguarded"), "names the function: {message}");
            assert!(!message.contains("TOP-SECRET"));
        }
        other => panic!("expected a trap, got {other:?}"),
    }
    assert_alive(&rt).await;
}

#[tokio::test]
async fn python_writes_land_only_in_the_writable_grant() {
    let (dir, rt) = hostile().await;
    let readonly = dir.path().canonicalize().unwrap().join("readonly");
    assert_eq!(
        call(&rt, "py_write", json!({"path": "made.txt", "text": "ok"})).await.unwrap(),
        "written"
    );
    assert_eq!(std::fs::read_to_string(dir.workspace().join("made.txt")).unwrap(), "ok");
    for path in [
        readonly.join("x.txt").to_string_lossy().into_owned(),
        dir.path().canonicalize().unwrap().join("outside/new.txt").to_string_lossy().into_owned(),
        "/tmp/reson-python-escape.txt".to_owned(),
    ] {
        denial_of(call(&rt, "py_write", json!({ "path": path, "text": "x" })).await.unwrap_err());
        assert!(!Path::new(&path).exists(), "{path} was written");
    }
}

#[tokio::test]
async fn python_sees_no_host_environment() {
    let (_dir, rt) = hostile().await;
    let env: serde_json::Value =
        serde_json::from_str(&call(&rt, "py_environ", json!({})).await.unwrap()).unwrap();
    assert_eq!(env, json!({}), "the guest saw the host's environment");
}

#[tokio::test]
async fn python_output_floods_hit_the_output_cap() {
    let (_dir, rt) = hostile().await;
    assert_eq!(call(&rt, "py_flood", json!({"bytes": 1000})).await.unwrap().len(), 1000);
    let err = call(&rt, "py_flood", json!({"bytes": 100_000})).await.unwrap_err();
    assert_eq!(limit_of(err), Limit::Output { returned: 100_000, bytes: OUTPUT_BYTES });
    assert_alive(&rt).await;
}

#[tokio::test]
async fn python_recursion_past_its_own_guard_is_a_typed_stack_overflow() {
    let (_dir, rt) = hostile().await;
    assert_eq!(call(&rt, "py_deep", json!({"depth": 10})).await.unwrap(), "22");
    match call(&rt, "py_deep", json!({"depth": 100_000})).await.unwrap_err() {
        CallError::Trapped { trap, tool, .. } => {
            assert_eq!(tool, "py_deep");
            assert_eq!(trap, TrapKind::StackOverflow);
        }
        other => panic!("expected a stack overflow, got {other:?}"),
    }
    assert_alive(&rt).await;
}

#[tokio::test]
async fn a_memory_cap_below_what_python_needs_to_start_fails_the_load_naming_it() {
    let (_dir, rt) = hostile_with("memory_mb = 8").await;
    let info = rt.plugins().into_iter().find(|p| p.name == "hostile-py").unwrap();
    match info.status {
        PluginStatus::Failed(reason) => {
            assert!(reason.contains("memory limit of 8 MiB"), "{reason}")
        }
        other => panic!("expected a failed load, got {other:?}"),
    }
    match call(&rt, "py_echo", json!({"text": "x"})).await.unwrap_err() {
        CallError::UnknownTool { .. } => {}
        other => panic!("nothing is served, got {other:?}"),
    }
}

#[tokio::test]
async fn python_reaches_hosts_and_commands_only_when_granted() {
    let server = LlmServer::start(vec![Reply::raw(200, "text/plain", "hello")]);
    let url = format!("{}/x", server.url());
    let (_dir, bare) = hostile().await;
    let denial = denial_of(call(&bare, "py_fetch", json!({"url": url})).await.unwrap_err());
    assert!(denial.contains("HttpError_Denied"), "{denial}");
    let denial = denial_of(
        call(&bare, "py_run", json!({"program": "echo", "args": ["hi"]})).await.unwrap_err(),
    );
    assert!(denial.contains("ProcessError_Denied"), "{denial}");
    assert!(server.requests().is_empty(), "an ungranted request was sent");

    // Time enough for a jailed command beside Python on a loaded machine:
    // this test is about what is granted, not about speed.
    let limits = format!("timeout_ms = 10000, memory_mb = {MEMORY_MB}");
    let grants = format!("http = [{:?}]\nprocess = [\"echo *\"]", server.addr);
    let (_dir, granted) = hostile_granting(&limits, &grants).await;
    assert_eq!(call(&granted, "py_fetch", json!({"url": url})).await.unwrap(), "200: hello");
    assert_eq!(
        call(&granted, "py_run", json!({"program": "echo", "args": ["hi"]})).await.unwrap(),
        "hi\n"
    );
    // The grant is a pattern over the command, not a licence for any program.
    denial_of(
        call(&granted, "py_run", json!({"program": "cat", "args": ["/etc/passwd"]}))
            .await
            .unwrap_err(),
    );
}
