//! The process a command runs as, and everything it starts: ended
//! together when the call ends, at its deadline, or when the call's future
//! is dropped.
//!
//! On Unix the command leads a process group of its own, killed as one,
//! and SIGCHLD says when the leader exited. Windows has neither; there the
//! command alone is killed (what it started itself is reached only by a
//! Job object, which Reson does not make yet), and its exit is polled.

use std::process::ExitStatus;
use tokio::process::Child;

/// Kills the whole group when dropped. The leader itself is then reaped
/// by tokio (`kill_on_drop`).
pub(super) struct Group {
    child: Child,
    /// The leader's pid, which is also the group's id.
    #[cfg(unix)]
    pid: libc::pid_t,
    reaped: bool,
}

impl Group {
    /// Puts the command to spawn in a group of its own.
    pub(super) fn prepare(command: &mut tokio::process::Command) {
        #[cfg(unix)]
        command.process_group(0);
        command.kill_on_drop(true);
    }

    /// The group `child` leads; `None` when it has no pid (already gone).
    pub(super) fn new(child: Child) -> Option<Self> {
        #[cfg(unix)]
        let pid = libc::pid_t::try_from(child.id()?).ok()?;
        #[cfg(not(unix))]
        child.id()?;
        Some(Self {
            child,
            #[cfg(unix)]
            pid,
            reaped: false,
        })
    }

    #[cfg(unix)]
    fn kill(&mut self) {
        // SAFETY: kill(2) with a negative pid signals the process group
        // the child leads. The leader is not reaped yet (`exited` uses
        // WNOWAIT), so the group id cannot belong to anyone else.
        unsafe {
            libc::kill(-self.pid, libc::SIGKILL);
        }
    }

    #[cfg(not(unix))]
    fn kill(&mut self) {
        let _ = self.child.start_kill();
    }

    /// Whether the leader has exited, without reaping it.
    #[cfg(unix)]
    pub(super) fn exited(&mut self) -> bool {
        let Ok(pid) = libc::id_t::try_from(self.pid) else { return false };
        // SAFETY: waitid(2) writes only into the zeroed siginfo we own.
        unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            let flags = libc::WEXITED | libc::WNOHANG | libc::WNOWAIT;
            libc::waitid(libc::P_PID, pid, &mut info, flags) == 0 && info.si_pid() != 0
        }
    }

    /// Whether the command has exited. Without process groups there is no
    /// group id to keep from reuse, so reaping early is harmless.
    #[cfg(not(unix))]
    pub(super) fn exited(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }

    /// Kills the group, then reaps the leader.
    pub(super) async fn finish(&mut self) -> std::io::Result<ExitStatus> {
        self.kill();
        let status = self.child.wait().await;
        self.reaped = true;
        status
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        if !self.reaped {
            self.kill();
        }
    }
}

/// Says when a child may have exited: SIGCHLD on Unix, a short tick
/// elsewhere.
pub(super) struct Exits {
    #[cfg(unix)]
    signal: tokio::signal::unix::Signal,
}

impl Exits {
    /// Made before the spawn, so that no exit goes unseen.
    pub(super) fn new() -> std::io::Result<Self> {
        Ok(Self {
            #[cfg(unix)]
            signal: tokio::signal::unix::signal(tokio::signal::unix::SignalKind::child())?,
        })
    }

    /// Completes when some child may have exited.
    pub(super) async fn next(&mut self) {
        #[cfg(unix)]
        self.signal.recv().await;
        #[cfg(not(unix))]
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}
