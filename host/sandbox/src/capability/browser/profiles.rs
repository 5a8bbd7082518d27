//! Where browsers keep their files: under one directory the host owns
//! (`browser/` in its cache directory), each host (runtime) a directory of
//! its own that it holds locked while it lives, each session a directory
//! in that with Chromium's profile and its `TMPDIR`. Nothing goes to the
//! system's temporary directory. A clean end removes a session's files
//! and the host's directory; a host killed outright leaves its directory
//! unlocked, and the next host to start removes it, cookies and all.

use super::BrowserError;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, SystemTime};

/// How old a directory still being set up (named `.new-*`) must be
/// before a sweep takes it for the remains of a crash.
const SETUP_GRACE: Duration = Duration::from_secs(60);

/// The browser files of one host.
pub(crate) struct Profiles {
    root: PathBuf,
    own: Mutex<Option<HostDir>>,
}

/// A host's own directory, locked while it is held.
struct HostDir {
    path: PathBuf,
    // The lock (see [`hold`]) lives as long as this handle, which no child
    // inherits (it is close-on-exec, or not inheritable on Windows), and
    // ends with the process however it ends.
    _lock: File,
}

impl Drop for HostDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// One session's directory: Chromium's profile, `TMPDIR` and log, removed
/// when dropped.
pub(super) struct SessionDir(tempfile::TempDir);

impl SessionDir {
    /// Chromium's `--user-data-dir` (and `HOME`).
    pub(super) fn profile(&self) -> PathBuf {
        self.0.path().join("profile")
    }

    /// Chromium's `TMPDIR`.
    pub(super) fn tmp(&self) -> PathBuf {
        self.0.path().join("tmp")
    }

    /// Chromium's standard error.
    pub(super) fn log(&self) -> PathBuf {
        self.0.path().join("chromium.log")
    }
}

impl Profiles {
    /// Browser files under `root`; removes what hosts that are gone left
    /// there.
    pub(crate) fn new(root: PathBuf) -> Self {
        sweep(&root);
        Self { root, own: Mutex::default() }
    }

    /// A fresh, empty directory for a session.
    pub(super) fn session(&self) -> Result<SessionDir, BrowserError> {
        let failed = |e: std::io::Error| {
            BrowserError::Failed(format!(
                "cannot make a browser profile under {}: {e}",
                self.root.display()
            ))
        };
        let mut own = self.own.lock().unwrap_or_else(PoisonError::into_inner);
        let host = match &mut *own {
            Some(host) => host,
            empty => empty.insert(HostDir::create(&self.root).map_err(failed)?),
        };
        let dir =
            tempfile::Builder::new().prefix("session-").tempdir_in(&host.path).map_err(failed)?;
        let session = SessionDir(dir);
        std::fs::create_dir(session.profile()).map_err(failed)?;
        std::fs::create_dir(session.tmp()).map_err(failed)?;
        Ok(session)
    }
}

impl HostDir {
    /// A new directory under `root`, locked before it gets the name a
    /// sweep looks at, so that no sweep ever takes a live one.
    fn create(root: &Path) -> std::io::Result<Self> {
        create_private(root)?;
        let setup = tempfile::Builder::new().prefix(".new-").tempdir_in(root)?.keep();
        let lock = hold(&setup)?;
        let name = setup.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        let path = root.join(format!("host-{}", &name[".new-".len()..]));
        std::fs::rename(&setup, &path)?;
        Ok(Self { path, _lock: lock })
    }
}

/// Removes every host directory under `root` that no live host holds.
fn sweep(root: &Path) {
    let Ok(entries) = std::fs::read_dir(root) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        let setting_up = entry.file_name().to_string_lossy().starts_with(".new-");
        if setting_up && !older_than(&path, SETUP_GRACE) {
            continue;
        }
        // A directory someone else holds locked is a live host's.
        let Some(_claim) = abandoned(&path) else { continue };
        match std::fs::remove_dir_all(&path) {
            Ok(()) => tracing::info!(
                target: "reson::browser",
                dir = %path.display(),
                "removed the browser files a host that is gone left behind"
            ),
            Err(e) => tracing::warn!(
                target: "reson::browser",
                dir = %path.display(),
                "cannot remove the browser files a host that is gone left behind: {e}"
            ),
        }
    }
}

