//! Putting recorded states back on the disk: a restore of the roots
//! themselves (refusing to overwrite what changed outside Reson), a copy
//! of a state into another directory, and the comparison of such a copy
//! with a recorded state.

use crate::entry::{self, Entry, Manifest, Skip, same};
use crate::record::{Cause, Checkpoint, Delta, History, State, now_ms};
use crate::{DEFAULT_MAX_FILE_BYTES, Options, WorkspaceError};
use reson_trace::{MessageTree, TraceStore};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

/// What a restore did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Restored {
    /// Files and links written.
    pub written: Vec<PathBuf>,
    /// Files and links deleted.
    pub removed: Vec<PathBuf>,
    /// Files whose bytes the trace does not keep (over `max_file_bytes`
    /// when recorded): left as they are.
    pub not_restorable: Vec<PathBuf>,
    /// The `restore` checkpoint recorded, when anything was written.
    pub checkpoint: Option<String>,
}

/// The message tree of `trace_id`, checking that `at` is one of its
/// messages (0, before any message, always is).
pub(crate) async fn tree_at(
    store: &dyn TraceStore,
    trace_id: &str,
    at: u64,
) -> Result<MessageTree, WorkspaceError> {
    let messages = store.get_messages(trace_id).await?;
    if at != 0 && !messages.iter().any(|m| m.sequence == at) {
        if store.get_trace(trace_id).await?.is_none() {
            return Err(reson_trace::TraceError::NotFound(trace_id.to_owned()).into());
        }
        return Err(WorkspaceError::NoSuchMessage { trace_id: trace_id.to_owned(), sequence: at });
    }
    Ok(MessageTree::from_messages(&messages))
}

/// One change a restore makes.
enum Step<'a> {
    Remove(PathBuf),
    Write(PathBuf, &'a Entry),
}

/// Restores every root trace `trace_id` recorded to its state at message
/// `at`: writes (atomically, modes kept) or deletes only the files that
/// differ. A file changed outside Reson since its last checkpoint that
/// the restore would overwrite is a conflict: the restore refuses with the
/// list, writing nothing, unless `force`. Records a `restore` checkpoint.
pub async fn restore(
    store: &dyn TraceStore,
    trace_id: &str,
    at: u64,
    force: bool,
    options: &Options,
) -> Result<Restored, WorkspaceError> {
    let tree = tree_at(store, trace_id, at).await?;
    let mut history = History::load(store, trace_id).await?;
    let target = history.state_at(&tree, at);
    let latest = history.latest_state(&tree);
    let skip = Skip { dirs: options.skip.iter().filter_map(|d| d.canonicalize().ok()).collect() };
    let empty = Manifest::new();
    let roots: BTreeSet<&PathBuf> = target.keys().chain(latest.keys()).collect();
    let mut disk = State::new();
    for root in &roots {
        let prior = latest.get(*root).unwrap_or(&empty);
        let seen = entry::walk(root, "", &skip, prior, options.max_file_bytes, &mut |_: &str| {})?;
        disk.insert((*root).clone(), seen);
    }
    let mut conflicts = Vec::new();
    let mut steps: BTreeMap<&PathBuf, Vec<(String, Step)>> = BTreeMap::new();
    let mut not_restorable = Vec::new();
    // What stays on the disk where the target cannot be put back: the
    // restore's checkpoint records it, so it is no conflict later.
    let mut delta = Delta::new();
    for root in &roots {
        let (want, seen, last) = (
            target.get(*root).unwrap_or(&empty),
            &disk[*root],
            latest.get(*root).unwrap_or(&empty),
        );
        let paths: BTreeSet<&String> = want.keys().chain(seen.keys()).chain(last.keys()).collect();
        for path in paths {
            let (w, s, l) = (want.get(path), seen.get(path), last.get(path));
            if same(w, s) {
                continue;
            }
            let abs = root.join(path);
            if !same(s, l) {
                conflicts.push(abs.clone());
            }
            let step = match w {
                None => Step::Remove(abs),
                Some(entry) if entry.too_large => {
                    not_restorable.push(abs);
                    delta.entry((*root).clone()).or_default().insert(path.clone(), s.cloned());
                    continue;
                }
                Some(entry) => Step::Write(abs, entry),
            };
            steps.entry(*root).or_default().push((path.clone(), step));
        }
    }
    if !conflicts.is_empty() && !force {
        return Err(WorkspaceError::Conflicts { trace_id: trace_id.to_owned(), paths: conflicts });
    }
    // Every byte is fetched before the first write, so a missing object
    // stops the restore with nothing changed.
    let mut bytes: HashMap<String, Vec<u8>> = HashMap::new();
    for (_, step) in steps.values().flatten() {
        if let Step::Write(abs, entry) = step
            && entry.has_object()
            && !bytes.contains_key(&entry.digest)
        {
            match store.get_object(trace_id, &entry.digest).await? {
                Some(data) => {
                    bytes.insert(entry.digest.clone(), data);
                }
                None => not_restorable.push(abs.clone()),
            }
        }
    }
    let mut restored = Restored { not_restorable, ..Restored::default() };
    for (root, steps) in steps {
        let paths = delta.entry(root.clone()).or_default();
        // Deletions first: a file may stand where a directory must go.
        let (removals, writes): (Vec<_>, Vec<_>) =
            steps.into_iter().partition(|(_, s)| matches!(s, Step::Remove(_)));
        for (path, step) in removals.into_iter().chain(writes) {
            match step {
                Step::Remove(abs) => {
                    remove(root, &abs)?;
                    restored.removed.push(abs);
                    paths.insert(path, None);
                }
                Step::Write(abs, entry) => {
                    let data = match &entry.link {
                        Some(_) => None,
                        None => match bytes.get(&entry.digest) {
                            Some(data) => Some(data.as_slice()),
                            None => {
                                let kept = disk[root].get(&path).cloned();
                                paths.insert(path, kept);
                                continue;
                            }
                        },
                    };
                    place(&abs, entry, data, false)?;
                    let now = entry::stat_entry(&abs, None, false, options.max_file_bytes)?;
                    restored.written.push(abs);
                    paths.insert(path, now);
                }
            }
        }
    }
    delta.retain(|_, paths| !paths.is_empty());
    if !delta.is_empty() {
        let checkpoint = Checkpoint {
            sequence: at,
            cause: Cause::Restore { to: at },
            at_ms: now_ms(),
            roots: delta,
            serial: 0,
        };
        restored.checkpoint = Some(history.write(store, trace_id, checkpoint, Vec::new()).await?);
    }
    Ok(restored)
}

