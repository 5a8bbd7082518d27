//! The file system a jailed command sees, as bubblewrap arguments: the
//! system's programs and libraries read-only, `/etc` without what only
//! root may read, a private `/tmp`, the granted directories at their own
//! paths (read-only or read-write as granted), and the repository metadata
//! inside writable grants read-only. Nothing else exists in there: not
//! `$HOME`, not the shared `/tmp`, not the host's `/proc`.

use crate::jail::{JailDir, JailSpec};
use std::ffi::OsString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Top-level system directories programs need; each is bound read-only, or
/// recreated as the symlink it is on a merged-`/usr` system.
const SYSTEM_DIRS: &[&str] = &["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"];
/// What repository metadata a writable grant keeps read-only: hooks and
/// config there run later, outside any call.
const METADATA: &[&str] = &[".git", ".reson"];
/// How deep under a writable grant repositories are looked for.
const METADATA_DEPTH: usize = 3;
/// Directories not searched for nested repositories: large, and never a
/// place a user runs git in.
const SKIPPED: &[&str] = &["node_modules", "target", ".venv", "venv", "__pycache__", ".git"];

/// One mount, ordered by the depth of its destination so that a mount on a
/// path inside another lands on top of it.
struct Mount {
    depth: usize,
    args: Vec<OsString>,
}

/// The mount arguments, and the descriptors bubblewrap must inherit for
/// them (it closes each once mounted).
pub(super) struct Mounts {
    pub(super) args: Vec<OsString>,
    pub(super) fds: Vec<OwnedFd>,
    /// What was found on disk for the mounts that depend on it (the grants,
    /// a program shown alone, repository metadata and the repositories
    /// pinned), each by its destination and the file it was then: a jail
    /// made ahead is what a jail made now would be only while these match.
    pub(super) found: Vec<(PathBuf, Option<(u64, u64)>)>,
}

impl Mount {
    fn new(dest: &Path, args: &[&std::ffi::OsStr]) -> Self {
        let depth = dest.components().count();
        Self { depth, args: args.iter().map(|a| a.to_os_string()).collect() }
    }

    fn bind(source: &Path, dest: &Path, writable: bool) -> Self {
        let flag = if writable { "--bind" } else { "--ro-bind" };
        Self::new(dest, &[flag.as_ref(), source.as_os_str(), dest.as_os_str()])
    }

    /// A bind of what `fd` holds open, at `dest`: what a command of
    /// another call swaps in at that path meanwhile is not what is mounted.
    fn bind_fd(fd: &OwnedFd, dest: &Path, writable: bool) -> Self {
        let flag = if writable { "--bind-fd" } else { "--ro-bind-fd" };
        let fd = OsString::from(fd.as_raw_fd().to_string());
        Self::new(dest, &[flag.as_ref(), fd.as_os_str(), dest.as_os_str()])
    }
}

