//! The in-memory trace store: what [`FileTraceStore`](super::FileTraceStore)
//! does, without the disk, for embedders, tests and benchmarks.

use super::artifact::{ObjectData, RecordData};
use super::event::{Event, EventKind};
use super::goal::{GoalStats, GoalTree};
use super::message::Message;
use super::message::{place_next, take_inline};
use super::model::{Trace, now_ms};
use super::store::{
    TraceError, TraceFilter, TraceStore, check_digest, check_id, check_record_name,
};
use async_trait::async_trait;
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};

/// Traces held in the process, gone when the store is dropped.
///
/// It behaves as [`FileTraceStore`](super::FileTraceStore) does, the same
/// conformance tests run against both: the same ids are valid, sequences
/// and event ids are assigned the same way, [`TraceStore::get_trace`]
/// reconciles stored metadata with the messages and events the same way,
/// and what it keeps passes the redaction point, so it hands out what the
/// file store would read back. [`TraceStore::sync`] has nothing to wait for.
#[derive(Debug, Default)]
pub struct MemoryTraceStore {
    // A lock per trace, so that runs writing different traces do not wait
    // for each other; the map's own lock is held only to find or add one.
    traces: RwLock<HashMap<String, Arc<Mutex<Stored>>>>,
}

/// One trace: what the file store keeps in its directory.
#[derive(Debug)]
struct Stored {
    /// As last written (meta.json), before reconciling.
    meta: Trace,
    messages: BTreeMap<u64, Message>,
    events: Vec<Event>,
    goals: GoalTree,
    /// The images beside the messages, by name.
    images: HashMap<String, Arc<[u8]>>,
    /// The objects, by digest.
    objects: BTreeMap<String, Arc<[u8]>>,
    /// The records, by kind and key.
    records: BTreeMap<(String, String), serde_json::Value>,
}

impl MemoryTraceStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// The trace `id`, locked; [`TraceError::NotFound`] when there is none.
    fn with<T>(
        &self,
        id: &str,
        f: impl FnOnce(&mut Stored) -> Result<T, TraceError>,
    ) -> Result<T, TraceError> {
        check_id(id)?;
        let stored = self.find(id).ok_or_else(|| TraceError::NotFound(id.to_owned()))?;
        f(&mut lock(&stored))
    }

    fn find(&self, id: &str) -> Option<Arc<Mutex<Stored>>> {
        self.traces.read().unwrap_or_else(PoisonError::into_inner).get(id).cloned()
    }
}

/// Every change to a trace is made on values computed before the lock is
/// taken or in single assignments, so a panic elsewhere while it was held
/// leaves nothing half-done.
fn lock(stored: &Mutex<Stored>) -> MutexGuard<'_, Stored> {
    stored.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Stored {
    /// The metadata brought up to date with the messages and events, as
    /// the file store's `get_trace` does with the files: a stale
    /// `update_trace` loses nothing.
    fn reconciled(&self) -> Trace {
        let mut trace = self.meta.clone();
        for (&seq, message) in self.messages.range(trace.last_sequence + 1..) {
            trace.last_sequence = seq;
            if message.parent_sequence == trace.head_sequence {
                trace.head_sequence = Some(seq);
            }
            trace.totals += &GoalStats::of(message);
            trace.updated_at_ms = trace.updated_at_ms.max(message.created_at_ms);
        }
        if let Some(last) = self.events.last() {
            trace.last_event_id = trace.last_event_id.max(last.id);
        }
        trace
    }

    fn no_such_message(&self, sequence: u64) -> TraceError {
        TraceError::NoSuchMessage { trace_id: self.meta.id.clone(), sequence }
    }
}

/// `value` as the file store would read it back: through the redaction
/// point. Serialising the store's own types does not fail (see the file
/// store's `to_json`); the error still names the trace rather than
/// panicking.
fn redacted<T: Serialize + DeserializeOwned + Clone>(
    trace_id: &str,
    value: &T,
) -> Result<T, TraceError> {
    if !reson_text::redact::active() {
        return Ok(value.clone());
    }
    let bad = |e: serde_json::Error| TraceError::Corrupt {
        path: PathBuf::from(trace_id),
        reason: format!("cannot serialise: {e}"),
    };
    let bytes = serde_json::to_vec(value).map_err(bad)?;
    match reson_text::redact::redact_bytes(&bytes) {
        Cow::Borrowed(_) => Ok(value.clone()),
        Cow::Owned(clean) => serde_json::from_slice(&clean).map_err(bad),
    }
}

