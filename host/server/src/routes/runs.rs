//! Starting and stopping runs: a new trace, a continue, rewind or
//! regenerate of one, a stop; reflecting on one into experiences, and
//! listing them.

use crate::attachments;
use crate::caller::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::extract::JsonBody;
use crate::response::Json;
use crate::runs::{self, RunRequest};
use crate::state::AppState;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use reson_agent::agent::RunMode;
use reson_agent::experience::{
    self, Experience, ExperienceError, ExperienceStore, FileExperienceStore, Source, Tags,
};
use reson_agent::provider::{LlmParams, PluginProvider};
use reson_agent::scope::{Scope, Visible};
use reson_trace::{Message, Role};
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
    /// Images and PDFs that join the message: `[{"name", "data"}]`, the
    /// bytes base64. A PDF is read by the `pdf` plugin: its text and
    /// images.
    #[serde(default)]
    attachments: Vec<attachments::Attachment>,
}

async fn messages(state: &AppState, sent: Vec<InMessage>) -> Result<Vec<Message>, ApiError> {
    let mut messages = Vec::with_capacity(sent.len());
    for m in sent {
        let role = match m.role {
            InRole::User => Role::User,
            InRole::Assistant => Role::Assistant,
            InRole::System => Role::System,
        };
        let mut message = Message::new(role, m.content);
        message.content.extend(attachments::parts(state, m.attachments).await?);
        messages.push(message);
    }
    Ok(messages)
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
    /// What the run and its sub-agents may spend together
    /// (`max_tokens`, `max_cost_usd`, `max_duration_ms`); the config's
    /// `[budget]` still holds.
    #[schema(value_type = Option<Object>)]
    budget: Option<reson_agent::policy::Budget>,
    /// The user the trace belongs to: admins only [default: the caller].
    uid: Option<String>,
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
    caller: Caller,
    JsonBody(body): JsonBody<CreateTrace>,
) -> Result<(StatusCode, Json<Created>), ApiError> {
    if body.messages.is_empty() {
        return Err(ApiError::BadRequest("a new trace needs at least one message".into()));
    }
    let uid = match body.uid {
        Some(uid) if caller.admin => Some(uid),
        Some(uid) if caller.uid.as_deref() != Some(uid.as_str()) => {
            return Err(ApiError::BadRequest(
                "only an admin may start a run for another user: leave `uid` out".into(),
            ));
        }
        _ => caller.uid.clone(),
    };
    let request = RunRequest {
        messages: messages(&state, body.messages).await?,
        task: body.task,
        system_prompt: body.system_prompt,
        provider: body.provider,
        model: body.model,
        preset: body.preset,
        max_iterations: body.max_iterations,
        budget: body.budget,
        uid,
        ..RunRequest::default()
    };
    let (trace_id, _) = runs::start(&state, &caller, request).await?;
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
    /// With `after_sequence`: first put the files the trace's tool calls
    /// changed back as they were at that message. Files changed outside
    /// Reson since its last checkpoint refuse the run (409, listed).
    #[serde(default)]
    restore_files: bool,
    /// With `restore_files`: overwrite files changed outside Reson too.
    #[serde(default)]
    force: bool,
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
        (status = 409, description = "A run of the trace is going, or `restore_files` would overwrite files changed outside Reson (listed)", body = ErrorBody),
        (status = 422, body = ErrorBody),
    ))]
pub(crate) async fn run(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    body: Option<JsonBody<RunAgain>>,
) -> Result<Json<Started>, ApiError> {
    let body = body.map(|JsonBody(body)| body).unwrap_or_default();
    let request = RunRequest {
        trace_id: Some(id),
        after_sequence: body.after_sequence,
        messages: messages(&state, body.messages).await?,
        restore_files: body.restore_files,
        force: body.force,
        ..RunRequest::default()
    };
    let (trace_id, mode) = runs::start(&state, &caller, request).await?;
    Ok(Json(Started { trace_id, status: "started", mode }))
}

/// A stop asked for.
#[derive(Serialize, ToSchema)]
pub(crate) struct Stopping {
    trace_id: String,
    /// `stopping`.
    status: &'static str,
}

/// Stops a running trace, on whichever host runs it; it ends `stopped`,
/// and a later run continues it.
#[utoipa::path(post, path = "/api/traces/{id}/stop",
    params(("id" = String, Path, description = "Trace id")),
    responses((status = 200, body = Stopping), (status = 404, body = ErrorBody),
        (status = 409, description = "Not running", body = ErrorBody)))]
