//! The OS jail: a command a plugin starts runs in a jail built from its
//! grant. Each test grants the bundled `shell` plugin `make *` on a
//! workspace whose Makefile is hostile, runs it as a model would, and
//! checks from the host's side that the attack got nothing: files outside
//! the grant, the network, processes that outlive the call, the host's
//! environment, repository hooks, fork bombs, links, FIFOs, `/proc` tricks.

use crate::support;

use reson::plugin::{CallContext, CallError, Runtime, ToolFailure};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use support::TestDir;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A marker no other test and no host file contains.
fn token() -> String {
    format!("reson-jail-{}-{}", std::process::id(), fastrand::u64(..))
}

/// A workspace holding `makefile`, an `outside` directory beside it with a
/// secret, and a runtime with the shell plugin granted `make *` there.
struct Hostile {
    dir: TestDir,
    rt: Runtime,
    secret: String,
}

impl Hostile {
    async fn new(makefile: &str, grant: &str) -> Self {
        Self::with_config(makefile, grant, "").await
    }

    async fn with_config(makefile: &str, grant: &str, top: &str) -> Self {
        let dir = TestDir::new();
        dir.install(support::plugins(), "shell");
        let ws = dir.workspace();
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::create_dir_all(dir.path().join("outside")).unwrap();
        let secret = token();
        std::fs::write(dir.path().join("outside/secret.txt"), &secret).unwrap();
        let makefile = makefile
            .replace("@OUTSIDE@", &dir.path().join("outside").to_string_lossy())
            .replace("@WS@", &ws.to_string_lossy());
        std::fs::write(ws.join("Makefile"), makefile).unwrap();
        let limits = if grant.contains("limits") { "" } else { "limits = { timeout_ms = 20000 }" };
        let rt = dir
            .open(&format!(
                r#"
                {top}
                [plugins.shell]
                dirs = [{{ path = "workspace", access = "read-write" }}]
                process = ["make *"]
                {limits}
                {grant}
                "#
            ))
            .await;
        Self { dir, rt, secret }
    }

    fn ws(&self) -> PathBuf {
        self.dir.workspace()
    }

    fn outside(&self) -> PathBuf {
        self.dir.path().join("outside")
    }

    /// `make -s TARGET` through the shell tool, as a model would call it.
    async fn make(&self, target: &str) -> Result<String, CallError> {
        self.make_within(target, 10_000).await
    }

    async fn make_within(&self, target: &str, timeout_ms: u32) -> Result<String, CallError> {
        let args = json!({
            "command": format!("make -s {target}"),
            "cwd": self.ws().to_string_lossy(),
            "timeout_ms": timeout_ms,
        });
        let context = CallContext::default();
        self.rt.call_tool("shell", &args.to_string(), &context).await.map(|o| o.text)
    }
}

/// Pids of host processes whose command line holds `marker`.
fn processes_with(marker: &str) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            String::from_utf8_lossy(&cmdline).contains(marker)
        })
        .collect()
}

