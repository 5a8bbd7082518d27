//! Cranelift's per-function compiled code on disk, shared by every
//! component this host compiles.
//!
//! The compiled-code cache ([`cache`](super::cache)) keys a whole component
//! by its digest, so a component rebuilt after a one-line change compiles
//! from nothing. Yet most of a Python or JavaScript tool is its interpreter
//! (CPython, SpiderMonkey), the same functions in every tool built with the
//! same toolchain: this cache keeps each compiled function under a hash of
//! its code and the compiler's settings (Cranelift computes the key), so a
//! rebuilt tool, or another tool on the same interpreter, compiles only
//! what is new.

use std::borrow::Cow;
use std::io::Write;
use std::path::{Path, PathBuf};
use wasmtime::CacheStore;

/// One file per function under `dir`, in 256 subdirectories by the key's
/// first byte (a CPython holds tens of thousands of functions).
#[derive(Debug)]
pub(crate) struct FunctionCache {
    dir: PathBuf,
}

impl FunctionCache {
    pub(crate) fn new(dir: PathBuf) -> Self {
        Self { dir }
    }

    fn path(&self, key: &[u8]) -> PathBuf {
        let name = hex::encode(key);
        self.dir.join(&name[..2]).join(&name[2..])
    }
}

impl CacheStore for FunctionCache {
    fn get(&self, key: &[u8]) -> Option<Cow<'_, [u8]>> {
        // A damaged entry is safe to hand back: Cranelift checks what it
        // reads and compiles the function again when it cannot use it.
        std::fs::read(self.path(key)).ok().map(Cow::Owned)
    }

    fn insert(&self, key: &[u8], value: Vec<u8>) -> bool {
        let path = self.path(key);
        let written = path
            .parent()
            .ok_or(())
            .and_then(|dir| write_atomically(dir, &path, &value).map_err(drop));
        if written.is_err() {
            tracing::debug!(path = %path.display(), "cannot write a compiled function to the cache");
        }
        written.is_ok()
    }
}

/// Two compiles of the same function may race; each writes a whole file
/// and renames it into place, so a reader never sees half of one.
fn write_atomically(dir: &Path, path: &Path, value: &[u8]) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    tmp.write_all(value)?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}
