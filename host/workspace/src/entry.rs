//! What the index knows of one path, and how it learns it from the disk:
//! a stat, and a hash only when the stat says the content may differ.

use crate::WorkspaceError;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::fs;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::time::{Duration, UNIX_EPOCH};

/// One file or symlink of a root, as the index saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// Bytes (a link: of its target).
    pub size: u64,
    /// Last modification, in nanoseconds since the epoch.
    pub mtime_ns: i64,
    /// Inode number (0 on Windows).
    pub inode: u64,
    /// Permission bits (`st_mode & 0o7777`; on Windows 0o444 or 0o644 by
    /// the read-only flag, 0o777 for a link).
    pub mode: u32,
    /// SHA-256 of the content (a link: of its target), lowercase hex.
    pub digest: String,
    /// A symlink's target; links are recorded, never followed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<String>,
    /// Larger than `max_file_bytes`: recorded by digest only, its bytes
    /// not kept, so it cannot be restored.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub too_large: bool,
}

impl Entry {
    /// Whether `other` holds the same thing (content, link, mode),
    /// whatever its stat says.
    pub fn same_content(&self, other: &Entry) -> bool {
        self.digest == other.digest && self.link == other.link && self.mode == other.mode
    }

    fn same_stat(&self, meta: &fs::Metadata) -> bool {
        self.size == meta.len()
            && self.mtime_ns == mtime_ns(meta)
            && self.inode == inode(meta)
            && self.mode == mode(meta)
    }

    /// Whether its bytes are kept as an object of the trace.
    pub(crate) fn has_object(&self) -> bool {
        self.link.is_none() && !self.too_large
    }
}

/// Whether two optional entries hold the same thing (both absent counts).
pub(crate) fn same(a: Option<&Entry>, b: Option<&Entry>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => a.same_content(b),
        (None, None) => true,
        _ => false,
    }
}

/// The files and links of one root, by path relative to it (`/`-separated).
pub type Manifest = BTreeMap<String, Entry>;

/// Nanoseconds since the epoch (negative before it): on Unix the same as
/// `st_mtime * 10^9 + st_mtime_nsec`, which entries were recorded with.
fn mtime_ns(meta: &fs::Metadata) -> i64 {
    let nanos = |d: Duration| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX);
    match meta.modified().map(|t| t.duration_since(UNIX_EPOCH)) {
        Ok(Ok(after)) => nanos(after),
        Ok(Err(before)) => -nanos(before.duration()),
        Err(_) => 0,
    }
}

/// The inode number, which tells a file renamed over another from one
/// written in place when both have the same size and modification time.
#[cfg(unix)]
fn inode(meta: &fs::Metadata) -> u64 {
    std::os::unix::fs::MetadataExt::ino(meta)
}

/// Windows' file index needs an unstable API, and its creation time is
/// carried over to a file renamed over another (tunneling): 0, so there a
/// replaced file is told by its size, modification time and mode alone.
#[cfg(not(unix))]
fn inode(_meta: &fs::Metadata) -> u64 {
    0
}

#[cfg(unix)]
fn mode(meta: &fs::Metadata) -> u32 {
    std::os::unix::fs::MetadataExt::mode(meta) & 0o7777
}

/// Windows keeps a read-only flag, not permission bits: the bits a Unix
/// file with that flag would have. A link's flag is never restored, so a
/// link counts as 0o777 whatever its flag, as on Linux.
#[cfg(not(unix))]
fn mode(meta: &fs::Metadata) -> u32 {
    if meta.file_type().is_symlink() {
        0o777
    } else if meta.permissions().readonly() {
        0o444
    } else {
        0o644
    }
}

/// Directory names never indexed, at any depth: version control and
/// Reson's own state change without a tool call meaning to.
const SKIPPED_NAMES: [&str; 2] = [".git", ".reson"];

/// Which paths the index leaves out.
#[derive(Debug, Clone, Default)]
pub(crate) struct Skip {
    /// Absolute directories (the trace store's) left out wherever they are.
    pub(crate) dirs: Vec<PathBuf>,
}

