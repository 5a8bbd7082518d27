//! `ask` over MCP: the question goes to the person at the client as an
//! elicitation (a form with one checkbox: allow every call the same rule
//! asks about, for the rest of the session). A client of an older revision
//! is asked with a request from server to client; a 2026-07-28 client,
//! which takes none, gets the question in an input-required result and
//! sends the call again with the answer (SEP-2322).

use async_trait::async_trait;
use reson_agent::agent::{Announce, Answer, ApprovalRequest, Approver};
use reson_text::text::{Lines, escape_controls};
use rmcp::model::{
    ClientCapabilities, ElicitRequest, ElicitRequestParams, ElicitResult, ElicitationAction,
    ElicitationSchema, InputRequest, InputRequests, InputResponses,
};
use rmcp::service::{ElicitationError, ElicitationMode};
use rmcp::{Peer, RoleServer};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

/// The key of the approval question among an input-required result's
/// requests, and of its answer in the call sent again.
pub(super) const APPROVAL_INPUT: &str = "reson/approval";

/// The elicitation form: accepting it allows the call.
#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
struct ApprovalForm {
    /// Also allow, for the rest of this session, every call the same rule
    /// asks about.
    #[serde(default)]
    always: bool,
}

rmcp::elicit_safe!(ApprovalForm);

/// Whether `peer` takes form elicitations.
pub(super) fn can_ask(peer: &Peer<RoleServer>) -> bool {
    peer.supported_elicitation_modes().contains(&ElicitationMode::Form)
}

/// Asks the client of one session.
pub(super) struct ClientApprover {
    peer: OnceLock<Peer<RoleServer>>,
    timeout: Duration,
}

impl ClientApprover {
    pub(super) fn new(timeout: Duration) -> Self {
        Self { peer: OnceLock::new(), timeout }
    }

    /// The session's client, known once it has spoken.
    pub(super) fn attach(&self, peer: &Peer<RoleServer>) {
        let _ = self.peer.set(peer.clone());
    }
}

#[async_trait]
impl Approver for ClientApprover {
    async fn approve(&self, request: &ApprovalRequest, _announce: &Announce) -> Option<Answer> {
        let peer = self.peer.get().filter(|p| can_ask(p))?;
        match peer.elicit_with_timeout::<ApprovalForm>(question(request), Some(self.timeout)).await
        {
            Ok(Some(ApprovalForm { always: true })) => Some(Answer::Always),
            Ok(_) => Some(Answer::Once),
            Err(ElicitationError::UserDeclined | ElicitationError::UserCancelled) => {
                Some(Answer::Deny)
            }
            Err(_) => None,
        }
    }

    fn answerer(&self) -> &str {
        "the MCP client"
    }
}

/// The question put to the person at the client.
fn question(request: &ApprovalRequest) -> String {
    let rule = request.rule.as_deref().map(|r| format!(" (rule {r})")).unwrap_or_default();
    // The arguments are the caller's text: escaped, so they cannot forge
    // the rest of the question.
    format!(
        "Allow the tool `{}` to run with arguments {}{rule}?",
        request.tool,
        escape_controls(&request.arguments, Lines::Escape)
    )
}

/// Whether a client with `capabilities` (from a 2026-07-28 request's
/// `_meta`) takes form elicitations; declaring elicitation with no mode
/// means form, as before modes existed.
pub(super) fn takes_forms(capabilities: Option<&ClientCapabilities>) -> bool {
    capabilities
        .and_then(|c| c.elicitation.as_ref())
        .is_some_and(|e| e.form.is_some() || e.url.is_none())
}

/// Why an answer sent with a call again cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("the answer to `{APPROVAL_INPUT}` is not an elicitation result Reson can read: {0}")]
pub(super) struct BadAnswer(String);

/// A 2026-07-28 call's approval: the answer the call carries when it is
/// sent again, and the question when it carries none. The client's
/// answer stands for the person at the client, as the answer to an
/// elicitation of an older revision does; it holds for this call only,
/// since a stateless client has no session to remember "always" in.
pub(super) struct InlineApprover {
    answer: Option<Answer>,
    asked: Mutex<Option<String>>,
}

