//! `reson:plugin/process`: host commands, only those whose command line
//! matches a pattern both requested and granted.

use super::HostState;
use crate::contract::bindings::tool::reson::plugin::process::{
    Command, Host, Output, ProcessError,
};
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

/// Cap on captured stdout and on captured stderr, each.
const MAX_CAPTURE_BYTES: u64 = 4 << 20;
/// Host variables a command inherits; everything else starts empty.
const INHERITED_ENV: [&str; 3] = ["PATH", "HOME", "LANG"];

impl HostState {
    /// Maps a guest path to the host path of the granted directory it lies in.
    fn host_dir(&self, guest: &str) -> Option<PathBuf> {
        self.grants.dirs.iter().find_map(|dir| {
            let rest = std::path::Path::new(guest).strip_prefix(&dir.guest).ok()?;
            if rest.components().any(|c| matches!(c, std::path::Component::ParentDir)) {
                return None;
            }
            Some(dir.host.join(rest))
        })
    }
}

impl Host for HostState {
    fn run(&mut self, command: Command) -> wasmtime::Result<Result<Output, ProcessError>> {
        let remaining = self.remaining()?;
        let line = std::iter::once(command.program.as_str())
            .chain(command.args.iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join(" ");
        if !self.grants.allows_command(&line) {
            let detail =
                format!("`{line}` matches no command pattern granted to plugin `{}`", self.plugin);
            return Ok(Err(ProcessError::Denied(self.deny("process", detail))));
        }
        let cwd = match &command.cwd {
            Some(guest) => match self.host_dir(guest) {
                Some(dir) => dir,
                None => {
                    let detail =
                        format!("working directory `{guest}` is outside the granted directories");
                    return Ok(Err(ProcessError::Denied(self.deny("process", detail))));
                }
            },
            None => self.grants.dirs.first().map_or_else(std::env::temp_dir, |d| d.host.clone()),
        };
        let timeout = command
            .timeout_ms
            .map_or(remaining, |ms| Duration::from_millis(ms.into()).min(remaining));
        let result = run_capped(&command, &cwd, timeout);
        self.remaining()?;
        Ok(result)
    }
}

fn run_capped(
    command: &Command,
    cwd: &std::path::Path,
    timeout: Duration,
) -> Result<Output, ProcessError> {
    let mut cmd = std::process::Command::new(&command.program);
    cmd.args(&command.args)
        .current_dir(cwd)
        .env_clear()
        .stdin(if command.stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for name in INHERITED_ENV {
        if let Some(value) = std::env::var_os(name) {
            cmd.env(name, value);
        }
    }
    cmd.envs(command.env.iter().map(|(k, v)| (k, v)));
    let mut child =
        cmd.spawn().map_err(|e| ProcessError::Spawn(format!("{}: {e}", command.program)))?;
    if let (Some(input), Some(mut stdin)) = (command.stdin.clone(), child.stdin.take()) {
        std::thread::spawn(move || stdin.write_all(&input));
    }
    let stdout = capture(child.stdout.take());
    let stderr = capture(child.stderr.take());
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if started.elapsed() >= timeout => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(ProcessError::Timeout);
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(2)),
            Err(e) => return Err(ProcessError::Spawn(e.to_string())),
        }
    };
    let (stdout, cut_out) = stdout.join().unwrap_or_default();
    let (stderr, cut_err) = stderr.join().unwrap_or_default();
    Ok(Output { exit_code: status.code(), stdout, stderr, truncated: cut_out || cut_err })
}

/// Reads a pipe to the end on its own thread, keeping at most the cap.
fn capture(pipe: Option<impl Read + Send + 'static>) -> std::thread::JoinHandle<(Vec<u8>, bool)> {
    std::thread::spawn(move || {
        let Some(mut pipe) = pipe else { return (Vec::new(), false) };
        let mut kept = Vec::new();
        let _ = pipe.by_ref().take(MAX_CAPTURE_BYTES).read_to_end(&mut kept);
        // Drain the rest so the child never blocks on a full pipe.
        let dropped = std::io::copy(&mut pipe, &mut std::io::sink()).unwrap_or(0);
        (kept, dropped > 0)
    })
}
