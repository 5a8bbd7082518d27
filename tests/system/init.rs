//! `reson init`: the binary alone, copied out of the checkout, sets up a
//! directory with the plugins built into it, and a first `reson run` there
//! works offline on the scripted provider.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};
use support::TestDir;

/// The `reson` binary copied into `dir/bin`, so nothing can come from
/// beside the binary in the checkout.
fn installed_binary(dir: &TestDir) -> PathBuf {
    let bin = dir.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let reson = bin.join("reson");
    support::install_executable(Path::new(env!("CARGO_BIN_EXE_reson")), &reson);
    reson
}

/// Runs `reson` in `cwd` with none of the RESON_* settings of the test's
/// environment and a HOME of its own, beside its `bin/`.
fn reson(reson: &Path, cwd: &Path, args: &[&str]) -> Output {
    reson_env(reson, cwd, args, &[])
}

/// [`reson`] with `env` set too.
fn reson_env(reson: &Path, cwd: &Path, args: &[&str], env: &[(&str, &std::ffi::OsStr)]) -> Output {
    let home = reson.parent().and_then(Path::parent).expect("DIR/bin/reson").join("home");
    let mut command = Command::new(reson);
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("RESON_") {
            command.env_remove(key);
        }
    }
    command
        .current_dir(cwd)
        .env("HOME", home)
        .env_remove("OPENAI_API_KEY")
        .args(["--cache-dir", &support::cache_dir().to_string_lossy()])
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("running reson")
}

/// The bundled plugins' names, from the freshly built plugins directory.
fn bundled_names() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(support::plugins())
        .unwrap()
        .filter_map(|e| {
            let path = e.unwrap().path();
            (path.extension()? == "wasm")
                .then(|| path.file_stem().unwrap().to_string_lossy().into())
        })
        .collect();
    names.sort();
    names
}

