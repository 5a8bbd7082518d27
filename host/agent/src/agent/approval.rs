//! Permissions at run time: the host's rules decide each tool call; `ask`
//! goes to an approver (a person at a terminal, or a library caller answering
//! pending approvals). The model cannot change any of it.

use crate::policy::{Decision, RuleSet};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::oneshot;

/// A call waiting for someone's approval.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ApprovalRequest {
    /// Answer with this id: `ap_` and 32 random hex digits, so that no
    /// one can guess another's pending approval from their own.
    pub id: String,
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
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

pub use crate::config::Unattended;

impl Unattended {
    /// The answer this policy gives; `None` (no answer) for `never`.
    pub fn answer(self) -> Option<Answer> {
        match self {
            Self::Never => None,
            Self::Once => Some(Answer::Once),
            Self::All => Some(Answer::Always),
        }
    }
}

/// Puts an approval request on the run's event stream. A named type so
/// that `#[async_trait]` leaves the lifetime of its argument free (written
/// out, `&(dyn Fn(&ApprovalRequest) + Send + Sync)` gets a fixed one).
pub type Announce = dyn Fn(&ApprovalRequest) + Send + Sync;

/// Someone who answers approval requests. `None` means no answer came in
/// time, which denies.
#[async_trait]
pub trait Approver: Send + Sync {
    /// Answers `request` once there is an answer. `announce` puts the
    /// request on the run's event stream; call it once the approver is
    /// ready to take an answer. A stop of the run drops this future, so an
    /// approver must not rely on running to its end.
    async fn approve(&self, request: &ApprovalRequest, announce: &Announce) -> Option<Answer>;

    /// As [`approve`](Self::approve), with who gave the answer, for the
    /// trace's record of the decision. By default that is
    /// [`answerer`](Self::answerer); an approver that many people answer
    /// names the one who did.
    async fn approve_by(
        &self,
        request: &ApprovalRequest,
        announce: &Announce,
    ) -> Option<(Answer, String)> {
        let answer = self.approve(request, announce).await?;
        Some((answer, self.answerer().to_owned()))
    }

    /// Who answers through this approver, as the trace records it:
    /// `the terminal`, `the MCP client`, ...
    fn answerer(&self) -> &str {
        "the approver"
    }

    /// Whether no one is there to ask (see [`Unattended`]): no answer from
    /// it is then recorded as `ask-unattended`, not `ask-timeout`.
    fn unattended(&self) -> bool {
        false
    }
}

/// A request waiting for its answer: the request, its place in arrival
/// order, and its reply (the answer and who gave it).
type Queued = (ApprovalRequest, u64, oneshot::Sender<(Answer, String)>);

/// Approvals answered through a library call: each request waits, up to a
/// timeout, for [`PendingApprovals::answer`]. One set may serve many runs
/// at once: request ids are random, never reused.
pub struct PendingApprovals {
    timeout: Duration,
    /// By id.
    waiting: Mutex<HashMap<String, Queued>>,
    arrivals: AtomicU64,
}

impl PendingApprovals {
    /// Requests wait `timeout` for an answer, then are denied.
    pub fn new(timeout: Duration) -> Arc<Self> {
        Arc::new(Self { timeout, waiting: Mutex::default(), arrivals: AtomicU64::new(0) })
    }

    /// Answers request `id`; false when it is not waiting (answered, timed
    /// out, or unknown).
    pub fn answer(&self, id: &str, answer: Answer) -> bool {
        self.answer_by(id, answer, self.answerer())
    }

    /// Answers request `id` as `by` (`user alice`, say), which the trace
    /// records; false when it is not waiting.
    pub fn answer_by(&self, id: &str, answer: Answer, by: &str) -> bool {
        match self.waiting.lock().expect("approvals").remove(id) {
            Some((_, _, reply)) => reply.send((answer, by.to_owned())).is_ok(),
            None => false,
        }
    }

