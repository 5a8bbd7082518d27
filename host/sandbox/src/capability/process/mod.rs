//! `reson:plugin/process`: host commands, only those whose canonical argv
//! matches a pattern both requested and granted (see
//! [`Grants::command`](crate::policy::Grants::command)).
//!
//! Every command runs in the OS jail made from the plugin's grant
//! ([`crate::jail`]), unless the user turned it off (`[sandbox] jail =
//! "off"`, warned about on every call); where the jail cannot be had, the
//! command is refused. It runs in its own process group, which is killed
//! when the call ends and at its deadline (in the jail, its PID namespace
//! and cgroup go with it), so nothing it started outlives the call; its
//! output is read until then and no longer, even when a grandchild still
//! holds the pipes, and scrubbed of every secret before the guest sees it.

use super::HostState;
use crate::contract::bindings::tool::reson::plugin::process::{
    Command, Host, Output, ProcessError,
};
use crate::jail::{Jail, JailGuard, JailSpec};
use crate::policy::{CommandDenial, CommandError, ResolvedCommand};
use group::{Exits, Group};
use reson_text::redact::redact_bytes;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, ChildStdin};
use tokio_util::sync::CancellationToken;
use workdir::WorkDir;

mod group;
mod workdir;

/// Cap on captured stdout and on captured stderr, each.
const MAX_CAPTURE_BYTES: usize = 4 << 20;
/// Host variables a command inherits; everything else is set by the host
/// or by the guest within its grant.
const INHERITED_ENV: [&str; 2] = ["HOME", "LANG"];
/// How long the pipes may stay open after the command exits, for a
/// grandchild's last output, before the group is killed.
const PIPE_GRACE: Duration = Duration::from_millis(100);
/// Bytes taken from a pipe per read.
const READ_CHUNK: usize = 16 << 10;

impl HostState {
    /// Maps a guest path to the host path it names and the granted
    /// directory it lies in.
    fn host_dir(&self, guest: &str) -> Option<(PathBuf, &Path)> {
        self.grants.dirs.iter().find_map(|dir| {
            let rest = Path::new(guest).strip_prefix(&dir.guest).ok()?;
            if rest.components().any(|c| matches!(c, std::path::Component::ParentDir)) {
                return None;
            }
            Some((dir.host.join(rest), dir.host.as_path()))
        })
    }

    /// The working directory of a command, opened: the guest's `cwd`
    /// (default: the first granted directory), which must really lie in a
    /// granted directory once symlinks are followed. The command starts in
    /// the directory opened here, so a link swapped in after the check
    /// cannot move it.
    fn working_dir(&mut self, guest: Option<&str>) -> Result<WorkDir, ProcessError> {
        let (path, root) = match guest {
            Some(guest) => match self.host_dir(guest) {
                Some((path, root)) => (path, root.to_path_buf()),
                None => {
                    let detail =
                        format!("working directory `{guest}` is outside the granted directories");
                    return Err(ProcessError::Denied(self.deny("process", detail)));
                }
            },
            None => match self.grants.dirs.first() {
                Some(dir) => (dir.host.clone(), dir.host.clone()),
                None => return WorkDir::open(&std::env::temp_dir(), None),
            },
        };
        let dir = WorkDir::open(&path, Some(&root))?;
        if dir.escaped {
            let detail = format!(
                "working directory `{}` leads outside the granted directories",
                guest.unwrap_or_default()
            );
            return Err(ProcessError::Denied(self.deny("process", detail)));
        }
        Ok(dir)
    }
}

impl HostState {
    /// For a git command, pins for the commands its repository's own config
    /// names per driver or remote, found by a `git config` probe run with
    /// `env` (the fixed pins only); a refusal when the repository sets a key
    /// no pin can hold. Empty for other programs.
    async fn repository_pins(
        &mut self,
        command: &ResolvedCommand,
        cwd: &Path,
        env: Vec<(String, String)>,
        timeout: Duration,
        jail: Option<&Jailing>,
    ) -> Result<Vec<(String, String)>, ProcessError> {
        let Some(probe) = crate::policy::git_probe(command) else { return Ok(Vec::new()) };
        let spec = Spec { command: &probe, cwd, env, stdin: None, jail };
        let output = run_capped(spec, timeout, self.cancel.clone()).await?;
        let granted = |file: &Path| {
            let file = file.canonicalize().unwrap_or_else(|_| file.to_path_buf());
            self.grants.dirs.iter().any(|d| file.starts_with(&d.host))
        };
        let found = crate::policy::git_repository_config(&output.stdout, &granted);
        match found.refused {
            Some(key) if !self.grants.allows_exec_vector("git") => {
                let detail = format!(
                    "plugin `{}`: `{}` is refused: the repository's own config sets `{key}`, a \
                     program git would run; a grant allows that only with \
                     `exec_vectors = [\"git\"]`",
                    self.plugin,
                    command.line()
                );
                Err(ProcessError::Denied(self.deny("process", detail)))
            }
            _ => Ok(found.pins),
        }
    }
}

