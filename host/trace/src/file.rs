//! The file-system trace store: one directory per trace (layout, crash
//! safety and fsync policy in the module docs of [`crate`]).

use super::artifact::{ObjectData, RecordData};
use super::config::Durability;
use super::event::{Event, EventKind};
use super::flush::{Flusher, Target};
use super::goal::{GoalStats, GoalTree};
use super::image::image_media_type;
use super::message::Message;
use super::message::{place_next, take_inline};
use super::model::{Trace, now_ms};
use super::store::{
    TraceError, TraceFilter, TraceStore, check_digest, check_id, check_record_name,
};
use async_trait::async_trait;
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs::{self, File, Metadata, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

const META: &str = "meta.json";
const GOALS: &str = "goal.json";
/// Later versions of meta.json and goal.json, a line each, the last
/// complete line the current one.
const META_LOG: &str = "meta.jsonl";
const GOALS_LOG: &str = "goal.jsonl";
const EVENTS: &str = "events.jsonl";
/// One message a line, in the order written.
const MESSAGE_LOG: &str = "messages.jsonl";
/// The messages' images; in a trace written before [`MESSAGE_LOG`], also
/// its messages, one a file.
const MESSAGES: &str = "messages";
const OBJECTS: &str = "objects";
/// Records filed before [`RECORD_LOG`], one file each:
/// `records/{kind}/{key}.json`. Still read; a version in the log wins.
const RECORDS: &str = "records";
/// One version of a record a line, append-only: the last one of a kind
/// and key counts.
const RECORD_LOG: &str = "records.jsonl";
/// Traces whose records log [`FileTraceStore::get_record`] keeps an index
/// of; past this many the indexes start over.
const INDEXED_TRACES: usize = 64;

/// How many messages continuing the head may be added before meta.json is
/// rewritten; `get_trace` reads at most this many messages to catch up.
const META_EVERY: u64 = 32;

/// Traces as files under `root`, one directory per trace.
pub struct FileTraceStore {
    root: PathBuf,
    durability: Durability,
    flusher: Flusher,
    /// Where each record lies in its trace's records log, by trace id, so
    /// that a replay asking for each call's record in turn reads each line
    /// once, not the whole log per call.
    records: Mutex<HashMap<String, RecordIndex>>,
}

impl FileTraceStore {
    /// A store under `root`, created if missing. Starts the thread that
    /// does the store's fsyncs; it ends when the store is dropped, once
    /// what was queued is synced.
    pub fn open(root: impl Into<PathBuf>, durability: Durability) -> Result<Self, TraceError> {
        let root = root.into();
        fs::create_dir_all(&root).map_err(io_at(&root))?;
        let flusher = Flusher::start(&root).map_err(io_at(&root))?;
        Ok(Self { root, durability, flusher, records: Mutex::default() })
    }

    /// The directory holding the traces.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn dir(&self, id: &str) -> Result<PathBuf, TraceError> {
        check_id(id)?;
        Ok(self.root.join(id))
    }

    /// Replaces `path` atomically: readers and crashes see the old contents
    /// or the new, never a mix. Every file the store writes, but for
    /// events.jsonl, is written here, through the redaction point.
    async fn replace(&self, path: &Path, bytes: &[u8]) -> Result<(), TraceError> {
        let pending = self.place(path, bytes).await?;
        self.settle(pending).await
    }

    /// The first half of [`replace`](Self::replace): once it returns, the
    /// new contents are under their name; what it returns must still be
    /// [settled](Self::settle). Cancelled while it awaits an fsync
    /// ([`Durability::Immediate`]), it leaves the old file and a temporary
    /// one, as a crash would.
    async fn place(&self, path: &Path, bytes: &[u8]) -> Result<Vec<Target>, TraceError> {
        self.place_bytes(path, &reson_text::redact::redact_bytes(bytes)).await
    }

    /// [`place`](Self::place) without the redaction point: for image
    /// bytes, which a replaced byte sequence would corrupt.
    async fn place_bytes(&self, path: &Path, bytes: &[u8]) -> Result<Vec<Target>, TraceError> {
        let dir = path.parent().unwrap_or(Path::new("."));
        let name = path.file_name().map(|n| n.to_string_lossy()).unwrap_or_default();
        let tmp = dir.join(format!(".{name}.tmp"));
        let mut file = File::create(&tmp).map_err(io_at(&tmp))?;
        file.write_all(bytes).map_err(io_at(&tmp))?;
        drop(file);
        let mut file_and_dir = vec![Target::File(path.to_owned()), Target::Dir(dir.to_owned())];
        // A file replaced under `Immediate` is synced before the rename, or
        // a power loss could leave its name pointing at contents that never
        // reached the disk, the old ones lost. A new name needs no such
        // care: until the sync after the rename returns, the write is not
        // reported stored. That saves a new file (an image, an object, a
        // record) one sync wait.
        if self.durability == Durability::Immediate && fs::symlink_metadata(path).is_ok() {
            self.flusher.sync_now(vec![Target::File(tmp.clone())]).await?;
            file_and_dir.remove(0);
        }
        fs::rename(&tmp, path).map_err(io_at(path))?;
        Ok(file_and_dir)
    }

    /// Makes `targets` durable now, or queues them, by the durability chosen.
    async fn settle(&self, targets: Vec<Target>) -> Result<(), TraceError> {
        match self.durability {
            Durability::Batched => {
                self.flusher.enqueue(targets);
                Ok(())
            }
            Durability::Immediate => self.flusher.sync_now(targets).await,
        }
    }

    /// Appends `message` to the log of `trace` (after its images) and
    /// updates `trace`; returns the message as stored, what must be synced
    /// for it, and whether meta.json must be rewritten after that sync.
    async fn append_message(
        &self,
        trace: &mut Trace,
        mut message: Message,
        parent: Option<u64>,
    ) -> Result<(Message, Vec<Target>, bool), TraceError> {
        let dir = self.dir(&trace.id)?;
        let parent = match parent {
            Some(p) if Some(p) != trace.head_sequence && !has_message(&dir, p)? => {
                return Err(TraceError::NoSuchMessage { trace_id: trace.id.clone(), sequence: p });
            }
            Some(p) => Some(p),
            None => trace.head_sequence,
        };
        place_next(&mut message, trace, parent);
        let seq = message.sequence;
        // Images first: a message on disk always has its images.
        for image in take_inline(&mut message) {
            let path = dir.join(MESSAGES).join(&image.name);
            let mut targets = make_dirs(&dir, &path).map_err(|e| missing(&trace.id, &dir, e))?;
            let placed = self.place_bytes(&path, &image.data).await;
            targets.extend(placed.map_err(|e| missing(&trace.id, &dir, e))?);
            self.settle(targets).await?;
        }
        let path = dir.join(MESSAGE_LOG);
        let line = to_line(&path, &message)?;
        // One write on the log, no file created: on ext4 a create costs
        // more than the rest of the write (it searches for a free inode).
        let created = append_line(&path, &line)
            .map_err(io_at(&path))
            .map_err(|e| missing(&trace.id, &dir, e))?;
        // The line is in the log now, so the sequence is spent even if its
        // sync or the rewrite of meta.json fails, or the call is cancelled
        // there.
        let continues_head = parent == trace.head_sequence;
        trace.last_sequence = seq;
        trace.head_sequence = Some(seq);
        trace.totals += &GoalStats::of(&message);
        trace.updated_at_ms = message.created_at_ms;
        let mut targets = vec![Target::File(path)];
        if created {
            targets.push(Target::Dir(dir));
        }
        // Replacing meta.json costs ~0.2 ms on ext4 (a rename over a file
        // starts its writeback), as much as the rest of a step. `get_trace`
        // rebuilds everything this message changed from the log
        // when it continues the head, so meta.json is only needed for a
        // branch, and now and then to bound what `get_trace` has to read.
        Ok((message, targets, !continues_head || seq.is_multiple_of(META_EVERY)))
    }

    /// Appends an event of `kind` to `trace`'s events.jsonl and updates
    /// `trace`; returns the event and what must be synced for it.
    fn append_event_line(
        &self,
        trace: &mut Trace,
        kind: EventKind,
    ) -> Result<(Event, Vec<Target>), TraceError> {
        let dir = self.dir(&trace.id)?;
        let event = Event { id: trace.last_event_id + 1, at_ms: now_ms(), kind };
        let path = dir.join(EVENTS);
        let line = to_line(&path, &event)?;
        let created = append_line(&path, &line)
            .map_err(io_at(&path))
            .map_err(|e| missing(&trace.id, &dir, e))?;
        // meta.json is not rewritten per event: `get_trace` takes the last
        // id from the file, which keeps an event at one write. The line is
        // in the file now, so its id is spent even if the sync fails or the
        // call is cancelled there.
        trace.last_event_id = event.id;
        let mut targets = vec![Target::File(path)];
        if created {
            targets.push(Target::Dir(dir));
        }
        Ok((event, targets))
    }

    /// Stores `trace` as its metadata's newest version.
    async fn write_meta(&self, dir: &Path, trace: &Trace) -> Result<(), TraceError> {
        self.append_version(dir, META_LOG, trace).await.map_err(|e| missing(&trace.id, dir, e))
    }

    /// Appends `value` to the log `name` in `dir` as its newest version.
    /// Replacing a file instead (a temporary file renamed over it) made
    /// ext4 free, truncate and evict the old inode at every turn's start
    /// and end (a third of `perf`'s samples of a 1,000-session run on
    /// files; appending saved about a tenth of that run's store CPU).
    async fn append_version(
        &self,
        dir: &Path,
        name: &str,
        value: &impl serde::Serialize,
    ) -> Result<(), TraceError> {
        let path = dir.join(name);
        let line = to_line(&path, value)?;
        let created = append_line(&path, &line).map_err(io_at(&path))?;
        let mut targets = vec![Target::File(path)];
        if created {
            targets.push(Target::Dir(dir.to_owned()));
        }
        self.settle(targets).await
    }

    /// The newest version of record `kind`/`key` in the records log at
    /// `log`, through the trace's index, which first takes in the lines
    /// appended since it last looked.
    fn logged_record(
        &self,
        id: &str,
        log: &Path,
        kind: &str,
        key: &str,
    ) -> Result<Option<serde_json::Value>, TraceError> {
        let mut file = match File::open(log) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_at(log)(e)),
        };
        // An index that does not match the log (a log rewritten in place,
        // which its identity cannot tell) is rebuilt once from the whole
        // log before the log counts as corrupt.
        match self.look_up(id, &mut file, log, kind, key, false) {
            Err(_) | Ok(Lookup::Stale) => {
                match self.look_up(id, &mut file, log, kind, key, true)? {
                    Lookup::Found(body) => Ok(Some(body)),
                    Lookup::Missing => Ok(None),
                    Lookup::Stale => {
                        Err(corrupt(log, format!("its line for {kind}/{key} names another record")))
                    }
                }
            }
            Ok(Lookup::Found(body)) => Ok(Some(body)),
            Ok(Lookup::Missing) => Ok(None),
        }
    }

    /// One lookup of `kind`/`key` in the records log `file` (at `log`)
    /// through the trace's index, brought up to date (from scratch with
    /// `rebuild`).
    fn look_up(
        &self,
        id: &str,
        file: &mut File,
        log: &Path,
        kind: &str,
        key: &str,
        rebuild: bool,
    ) -> Result<Lookup, TraceError> {
        let meta = file.metadata().map_err(io_at(log))?;
        let found = {
            let mut indexes = self.records.lock().unwrap_or_else(PoisonError::into_inner);
            if indexes.len() >= INDEXED_TRACES && !indexes.contains_key(id) {
                indexes.clear();
            }
            let index = indexes.entry(id.to_owned()).or_default();
            if rebuild {
                *index = RecordIndex::default();
            }
            index.catch_up(file, &meta, log)?;
            index.at.get(&(kind.to_owned(), key.to_owned())).copied()
        };
        let Some((offset, len)) = found else { return Ok(Lookup::Missing) };
        let mut line = vec![0; len];
        file.seek(SeekFrom::Start(offset))
            .and_then(|_| file.read_exact(&mut line))
            .map_err(io_at(log))?;
        let record: RecordData = serde_json::from_slice(&line)
            .map_err(|e| corrupt(log, format!("at byte {offset}: {e}")))?;
        Ok(if record.kind == kind && record.key == key {
            Lookup::Found(record.body)
        } else {
            Lookup::Stale
        })
    }

    fn read_trace(&self, id: &str) -> Result<Option<Trace>, TraceError> {
        let dir = self.dir(id)?;
        // A directory without meta.json is a create that never finished.
        let Some((path, bytes)) = newest_version(&dir, META, META_LOG)? else {
            return Ok(None);
        };
        let mut trace: Trace = parse(&path, &bytes)?;
        if trace.id != id {
            return Err(corrupt(&path, format!("holds trace {:?}", trace.id)));
        }
        reconcile(&dir, &mut trace)?;
        Ok(Some(trace))
    }
}

