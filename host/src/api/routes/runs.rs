//! Starting and stopping runs: a new trace, a continue, rewind or
//! regenerate of one, a stop; and the routes that wait for experiences.

use crate::agent::RunMode;
use crate::api::error::{ApiError, ErrorBody};
use crate::api::extract::{Json, JsonBody};
use crate::api::routes::traces::load;
use crate::api::runs::{self, RunRequest};
use crate::api::state::AppState;
use crate::trace::{Message, Role};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Who wrote a message sent to a run.
#[derive(Debug, Clone, Copy, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum InRole {
    User,
    Assistant,
    System,
}

/// A message sent to a run.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct InMessage {
    role: InRole,
    content: String,
}

fn messages(sent: Vec<InMessage>) -> Vec<Message> {
    sent.into_iter()
        .map(|m| {
            let role = match m.role {
                InRole::User => Role::User,
                InRole::Assistant => Role::Assistant,
                InRole::System => Role::System,
            };
            Message::new(role, m.content)
        })
        .collect()
}

/// A new trace and its first run.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct CreateTrace {
    /// At least one.
    #[serde(default)]
    messages: Vec<InMessage>,
    /// The task (and root goal) [default: the first user message].
    task: Option<String>,
    system_prompt: Option<String>,
    /// A loaded provider plugin [default: the server's].
    provider: Option<String>,
    model: Option<String>,
    /// Permission preset [default: the server's].
    preset: Option<String>,
    /// Most model calls in this run (the preset's cap still holds).
    max_iterations: Option<u32>,
}

/// A run started on a new trace.
#[derive(Serialize, ToSchema)]
pub(crate) struct Created {
    trace_id: String,
    /// `started`.
    status: &'static str,
}

/// Creates a trace and starts its run in the background.
#[utoipa::path(post, path = "/api/traces", request_body = CreateTrace, responses(
    (status = 201, body = Created),
    (status = 400, description = "No message, or an unknown provider or preset", body = ErrorBody),
    (status = 422, body = ErrorBody), (status = 413, body = ErrorBody),
))]
pub(crate) async fn create(
    State(state): State<AppState>,
    JsonBody(body): JsonBody<CreateTrace>,
) -> Result<(StatusCode, Json<Created>), ApiError> {
    if body.messages.is_empty() {
        return Err(ApiError::BadRequest("a new trace needs at least one message".into()));
    }
    let request = RunRequest {
        messages: messages(body.messages),
        task: body.task,
        system_prompt: body.system_prompt,
        provider: body.provider,
        model: body.model,
        preset: body.preset,
        max_iterations: body.max_iterations,
        ..RunRequest::default()
    };
    let (trace_id, _) = runs::start(&state, request).await?;
    Ok((StatusCode::CREATED, Json(Created { trace_id, status: "started" })))
}

/// Another run of a trace.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RunAgain {
    /// Rewind: the new messages follow this sequence (regenerate without
    /// messages). Unset, or the head: continue.
    after_sequence: Option<u64>,
    #[serde(default)]
    messages: Vec<InMessage>,
}

/// A run started on an existing trace.
#[derive(Serialize, ToSchema)]
pub(crate) struct Started {
    trace_id: String,
    /// `started`.
    status: &'static str,
    /// `continue`, `rewind` or `regenerate`.
    #[schema(value_type = String)]
    mode: RunMode,
}

/// Continues, rewinds or regenerates a trace, in the background. An empty
/// body is `{}`.
#[utoipa::path(post, path = "/api/traces/{id}/run", request_body = RunAgain,
    params(("id" = String, Path, description = "Trace id")),
    responses(
        (status = 200, body = Started),
        (status = 400, description = "A sequence not on the tree, or nothing to answer", body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, description = "A run of the trace is going", body = ErrorBody),
        (status = 422, body = ErrorBody),
    ))]
pub(crate) async fn run(
    State(state): State<AppState>,
    Path(id): Path<String>,
    body: Option<JsonBody<RunAgain>>,
) -> Result<Json<Started>, ApiError> {
    let body = body.map(|JsonBody(body)| body).unwrap_or_default();
    let request = RunRequest {
        trace_id: Some(id),
        after_sequence: body.after_sequence,
        messages: messages(body.messages),
        ..RunRequest::default()
    };
    let (trace_id, mode) = runs::start(&state, request).await?;
    Ok(Json(Started { trace_id, status: "started", mode }))
}

/// A stop asked for.
#[derive(Serialize, ToSchema)]
pub(crate) struct Stopping {
    trace_id: String,
    /// `stopping`.
    status: &'static str,
}

/// Stops a running trace; it ends `stopped`, and a later run continues it.
#[utoipa::path(post, path = "/api/traces/{id}/stop",
    params(("id" = String, Path, description = "Trace id")),
    responses((status = 200, body = Stopping), (status = 404, body = ErrorBody),
        (status = 409, description = "Not running", body = ErrorBody)))]
pub(crate) async fn stop(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Stopping>, ApiError> {
    if !state.runs.stop(&id) {
        load(&state, &id).await?;
        return Err(ApiError::Conflict(format!("trace {id} is not running")));
    }
    Ok(Json(Stopping { trace_id: id, status: "stopping" }))
}

const NO_EXPERIENCES: &str = "experiences are not built yet (issue 13): there is no experience \
                              store to reflect into or to list";

/// Reflects on a trace into experiences: not built yet.
#[utoipa::path(post, path = "/api/traces/{id}/reflect",
    params(("id" = String, Path, description = "Trace id")),
    responses((status = 501, body = ErrorBody)))]
pub(crate) async fn reflect(Path(_id): Path<String>) -> ApiError {
    ApiError::NotImplemented(NO_EXPERIENCES.into())
}

/// The experiences learnt: not built yet.
#[utoipa::path(get, path = "/api/experiences", responses((status = 501, body = ErrorBody)))]
pub(crate) async fn experiences() -> ApiError {
    ApiError::NotImplemented(NO_EXPERIENCES.into())
}
