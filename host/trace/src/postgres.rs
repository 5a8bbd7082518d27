//! Traces in PostgreSQL, shared by every host on the database
//! (schema: `host/migrations/0001_traces.sql`).
//!
//! Metadata, messages, events and goal trees are kept as the JSON the file
//! store writes, through the same redaction point, and the metadata is
//! reconciled with later messages and events as there: the semantics are
//! [`MemoryTraceStore`](super::MemoryTraceStore)'s, and the same
//! conformance tests run against all three stores.
//!
//! Each write is one SQL statement, so one transaction: a message with
//! its metadata and its `message_added` event, or a run's goal tree,
//! metadata and closing event, are seen by a reader (or a host taking the
//! trace over) whole or not at all. Sequences and event ids are the
//! caller's next, as in the other stores; the primary keys refuse one to a
//! writer whose copy of the trace is behind, rather than storing it twice.
//! The writes of a run's steps (a trace created, messages, events,
//! metadata) are group-committed across traces (see `group.rs`): those
//! that arrive while others commit share one transaction and one WAL
//! flush, each still whole as one statement, and each returns once that
//! transaction committed. The rare ones (images, objects, records, a goal
//! tree alone, imports) run on the pool as before.
//! Every event stored is announced on the channel [`EVENTS_CHANNEL`](crate::EVENTS_CHANNEL) with
//! `"{trace_id} {event_id}"` once its write committed, so hosts listening
//! hear of it when it is readable (see `announce.rs` for why not in the
//! write's own transaction).
//!
//! The main path is one query. Each message stores its `segment`: the
//! sequence of the first message of its linear chain (a message joins its
//! parent's chain when the parent is that chain's last message, and starts
//! one otherwise). A recursive CTE walks from the head's chain to the
//! root's, one row per branch point, and each chain's part of the path is
//! a range scan of one index.

use super::announce::Announcer;
use super::artifact::{ObjectData, RecordData};
use super::event::{Event, EventKind};
use super::goal::{GoalStats, GoalTree};
use super::group::{Write, Writes};
use super::image::{ImageData, image_media_type};
use super::message::Message;
use super::message::{place_next, take_inline};
use super::model::{Trace, TraceStatus, now_ms};
use super::store::{
    TraceError, TraceFilter, TraceSnapshot, TraceStore, check_digest, check_id, check_record_name,
};
use crate::database::{Database, DatabaseError};
use async_trait::async_trait;
use futures::TryStreamExt;
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

/// The walk from a head (`$2`) of trace `$1` to the root: one row
/// `(segment, upto)` per chain on the path.
const MAIN_PATH: &str = "WITH RECURSIVE walk (segment, upto) AS ( \
         SELECT h.segment, h.sequence FROM messages h \
         WHERE h.trace_id = $1 AND h.sequence = $2 \
       UNION ALL \
         SELECT p.segment, p.sequence FROM walk w \
         JOIN messages f ON f.trace_id = $1 AND f.sequence = w.segment \
         JOIN messages p ON p.trace_id = $1 AND p.sequence = f.parent_sequence \
         WHERE f.parent_sequence < f.sequence)";

/// The messages of the chains [`MAIN_PATH`] walked, as `c`, root's chain
/// first: each chain's part is a range scan of the segment index, in
/// order, so PostgreSQL sorts nothing and rows stream in path order.
const MAIN_PATH_ROWS: &str = "FROM (SELECT * FROM walk ORDER BY segment) w \
     CROSS JOIN LATERAL ( \
         SELECT m.sequence, m.body FROM messages m \
         WHERE m.trace_id = $1 AND m.segment = w.segment AND m.sequence <= w.upto \
         ORDER BY m.sequence) c";

/// Messages decoded per blocking task on the main path.
const DECODE_BATCH: usize = 4096;

/// Decodes `rows` of trace `id` on a blocking thread.
fn decode_batch(
    id: &str,
    rows: Vec<(i64, String)>,
) -> tokio::task::JoinHandle<Result<Vec<Message>, TraceError>> {
    let id = id.to_owned();
    tokio::task::spawn_blocking(move || rows.iter().map(|(_, body)| parse(&id, body)).collect())
}

/// Traces, messages, goals and events in a PostgreSQL database.
#[derive(Clone, Debug)]
pub struct PgTraceStore {
    db: Database,
    announcer: Arc<Announcer>,
    writes: Arc<Writes>,
}

impl PgTraceStore {
    /// The store on `db` (already migrated).
    pub fn new(db: Database) -> Self {
        Self { db, announcer: Arc::default(), writes: Arc::default() }
    }

    /// The store on `db` with every write in a transaction of its own, as
    /// before group commit; only for the benchmark that compares the two.
    #[doc(hidden)]
    pub fn one_commit_per_write(db: Database) -> Self {
        Self { db, announcer: Arc::default(), writes: Arc::new(Writes::alone()) }
    }

    /// Write transactions this store committed (or tried) so far; for the
    /// benchmark.
    #[doc(hidden)]
    pub fn write_commits(&self) -> u64 {
        self.writes.commits()
    }

