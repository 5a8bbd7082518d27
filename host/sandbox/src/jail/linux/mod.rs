//! The Linux jail: user, mount, PID, network, IPC and UTS namespaces
//! (bubblewrap does the mounts and the PID namespace; the network
//! namespace is made first, so the host can hand in a proxy socket), a pids
//! cgroup or RLIMIT_NPROC, and a seccomp filter.

mod cgroup;
mod launcher;
mod mounts;
mod namespace;
mod seccomp;

pub use seccomp::SeccompError;

use super::{JailError, JailSpec, PRIVATE_TMP, proxy};
use namespace::Prelude;
use std::io::{Seek, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;
use tokio::task::JoinSet;

/// Processes of the jail's own the cap leaves room for: bubblewrap and the
/// PID namespace's init.
const JAIL_OVERHEAD: u64 = 2;

/// An error when `bwrap` cannot be run at all, before any probe.
pub(super) fn missing(bwrap: &Path) -> Option<JailError> {
    (!super::is_executable(bwrap)).then(|| JailError::MissingLauncher {
        name: "bubblewrap",
        path: bwrap.to_path_buf(),
        fix: "Debian: `apt-get install bubblewrap`; or set `[sandbox] bwrap`",
    })
}

/// What a jailed command holds on the host besides the process.
#[derive(Debug)]
pub(super) struct Guard {
    // Field order is drop order: the proxy stops before the cgroup's
    // processes are killed and the private `/tmp` is removed.
    _proxy: JoinSet<()>,
    _cgroup: Option<cgroup::PidsCgroup>,
    _tmp: tempfile::TempDir,
    report: OwnedFd,
}

impl Guard {
    pub(super) fn spawn_error(&self, error: std::io::Error) -> JailError {
        spawn_error(&self.report, error)
    }
}

fn spawn_error(report: &OwnedFd, error: std::io::Error) -> JailError {
    match namespace::failed_step(report) {
        Some(step) => JailError::Setup { step: step.describe(), source: error },
        None => JailError::Io(error),
    }
}

/// bubblewrap running `executable` in namespaces made from `spec`.
pub(super) fn build(
    bwrap: &Path,
    spec: &JailSpec,
    executable: &Path,
    args: &[String],
    env: &[(String, String)],
) -> Result<(tokio::process::Command, Guard), JailError> {
    build_capped(bwrap, spec, executable, args, env, false)
}

/// Starts `executable` jailed as [`build`] would, configured by
/// `configure`, forked by the launcher thread (see `launcher`); `None`
/// where the launcher is not there or busy, for the caller to start it
/// directly.
pub(super) async fn launch(
    bwrap: &Path,
    spec: &JailSpec,
    executable: &Path,
    args: &[String],
    env: &[(String, String)],
    configure: &impl Fn(&mut tokio::process::Command),
) -> Option<Result<(tokio::process::Child, Guard), JailError>> {
    if !launcher::ready() {
        return None;
    }
    let (mut command, mut guard) = match build_capped(bwrap, spec, executable, args, env, true) {
        Ok(built) => built,
        Err(e) => return Some(Err(e)),
    };
    configure(&mut command);
    let limit = u64::from(spec.max_processes) + JAIL_OVERHEAD;
    Some(match launcher::launch(command, limit).await? {
        Ok((child, group)) => {
            guard._cgroup = Some(group);
            Ok((child, guard))
        }
        Err(e) => Err(guard.spawn_error(e)),
    })
}

/// [`build`]; with `launched`, the cgroup is the launcher thread's to
/// make and the child joins none.
fn build_capped(
    bwrap: &Path,
    spec: &JailSpec,
    executable: &Path,
    args: &[String],
    env: &[(String, String)],
    launched: bool,
) -> Result<(tokio::process::Command, Guard), JailError> {
    let (mut prelude, report) = Prelude::new()?;
    let limit = u64::from(spec.max_processes) + JAIL_OVERHEAD;
    let created = if launched { None } else { Some(cgroup::PidsCgroup::create(limit)) };
    let cgroup = match created {
        None => None,
        Some(Ok(group)) => {
            prelude.cgroup_procs = Some(group.procs()?.into());
            Some(group)
        }
        // SAFETY: getuid cannot fail.
        Some(Err(_)) if unsafe { libc::getuid() } != 0 => {
            prelude.nproc = Some(limit);
            None
        }
        Some(Err(e)) => return Err(JailError::ProcessLimit(e.to_string())),
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

    let proxy_address = format!("127.0.0.1:{}", namespace::PROXY_PORT);
    let proxy_address = (!spec.network.is_empty()).then_some(proxy_address.as_str());
    let mut command = tokio::process::Command::new(bwrap);
    command.args(argv).env_clear().envs(super::jail_env(
        spec,
        env,
        Path::new(PRIVATE_TMP),
        proxy_address,
    ));
    // SAFETY: the prelude makes raw system calls only, on memory and
    // descriptors prepared above (see `namespace`).
    unsafe {
        command.pre_exec(move || prelude.run());
    }
    Ok((command, Guard { _proxy: proxy, _cgroup: cgroup, _tmp: tmp, report }))
}

/// Starts the launcher threads and builds the seccomp filter, so that the
/// first command finds them ready.
pub(super) fn prepare() {
    launcher::start_all();
    let _ = seccomp_programs();
}

/// Namespaces of its own for a process the host starts outside the
/// command jail (the browser). Its network has nothing but a loopback
/// interface, where the child listens on `127.0.0.1:`[`PROXY_PORT`] for
/// the proxy the host serves, and from where it hands the host `sockets`
/// unconnected TCP sockets (at least one): the host reaches what listens
/// inside with the first, and may bind the others to listen there itself.
/// With `tmp`, it also sees that directory as its `/tmp`. Made with a user
/// namespace, so the host needs no privileges.
pub(crate) fn own_network(
    tmp: Option<&Path>,
    sockets: usize,
) -> Result<(OwnNetwork, NetworkHandOver), JailError> {
    use std::os::unix::ffi::OsStrExt;
    let sockets = sockets.max(1);
    let (mut prelude, report) = Prelude::new()?;
    let (host_end, child_end) = namespace::socket_pair()?;
    prelude.hand_over = Some(child_end);
    prelude.sockets = sockets;
    prelude.private_tmp = match tmp {
        Some(dir) => Some(
            std::ffi::CString::new(dir.as_os_str().as_bytes())
                .map_err(|e| JailError::Io(std::io::Error::other(e)))?,
        ),
        None => None,
    };
    Ok((OwnNetwork(prelude), NetworkHandOver { channel: host_end, report, sockets }))
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
    sockets: usize,
}

impl NetworkHandOver {
    /// The error for a failed spawn, naming the step that failed.
    pub(crate) fn spawn_error(&self, error: std::io::Error) -> JailError {
        spawn_error(&self.report, error)
    }

    /// The proxy's listener and the unconnected sockets of the namespace,
    /// once the child has handed them over.
    pub(crate) async fn sockets(
        self,
    ) -> std::io::Result<(tokio::net::TcpListener, Vec<tokio::net::TcpSocket>)> {
        let stream = unix_stream(self.channel)?;
        let listener = std::net::TcpListener::from(receive(&stream).await?);
        listener.set_nonblocking(true)?;
        let mut sockets = Vec::with_capacity(self.sockets);
        for _ in 0..self.sockets {
            let socket = std::net::TcpStream::from(receive(&stream).await?);
            socket.set_nonblocking(true)?;
            sockets.push(tokio::net::TcpSocket::from_std_stream(socket));
        }
        Ok((tokio::net::TcpListener::from_std(listener)?, sockets))
    }
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

fn unix_stream(fd: OwnedFd) -> std::io::Result<tokio::net::UnixStream> {
    let stream = std::os::unix::net::UnixStream::from(fd);
    stream.set_nonblocking(true)?;
    tokio::net::UnixStream::from_std(stream)
}

/// Waits for the child to hand over the proxy's listening socket.
async fn listener_from(host_end: OwnedFd) -> std::io::Result<tokio::net::TcpListener> {
    let stream = unix_stream(host_end)?;
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