/// The current version of a file kept as `json` (written once, when the
/// trace is created or imported) and `log` (every later version, a line
/// each): the log's last complete line, as a line torn by a crash counts as
/// never written; else the file. `None` without the file, even if a log
/// exists: the trace was never created.
fn newest_version(
    dir: &Path,
    json: &str,
    log: &str,
) -> Result<Option<(PathBuf, Vec<u8>)>, TraceError> {
    let path = dir.join(json);
    match fs::symlink_metadata(&path) {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_at(&path)(e)),
    }
    let log = dir.join(log);
    if let Some(line) = last_line(&log)? {
        return Ok(Some((log, line)));
    }
    let bytes = fs::read(&path).map_err(io_at(&path))?;
    Ok(Some((path, bytes)))
}

/// A line of [`RECORD_LOG`], as written (read back as a [`RecordData`]).
#[derive(serde::Serialize)]
struct RecordLine<'a> {
    kind: &'a str,
    key: &'a str,
    body: &'a serde_json::Value,
}

/// What a lookup in a records log found.
enum Lookup {
    Found(serde_json::Value),
    Missing,
    /// The index pointed at a line of another record.
    Stale,
}

/// What [`RecordIndex`] reads of a line to place it.
#[derive(Deserialize)]
struct RecordName {
    kind: String,
    key: String,
}

