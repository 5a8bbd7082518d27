//! The thread jailed commands are forked from, where pids cgroups are
//! cgroup v1. A task that joins a cgroup waits for an RCU grace period:
//! about 1.5 ms on a busy machine, 8–10 ms on an idle one (measured here),
//! which is most of what a jailed command cost after a pause. A child
//! starts in the cgroup of the *thread* that forked it, and cgroup v1 lets
//! a single thread move. So this thread joins the next call's cgroup
//! ahead, forks the call's command there (the child joins nothing), and
//! then moves on to a fresh cgroup, off the call's path.
//!
//! The thread never ends: bubblewrap's `--die-with-parent` kills the
//! command when the thread that forked it ends. Until it moves on, the
//! thread counts as one task of the call's cgroup; the cap leaves room for
//! it, and a cgroup's cleanup never kills the host it belongs to.

use super::cgroup::PidsCgroup;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{OnceLock, mpsc};
use tokio::process::{Child, Command};
use tokio::sync::oneshot;

/// Tasks a cgroup is made with; each call sets its own cap.
const FIRST_CAP: u64 = 64;

/// One command to fork.
struct Launch {
    command: Command,
    limit: u64,
    /// The caller's runtime, which the child is registered with.
    runtime: tokio::runtime::Handle,
    reply: oneshot::Sender<io::Result<(Child, PidsCgroup)>>,
}

/// Whether the launcher sits in a fresh cgroup, waiting for a command.
static READY: AtomicBool = AtomicBool::new(false);

/// Forks `command` from the launcher thread, in a pids cgroup capped at
/// `limit` tasks that the caller then holds. `None` leaves the command to
/// join its cgroup itself: where there is no launcher (cgroup v2, no
/// writable pids cgroup), and while the launcher is busy, so that
/// commands started at once are not queued behind one thread (their
/// children join in parallel).
pub(super) async fn launch(
    command: Command,
    limit: u64,
) -> Option<io::Result<(Child, PidsCgroup)>> {
    let launcher = launcher()?;
    READY.compare_exchange(true, false, Ordering::AcqRel, Ordering::Acquire).ok()?;
    let (reply, replied) = oneshot::channel();
    let runtime = tokio::runtime::Handle::current();
    launcher.send(Launch { command, limit, runtime, reply }).ok()?;
    replied.await.ok()
}

/// Whether the launcher is there and waiting for a command (a command is
/// only built for it then).
pub(super) fn ready() -> bool {
    launcher().is_some() && READY.load(Ordering::Acquire)
}

fn launcher() -> Option<&'static mpsc::Sender<Launch>> {
    static LAUNCHER: OnceLock<Option<mpsc::Sender<Launch>>> = OnceLock::new();
    LAUNCHER
        .get_or_init(|| {
            let (sender, launches) = mpsc::channel::<Launch>();
            let (joined, first) = mpsc::channel();
            std::thread::Builder::new()
                .name("reson-jail-launcher".into())
                .spawn(move || {
                    let mut next = join_next();
                    let works = next.is_some();
                    READY.store(works, Ordering::Release);
                    let _ = joined.send(works);
                    if works {
                        for launch in launches {
                            next = serve(launch, next.take().or_else(join_next));
                            READY.store(next.is_some(), Ordering::Release);
                        }
                    }
                })
                .ok()?;
            first.recv().ok()?.then_some(sender)
        })
        .as_ref()
}

/// Forks one command in `group`, where this thread is, then joins the next
/// cgroup; `None` when it could not.
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
    // A call dropped meanwhile: its child and cgroup go with the reply.
    let _ = reply.send(spawned);
    join_next()
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
    use tokio::io::AsyncReadExt;

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
        assert!(super::launcher().is_some(), "root with a cgroup v1 pids hierarchy: a launcher");
        let ws = tempfile::tempdir().unwrap();
        let ws = ws.path().canonicalize().unwrap();
        let jail = Jail::default();
        let mut seen = Vec::new();
        // The last command is killed and its guard dropped as soon as it
        // starts, while the launcher is most likely still in its cgroup.
        for killed_at_once in [false, false, true] {
            // The launcher moves on after each fork; meanwhile a command
            // would start directly.
            for _ in 0..500 {
                if super::READY.load(std::sync::atomic::Ordering::Acquire) {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            let script = if killed_at_once { "sleep 5" } else { "sleep 0.2" };
            let args = ["-c".to_owned(), script.to_owned()];
            let piped = |cmd: &mut tokio::process::Command| {
                cmd.stderr(std::process::Stdio::piped());
            };
            let (mut child, guard) =
                jail.spawn(&spec(&ws), Path::new("/bin/sh"), &args, &[], piped).await.unwrap();
            let group = pids_cgroup(child.id().unwrap()).expect("the child is in a pids cgroup");
            assert!(group.contains("/reson-jail-"), "{group}");
            assert!(!seen.contains(&group), "each call has a cgroup of its own: {group}");
            let max = std::fs::read_to_string(format!("/sys/fs/cgroup/pids{group}/pids.max"));
            // The call's 5, bubblewrap and its init, and the launcher until it moves on.
            assert_eq!(max.unwrap().trim(), "8");
            if killed_at_once {
                child.start_kill().unwrap();
                child.wait().await.unwrap();
            } else {
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