impl Host for HostState {
    async fn run(&mut self, command: Command) -> wasmtime::Result<Result<Output, ProcessError>> {
        self.run_with_effects(command).await
    }
}

impl HostState {
    /// `process.run`, for real.
    pub(super) async fn run_live(
        &mut self,
        command: Command,
    ) -> wasmtime::Result<Result<Output, ProcessError>> {
        let remaining = self.remaining()?;
        let resolved = match self.grants.command(&command.program, &command.args) {
            Ok(resolved) => resolved,
            // A missing program is not a refusal: nothing could run it.
            Err(CommandDenial::Unresolved(missing @ CommandError::NotFound(_))) => {
                return Ok(Err(ProcessError::Spawn(missing.to_string())));
            }
            Err(denial) => {
                let detail = format!("plugin `{}`: {denial}", self.plugin);
                return Ok(Err(ProcessError::Denied(self.deny("process", detail))));
            }
        };
        if let Some((name, _)) = command.env.iter().find(|(name, _)| !self.grants.allows_env(name))
        {
            let detail = format!(
                "environment variable `{name}` is not allowed: commands get only LANG, LC_*, TZ, \
                 NO_COLOR, TERM, COLUMNS and the variables the grant names (`env = [\"{name}\"]` \
                 in [plugins.{}])",
                self.plugin
            );
            return Ok(Err(ProcessError::Denied(self.deny("process", detail))));
        }
        let workdir = match self.working_dir(command.cwd.as_deref()) {
            Ok(dir) => dir,
            Err(e) => return Ok(Err(e)),
        };
        let jailing = match self.jailing(&workdir).await {
            Ok(jailing) => jailing,
            Err(e) => return Ok(Err(e)),
        };
        let cwd = workdir.path();
        // The guest's variables come after PATH, so that a grant naming
        // PATH lets the guest's through; the git pins come last and win.
        let mut base: Vec<(String, String)> = INHERITED_ENV
            .iter()
            .filter_map(|name| Some(((*name).to_owned(), std::env::var(name).ok()?)))
            .collect();
        base.push(("PATH".to_owned(), self.grants.search_path().env_value()));
        base.extend(command.env.iter().cloned());
        let pinned = |named: &[(String, String)]| {
            base.iter().cloned().chain(crate::policy::pinned_env(named)).collect::<Vec<_>>()
        };
        let timeout = command
            .timeout_ms
            .map_or(remaining, |ms| Duration::from_millis(ms.into()).min(remaining));
        let deadline = Instant::now() + timeout;
        let jail = jailing.as_ref();
        let named = match self.repository_pins(&resolved, &cwd, pinned(&[]), timeout, jail).await {
            Ok(named) => named,
            Err(e) => return Ok(Err(e)),
        };
        let env = pinned(&named);
        let spec = Spec { command: &resolved, cwd: &cwd, env, stdin: command.stdin, jail };
        let left = deadline.saturating_duration_since(Instant::now());
        let result = run_capped(spec, left, self.cancel.clone()).await.map(scrubbed);
        self.remaining()?;
        Ok(result)
    }
}

impl HostState {
    /// The jail this call's commands run in, checked to work here; `None`
    /// when the user turned it off, which is warned about every time.
    async fn jailing(&mut self, workdir: &WorkDir) -> Result<Option<Jailing>, ProcessError> {
        let Some(jail) = self.grants.jail() else {
            tracing::warn!(
                plugin = %self.plugin,
                "a command runs unjailed, with all of the host's rights: [sandbox] jail = \"off\""
            );
            return Ok(None);
        };
        if let Err(e) = jail.check().await {
            let detail = format!("plugin `{}`: the command is refused: {e}", self.plugin);
            return Err(ProcessError::Denied(self.deny("process", detail)));
        }
        // With no granted directory the command starts in its private /tmp.
        let cwd = match (&workdir.real, self.grants.dirs.is_empty()) {
            (Some(real), false) => real.clone(),
            _ => PathBuf::from(crate::jail::PRIVATE_TMP),
        };
        Ok(Some(Jailing { jail, spec: self.grants.jail_spec(cwd) }))
    }
}

/// A jail and what it holds for one command.
struct Jailing {
    jail: Jail,
    spec: JailSpec,
}

/// One command, ready to spawn.
struct Spec<'a> {
    command: &'a ResolvedCommand,
    cwd: &'a Path,
    env: Vec<(String, String)>,
    stdin: Option<Vec<u8>>,
    jail: Option<&'a Jailing>,
}

