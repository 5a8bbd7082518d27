//! Escape probes: the attacks a jailed command would try, run through the
//! jail on the machine at hand, each checked from the host's side. This is
//! how `reson sandbox check` tells an operator whether the jail holds here
//! (a container without user namespaces, a Mac's Seatbelt), and the same
//! probes run in the test suite. [`cost`] times a jailed command on the
//! same machine, for the check's last lines.
//!
//! Each probe gets a scene of its own: a granted, writable workspace with
//! a `.git/hooks` directory, and beside it a directory with a secret that
//! is not granted.

use super::{Jail, JailDir, JailError, JailGuard, JailSpec};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

/// How long a probe's command may run.
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a left-behind process or a connection is waited for.
const SETTLE: Duration = Duration::from_secs(2);

/// One attack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probe {
    /// Create a file in a directory beside the grant.
    WriteOutside,
    /// Read a secret in a directory beside the grant.
    ReadOutside,
    /// Hard-link a file from outside into the grant and write through it.
    LinkOutside,
    /// Connect to a port the host listens on.
    Network,
    /// Leave a process running after the call.
    OutliveTheCall,
    /// Signal a process of the host's.
    ReachHostProcesses,
    /// Plant a git hook in a writable grant's repository.
    GitHooks,
}

impl Probe {
    /// Every probe, in the order they run.
    pub const ALL: [Probe; 7] = [
        Self::WriteOutside,
        Self::ReadOutside,
        Self::LinkOutside,
        Self::Network,
        Self::OutliveTheCall,
        Self::ReachHostProcesses,
        Self::GitHooks,
    ];

    /// A short name, as `reson sandbox check` prints it.
    pub fn name(self) -> &'static str {
        match self {
            Self::WriteOutside => "write outside",
            Self::ReadOutside => "read outside",
            Self::LinkOutside => "link outside",
            Self::Network => "network",
            Self::OutliveTheCall => "outlive the call",
            Self::ReachHostProcesses => "host processes",
            Self::GitHooks => ".git hooks",
        }
    }

    /// What the command tries.
    pub fn attempt(self) -> &'static str {
        match self {
            Self::WriteOutside => "create a file beside the granted directory",
            Self::ReadOutside => "read a secret beside the granted directory",
            Self::LinkOutside => "hard-link a file from beside the grant and write through it",
            Self::Network => "connect to a port on the host's loopback, with no host granted",
            Self::OutliveTheCall => {
                "leave a process running (in a session of its own) after the call"
            }
            Self::ReachHostProcesses => "signal the host's own process",
            Self::GitHooks => "write .git/hooks/pre-commit in the writable grant",
        }
    }
}

/// How a probe came out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The jail stopped it.
    Held,
    /// It got through: what the host saw.
    Escaped(String),
    /// It could not be tried here: why.
    NotRun(String),
}

/// A probe and how it came out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// The attack.
    pub probe: Probe,
    /// Its outcome.
    pub verdict: Verdict,
    /// Whether its command ran in a jail made ahead (see
    /// [`super::serve_spares`]), as a call's commands after the first of
    /// their grant do.
    pub made_ahead: bool,
}

/// Runs every probe, through `jail`, or unjailed when `jail` is `None`
/// (what `[sandbox] jail = "off"` does, which the probes then show). Fails
/// only when the jail does not come up at all.
pub async fn run(jail: Option<&Jail>) -> Result<Vec<Finding>, JailError> {
    if let Some(jail) = jail {
        jail.check().await?;
    }
    let mut findings = Vec::new();
    for probe in Probe::ALL {
        let (verdict, made_ahead) = match Scene::new() {
            Ok(scene) => scene.run(probe, jail).await,
            Err(e) => (Verdict::NotRun(format!("cannot set the scene up: {e}")), false),
        };
        findings.push(Finding { probe, verdict, made_ahead });
    }
    Ok(findings)
}

/// How many times [`cost`] runs each command; it reports the median.
pub const COST_RUNS: usize = 7;
/// The pause before each run of [`cost`]: an agent's commands come between
/// its turns, and a jailed command after a pause costs the most.
const COST_PAUSE: Duration = Duration::from_millis(20);

