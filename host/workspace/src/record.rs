//! Checkpoints as records of the trace, and the state they add up to at a
//! message.
//!
//! A checkpoint is the record `checkpoint/{sequence:06}` (a second one at
//! the same message: `{sequence:06}.{n:04}`): the message after which its
//! state holds, why it was taken, and per root the paths it changed (an
//! entry, or `null` for a deletion). Bases sit at sequence 0, before every
//! message. The state at message N is the checkpoints at N and its
//! ancestors (and 0), applied in order. The checkpoint written last (the
//! highest `serial`) is the disk as Reson last saw it.

use crate::WorkspaceError;
use crate::entry::{Entry, Manifest};
use reson_trace::{MessageTree, ObjectData, TraceStore};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};

/// The record kind of checkpoints.
pub const KIND: &str = "checkpoint";

/// Why a checkpoint was taken.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Cause {
    /// The first look at a root: its full manifest.
    Base,
    /// What the calls of a message changed.
    Calls {
        /// Their call ids.
        calls: Vec<String>,
    },
    /// Changes found before a message's calls that Reson did not make.
    Outside,
    /// A restore to the state at message `to`.
    Restore {
        /// The message restored to.
        to: u64,
    },
}

impl std::fmt::Display for Cause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Base => f.write_str("base"),
            Self::Calls { calls } => write!(f, "calls {}", calls.join(", ")),
            Self::Outside => f.write_str("outside"),
            Self::Restore { to } => write!(f, "restore to {to}"),
        }
    }
}

/// Per root (absolute path), per relative path: the entry, or `None` for
/// a deletion.
pub type Delta = BTreeMap<PathBuf, BTreeMap<String, Option<Entry>>>;

/// One checkpoint, as recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// The message after which its state holds (0: before any).
    pub sequence: u64,
    /// Why it was taken.
    pub cause: Cause,
    /// When it was written, in milliseconds since the epoch.
    pub at_ms: u64,
    /// What it changed.
    pub roots: Delta,
    /// Its place in the order checkpoints were written (from 1), whatever
    /// their messages: the latest tells what Reson last saw on disk. Set
    /// when it is written.
    #[serde(default)]
    pub serial: u64,
}

impl Checkpoint {
    /// How many paths it changed.
    pub fn paths(&self) -> usize {
        self.roots.values().map(BTreeMap::len).sum()
    }
}

/// The state of every recorded root, by absolute root path.
pub type State = BTreeMap<PathBuf, Manifest>;

/// The checkpoints of a trace, in key order, and which was written last.
#[derive(Debug, Clone, Default)]
pub(crate) struct History {
    pub(crate) checkpoints: Vec<(String, Checkpoint)>,
    pub(crate) latest: Option<String>,
    /// How many checkpoints each sequence has, for the next key: counting
    /// them per write would grow with the trace.
    taken: HashMap<u64, u64>,
    /// The highest serial written.
    serial: u64,
}

/// (sequence, n) of a key, for ordering: `000012` is (12, 0),
/// `000012.0003` is (12, 3).
fn order(key: &str) -> (u64, u64) {
    let (seq, n) = key.split_once('.').unwrap_or((key, "0"));
    (seq.parse().unwrap_or(u64::MAX), n.parse().unwrap_or(u64::MAX))
}

impl History {
    pub(crate) async fn load(
        store: &dyn TraceStore,
        trace_id: &str,
    ) -> Result<Self, WorkspaceError> {
        let mut checkpoints = Vec::new();
        for record in store.list_records(trace_id, Some(KIND)).await? {
            let checkpoint: Checkpoint = serde_json::from_value(record.body).map_err(|e| {
                WorkspaceError::Corrupt { key: record.key.clone(), reason: e.to_string() }
            })?;
            checkpoints.push((record.key, checkpoint));
        }
        checkpoints.sort_by_key(|(key, _)| order(key));
        let mut taken = HashMap::new();
        for (key, _) in &checkpoints {
            *taken.entry(order(key).0).or_default() += 1;
        }
        let last = checkpoints.iter().max_by_key(|(_, c)| c.serial);
        let latest = last.map(|(key, _)| key.clone());
        let serial = last.map_or(0, |(_, c)| c.serial);
        Ok(Self { checkpoints, latest, taken, serial })
    }

