//! The OS jail every command a plugin starts runs in: what leaves wasmtime
//! keeps the sandbox's promise.
//!
//! What a jailed command gets, on every platform that has a jail:
//! - **files**: the system's programs and libraries read-only, the granted
//!   directories at their own paths as granted, `.git`/`.reson` inside
//!   writable grants read-only, a private temporary directory (`TMPDIR`)
//!   removed with the call; nothing else;
//! - **network**: none, or only the `host:port` pairs the grant names,
//!   through a proxy the host runs ([`NetworkRule`]);
//! - **processes**: confined with the command, and none of the host's
//!   within reach.
//!
//! How, per platform (one backend module each, chosen at compile time):
//! - **Linux**: user, mount, PID, network, IPC and UTS namespaces through
//!   bubblewrap, a cap on processes and threads (a pids cgroup, joined
//!   ahead by launcher threads on cgroup v1 for [`Jail::spawn`], or
//!   RLIMIT_NPROC inside the user namespace when the host is not root), a
//!   seccomp filter against what no tool needs, no capabilities,
//!   `no_new_privs`. `/proc` shows the jail alone and every process dies
//!   with the command. Once a command has ended, the next jail of its spec
//!   is made ahead, waiting in this program for its command (see
//!   [`serve_spares`]).
//! - **macOS**: `sandbox-exec` with a Seatbelt profile generated from the
//!   grant; the network is reachable only at the host's proxy on loopback.
//!   Seatbelt cannot cap the number of processes.
//! - **elsewhere** (Windows): no jail yet; commands are refused unless the
//!   user turns the jail off.
//!
//! Where the machine cannot give the jail, [`Jail::command`] fails with an
//! error that names what is missing; it never runs a command unjailed.
//! [`probe`] checks, on the machine it runs on, that the jail holds.

#[cfg(target_os = "linux")]
mod linux;
pub mod probe;
pub(crate) mod proxy;
#[cfg(any(target_os = "macos", test))]
mod seatbelt;
#[cfg(any(not(any(target_os = "linux", target_os = "macos")), test))]
mod unsupported;

#[cfg(target_os = "linux")]
use linux as platform;
#[cfg(target_os = "linux")]
pub(crate) use linux::{NetworkHandOver, OwnNetwork, PROXY_PORT, own_network};
#[cfg(target_os = "macos")]
use seatbelt as platform;
#[cfg(not(any(target_os = "linux", target_os = "macos")))]
use unsupported as platform;

#[cfg(target_os = "linux")]
pub use linux::SeccompError;
pub use proxy::{NetworkRule, NetworkRuleError};

use std::path::{Path, PathBuf};
use std::time::Duration;

/// Where bubblewrap, the Linux jail's launcher, is looked for when the
/// config names no other path.
pub const DEFAULT_BWRAP: &str = "/usr/bin/bwrap";
/// Processes and threads a call may hold when the grant sets no cap.
pub const DEFAULT_MAX_PROCESSES: u32 = 512;

/// A directory visible inside the jail, at its own path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JailDir {
    /// Host path (canonical).
    pub path: PathBuf,
    /// Whether the command may change what is in it.
    pub writable: bool,
    /// Whether `.git` and `.reson` in it are writable too (`git commit`).
    pub metadata_writable: bool,
}

/// What one jailed command may reach.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JailSpec {
    /// Granted directories.
    pub dirs: Vec<JailDir>,
    /// The fixed search path, visible read-only.
    pub search_path: Vec<PathBuf>,
    /// `host:port` pairs reachable through the proxy; none means no network.
    pub network: Vec<NetworkRule>,
    /// Processes and threads the command and its descendants may hold
    /// (where the platform can cap them).
    pub max_processes: u32,
    /// Working directory: a host path inside a granted directory, or
    /// [`PRIVATE_TMP`] for the jail's private temporary directory.
    pub cwd: PathBuf,
}

/// The working directory that names the jail's private temporary
/// directory, whatever its path on the host.
pub const PRIVATE_TMP: &str = "/tmp";