    /// The requests waiting for an answer, oldest first.
    pub fn pending(&self) -> Vec<ApprovalRequest> {
        let mut pending: Vec<(u64, ApprovalRequest)> = self
            .waiting
            .lock()
            .expect("approvals")
            .values()
            .map(|(request, arrival, _)| (*arrival, request.clone()))
            .collect();
        pending.sort_by_key(|(arrival, _)| *arrival);
        pending.into_iter().map(|(_, request)| request).collect()
    }
}

/// Takes a request off the waiting list however its wait ends: answered,
/// timed out, or dropped by a stop of the run.
struct Waiting<'a> {
    approvals: &'a PendingApprovals,
    id: &'a str,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.approvals.waiting.lock().expect("approvals").remove(self.id);
    }
}

#[async_trait]
impl Approver for PendingApprovals {
    async fn approve(&self, request: &ApprovalRequest, announce: &Announce) -> Option<Answer> {
        Some(self.approve_by(request, announce).await?.0)
    }

    async fn approve_by(
        &self,
        request: &ApprovalRequest,
        announce: &Announce,
    ) -> Option<(Answer, String)> {
        let (reply, answer) = oneshot::channel();
        let arrival = self.arrivals.fetch_add(1, Ordering::Relaxed);
        let waiting = (request.clone(), arrival, reply);
        self.waiting.lock().expect("approvals").insert(request.id.clone(), waiting);
        let _waiting = Waiting { approvals: self, id: &request.id };
        announce(request);
        tokio::time::timeout(self.timeout, answer).await.ok()?.ok()
    }

    fn answerer(&self) -> &str {
        "the API"
    }
}

/// What the checker decided for one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ruling {
    /// Whether the call may run.
    pub run: bool,
    /// `allow`, `deny`, `ask-once`, `ask-always`, `ask-remembered`,
    /// `ask-denied`, `ask-timeout` or `ask-unattended` (no one there to
    /// ask, and the user's policy denies).
    pub decision: &'static str,
    /// The rule that decided, when one did.
    pub rule: Option<String>,
    /// Who answered, when someone was asked.
    pub answered_by: Option<String>,
}

/// A fresh approval request id: `ap_` and 16 bytes of the OS's randomness
/// in hex. Random rather than counted, so that a user who sees their own
/// approvals learns nothing of the ids of anyone else's; and never the
/// same twice, so that runs sharing one approver (a server's
/// [`PendingApprovals`]) never collide.
fn new_request_id() -> String {
    let mut bytes = [0u8; 16];
    if getrandom::fill(&mut bytes).is_err() {
        // SipHash under the process's random keys, over a counter: as
        // unpredictable without the keys, should the OS source fail.
        use std::hash::{BuildHasher, Hasher};
        static FALLBACK: AtomicU64 = AtomicU64::new(0);
        let keys = std::collections::hash_map::RandomState::new();
        for (i, chunk) in bytes.chunks_mut(8).enumerate() {
            let mut hasher = keys.build_hasher();
            hasher.write_u64(FALLBACK.fetch_add(1, Ordering::Relaxed));
            hasher.write_usize(i);
            chunk.copy_from_slice(&hasher.finish().to_le_bytes());
        }
    }
    format!("ap_{}", hex::encode(bytes))
}

/// The rules and the approver of a run.
pub struct Permissions {
    /// Every set must agree: a call gets the strictest of their decisions.
    /// One set for a root run; a sub-agent adds its preset's to its
    /// parent's.
    rules: Vec<RuleSet>,
    approver: Arc<dyn Approver>,
    always: Mutex<HashSet<String>>,
}

impl Permissions {
    /// Decides with `rules`; `ask` goes to `approver`.
    pub fn new(rules: RuleSet, approver: Arc<dyn Approver>) -> Self {
        Self { rules: vec![rules], approver, always: Mutex::default() }
    }

    /// A sub-agent's permissions: these rules and `rules` too, each call
    /// getting the stricter decision (deny over ask over allow), so a
    /// sub-agent can never do more than its parent. `ask` goes to the same
    /// approver; approvals given "always" to the parent are not inherited.
    pub(crate) fn narrowed(&self, rules: RuleSet) -> Self {
        let mut all = self.rules.clone();
        all.push(rules);
        Self { rules: all, approver: self.approver.clone(), always: Mutex::default() }
    }

