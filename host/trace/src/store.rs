//! What a trace store does, whatever keeps the data.

use super::artifact::{ObjectData, RecordData};
use super::event::{Event, EventKind};
use super::goal::GoalTree;
use super::image::ImageData;
use super::message::Message;
use super::message::referenced;
use super::model::{Trace, TraceStatus};
use async_trait::async_trait;
use std::io;
use std::path::PathBuf;

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// No trace has this id.
    #[error("trace {0} not found")]
    NotFound(String),
    /// `create_trace` with an id already taken.
    #[error("trace {0} already exists")]
    AlreadyExists(String),
    /// An id that cannot name a trace (it becomes a directory name).
    #[error(
        "invalid trace id {0:?}: use 1 to 128 letters, digits, '_', '-' or '.', not starting with '.'"
    )]
    InvalidId(String),
    /// A sequence that names no stored message of the trace.
    #[error("trace {trace_id} has no message {sequence}")]
    NoSuchMessage {
        /// The trace.
        trace_id: String,
        /// The sequence asked for.
        sequence: u64,
    },
    /// Reading or writing a file failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What the OS said.
        source: io::Error,
    },
    /// The database failed (it went away, refused a write, ...).
    #[error(transparent)]
    #[cfg(feature = "postgres")]
    Database(#[from] crate::database::DatabaseError),
    /// A file holds something the store did not write.
    #[error("{}: corrupt: {reason}", path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
}

/// Which traces [`TraceStore::list_traces`] returns; `None` matches anything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TraceFilter {
    /// Only traces with this status.
    pub status: Option<TraceStatus>,
    /// Only sub-agents of this trace.
    pub parent_trace_id: Option<String>,
    /// Only root traces (those that are no sub-agent's).
    pub roots_only: bool,
    /// Only traces of this user.
    pub uid: Option<String>,
}

impl TraceFilter {
    pub(crate) fn matches(&self, trace: &Trace) -> bool {
        self.status.is_none_or(|s| trace.status == s)
            && self
                .parent_trace_id
                .as_ref()
                .is_none_or(|p| trace.parent_trace_id.as_ref() == Some(p))
            && (!self.roots_only || trace.parent_trace_id.is_none())
            && self.uid.as_ref().is_none_or(|u| trace.uid.as_ref() == Some(u))
    }
}

/// Everything a store keeps of one trace, exactly as stored (ids,
/// sequences, event ids, times): what moves a trace between stores.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TraceSnapshot {
    /// The trace's metadata.
    pub trace: Trace,
    /// Every message, on all branches, by sequence.
    pub messages: Vec<Message>,
    /// Every event, by id.
    pub events: Vec<Event>,
    /// The goal tree.
    pub goals: GoalTree,
    /// The images kept beside the messages, by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<ImageData>,
    /// The objects kept with the trace, by digest.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub objects: Vec<ObjectData>,
    /// The records kept with the trace, by kind and key.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub records: Vec<RecordData>,
}

/// Durable storage of traces, their messages, goals and events. Each trace
/// has one writer at a time (its runner); any number may read.
///
/// Operations that take `&mut Trace` update it in memory as they persist,
/// so the caller's copy stays the latest.
#[async_trait]
pub trait TraceStore: Send + Sync {
    /// Stores a new trace. Fails with [`TraceError::AlreadyExists`] when the
    /// id is taken.
    async fn create_trace(&self, trace: &Trace) -> Result<(), TraceError>;

    /// The trace, reconciled with everything written for it (see the module
    /// docs), or `None` when there is no such trace.
    async fn get_trace(&self, id: &str) -> Result<Option<Trace>, TraceError>;

    /// Whose trace `id` is (its `uid`, set when it was created and never
    /// changed), or `None` when there is no such trace: what a caller's
    /// access is decided on, read without the rest of the trace, so that
    /// answering for a trace one may not see costs about what answering for
    /// a missing one does.
    async fn owner(&self, id: &str) -> Result<Option<Option<String>>, TraceError> {
        Ok(self.get_trace(id).await?.map(|trace| trace.uid))
    }

    /// Replaces the stored metadata of an existing trace with `trace`.
    async fn update_trace(&self, trace: &Trace) -> Result<(), TraceError>;

    /// Traces matching `filter`, newest first.
    async fn list_traces(&self, filter: &TraceFilter) -> Result<Vec<Trace>, TraceError>;