/// What a command costs on this machine: `true`, from spawn to exit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cost {
    /// Started without the jail.
    pub unjailed: Duration,
    /// Jailed, granted an empty directory, in a jail made on its path.
    pub jailed: Duration,
    /// The same in a jail made ahead (see [`super::serve_spares`]), as
    /// the commands of a grant after its first start; `None` where the jail
    /// makes none.
    pub jailed_ahead: Option<Duration>,
    /// Jailed, granted each directory asked about read-write, where the
    /// jail looks for repositories a few levels down before every command.
    pub in_dirs: Vec<(PathBuf, Duration)>,
}

/// Times `true` unjailed, jailed (in a jail made on its path, and in one
/// made ahead), and jailed in each of `dirs` granted read-write (what a
/// writable grant there costs every command), each the median of
/// [`COST_RUNS`] runs. Fails when the jail does not come up, or a run
/// fails.
pub async fn cost(jail: &Jail, dirs: &[PathBuf]) -> Result<Cost, JailError> {
    jail.check().await?;
    let program = super::true_program().ok_or_else(|| {
        JailError::Unavailable("no `true` program in /usr/bin or /bin to time".into())
    })?;
    let unjailed = median(async || {
        let status = tokio::process::Command::new(program).status().await?;
        status.success().then_some(()).ok_or_else(|| failed(status))
    })
    .await?;
    let empty = tempfile::Builder::new().prefix("reson-cost-").tempdir()?;
    let empty = empty.path().canonicalize()?;
    let on_path = jail.clone().spares(false);
    let jailed = time_jailed(&on_path, program, &empty, false).await?.unwrap_or_default();
    let jailed_ahead = time_jailed(jail, program, &empty, true).await?;
    let mut in_dirs = Vec::new();
    for dir in dirs {
        let took = time_jailed(&on_path, program, dir, false).await?.unwrap_or_default();
        in_dirs.push((dir.clone(), took));
    }
    Ok(Cost { unjailed, jailed, jailed_ahead, in_dirs })
}

/// The median time of `true` jailed with `dir` granted read-write, each
/// run after [`COST_PAUSE`]; with `ahead`, each in a jail made ahead
/// (`None` where the jail makes none).
async fn time_jailed(
    jail: &Jail,
    program: &Path,
    dir: &Path,
    ahead: bool,
) -> Result<Option<Duration>, JailError> {
    let spec = JailSpec {
        dirs: vec![JailDir { path: dir.to_path_buf(), writable: true, metadata_writable: false }],
        search_path: Vec::new(),
        network: Vec::new(),
        max_processes: 8,
        cwd: dir.to_path_buf(),
    };
    let mut times = Vec::with_capacity(COST_RUNS);
    for _ in 0..COST_RUNS {
        tokio::time::sleep(COST_PAUSE).await;
        if ahead && !jail.make_ahead(&spec, program).await {
            return Ok(None);
        }
        let start = Instant::now();
        let (mut child, guard) = jail.spawn_piped(&spec, program, &[], &[], false).await?;
        let status = child.wait().await?;
        drop(guard);
        times.push(start.elapsed());
        if !status.success() {
            return Err(failed(status));
        }
    }
    times.sort();
    Ok(Some(times[COST_RUNS / 2]))
}

fn failed(status: std::process::ExitStatus) -> JailError {
    JailError::Unavailable(format!("`true` failed ({status})"))
}

/// The median time of [`COST_RUNS`] runs of `run`, each after
/// [`COST_PAUSE`].
async fn median(
    mut run: impl AsyncFnMut() -> Result<(), JailError>,
) -> Result<Duration, JailError> {
    let mut times = Vec::with_capacity(COST_RUNS);
    for _ in 0..COST_RUNS {
        tokio::time::sleep(COST_PAUSE).await;
        let start = Instant::now();
        run().await?;
        times.push(start.elapsed());
    }
    times.sort();
    Ok(times[COST_RUNS / 2])
}

/// One probe's files: `ws` granted, `outside` beside it.
struct Scene {
    _dir: tempfile::TempDir,
    ws: PathBuf,
    outside: PathBuf,
    secret: String,
}