/// Why a command cannot run jailed.
#[derive(Debug, thiserror::Error)]
pub enum JailError {
    /// The program the jail is made with (bubblewrap, `sandbox-exec`) is
    /// not where it should be.
    #[error(
        "the command jail needs {name}, which is not at {} ({fix}), or `[sandbox] jail = \"off\"` \
         to run commands unjailed",
        path.display()
    )]
    MissingLauncher {
        /// What it is.
        name: &'static str,
        /// Where it was looked for.
        path: PathBuf,
        /// How to install it or point at it.
        fix: &'static str,
    },
    /// This platform has no command jail.
    #[error(
        "commands run only in the command jail, and Reson has no jail on {0} yet; `[sandbox] jail \
         = \"off\"` runs them unjailed, with all of your rights (warned about on every call)"
    )]
    Unsupported(&'static str),
    /// A step before the command failed in the child.
    #[error("the command jail failed while {step}: {source}")]
    Setup {
        /// What the child was doing.
        step: &'static str,
        /// The system's error.
        source: std::io::Error,
    },
    /// No way to cap the number of processes.
    #[error(
        "the command jail cannot cap processes: the host runs as root, where RLIMIT_NPROC does \
         not hold, and no writable pids cgroup was found ({0})"
    )]
    ProcessLimit(String),
    /// The jail does not come up on this machine.
    #[error("the command jail does not work on this machine: {0}")]
    Unavailable(String),
    /// Preparing the jail failed.
    #[error("preparing the command jail: {0}")]
    Io(#[from] std::io::Error),
}

/// Builds jailed commands.
#[derive(Debug, Clone)]
pub struct Jail {
    bwrap: PathBuf,
    spares: bool,
}

impl Default for Jail {
    fn default() -> Self {
        Self::new(DEFAULT_BWRAP)
    }
}

impl Jail {
    /// A jail that, on Linux, runs bubblewrap from `bwrap` (other platforms
    /// have their launcher at a fixed place). It makes jails ahead where
    /// the program can (see [`serve_spares`]).
    pub fn new(bwrap: impl Into<PathBuf>) -> Self {
        Self { bwrap: bwrap.into(), spares: true }
    }

    /// Whether [`Jail::spawn_piped`] starts commands in jails made ahead,
    /// and makes the next jail of a spec ahead once a command of it has
    /// started or ended (`[sandbox] spare_jails`); on by default.
    pub fn spares(mut self, on: bool) -> Self {
        self.spares = on;
        self
    }

    /// A command that runs `executable` with `args` and `env` (and nothing
    /// of the host's environment) in a jail made from `spec`. The guard must
    /// live as long as the process: it holds the private temporary
    /// directory, the process cap and the proxy, and removes them when
    /// dropped.
    pub async fn command(
        &self,
        spec: &JailSpec,
        executable: &Path,
        args: &[String],
        env: &[(String, String)],
    ) -> Result<(tokio::process::Command, JailGuard), JailError> {
        self.check().await?;
        self.build(spec, executable, args, env)
    }

    /// Starts `executable` jailed, as [`Jail::command`] would, configured
    /// by `configure` (stdio, process group). On Linux with cgroup v1 the
    /// command is forked by one of four threads that joined its pids cgroup
    /// ahead, so that the call does not wait for the kernel to move a task
    /// (8–10 ms on an idle machine); while all are busy, it is started as
    /// `command` starts it. It never starts in a jail made ahead, which is
    /// started before its command's configuration is known: see
    /// [`Jail::spawn_piped`].
    pub async fn spawn(
        &self,
        spec: &JailSpec,
        executable: &Path,
        args: &[String],
        env: &[(String, String)],
        configure: impl Fn(&mut tokio::process::Command) + Sync,
    ) -> Result<(tokio::process::Child, JailGuard), JailError> {
        self.check().await?;
        #[cfg(target_os = "linux")]
        {
            let started =
                linux::spawn(&self.bwrap, spec, executable, args, env, &configure, None).await;
            started.map(|(child, guard)| (child, JailGuard(guard)))
        }
        #[cfg(not(target_os = "linux"))]
        {
            let (mut command, guard) = self.build(spec, executable, args, env)?;
            configure(&mut command);
            let child = command.spawn().map_err(|e| guard.spawn_error(e))?;
            Ok((child, guard))
        }
    }