impl Spec<'_> {
    /// The command, started, with the jail's guard when it runs jailed.
    async fn spawn(&self) -> Result<(Child, Option<JailGuard>), ProcessError> {
        let name = &self.command.argv[0];
        let Some(jailing) = self.jail else {
            let mut cmd = tokio::process::Command::new(&self.command.executable);
            #[cfg(unix)]
            cmd.arg0(name);
            cmd.args(self.command.args())
                .current_dir(self.cwd)
                .env_clear()
                .envs(self.env.iter().cloned());
            // As the jail starts its commands (see `Jail::spawn_piped`).
            Group::prepare(&mut cmd);
            cmd.stdin(if self.stdin.is_some() { Stdio::piped() } else { Stdio::null() })
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            let child = cmd.spawn().map_err(|e| ProcessError::Spawn(format!("{name}: {e}")))?;
            return Ok((child, None));
        };
        let (executable, args) = (&self.command.executable, self.command.args());
        let stdin = self.stdin.is_some();
        let started = jailing.jail.spawn_piped(&jailing.spec, executable, args, &self.env, stdin);
        match started.await {
            Ok((child, guard)) => {
                tracing::debug!(command = %name, made_ahead = guard.made_ahead(), "jailed command started");
                Ok((child, Some(guard)))
            }
            Err(e) => Err(ProcessError::Spawn(format!("{name}: {e}"))),
        }
    }
}

/// One output pipe being read.
struct Capture<R> {
    pipe: Option<R>,
    buf: Box<[u8]>,
    kept: Vec<u8>,
    dropped: bool,
}

impl<R: AsyncRead + Unpin> Capture<R> {
    fn new(pipe: Option<R>) -> Self {
        Self { pipe, buf: vec![0; READ_CHUNK].into(), kept: Vec::new(), dropped: false }
    }

    /// Reads what comes next; closes the pipe at end of file or on error.
    /// Cancel-safe: nothing is read unless the read completes.
    async fn read(&mut self) {
        let Some(pipe) = &mut self.pipe else { return };
        match pipe.read(&mut self.buf).await {
            Ok(0) | Err(_) => self.pipe = None,
            Ok(n) => {
                let room = MAX_CAPTURE_BYTES.saturating_sub(self.kept.len());
                self.kept.extend_from_slice(&self.buf[..n.min(room)]);
                self.dropped |= n > room;
            }
        }
    }
}

/// The command's stdin, closed once all of it is written.
struct Feed {
    pipe: Option<ChildStdin>,
    data: Vec<u8>,
    written: usize,
}

impl Feed {
    /// Writes what the pipe takes. Cancel-safe: a write that does not
    /// complete writes nothing.
    async fn write(&mut self) {
        let Some(pipe) = &mut self.pipe else { return };
        if self.written == self.data.len() {
            self.pipe = None;
            return;
        }
        match pipe.write(&self.data[self.written..]).await {
            Ok(n) => self.written += n,
            Err(_) => self.pipe = None,
        }
    }
}

/// Completes when `cancel` is cancelled; never without one.
async fn cancelled(cancel: Option<CancellationToken>) {
    match cancel {
        Some(token) => token.cancelled_owned().await,
        None => std::future::pending().await,
    }
}

async fn run_capped(
    spec: Spec<'_>,
    timeout: Duration,
    cancel: Option<CancellationToken>,
) -> Result<Output, ProcessError> {
    let deadline = Instant::now() + timeout;
    let name = spec.command.argv[0].clone();
    let spawn_error = |e: std::io::Error| ProcessError::Spawn(format!("{name}: {e}"));
    // Made before the spawn, so that no exit of the command goes unseen.
    let mut child_exits = Exits::new().map_err(spawn_error)?;
    let (mut child, jail_guard) = spec.spawn().await?;
    let mut stdout = Capture::new(child.stdout.take());
    let mut stderr = Capture::new(child.stderr.take());
    let mut feed =
        Feed { pipe: child.stdin.take(), data: spec.stdin.unwrap_or_default(), written: 0 };
    let Some(mut group) = Group::new(child) else {
        return Err(ProcessError::Spawn("the command has no pid".into()));
    };
    let cut = cancelled(cancel);
    let time_up = tokio::time::sleep_until(deadline.into());
    tokio::pin!(cut, time_up);
    let mut exited_at: Option<Instant> = None;
    loop {
        let closed = stdout.pipe.is_none() && stderr.pipe.is_none();
        if exited_at.is_some() && closed {
            break;
        }
        let grace_over = async {
            match exited_at {
                Some(at) => tokio::time::sleep_until((at + PIPE_GRACE).into()).await,
                None => std::future::pending::<()>().await,
            }
        };
        // Biased so that the deadline and a cancel win over a command that
        // never stops writing.
        tokio::select! {
            biased;
            () = &mut cut => {
                let _ = group.finish().await;
                return Err(ProcessError::Timeout);
            }
            () = &mut time_up => {
                let _ = group.finish().await;
                return Err(ProcessError::Timeout);
            }
            () = grace_over => break,
            () = child_exits.next(), if exited_at.is_none() => {
                if group.exited() {
                    exited_at = Some(Instant::now());
                }
            }
            () = feed.write(), if feed.pipe.is_some() => {}
            () = stdout.read(), if stdout.pipe.is_some() => {}
            () = stderr.read(), if stderr.pipe.is_some() => {}
        }
    }
    let status = group.finish().await.map_err(|e| ProcessError::Spawn(e.to_string()))?;
    drop(jail_guard);
    Ok(Output {
        exit_code: status.code(),
        stdout: stdout.kept,
        stderr: stderr.kept,
        truncated: stdout.dropped || stderr.dropped,
    })
}