/// Where each record's newest version starts in a trace's records log, and
/// its length, for the complete lines read so far.
#[derive(Default)]
struct RecordIndex {
    /// The log the index was built from: a trace deleted and made again
    /// has a new one.
    log: Option<FileIdentity>,
    /// Bytes of the log taken in, up to the end of a complete line.
    indexed: u64,
    at: HashMap<(String, String), (u64, usize)>,
}

impl RecordIndex {
    /// Takes in the complete lines appended to `file` (at `path`, described
    /// by `meta`) since the last call; starts over if it is another file or
    /// shorter than what was taken in.
    fn catch_up(
        &mut self,
        file: &mut File,
        meta: &Metadata,
        path: &Path,
    ) -> Result<(), TraceError> {
        let log = FileIdentity::of(meta);
        if self.log != Some(log) || meta.len() < self.indexed {
            *self = Self { log: Some(log), ..Self::default() };
        }
        if meta.len() == self.indexed {
            return Ok(());
        }
        let mut tail = vec![0; usize::try_from(meta.len() - self.indexed).unwrap_or(usize::MAX)];
        file.seek(SeekFrom::Start(self.indexed))
            .and_then(|_| file.read_exact(&mut tail))
            .map_err(io_at(path))?;
        // What follows the last newline is an append still under way, or
        // one a crash tore: taken in once it is whole, or never.
        let Some(end) = tail.iter().rposition(|&c| c == b'\n') else { return Ok(()) };
        let mut offset = self.indexed;
        for line in tail[..end].split(|&c| c == b'\n') {
            if !line.is_empty() {
                let name: RecordName = serde_json::from_slice(line)
                    .map_err(|e| corrupt(path, format!("at byte {offset}: {e}")))?;
                self.at.insert((name.kind, name.key), (offset, line.len()));
            }
            offset += line.len() as u64 + 1;
        }
        self.indexed = offset;
        Ok(())
    }
}

/// Tells one file from another under the same name: a freed inode number
/// can be given to the next file created, so its birth time counts too
/// (where the file system keeps one).
#[derive(Clone, Copy, PartialEq, Eq)]
struct FileIdentity {
    device: u64,
    inode: u64,
    born: Option<std::time::SystemTime>,
}

impl FileIdentity {
    #[cfg(unix)]
    fn of(meta: &Metadata) -> Self {
        use std::os::unix::fs::MetadataExt;
        Self { device: meta.dev(), inode: meta.ino(), born: meta.created().ok() }
    }

    /// Windows' file index needs an unstable API: the creation time alone
    /// tells a log made again, in its trace's new directory, from the one
    /// indexed.
    #[cfg(not(unix))]
    fn of(meta: &Metadata) -> Self {
        Self { device: 0, inode: 0, born: meta.created().ok() }
    }
}

/// The last complete line of the log at `path`; `None` when it is missing
/// or holds none.
fn last_line(path: &Path) -> Result<Option<Vec<u8>>, TraceError> {
    match File::open(path) {
        Ok(mut file) => Ok(last_complete_line(&mut file).map_err(io_at(path))?.1),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_at(path)(e)),
    }
}

/// Brings meta.json up to date with what else reached the disk: messages
/// that continue the head are written without it (see `add_message`), and
/// events always are.
fn reconcile(dir: &Path, trace: &mut Trace) -> Result<(), TraceError> {
    let (newer, seen) = messages_after(dir, trace.last_sequence)?;
    // Only a power loss under `Durability::Batched` can lose the head's
    // message; fall back to the newest one that survived, before advancing
    // along what was written after it (which continued from that one). The
    // head is usually among the lines just read, the last of meta.json's.
    if let Some(head) = trace.head_sequence
        && !seen.contains(&head)
        && !has_message(dir, head)?
    {
        trace.head_sequence = stored_sequences(dir)?.range(..head).next_back().copied();
    }
    for (seq, message) in newer {
        // Even an empty file (see `read_message_file`) keeps its sequence used.
        trace.last_sequence = seq;
        let Some(message) = message else { continue };
        if message.parent_sequence == trace.head_sequence {
            trace.head_sequence = Some(seq);
        }
        trace.totals += &GoalStats::of(&message);
        trace.updated_at_ms = trace.updated_at_ms.max(message.created_at_ms);
    }
    let events = dir.join(EVENTS);
    if let Some(line) = last_line(&events)? {
        #[derive(Deserialize)]
        struct Id {
            id: u64,
        }
        let id: Id = parse(&events, &line)?;
        trace.last_event_id = trace.last_event_id.max(id.id);
    }
    Ok(())
}