    /// [`Jail::spawn`], configured as a tool's command is: in a process
    /// group of its own, killed when the child is dropped, its stdout and
    /// stderr piped, its stdin piped when `stdin` (else `/dev/null`).
    ///
    /// On Linux, a command whose spec had a command before finds its jail
    /// made ahead (see [`serve_spares`]; off with [`Jail::spares`]): it
    /// starts there when what the jail's mounts were made from is
    /// unchanged, and sees what a jail made on its path would show it.
    pub async fn spawn_piped(
        &self,
        spec: &JailSpec,
        executable: &Path,
        args: &[String],
        env: &[(String, String)],
        stdin: bool,
    ) -> Result<(tokio::process::Child, JailGuard), JailError> {
        #[cfg(target_os = "linux")]
        {
            self.check().await?;
            let configure =
                |command: &mut tokio::process::Command| linux::configure(command, stdin);
            let ahead = self.spares.then_some(stdin);
            let started =
                linux::spawn(&self.bwrap, spec, executable, args, env, &configure, ahead).await;
            started.map(|(child, guard)| (child, JailGuard(guard)))
        }
        #[cfg(not(target_os = "linux"))]
        {
            use std::process::Stdio;
            let configure = |command: &mut tokio::process::Command| {
                #[cfg(unix)]
                command.process_group(0);
                command.kill_on_drop(true);
                command.stdin(if stdin { Stdio::piped() } else { Stdio::null() });
                command.stdout(Stdio::piped()).stderr(Stdio::piped());
            };
            self.spawn(spec, executable, args, env, configure).await
        }
    }

    /// Makes the jail of `spec` ahead now, for a command of `executable`,
    /// and returns once it waits (`false` where none can be made: spares
    /// off, no program to wait in, not Linux, or a jail that failed). The
    /// next [`Jail::spawn_piped`] of `spec` starts in it.
    pub async fn make_ahead(&self, spec: &JailSpec, executable: &Path) -> bool {
        if !self.spares || self.check().await.is_err() {
            return false;
        }
        #[cfg(target_os = "linux")]
        {
            linux::make_spare(&self.bwrap, spec, executable).await
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = (spec, executable);
            false
        }
    }

    /// Makes ready, in the background, what the first jailed command of
    /// the process would otherwise wait for: the check that the jail comes
    /// up here (a jailed `true`, see [`Jail::check`]) and, on Linux, the
    /// launcher threads with their first cgroups and the seccomp filter.
    /// Under load those took the first command past a second. Outside a
    /// tokio runtime it does nothing.
    pub fn prepare(&self) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        #[cfg(target_os = "linux")]
        linux::prepare();
        let jail = self.clone();
        runtime.spawn(async move {
            // A failure is the first command's to report.
            let _ = jail.check().await;
        });
    }

    /// Whether the jail comes up at all here, by jailing `true` until it
    /// works once per process, so that a machine without what the jail
    /// needs gets one error naming it.
    pub async fn check(&self) -> Result<(), JailError> {
        // Only success is kept: a probe that failed (a machine short of
        // processes for a moment) is tried again by the next command.
        static PROBE: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();
        if let Some(missing) = platform::missing(&self.bwrap) {
            return Err(missing);
        }
        PROBE.get_or_try_init(|| self.probe()).await.map(|_| ()).map_err(JailError::Unavailable)
    }

    async fn probe(&self) -> Result<(), String> {
        let spec = JailSpec {
            dirs: Vec::new(),
            search_path: Vec::new(),
            network: Vec::new(),
            max_processes: 8,
            cwd: PathBuf::from(PRIVATE_TMP),
        };
        let truth = true_program().ok_or("no `true` program in /usr/bin or /bin to probe with")?;
        let (mut command, guard) = self.build(&spec, truth, &[], &[]).map_err(|e| e.to_string())?;
        command.stdin(std::process::Stdio::null()).stdout(std::process::Stdio::null());
        command.stderr(std::process::Stdio::piped()).kill_on_drop(true);
        let child = command.spawn().map_err(|e| guard.spawn_error(e).to_string())?;
        let output = tokio::time::timeout(Duration::from_secs(10), child.wait_with_output()).await;
        match output {
            Ok(Ok(out)) if out.status.success() => Ok(()),
            Ok(Ok(out)) => Err(format!(
                "the jail failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            )),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err("the jail did not start `true` within 10 s".to_owned()),
        }
    }

    fn build(
        &self,
        spec: &JailSpec,
        executable: &Path,
        args: &[String],
        env: &[(String, String)],
    ) -> Result<(tokio::process::Command, JailGuard), JailError> {
        let (command, guard) = platform::build(&self.bwrap, spec, executable, args, env)?;
        Ok((command, JailGuard(guard)))
    }
}

/// The system's `true`, which the probes and the cost measure run.
fn true_program() -> Option<&'static Path> {
    ["/usr/bin/true", "/bin/true"].into_iter().map(Path::new).find(|p| p.exists())
}

