//! A pids cgroup per call: the kernel's own count of a jail's processes and
//! threads, which root's processes cannot escape (RLIMIT_NPROC does not
//! bind root), and a list of every process to kill when the call ends.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{OnceLock, mpsc};
use std::time::Duration;

/// One call's cgroup, removed (its processes killed first) when dropped.
#[derive(Debug)]
pub(super) struct PidsCgroup {
    dir: PathBuf,
}

impl PidsCgroup {
    /// A new cgroup under the host's own, holding at most `max` tasks.
    pub(super) fn create(max: u64) -> io::Result<Self> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let base = base().ok_or_else(|| {
            io::Error::new(io::ErrorKind::Unsupported, "no writable pids cgroup hierarchy")
        })?;
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = base.join(format!("reson-jail-{}-{n}", std::process::id()));
        std::fs::create_dir(&dir)?;
        let group = Self { dir };
        group.limit(max)?;
        Ok(group)
    }

    /// Caps the cgroup at `max` tasks.
    pub(super) fn limit(&self, max: u64) -> io::Result<()> {
        std::fs::write(self.dir.join("pids.max"), max.to_string())
    }

    /// Moves the calling thread alone into the cgroup (cgroup v1 only:
    /// v2 moves whole processes), so that what it forks starts there.
    pub(super) fn join_this_thread(&self) -> io::Result<()> {
        // SAFETY: gettid cannot fail.
        let tid = unsafe { libc::gettid() };
        std::fs::write(self.dir.join("tasks"), tid.to_string())
    }

    /// `cgroup.procs`, open for the child to write itself into.
    pub(super) fn procs(&self) -> io::Result<File> {
        std::fs::OpenOptions::new().write(true).open(self.dir.join("cgroup.procs"))
    }
}

fn members(dir: &Path) -> Vec<libc::pid_t> {
    let text = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
    text.lines().filter_map(|l| l.trim().parse().ok()).collect()
}

fn kill_all(dir: &Path) {
    // The launcher thread belongs to a call's cgroup until it moves on; the
    // host it is part of is listed then, and is not the call's to kill.
    let host = libc::pid_t::try_from(std::process::id()).unwrap_or(-1);
    for pid in members(dir).into_iter().filter(|pid| *pid != host) {
        // SAFETY: kill(2) on a pid the kernel lists in our own cgroup.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
}

impl Drop for PidsCgroup {
    fn drop(&mut self) {
        kill_all(&self.dir);
        // Removal waits on the kernel: the killed tasks must be reaped, and
        // `rmdir` takes the cgroup lock a task moving between cgroups holds
        // for an RCU grace period (a launcher moving on: up to 17 ms
        // measured here on an idle machine). So it is the reaper's, off
        // the caller's path.
        let dir = std::mem::take(&mut self.dir);
        if let Err(mpsc::SendError(dir)) = reaper().send(dir) {
            remove(&dir);
        }
    }
}

/// Tries once to remove `dir`, killing what is left in it first; whether
/// it is gone.
fn remove(dir: &Path) -> bool {
    kill_all(dir);
    std::fs::remove_dir(dir).is_ok()
}

/// The thread that removes the cgroups of ended calls, each tried for up
/// to 2 s (what a host leaves behind at exit, the next one removes: see
/// `remove_stale`).
fn reaper() -> &'static mpsc::Sender<PathBuf> {
    static REAPER: OnceLock<mpsc::Sender<PathBuf>> = OnceLock::new();
    REAPER.get_or_init(|| {
        let (sender, ended) = mpsc::channel::<PathBuf>();
        // A reaper that cannot start drops `ended`: each drop then removes
        // its cgroup itself.
        let _ = std::thread::Builder::new().name("reson-cgroup-reaper".into()).spawn(move || {
            let mut pending: Vec<(PathBuf, u32)> = Vec::new();
            loop {
                let next = if pending.is_empty() {
                    ended.recv().map_err(|_| mpsc::RecvTimeoutError::Disconnected)
                } else {
                    ended.recv_timeout(Duration::from_millis(20))
                };
                match next {
                    Ok(dir) => pending.push((dir, 0)),
                    Err(mpsc::RecvTimeoutError::Timeout) => {}
                    Err(mpsc::RecvTimeoutError::Disconnected) => return,
                }
                // Tried every 20 ms or so, 100 times at most.
                pending.retain_mut(|(dir, tries)| {
                    *tries += 1;
                    !remove(dir) && *tries < 100
                });
            }
        });
        sender
    })
}

