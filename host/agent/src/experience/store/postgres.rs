//! Experiences in PostgreSQL (`host/migrations/0002_experiences.sql`): one
//! row each, shared by every host on the database. An append is one
//! transaction; a rating is one `UPDATE ... SET helpful = helpful + 1`, so
//! concurrent raters on any number of hosts are all counted. Ranking runs
//! in SQL, on the same rules as [`rank`](crate::experience::rank) (no
//! pgvector needed).

use super::super::{Experience, ExperienceError, Metrics, Rating, Tags};
use super::ExperienceStore;
use crate::scope::Visible;
use async_trait::async_trait;
use reson_trace::database::{Database, DatabaseError};
use sqlx::Row as _;
use sqlx::postgres::PgRow;
use std::collections::BTreeMap;

const COLUMNS: &str = "id, trace_id, category, state_tags, intent_tags, helpful, harmful, created_at, \
                       extra_yaml, rule, scope, condition, evidence, source, confidence, \
                       usage_count, success_rate";

/// Experiences in the database several hosts share.
#[derive(Debug, Clone)]
pub struct PgExperienceStore {
    db: Database,
}

impl PgExperienceStore {
    /// The store in `db` (migrated when it was opened).
    pub fn new(db: Database) -> Self {
        Self { db }
    }
}

fn query_failed(e: sqlx::Error) -> ExperienceError {
    ExperienceError::Database(DatabaseError::Query(e))
}

