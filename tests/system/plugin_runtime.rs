//! Loading plugins and calling their tools: the bundled fs and echo
//! plugins on a real workspace, bad plugin files, the lock file, the
//! compiled-code cache, grants, and the `reson` command line.

use crate::support;

use reson::plugin::{CallContext, CallError, PluginStatus, Runtime, ToolFailure};
use serde_json::json;
use std::process::Command;
use support::TestDir;

async fn call(rt: &Runtime, tool: &str, args: serde_json::Value) -> Result<String, CallError> {
    rt.call_tool(tool, &args.to_string(), &CallContext::default()).await.map(|o| o.text)
}

fn invalid(err: CallError) -> String {
    match err {
        CallError::Tool { failure: ToolFailure::InvalidArguments(m), .. } => m,
        other => panic!("expected invalid arguments from the tool, got {other:?}"),
    }
}

async fn fs_runtime() -> (TestDir, Runtime) {
    let dir = TestDir::new();
    dir.install(support::plugins(), "fs").install(support::plugins(), "echo");
    let rt = dir
        .open(
            r#"
        [plugins.fs]
        dirs = [{ path = "workspace", access = "read-write" }]
        "#,
        )
        .await;
    (dir, rt)
}

#[tokio::test]
async fn fs_write_read_and_line_ranges() {
    let (dir, rt) = fs_runtime().await;
    let ws = dir.workspace();
    let file = ws.join("notes/todo.txt");
    let out = call(&rt, "write", json!({"path": file, "content": "one\ntwo\nthree\nfour\n"}))
        .await
        .unwrap();
    assert_eq!(out, format!("wrote 19 bytes to {}", file.display()));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "one\ntwo\nthree\nfour\n");

    let all = call(&rt, "read", json!({"path": "notes/todo.txt"})).await.unwrap();
    assert_eq!(all, "     1\tone\n     2\ttwo\n     3\tthree\n     4\tfour");
    let part = call(&rt, "read", json!({"path": file, "offset": 2, "limit": 2})).await.unwrap();
    assert_eq!(part, "     2\ttwo\n     3\tthree\n(lines 2-3 of 4)");
    let past = invalid(call(&rt, "read", json!({"path": file, "offset": 9})).await.unwrap_err());
    assert!(past.contains("past the end"), "{past}");
    let missing = call(&rt, "read", json!({"path": ws.join("nope.txt")})).await.unwrap_err();
    assert!(missing.to_string().contains("does not exist"), "{missing}");
}

#[tokio::test]
async fn fs_edit_replaces_exactly_one_match_or_refuses() {
    let (dir, rt) = fs_runtime().await;
    let file = dir.workspace().join("main.rs");
    std::fs::write(&file, "let a = 1;\nlet b = 1;\nlet c = 2;\n").unwrap();

    let ambiguous = invalid(
        call(&rt, "edit", json!({"path": file, "old_string": "= 1;", "new_string": "= 3;"}))
            .await
            .unwrap_err(),
    );
    assert!(ambiguous.contains("matches 2 times"), "{ambiguous}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "let a = 1;\nlet b = 1;\nlet c = 2;\n");

    let out = call(
        &rt,
        "edit",
        json!({"path": file, "old_string": "let b = 1;", "new_string": "let b = 5;"}),
    )
    .await
    .unwrap();
    assert_eq!(out, format!("replaced 1 occurrence in {}", file.display()));
    let all = call(
        &rt,
        "edit",
        json!({"path": file, "old_string": "let", "new_string": "const", "replace_all": true}),
    )
    .await
    .unwrap();
    assert!(all.starts_with("replaced 3 occurrences"), "{all}");
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        "const a = 1;\nconst b = 5;\nconst c = 2;\n"
    );
    let absent = invalid(
        call(&rt, "edit", json!({"path": file, "old_string": "zzz", "new_string": "y"}))
            .await
            .unwrap_err(),
    );
    assert!(absent.contains("was not found"), "{absent}");
}

