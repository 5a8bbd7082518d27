//! The threads jailed commands are forked from, where pids cgroups are
//! cgroup v1. A task that joins a cgroup waits for an RCU grace period:
//! about 1.5 ms on a busy machine, 8–10 ms on an idle one (measured here),
//! which is most of what a jailed command cost after a pause. A child
//! starts in the cgroup of the *thread* that forked it, and cgroup v1 lets
//! a single thread move. So a launcher thread joins the next call's cgroup
//! ahead, forks the call's command there (the child joins nothing), and
//! moves on to a fresh cgroup once that command has exited.
//!
//! Not before: while a thread moves, the command it just forked started
//! up to 3× slower (bubblewrap's own forks and exits wait on the cgroup
//! locks the move holds; a `true` took 15.6 ms at the 90th percentile
//! against 5.5 ms with the move held back, on an idle machine). Four
//! launchers take turns, so that the next command finds one ready while
//! another moves on, and the commands of one model turn's parallel tool
//! calls each find one (four `true` at once, after a pause: 20 ms until
//! the last exits with four launchers, 28 ms with two, whose other two
//! commands joined their cgroups themselves); a command that runs long
//! lets its launcher move on after [`MOVE_ON_AFTER`].
//!
//! The threads never end: bubblewrap's `--die-with-parent` kills the
//! command when the thread that forked it ends. Until it moves on, a
//! launcher counts as one task of the call's cgroup; the cap leaves room
//! for it, and a cgroup's cleanup never kills the host it belongs to.

use super::cgroup::PidsCgroup;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock, mpsc};
use std::time::Duration;
use tokio::process::{Child, Command};
use tokio::sync::oneshot;

/// Tasks a cgroup is made with; each call sets its own cap.
const FIRST_CAP: u64 = 64;

/// Launcher threads: commands started together beyond this many join
/// their cgroups themselves, which is slow.
const LAUNCHERS: usize = 4;

/// How long a launcher waits for its command to exit before it moves on
/// anyway (a command that runs this long is not slowed by much).
const MOVE_ON_AFTER: Duration = Duration::from_secs(1);

/// One command to fork.
struct Launch {
    command: Command,
    limit: u64,
    /// The caller's runtime, which the child is registered with.
    runtime: tokio::runtime::Handle,
    reply: oneshot::Sender<io::Result<(Child, PidsCgroup)>>,
}

/// One launcher thread.
struct Launcher {
    launches: mpsc::Sender<Launch>,
    /// Whether it sits in a fresh cgroup, waiting for a command.
    ready: Arc<AtomicBool>,
}

/// Forks `command` from a launcher thread, in a pids cgroup capped at
/// `limit` tasks that the caller then holds. `None` leaves the command to
/// join its cgroup itself: where there is no launcher (cgroup v2, no
/// writable pids cgroup), while they start, and while every launcher is
/// busy, so that commands started at once are not queued behind them
/// (their children join in parallel).
pub(super) async fn launch(
    command: Command,
    limit: u64,
) -> Option<io::Result<(Child, PidsCgroup)>> {
    let launcher = launchers().iter().find(|l| {
        l.ready.compare_exchange(true, false, Ordering::AcqRel, Ordering::Acquire).is_ok()
    })?;
    let (reply, replied) = oneshot::channel();
    let runtime = tokio::runtime::Handle::current();
    launcher.launches.send(Launch { command, limit, runtime, reply }).ok()?;
    replied.await.ok()
}

/// Whether a launcher is there and waiting for a command (a command is
/// only built for one then). The first call starts the launchers and
/// returns at once: until one has joined its first cgroup, commands start
/// directly.
pub(super) fn ready() -> bool {
    launchers().iter().any(|l| l.ready.load(Ordering::Acquire))
}

/// Starts the launchers, if they are not started yet, without waiting for
/// them.
pub(super) fn start_all() {
    launchers();
}

fn launchers() -> &'static [Launcher] {
    static ALL: OnceLock<Vec<Launcher>> = OnceLock::new();
    ALL.get_or_init(|| (0..LAUNCHERS).filter_map(start).collect())
}

/// Starts launcher `n`, which becomes ready once it has joined a cgroup,
/// and never does where it cannot (its thread then ends).
fn start(n: usize) -> Option<Launcher> {
    let (launches, received) = mpsc::channel::<Launch>();
    let ready = Arc::new(AtomicBool::new(false));
    let flag = ready.clone();
    std::thread::Builder::new()
        .name(format!("reson-jail-launcher-{n}"))
        .spawn(move || {
            let mut next = join_next();
            flag.store(next.is_some(), Ordering::Release);
            if next.is_some() {
                for launch in received {
                    next = serve(launch, next.take().or_else(join_next));
                    flag.store(next.is_some(), Ordering::Release);
                }
            }
        })
        .ok()?;
    Some(Launcher { launches, ready })
}

/// Forks one command in `group`, where this thread is, waits for it to
/// exit (up to [`MOVE_ON_AFTER`]), then joins the next cgroup; `None`
/// when it could not.
fn serve(launch: Launch, group: Option<PidsCgroup>) -> Option<PidsCgroup> {
    let Launch { mut command, limit, runtime, reply } = launch;
    // Without a cgroup to fork in, the reply is dropped unsent: the caller
    // starts the command directly.
    let group = group?;
    // One more task than the call's cap: this thread, until it moves on.
    let spawned = group.limit(limit + 1).and_then(|()| {
        let _runtime = runtime.enter();
        command.spawn().map(|child| (child, group))
    });
    // Opened before the reply: until the caller has the child, nothing
    // reaps it, so its pid is still its own.
    let exit = spawned.as_ref().ok().and_then(|(child, _)| child.id()).and_then(pidfd);
    // A call dropped meanwhile: its child and cgroup go with the reply.
    let _ = reply.send(spawned);
    if let Some(exit) = exit {
        wait_readable(&exit, MOVE_ON_AFTER);
    }
    join_next()
}