pub(crate) async fn stop(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Stopping>, ApiError> {
    state.traces.may_stop(&caller, &id).await?;
    if !state.runs.stop_anywhere(&id).await? {
        state.traces.get(&caller, &id).await?;
        return Err(ApiError::Conflict(format!("trace {id} is not running")));
    }
    Ok(Json(Stopping { trace_id: id, status: "stopping" }))
}

/// What to reflect with.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Reflect {
    /// What to look at above all.
    focus: Option<String>,
    /// A loaded provider plugin [default: the trace's, else the server's].
    provider: Option<String>,
    /// [default: the trace's model].
    model: Option<String>,
}

/// What a reflection learnt, on a side branch of the trace.
#[derive(Serialize, ToSchema)]
pub(crate) struct Reflected {
    trace_id: String,
    /// The reflection prompt (a child of the head; the head did not move).
    prompt_sequence: u64,
    /// The model's answer (a child of the prompt).
    answer_sequence: u64,
    /// The experiences appended, each with `helpful: 1`.
    #[schema(value_type = Vec<Object>)]
    experiences: Vec<serde_json::Value>,
}

/// Reflects on an ended trace: the model writes what it learnt into the
/// experiences file, on a side branch of the trace (its head stays).
#[utoipa::path(post, path = "/api/traces/{id}/reflect", request_body = Reflect,
    params(("id" = String, Path, description = "Trace id")),
    responses(
        (status = 200, body = Reflected),
        (status = 404, body = ErrorBody), (status = 409, description = "Running", body = ErrorBody),
        (status = 422, description = "A malformed body, or a model answer that is not experiences; nothing written", body = ErrorBody),
        (status = 502, description = "The model call failed", body = ErrorBody),
    ))]
pub(crate) async fn reflect(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<Reflect>,
) -> Result<Json<Reflected>, ApiError> {
    let visible = state.traces.get(&caller, &id).await?;
    let (trace, store) = (&visible.trace, visible.store_of_this_trace());
    // Held while the model answers, so that no run moves the trace meanwhile.
    let _claim = state.runs.claim_run(&id, &**store).await?;
    let provider = body
        .provider
        .or(trace.provider.clone())
        .unwrap_or_else(|| state.config.defaults.provider.clone());
    runs::check_provider(&state, &provider)?;
    let mut params =
        serde_json::from_value::<LlmParams>(trace.llm_params.clone()).unwrap_or_default();
    params.stream = false;
    if let Some(model) = body.model {
        params.model = model;
    }
    let provider = PluginProvider::new(state.runtime.clone(), provider);
    let experiences = experience_store(&state);
    let focus = body.focus.as_deref();
    let done = experience::reflect(&**store, &provider, params, &*experiences, &id, focus)
        .await
        .map_err(experience_error)?;
    Ok(Json(Reflected {
        trace_id: done.trace_id,
        prompt_sequence: done.prompt_sequence,
        answer_sequence: done.answer_sequence,
        experiences: done.experiences.iter().map(experience_json).collect(),
    }))
}

/// The experiences the caller sees.
#[derive(Serialize, ToSchema)]
pub(crate) struct ExperienceList {
    /// In file order.
    #[schema(value_type = Vec<Object>)]
    experiences: Vec<serde_json::Value>,
}

/// The experiences as the runs of this server use them: those the caller
/// sees (global, every agent type's and their own; an admin all).
#[utoipa::path(get, path = "/api/experiences", responses(
    (status = 200, body = ExperienceList), (status = 500, description = "A malformed file (named with its line)", body = ErrorBody)))]
pub(crate) async fn experiences(
    State(state): State<AppState>,
    caller: Caller,
) -> Result<Json<ExperienceList>, ApiError> {
    let visible = Visible::caller(caller.uid.as_deref(), caller.admin);
    let experiences = experience_store(&state).list().await.map_err(experience_error)?;
    let experiences =
        experiences.iter().filter(|e| visible.sees(&e.scope)).map(experience_json).collect();
    Ok(Json(ExperienceList { experiences }))
}

/// An experience written by a person.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct NewExperience {
    /// The rule itself.
    rule: String,
    /// `tool_usage`, `logic_flow`, `environment`, ... [default: `manual`].
    category: Option<String>,
    /// When it applies.
    #[serde(default)]
    condition: String,
    #[serde(default)]
    #[schema(value_type = Object)]
    tags: Tags,
    /// `global`, `user:{uid}` or `agent:{type}`: admins only [default:
    /// the caller's user scope; an admin without a user name: global].
    scope: Option<String>,
    /// 0 to 1 [default: 0.5].
    confidence: Option<f64>,
    /// `manual` (the default) or `feedback`.
    source: Option<String>,
}

