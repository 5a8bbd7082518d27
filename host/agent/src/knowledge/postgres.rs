//! Knowledge in PostgreSQL (`host/trace/migrations/0006_knowledge.sql`): one
//! row per entry, shared by every host on the database, with a generated
//! `tsvector` (title weight A, tags B, content C) under a GIN index.
//!
//! A query goes through `websearch_to_tsquery`, which accepts any text
//! (quotes, colons, `AND` are never an error), then its words are joined by
//! OR instead of AND and negations dropped, so an entry is found when it
//! matches some of the words and ranks higher the more it matches;
//! `ts_rank_cd` ranks.

use super::{Draft, Entry, Hit, KnowledgeError, KnowledgeStore, Source, Visible, snippet};
use async_trait::async_trait;
use reson_trace::database::{Database, DatabaseError};
use sqlx::Row as _;
use sqlx::postgres::PgRow;

const COLUMNS: &str =
    "id, scope, title, content, tags, created_at, updated_at, source_trace_id, source_call_id";
/// Separates the tags of one entry in the batch insert's text array (the
/// tags of many entries cannot be one two-dimensional array: their counts
/// differ). A control character, which no tag holds.
const TAG_SEPARATOR: &str = "\u{1f}";
/// Rows per insert statement of a batch.
const BATCH_ROWS: usize = 5_000;

/// Knowledge in the database several hosts share.
#[derive(Debug, Clone)]
pub struct PgKnowledgeStore {
    db: Database,
}

impl PgKnowledgeStore {
    /// The store in `db` (migrated when it was opened).
    pub fn new(db: Database) -> Self {
        Self { db }
    }
}

fn query_failed(e: sqlx::Error) -> KnowledgeError {
    KnowledgeError::Database(DatabaseError::Query(e))
}

/// The scopes to filter on; `None` for all.
fn scopes(visible: &Visible) -> Option<Vec<String>> {
    match visible {
        Visible::All => None,
        Visible::Scopes(scopes) => Some(scopes.iter().map(|s| s.to_string()).collect()),
    }
}

fn from_row(row: &PgRow) -> Result<Entry, KnowledgeError> {
    let get = |name: &str| row.try_get::<String, _>(name).map_err(query_failed);
    let trace_id: Option<String> = row.try_get("source_trace_id").map_err(query_failed)?;
    let call_id: Option<String> = row.try_get("source_call_id").map_err(query_failed)?;
    Ok(Entry {
        id: get("id")?,
        scope: get("scope")?.parse()?,
        title: get("title")?,
        content: get("content")?,
        tags: row.try_get("tags").map_err(query_failed)?,
        created_at: get("created_at")?,
        updated_at: get("updated_at")?,
        source: trace_id.map(|trace_id| Source { trace_id, call_id }),
    })
}

#[async_trait]
impl KnowledgeStore for PgKnowledgeStore {
    async fn save_all(&self, drafts: Vec<Draft>) -> Result<Vec<Entry>, KnowledgeError> {
        let mut entries = super::entries(drafts)?;
        let mut tx = self.db.pool().begin().await.map_err(query_failed)?;
        for chunk in entries.chunks_mut(BATCH_ROWS) {
            let column = |f: fn(&Entry) -> String| chunk.iter().map(f).collect::<Vec<_>>();
            let optional =
                |f: fn(&Entry) -> Option<String>| chunk.iter().map(f).collect::<Vec<_>>();
            let kept: Vec<(String, String)> = sqlx::query_as(
                "INSERT INTO knowledge AS k \
                 (id, scope, title, content, tags, created_at, updated_at, source_trace_id, \
                  source_call_id) \
                 SELECT id, scope, title, content, \
                   CASE WHEN tags = '' THEN '{}'::text[] ELSE string_to_array(tags, $10) END, \
                   created_at, updated_at, source_trace_id, source_call_id \
                 FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], \
                   $6::text[], $7::text[], $8::text[], $9::text[]) \
                   AS t(id, scope, title, content, tags, created_at, updated_at, \
                        source_trace_id, source_call_id) \
                 ON CONFLICT (id) DO UPDATE SET scope = EXCLUDED.scope, title = EXCLUDED.title, \
                   content = EXCLUDED.content, tags = EXCLUDED.tags, \
                   updated_at = EXCLUDED.updated_at, source_trace_id = EXCLUDED.source_trace_id, \
                   source_call_id = EXCLUDED.source_call_id \
                 RETURNING k.id, k.created_at",
            )
            .bind(column(|e| e.id.clone()))
            .bind(column(|e| e.scope.to_string()))
            .bind(column(|e| e.title.clone()))
            .bind(column(|e| e.content.clone()))
            .bind(column(|e| e.tags.join(TAG_SEPARATOR)))
            .bind(column(|e| e.created_at.clone()))
            .bind(column(|e| e.updated_at.clone()))
            .bind(optional(|e| e.source.as_ref().map(|s| s.trace_id.clone())))
            .bind(optional(|e| e.source.as_ref().and_then(|s| s.call_id.clone())))
            .bind(TAG_SEPARATOR)
            .fetch_all(&mut *tx)
            .await
            .map_err(query_failed)?;
            for (id, created_at) in kept {
                if let Some(entry) = chunk.iter_mut().find(|e| e.id == id) {
                    entry.created_at = created_at;
                }
            }
        }
        tx.commit().await.map_err(query_failed)?;
        Ok(entries)
    }

