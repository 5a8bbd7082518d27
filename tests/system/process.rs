//! Host commands: grants and permission rules match the argv that really
//! runs, exec vectors and control variables are refused, programs come
//! from the fixed search path only, and a command's whole process group
//! dies with the call.
//!
//! Every attack tries to create a marker file; each test checks that it
//! does not exist and that the refusal says why. Guests run through the
//! `hostile` test guest's `exec` tool and the bundled `shell` plugin.

use crate::support;

use reson::agent::{AgentEvent, Hooks, PendingApprovals, Permissions, RunConfig, Runner};
use reson::plugin::{CallContext, CallError, Runtime, ToolFailure};
use reson::policy::{Decision, Rule, RuleSet};
use reson::provider::PluginProvider;
use reson::tools::ToolRegistry;
use reson::trace::{EventKind, FileTraceStore, Message, Role, TraceStore};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::TestDir;

/// The hostile guest's call limit (its manifest asks for no more).
const CALL_LIMIT: Duration = Duration::from_millis(2_000);

/// The hostile guest with the workspace granted read-write and `grant`
/// added to its grant; its commands run in the jail. The git commands
/// these tests run write `.git` (`init`, `commit`, `checkout`), which the
/// jail allows only where the grant says so (tests/jail.rs checks the
/// default), so the grant says so.
async fn hostile(grant: &str) -> (TestDir, Runtime) {
    hostile_with("", grant).await
}

/// The same with the jail turned off: the process-group mechanics that
/// hold there too are checked by the host pids a command writes down,
/// which a jailed command (in its own PID namespace) cannot know.
async fn hostile_unjailed(grant: &str) -> (TestDir, Runtime) {
    hostile_with("[sandbox]\njail = \"off\"", grant).await
}

async fn hostile_with(top: &str, grant: &str) -> (TestDir, Runtime) {
    let dir = TestDir::new();
    dir.install(support::test_plugins(), "hostile");
    std::fs::create_dir_all(dir.path().join("outside")).unwrap();
    let runtime = dir
        .open(&format!(
            r#"
        {top}
        [plugins.hostile]
        dirs = [{{ path = "workspace", access = "read-write", metadata = "read-write" }}]
        limits = {{ timeout_ms = {} }}
        {grant}
        "#,
            CALL_LIMIT.as_millis()
        ))
        .await;
    (dir, runtime)
}

async fn call(rt: &Runtime, tool: &str, args: Value) -> Result<String, CallError> {
    rt.call_tool(tool, &args.to_string(), &CallContext::default()).await.map(|o| o.text)
}

async fn exec(rt: &Runtime, program: &str, args: &[&str]) -> Result<String, CallError> {
    call(rt, "exec", json!({ "program": program, "args": args })).await
}

/// The denial message of a refused call.
fn denial(result: Result<String, CallError>) -> String {
    match result {
        Err(CallError::Tool { failure: ToolFailure::Denied(message), .. }) => message,
        other => panic!("expected a denial, got {other:?}"),
    }
}

/// Asserts that `result` is a denial mentioning every one of `words`.
fn assert_denied(result: Result<String, CallError>, words: &[&str]) {
    let message = denial(result);
    for word in words {
        assert!(message.contains(word), "{word:?} missing from {message:?}");
    }
}

/// Where an attack that got through would leave its mark: inside the
/// grant, where the jail lets a command write, so only the policy under
/// test can stop it.
fn marker(dir: &TestDir) -> PathBuf {
    dir.workspace().join("marker")
}