/// The mount arguments for `spec`, with `tmp` (a host directory) as the
/// jail's `/tmp` and `program` visible read-only (a program the host chose
/// by its absolute path may lie outside every other mount).
pub(super) fn arguments(spec: &JailSpec, tmp: &Path, program: &Path) -> Mounts {
    let mut mounts = Vec::new();
    let mut fds = Vec::new();
    let visible =
        SYSTEM_DIRS.iter().map(Path::new).chain(spec.search_path.iter().map(PathBuf::as_path));
    let program_visible = visible
        .chain(spec.dirs.iter().map(|d| d.path.as_path()))
        .any(|dir| program.starts_with(dir));
    let mut found_on_disk = Vec::new();
    if !program_visible && program.is_absolute() {
        mounts.push(Mount::bind(program, program, false));
        found_on_disk.push((program.to_path_buf(), identity(std::fs::metadata(program))));
    }
    for dir in SYSTEM_DIRS.iter().map(Path::new) {
        match std::fs::symlink_metadata(dir) {
            Ok(meta) if meta.file_type().is_symlink() => {
                if let Ok(target) = std::fs::read_link(dir) {
                    mounts.push(Mount::new(
                        dir,
                        &["--symlink".as_ref(), target.as_os_str(), dir.as_os_str()],
                    ));
                }
            }
            Ok(meta) if meta.is_dir() => mounts.push(Mount::bind(dir, dir, false)),
            _ => {}
        }
    }
    let etc = Path::new("/etc");
    mounts.push(Mount::bind(etc, etc, false));
    for (path, is_dir) in etc_secrets() {
        mounts.push(if *is_dir {
            Mount::new(path, &["--tmpfs".as_ref(), path.as_os_str()])
        } else {
            Mount::new(path, &["--ro-bind".as_ref(), "/dev/null".as_ref(), path.as_os_str()])
        });
    }
    let system = |dir: &Path| SYSTEM_DIRS.iter().any(|s| dir.starts_with(s));
    for dir in spec.search_path.iter().filter(|d| !system(d)) {
        mounts.push(Mount::new(dir, &["--ro-bind-try".as_ref(), dir.as_os_str(), dir.as_os_str()]));
        found_on_disk.push((dir.clone(), identity(std::fs::metadata(dir))));
    }
    mounts.push(Mount::new(Path::new("/proc"), &["--proc".as_ref(), "/proc".as_ref()]));
    mounts.push(Mount::new(Path::new("/dev"), &["--dev".as_ref(), "/dev".as_ref()]));
    mounts.push(Mount::bind(tmp, Path::new("/tmp"), true));
    for dir in &spec.dirs {
        mounts.push(Mount::bind(&dir.path, &dir.path, dir.writable));
        found_on_disk.push((dir.path.clone(), identity(std::fs::metadata(&dir.path))));
    }
    for dir in spec.dirs.iter().filter(|d| d.writable && !d.metadata_writable) {
        // Where a `.git` file or link leads is the repository's to say: it
        // is kept read-only only where the jail shows it anyway, never
        // shown because a repository named it.
        let found: Vec<PathBuf> = metadata(dir, &spec.cwd)
            .into_iter()
            .filter(|m| spec.dirs.iter().any(|d| m.starts_with(&d.path)))
            .collect();
        // A repository below the grant's root becomes a mount point of its
        // own, so that it cannot be renamed away and replaced by one whose
        // metadata is writable, where the user would later run git.
        let mut repositories: Vec<&Path> = found
            .iter()
            .filter(|m| m.starts_with(&dir.path))
            .filter_map(|m| m.parent())
            .filter(|repo| *repo != dir.path && writable_at(spec, repo))
            .collect();
        repositories.dedup();
        // Each is opened first and mounted from the open descriptor, and only
        // if it really is the path inside a grant that was found.
        let pinned = repositories.into_iter().map(|p| (p, true));
        for (path, writable) in pinned.chain(found.iter().map(|p| (p.as_path(), false))) {
            let fd = open_inside(path, spec);
            let file = fd.as_ref().and_then(|fd| fd.try_clone().ok());
            let file = file.and_then(|fd| identity(std::fs::File::from(fd).metadata()));
            found_on_disk.push((path.to_path_buf(), file));
            if let Some(fd) = fd {
                mounts.push(Mount::bind_fd(&fd, path, writable));
                fds.push(fd);
            }
        }
    }
    // Stable: at equal depth the system's mounts come first and grants win.
    mounts.sort_by_key(|m| m.depth);
    Mounts { args: mounts.into_iter().flat_map(|m| m.args).collect(), fds, found: found_on_disk }
}

/// A file's device and inode, when it could be looked at.
fn identity(meta: std::io::Result<std::fs::Metadata>) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    meta.ok().map(|m| (m.dev(), m.ino()))
}

/// `path` opened without following a final link, when what was opened is
/// no link and lies, where it really is, at `path` inside a grant.
fn open_inside(path: &Path, spec: &JailSpec) -> Option<OwnedFd> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_NOFOLLOW)
        .open(path)
        .ok()?;
    if file.metadata().ok()?.file_type().is_symlink() {
        return None;
    }
    let real = std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())).ok()?;
    let granted = spec.dirs.iter().any(|d| real.starts_with(&d.path));
    (real == path && granted).then(|| file.into())
}

/// Whether the deepest grant holding `path` is writable.
fn writable_at(spec: &JailSpec, path: &Path) -> bool {
    spec.dirs
        .iter()
        .filter(|d| path.starts_with(&d.path))
        .max_by_key(|d| d.path.components().count())
        .is_some_and(|d| d.writable)
}

