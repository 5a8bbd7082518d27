//! Reading traces: the list, the running ones, one with its goal tree and
//! sub-traces, its messages, and the images kept beside them.

use crate::caller::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::extract::Params;
use crate::response::Json;
use crate::state::AppState;
use axum::extract::{Path, State};
use reson_trace::{GoalTree, Message, Trace, TraceFilter, TraceStatus};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

/// The most traces one page may hold.
const MAX_LIMIT: usize = 1000;

/// Filters and paging of `GET /api/traces`.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListQuery {
    /// `running`, `completed`, `failed` or `stopped`.
    #[param(value_type = Option<String>)]
    status: Option<TraceStatus>,
    /// Only traces that are not sub-agents.
    root_only: Option<bool>,
    /// Traces per page, 1 to 1000 [default: 50].
    limit: Option<usize>,
    /// Traces to skip [default: 0].
    offset: Option<usize>,
}

/// The page's range: `limit` from `offset`, checked.
fn page(query: &ListQuery) -> Result<(usize, usize), ApiError> {
    let limit = query.limit.unwrap_or(50);
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(ApiError::BadRequest(format!("limit must be 1 to {MAX_LIMIT}, not {limit}")));
    }
    Ok((limit, query.offset.unwrap_or(0)))
}

/// A page of traces, newest first.
#[derive(Serialize, ToSchema)]
pub(crate) struct TraceList {
    /// As in `reson traces list --json`.
    #[schema(value_type = Vec<Object>)]
    traces: Vec<Trace>,
    /// How many traces match, over all pages.
    total: usize,
}

/// The caller's traces (an admin's: everyone's), newest first.
#[utoipa::path(get, path = "/api/traces", params(ListQuery), responses(
    (status = 200, body = TraceList),
    (status = 400, description = "A bad query parameter", body = ErrorBody),
))]
pub(crate) async fn list(
    State(state): State<AppState>,
    caller: Caller,
    Params(query): Params<ListQuery>,
) -> Result<Json<TraceList>, ApiError> {
    let (limit, offset) = page(&query)?;
    let filter = TraceFilter { status: query.status, ..TraceFilter::default() };
    let mut traces = state.traces.list(&caller, filter).await?;
    if query.root_only == Some(true) {
        traces.retain(|t| t.parent_trace_id.is_none());
    }
    let total = traces.len();
    let traces = traces.into_iter().skip(offset).take(limit).collect();
    Ok(Json(TraceList { traces, total }))
}

/// The traces running on any host.
#[derive(Serialize, ToSchema)]
pub(crate) struct RunningTraces {
    #[schema(value_type = Vec<Object>)]
    traces: Vec<Trace>,
}

/// The caller's traces with a run going in this server, or in another
/// server on the same database.
#[utoipa::path(get, path = "/api/traces/running", responses((status = 200, body = RunningTraces)))]
pub(crate) async fn running(
    State(state): State<AppState>,
    caller: Caller,
) -> Result<Json<RunningTraces>, ApiError> {
    let mut traces = Vec::new();
    for id in state.runs.running_anywhere().await? {
        // A claimed trace may not be written yet (a new one being prepared).
        if let Some(trace) = state.traces.find(&caller, &id).await? {
            traces.push(trace);
        }
    }
    Ok(Json(RunningTraces { traces }))
}

/// One trace.
#[derive(Serialize, ToSchema)]
pub(crate) struct TraceDetail {
    #[schema(value_type = Object)]
    trace: Trace,
    /// The main path's goal tree.
    #[schema(value_type = Object)]
    goal_tree: GoalTree,
    /// Sub-agents' traces, newest first.
    #[schema(value_type = Vec<Object>)]
    sub_traces: Vec<Trace>,
    /// Whether a run of it is going in this server, or in another server
    /// on the same database.
    running: bool,
}

/// One trace, its goal tree and its sub-traces.
#[utoipa::path(get, path = "/api/traces/{id}", params(("id" = String, Path, description = "Trace id")),
    responses((status = 200, body = TraceDetail), (status = 404, body = ErrorBody)))]