#[tokio::test]
async fn fs_glob_sorts_by_modification_time() {
    let (dir, rt) = fs_runtime().await;
    let ws = dir.workspace();
    std::fs::create_dir_all(ws.join("src/deep")).unwrap();
    let old = ws.join("src/old.rs");
    let new = ws.join("src/deep/new.rs");
    std::fs::write(&old, "").unwrap();
    std::fs::write(ws.join("README.md"), "").unwrap();
    std::fs::write(&new, "").unwrap();
    let earlier = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    std::fs::File::options().write(true).open(&old).unwrap().set_modified(earlier).unwrap();

    let out = call(&rt, "glob", json!({"pattern": "**/*.rs"})).await.unwrap();
    assert_eq!(out, format!("{}\n{}", new.display(), old.display()));
    assert_eq!(call(&rt, "glob", json!({"pattern": "*.txt"})).await.unwrap(), "(no matches)");
}

#[tokio::test]
async fn fs_grep_with_regex_and_file_glob() {
    let (dir, rt) = fs_runtime().await;
    let ws = dir.workspace();
    std::fs::write(ws.join("a.rs"), "fn main() {}\nfn helper() {}\n").unwrap();
    std::fs::write(ws.join("b.txt"), "fn not_code() {}\n").unwrap();
    let out = call(&rt, "grep", json!({"pattern": r"fn \w+\(", "glob": "*.rs"})).await.unwrap();
    let a = ws.join("a.rs");
    assert_eq!(out, format!("{0}:1:fn main() {{}}\n{0}:2:fn helper() {{}}", a.display()));
    let ci =
        call(&rt, "grep", json!({"pattern": "NOT_CODE", "case_insensitive": true})).await.unwrap();
    assert!(ci.ends_with("b.txt:1:fn not_code() {}"), "{ci}");
    let bad = invalid(call(&rt, "grep", json!({"pattern": "("})).await.unwrap_err());
    assert!(bad.contains("invalid regex"), "{bad}");
}

#[tokio::test]
async fn fs_list_and_confinement() {
    let (dir, rt) = fs_runtime().await;
    let ws = dir.workspace();
    std::fs::create_dir(ws.join("sub")).unwrap();
    std::fs::write(ws.join("f.txt"), "12345").unwrap();
    assert_eq!(call(&rt, "list", json!({})).await.unwrap(), "f.txt  5\nsub/");
    let outside = call(&rt, "list", json!({"path": "/etc"})).await.unwrap_err();
    match outside {
        CallError::Tool { failure: ToolFailure::Denied(m), .. } => {
            assert!(m.contains("outside"), "{m}")
        }
        other => panic!("expected a denial, got {other:?}"),
    }
}

#[tokio::test]
async fn a_plugin_granted_nothing_sees_no_files() {
    let dir = TestDir::new();
    dir.install(support::plugins(), "fs");
    let rt = dir.open("").await;
    std::fs::write(dir.workspace().join("x.txt"), "x").unwrap();
    let err = call(&rt, "read", json!({"path": dir.workspace().join("x.txt")})).await.unwrap_err();
    assert!(matches!(err, CallError::Tool { failure: ToolFailure::Denied(_), .. }), "{err:?}");
}