fn text(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

#[tokio::test]
async fn git_options_that_run_programs_are_refused() {
    let (dir, rt) = hostile(r#"process = ["git *"]"#).await;
    let m = text(&marker(&dir));
    let touch = format!("touch {m}");
    let attacks: Vec<Vec<String>> = vec![
        vec!["-c".into(), format!("alias.x=!{touch}"), "x".into()],
        vec!["-c".into(), format!("core.pager={touch}"), "log".into()],
        vec!["-c".into(), format!("core.fsmonitor={touch}"), "status".into()],
        vec![format!("-ccore.fsmonitor={touch}"), "status".into()],
        vec!["--config-env=core.pager=HOME".into(), "log".into()],
        vec!["--exec-path=/tmp".into(), "status".into()],
        vec!["fetch".into(), format!("--upload-pack={touch}"), "origin".into()],
        vec!["clone".into(), "-u".into(), touch.clone(), "x".into(), "y".into()],
        vec!["clone".into(), "-c".into(), format!("core.fsmonitor={touch}"), "a".into()],
        vec!["config".into(), "core.fsmonitor".into(), touch.clone()],
        vec!["config".into(), "--add".into(), "alias.st".into(), format!("!{touch}")],
        vec!["rebase".into(), "--exec".into(), touch.clone()],
        vec!["st".into()],
        vec!["ls-remote".into(), format!("ext::sh -c {touch}")],
    ];
    for args in attacks {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        assert_denied(exec(&rt, "git", &args).await, &["git", "exec_vectors", "refused"]);
    }
    assert!(!marker(&dir).exists());
    // The grant itself works: plain git runs.
    assert!(exec(&rt, "git", &["--version"]).await.unwrap().starts_with("git version"));
    // The search path's git under another spelling is the same program.
    let dirs = ["/usr/local/bin", "/usr/bin", "/bin"];
    let first = dirs.iter().position(|d| Path::new(d).join("git").is_file()).unwrap();
    let dir = Path::new(dirs[first]);
    let up = format!("{}/../{}/git", dir.display(), dir.file_name().unwrap().to_string_lossy());
    for spelling in [text(&dir.join("git")), up, format!("{}//./git", dir.display())] {
        assert!(exec(&rt, &spelling, &["--version"]).await.unwrap().starts_with("git version"));
        assert_denied(
            exec(&rt, &spelling, &["-c", "core.pager=x", "log"]).await,
            &["exec_vectors"],
        );
    }
    // A git later on the search path is not the one `git` names: it stays
    // its path, which `git *` does not cover.
    let shadowed = dirs[first + 1..].iter().map(|d| Path::new(d).join("git")).find(|p| {
        p.is_file() && p.canonicalize().unwrap() != dir.join("git").canonicalize().unwrap()
    });
    if let Some(shadowed) = shadowed {
        assert_denied(
            exec(&rt, &text(&shadowed), &["--version"]).await,
            &["matches no command pattern"],
        );
    }
    assert_eq!(exec(&rt, "git", &["config", "--get", "no.such-key"]).await.unwrap(), "");
}

/// A guest with a writable workspace writes `.git/config` itself; the
/// host's pins keep git from running what it names.
#[tokio::test]
async fn repository_config_written_by_the_guest_runs_nothing() {
    let (dir, rt) = hostile(r#"process = ["git *"]"#).await;
    let ws = dir.workspace();
    let m = text(&marker(&dir));
    let write = async |path: &str, content: &str| {
        call(&rt, "write", json!({ "path": text(&ws.join(path)), "content": content }))
            .await
            .unwrap();
    };
    exec(&rt, "git", &["init", "-q"]).await.unwrap();
    write("f.txt", "old\n").await;
    exec(&rt, "git", &["add", "f.txt"]).await.unwrap();
    let config = format!(
        "[core]\n\trepositoryformatversion = 0\n\tbare = false\n\
         \tfsmonitor = \"touch {m}.fsmonitor; false\"\n\tpager = touch {m}.pager\n\
         \thooksPath = hooks\n\teditor = touch {m}.editor\n\
         [user]\n\tname = a\n\temail = a@example.com\n\
         [diff]\n\texternal = touch {m}.diff\n\
         [alias]\n\tst = !touch {m}.alias\n\
         [remote \"origin\"]\n\turl = .\n\tfetch = +refs/heads/*:refs/remotes/origin/*\n\
         [filter \"evil\"]\n\tclean = touch {m}.filter; cat\n\
         [diff \"evil\"]\n\ttextconv = touch {m}.textconv; cat\n\
         \tcommand = touch {m}.diffcmd\n"
    );
    write(".git/config", &config).await;
    write(".gitattributes", "f.txt filter=evil diff=evil\n").await;
    write("f.txt", "new\n").await;
    let status = exec(&rt, "git", &["status", "--short"]).await.unwrap();
    assert!(status.contains("f.txt"), "{status}");
    let diff = exec(&rt, "git", &["diff"]).await.unwrap();
    assert!(diff.contains("-old") && diff.contains("+new"), "{diff}");
    exec(&rt, "git", &["add", "f.txt"]).await.unwrap();
    exec(&rt, "git", &["commit", "-q", "-m", "x"]).await.unwrap();
    let log = exec(&rt, "git", &["log", "-p"]).await.unwrap();
    assert!(log.contains("+new"), "{log}");
    exec(&rt, "git", &["-C", &text(&ws), "fetch", "-q", "origin"]).await.unwrap();
    assert_denied(exec(&rt, "git", &["st"]).await, &["not a git builtin"]);
    // git reads uploadpack first-wins, so no pin can hold it: refused.
    let upload = format!("[remote \"origin\"]\n\tuploadpack = touch {m}.upload; git-upload-pack\n");
    write(".git/config", &format!("{config}{upload}")).await;
    for args in [&["fetch", "-q", "origin"][..], &["-C", &text(&ws), "pull"], &["status"]] {
        assert_denied(
            exec(&rt, "git", args).await,
            &["sets `remote.origin.uploadpack`", "exec_vectors"],
        );
    }
    let suffixes = [
        "fsmonitor",
        "pager",
        "editor",
        "diff",
        "alias",
        "upload",
        "filter",
        "textconv",
        "diffcmd",
    ];
    for suffix in suffixes {
        assert!(!Path::new(&format!("{m}.{suffix}")).exists(), "{suffix} ran");
    }
}

#[tokio::test]
async fn control_variables_from_the_guest_are_refused() {
    let (dir, rt) = hostile(r#"process = ["git *", "printenv *"]"#).await;
    let ws = dir.workspace();
    plant_script(&ws.join("git"), &marker(&dir));
    let m = text(&marker(&dir));
    let attacks = [
        ("GIT_CONFIG_COUNT", "1".to_owned()),
        ("GIT_CONFIG_KEY_0", "core.fsmonitor".to_owned()),
        ("GIT_CONFIG_PARAMETERS", format!("'alias.x'='!touch {m}'")),
        ("GIT_EXEC_PATH", text(&ws)),
        ("PATH", text(&ws)),
        ("LD_PRELOAD", text(&ws.join("evil.so"))),
        ("LD_LIBRARY_PATH", text(&ws)),
        ("PYTHONPATH", text(&ws)),
        ("JAVA_TOOL_OPTIONS", "-javaagent:x".to_owned()),
        ("BASH_ENV", text(&ws.join("git"))),
        ("HOME", text(&ws)),
        ("PAGER", format!("touch {m}")),
        ("BAD=NAME", "x".to_owned()),
    ];
    for (name, value) in attacks {
        let args = json!({ "program": "git", "args": ["status"], "env": [[name, value]] });
        assert_denied(
            call(&rt, "exec", args).await,
            &[&format!("`{name}` is not allowed"), "env = ["],
        );
    }
    assert!(!marker(&dir).exists());
    // The safe built-ins pass.
    let args = json!({ "program": "printenv", "args": ["LC_ALL"], "env": [["LC_ALL", "C"]] });
    assert_eq!(call(&rt, "exec", args).await.unwrap(), "C\n");
    // The child's PATH is the fixed search path, not the host's.
    let path = exec(&rt, "printenv", &["PATH"]).await.unwrap();
    assert_eq!(path, "/usr/local/bin:/usr/bin:/bin\n");
}

#[tokio::test]
async fn a_granted_path_variable_still_cannot_choose_the_program() {
    let (dir, rt) = hostile(
        r#"process = ["git *", "printenv *"]
        env = ["PATH", "RESON_TEST"]"#,
    )
    .await;
    let ws = dir.workspace();
    plant_script(&ws.join("git"), &marker(&dir));
    let args = json!({ "program": "git", "args": ["--version"], "env": [["PATH", text(&ws)]] });
    assert!(call(&rt, "exec", args).await.unwrap().starts_with("git version"));
    assert!(!marker(&dir).exists());
    let args =
        json!({ "program": "printenv", "args": ["RESON_TEST"], "env": [["RESON_TEST", "y"]] });
    assert_eq!(call(&rt, "exec", args).await.unwrap(), "y\n");
    // Named exactly: a granted name covers no other.
    let args = json!({ "program": "printenv", "args": ["X"], "env": [["RESON_TEST2", "y"]] });
    assert_denied(call(&rt, "exec", args).await, &["`RESON_TEST2` is not allowed"]);
}

/// An executable shell script at `path` that creates `marker`.
fn plant_script(path: &Path, marker: &Path) {
    support::write_executable(path, &format!("#!/bin/sh\ntouch {}\n", marker.display()));
}

#[tokio::test]
async fn programs_planted_in_writable_directories_never_run() {
    let (dir, rt) = hostile(r#"process = ["git *"]"#).await;
    let ws = dir.workspace();
    plant_script(&ws.join("git-script"), &marker(&dir));
    std::os::unix::fs::symlink(ws.join("git-script"), ws.join("git")).unwrap();
    std::fs::create_dir_all(ws.join("bin")).unwrap();
    std::os::unix::fs::symlink("/usr/bin/touch", ws.join("bin/git")).unwrap();
    let m = text(&marker(&dir));
    // A bare name comes from the fixed search path, never from the cwd.
    let cwd = json!({ "program": "git", "args": ["--version"], "cwd": text(&ws) });
    assert!(call(&rt, "exec", cwd).await.unwrap().starts_with("git version"));
    assert_denied(exec(&rt, "./git", &["status"]).await, &["relative path"]);
    assert_denied(exec(&rt, "bin/git", &[&m]).await, &["relative path"]);
    assert_denied(exec(&rt, "../workspace/git", &["status"]).await, &["relative path"]);
    for planted in [ws.join("git"), ws.join("bin/git"), ws.join("bin/../git")] {
        assert_denied(exec(&rt, &text(&planted), &[&m]).await, &["inside a directory granted"]);
    }
    // A link outside the grant is the program it leads to: `touch`, which
    // `git *` does not cover.
    let outside = dir.path().join("outside/git");
    std::os::unix::fs::symlink("/usr/bin/touch", &outside).unwrap();
    assert_denied(
        exec(&rt, &text(&outside), &[&m]).await,
        &["`touch ", "matches no command pattern"],
    );
    assert!(!marker(&dir).exists());
}

#[tokio::test]
async fn tools_that_run_other_programs_are_refused_under_a_pattern_grant() {
    let (dir, rt) = hostile(r#"process = ["*"]"#).await;
    let m = text(&marker(&dir));
    let python = format!("open('{m}', 'w')");
    let awk = format!("BEGIN {{ system(\"touch {m}\") }}");
    let attacks: Vec<(&str, Vec<&str>, &str)> = vec![
        ("find", vec![".", "-maxdepth", "0", "-exec", "touch", &m, ";"], "find"),
        ("find", vec![".", "-maxdepth", "0", "-execdir", "touch", &m, ";"], "find"),
        ("find", vec![".", "-maxdepth", "0", "-ok", "touch", &m, ";"], "find"),
        ("xargs", vec!["touch", &m], "xargs"),
        ("env", vec!["touch", &m], "env"),
        ("/usr/bin/env", vec!["touch", &m], "env"),
        ("nohup", vec!["touch", &m], "nohup"),
        ("timeout", vec!["5", "touch", &m], "timeout"),
        ("setsid", vec!["touch", &m], "setsid"),
        ("nice", vec!["touch", &m], "nice"),
        ("sh", vec!["-c", "touch \"$0\"", &m], "sh"),
        ("bash", vec!["-c", "touch \"$0\"", &m], "bash"),
        ("python3", vec!["-c", &python], "python"),
        ("python3", vec!["-Ic", &python], "python"),
        ("perl", vec!["-e", "open(F, '>', $ARGV[0])", &m], "perl"),
        ("awk", vec![&awk], "awk"),
        (
            "tar",
            vec!["-cf", "/dev/null", "--checkpoint=1", "--checkpoint-action=exec=sh", "."],
            "tar",
        ),
        ("ssh", vec!["-o", "ProxyCommand=sh", "x"], "ssh"),
    ];
    for (program, args, family) in attacks {
        let message = denial(exec(&rt, program, &args).await);
        assert!(
            message.contains(&format!("exec_vectors = [\"{family}\"]")),
            "{program}: {message}"
        );
    }
    assert!(!marker(&dir).exists());
    // The same tools without their vectors run.
    assert_eq!(exec(&rt, "find", &["-maxdepth", "0", "-name", "*"]).await.unwrap(), ".\n");
    assert!(exec(&rt, "python3", &["--version"]).await.unwrap().starts_with("Python 3"));
}

#[tokio::test]
async fn exec_vectors_run_when_the_grant_names_the_program() {
    let (dir, rt) = hostile(
        r#"process = ["find *"]
        exec_vectors = ["find"]"#,
    )
    .await;
    let m = text(&marker(&dir));
    exec(&rt, "find", &[".", "-maxdepth", "0", "-exec", "touch", &m, ";"]).await.unwrap();
    assert!(marker(&dir).exists(), "the explicitly allowed exec vector did not run");
    // Naming find allows no other program's vectors, nor programs outside the pattern.
    assert_denied(exec(&rt, "xargs", &["touch", &m]).await, &["matches no command pattern"]);
}

/// The scripted provider, the shell plugin granted every command, and a
/// runner under `rules`; returns the decisions and the tool outputs.
async fn run_shell(
    dir: &TestDir,
    commands: &[&str],
    rules: &[(Decision, &str, Option<&str>)],
) -> (Vec<String>, Vec<String>) {
    let mut turns: Vec<Value> = commands
        .iter()
        .map(|c| json!({ "tool_calls": [{ "name": "shell", "arguments": { "command": c } }] }))
        .collect();
    turns.push(json!({ "text": "done" }));
    let script = dir.path().join("script.json");
    std::fs::write(&script, json!({ "turns": turns }).to_string()).unwrap();
    let runtime = dir
        .open(&format!(
            r#"
        [plugins.scripted]
        dirs = [{{ path = ".", access = "read" }}]
        config = {{ script = "{}" }}
        [plugins.shell]
        dirs = [{{ path = "workspace", access = "read-write" }}]
        process = ["*"]
        "#,
            script.display()
        ))
        .await;
    let store = Arc::new(
        FileTraceStore::open(dir.path().join("traces"), reson::trace::Durability::Batched).unwrap(),
    );
    let rules: Vec<Rule> = rules
        .iter()
        .map(|(decision, tool, pattern)| Rule {
            decision: *decision,
            tool: (*tool).into(),
            pattern: pattern.map(Into::into),
            examples: Vec::new(),
            counter_examples: Vec::new(),
        })
        .collect();
    let rules = RuleSet::compile(&rules).unwrap().with_default(Decision::Deny);
    let approvals = PendingApprovals::new(Duration::from_secs(1));
    let runner = Runner::new(
        store.clone(),
        Arc::new(PluginProvider::new(runtime.clone(), "scripted")),
        ToolRegistry::new(runtime),
        Hooks::none(),
    )
    .with_permissions(Permissions::new(rules, approvals));
    let mut handle =
        runner.run(vec![Message::new(Role::User, "go")], RunConfig::default()).await.unwrap();
    let id = handle.trace_id().to_owned();
    while let Some(event) = handle.next_event().await {
        assert!(!matches!(event, AgentEvent::ApprovalNeeded { .. }), "nothing should ask");
    }
    handle.wait().await.unwrap();
    let decisions = store
        .events_after(&id, 0)
        .await
        .unwrap()
        .into_iter()
        .filter_map(|e| match e.kind {
            EventKind::PermissionDecided { decision, .. } => Some(decision),
            _ => None,
        })
        .collect();
    let outputs = store
        .get_messages(&id)
        .await
        .unwrap()
        .iter()
        .filter(|m| m.role == Role::Tool)
        .map(Message::text)
        .collect();
    (decisions, outputs)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deny_rule_holds_however_the_program_is_spelled() {
    let dir = TestDir::new();
    for plugin in ["scripted", "shell"] {
        dir.install(support::plugins(), plugin);
    }
    let ws = dir.workspace();
    let spellings = [
        "'rm' -f victim",
        r"r\m -f victim",
        "\"rm\" -f victim",
        "/bin/rm -f victim",
        "/usr/bin/../bin/rm -f victim",
        "rm  -f 'victim'",
        "/usr/bin/rm -f victim",
        "env rm -f victim",
        "timeout 5 /bin/rm -f victim",
        "sh -c 'rm -f victim'",
        "sh -c 'true;rm -f victim'",
        "bash -c 'echo $(rm -f victim)'",
        r#"sh -c '"$0" -f victim' rm"#,
        r#"sh -c 'eval "rm -f victim"'"#,
    ];
    std::fs::write(ws.join("victim"), "still here").unwrap();
    let rules = [(Decision::Allow, "shell", None), (Decision::Deny, "shell", Some("rm *"))];
    let (decisions, outputs) = run_shell(&dir, &spellings, &rules).await;
    assert_eq!(decisions, vec!["deny"; spellings.len()], "{outputs:?}");
    assert!(outputs.iter().all(|o| o.contains("rule deny shell \"rm *\"")), "{outputs:?}");
    assert!(ws.join("victim").exists(), "a spelling of rm got past `deny rm *`");

    // Without the deny rule the very same line does remove the file: the
    // spellings above were real.
    let dir = TestDir::new();
    for plugin in ["scripted", "shell"] {
        dir.install(support::plugins(), plugin);
    }
    std::fs::write(dir.workspace().join("victim"), "x").unwrap();
    let (decisions, _) =
        run_shell(&dir, &["'rm' -f victim"], &[(Decision::Allow, "shell", None)]).await;
    assert_eq!(decisions, ["allow"]);
    assert!(!dir.workspace().join("victim").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allow_rule_for_git_does_not_admit_git_config_options() {
    let dir = TestDir::new();
    for plugin in ["scripted", "shell"] {
        dir.install(support::plugins(), plugin);
    }
    let m = text(&dir.path().join("marker"));
    let attack = format!("git -c 'alias.x=!touch {m}' x");
    let quoted = format!("'git' \"-c\" alias.x='!touch {m}' x");
    let pager = format!("git -c core.pager='touch {m}' log");
    let commands = [attack.as_str(), quoted.as_str(), pager.as_str(), "git --version"];
    let (decisions, outputs) =
        run_shell(&dir, &commands, &[(Decision::Allow, "shell", Some("git *"))]).await;
    assert_eq!(decisions, ["deny", "deny", "deny", "allow"], "{outputs:?}");
    assert!(outputs[3].contains("git version"), "{outputs:?}");
    assert!(!Path::new(&m).exists());
}

/// Whether process `pid` is gone (or a zombie about to be reaped).
fn dead(pid: i32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"));
    stat.map_or(true, |s| {
        s.rsplit(')').next().is_some_and(|rest| rest.trim_start().starts_with('Z'))
    })
}

async fn wait_dead(pid: i32) -> bool {
    let until = Instant::now() + support::MARGIN;
    while Instant::now() < until {
        if dead(pid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

fn read_pid(path: &Path) -> i32 {
    std::fs::read_to_string(path).unwrap().trim().parse().unwrap()
}

fn sh_grant() -> &'static str {
    r#"process = ["sh *"]
    exec_vectors = ["sh"]"#
}

#[tokio::test]
async fn a_background_child_holding_stdout_neither_holds_the_call_nor_survives_it() {
    let (dir, rt) = hostile_unjailed(sh_grant()).await;
    let pid_file = dir.path().join("outside/pid");
    let script = format!("sleep 30 & echo $! > {}; echo started", pid_file.display());
    let started = Instant::now();
    let out = exec(&rt, "sh", &["-c", &script]).await.unwrap();
    let took = started.elapsed();
    assert_eq!(out, "started\n");
    assert!(took < support::MARGIN, "the call waited {took:?} for the background child");
    assert!(wait_dead(read_pid(&pid_file)).await, "the background child outlived the call");
}

#[tokio::test]
async fn a_command_past_its_deadline_dies_with_its_whole_group() {
    let (dir, rt) = hostile_unjailed(sh_grant()).await;
    let pids = dir.path().join("outside/pids");
    let script = format!("sleep 30 & echo $! > {}; echo $$ >> {0}; sleep 30", pids.display());
    let started = Instant::now();
    let args = json!({ "program": "sh", "args": ["-c", script], "timeout_ms": 500 });
    let err = call(&rt, "exec", args).await.unwrap_err();
    let took = started.elapsed();
    assert!(format!("{err:?}").contains("timeout"), "{err:?}");
    assert!(took < Duration::from_millis(500) + support::MARGIN, "took {took:?}");
    for pid in std::fs::read_to_string(&pids).unwrap().lines() {
        assert!(wait_dead(pid.parse().unwrap()).await, "process {pid} survived the deadline");
    }
    // The same at the call's own limit, with no timeout of its own.
    let started = Instant::now();
    let err = exec(&rt, "sh", &["-c", "sleep 30 & sleep 30"]).await.unwrap_err();
    assert!(started.elapsed() < CALL_LIMIT + support::MARGIN, "{err:?}");
}

#[tokio::test]
async fn an_escaped_grandchild_cannot_hold_the_call_open() {
    let (dir, rt) = hostile_unjailed(
        r#"process = ["sh *"]
        exec_vectors = ["sh"]"#,
    )
    .await;
    let pid_file = dir.path().join("outside/pid");
    // setsid leaves the process group, so only the bounded read saves the call.
    let script = format!("setsid sleep 30 & echo $! > {}; echo started", pid_file.display());
    let started = Instant::now();
    let out = exec(&rt, "sh", &["-c", &script]).await.unwrap();
    assert_eq!(out, "started\n");
    assert!(started.elapsed() < support::MARGIN, "{:?}", started.elapsed());
    let pid = read_pid(&pid_file);
    // SAFETY: signals the test's own escaped sleep.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
    }
}

#[tokio::test]
async fn stdin_is_fed_without_blocking_the_call() {
    let (_dir, rt) = hostile(
        r#"process = ["sh *", "cat"]
        exec_vectors = ["sh"]"#,
    )
    .await;
    let args = json!({ "program": "cat", "stdin": "fed through a pipe" });
    assert_eq!(call(&rt, "exec", args).await.unwrap(), "fed through a pipe");
    // Far more than a pipe holds, to a command that never reads it.
    let flood = "x".repeat(1 << 20);
    let started = Instant::now();
    let args =
        json!({ "program": "sh", "args": ["-c", "sleep 30"], "stdin": flood, "timeout_ms": 300 });
    assert!(call(&rt, "exec", args).await.is_err());
    let bound = Duration::from_millis(300) + support::MARGIN;
    assert!(started.elapsed() < bound, "{:?}", started.elapsed());
}

#[tokio::test]
async fn a_command_that_never_stops_writing_still_meets_its_deadline() {
    let (_dir, rt) = hostile(r#"process = ["yes"]"#).await;
    let started = Instant::now();
    let err = call(&rt, "exec", json!({ "program": "yes", "timeout_ms": 300 })).await.unwrap_err();
    assert!(format!("{err:?}").contains("timeout"), "{err:?}");
    let bound = Duration::from_millis(300) + support::MARGIN;
    assert!(started.elapsed() < bound, "{:?}", started.elapsed());
    // A program that does not exist cannot start, and says so.
    let err = exec(&rt, "no-such-program-anywhere", &[]).await.unwrap_err();
    let message = format!("{err:?}");
    assert!(
        message.contains("spawn: `no-such-program-anywhere` is not an executable"),
        "{message}"
    );
}

/// Runs the host's own git in `dir` (test setup, not an attack).
fn host_git(dir: &Path, args: &[&str]) {
    let status = std::process::Command::new("git")
        .args(["-c", "user.name=a", "-c", "user.email=a@example.com"])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "git {args:?}");
}

/// A repository in `ws/src` with one commit whose file asks for the
/// `evil` filter and diff driver, a remote `origin` pointing at itself,
/// and a clone template in `ws/tpl` whose config defines that filter to
/// run `touch {marker}`.
fn plant_repository(ws: &Path, marker: &str) -> (String, String) {
    let src = ws.join("src");
    std::fs::create_dir_all(&src).unwrap();
    host_git(&src, &["init", "-q"]);
    std::fs::write(src.join(".gitattributes"), "* filter=evil\n").unwrap();
    std::fs::write(src.join("f.txt"), "one\n").unwrap();
    host_git(&src, &["add", "."]);
    host_git(&src, &["commit", "-qm", "one"]);
    std::fs::write(src.join("f.txt"), "two\n").unwrap();
    host_git(&src, &["commit", "-qam", "two"]);
    host_git(&src, &["remote", "add", "origin", "."]);
    let tpl = ws.join("tpl");
    std::fs::create_dir_all(&tpl).unwrap();
    let filter = format!("[filter \"evil\"]\n\tsmudge = touch {marker}; cat\n");
    std::fs::write(tpl.join("config"), filter).unwrap();
    (text(&src), text(&tpl))
}

/// git's parse-options takes any unambiguous prefix of a long option and
/// clusters of short ones, and git's own options before the subcommand
/// can take the next word: every spelling is the option git sees.
#[tokio::test]
async fn git_options_are_read_the_way_git_reads_them() {
    let (dir, rt) = hostile(r#"process = ["git *"]"#).await;
    let ws = dir.workspace();
    let m = text(&marker(&dir));
    let (src, tpl) = plant_repository(&ws, &m);
    let upload = format!("touch {m}; git-upload-pack");
    let dst = |n: &str| text(&ws.join(n));
    let attacks: Vec<Vec<String>> = vec![
        vec![
            "-C".into(),
            src.clone(),
            "fetch".into(),
            format!("--upload-p={upload}"),
            "origin".into(),
        ],
        vec!["ls-remote".into(), format!("--upl={upload}"), src.clone()],
        vec!["-C".into(), src.clone(), "push".into(), format!("--rec={upload}"), "origin".into()],
        vec!["-C".into(), src.clone(), "push".into(), format!("--e={upload}"), "origin".into()],
        vec![
            "-C".into(),
            src.clone(),
            "rebase".into(),
            "--exe".into(),
            format!("touch {m}"),
            "HEAD~1".into(),
        ],
        vec![
            "-C".into(),
            src.clone(),
            "rebase".into(),
            "-ix".into(),
            format!("touch {m}"),
            "HEAD~1".into(),
        ],
        vec!["clone".into(), "-qu".into(), upload.clone(), src.clone(), dst("a")],
        vec!["ls-remote".into(), "-qu".into(), upload.clone(), src.clone()],
        vec!["clone".into(), "-q".into(), format!("--templ={tpl}"), src.clone(), dst("b")],
        vec!["clone".into(), "-q".into(), format!("--template={tpl}"), src.clone(), dst("c")],
        vec!["init".into(), "-q".into(), format!("--template={tpl}"), dst("d")],
        vec!["clone".into(), "--conf".into(), format!("core.pager={m}"), src.clone(), dst("e")],
        // `--attr-source` takes the next word, so `log` is not the subcommand.
        vec![
            "--attr-source".into(),
            "log".into(),
            "-c".into(),
            format!("alias.x=!touch {m}"),
            "x".into(),
        ],
        vec!["--no-such-option".into(), "status".into()],
    ];
    for args in &attacks {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let result = exec(&rt, "git", &args).await;
        assert!(!marker(&dir).exists(), "git {args:?} ran the marker: {result:?}");
        assert_denied(result, &["git", "exec_vectors", "refused"]);
    }
    // The plain commands still run.
    let log = exec(&rt, "git", &["-C", &src, "--no-pager", "log", "--oneline"]).await.unwrap();
    assert!(log.contains("two"), "{log}");
    exec(&rt, "git", &["clone", "-q", &src, &dst("plain")]).await.unwrap();
    assert_eq!(std::fs::read_to_string(ws.join("plain/f.txt")).unwrap(), "two\n");
    assert!(!marker(&dir).exists());

    // The same attacks are real: where the grant lets git's vectors run,
    // they do run.
    let (dir, rt) = hostile(
        r#"process = ["git *"]
        exec_vectors = ["git"]"#,
    )
    .await;
    let ws = dir.workspace();
    let m = text(&marker(&dir));
    let (src, tpl) = plant_repository(&ws, &m);
    exec(&rt, "git", &["clone", "-q", &format!("--templ={tpl}"), &src, &text(&ws.join("b"))])
        .await
        .unwrap();
    assert!(marker(&dir).exists(), "the template's filter did not run");
    std::fs::remove_file(marker(&dir)).unwrap();
    let alias = format!("alias.x=!touch {m}");
    exec(&rt, "git", &["--attr-source", "log", "-c", &alias, "x"]).await.unwrap();
    assert!(marker(&dir).exists(), "the alias did not run");
}

/// `git help` and `git CMD --help` run the manual viewer or browser the
/// config names (`man.<tool>.cmd`), and the repository's config is the
/// guest's to write.
#[tokio::test]
async fn git_help_cannot_run_a_viewer_the_repository_names() {
    let (dir, rt) = hostile(r#"process = ["git *"]"#).await;
    let ws = dir.workspace();
    let m = text(&marker(&dir));
    let (src, _) = plant_repository(&ws, &m);
    let viewer = format!("[man]\n\tviewer = evil\n[man \"evil\"]\n\tcmd = touch {m}; true\n");
    let config = Path::new(&src).join(".git/config");
    let mut text_of = std::fs::read_to_string(&config).unwrap();
    text_of.push_str(&viewer);
    std::fs::write(&config, text_of).unwrap();
    for args in [
        &["help", "status"][..],
        &["status", "--help"],
        &["--help", "status"],
        &["-h", "log"],
        &["-C", &src, "log", "--help"],
    ] {
        let result = call(&rt, "exec", json!({ "program": "git", "args": args, "cwd": src })).await;
        assert!(!marker(&dir).exists(), "git {args:?} ran the viewer: {result:?}");
        assert_denied(result, &["exec_vectors"]);
    }
    // `-h` after the subcommand is git's own short usage, and runs nothing.
    let result =
        call(&rt, "exec", json!({ "program": "git", "args": ["status", "-h"], "cwd": src })).await;
    assert!(result.is_ok(), "{result:?}");
    assert!(!marker(&dir).exists());
}

/// A config file the guest could write is the guest's wherever git finds
/// it: a global config inside a granted directory gets the same pins as
/// the repository's own.
#[tokio::test]
async fn a_global_git_config_inside_the_grant_is_pinned_like_the_repositorys() {
    let (dir, rt) = hostile(
        r#"process = ["git *"]
        env = ["GIT_CONFIG_GLOBAL"]"#,
    )
    .await;
    let ws = dir.workspace();
    let m = text(&marker(&dir));
    let (src, _) = plant_repository(&ws, &m);
    let global = ws.join("gitconfig");
    let drivers = format!(
        "[filter \"evil\"]\n\tclean = touch {m}.clean; cat\n\tsmudge = touch {m}.smudge; cat\n\
         [core]\n\tgitProxy = touch {m}.proxy\n"
    );
    std::fs::write(&global, drivers).unwrap();
    std::fs::write(Path::new(&src).join("f.txt"), "three\n").unwrap();
    let env = json!([["GIT_CONFIG_GLOBAL", text(&global)]]);
    for args in [&["status", "--short"][..], &["checkout", "--", "f.txt"]] {
        let request = json!({ "program": "git", "args": args, "cwd": src, "env": env });
        call(&rt, "exec", request).await.unwrap();
    }
    assert_eq!(std::fs::read_to_string(Path::new(&src).join("f.txt")).unwrap(), "two\n");
    // `core.gitProxy` (read for git:// URLs) is pinned too, wherever it is set.
    let request = json!({
        "program": "git", "args": ["ls-remote", "git://127.0.0.1:9/x"], "cwd": src, "env": env,
        "timeout_ms": 1_500,
    });
    let _ = call(&rt, "exec", request).await;
    for suffix in ["clean", "smudge", "proxy"] {
        assert!(!Path::new(&format!("{m}.{suffix}")).exists(), "{suffix} ran");
    }
}

/// The working directory is where it really is, not where its name
/// points: a link in the workspace to a directory outside is refused, and
/// the command starts in the directory that was checked.
#[tokio::test]
async fn a_working_directory_leading_outside_the_grant_is_refused() {
    let (dir, rt) = hostile(r#"process = ["pwd", "ls *", "git *"]"#).await;
    let ws = dir.workspace();
    let outside = dir.path().join("outside");
    std::fs::write(outside.join("secret.txt"), "x").unwrap();
    std::os::unix::fs::symlink(&outside, ws.join("out")).unwrap();
    std::fs::create_dir_all(ws.join("sub/deeper")).unwrap();
    std::os::unix::fs::symlink(ws.join("sub/deeper"), ws.join("in")).unwrap();
    std::os::unix::fs::symlink("/", ws.join("sub/root")).unwrap();
    for cwd in [ws.join("out"), ws.join("sub/root"), ws.join("sub/root/tmp")] {
        let result =
            call(&rt, "exec", json!({ "program": "ls", "args": ["-a"], "cwd": text(&cwd) })).await;
        assert_denied(result, &["leads outside the granted directories"]);
    }
    let dotdot = format!("{}/sub/..", text(&ws));
    let result = call(&rt, "exec", json!({ "program": "pwd", "cwd": dotdot })).await;
    assert_denied(result, &["outside the granted directories"]);
    // A link that stays inside is followed, and the command starts there.
    let here =
        call(&rt, "exec", json!({ "program": "pwd", "cwd": text(&ws.join("in")) })).await.unwrap();
    assert_eq!(here.trim(), text(&ws.join("sub/deeper")));
    let default = call(&rt, "exec", json!({ "program": "pwd" })).await.unwrap();
    assert_eq!(default.trim(), text(&ws));
    // git sees the same directory.
    let top = json!({ "program": "git", "args": ["rev-parse", "--show-prefix"], "cwd": text(&ws.join("out")) });
    assert_denied(call(&rt, "exec", top).await, &["leads outside"]);
}

#[tokio::test]
async fn interpreters_refuse_code_hidden_behind_option_values_or_fed_on_stdin() {
    let (dir, rt) = hostile(r#"process = ["*"]"#).await;
    let m = text(&marker(&dir));
    let python = format!("open('{m}', 'w')");
    let perl = format!("open(F, '>', '{m}')");
    let attacks: Vec<(&str, Vec<&str>, Option<&str>, &str)> = vec![
        ("python3", vec!["-W", "ignore", "-c", &python], None, "python"),
        ("python3", vec!["-X", "dev", "-c", &python], None, "python"),
        ("python3", vec![], Some(&python), "python"),
        ("python3", vec!["-"], Some(&python), "python"),
        ("python3", vec!["-u", "/dev/stdin"], Some(&python), "python"),
        ("perl", vec!["-I", "/tmp", "-e", &perl], None, "perl"),
        ("perl", vec![], Some(&perl), "perl"),
    ];
    for (program, args, stdin, family) in attacks {
        let request = json!({ "program": program, "args": args, "stdin": stdin });
        let message = denial(call(&rt, "exec", request).await);
        assert!(message.contains(&format!("exec_vectors = [\"{family}\"]")), "{message}");
    }
    assert!(!marker(&dir).exists());
    let ws = dir.workspace();
    std::fs::write(ws.join("hello.py"), "print('hello')\n").unwrap();
    let request =
        json!({ "program": "python3", "args": ["-W", "ignore", text(&ws.join("hello.py"))] });
    assert_eq!(call(&rt, "exec", request).await.unwrap(), "hello\n");

    // Fed on stdin, the program is real code: it runs once the grant names python.
    let (dir, rt) = hostile(
        r#"process = ["python3 *", "python3"]
        exec_vectors = ["python"]"#,
    )
    .await;
    let m = text(&marker(&dir));
    let request = json!({ "program": "python3", "stdin": format!("open('{m}', 'w')") });
    call(&rt, "exec", request).await.unwrap();
    assert!(marker(&dir).exists());
}

/// Every process of the command's group dies at the deadline: one that
/// ignores SIGTERM, and one that forks as fast as it can until then.
#[tokio::test]
async fn a_forking_command_that_ignores_sigterm_leaves_nothing_behind() {
    let (dir, rt) = hostile_unjailed(sh_grant()).await;
    let pid_file = dir.path().join("outside/pid");
    let script = format!(
        "trap '' TERM INT HUP; echo $$ > {}; i=0; \
         while [ $i -lt 400 ]; do sh -c \"trap '' TERM; sleep 30\" & i=$((i+1)); done; wait",
        pid_file.display()
    );
    let started = Instant::now();
    let request = json!({ "program": "sh", "args": ["-c", script], "timeout_ms": 700 });
    let err = call(&rt, "exec", request).await.unwrap_err();
    assert!(format!("{err:?}").contains("timeout"), "{err:?}");
    let bound = Duration::from_millis(700) + support::MARGIN;
    assert!(started.elapsed() < bound, "{:?}", started.elapsed());
    let group = read_pid(&pid_file);
    let until = Instant::now() + support::MARGIN;
    let members = || -> Vec<i32> {
        std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
            .filter(|pid| {
                let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
                let fields: Vec<&str> =
                    stat.rsplit(')').next().unwrap_or("").split_whitespace().collect();
                fields.first() != Some(&"Z") && fields.get(2) == Some(&group.to_string().as_str())
            })
            .collect()
    };
    while !members().is_empty() && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(members(), Vec::<i32>::new(), "processes of the group survived");
}

/// Far more output on stderr than a pipe holds, which nobody returns to
/// the guest, neither stalls the call nor grows without bound.
#[tokio::test]
async fn a_stderr_flood_neither_stalls_nor_fails_the_call() {
    let (_dir, rt) = hostile(sh_grant()).await;
    let script = "head -c 50000000 /dev/zero >&2; echo done";
    // A stalled call would end at the call's time limit, with its error.
    let out = exec(&rt, "sh", &["-c", script]).await.unwrap();
    assert_eq!(out, "done\n");
}

/// A build tool granted by pattern runs no command given as text:
/// `make --eval`, a `SHELL=` of the caller's choosing, a makefile on stdin.
#[tokio::test]
async fn build_tools_refuse_commands_given_as_text() {
    let (dir, rt) = hostile(r#"process = ["make *"]"#).await;
    let m = text(&marker(&dir));
    let eval = format!("--eval=$(shell touch {m})");
    let makefile = format!("all:\n\ttouch {m}\n");
    let attacks: Vec<(Vec<&str>, Option<&str>)> = vec![
        (vec![&eval, "-n"], None),
        (vec!["-E", &eval[7..], "-n"], None),
        (vec!["--ev", &eval[7..], "-n"], None),
        (vec!["-f", "-"], Some(&makefile)),
    ];
    for (args, stdin) in attacks {
        let request = json!({ "program": "make", "args": args, "stdin": stdin });
        assert_denied(call(&rt, "exec", request).await, &["exec_vectors = [\"make\"]"]);
    }
    assert!(!marker(&dir).exists());
    // The vector is real: named in the grant, it runs.
    let (dir, rt) = hostile(
        r#"process = ["make *"]
        exec_vectors = ["make"]"#,
    )
    .await;
    let eval = format!("--eval=$(shell touch {})", text(&marker(&dir)));
    let _ = exec(&rt, "make", &[&eval, "-n"]).await;
    assert!(marker(&dir).exists());
}

/// The dynamic loader runs whatever file it is given: under a `*` grant it
/// would run a program planted in the workspace, which never runs itself.
#[tokio::test]
async fn the_dynamic_loader_cannot_run_a_planted_program() {
    let (dir, rt) = hostile(r#"process = ["*"]"#).await;
    let ws = dir.workspace();
    support::install_executable(Path::new("/usr/bin/touch"), &ws.join("planted"));
    let m = text(&marker(&dir));
    let planted = text(&ws.join("planted"));
    assert_denied(exec(&rt, &planted, &[&m]).await, &["inside a directory granted"]);
    let loaders =
        ["/lib64/ld-linux-x86-64.so.2", "/lib/ld-linux-aarch64.so.1", "/lib/ld-musl-x86_64.so.1"];
    let mut tried = 0;
    for loader in loaders.iter().filter(|l| Path::new(l).exists()) {
        tried += 1;
        assert_denied(exec(&rt, loader, &[&planted, &m]).await, &["exec_vectors = [\"ld.so\"]"]);
    }
    assert!(tried > 0, "no dynamic loader found on this machine");
    assert!(!marker(&dir).exists());
}

/// `git commit --trailer` runs `trailer.<token>.cmd`/`.command` from the
/// repository's config: pinned like the other per-name commands.
#[tokio::test]
async fn a_trailer_command_from_the_repository_never_runs() {
    let (dir, rt) = hostile(r#"process = ["git *"]"#).await;
    let ws = dir.workspace();
    let m = text(&marker(&dir));
    let (src, _) = plant_repository(&ws, &m);
    let config = Path::new(&src).join(".git/config");
    let mut content = std::fs::read_to_string(&config).unwrap();
    content.push_str(&format!(
        "[user]\n\tname = a\n\temail = a@example.com\n\
         [trailer \"sign\"]\n\tkey = Signed-off-by\n\tcmd = touch {m}.cmd; echo x\n\
         [trailer \"Ack\"]\n\tcommand = touch {m}.command; echo y\n"
    ));
    std::fs::write(&config, content).unwrap();
    for trailer in ["sign: me", "Ack: you"] {
        let args = ["commit", "-q", "--allow-empty", "-m", "t", "--trailer", trailer];
        call(&rt, "exec", json!({ "program": "git", "args": args, "cwd": src })).await.unwrap();
    }
    let log = call(&rt, "exec", json!({ "program": "git", "args": ["log", "-2"], "cwd": src }))
        .await
        .unwrap();
    assert!(log.contains("Signed-off-by") || log.contains("Ack"), "{log}");
    for suffix in ["cmd", "command"] {
        assert!(!Path::new(&format!("{m}.{suffix}")).exists(), "trailer.{suffix} ran");
    }
}