impl Scene {
    fn new() -> std::io::Result<Self> {
        let dir = tempfile::Builder::new().prefix("reson-probe-").tempdir()?;
        let root = dir.path().canonicalize()?;
        let ws = root.join("ws");
        let outside = root.join("outside");
        std::fs::create_dir_all(ws.join(".git/hooks"))?;
        std::fs::create_dir_all(&outside)?;
        let secret = format!("reson-probe-secret-{}", fastrand::u64(..));
        std::fs::write(outside.join("secret.txt"), &secret)?;
        Ok(Self { _dir: dir, ws, outside, secret })
    }

    async fn run(&self, probe: Probe, jail: Option<&Jail>) -> (Verdict, bool) {
        let outside = shell_words::quote(&self.outside.to_string_lossy()).into_owned();
        let marker = format!("86399.{}", fastrand::u32(100_000..1_000_000));
        let listener = match probe {
            Probe::Network => match tokio::net::TcpListener::bind("127.0.0.1:0").await {
                Ok(listener) => Some(listener),
                Err(e) => {
                    return (Verdict::NotRun(format!("cannot listen on loopback: {e}")), false);
                }
            },
            _ => None,
        };
        let script = match probe {
            Probe::WriteOutside => format!("touch {outside}/escaped"),
            Probe::ReadOutside => format!("cat {outside}/secret.txt"),
            Probe::LinkOutside => format!("ln {outside}/secret.txt link && echo changed >> link"),
            Probe::Network => {
                let Some(bash) =
                    ["/bin/bash", "/usr/bin/bash"].into_iter().find(|b| Path::new(b).exists())
                else {
                    return (Verdict::NotRun("no bash to open a connection with".into()), false);
                };
                let port =
                    listener.as_ref().and_then(|l| l.local_addr().ok()).map_or(0, |a| a.port());
                format!("{bash} -c 'exec 3<>/dev/tcp/127.0.0.1/{port}' && echo connected")
            }
            // A session of its own leaves the call's process group, which
            // is what the call's end kills; perl stands in for `setsid`
            // where there is none (macOS).
            // The sleeper lets go of the output pipes, so the call itself
            // ends as a well-behaved one would, and the call ends only once
            // the sleeper has its own session (`ready`), so the call's end
            // cannot catch it still in the call's process group.
            Probe::OutliveTheCall => format!(
                "exec >/dev/null 2>&1; if command -v setsid >/dev/null; then setsid sh -c 'touch \
                 ready; exec sleep {marker}' & elif command -v perl >/dev/null; then perl -MPOSIX \
                 -e 'POSIX::setsid(); open(F, \">ready\"); close(F); exec @ARGV' sleep {marker} & \
                 else (touch ready; exec nohup sleep {marker}) & fi; while [ ! -e ready ]; do \
                 sleep 0.05; done"
            ),
            Probe::ReachHostProcesses => format!("kill -0 {} && echo reached", std::process::id()),
            Probe::GitHooks => "echo 'echo planted' > .git/hooks/pre-commit".to_owned(),
        };
        let (output, made_ahead) = match self.command(&script, jail).await {
            Ok(output) => output,
            Err(e) => return (Verdict::NotRun(e), false),
        };
        let escaped = match probe {
            Probe::WriteOutside => {
                self.outside.join("escaped").exists().then(|| "the file was created".to_owned())
            }
            Probe::ReadOutside => {
                output.contains(&self.secret).then(|| "the command printed the secret".to_owned())
            }
            Probe::LinkOutside => {
                let now = std::fs::read_to_string(self.outside.join("secret.txt"));
                (now.ok().as_deref() != Some(self.secret.as_str()))
                    .then(|| "the file beside the grant changed".to_owned())
            }
            Probe::Network => {
                let listener = listener.expect("made above for this probe");
                let accepted = tokio::time::timeout(SETTLE / 4, listener.accept()).await;
                accepted.is_ok().then(|| "the host accepted a connection".to_owned())
            }
            Probe::OutliveTheCall => still_running(&marker)
                .await
                .map(|pids| format!("still running after the call: pid {pids:?}")),
            Probe::ReachHostProcesses => {
                output.contains("reached").then(|| "the host's process took a signal".to_owned())
            }
            Probe::GitHooks => self
                .ws
                .join(".git/hooks/pre-commit")
                .exists()
                .then(|| "the hook was written".to_owned()),
        };
        let verdict = match escaped {
            Some(what) => Verdict::Escaped(what),
            None => Verdict::Held,
        };
        (verdict, made_ahead)
    }

