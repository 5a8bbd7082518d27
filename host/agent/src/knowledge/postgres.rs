//! Knowledge in PostgreSQL (`host/trace/migrations/0006_knowledge.sql`,
//! keyed by scope and id since `0008`): one row per entry, shared by every
//! host on the database, with a generated `tsvector` (title weight A, tags
//! B, content C) under a GIN index.
//!
//! A query is words: the lexemes `to_tsvector` finds in it (any text is
//! fine: quotes, colons or `AND` are never an error). An entry is found
//! when it matches some of them and ranks higher the more it matches;
//! `ts_rank_cd` ranks. Ranking every entry that matches one common word
//! would read a good part of the table, so only candidates are ranked:
//! those matching all the words (up to [`MOST_MATCHING`]), and, when those
//! are fewer than the hits asked for, for each word alone up to
//! [`PER_WORD`] entries (all of them for a rare word, a sample of a common
//! one). Each is a lookup in the GIN index. So when enough entries hold
//! every word, the hits are among them: an entry with some of the words
//! comes after those, however its words are placed.

use super::{Draft, Entry, Hit, KnowledgeError, KnowledgeStore, Source, snippet};
use crate::scope::Visible;
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
/// Most words of a query searched for; the rest are left out.
const MAX_QUERY_WORDS: usize = 16;
/// Most candidates matching all of a query's words, ranked.
const MOST_MATCHING: usize = 1_000;
/// Most candidates ranked for each word alone: a word in fewer entries
/// brings all of them; a common one a sample (those matching every word
/// come in as [`MOST_MATCHING`]).
const PER_WORD: usize = 100;

/// The condition on the row id `$1` names among the scopes of a
/// [`Visible`] bound from `$2`: the nearest, as [`super::nearest`] picks
/// it (the caller's own scope, then a user's, an agent type's, the global
/// one; for a caller without a user, `global` is their own).
fn named() -> String {
    format!(
        "id = $1 AND {} ORDER BY scope = coalesce($3, 'global') DESC, scope LIKE 'user:%' DESC, \
         scope LIKE 'agent:%' DESC, scope LIMIT 1",
        Visible::sql_condition(2)
    )
}

/// The tsqueries one search runs, from the lexemes of its text.
struct Plan {
    /// Each word alone.
    words: Vec<String>,
    /// All of the words.
    most: String,
    /// Any of the words: what ranks.
    any: String,
}

impl Plan {
    /// `None` for a query with no searchable word.
    fn new(mut lexemes: Vec<String>) -> Option<Self> {
        lexemes.truncate(MAX_QUERY_WORDS);
        if lexemes.is_empty() {
            return None;
        }
        // A lexeme quoted as tsquery input: as it is, not parsed again.
        let words: Vec<String> = lexemes
            .iter()
            .map(|l| format!("'{}'", l.replace('\\', "\\\\").replace('\'', "''")))
            .collect();
        let most = format!("({})", words.join(" & "));
        Some(Self { any: words.join(" | "), most, words })
    }
}

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

impl PgKnowledgeStore {
    /// The entry `sql` returns, given the id as `$1` and `visible`'s
    /// scopes from `$2` (the user's scope is `$3`, the nearest); one the
    /// caller may not see is as unknown as a missing one.
    async fn visible_entry(
        &self,
        sql: String,
        id: &str,
        visible: &Visible,
    ) -> Result<Entry, KnowledgeError> {
        let (all, user, agent) = visible.sql_values();
        let row = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(id)
            .bind(all)
            .bind(user)
            .bind(agent)
            .fetch_optional(self.db.pool())
            .await
            .map_err(query_failed)?
            .ok_or_else(|| KnowledgeError::UnknownId(id.to_owned()))?;
        from_row(&row)
    }
}

