//! Which paths changed since the last look, so that a checkpoint stats
//! and hashes only those. Only Linux's inotify tells that in time: it
//! queues a write's event before the write returns, so a look without
//! waiting right after a tool call sees everything the call did. Other
//! OSes' watchers deliver events after the write returned, so there every
//! look answers "anything" and the checkpoint walks its roots comparing
//! stats, as on Linux when events were lost.

use std::collections::HashMap;

#[cfg(target_os = "linux")]
mod inotify;
#[cfg(target_os = "linux")]
pub(crate) use self::inotify::Watcher;

#[cfg(not(target_os = "linux"))]
mod portable;
#[cfg(not(target_os = "linux"))]
pub(crate) use portable::Watcher;

/// What changed in one root, by relative path.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Changes {
    /// Paths to stat again (files, links, or gone).
    pub(crate) paths: Vec<String>,
    /// Directories that appeared: walk them (and watch them).
    pub(crate) new_dirs: Vec<String>,
    /// Directories that went: everything under them is gone or moved.
    pub(crate) gone_dirs: Vec<String>,
}

/// What a look at the queue found.
#[derive(Debug)]
pub(crate) enum Seen {
    /// Changes per root index.
    #[cfg_attr(
        not(target_os = "linux"),
        expect(dead_code, reason = "only inotify tells what changed in time")
    )]
    Changes(HashMap<usize, Changes>),
    /// Events were lost, or the OS gives none in time: anything may have
    /// changed.
    Anything,
}

/// Whether relative path `path` is `dir` or inside it.
pub(crate) fn under(path: &str, dir: &str) -> bool {
    path == dir || (path.starts_with(dir) && path.as_bytes().get(dir.len()) == Some(&b'/'))
}