impl Skip {
    pub(crate) fn name(name: &str) -> bool {
        SKIPPED_NAMES.contains(&name)
    }

    /// Whether `rel` (relative to `root`) is left out: a skipped name on
    /// the way, or inside a skipped directory.
    pub(crate) fn path(&self, root: &Path, rel: &str) -> bool {
        rel.split('/').any(Self::name) || self.dirs.iter().any(|d| root.join(rel).starts_with(d))
    }
}

/// Reads the entry of `abs` from the disk: `None` when nothing indexable is
/// there (missing, a directory, a FIFO or socket, which are never opened).
/// `prior`'s digest is reused when `trust_stat` and the stat matches it.
pub(crate) fn stat_entry(
    abs: &Path,
    prior: Option<&Entry>,
    trust_stat: bool,
    max_file_bytes: u64,
) -> Result<Option<Entry>, WorkspaceError> {
    let meta = match fs::symlink_metadata(abs) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(WorkspaceError::io(abs, e)),
    };
    let kind = meta.file_type();
    if !kind.is_file() && !kind.is_symlink() {
        return Ok(None);
    }
    if trust_stat
        && let Some(prior) = prior
        && prior.same_stat(&meta)
    {
        return Ok(Some(prior.clone()));
    }
    let mut entry = Entry {
        size: meta.len(),
        mtime_ns: mtime_ns(&meta),
        inode: inode(&meta),
        mode: mode(&meta),
        digest: String::new(),
        link: None,
        too_large: false,
    };
    if kind.is_symlink() {
        let target = match fs::read_link(abs) {
            Ok(target) => target,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(WorkspaceError::io(abs, e)),
        };
        let target = target.to_string_lossy().into_owned();
        entry.digest = reson_trace::digest_of(target.as_bytes());
        entry.link = Some(target);
        return Ok(Some(entry));
    }
    entry.too_large = meta.len() > max_file_bytes;
    entry.digest = match hash_file(abs) {
        Ok(digest) => digest,
        // Deleted between the stat and the read: nothing is there now.
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        // A file no one may read is no content to keep: left out (a
        // restore may put a readable one back), not a failed run.
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
            tracing::warn!("{}: unreadable, left out of checkpoints", abs.display());
            return Ok(None);
        }
        Err(e) => return Err(WorkspaceError::io(abs, e)),
    };
    Ok(Some(entry))
}

/// SHA-256 of a file, read in chunks so a large one costs no memory.
fn hash_file(path: &Path) -> io::Result<String> {
    let mut file = fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buffer = vec![0; 64 * 1024];
    loop {
        let n = file.read(&mut buffer)?;
        if n == 0 {
            break;
        }
        hasher.update(&buffer[..n]);
    }
    Ok(hex::encode(hasher.finalize()))
}