/// Adds an experience, in the caller's scope.
#[utoipa::path(post, path = "/api/experiences", request_body = NewExperience, responses(
    (status = 201, body = Object),
    (status = 400, description = "A scope a user may not write, or a bad source", body = ErrorBody),
    (status = 422, body = ErrorBody)))]
pub(crate) async fn add_experience(
    State(state): State<AppState>,
    caller: Caller,
    JsonBody(body): JsonBody<NewExperience>,
) -> Result<(StatusCode, Json<serde_json::Value>), ApiError> {
    let own = Scope::of_user(caller.uid.as_deref());
    let scope = match body.scope {
        None => own,
        Some(asked) => {
            let asked: Scope = asked.parse().map_err(|e| ApiError::BadRequest(format!("{e}")))?;
            if !caller.admin && asked != own {
                return Err(ApiError::BadRequest(format!(
                    "only an admin may write scope {asked}: leave `scope` out for {own}"
                )));
            }
            asked
        }
    };
    let source: Source = match body.source.as_deref() {
        None => Source::Manual,
        Some(s) => s.parse().map_err(ApiError::BadRequest)?,
    };
    let category = body.category.unwrap_or_else(|| "manual".to_owned());
    let mut experience = Experience::new("", &category, body.tags, &body.rule);
    experience.scope = scope;
    experience.condition = body.condition.trim().to_owned();
    experience.source = source;
    experience.confidence = body.confidence.unwrap_or(experience::DEFAULT_CONFIDENCE);
    experience.check().map_err(|e| ApiError::Unprocessable(e.to_string()))?;
    experience_store(&state).append(vec![experience.clone()]).await.map_err(experience_error)?;
    Ok((StatusCode::CREATED, Json(experience_json(&experience))))
}

/// Removes an experience of the caller's own scope (an admin: any). Any
/// other is a 404, as a missing one is.
#[utoipa::path(delete, path = "/api/experiences/{id}",
    params(("id" = String, Path, description = "Experience id")),
    responses((status = 200, body = Object), (status = 404, body = ErrorBody)))]
pub(crate) async fn remove_experience(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let store = experience_store(&state);
    let all = store.list().await.map_err(experience_error)?;
    let own = Scope::of_user(caller.uid.as_deref());
    let mine = all
        .iter()
        .any(|e| e.id == id && (caller.admin || (caller.uid.is_some() && e.scope == own)));
    if !mine {
        return Err(experience_error(ExperienceError::UnknownId(id)));
    }
    let removed = store.remove(&id).await.map_err(experience_error)?;
    Ok(Json(experience_json(&removed)))
}

/// The experiences this server's runs use: those its tools were given.
fn experience_store(state: &AppState) -> std::sync::Arc<dyn ExperienceStore> {
    state.tools.experiences().map(|e| e.store.clone()).unwrap_or_else(|| {
        std::sync::Arc::new(FileExperienceStore::from_config(&state.config.agent))
    })
}

/// An experience as JSON: its front matter's fields (each of the design's,
/// defaults included) and its `rule`.
fn experience_json(experience: &Experience) -> serde_json::Value {
    let mut json = serde_json::to_value(experience).unwrap_or_default();
    if let Some(fields) = json.as_object_mut() {
        let e = experience;
        fields.insert("scope".into(), e.scope.to_string().into());
        fields.insert("condition".into(), e.condition.clone().into());
        fields.insert("evidence".into(), e.evidence.clone().into());
        fields.insert("source".into(), e.source.as_str().into());
        fields.insert("confidence".into(), e.confidence.into());
        fields.insert("usage_count".into(), e.usage_count.into());
        fields.insert("success_rate".into(), e.success_rate.into());
        fields.insert("rule".into(), experience.rule.clone().into());
    }
    json
}

fn experience_error(e: ExperienceError) -> ApiError {
    match e {
        ExperienceError::NoTrace(_) | ExperienceError::UnknownId(_) => {
            ApiError::NotFound(e.to_string())
        }
        ExperienceError::NotReady { .. } => ApiError::Conflict(e.to_string()),
        ExperienceError::BadAnswer(_) => ApiError::Unprocessable(e.to_string()),
        ExperienceError::Model(_) => ApiError::BadGateway(e.to_string()),
        _ => ApiError::Internal(e.to_string()),
    }
}