    /// Runs `write` with the others arriving meanwhile (see `group.rs`).
    async fn run<T>(&self, write: Write) -> Result<T, TraceError>
    where
        T: for<'r> sqlx::FromRow<'r, sqlx::postgres::PgRow>,
    {
        self.writes.run(&self.db, write).await.map_err(db)
    }

    /// The sequences of the main path ending at `head`, root first: the
    /// path's shape in one query, without loading the messages.
    pub async fn main_path_sequences(&self, id: &str, head: u64) -> Result<Vec<u64>, TraceError> {
        check_id(id)?;
        let sql = format!("{MAIN_PATH} SELECT c.sequence {MAIN_PATH_ROWS}");
        let mut path: Vec<u64> = sqlx::query_scalar::<_, i64>(sqlx::AssertSqlSafe(sql))
            .bind(id)
            .bind(to_i64(head))
            .fetch_all(self.db.pool())
            .await
            .map_err(db)?
            .into_iter()
            .map(to_u64)
            .collect();
        if path.is_empty() {
            self.require(id).await?;
            return Err(TraceError::NoSuchMessage { trace_id: id.to_owned(), sequence: head });
        }
        path.sort_unstable();
        Ok(path)
    }

    /// `NotFound` unless trace `id` exists.
    /// The bytes `sql` selects for trace `id` and `key` (an image's name, an
    /// object's digest); `None` when the trace has none such, `NotFound`
    /// when there is no such trace.
    async fn bytes_of(
        &self,
        sql: &'static str,
        id: &str,
        key: &str,
    ) -> Result<Option<Vec<u8>>, TraceError> {
        check_id(id)?;
        let data: Option<Vec<u8>> = sqlx::query_scalar(sql)
            .bind(id)
            .bind(key)
            .fetch_optional(self.db.pool())
            .await
            .map_err(db)?;
        if data.is_none() {
            self.require(id).await?;
        }
        Ok(data)
    }

    async fn require(&self, id: &str) -> Result<(), TraceError> {
        let found: Option<i32> = sqlx::query_scalar("SELECT 1 FROM traces WHERE id = $1")
            .bind(id)
            .fetch_optional(self.db.pool())
            .await
            .map_err(db)?;
        found.map(drop).ok_or_else(|| TraceError::NotFound(id.to_owned()))
    }

    /// Stores the objects and records of an imported `snapshot`.
    async fn write_artifacts(
        tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
        snapshot: &TraceSnapshot,
    ) -> Result<(), TraceError> {
        let id = &snapshot.trace.id;
        if !snapshot.objects.is_empty() {
            let digests: Vec<&str> = snapshot.objects.iter().map(|o| o.digest.as_str()).collect();
            let data: Vec<&[u8]> = snapshot.objects.iter().map(|o| o.data.as_slice()).collect();
            sqlx::query(
                "INSERT INTO trace_objects (trace_id, digest, data) \
                 SELECT $1, * FROM UNNEST($2::text[], $3::bytea[])",
            )
            .bind(id)
            .bind(digests)
            .bind(data)
            .execute(&mut **tx)
            .await
            .map_err(db)?;
        }
        if !snapshot.records.is_empty() {
            let kinds: Vec<&str> = snapshot.records.iter().map(|r| r.kind.as_str()).collect();
            let keys: Vec<&str> = snapshot.records.iter().map(|r| r.key.as_str()).collect();
            let bodies = snapshot
                .records
                .iter()
                .map(|r| kept(id, &r.body))
                .collect::<Result<Vec<_>, _>>()?;
            sqlx::query(
                "INSERT INTO trace_records (trace_id, kind, key, body) \
                 SELECT $1, * FROM UNNEST($2::text[], $3::text[], $4::text[])",
            )
            .bind(id)
            .bind(kinds)
            .bind(keys)
            .bind(bodies)
            .execute(&mut **tx)
            .await
            .map_err(db)?;
        }
        Ok(())
    }

