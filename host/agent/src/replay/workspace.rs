//! The scratch workspace a replay runs on: every read-write granted
//! directory copied to a temporary one, and the plugins' config with
//! those grants pointed there, mounted where the guests saw the real ones
//! (so that the recorded arguments, with their absolute paths, still
//! name the same files).
//!
//! The copies hold the directories as they were at the message the
//! replay starts from, rebuilt from the trace's workspace checkpoints
//! ([`Scratch::fill`]); a directory the trace never checkpointed is copied
//! as it is now, and the report says so.

use super::ReplayError;
use reson_sandbox::config::{Access, PluginsConfig};
use reson_trace::TraceStore;
use reson_workspace::WorkspaceError;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// A config whose writable directories are scratch copies, and the
/// directory holding them (removed when this is dropped).
#[derive(Debug)]
pub struct Scratch {
    /// The plugins' config, remapped.
    pub config: PluginsConfig,
    /// Holds the copies.
    dir: tempfile::TempDir,
    /// Each writable directory and its copy.
    copies: Vec<(PathBuf, PathBuf)>,
}

impl Scratch {
    /// The scratch directory, for whatever else a replay must not write
    /// in place (a copy of the lock file).
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Fills the copies with the directories as they were at message `at`
    /// of trace `trace_id`, from its checkpoints, files with their
    /// recorded modification times (tools that sort by time see what the
    /// run saw). A directory the trace has no checkpoint of is copied as it
    /// is now; those are returned.
    pub async fn fill(
        &self,
        store: &dyn TraceStore,
        trace_id: &str,
        at: u64,
    ) -> Result<Vec<PathBuf>, ReplayError> {
        let mut as_now = Vec::new();
        for (host, copy) in &self.copies {
            let pair = [(host.clone(), copy.clone())];
            match reson_workspace::materialize(store, trace_id, at, &pair).await {
                Ok(()) => {}
                Err(WorkspaceError::UnknownRoot(_)) => {
                    copy_as_now(host, copy).map_err(|e| ReplayError::Workspace {
                        path: host.clone(),
                        reason: e.to_string(),
                    })?;
                    as_now.push(host.clone());
                }
                Err(e) => {
                    return Err(ReplayError::Workspace {
                        path: host.clone(),
                        reason: e.to_string(),
                    });
                }
            }
        }
        Ok(as_now)
    }

    /// The files of the copies that differ from the directories as they
    /// were at message `at` (`root/path` each), skipping the directories
    /// copied as they are now (`as_now`), which have no recorded state.
    pub(crate) async fn differences(
        &self,
        store: &dyn TraceStore,
        trace_id: &str,
        at: u64,
        as_now: &[PathBuf],
    ) -> Result<Vec<String>, ReplayError> {
        let mut differ = Vec::new();
        for (host, copy) in self.copies.iter().filter(|(host, _)| !as_now.contains(host)) {
            let paths =
                reson_workspace::compare(store, trace_id, at, host, copy).await.map_err(|e| {
                    ReplayError::Workspace { path: host.clone(), reason: e.to_string() }
                })?;
            differ.extend(paths.into_iter().map(|p| host.join(p).display().to_string()));
        }
        Ok(differ)
    }
}

