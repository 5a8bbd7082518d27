//! # reson-trace
//!
//! What a run leaves behind, and what every later step reads: the models
//! (traces, messages, goal trees, events), the stores (memory, crash-safe
//! files, PostgreSQL through [`database`]) behind one async [`TraceStore`],
//! and `[store]`, the config section that picks one ([`config`]).
//!
//! It depends only on `reson-text` (every string it writes passes the
//! redaction point). It must never know about plugins, models, agents or
//! servers: they write traces through [`TraceStore`], and a trace must stay
//! readable by any of them, and by a later version of each.
//!
//! Traces: the durable, branchable history of every run. Every agent is a
//! trace; a sub-agent's names its caller in `parent_trace_id`.
//!
//! Messages form a tree through `parent_sequence`. Continuing appends after
//! the head; rewinding adds a message whose parent is an earlier sequence
//! (cut with [`MessageTree::rewind_point`] so that no tool call loses its
//! result). Sequences are never reused and nothing is ever deleted.
//!
//! A [`TraceStore`] is async. [`FileTraceStore`] keeps traces on disk, as
//! below; [`MemoryTraceStore`] keeps them in the process, with the same
//! semantics, for embedding, tests and benchmarks.
//!
//! ```
//! use reson_trace::{MemoryTraceStore, Message, Role, Trace, TraceMode, TraceStore};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), reson_trace::TraceError> {
//! let store = MemoryTraceStore::new();
//! let mut trace = Trace::new(TraceMode::Agent, "say hello", "default");
//! store.create_trace(&trace).await?;
//! store.add_message(&mut trace, Message::new(Role::User, "hello?"), None).await?;
//! let reply = store.add_message(&mut trace, Message::new(Role::Assistant, "hello"), None).await?;
//! let path = store.get_main_path_messages(&trace.id, reply.sequence).await?;
//! assert_eq!(path.len(), 2);
//! # Ok(())
//! # }
//! ```
//!
//! # On disk ([`FileTraceStore`])
//!
//! ```text
//! {root}/{trace_id}/meta.json            the Trace as created (or imported)
//!                   meta.jsonl           its later versions, one a line,
//!                                        append-only: the last one counts
//!                   goal.json            the GoalTree, in an imported trace
//!                   goal.jsonl           its versions, as meta.jsonl
//!                   events.jsonl         one Event a line, append-only
//!                   messages.jsonl       one Message a line, append-only,
//!                                        in the order written
//!                   messages/000003.png  an image of message 3 (several:
//!                                        000003-1.png, 000003-2.png, ...)
//!                   objects/ab/cdef…     an object, by its SHA-256 (see [`artifact`])
//!                   records.jsonl        one version of a record a line
//!                                        (kind, key, body), append-only:
//!                                        the last of a kind and key counts
//!                   records/{kind}/{key}.json  a record filed before
//!                                        records.jsonl (still read; a
//!                                        version in the log wins)
//! ```
//!
//! # Crash safety
//!
//! Killing the host at any instant leaves every trace loadable:
//!
//! - The trace's metadata and goals change at every turn's start and end.
//!   Each change is a line appended to `meta.jsonl` or `goal.jsonl`; the
//!   last complete line is the current version (else meta.json or
//!   goal.json). Replacing the file instead made ext4 free, truncate and
//!   evict the old inode each time (a third of `perf`'s samples of a
//!   1,000-session run on files; appending saved about a tenth of the
//!   store's CPU there). A torn last line counts as never written,
//!   as in `messages.jsonl`, and the version before it stands. meta.json
//!   still marks a trace that exists: without it, a create never finished,
//!   and a later create of that id drops versions a power loss left.
//! - A record (a tool call's effects, a workspace checkpoint) is a line
//!   appended to `records.jsonl`, torn lines handled as in
//!   `messages.jsonl`: a file a record cost every tool call an inode and a
//!   rename. `get_record` reads the log through an index of where each
//!   record's newest line starts, taking in only what was appended since
//!   it last looked, so a replay asking for every call's record reads
//!   each line once.
//! - JSON files (meta.json, goal.json, records before the log) and images are written to a
//!   temporary file in the same directory and renamed into place, so a file
//!   under its final name is whole: old or new, never a mix. Leftover
//!   temporary files (`.name.tmp`) are ignored.
//! - A message is one line appended to `messages.jsonl` with one `write`:
//!   no file is created or renamed for it. An ext4 create searches for a
//!   free inode: with a file a message, 1,000 traces of 12 messages written
//!   at once took 4.4 s, with the log 1.0 s (`cargo bench -p reson-trace
//!   --bench file_writes`). A line torn by a crash mid-append (the part
//!   after the last newline) counts as never written, and is cut off
//!   before the next append, so no line is glued onto it. A line is
//!   compact JSON: a newline inside a string is escaped.
//! - A message's images are written before the message, so a message on
//!   disk has its images; a crash between them leaves an image no message
//!   names, which is ignored.
//! - The metadata is written after a message only when the message starts a
//!   branch (its parent is not the head), and every 32nd message: on ext4
//!   a rename over an existing file starts its writeback, which costs about
//!   0.2 ms, as much as the rest of a step (and an append still costs a
//!   sync). [`TraceStore::get_trace`] reconciles the metadata with the disk: `last_sequence` covers the
//!   messages newer than it, the head advances along those that continue
//!   it, and their usage, cost and time join the totals. The log is read
//!   backwards from its end only as far as those newer messages, so
//!   `get_trace` reads about 32 messages at most to catch up, and a crash
//!   between a message and its meta.json loses nothing.
//! - `events.jsonl` gets one `write` per event, torn lines handled as in
//!   `messages.jsonl`. meta.json is not rewritten per event;
//!   `last_event_id` is reconciled from the last complete line, so event
//!   ids keep increasing.
//! - A trace written before `messages.jsonl` keeps each message in a file
//!   of its own, `messages/000001.json`, by sequence. Such a trace reads
//!   as it did and goes on in the log: the store reads both (the files are
//!   never rewritten), and an empty file (left by a power loss) still
//!   counts as a sequence used, holding no message.
//!
//! One process writes a trace at a time (its runner); any number may read
//! (a reader meeting an append in progress sees a torn line: not yet
//! written).
//!
//! # fsync policy
//!
//! An fsync on this project's machines (ext4 on a virtual disk, 2 cores
//! shared with other builds) measured 0.15–0.3 ms at the median when the
//! disk was quiet and about 4 ms while other jobs kept it busy
//! (`cargo bench -p reson --bench trace` prints it). One step of the agent
//! loop stores two messages and a few events; syncing each before returning
//! ([`Durability::Immediate`]) takes 1.5 ms per step on a quiet disk and
//! tens of milliseconds on a busy one, over the 1 ms a step's writes may
//! take.
//!
//! So the default, [`Durability::Batched`], is group commit. When
//! [`TraceStore::add_message`] returns, the message's line (and meta.json
//! when rewritten) is with the OS: every reader sees it, and it survives
//! the process being killed at any instant. A background thread fsyncs what
//! was written, files first and then the directories naming them, in write
//! order, within about one fsync's time; [`TraceStore::sync`] awaits it
//! and reports any failure (runners call it when a run ends). A step then
//! costs about 0.2 ms. A power loss or kernel crash may lose the last
//! moments of writes: on ext4 (data=ordered, the default) a replaced file
//! comes back whole, old or new, and an appended log comes back with its
//! lines up to some point, the last perhaps torn: the lines after it count
//! as never written (a head pointing at one of them falls back to the
//! newest message that survived, and the next message takes the sequence
//! after the newest one on disk or in meta.json). Where that is not
//! acceptable, use [`Durability::Immediate`]: every replaced file is
//! fsync'd before its rename and its directory after it, and the log after
//! each append, before `add_message` or `append_event` returns (a message
//! and its event, written by `add_message_with_event`, share one wait), so
//! a call that returned survives a power loss.
//!
//! Either way the fsyncs run on the store's own thread (a large group
//! commit on a few more), never on a tokio worker: an `Immediate` call
//! awaits them. The writes themselves are a few
//! small syscalls each, done inline: cheaper than a hop to a blocking thread.

