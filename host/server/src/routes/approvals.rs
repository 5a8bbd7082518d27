//! Approvals over HTTP: the pending asks of every run, and answers.

use crate::caller::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::extract::JsonBody;
use crate::response::Json;
use crate::state::AppState;
use axum::extract::{Path, State};
use reson_agent::agent::{Answer, ApprovalRequest};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// The pending asks.
#[derive(Serialize, ToSchema)]
pub(crate) struct Approvals {
    approvals: Vec<ApprovalRequest>,
}

/// Tool calls waiting for an answer, in the caller's runs (an admin's:
/// every run), oldest first.
#[utoipa::path(get, path = "/api/approvals", responses((status = 200, body = Approvals)))]
pub(crate) async fn list(
    State(state): State<AppState>,
    caller: Caller,
) -> Result<Json<Approvals>, ApiError> {
    let mut approvals = Vec::new();
    for approval in state.approvals.pending() {
        if visible(&state, &caller, &approval).await? {
            approvals.push(approval);
        }
    }
    Ok(Json(Approvals { approvals }))
}

/// Whether `caller` may see and answer `approval`: it asks in one of
/// their traces.
async fn visible(
    state: &AppState,
    caller: &Caller,
    approval: &ApprovalRequest,
) -> Result<bool, ApiError> {
    if caller.admin {
        return Ok(true);
    }
    Ok(state.traces.find(caller, &approval.trace_id).await?.is_some())
}

/// An answer.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct AnswerBody {
    /// `once`, `always` (this rule, for the rest of the run) or `deny`.
    answer: Answer,
}

/// The answer given.
#[derive(Serialize, ToSchema)]
pub(crate) struct Answered {
    id: String,
    answer: Answer,
}

/// Answers a pending ask.
#[utoipa::path(post, path = "/api/approvals/{id}", request_body = AnswerBody,
    params(("id" = String, Path, description = "Approval id (`ap_` and 32 hex digits)")),
    responses((status = 200, body = Answered),
        (status = 404, description = "Not pending: answered, timed out or unknown", body = ErrorBody),
        (status = 422, body = ErrorBody)))]
pub(crate) async fn answer(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<AnswerBody>,
) -> Result<Json<Answered>, ApiError> {
    let not_pending = || ApiError::NotFound(format!("no pending approval {id}"));
    let Some(approval) = state.approvals.pending().into_iter().find(|a| a.id == id) else {
        return Err(not_pending());
    };
    // The trace records who answered: the user, or for the one server
    // token, the API.
    let by =
        caller.uid.as_deref().map_or_else(|| "the API".to_owned(), |uid| format!("user {uid}"));
    if !visible(&state, &caller, &approval).await?
        || !state.approvals.answer_by(&id, body.answer, &by)
    {
        return Err(not_pending());
    }
    Ok(Json(Answered { id, answer: body.answer }))
}
