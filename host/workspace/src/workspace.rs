//! The index a run keeps of its write-capable roots, and the checkpoints it
//! takes around tool calls.

use crate::entry::{self, Entry, Manifest, Skip};
use crate::record::{Cause, Checkpoint, Delta, History, now_ms};
use crate::watch::{Seen, Watcher, under};
use crate::{Options, WorkspaceError};
use reson_trace::{MessageTree, ObjectData, TraceStore};
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::{Path, PathBuf};

/// One opened root: the disk as last seen, the state the trace records on
/// the run's branch, and the paths where the two may differ.
#[derive(Debug)]
struct Root {
    path: PathBuf,
    disk: Manifest,
    recorded: Manifest,
    dirty: BTreeSet<String>,
    /// Whether the trace holds a base of it.
    based: bool,
}

/// The checkpoints of one run of a trace: open it with the run, call
/// [`before`](Self::before) before the calls of a message that can write,
/// and [`after`](Self::after) once their results are stored.
#[derive(Debug)]
pub struct Workspace {
    trace_id: String,
    options: Options,
    skip: Skip,
    history: Option<History>,
    roots: Vec<Root>,
    stored: HashSet<String>,
    watcher: Watcher,
}

impl Workspace {
    /// The workspace of a run of trace `trace_id`; nothing is read until
    /// the first [`before`](Self::before).
    pub fn new(trace_id: &str, options: Options) -> Self {
        let skip =
            Skip { dirs: options.skip.iter().filter_map(|d| d.canonicalize().ok()).collect() };
        Self {
            trace_id: trace_id.to_owned(),
            options,
            skip,
            history: None,
            roots: Vec::new(),
            stored: HashSet::new(),
            watcher: Watcher::new(),
        }
    }

    /// Brings the checkpoints up to date before the calls of message
    /// `sequence` (on `tree`), which can write `roots`: a root seen for the
    /// first time by the trace gets a base (every file's bytes kept), and
    /// changes Reson did not make are recorded as `outside`. Returns the
    /// keys of the checkpoints written.
    pub async fn before(
        &mut self,
        store: &dyn TraceStore,
        tree: &MessageTree,
        sequence: u64,
        roots: &[PathBuf],
    ) -> Result<Vec<String>, WorkspaceError> {
        if self.history.is_none() {
            let history = History::load(store, &self.trace_id).await?;
            self.stored = history.stored();
            self.history = Some(history);
        }
        let mut bases = Vec::new();
        for root in roots {
            if !self.roots.iter().any(|r| r.path == *root) {
                bases.extend(self.open(tree, sequence, root)?);
            }
        }
        self.refresh()?;
        let mut keys = Vec::new();
        if !bases.is_empty() {
            let delta = self.take_delta(|r| bases.contains(&r.path), true);
            keys.extend(self.write(store, 0, Cause::Base, delta).await?);
        }
        let delta = self.take_delta(|r| r.based, false);
        keys.extend(self.write(store, sequence, Cause::Outside, delta).await?);
        for root in &mut self.roots {
            root.based = true;
        }
        Ok(keys)
    }

    /// Records what the calls `calls` changed, once their results are
    /// stored (`sequence`: the last of them). Returns the key of the
    /// checkpoint written, `None` when they changed nothing.
    pub async fn after(
        &mut self,
        store: &dyn TraceStore,
        sequence: u64,
        calls: Vec<String>,
    ) -> Result<Option<String>, WorkspaceError> {
        self.refresh()?;
        let delta = self.take_delta(|_| true, false);
        self.write(store, sequence, Cause::Calls { calls }, delta).await
    }

    /// The same workspace learning changes by walks only.
    #[cfg(test)]
    pub(crate) fn walking(mut self) -> Self {
        self.watcher = Watcher::lost();
        self
    }

    /// Opens `root`: watches it, walks it, and takes the trace's state of
    /// it at `sequence` as recorded. Returns the root when it needs a base.
    fn open(
        &mut self,
        tree: &MessageTree,
        sequence: u64,
        root: &Path,
    ) -> Result<Option<PathBuf>, WorkspaceError> {
        let history = self.history.as_ref().expect("loaded before");
        let recorded = history.state_at(tree, sequence).remove(root).unwrap_or_default();
        let mut prior = history.latest_state(tree).remove(root).unwrap_or_default();
        for (path, entry) in &recorded {
            prior.entry(path.clone()).or_insert_with(|| entry.clone());
        }
        let based = history.knows(root);
        let index = self.roots.len();
        let watcher = &mut self.watcher;
        let disk = entry::walk(
            root,
            "",
            &self.skip,
            &prior,
            self.options.max_file_bytes,
            &mut |dir: &str| watcher.watch(index, dir, &root.join(dir)),
        )?;
        let dirty = disk.keys().chain(recorded.keys()).cloned().collect();
        self.roots.push(Root { path: root.to_path_buf(), disk, recorded, dirty, based });
        Ok((!based).then(|| root.to_path_buf()))
    }

