//! Compiled code on disk, keyed by the plugin's digest and the engine's
//! settings, so a restart loads a plugin in well under a millisecond.

use std::io::Write;
use std::path::{Path, PathBuf};
use wasmtime::Engine;
use wasmtime::component::Component;

/// Whether a load hit the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    Cache,
    Compiled,
}

fn entry_path(dir: &Path, digest: &str, fingerprint: &str) -> PathBuf {
    dir.join(format!("{digest}-{fingerprint}.cwasm"))
}

/// Loads the compiled form of the component `digest` names from `dir`,
/// compiling and storing it on a miss (`wasm` gives its bytes, read only
/// then). A corrupt or stale entry is recompiled, never trusted.
/// `fingerprint` identifies `engine`'s settings. Compiling takes from
/// milliseconds to seconds of CPU: call it off the async workers.
/// `compiling` hears the component's size before a compile starts.
pub(crate) fn load_or_compile(
    engine: &Engine,
    fingerprint: &str,
    dir: &Path,
    digest: &str,
    wasm: impl FnOnce() -> Result<std::sync::Arc<[u8]>, String>,
    compiling: impl FnOnce(usize),
) -> Result<(Component, Source), String> {
    let path = entry_path(dir, digest, fingerprint);
    if path.exists() {
        // SAFETY: the cache directory is the host's own; entries are written
        // only by `store` below, from `Component::serialize` of this engine
        // configuration (the fingerprint is part of the file name).
        match unsafe { Component::deserialize_file(engine, &path) } {
            Ok(component) => return Ok((component, Source::Cache)),
            Err(e) => {
                tracing::warn!(path = %path.display(), "recompiling unusable cache entry: {e}")
            }
        }
    }
    let wasm = wasm()?;
    compiling(wasm.len());
    let component = Component::new(engine, &*wasm).map_err(|e| format!("{e:#}"))?;
    if let Err(e) = store(&component, dir, &path) {
        tracing::warn!(path = %path.display(), "cannot write compiled-code cache: {e}");
    }
    Ok((component, Source::Compiled))
}

fn store(component: &Component, dir: &Path, path: &Path) -> anyhow::Result<()> {
    let bytes = component.serialize().map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(write_atomically(dir, path, &bytes)?)
}

/// Writes `path` in `dir` whole or not at all: a reader, or a writer of
/// the same entry racing this one, never sees half of it.
pub(crate) fn write_atomically(dir: &Path, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}