/// A descriptor that becomes readable when process `pid` exits.
fn pidfd(pid: u32) -> Option<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new
    // descriptor, owned here.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, libc::pid_t::try_from(pid).ok()?, 0) };
    let fd = i32::try_from(fd).ok().filter(|fd| *fd >= 0)?;
    // SAFETY: just opened, owned by no one else.
    Some(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Waits until `fd` is readable or `limit` has passed.
fn wait_readable(fd: &OwnedFd, limit: Duration) {
    let mut poll = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    let ms = libc::c_int::try_from(limit.as_millis()).unwrap_or(libc::c_int::MAX);
    // SAFETY: one pollfd on the stack, for the length of the call. An
    // interrupted wait just moves on early.
    unsafe { libc::poll(&mut poll, 1, ms) };
}

/// A fresh cgroup with this thread in it.
fn join_next() -> Option<PidsCgroup> {
    let group = PidsCgroup::create(FIRST_CAP).ok()?;
    group.join_this_thread().ok()?;
    Some(group)
}

#[cfg(test)]
mod tests {
    use crate::jail::{Jail, JailDir, JailSpec};
    use std::path::{Path, PathBuf};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn spec(ws: &Path) -> JailSpec {
        JailSpec {
            dirs: vec![JailDir {
                path: ws.to_path_buf(),
                writable: true,
                metadata_writable: false,
            }],
            search_path: vec![PathBuf::from("/usr/bin")],
            network: Vec::new(),
            max_processes: 5,
            cwd: ws.to_path_buf(),
        }
    }

    /// The pids cgroup `pid` is in (cgroup v1's `pids:` line).
    fn pids_cgroup(pid: u32) -> Option<String> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
        text.lines().find_map(|l| l.split_once(":pids:").map(|(_, path)| path.to_owned()))
    }

    #[tokio::test]
    async fn commands_start_in_their_own_capped_cgroup_and_its_cleanup_spares_the_host() {
        // SAFETY: getuid cannot fail.
        let root = unsafe { libc::getuid() } == 0;
        if !(root && pids_cgroup(std::process::id()).is_some()) {
            // Without a v1 pids hierarchy the child joins its cgroup itself,
            // as the jail's own tests show.
            return;
        }
        let ws = tempfile::tempdir().unwrap();
        let ws = ws.path().canonicalize().unwrap();
        let jail = Jail::default();
        let mut seen = Vec::new();
        // The last command is killed and its guard dropped as soon as it
        // starts, while the launcher is most likely still in its cgroup.
        for killed_at_once in [false, false, true] {
            // A launcher moves on once its command has exited; while all
            // are busy a command would start directly.
            for _ in 0..500 {
                if super::ready() {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            assert!(super::ready(), "root with a cgroup v1 pids hierarchy: a launcher is ready");
            // Each command runs until it is ended below, after the checks:
            // its launcher stays only while it runs (or for MOVE_ON_AFTER).
            let script = if killed_at_once { "sleep 5" } else { "read -r line" };
            let args = ["-c".to_owned(), script.to_owned()];
            let piped = |cmd: &mut tokio::process::Command| {
                cmd.stdin(std::process::Stdio::piped()).stderr(std::process::Stdio::piped());
            };
            let (mut child, guard) =
                jail.spawn(&spec(&ws), Path::new("/bin/sh"), &args, &[], piped).await.unwrap();
            let group = pids_cgroup(child.id().unwrap()).expect("the child is in a pids cgroup");
            assert!(group.contains("/reson-jail-"), "{group}");
            assert!(!seen.contains(&group), "each call has a cgroup of its own: {group}");
            let max = std::fs::read_to_string(format!("/sys/fs/cgroup/pids{group}/pids.max"));
            // The call's 5, bubblewrap and its init, and the launcher until it moves on.
            assert_eq!(max.unwrap().trim(), "8");
            // The launcher stays while its command starts and runs: its
            // move would hold the command up.
            let tasks = std::fs::read_to_string(format!("/sys/fs/cgroup/pids{group}/tasks"));
            let launcher_there = tasks.unwrap().lines().any(|tid| {
                let comm = std::fs::read_to_string(format!("/proc/self/task/{}/comm", tid.trim()));
                comm.is_ok_and(|c| c.starts_with("reson-jail-laun"))
            });
            assert!(launcher_there, "the launcher is in {group} while its command runs");
            if killed_at_once {
                child.start_kill().unwrap();
                child.wait().await.unwrap();
            } else {
                let mut stdin = child.stdin.take().unwrap();
                stdin.write_all(b"done\n").await.unwrap();
                drop(stdin);
                let mut err = String::new();
                child.stderr.take().unwrap().read_to_string(&mut err).await.unwrap();
                assert!(child.wait().await.unwrap().success(), "{err}");
            }
            seen.push(group);
            // The cgroup's processes are killed; the host (this test), listed
            // there while the launcher is, is not.
            drop(guard);
        }
        for group in &seen {
            let dir = format!("/sys/fs/cgroup/pids{group}");
            for _ in 0..250 {
                if !Path::new(&dir).exists() {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            assert!(!Path::new(&dir).exists(), "{dir} is removed once the launcher left it");
        }
    }
}
