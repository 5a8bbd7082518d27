//! What the child does between `fork` and `exec`: leave the host's user and
//! network namespaces, join the call's pids cgroup, take its limits, bring
//! up its own loopback, and hand the host a listening socket for the
//! network proxy (and, for the browser, a socket to reach into the
//! namespace with, and a `/tmp` of its own). Everything here runs in a forked copy of a threaded
//! process, so it only makes raw system calls on memory prepared before the
//! fork: no allocation, no locks.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

/// The port the proxy listens on inside the jail's own loopback.
pub(super) const PROXY_PORT: u16 = 3128;

/// Each step the child takes, named in the error when one fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(super) enum Step {
    Cgroup = 1,
    Limits,
    Unshare,
    IdMaps,
    ProcessLimit,
    Loopback,
    ProxySocket,
    HandOver,
    CloseFds,
    Inherit,
    PrivateTmp,
}

impl Step {
    fn from_byte(byte: u8) -> Option<Self> {
        [
            Self::Cgroup,
            Self::Limits,
            Self::Unshare,
            Self::IdMaps,
            Self::ProcessLimit,
            Self::Loopback,
            Self::ProxySocket,
            Self::HandOver,
            Self::CloseFds,
            Self::Inherit,
            Self::PrivateTmp,
        ]
        .into_iter()
        .find(|s| *s as u8 == byte)
    }

    /// What the step needs from the kernel, for the error that names it.
    pub(super) fn describe(self) -> &'static str {
        match self {
            Self::Cgroup => "joining the call's pids cgroup",
            Self::Limits => "setting resource limits",
            Self::Unshare => {
                "creating user and network namespaces (unprivileged user namespaces must be \
                 enabled: kernel.unprivileged_userns_clone=1, user.max_user_namespaces > 0)"
            }
            Self::IdMaps => "mapping the user into its namespace (/proc/self/uid_map)",
            Self::ProcessLimit => "capping the number of processes (RLIMIT_NPROC)",
            Self::Loopback => "bringing up the jail's loopback interface",
            Self::ProxySocket => "opening the network proxy's socket inside the jail",
            Self::HandOver => "handing the jail's sockets to the host",
            Self::CloseFds => "closing the host's descriptors (close_range needs Linux 5.11)",
            Self::Inherit => "passing the seccomp filter to bubblewrap",
            Self::PrivateTmp => "mounting a /tmp of its own (a mount namespace)",
        }
    }
}

/// Everything the child needs, prepared before the fork.
pub(super) struct Prelude {
    uid_map: Vec<u8>,
    gid_map: Vec<u8>,
    setgroups: CString,
    uid_map_path: CString,
    gid_map_path: CString,
    /// `cgroup.procs` of the call's cgroup, open for writing.
    pub(super) cgroup_procs: Option<OwnedFd>,
    /// RLIMIT_NPROC to set once inside the user namespace, where it counts
    /// the jail's processes only.
    pub(super) nproc: Option<u64>,
    /// The child's end of the socket the proxy listener is handed over on.
    pub(super) hand_over: Option<OwnedFd>,
    /// How many unconnected TCP sockets of the new namespace follow the
    /// listener: the host connects to what listens inside with one, and
    /// binds the others to listen there itself.
    pub(super) sockets: usize,
    /// A directory to mount over `/tmp` in a mount namespace of the
    /// child's own.
    pub(super) private_tmp: Option<CString>,
    /// File descriptors bubblewrap must inherit (the seccomp programs and
    /// what it mounts from open descriptors).
    pub(super) inherit: Vec<OwnedFd>,
    /// The child's end of the pipe that names a failing step.
    report: OwnedFd,
}

impl Prelude {
    /// A prelude for the current user; returns it with the host's end of
    /// the report pipe.
    pub(super) fn new() -> io::Result<(Self, OwnedFd)> {
        // SAFETY: getuid and getgid cannot fail.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        let (read, write) = pipe()?;
        let prelude = Self {
            uid_map: format!("0 {uid} 1\n").into_bytes(),
            gid_map: format!("0 {gid} 1\n").into_bytes(),
            setgroups: c"/proc/self/setgroups".to_owned(),
            uid_map_path: c"/proc/self/uid_map".to_owned(),
            gid_map_path: c"/proc/self/gid_map".to_owned(),
            cgroup_procs: None,
            nproc: None,
            hand_over: None,
            sockets: 0,
            private_tmp: None,
            inherit: Vec::new(),
            report: write,
        };
        Ok((prelude, read))
    }