    /// Stores `images` of trace `id`, before the message naming them (as
    /// the file store does). A name already there is overwritten: it can
    /// only be left by a write whose message never made it.
    async fn write_images<'e>(
        executor: impl sqlx::PgExecutor<'e>,
        id: &str,
        images: &[ImageData],
    ) -> Result<(), TraceError> {
        if images.is_empty() {
            return Ok(());
        }
        let names: Vec<&str> = images.iter().map(|i| i.name.as_str()).collect();
        let types: Vec<&str> =
            images.iter().map(|i| image_media_type(&i.name).unwrap_or_default()).collect();
        let data: Vec<&[u8]> = images.iter().map(|i| i.data.as_slice()).collect();
        // Nothing is written for a trace that does not exist; the message
        // write that follows reports it.
        sqlx::query(
            "INSERT INTO message_images (trace_id, name, media_type, data) \
             SELECT t.id, i.name, i.media_type, i.data FROM traces t \
             CROSS JOIN UNNEST($2::text[], $3::text[], $4::bytea[]) AS i (name, media_type, data) \
             WHERE t.id = $1 \
             ON CONFLICT (trace_id, name) DO UPDATE \
             SET media_type = EXCLUDED.media_type, data = EXCLUDED.data",
        )
        .bind(id)
        .bind(names)
        .bind(types)
        .bind(data)
        .execute(executor)
        .await
        .map_err(db)?;
        Ok(())
    }

    async fn begin(&self) -> Result<sqlx::Transaction<'static, sqlx::Postgres>, TraceError> {
        self.db.pool().begin().await.map_err(db)
    }

    /// Stores `message` (placed by [`place`]) after `parent`, the trace's
    /// metadata `after`, and `event` if any, in one statement. `NotFound`
    /// without the trace; `NoSuchMessage` when `check_parent` and the
    /// parent is not stored.
    async fn write_message(
        &self,
        message: &Message,
        after: &Trace,
        check_parent: bool,
        event: Option<&Event>,
    ) -> Result<(), TraceError> {
        let id = &after.id;
        // The chain: the parent's, when the parent ends it (see the module
        // docs); a chain of its own otherwise.
        let write = "WITH t AS (SELECT id FROM traces WHERE id = $1 FOR UPDATE), \
                 p AS (SELECT x.segment, x.sequence = (SELECT max(y.sequence) FROM messages y \
                              WHERE y.trace_id = $1 AND y.segment = x.segment) AS tail \
                       FROM messages x WHERE x.trace_id = $1 AND x.sequence = $3), \
                 m AS (INSERT INTO messages \
                           (trace_id, sequence, parent_sequence, segment, goal_id, body) \
                       SELECT t.id, $2, $3, CASE WHEN p.tail THEN p.segment ELSE $2 END, $4, $5 \
                       FROM t LEFT JOIN p ON true \
                       WHERE p.segment IS NOT NULL OR NOT $10 \
                       RETURNING trace_id), \
                 u AS (UPDATE traces SET status = $6, parent_trace_id = $7, created_at_ms = $8, \
                              last_sequence = $2, meta = $9 \
                       WHERE id = (SELECT trace_id FROM m))";
        let sql = match event {
            Some(_) => format!(
                "{write}, e AS (INSERT INTO events (trace_id, id, body) \
                                SELECT trace_id, $11, $12 FROM m RETURNING trace_id) \
                 SELECT (SELECT count(*) FROM t), (SELECT count(*) FROM m), \
                        (SELECT count(*) FROM e)"
            ),
            None => format!(
                "{write} SELECT (SELECT count(*) FROM t), (SELECT count(*) FROM m), 0::bigint"
            ),
        };
        let mut write = Write::new(sqlx::AssertSqlSafe(sql))
            .bind(id)
            .bind(to_i64(message.sequence))
            .bind(message.parent_sequence.map(to_i64))
            .bind(message.goal_id.as_deref())
            .bind(kept(id, message)?)
            .bind(status_name(after.status))
            .bind(after.parent_trace_id.as_deref())
            .bind(to_i64(after.created_at_ms))
            .bind(kept(id, after)?)
            .bind(check_parent);
        if let Some(event) = event {
            write = write.bind(to_i64(event.id)).bind(kept(id, event)?);
        }
        let (traces, messages, events): (i64, i64, i64) = self.run(write).await?;
        match (traces, messages) {
            (0, _) => Err(TraceError::NotFound(id.clone())),
            (_, 0) => Err(TraceError::NoSuchMessage {
                trace_id: id.clone(),
                sequence: message.parent_sequence.unwrap_or_default(),
            }),
            _ => {
                if let Some(event) = event.filter(|_| events > 0) {
                    self.announcer.announce(&self.db, id, event.id);
                }
                Ok(())
            }
        }
    }

    /// Stores the trace's metadata, `goals` when given, and `event` with
    /// its notification, in one statement; `NotFound` without the trace.
    async fn write_trace(
        &self,
        trace: &Trace,
        goals: Option<&GoalTree>,
        event: Option<&Event>,
    ) -> Result<(), TraceError> {
        let id = &trace.id;
        let write = "WITH u AS (UPDATE traces SET status = $2, parent_trace_id = $3, \
                                created_at_ms = $4, last_sequence = $5, meta = $6, \
                                goals = coalesce($7, goals) \
                         WHERE id = $1 RETURNING id)";
        let sql = match event {
            Some(_) => format!(
                "{write}, e AS (INSERT INTO events (trace_id, id, body) \
                                SELECT id, $8, $9 FROM u RETURNING trace_id) \
                 SELECT (SELECT count(*) FROM u), (SELECT count(*) FROM e)"
            ),
            None => format!("{write} SELECT (SELECT count(*) FROM u), 0::bigint"),
        };
        let mut write = Write::new(sqlx::AssertSqlSafe(sql))
            .bind(id)
            .bind(status_name(trace.status))
            .bind(trace.parent_trace_id.as_deref())
            .bind(to_i64(trace.created_at_ms))
            .bind(to_i64(trace.last_sequence))
            .bind(kept(id, trace)?)
            .bind(goals.map(|g| kept(id, g)).transpose()?);
        if let Some(event) = event {
            write = write.bind(to_i64(event.id)).bind(kept(id, event)?);
        }
        let (updated, events): (i64, i64) = self.run(write).await?;
        if updated == 0 {
            return Err(TraceError::NotFound(id.clone()));
        }
        if let Some(event) = event.filter(|_| events > 0) {
            self.announcer.announce(&self.db, id, event.id);
        }
        Ok(())
    }
}