fn query_failed(e: sqlx::Error) -> KnowledgeError {
    KnowledgeError::Database(DatabaseError::Query(e))
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
            let kept: Vec<(String, String, String)> = sqlx::query_as(
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
                 ON CONFLICT (scope, id) DO UPDATE SET title = EXCLUDED.title, \
                   content = EXCLUDED.content, tags = EXCLUDED.tags, \
                   updated_at = EXCLUDED.updated_at, source_trace_id = EXCLUDED.source_trace_id, \
                   source_call_id = EXCLUDED.source_call_id \
                 RETURNING k.scope, k.id, k.created_at",
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
            for (scope, id, created_at) in kept {
                if let Some(entry) =
                    chunk.iter_mut().find(|e| e.id == id && e.scope.to_string() == scope)
                {
                    entry.created_at = created_at;
                }
            }
        }
        tx.commit().await.map_err(query_failed)?;
        Ok(entries)
    }

    async fn get(&self, id: &str, visible: &Visible) -> Result<Entry, KnowledgeError> {
        let sql = format!("SELECT {COLUMNS} FROM knowledge WHERE {}", named());
        self.visible_entry(sql, id, visible).await
    }

    async fn remove(&self, id: &str, visible: &Visible) -> Result<Entry, KnowledgeError> {
        let sql = format!(
            "DELETE FROM knowledge WHERE (scope, id) IN (SELECT scope, id FROM knowledge \
             WHERE {}) RETURNING {COLUMNS}",
            named()
        );
        self.visible_entry(sql, id, visible).await
    }

    async fn list(&self, visible: &Visible) -> Result<Vec<Entry>, KnowledgeError> {
        let sql = format!(
            "SELECT {COLUMNS} FROM knowledge WHERE {} ORDER BY created_at, id",
            Visible::sql_condition(1)
        );
        let (all, user, agent) = visible.sql_values();
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(all)
            .bind(user)
            .bind(agent)
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
        let lexemes: Vec<String> =
            sqlx::query_scalar("SELECT tsvector_to_array(to_tsvector('english', $1))")
                .bind(&query)
                .fetch_one(self.db.pool())
                .await
                .map_err(query_failed)?;
        let Some(plan) = Plan::new(lexemes) else {
            return Ok(Vec::new());
        };
        let sql = format!(
            "WITH every_word AS (\
               SELECT scope, id, created_at, search FROM knowledge \
               WHERE search @@ $2::tsquery AND {visible} LIMIT {MOST}), \
             candidates AS (\
               SELECT * FROM every_word \
               UNION ALL \
               SELECT c.* FROM unnest($1::text[]) AS word, LATERAL (\
                 SELECT scope, id, created_at, search FROM knowledge \
                 WHERE search @@ word::tsquery AND {visible} LIMIT {PER_WORD}) c \
               WHERE (SELECT count(*) FROM every_word) < $4), \
             best AS (\
               SELECT DISTINCT scope, id, created_at AS at, \
                 ts_rank_cd('{{0.1, 0.2, 0.4, 1.0}}', search, $3::tsquery, 1) AS score \
               FROM candidates ORDER BY score DESC, at DESC, id LIMIT $4) \
             SELECT {COLUMNS}, best.score FROM best JOIN knowledge USING (scope, id) \
             ORDER BY best.score DESC, best.at DESC, id",
            // A filter on the rows the GIN index finds: looking the scope up
            // in its own index costs more than the search itself.
            visible = Visible::sql_condition_on("(scope || '')", 5),
            MOST = MOST_MATCHING,
            PER_WORD = PER_WORD,
        );
        let (all, user, agent) = visible.sql_values();
        let mut tx = self.db.pool().begin().await.map_err(query_failed)?;
        // Under a LIMIT the planner may expect a sequential scan to reach
        // the first matches of a word sooner; for a rare word it reads the
        // whole table. The GIN index is the way to every candidate here.
        sqlx::query("SET LOCAL enable_seqscan = off")
            .execute(&mut *tx)
            .await
            .map_err(query_failed)?;
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(&plan.words)
            .bind(&plan.most)
            .bind(&plan.any)
            .bind(limit as i64)
            .bind(all)
            .bind(user)
            .bind(agent)
            .fetch_all(&mut *tx)
            .await
            .map_err(query_failed)?;
        tx.commit().await.map_err(query_failed)?;
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