// Reads and writes are done inline in these async fns, with std::fs: each
// is a few syscalls on files of a few KiB, cheaper than handing it to a
// blocking thread, and a `spawn_blocking` per call would grow tokio's
// blocking pool past the thread budget of 1,000 concurrent sessions. Only
// fsyncs, which can take milliseconds, leave the worker: they go to the
// store's sync thread and are awaited.
#[async_trait]
impl TraceStore for FileTraceStore {
    async fn create_trace(&self, trace: &Trace) -> Result<(), TraceError> {
        let dir = self.dir(&trace.id)?;
        match fs::create_dir(&dir) {
            Ok(()) => {}
            // Left by a crash in an earlier create: that trace never existed.
            // A power loss under `Batched` may have kept later versions of
            // its metadata or goals and lost meta.json: they are not this
            // trace's.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && !dir.join(META).exists() => {
                for log in [META_LOG, GOALS_LOG] {
                    match fs::remove_file(dir.join(log)) {
                        Err(e) if e.kind() != io::ErrorKind::NotFound => {
                            return Err(io_at(&dir.join(log))(e));
                        }
                        _ => {}
                    }
                }
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                return Err(TraceError::AlreadyExists(trace.id.clone()));
            }
            Err(e) => return Err(io_at(&dir)(e)),
        }
        let path = dir.join(META);
        self.replace(&path, &to_json(&path, trace)?).await?;
        self.settle(vec![Target::Dir(self.root.clone())]).await
    }

    async fn get_trace(&self, id: &str) -> Result<Option<Trace>, TraceError> {
        self.read_trace(id)
    }

    async fn owner(&self, id: &str) -> Result<Option<Option<String>>, TraceError> {
        // The uid is written at the create and never changed: the create's
        // own file has it, with no log or message to read.
        #[derive(Deserialize)]
        struct Owner {
            id: String,
            #[serde(default)]
            uid: Option<String>,
        }
        let path = self.dir(id)?.join(META);
        let bytes = match fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_at(&path)(e)),
        };
        let owner: Owner = parse(&path, &bytes)?;
        if owner.id != id {
            return Err(corrupt(&path, format!("holds trace {:?}", owner.id)));
        }
        Ok(Some(owner.uid))
    }

    async fn update_trace(&self, trace: &Trace) -> Result<(), TraceError> {
        let dir = self.dir(&trace.id)?;
        require(&trace.id, &dir)?;
        self.write_meta(&dir, trace).await
    }

    async fn list_traces(&self, filter: &TraceFilter) -> Result<Vec<Trace>, TraceError> {
        let entries = match fs::read_dir(&self.root) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io_at(&self.root)(e)),
        };
        let mut traces = Vec::new();
        for entry in entries {
            let entry = entry.map_err(io_at(&self.root))?;
            let Some(id) = entry.file_name().to_str().map(str::to_owned) else { continue };
            if id.starts_with('.') || !entry.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            // One damaged trace must not hide all the others.
            match self.read_trace(&id) {
                Ok(Some(trace)) if filter.matches(&trace) => traces.push(trace),
                Ok(_) => {}
                Err(e) => tracing::warn!("trace store: skipping {id}: {e}"),
            }
        }
        traces.sort_by(|a, b| b.created_at_ms.cmp(&a.created_at_ms).then_with(|| b.id.cmp(&a.id)));
        Ok(traces)
    }

    async fn add_message(
        &self,
        trace: &mut Trace,
        message: Message,
        parent: Option<u64>,
    ) -> Result<Message, TraceError> {
        let (message, targets, rewrite_meta) = self.append_message(trace, message, parent).await?;
        self.settle(targets).await?;
        if rewrite_meta {
            self.write_meta(&self.dir(&trace.id)?, trace).await?;
        }
        Ok(message)
    }

    /// The message and its event with one sync for both: under
    /// [`Durability::Immediate`] a step of the agent loop then waits for
    /// one fsync per message, not two.
    async fn add_message_with_event(
        &self,
        trace: &mut Trace,
        message: Message,
        parent: Option<u64>,
    ) -> Result<(Message, Event), TraceError> {
        let (message, mut targets, rewrite_meta) =
            self.append_message(trace, message, parent).await?;
        let kind = EventKind::MessageAdded { message: message.clone() };
        let event = match self.append_event_line(trace, kind) {
            Ok((event, more)) => {
                targets.extend(more);
                event
            }
            Err(e) => {
                // The message is stored all the same: it must still be synced.
                self.settle(targets).await?;
                return Err(e);
            }
        };
        self.settle(targets).await?;
        if rewrite_meta {
            self.write_meta(&self.dir(&trace.id)?, trace).await?;
        }
        Ok((message, event))
    }

    async fn set_head(&self, trace: &mut Trace, sequence: u64) -> Result<(), TraceError> {
        let dir = self.dir(&trace.id)?;
        require(&trace.id, &dir)?;
        if !has_message(&dir, sequence)? {
            return Err(TraceError::NoSuchMessage { trace_id: trace.id.clone(), sequence });
        }
        trace.head_sequence = Some(sequence);
        trace.updated_at_ms = now_ms();
        self.write_meta(&dir, trace).await
    }

    async fn get_messages(&self, id: &str) -> Result<Vec<Message>, TraceError> {
        let dir = self.dir(id)?;
        require(id, &dir)?;
        Ok(all_messages(&dir)?.into_values().collect())
    }

    async fn get_message(&self, id: &str, sequence: u64) -> Result<Option<Message>, TraceError> {
        let dir = self.dir(id)?;
        let message = read_message(&dir, sequence)?;
        if message.is_none() {
            require(id, &dir)?;
        }
        Ok(message)
    }

    async fn get_main_path_messages(
        &self,
        id: &str,
        head: u64,
    ) -> Result<Vec<Message>, TraceError> {
        let dir = self.dir(id)?;
        require(id, &dir)?;
        let log = dir.join(MESSAGE_LOG);
        let mut all = all_messages(&dir)?;
        let mut chain: Vec<Message> = Vec::new();
        let mut at = Some(head);
        while let Some(seq) = at {
            let Some(message) = all.remove(&seq) else {
                return Err(match chain.last() {
                    Some(child) => corrupt(
                        &log,
                        format!(
                            "message {}: its parent, message {seq}, is missing",
                            child.sequence
                        ),
                    ),
                    None => TraceError::NoSuchMessage { trace_id: id.to_owned(), sequence: head },
                });
            };
            if message.parent_sequence.is_some_and(|p| p >= seq) {
                return Err(corrupt(
                    &log,
                    format!("message {seq}: its parent is not older than itself"),
                ));
            }
            at = message.parent_sequence;
            chain.push(message);
        }
        chain.reverse();
        Ok(chain)
    }

    async fn get_messages_by_goal(
        &self,
        id: &str,
        goal_id: &str,
    ) -> Result<Vec<Message>, TraceError> {
        let mut messages = self.get_messages(id).await?;
        messages.retain(|m| m.goal_id.as_deref() == Some(goal_id));
        Ok(messages)
    }

    async fn get_image(&self, id: &str, name: &str) -> Result<Option<Vec<u8>>, TraceError> {
        let dir = self.dir(id)?;
        if image_media_type(name).is_none() {
            return Ok(None);
        }
        let path = dir.join(MESSAGES).join(name);
        match fs::read(&path) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                require(id, &dir)?;
                Ok(None)
            }
            Err(e) => Err(io_at(&path)(e)),
        }
    }

    async fn put_object(&self, id: &str, object: &ObjectData) -> Result<(), TraceError> {
        check_digest(id, &object.digest)?;
        let dir = self.dir(id)?;
        require(id, &dir)?;
        let path = object_path(&dir, &object.digest);
        if path.exists() {
            return Ok(());
        }
        let mut targets = make_dirs(&dir, &path)?;
        targets.extend(self.place_bytes(&path, &object.data).await?);
        self.settle(targets).await
    }

    async fn get_object(&self, id: &str, digest: &str) -> Result<Option<Vec<u8>>, TraceError> {
        let dir = self.dir(id)?;
        if check_digest(id, digest).is_err() {
            return Ok(None);
        }
        let path = object_path(&dir, digest);
        match fs::read(&path) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                require(id, &dir)?;
                Ok(None)
            }
            Err(e) => Err(io_at(&path)(e)),
        }
    }

    async fn list_objects(&self, id: &str) -> Result<Vec<String>, TraceError> {
        let dir = self.dir(id)?;
        require(id, &dir)?;
        let mut digests = Vec::new();
        for (prefix, fan) in subdirs(&dir.join(OBJECTS))? {
            for (rest, _) in entries(&fan)? {
                let digest = format!("{prefix}{rest}");
                // Temporary files of a write a crash cut short are no objects.
                if check_digest(id, &digest).is_ok() {
                    digests.push(digest);
                }
            }
        }
        digests.sort();
        Ok(digests)
    }

    async fn put_record(
        &self,
        id: &str,
        kind: &str,
        key: &str,
        body: &serde_json::Value,
    ) -> Result<(), TraceError> {
        check_record_name(id, kind)?;
        check_record_name(id, key)?;
        let dir = self.dir(id)?;
        require(id, &dir)?;
        // A line appended, no file created: a tool call's effects are
        // recorded at every call, and a file each cost an inode (and a
        // rename), the more so on ext4 right after many files were deleted.
        let path = dir.join(RECORD_LOG);
        let line = to_line(&path, &RecordLine { kind, key, body })?;
        let created =
            append_line(&path, &line).map_err(io_at(&path)).map_err(|e| missing(id, &dir, e))?;
        let mut targets = vec![Target::File(path)];
        if created {
            targets.push(Target::Dir(dir));
        }
        self.settle(targets).await
    }

    async fn get_record(
        &self,
        id: &str,
        kind: &str,
        key: &str,
    ) -> Result<Option<serde_json::Value>, TraceError> {
        let dir = self.dir(id)?;
        if check_record_name(id, kind).is_err() || check_record_name(id, key).is_err() {
            return Ok(None);
        }
        if let Some(body) = self.logged_record(id, &dir.join(RECORD_LOG), kind, key)? {
            return Ok(Some(body));
        }
        let path = dir.join(RECORDS).join(kind).join(format!("{key}.json"));
        match fs::read(&path) {
            Ok(bytes) => parse(&path, &bytes).map(Some),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                require(id, &dir)?;
                Ok(None)
            }
            Err(e) => Err(io_at(&path)(e)),
        }
    }

    async fn list_records(
        &self,
        id: &str,
        kind: Option<&str>,
    ) -> Result<Vec<RecordData>, TraceError> {
        let dir = self.dir(id)?;
        require(id, &dir)?;
        if kind.is_some_and(|kind| check_record_name(id, kind).is_err()) {
            return Ok(Vec::new());
        }
        let kinds = match kind {
            Some(kind) => {
                let path = dir.join(RECORDS).join(kind);
                if path.is_dir() { vec![(kind.to_owned(), path)] } else { Vec::new() }
            }
            None => subdirs(&dir.join(RECORDS))?,
        };
        let mut records = BTreeMap::new();
        for (kind, path) in kinds {
            for (name, file) in entries(&path)? {
                let Some(key) = name.strip_suffix(".json") else { continue };
                if check_record_name(id, key).is_err() {
                    continue;
                }
                let body = parse(&file, &fs::read(&file).map_err(io_at(&file))?)?;
                records.insert((kind.clone(), key.to_owned()), body);
            }
        }
        let log = dir.join(RECORD_LOG);
        for (n, line) in log_lines(&read_log(&log)?) {
            let record: RecordData = parse_line(&log, n, line)?;
            if kind.is_none_or(|kind| kind == record.kind) {
                records.insert((record.kind, record.key), record.body);
            }
        }
        Ok(records.into_iter().map(|((kind, key), body)| RecordData { kind, key, body }).collect())
    }

    async fn append_event(&self, trace: &mut Trace, kind: EventKind) -> Result<Event, TraceError> {
        let (event, targets) = self.append_event_line(trace, kind)?;
        self.settle(targets).await?;
        Ok(event)
    }

    async fn events_after(&self, id: &str, after_event_id: u64) -> Result<Vec<Event>, TraceError> {
        let dir = self.dir(id)?;
        let path = dir.join(EVENTS);
        let bytes = match fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                require(id, &dir)?;
                return Ok(Vec::new());
            }
            Err(e) => return Err(io_at(&path)(e)),
        };
        #[derive(Deserialize)]
        struct Id {
            id: u64,
        }
        let mut events = Vec::new();
        for (n, line) in log_lines(&bytes) {
            if parse_line::<Id>(&path, n, line)?.id > after_event_id {
                events.push(parse_line(&path, n, line)?);
            }
        }
        Ok(events)
    }

    async fn get_goals(&self, id: &str) -> Result<GoalTree, TraceError> {
        let dir = self.dir(id)?;
        // goal.json is written only by an import; the log may exist without it.
        let log = dir.join(GOALS_LOG);
        if let Some(line) = last_line(&log)? {
            return parse(&log, &line);
        }
        let path = dir.join(GOALS);
        match fs::read(&path) {
            Ok(bytes) => parse(&path, &bytes),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                require(id, &dir)?;
                Ok(GoalTree::new())
            }
            Err(e) => Err(io_at(&path)(e)),
        }
    }

    async fn save_goals(&self, id: &str, tree: &GoalTree) -> Result<(), TraceError> {
        let dir = self.dir(id)?;
        require(id, &dir)?;
        self.append_version(&dir, GOALS_LOG, tree).await.map_err(|e| missing(id, &dir, e))
    }

    async fn import_trace(&self, snapshot: &super::store::TraceSnapshot) -> Result<(), TraceError> {
        super::migrate::check_snapshot(snapshot)?;
        let id = &snapshot.trace.id;
        let dir = self.dir(id)?;
        if dir.join(META).exists() {
            return Err(TraceError::AlreadyExists(id.clone()));
        }
        // Built whole in a hidden directory (list_traces skips dot names,
        // and no trace id starts with a dot), synced, then renamed into
        // place: a crash leaves either no trace or all of it.
        let staging = tempfile::Builder::new()
            .prefix(".import-")
            .tempdir_in(&self.root)
            .map_err(io_at(&self.root))?;
        let tmp = staging.path();
        let messages = tmp.join(MESSAGES);
        if !snapshot.images.is_empty() {
            fs::create_dir(&messages).map_err(io_at(&messages))?;
        }
        let mut files = vec![(tmp.join(META), to_json(&tmp.join(META), &snapshot.trace)?)];
        if !snapshot.goals.is_empty() {
            files.push((tmp.join(GOALS), to_json(&tmp.join(GOALS), &snapshot.goals)?));
        }
        if !snapshot.messages.is_empty() {
            let path = tmp.join(MESSAGE_LOG);
            let mut lines = Vec::new();
            // In sequence order, as `check_snapshot` made sure.
            for message in &snapshot.messages {
                lines.extend(to_line(&path, message)?);
            }
            files.push((path, lines));
        }
        if !snapshot.events.is_empty() {
            let path = tmp.join(EVENTS);
            let mut lines = Vec::new();
            for event in &snapshot.events {
                serde_json::to_writer(&mut lines, event)
                    .map_err(|e| corrupt(&path, format!("cannot serialise: {e}")))?;
                lines.push(b'\n');
            }
            files.push((path, lines));
        }
        if !snapshot.records.is_empty() {
            let path = tmp.join(RECORD_LOG);
            let mut lines = Vec::new();
            for record in &snapshot.records {
                check_record_name(id, &record.kind)?;
                check_record_name(id, &record.key)?;
                let line = RecordLine { kind: &record.kind, key: &record.key, body: &record.body };
                serde_json::to_writer(&mut lines, &line)
                    .map_err(|e| corrupt(&path, format!("cannot serialise: {e}")))?;
                lines.push(b'\n');
            }
            files.push((path, lines));
        }
        let mut targets = Vec::with_capacity(files.len() + snapshot.images.len() + 2);
        for image in &snapshot.images {
            let path = messages.join(&image.name);
            fs::write(&path, &image.data).map_err(io_at(&path))?;
            targets.push(Target::File(path));
        }
        for object in &snapshot.objects {
            let path = object_path(tmp, &object.digest);
            targets.extend(make_dirs(tmp, &path)?);
            fs::write(&path, &object.data).map_err(io_at(&path))?;
            targets.push(Target::File(path));
        }
        for (path, bytes) in files {
            fs::write(&path, reson_text::redact::redact_bytes(&bytes)).map_err(io_at(&path))?;
            targets.push(Target::File(path));
        }
        if !snapshot.images.is_empty() {
            targets.push(Target::Dir(messages));
        }
        targets.push(Target::Dir(tmp.to_owned()));
        self.flusher.sync_now(targets).await?;
        if dir.exists() {
            // A create a crash cut short (no meta.json): that trace never existed.
            fs::remove_dir_all(&dir).map_err(io_at(&dir))?;
        }
        if let Err(e) = fs::rename(tmp, &dir) {
            return Err(if dir.join(META).exists() {
                TraceError::AlreadyExists(id.clone())
            } else {
                io_at(&dir)(e)
            });
        }
        // Renamed into place: it is the trace now, not to be cleaned up.
        let _ = staging.keep();
        self.flusher.sync_now(vec![Target::Dir(self.root.clone())]).await
    }

    async fn sync(&self) -> Result<(), TraceError> {
        self.flusher.wait().await
    }
}