async fn none_left_with(marker: &str) {
    let until = Instant::now() + support::MARGIN;
    while !processes_with(marker).is_empty() {
        assert!(
            Instant::now() < until,
            "processes outlived the call: {:?}",
            processes_with(marker)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn writes_outside_the_grant_fail_and_the_private_tmp_goes_with_the_call() {
    let home = PathBuf::from(std::env::var("HOME").unwrap());
    let mark = token();
    let makefile = format!(
        "steal:\n\
         \t-touch {home}/{mark}\n\
         \t-touch /tmp/{mark}\n\
         \t-touch /var/tmp/{mark}\n\
         \t-touch @OUTSIDE@/{mark}\n\
         \techo $$TMPDIR $$HOME\n\
         \ttouch $$TMPDIR/{mark}-private\n\
         \ttouch @WS@/inside\n",
        home = home.display()
    );
    let h = Hostile::new(&makefile, "").await;
    let out = h.make("steal").await.unwrap();
    for path in [home.join(&mark), Path::new("/tmp").join(&mark), Path::new("/var/tmp").join(&mark)]
    {
        let escaped = path.exists();
        let _ = std::fs::remove_file(&path);
        assert!(!escaped, "the jail wrote {}", path.display());
    }
    assert!(!h.outside().join(&mark).exists());
    assert!(out.contains("exit code 0"), "{out}");
    assert!(out.contains("/tmp /tmp"), "TMPDIR and HOME are the private /tmp: {out}");
    assert!(h.ws().join("inside").exists(), "the writable grant is writable: {out}");
    let leftovers: Vec<_> = std::fs::read_dir("/tmp")
        .unwrap()
        .flatten()
        .filter(|e| e.path().join(format!("{mark}-private")).exists())
        .collect();
    assert!(leftovers.is_empty(), "the private /tmp outlived the call: {leftovers:?}");
}

#[tokio::test]
async fn reads_outside_the_grant_find_nothing() {
    let home = PathBuf::from(std::env::var("HOME").unwrap());
    let home_secret = home.join(format!(".{}", token()));
    let home_token = token();
    std::fs::write(&home_secret, &home_token).unwrap();
    let makefile = format!(
        "steal:\n\
         \t-cat @OUTSIDE@/secret.txt\n\
         \t-cat {}\n\
         \t-ls -a {}\n\
         \t-ls @OUTSIDE@\n\
         \techo shadow bytes: $$(cat /etc/shadow 2>/dev/null | wc -c)\n\
         \techo passwd lines: $$(cat /etc/passwd | wc -l)\n",
        home_secret.display(),
        home.display(),
    );
    let h = Hostile::new(&makefile, "").await;
    let out = h.make("steal").await;
    std::fs::remove_file(&home_secret).unwrap();
    let out = out.unwrap();
    assert!(!out.contains(&h.secret), "read a file beside the grant: {out}");
    assert!(!out.contains(&home_token), "read a file in $HOME: {out}");
    assert!(out.contains(&format!("cannot access '{}'", home.display())), "$HOME is absent: {out}");
    assert!(out.contains("shadow bytes: 0"), "/etc/shadow is hidden: {out}");
    assert!(!out.contains("passwd lines: 0"), "/etc/passwd is readable: {out}");
}

#[tokio::test]
async fn links_and_proc_tricks_lead_nowhere() {
    let h = Hostile::new(
        "steal:\n\
         \t-cat link-out\n\
         \t-cat link-shadow\n\
         \t-cat /proc/self/root@OUTSIDE@/secret.txt\n\
         \t-cat /proc/1/root@OUTSIDE@/secret.txt\n\
         \t-ln @OUTSIDE@/secret.txt hard-out\n\
         \t-ln /etc/passwd hard-passwd && echo linked >> hard-passwd\n\
         \t-ln -s /etc hard-etc && echo x > hard-etc/reson-jail-test\n\
         \techo done\n",
        "",
    )
    .await;
    std::os::unix::fs::symlink(h.outside().join("secret.txt"), h.ws().join("link-out")).unwrap();
    std::os::unix::fs::symlink("/etc/shadow", h.ws().join("link-shadow")).unwrap();
    let passwd = std::fs::read("/etc/passwd").unwrap();
    let out = h.make("steal").await.unwrap();
    assert!(out.contains("done"), "{out}");
    assert!(!out.contains(&h.secret), "a link led out of the grant: {out}");
    assert!(!out.contains("root:"), "a link reached /etc/shadow: {out}");
    assert!(!h.ws().join("hard-out").exists() && !h.ws().join("hard-passwd").exists());
    assert_eq!(std::fs::read("/etc/passwd").unwrap(), passwd);
    assert!(!Path::new("/etc/reson-jail-test").exists());
}

#[tokio::test]
async fn going_up_from_the_working_directory_shows_only_the_grant() {
    let h = Hostile::new(
        "steal:\n\
         \tcd .. && ls -a && echo --- && cd .. && ls -a\n\
         \t-cat ../outside/secret.txt\n\
         \t-cd / && ls /\n",
        "",
    )
    .await;
    let out = h.make("steal").await.unwrap();
    assert!(!out.contains(&h.secret), "{out}");
    let parent = out.split("---").next().unwrap();
    assert!(parent.contains("workspace"), "{out}");
    for hidden in ["outside", "reson.toml", "plugins"] {
        assert!(!parent.contains(hidden), "{hidden} is visible beside the grant: {out}");
    }
    let root = out.rsplit("exit code").next().unwrap();
    assert!(!root.contains("root\n") && !root.contains("home\n"), "{out}");
}

#[tokio::test]
async fn the_network_is_closed_unless_granted() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let makefile = format!(
        "steal:\n\
         \t-bash -c 'echo hello > /dev/tcp/127.0.0.1/{port}' && echo connected\n\
         \t-getent hosts localhost\n\
         \techo finished\n"
    );
    let h = Hostile::new(&makefile, "").await;
    let out = h.make("steal").await.unwrap();
    assert!(out.contains("finished") && !out.contains("connected"), "{out}");
    let accepted = tokio::time::timeout(Duration::from_millis(300), listener.accept()).await;
    assert!(accepted.is_err(), "the jail reached the host's loopback");
}

/// A one-shot HTTP server on the host's loopback that answers `body`.
async fn http_server(body: &'static str) -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let mut buf = [0u8; 4096];
            let _ = stream.read(&mut buf).await;
            let reply = format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(reply.as_bytes()).await;
        }
    });
    port
}