    /// Runs in the child after `fork`. Only async-signal-safe calls.
    pub(super) fn run(&self) -> io::Result<()> {
        let result = self.steps();
        if let Err((step, _)) = &result {
            let byte = [*step as u8];
            // SAFETY: writes one byte from the stack to a pipe we own.
            unsafe { libc::write(self.report.as_raw_fd(), byte.as_ptr().cast(), 1) };
        }
        result.map_err(|(_, e)| e)
    }

    fn steps(&self) -> Result<(), (Step, io::Error)> {
        if let Some(procs) = &self.cgroup_procs {
            write_all(procs.as_raw_fd(), b"0").map_err(|e| (Step::Cgroup, e))?;
        }
        set_limit(libc::RLIMIT_CORE, 0).map_err(|e| (Step::Limits, e))?;
        let mounts = if self.private_tmp.is_some() { libc::CLONE_NEWNS } else { 0 };
        // SAFETY: unshare only changes this (single-threaded) child.
        check(unsafe { libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNET | mounts) })
            .map_err(|e| (Step::Unshare, e))?;
        write_file(&self.setgroups, b"deny").map_err(|e| (Step::IdMaps, e))?;
        write_file(&self.uid_map_path, &self.uid_map).map_err(|e| (Step::IdMaps, e))?;
        write_file(&self.gid_map_path, &self.gid_map).map_err(|e| (Step::IdMaps, e))?;
        if let Some(tmp) = &self.private_tmp {
            private_tmp(tmp).map_err(|e| (Step::PrivateTmp, e))?;
        }
        if let Some(max) = self.nproc {
            set_limit(libc::RLIMIT_NPROC, max).map_err(|e| (Step::ProcessLimit, e))?;
        }
        loopback_up().map_err(|e| (Step::Loopback, e))?;
        if let Some(channel) = &self.hand_over {
            let listener = proxy_listener().map_err(|e| (Step::ProxySocket, e))?;
            let sent = send_fd(channel.as_raw_fd(), listener);
            // SAFETY: the listener is ours; the host holds its own copy now.
            unsafe { libc::close(listener) };
            sent.map_err(|e| (Step::HandOver, e))?;
            for _ in 0..self.sockets {
                // SAFETY: a plain stream socket, closed below.
                let fd = unsafe {
                    libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0)
                };
                check(fd).map_err(|e| (Step::ProxySocket, e))?;
                let sent = send_fd(channel.as_raw_fd(), fd);
                // SAFETY: the socket is ours; the host holds its own copy now.
                unsafe { libc::close(fd) };
                sent.map_err(|e| (Step::HandOver, e))?;
            }
        }
        // Whatever the host holds open without close-on-exec (a jobserver
        // pipe it inherited, a library's descriptor) stays out of the jail.
        // SAFETY: marks descriptors of this child close-on-exec.
        check(unsafe { libc::close_range(3, libc::c_uint::MAX, libc::CLOSE_RANGE_CLOEXEC as i32) })
            .map_err(|e| (Step::CloseFds, e))?;
        for fd in &self.inherit {
            // SAFETY: clears close-on-exec on a descriptor we own.
            check(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, 0) })
                .map_err(|e| (Step::Inherit, e))?;
        }
        Ok(())
    }
}

/// The step a failed child reported, if it got that far.
pub(super) fn failed_step(report: &OwnedFd) -> Option<Step> {
    let mut byte = [0u8; 1];
    // SAFETY: reads one byte into the stack; the pipe is non-blocking.
    let n = unsafe { libc::read(report.as_raw_fd(), byte.as_mut_ptr().cast(), 1) };
    (n == 1).then(|| Step::from_byte(byte[0])).flatten()
}

fn check(ret: libc::c_int) -> io::Result<()> {
    if ret < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    use std::os::fd::FromRawFd;
    let mut fds = [0 as RawFd; 2];
    // SAFETY: pipe2 writes two descriptors into the array.
    check(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) })?;
    // SAFETY: both descriptors were just opened and are owned by no one else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

fn write_all(fd: RawFd, mut bytes: &[u8]) -> io::Result<()> {
    while !bytes.is_empty() {
        // SAFETY: writes from a live slice.
        let n = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        bytes = &bytes[n.unsigned_abs()..];
    }
    Ok(())
}

fn write_file(path: &CString, bytes: &[u8]) -> io::Result<()> {
    // SAFETY: opens a path from a live C string.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC) };
    check(fd)?;
    let written = write_all(fd, bytes);
    // SAFETY: closes the descriptor opened above.
    unsafe { libc::close(fd) };
    written
}

fn set_limit(resource: libc::__rlimit_resource_t, value: u64) -> io::Result<()> {
    let limit = libc::rlimit { rlim_cur: value, rlim_max: value };
    // SAFETY: setrlimit reads the struct on the stack.
    check(unsafe { libc::setrlimit(resource, &limit) })
}

