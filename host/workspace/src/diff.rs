//! What changed in the recorded roots between two messages.

use crate::WorkspaceError;
use crate::entry::{Entry, Manifest, same};
use crate::record::{Cause, History, State, apply};
use crate::restore::tree_at;
use reson_trace::TraceStore;
use serde::Serialize;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// How a path changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Change {
    /// There at `to`, not at `from`.
    Added,
    /// There at `from`, not at `to`.
    Removed,
    /// There at both, with other content, link or mode.
    Modified,
}

/// One changed path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FileDiff {
    /// The root it is in.
    pub root: PathBuf,
    /// Its path relative to the root.
    pub path: String,
    /// How it changed.
    pub change: Change,
    /// Its size at `from`.
    pub old_size: Option<u64>,
    /// Its size at `to`.
    pub new_size: Option<u64>,
    /// A unified diff, when both sides are text whose bytes the trace keeps.
    pub patch: Option<String>,
}

/// Every path that differs between the states at two messages, by root
/// then path.
pub async fn diff(
    store: &dyn TraceStore,
    trace_id: &str,
    from: u64,
    to: u64,
) -> Result<Vec<FileDiff>, WorkspaceError> {
    let tree = tree_at(store, trace_id, from).await?;
    tree_at(store, trace_id, to).await?;
    let history = History::load(store, trace_id).await?;
    let (old, new) = (history.state_at(&tree, from), history.state_at(&tree, to));
    let empty = Manifest::new();
    let mut files = Vec::new();
    for root in old.keys().chain(new.keys()).collect::<BTreeSet<_>>() {
        let (a, b) = (old.get(root).unwrap_or(&empty), new.get(root).unwrap_or(&empty));
        for path in a.keys().chain(b.keys()).collect::<BTreeSet<_>>() {
            let (x, y) = (a.get(path), b.get(path));
            if same(x, y) {
                continue;
            }
            files.push(file_diff(store, trace_id, root, path, x, y).await?);
        }
    }
    Ok(files)
}

/// One checkpoint and what it changed: each path against the state just
/// before it on its branch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CheckpointChanges {
    /// Its record key.
    pub key: String,
    /// The message after which its state holds.
    pub sequence: u64,
    /// Why it was taken: what the calls of a message wrote, changes made
    /// outside Reson, a restore, or the first look at a root.
    pub cause: Cause,
    /// When it was written, in milliseconds since the epoch.
    pub at_ms: u64,
    /// How many paths it recorded.
    pub paths: usize,
    /// What changed, by root then path; empty for the first look at a
    /// root (a listing of everything, which is no change).
    pub files: Vec<FileDiff>,
}

/// Every checkpoint of a trace, in order, with what it changed.
pub async fn changes(
    store: &dyn TraceStore,
    trace_id: &str,
) -> Result<Vec<CheckpointChanges>, WorkspaceError> {
    let history = History::load(store, trace_id).await?;
    if history.checkpoints.is_empty() {
        return Ok(Vec::new());
    }
    let tree = tree_at(store, trace_id, 0).await?;
    let mut all = Vec::with_capacity(history.checkpoints.len());
    for (i, (key, checkpoint)) in history.checkpoints.iter().enumerate() {
        let mut files = Vec::new();
        if checkpoint.cause != Cause::Base {
            // The state before it: the checkpoints written earlier on its
            // message's path.
            let path: BTreeSet<u64> =
                tree.main_path(checkpoint.sequence).into_iter().chain([0]).collect();
            let mut before = State::new();
            for (_, earlier) in history.checkpoints[..i].iter() {
                if path.contains(&earlier.sequence) {
                    apply(&mut before, &earlier.roots);
                }
            }
            let empty = Manifest::new();
            for (root, paths) in &checkpoint.roots {
                let old = before.get(root).unwrap_or(&empty);
                for (path, entry) in paths {
                    let x = old.get(path);
                    if same(x, entry.as_ref()) {
                        continue;
                    }
                    files.push(file_diff(store, trace_id, root, path, x, entry.as_ref()).await?);
                }
            }
        }
        all.push(CheckpointChanges {
            key: key.clone(),
            sequence: checkpoint.sequence,
            cause: checkpoint.cause.clone(),
            at_ms: checkpoint.at_ms,
            paths: checkpoint.paths(),
            files,
        });
    }
    Ok(all)
}

/// How one path differs between two entries, with a unified diff when
/// both sides are text the trace keeps.
async fn file_diff(
    store: &dyn TraceStore,
    trace_id: &str,
    root: &Path,
    path: &str,
    x: Option<&Entry>,
    y: Option<&Entry>,
) -> Result<FileDiff, WorkspaceError> {
    let change = match (x, y) {
        (None, _) => Change::Added,
        (_, None) => Change::Removed,
        _ => Change::Modified,
    };
    let patch = match (text(store, trace_id, x).await?, text(store, trace_id, y).await?) {
        (Some(old), Some(new)) if old != new => Some(
            similar::TextDiff::from_lines(&old, &new)
                .unified_diff()
                .header(&format!("a/{path}"), &format!("b/{path}"))
                .to_string(),
        ),
        _ => None,
    };
    Ok(FileDiff {
        root: root.to_owned(),
        path: path.to_owned(),
        change,
        old_size: x.map(|e| e.size),
        new_size: y.map(|e| e.size),
        patch,
    })
}

/// The text of a file entry: "" for none, `None` for a link, a file whose
/// bytes are not kept, or bytes that are not UTF-8 text.
async fn text(
    store: &dyn TraceStore,
    trace_id: &str,
    entry: Option<&Entry>,
) -> Result<Option<String>, WorkspaceError> {
    let Some(entry) = entry else { return Ok(Some(String::new())) };
    if !entry.has_object() {
        return Ok(None);
    }
    let Some(bytes) = store.get_object(trace_id, &entry.digest).await? else { return Ok(None) };
    Ok(String::from_utf8(bytes).ok().filter(|t| !t.contains('\0')))
}