/// Makes `root` and its parents, `root` for its owner's eyes only.
#[cfg(unix)]
fn create_private(root: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(root)
}

/// Makes `root` and its parents. On Windows a new directory inherits the
/// ACL of its parent, which under the user's profile (where the cache
/// directory is) already keeps out other users.
#[cfg(windows)]
fn create_private(root: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(root)
}

/// `dir` opened and locked (`flock`) for as long as the file lives.
#[cfg(unix)]
fn hold(dir: &Path) -> std::io::Result<File> {
    let lock = File::open(dir)?;
    lock.lock()?;
    Ok(lock)
}

/// `dir` opened so that no one else can open it exclusively while the file
/// lives, which is how [`abandoned`] tells it is held: Windows opens a
/// directory only with `FILE_FLAG_BACKUP_SEMANTICS`, and locks no byte of
/// one. Renaming and removing it stay open to its holder.
#[cfg(windows)]
fn hold(dir: &Path) -> std::io::Result<File> {
    use std::os::windows::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .share_mode(FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE)
        .custom_flags(FILE_FLAG_BACKUP_SEMANTICS)
        .open(dir)
}

/// `dir`, locked, when no live host holds it locked; the lock is kept
/// while it is removed.
#[cfg(unix)]
fn abandoned(dir: &Path) -> Option<File> {
    let dir = File::open(dir).ok()?;
    dir.try_lock().ok()?;
    Some(dir)
}

/// Whether no live host holds `dir` ([`hold`]): then it opens with no
/// sharing at all. That handle is closed at once, as removing the
/// directory needs it gone (a host never takes an existing directory back).
#[cfg(windows)]
fn abandoned(dir: &Path) -> Option<()> {
    use std::os::windows::fs::OpenOptionsExt;
    let probe = std::fs::OpenOptions::new()
        .read(true)
        .share_mode(0)
        .custom_flags(FILE_FLAG_BACKUP_SEMANTICS)
        .open(dir)
        .ok()?;
    drop(probe);
    Some(())
}

// Windows' `CreateFileW` flags, by their Windows SDK names.
#[cfg(windows)]
const FILE_SHARE_READ: u32 = 0x1;
#[cfg(windows)]
const FILE_SHARE_WRITE: u32 = 0x2;
#[cfg(windows)]
const FILE_SHARE_DELETE: u32 = 0x4;
#[cfg(windows)]
const FILE_FLAG_BACKUP_SEMANTICS: u32 = 0x0200_0000;

fn older_than(path: &Path, age: Duration) -> bool {
    std::fs::metadata(path)
        .and_then(|m| m.modified())
        .is_ok_and(|at| SystemTime::now().duration_since(at).is_ok_and(|d| d > age))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sweep_removes_what_no_live_host_holds() {
        let root = tempfile::tempdir().unwrap();
        let live = Profiles::new(root.path().to_path_buf());
        let session = live.session().unwrap();
        std::fs::write(session.profile().join("Cookies"), "sid=1").unwrap();
        let live_dir = live.own.lock().unwrap().as_ref().unwrap().path.clone();
        // What a host killed outright leaves: a directory no one locks.
        let dead = root.path().join("host-dead");
        std::fs::create_dir_all(dead.join("session-x/profile")).unwrap();
        std::fs::write(dead.join("session-x/profile/Cookies"), "sid=2").unwrap();
        // A host that is still setting its directory up.
        let new = root.path().join(".new-young");
        std::fs::create_dir(&new).unwrap();

        let next = Profiles::new(root.path().to_path_buf());
        assert!(!dead.exists(), "a dead host's files go");
        assert!(
            live_dir.join(session.0.path().file_name().unwrap()).exists(),
            "a live host's stay"
        );
        assert!(new.exists(), "a directory being set up stays");

        drop(session);
        drop(live);
        assert!(!live_dir.exists(), "a host that ends removes its directory");
        drop(next);
        assert_eq!(
            std::fs::read_dir(root.path()).unwrap().count(),
            1,
            "only the young one is left"
        );
    }
}
