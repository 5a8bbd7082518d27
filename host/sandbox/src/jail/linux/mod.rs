//! The Linux jail: user, mount, PID, network, IPC and UTS namespaces
//! (bubblewrap does the mounts and the PID namespace; the network
//! namespace is made first, so the host can hand in a proxy socket), a pids
//! cgroup or RLIMIT_NPROC, and a seccomp filter.

mod cgroup;
mod launcher;
mod mounts;
mod namespace;
mod seccomp;
pub(super) mod spare;

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
    // processes are killed and the private `/tmp` is removed, and only then
    // is the next jail of the spec asked for.
    _proxy: JoinSet<()>,
    _cgroup: Option<cgroup::PidsCgroup>,
    _tmp: tempfile::TempDir,
    report: OwnedFd,
    made_ahead: bool,
    _next: Option<spare::Next>,
}

impl Guard {
    pub(super) fn spawn_error(&self, error: std::io::Error) -> JailError {
        spawn_error(&self.report, error)
    }

    /// Whether the command started in a jail made ahead.
    pub(super) fn made_ahead(&self) -> bool {
        self.made_ahead
    }
}

/// How a jail is started.
pub(super) enum Start {
    /// By the caller, the child joining its cgroup itself.
    Direct,
    /// By a launcher thread that sits in the cgroup already.
    Launched,
    /// Ahead of its command, running a spare's waiting stage.
    Ahead(Stage),
}

/// What a spare's waiting stage inherits: its own program and its end of
/// the socket its command comes down.
pub(super) struct Stage {
    pub(super) program: OwnedFd,
    pub(super) control: OwnedFd,
}

/// How a tool's jailed command is started (and a jail made ahead, which
/// hands its command `/dev/null` in place of a stdin pipe when asked): a
/// process group of its own, killed when dropped, stdout and stderr
/// piped, stdin piped when `stdin`.
pub(super) fn configure(command: &mut tokio::process::Command, stdin: bool) {
    use std::process::Stdio;
    command.process_group(0).kill_on_drop(true);
    command.stdin(if stdin { Stdio::piped() } else { Stdio::null() });
    command.stdout(Stdio::piped()).stderr(Stdio::piped());
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
    build_capped(bwrap, spec, executable, args, env, Start::Direct).map(|(c, g, _)| (c, g))
}

/// Starts `executable` jailed, as [`build`] would, configured by
/// `configure`: with `ahead` (`Some(stdin)`, where `configure` is
/// [`configure`] with `stdin`), in the spare of `spec` when there is one
/// that matches (see `spare`); else forked by a launcher thread (see
/// `launcher`); else directly. With `ahead`, the next jail of `spec` is
/// made ahead: once its spare is taken, or once the command's guard is
/// dropped (a jail made on the command's path, whose making would slow its
/// start).
pub(super) async fn spawn(
    bwrap: &Path,
    spec: &JailSpec,
    executable: &Path,
    args: &[String],
    env: &[(String, String)],
    configure: &(dyn Fn(&mut tokio::process::Command) + Sync),
    ahead: Option<bool>,
) -> Result<(tokio::process::Child, Guard), JailError> {
    let next = || ahead.map(|_| spare::Next::new(bwrap, spec, executable));
    let spare = ahead.and_then(|stdin| Some((spare::take(bwrap, spec, executable)?, stdin)));
    if let Some((spare, stdin)) = spare {
        let proxy_address = format!("127.0.0.1:{}", namespace::PROXY_PORT);
        let proxy_address = (!spec.network.is_empty()).then_some(proxy_address.as_str());
        let env = super::jail_env(spec, env, Path::new(PRIVATE_TMP), proxy_address);
        match spare.start(executable, args, env, stdin).await {
            Ok((mut child, mut guard)) => {
                if !stdin {
                    child.stdin = None;
                }
                guard.made_ahead = true;
                // The next is made while this command runs: one that comes
                // right after it then finds it sooner.
                drop(next());
                return Ok((child, guard));
            }
            // A spare that died since it was looked at: a jail made now.
            Err(e) => tracing::debug!("a jail made ahead could not take its command: {e}"),
        }
    }
    if launcher::ready() {
        let (mut command, mut guard, _) =
            build_capped(bwrap, spec, executable, args, env, Start::Launched)?;
        configure(&mut command);
        let limit = u64::from(spec.max_processes) + JAIL_OVERHEAD;
        if let Some(launched) = launcher::launch(command, limit).await {
            let (child, group) = launched.map_err(|e| guard.spawn_error(e))?;
            guard._cgroup = Some(group);
            guard._next = next();
            return Ok((child, guard));
        }
    }
    let (mut command, mut guard) = build(bwrap, spec, executable, args, env)?;
    configure(&mut command);
    let child = command.spawn().map_err(|e| guard.spawn_error(e))?;
    guard._next = next();
    Ok((child, guard))
}