/// `output` as the guest may see it: a command reads what the guest's
/// sandbox cannot (the config, the host's files), so every secret is
/// scrubbed from its output as from an HTTP response.
fn scrubbed(output: Output) -> Output {
    Output {
        stdout: redact_bytes(&output.stdout).into_owned(),
        stderr: redact_bytes(&output.stderr).into_owned(),
        ..output
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use crate::policy::{SearchPath, resolve};

    fn sh(script: &str) -> ResolvedCommand {
        let args = ["-c".to_owned(), script.to_owned()];
        resolve("sh", &args, &SearchPath::default(), &[]).unwrap()
    }

    /// Dead, or a zombie waiting for whoever reaps it.
    fn dead(pid: i32) -> bool {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"));
        stat.map_or(true, |s| {
            s.rsplit(')').next().is_some_and(|rest| rest.trim_start().starts_with('Z'))
        })
    }

    async fn wait_dead(pid: i32) -> bool {
        let until = Instant::now() + Duration::from_secs(2);
        while Instant::now() < until {
            if dead(pid) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        false
    }

    /// The pids a script wrote to `file`, once it has written `count`.
    async fn pids_in(file: &Path, count: usize) -> Vec<i32> {
        loop {
            let text = std::fs::read_to_string(file).unwrap_or_default();
            let pids: Vec<i32> = text.lines().filter_map(|l| l.trim().parse().ok()).collect();
            if pids.len() >= count {
                return pids;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// A command whose leader and background child both sleep, each
    /// writing its pid to `file`.
    fn sleepers(file: &Path) -> ResolvedCommand {
        sh(&format!("sleep 30 & echo $! >> {0}; echo $$ >> {0}; sleep 30", file.display()))
    }

    #[tokio::test]
    async fn a_cancel_ends_the_command_and_its_group_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("pids");
        let command = sleepers(&file);
        let cwd = std::env::temp_dir();
        let spec = Spec { command: &command, cwd: &cwd, env: Vec::new(), stdin: None, jail: None };
        let token = CancellationToken::new();
        // Both sleepers outlast the deadline: only the cancel ends the
        // command before it.
        let deadline = Duration::from_secs(30);
        let started = Instant::now();
        let run = run_capped(spec, deadline, Some(token.clone()));
        let (result, pids) = tokio::join!(run, async {
            let pids = pids_in(&file, 2).await;
            token.cancel();
            pids
        });
        assert!(matches!(result, Err(ProcessError::Timeout)), "{result:?}");
        assert!(started.elapsed() < deadline, "the deadline ended it, not the cancel");
        for pid in pids {
            assert!(wait_dead(pid).await, "process {pid} survived the cancel");
        }
    }

    #[tokio::test]
    async fn dropping_a_running_command_kills_its_group() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("pids");
        let command = sleepers(&file);
        let cwd = std::env::temp_dir();
        let spec = Spec { command: &command, cwd: &cwd, env: Vec::new(), stdin: None, jail: None };
        let run = run_capped(spec, Duration::from_secs(30), None);
        let pids = tokio::select! {
            result = run => panic!("the command ended on its own: {result:?}"),
            pids = pids_in(&file, 2) => pids,
        };
        for pid in pids {
            assert!(wait_dead(pid).await, "process {pid} outlived the dropped call");
        }
    }

    #[tokio::test]
    async fn output_and_exit_code_are_captured_and_stdin_is_fed() {
        let command = sh("cat; echo oops >&2; exit 3");
        let cwd = std::env::temp_dir();
        let stdin = Some(b"fed".to_vec());
        let spec = Spec { command: &command, cwd: &cwd, env: Vec::new(), stdin, jail: None };
        let output = run_capped(spec, Duration::from_secs(10), None).await.unwrap();
        assert_eq!(output.exit_code, Some(3));
        assert_eq!(output.stdout, b"fed");
        assert_eq!(output.stderr, b"oops\n");
        assert!(!output.truncated);
    }
}