/// Repository metadata under a writable grant: `.git` and `.reson` in the
/// grant, in the directories above the working directory within it, and
/// in directories a few levels down; for a `.git` file (a worktree or a
/// submodule), the directory its `gitdir:` line names too.
fn metadata(dir: &JailDir, cwd: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut pending = vec![(dir.path.clone(), 0)];
    // Where git will look from the working directory, however deep it is.
    if let Ok(below) = cwd.strip_prefix(&dir.path) {
        let mut current = dir.path.clone();
        for part in below.components() {
            current.push(part);
            pending.push((current.clone(), METADATA_DEPTH));
        }
    }
    while let Some((current, depth)) = pending.pop() {
        for name in METADATA {
            let path = current.join(name);
            let Ok(meta) = std::fs::symlink_metadata(&path) else { continue };
            if meta.is_file()
                && *name == ".git"
                && let Some(target) = gitdir_target(&path)
            {
                found.push(target);
            }
            if meta.file_type().is_symlink() {
                // Git follows a `.git` link; what it leads to is kept as the
                // metadata it is (a mount on the link itself would follow it
                // anyway).
                if let Ok(target) = path.canonicalize() {
                    found.push(target);
                }
            } else {
                found.push(path);
            }
        }
        if depth >= METADATA_DEPTH {
            continue;
        }
        let Ok(entries) = std::fs::read_dir(&current) else { continue };
        // Runs before every jailed command, over every entry a few levels
        // down: the type comes with the listing, and only a directory's
        // name is looked at.
        for entry in entries.flatten() {
            if !entry.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let name = entry.file_name();
            if !SKIPPED.iter().any(|s| name == *s) {
                pending.push((entry.path(), depth + 1));
            }
        }
    }
    found.sort();
    found.dedup();
    found
}

/// The directory a `.git` file points at, when it exists.
fn gitdir_target(file: &Path) -> Option<PathBuf> {
    let text = std::fs::read_to_string(file).ok()?;
    let target = text.lines().find_map(|l| l.strip_prefix("gitdir:"))?.trim();
    let target = file.parent()?.join(target);
    target.canonicalize().ok().filter(|t| t.is_dir())
}

/// What in `/etc` a user other than root could not read (shadow files,
/// private keys, sudoers, ...) but the host's user can: hidden from the
/// jail, whose processes run as the host's user. Found once per process.
fn etc_secrets() -> &'static [(PathBuf, bool)] {
    static SECRETS: OnceLock<Vec<(PathBuf, bool)>> = OnceLock::new();
    SECRETS.get_or_init(|| {
        let mut found = Vec::new();
        let mut pending = vec![PathBuf::from("/etc")];
        while let Some(dir) = pending.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else { continue };
            for entry in entries.flatten() {
                let Ok(meta) =
                    entry.metadata().or_else(|_| std::fs::symlink_metadata(entry.path()))
                else {
                    continue;
                };
                let lstat = entry.file_type();
                if lstat.is_ok_and(|t| t.is_symlink()) {
                    continue;
                }
                let mode = meta.permissions().mode();
                if meta.is_dir() {
                    if mode & 0o005 != 0o005 {
                        found.push((entry.path(), true));
                    } else {
                        pending.push(entry.path());
                    }
                } else if meta.is_file() && mode & 0o004 == 0 {
                    found.push((entry.path(), false));
                }
            }
        }
        // What the host's own user cannot read stays unreadable in the jail,
        // which runs as that user: only root needs the masks (each costs a
        // mount per command).
        found.retain(|(path, _)| readable(path));
        found.sort();
        found
    })
}