/// Turns "file not found" into [`TraceError::NotFound`] when it is the
/// trace that is missing.
fn missing(id: &str, dir: &Path, e: TraceError) -> TraceError {
    match &e {
        TraceError::Io { source, .. }
            if source.kind() == io::ErrorKind::NotFound && !dir.join(META).exists() =>
        {
            TraceError::NotFound(id.to_owned())
        }
        _ => e,
    }
}

/// Fails with [`TraceError::NotFound`] unless trace `id` exists.
fn require(id: &str, dir: &Path) -> Result<(), TraceError> {
    if dir.join(META).exists() { Ok(()) } else { Err(TraceError::NotFound(id.to_owned())) }
}

fn object_path(dir: &Path, digest: &str) -> PathBuf {
    dir.join(OBJECTS).join(&digest[..2]).join(&digest[2..])
}

/// Creates the directories between the trace's `dir` and `path`, and
/// returns what must be synced for them to last: each new directory's
/// parent.
fn make_dirs(dir: &Path, path: &Path) -> Result<Vec<Target>, TraceError> {
    let mut targets = Vec::new();
    let mut missing = Vec::new();
    let mut at = path.parent();
    while let Some(d) = at {
        if d == dir || d.is_dir() {
            break;
        }
        missing.push(d);
        at = d.parent();
    }
    for d in missing.into_iter().rev() {
        match fs::create_dir(d) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(io_at(d)(e)),
        }
        targets.push(Target::Dir(d.parent().unwrap_or(dir).to_owned()));
    }
    Ok(targets)
}