/// Writes the state at message `at` of each recorded root (the first of
/// each pair) into another directory (the second), created as needed:
/// scratch copies of the workspace as it was, files with the modification
/// times they had. A root the trace never
/// recorded, or a file whose bytes it does not keep, is an error, and
/// then nothing is written.
pub async fn materialize(
    store: &dyn TraceStore,
    trace_id: &str,
    at: u64,
    roots: &[(PathBuf, PathBuf)],
) -> Result<(), WorkspaceError> {
    let tree = tree_at(store, trace_id, at).await?;
    let mut state = History::load(store, trace_id).await?.state_at(&tree, at);
    let mut plan = Vec::new();
    let mut missing = Vec::new();
    for (root, into) in roots {
        let manifest =
            state.remove(root).ok_or_else(|| WorkspaceError::UnknownRoot(root.clone()))?;
        for (path, entry) in manifest {
            let data = if entry.link.is_some() {
                None
            } else if entry.too_large {
                missing.push(root.join(&path));
                continue;
            } else {
                match store.get_object(trace_id, &entry.digest).await? {
                    Some(data) => Some(data),
                    None => {
                        missing.push(root.join(&path));
                        continue;
                    }
                }
            };
            plan.push((into.join(&path), entry, data));
        }
    }
    if !missing.is_empty() {
        return Err(WorkspaceError::NotRestorable { paths: missing });
    }
    for (_, into) in roots {
        fs::create_dir_all(into).map_err(|e| WorkspaceError::io(into, e))?;
    }
    for (abs, entry, data) in &plan {
        place(abs, entry, data.as_deref(), true)?;
    }
    Ok(())
}

/// The paths (relative to `root`) where directory `dir` holds something
/// other than root `root` held at message `at` of trace `trace_id`:
/// another content, link or mode, or a file only one of them has
/// (modification times and inodes aside). What a replay checks after a
/// message's calls, in its scratch copy of `root`.
pub async fn compare(
    store: &dyn TraceStore,
    trace_id: &str,
    at: u64,
    root: &Path,
    dir: &Path,
) -> Result<Vec<String>, WorkspaceError> {
    let tree = tree_at(store, trace_id, at).await?;
    let recorded = History::load(store, trace_id)
        .await?
        .state_at(&tree, at)
        .remove(root)
        .ok_or_else(|| WorkspaceError::UnknownRoot(root.to_path_buf()))?;
    let now = entry::walk(
        dir,
        "",
        &Skip::default(),
        &Manifest::new(),
        DEFAULT_MAX_FILE_BYTES,
        &mut |_| {},
    )?;
    let paths: BTreeSet<&String> = recorded.keys().chain(now.keys()).collect();
    Ok(paths
        .into_iter()
        .filter(|path| !same(recorded.get(*path), now.get(*path)))
        .cloned()
        .collect())
}

