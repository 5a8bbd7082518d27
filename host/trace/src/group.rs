//! Group commit for the PostgreSQL store: writes of any traces that arrive
//! while earlier ones are being committed are run in one transaction on
//! one connection and committed once.
//!
//! Every store write is one statement, so in autocommit each is its own
//! transaction and its own WAL flush: the agent loop's ~10 writes per turn
//! over 1,000 concurrent sessions are ~33,000 flushes, and a durable
//! cluster on this project's machines commits ~7,000 a second however
//! many clients ask. Gathered, hundreds of writes share one flush.
//!
//! How the writes are gathered, and why:
//! - A [`Write`] owns its statement and its encoded arguments
//!   ([`PgArguments`] is a plain buffer and clones), so the same write can
//!   be run a second time alone after its batch failed.
//! - One task takes the writes from a queue. It waits for one of
//!   [`IN_FLIGHT`] slots first and then takes everything queued (up to
//!   [`MOST_PER_BATCH`]): a write that arrives when a slot is free is sent
//!   at once, alone (no timer, no latency added when the store is idle),
//!   and writes that arrive while every slot commits wait for the next
//!   free one and go together. Several batches in flight keep one slow
//!   commit from holding everyone up and keep both cores busy, while the
//!   bound keeps connections free for reads.
//! - A batch of one is run in autocommit, as before: no BEGIN and COMMIT
//!   round trips for nothing.
//! - A caller hears of its write only after the batch's COMMIT returned,
//!   and gets its own statement's row.
//! - If anything in a batch fails (a statement, BEGIN, COMMIT) the
//!   transaction is rolled back and each write is run again alone, in the
//!   batch's order: a bad write (a unique violation from a host racing for
//!   the same sequence, ...) fails only its caller, with the error it
//!   would have had alone. Two batches holding rows of the same traces can
//!   deadlock if two tasks write one trace at once; PostgreSQL breaks it,
//!   and the rerun alone stores both. As with autocommit, a connection
//!   lost during COMMIT leaves it unknown whether it took: the rerun then
//!   meets the primary keys (refused, as a racing writer is) or stores the
//!   same metadata again.
//! - Order: a batch runs its writes in queue order, so writes sent one
//!   after another stay in order. A run awaits each write of its trace
//!   before the next, so two writes of one trace are never in flight
//!   together; two tasks writing one trace at once get no order, as with
//!   a pool of connections.
//! - The batch runs on its own task: a caller dropped while its write is
//!   queued or running only stops listening; its write is still run (it
//!   may or may not be stored, as a statement already sent would be) and
//!   the rest of the batch is not disturbed.

use crate::database::Database;
use sqlx::postgres::{PgArguments, PgRow};
use sqlx::{Arguments, Encode, FromRow, Postgres, SqlSafeStr, SqlStr, Type};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use tokio::sync::{Semaphore, mpsc, oneshot};

/// Batches committing at once, each on its own connection.
pub(super) const IN_FLIGHT: usize = 4;
/// Most writes in one transaction: a bound on how long the rows of its
/// traces stay locked and its callers wait.
const MOST_PER_BATCH: usize = 256;

/// One write: a statement returning one row, and its arguments.
pub(super) struct Write {
    sql: SqlStr,
    args: Result<PgArguments, String>,
}

impl Write {
    /// `sql`, without arguments yet.
    pub(super) fn new(sql: impl SqlSafeStr) -> Self {
        Self { sql: sql.into_sql_str(), args: Ok(PgArguments::default()) }
    }

    /// Binds the next parameter. An argument that does not encode fails
    /// the write when it is run, as sqlx's own `bind` does.
    pub(super) fn bind<'t, T: Encode<'t, Postgres> + Type<Postgres>>(mut self, value: T) -> Self {
        if let Ok(args) = &mut self.args {
            let n = args.len() + 1;
            if let Err(e) = args.add(value) {
                self.args = Err(format!("encoding argument ${n} failed: {e}"));
            }
        }
        self
    }