/// The directories in `dir` by name (none when it does not exist).
fn subdirs(dir: &Path) -> Result<Vec<(String, PathBuf)>, TraceError> {
    Ok(entries(dir)?.into_iter().filter(|(_, path)| path.is_dir()).collect())
}

/// The entries of `dir` by name, without hidden ones (none when it does
/// not exist).
fn entries(dir: &Path) -> Result<Vec<(String, PathBuf)>, TraceError> {
    let read = match fs::read_dir(dir) {
        Ok(read) => read,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_at(dir)(e)),
    };
    let mut found = Vec::new();
    for entry in read {
        let entry = entry.map_err(io_at(dir))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.starts_with('.') {
            found.push((name, entry.path()));
        }
    }
    found.sort();
    Ok(found)
}

/// A message's file in a trace written before [`MESSAGE_LOG`].
fn message_file(dir: &Path, seq: u64) -> PathBuf {
    dir.join(MESSAGES).join(format!("{seq:06}.json"))
}

/// Whether message `seq` is stored (an empty file does not count).
fn has_message(dir: &Path, seq: u64) -> Result<bool, TraceError> {
    Ok(seq > 0 && read_message(dir, seq)?.is_some())
}

/// Message `seq`, or `None` when it is missing.
fn read_message(dir: &Path, seq: u64) -> Result<Option<Message>, TraceError> {
    if let Some(message) = read_message_file(dir, seq)? {
        return Ok(message);
    }
    let path = dir.join(MESSAGE_LOG);
    let log = read_log(&path)?;
    let mut found = None;
    for (n, line) in log_lines(&log) {
        let at: Sequence = parse_line(&path, n, line)?;
        if at.sequence == seq {
            found = Some(parse_line(&path, n, line)?);
        }
    }
    Ok(found)
}

