//! Permissions at run time: the host's rules decide each tool call; `ask`
//! goes to an approver (a person at a terminal, or a library caller answering
//! pending approvals). The model cannot change any of it.

use crate::policy::{Decision, RuleSet};
use serde::Serialize;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

/// A call waiting for someone's approval.
#[derive(Debug, Clone, Serialize)]
pub struct ApprovalRequest {
    /// Answer with this id.
    pub id: u64,
    /// The trace.
    pub trace_id: String,
    /// The model's call id.
    pub call_id: String,
    /// The tool.
    pub tool: String,
    /// Its arguments, as the model wrote them.
    pub arguments: String,
    /// The rule that asked, rendered; none when the default did.
    pub rule: Option<String>,
}

/// An answer to an [`ApprovalRequest`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Answer {
    /// Run this call.
    Once,
    /// Run this call and, for the rest of the run, every call the same rule
    /// (or, without a rule, the same tool) asks about.
    Always,
    /// Do not run it.
    Deny,
}

/// Someone who answers approval requests. `None` means no answer came in
/// time, which denies.
pub trait Approver: Send + Sync {
    /// Answers `request`, blocking until there is an answer. `announce`
    /// puts the request on the run's event stream; call it once the
    /// approver is ready to take an answer.
    fn approve(
        &self,
        request: &ApprovalRequest,
        announce: &dyn Fn(&ApprovalRequest),
    ) -> Option<Answer>;
}

/// Approvals answered through a library call: each request waits, up to a
/// timeout, for [`PendingApprovals::answer`].
pub struct PendingApprovals {
    timeout: Duration,
    waiting: Mutex<HashMap<u64, mpsc::Sender<Answer>>>,
}

impl PendingApprovals {
    /// Requests wait `timeout` for an answer, then are denied.
    pub fn new(timeout: Duration) -> Arc<Self> {
        Arc::new(Self { timeout, waiting: Mutex::default() })
    }

    /// Answers request `id`; false when it is not waiting (answered, timed
    /// out, or unknown).
    pub fn answer(&self, id: u64, answer: Answer) -> bool {
        match self.waiting.lock().expect("approvals").remove(&id) {
            Some(reply) => reply.send(answer).is_ok(),
            None => false,
        }
    }
}

impl Approver for PendingApprovals {
    fn approve(
        &self,
        request: &ApprovalRequest,
        announce: &dyn Fn(&ApprovalRequest),
    ) -> Option<Answer> {
        let (reply, answer) = mpsc::channel();
        self.waiting.lock().expect("approvals").insert(request.id, reply);
        announce(request);
        let result = answer.recv_timeout(self.timeout).ok();
        self.waiting.lock().expect("approvals").remove(&request.id);
        result
    }
}

/// What the checker decided for one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Ruling {
    pub(crate) run: bool,
    /// `allow`, `deny`, `ask-once`, `ask-always`, `ask-remembered`,
    /// `ask-denied` or `ask-timeout`.
    pub(crate) decision: &'static str,
    pub(crate) rule: Option<String>,
}

/// The rules and the approver of a run.
pub struct Permissions {
    rules: RuleSet,
    approver: Arc<dyn Approver>,
    always: Mutex<HashSet<String>>,
    next_id: AtomicU64,
}

impl Permissions {
    /// Decides with `rules`; `ask` goes to `approver`.
    pub fn new(rules: RuleSet, approver: Arc<dyn Approver>) -> Self {
        Self { rules, approver, always: Mutex::default(), next_id: AtomicU64::new(1) }
    }

    /// Whether `tool` is offered to the model at all.
    pub fn offered(&self, tool: &str) -> bool {
        self.rules.offered(tool)
    }

    /// Decides one call; `announce` puts an approval request on the run's
    /// event stream.
    pub(crate) fn check(
        &self,
        trace_id: &str,
        call: &crate::trace::ToolCall,
        announce: &dyn Fn(&ApprovalRequest),
    ) -> Ruling {
        let args = serde_json::from_str(&call.arguments).unwrap_or(serde_json::Value::Null);
        let verdict = self.rules.decide(&call.name, &args);
        let rule = verdict.rule.clone();
        let ruling = |run, decision| Ruling { run, decision, rule: rule.clone() };
        match verdict.decision {
            Decision::Allow => ruling(true, "allow"),
            Decision::Deny => ruling(false, "deny"),
            Decision::Ask => {
                // "Always" covers what the same rule asks about; without a
                // rule, the same tool.
                let key = verdict.rule.clone().unwrap_or_else(|| format!("tool {}", call.name));
                if self.always.lock().expect("always").contains(&key) {
                    return ruling(true, "ask-remembered");
                }
                let request = ApprovalRequest {
                    id: self.next_id.fetch_add(1, Ordering::Relaxed),
                    trace_id: trace_id.to_owned(),
                    call_id: call.id.clone(),
                    tool: call.name.clone(),
                    arguments: call.arguments.clone(),
                    rule: verdict.rule.clone(),
                };
                match self.approver.approve(&request, announce) {
                    Some(Answer::Once) => ruling(true, "ask-once"),
                    Some(Answer::Always) => {
                        self.always.lock().expect("always").insert(key);
                        ruling(true, "ask-always")
                    }
                    Some(Answer::Deny) => ruling(false, "ask-denied"),
                    None => ruling(false, "ask-timeout"),
                }
            }
        }
    }
}