    /// Runs `script` with `sh` in the workspace, as a call would: its own
    /// process group, killed with whatever is left when it ends; jailed,
    /// in a jail made ahead where the jail makes them, as a call's command
    /// after an earlier one of its grant starts. Returns what it printed,
    /// and whether the jail was made ahead.
    async fn command(&self, script: &str, jail: Option<&Jail>) -> Result<(String, bool), String> {
        let sh = PathBuf::from("/bin/sh");
        let args = ["-c".to_owned(), script.to_owned()];
        let env = [("PATH".to_owned(), "/usr/bin:/bin".to_owned())];
        let (child, guard) = match jail {
            Some(jail) => {
                let spec = JailSpec {
                    dirs: vec![JailDir {
                        path: self.ws.clone(),
                        writable: true,
                        metadata_writable: false,
                    }],
                    search_path: vec![PathBuf::from("/usr/bin"), PathBuf::from("/bin")],
                    network: Vec::new(),
                    max_processes: 64,
                    cwd: self.ws.clone(),
                };
                jail.make_ahead(&spec, &sh).await;
                let (child, guard) = jail
                    .spawn_piped(&spec, &sh, &args, &env, false)
                    .await
                    .map_err(|e| e.to_string())?;
                (child, Some(guard))
            }
            None => {
                let mut command = tokio::process::Command::new(&sh);
                command.args(&args).current_dir(&self.ws).env_clear().envs(env);
                #[cfg(unix)]
                command.process_group(0);
                command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
                command.kill_on_drop(true);
                (command.spawn().map_err(|e| e.to_string())?, None)
            }
        };
        let made_ahead = guard.as_ref().is_some_and(JailGuard::made_ahead);
        let group = child.id();
        let output = tokio::time::timeout(PROBE_TIMEOUT, child.wait_with_output()).await;
        end_group(group);
        drop(guard);
        match output {
            Ok(Ok(output)) => {
                Ok((String::from_utf8_lossy(&output.stdout).into_owned(), made_ahead))
            }
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!("the command did not end within {PROBE_TIMEOUT:?}")),
        }
    }
}

/// Kills what is left of the call's process group, as the process
/// capability does when a call ends.
fn end_group(group: Option<u32>) {
    #[cfg(unix)]
    if let Some(pid) = group.and_then(|id| libc::pid_t::try_from(id).ok()) {
        // SAFETY: kill(2) on the group the probe's command led.
        unsafe {
            libc::kill(-pid, libc::SIGKILL);
        }
    }
    #[cfg(not(unix))]
    let _ = group;
}

/// Pids of processes whose command line holds `marker`, once they have
/// had [`SETTLE`] to go; `None` when none is left.
async fn still_running(marker: &str) -> Option<Vec<u32>> {
    let until = Instant::now() + SETTLE;
    loop {
        let pids = processes_with(marker);
        if pids.is_empty() {
            return None;
        }
        if Instant::now() >= until {
            kill_all(&pids);
            return Some(pids);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Pids whose command line holds `marker`: from `/proc` where there is
/// one, else from `ps`.
fn processes_with(marker: &str) -> Vec<u32> {
    if let Ok(entries) = std::fs::read_dir("/proc") {
        return entries
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
            .filter(|pid| {
                let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
                String::from_utf8_lossy(&cmdline).contains(marker)
            })
            .collect();
    }
    let listing = std::process::Command::new("ps").args(["-A", "-o", "pid=,args="]).output();
    let listing = listing.map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
    listing
        .unwrap_or_default()
        .lines()
        .filter(|line| line.contains(marker))
        .filter_map(|line| line.split_whitespace().next()?.parse().ok())
        .collect()
}

/// Cleans up after an escaped probe.
fn kill_all(pids: &[u32]) {
    #[cfg(unix)]
    for pid in pids.iter().filter_map(|p| libc::pid_t::try_from(*p).ok()) {
        // SAFETY: kill(2) on a pid that ran the probe's marker.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
        }
    }
    #[cfg(not(unix))]
    let _ = pids;
}