pub(crate) async fn get(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<TraceDetail>, ApiError> {
    let visible = state.traces.get(&caller, &id).await?;
    let goal_tree = visible.goals().await?;
    let sub_traces = visible.sub_traces(&caller).await?;
    let running = state.runs.is_running_anywhere(&id).await?;
    Ok(Json(TraceDetail { trace: visible.trace, goal_tree, sub_traces, running }))
}

/// Which messages.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum MessagesMode {
    /// From the root to the head.
    #[default]
    MainPath,
    /// Every message on every branch, by sequence.
    All,
}

/// `GET /api/traces/{id}/messages` parameters.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
pub(crate) struct MessagesQuery {
    /// `main_path` (default) or `all`.
    mode: Option<MessagesMode>,
}

/// A trace's messages.
#[derive(Serialize, ToSchema)]
pub(crate) struct Messages {
    #[schema(value_type = Vec<Object>)]
    messages: Vec<Message>,
    /// The last message of the main path; null when there is none.
    head_sequence: Option<u64>,
}

/// A trace's messages: its main path, or all of them.
#[utoipa::path(get, path = "/api/traces/{id}/messages",
    params(("id" = String, Path, description = "Trace id"), MessagesQuery),
    responses((status = 200, body = Messages), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(crate) async fn messages(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    Params(query): Params<MessagesQuery>,
) -> Result<Json<Messages>, ApiError> {
    let visible = state.traces.get(&caller, &id).await?;
    let messages = match query.mode.unwrap_or_default() {
        MessagesMode::All => visible.all_messages().await?,
        MessagesMode::MainPath => visible.main_path().await?,
    };
    Ok(Json(Messages { messages, head_sequence: visible.trace.head_sequence }))
}

/// The bytes of an image kept beside a message of the trace (a
/// message's `{"type": "image", "name": ...}` part), with its image type.
/// Only PNG, JPEG, GIF and WebP are served, never sniffed: any other name
/// is no image of the trace. One 404 for a trace that is missing or
/// another user's and for a name that is no image of it: the answer never
/// tells which.
#[utoipa::path(get, path = "/api/traces/{id}/images/{name}",
    params(("id" = String, Path, description = "Trace id"),
           ("name" = String, Path, description = "The image's name, as its message gives it")),
    responses((status = 200, description = "The image", content_type = "image/png"),
              (status = 404, body = ErrorBody)))]
pub(crate) async fn image(
    State(state): State<AppState>,
    caller: Caller,
    Path((id, name)): Path<(String, String)>,
) -> Result<axum::response::Response, ApiError> {
    use axum::http::header;
    use axum::response::IntoResponse as _;
    let missing = || ApiError::NotFound(format!("no trace {id} with an image {name:?}"));
    let visible = match state.traces.get(&caller, &id).await {
        Err(ApiError::NotFound(_)) => return Err(missing()),
        found => found?,
    };
    let media_type = reson_trace::image_media_type(&name).ok_or_else(missing)?;
    let data = visible.image(&name).await?.ok_or_else(missing)?;
    let headers = [
        (header::CONTENT_TYPE, media_type),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        // Never rewritten: a name is given once and its image stays.
        (header::CACHE_CONTROL, "private, max-age=86400, immutable"),
    ];
    Ok((headers, data).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(text: &str) -> Result<ListQuery, String> {
        let uri: axum::http::Uri = format!("/?{text}").parse().unwrap();
        axum::extract::Query::<ListQuery>::try_from_uri(&uri)
            .map(|q| q.0)
            .map_err(|e| e.body_text())
    }

    #[test]
    fn list_parameters_parse_and_are_checked() {
        let q = query("status=stopped&root_only=true&limit=5&offset=10").unwrap();
        assert_eq!(q.status, Some(TraceStatus::Stopped));
        assert_eq!(q.root_only, Some(true));
        assert_eq!(page(&q).unwrap(), (5, 10));
        assert_eq!(page(&query("").unwrap()).unwrap(), (50, 0));
        for bad in ["status=sleeping", "limit=-1", "limit=x", "root_only=maybe", "colour=red"] {
            assert!(query(bad).is_err(), "{bad}");
        }
        for limit in ["0", "1001"] {
            let err = page(&query(&format!("limit={limit}")).unwrap()).unwrap_err();
            assert_eq!(err.status().as_u16(), 400, "{err}");
        }
    }
}