/// A scratch workspace for `config`'s read-write granted directories:
/// empty directories until [`Scratch::fill`].
pub fn scratch(config: &PluginsConfig) -> Result<Scratch, ReplayError> {
    let io = |path: &Path, e: std::io::Error| ReplayError::Workspace {
        path: path.to_path_buf(),
        reason: e.to_string(),
    };
    let dir = tempfile::Builder::new()
        .prefix("reson-replay-")
        .tempdir()
        .map_err(|e| io(&std::env::temp_dir(), e))?;
    let mut remapped = config.clone();
    let mut copies: HashMap<PathBuf, PathBuf> = HashMap::new();
    for grant in remapped.plugins.values_mut() {
        for granted in &mut grant.dirs {
            if granted.access != Access::ReadWrite {
                continue;
            }
            let host = config.resolve(&granted.path);
            let host = host.canonicalize().map_err(|e| io(&host, e))?;
            let next = copies.len();
            let copy = match copies.get(&host) {
                Some(copy) => copy.clone(),
                None => {
                    let copy = dir.path().join(next.to_string());
                    std::fs::create_dir(&copy).map_err(|e| io(&copy, e))?;
                    copies.insert(host.clone(), copy.clone());
                    copy
                }
            };
            granted.mount.get_or_insert_with(|| reson_sandbox::policy::guest_path(&host));
            granted.path = copy;
        }
    }
    let mut copies: Vec<(PathBuf, PathBuf)> = copies.into_iter().collect();
    copies.sort();
    Ok(Scratch { config: remapped, dir, copies })
}

/// Copies `from` into `to` as it is now (symbolic links copied as links,
/// never followed), each file with its modification time, which tools show
/// (`glob` lists newest first).
fn copy_as_now(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let (source, target) = (entry.path(), to.join(entry.file_name()));
        let kind = entry.file_type()?;
        if kind.is_symlink() {
            symlink(&std::fs::read_link(&source)?, &target)?;
        } else if kind.is_dir() {
            copy_as_now(&source, &target)?;
        } else if kind.is_file() {
            std::fs::copy(&source, &target)?;
            let modified = entry.metadata()?.modified()?;
            std::fs::File::options().write(true).open(&target)?.set_modified(modified)?;
        }
    }
    Ok(())
}

fn symlink(to: &Path, link: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    return std::os::unix::fs::symlink(to, link);
    // Windows tells file links from directory links; what a replay copies
    // is a workspace's files.
    #[cfg(windows)]
    return std::os::windows::fs::symlink_file(to, link);
}

#[cfg(test)]
mod tests {
    use super::*;
    use reson_sandbox::config::{DirGrant, PluginGrant};

    #[tokio::test]
    async fn writable_dirs_are_copied_and_mounted_where_they_were() {
        let work = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(work.path().join("src")).unwrap();
        std::fs::write(work.path().join("src/main.rs"), "hello").unwrap();
        let readable = tempfile::tempdir().unwrap();
        let grant = |path: &Path, access| DirGrant {
            path: path.to_path_buf(),
            access,
            mount: None,
            metadata: Access::Read,
        };
        let mut config = PluginsConfig::default();
        let fs = PluginGrant {
            dirs: vec![grant(work.path(), Access::ReadWrite), grant(readable.path(), Access::Read)],
            ..PluginGrant::default()
        };
        config.plugins.insert("fs".into(), fs);

        let scratch = scratch(&config).unwrap();
        let store = reson_trace::MemoryTraceStore::new();
        let trace = reson_trace::Trace::new(reson_trace::TraceMode::Agent, "t", "default");
        store.create_trace(&trace).await.unwrap();
        // No checkpoint of the directory: copied as it is now, and said.
        let as_now = scratch.fill(&store, &trace.id, 0).await.unwrap();
        assert_eq!(as_now, [work.path().canonicalize().unwrap()]);
        let dirs = &scratch.config.plugins["fs"].dirs;
        let real = work.path().canonicalize().unwrap();
        assert_ne!(dirs[0].path, real);
        assert_eq!(dirs[0].mount, Some(reson_sandbox::policy::guest_path(&real)));
        let copy = dirs[0].path.join("src/main.rs");
        assert_eq!(std::fs::read_to_string(&copy).unwrap(), "hello");
        let modified = |path: &Path| std::fs::metadata(path).unwrap().modified().unwrap();
        assert_eq!(modified(&copy), modified(&real.join("src/main.rs")));
        assert_eq!(dirs[1].path, readable.path(), "read-only grants stay where they are");
        std::fs::write(dirs[0].path.join("src/main.rs"), "bonjour").unwrap();
        assert_eq!(std::fs::read_to_string(real.join("src/main.rs")).unwrap(), "hello");
    }
}