/// Counts are unsigned in Rust and `bigint` in SQL; no rating count gets
/// near either limit.
fn count(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn from_row(row: &PgRow) -> Result<Experience, ExperienceError> {
    let id: String = row.try_get("id").map_err(query_failed)?;
    let extra_yaml: String = row.try_get("extra_yaml").map_err(query_failed)?;
    let extra = if extra_yaml.is_empty() {
        BTreeMap::new()
    } else {
        serde_yaml_ng::from_str(&extra_yaml).map_err(|e| {
            ExperienceError::Invalid(format!("experience {id}: its stored extra fields: {e}"))
        })?
    };
    let helpful: i64 = row.try_get("helpful").map_err(query_failed)?;
    let harmful: i64 = row.try_get("harmful").map_err(query_failed)?;
    let invalid = |what: String| ExperienceError::Invalid(format!("experience {id}: {what}"));
    let scope: String = row.try_get("scope").map_err(query_failed)?;
    let source: String = row.try_get("source").map_err(query_failed)?;
    let usage_count: i64 = row.try_get("usage_count").map_err(query_failed)?;
    Ok(Experience {
        scope: scope.parse().map_err(|e: crate::scope::ScopeError| invalid(e.to_string()))?,
        condition: row.try_get("condition").map_err(query_failed)?,
        evidence: row.try_get("evidence").map_err(query_failed)?,
        source: source.parse().map_err(invalid)?,
        confidence: row.try_get("confidence").map_err(query_failed)?,
        usage_count: usage_count.max(0) as u64,
        success_rate: row.try_get("success_rate").map_err(query_failed)?,
        trace_id: row.try_get("trace_id").map_err(query_failed)?,
        category: row.try_get("category").map_err(query_failed)?,
        tags: Tags {
            state: row.try_get("state_tags").map_err(query_failed)?,
            intent: row.try_get("intent_tags").map_err(query_failed)?,
        },
        metrics: Metrics { helpful: helpful.max(0) as u64, harmful: harmful.max(0) as u64 },
        created_at: row.try_get("created_at").map_err(query_failed)?,
        extra,
        rule: row.try_get("rule").map_err(query_failed)?,
        id,
    })
}

#[async_trait]
impl ExperienceStore for PgExperienceStore {
    async fn list(&self) -> Result<Vec<Experience>, ExperienceError> {
        let sql = format!("SELECT {COLUMNS} FROM experiences ORDER BY seq");
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
            .fetch_all(self.db.pool())
            .await
            .map_err(query_failed)?;
        rows.iter().map(from_row).collect()
    }

    async fn append(&self, new: Vec<Experience>) -> Result<(), ExperienceError> {
        super::check_new(&new)?;
        let mut tx = self.db.pool().begin().await.map_err(query_failed)?;
        for e in &new {
            let extra_yaml = if e.extra.is_empty() {
                String::new()
            } else {
                serde_yaml_ng::to_string(&e.extra).map_err(|err| {
                    ExperienceError::Invalid(format!("experience {}: extra fields: {err}", e.id))
                })?
            };
            // What the file store would write goes through the same
            // redaction point.
            let redact = |s: &str| reson_text::redact::redact(s).into_owned();
            let redact_all = |v: &[String]| v.iter().map(|s| redact(s)).collect::<Vec<_>>();
            let inserted = sqlx::query(
                "INSERT INTO experiences \
                 (id, trace_id, category, state_tags, intent_tags, helpful, harmful, created_at, \
                  extra_yaml, rule, scope, condition, evidence, source, confidence, usage_count, \
                  success_rate) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, \
                         $17) \
                 ON CONFLICT (id) DO NOTHING",
            )
            .bind(&e.id)
            .bind(redact(&e.trace_id))
            .bind(redact(&e.category))
            .bind(redact_all(&e.tags.state))
            .bind(redact_all(&e.tags.intent))
            .bind(count(e.metrics.helpful))
            .bind(count(e.metrics.harmful))
            .bind(&e.created_at)
            .bind(redact(&extra_yaml))
            .bind(redact(&e.rule))
            .bind(e.scope.to_string())
            .bind(redact(&e.condition))
            .bind(redact_all(&e.evidence))
            .bind(e.source.as_str())
            .bind(e.confidence)
            .bind(count(e.usage_count))
            .bind(e.success_rate)
            .execute(&mut *tx)
            .await
            .map_err(query_failed)?;
            if inserted.rows_affected() == 0 {
                // Dropping the transaction rolls the batch back.
                return Err(ExperienceError::DuplicateId(e.id.clone()));
            }
        }
        tx.commit().await.map_err(query_failed)
    }

    async fn rate(&self, id: &str, rating: Rating) -> Result<Experience, ExperienceError> {
        let (helpful, harmful) = match rating {
            Rating::Helpful => (1i64, 0i64),
            Rating::Harmful => (0, 1),
        };
        // One statement, so that concurrent ratings each count and the
        // rate is computed from the counts they leave.
        let sql = format!(
            "UPDATE experiences SET helpful = helpful + $2, harmful = harmful + $3, \
                 success_rate = (helpful + $2)::double precision \
                                / (helpful + $2 + harmful + $3) \
             WHERE id = $1 RETURNING {COLUMNS}"
        );
        let row = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(id)
            .bind(helpful)
            .bind(harmful)
            .fetch_optional(self.db.pool())
            .await
            .map_err(query_failed)?
            .ok_or_else(|| ExperienceError::UnknownId(id.to_owned()))?;
        from_row(&row)
    }

    async fn record_use(&self, ids: &[String]) -> Result<(), ExperienceError> {
        sqlx::query("UPDATE experiences SET usage_count = usage_count + 1 WHERE id = ANY($1)")
            .bind(ids)
            .execute(self.db.pool())
            .await
            .map_err(query_failed)?;
        Ok(())
    }

    async fn remove(&self, id: &str) -> Result<Experience, ExperienceError> {
        let sql = format!("DELETE FROM experiences WHERE id = $1 RETURNING {COLUMNS}");
        let row = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(id)
            .fetch_optional(self.db.pool())
            .await
            .map_err(query_failed)?
            .ok_or_else(|| ExperienceError::UnknownId(id.to_owned()))?;
        from_row(&row)
    }

    async fn is_empty(&self) -> Result<bool, ExperienceError> {
        sqlx::query_scalar("SELECT NOT EXISTS (SELECT 1 FROM experiences)")
            .fetch_one(self.db.pool())
            .await
            .map_err(query_failed)
    }

    async fn relevant_in(
        &self,
        visible: &Visible,
        intent: &[String],
        state: &[String],
        k: usize,
    ) -> Result<Vec<Experience>, ExperienceError> {
        // `rank` compares tags ignoring ASCII case only; lower() under the
        // "C" collation does the same.
        let lower =
            |tags: &[String]| tags.iter().map(|t| t.to_ascii_lowercase()).collect::<Vec<_>>();
        let (all, user, agent) = visible.sql_values();
        let sql = format!(
            "SELECT {COLUMNS} FROM (\
               SELECT *, \
                 (SELECT count(*) FROM unnest(intent_tags) t WHERE lower(t COLLATE \"C\") = ANY($1)) \
                   AS intent_shared, \
                 (SELECT count(*) FROM unnest(state_tags) t WHERE lower(t COLLATE \"C\") = ANY($2)) \
                   AS state_shared \
               FROM experiences \
               WHERE {visible}) ranked \
             WHERE intent_shared + state_shared > 0 \
             ORDER BY intent_shared DESC, state_shared DESC, helpful - harmful DESC, seq \
             LIMIT $3",
            visible = Visible::sql_condition(4)
        );
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(lower(intent))
            .bind(lower(state))
            .bind(count(k as u64))
            .bind(all)
            .bind(user)
            .bind(agent)
            .fetch_all(self.db.pool())
            .await
            .map_err(query_failed)?;
        rows.iter().map(from_row).collect()
    }

    fn describe(&self) -> String {
        "the PostgreSQL database of [store]".to_owned()
    }
}
