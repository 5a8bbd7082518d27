//! The watcher on Linux, from inotify: the kernel queues a write's event
//! before the write returns (through bubblewrap's bind mounts too, which
//! share the inode), so reading the queue without blocking after a call
//! sees everything the call did. When the queue overflowed or a watch
//! could not be added, the answer is "anything": the caller falls back to
//! a stat walk.

use super::{Changes, Seen, under};
use inotify::{EventMask, Inotify, WatchDescriptor, WatchMask};
use std::collections::HashMap;
use std::io;
use std::path::Path;

/// The watches of every directory of the opened roots.
pub(crate) struct Watcher {
    /// `None` once a watch failed: every look answers "anything".
    inotify: Option<Inotify>,
    dirs: HashMap<WatchDescriptor, (usize, String)>,
    buffer: Vec<u8>,
}

impl std::fmt::Debug for Watcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watcher")
            .field("working", &self.inotify.is_some())
            .field("dirs", &self.dirs.len())
            .finish()
    }
}

fn mask() -> WatchMask {
    WatchMask::CREATE
        | WatchMask::DELETE
        | WatchMask::MODIFY
        | WatchMask::CLOSE_WRITE
        | WatchMask::MOVED_FROM
        | WatchMask::MOVED_TO
        | WatchMask::ATTRIB
        | WatchMask::DONT_FOLLOW
        | WatchMask::ONLYDIR
        | WatchMask::EXCL_UNLINK
}

impl Watcher {
    /// A watcher; one that always answers "anything" when inotify is not
    /// available.
    pub(crate) fn new() -> Self {
        let inotify = Inotify::init()
            .inspect_err(|e| tracing::warn!("inotify unavailable, checkpoints walk the roots: {e}"))
            .ok();
        Self { inotify, dirs: HashMap::new(), buffer: vec![0; 64 * 1024] }
    }

    /// A watcher that has lost track from the start, as after a failed
    /// watch: every look walks.
    #[cfg(test)]
    pub(crate) fn lost() -> Self {
        Self { inotify: None, dirs: HashMap::new(), buffer: Vec::new() }
    }

    /// Watches directory `rel` of root `root` (at `abs`).
    pub(crate) fn watch(&mut self, root: usize, rel: &str, abs: &Path) {
        let Some(inotify) = &mut self.inotify else { return };
        match inotify.watches().add(abs, mask()) {
            Ok(wd) => {
                self.dirs.insert(wd, (root, rel.to_owned()));
            }
            // Gone already: its parent's event says so.
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::warn!(
                    "watching {}: {e}; checkpoints walk the roots from now on",
                    abs.display()
                );
                self.inotify = None;
                self.dirs.clear();
            }
        }
    }

    /// Reads every queued event without waiting.
    pub(crate) fn look(&mut self) -> Seen {
        let Some(inotify) = &mut self.inotify else { return Seen::Anything };
        let mut changes: HashMap<usize, Changes> = HashMap::new();
        let mut ignored = Vec::new();
        loop {
            let events = match inotify.read_events(&mut self.buffer) {
                Ok(events) => events,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => {
                    tracing::warn!("reading inotify events: {e}; checkpoints walk the roots");
                    self.inotify = None;
                    self.dirs.clear();
                    return Seen::Anything;
                }
            };
            for event in events {
                if event.mask.contains(EventMask::Q_OVERFLOW) {
                    return Seen::Anything;
                }
                if event.mask.contains(EventMask::IGNORED) {
                    ignored.push(event.wd.clone());
                    continue;
                }
                let Some((root, dir)) = self.dirs.get(&event.wd) else { continue };
                let Some(name) = event.name.and_then(|n| n.to_str()) else { continue };
                if crate::entry::Skip::name(name) {
                    continue;
                }
                let rel = if dir.is_empty() { name.to_owned() } else { format!("{dir}/{name}") };
                let seen = changes.entry(*root).or_default();
                if event.mask.contains(EventMask::ISDIR) {
                    if event.mask.intersects(EventMask::CREATE | EventMask::MOVED_TO) {
                        seen.new_dirs.push(rel);
                    } else if event.mask.intersects(EventMask::DELETE | EventMask::MOVED_FROM) {
                        seen.gone_dirs.push(rel);
                    }
                } else {
                    seen.paths.push(rel);
                }
            }
        }
        for wd in ignored {
            self.dirs.remove(&wd);
        }
        // A directory moved away keeps its watch; its events would name
        // paths that are no longer where they were.
        let gone: Vec<(usize, String)> = changes
            .iter()
            .flat_map(|(root, c)| c.gone_dirs.iter().map(move |d| (*root, d.clone())))
            .collect();
        if !gone.is_empty() {
            let stale: Vec<WatchDescriptor> = self
                .dirs
                .iter()
                .filter(|(_, (root, dir))| gone.iter().any(|(r, g)| r == root && under(dir, g)))
                .map(|(wd, _)| wd.clone())
                .collect();
            for wd in stale {
                self.dirs.remove(&wd);
                if let Some(inotify) = &mut self.inotify {
                    let _ = inotify.watches().remove(wd);
                }
            }
        }
        Seen::Changes(changes)
    }
}