/// `message` placed after `parent` in `trace`, as the other stores place
/// it, and the trace once it is stored.
fn place(trace: &Trace, mut message: Message, parent: Option<u64>) -> (Message, Trace) {
    place_next(&mut message, trace, parent.or(trace.head_sequence));
    let seq = message.sequence;
    let mut after = trace.clone();
    after.last_sequence = seq;
    after.head_sequence = Some(seq);
    after.totals += &GoalStats::of(&message);
    after.updated_at_ms = message.created_at_ms;
    (message, after)
}

/// The next event of `trace`.
fn next_event(trace: &Trace, kind: EventKind) -> Event {
    Event { id: trace.last_event_id + 1, at_ms: now_ms(), kind }
}

/// The columns [`reconciled`] needs, for the traces `FROM traces t`.
const TRACE_COLUMNS: &str = "SELECT t.id, t.meta, \
        (SELECT max(e.id) FROM events e WHERE e.trace_id = t.id), \
        (SELECT '[' || string_agg(m.body, ',' ORDER BY m.sequence) || ']' \
         FROM messages m WHERE m.trace_id = t.id AND m.sequence > t.last_sequence) \
     FROM traces t";

type TraceRow = (String, String, Option<i64>, Option<String>);

/// The stored metadata brought up to date with the messages and events
/// written after it, as the memory store's `reconciled` does.
fn reconciled((id, meta, max_event, later): TraceRow) -> Result<Trace, TraceError> {
    let mut trace: Trace = parse(&id, &meta)?;
    if let Some(later) = later {
        for message in parse::<Vec<Message>>(&id, &later)? {
            trace.last_sequence = message.sequence;
            if message.parent_sequence == trace.head_sequence {
                trace.head_sequence = Some(message.sequence);
            }
            trace.totals += &GoalStats::of(&message);
            trace.updated_at_ms = trace.updated_at_ms.max(message.created_at_ms);
        }
    }
    if let Some(max_event) = max_event {
        trace.last_event_id = trace.last_event_id.max(to_u64(max_event));
    }
    Ok(trace)
}

/// Messages stored as JSON texts, by sequence.
fn parse_messages(id: &str, bodies: Option<String>) -> Result<Vec<Message>, TraceError> {
    bodies.map_or(Ok(Vec::new()), |b| parse(id, &b))
}

#[async_trait]
impl TraceStore for PgTraceStore {
    async fn create_trace(&self, trace: &Trace) -> Result<(), TraceError> {
        check_id(&trace.id)?;
        let inserted = self.run(insert_trace(trace, None)?).await?;
        created(trace, inserted)
    }

    async fn get_trace(&self, id: &str) -> Result<Option<Trace>, TraceError> {
        check_id(id)?;
        let row: Option<TraceRow> =
            sqlx::query_as(sqlx::AssertSqlSafe(format!("{TRACE_COLUMNS} WHERE t.id = $1")))
                .bind(id)
                .fetch_optional(self.db.pool())
                .await
                .map_err(db)?;
        row.map(reconciled).transpose()
    }

    async fn update_trace(&self, trace: &Trace) -> Result<(), TraceError> {
        check_id(&trace.id)?;
        self.write_trace(trace, None, None).await
    }

    async fn list_traces(&self, filter: &TraceFilter) -> Result<Vec<Trace>, TraceError> {
        // Only the conditions asked for, so that the planner picks the
        // index that serves them.
        let mut conditions = Vec::new();
        if filter.status.is_some() {
            conditions.push("t.status = $1");
        }
        if filter.parent_trace_id.is_some() {
            conditions.push("t.parent_trace_id = $2");
        }
        if filter.roots_only {
            conditions.push("t.parent_trace_id IS NULL");
        }
        if filter.uid.is_some() {
            conditions.push("t.uid = $3");
        }
        let mut sql = TRACE_COLUMNS.to_owned();
        if !conditions.is_empty() {
            sql.push_str(" WHERE ");
            sql.push_str(&conditions.join(" AND "));
        }
        sql.push_str(" ORDER BY t.created_at_ms DESC, t.id DESC");
        // Unused parameters are still typed, so all are always bound.
        let rows: Vec<TraceRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(filter.status.map(status_name))
            .bind(filter.parent_trace_id.as_deref())
            .bind(filter.uid.as_deref())
            .fetch_all(self.db.pool())
            .await
            .map_err(db)?;
        rows.into_iter().map(reconciled).collect()
    }

    async fn add_message(
        &self,
        trace: &mut Trace,
        message: Message,
        parent: Option<u64>,
    ) -> Result<Message, TraceError> {
        check_id(&trace.id)?;
        let check_parent = parent.is_some() && parent != trace.head_sequence;
        let (mut message, after) = place(trace, message, parent);
        let images = take_inline(&mut message);
        Self::write_images(self.db.pool(), &trace.id, &images).await?;
        self.write_message(&message, &after, check_parent, None).await?;
        *trace = after;
        Ok(message)
    }

