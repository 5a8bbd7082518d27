//! Hot reload: watch the plugins directory and reload what changed.

use super::runtime::{Runtime, RuntimeError, plugin_name};
use notify::{RecursiveMode, Watcher as _};
use std::collections::BTreeSet;
use std::time::Duration;
use tokio::sync::mpsc;

/// Events closer together than this are one change: writers often create,
/// write and rename in quick succession.
const SETTLE: Duration = Duration::from_millis(100);

/// Keeps a runtime in step with its plugins directory while alive.
pub struct Watcher {
    _watcher: notify::RecommendedWatcher,
}

impl Runtime {
    /// Starts watching the plugins directory. New and changed files are
    /// validated and compiled on a task of its own (compiles on the
    /// blocking pool), never on a call's; removed files unload. Dropping
    /// the [`Watcher`] stops it. Call it inside a tokio runtime.
    pub fn watch(&self) -> Result<Watcher, RuntimeError> {
        let tokio = tokio::runtime::Handle::try_current().map_err(|_| {
            RuntimeError::Watch("watching needs a tokio runtime to reload on".into())
        })?;
        let dir = self.options().plugins_dir.clone();
        std::fs::create_dir_all(&dir)?;
        let (tx, mut rx) = mpsc::unbounded_channel::<notify::Result<notify::Event>>();
        let mut watcher = notify::recommended_watcher(move |event| {
            // The receiving task is gone only once the watcher is dropped.
            let _ = tx.send(event);
        })
        .map_err(|e| RuntimeError::Watch(e.to_string()))?;
        watcher
            .watch(&dir, RecursiveMode::NonRecursive)
            .map_err(|e| RuntimeError::Watch(e.to_string()))?;
        let runtime = self.clone();
        // Ends when the watcher (holding the sender) is dropped; a reload
        // under way finishes first.
        tokio.spawn(async move {
            while let Some(first) = rx.recv().await {
                let mut names = BTreeSet::new();
                collect(first, &mut names);
                while let Ok(Some(more)) = tokio::time::timeout(SETTLE, rx.recv()).await {
                    collect(more, &mut names);
                }
                if !names.is_empty() {
                    runtime.reload(&names.into_iter().collect::<Vec<_>>()).await;
                }
            }
        });
        Ok(Watcher { _watcher: watcher })
    }
}

fn collect(event: notify::Result<notify::Event>, names: &mut BTreeSet<String>) {
    match event {
        Ok(event) => names.extend(event.paths.iter().filter_map(|p| plugin_name(p))),
        Err(e) => tracing::warn!("plugin watcher: {e}"),
    }
}