/// What a jailed command holds on the host: its private temporary
/// directory, its process cap and its network proxy. Dropping it kills
/// whatever is left in the cap and removes the rest.
#[derive(Debug)]
pub struct JailGuard(platform::Guard);

impl JailGuard {
    /// The error for a failed spawn of the jailed command, naming the step
    /// of the jail that failed when one did.
    pub fn spawn_error(&self, error: std::io::Error) -> JailError {
        self.0.spawn_error(error)
    }

    /// Whether the command started in a jail made ahead.
    pub fn made_ahead(&self) -> bool {
        #[cfg(target_os = "linux")]
        {
            self.0.made_ahead()
        }
        #[cfg(not(target_os = "linux"))]
        {
            false
        }
    }
}

/// Lets jails be made ahead, waiting in this program: call it first thing
/// in `main`, before any thread starts. A jail made ahead runs this program
/// in bubblewrap in place of its command until the command comes; when
/// this process is such a jail's waiting stage, this function does not
/// return (it runs the command it is handed, or exits). Otherwise it makes
/// this program the one jails made ahead wait in, and returns what ends
/// them. Without it,
/// every jail is made on its command's path. Linux only; elsewhere it does
/// nothing.
pub fn serve_spares() -> Spares {
    #[cfg(target_os = "linux")]
    linux::spare::serve();
    Spares(())
}

/// The jails made ahead in this process, from [`serve_spares`]: keep it
/// for the life of `main`; dropping it ends them (their processes killed,
/// their private `/tmp` removed). What a host that ended otherwise left
/// behind, the next one removes.
#[derive(Debug)]
#[must_use = "dropping it ends the jails made ahead"]
pub struct Spares(());

impl Drop for Spares {
    fn drop(&mut self) {
        #[cfg(target_os = "linux")]
        linux::spare::end_all();
    }
}

/// Makes `program`, a program whose `main` calls [`serve_spares`] first,
/// the one jails made ahead wait in, for a process whose own `main` does
/// not (a test harness). Only the first call of a process counts.
pub fn spares_wait_in(program: &Path) -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        linux::spare::set_program(program)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = program;
        Ok(())
    }
}

/// The environment inside: the caller's, with `TMPDIR` the private
/// temporary directory `tmp` (as the command sees it), `HOME` there too
/// unless a grant holds the caller's, and the proxy variables when the
/// grant names hosts.
#[cfg(any(target_os = "linux", target_os = "macos", test))]
fn jail_env(
    spec: &JailSpec,
    env: &[(String, String)],
    tmp: &Path,
    proxy: Option<&str>,
) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = env.to_vec();
    let home_granted = env.iter().any(|(name, value)| {
        name == "HOME" && spec.dirs.iter().any(|d| Path::new(value).starts_with(&d.path))
    });
    out.retain(|(name, _)| name != "TMPDIR" && (name != "HOME" || home_granted));
    let tmp = tmp.to_string_lossy().into_owned();
    out.push(("TMPDIR".into(), tmp.clone()));
    if !home_granted {
        out.push(("HOME".into(), tmp));
    }
    if let Some(proxy) = proxy {
        let proxy = format!("http://{proxy}");
        for name in ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"] {
            out.retain(|(n, _)| n != name);
            out.push((name.into(), proxy.clone()));
        }
    }
    out
}

/// Whether `path` is a file someone may execute.
pub(crate) fn is_executable(path: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    }
    #[cfg(not(unix))]
    {
        std::fs::metadata(path).is_ok_and(|m| m.is_file())
    }
}