#[tokio::test]
async fn arguments_are_checked_against_the_schema_before_the_call() {
    let (_dir, rt) = fs_runtime().await;
    assert_eq!(call(&rt, "echo", json!({"text": "hi"})).await.unwrap(), "hi");
    match call(&rt, "echo", json!({"text": 5})).await.unwrap_err() {
        CallError::InvalidArguments { tool, message } => {
            assert_eq!(tool, "echo");
            assert!(message.contains("/text") && message.contains("string"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    let missing = call(&rt, "echo", json!({})).await.unwrap_err().to_string();
    assert!(missing.contains("\"text\" is a required property"), "{missing}");
    let not_json = rt.call_tool("echo", "{text:", &CallContext::default()).await.unwrap_err();
    assert!(not_json.to_string().contains("not valid JSON"), "{not_json}");
}

#[tokio::test]
async fn unknown_tools_list_what_exists() {
    let (_dir, rt) = fs_runtime().await;
    let err = call(&rt, "delete_everything", json!({})).await.unwrap_err().to_string();
    assert!(err.contains("unknown tool `delete_everything`"), "{err}");
    assert!(err.contains("echo, edit, glob, grep, list, read, write"), "{err}");
}

#[tokio::test]
async fn bad_plugin_files_get_one_line_errors_and_the_rest_load() {
    let dir = TestDir::new();
    dir.install(support::plugins(), "echo");
    let plugins = dir.plugins();
    let manifest = |name: &str| {
        std::fs::write(
            plugins.join(format!("{name}.toml")),
            format!("name = \"{name}\"\nversion = \"1.0.0\"\n"),
        )
        .unwrap()
    };
    std::fs::write(plugins.join("text.wasm"), "this is not wasm").unwrap();
    manifest("text");
    std::fs::write(plugins.join("core.wasm"), b"\0asm\x01\0\0\0").unwrap();
    manifest("core");
    let echo = std::fs::read(support::plugins().join("echo.wasm")).unwrap();
    std::fs::write(plugins.join("truncated.wasm"), &echo[..echo.len() / 2]).unwrap();
    manifest("truncated");
    std::fs::copy(support::raw_guest("command"), plugins.join("command.wasm")).unwrap();
    manifest("command");
    std::fs::copy(support::raw_guest("future_contract"), plugins.join("future.wasm")).unwrap();
    manifest("future");
    std::fs::copy(support::plugins().join("echo.wasm"), plugins.join("orphan.wasm")).unwrap();
    std::fs::copy(support::plugins().join("echo.wasm"), plugins.join("misnamed.wasm")).unwrap();
    std::fs::write(plugins.join("misnamed.toml"), "name = \"other\"\nversion = \"1\"\n").unwrap();

    let rt = dir.open("").await;
    let expected = [
        ("command", "not a Reson plugin: it exports wasi:cli/run@0.2"),
        ("core", "a core WebAssembly module, not a component"),
        (
            "future",
            "built for contract reson:plugin@0.2.0, but this host speaks reson:plugin@0.1.0",
        ),
        ("misnamed", "it names the plugin `other`, but the file is `misnamed.wasm`"),
        ("orphan", "missing manifest"),
        ("text", "not a WebAssembly file"),
        ("truncated", "invalid component"),
    ];
    let plugins_info = rt.plugins();
    for (name, reason) in expected {
        let info = plugins_info.iter().find(|p| p.name == name).unwrap();
        let PluginStatus::Failed(error) = &info.status else { panic!("{name}: {:?}", info.status) };
        assert!(error.contains(reason), "{name}: {error}");
        assert!(
            error.contains(&format!("{name}.wasm")),
            "{name}: the error names the file: {error}"
        );
        assert!(!error.contains('\n'), "{name}: one line: {error}");
    }
    let echo_info = plugins_info.iter().find(|p| p.name == "echo").unwrap();
    assert_eq!(echo_info.status, PluginStatus::Ready);
    assert_eq!(call(&rt, "echo", json!({"text": "fine"})).await.unwrap(), "fine");
}

#[tokio::test]
async fn compiled_code_is_reused_from_the_cache() {
    let dir = TestDir::new();
    dir.install(support::plugins(), "echo");
    let first = dir.open("").await;
    assert_eq!(first.plugins()[0].status, PluginStatus::Ready);
    let second = dir.open("").await;
    assert!(second.plugins()[0].from_cache, "the second open loads from the cache");
    let sha = second.plugins()[0].sha256.clone().unwrap();
    let cached = std::fs::read_dir(support::cache_dir())
        .unwrap()
        .any(|e| e.unwrap().file_name().to_string_lossy().starts_with(&sha));
    assert!(cached, "the cache entry is keyed by the plugin's digest");
}

/// The files under `dir`, at any depth.
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .flat_map(|e| {
            let path = e.unwrap().path();
            if path.is_dir() { walk(&path) } else { vec![path] }
        })
        .collect()
}

/// The echo plugin in a directory of its own, with a compiled-code cache
/// of its own (`cache/` there), never compiled yet.
fn echo_with_its_own_cache() -> (TestDir, std::path::PathBuf, reson::plugin::Options) {
    let dir = TestDir::new();
    dir.install(support::plugins(), "echo");
    let cache = dir.path().join("cache");
    let mut options = dir.options("");
    options.cache_dir = cache.clone();
    (dir, cache, options)
}

#[tokio::test]
async fn a_corrupt_cache_entry_is_recompiled() {
    let (_dir, cache, options) = echo_with_its_own_cache();
    Runtime::open(options.clone()).await.unwrap();
    // Compiled code, compiled functions (`functions/`) and remembered
    // digests (`digests/`) alike.
    let mut corrupted = 0;
    for entry in walk(&cache) {
        std::fs::write(entry, b"garbage").unwrap();
        corrupted += 1;
    }
    assert!(corrupted >= 3, "a compiled entry, compiled functions and a digest");
    let rt = Runtime::open(options).await.unwrap();
    assert!(!rt.plugins()[0].from_cache);
    assert_eq!(call(&rt, "echo", json!({"text": "ok"})).await.unwrap(), "ok");
    let functions = walk(&cache.join("functions"));
    assert!(
        functions.iter().any(|f| std::fs::read(f).unwrap() != b"garbage"),
        "damaged functions were compiled again and stored whole"
    );
}

/// A component compiled again (its compiled entry gone, as after a rebuild
/// that changed little) takes its functions from the per-function cache:
/// few are compiled, so few are written again. (Not none: Cranelift's key
/// for about a tenth of them differs from one compile to the next.)
#[tokio::test]
async fn a_recompiled_component_takes_its_functions_from_the_function_cache() {
    use std::os::unix::fs::MetadataExt;
    let (_dir, cache, options) = echo_with_its_own_cache();
    let rt = Runtime::open(options.clone()).await.unwrap();
    assert!(!rt.plugins()[0].from_cache);
    let stored = |cache: &std::path::Path| {
        let mut files: Vec<_> = walk(&cache.join("functions"))
            .into_iter()
            .map(|f| {
                let meta = std::fs::metadata(&f).unwrap();
                (meta.ino(), meta.modified().unwrap(), f)
            })
            .collect();
        files.sort();
        files
    };
    let before = stored(&cache);
    assert!(before.len() > 100, "echo's functions are stored one by one ({})", before.len());

    for entry in std::fs::read_dir(&cache).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "cwasm") {
            std::fs::remove_file(path).unwrap();
        }
    }
    let rt = Runtime::open(options).await.unwrap();
    assert!(!rt.plugins()[0].from_cache, "the component itself is compiled again");
    assert_eq!(call(&rt, "echo", json!({"text": "ok"})).await.unwrap(), "ok");
    let again = stored(&cache).into_iter().filter(|f| !before.contains(f)).count();
    assert!(
        again * 4 < before.len(),
        "{again} functions compiled (and stored) again; {} were in the cache",
        before.len()
    );
}

#[tokio::test]
async fn a_changed_plugin_asking_for_more_waits_for_acceptance() {
    let dir = TestDir::new();
    dir.install(support::plugins(), "echo");
    let lock = dir.path().join("reson.lock");
    dir.open("").await;
    let locked = std::fs::read_to_string(&lock).unwrap();
    assert!(locked.contains("[plugins.echo]") && locked.contains("sha256"), "{locked}");

    // A new build that also asks for directory access and a host.
    std::fs::copy(support::test_plugins().join("echo-v2.wasm"), dir.plugins().join("echo.wasm"))
        .unwrap();
    std::fs::write(
        dir.plugins().join("echo.toml"),
        "name = \"echo\"\nversion = \"0.2.0\"\n[requests]\ndirs = \"read\"\nhttp = [\"example.com\"]\n",
    )
    .unwrap();
    let rt = dir.open("").await;
    let PluginStatus::Failed(error) = &rt.plugins()[0].status else {
        panic!("{:?}", rt.plugins()[0].status)
    };
    assert!(error.contains("now requests more"), "{error}");
    assert!(
        error.contains("http `example.com`") && error.contains("reson plugins accept echo"),
        "{error}"
    );
    assert!(matches!(
        call(&rt, "echo", json!({"text": "x"})).await,
        Err(CallError::UnknownTool { .. })
    ));

    rt.accept("echo").await.unwrap();
    assert_eq!(rt.plugins()[0].status, PluginStatus::Ready);
    assert_eq!(call(&rt, "echo", json!({"text": "x"})).await.unwrap(), "v2:x");
    assert_eq!(
        dir.open("").await.plugins()[0].status,
        PluginStatus::Ready,
        "acceptance is persisted"
    );
}

#[tokio::test]
async fn an_unchanged_component_whose_manifest_asks_for_more_waits_for_acceptance() {
    let dir = TestDir::new();
    dir.install(support::plugins(), "echo");
    dir.open("").await;
    // The same component; only the manifest beside it is edited.
    let manifest = dir.plugins().join("echo.toml");
    let mut edited = std::fs::read_to_string(&manifest).unwrap();
    assert!(!edited.contains("[requests]"), "echo asks for nothing: {edited}");
    edited.push_str("[requests]\ndirs = \"read-write\"\nhttp = [\"example.com\"]\n");
    std::fs::write(&manifest, edited).unwrap();
    let rt = dir.open("").await;
    let PluginStatus::Failed(error) = &rt.plugins()[0].status else {
        panic!("{:?}", rt.plugins()[0].status)
    };
    assert!(error.contains("now requests more"), "{error}");
    assert!(error.contains("dirs `read-write` (was `none`)"), "{error}");
    assert!(error.contains("http `example.com`"), "{error}");
    assert!(matches!(
        call(&rt, "echo", json!({"text": "x"})).await,
        Err(CallError::UnknownTool { .. })
    ));
    rt.accept("echo").await.unwrap();
    assert_eq!(call(&rt, "echo", json!({"text": "x"})).await.unwrap(), "x");
}

#[tokio::test]
async fn a_changed_plugin_asking_for_no_more_loads() {
    let dir = TestDir::new();
    dir.install(support::plugins(), "echo");
    dir.open("").await;
    std::fs::copy(support::test_plugins().join("echo-v2.wasm"), dir.plugins().join("echo.wasm"))
        .unwrap();
    let rt = dir.open("").await;
    assert_eq!(call(&rt, "echo", json!({"text": "x"})).await.unwrap(), "v2:x");
}

#[tokio::test]
async fn config_can_disable_plugins_and_narrow_tools() {
    let (dir, _) = fs_runtime().await;
    let rt = dir
        .open(
            r#"
        [plugins.echo]
        enabled = false
        [plugins.fs]
        tools = ["read", "list"]
        "#,
        )
        .await;
    let echo = rt.plugins().into_iter().find(|p| p.name == "echo").unwrap();
    assert_eq!(echo.status, PluginStatus::Disabled);
    let names: Vec<String> = rt.tools().into_iter().map(|t| t.name).collect();
    assert_eq!(names, ["list", "read"]);
    let err = call(&rt, "write", json!({"path": "x", "content": ""})).await.unwrap_err();
    assert!(matches!(err, CallError::Denied { .. }), "{err:?}");
}

fn reson(dir: &TestDir, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_reson"))
        .args(["--config", &dir.path().join("reson.toml").to_string_lossy()])
        .args(["--plugins-dir", &dir.plugins().to_string_lossy()])
        .args(["--cache-dir", &support::cache_dir().to_string_lossy()])
        .args(args)
        .output()
        .expect("running reson")
}

#[test]
fn cli_lists_plugins_and_calls_tools() {
    let dir = TestDir::new();
    dir.install(support::plugins(), "echo").install(support::plugins(), "fs");
    dir.config("[plugins.fs]\ndirs = [{ path = \"workspace\", access = \"read\" }]\n");
    std::fs::write(dir.plugins().join("junk.wasm"), "junk").unwrap();
    std::fs::write(dir.plugins().join("junk.toml"), "name = \"junk\"\nversion = \"0\"\n").unwrap();

    let out = reson(&dir, &["plugins", "list", "--json"]);
    assert!(out.status.success());
    let list: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let fs = list.as_array().unwrap().iter().find(|p| p["name"] == "fs").unwrap();
    assert_eq!(fs["world"], "tool-plugin");
    assert_eq!(fs["tools"], json!(["read", "write", "edit", "glob", "grep", "list"]));
    assert_eq!(fs["grants"]["dirs"][0]["access"], "read");
    assert_eq!(fs["status"]["state"], "ready");
    assert_eq!(fs["sha256"].as_str().unwrap().len(), 64);
    let junk = list.as_array().unwrap().iter().find(|p| p["name"] == "junk").unwrap();
    assert_eq!(junk["status"]["state"], "failed");

    let table = reson(&dir, &["plugins", "list"]);
    let table = String::from_utf8(table.stdout).unwrap();
    assert!(table.contains("fs 0.1.0  [tool-plugin]  ready"), "{table}");
    assert!(table.contains("junk ?  [-]  FAILED"), "{table}");
    // Two lines a plugin by default, access spelled as in reson.toml.
    let fs_lines: Vec<&str> = table
        .lines()
        .skip_while(|l| !l.starts_with("fs "))
        .take_while(|l| l.starts_with("fs ") || l.starts_with("    "))
        .collect();
    assert_eq!(fs_lines.len(), 2, "{table}");
    let workspace = dir.workspace();
    let reach = format!(
        "    tools read, write, edit, glob, grep, list; dirs {} (read)",
        workspace.display()
    );
    assert_eq!(fs_lines[1], reach, "{table}");
    // -v: the digest, every grant, the limits.
    let details = String::from_utf8(reson(&dir, &["plugins", "list", "-v"]).stdout).unwrap();
    assert!(
        details.contains("    sha256  ") && details.contains("    limits  timeout"),
        "{details}"
    );
    assert!(details.contains(&format!("    dirs    {} (read)", workspace.display())));

    let out = reson(&dir, &["tool", "call", "echo", r#"{"text":"from the cli"}"#]);
    assert!(out.status.success());
    assert_eq!(String::from_utf8(out.stdout).unwrap(), "from the cli\n");

    let out = reson(&dir, &["tool", "call", "nope"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8(out.stderr).unwrap().contains("unknown tool `nope`"));

    let out = reson(
        &dir,
        &[
            "tool",
            "call",
            "write",
            &json!({"path": dir.workspace().join("x"), "content": "x"}).to_string(),
        ],
    );
    assert_eq!(out.status.code(), Some(3), "a write into a read-only grant is a denial");
}

#[test]
fn cli_exit_codes_tell_limits_and_traps_apart() {
    let dir = TestDir::new();
    dir.install(support::test_plugins(), "hostile");
    dir.config("[plugins.hostile]\nlimits = { timeout_ms = 300 }\n");
    let out = reson(&dir, &["tool", "call", "spin", "--json"]);
    assert_eq!(out.status.code(), Some(4));
    let err: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        err,
        json!({"error": "limit-exceeded", "plugin": "hostile", "tool": "spin", "limit": {"limit": "timeout", "ms": 300}})
    );
    let out = reson(&dir, &["tool", "call", "panic", r#"{"message":"oh no"}"#]);
    assert_eq!(out.status.code(), Some(5));
    assert!(
        String::from_utf8(out.stderr)
            .unwrap()
            .contains("the guest panicked; its stderr says \"oh no\"")
    );
    let out = reson(&dir, &["tool", "call", "http", r#"{"url":"http://127.0.0.1:9/"}"#]);
    assert_eq!(out.status.code(), Some(3));
}