    /// The state at message `at`: the checkpoints on its path, in order.
    pub(crate) fn state_at(&self, tree: &MessageTree, at: u64) -> State {
        let path: HashSet<u64> = tree.main_path(at).into_iter().chain([0]).collect();
        self.sum(|c| path.contains(&c.sequence))
    }

    /// The disk as Reson last saw it: the state at the checkpoint written
    /// last (none yet: empty).
    pub(crate) fn latest_state(&self, tree: &MessageTree) -> State {
        let Some(key) = &self.latest else { return State::new() };
        let Some((_, latest)) = self.checkpoints.iter().find(|(k, _)| k == key) else {
            return State::new();
        };
        self.state_at(tree, latest.sequence)
    }

    fn sum(&self, on_path: impl Fn(&Checkpoint) -> bool) -> State {
        let mut state = State::new();
        for (_, checkpoint) in self.checkpoints.iter().filter(|(_, c)| on_path(c)) {
            apply(&mut state, &checkpoint.roots);
        }
        state
    }

    /// Whether some checkpoint covers `root`.
    pub(crate) fn knows(&self, root: &Path) -> bool {
        self.checkpoints.iter().any(|(_, c)| c.roots.contains_key(root))
    }

    /// The digests whose bytes the trace keeps.
    pub(crate) fn stored(&self) -> HashSet<String> {
        self.checkpoints
            .iter()
            .flat_map(|(_, c)| c.roots.values().flat_map(BTreeMap::values))
            .flatten()
            .filter(|e| e.has_object())
            .map(|e| e.digest.clone())
            .collect()
    }

    fn next_key(&self, sequence: u64) -> String {
        match self.taken.get(&sequence).copied().unwrap_or(0) {
            0 => format!("{sequence:06}"),
            n => format!("{sequence:06}.{n:04}"),
        }
    }

    /// Records a checkpoint (objects first, then the record, so a crash
    /// leaves no record naming missing bytes) as the latest, and returns
    /// its key.
    pub(crate) async fn write(
        &mut self,
        store: &dyn TraceStore,
        trace_id: &str,
        mut checkpoint: Checkpoint,
        objects: Vec<ObjectData>,
    ) -> Result<String, WorkspaceError> {
        checkpoint.serial = self.serial + 1;
        for object in &objects {
            store.put_object(trace_id, object).await?;
        }
        let key = self.next_key(checkpoint.sequence);
        let body = serde_json::to_value(&checkpoint).expect("a checkpoint serializes");
        store.put_record(trace_id, KIND, &key, &body).await?;
        *self.taken.entry(checkpoint.sequence).or_default() += 1;
        self.serial = checkpoint.serial;
        self.checkpoints.push((key.clone(), checkpoint));
        self.latest = Some(key.clone());
        Ok(key)
    }
}

/// Applies `delta` to `state`.
pub(crate) fn apply(state: &mut State, delta: &Delta) {
    for (root, paths) in delta {
        let manifest = state.entry(root.clone()).or_default();
        for (path, entry) in paths {
            match entry {
                Some(entry) => manifest.insert(path.clone(), entry.clone()),
                None => manifest.remove(path),
            };
        }
    }
}

/// Milliseconds since the epoch.
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The checkpoints of trace `trace_id`, by key in order.
pub async fn checkpoints(
    store: &dyn TraceStore,
    trace_id: &str,
) -> Result<Vec<(String, Checkpoint)>, WorkspaceError> {
    Ok(History::load(store, trace_id).await?.checkpoints)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_order_by_sequence_then_rank() {
        let mut keys = vec!["000010", "000002.0001", "000002", "000000", "1000000"];
        keys.sort_by_key(|k| order(k));
        assert_eq!(keys, ["000000", "000002", "000002.0001", "000010", "1000000"]);
    }
}