#[test]
fn init_sets_up_a_directory_where_a_first_run_works_offline() {
    let dir = TestDir::new();
    let bin = installed_binary(&dir);
    let out = reson(&bin, dir.path(), &["init", "project"]);
    assert!(out.status.success(), "{}", support::shown(&out));
    let project = dir.path().join("project");

    // Every bundled plugin is there, byte for byte what plugins/build.sh
    // builds from this checkout.
    let names = bundled_names();
    assert!(names.len() >= 11, "bundled plugins: {names:?}");
    for name in &names {
        for ext in ["wasm", "toml"] {
            let file = format!("{name}.{ext}");
            assert_eq!(
                std::fs::read(project.join("plugins").join(&file)).unwrap(),
                std::fs::read(support::plugins().join(&file)).unwrap(),
                "{file} differs from the bundled build"
            );
        }
    }
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains(&format!("{} plugins loaded", names.len())), "{said}");
    assert!(said.contains("reson run"), "init says what to do next: {said}");

    let out = reson(&bin, &project, &["run", "What is in the workspace?"]);
    assert!(out.status.success(), "{}", support::shown(&out));
    let said = String::from_utf8_lossy(&out.stdout);
    // The tools really ran, in the granted workspace only.
    assert!(said.contains("the file tools may read and write here"), "read ran: {said}");
    let readme = project.join("workspace/README.md").canonicalize().unwrap();
    assert!(said.contains(&readme.display().to_string()), "glob ran: {said}");
    assert!(support::shown(&out).contains("completed (2 model calls"), "{}", support::shown(&out));

    // `traces show` without an id shows the latest trace, its tool calls
    // with their arguments, and no goal still in progress once it ended.
    let shown = reson(&bin, &project, &["traces", "show"]);
    assert!(shown.status.success(), "{}", support::shown(&shown));
    let said = String::from_utf8_lossy(&shown.stdout);
    assert!(said.contains(r#"→ glob({"pattern":"**/*"}), read({"path":"README.md"})"#), "{said}");
    assert!(!said.contains("(current)") && !said.contains("[>]"), "{said}");
    assert!(String::from_utf8_lossy(&shown.stderr).contains("(the latest trace, tr_"));

    // The README's continue, on the script init wrote.
    let err = String::from_utf8_lossy(&out.stderr);
    let id = err.lines().find_map(|l| l.strip_prefix("trace ")?.split(' ').next()).unwrap();
    let out = reson(&bin, &project, &["run", "--trace", id, "And now?"]);
    assert!(out.status.success(), "{}", support::shown(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("Continuing the same trace"));
    assert!(
        support::shown(&out).contains(&format!("trace {id} completed")),
        "{}",
        support::shown(&out)
    );

    let out = reson(&bin, &project, &["traces", "list", "--json"]);
    assert!(out.status.success(), "{}", support::shown(&out));
    let traces: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(traces.as_array().map(Vec::len), Some(1), "one trace: {traces}");
    assert!(project.join("traces").is_dir(), "traces live in the project");

    // Outside the grant, the same tools are refused.
    let out = reson(&bin, &project, &["tool", "call", "read", r#"{"path":"/etc/passwd"}"#]);
    assert_eq!(out.status.code(), Some(3), "{}", support::shown(&out));
}

#[test]
fn init_again_keeps_the_users_files_and_replaces_plugins_only_with_force() {
    let dir = TestDir::new();
    let bin = installed_binary(&dir);
    let project = dir.path().join("project");
    let out = reson(&bin, dir.path(), &["init", "project"]);
    assert!(out.status.success(), "{}", support::shown(&out));

    let config = project.join("reson.toml");
    let mine = format!("{}\n# mine\n", std::fs::read_to_string(&config).unwrap());
    std::fs::write(&config, &mine).unwrap();
    let out = reson(&bin, &project, &["init"]);
    assert!(out.status.success(), "{}", support::shown(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("kept your own"),
        "{}",
        support::shown(&out)
    );
    assert_eq!(std::fs::read_to_string(&config).unwrap(), mine);

    let echo = project.join("plugins/echo.wasm");
    std::fs::write(&echo, b"not the bundled echo").unwrap();
    let out = reson(&bin, dir.path(), &["init", "project"]);
    assert_eq!(out.status.code(), Some(6), "{}", support::shown(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("echo.wasm") && err.contains("--force"), "{err}");
    assert_eq!(std::fs::read(&echo).unwrap(), b"not the bundled echo", "left alone");

    let out = reson(&bin, dir.path(), &["init", "--force", "project"]);
    assert!(out.status.success(), "{}", support::shown(&out));
    assert_eq!(
        std::fs::read(&echo).unwrap(),
        std::fs::read(support::plugins().join("echo.wasm")).unwrap()
    );
    assert_eq!(std::fs::read_to_string(&config).unwrap(), mine, "--force keeps the config");
    let out = reson(&bin, &project, &["tool", "call", "echo", r#"{"text":"back"}"#]);
    assert!(out.status.success(), "{}", support::shown(&out));
}

#[test]
fn init_into_a_file_is_refused() {
    let dir = TestDir::new();
    let bin = installed_binary(&dir);
    std::fs::write(dir.path().join("taken"), "a file").unwrap();
    let out = reson(&bin, dir.path(), &["init", "taken"]);
    assert_eq!(out.status.code(), Some(6), "{}", support::shown(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("taken is not a directory"));
    assert_eq!(std::fs::read_to_string(dir.path().join("taken")).unwrap(), "a file");
}

/// The traces a project holds.
fn traces(project: &Path) -> usize {
    std::fs::read_dir(project.join("traces")).map_or(0, |d| d.count())
}

/// A config that cannot be met stops before anything runs, saying where
/// and what to do: a grant of a missing directory (the file and line), a
/// section for a plugin that is not there (the nearest name), a real
/// provider without a model (both places to set it) or without its key
/// (the variable). No trace is left behind.
#[test]
fn a_config_that_cannot_be_met_is_refused_naming_the_file_the_line_and_the_fix() {
    let dir = TestDir::new();
    let bin = installed_binary(&dir);
    assert!(reson(&bin, dir.path(), &["init", "project"]).status.success());
    let project = dir.path().join("project");
    let config = project.join("reson.toml");
    let written = std::fs::read_to_string(&config).unwrap();
    let grant = "dirs = [{ path = \"workspace\", access = \"read-write\" }]";
    let broken = written.replacen(
        grant,
        "dirs = [{ path = \"workspace\", access = \"read-write\" },\n        \
         { path = \"no-such-dir\", access = \"read\" }]",
        1,
    ) + "\n[plugins.fss]\n";
    std::fs::write(&config, &broken).unwrap();
    let line = broken.lines().position(|l| l.contains("no-such-dir")).unwrap() + 1;
    let fss = broken.lines().position(|l| l == "[plugins.fss]").unwrap() + 1;
    let problem = format!(
        "reson.toml:{line}: [plugins.fs] dirs: no-such-dir does not exist (create it, or remove \
         the grant)"
    );

    let out = reson(&bin, &project, &["run", "What is in the workspace?"]);
    assert_eq!(out.status.code(), Some(6), "{}", support::shown(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&problem), "{}", support::shown(&out));
    assert!(err.contains(&format!("reson.toml:{fss}: [plugins.fss]: no plugin `fss`")), "{err}");
    assert!(err.contains("(did you mean `fs`?)"), "{err}");
    assert!(!err.contains("ERROR") && !err.contains("WARN"), "no log lines: {err}");
    assert_eq!(traces(&project), 0, "nothing ran");

    // Calling a tool of the plugin that cannot load says why it is missing.
    let out = reson(&bin, &project, &["tool", "call", "read", r#"{"path":"README.md"}"#]);
    assert_eq!(out.status.code(), Some(2), "{}", support::shown(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("plugin `fs` failed to load: {problem}")), "{err}");

    std::fs::write(&config, &written).unwrap();
    let out = reson(&bin, &project, &["run", "--provider", "openai", "hi"]);
    assert_eq!(out.status.code(), Some(6), "{}", support::shown(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("provider `openai` needs a model: pass --model NAME"), "{err}");
    assert!(err.contains("[plugins.openai] config = { model = \"NAME\" }"), "{err}");

    let out =
        reson(&bin, &project, &["run", "--provider", "openai", "--model", "gpt-4o-mini", "hi"]);
    assert_eq!(out.status.code(), Some(6), "{}", support::shown(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("OPENAI_API_KEY is not set"), "{err}");

    // A local compatible server named `localhost` while the grant says
    // 127.0.0.1: a grant problem, named, not an authentication failure.
    let local = format!(
        "{written}\n[plugins.openai]\nhttp = [\"127.0.0.1:11434\"]\n\
         config = {{ base_url = \"http://localhost:11434/v1\", api_key_secret = \"\", model = \"m\" }}\n"
    );
    std::fs::write(&config, local).unwrap();
    let out = reson(&bin, &project, &["run", "--provider", "openai", "hi"]);
    assert_eq!(out.status.code(), Some(6), "{}", support::shown(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("add \"localhost:11434\" to [plugins.openai] http"), "{err}");
    assert!(err.contains("the two are not one host"), "{err}");
    assert_eq!(traces(&project), 0, "no trace for a run that could not start");
}

/// Long work says what it is doing, at a terminal only: `reson init` with
/// nothing compiled yet shows which component it compiles, and leaves no
/// trace of it in its output once done; without a terminal it prints none.
#[test]
fn compiling_shows_a_spinner_at_a_terminal_and_nothing_elsewhere() {
    let dir = TestDir::new();
    let bin = installed_binary(&dir);
    let cold = dir.path().join("cold-cache");
    let command = format!(
        "{} --cache-dir {} init project; echo EXIT=$?; sleep 600",
        bin.display(),
        cold.display()
    );
    let tmux = support::Tmux::start(dir.path(), &command);
    let screen = tmux.until(".wasm (");
    assert!(screen.contains("compiling "), "{screen}");
    let screen = tmux.until("EXIT=");
    assert!(screen.contains("EXIT=0"), "{screen}");
    assert!(!screen.contains("compiling "), "the spinner's line is cleared: {screen}");

    let out = Command::new(&bin)
        .current_dir(dir.path())
        .args(["--cache-dir", &dir.path().join("cold-too").to_string_lossy(), "init", "again"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", support::shown(&out));
    assert!(
        !support::shown(&out).contains("compiling"),
        "no spinner in a pipe: {}",
        support::shown(&out)
    );
}

/// `out`'s stdout, which must come from a success.
fn ok(out: Output) -> String {
    assert!(out.status.success(), "{}", support::shown(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The trace id on the first `trace tr_…` line of a run's stderr.
fn trace_id(out: &Output) -> String {
    let err = String::from_utf8_lossy(&out.stderr);
    let line = err.lines().find_map(|l| l.strip_prefix("trace ")).expect("a trace line");
    line.split(' ').next().unwrap().to_owned()
}

/// A new user's day, with the binary alone and no terminal: init, a run,
/// its continue, a run that writes and a rewind that puts the file back,
/// then `reson serve` picking up a Python tool made, built and installed
/// while it runs. Nothing waits longer than the work it waits for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_users_flow_from_init_to_a_python_tool_hot_reloaded_into_serve() {
    let dir = TestDir::new();
    let bin = installed_binary(&dir);
    ok(reson(&bin, dir.path(), &["init", "project"]));
    let project = dir.path().join("project");

    let first = reson(&bin, &project, &["run", "What is in the workspace?"]);
    ok(first.clone());
    let id = trace_id(&first);
    ok(reson(&bin, &project, &["run", "--trace", &id, "And now?"]));

    // Writing asks first; with no terminal, --approve answers up front.
    let scripts = project.join("scripts");
    let note = serde_json::json!({ "turns": [
        { "text": "noting", "tool_calls": [{ "name": "write", "arguments": { "path": "note.txt", "content": "draft" } }] },
        { "text": "noted" },
    ]});
    std::fs::write(scripts.join("note.json"), note.to_string()).unwrap();
    std::fs::write(scripts.join("over.json"), r#"{"turns":[{"text":"over"}]}"#).unwrap();
    let wrote = reson(
        &bin,
        &project,
        &["run", "--script", "scripts/note.json", "--approve", "once", "write a note"],
    );
    ok(wrote.clone());
    assert!(project.join("workspace/note.txt").is_file());
    let rewound = reson(
        &bin,
        &project,
        &[
            "run",
            "--trace",
            &trace_id(&wrote),
            "--after",
            "1",
            "--restore-files",
            "--script",
            "scripts/over.json",
            "start over",
        ],
    );
    ok(rewound.clone());
    assert!(
        String::from_utf8_lossy(&rewound.stderr).contains("restored 1 file:"),
        "{}",
        support::shown(&rewound)
    );
    assert!(!project.join("workspace/note.txt").exists(), "the rewind put the workspace back");

    // A Python tool, served without a restart.
    std::fs::write(
        scripts.join("greet.json"),
        r#"{"turns":[{"text":"greeting","tool_calls":[{"name":"greeter","arguments":{"who":"Ada"}}]},{"text":"done"}]}"#,
    )
    .unwrap();
    let mut config = std::fs::read_to_string(project.join("reson.toml")).unwrap();
    config.push_str("\n[permissions]\nrules = [{ decision = \"allow\", tool = \"greeter\" }]\n");
    std::fs::write(project.join("reson.toml"), config).unwrap();
    let greet = scripts.join("greet.json").to_string_lossy().into_owned();
    let server = support::api::ServerProcess::start(&project, &["--script", &greet]).await;
    let path = support::python::path_with_toolchain();
    let greeter = dir.path().join("greeter");
    let env = [("PATH", path.as_os_str())];
    let greeter_arg = greeter.to_string_lossy().into_owned();
    ok(reson_env(
        &bin,
        dir.path(),
        &["plugins", "new", "greeter", "--lang", "python", &greeter_arg],
        &env,
    ));
    ok(reson_env(&bin, dir.path(), &["plugins", "build", &greeter_arg], &env));
    let installed = Instant::now();
    ok(reson(&bin, &project, &["plugins", "install", &greeter_arg]));
    // Its first load compiles 18 MB of Python: that is the wait.
    loop {
        let plugins = server.api.get("/api/plugins").await.expect(200);
        let ready = plugins
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == "greeter" && p["status"]["state"] == "ready");
        if ready {
            break;
        }
        assert!(installed.elapsed() < Duration::from_secs(600), "{plugins:#}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let id = server.api.start("greet Ada", serde_json::json!({})).await;
    server.api.finish(&id, 0).await;
    let messages = server.api.messages(&id, "main_path").await;
    let tool = messages["messages"].as_array().unwrap().iter().find(|m| m["role"] == "tool");
    let said = tool.and_then(|t| t["content"][0]["text"].as_str()).unwrap_or_default();
    assert_eq!(said, "Hello, Ada!", "{messages:#}");
    let log = server.output.lock().unwrap().join("\n");
    assert!(log.contains("plugins changed: greeter added"), "{log}");
    // A rebuilt Python component is never byte for byte the one before,
    // so the server compiled it, and said so.
    assert!(log.contains("compiling ") && log.contains("greeter.wasm ("), "{log}");
}