    /// Runs the write on `executor` (a transaction of the caller's own)
    /// rather than in a batch.
    pub(super) async fn run_on<'c, T>(
        self,
        executor: impl sqlx::PgExecutor<'c>,
    ) -> Result<T, sqlx::Error>
    where
        T: for<'r> FromRow<'r, PgRow>,
    {
        let args = self.args.map_err(|e| sqlx::Error::Encode(e.into()))?;
        let row = sqlx::query_with(self.sql, args).fetch_one(executor).await?;
        T::from_row(&row)
    }
}

/// A write ready to run, and who is waiting for its row.
struct Job {
    sql: SqlStr,
    args: PgArguments,
    reply: oneshot::Sender<Result<PgRow, sqlx::Error>>,
}

impl Job {
    async fn run<'c>(&self, executor: impl sqlx::PgExecutor<'c>) -> Result<PgRow, sqlx::Error> {
        sqlx::query_with(self.sql.clone(), self.args.clone()).fetch_one(executor).await
    }
}

/// The store's writes: grouped (the default), or each committed alone.
#[derive(Debug)]
pub(super) struct Writes {
    grouped: bool,
    queue: OnceLock<mpsc::UnboundedSender<Job>>,
    commits: Arc<AtomicU64>,
}

impl Default for Writes {
    fn default() -> Self {
        Self { grouped: true, queue: OnceLock::new(), commits: Arc::default() }
    }
}

impl Writes {
    /// Writes that each commit alone, as before group commit: for
    /// measuring one against the other.
    pub(super) fn alone() -> Self {
        Self { grouped: false, ..Self::default() }
    }

    /// Transactions committed (or tried) so far.
    pub(super) fn commits(&self) -> u64 {
        self.commits.load(Ordering::Relaxed)
    }

    /// Runs `write` and decodes its row, once it is committed.
    pub(super) async fn run<T>(&self, db: &Database, write: Write) -> Result<T, sqlx::Error>
    where
        T: for<'r> FromRow<'r, PgRow>,
    {
        let args = write.args.map_err(|e| sqlx::Error::Encode(e.into()))?;
        let (reply, row) = oneshot::channel();
        let job = Job { sql: write.sql, args, reply };
        let row = if self.grouped {
            let queue = self.queue.get_or_init(|| {
                let (tx, rx) = mpsc::unbounded_channel();
                tokio::spawn(gather(db.clone(), rx, Arc::clone(&self.commits)));
                tx
            });
            // The task lives as long as this sender; a job it drops
            // unanswered (its runtime shutting down) is a worker gone.
            queue.send(job).map_err(|_| sqlx::Error::WorkerCrashed)?;
            row.await.map_err(|_| sqlx::Error::WorkerCrashed)??
        } else {
            self.commits.fetch_add(1, Ordering::Relaxed);
            job.run(db.pool()).await?
        };
        T::from_row(&row)
    }
}

/// Takes the queued writes in batches, each once a slot is free, until
/// the store is dropped.
async fn gather(db: Database, mut queue: mpsc::UnboundedReceiver<Job>, commits: Arc<AtomicU64>) {
    let slots = Arc::new(Semaphore::new(IN_FLIGHT));
    loop {
        let Ok(slot) = Arc::clone(&slots).acquire_owned().await else {
            return;
        };
        let mut batch = Vec::with_capacity(MOST_PER_BATCH);
        if queue.recv_many(&mut batch, MOST_PER_BATCH).await == 0 {
            return;
        }
        let db = db.clone();
        let commits = Arc::clone(&commits);
        tokio::spawn(async move {
            commit(&db, batch, &commits).await;
            drop(slot);
        });
    }
}

/// Runs `batch` in one transaction and answers each caller once it is
/// committed; on any failure, runs each write again alone.
async fn commit(db: &Database, batch: Vec<Job>, commits: &AtomicU64) {
    commits.fetch_add(1, Ordering::Relaxed);
    let together = match batch.as_slice() {
        [job] => job.run(db.pool()).await.map(|row| vec![row]),
        _ => together(db, &batch).await,
    };
    match together {
        Ok(rows) => {
            for (job, row) in batch.into_iter().zip(rows) {
                let _ = job.reply.send(Ok(row));
            }
        }
        Err(e) if batch.len() == 1 => {
            let _ = batch.into_iter().next().map(|job| job.reply.send(Err(e)));
        }
        Err(e) => {
            tracing::debug!(
                "trace store: a batch of {} writes failed ({e}); each alone",
                batch.len()
            );
            for job in batch {
                commits.fetch_add(1, Ordering::Relaxed);
                let row = job.run(db.pool()).await;
                let _ = job.reply.send(row);
            }
        }
    }
}

