//! The file-system trace store: one directory per trace (layout, crash
//! safety and fsync policy in the module docs of [`crate`]).

use super::artifact::{ObjectData, RecordData};
use super::config::Durability;
use super::event::{Event, EventKind};
use super::flush::{Flusher, Target};
use super::goal::{GoalStats, GoalTree};
use super::image::image_media_type;
use super::message::Message;
use super::message::take_inline;
use super::model::{Trace, now_ms};
use super::store::{
    TraceError, TraceFilter, TraceStore, check_digest, check_id, check_record_name,
};
use async_trait::async_trait;
use serde::Deserialize;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

const META: &str = "meta.json";
const GOALS: &str = "goal.json";
const EVENTS: &str = "events.jsonl";
const MESSAGES: &str = "messages";
const OBJECTS: &str = "objects";
const RECORDS: &str = "records";

/// How many messages continuing the head may be added before meta.json is
/// rewritten; `get_trace` reads at most this many message files to catch up.
const META_EVERY: u64 = 32;

/// Traces as files under `root`, one directory per trace.
pub struct FileTraceStore {
    root: PathBuf,
    durability: Durability,
    flusher: Flusher,
}

impl FileTraceStore {
    /// A store under `root`, created if missing. Starts the thread that
    /// does the store's fsyncs; it ends when the store is dropped, once
    /// what was queued is synced.
    pub fn open(root: impl Into<PathBuf>, durability: Durability) -> Result<Self, TraceError> {
        let root = root.into();
        fs::create_dir_all(&root).map_err(io_at(&root))?;
        let flusher = Flusher::start().map_err(io_at(&root))?;
        Ok(Self { root, durability, flusher })
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
        // reported stored, and a file a power loss leaves empty counts as
        // never written. That saves a new message file one sync wait.
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

    async fn write_meta(&self, dir: &Path, trace: &Trace) -> Result<(), TraceError> {
        let path = dir.join(META);
        self.replace(&path, &to_json(&path, trace)?).await
    }

    fn read_trace(&self, id: &str) -> Result<Option<Trace>, TraceError> {
        let dir = self.dir(id)?;
        let path = dir.join(META);
        let bytes = match fs::read(&path) {
            Ok(bytes) => bytes,
            // A directory without meta.json is a create that never finished.
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_at(&path)(e)),
        };
        let mut trace: Trace = parse(&path, &bytes)?;
        if trace.id != id {
            return Err(corrupt(&path, format!("holds trace {:?}", trace.id)));
        }
        reconcile(&dir, &mut trace)?;
        Ok(Some(trace))
    }
}

