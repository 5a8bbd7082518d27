//! A trace's metadata (`meta.json`): what ran, for whom, how far it got
//! and what it cost.

use super::goal::GoalStats;
use serde::{Deserialize, Serialize};
use std::time::{SystemTime, UNIX_EPOCH};

/// How a trace is driven.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TraceMode {
    /// An interactive agent, continued turn by turn.
    Agent,
    /// A task run to completion without a user in the loop.
    Task,
}

/// Where a trace stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TraceStatus {
    /// A run is under way (or was, when the host died).
    Running,
    /// The last run finished normally.
    Completed,
    /// The last run ended in an error.
    Failed,
    /// The last run was stopped on request.
    Stopped,
    /// A question to a person (an `ask_human` trace) waits for its answer.
    Waiting,
}

/// What kind of collaborator.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CollaboratorKind {
    /// Another agent (a sub-agent has a trace of its own).
    #[default]
    Agent,
    /// A person.
    Human,
}

/// Where a collaborator's work stands.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CollaboratorStatus {
    /// Working.
    #[default]
    Running,
    /// Waiting for something (an answer, an approval).
    Waiting,
    /// Done, with a summary.
    Completed,
    /// Ended without finishing.
    Failed,
}

/// Another agent (or a person) this one works with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Collaborator {
    /// How the agent refers to it.
    pub name: String,
    /// Agent or human.
    #[serde(default, rename = "type")]
    pub kind: CollaboratorKind,
    /// What it is for.
    #[serde(default)]
    pub description: String,
    /// Its trace, once it has one.
    #[serde(default)]
    pub trace_id: Option<String>,
    /// Where its work stands.
    #[serde(default)]
    pub status: CollaboratorStatus,
    /// What it reported last.
    #[serde(default)]
    pub summary: Option<String>,
}

/// Context a trace carries for the agent beyond its messages.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TraceContext {
    /// Agents this one works with.
    pub collaborators: Vec<Collaborator>,
    /// Anything else callers want kept with the trace.
    pub extra: serde_json::Map<String, serde_json::Value>,
}

/// A trace: every agent run is one. Messages, goals and events live beside
/// it in the store.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Trace {
    /// `tr_` and 12 hex digits, or an id the caller chose.
    pub id: String,
    /// Interactive agent or one-shot task.
    pub mode: TraceMode,
    /// What the agent was asked to do.
    pub task: String,
    /// The agent preset, for example `default`.
    pub agent_type: String,
    /// The user the trace belongs to; `None` for a run nobody owns (a
    /// local one without `--user`). Sub-agents' traces carry their
    /// caller's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    /// For a sub-agent: the trace that called it.
    #[serde(default)]
    pub parent_trace_id: Option<String>,
    /// For a sub-agent: the goal of the parent trace it works on.
    #[serde(default)]
    pub parent_goal_id: Option<String>,
    /// Where it stands.
    pub status: TraceStatus,
    /// Everything spent, over all messages on all branches.
    #[serde(default)]
    pub totals: GoalStats,
    /// The highest message sequence ever assigned; 0 when there are none.
    #[serde(default)]
    pub last_sequence: u64,
    /// The last message of the main path.
    #[serde(default)]
    pub head_sequence: Option<u64>,
    /// The highest event id ever assigned; 0 when there are none.
    #[serde(default)]
    pub last_event_id: u64,
    /// The model used.
    #[serde(default)]
    pub model: Option<String>,
    /// The provider plugin used.
    #[serde(default)]
    pub provider: Option<String>,
    /// The tools offered.
    #[serde(default)]
    pub tools: Vec<String>,
    /// Sampling parameters and the like, as given to the provider.
    #[serde(default)]
    pub llm_params: serde_json::Value,
    /// Collaborators and free-form context.
    #[serde(default)]
    pub context: TraceContext,
    /// The goal in focus.
    #[serde(default)]
    pub current_goal_id: Option<String>,
    /// What the run achieved.
    #[serde(default)]
    pub result_summary: Option<String>,
    /// Why the run failed.
    #[serde(default)]
    pub error_message: Option<String>,
    /// Milliseconds since the Unix epoch.
    pub created_at_ms: u64,
    /// Milliseconds since the Unix epoch.
    pub updated_at_ms: u64,
    /// When the last run ended, in milliseconds since the Unix epoch.
    #[serde(default)]
    pub finished_at_ms: Option<u64>,
}

impl Trace {
    /// A new running trace with a fresh id and nothing in it yet.
    pub fn new(mode: TraceMode, task: impl Into<String>, agent_type: impl Into<String>) -> Self {
        let now = now_ms();
        Self {
            id: new_trace_id(),
            mode,
            task: task.into(),
            agent_type: agent_type.into(),
            uid: None,
            parent_trace_id: None,
            parent_goal_id: None,
            status: TraceStatus::Running,
            totals: GoalStats::default(),
            last_sequence: 0,
            head_sequence: None,
            last_event_id: 0,
            model: None,
            provider: None,
            tools: Vec::new(),
            llm_params: serde_json::Value::Object(serde_json::Map::new()),
            context: TraceContext::default(),
            current_goal_id: None,
            result_summary: None,
            error_message: None,
            created_at_ms: now,
            updated_at_ms: now,
            finished_at_ms: None,
        }
    }
}

/// Milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// `tr_` and 48 random bits. `RandomState` is seeded from the OS once per
/// process; hashing the clock and a counter in makes each id fresh without
/// a random-number crate.
fn new_trace_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos()));
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.write_u32(std::process::id());
    format!("tr_{:012x}", h.finish() & 0xffff_ffff_ffff)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_traces_get_distinct_well_formed_ids() {
        let a = Trace::new(TraceMode::Task, "t", "default");
        let b = Trace::new(TraceMode::Task, "t", "default");
        assert_ne!(a.id, b.id);
        assert_eq!(a.id.len(), 15);
        assert!(
            a.id.starts_with("tr_") && a.id[3..].bytes().all(|c| c.is_ascii_hexdigit()),
            "{}",
            a.id
        );
    }

    #[test]
    fn meta_json_uses_snake_case_enums() {
        let trace = Trace::new(TraceMode::Agent, "t", "default");
        let json = serde_json::to_value(&trace).unwrap();
        assert_eq!(json["mode"], "agent");
        assert_eq!(json["status"], "running");
        assert_eq!(serde_json::from_value::<Trace>(json).unwrap(), trace);
    }
}