    async fn add_message_with_event(
        &self,
        trace: &mut Trace,
        message: Message,
        parent: Option<u64>,
    ) -> Result<(Message, Event), TraceError> {
        check_id(&trace.id)?;
        let check_parent = parent.is_some() && parent != trace.head_sequence;
        let (mut message, mut after) = place(trace, message, parent);
        let images = take_inline(&mut message);
        Self::write_images(self.db.pool(), &trace.id, &images).await?;
        let event = next_event(trace, EventKind::MessageAdded { message: message.clone() });
        self.write_message(&message, &after, check_parent, Some(&event)).await?;
        after.last_event_id = event.id;
        *trace = after;
        Ok((message, event))
    }

    async fn commit_with_event(
        &self,
        trace: &mut Trace,
        goals: &GoalTree,
        kind: EventKind,
    ) -> Result<Event, TraceError> {
        check_id(&trace.id)?;
        let event = next_event(trace, kind);
        self.write_trace(trace, Some(goals), Some(&event)).await?;
        trace.last_event_id = event.id;
        Ok(event)
    }

    async fn set_head(&self, trace: &mut Trace, sequence: u64) -> Result<(), TraceError> {
        check_id(&trace.id)?;
        if self.get_message(&trace.id, sequence).await?.is_none() {
            return Err(TraceError::NoSuchMessage { trace_id: trace.id.clone(), sequence });
        }
        let mut after = trace.clone();
        after.head_sequence = Some(sequence);
        after.updated_at_ms = now_ms();
        self.write_trace(&after, None, None).await?;
        *trace = after;
        Ok(())
    }

    async fn get_messages(&self, id: &str) -> Result<Vec<Message>, TraceError> {
        check_id(id)?;
        let row: Option<(Option<String>,)> = sqlx::query_as(
            "SELECT (SELECT '[' || string_agg(m.body, ',' ORDER BY m.sequence) || ']' \
                     FROM messages m WHERE m.trace_id = t.id) \
             FROM traces t WHERE t.id = $1",
        )
        .bind(id)
        .fetch_optional(self.db.pool())
        .await
        .map_err(db)?;
        let (bodies,) = row.ok_or_else(|| TraceError::NotFound(id.to_owned()))?;
        parse_messages(id, bodies)
    }

    async fn get_message(&self, id: &str, sequence: u64) -> Result<Option<Message>, TraceError> {
        check_id(id)?;
        let row: Option<(Option<String>,)> = sqlx::query_as(
            "SELECT (SELECT m.body FROM messages m WHERE m.trace_id = t.id AND m.sequence = $2) \
             FROM traces t WHERE t.id = $1",
        )
        .bind(id)
        .bind(to_i64(sequence))
        .fetch_optional(self.db.pool())
        .await
        .map_err(db)?;
        let (body,) = row.ok_or_else(|| TraceError::NotFound(id.to_owned()))?;
        body.map(|b| parse(id, &b)).transpose()
    }

    async fn get_main_path_messages(
        &self,
        id: &str,
        head: u64,
    ) -> Result<Vec<Message>, TraceError> {
        check_id(id)?;
        let sql = format!("{MAIN_PATH} SELECT c.sequence, c.body {MAIN_PATH_ROWS}");
        let mut rows = sqlx::query_as::<_, (i64, String)>(sqlx::AssertSqlSafe(sql))
            .bind(id)
            .bind(to_i64(head))
            .fetch(self.db.pool());
        // Decoding 100k messages takes as long as receiving them: batches
        // are decoded on blocking threads while the next ones arrive, and
        // the runtime's worker is not held for the whole decode.
        let mut batches = Vec::new();
        let mut batch = Vec::with_capacity(DECODE_BATCH);
        while let Some(row) = rows.try_next().await.map_err(db)? {
            batch.push(row);
            if batch.len() == DECODE_BATCH {
                batches.push(decode_batch(id, std::mem::take(&mut batch)));
                batch.reserve(DECODE_BATCH);
            }
        }
        drop(rows);
        batches.push(decode_batch(id, batch));
        let mut path: Vec<Message> = Vec::new();
        for batch in batches {
            let decoded = batch.await.map_err(|e| TraceError::Corrupt {
                path: PathBuf::from(format!("postgres:{id}")),
                reason: format!("decoding messages failed: {e}"),
            })??;
            path.extend(decoded);
        }
        let in_order = path.windows(2).all(|w| w[0].sequence < w[1].sequence);
        if path.is_empty() {
            // No such head: say whether the trace exists at all.
            self.require(id).await?;
            return Err(TraceError::NoSuchMessage { trace_id: id.to_owned(), sequence: head });
        }
        // SQL promises no order without ORDER BY at the top; the plan gives
        // path order, and this keeps the result right whatever it gives.
        if !in_order {
            path.sort_unstable_by_key(|m| m.sequence);
        }
        // The walk stops at a missing parent; the path must reach the root.
        if let Some(parent) = path.first().and_then(|m| m.parent_sequence) {
            return Err(TraceError::NoSuchMessage { trace_id: id.to_owned(), sequence: parent });
        }
        Ok(path)
    }