    /// Whether `tool` is offered to the model at all.
    pub fn offered(&self, tool: &str) -> bool {
        self.rules.iter().all(|rules| rules.offered(tool))
    }

    /// Decides one call; `announce` puts an approval request on the run's
    /// event stream.
    pub async fn check(
        &self,
        trace_id: &str,
        call: &reson_trace::ToolCall,
        announce: &Announce,
    ) -> Ruling {
        let args = serde_json::from_str(&call.arguments).unwrap_or(serde_json::Value::Null);
        let strictness = |d: Decision| match d {
            Decision::Allow => 0,
            Decision::Ask => 1,
            Decision::Deny => 2,
        };
        let verdict = self
            .rules
            .iter()
            .map(|rules| rules.decide(&call.name, &args))
            .reduce(|a, b| if strictness(b.decision) > strictness(a.decision) { b } else { a })
            .expect("at least one rule set");
        let rule = verdict.rule.clone();
        let ruling =
            |run, decision| Ruling { run, decision, rule: rule.clone(), answered_by: None };
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
                    id: new_request_id(),
                    trace_id: trace_id.to_owned(),
                    call_id: call.id.clone(),
                    tool: call.name.clone(),
                    arguments: call.arguments.clone(),
                    rule: verdict.rule.clone(),
                };
                let Some((answer, by)) = self.approver.approve_by(&request, announce).await else {
                    let why =
                        if self.approver.unattended() { "ask-unattended" } else { "ask-timeout" };
                    return ruling(false, why);
                };
                let decided = match answer {
                    Answer::Once => ruling(true, "ask-once"),
                    Answer::Always => {
                        self.always.lock().expect("always").insert(key);
                        ruling(true, "ask-always")
                    }
                    Answer::Deny => ruling(false, "ask-denied"),
                };
                Ruling { answered_by: Some(by), ..decided }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(id: &str) -> ApprovalRequest {
        ApprovalRequest {
            id: id.into(),
            trace_id: "t".into(),
            call_id: "c".into(),
            tool: "shell".into(),
            arguments: "{}".into(),
            rule: None,
        }
    }

    #[tokio::test]
    async fn an_answer_reaches_the_waiting_request_once() {
        let approvals = PendingApprovals::new(Duration::from_secs(30));
        let answering = approvals.clone();
        let announce = move |r: &ApprovalRequest| {
            // Announced only once the request can take its answer.
            assert!(answering.answer(&r.id, Answer::Always));
        };
        assert_eq!(approvals.approve(&request("ap_7"), &announce).await, Some(Answer::Always));
        assert!(!approvals.answer("ap_7", Answer::Once), "a request is answered once");
    }

    #[tokio::test]
    async fn pending_lists_the_waiting_requests_until_they_end() {
        let approvals = PendingApprovals::new(Duration::from_secs(30));
        let listing = approvals.clone();
        let announce = move |r: &ApprovalRequest| {
            let pending = listing.pending();
            assert_eq!(pending.iter().map(|p| &p.id).collect::<Vec<_>>(), [&r.id]);
            assert_eq!(pending[0].call_id, "c");
            assert!(listing.answer(&r.id, Answer::Deny));
        };
        assert_eq!(approvals.approve(&request("ap_9"), &announce).await, Some(Answer::Deny));
        assert!(approvals.pending().is_empty(), "an answered request is no longer pending");
    }