/// Makes the spare of `spec` now and waits until it is there; `false`
/// when it could not be made (no program to wait in, a failed jail).
pub(super) async fn make_spare(bwrap: &Path, spec: &JailSpec, executable: &Path) -> bool {
    spare::Next::new(bwrap, spec, executable).now().await
}

/// [`build`], started as `start` says, with what its mounts were made from
/// (see `spare`).
type Built = (tokio::process::Command, Guard, Vec<(std::path::PathBuf, Option<(u64, u64)>)>);

fn build_capped(
    bwrap: &Path,
    spec: &JailSpec,
    executable: &Path,
    args: &[String],
    env: &[(String, String)],
    start: Start,
) -> Result<Built, JailError> {
    let (mut prelude, report) = Prelude::new()?;
    let limit = u64::from(spec.max_processes) + JAIL_OVERHEAD;
    let launched = matches!(start, Start::Launched);
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
    let tmp = private_tmp()?;
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
    if let Start::Ahead(stage) = start {
        argv.extend(spare::stage_argv(&stage));
        prelude.inherit.extend([stage.program, stage.control]);
    } else {
        argv.push(executable.into());
        argv.extend(args.iter().map(Into::into));
    }

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
    let guard =
        Guard { _proxy: proxy, _cgroup: cgroup, _tmp: tmp, report, made_ahead: false, _next: None };
    Ok((command, guard, mounts.found))
}

/// A jail's private `/tmp` on the host, named after the host's pid and PID
/// namespace: what a host that died left behind (a call's, or a jail made
/// ahead that waited until the end) the next host of the same namespace
/// removes, off the first command's path. A host in another namespace (a
/// container sharing `/tmp`) cannot tell whether its pid still runs.
fn private_tmp() -> std::io::Result<tempfile::TempDir> {
    static SWEPT: std::sync::Once = std::sync::Once::new();
    let namespace = pid_namespace();
    SWEPT.call_once(|| {
        let sweep = move || remove_stale_tmp(&std::env::temp_dir(), namespace);
        let _ = std::thread::Builder::new().name("reson-tmp-sweep".into()).spawn(sweep);
    });
    let prefix = format!("reson-jail-{}-{namespace}-", std::process::id());
    tempfile::Builder::new().prefix(&prefix).tempdir()
}

/// The inode of this process's PID namespace; 0 where it cannot be read.
fn pid_namespace() -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self/ns/pid").map_or(0, |m| m.ino())
}

/// Removes the jails' private `/tmp`s in `dir` left by hosts of PID
/// namespace `namespace` that no longer run.
fn remove_stale_tmp(dir: &Path, namespace: u64) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let ours = name.to_str().and_then(|n| n.strip_prefix("reson-jail-")).is_some_and(|rest| {
            rest.split('-').nth(1).and_then(|ns| ns.parse().ok()) == Some(namespace)
        });
        if ours && namespace != 0 && cgroup::left_by_a_host_gone(&name) {
            // What a command left in it: links are removed, not followed.
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
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

#[cfg(test)]
mod tests {
    #[test]
    fn private_tmps_of_hosts_that_died_are_removed_and_live_ones_kept() {
        let base = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("kept"), "").unwrap();
        let ns = super::pid_namespace();
        let dead = base.path().join(format!("reson-jail-999999999-{ns}-abc"));
        let live = base.path().join(format!("reson-jail-{}-{ns}-abc", std::process::id()));
        // A host in another PID namespace: whether it runs cannot be told.
        let elsewhere = base.path().join(format!("reson-jail-999999999-{}-abc", ns + 1));
        let other = base.path().join("reson-cost-1");
        for dir in [&dead, &live, &elsewhere, &other] {
            std::fs::create_dir_all(dir.join("sub")).unwrap();
        }
        std::os::unix::fs::symlink(outside.path(), dead.join("sub/link")).unwrap();
        super::remove_stale_tmp(base.path(), ns);
        assert!(!dead.exists());
        assert!(live.exists() && elsewhere.exists() && other.exists());
        assert!(outside.path().join("kept").exists(), "a link in it was followed");
    }
}