    async fn get_messages_by_goal(
        &self,
        id: &str,
        goal_id: &str,
    ) -> Result<Vec<Message>, TraceError> {
        check_id(id)?;
        let row: Option<(Option<String>,)> = sqlx::query_as(
            "SELECT (SELECT '[' || string_agg(m.body, ',' ORDER BY m.sequence) || ']' \
                     FROM messages m WHERE m.trace_id = t.id AND m.goal_id = $2) \
             FROM traces t WHERE t.id = $1",
        )
        .bind(id)
        .bind(goal_id)
        .fetch_optional(self.db.pool())
        .await
        .map_err(db)?;
        let (bodies,) = row.ok_or_else(|| TraceError::NotFound(id.to_owned()))?;
        parse_messages(id, bodies)
    }

    async fn get_image(&self, id: &str, name: &str) -> Result<Option<Vec<u8>>, TraceError> {
        self.bytes_of("SELECT data FROM message_images WHERE trace_id = $1 AND name = $2", id, name)
            .await
    }

    async fn put_object(&self, id: &str, object: &ObjectData) -> Result<(), TraceError> {
        check_id(id)?;
        check_digest(id, &object.digest)?;
        let done = sqlx::query(
            "INSERT INTO trace_objects (trace_id, digest, data) \
             SELECT id, $2, $3 FROM traces WHERE id = $1 \
             ON CONFLICT (trace_id, digest) DO NOTHING",
        )
        .bind(id)
        .bind(&object.digest)
        .bind(&object.data)
        .execute(self.db.pool())
        .await
        .map_err(db)?;
        if done.rows_affected() == 0 {
            self.require(id).await?;
        }
        Ok(())
    }

    async fn get_object(&self, id: &str, digest: &str) -> Result<Option<Vec<u8>>, TraceError> {
        self.bytes_of(
            "SELECT data FROM trace_objects WHERE trace_id = $1 AND digest = $2",
            id,
            digest,
        )
        .await
    }

    async fn list_objects(&self, id: &str) -> Result<Vec<String>, TraceError> {
        check_id(id)?;
        self.require(id).await?;
        sqlx::query_scalar(
            "SELECT digest FROM trace_objects WHERE trace_id = $1 ORDER BY digest COLLATE \"C\"",
        )
        .bind(id)
        .fetch_all(self.db.pool())
        .await
        .map_err(db)
    }

    async fn put_record(
        &self,
        id: &str,
        kind: &str,
        key: &str,
        body: &serde_json::Value,
    ) -> Result<(), TraceError> {
        check_id(id)?;
        check_record_name(id, kind)?;
        check_record_name(id, key)?;
        let done = sqlx::query(
            "INSERT INTO trace_records (trace_id, kind, key, body) \
             SELECT id, $2, $3, $4 FROM traces WHERE id = $1 \
             ON CONFLICT (trace_id, kind, key) DO UPDATE SET body = EXCLUDED.body",
        )
        .bind(id)
        .bind(kind)
        .bind(key)
        .bind(kept(id, body)?)
        .execute(self.db.pool())
        .await
        .map_err(db)?;
        if done.rows_affected() == 0 {
            return Err(TraceError::NotFound(id.to_owned()));
        }
        Ok(())
    }

    async fn get_record(
        &self,
        id: &str,
        kind: &str,
        key: &str,
    ) -> Result<Option<serde_json::Value>, TraceError> {
        check_id(id)?;
        let body: Option<String> = sqlx::query_scalar(
            "SELECT body FROM trace_records WHERE trace_id = $1 AND kind = $2 AND key = $3",
        )
        .bind(id)
        .bind(kind)
        .bind(key)
        .fetch_optional(self.db.pool())
        .await
        .map_err(db)?;
        match body {
            Some(body) => parse(id, &body).map(Some),
            None => {
                self.require(id).await?;
                Ok(None)
            }
        }
    }

    async fn list_records(
        &self,
        id: &str,
        kind: Option<&str>,
    ) -> Result<Vec<RecordData>, TraceError> {
        check_id(id)?;
        self.require(id).await?;
        let rows: Vec<(String, String, String)> = sqlx::query_as(
            "SELECT kind, key, body FROM trace_records \
             WHERE trace_id = $1 AND ($2::text IS NULL OR kind = $2) \
             ORDER BY kind COLLATE \"C\", key COLLATE \"C\"",
        )
        .bind(id)
        .bind(kind)
        .fetch_all(self.db.pool())
        .await
        .map_err(db)?;
        rows.into_iter()
            .map(|(kind, key, body)| Ok(RecordData { kind, key, body: parse(id, &body)? }))
            .collect()
    }