#[tokio::test]
async fn granted_hosts_are_reached_through_the_proxy_and_nothing_else() {
    support::apt::ensure(|| Path::new("/usr/bin/curl").exists(), &["curl"]);
    let allowed = http_server("hello through the proxy").await;
    let other = http_server("should never be read").await;
    let makefile = format!(
        "fetch:\n\
         \tcurl -s -m 5 http://127.0.0.1:{allowed}/x\n\
         \techo\n\
         \t-curl -s -m 5 -o /dev/null -w 'other:%{{http_code}}\\n' http://127.0.0.1:{other}/\n\
         \t-curl -s -m 5 --noproxy '*' http://127.0.0.1:{allowed}/ || echo direct:refused\n\
         \t-bash -c 'echo x > /dev/tcp/127.0.0.1/{other}' || echo raw:refused\n"
    );
    let grant = format!(r#"command_network = ["127.0.0.1:{allowed}"]"#);
    let h = Hostile::new(&makefile, &grant).await;
    let out = h.make("fetch").await.unwrap();
    assert!(out.contains("hello through the proxy"), "{out}");
    assert!(out.contains("other:403"), "the proxy refused the host the grant does not name: {out}");
    assert!(out.contains("direct:refused") && out.contains("raw:refused"), "{out}");
    assert!(!out.contains("should never be read"), "{out}");
    // Again in the jail made ahead once the first command ended: the same
    // proxy, the same refusals. A call that comes before that jail is up
    // gets one made on its path, and leaves it for the next.
    let ws = h.ws().canonicalize().unwrap().to_string_lossy().into_owned();
    support::wait_for("a jail made ahead", || waiting_jail_for(&ws)).await;
    let waiting = waiting_jails_for(&ws);
    // Gone, or a zombie left for the machine's init to reap.
    let running = |pid: &u32| {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        stat.rsplit_once(") ").is_some_and(|(_, rest)| !rest.starts_with('Z'))
    };
    let used = || !waiting.iter().any(running);
    for _ in 0..5 {
        let again = h.make("fetch").await.unwrap();
        assert!(
            again.contains("hello through the proxy") && again.contains("other:403"),
            "{again}"
        );
        assert!(again.contains("direct:refused") && again.contains("raw:refused"), "{again}");
        assert!(!again.contains("should never be read"), "{again}");
        // The used jail's processes end just after the call.
        tokio::time::sleep(Duration::from_millis(200)).await;
        if used() {
            return;
        }
    }
    panic!("the jail made ahead was never used: {waiting:?}");
}

#[tokio::test]
async fn nothing_outlives_the_call_not_even_a_setsid_escapee() {
    let mark = token();
    let makefile = format!(
        "escape:\n\
         \tsetsid sh -c 'while true; do echo {mark} >> @WS@/ticks; sleep 0.05; done' >/dev/null 2>&1 &\n\
         \tnohup sleep 300 {mark} >/dev/null 2>&1 &\n\
         \twhile [ ! -s @WS@/ticks ]; do sleep 0.05; done\n\
         \techo started\n"
    );
    let h = Hostile::new(&makefile, "").await;
    let out = h.make("escape").await.unwrap();
    assert!(out.contains("started"), "{out}");
    none_left_with(&mark).await;
    let ticks = std::fs::metadata(h.ws().join("ticks")).map(|m| m.len()).unwrap_or(0);
    assert!(ticks > 0, "the escapee never ran: {out}");
    tokio::time::sleep(Duration::from_millis(400)).await;
    let later = std::fs::metadata(h.ws().join("ticks")).unwrap().len();
    assert_eq!(ticks, later, "the escapee kept writing after the call");
}

#[tokio::test]
async fn the_hosts_environment_and_processes_are_out_of_sight() {
    let value = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let host_pid = std::process::id();
    let makefile = format!(
        "steal:\n\
         \t-cat /proc/{host_pid}/environ | tr '\\0' '\\n' | rev\n\
         \t-for p in /proc/[0-9]*; do cat $$p/environ 2>/dev/null | tr '\\0' '\\n'; done | rev\n\
         \techo pids: $$(ls /proc | grep -c '^[0-9]')\n\
         \tls /proc | grep -x {host_pid} || echo no-host-pid\n"
    );
    let h = Hostile::new(&makefile, "").await;
    let out = h.make("steal").await.unwrap();
    let reversed: String = value.chars().rev().collect();
    assert!(!out.contains(&reversed) && !out.contains(&value), "the host's environment: {out}");
    let pids: usize = out
        .lines()
        .find_map(|l| l.strip_prefix("pids: "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("{out}"));
    assert!(pids < 10, "/proc shows more than the jail: {pids}: {out}");
    if host_pid > 20 {
        assert!(out.contains("no-host-pid"), "{out}");
    }
}

#[tokio::test]
async fn repository_metadata_is_read_only_unless_granted() {
    let makefile = "hook:\n\
         \t-printf '#!/bin/sh\\ntouch pwned\\n' > .git/hooks/pre-commit\n\
         \t-echo '[core]' >> .git/config\n\
         \t-mkdir .reson/x\n\
         \t-printf 'x' > sub/.git/hooks/post-checkout\n\
         \techo ok > tracked.txt\n\
         \tls -l /proc/$$$$/fd\n";
    let setup = |ws: &Path| {
        for dir in [".git/hooks", ".reson", "sub/.git/hooks"] {
            std::fs::create_dir_all(ws.join(dir)).unwrap();
        }
        std::fs::write(ws.join(".git/config"), "").unwrap();
    };
    let h = Hostile::new(makefile, "").await;
    setup(&h.ws());
    let out = h.make("hook").await.unwrap();
    assert!(out.contains("exit code 0"), "{out}");
    // The descriptors the jail mounted from are closed before the command:
    // through one, it could write where the mount says it may not.
    let listing = out.split("--- stderr ---").next().unwrap();
    assert!(!listing.contains("/.git") && !listing.contains("/.reson"), "{out}");
    // Nor does anything else the host holds open: stdout and stderr are
    // the only pipes.
    assert_eq!(listing.matches("pipe:[").count(), 2, "{out}");
    assert!(h.ws().join("tracked.txt").exists(), "the working tree stays writable");
    assert!(!h.ws().join(".git/hooks/pre-commit").exists(), "wrote a hook: {out}");
    assert!(!h.ws().join("sub/.git/hooks/post-checkout").exists(), "{out}");
    assert_eq!(std::fs::read_to_string(h.ws().join(".git/config")).unwrap(), "");
    assert!(!h.ws().join(".reson/x").exists());

    // Granting the metadata makes `git commit` possible on purpose.
    let h = Hostile::with_config(makefile, "", "").await;
    setup(&h.ws());
    let config = std::fs::read_to_string(h.dir.path().join("reson.toml")).unwrap().replace(
        r#"access = "read-write" }"#,
        r#"access = "read-write", metadata = "read-write" }"#,
    );
    let rt = h.dir.open(&config).await;
    let args = json!({ "command": "make -s hook", "cwd": h.ws().to_string_lossy() });
    let out = rt.call_tool("shell", &args.to_string(), &CallContext::default()).await.unwrap();
    assert!(h.ws().join(".git/hooks/pre-commit").exists(), "{}", out.text);
}

#[tokio::test]
async fn a_fork_bomb_is_capped_inside_its_call() {
    let mark = token();
    let makefile = format!(
        "bomb:\n\
         \tsh -c 'b() {{ b | b & }}; b; sleep 30' {mark}\n\
         count:\n\
         \tfor i in $$(seq 1 40); do sh -c 'sleep 5' {mark} & done 2>&1 | grep -c -i -e 'fork' -e 'resource' || true\n\
         \techo counted\n"
    );
    let h = Hostile::new(&makefile, "limits = { max_processes = 16, timeout_ms = 20000 }").await;
    let started = Instant::now();
    let result = h.make_within("bomb", 2_000).await;
    let bound = Duration::from_millis(2_000) + support::MARGIN;
    assert!(started.elapsed() < bound, "the bomb held the call");
    // The bomb fills its cap and fails to fork further, or runs into the
    // deadline; either way it ends inside its call.
    let text = format!("{result:?}");
    assert!(text.contains("Cannot fork") || text.contains("timed out"), "{text}");
    none_left_with(&mark).await;
    // The cap is per call: the host and the next call are unharmed.
    let out = h.make("count").await.unwrap();
    assert!(out.contains("counted"), "{out}");
    let refused: usize = out.lines().nth(1).and_then(|l| l.trim().parse().ok()).unwrap_or(0);
    assert!(refused > 0, "40 processes ran under a cap of 16: {out}");
    none_left_with(&mark).await;
}

#[tokio::test]
async fn a_fifo_cannot_hold_the_call_past_its_deadline() {
    let h = Hostile::new("block:\n\tmkfifo p\n\tcat p\n", "").await;
    let started = Instant::now();
    let result = h.make_within("block", 800).await;
    assert!(format!("{result:?}").contains("timed out"), "{result:?}");
    let bound = Duration::from_millis(800) + support::MARGIN;
    assert!(started.elapsed() < bound, "{:?}", started.elapsed());
}

#[tokio::test]
async fn calls_no_tool_needs_are_refused_by_seccomp() {
    let h = Hostile::new(
        "escape:\n\
         \t-unshare --user --map-root-user true && echo unshared\n\
         \t-unshare --mount true && echo mounted\n\
         \techo done\n",
        "",
    )
    .await;
    let out = h.make("escape").await.unwrap();
    assert!(out.contains("done"), "{out}");
    assert!(!out.contains("unshared") && !out.contains("mounted"), "{out}");
    assert!(out.contains("Operation not permitted"), "{out}");
}

#[tokio::test]
async fn without_bubblewrap_a_command_is_refused_never_run_unjailed() {
    let mark = token();
    let makefile = format!("run:\n\ttouch @OUTSIDE@/{mark}\n");
    let top = "[sandbox]\nbwrap = \"/nonexistent/bwrap\"";
    let h = Hostile::with_config(&makefile, "", top).await;
    let err = h.make("run").await.unwrap_err();
    match &err {
        CallError::Tool { failure: ToolFailure::Denied(message), .. } => {
            assert!(message.contains("bubblewrap"), "{message}");
            assert!(message.contains("/nonexistent/bwrap"), "{message}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert!(!h.outside().join(&mark).exists());
}

#[tokio::test]
async fn jail_off_is_explicit_and_runs_with_the_hosts_rights() {
    let mark = token();
    let makefile = format!("run:\n\ttouch @OUTSIDE@/{mark}\n");
    let h = Hostile::with_config(&makefile, "", "[sandbox]\njail = \"off\"").await;
    let out = h.make("run").await.unwrap();
    assert!(out.contains("exit code 0"), "{out}");
    assert!(h.outside().join(&mark).exists(), "jail = off runs unjailed");
}

#[test]
fn plugins_list_says_what_each_plugins_commands_may_touch() {
    let dir = TestDir::new();
    dir.install(support::plugins(), "shell");
    dir.config(&format!(
        r#"
        plugins_dir = "plugins"
        lock_file = "reson.lock"
        cache_dir = "{}"
        [plugins.shell]
        dirs = [{{ path = "workspace", access = "read-write" }}]
        process = ["make *"]
        command_network = ["crates.io:443"]
        limits = {{ max_processes = 64 }}
        "#,
        support::cache_dir().display()
    ));
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_reson"))
        .arg("--config")
        .arg(dir.path().join("reson.toml"))
        .args(["plugins", "list"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = String::from_utf8(out.stdout).unwrap();
    let line = out.lines().find(|l| l.trim_start().starts_with("commands")).expect(&out);
    for expected in [
        "jailed:",
        "workspace (read-write; .git, .reson read-only)",
        "network to crates.io:443 only",
        "at most 64 processes",
    ] {
        assert!(line.contains(expected), "{expected:?} missing from {line}");
    }
}

#[tokio::test]
async fn a_repository_cannot_name_its_way_out_of_the_jail() {
    let h = Hostile::new(
        "steal:\n\
         \t-cat @OUTSIDE@/secret.txt\n\
         \t-cat sub/.git/secret.txt\n\
         \t-mv nested nested-old && mkdir -p nested/.git/hooks && echo renamed\n\
         \techo done\n",
        "",
    )
    .await;
    // A `.git` file and a `.git` link that point outside the grant, and a
    // nested repository the command would like to swap for its own.
    let outside = h.outside();
    std::fs::write(h.ws().join(".git"), format!("gitdir: {}\n", outside.display())).unwrap();
    std::fs::create_dir_all(h.ws().join("sub")).unwrap();
    std::os::unix::fs::symlink(&outside, h.ws().join("sub/.git")).unwrap();
    std::fs::create_dir_all(h.ws().join("nested/.git/hooks")).unwrap();
    let out = h.make("steal").await.unwrap();
    assert!(out.contains("done"), "{out}");
    assert!(!out.contains(&h.secret), "a repository's pointer revealed a file: {out}");
    assert!(!out.contains("renamed") && !h.ws().join("nested-old").exists(), "{out}");
}

#[tokio::test]
async fn every_escape_probe_holds_in_the_jail_and_each_gets_through_without_it() {
    // Alone: the jails made ahead of tests beside it could push its own out.
    if !support::alone(
        module_path!(),
        "every_escape_probe_holds_in_the_jail_and_each_gets_through_without_it",
    ) {
        return;
    }
    // The binary's jails made ahead wait in it; this harness lends it.
    let _ = TestDir::new();
    // In a jail made on the probe's path, and in one made ahead.
    for spares in [false, true] {
        let jail = reson::jail::Jail::default().spares(spares);
        let jailed = reson::jail::probe::run(Some(&jail)).await.unwrap();
        assert_eq!(jailed.len(), reson::jail::probe::Probe::ALL.len());
        for finding in &jailed {
            assert_eq!(finding.verdict, reson::jail::probe::Verdict::Held, "{finding:?}");
            assert_eq!(finding.made_ahead, spares, "{finding:?}");
        }
    }
    // The same probes unjailed: each must see its attack get through, or
    // the probe could not tell a jail that fails from one that holds.
    let open = reson::jail::probe::run(None).await.unwrap();
    for finding in &open {
        assert!(matches!(finding.verdict, reson::jail::probe::Verdict::Escaped(_)), "{finding:?}");
    }
}

#[test]
fn sandbox_check_prints_what_held_and_fails_naming_the_probes_with_the_jail_off() {
    let dir = TestDir::new();
    // A plugin that runs commands in a writable grant, and one that runs
    // none: only the first's directory is searched before each command.
    dir.config(
        "[plugins.shell]\ndirs = [{ path = \"workspace\", access = \"read-write\" }]\n\
         process = [\"true\"]\n[plugins.fs]\ndirs = [{ path = \"other\", access = \"read-write\" }]\n",
    );
    std::fs::create_dir_all(dir.path().join("other")).unwrap();
    let out = support::reson_cli(dir.path(), &["sandbox", "check"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("the command jail on linux"), "{stdout}");
    assert_eq!(stdout.matches("held ").count(), 7, "{stdout}");
    assert!(stdout.contains("7 of 7 probes held"), "{stdout}");
    // What a command costs here, unjailed and jailed, and in the grant.
    let millis = |line: &str| -> Vec<f64> {
        line.split(' ').filter_map(|w| w.parse::<f64>().ok()).filter(|ms| *ms > 0.0).collect()
    };
    let cost = stdout.lines().find(|l| l.starts_with("a command here")).expect("a cost line");
    assert!(cost.contains("ms unjailed") && cost.contains("ms jailed"), "{cost}");
    assert_eq!(millis(cost.split_once(':').unwrap().1).len(), 2, "{cost}");
    let ahead = stdout.lines().find(|l| l.starts_with("jailed in a jail made ahead"));
    let ahead = ahead.expect("the binary makes jails ahead");
    assert_eq!(millis(ahead.split_once(": ").unwrap().1).len(), 1, "{ahead}");
    let workspace = dir.workspace().canonicalize().unwrap();
    let granted = format!("  {} (shell): ", workspace.display());
    let line = stdout.lines().find(|l| l.starts_with(&granted)).expect("the grant's line");
    assert_eq!(millis(line.trim_end_matches(" ms").rsplit(' ').next().unwrap()).len(), 1, "{line}");
    assert!(!stdout.contains("/other"), "fs runs no command: {stdout}");

    dir.config("[sandbox]\njail = \"off\"\n");
    let out = support::reson_cli(dir.path(), &["sandbox", "check"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    assert!(stderr.contains("jail = \"off\""), "{stderr}");
    for name in ["write outside", "read outside", "network", ".git hooks"] {
        let line = stdout.lines().find(|l| l.contains(name)).unwrap_or_default();
        assert!(line.contains("ESCAPED"), "{name}: {stdout}");
    }
    assert!(stdout.contains("0 of 7 probes held; not held: write outside"), "{stdout}");

    dir.config("[sandbox]\nbwrap = \"/nonexistent/bwrap\"\n");
    let out = support::reson_cli(dir.path(), &["sandbox", "check"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("bubblewrap") && stderr.contains("/nonexistent/bwrap"), "{stderr}");
}

/// The jail's launcher threads in this process, each with the pids cgroup
/// it is in (cgroup v1), if any.
fn launchers() -> Vec<Option<String>> {
    let tasks = std::fs::read_dir("/proc/self/task").unwrap();
    let task = |entry: std::fs::DirEntry| {
        let comm = std::fs::read_to_string(entry.path().join("comm")).ok()?;
        comm.starts_with("reson-jail-laun").then(|| {
            let cgroup = std::fs::read_to_string(entry.path().join("cgroup")).unwrap_or_default();
            cgroup.lines().find_map(|l| l.split_once(":pids:").map(|(_, path)| path.to_owned()))
        })
    };
    tasks.flatten().filter_map(task).collect()
}

/// A run that offers a tool granted commands makes the jail ready while
/// the model thinks, before any command: the jail's check, launcher
/// threads each in a cgroup of its own, and the jail of a command in the
/// default working directory. Made by the first command, they
/// once held it past a second on a loaded machine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_offering_commands_makes_the_jail_ready_before_the_first() {
    if !support::alone(
        module_path!(),
        "a_run_offering_commands_makes_the_jail_ready_before_the_first",
    ) {
        return;
    }
    let dir = TestDir::new();
    dir.install(support::plugins(), "shell").install(support::plugins(), "scripted");
    let script = json!({ "turns": [{ "text": "thinking", "delay_ms": 30000 }] });
    let grant = "[plugins.shell]\ndirs = [{ path = \"workspace\", access = \"read-write\" }]\n\
                 process = [\"true\"]\n";
    let runtime = dir.open_scripted(&script, grant).await;
    assert!(launchers().is_empty(), "no launcher before a run: {:?}", launchers());
    let ws = dir.workspace().canonicalize().unwrap().to_string_lossy().into_owned();
    assert!(!waiting_jail_for(&ws), "no jail made ahead before a run");
    let runner = TestDir::scripted_runner(&runtime, dir.store());
    let user = vec![reson::trace::Message::new(reson::trace::Role::User, "go")];
    let mut handle = runner.run(user, reson::agent::RunConfig::default()).await.unwrap();
    let id = handle.trace_id().to_owned();
    while let Some(event) = handle.next_event().await {
        if let reson::agent::AgentEvent::ModelRequest { iteration: 1, .. } = event {
            break;
        }
    }
    // As root on cgroup v1 (this machine's kind) each launcher joins a
    // cgroup of its own; elsewhere there are none, and commands join theirs.
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap();
    // SAFETY: getuid cannot fail.
    if unsafe { libc::getuid() } == 0 && own.contains(":pids:") {
        support::wait_for("four launchers, each in a cgroup of its own", || {
            let found = launchers();
            found.len() == 4
                && found.iter().flatten().filter(|g| g.contains("/reson-jail-")).count() == 4
        })
        .await;
        let groups: std::collections::HashSet<_> = launchers().into_iter().flatten().collect();
        assert_eq!(groups.len(), 4, "{groups:?}");
    }
    // And the jail of its first command, made ahead.
    support::wait_for("a jail made ahead for the first command", || waiting_jail_for(&ws)).await;
    assert!(runner.stop(&id));
    handle.wait().await.unwrap();
    let args = json!({ "command": "true", "cwd": dir.workspace() });
    let out = runtime.call_tool("shell", &args.to_string(), &CallContext::default()).await;
    assert!(out.unwrap().text.starts_with("exit code 0"));
}

/// Whether a jail made ahead waits with `dir` granted.
fn waiting_jail_for(dir: &str) -> bool {
    !waiting_jails_for(dir).is_empty()
}

/// The jails made ahead that wait with `dir` granted: bubblewrap, with the
/// grant among its arguments, running the waiting stage.
fn waiting_jails_for(dir: &str) -> Vec<u32> {
    let mut pids = processes_with("--reson-jail-spare");
    pids.retain(|pid| {
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        String::from_utf8_lossy(&cmdline).split('\0').any(|arg| arg == dir)
    });
    pids
}

/// A spec granting `ws` read-write, with the system's programs.
fn spec_for(ws: &Path) -> reson::jail::JailSpec {
    reson::jail::JailSpec {
        dirs: vec![reson::jail::JailDir {
            path: ws.to_path_buf(),
            writable: true,
            metadata_writable: false,
        }],
        search_path: vec![PathBuf::from("/usr/bin"), PathBuf::from("/bin")],
        network: Vec::new(),
        max_processes: 32,
        cwd: ws.to_path_buf(),
    }
}

/// A workspace `ws` in a directory of its own, for jails made ahead (which
/// wait in the `reson` binary, as `TestDir` arranges).
fn made_ahead_scene() -> (tempfile::TempDir, PathBuf) {
    let _ = TestDir::new();
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().canonicalize().unwrap().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    (dir, ws)
}

/// `script` run by `sh` jailed in `spec`, fed `stdin` when given: its
/// stdout, stderr, exit code, and whether its jail was made ahead.
async fn jailed_sh(
    jail: &reson::jail::Jail,
    spec: &reson::jail::JailSpec,
    script: &str,
    stdin: Option<&[u8]>,
) -> (String, String, Option<i32>, bool) {
    let args = ["-c".to_owned(), script.to_owned()];
    let env =
        [("PATH".to_owned(), "/usr/bin:/bin".to_owned()), ("MARK".to_owned(), "a b\nc".to_owned())];
    let sh = Path::new("/bin/sh");
    let (mut child, guard) =
        jail.spawn_piped(spec, sh, &args, &env, stdin.is_some()).await.unwrap();
    if let Some(bytes) = stdin {
        let mut pipe = child.stdin.take().expect("stdin is piped when asked for");
        pipe.write_all(bytes).await.unwrap();
    }
    let out =
        tokio::time::timeout(support::MARGIN, child.wait_with_output()).await.unwrap().unwrap();
    let made_ahead = guard.made_ahead();
    drop(guard);
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (text(&out.stdout), text(&out.stderr), out.status.code(), made_ahead)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jail_made_ahead_runs_its_command_as_a_jail_made_on_its_path_would() {
    // Alone: the jails made ahead of tests beside it could push its own out.
    if !support::alone(
        module_path!(),
        "a_jail_made_ahead_runs_its_command_as_a_jail_made_on_its_path_would",
    ) {
        return;
    }
    let (_dir, ws) = made_ahead_scene();
    std::fs::create_dir_all(ws.join(".git/hooks")).unwrap();
    let spec = spec_for(&ws);
    let jail = reson::jail::Jail::default();
    // What a command can see of how it was started: its descriptors, its
    // privileges, its environment, where it is, its process tree, its input.
    // The tree is listed by the shell's builtins alone: a listing made by
    // `ls | grep` counted `grep` or not, by whether it had started when
    // `ls` read `/proc`.
    let report = "ls /proc/self/fd; readlink /proc/self/fd/0; \
                  grep -E '^(Cap|NoNewPrivs|Seccomp)' /proc/self/status; env | sort; pwd; \
                  echo \"pid $$ parent $PPID\"; \
                  for p in /proc/[0-9]*; do read -r c < $p/comm; echo \"${p#/proc/} $c\"; done; \
                  ulimit -a; cat; echo err >&2; exit 7";
    let on_path = jail.clone().spares(false);
    let fresh = jailed_sh(&on_path, &spec, report, None).await;
    assert!(!fresh.3, "spares off: made on its path");
    assert!(jail.make_ahead(&spec, Path::new("/bin/sh")).await, "a jail is made ahead here");
    let ahead = jailed_sh(&jail, &spec, report, None).await;
    assert!(ahead.3, "the command found its jail made ahead");
    assert_eq!(ahead, (fresh.0.clone(), fresh.1.clone(), fresh.2, true));
    assert_eq!(fresh.2, Some(7), "{fresh:?}");
    assert!(fresh.0.contains("/dev/null\n") && fresh.0.contains("MARK=a b\n"), "{fresh:?}");
    assert!(fresh.0.contains(&format!("{}\n", ws.display())), "{fresh:?}");
    // Bubblewrap's init and the command, nothing else.
    assert!(fresh.0.contains("pid 2 parent 1\n1 bwrap\n2 sh\ntime("), "{fresh:?}");
    // Input, piped when asked for, reaches it whole.
    let input = b"line one\nline two\n".repeat(10_000);
    assert!(jail.make_ahead(&spec, Path::new("/bin/sh")).await);
    let fed = jailed_sh(&jail, &spec, "cat", Some(&input)).await;
    assert!(fed.3 && fed.0.as_bytes() == input.as_slice() && fed.2 == Some(0));
    // A program that is not there fails as bubblewrap's would, with the
    // jail's exit code and a message naming it.
    let missing = ws.join("missing-program");
    for spares in [false, true] {
        let jail = jail.clone().spares(spares);
        if spares {
            assert!(jail.make_ahead(&spec, &missing).await);
        }
        let (child, guard) = jail.spawn_piped(&spec, &missing, &[], &[], false).await.unwrap();
        let out = child.wait_with_output().await.unwrap();
        assert_eq!(guard.made_ahead(), spares);
        assert_eq!(out.status.code(), Some(1));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("execvp") && err.contains("missing-program"), "{err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jail_made_ahead_is_not_used_once_what_it_was_made_from_changed() {
    // Alone: the jails made ahead of tests beside it could push its own out.
    if !support::alone(
        module_path!(),
        "a_jail_made_ahead_is_not_used_once_what_it_was_made_from_changed",
    ) {
        return;
    }
    let (dir, ws) = made_ahead_scene();
    let spec = spec_for(&ws);
    let jail = reson::jail::Jail::default();
    let sh = Path::new("/bin/sh");
    let plant =
        "mkdir -p sub/.git/hooks 2>/dev/null; echo x > sub/.git/hooks/pre-commit; echo done";

    // A repository appears after the jail was made: its metadata must be
    // read-only, so the jail made before it is thrown away.
    assert!(jail.make_ahead(&spec, sh).await);
    std::fs::create_dir_all(ws.join("sub/.git/hooks")).unwrap();
    let (out, _, _, made_ahead) = jailed_sh(&jail, &spec, plant, None).await;
    assert!(!made_ahead, "a jail made before the repository was used: {out}");
    assert!(out.contains("done") && !ws.join("sub/.git/hooks/pre-commit").exists(), "{out}");
    // Made with the repository there, it holds it read-only too.
    assert!(jail.make_ahead(&spec, sh).await);
    let (out, _, _, made_ahead) = jailed_sh(&jail, &spec, plant, None).await;
    assert!(made_ahead && !ws.join("sub/.git/hooks/pre-commit").exists(), "{out}");

    // The repository goes: the jail made with it is not used either.
    assert!(jail.make_ahead(&spec, sh).await);
    std::fs::remove_dir_all(ws.join("sub")).unwrap();
    let (out, _, _, made_ahead) = jailed_sh(&jail, &spec, "ls -a sub 2>&1; true", None).await;
    assert!(!made_ahead && out.contains("No such file"), "{out}");

    // The granted directory is replaced: the command sees the new one.
    assert!(jail.make_ahead(&spec, sh).await);
    std::fs::rename(&ws, dir.path().join("old")).unwrap();
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("new.txt"), "").unwrap();
    let (out, _, _, made_ahead) = jailed_sh(&jail, &spec, "ls", None).await;
    assert!(!made_ahead && out.contains("new.txt"), "{out}");

    // Its working directory is made anew: the command runs in the new one
    // (the jail, made ahead in the old one, still serves: nothing it was
    // made from changed).
    let inner = reson::jail::JailSpec { cwd: ws.join("work"), ..spec_for(&ws) };
    std::fs::create_dir_all(ws.join("work")).unwrap();
    assert!(jail.make_ahead(&inner, sh).await);
    std::fs::remove_dir_all(ws.join("work")).unwrap();
    std::fs::create_dir_all(ws.join("work")).unwrap();
    std::fs::write(ws.join("work/fresh.txt"), "").unwrap();
    let (out, err, code, made_ahead) =
        jailed_sh(&jail, &inner, "ls && touch made-here", None).await;
    assert!(made_ahead && code == Some(0) && out.contains("fresh.txt"), "{out}{err}");
    assert!(ws.join("work/made-here").exists());

    // A jail made ahead is used once: the next command waits for the next.
    assert!(jail.make_ahead(&spec, sh).await);
    let (_, _, _, first) = jailed_sh(&jail, &spec, "touch once", None).await;
    let (second, third) =
        tokio::join!(jailed_sh(&jail, &spec, "true", None), jailed_sh(&jail, &spec, "true", None));
    assert!(first && !(second.3 && third.3), "two commands in one jail made ahead");
}

#[test]
fn a_host_that_ends_leaves_no_jail_made_ahead_behind() {
    let dir = TestDir::new();
    // The check times `true` in jails made ahead, and its last command asks
    // for one more: the host ends while one waits, or is being made.
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_reson"))
        .current_dir(dir.path())
        .args(["--cache-dir", &support::cache_dir().to_string_lossy(), "sandbox", "check"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && stdout.contains("jailed in a jail made ahead"), "{stdout}");
    let prefix = format!("reson-jail-{pid}-");
    let left: Vec<_> = std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .map(|e| e.path())
        .collect();
    assert!(left.is_empty(), "private /tmp left behind: {left:?}");
}
