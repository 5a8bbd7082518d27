//! Hot reload: watch the plugins directory and reload what changed.

use super::runtime::{Runtime, RuntimeError, plugin_name};
use notify::{RecursiveMode, Watcher as _};
use std::collections::BTreeSet;
use std::sync::mpsc;
use std::time::Duration;

/// Events closer together than this are one change: writers often create,
/// write and rename in quick succession.
const SETTLE: Duration = Duration::from_millis(100);

/// Keeps a runtime in step with its plugins directory while alive.
pub struct Watcher {
    _watcher: notify::RecommendedWatcher,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Runtime {
    /// Starts watching the plugins directory. New and changed files are
    /// validated and compiled on the watcher's thread, never on a call's;
    /// removed files unload. Dropping the [`Watcher`] stops it.
    pub fn watch(&self) -> Result<Watcher, RuntimeError> {
        let dir = self.options().plugins_dir.clone();
        std::fs::create_dir_all(&dir)?;
        let (tx, rx) = mpsc::channel::<notify::Result<notify::Event>>();
        let mut watcher =
            notify::recommended_watcher(tx).map_err(|e| RuntimeError::Watch(e.to_string()))?;
        watcher
            .watch(&dir, RecursiveMode::NonRecursive)
            .map_err(|e| RuntimeError::Watch(e.to_string()))?;
        let runtime = self.clone();
        let thread =
            std::thread::Builder::new().name("reson-plugin-watch".into()).spawn(move || {
                // Ends when the watcher (the sender) is dropped.
                while let Ok(first) = rx.recv() {
                    let mut names = BTreeSet::new();
                    collect(first, &mut names);
                    while let Ok(more) = rx.recv_timeout(SETTLE) {
                        collect(more, &mut names);
                    }
                    if !names.is_empty() {
                        runtime.reload(&names.into_iter().collect::<Vec<_>>());
                    }
                }
            })?;
        Ok(Watcher { _watcher: watcher, thread: Some(thread) })
    }
}

fn collect(event: notify::Result<notify::Event>, names: &mut BTreeSet<String>) {
    match event {
        Ok(event) => names.extend(event.paths.iter().filter_map(|p| plugin_name(p))),
        Err(e) => tracing::warn!("plugin watcher: {e}"),
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        // Dropping `_watcher` closes the channel; the thread then ends.
        // Detach instead of joining: it may be mid-reload.
        drop(self.thread.take());
    }
}