    async fn append_event(&self, trace: &mut Trace, kind: EventKind) -> Result<Event, TraceError> {
        check_id(&trace.id)?;
        let event = next_event(trace, kind);
        let write = Write::new(
            "WITH e AS (INSERT INTO events (trace_id, id, body) \
                        SELECT t.id, $2, $3 FROM traces t WHERE t.id = $1 \
                        RETURNING trace_id) \
             SELECT count(*) FROM e",
        )
        .bind(&trace.id)
        .bind(to_i64(event.id))
        .bind(kept(&trace.id, &event)?);
        let (stored,): (i64,) = self.run(write).await?;
        if stored == 0 {
            return Err(TraceError::NotFound(trace.id.clone()));
        }
        self.announcer.announce(&self.db, &trace.id, event.id);
        trace.last_event_id = event.id;
        Ok(event)
    }

    async fn events_after(&self, id: &str, after_event_id: u64) -> Result<Vec<Event>, TraceError> {
        check_id(id)?;
        let row: Option<(Option<String>,)> = sqlx::query_as(
            "SELECT (SELECT '[' || string_agg(e.body, ',' ORDER BY e.id) || ']' \
                     FROM events e WHERE e.trace_id = t.id AND e.id > $2) \
             FROM traces t WHERE t.id = $1",
        )
        .bind(id)
        .bind(i64::try_from(after_event_id).unwrap_or(i64::MAX))
        .fetch_optional(self.db.pool())
        .await
        .map_err(db)?;
        let (bodies,) = row.ok_or_else(|| TraceError::NotFound(id.to_owned()))?;
        bodies.map_or(Ok(Vec::new()), |b| parse(id, &b))
    }

    async fn get_goals(&self, id: &str) -> Result<GoalTree, TraceError> {
        check_id(id)?;
        let row: Option<(Option<String>,)> =
            sqlx::query_as("SELECT goals FROM traces WHERE id = $1")
                .bind(id)
                .fetch_optional(self.db.pool())
                .await
                .map_err(db)?;
        let (goals,) = row.ok_or_else(|| TraceError::NotFound(id.to_owned()))?;
        goals.map_or_else(|| Ok(GoalTree::new()), |g| parse(id, &g))
    }

    async fn save_goals(&self, id: &str, tree: &GoalTree) -> Result<(), TraceError> {
        check_id(id)?;
        let done = sqlx::query("UPDATE traces SET goals = $2 WHERE id = $1")
            .bind(id)
            .bind(kept(id, tree)?)
            .execute(self.db.pool())
            .await
            .map_err(db)?;
        if done.rows_affected() == 0 {
            return Err(TraceError::NotFound(id.to_owned()));
        }
        Ok(())
    }

    async fn import_trace(&self, snapshot: &TraceSnapshot) -> Result<(), TraceError> {
        let trace = &snapshot.trace;
        super::migrate::check_snapshot(snapshot)?;
        let rows = MessageRows::of(snapshot)?;
        let events = EventRows::of(snapshot)?;
        let mut tx = self.begin().await?;
        let inserted = insert_trace(trace, Some(&snapshot.goals))?.run_on(&mut *tx).await;
        created(trace, inserted.map_err(db)?)?;
        // Whole arrays, one statement each: a 100k-message trace is one
        // round trip, not 100k.
        sqlx::query(
            "INSERT INTO messages (trace_id, sequence, parent_sequence, segment, goal_id, body) \
             SELECT $1, * FROM UNNEST($2::bigint[], $3::bigint[], $4::bigint[], $5::text[], \
                                      $6::text[])",
        )
        .bind(&trace.id)
        .bind(rows.sequences)
        .bind(rows.parents)
        .bind(rows.segments)
        .bind(rows.goals)
        .bind(rows.bodies)
        .execute(&mut *tx)
        .await
        .map_err(db)?;
        sqlx::query(
            "INSERT INTO events (trace_id, id, body) \
             SELECT $1, * FROM UNNEST($2::bigint[], $3::text[])",
        )
        .bind(&trace.id)
        .bind(events.ids)
        .bind(events.bodies)
        .execute(&mut *tx)
        .await
        .map_err(db)?;
        Self::write_images(&mut *tx, &trace.id, &snapshot.images).await?;
        Self::write_artifacts(&mut tx, snapshot).await?;
        tx.commit().await.map_err(db)?;
        Ok(())
    }

    async fn sync(&self) -> Result<(), TraceError> {
        // A write returns once its transaction committed; what is left is
        // telling the listeners.
        self.announcer.flushed().await;
        Ok(())
    }
}

/// A snapshot's messages as the columns of `messages`.
struct MessageRows {
    sequences: Vec<i64>,
    parents: Vec<Option<i64>>,
    segments: Vec<i64>,
    goals: Vec<Option<String>>,
    bodies: Vec<String>,
}

