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
        /// How long the call waited for an answer, in milliseconds (asks
        /// only; 0 when nobody was asked).
        #[serde(default, skip_serializing_if = "is_zero")]
        waited_ms: u64,
        /// Who answered an ask: `user alice`, `the terminal`, `the MCP
        /// client`, ...; none when a rule decided alone.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        answered_by: Option<String>,
    },
    /// A model request failed: retried when the error allows, otherwise
    /// the run ends with it. Kept so that a trace shows the attempts an
    /// answer's `attempts` counts, each with its time and error.
    ModelFailed {
        /// From 1 for the answer being asked for.
        attempt: u32,
        /// The provider's error.
        error: String,
        /// How long the attempt took, in milliseconds.
        duration_ms: u64,
        /// Whether another attempt follows.
        retrying: bool,
        /// How long the run waits before the next attempt, in milliseconds.
        #[serde(default, skip_serializing_if = "is_zero")]
        retry_in_ms: u64,
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

impl EventKind {
    /// Every kind's name, as its JSON's `kind` gives it.
    pub const NAMES: [&'static str; 9] = [
        "trace_started",
        "message_added",
        "tool_started",
        "tool_finished",
        "goal_changed",
        "permission_decided",
        "model_failed",
        "compacted",
        "trace_finished",
    ];

    /// Its name, as its JSON's `kind` gives it.
    pub fn name(&self) -> &'static str {
        let i = match self {
            Self::TraceStarted => 0,
            Self::MessageAdded { .. } => 1,
            Self::ToolStarted { .. } => 2,
            Self::ToolFinished { .. } => 3,
            Self::GoalChanged { .. } => 4,
            Self::PermissionDecided { .. } => 5,
            Self::ModelFailed { .. } => 6,
            Self::Compacted { .. } => 7,
            Self::TraceFinished { .. } => 8,
        };
        Self::NAMES[i]
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
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

    #[test]
    fn each_kind_is_named_as_its_json_tags_it() {
        let kinds = [
            EventKind::TraceStarted,
            EventKind::MessageAdded { message: Message::new(crate::Role::User, "hi") },
            EventKind::ToolStarted {
                call_id: "c".into(),
                name: "t".into(),
                arguments: "{}".into(),
            },
            EventKind::ToolFinished {
                call_id: "c".into(),
                name: "t".into(),
                ok: true,
                summary: String::new(),
            },
            EventKind::GoalChanged { tree: GoalTree::default() },
            EventKind::PermissionDecided {
                call_id: "c".into(),
                tool: "t".into(),
                decision: "ask-once".into(),
                rule: None,
                waited_ms: 1200,
                answered_by: Some("user alice".into()),
            },
            EventKind::ModelFailed {
                attempt: 1,
                error: "503".into(),
                duration_ms: 4,
                retrying: true,
                retry_in_ms: 500,
            },
            EventKind::Compacted {
                level: 1,
                goals: Vec::new(),
                sequences: Vec::new(),
                summary_sequence: None,
                tokens_before: 0,
                tokens_after: 0,
            },
            EventKind::TraceFinished { status: TraceStatus::Completed, error: None },
        ];
        assert_eq!(kinds.len(), EventKind::NAMES.len());
        for kind in kinds {
            let json = serde_json::to_value(Event { id: 1, at_ms: 0, kind: kind.clone() }).unwrap();
            assert_eq!(json["kind"], kind.name());
            assert_eq!(serde_json::from_value::<Event>(json).unwrap().kind, kind);
        }
    }
}
