//! Reading traces: the list, the running ones, one with its goal tree and
//! sub-traces, its messages, its events, its workspace checkpoints, and
//! the images kept beside them.

use crate::caller::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::extract::Params;
use crate::response::Json;
use crate::state::AppState;
use axum::extract::{Path, State};
use reson_trace::{Event, EventKind, GoalTree, Message, Trace, TraceFilter, TraceStatus};
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
    /// Only the sub-agents of this trace.
    parent: Option<String>,
    /// Only this user's traces (an admin's filter; a user sees only their
    /// own anyway).
    user: Option<String>,
    /// Only traces whose model contains this text.
    model: Option<String>,
    /// Only traces created at or after this time, in milliseconds since
    /// the epoch.
    since_ms: Option<u64>,
    /// Only traces created before this time, in milliseconds since the
    /// epoch.
    until_ms: Option<u64>,
    /// Only traces that cost at least this many dollars.
    min_cost: Option<f64>,
    /// `updated` (newest first, the default), `cost` (dearest first) or
    /// `duration` (longest first).
    sort: Option<SortBy>,
    /// Traces per page, 1 to 1000 [default: 50].
    limit: Option<usize>,
    /// Traces to skip [default: 0].
    offset: Option<usize>,
}

/// How `GET /api/traces` orders its page.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum SortBy {
    /// Newest first.
    #[default]
    Updated,
    /// Dearest first.
    Cost,
    /// Longest first (from creation to the end of the last run, or to now
    /// for one still going).
    Duration,
}

impl ListQuery {
    /// Whether `trace` passes the filters the store does not apply.
    fn keeps(&self, trace: &Trace) -> bool {
        (self.root_only != Some(true) || trace.parent_trace_id.is_none())
            && self.user.as_ref().is_none_or(|u| trace.uid.as_ref() == Some(u))
            && self.model.as_ref().is_none_or(|m| {
                trace.model.as_deref().is_some_and(|model| model.contains(m.as_str()))
            })
            && self.since_ms.is_none_or(|t| trace.created_at_ms >= t)
            && self.until_ms.is_none_or(|t| trace.created_at_ms < t)
            && self.min_cost.is_none_or(|c| trace.totals.cost >= c)
    }
}

/// How long a trace has run: from its creation to the end of its last
/// run, or to now while it runs.
fn duration_ms(trace: &Trace, now_ms: u64) -> u64 {
    let end = match trace.status {
        TraceStatus::Running => now_ms,
        _ => trace.finished_at_ms.unwrap_or(trace.updated_at_ms),
    };
    end.saturating_sub(trace.created_at_ms)
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
    /// With `root_only`: how many sub-agents each trace of the page has
    /// (those with none are left out), to list with `parent`.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    sub_trace_counts: std::collections::BTreeMap<String, usize>,
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
    if query.min_cost.is_some_and(|c| !c.is_finite()) {
        return Err(ApiError::BadRequest("min_cost must be a number of dollars".into()));
    }
    let filter = TraceFilter {
        status: query.status,
        parent_trace_id: query.parent.clone(),
        ..TraceFilter::default()
    };
    let mut traces = state.traces.list(&caller, filter).await?;
    traces.retain(|t| query.keeps(t));
    match query.sort.unwrap_or_default() {
        SortBy::Updated => {}
        SortBy::Cost => traces.sort_by(|a, b| b.totals.cost.total_cmp(&a.totals.cost)),
        SortBy::Duration => {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64);
            traces.sort_by_key(|t| std::cmp::Reverse(duration_ms(t, now)));
        }
    }
    let total = traces.len();
    let traces: Vec<Trace> = traces.into_iter().skip(offset).take(limit).collect();
    let mut sub_trace_counts = std::collections::BTreeMap::new();
    if query.root_only == Some(true) && !traces.is_empty() {
        let shown: std::collections::HashSet<&str> = traces.iter().map(|t| t.id.as_str()).collect();
        for sub in state.traces.list(&caller, TraceFilter::default()).await? {
            if let Some(parent) = sub.parent_trace_id.filter(|p| shown.contains(p.as_str())) {
                *sub_trace_counts.entry(parent).or_insert(0) += 1;
            }
        }
    }
    Ok(Json(TraceList { traces, total, sub_trace_counts }))
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
    /// The reports of its replays (`reson traces replay`), oldest first:
    /// `{"at_ms", "summary", "report"}`.
    #[schema(value_type = Vec<Object>)]
    replays: Vec<serde_json::Value>,
    /// Whether a run of it is going in this server, or in another server
    /// on the same database.
    running: bool,
}