    /// Stores `message` after `parent` (`None`: after the head, which
    /// continues the main path; an earlier sequence rewinds or forks). It
    /// gets the next sequence, its id, trace, parent and creation time, and
    /// becomes the head; the trace's totals grow by its usage, cost and
    /// time. Its inline images (`data:` URLs of valid PNG, JPEG, GIF or
    /// WebP images) are kept beside it, written first, and the stored
    /// message names them with [`ContentPart::Image`](super::ContentPart::Image).
    /// Returns the message as stored; from then on
    /// [`get_trace`](Self::get_trace) reflects it, whatever happens to the
    /// process.
    ///
    /// The parent is taken as given: to rewind onto an assistant message
    /// with tool calls, pass [`MessageTree::rewind_point`](super::MessageTree::rewind_point).
    async fn add_message(
        &self,
        trace: &mut Trace,
        message: Message,
        parent: Option<u64>,
    ) -> Result<Message, TraceError>;

    /// Makes `sequence` the head (regenerate, or switch branches).
    async fn set_head(&self, trace: &mut Trace, sequence: u64) -> Result<(), TraceError>;

    /// Every message of the trace, on all branches, by sequence.
    async fn get_messages(&self, id: &str) -> Result<Vec<Message>, TraceError>;

    /// One message, or `None` when the trace has no such sequence.
    async fn get_message(&self, id: &str, sequence: u64) -> Result<Option<Message>, TraceError>;

    /// The messages from the root to `head`, in order.
    async fn get_main_path_messages(&self, id: &str, head: u64)
    -> Result<Vec<Message>, TraceError>;

    /// The messages written while `goal_id` was current, by sequence.
    async fn get_messages_by_goal(
        &self,
        id: &str,
        goal_id: &str,
    ) -> Result<Vec<Message>, TraceError>;

    /// The bytes of image `name` of trace `id` (an
    /// [`ImageRef::name`](super::ImageRef::name)), or `None` when the trace
    /// has no such image.
    async fn get_image(&self, id: &str, name: &str) -> Result<Option<Vec<u8>>, TraceError>;

    /// Keeps `object` with trace `id` (see [`artifact`](super::artifact)),
    /// unless an object with its digest is kept already. The caller
    /// computed the digest ([`ObjectData::new`]); it is not checked here.
    /// Durable as a message is.
    async fn put_object(&self, id: &str, object: &ObjectData) -> Result<(), TraceError>;

    /// The bytes of object `digest` of trace `id`, or `None` when the trace
    /// keeps no such object.
    async fn get_object(&self, id: &str, digest: &str) -> Result<Option<Vec<u8>>, TraceError>;

    /// The digests of every object trace `id` keeps, sorted.
    async fn list_objects(&self, id: &str) -> Result<Vec<String>, TraceError>;

    /// Files `body` as record `key` of `kind` of trace `id`, replacing
    /// one filed there before. Durable as a message is.
    async fn put_record(
        &self,
        id: &str,
        kind: &str,
        key: &str,
        body: &serde_json::Value,
    ) -> Result<(), TraceError>;

    /// Record `key` of `kind` of trace `id`, or `None` when there is none.
    async fn get_record(
        &self,
        id: &str,
        kind: &str,
        key: &str,
    ) -> Result<Option<serde_json::Value>, TraceError>;

    /// The records of trace `id` of `kind` (`None`: of every kind), by kind
    /// then key.
    async fn list_records(
        &self,
        id: &str,
        kind: Option<&str>,
    ) -> Result<Vec<RecordData>, TraceError>;

    /// Appends an event with the next event id and the current time.
    async fn append_event(&self, trace: &mut Trace, kind: EventKind) -> Result<Event, TraceError>;

    /// The events with an id above `after_event_id`, in order.
    async fn events_after(&self, id: &str, after_event_id: u64) -> Result<Vec<Event>, TraceError>;

    /// The goal tree; empty when none was saved.
    async fn get_goals(&self, id: &str) -> Result<GoalTree, TraceError>;

    /// Replaces the goal tree.
    async fn save_goals(&self, id: &str, tree: &GoalTree) -> Result<(), TraceError>;