    #[tokio::test]
    async fn runs_sharing_an_approver_get_distinct_request_ids() {
        let rule = crate::policy::Rule {
            decision: Decision::Ask,
            tool: "shell".into(),
            pattern: None,
            examples: Vec::new(),
            counter_examples: Vec::new(),
        };
        let rules = RuleSet::compile(&[rule]).unwrap();
        let approvals = PendingApprovals::new(Duration::from_millis(1));
        let (a, b) = (
            Permissions::new(rules.clone(), approvals.clone()),
            Permissions::new(rules, approvals.clone()),
        );
        let call =
            reson_trace::ToolCall { id: "c".into(), name: "shell".into(), arguments: "{}".into() };
        let ids = Arc::new(Mutex::new(Vec::new()));
        let seen = ids.clone();
        let announce = move |r: &ApprovalRequest| seen.lock().unwrap().push(r.id.clone());
        for permissions in [&a, &b, &a, &b] {
            assert_eq!(permissions.check("t", &call, &announce).await.decision, "ask-timeout");
        }
        let mut ids = ids.lock().unwrap().clone();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), 4, "ids collided: {ids:?}");
    }

    #[test]
    fn request_ids_are_random_and_unguessable_from_one_another() {
        let ids: Vec<String> = (0..64).map(|_| new_request_id()).collect();
        for id in &ids {
            let hex = id.strip_prefix("ap_").unwrap_or_else(|| panic!("{id}"));
            assert!(hex.len() == 32 && hex.bytes().all(|b| b.is_ascii_hexdigit()), "{id}");
        }
        let distinct: HashSet<&String> = ids.iter().collect();
        assert_eq!(distinct.len(), ids.len());
        // Not a counter: consecutive ids share no long common prefix.
        let shared =
            |a: &str, b: &str| a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count();
        let longest = ids.windows(2).map(|w| shared(&w[0], &w[1])).max().unwrap();
        assert!(longest < 3 + 8, "ids look sequential: {ids:?}");
    }

    #[tokio::test]
    async fn no_answer_in_time_denies() {
        let approvals = PendingApprovals::new(Duration::from_millis(20));
        assert_eq!(approvals.approve(&request("ap_1"), &|_: &ApprovalRequest| {}).await, None);
        assert!(!approvals.answer("ap_1", Answer::Once));
    }

    #[tokio::test]
    async fn a_dropped_wait_is_no_longer_waiting() {
        let approvals = PendingApprovals::new(Duration::from_secs(30));
        let (request, announce) = (request("ap_2"), |_: &ApprovalRequest| {});
        let wait = approvals.approve(&request, &announce);
        let cut = tokio::time::timeout(Duration::from_millis(20), wait).await;
        assert!(cut.is_err(), "the wait ended on its own: {cut:?}");
        assert!(!approvals.answer("ap_2", Answer::Once), "a dropped wait still took an answer");
    }

    #[tokio::test]
    async fn narrowed_permissions_take_the_stricter_decision_and_share_request_ids() {
        use crate::policy::Rule;
        let rule = |decision, tool: &str| Rule {
            decision,
            tool: tool.into(),
            pattern: None,
            examples: Vec::new(),
            counter_examples: Vec::new(),
        };
        let parent_rules =
            RuleSet::compile(&[rule(Decision::Ask, "write"), rule(Decision::Allow, "read")])
                .unwrap()
                .with_default(Decision::Allow);
        let approvals = PendingApprovals::new(Duration::from_secs(30));
        let parent = Permissions::new(parent_rules, approvals.clone());
        // The child's own rules would allow everything and deny `read`.
        let child_rules =
            RuleSet::compile(&[rule(Decision::Allow, "*"), rule(Decision::Deny, "read")]).unwrap();
        let child = parent.narrowed(child_rules);
        assert!(parent.offered("read") && !child.offered("read"));
        let call = |name: &str| reson_trace::ToolCall {
            id: "c".into(),
            name: name.into(),
            arguments: "{}".into(),
        };
        let ids = Arc::new(Mutex::new(Vec::new()));
        let (seen, answering) = (ids.clone(), approvals.clone());
        let announce = move |r: &ApprovalRequest| {
            seen.lock().unwrap().push(r.id.clone());
            assert!(answering.answer(&r.id, Answer::Once));
        };
        assert_eq!(child.check("t", &call("read"), &announce).await.decision, "deny");
        assert_eq!(child.check("t", &call("write"), &announce).await.decision, "ask-once");
        assert_eq!(parent.check("t", &call("write"), &announce).await.decision, "ask-once");
        assert_eq!(child.check("t", &call("list"), &announce).await.decision, "allow");
        let ids = ids.lock().unwrap().clone();
        assert_eq!(ids.len(), 2, "one approver, asked twice: {ids:?}");
        assert_ne!(ids[0], ids[1]);
    }
}