// No method awaits: each is a few map operations under a lock that is
// never held across an `.await`.
#[async_trait]
impl TraceStore for MemoryTraceStore {
    async fn create_trace(&self, trace: &Trace) -> Result<(), TraceError> {
        check_id(&trace.id)?;
        let stored = Stored {
            meta: redacted(&trace.id, trace)?,
            messages: BTreeMap::new(),
            events: Vec::new(),
            goals: GoalTree::new(),
            images: HashMap::new(),
            objects: BTreeMap::new(),
            records: BTreeMap::new(),
        };
        let mut traces = self.traces.write().unwrap_or_else(PoisonError::into_inner);
        if traces.contains_key(&trace.id) {
            return Err(TraceError::AlreadyExists(trace.id.clone()));
        }
        traces.insert(trace.id.clone(), Arc::new(Mutex::new(stored)));
        Ok(())
    }

    async fn get_trace(&self, id: &str) -> Result<Option<Trace>, TraceError> {
        check_id(id)?;
        Ok(self.find(id).map(|stored| lock(&stored).reconciled()))
    }

    async fn update_trace(&self, trace: &Trace) -> Result<(), TraceError> {
        let meta = redacted(&trace.id, trace)?;
        self.with(&trace.id, |stored| {
            stored.meta = meta;
            Ok(())
        })
    }

    async fn list_traces(&self, filter: &TraceFilter) -> Result<Vec<Trace>, TraceError> {
        let all: Vec<Arc<Mutex<Stored>>> =
            self.traces.read().unwrap_or_else(PoisonError::into_inner).values().cloned().collect();
        let mut traces: Vec<Trace> = all
            .iter()
            .map(|stored| lock(stored).reconciled())
            .filter(|trace| filter.matches(trace))
            .collect();
        traces.sort_by(|a, b| b.created_at_ms.cmp(&a.created_at_ms).then_with(|| b.id.cmp(&a.id)));
        Ok(traces)
    }

    async fn add_message(
        &self,
        trace: &mut Trace,
        mut message: Message,
        parent: Option<u64>,
    ) -> Result<Message, TraceError> {
        self.with(&trace.id.clone(), |stored| {
            let parent = match parent {
                Some(p) if Some(p) != trace.head_sequence && !stored.messages.contains_key(&p) => {
                    return Err(stored.no_such_message(p));
                }
                Some(p) => Some(p),
                None => trace.head_sequence,
            };
            place_next(&mut message, trace, parent);
            let seq = message.sequence;
            let images = take_inline(&mut message);
            let kept = redacted(&trace.id, &message)?;
            let mut updated = trace.clone();
            updated.last_sequence = seq;
            updated.head_sequence = Some(seq);
            updated.totals += &GoalStats::of(&message);
            updated.updated_at_ms = message.created_at_ms;
            let meta = redacted(&trace.id, &updated)?;
            stored.images.extend(images.into_iter().map(|i| (i.name, Arc::from(i.data))));
            stored.messages.insert(seq, kept);
            stored.meta = meta;
            *trace = updated;
            Ok(message)
        })
    }

    async fn set_head(&self, trace: &mut Trace, sequence: u64) -> Result<(), TraceError> {
        self.with(&trace.id.clone(), |stored| {
            if !stored.messages.contains_key(&sequence) {
                return Err(stored.no_such_message(sequence));
            }
            let mut updated = trace.clone();
            updated.head_sequence = Some(sequence);
            updated.updated_at_ms = now_ms();
            stored.meta = redacted(&trace.id, &updated)?;
            *trace = updated;
            Ok(())
        })
    }

    async fn get_messages(&self, id: &str) -> Result<Vec<Message>, TraceError> {
        self.with(id, |stored| Ok(stored.messages.values().cloned().collect()))
    }

    async fn get_message(&self, id: &str, sequence: u64) -> Result<Option<Message>, TraceError> {
        self.with(id, |stored| Ok(stored.messages.get(&sequence).cloned()))
    }

    async fn get_main_path_messages(
        &self,
        id: &str,
        head: u64,
    ) -> Result<Vec<Message>, TraceError> {
        self.with(id, |stored| {
            let mut chain: Vec<Message> = Vec::new();
            let mut at = Some(head);
            while let Some(seq) = at {
                let message =
                    stored.messages.get(&seq).ok_or_else(|| stored.no_such_message(seq))?;
                // Only a parent older than its child ends the walk; a head
                // set by `update_trace` to anything else could loop.
                if let Some(parent) = message.parent_sequence.filter(|&p| p >= seq) {
                    return Err(stored.no_such_message(parent));
                }
                at = message.parent_sequence;
                chain.push(message.clone());
            }
            chain.reverse();
            Ok(chain)
        })
    }

    async fn get_messages_by_goal(
        &self,
        id: &str,
        goal_id: &str,
    ) -> Result<Vec<Message>, TraceError> {
        self.with(id, |stored| {
            Ok(stored
                .messages
                .values()
                .filter(|m| m.goal_id.as_deref() == Some(goal_id))
                .cloned()
                .collect())
        })
    }

