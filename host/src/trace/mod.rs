//! Traces: the durable, branchable history of every run. Every agent is a
//! trace; a sub-agent's names its caller in `parent_trace_id`.
//!
//! Messages form a tree through `parent_sequence`. Continuing appends after
//! the head; rewinding adds a message whose parent is an earlier sequence
//! (cut with [`MessageTree::rewind_point`] so that no tool call loses its
//! result). Sequences are never reused and nothing is ever deleted.
//!
//! # On disk ([`FileTraceStore`])
//!
//! ```text
//! {root}/{trace_id}/meta.json            the Trace
//!                   goal.json            the GoalTree
//!                   events.jsonl         one Event a line, append-only
//!                   messages/000001.json one Message a file, by sequence
//! ```
//!
//! # Crash safety
//!
//! Killing the host at any instant leaves every trace loadable:
//!
//! - JSON files are written to a temporary file in the same directory and
//!   renamed over the old one, so each is whole, old or new.
//! - A message file is written before the meta.json that counts it. On
//!   load ([`TraceStore::get`]) meta.json is reconciled with the disk:
//!   `last_sequence` covers message files newer than it, the head advances
//!   along those that continue it, and they join the totals.
//! - `events.jsonl` gets one `write` per event. A line torn by a crash
//!   mid-append is ignored when reading and cut off before the next append.
//!   meta.json is not rewritten per event; `last_event_id` is reconciled
//!   from the last complete line, so event ids keep increasing.
//!
//! # fsync policy
//!
//! An fsync on this project's machines (ext4 on a virtual disk, 2 cores
//! shared) costs about 4 ms at the median under load, 0.1–1 ms when idle
//! (`cargo bench -p reson --bench trace` prints it). One step of the agent
//! loop writes two messages, two meta.json and a few events: syncing those
//! before returning ([`Durability::Immediate`]) costs several fsyncs, tens
//! of milliseconds, far over the 1 ms a step's writes may take.
//!
//! So the default, [`Durability::Batched`], is group commit. When
//! [`TraceStore::add_message`] returns, the message file and meta.json
//! are with the OS: they survive the process being killed at any instant,
//! and a background thread fsyncs them (files first, then the directories
//! naming them, in write order) within about one fsync's time.
//! [`TraceStore::sync`] waits for that and reports any failure; runners call
//! it when a run ends. A power loss or kernel crash may lose the last few
//! milliseconds of writes: on ext4 (data=ordered, the default) replaced
//! files come back whole, old or new; a message file caught before its
//! sync may come back empty and then counts as never written (its sequence
//! stays used, and a head pointing at it falls back to the newest message
//! that survived). Where even that is not acceptable, use
//! [`Durability::Immediate`]: every file is fsync'd before its rename and
//! every directory after it, so a call that returned survives a power loss.

mod event;
mod file;
mod flush;
mod goal;
mod message;
mod model;
mod store;
mod tree;

pub use event::{Event, EventKind};
pub use file::{Durability, FileTraceStore};
pub use goal::{Goal, GoalError, GoalKind, GoalStats, GoalStatus, GoalTree};
pub use message::{ContentPart, Message, Role, ToolCall, Usage};
pub use model::{Collaborator, Trace, TraceContext, TraceMode, TraceStatus};
pub use store::{TraceError, TraceFilter, TraceStore};
pub use tree::MessageTree;

#[cfg(test)]
mod tests;
