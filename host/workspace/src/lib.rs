//! # reson-workspace
//!
//! Workspace checkpoints: what tool calls change in the directories a run
//! may write ("roots"), kept with the trace so that a rewind can put the
//! files back as they were at the message it starts from, and so that two
//! messages can be compared file by file.
//!
//! A run keeps a [`Workspace`]: an index of its roots (per path: size,
//! mtime, inode, mode, SHA-256; symlinks as links, never followed; `.git`,
//! `.reson` and the trace store's directory left out). Around the calls of
//! a message that can write, it learns from inotify which paths changed
//! (stat and hash only those; a walk comparing stats when events were
//! lost, and on every other OS than Linux) and records a checkpoint: the
//! changed entries, with the bytes of new contents as objects of the
//! trace. The first checkpoint of a root is its base: every file.
//! [`restore`] puts a state back, refusing to overwrite files changed
//! outside Reson; [`diff`] compares two states; [`materialize`] copies one
//! elsewhere.
//!
//! It depends only on `reson-trace` (checkpoints are records and objects
//! of a [`TraceStore`](reson_trace::TraceStore)) and must never add storage
//! of its own, know about plugins, agents or servers, or follow a link
//! out of a root.

mod diff;
mod entry;
mod record;
mod restore;
mod watch;
mod workspace;

pub use diff::{Change, CheckpointChanges, FileDiff, changes, diff};
pub use entry::{Entry, Manifest};
pub use record::{Cause, Checkpoint, Delta, KIND, checkpoints};
pub use restore::{Restored, compare, materialize, restore};
pub use workspace::Workspace;

use std::path::{Path, PathBuf};

/// Files larger than this are recorded by digest only, by default (64 MiB).
pub const DEFAULT_MAX_FILE_BYTES: u64 = 64 * 1024 * 1024;

/// How checkpoints are taken.
#[derive(Debug, Clone)]
pub struct Options {
    /// Files larger than this are recorded by digest only, and reported as
    /// not restorable.
    pub max_file_bytes: u64,
    /// Directories never indexed (the trace store's, when it lies in a
    /// root).
    pub skip: Vec<PathBuf>,
}

impl Default for Options {
    fn default() -> Self {
        Self { max_file_bytes: DEFAULT_MAX_FILE_BYTES, skip: Vec::new() }
    }
}

/// Why a checkpoint, restore, diff or copy failed.
#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    /// The trace store failed.
    #[error(transparent)]
    Store(#[from] reson_trace::TraceError),
    /// Reading or writing a workspace file failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// A checkpoint record that does not parse.
    #[error("checkpoint {key} is corrupt: {reason}")]
    Corrupt {
        /// Its key.
        key: String,
        /// What is wrong.
        reason: String,
    },
    /// Files changed outside Reson since its last checkpoint, which a
    /// restore would overwrite; nothing was written.
    #[error(
        "restore refused: {} changed outside Reson since trace {trace_id}'s last checkpoint (force to overwrite): {}",
        if paths.len() == 1 { "a file".to_owned() } else { format!("{} files", paths.len()) },
        paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
    )]
    Conflicts {
        /// The trace.
        trace_id: String,
        /// The files.
        paths: Vec<PathBuf>,
    },
    /// A sequence that names no message of the trace.
    #[error("trace {trace_id} has no message {sequence}")]
    NoSuchMessage {
        /// The trace.
        trace_id: String,
        /// The sequence asked for.
        sequence: u64,
    },
    /// A directory the trace has no checkpoint of.
    #[error("the trace has no checkpoint of {}", .0.display())]
    UnknownRoot(PathBuf),
    /// Files whose bytes the trace does not keep; nothing was written.
    #[error(
        "the trace does not keep the bytes of {}",
        paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
    )]
    NotRestorable {
        /// The files.
        paths: Vec<PathBuf>,
    },
}

impl WorkspaceError {
    pub(crate) fn io(path: &Path, source: std::io::Error) -> Self {
        Self::Io { path: path.to_path_buf(), source }
    }
}

#[cfg(test)]
mod tests;