impl MessageRows {
    /// Checks that the messages form a tree the store could have written
    /// (increasing sequences, each parent older than its child) and gives
    /// each its chain as `add_message` would have.
    fn of(snapshot: &TraceSnapshot) -> Result<Self, TraceError> {
        let id = &snapshot.trace.id;
        let n = snapshot.messages.len();
        let mut rows = Self {
            sequences: Vec::with_capacity(n),
            parents: Vec::with_capacity(n),
            segments: Vec::with_capacity(n),
            goals: Vec::with_capacity(n),
            bodies: Vec::with_capacity(n),
        };
        // Each chain's last message, and the chain of each message.
        let mut tails: HashMap<i64, u64> = HashMap::new();
        let mut chain_of: HashMap<u64, i64> = HashMap::with_capacity(n);
        let mut last = 0;
        for message in &snapshot.messages {
            let seq = message.sequence;
            if message.trace_id != *id {
                return Err(bad_snapshot(
                    id,
                    format!("message {seq} is of trace {:?}", message.trace_id),
                ));
            }
            if seq <= last {
                return Err(bad_snapshot(id, format!("message {seq} comes after message {last}")));
            }
            last = seq;
            if let Some(parent) = message.parent_sequence
                && parent >= seq
            {
                return Err(bad_snapshot(
                    id,
                    format!("message {seq} follows a later message, {parent}"),
                ));
            }
            let segment = message
                .parent_sequence
                .and_then(|p| chain_of.get(&p).map(|&s| (p, s)))
                .filter(|&(p, s)| tails.get(&s) == Some(&p))
                .map_or(to_i64(seq), |(_, s)| s);
            tails.insert(segment, seq);
            chain_of.insert(seq, segment);
            rows.sequences.push(to_i64(seq));
            rows.parents.push(message.parent_sequence.map(to_i64));
            rows.segments.push(segment);
            rows.goals.push(message.goal_id.clone());
            rows.bodies.push(kept(id, message)?);
        }
        Ok(rows)
    }
}

/// A snapshot's events as the columns of `events`.
struct EventRows {
    ids: Vec<i64>,
    bodies: Vec<String>,
}

impl EventRows {
    fn of(snapshot: &TraceSnapshot) -> Result<Self, TraceError> {
        let id = &snapshot.trace.id;
        let mut rows = Self { ids: Vec::new(), bodies: Vec::new() };
        let mut last = 0;
        for event in &snapshot.events {
            if event.id <= last {
                return Err(bad_snapshot(
                    id,
                    format!("event {} comes after event {last}", event.id),
                ));
            }
            last = event.id;
            rows.ids.push(to_i64(event.id));
            rows.bodies.push(kept(id, event)?);
        }
        Ok(rows)
    }
}

fn bad_snapshot(id: &str, reason: String) -> TraceError {
    TraceError::Corrupt { path: PathBuf::from(id), reason: format!("snapshot: {reason}") }
}

/// The JSON of `value` as kept: through the redaction point, as the file
/// store writes it. Serialising the store's own types does not fail (see
/// the file store's `to_json`); the error still names the trace.
fn kept<T: Serialize>(trace_id: &str, value: &T) -> Result<String, TraceError> {
    let json = serde_json::to_string(value).map_err(|e| TraceError::Corrupt {
        path: PathBuf::from(trace_id),
        reason: format!("cannot serialise: {e}"),
    })?;
    Ok(reson_text::redact::redact(&json).into_owned())
}

/// The insert of a new trace row, with its goal tree when given; its row
/// counts the rows inserted, which [`created`] reads. The `uid` column is
/// written here only: a trace's user is set when it is created and never
/// changes.
fn insert_trace(trace: &Trace, goals: Option<&GoalTree>) -> Result<Write, TraceError> {
    Ok(Write::new(
        "WITH i AS (INSERT INTO traces \
             (id, status, parent_trace_id, created_at_ms, last_sequence, meta, goals, uid) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (id) DO NOTHING RETURNING id) \
         SELECT count(*) FROM i",
    )
    .bind(&trace.id)
    .bind(status_name(trace.status))
    .bind(trace.parent_trace_id.as_deref())
    .bind(to_i64(trace.created_at_ms))
    .bind(to_i64(trace.last_sequence))
    .bind(kept(&trace.id, trace)?)
    .bind(goals.map(|g| kept(&trace.id, g)).transpose()?)
    .bind(trace.uid.as_deref()))
}

/// `AlreadyExists` when [`insert_trace`] inserted nothing: the id is taken.
fn created(trace: &Trace, (inserted,): (i64,)) -> Result<(), TraceError> {
    if inserted == 0 {
        return Err(TraceError::AlreadyExists(trace.id.clone()));
    }
    Ok(())
}

/// A stored JSON text of trace `trace_id`.
fn parse<T: DeserializeOwned>(trace_id: &str, json: &str) -> Result<T, TraceError> {
    serde_json::from_str(json).map_err(|e| TraceError::Corrupt {
        path: PathBuf::from(format!("postgres:{trace_id}")),
        reason: e.to_string(),
    })
}

fn status_name(status: TraceStatus) -> &'static str {
    match status {
        TraceStatus::Running => "running",
        TraceStatus::Completed => "completed",
        TraceStatus::Failed => "failed",
        TraceStatus::Stopped => "stopped",
        TraceStatus::Waiting => "waiting",
    }
}

fn db(e: sqlx::Error) -> TraceError {
    TraceError::Database(DatabaseError::Query(e))
}

/// Sequences, ids and times fit PostgreSQL's `bigint` by far; one that
/// does not is clamped rather than wrapped to a negative number.
fn to_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn to_u64(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}