/// One trace, its goal tree, its sub-traces and its replays' reports.
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
    let replays = visible.replays().await?;
    let running = state.runs.is_running_anywhere(&id).await?;
    Ok(Json(TraceDetail { trace: visible.trace, goal_tree, sub_traces, replays, running }))
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

/// `GET /api/traces/{id}/events` parameters.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
pub(crate) struct EventsQuery {
    /// Only events after this id [default: 0, all].
    after: Option<u64>,
    /// Only these kinds, comma-separated (`tool_started,tool_finished`,
    /// say); all when unset. The messages endpoint serves the messages, so
    /// a client drawing a timeline can leave `message_added` out.
    kinds: Option<String>,
}

/// A trace's stored events.
#[derive(Serialize, ToSchema)]
pub(crate) struct Events {
    /// Oldest first.
    #[schema(value_type = Vec<Object>)]
    events: Vec<Event>,
}

/// A trace's stored events, as the watch socket replays them: runs
/// started and finished, tool calls, permission decisions (who answered,
/// how long the call waited), failed model attempts, goal changes,
/// compactions.
#[utoipa::path(get, path = "/api/traces/{id}/events",
    params(("id" = String, Path, description = "Trace id"), EventsQuery),
    responses((status = 200, body = Events), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(crate) async fn events(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    Params(query): Params<EventsQuery>,
) -> Result<Json<Events>, ApiError> {
    let visible = state.traces.get(&caller, &id).await?;
    let mut events = visible.events_after(query.after.unwrap_or(0)).await?;
    if let Some(kinds) = &query.kinds {
        let kinds: Vec<&str> = kinds.split(',').map(str::trim).collect();
        if let Some(unknown) = kinds.iter().find(|k| !EventKind::NAMES.contains(k)) {
            return Err(ApiError::BadRequest(format!(
                "no event kind {unknown:?}: kinds are {}",
                EventKind::NAMES.join(", ")
            )));
        }
        events.retain(|e| kinds.contains(&e.kind.name()));
    }
    Ok(Json(Events { events }))
}

/// A trace's workspace checkpoints.
#[derive(Serialize, ToSchema)]
pub(crate) struct Checkpoints {
    /// In order, each with the files it changed and their unified diffs.
    #[schema(value_type = Vec<Object>)]
    checkpoints: Vec<reson_workspace::CheckpointChanges>,
}

/// A trace's workspace checkpoints: per message, what its tool calls
/// wrote and what changed outside Reson before it, with unified diffs of
/// text files; restores too.
#[utoipa::path(get, path = "/api/traces/{id}/checkpoints",
    params(("id" = String, Path, description = "Trace id")),
    responses((status = 200, body = Checkpoints), (status = 404, body = ErrorBody)))]
pub(crate) async fn checkpoints(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Checkpoints>, ApiError> {
    let visible = state.traces.get(&caller, &id).await?;
    Ok(Json(Checkpoints { checkpoints: visible.checkpoints().await? }))
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
        for bad in ["sort=random", "min_cost=cheap", "since_ms=-5"] {
            assert!(query(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_filters_keep_what_they_name() {
        let mut trace = Trace::new(reson_trace::TraceMode::Task, "t", "default");
        trace.model = Some("gpt-5-mini".into());
        trace.uid = Some("alice".into());
        trace.created_at_ms = 1_000;
        trace.totals.cost = 0.25;
        let keeps = |q: &str, trace: &Trace| query(q).unwrap().keeps(trace);
        for yes in
            ["", "model=gpt-5", "user=alice", "since_ms=1000", "until_ms=1001", "min_cost=0.25"]
        {
            assert!(keeps(yes, &trace), "{yes}");
        }
        for no in ["model=claude", "user=bob", "since_ms=1001", "until_ms=1000", "min_cost=0.3"] {
            assert!(!keeps(no, &trace), "{no}");
        }
        trace.parent_trace_id = Some("tr_parent".into());
        assert!(!keeps("root_only=true", &trace));
        trace.status = TraceStatus::Completed;
        trace.finished_at_ms = Some(4_000);
        assert_eq!(duration_ms(&trace, 9_000), 3_000);
        trace.status = TraceStatus::Running;
        assert_eq!(duration_ms(&trace, 9_000), 8_000);
    }
}
