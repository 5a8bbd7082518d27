//! `ask` over MCP: the question goes to the person at the client as an
//! elicitation (a form with one checkbox: allow every call the same rule
//! asks about, for the rest of the session).

use async_trait::async_trait;
use reson_agent::agent::{Announce, Answer, ApprovalRequest, Approver};
use reson_text::text::{Lines, escape_controls};
use rmcp::service::{ElicitationError, ElicitationMode};
use rmcp::{Peer, RoleServer};
use std::sync::OnceLock;
use std::time::Duration;

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
        let rule = request.rule.as_deref().map(|r| format!(" (rule {r})")).unwrap_or_default();
        // The arguments are the caller's text: escaped, so they cannot
        // forge the rest of the question.
        let message = format!(
            "Allow the tool `{}` to run with arguments {}{rule}?",
            request.tool,
            escape_controls(&request.arguments, Lines::Escape)
        );
        match peer.elicit_with_timeout::<ApprovalForm>(message, Some(self.timeout)).await {
            Ok(Some(ApprovalForm { always: true })) => Some(Answer::Always),
            Ok(_) => Some(Answer::Once),
            Err(ElicitationError::UserDeclined | ElicitationError::UserCancelled) => {
                Some(Answer::Deny)
            }
            Err(_) => None,
        }
    }
}