/// What a message's file in the old layout says of message `seq`: `None`
/// when there is no file, `Some(None)` when it is empty. Files appeared
/// under their final name only once complete, so the only empty ones are
/// those a power loss caught before the background sync: counted as never
/// written, their sequence used.
fn read_message_file(dir: &Path, seq: u64) -> Result<Option<Option<Message>>, TraceError> {
    let path = message_file(dir, seq);
    let bytes = match fs::read(&path) {
        Ok(bytes) if bytes.is_empty() => return Ok(Some(None)),
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_at(&path)(e)),
    };
    let message: Message = parse(&path, &bytes)?;
    if message.sequence != seq {
        return Err(corrupt(&path, format!("holds message {}", message.sequence)));
    }
    Ok(Some(Some(message)))
}

/// The sequences of the message files of the old layout, in order.
fn message_files(dir: &Path) -> Result<Vec<u64>, TraceError> {
    let mut sequences = Vec::new();
    for (name, _) in entries(&dir.join(MESSAGES))? {
        // Only `{sequence}.json`: temporary files start with a dot.
        if let Some(digits) = name.strip_suffix(".json")
            && !digits.is_empty()
            && digits.bytes().all(|c| c.is_ascii_digit())
            && let Ok(seq) = digits.parse::<u64>()
        {
            sequences.push(seq);
        }
    }
    sequences.sort_unstable();
    Ok(sequences)
}

/// Every message of the trace in `dir`, by sequence: the log's, and the
/// files of the old layout. A sequence both hold (a writer that went on
/// from a stale copy of the trace) is the log's, written later.
fn all_messages(dir: &Path) -> Result<BTreeMap<u64, Message>, TraceError> {
    let mut messages = BTreeMap::new();
    for seq in message_files(dir)? {
        if let Some(Some(message)) = read_message_file(dir, seq)? {
            messages.insert(seq, message);
        }
    }
    let path = dir.join(MESSAGE_LOG);
    let log = read_log(&path)?;
    for (n, line) in log_lines(&log) {
        let message: Message = parse_line(&path, n, line)?;
        messages.insert(message.sequence, message);
    }
    Ok(messages)
}

/// The sequences of the messages stored (no empty file's).
fn stored_sequences(dir: &Path) -> Result<BTreeSet<u64>, TraceError> {
    Ok(all_messages(dir)?.into_keys().collect())
}

/// The messages after sequence `after`, by sequence (`None` for an empty
/// file of the old layout), and the sequences of every log line read. The
/// log is read backwards from its end, in growing windows, only as far as
/// a line at or before `after`: `get_trace` reads at most about
/// [`META_EVERY`] messages.
fn messages_after(dir: &Path, after: u64) -> Result<(Newer, BTreeSet<u64>), TraceError> {
    let mut newer = BTreeMap::new();
    let mut seen = BTreeSet::new();
    for seq in message_files(dir)?.into_iter().filter(|&s| s > after) {
        if let Some(message) = read_message_file(dir, seq)? {
            newer.insert(seq, message);
        }
    }
    let path = dir.join(MESSAGE_LOG);
    let mut file = match File::open(&path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok((newer, seen)),
        Err(e) => return Err(io_at(&path)(e)),
    };
    let len = file.metadata().map_err(io_at(&path))?.len();
    let mut window = 64 * 1024u64;
    loop {
        let start = len.saturating_sub(window);
        let mut buf = vec![0; (len - start) as usize];
        file.seek(SeekFrom::Start(start))
            .and_then(|_| file.read_exact(&mut buf))
            .map_err(io_at(&path))?;
        // Unless the window starts the file, its first line may be cut.
        let whole = match start {
            0 => &buf[..],
            _ => buf.iter().position(|&c| c == b'\n').map_or(&[][..], |nl| &buf[nl + 1..]),
        };
        let lines: Vec<_> = log_lines(whole).collect();
        let reaches_back = match lines.first() {
            Some((n, line)) => parse_line::<Sequence>(&path, *n, line)?.sequence <= after,
            None => false,
        };
        if start == 0 || reaches_back {
            for (n, line) in lines {
                let seq = parse_line::<Sequence>(&path, n, line)?.sequence;
                seen.insert(seq);
                if seq > after {
                    newer.insert(seq, Some(parse_line(&path, n, line)?));
                }
            }
            return Ok((newer, seen));
        }
        window *= 2;
    }
}

/// Messages by sequence, `None` for an empty file of the old layout.
type Newer = BTreeMap<u64, Option<Message>>;

/// The sequence of a log line, read without the rest of the message.
#[derive(Deserialize)]
struct Sequence {
    sequence: u64,
}

/// The log at `path`, empty when there is none.
fn read_log(path: &Path) -> Result<Vec<u8>, TraceError> {
    match fs::read(path) {
        Ok(bytes) => Ok(bytes),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(io_at(path)(e)),
    }
}

/// The complete lines of a log, numbered from 1: what follows the last
/// newline is an append a crash tore, never written.
fn log_lines(bytes: &[u8]) -> impl Iterator<Item = (usize, &[u8])> {
    let complete = bytes.iter().rposition(|&c| c == b'\n').map_or(&[][..], |end| &bytes[..end]);
    complete
        .split(|&c| c == b'\n')
        .enumerate()
        .filter(|(_, l)| !l.is_empty())
        .map(|(n, l)| (n + 1, l))
}

fn parse_line<'a, T: Deserialize<'a>>(
    path: &Path,
    n: usize,
    line: &'a [u8],
) -> Result<T, TraceError> {
    serde_json::from_slice(line).map_err(|e| corrupt(path, format!("line {n}: {e}")))
}