/// Puts `entry` at `abs` atomically (a temporary file renamed over it),
/// with its mode; `data` is a file's bytes, `None` for a link. With
/// `recorded_time`, a file gets the modification time it was recorded
/// with (a scratch copy, where tools that sort by time must see what the
/// run saw); without, it is written now, so that build tools comparing
/// times see a restored file as changed.
fn place(
    abs: &Path,
    entry: &Entry,
    data: Option<&[u8]>,
    recorded_time: bool,
) -> Result<(), WorkspaceError> {
    let dir = abs.parent().expect("a path under a root has a parent");
    fs::create_dir_all(dir).map_err(|e| WorkspaceError::io(dir, e))?;
    let io = |e| WorkspaceError::io(abs, e);
    match (&entry.link, data) {
        (Some(target), _) => {
            let tmp = tempfile::Builder::new()
                .prefix(".reson-restore")
                .make_in(dir, |p| os::symlink(target, p))
                .map_err(io)?
                .into_temp_path();
            fs::rename(&tmp, abs).map_err(io)?;
            // Renamed: nothing is left at the temporary name to remove.
            let _ = tmp.keep();
        }
        (None, data) => {
            let mut tmp =
                tempfile::Builder::new().prefix(".reson-restore").tempfile_in(dir).map_err(io)?;
            tmp.write_all(data.unwrap_or_default()).map_err(io)?;
            os::set_mode(tmp.as_file(), entry.mode).map_err(io)?;
            if recorded_time {
                let at = std::time::UNIX_EPOCH
                    + std::time::Duration::from_nanos(u64::try_from(entry.mtime_ns).unwrap_or(0));
                tmp.as_file().set_modified(at).map_err(io)?;
            }
            tmp.as_file().sync_all().map_err(io)?;
            os::persist(tmp, abs, entry.mode).map_err(io)?;
        }
    }
    Ok(())
}

/// Deletes `abs`, then the directories under `root` it leaves empty.
fn remove(root: &Path, abs: &Path) -> Result<(), WorkspaceError> {
    match fs::remove_file(abs) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(WorkspaceError::io(abs, e)),
    }
    let mut dir = abs.parent();
    while let Some(d) = dir.filter(|d| *d != root && d.starts_with(root)) {
        if fs::remove_dir(d).is_err() {
            break;
        }
        dir = d.parent();
    }
    Ok(())
}

/// How a restored file gets its permission bits, and a link is made.
#[cfg(unix)]
mod os {
    use std::os::unix::fs::PermissionsExt;
    use std::path::Path;
    use std::{fs, io};
    use tempfile::NamedTempFile;

    pub(super) fn symlink(target: &str, link: &Path) -> io::Result<()> {
        std::os::unix::fs::symlink(target, link)
    }

    /// Gives the file written, before it is synced, permission bits `mode`.
    pub(super) fn set_mode(file: &fs::File, mode: u32) -> io::Result<()> {
        file.set_permissions(fs::Permissions::from_mode(mode))
    }

    /// Moves the file written over `abs`.
    pub(super) fn persist(tmp: NamedTempFile, abs: &Path, _mode: u32) -> io::Result<()> {
        tmp.persist(abs).map(drop).map_err(|e| e.error)
    }
}

/// Windows keeps a read-only flag instead of permission bits. The move
/// into place clears it (tempfile resets a temporary file's attributes
/// before moving it), and a read-only file cannot be replaced: it is
/// cleared on the file replaced, and set once the new one is in place.
#[cfg(windows)]
mod os {
    use std::path::Path;
    use std::{fs, io};
    use tempfile::NamedTempFile;

    /// A link to a directory is made differently from one to a file: as
    /// its target, resolved beside the link, is now (missing: a file's).
    pub(super) fn symlink(target: &str, link: &Path) -> io::Result<()> {
        if link.with_file_name(target).is_dir() {
            std::os::windows::fs::symlink_dir(target, link)
        } else {
            std::os::windows::fs::symlink_file(target, link)
        }
    }

    pub(super) fn set_mode(_file: &fs::File, _mode: u32) -> io::Result<()> {
        Ok(())
    }

    /// Moves the file written over `abs`, read-only when `mode` lets no
    /// one write.
    pub(super) fn persist(tmp: NamedTempFile, abs: &Path, mode: u32) -> io::Result<()> {
        if let Ok(meta) = fs::symlink_metadata(abs)
            && meta.is_file()
            && meta.permissions().readonly()
        {
            set_readonly(abs, meta.permissions(), false)?;
        }
        tmp.persist(abs).map_err(|e| e.error)?;
        if mode & 0o222 == 0 {
            set_readonly(abs, fs::metadata(abs)?.permissions(), true)?;
        }
        Ok(())
    }

    fn set_readonly(abs: &Path, mut permissions: fs::Permissions, on: bool) -> io::Result<()> {
        permissions.set_readonly(on);
        fs::set_permissions(abs, permissions)
    }
}
