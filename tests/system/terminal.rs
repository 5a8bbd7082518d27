//! What the command line prints, as a person at a terminal and a script
//! see it, through the real binary: colours only where they are wanted
//! (`--color`, `NO_COLOR`, a terminal), progress on slow work at a terminal
//! and nowhere else, JSON alone on stdout, and `tool call`'s unattended
//! answers.

use crate::support::{self, TestDir, Tmux};
use anstyle::{AnsiColor, Style};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The `reson` binary in `cwd`, on the shared compiled-code cache, with
/// none of the environment that would decide for it: the RESON_*
/// settings, and the colour variables a test sets itself.
fn reson_env(cwd: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_reson"));
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("RESON_") {
            command.env_remove(key);
        }
    }
    command
        .current_dir(cwd)
        .env_remove("NO_COLOR")
        .env_remove("CLICOLOR")
        .env_remove("CLICOLOR_FORCE")
        .envs(env.iter().copied())
        .args(["--cache-dir", &support::cache_dir().to_string_lossy()])
        .args(args)
        .output()
        .expect("running reson")
}

fn reson(cwd: &Path, args: &[&str]) -> Output {
    reson_env(cwd, args, &[])
}

/// `out`'s stdout, which must come from a success.
fn ok(out: &Output) -> String {
    assert!(out.status.success(), "{}", support::shown(out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `text` as `style` paints it.
fn painted(style: Style, text: &str) -> String {
    format!("{style}{text}{style:#}")
}

/// The shell command that runs the binary at a terminal with the colour
/// variables of the test's environment unset, `env` (`NAME=VALUE ...`)
/// set, and `args`.
fn at_terminal(env: &str, args: &str) -> String {
    format!(
        "env -u NO_COLOR -u CLICOLOR -u CLICOLOR_FORCE {env} {} --cache-dir {} {args}",
        env!("CARGO_BIN_EXE_reson"),
        support::cache_dir().display()
    )
}

/// A directory `reson init` set up, with one run that wrote
/// `workspace/note.txt` ("draft"); the directory and its project.
fn project_with_a_write() -> (TestDir, PathBuf) {
    let dir = TestDir::new();
    ok(&reson(dir.path(), &["init", "project"]));
    let project = dir.path().join("project");
    let note = json!({ "turns": [
        { "text": "noting", "tool_calls": [{ "name": "write", "arguments": { "path": "note.txt", "content": "draft" } }] },
        { "text": "noted" },
    ]});
    std::fs::write(project.join("scripts/note.json"), note.to_string()).unwrap();
    ok(&reson(
        &project,
        &["run", "--script", "scripts/note.json", "--approve", "once", "write a note"],
    ));
    (dir, project)
}

/// Colours where they are wanted and nowhere else: none in a pipe, all
/// with `--color always` (which `NO_COLOR` does not override), at a
/// terminal unless `NO_COLOR` is set or `--color never` given; JSON is
/// never coloured.
#[test]
fn colours_only_at_a_terminal_or_when_asked_and_never_with_no_color() {
    let (dir, project) = project_with_a_write();
    let green = AnsiColor::Green.on_default();
    let error = AnsiColor::Red.on_default().bold();

    // In a pipe: none, in the listing, the diff or an error.
    let list = ok(&reson(&project, &["traces", "list"]));
    let diff = ok(&reson(&project, &["traces", "diff"]));
    let missing = reson(&project, &["traces", "show", "tr_missing"]);
    assert!(list.contains("completed") && diff.contains("+draft"), "{list}{diff}");
    assert!(!list.contains('\u{1b}') && !diff.contains('\u{1b}'), "{list:?}{diff:?}");
    let err = String::from_utf8_lossy(&missing.stderr);
    assert!(err.starts_with("error: no trace tr_missing"), "{err:?}");

    // --color always: statuses, diffs and errors coloured, even under NO_COLOR.
    let always = |args: &[&str]| {
        let args = [&["--color", "always"], args].concat();
        reson_env(&project, &args, &[("NO_COLOR", "1")])
    };
    let list = ok(&always(&["traces", "list"]));
    assert!(list.contains(&painted(green, "completed")), "{list:?}");
    let diff = ok(&always(&["traces", "diff"]));
    assert!(diff.contains(&painted(green, "+draft")), "{diff:?}");
    let missing = always(&["traces", "show", "tr_missing"]);
    let err = String::from_utf8_lossy(&missing.stderr);
    assert!(err.starts_with(&painted(error, "error:")), "{err:?}");
    // clap's own help follows the flag too.
    let help = ok(&always(&["--help"]));
    assert!(help.contains('\u{1b}'), "{help:?}");
    let help = ok(&reson(&project, &["--help"]));
    assert!(!help.contains('\u{1b}'), "{help:?}");
    let json = ok(&always(&["traces", "list", "--json"]));
    assert!(!json.contains('\u{1b}'), "{json:?}");
    serde_json::from_str::<Value>(&json).expect("plain JSON");

    // At a terminal: coloured by default; not with NO_COLOR, nor --color never.
    let record = dir.path().join("terminal.log");
    let command = format!(
        "{}; echo =NO_COLOR=; {}; echo =NEVER=; {}; echo EXIT=$?; sleep 600",
        at_terminal("", "traces diff"),
        at_terminal("NO_COLOR=1", "traces diff"),
        at_terminal("", "--color never traces diff")
    );
    let tmux = Tmux::start_recorded(&project, &command, &record);
    tmux.until("EXIT=");
    let said = std::fs::read_to_string(&record).unwrap();
    let (coloured, rest) = said.split_once("=NO_COLOR=").expect("the first marker");
    let (no_color, never) = rest.split_once("=NEVER=").expect("the second marker");
    assert!(coloured.contains(&painted(green, "+draft")), "{coloured:?}");
    for plain in [no_color, never] {
        assert!(plain.contains("+draft") && !plain.contains('\u{1b}'), "{plain:?}");
    }
}

/// Every command that takes `--json` prints one JSON document on stdout
/// (`run`: one event a line) and nothing else, colours asked for and
/// warnings on: what it says besides goes to stderr. Text that could drive
/// a terminal is escaped as JSON escapes it, so it stays JSON. A rewind with
/// `--restore-files --json` lists the files it put back.
#[test]
fn every_json_output_is_json_alone_on_stdout() {
    let (_dir, project) = project_with_a_write();
    let json = |args: &[&str]| -> Value {
        let args = [&["--color", "always", "-v"], args].concat();
        let out = reson(&project, &args);
        let said = ok(&out);
        serde_json::from_str(&said)
            .unwrap_or_else(|e| panic!("{args:?}: {e}\n{}", support::shown(&out)))
    };
    let lines = |args: &[&str]| -> Vec<Value> {
        let args = [&["--color", "always", "-v"], args].concat();
        let out = reson(&project, &args);
        let said = ok(&out);
        let parsed = said.lines().map(|l| serde_json::from_str(l).map_err(|e| format!("{e}: {l}")));
        parsed
            .collect::<Result<_, _>>()
            .unwrap_or_else(|e| panic!("{args:?}: {e}\n{}", support::shown(&out)))
    };

    let plugins = json(&["plugins", "list", "--json"]);
    assert!(plugins.as_array().is_some_and(|p| p.iter().any(|p| p["name"] == "fs")), "{plugins}");
    let tools = json(&["tool", "list", "--json"]);
    assert!(tools.as_array().is_some_and(|t| t.iter().any(|t| t["name"] == "read")), "{tools}");
    let echoed = json(&["tool", "call", "echo", r#"{"text":"hi"}"#, "--json"]);
    assert_eq!(echoed["text"], "hi", "{echoed}");
    // Controls JSON leaves raw (DEL, C1, a bidi override) are escaped the
    // JSON way: safe at a terminal, and still the same value.
    let hostile = "a\u{7f}b\u{9b}c\u{202e}d";
    let args = json!({ "text": hostile }).to_string();
    let out = reson(&project, &["tool", "call", "echo", &args, "--json"]);
    let said = ok(&out);
    assert!(!said.contains(['\u{7f}', '\u{9b}', '\u{202e}']), "{said:?}");
    let echoed: Value = serde_json::from_str(&said).unwrap_or_else(|e| panic!("{e}: {said:?}"));
    assert_eq!(echoed["text"], hostile, "{echoed}");
    let traces = json(&["traces", "list", "--json"]);
    let id = traces[0]["id"].as_str().expect("a trace").to_owned();
    let shown = json(&["traces", "show", "--json"]);
    assert_eq!(shown["trace"]["id"], id.as_str(), "{shown}");
    let diff = json(&["traces", "diff", "--json"]);
    assert!(diff.as_array().is_some_and(|d| d.len() == 1), "{diff}");
    let replay = reson(&project, &["--color", "always", "traces", "replay", &id, "--json"]);
    serde_json::from_slice::<Value>(&replay.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", support::shown(&replay)));
    let saved = json(&["knowledge", "add", "ports", "staging is on 8443", "--json"]);
    assert!(saved["id"].is_string(), "{saved}");
    assert!(json(&["knowledge", "list", "--json"]).as_array().is_some_and(|k| k.len() == 1));
    assert!(json(&["knowledge", "search", "staging", "--json"]).is_array());
    assert_eq!(json(&["mcp", "list", "--json"]), json!([]));

    // The rewind before the write: the note goes, and the events say so.
    std::fs::write(project.join("scripts/over.json"), r#"{"turns":[{"text":"over"}]}"#).unwrap();
    let events = lines(&[
        "run",
        "--trace",
        &id,
        "--after",
        "1",
        "--restore-files",
        "--script",
        "scripts/over.json",
        "--json",
        "start over",
    ]);
    let restored = events.iter().find(|e| e["type"] == "files_restored").expect("files_restored");
    let removed = restored["removed"].as_array().expect("removed");
    assert!(
        removed.iter().any(|p| p.as_str().is_some_and(|p| p.ends_with("note.txt"))),
        "{restored}"
    );
    assert!(!project.join("workspace/note.txt").exists());
    assert!(events.last().is_some_and(|e| e["type"] == "finished"), "{events:?}");
}

/// A directory with the hostile test MCP server configured and every call
/// asking first.
fn asking_mcp_dir() -> TestDir {
    let dir = TestDir::new();
    let argv = [
        support::mcp::python().display().to_string(),
        support::mcp::script("hostile_server.py").display().to_string(),
    ];
    let config = format!(
        "[permissions]\ndefault = \"ask\"\n[mcp.hostile]\ncommand = {}\n",
        serde_json::to_string(&argv).unwrap()
    );
    std::fs::write(dir.path().join("reson.toml"), config).unwrap();
    dir
}

/// `tool call` of an MCP tool that asks, with no terminal: answered at once
/// by `--approve` (or `[permissions] unattended`), denied by default with
/// a line naming the flag, exit 3.
#[test]
fn tool_call_answers_an_ask_without_a_terminal_as_approve_says() {
    let dir = asking_mcp_dir();
    let call = |extra: &[&str]| {
        let args = [&["tool", "call", "hostile__echo", r#"{"text":"hi"}"#], extra].concat();
        reson(dir.path(), &args)
    };
    for denied in [call(&[]), call(&["--approve", "never"])] {
        assert_eq!(denied.status.code(), Some(3), "{}", support::shown(&denied));
        let err = String::from_utf8_lossy(&denied.stderr);
        assert!(err.contains("no one is at a terminal") && err.contains("--approve"), "{err}");
        assert!(
            !String::from_utf8_lossy(&denied.stdout).contains("hi"),
            "{}",
            support::shown(&denied)
        );
    }
    for allowed in ["once", "all"] {
        let out = call(&["--approve", allowed]);
        assert_eq!(ok(&out).trim_end(), "hi", "{}", support::shown(&out));
    }
    let config = std::fs::read_to_string(dir.path().join("reson.toml")).unwrap();
    let unattended =
        config.replace("default = \"ask\"", "default = \"ask\"\nunattended = \"once\"");
    std::fs::write(dir.path().join("reson.toml"), unattended).unwrap();
    assert_eq!(ok(&call(&[])).trim_end(), "hi");
}

/// A `componentize-py` that takes a while and writes a stand-in component.
fn slow_componentize_py(bin: &Path) {
    std::fs::create_dir_all(bin).unwrap();
    let script = bin.join("componentize-py");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\n\
             if [ \"$1\" = --version ]; then echo 'componentize-py {}'; exit 0; fi\n\
             while [ $# -gt 0 ]; do [ \"$1\" = --output ] && out=$2; shift; done\n\
             sleep 2\n\
             printf '\\0asm' > \"$out\"\n",
            support::python::COMPONENTIZE_PY
        ),
    )
    .unwrap();
    let mut perms = std::fs::metadata(&script).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&script, perms).unwrap();
}

/// `plugins build` of a Python plugin says what it is doing at a terminal
/// (the toolchain prints nothing for a minute) and clears it before
/// `built`; in a pipe it says only `built`.
#[test]
fn plugins_build_shows_its_toolchain_at_a_terminal_and_nothing_in_a_pipe() {
    let dir = TestDir::new();
    let bin = dir.path().join("bin");
    slow_componentize_py(&bin);
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let env = [("PATH", path.as_str())];
    let greeter = dir.path().join("greeter");
    let greeter_arg = greeter.to_string_lossy().into_owned();
    ok(&reson_env(
        dir.path(),
        &["plugins", "new", "greeter", "--lang", "python", &greeter_arg],
        &env,
    ));

    let record = dir.path().join("terminal.log");
    let command = format!(
        "PATH='{path}' {}; echo EXIT=$?; sleep 600",
        at_terminal("", &format!("plugins build {greeter_arg}"))
    );
    let tmux = Tmux::start_recorded(dir.path(), &command, &record);
    let screen = tmux.until("EXIT=");
    assert!(screen.contains("EXIT=0") && screen.contains("built "), "{screen}");
    assert!(!screen.contains("building greeter"), "the line is cleared: {screen}");
    let said = std::fs::read_to_string(&record).unwrap();
    assert!(said.contains("building greeter with componentize-py…"), "{said:?}");

    let out = reson_env(dir.path(), &["plugins", "build", &greeter_arg], &env);
    assert!(ok(&out).starts_with("built "), "{}", support::shown(&out));
    assert!(!support::shown(&out).contains("building"), "{}", support::shown(&out));
}

/// A web server on a free port of 127.0.0.1 that answers every request
/// with one small page, for as long as the test process runs.
fn one_page_site() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            std::thread::spawn(move || {
                use std::io::{Read, Write};
                let mut request = [0u8; 4096];
                let _ = stream.read(&mut request);
                let page = "<html><head><title>Hi</title></head><body>hello</body></html>";
                let _ = write!(
                    stream,
                    "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\n\
                     Connection: close\r\n\r\n{page}",
                    page.len()
                );
            });
        }
    });
    port
}

/// A run's first browser call starts Chromium (a second or more): at a
/// terminal the run says so until it is up, as `tool call` does; in a
/// pipe it says nothing.
#[test]
fn a_first_browser_call_says_it_starts_chromium_at_a_terminal_only() {
    support::chromium::executable();
    // The browser tests count this process's Chromium children; this one
    // is a grandchild, but two at once gain nothing on a small machine.
    let _turn = support::chromium::ONE_AT_A_TIME.blocking_lock();
    let dir = TestDir::new();
    ok(&reson(dir.path(), &["init", "project"]));
    let project = dir.path().join("project");
    let port = one_page_site();
    let url = format!("http://127.0.0.1:{port}/");
    let mut config = std::fs::read_to_string(project.join("reson.toml")).unwrap();
    config.push_str(&format!("\n[plugins.browser]\nbrowser = [\"{url}*\"]\n"));
    std::fs::write(project.join("reson.toml"), config).unwrap();
    let script = json!({ "turns": [
        { "text": "looking", "tool_calls": [{ "name": "browser_navigate", "arguments": { "url": url } }] },
        { "text": "seen" },
    ]});
    std::fs::write(project.join("scripts/browse.json"), script.to_string()).unwrap();
    let run = "run --preset browser --script scripts/browse.json 'look at the page'";

    let record = dir.path().join("terminal.log");
    let command = format!("{}; echo EXIT=$?; sleep 600", at_terminal("", run));
    let tmux = Tmux::start_recorded(&project, &command, &record);
    let screen = tmux.until("EXIT=");
    assert!(screen.contains("EXIT=0") && screen.contains("seen"), "{screen}");
    assert!(!screen.contains("starting Chromium"), "the line is cleared: {screen}");
    let said = std::fs::read_to_string(&record).unwrap();
    assert!(said.contains("starting Chromium for browser…"), "{said:?}");

    let out = reson(
        &project,
        &["run", "--preset", "browser", "--script", "scripts/browse.json", "again"],
    );
    ok(&out);
    assert!(!support::shown(&out).contains("Chromium"), "{}", support::shown(&out));

    // A tool author's `tool call` starts a browser of its own, and says so too.
    let record = dir.path().join("tool-call.log");
    let args = json!({ "url": url }).to_string();
    let call = at_terminal("", &format!("tool call browser_navigate '{args}'"));
    let tmux = Tmux::start_recorded(&project, &format!("{call}; echo EXIT=$?; sleep 600"), &record);
    let screen = tmux.until("EXIT=");
    assert!(screen.contains("EXIT=0") && screen.contains("\"Hi\""), "{screen}");
    assert!(!screen.contains("starting Chromium"), "the line is cleared: {screen}");
    assert!(!screen.contains("chromiumoxide"), "no library's log: {screen}");
    let said = std::fs::read_to_string(&record).unwrap();
    assert!(said.contains("starting Chromium for browser…"), "{said:?}");
}

/// Counts read as words (`1 attempt`, never `attempt(s)`): `mcp list` on a
/// server that cannot start.
#[test]
fn mcp_list_counts_a_down_servers_attempts_in_words() {
    let dir = TestDir::new();
    std::fs::write(
        dir.path().join("reson.toml"),
        "[mcp.gone]\ncommand = [\"/nonexistent/server\"]\n",
    )
    .unwrap();
    let listed = ok(&reson(dir.path(), &["mcp", "list"]));
    // It is restarted meanwhile, so the count may have grown by the time
    // it is listed; the words must fit it.
    let count = listed.split("[down after ").nth(1).and_then(|rest| rest.split_once(' '));
    let (n, word) = count.unwrap_or_else(|| panic!("{listed}"));
    let word = word.split(':').next().unwrap_or_default();
    assert_eq!(word, if n == "1" { "attempt" } else { "attempts" }, "{listed}");
}

/// A directory `reson init` set up, its project holding `plan.md` with
/// the one step `step` and the model's turns in `scripts/task.json`; the
/// directory and its project.
fn task_project(step: &str, turns: Value) -> (TestDir, PathBuf) {
    let dir = TestDir::new();
    ok(&reson(dir.path(), &["init", "project"]));
    let project = dir.path().join("project");
    std::fs::write(project.join("plan.md"), format!("1. {step}\n")).unwrap();
    let script = json!({ "turns": turns });
    std::fs::write(project.join("scripts/task.json"), script.to_string()).unwrap();
    (dir, project)
}

/// `reson task` at a terminal: a step's `ask_human` is put to the person
/// there, and the typed answer goes back to the step.
#[test]
fn a_task_step_asks_the_person_at_the_terminal() {
    let (_dir, project) = task_project(
        "Paint the logo",
        json!([
            { "tool_calls": [{ "name": "ask_human", "arguments": { "question": "Which colour?", "choices": ["red", "blue"] } }] },
            { "text": "painted" },
        ]),
    );
    let task = "task 'Paint it' --parser markdown-plan --plan plan.md --script scripts/task.json";
    let command = format!("{}; echo EXIT=$?; sleep 600", at_terminal("", task));
    let tmux = Tmux::start(&project, &command);
    tmux.until("? the agent asks: Which colour?");
    tmux.key("teal, please");
    tmux.key("Enter");
    let screen = tmux.until("EXIT=");
    assert!(screen.contains("EXIT=0") && screen.contains("completed  Paint the logo"), "{screen}");
    let answered = support::files_under(&project)
        .into_iter()
        .any(|file| std::fs::read_to_string(file).is_ok_and(|text| text.contains("teal, please")));
    assert!(answered, "the answer is in the task's trace: {screen}");
}

/// `reson task` with no terminal: a step's `ask` is denied at once, and
/// the task ends saying so in words (`1 call was denied`), exit 3.
#[test]
fn a_task_says_in_words_how_many_calls_were_denied_for_want_of_an_answer() {
    let (_dir, project) = task_project(
        "Write a note",
        json!([
            { "text": "noting", "tool_calls": [{ "name": "write", "arguments": { "path": "note.txt", "content": "draft" } }] },
            { "text": "could not" },
        ]),
    );
    let args = ["--parser", "markdown-plan", "--plan", "plan.md", "--script", "scripts/task.json"];
    let out = reson(&project, &[&["task", "Note it"][..], &args].concat());
    assert_eq!(out.status.code(), Some(3), "{}", support::shown(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("1 call was denied for want of an answer"), "{}", support::shown(&out));
    assert!(!project.join("workspace/note.txt").exists());
}
