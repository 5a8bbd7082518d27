//! Events of a trace, as kept in `events.jsonl` for clients that replay or
//! catch up on a run.

use super::goal::GoalTree;
use super::message::Message;
use super::model::TraceStatus;
use serde::{Deserialize, Serialize};

/// One persisted event: one line of `events.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// From 1 in each trace, increasing.
    pub id: u64,
    /// Milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// What happened.
    #[serde(flatten)]
    pub kind: EventKind,
}

/// What happened. Streamed text deltas are deliberately not events here:
/// there are hundreds per answer, persisting each would multiply the writes
/// of a step, and the `message_added` that ends the answer carries the whole
/// text anyway. Live clients get deltas from the runner's stream instead.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[expect(
    clippy::large_enum_variant,
    reason = "events are built one at a time and written out; boxing the message would add an allocation per event and change how callers build them"
)]
pub enum EventKind {
    /// A run started (a new trace, or a continue or rewind of one).
    TraceStarted,
    /// A message was stored.
    MessageAdded {
        /// The message as stored, with its sequence.
        message: Message,
    },
    /// A tool call began.
    ToolStarted {
        /// The call's id.
        call_id: String,
        /// The tool.
        name: String,
        /// Arguments as JSON text.
        arguments: String,
    },
    /// A tool call ended.
    ToolFinished {
        /// The call's id.
        call_id: String,
        /// The tool.
        name: String,
        /// Whether the tool succeeded.
        ok: bool,
        /// A short description of the outcome.
        summary: String,
    },
    /// The goal tree changed.
    GoalChanged {
        /// The whole tree after the change.
        tree: GoalTree,
    },
    /// The permission checker decided a tool call.
    PermissionDecided {
        /// The call id.
        call_id: String,
        /// The tool.
        tool: String,
        /// `allow`, `deny`, `ask-once`, `ask-always` (approved), `ask-denied`
        /// or `ask-timeout`.
        decision: String,
        /// The rule that decided, rendered; none for the default.
        rule: Option<String>,
    },
    /// The history was compacted before a model call: at level 1 the
    /// messages of closed goals were left out of the requests from here
    /// on; at level 2 they were summarised into a message whose parent
    /// skips them (nothing is deleted).
    Compacted {
        /// 1 or 2.
        level: u8,
        /// Closed goals whose messages were left out (level 1).
        goals: Vec<String>,
        /// The sequences left out (level 1) or summarised (level 2).
        sequences: Vec<u64>,
        /// The summary message (level 2).
        summary_sequence: Option<u64>,
        /// Tokens of the request before.
        tokens_before: u64,
        /// Tokens of the request after.
        tokens_after: u64,
    },
    /// A run ended.
    TraceFinished {
        /// How it ended.
        status: TraceStatus,
        /// Why, when it failed.
        error: Option<String>,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_flat_json_objects_tagged_by_kind() {
        let event = Event {
            id: 3,
            at_ms: 7,
            kind: EventKind::ToolFinished {
                call_id: "c1".into(),
                name: "read".into(),
                ok: true,
                summary: "2 lines".into(),
            },
        };
        let line = serde_json::to_string(&event).unwrap();
        assert_eq!(
            line,
            r#"{"id":3,"at_ms":7,"kind":"tool_finished","call_id":"c1","name":"read","ok":true,"summary":"2 lines"}"#
        );
        assert_eq!(serde_json::from_str::<Event>(&line).unwrap(), event);
        let started = Event { id: 1, at_ms: 0, kind: EventKind::TraceStarted };
        let line = serde_json::to_string(&started).unwrap();
        assert_eq!(line, r#"{"id":1,"at_ms":0,"kind":"trace_started"}"#);
        assert_eq!(serde_json::from_str::<Event>(&line).unwrap(), started);
    }
}
