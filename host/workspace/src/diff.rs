//! What changed in the recorded roots between two messages.

use crate::WorkspaceError;
use crate::entry::{Entry, Manifest, same};
use crate::record::History;
use crate::restore::tree_at;
use reson_trace::TraceStore;
use serde::Serialize;
use std::collections::BTreeSet;
use std::path::PathBuf;

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
            files.push(FileDiff {
                root: root.clone(),
                path: path.clone(),
                change,
                old_size: x.map(|e| e.size),
                new_size: y.map(|e| e.size),
                patch,
            });
        }
    }
    Ok(files)
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