impl InlineApprover {
    /// The approver of a call whose `inputResponses` are `responses`.
    pub(super) fn new(responses: Option<&InputResponses>) -> Result<Self, BadAnswer> {
        let answer = match responses.and_then(|r| r.get(APPROVAL_INPUT)) {
            None => None,
            Some(value) => {
                let result: ElicitResult =
                    serde_json::from_value(value.clone()).map_err(|e| BadAnswer(e.to_string()))?;
                Some(match result.action {
                    ElicitationAction::Accept => Answer::Once,
                    _ => Answer::Deny,
                })
            }
        };
        Ok(Self { answer, asked: Mutex::new(None) })
    }

    /// The question to send back when the call needs an answer it did not
    /// carry.
    pub(super) fn input_requests(&self) -> Result<Option<InputRequests>, serde_json::Error> {
        let Some(message) = self.asked.lock().expect("approval question").take() else {
            return Ok(None);
        };
        let params = ElicitRequestParams::FormElicitationParams {
            meta: None,
            message,
            requested_schema: ElicitationSchema::from_type::<ApprovalForm>()?,
        };
        let request = InputRequest::Elicitation(ElicitRequest::new(params));
        Ok(Some(InputRequests::from([(APPROVAL_INPUT.to_owned(), request)])))
    }
}

#[async_trait]
impl Approver for InlineApprover {
    async fn approve(&self, request: &ApprovalRequest, _announce: &Announce) -> Option<Answer> {
        if self.answer.is_none() {
            *self.asked.lock().expect("approval question") = Some(question(request));
        }
        self.answer
    }

    fn answerer(&self) -> &str {
        "the MCP client"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> ApprovalRequest {
        ApprovalRequest {
            id: "ap_1".into(),
            trace_id: "mcp".into(),
            call_id: "c".into(),
            tool: "count".into(),
            arguments: "{\"a\":\"\\u001b[2J\"}".into(),
            rule: None,
        }
    }

    fn answered(value: serde_json::Value) -> Result<InlineApprover, BadAnswer> {
        InlineApprover::new(Some(&InputResponses::from([(APPROVAL_INPUT.to_owned(), value)])))
    }

    #[tokio::test]
    async fn a_call_without_an_answer_asks_and_one_with_it_is_decided() {
        let asking = InlineApprover::new(None).unwrap();
        assert_eq!(asking.approve(&request(), &|_| {}).await, None);
        let requests = asking.input_requests().unwrap().expect("a question");
        let Some(InputRequest::Elicitation(elicit)) = requests.get(APPROVAL_INPUT) else {
            panic!("{requests:?}")
        };
        let ElicitRequestParams::FormElicitationParams { message, .. } = &elicit.params else {
            panic!("{elicit:?}")
        };
        assert!(message.contains("`count`") && !message.contains('\u{1b}'), "{message}");

        let accepted = answered(serde_json::json!({ "action": "accept", "content": {} })).unwrap();
        assert_eq!(accepted.approve(&request(), &|_| {}).await, Some(Answer::Once));
        assert!(accepted.input_requests().unwrap().is_none(), "answered: nothing to ask");
        let declined = answered(serde_json::json!({ "action": "decline" })).unwrap();
        assert_eq!(declined.approve(&request(), &|_| {}).await, Some(Answer::Deny));
        assert!(answered(serde_json::json!("yes")).is_err(), "an answer of the wrong shape");
    }

    #[test]
    fn declaring_elicitation_without_a_mode_means_forms() {
        let caps = |v| serde_json::from_value::<ClientCapabilities>(v).unwrap();
        assert!(takes_forms(Some(&caps(serde_json::json!({ "elicitation": {} })))));
        assert!(takes_forms(Some(&caps(serde_json::json!({ "elicitation": { "form": {} } })))));
        assert!(!takes_forms(Some(&caps(serde_json::json!({ "elicitation": { "url": {} } })))));
        assert!(!takes_forms(Some(&caps(serde_json::json!({})))));
        assert!(!takes_forms(None));
    }
}