    /// Learns what changed on the disk since the last look: from the
    /// watches, or by a walk when they lost track.
    fn refresh(&mut self) -> Result<(), WorkspaceError> {
        let max = self.options.max_file_bytes;
        match self.watcher.look() {
            Seen::Anything => {
                for (index, root) in self.roots.iter_mut().enumerate() {
                    let watcher = &mut self.watcher;
                    let disk = entry::walk(
                        &root.path,
                        "",
                        &self.skip,
                        &root.disk,
                        max,
                        &mut |dir: &str| watcher.watch(index, dir, &root.path.join(dir)),
                    )?;
                    let changed: Vec<String> = disk
                        .iter()
                        .filter(|(p, e)| root.disk.get(*p) != Some(e))
                        .map(|(p, _)| p.clone())
                        .chain(root.disk.keys().filter(|p| !disk.contains_key(*p)).cloned())
                        .collect();
                    root.dirty.extend(changed);
                    root.disk = disk;
                }
            }
            Seen::Changes(changes) => {
                for (index, changes) in changes {
                    let root = &mut self.roots[index];
                    for gone in &changes.gone_dirs {
                        let inside: Vec<String> =
                            root.disk.keys().filter(|p| under(p, gone)).cloned().collect();
                        for path in inside {
                            root.disk.remove(&path);
                            root.dirty.insert(path);
                        }
                    }
                    for dir in &changes.new_dirs {
                        if self.skip.path(&root.path, dir) {
                            continue;
                        }
                        let watcher = &mut self.watcher;
                        let found = entry::walk(
                            &root.path,
                            dir,
                            &self.skip,
                            &Manifest::new(),
                            max,
                            &mut |d: &str| watcher.watch(index, d, &root.path.join(d)),
                        )?;
                        for (path, entry) in found {
                            root.dirty.insert(path.clone());
                            root.disk.insert(path, entry);
                        }
                    }
                    for path in changes.paths {
                        if self.skip.path(&root.path, &path) {
                            continue;
                        }
                        let abs = root.path.join(&path);
                        match entry::stat_entry(&abs, root.disk.get(&path), false, max)? {
                            Some(entry) => root.disk.insert(path.clone(), entry),
                            None => root.disk.remove(&path),
                        };
                        root.dirty.insert(path);
                    }
                }
            }
        }
        Ok(())
    }

    /// The changes of the roots `pick` selects, with the recorded state
    /// brought up to the disk (all paths when `full`, for a base).
    fn take_delta(&mut self, pick: impl Fn(&Root) -> bool, full: bool) -> Delta {
        let mut delta = Delta::new();
        for root in self.roots.iter_mut().filter(|r| pick(r)) {
            let mut paths = BTreeMap::new();
            if full {
                paths.extend(root.disk.iter().map(|(p, e)| (p.clone(), Some(e.clone()))));
                root.recorded.clone_from(&root.disk);
            } else {
                // Only the dirty paths: a copy of the whole index per call
                // would cost more than the rest of the checkpoint.
                for path in &root.dirty {
                    let now = root.disk.get(path);
                    if !entry::same(now, root.recorded.get(path)) {
                        paths.insert(path.clone(), now.cloned());
                    }
                    match now {
                        Some(entry) => root.recorded.insert(path.clone(), entry.clone()),
                        None => root.recorded.remove(path),
                    };
                }
            }
            root.dirty.clear();
            if full || !paths.is_empty() {
                delta.insert(root.path.clone(), paths);
            }
        }
        delta
    }

    /// Writes `delta` as a checkpoint at `sequence` with the bytes of its
    /// files the trace does not keep yet; nothing when it is empty.
    async fn write(
        &mut self,
        store: &dyn TraceStore,
        sequence: u64,
        cause: Cause,
        mut delta: Delta,
    ) -> Result<Option<String>, WorkspaceError> {
        if delta.is_empty() {
            return Ok(None);
        }
        let mut objects = Vec::new();
        for (root, paths) in &mut delta {
            for (path, entry) in paths.iter_mut() {
                let Some(entry) = entry.as_mut().filter(|e| e.has_object()) else { continue };
                if self.stored.contains(&entry.digest) {
                    continue;
                }
                if let Some(object) = read_object(&root.join(path), entry)? {
                    self.stored.insert(object.digest.clone());
                    objects.push(object);
                }
            }
        }
        let checkpoint = Checkpoint { sequence, cause, at_ms: now_ms(), roots: delta, serial: 0 };
        let history = self.history.as_mut().expect("loaded before");
        Ok(Some(history.write(store, &self.trace_id, checkpoint, objects).await?))
    }
}

/// The bytes of the file `entry` describes. A file rewritten since it was
/// hashed is hashed again (the entry follows); one gone since has none
/// (its deletion is the next checkpoint's).
fn read_object(abs: &Path, entry: &mut Entry) -> Result<Option<ObjectData>, WorkspaceError> {
    let data = match std::fs::read(abs) {
        Ok(data) => data,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(WorkspaceError::io(abs, e)),
    };
    let object = ObjectData::new(data);
    if object.digest != entry.digest {
        entry.digest.clone_from(&object.digest);
        entry.size = object.data.len() as u64;
    }
    Ok(Some(object))
}
