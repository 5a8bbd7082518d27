//! The OS jail every command a plugin starts runs in: what leaves wasmtime
//! keeps the sandbox's promise.
//!
//! A jailed command gets its own user, mount, PID, network, IPC and UTS
//! namespaces (bubblewrap does the mounts and the PID namespace; the
//! network namespace is made first, so the host can hand in a proxy socket),
//! with:
//! - **files**: the system's programs and libraries and `/etc` (minus what
//!   only root may read) read-only, the granted directories at their own
//!   paths as granted, `.git`/`.reson` inside writable grants read-only, a
//!   private `/tmp` (`TMPDIR`) removed with the call; nothing else exists;
//! - **network**: none, or only the `host:port` pairs the grant names,
//!   through a proxy the host runs ([`NetworkRule`]);
//! - **processes**: a PID namespace (`/proc` shows the jail alone, and
//!   every process dies with the command) and a cap on processes and
//!   threads (a pids cgroup, or RLIMIT_NPROC inside the user namespace when
//!   the host is not root);
//! - **system calls**: a seccomp filter against what no tool needs, and no
//!   capabilities, `no_new_privs`.
//!
//! Where the machine cannot give one of these, [`Jail::command`] fails with
//! an error that names what is missing; it never runs a command unjailed.

mod cgroup;
mod mounts;
mod namespace;
pub(crate) mod proxy;
mod seccomp;

pub use proxy::{NetworkRule, NetworkRuleError};
pub use seccomp::SeccompError;

use namespace::Prelude;
use std::io::{Seek, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::task::JoinSet;

/// Where bubblewrap is looked for when the config names no other path.
pub const DEFAULT_BWRAP: &str = "/usr/bin/bwrap";
/// Processes and threads a call may hold when the grant sets no cap.
pub const DEFAULT_MAX_PROCESSES: u32 = 512;
/// Processes of the jail's own the cap leaves room for: bubblewrap and the
/// PID namespace's init.
const JAIL_OVERHEAD: u64 = 2;

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
    /// Processes and threads the command and its descendants may hold.
    pub max_processes: u32,
    /// Working directory (a host path inside the jail).
    pub cwd: PathBuf,
}