/// Walks `root` (skipping what `skip` says), calling `on_dir` with each
/// directory's relative path ("" for the root) before listing it, and
/// returns the manifest, reusing `prior` digests whose stat matches.
/// A missing root is an empty one.
pub(crate) fn walk(
    root: &Path,
    under: &str,
    skip: &Skip,
    prior: &Manifest,
    max_file_bytes: u64,
    on_dir: &mut dyn FnMut(&str),
) -> Result<Manifest, WorkspaceError> {
    let mut manifest = Manifest::new();
    let mut pending = vec![under.to_owned()];
    while let Some(dir) = pending.pop() {
        let abs = if dir.is_empty() { root.to_path_buf() } else { root.join(&dir) };
        on_dir(&dir);
        let listing = match fs::read_dir(&abs) {
            Ok(listing) => listing,
            Err(e)
                if matches!(e.kind(), io::ErrorKind::NotFound | io::ErrorKind::NotADirectory) =>
            {
                continue;
            }
            Err(e) => return Err(WorkspaceError::io(&abs, e)),
        };
        for item in listing {
            let item = item.map_err(|e| WorkspaceError::io(&abs, e))?;
            let Some(name) = item.file_name().to_str().map(str::to_owned) else {
                tracing::warn!(
                    "{}: a name that is not UTF-8 is left out of checkpoints",
                    abs.display()
                );
                continue;
            };
            if Skip::name(&name) {
                continue;
            }
            let rel = if dir.is_empty() { name } else { format!("{dir}/{name}") };
            let kind = item.file_type().map_err(|e| WorkspaceError::io(&item.path(), e))?;
            if kind.is_dir() {
                if !skip.dirs.iter().any(|d| *d == item.path()) {
                    pending.push(rel);
                }
            } else if let Some(entry) =
                stat_entry(&item.path(), prior.get(&rel), true, max_file_bytes)?
            {
                manifest.insert(rel, entry);
            }
        }
    }
    Ok(manifest)
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(unix)]
    use std::os::unix::fs::symlink;
    #[cfg(windows)]
    use std::os::windows::fs::symlink_file as symlink;

    #[test]
    fn walk_indexes_files_and_links_and_skips_metadata() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        fs::create_dir_all(root.join("src/deep")).unwrap();
        fs::create_dir_all(root.join(".git/objects")).unwrap();
        fs::create_dir_all(root.join("store")).unwrap();
        fs::write(root.join("src/main.rs"), "fn main() {}\n").unwrap();
        fs::write(root.join("src/deep/a.txt"), "a").unwrap();
        fs::write(root.join(".git/HEAD"), "ref").unwrap();
        fs::write(root.join("store/meta.json"), "{}").unwrap();
        symlink("src/main.rs", root.join("link")).unwrap();
        let skip = Skip { dirs: vec![root.join("store")] };
        let mut dirs = Vec::new();
        let manifest = walk(root, "", &skip, &Manifest::new(), 1 << 20, &mut |d: &str| {
            dirs.push(d.to_owned())
        })
        .unwrap();
        let paths: Vec<&str> = manifest.keys().map(String::as_str).collect();
        assert_eq!(paths, ["link", "src/deep/a.txt", "src/main.rs"]);
        assert_eq!(manifest["link"].link.as_deref(), Some("src/main.rs"));
        assert_eq!(manifest["src/deep/a.txt"].digest, reson_trace::digest_of(b"a"));
        dirs.sort();
        assert_eq!(dirs, ["", "src", "src/deep"]);
        assert!(skip.path(root, "store/meta.json"));
        assert!(skip.path(root, "x/.reson/y"));
        assert!(!skip.path(root, "src/main.rs"));
    }

    /// Entries were recorded with `st_mtime * 10^9 + st_mtime_nsec`: the
    /// portable reading must give the same number, before the epoch too.
    #[cfg(unix)]
    #[test]
    fn the_modification_time_is_the_unix_stamp() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let file = fs::File::create(&path).unwrap();
        let times = [
            UNIX_EPOCH + Duration::new(1_700_000_000, 123_456_789),
            UNIX_EPOCH - Duration::new(86_400, 1),
            UNIX_EPOCH,
        ];
        for at in times {
            file.set_modified(at).unwrap();
            let meta = fs::symlink_metadata(&path).unwrap();
            assert_eq!(mtime_ns(&meta), meta.mtime() * 1_000_000_000 + meta.mtime_nsec());
        }
    }

    #[test]
    fn a_matching_stat_reuses_the_digest_and_large_files_are_marked() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big.bin");
        fs::write(&path, vec![7u8; 100]).unwrap();
        let entry = stat_entry(&path, None, true, 10).unwrap().unwrap();
        assert!(entry.too_large);
        assert_eq!(entry.digest, reson_trace::digest_of(&[7u8; 100]));
        let mut fake = entry.clone();
        fake.digest = "0".repeat(64);
        assert_eq!(stat_entry(&path, Some(&fake), true, 10).unwrap().unwrap().digest, fake.digest);
        assert_eq!(stat_entry(&path, Some(&fake), false, 10).unwrap().unwrap(), entry);
        assert!(stat_entry(&dir.path().join("gone"), None, true, 10).unwrap().is_none());
    }
}