/// Appends `line` (newline included) in one write, first cutting off a
/// torn line left by a crash mid-append. Returns whether the file was new.
fn append_line(path: &Path, line: &[u8]) -> io::Result<bool> {
    let mut file = OpenOptions::new().read(true).append(true).create(true).open(path)?;
    let len = file.metadata()?.len();
    if len > 0 {
        let mut last = [0u8];
        file.seek(SeekFrom::End(-1))?;
        file.read_exact(&mut last)?;
        if last[0] != b'\n' {
            let (end, _) = last_complete_line(&mut file)?;
            file.set_len(end)?;
        }
    }
    file.write_all(line)?;
    Ok(len == 0)
}

/// Where the complete lines of `file` end, and the last of them (without
/// its newline), read backwards from the end in growing windows so that a
/// long trace costs one small read. The first window holds a version of a
/// trace's metadata or goals several times over; a 64 KiB one made every
/// `get_trace` read (and zero) 64 KiB per log.
fn last_complete_line(file: &mut File) -> io::Result<(u64, Option<Vec<u8>>)> {
    let len = file.metadata()?.len();
    let mut window = 8 * 1024u64;
    loop {
        let start = len.saturating_sub(window);
        let mut buf = vec![0; (len - start) as usize];
        file.seek(SeekFrom::Start(start))?;
        file.read_exact(&mut buf)?;
        match buf.iter().rposition(|&c| c == b'\n') {
            Some(nl) => {
                let end = start + nl as u64 + 1;
                if let Some(prev) = buf[..nl].iter().rposition(|&c| c == b'\n') {
                    return Ok((end, Some(buf[prev + 1..nl].to_vec())));
                }
                if start == 0 {
                    return Ok((end, Some(buf[..nl].to_vec())));
                }
            }
            None if start == 0 => return Ok((0, None)),
            None => {}
        }
        window *= 2;
    }
}

fn io_at(path: &Path) -> impl FnOnce(io::Error) -> TraceError + '_ {
    move |source| TraceError::Io { path: path.to_owned(), source }
}

fn corrupt(path: &Path, reason: String) -> TraceError {
    TraceError::Corrupt { path: path.to_owned(), reason }
}

fn parse<'a, T: Deserialize<'a>>(path: &Path, bytes: &'a [u8]) -> Result<T, TraceError> {
    serde_json::from_slice(bytes).map_err(|e| corrupt(path, e.to_string()))
}

/// `value` as one line of a log bound for `path`, through the redaction
/// point: compact JSON (a newline in a string is escaped), then a newline.
fn to_line(path: &Path, value: &impl serde::Serialize) -> Result<Vec<u8>, TraceError> {
    let mut line =
        serde_json::to_vec(value).map_err(|e| corrupt(path, format!("cannot serialise: {e}")))?;
    line.push(b'\n');
    Ok(reson_text::redact::redact_bytes(&line).into_owned())
}

/// The pretty JSON of `value`, bound for `path`. Serialising the store's
/// own types only fails on a map with non-string keys, which they do not
/// have; the error still names the file rather than panicking.
fn to_json(path: &Path, value: &impl serde::Serialize) -> Result<Vec<u8>, TraceError> {
    serde_json::to_vec_pretty(value).map_err(|e| corrupt(path, format!("cannot serialise: {e}")))
}

#[cfg(test)]
mod tests {
    use super::super::flush::synced;
    use super::*;
    use crate::{Role, TraceMode};
    use std::sync::Arc;

    /// Many traces appended at once, each call checked as it returns:
    /// under `Immediate` the sync had covered its line by then, and the
    /// syncs of the traces were shared (group commit); under either, every
    /// log holds its own trace's lines, whole and in order.
    async fn concurrent_appends(dir: &Path, durability: Durability) -> u64 {
        const TRACES: usize = 100;
        const MESSAGES: u64 = 8;
        let store = Arc::new(FileTraceStore::open(dir, durability).unwrap());
        let writers: Vec<_> = (0..TRACES)
            .map(|w| {
                let store = Arc::clone(&store);
                tokio::spawn(async move {
                    let mut trace = Trace::new(TraceMode::Agent, "append", "default");
                    trace.id = format!("w{w}");
                    store.create_trace(&trace).await.unwrap();
                    let log = store.root().join(&trace.id).join(MESSAGE_LOG);
                    let events = store.root().join(&trace.id).join(EVENTS);
                    for i in 0..MESSAGES {
                        let text = format!("{w}/{i} {}", "x".repeat(3000));
                        let message = Message::new(Role::User, text);
                        // As the runner writes them, and alone.
                        if i % 2 == 0 {
                            store.add_message_with_event(&mut trace, message, None).await.unwrap();
                        } else {
                            store.add_message(&mut trace, message, None).await.unwrap();
                        }
                        if durability == Durability::Immediate {
                            for file in [&log, &events] {
                                let written = fs::metadata(file).unwrap().len();
                                assert!(
                                    synced::len(file) >= written,
                                    "{} of {} was reported stored before its fsync (message {})",
                                    file.display(),
                                    trace.id,
                                    i + 1,
                                );
                            }
                        }
                    }
                    trace
                })
            })
            .collect();
        for (w, writer) in writers.into_iter().enumerate() {
            let trace = writer.await.unwrap();
            assert_eq!(store.get_trace(&trace.id).await.unwrap().unwrap(), trace);
            let messages = store.get_messages(&trace.id).await.unwrap();
            let expected: Vec<u64> = (1..=MESSAGES).collect();
            let events = store.events_after(&trace.id, 0).await.unwrap();
            assert_eq!(events.len() as u64, MESSAGES / 2);
            assert_eq!(messages.iter().map(|m| m.sequence).collect::<Vec<_>>(), expected);
            for (i, message) in messages.iter().enumerate() {
                assert!(message.text().starts_with(&format!("{w}/{i} ")), "{}", message.text());
            }
        }
        store.sync().await.unwrap();
        store.flusher.urgent_batches()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn immediate_appends_are_synced_before_they_return_and_share_their_syncs() {
        let dir = tempfile::tempdir().unwrap();
        let batches = concurrent_appends(dir.path(), Durability::Immediate).await;
        // 100 creates of two syncs each, and 800 messages of one, half of
        // them with their event.
        assert!(batches < 1000 / 2, "{batches} sync batches for 1,000 awaited syncs");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn batched_appends_to_many_traces_keep_them_apart() {
        let dir = tempfile::tempdir().unwrap();
        concurrent_appends(dir.path(), Durability::Batched).await;
        for w in 0..100 {
            let trace = dir.path().join(format!("w{w}"));
            assert!(!trace.join(MESSAGES).exists(), "a message is no file of its own");
        }
    }
}