/// Mounts `dir` over `/tmp`, seen by this mount namespace alone.
fn private_tmp(dir: &CString) -> io::Result<()> {
    // SAFETY: mount reads the C strings, all live for the calls.
    unsafe {
        // Nothing mounted here may show in the host's namespace.
        check(libc::mount(
            std::ptr::null(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        ))?;
        check(libc::mount(
            dir.as_ptr(),
            c"/tmp".as_ptr(),
            std::ptr::null(),
            libc::MS_BIND | libc::MS_REC,
            std::ptr::null(),
        ))
    }
}

/// The new network namespace has a loopback interface that is down.
fn loopback_up() -> io::Result<()> {
    // SAFETY: a plain datagram socket, closed below.
    let sock = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    check(sock)?;
    // SAFETY: ifreq is plain data; all zeroes is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(b"lo\0") {
        *dst = *src as libc::c_char;
    }
    // SAFETY: both ioctls read and write the ifreq on the stack.
    let result = unsafe {
        check(libc::ioctl(sock, libc::SIOCGIFFLAGS, &mut req)).and_then(|()| {
            req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
            check(libc::ioctl(sock, libc::SIOCSIFFLAGS, &req))
        })
    };
    // SAFETY: closes the socket opened above.
    unsafe { libc::close(sock) };
    result
}

/// A TCP listener on the jail's 127.0.0.1:[`PROXY_PORT`].
fn proxy_listener() -> io::Result<RawFd> {
    // SAFETY: socket, bind and listen on a descriptor we own, with the
    // address on the stack.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        check(fd)?;
        let mut addr: libc::sockaddr_in = std::mem::zeroed();
        addr.sin_family = libc::AF_INET as libc::sa_family_t;
        addr.sin_port = PROXY_PORT.to_be();
        addr.sin_addr.s_addr = u32::from(std::net::Ipv4Addr::LOCALHOST).to_be();
        let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        let bound = check(libc::bind(fd, (&raw const addr).cast(), len))
            .and_then(|()| check(libc::listen(fd, 128)));
        if let Err(e) = bound {
            libc::close(fd);
            return Err(e);
        }
        Ok(fd)
    }
}

/// Control-message room for one descriptor, aligned as cmsg needs.
#[repr(C, align(8))]
struct FdMessage([u8; 24]);

/// Sends `fd` over the Unix socket `channel` (SCM_RIGHTS).
fn send_fd(channel: RawFd, fd: RawFd) -> io::Result<()> {
    let mut byte = [0u8; 1];
    let mut control = FdMessage([0; 24]);
    // SAFETY: the message, its one-byte payload and its control buffer all
    // live on the stack for the duration of sendmsg; CMSG_* compute within
    // the buffer, which is large enough for one descriptor.
    unsafe {
        let space = libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) as usize;
        debug_assert!(space <= control.0.len());
        let mut iov = libc::iovec { iov_base: byte.as_mut_ptr().cast(), iov_len: 1 };
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &raw mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.0.as_mut_ptr().cast();
        msg.msg_controllen = space;
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as usize;
        std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>(), fd);
        let sent = libc::sendmsg(channel, &msg, libc::MSG_NOSIGNAL);
        if sent < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
    }
}

/// Receives one descriptor sent by [`send_fd`]; blocks until it comes or
/// the other end closes.
pub(super) fn receive_fd(channel: RawFd) -> io::Result<OwnedFd> {
    use std::os::fd::FromRawFd;
    let mut byte = [0u8; 1];
    let mut control = FdMessage([0; 24]);
    // SAFETY: as in send_fd; the descriptor read out of the control message
    // was just installed in this process by the kernel and is owned by no one.
    unsafe {
        let mut iov = libc::iovec { iov_base: byte.as_mut_ptr().cast(), iov_len: 1 };
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &raw mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.0.as_mut_ptr().cast();
        msg.msg_controllen = control.0.len();
        let n = libc::recvmsg(channel, &mut msg, libc::MSG_CMSG_CLOEXEC);
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        if n == 0 || cmsg.is_null() || (*cmsg).cmsg_type != libc::SCM_RIGHTS {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "no descriptor was sent"));
        }
        let fd = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>());
        Ok(OwnedFd::from_raw_fd(fd))
    }
}

/// A connected pair of Unix stream sockets, close-on-exec.
pub(super) fn socket_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    use std::os::fd::FromRawFd;
    let mut fds = [0 as RawFd; 2];
    // SAFETY: socketpair writes two descriptors into the array.
    check(unsafe {
        libc::socketpair(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0, fds.as_mut_ptr())
    })?;
    // SAFETY: both descriptors were just opened and are owned by no one else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}