    /// [`add_message`](Self::add_message) and the
    /// [`MessageAdded`](EventKind::MessageAdded) event of the message as
    /// stored, as one write: a store that can, makes a reader see both or
    /// neither.
    async fn add_message_with_event(
        &self,
        trace: &mut Trace,
        message: Message,
        parent: Option<u64>,
    ) -> Result<(Message, Event), TraceError> {
        let stored = self.add_message(trace, message, parent).await?;
        let event =
            self.append_event(trace, EventKind::MessageAdded { message: stored.clone() }).await?;
        Ok((stored, event))
    }

    /// [`save_goals`](Self::save_goals), [`update_trace`](Self::update_trace)
    /// and [`append_event`](Self::append_event) as one write: a store that
    /// can, makes a reader see all three or none.
    async fn commit_with_event(
        &self,
        trace: &mut Trace,
        goals: &GoalTree,
        kind: EventKind,
    ) -> Result<Event, TraceError> {
        self.save_goals(&trace.id, goals).await?;
        self.update_trace(trace).await?;
        self.append_event(trace, kind).await
    }

    /// Everything kept of trace `id`, as stored, or `None` when there is no
    /// such trace.
    async fn export_trace(&self, id: &str) -> Result<Option<TraceSnapshot>, TraceError> {
        let Some(trace) = self.get_trace(id).await? else { return Ok(None) };
        let messages = self.get_messages(id).await?;
        let mut images = Vec::new();
        for image in messages.iter().flat_map(referenced) {
            // A rewritten message could name an image twice; keep one copy.
            if images.iter().any(|i: &ImageData| i.name == image.name) {
                continue;
            }
            let Some(data) = self.get_image(id, &image.name).await? else {
                return Err(TraceError::Corrupt {
                    path: PathBuf::from(id).join(&image.name),
                    reason: "a message names this image, which is missing".into(),
                });
            };
            images.push(ImageData { name: image.name.clone(), data });
        }
        let mut objects = Vec::new();
        for digest in self.list_objects(id).await? {
            let Some(data) = self.get_object(id, &digest).await? else {
                return Err(TraceError::Corrupt {
                    path: PathBuf::from(id).join(&digest),
                    reason: "an object listed is missing".into(),
                });
            };
            objects.push(ObjectData { digest, data });
        }
        Ok(Some(TraceSnapshot {
            messages,
            events: self.events_after(id, 0).await?,
            goals: self.get_goals(id).await?,
            images,
            objects,
            records: self.list_records(id, None).await?,
            trace,
        }))
    }

    /// Stores `snapshot` as it is (nothing renumbered or re-timed). Fails
    /// with [`TraceError::AlreadyExists`] when the id is taken.
    async fn import_trace(&self, snapshot: &TraceSnapshot) -> Result<(), TraceError>;

    /// Returns once everything written before the call is on stable storage
    /// (for a store that acknowledges writes before then), reporting a
    /// failure to get it there.
    async fn sync(&self) -> Result<(), TraceError>;
}

/// Refuses a digest that is not 64 lowercase hex digits (it becomes a file
/// name in the file store).
pub(crate) fn check_digest(trace_id: &str, digest: &str) -> Result<(), TraceError> {
    if digest.len() == 64 && digest.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        Ok(())
    } else {
        Err(TraceError::Corrupt {
            path: PathBuf::from(trace_id),
            reason: format!("{digest:?} is not a SHA-256 digest in lowercase hex"),
        })
    }
}

/// Refuses a record kind or key that could not be a file name in every
/// store: 1 to 128 letters, digits, `_`, `-` or `.`, not starting with `.`.
pub(crate) fn check_record_name(trace_id: &str, name: &str) -> Result<(), TraceError> {
    let ok = !name.is_empty()
        && name.len() <= 128
        && !name.starts_with('.')
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(TraceError::Corrupt {
            path: PathBuf::from(trace_id),
            reason: format!(
                "{name:?} cannot name a record: use 1 to 128 letters, digits, '_', '-' or '.', \
                 not starting with '.'"
            ),
        })
    }
}

/// Checks that `id` can name a trace in every store: it becomes a directory
/// name in [`FileTraceStore`](super::FileTraceStore), and the other stores
/// refuse the same ids so that a trace can move between them.
pub(super) fn check_id(id: &str) -> Result<(), TraceError> {
    let valid = (1..=128).contains(&id.len())
        && !id.starts_with('.')
        && id.bytes().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-' | b'.'));
    if valid { Ok(()) } else { Err(TraceError::InvalidId(id.to_owned())) }
}