/// The directory new cgroups are made in, found once: the host's own cgroup
/// in a cgroup v2 hierarchy whose children get the pids controller, else in
/// a v1 pids hierarchy. `None` where neither is writable.
fn base() -> Option<&'static Path> {
    static BASE: OnceLock<Option<PathBuf>> = OnceLock::new();
    BASE.get_or_init(|| {
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
        let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
        let base = candidates(&mounts, &own).into_iter().find(|dir| usable(dir))?;
        // Each removal may wait on the kernel (an RCU grace period, much
        // longer on a loaded machine): the first command must not.
        let stale = base.clone();
        let swept = std::thread::Builder::new()
            .name("reson-cgroup-sweep".into())
            .spawn(move || remove_stale(&stale));
        if swept.is_err() {
            remove_stale(&base);
        }
        Some(base)
    })
    .as_deref()
}

/// Removes the cgroups a host that died left behind (named after its pid,
/// which no longer runs); their processes died with their PID namespaces.
fn remove_stale(base: &Path) {
    let Ok(entries) = std::fs::read_dir(base) else { return };
    for entry in entries.flatten() {
        if left_by_a_host_gone(&entry.file_name()) {
            kill_all(&entry.path());
            let _ = std::fs::remove_dir(entry.path());
        }
    }
}

/// Whether `name` is a jail's (`reson-jail-PID-...`) whose host no longer
/// runs.
pub(super) fn left_by_a_host_gone(name: &std::ffi::OsStr) -> bool {
    let Some(rest) = name.to_str().and_then(|n| n.strip_prefix("reson-jail-")) else {
        return false;
    };
    let owner = rest.split('-').next().and_then(|pid| pid.parse::<u32>().ok());
    owner.is_some_and(|pid| !Path::new(&format!("/proc/{pid}")).exists())
}

/// Where the host's cgroup lies in each hierarchy that can count pids, v2
/// first.
fn candidates(mountinfo: &str, own: &str) -> Vec<PathBuf> {
    let own_path = |wanted: &dyn Fn(&str) -> bool| {
        own.lines().find_map(|line| {
            let mut parts = line.splitn(3, ':');
            let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
            wanted(controllers).then(|| path.trim_start_matches('/').to_owned())
        })
    };
    let mut v2 = Vec::new();
    let mut v1 = Vec::new();
    for line in mountinfo.lines() {
        let Some((before, after)) = line.split_once(" - ") else { continue };
        let mount_point = before.split(' ').nth(4).unwrap_or_default();
        let mut fields = after.split(' ');
        let (fstype, options) = (fields.next(), fields.nth(1).unwrap_or_default());
        match fstype {
            Some("cgroup2") => {
                if let Some(path) = own_path(&|c| c.is_empty()) {
                    v2.push(Path::new(mount_point).join(path));
                }
            }
            Some("cgroup") if options.split(',').any(|o| o == "pids") => {
                if let Some(path) = own_path(&|c| c.split(',').any(|c| c == "pids")) {
                    v1.push(Path::new(mount_point).join(path));
                }
            }
            _ => {}
        }
    }
    v2.retain(|dir| {
        let enabled = |dir: &Path| {
            std::fs::read_to_string(dir.join("cgroup.subtree_control"))
                .is_ok_and(|s| s.split_whitespace().any(|c| c == "pids"))
        };
        enabled(dir) || (std::fs::write(dir.join("cgroup.subtree_control"), "+pids").is_ok())
    });
    v2.into_iter().chain(v1).collect()
}

/// Whether a child cgroup with a pids limit can be made in `dir`.
fn usable(dir: &Path) -> bool {
    let probe = dir.join(format!("reson-jail-probe-{}", std::process::id()));
    let made = std::fs::create_dir(&probe).is_ok();
    let limited = made && std::fs::write(probe.join("pids.max"), "1").is_ok();
    if made {
        let _ = std::fs::remove_dir(&probe);
    }
    limited
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cgroups_of_hosts_that_died_are_removed_and_live_ones_kept() {
        let base = tempfile::tempdir().unwrap();
        let dead = base.path().join("reson-jail-999999999-3");
        let live = base.path().join(format!("reson-jail-{}-0", std::process::id()));
        let other = base.path().join("reson-jail-probe-1");
        for dir in [&dead, &live, &other] {
            std::fs::create_dir(dir).unwrap();
        }
        remove_stale(base.path());
        assert!(!dead.exists());
        assert!(live.exists() && other.exists());
    }

    #[test]
    fn finds_the_hosts_own_cgroup_in_v1_and_v2_hierarchies() {
        let mountinfo = "\
30 25 0:26 / /sys/fs/cgroup/pids rw,relatime shared:9 - cgroup cgroup rw,pids
31 25 0:27 / /sys/fs/cgroup/memory rw,relatime shared:10 - cgroup cgroup rw,memory
32 25 0:28 / /sys/fs/cgroup/unified rw,relatime shared:11 - cgroup2 cgroup2 rw";
        let own = "8:pids:/user/1000\n4:memory:/other\n0::/user.slice/session-1\n";
        let found = candidates(mountinfo, own);
        // The v2 candidate is dropped: its subtree_control is not readable here.
        assert_eq!(found, vec![PathBuf::from("/sys/fs/cgroup/pids/user/1000")]);
    }
}
