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

use super::cache::write_atomically;
use std::borrow::Cow;
use std::path::PathBuf;
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
        // A truncated or garbled entry is harmless here: Cranelift decodes
        // what it reads (a version mark, then postcard) and compiles the
        // function again when that fails.
        std::fs::read(self.path(key)).ok().map(Cow::Owned)
    }

    fn insert(&self, key: &[u8], value: Vec<u8>) -> bool {
        let path = self.path(key);
        let dir = path.parent().expect("an entry lies in its key's subdirectory");
        match write_atomically(dir, &path, &value) {
            Ok(()) => true,
            Err(e) => {
                tracing::debug!(path = %path.display(), "cannot cache a compiled function: {e}");
                false
            }
        }
    }
}