/// Why a command cannot run jailed.
#[derive(Debug, thiserror::Error)]
pub enum JailError {
    /// bubblewrap is not installed where the config says.
    #[error(
        "the command jail needs bubblewrap, which is not at {0} (Debian: `apt-get install \
         bubblewrap`; or set `[sandbox] bwrap`), or `[sandbox] jail = \"off\"` to run commands \
         unjailed"
    )]
    MissingBwrap(PathBuf),
    /// A step before bubblewrap failed in the child.
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
    /// The seccomp filter cannot be built.
    #[error(transparent)]
    Seccomp(#[from] SeccompError),
    /// Preparing the jail failed.
    #[error("preparing the command jail: {0}")]
    Io(#[from] std::io::Error),
}

/// Builds jailed commands.
#[derive(Debug, Clone)]
pub struct Jail {
    bwrap: PathBuf,
}

impl Default for Jail {
    fn default() -> Self {
        Self::new(DEFAULT_BWRAP)
    }
}

impl Jail {
    /// A jail that runs bubblewrap from `bwrap`.
    pub fn new(bwrap: impl Into<PathBuf>) -> Self {
        Self { bwrap: bwrap.into() }
    }

    /// A command that runs `executable` with `args` and `env` (and nothing
    /// of the host's environment) in a jail made from `spec`. The guard must
    /// live as long as the process: it holds the private `/tmp`, the cgroup
    /// and the proxy, and removes them when dropped.
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

    /// Whether the jail comes up at all here, by jailing `true` until it
    /// works once per process, so that a machine without what the jail
    /// needs gets one error naming it.
    pub async fn check(&self) -> Result<(), JailError> {
        // Only success is kept: a probe that failed (a machine short of
        // processes for a moment) is tried again by the next command.
        static PROBE: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();
        if !is_executable(&self.bwrap) {
            return Err(JailError::MissingBwrap(self.bwrap.clone()));
        }
        PROBE.get_or_try_init(|| self.probe()).await.map(|_| ()).map_err(JailError::Unavailable)
    }

    async fn probe(&self) -> Result<(), String> {
        let spec = JailSpec {
            dirs: Vec::new(),
            search_path: Vec::new(),
            network: Vec::new(),
            max_processes: 8,
            cwd: PathBuf::from("/"),
        };
        let truth = ["/usr/bin/true", "/bin/true"].into_iter().map(Path::new).find(|p| p.exists());
        let truth = truth.ok_or("no `true` program in /usr/bin or /bin to probe with")?;
        let (mut command, guard) = self.build(&spec, truth, &[], &[]).map_err(|e| e.to_string())?;
        command.stdin(std::process::Stdio::null()).stdout(std::process::Stdio::null());
        command.stderr(std::process::Stdio::piped()).kill_on_drop(true);
        let child = command.spawn().map_err(|e| guard.spawn_error(e).to_string())?;
        let output = tokio::time::timeout(Duration::from_secs(10), child.wait_with_output()).await;
        match output {
            Ok(Ok(out)) if out.status.success() => Ok(()),
            Ok(Ok(out)) => Err(format!(
                "bubblewrap failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            )),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err("bubblewrap did not start `true` within 10 s".to_owned()),
        }
    }

    fn build(
        &self,
        spec: &JailSpec,
        executable: &Path,
        args: &[String],
        env: &[(String, String)],
    ) -> Result<(tokio::process::Command, JailGuard), JailError> {
        let (mut prelude, report) = Prelude::new()?;
        let limit = u64::from(spec.max_processes) + JAIL_OVERHEAD;
        let cgroup = match cgroup::PidsCgroup::create(limit) {
            Ok(group) => {
                prelude.cgroup_procs = Some(group.procs()?.into());
                Some(group)
            }
            // SAFETY: getuid cannot fail.
            Err(_) if unsafe { libc::getuid() } != 0 => {
                prelude.nproc = Some(limit);
                None
            }
            Err(e) => return Err(JailError::ProcessLimit(e.to_string())),
        };
        let tmp = tempfile::Builder::new().prefix("reson-jail-").tempdir()?;
        let mut proxy = JoinSet::new();
        if !spec.network.is_empty() {
            let (host_end, child_end) = namespace::socket_pair()?;
            prelude.hand_over = Some(child_end);
            let rules = std::sync::Arc::new(spec.network.clone());
            proxy.spawn(async move {
                if let Ok(listener) = listener_from(host_end).await {
                    proxy::serve(listener, rules).await;
                }
            });
        }
        let mut argv: Vec<std::ffi::OsString> = [
            "--die-with-parent",
            "--new-session",
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-uts",
            "--unshare-cgroup-try",
            "--hostname",
            "reson-jail",
            "--cap-drop",
            "ALL",
        ]
        .iter()
        .map(Into::into)
        .collect();
        for program in seccomp_programs()? {
            let fd = memfd_with(program)?;
            argv.push("--add-seccomp-fd".into());
            argv.push(fd.as_raw_fd().to_string().into());
            prelude.inherit.push(fd);
        }
        let mounts = mounts::arguments(spec, tmp.path(), executable);
        argv.extend(mounts.args);
        prelude.inherit.extend(mounts.fds);
        argv.push("--chdir".into());
        argv.push(spec.cwd.clone().into());
        argv.push("--".into());
        argv.push(executable.into());
        argv.extend(args.iter().map(Into::into));

        let mut command = tokio::process::Command::new(&self.bwrap);
        command.args(argv).env_clear().envs(jail_env(spec, env));
        // SAFETY: the prelude makes raw system calls only, on memory and
        // descriptors prepared above (see `namespace`).
        unsafe {
            command.pre_exec(move || prelude.run());
        }
        Ok((command, JailGuard { _proxy: proxy, _cgroup: cgroup, _tmp: tmp, report }))
    }
}

/// Namespaces of its own for a process the host starts outside the
/// command jail (the browser). Its network has nothing but a loopback
/// interface, where the child listens on `127.0.0.1:`[`PROXY_PORT`] for
/// the proxy the host serves, and from where it hands the host an
/// unconnected TCP socket to reach what listens inside. With `tmp`, it
/// also sees that directory as its `/tmp`. Made with a user namespace, so
/// the host needs no privileges.
pub(crate) fn own_network(tmp: Option<&Path>) -> Result<(OwnNetwork, NetworkHandOver), JailError> {
    use std::os::unix::ffi::OsStrExt;
    let (mut prelude, report) = Prelude::new()?;
    let (host_end, child_end) = namespace::socket_pair()?;
    prelude.hand_over = Some(child_end);
    prelude.dialer = true;
    prelude.private_tmp = match tmp {
        Some(dir) => Some(
            std::ffi::CString::new(dir.as_os_str().as_bytes())
                .map_err(|e| JailError::Io(std::io::Error::other(e)))?,
        ),
        None => None,
    };
    Ok((OwnNetwork(prelude), NetworkHandOver { channel: host_end, report }))
}

/// Where the proxy listens inside an [`own_network`].
pub(crate) const PROXY_PORT: u16 = namespace::PROXY_PORT;

/// The child's half of [`own_network`].
pub(crate) struct OwnNetwork(Prelude);

impl OwnNetwork {
    /// Moves the calling process into the namespace and hands the host its
    /// sockets. Runs in the child between `fork` and `exec`; only raw
    /// system calls.
    pub(crate) fn enter(&self) -> std::io::Result<()> {
        self.0.run()
    }
}

/// The host's half of [`own_network`].
pub(crate) struct NetworkHandOver {
    channel: OwnedFd,
    report: OwnedFd,
}

impl NetworkHandOver {
    /// The error for a failed spawn, naming the step that failed.
    pub(crate) fn spawn_error(&self, error: std::io::Error) -> JailError {
        match namespace::failed_step(&self.report) {
            Some(step) => JailError::Setup { step: step.describe(), source: error },
            None => JailError::Io(error),
        }
    }

    /// The proxy's listener and the socket to reach inside with, once the
    /// child has handed them over.
    pub(crate) async fn sockets(
        self,
    ) -> std::io::Result<(tokio::net::TcpListener, tokio::net::TcpSocket)> {
        let stream = std::os::unix::net::UnixStream::from(self.channel);
        stream.set_nonblocking(true)?;
        let stream = tokio::net::UnixStream::from_std(stream)?;
        let listener = std::net::TcpListener::from(receive(&stream).await?);
        listener.set_nonblocking(true)?;
        let dialer = std::net::TcpStream::from(receive(&stream).await?);
        dialer.set_nonblocking(true)?;
        Ok((
            tokio::net::TcpListener::from_std(listener)?,
            tokio::net::TcpSocket::from_std_stream(dialer),
        ))
    }
}

/// What a jailed command holds on the host: its private `/tmp`, its cgroup
/// and its network proxy. Dropping it kills whatever is left in the cgroup
/// and removes the rest.
#[derive(Debug)]
pub struct JailGuard {
    // Field order is drop order: the proxy stops before the cgroup's
    // processes are killed and the private `/tmp` is removed.
    _proxy: JoinSet<()>,
    _cgroup: Option<cgroup::PidsCgroup>,
    _tmp: tempfile::TempDir,
    report: OwnedFd,
}

impl JailGuard {
    /// The error for a failed spawn of the jailed command, naming the step
    /// of the jail that failed when one did.
    pub fn spawn_error(&self, error: std::io::Error) -> JailError {
        match namespace::failed_step(&self.report) {
            Some(step) => JailError::Setup { step: step.describe(), source: error },
            None => JailError::Io(error),
        }
    }
}

/// The environment inside: the caller's, with `TMPDIR` the private `/tmp`,
/// `HOME` there too unless a grant holds the caller's, and the proxy
/// variables when the grant names hosts.
fn jail_env(spec: &JailSpec, env: &[(String, String)]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = env.to_vec();
    let home_granted = env.iter().any(|(name, value)| {
        name == "HOME" && spec.dirs.iter().any(|d| Path::new(value).starts_with(&d.path))
    });
    out.retain(|(name, _)| name != "TMPDIR" && (name != "HOME" || home_granted));
    out.push(("TMPDIR".into(), "/tmp".into()));
    if !home_granted {
        out.push(("HOME".into(), "/tmp".into()));
    }
    if !spec.network.is_empty() {
        let proxy = format!("http://127.0.0.1:{}", namespace::PROXY_PORT);
        for name in ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"] {
            out.retain(|(n, _)| n != name);
            out.push((name.into(), proxy.clone()));
        }
    }
    out
}

fn seccomp_programs() -> Result<&'static [Vec<u8>], JailError> {
    static PROGRAMS: std::sync::OnceLock<Result<Vec<Vec<u8>>, String>> = std::sync::OnceLock::new();
    match PROGRAMS.get_or_init(|| seccomp::programs().map_err(|e| e.to_string())) {
        Ok(programs) => Ok(programs),
        Err(e) => Err(JailError::Unavailable(e.clone())),
    }
}

/// A memory file holding `bytes`, to be read from the start.
fn memfd_with(bytes: &[u8]) -> std::io::Result<OwnedFd> {
    // SAFETY: memfd_create with a static name; the descriptor is ours.
    let fd = unsafe { libc::memfd_create(c"reson-seccomp".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: just opened, owned by no one else.
    let mut file = unsafe { std::fs::File::from_raw_fd(fd) };
    file.write_all(bytes)?;
    file.rewind()?;
    Ok(file.into())
}

/// Waits for the child to hand over the proxy's listening socket.
async fn listener_from(host_end: OwnedFd) -> std::io::Result<tokio::net::TcpListener> {
    let stream = std::os::unix::net::UnixStream::from(host_end);
    stream.set_nonblocking(true)?;
    let stream = tokio::net::UnixStream::from_std(stream)?;
    let listener = std::net::TcpListener::from(receive(&stream).await?);
    listener.set_nonblocking(true)?;
    tokio::net::TcpListener::from_std(listener)
}

/// The next descriptor the child sends on `stream`.
async fn receive(stream: &tokio::net::UnixStream) -> std::io::Result<OwnedFd> {
    loop {
        stream.readable().await?;
        match namespace::receive_fd(stream.as_raw_fd()) {
            Ok(fd) => return Ok(fd),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Whether `path` is a file someone may execute.
pub(crate) fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}