fn readable(path: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(path) = std::ffi::CString::new(path.as_os_str().as_bytes()) else { return true };
    // SAFETY: access(2) reads a live C string.
    unsafe { libc::access(path.as_ptr(), libc::R_OK) == 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(mounts: &Mounts) -> Vec<String> {
        mounts.args.iter().map(|a| a.to_string_lossy().into_owned()).collect()
    }

    #[test]
    fn nested_grants_and_metadata_mount_over_their_parents() {
        let root = tempfile::tempdir().unwrap();
        let ws = root.path().join("ws");
        std::fs::create_dir_all(ws.join(".git/hooks")).unwrap();
        std::fs::create_dir_all(ws.join("docs")).unwrap();
        std::fs::create_dir_all(ws.join("libs/inner/.git")).unwrap();
        std::fs::create_dir_all(ws.join("node_modules/pkg/.git")).unwrap();
        let spec = JailSpec {
            dirs: vec![
                JailDir { path: ws.join("docs"), writable: false, metadata_writable: false },
                JailDir { path: ws.clone(), writable: true, metadata_writable: false },
            ],
            search_path: Vec::new(),
            network: Vec::new(),
            max_processes: 8,
            cwd: ws.clone(),
        };
        let args = strings(&arguments(&spec, Path::new("/var/tmp/x"), Path::new("/usr/bin/true")));
        let at = |flag: &str, path: &Path| {
            let path = path.to_string_lossy();
            args.windows(3).position(|w| w[0] == flag && w[2] == path)
        };
        let ws_rw = at("--bind", &ws).expect("the grant is bound read-write");
        let docs = at("--ro-bind", &ws.join("docs")).expect("the nested read grant");
        let git = at("--ro-bind-fd", &ws.join(".git")).expect(".git read-only");
        let inner = at("--ro-bind-fd", &ws.join("libs/inner/.git")).expect("a nested repository");
        assert!(ws_rw < docs && ws_rw < git && ws_rw < inner, "{args:?}");
        let pinned =
            at("--bind-fd", &ws.join("libs/inner")).expect("a nested repository is pinned");
        assert!(pinned < inner, "{args:?}");
        assert!(at("--bind-fd", &ws.join("docs")).is_none(), "a read-only grant stays read-only");
        assert!(at("--ro-bind-fd", &ws.join("node_modules/pkg/.git")).is_none());
        let tmp = args.windows(3).position(|w| w[0] == "--bind" && w[2] == "/tmp").unwrap();
        assert!(tmp < ws_rw, "the grant mounts over the private /tmp");
    }

    #[test]
    fn a_program_outside_every_mount_is_shown_alone_read_only() {
        let spec = JailSpec {
            dirs: Vec::new(),
            search_path: vec![PathBuf::from("/usr/bin")],
            network: Vec::new(),
            max_processes: 8,
            cwd: PathBuf::from("/tmp"),
        };
        let tmp = Path::new("/var/tmp/x");
        let args = strings(&arguments(&spec, tmp, Path::new("/opt/tool/bin/x")));
        let bound =
            args.windows(3).any(|w| w == ["--ro-bind", "/opt/tool/bin/x", "/opt/tool/bin/x"]);
        assert!(bound, "{args:?}");
        assert!(!args.iter().any(|a| a == "/opt/tool/bin"), "only the file, not its directory");
        let args = strings(&arguments(&spec, tmp, Path::new("/usr/bin/make")));
        assert!(!args.iter().any(|a| a == "/usr/bin/make"), "{args:?}");
    }

    #[test]
    fn a_worktree_keeps_its_gitdir_read_only_and_writable_metadata_is_left_alone() {
        let root = tempfile::tempdir().unwrap();
        let real = root.path().join("main/.git/worktrees/wt");
        std::fs::create_dir_all(&real).unwrap();
        let wt = root.path().join("wt");
        std::fs::create_dir_all(&wt).unwrap();
        std::fs::write(wt.join(".git"), format!("gitdir: {}\n", real.display())).unwrap();
        let wt = wt.canonicalize().unwrap();
        let dir = JailDir { path: wt.clone(), writable: true, metadata_writable: false };
        let found = metadata(&dir, &wt);
        assert!(found.contains(&real.canonicalize().unwrap()), "{found:?}");
        assert!(found.contains(&wt.join(".git")));
        let spec = |dirs: Vec<JailDir>| JailSpec {
            dirs,
            search_path: Vec::new(),
            network: Vec::new(),
            max_processes: 8,
            cwd: wt.clone(),
        };
        let real = real.canonicalize().unwrap().to_string_lossy().into_owned();
        // Alone, the worktree's gitdir (outside every grant) stays unseen.
        let args = strings(&arguments(
            &spec(vec![dir.clone()]),
            Path::new("/var/tmp/x"),
            Path::new("/bin/x"),
        ));
        assert!(!args.contains(&real), "{args:?}");
        // With the main repository granted, it is there, read-only.
        let main = JailDir {
            path: root.path().join("main").canonicalize().unwrap(),
            writable: true,
            metadata_writable: false,
        };
        let args = strings(&arguments(
            &spec(vec![dir.clone(), main]),
            Path::new("/var/tmp/x"),
            Path::new("/bin/x"),
        ));
        let ro = args.windows(3).any(|w| w[0] == "--ro-bind-fd" && w[2] == real);
        assert!(ro, "{args:?}");
        let open = JailDir { metadata_writable: true, ..dir };
        let args =
            strings(&arguments(&spec(vec![open]), Path::new("/var/tmp/x"), Path::new("/bin/x")));
        assert!(!args.iter().any(|a| a.ends_with("/.git")), "{args:?}");
    }
}
