//! `/api/knowledge`: search, list, save and remove knowledge entries, in
//! the store this server's runs use.

use crate::caller::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::extract::{JsonBody, Params};
use crate::response::Json;
use crate::state::AppState;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use reson_agent::knowledge::{Draft, Entry, KnowledgeError};
use reson_agent::scope::{Scope, Visible};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

/// Most entries one request returns.
const MAX_LIMIT: usize = 100;

/// The scopes `caller` reads, as `/api/experiences` answers it: global,
/// every agent type's and their own; an admin (the single token, or a
/// server without one) every scope.
fn visible(caller: &Caller) -> Visible {
    Visible::caller(caller.uid.as_deref(), caller.admin)
}

/// The 404 of an entry the caller may not see, word for word that of a
/// missing one.
fn not_found(id: &str) -> ApiError {
    knowledge_error(KnowledgeError::UnknownId(id.to_owned()))
}

fn knowledge_error(e: KnowledgeError) -> ApiError {
    match e {
        KnowledgeError::UnknownId(_) => ApiError::NotFound(e.to_string()),
        KnowledgeError::Invalid(_) | KnowledgeError::TooLarge { .. } => {
            ApiError::Unprocessable(e.to_string())
        }
        KnowledgeError::Index { .. } | KnowledgeError::Database(_) => {
            ApiError::Internal(e.to_string())
        }
    }
}

/// The query of `GET /api/knowledge`.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
pub(crate) struct KnowledgeQuery {
    /// Words to search for; without it, every entry, oldest first.
    q: Option<String>,
    /// Most entries, 1 to 100 [default: 20].
    limit: Option<usize>,
}

/// An entry, with its score and snippet when it is a search result.
#[derive(Serialize)]
pub(crate) struct KnowledgeItem {
    #[serde(flatten)]
    entry: Entry,
    /// Relevance, higher is better (searches only).
    #[serde(skip_serializing_if = "Option::is_none")]
    score: Option<f32>,
    /// The matching part of the content (searches only).
    #[serde(skip_serializing_if = "Option::is_none")]
    snippet: Option<String>,
}

/// Entries: search results best first, or a list oldest first.
#[derive(Serialize, ToSchema)]
pub(crate) struct KnowledgeList {
    /// Each entry's fields (`id`, `scope`, `title`, `content`, `tags`,
    /// `created_at`, `updated_at`, `source`), with `score` and `snippet`
    /// for a search.
    #[schema(value_type = Vec<Object>)]
    entries: Vec<KnowledgeItem>,
}

/// Searches the knowledge the caller may see (`q`), or lists it.
#[utoipa::path(get, path = "/api/knowledge", params(KnowledgeQuery), responses(
    (status = 200, body = KnowledgeList),
    (status = 400, description = "A bad query parameter", body = ErrorBody),
))]
pub(crate) async fn search(
    State(state): State<AppState>,
    caller: Caller,
    Params(query): Params<KnowledgeQuery>,
) -> Result<Json<KnowledgeList>, ApiError> {
    let limit = query.limit.unwrap_or(20);
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(ApiError::BadRequest(format!("limit must be 1 to {MAX_LIMIT}, not {limit}")));
    }
    let visible = visible(&caller);
    let entries = match query.q.as_deref().map(str::trim).filter(|q| !q.is_empty()) {
        Some(q) => state
            .knowledge
            .search(q, &visible, limit)
            .await
            .map_err(knowledge_error)?
            .into_iter()
            .map(|h| KnowledgeItem {
                entry: h.entry,
                score: Some(h.score),
                snippet: Some(h.snippet),
            })
            .collect(),
        None => state
            .knowledge
            .list(&visible)
            .await
            .map_err(knowledge_error)?
            .into_iter()
            .take(limit)
            .map(|entry| KnowledgeItem { entry, score: None, snippet: None })
            .collect(),
    };
    Ok(Json(KnowledgeList { entries }))
}

/// A knowledge entry to save.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct NewKnowledge {
    /// Replace this entry of the scope (or create it under this id); a
    /// fresh id when absent. Ids are per scope: another scope's entry of
    /// the same id is another entry, never touched.
    id: Option<String>,
    /// `global`, `user:NAME` or `agent:TYPE`: admins only [default: the
    /// caller's `user:NAME`; an admin without a user name: global].
    scope: Option<String>,
    title: String,
    content: String,
    #[serde(default)]
    tags: Vec<String>,
}

/// Saves an entry (a new one, or a new version of one under the same id)
/// in the caller's scope.
#[utoipa::path(post, path = "/api/knowledge", request_body = NewKnowledge, responses(
    (status = 201, description = "The entry as stored", body = Object),
    (status = 422, description = "No title or content, content over 32 KiB, a bad scope or id, or a scope not the caller's to write; nothing saved", body = ErrorBody),
))]
pub(crate) async fn save(
    State(state): State<AppState>,
    caller: Caller,
    JsonBody(body): JsonBody<NewKnowledge>,
) -> Result<(StatusCode, Json<Entry>), ApiError> {
    let visible = visible(&caller);
    let own = visible.home();
    let scope = match body.scope {
        Some(scope) => scope.parse::<Scope>().map_err(|e| knowledge_error(e.into()))?,
        None => own.clone(),
    };
    if !caller.admin && scope != own {
        return Err(ApiError::Unprocessable(format!(
            "only an admin may write scope {scope}: leave `scope` out for {own}"
        )));
    }
    let draft = Draft {
        id: body.id,
        scope: Some(scope),
        title: body.title,
        content: body.content,
        tags: body.tags,
        source: None,
    };
    let entry = state.knowledge.save(draft).await.map_err(knowledge_error)?;
    Ok((StatusCode::CREATED, Json(entry)))
}

/// Removes an entry of the caller's own scope (an admin: any). Any other
/// is a 404, as a missing one is.
#[utoipa::path(delete, path = "/api/knowledge/{id}",
    params(("id" = String, Path, description = "Entry id")),
    responses(
        (status = 200, description = "The entry removed", body = Object),
        (status = 404, body = ErrorBody),
    ))]
pub(crate) async fn remove(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Entry>, ApiError> {
    // A user removes only their own scope's entry of that id (the nearest
    // when there is one): the others they see (global, agent types') are
    // as absent as a missing one.
    let visible = visible(&caller);
    let named = state.knowledge.get(&id, &visible).await.map_err(knowledge_error)?;
    if !caller.admin && named.scope != visible.home() {
        return Err(not_found(&id));
    }
    let entry = state.knowledge.remove(&id, &visible).await.map_err(knowledge_error)?;
    Ok(Json(entry))
}
