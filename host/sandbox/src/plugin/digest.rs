//! A plugin file's SHA-256, remembered by the file's identity, so that a
//! load from the compiled-code cache neither reads nor hashes a component
//! it has seen before (an 18 MB Python component took 17 ms to hash at
//! every start).
//!
//! The identity is the device, inode, size, modification time and status
//! change time. Any write to the file moves its ctime, which no user can
//! set back, so a file that changed never matches an old entry; a new file
//! in the same place gets a new inode or ctime. Entries live in the
//! host's cache directory beside the compiled code, one small file per
//! plugin path, written atomically; a missing, unreadable or stale entry
//! only means the file is hashed again.

use sha2::{Digest, Sha256};
use std::fs::Metadata;
use std::io::Write;
use std::path::{Path, PathBuf};

/// SHA-256 of `bytes`, hex.
pub(crate) fn sha256(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// What identifies one version of a file on this machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FileIdentity {
    dev: u64,
    ino: u64,
    size: u64,
    mtime_ns: i128,
    ctime_ns: i128,
}

impl FileIdentity {
    #[cfg(unix)]
    pub(crate) fn of(meta: &Metadata) -> Self {
        use std::os::unix::fs::MetadataExt;
        let ns = |secs: i64, nanos: i64| i128::from(secs) * 1_000_000_000 + i128::from(nanos);
        Self {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            mtime_ns: ns(meta.mtime(), meta.mtime_nsec()),
            ctime_ns: ns(meta.ctime(), meta.ctime_nsec()),
        }
    }

    /// Windows has no inode on stable Rust and no change time: the write
    /// and creation times with the size stand in. A file rewritten within
    /// one clock tick at the same size would keep its old digest, where a
    /// Unix change time would not.
    #[cfg(not(unix))]
    pub(crate) fn of(meta: &Metadata) -> Self {
        let ns = |time: std::io::Result<std::time::SystemTime>| {
            time.ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_nanos() as i128)
        };
        Self {
            dev: 0,
            ino: 0,
            size: meta.len(),
            mtime_ns: ns(meta.modified()),
            ctime_ns: ns(meta.created()),
        }
    }

    fn line(&self, digest: &str) -> String {
        let Self { dev, ino, size, mtime_ns, ctime_ns } = self;
        format!("{dev} {ino} {size} {mtime_ns} {ctime_ns} {digest}\n")
    }
}

/// The entry file for the plugin file at `path`.
fn entry(cache_dir: &Path, path: &Path) -> PathBuf {
    let path = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_owned());
    let key = sha256(path.as_os_str().as_encoded_bytes());
    cache_dir.join("digests").join(&key[..32])
}

/// The digest remembered for `path` at `identity`, if any.
pub(crate) fn remembered(cache_dir: &Path, path: &Path, identity: FileIdentity) -> Option<String> {
    let text = std::fs::read_to_string(entry(cache_dir, path)).ok()?;
    let digest = text.trim_end().rsplit(' ').next()?;
    let valid =
        digest.len() == 64 && digest.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    (valid && identity.line(digest) == text).then(|| digest.to_owned())
}

/// Remembers `digest` for `path` at `identity`. A failure to write is only
/// logged: the next load hashes the file again.
pub(crate) fn remember(cache_dir: &Path, path: &Path, identity: FileIdentity, digest: &str) {
    let entry = entry(cache_dir, path);
    if let Err(e) = write_atomically(&entry, identity.line(digest).as_bytes(), None) {
        tracing::warn!(path = %entry.display(), "cannot remember a plugin's digest: {e}");
    }
}

/// Writes `bytes` to `path` through a file beside it renamed into place,
/// so a reader sees the old content or the new, never a mix; with the
/// permissions of `like`, when given. Makes the directory if need be.
pub(crate) fn write_atomically(
    path: &Path,
    bytes: &[u8],
    like: Option<Metadata>,
) -> std::io::Result<()> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    tmp.write_all(bytes)?;
    if let Some(like) = like {
        tmp.as_file().set_permissions(like.permissions())?;
    }
    tmp.persist(path)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_digest_is_remembered_until_the_file_changes() {
        let cache = tempfile::tempdir().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("p.wasm");
        std::fs::write(&file, b"one").unwrap();
        let identity = FileIdentity::of(&std::fs::metadata(&file).unwrap());
        assert_eq!(remembered(cache.path(), &file, identity), None);
        let digest = super::sha256(b"one");
        remember(cache.path(), &file, identity, &digest);
        assert_eq!(remembered(cache.path(), &file, identity), Some(digest.clone()));

        // Rewritten with the same size: the identity (ctime at least) moves.
        std::thread::sleep(std::time::Duration::from_millis(10));
        std::fs::write(&file, b"two").unwrap();
        let changed = FileIdentity::of(&std::fs::metadata(&file).unwrap());
        assert_ne!(changed, identity);
        assert_eq!(remembered(cache.path(), &file, changed), None);

        // A torn or foreign entry is no digest.
        std::fs::write(entry(cache.path(), &file), "garbage").unwrap();
        assert_eq!(remembered(cache.path(), &file, identity), None);
    }
}
