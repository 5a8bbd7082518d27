//! Hot reload: watch the plugins directory and reload what changed.

use super::runtime::{Runtime, RuntimeError, plugin_name};
use notify::{RecursiveMode, Watcher as _};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::sync::mpsc;

/// Events closer together than this are one change: writers often create,
/// write and rename in quick succession.
const SETTLE: Duration = Duration::from_millis(100);

/// Keeps a runtime in step with its plugins directory while alive.
pub struct Watcher {
    _watcher: notify::RecommendedWatcher,
}

/// What the watched paths say changed.
#[derive(Default)]
struct Changes {
    plugins: BTreeSet<String>,
    lock_file: bool,
}

/// Where the events that matter come from: plugin files in `dir`, and the
/// lock file, which another process (`reson plugins accept`) may write.
struct Paths {
    dir: PathBuf,
    lock_file: PathBuf,
}

impl Paths {
    fn collect(&self, event: notify::Result<notify::Event>, changes: &mut Changes) {
        let event = match event {
            Ok(event) => event,
            Err(e) => return tracing::warn!("plugin watcher: {e}"),
        };
        for path in &event.paths {
            if *path == self.lock_file {
                changes.lock_file = true;
            } else if path.parent() == Some(&self.dir)
                && let Some(name) = plugin_name(path)
            {
                changes.plugins.insert(name);
            }
        }
    }
}

impl Runtime {
    /// Starts watching the plugins directory. New and changed files are
    /// validated and compiled on a task of its own (compiles on the
    /// blocking pool), never on a call's; removed files unload. When the
    /// lock file changes, plugins held back for asking more load again if
    /// it now allows them. Dropping the [`Watcher`] stops it. Call it
    /// inside a tokio runtime.
    pub fn watch(&self) -> Result<Watcher, RuntimeError> {
        let tokio = tokio::runtime::Handle::try_current().map_err(|_| {
            RuntimeError::Watch("watching needs a tokio runtime to reload on".into())
        })?;
        let options = self.options();
        std::fs::create_dir_all(&options.plugins_dir)?;
        // Events name paths under the directory as it was given to the
        // watcher: canonical paths make them comparable.
        let dir = options.plugins_dir.canonicalize()?;
        let lock_dir = canonical_parent(&options.lock_file)?;
        let lock_name = options.lock_file.file_name().unwrap_or_default();
        let paths = Paths { lock_file: lock_dir.join(lock_name), dir };
        let (tx, mut rx) = mpsc::unbounded_channel::<notify::Result<notify::Event>>();
        let mut watcher = notify::recommended_watcher(move |event| {
            // The receiving task is gone only once the watcher is dropped.
            let _ = tx.send(event);
        })
        .map_err(|e| RuntimeError::Watch(e.to_string()))?;
        for watched in BTreeSet::from([&paths.dir, &lock_dir]) {
            watcher
                .watch(watched, RecursiveMode::NonRecursive)
                .map_err(|e| RuntimeError::Watch(format!("{}: {e}", watched.display())))?;
        }
        let runtime = self.clone();
        // Ends when the watcher (holding the sender) is dropped; a reload
        // under way finishes first.
        tokio.spawn(async move {
            while let Some(first) = rx.recv().await {
                let mut changes = Changes::default();
                paths.collect(first, &mut changes);
                while let Ok(Some(more)) = tokio::time::timeout(SETTLE, rx.recv()).await {
                    paths.collect(more, &mut changes);
                }
                if !changes.plugins.is_empty() {
                    runtime.reload(&changes.plugins.into_iter().collect::<Vec<_>>()).await;
                }
                if changes.lock_file {
                    runtime.retry_held_back().await;
                }
            }
        });
        Ok(Watcher { _watcher: watcher })
    }
}

/// The canonical directory `file` lives in (made if missing: a lock file
/// may not exist yet).
fn canonical_parent(file: &Path) -> std::io::Result<PathBuf> {
    let parent = file.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent)?;
    parent.canonicalize()
}