    async fn get(&self, id: &str, visible: &Visible) -> Result<Entry, KnowledgeError> {
        let sql = format!(
            "SELECT {COLUMNS} FROM knowledge WHERE id = $1 AND ($2::text[] IS NULL OR scope = ANY($2))"
        );
        let row = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(id)
            .bind(scopes(visible))
            .fetch_optional(self.db.pool())
            .await
            .map_err(query_failed)?
            .ok_or_else(|| KnowledgeError::UnknownId(id.to_owned()))?;
        from_row(&row)
    }

    async fn remove(&self, id: &str, visible: &Visible) -> Result<Entry, KnowledgeError> {
        let sql = format!(
            "DELETE FROM knowledge WHERE id = $1 AND ($2::text[] IS NULL OR scope = ANY($2)) \
             RETURNING {COLUMNS}"
        );
        let row = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(id)
            .bind(scopes(visible))
            .fetch_optional(self.db.pool())
            .await
            .map_err(query_failed)?
            .ok_or_else(|| KnowledgeError::UnknownId(id.to_owned()))?;
        from_row(&row)
    }

    async fn list(&self, visible: &Visible) -> Result<Vec<Entry>, KnowledgeError> {
        let sql = format!(
            "SELECT {COLUMNS} FROM knowledge WHERE ($1::text[] IS NULL OR scope = ANY($1)) \
             ORDER BY created_at, id"
        );
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(scopes(visible))
            .fetch_all(self.db.pool())
            .await
            .map_err(query_failed)?;
        rows.iter().map(from_row).collect()
    }

    async fn search(
        &self,
        query: &str,
        visible: &Visible,
        limit: usize,
    ) -> Result<Vec<Hit>, KnowledgeError> {
        let limit = limit.min(super::MAX_LIMIT);
        if limit == 0 || query.trim().is_empty() {
            return Ok(Vec::new());
        }
        // A NUL byte is the one thing PostgreSQL text cannot hold.
        let query = query.replace('\0', " ");
        let sql = format!(
            "WITH q AS (SELECT replace(replace(websearch_to_tsquery('english', $1)::text, '!', ''), \
                ' & ', ' | ')::tsquery AS query) \
             SELECT {COLUMNS}, ts_rank_cd('{{0.1, 0.2, 0.4, 1.0}}', search, q.query, 1) AS score \
             FROM knowledge, q \
             WHERE search @@ q.query AND ($2::text[] IS NULL OR scope = ANY($2)) \
             ORDER BY score DESC, created_at DESC, id \
             LIMIT $3"
        );
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(&query)
            .bind(scopes(visible))
            .bind(limit as i64)
            .fetch_all(self.db.pool())
            .await
            .map_err(query_failed)?;
        rows.iter()
            .map(|row| {
                let entry = from_row(row)?;
                let score: f32 = row.try_get("score").map_err(query_failed)?;
                Ok(Hit { snippet: snippet(&entry.content, &query), score, entry })
            })
            .collect()
    }

    fn describe(&self) -> String {
        "the PostgreSQL database of [store]".to_owned()
    }
}
