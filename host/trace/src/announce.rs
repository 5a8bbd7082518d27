//! The PostgreSQL store's event notifications, sent after the writes that
//! stored the events committed, many in one statement.
//!
//! A transaction that calls `pg_notify` holds a database-wide lock from
//! its commit's start until it ends, so notifying transactions commit one
//! at a time, each waiting for its own WAL flush: measured with pgbench on
//! this project's 2-core machines (32 clients, durable cluster), inserts
//! that notify ran at 261 per second against 7,168 without. Writes
//! therefore commit without notifying, which lets PostgreSQL flush the WAL
//! of many at once, and one task announces what they stored: every event
//! queued while its previous statement ran goes out in the next one, in
//! the order the writes returned.
//!
//! A listener hears of an event only once it is readable, as before, a
//! little later than its commit. What a crash between a commit and its
//! announcement costs is what a dropped listening connection costs today:
//! listeners read again when they reconnect, and a trace another host
//! takes over is read whole.

use crate::database::Database;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;
use tokio::sync::{mpsc, watch};

/// The channel every stored event is announced on, with the payload
/// `"{trace_id} {event_id}"`.
pub const EVENTS_CHANNEL: &str = "reson_events";

/// Most payloads in one statement.
const BATCH: usize = 1024;
/// How often a failed statement is tried before its payloads are given up.
const ATTEMPTS: u32 = 5;

/// Sends `"{trace_id} {event_id}"` payloads on [`EVENTS_CHANNEL`]. The task
/// starts with the first payload (a store may be made outside a runtime)
/// and ends once the announcer is dropped and its queue is sent.
#[derive(Debug, Default)]
pub(super) struct Announcer {
    queue: OnceLock<mpsc::UnboundedSender<String>>,
    progress: Arc<Progress>,
}

#[derive(Debug)]
struct Progress {
    queued: Mutex<u64>,
    /// Payloads sent or given up, in queue order.
    done: watch::Sender<u64>,
}

impl Default for Progress {
    fn default() -> Self {
        Self { queued: Mutex::new(0), done: watch::Sender::new(0) }
    }
}

impl Announcer {
    /// Queues the announcement of event `event_id` of trace `trace_id`,
    /// whose write has committed.
    pub(super) fn announce(&self, db: &Database, trace_id: &str, event_id: u64) {
        let queue = self.queue.get_or_init(|| {
            let (tx, rx) = mpsc::unbounded_channel();
            tokio::spawn(send_all(db.clone(), rx, Arc::clone(&self.progress)));
            tx
        });
        let mut queued = self.progress.queued.lock().unwrap_or_else(PoisonError::into_inner);
        // The receiver lives as long as the task, which ends only once
        // this sender is dropped.
        if queue.send(format!("{trace_id} {event_id}")).is_ok() {
            *queued += 1;
        }
    }

    /// Waits until everything queued before the call has been sent.
    pub(super) async fn flushed(&self) {
        let target = *self.progress.queued.lock().unwrap_or_else(PoisonError::into_inner);
        let mut done = self.progress.done.subscribe();
        let _ = done.wait_for(|&n| n >= target).await;
    }
}

async fn send_all(db: Database, mut rx: mpsc::UnboundedReceiver<String>, progress: Arc<Progress>) {
    let mut batch = Vec::with_capacity(BATCH);
    while rx.recv_many(&mut batch, BATCH).await > 0 {
        send(&db, &batch).await;
        let sent = batch.len() as u64;
        batch.clear();
        progress.done.send_modify(|n| *n += sent);
    }
}

/// One statement for the whole batch, retried a few times: a listener
/// that misses an announcement waits for the trace's next event.
async fn send(db: &Database, payloads: &[String]) {
    let mut wait = Duration::from_millis(50);
    for attempt in 1..=ATTEMPTS {
        let sent = sqlx::query(
            "SELECT pg_notify($1, p) FROM unnest($2::text[]) WITH ORDINALITY AS u(p, n) \
             ORDER BY n",
        )
        .bind(EVENTS_CHANNEL)
        .bind(payloads)
        .execute(db.pool())
        .await;
        match sent {
            Ok(_) => return,
            Err(e) if attempt == ATTEMPTS => {
                tracing::error!(
                    "trace store: {} event notifications not sent: {e}",
                    payloads.len()
                );
            }
            Err(e) => {
                tracing::warn!("trace store: sending event notifications: {e}; retrying");
                tokio::time::sleep(wait).await;
                wait *= 2;
            }
        }
    }
}