#[cfg(feature = "postgres")]
mod announce;
pub mod artifact;
mod branch;
pub mod config;
#[cfg(feature = "postgres")]
pub mod database;
mod event;
mod file;
mod flush;
mod goal;
#[cfg(feature = "postgres")]
mod group;
mod image;
mod memory;
mod message;
mod migrate;
mod model;
#[cfg(feature = "postgres")]
mod postgres;
mod render;
mod store;
mod tree;
mod usage;

#[cfg(feature = "postgres")]
pub use announce::EVENTS_CHANNEL;
pub use artifact::{ObjectData, RecordData, digest_of};
pub use config::Durability;
pub use event::{Event, EventKind};
pub use file::FileTraceStore;
pub use goal::{
    AgentMode, Goal, GoalError, GoalKind, GoalKnowledge, GoalStats, GoalStatus, GoalTree,
};
pub use image::{ImageData, ImageError, ImageRef, check_image, image_media_type, sniff_image_type};
pub use memory::MemoryTraceStore;
pub use message::{ContentPart, INTERRUPTED, Message, Role, ToolCall, Usage};
pub use migrate::{Migration, copy_traces};
pub use model::{
    Collaborator, CollaboratorKind, CollaboratorStatus, Trace, TraceContext, TraceMode, TraceStatus,
};
#[cfg(feature = "postgres")]
pub use postgres::PgTraceStore;
pub use render::render_tree;
pub use store::{TraceError, TraceFilter, TraceSnapshot, TraceStore};
pub use tree::MessageTree;

#[cfg(test)]
mod tests;