/// Brings meta.json up to date with what else reached the disk: messages
/// that continue the head are written without it (see `add_message`), and
/// events always are.
fn reconcile(dir: &Path, trace: &mut Trace) -> Result<(), TraceError> {
    loop {
        let seq = trace.last_sequence + 1;
        let path = message_path(dir, seq);
        let bytes = match fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => break,
            Err(e) => return Err(io_at(&path)(e)),
        };
        // Even an empty file (see `read_message`) keeps its sequence used.
        trace.last_sequence = seq;
        if bytes.is_empty() {
            continue;
        }
        let message: Message = parse(&path, &bytes)?;
        if message.parent_sequence == trace.head_sequence {
            trace.head_sequence = Some(seq);
        }
        trace.totals += &GoalStats::of(&message);
        trace.updated_at_ms = trace.updated_at_ms.max(message.created_at_ms);
    }
    // Only a power loss under `Durability::Batched` can leave the head's
    // file empty; fall back to the newest message that survived.
    if let Some(head) = trace.head_sequence
        && !has_message(dir, head)
    {
        trace.head_sequence = (1..head).rev().find(|&s| has_message(dir, s));
    }
    let events = dir.join(EVENTS);
    match File::open(&events) {
        Ok(mut file) => {
            if let Some(line) = last_complete_line(&mut file).map_err(io_at(&events))?.1 {
                #[derive(Deserialize)]
                struct Id {
                    id: u64,
                }
                let id: Id = parse(&events, &line)?;
                trace.last_event_id = trace.last_event_id.max(id.id);
            }
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_at(&events)(e)),
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
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && !dir.join(META).exists() => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                return Err(TraceError::AlreadyExists(trace.id.clone()));
            }
            Err(e) => return Err(io_at(&dir)(e)),
        }
        let messages = dir.join(MESSAGES);
        match fs::create_dir(&messages) {
            Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(io_at(&messages)(e)),
            _ => {}
        }
        self.write_meta(&dir, trace).await?;
        self.settle(vec![Target::Dir(self.root.clone())]).await
    }

    async fn get_trace(&self, id: &str) -> Result<Option<Trace>, TraceError> {
        self.read_trace(id)
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
        mut message: Message,
        parent: Option<u64>,
    ) -> Result<Message, TraceError> {
        let dir = self.dir(&trace.id)?;
        let parent = match parent {
            Some(p) if Some(p) != trace.head_sequence && !has_message(&dir, p) => {
                return Err(TraceError::NoSuchMessage { trace_id: trace.id.clone(), sequence: p });
            }
            Some(p) => Some(p),
            None => trace.head_sequence,
        };
        let seq = trace.last_sequence + 1;
        message.id = format!("{}-{seq:04}", trace.id);
        message.trace_id = trace.id.clone();
        message.sequence = seq;
        message.parent_sequence = parent;
        message.created_at_ms = now_ms();
        // Images first: a message on disk always has its images.
        for image in take_inline(&mut message) {
            let path = dir.join(MESSAGES).join(&image.name);
            let pending = self
                .place_bytes(&path, &image.data)
                .await
                .map_err(|e| missing(&trace.id, &dir, e))?;
            self.settle(pending).await?;
        }
        let path = message_path(&dir, seq);
        let pending = self
            .place(&path, &to_json(&path, &message)?)
            .await
            .map_err(|e| missing(&trace.id, &dir, e))?;
        // The file exists now, so the sequence is spent even if its sync or
        // the meta write below fails, or the call is cancelled there.
        let continues_head = parent == trace.head_sequence;
        trace.last_sequence = seq;
        trace.head_sequence = Some(seq);
        trace.totals += &GoalStats::of(&message);
        trace.updated_at_ms = message.created_at_ms;
        self.settle(pending).await?;
        // Replacing meta.json costs ~0.2 ms on ext4 (a rename over a file
        // starts its writeback), as much as the rest of a step. `get_trace`
        // rebuilds everything this message changed from the message files
        // when it continues the head, so meta.json is only needed for a
        // branch, and now and then to bound what `get_trace` has to read.
        if !continues_head || seq.is_multiple_of(META_EVERY) {
            self.write_meta(&dir, trace).await?;
        }
        Ok(message)
    }

    async fn set_head(&self, trace: &mut Trace, sequence: u64) -> Result<(), TraceError> {
        let dir = self.dir(&trace.id)?;
        require(&trace.id, &dir)?;
        if !has_message(&dir, sequence) {
            return Err(TraceError::NoSuchMessage { trace_id: trace.id.clone(), sequence });
        }
        trace.head_sequence = Some(sequence);
        trace.updated_at_ms = now_ms();
        self.write_meta(&dir, trace).await
    }

    async fn get_messages(&self, id: &str) -> Result<Vec<Message>, TraceError> {
        let dir = self.dir(id)?;
        let messages_dir = dir.join(MESSAGES);
        let entries = match fs::read_dir(&messages_dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                require(id, &dir)?;
                return Ok(Vec::new());
            }
            Err(e) => return Err(io_at(&messages_dir)(e)),
        };
        let mut sequences = Vec::new();
        for entry in entries {
            let name = entry.map_err(io_at(&messages_dir))?.file_name();
            // Only `{sequence}.json`: temporary files start with a dot.
            if let Some(digits) = name.to_str().and_then(|n| n.strip_suffix(".json"))
                && !digits.is_empty()
                && digits.bytes().all(|c| c.is_ascii_digit())
                && let Ok(seq) = digits.parse::<u64>()
            {
                sequences.push(seq);
            }
        }
        sequences.sort_unstable();
        let mut messages = Vec::with_capacity(sequences.len());
        for seq in sequences {
            messages.extend(read_message(&dir, seq)?);
        }
        Ok(messages)
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
        let mut chain: Vec<Message> = Vec::new();
        let mut at = Some(head);
        while let Some(seq) = at {
            let Some(message) = read_message(&dir, seq)? else {
                return Err(match chain.last() {
                    Some(child) => corrupt(
                        &message_path(&dir, child.sequence),
                        format!("its parent, message {seq}, is missing"),
                    ),
                    None => {
                        require(id, &dir)?;
                        TraceError::NoSuchMessage { trace_id: id.to_owned(), sequence: head }
                    }
                });
            };
            if message.parent_sequence.is_some_and(|p| p >= seq) {
                return Err(corrupt(
                    &message_path(&dir, seq),
                    "its parent is not older than itself".into(),
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
        let path = dir.join(RECORDS).join(kind).join(format!("{key}.json"));
        let mut targets = make_dirs(&dir, &path)?;
        targets.extend(self.place(&path, &to_json(&path, body)?).await?);
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
        let kinds = match kind {
            Some(kind) => {
                let path = dir.join(RECORDS).join(kind);
                if check_record_name(id, kind).is_err() || !path.is_dir() {
                    return Ok(Vec::new());
                }
                vec![(kind.to_owned(), path)]
            }
            None => subdirs(&dir.join(RECORDS))?,
        };
        let mut records = Vec::new();
        for (kind, path) in kinds {
            for (name, file) in entries(&path)? {
                let Some(key) = name.strip_suffix(".json") else { continue };
                if check_record_name(id, key).is_err() {
                    continue;
                }
                let body = parse(&file, &fs::read(&file).map_err(io_at(&file))?)?;
                records.push(RecordData { kind: kind.clone(), key: key.to_owned(), body });
            }
        }
        Ok(records)
    }

    async fn append_event(&self, trace: &mut Trace, kind: EventKind) -> Result<Event, TraceError> {
        let dir = self.dir(&trace.id)?;
        let event = Event { id: trace.last_event_id + 1, at_ms: now_ms(), kind };
        let path = dir.join(EVENTS);
        let mut line = serde_json::to_vec(&event)
            .map_err(|e| corrupt(&path, format!("cannot serialise: {e}")))?;
        line.push(b'\n');
        let line = reson_text::redact::redact_bytes(&line);
        let created = append_line(&path, &line)
            .map_err(io_at(&path))
            .map_err(|e| missing(&trace.id, &dir, e))?;
        // meta.json is not rewritten per event: `get_trace` takes the last
        // id from the file, which keeps an event at one write. The line is
        // in the file now, so its id is spent even if the sync below fails
        // or the call is cancelled there.
        trace.last_event_id = event.id;
        let mut targets = vec![Target::File(path)];
        if created {
            targets.push(Target::Dir(dir));
        }
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
        // The part after the last newline is a torn append: ignored.
        let complete = bytes.iter().rposition(|&c| c == b'\n').map_or(&[][..], |end| &bytes[..end]);
        for (n, line) in complete.split(|&c| c == b'\n').enumerate() {
            let bad = |e: serde_json::Error| corrupt(&path, format!("line {}: {e}", n + 1));
            if serde_json::from_slice::<Id>(line).map_err(bad)?.id > after_event_id {
                events.push(serde_json::from_slice::<Event>(line).map_err(bad)?);
            }
        }
        Ok(events)
    }

    async fn get_goals(&self, id: &str) -> Result<GoalTree, TraceError> {
        let dir = self.dir(id)?;
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
        let path = dir.join(GOALS);
        self.replace(&path, &to_json(&path, tree)?).await
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
        fs::create_dir(&messages).map_err(io_at(&messages))?;
        let mut files = vec![(tmp.join(META), to_json(&tmp.join(META), &snapshot.trace)?)];
        if !snapshot.goals.is_empty() {
            files.push((tmp.join(GOALS), to_json(&tmp.join(GOALS), &snapshot.goals)?));
        }
        for message in &snapshot.messages {
            let path = message_path(tmp, message.sequence);
            let json = to_json(&path, message)?;
            files.push((path, json));
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
        for record in &snapshot.records {
            let path = tmp.join(RECORDS).join(&record.kind).join(format!("{}.json", record.key));
            let json = to_json(&path, &record.body)?;
            files.push((path, json));
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
        for record in &snapshot.records {
            let path = tmp.join(RECORDS).join(&record.kind).join(format!("{}.json", record.key));
            targets.extend(make_dirs(tmp, &path)?);
        }
        for (path, bytes) in files {
            fs::write(&path, reson_text::redact::redact_bytes(&bytes)).map_err(io_at(&path))?;
            targets.push(Target::File(path));
        }
        targets.extend([Target::Dir(messages), Target::Dir(tmp.to_owned())]);
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

fn message_path(dir: &Path, seq: u64) -> PathBuf {
    dir.join(MESSAGES).join(format!("{seq:06}.json"))
}

/// Whether message `seq` is stored (an empty file does not count).
fn has_message(dir: &Path, seq: u64) -> bool {
    seq > 0 && fs::metadata(message_path(dir, seq)).is_ok_and(|m| m.len() > 0)
}

/// Message `seq`, or `None` when it is missing or empty. Files appear under
/// their final name only once complete, so the only empty ones are those a
/// power loss caught before the background sync: counted as never written.
fn read_message(dir: &Path, seq: u64) -> Result<Option<Message>, TraceError> {
    let path = message_path(dir, seq);
    let bytes = match fs::read(&path) {
        Ok(bytes) if bytes.is_empty() => return Ok(None),
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_at(&path)(e)),
    };
    let message: Message = parse(&path, &bytes)?;
    if message.sequence != seq {
        return Err(corrupt(&path, format!("holds message {}", message.sequence)));
    }
    Ok(Some(message))
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
/// long trace costs one small read.
fn last_complete_line(file: &mut File) -> io::Result<(u64, Option<Vec<u8>>)> {
    let len = file.metadata()?.len();
    let mut window = 64 * 1024u64;
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

/// The pretty JSON of `value`, bound for `path`. Serialising the store's
/// own types only fails on a map with non-string keys, which they do not
/// have; the error still names the file rather than panicking.
fn to_json(path: &Path, value: &impl serde::Serialize) -> Result<Vec<u8>, TraceError> {
    serde_json::to_vec_pretty(value).map_err(|e| corrupt(path, format!("cannot serialise: {e}")))
}
