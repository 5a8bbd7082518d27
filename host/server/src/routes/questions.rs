//! Questions to people over HTTP (the `ask_human` tool): the open
//! questions of every trace the caller sees, and answers. A question a run
//! waits on goes to that run; one whose run stopped, timed out or died is
//! recorded and continues the trace that asked.

use crate::caller::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::extract::JsonBody;
use crate::response::Json;
use crate::runs::{self, RunRequest};
use crate::state::AppState;
use axum::extract::{Path, State};
use reson_agent::agent::human::{AnswerError, Question};
use reson_trace::{Message, Role, TraceFilter, TraceStatus};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// An open question.
#[derive(Serialize, ToSchema)]
pub(crate) struct OpenQuestion {
    #[serde(flatten)]
    question: Question,
    /// Whether a run of this server waits on it now; otherwise an answer
    /// continues the trace that asked.
    run_waiting: bool,
}

/// The open questions.
#[derive(Serialize, ToSchema)]
pub(crate) struct Questions {
    questions: Vec<OpenQuestion>,
}

/// Questions waiting for a person, in the caller's traces (an admin's:
/// every trace), oldest first.
#[utoipa::path(get, path = "/api/questions", responses((status = 200, body = Questions)))]
pub(crate) async fn list(
    State(state): State<AppState>,
    caller: Caller,
) -> Result<Json<Questions>, ApiError> {
    let waiting: std::collections::HashSet<String> =
        state.questions.pending().into_iter().map(|q| q.id).collect();
    let filter = TraceFilter { status: Some(TraceStatus::Waiting), ..TraceFilter::default() };
    let mut questions: Vec<OpenQuestion> = state
        .traces
        .list(&caller, filter)
        .await?
        .iter()
        .filter_map(Question::of)
        .map(|question| OpenQuestion { run_waiting: waiting.contains(&question.id), question })
        .collect();
    questions.sort_by_key(|q| q.question.asked_at_ms);
    Ok(Json(Questions { questions }))
}

/// An answer.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct AnswerBody {
    /// The answer; a choice's number stands for the choice.
    answer: String,
}

/// What became of an answer.
#[derive(Serialize, ToSchema)]
pub(crate) struct Answered {
    id: String,
    /// Who the trace records as answering.
    answered_by: String,
    /// Whether the trace that asked was continued with the answer (its run
    /// no longer waited); false when a waiting run took it.
    resumed: bool,
    /// The trace that asked.
    trace_id: String,
}

/// Answers an open question.
#[utoipa::path(post, path = "/api/questions/{id}", request_body = AnswerBody,
    params(("id" = String, Path, description = "The question's trace id")),
    responses((status = 200, body = Answered),
        (status = 400, description = "An empty answer", body = ErrorBody),
        (status = 404, description = "Not open: answered already, or unknown", body = ErrorBody),
        (status = 409, description = "The trace that asked is running and does not wait on it", body = ErrorBody),
        (status = 422, body = ErrorBody)))]
pub(crate) async fn answer(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<AnswerBody>,
) -> Result<Json<Answered>, ApiError> {
    let not_open = || ApiError::NotFound(format!("no open question {id}"));
    let visible = match state.traces.get(&caller, &id).await {
        Err(ApiError::NotFound(_)) => return Err(not_open()),
        found => found?,
    };
    let question = Question::of(&visible.trace).ok_or_else(not_open)?;
    if body.answer.trim().is_empty() {
        return Err(ApiError::BadRequest("an answer needs some text".into()));
    }
    let by =
        caller.uid.as_deref().map_or_else(|| "the API".to_owned(), |uid| format!("user {uid}"));
    let answered = |resumed| Answered {
        id: id.clone(),
        answered_by: by.clone(),
        resumed,
        trace_id: question.trace_id.clone(),
    };
    if state.questions.answer(&id, &body.answer, &by) {
        return Ok(Json(answered(false)));
    }
    if state.runs.is_running_anywhere(&question.trace_id).await? {
        return Err(ApiError::Conflict(format!(
            "the trace that asked ({}) is running and does not wait on this question; answer \
             once it stops, or stop it first",
            question.trace_id
        )));
    }
    let asking = state.traces.get(&caller, &question.trace_id).await?;
    let later = visible.answer_later(&asking, &body.answer, &by).await.map_err(|e| match e {
        AnswerError::NotOpen(_) => not_open(),
        AnswerError::Empty => ApiError::BadRequest(e.to_string()),
        AnswerError::Store(e) => e.into(),
    })?;
    let request = RunRequest {
        trace_id: Some(question.trace_id.clone()),
        messages: vec![Message::new(Role::User, later.message)],
        ..RunRequest::default()
    };
    runs::start(&state, &caller, request).await?;
    Ok(Json(answered(true)))
}