/// The rows of `batch`, run in order in one committed transaction. A
/// transaction dropped on an error is rolled back.
async fn together(db: &Database, batch: &[Job]) -> Result<Vec<PgRow>, sqlx::Error> {
    let mut tx = db.pool().begin().await?;
    let mut rows = Vec::with_capacity(batch.len());
    for job in batch {
        rows.push(job.run(&mut *tx).await?);
    }
    tx.commit().await?;
    Ok(rows)
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use sqlx::Row as _;

    /// A database with a table `keys (k int PRIMARY KEY)` holding 0.
    async fn keys() -> Database {
        let url = crate::database::test_cluster::cluster().fresh_database().await;
        let db = Database::connect(&url).await.unwrap();
        sqlx::raw_sql("CREATE TABLE keys (k int PRIMARY KEY); INSERT INTO keys VALUES (0)")
            .execute(db.pool())
            .await
            .unwrap();
        db
    }

    /// The insert of key `k`, and where its row will be answered.
    fn insert(k: i32) -> (Job, oneshot::Receiver<Result<PgRow, sqlx::Error>>) {
        let write = Write::new(
            "WITH i AS (INSERT INTO keys VALUES ($1) RETURNING k) SELECT count(*) FROM i",
        )
        .bind(k);
        let (reply, answer) = oneshot::channel();
        (Job { sql: write.sql, args: write.args.unwrap(), reply }, answer)
    }

    async fn stored(db: &Database) -> Vec<i32> {
        sqlx::query_scalar("SELECT k FROM keys ORDER BY k").fetch_all(db.pool()).await.unwrap()
    }

    #[tokio::test]
    async fn a_failing_write_fails_only_its_caller_and_the_rest_of_its_batch_is_stored() {
        let db = keys().await;
        let (batch, answers): (Vec<_>, Vec<_>) = [1, 0, 2].map(insert).into_iter().unzip();
        let commits = AtomicU64::new(0);
        commit(&db, batch, &commits).await;
        let mut answers = answers.into_iter();
        for k in [1, 0, 2] {
            let answer = answers.next().unwrap().await.unwrap();
            if k == 0 {
                let e = answer.unwrap_err();
                assert!(e.as_database_error().is_some_and(|e| e.is_unique_violation()), "{e}");
            } else {
                assert_eq!(answer.unwrap().get::<i64, _>(0), 1);
            }
        }
        assert_eq!(stored(&db).await, [0, 1, 2]);
        // The batch, rolled back, then each write alone.
        assert_eq!(commits.load(Ordering::Relaxed), 4);
    }

    #[tokio::test]
    async fn a_batch_commits_once_and_a_caller_gone_disturbs_nothing() {
        let db = keys().await;
        let (batch, mut answers): (Vec<_>, Vec<_>) = (1..=5).map(insert).unzip();
        drop(answers.remove(2));
        let commits = AtomicU64::new(0);
        commit(&db, batch, &commits).await;
        for answer in answers {
            assert_eq!(answer.await.unwrap().unwrap().get::<i64, _>(0), 1);
        }
        // The write of the caller gone was run with the others.
        assert_eq!(stored(&db).await, [0, 1, 2, 3, 4, 5]);
        assert_eq!(commits.load(Ordering::Relaxed), 1);
    }

    #[tokio::test]
    async fn a_write_refused_through_the_queue_fails_alone_and_the_queue_goes_on() {
        let db = keys().await;
        let writes = Writes::default();
        let bad = Write::new("SELECT count(*) FROM keys WHERE k = $1::int").bind("not a number");
        let err = writes.run::<(i64,)>(&db, bad).await.unwrap_err();
        assert!(err.as_database_error().is_some(), "{err}");
        let good = Write::new("SELECT count(*) FROM keys WHERE k = $1").bind(0_i32);
        assert_eq!(writes.run::<(i64,)>(&db, good).await.unwrap(), (1,));
    }
}