    async fn get_image(&self, id: &str, name: &str) -> Result<Option<Vec<u8>>, TraceError> {
        self.with(id, |stored| Ok(stored.images.get(name).map(|data| data.to_vec())))
    }

    async fn append_event(&self, trace: &mut Trace, kind: EventKind) -> Result<Event, TraceError> {
        self.with(&trace.id.clone(), |stored| {
            let event = Event { id: trace.last_event_id + 1, at_ms: now_ms(), kind };
            stored.events.push(redacted(&trace.id, &event)?);
            trace.last_event_id = event.id;
            Ok(event)
        })
    }

    async fn events_after(&self, id: &str, after_event_id: u64) -> Result<Vec<Event>, TraceError> {
        self.with(id, |stored| {
            Ok(stored.events.iter().filter(|e| e.id > after_event_id).cloned().collect())
        })
    }

    async fn put_object(&self, id: &str, object: &ObjectData) -> Result<(), TraceError> {
        check_digest(id, &object.digest)?;
        self.with(id, |stored| {
            stored
                .objects
                .entry(object.digest.clone())
                .or_insert_with(|| Arc::from(object.data.as_slice()));
            Ok(())
        })
    }

    async fn get_object(&self, id: &str, digest: &str) -> Result<Option<Vec<u8>>, TraceError> {
        self.with(id, |stored| Ok(stored.objects.get(digest).map(|data| data.to_vec())))
    }

    async fn list_objects(&self, id: &str) -> Result<Vec<String>, TraceError> {
        self.with(id, |stored| Ok(stored.objects.keys().cloned().collect()))
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
        let body = redacted(id, body)?;
        self.with(id, |stored| {
            stored.records.insert((kind.to_owned(), key.to_owned()), body);
            Ok(())
        })
    }

    async fn get_record(
        &self,
        id: &str,
        kind: &str,
        key: &str,
    ) -> Result<Option<serde_json::Value>, TraceError> {
        self.with(id, |stored| Ok(stored.records.get(&(kind.to_owned(), key.to_owned())).cloned()))
    }

    async fn list_records(
        &self,
        id: &str,
        kind: Option<&str>,
    ) -> Result<Vec<RecordData>, TraceError> {
        self.with(id, |stored| {
            Ok(stored
                .records
                .iter()
                .filter(|((k, _), _)| kind.is_none_or(|kind| kind == k))
                .map(|((kind, key), body)| RecordData {
                    kind: kind.clone(),
                    key: key.clone(),
                    body: body.clone(),
                })
                .collect())
        })
    }

    async fn get_goals(&self, id: &str) -> Result<GoalTree, TraceError> {
        self.with(id, |stored| Ok(stored.goals.clone()))
    }

    async fn save_goals(&self, id: &str, tree: &GoalTree) -> Result<(), TraceError> {
        let tree = redacted(id, tree)?;
        self.with(id, |stored| {
            stored.goals = tree;
            Ok(())
        })
    }

    async fn import_trace(&self, snapshot: &super::store::TraceSnapshot) -> Result<(), TraceError> {
        super::migrate::check_snapshot(snapshot)?;
        let id = &snapshot.trace.id;
        let messages = snapshot
            .messages
            .iter()
            .map(|m| Ok((m.sequence, redacted(id, m)?)))
            .collect::<Result<BTreeMap<_, _>, TraceError>>()?;
        let events =
            snapshot.events.iter().map(|e| redacted(id, e)).collect::<Result<Vec<_>, _>>()?;
        let stored = Stored {
            meta: redacted(id, &snapshot.trace)?,
            messages,
            events,
            goals: redacted(id, &snapshot.goals)?,
            images: snapshot
                .images
                .iter()
                .map(|i| (i.name.clone(), Arc::from(i.data.as_slice())))
                .collect(),
            objects: snapshot
                .objects
                .iter()
                .map(|o| (o.digest.clone(), Arc::from(o.data.as_slice())))
                .collect(),
            records: snapshot
                .records
                .iter()
                .map(|r| Ok(((r.kind.clone(), r.key.clone()), redacted(id, &r.body)?)))
                .collect::<Result<_, TraceError>>()?,
        };
        let mut traces = self.traces.write().unwrap_or_else(PoisonError::into_inner);
        if traces.contains_key(id) {
            return Err(TraceError::AlreadyExists(id.clone()));
        }
        traces.insert(id.clone(), Arc::new(Mutex::new(stored)));
        Ok(())
    }

    async fn sync(&self) -> Result<(), TraceError> {
        Ok(())
    }
}
