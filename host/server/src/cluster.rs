//! Several servers on one PostgreSQL database: which host runs which
//! trace, and the notifications between hosts.
//!
//! A run is owned by one process through a lease row (`run_leases`): a
//! claim inserts it, or takes over a row whose `expires_at` has passed on
//! the database's clock, in one statement; otherwise the trace runs on
//! another host (409). A heartbeat renews this host's leases every third
//! of the lease; a lease that could not be renewed in time may be another
//! host's by now, so its run is stopped here (fencing). The run's end
//! deletes its row.
//!
//! Hosts talk through `LISTEN`/`NOTIFY`: `reson_stop` carries a trace id
//! whose run its owner stops; `reson_events` (sent by the trace store in
//! each event's transaction) carries `<trace_id> <event_id>` and wakes
//! this host's watchers of that trace.

use super::error::ApiError;
use reson_trace::database::Database;
use reson_trace::{EVENTS_CHANNEL, TraceStatus, TraceStore};
use sqlx::postgres::PgListener;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// The channel a stop for another host's run goes on.
const STOP_CHANNEL: &str = "reson_stop";

/// How long a claim waits for another host to release a trace whose run
/// has stored its end: a client that saw `trace_finished` may continue the
/// trace at once, on any host.
const RELEASE_WAIT: Duration = Duration::from_secs(3);

/// How often a claim waiting for a release looks again.
const RELEASE_POLL: Duration = Duration::from_millis(20);

/// The longest the listener waits before connecting again.
const MAX_RECONNECT_WAIT: Duration = Duration::from_secs(5);

/// This host's part in the cluster: its identity, its leases and the
/// database they are kept in.
pub(crate) struct Cluster {
    db: Database,
    /// Random per process: a restarted host does not own its old leases.
    host_id: String,
    /// `hostname/pid`, for people.
    host_name: String,
    lease: Duration,
    held: Mutex<HashMap<String, Held>>,
    /// Releases under way, waited for at shutdown.
    releases: TaskTracker,
}

/// A lease this host holds.
struct Held {
    claim: u64,
    stop: CancellationToken,
    /// When the last renewal that succeeded was sent: the lease lasts at
    /// least `lease` from then.
    renewed: Instant,
}

/// A query that failed (the database is away, ...): the server's
/// failure, not the request's.
fn database_failed(e: sqlx::Error) -> ApiError {
    ApiError::Internal(format!("the database: {e}"))
}

impl Cluster {
    /// This host on `db`, with leases of `lease`.
    pub(crate) fn new(db: Database, lease: Duration) -> Arc<Self> {
        Arc::new(Self {
            db,
            host_id: format!("{:016x}{:016x}", fastrand::u64(..), fastrand::u64(..)),
            host_name: format!("{}/{}", hostname(), std::process::id()),
            lease,
            held: Mutex::default(),
            releases: TaskTracker::new(),
        })
    }

    fn lease_ms(&self) -> i64 {
        i64::try_from(self.lease.as_millis()).unwrap_or(i64::MAX)
    }

    /// Takes the lease of `trace_id` for this host's claim `claim`, whose
    /// run `stop` stops if the lease is lost. Refused (409) while another
    /// host's lease is live; a trace whose run has stored its end is
    /// waited for a moment, since its owner is releasing it.
    pub(crate) async fn claim(
        &self,
        trace_id: &str,
        claim: u64,
        stop: &CancellationToken,
        store: &dyn TraceStore,
    ) -> Result<(), ApiError> {
        let deadline = Instant::now() + RELEASE_WAIT;
        loop {
            let sent = Instant::now();
            let holder = self.try_claim(trace_id, claim).await?;
            let Some(holder) = holder else {
                let held = Held { claim, stop: stop.clone(), renewed: sent };
                self.held.lock().expect("leases").insert(trace_id.to_owned(), held);
                return Ok(());
            };
            let ending = store
                .get_trace(trace_id)
                .await?
                .is_some_and(|trace| trace.status != TraceStatus::Running);
            if !ending || Instant::now() >= deadline {
                return Err(ApiError::Conflict(format!(
                    "trace {trace_id} is running on another host ({holder})"
                )));
            }
            tokio::time::sleep(RELEASE_POLL).await;
        }
    }

    /// One claim statement: `None` when this host has the lease now, else
    /// the holder's name.
    async fn try_claim(&self, trace_id: &str, claim: u64) -> Result<Option<String>, ApiError> {
        // A row of this host's that the in-process registry let through is
        // a run that ended here and is being released: take it.
        let (won, holder): (bool, Option<String>) = sqlx::query_as(
            "WITH claimed AS ( \
                 INSERT INTO run_leases (trace_id, host_id, host_name, claim, expires_at) \
                 VALUES ($1, $2, $3, $4, now() + $5 * interval '1 millisecond') \
                 ON CONFLICT (trace_id) DO UPDATE SET \
                     host_id = excluded.host_id, host_name = excluded.host_name, \
                     claim = excluded.claim, claimed_at = now(), expires_at = excluded.expires_at, \
                     stop_requested = false \
                 WHERE run_leases.expires_at < now() OR run_leases.host_id = excluded.host_id \
                 RETURNING 1) \
             SELECT EXISTS (SELECT 1 FROM claimed), \
                    (SELECT host_name FROM run_leases WHERE trace_id = $1)",
        )
        .bind(trace_id)
        .bind(&self.host_id)
        .bind(&self.host_name)
        .bind(claim as i64)
        .bind(self.lease_ms())
        .fetch_one(self.db.pool())
        .await
        .map_err(database_failed)?;
        Ok((!won).then(|| holder.unwrap_or_else(|| "a host".to_owned())))
    }

    /// Releases this host's lease of `trace_id` for claim `claim`, in the
    /// background; nothing when a later claim or a lost lease replaced it.
    pub(crate) fn release(self: &Arc<Self>, trace_id: &str, claim: u64) {
        {
            let mut held = self.held.lock().expect("leases");
            if held.get(trace_id).is_none_or(|h| h.claim != claim) {
                return;
            }
            held.remove(trace_id);
        }
        let cluster = self.clone();
        let trace_id = trace_id.to_owned();
        self.releases.spawn(async move {
            let deleted = sqlx::query(
                "DELETE FROM run_leases WHERE trace_id = $1 AND host_id = $2 AND claim = $3",
            )
            .bind(&trace_id)
            .bind(&cluster.host_id)
            .bind(claim as i64)
            .execute(cluster.db.pool())
            .await;
            if let Err(e) = deleted {
                tracing::warn!(
                    "releasing the lease of trace {trace_id}: {e}; it expires in {:?}",
                    cluster.lease
                );
            }
        });
    }

    /// Waits up to `bound` for the releases under way.
    pub(crate) async fn released(&self, bound: Duration) {
        self.releases.close();
        if tokio::time::timeout(bound, self.releases.wait()).await.is_err() {
            tracing::warn!("some leases were not released in {bound:?}: they expire by themselves");
        }
    }

    /// Asks the host running `trace_id` to stop it; false when no host
    /// holds a live lease of it. The request is kept in the lease, so the
    /// owner's next renewal sees it if the notification does not reach it.
    pub(crate) async fn stop_elsewhere(&self, trace_id: &str) -> Result<bool, ApiError> {
        let sent: Option<i32> = sqlx::query_scalar(
            "WITH asked AS (UPDATE run_leases SET stop_requested = true \
                            WHERE trace_id = $1 AND expires_at > now() RETURNING trace_id) \
             SELECT 1 FROM (SELECT pg_notify($2, trace_id) FROM asked) AS notified",
        )
        .bind(trace_id)
        .bind(STOP_CHANNEL)
        .fetch_optional(self.db.pool())
        .await
        .map_err(database_failed)?;
        Ok(sent.is_some())
    }

    /// The traces with a live lease, on any host.
    pub(crate) async fn running(&self) -> Result<Vec<String>, ApiError> {
        sqlx::query_scalar("SELECT trace_id FROM run_leases WHERE expires_at > now()")
            .fetch_all(self.db.pool())
            .await
            .map_err(database_failed)
    }

    /// Whether some host holds a live lease of `trace_id`.
    pub(crate) async fn is_running(&self, trace_id: &str) -> Result<bool, ApiError> {
        sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM run_leases WHERE trace_id = $1 AND expires_at > now())",
        )
        .bind(trace_id)
        .fetch_one(self.db.pool())
        .await
        .map_err(database_failed)
    }

    /// Renews this host's leases every third of the lease until `closing`.
    pub(crate) async fn heartbeat(self: Arc<Self>, closing: CancellationToken) {
        let mut tick = tokio::time::interval(self.lease / 3);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = closing.cancelled() => return,
                _ = tick.tick() => self.renew().await,
            }
        }
    }

    /// Renews every lease held; stops the runs whose lease was lost.
    async fn renew(&self) {
        let held: Vec<(String, i64)> = {
            let held = self.held.lock().expect("leases");
            held.iter().map(|(id, h)| (id.clone(), h.claim as i64)).collect()
        };
        if held.is_empty() {
            return;
        }
        let (ids, claims): (Vec<String>, Vec<i64>) = held.iter().cloned().unzip();
        let sent = Instant::now();
        let renewing = sqlx::query_as(
            "UPDATE run_leases AS l SET expires_at = now() + $4 * interval '1 millisecond' \
             FROM unnest($2::text[], $3::bigint[]) AS h(trace_id, claim) \
             WHERE l.host_id = $1 AND l.trace_id = h.trace_id AND l.claim = h.claim \
             RETURNING l.trace_id, l.stop_requested",
        )
        .bind(&self.host_id)
        .bind(&ids)
        .bind(&claims)
        .bind(self.lease_ms())
        .fetch_all(self.db.pool());
        // A database that does not answer is checked against the leases'
        // age at every beat, not once its connections time out.
        let renewed: Result<Vec<(String, bool)>, String> =
            match tokio::time::timeout(self.lease / 3, renewing).await {
                Ok(renewed) => renewed.map_err(|e| e.to_string()),
                Err(_) => Err(format!("no answer in {:?}", self.lease / 3)),
            };
        let mut leases = self.held.lock().expect("leases");
        match renewed {
            Ok(renewed) => {
                for (id, claim) in &held {
                    let Some(lease) = leases.get_mut(id).filter(|h| h.claim as i64 == *claim)
                    else {
                        continue;
                    };
                    if let Some((_, stop_requested)) = renewed.iter().find(|(r, _)| r == id) {
                        lease.renewed = sent;
                        if *stop_requested && !lease.stop.is_cancelled() {
                            tracing::info!("another host asked to stop trace {id}: stopping it");
                            lease.stop.cancel();
                        }
                    } else {
                        lease.stop.cancel();
                        leases.remove(id);
                        tracing::warn!(
                            "the lease of trace {id} was lost (this host stalled past its \
                             expiry and another host took the trace over): stopping its run here"
                        );
                    }
                }
            }
            Err(e) => tracing::warn!("renewing this host's leases: {e}"),
        }
        // A lease not renewed for a whole lease may be another host's now.
        let lease = self.lease;
        leases.retain(|id, held| {
            let expired = sent.duration_since(held.renewed) >= lease;
            if expired {
                held.stop.cancel();
                tracing::warn!(
                    "the lease of trace {id} could not be renewed for {lease:?}: another host \
                     may continue the trace, so its run stops here"
                );
            }
            !expired
        });
    }

    /// Listens for stops of this host's runs and for events stored by any
    /// host, until `closing`; connects again when the database drops.
    pub(crate) async fn listen(
        self: Arc<Self>,
        notified: Arc<dyn Notified>,
        closing: CancellationToken,
    ) {
        let mut wait = Duration::from_millis(100);
        loop {
            let listened = tokio::select! {
                () = closing.cancelled() => return,
                listened = self.listen_once(&*notified, &mut wait) => listened,
            };
            if let Err(e) = listened {
                tracing::warn!(
                    "listening for other hosts' notifications: {e}; retrying in {wait:?}"
                );
            }
            tokio::select! {
                () = closing.cancelled() => return,
                () = tokio::time::sleep(wait) => {}
            }
            wait = (wait * 2).min(MAX_RECONNECT_WAIT);
        }
    }

    /// One connection's notifications: returns when it fails.
    async fn listen_once(
        &self,
        notified: &dyn Notified,
        wait: &mut Duration,
    ) -> Result<(), sqlx::Error> {
        let mut listener = PgListener::connect_with(self.db.pool()).await?;
        listener.listen_all([STOP_CHANNEL, EVENTS_CHANNEL]).await?;
        *wait = Duration::from_millis(100);
        // Whatever was stored while no connection listened is read now.
        notified.wake_all();
        loop {
            let Some(notification) = listener.try_recv().await? else {
                // The connection dropped and a new one listens again:
                // notifications in between are lost.
                notified.wake_all();
                continue;
            };
            let payload = notification.payload();
            match notification.channel() {
                STOP_CHANNEL if notified.stop(payload) => {
                    tracing::info!("trace {payload}: stopped at another host's request");
                }
                EVENTS_CHANNEL => {
                    if let Some((trace_id, id)) = payload.split_once(' ')
                        && let Ok(id) = id.parse()
                    {
                        notified.appended(trace_id, id);
                    }
                }
                _ => {}
            }
        }
    }
}

/// What a host does with the notifications of the others.
pub(crate) trait Notified: Send + Sync {
    /// Another host asks for trace `trace_id` to stop: whether it ran here.
    fn stop(&self, trace_id: &str) -> bool;
    /// A host stored event `id` of trace `trace_id`.
    fn appended(&self, trace_id: &str, id: u64);
    /// Notifications may have been missed: every watcher reads again.
    fn wake_all(&self);
}

/// This machine's name, for people reading who holds a trace.
#[cfg(not(unix))]
fn hostname() -> String {
    std::env::var("COMPUTERNAME").unwrap_or_else(|_| "unknown".to_owned())
}

/// This machine's name, for people reading who holds a trace.
#[cfg(unix)]
fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname writes at
    // most that many bytes.
    let ok = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } == 0;
    let len = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
    match std::str::from_utf8(&buf[..len]) {
        Ok(name) if ok && !name.is_empty() => name.to_owned(),
        _ => "unknown".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::Channels;
    use crate::registry::Runs;

    /// The host's side of the notifications, as the server wires it.
    struct Hub {
        runs: Arc<Runs>,
        channels: Arc<Channels>,
    }

    impl Notified for Hub {
        fn stop(&self, trace_id: &str) -> bool {
            self.runs.stop(trace_id)
        }

        fn appended(&self, trace_id: &str, id: u64) {
            self.channels.appended(trace_id, id);
        }

        fn wake_all(&self) {
            self.channels.wake_all();
        }
    }
    use crate::test_cluster;
    use reson_trace::MemoryTraceStore;

    async fn database() -> Database {
        let url = test_cluster::cluster().fresh_database().await;
        Database::connect(&url).await.unwrap()
    }

    async fn expires_in_ms(db: &Database, trace_id: &str) -> Option<f64> {
        sqlx::query_scalar(
            "SELECT (extract(epoch FROM expires_at - now()) * 1000)::float8 \
             FROM run_leases WHERE trace_id = $1",
        )
        .bind(trace_id)
        .fetch_optional(db.pool())
        .await
        .unwrap()
    }

    /// When the lease of `trace_id` expires, in seconds since the epoch.
    async fn expires_at(db: &Database, trace_id: &str) -> Option<f64> {
        sqlx::query_scalar(
            "SELECT extract(epoch FROM expires_at)::float8 FROM run_leases WHERE trace_id = $1",
        )
        .bind(trace_id)
        .fetch_optional(db.pool())
        .await
        .unwrap()
    }

    /// Makes every lease of `trace_id` expire now, as the passing of a
    /// whole lease without a heartbeat would.
    async fn expire(db: &Database, trace_id: &str) {
        sqlx::query(
            "UPDATE run_leases SET expires_at = now() - interval '1 ms' WHERE trace_id = $1",
        )
        .bind(trace_id)
        .execute(db.pool())
        .await
        .unwrap();
    }

    #[tokio::test]
    async fn a_lease_is_one_host_s_until_it_expires_then_any_host_takes_it_over() {
        let db = database().await;
        let store = MemoryTraceStore::new();
        let lease = Duration::from_secs(30);
        let (a, b) = (Cluster::new(db.clone(), lease), Cluster::new(db.clone(), lease));
        let (stop_a, stop_b) = (CancellationToken::new(), CancellationToken::new());
        a.claim("t", 1, &stop_a, &store).await.unwrap();
        let refused = b.claim("t", 1, &stop_b, &store).await.unwrap_err();
        assert_eq!(refused.status().as_u16(), 409, "{refused}");
        assert!(refused.to_string().contains(&a.host_name), "names the holder: {refused}");
        assert!(a.is_running("t").await.unwrap() && b.is_running("t").await.unwrap());
        assert_eq!(b.running().await.unwrap(), ["t"]);
        assert!(expires_in_ms(&db, "t").await.unwrap() > 29_000.0);

        expire(&db, "t").await;
        assert!(!b.is_running("t").await.unwrap(), "an expired lease runs nothing");
        assert!(b.running().await.unwrap().is_empty());
        b.claim("t", 1, &stop_b, &store).await.expect("an expired lease is taken over");
        let refused = a.claim("t", 2, &stop_a, &store).await.unwrap_err();
        assert!(refused.to_string().contains(&b.host_name), "{refused}");

        // A stalled past its expiry: its next renewal finds the lease gone
        // and stops its run at once.
        assert!(!stop_a.is_cancelled());
        a.renew().await;
        assert!(stop_a.is_cancelled(), "the run whose lease was lost is stopped");
        assert!(a.held.lock().unwrap().is_empty());
        b.renew().await;
        assert!(!stop_b.is_cancelled(), "the new owner keeps running");

        // A stop from another host whose notification nobody heard (no
        // listener runs here) still reaches the owner at its next renewal.
        assert!(a.stop_elsewhere("t").await.unwrap());
        assert!(!stop_b.is_cancelled());
        b.renew().await;
        assert!(stop_b.is_cancelled(), "the stop kept in the lease is seen");
        b.release("t", 1);
        b.released(Duration::from_secs(10)).await;
        assert!(!a.stop_elsewhere("t").await.unwrap(), "nothing runs it now");
        let stop_c = CancellationToken::new();
        a.claim("t", 3, &stop_c, &store).await.unwrap();
        a.renew().await;
        assert!(!stop_c.is_cancelled(), "a new claim starts without the old request");
    }

    #[tokio::test]
    async fn the_heartbeat_keeps_a_lease_and_the_run_s_end_releases_it() {
        let db = database().await;
        let store = MemoryTraceStore::new();
        // Long enough that a renewal slowed by a busy machine is not taken
        // for a lost database, which would stop the run.
        let lease = Duration::from_secs(5);
        let a = Cluster::new(db.clone(), lease);
        let closing = CancellationToken::new();
        let beating = tokio::spawn(a.clone().heartbeat(closing.clone()));
        let stop = CancellationToken::new();
        a.claim("t", 1, &stop, &store).await.unwrap();
        // Only a renewal moves the expiry the claim set.
        let claimed = expires_at(&db, "t").await.expect("claimed");
        let renewed = async {
            while expires_at(&db, "t").await.expect("the lease is still there") <= claimed {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(30), renewed)
            .await
            .expect("the heartbeat never renewed the lease");
        assert!(!stop.is_cancelled());

        // A later claim of this host replaces the lease; the earlier run's
        // release leaves it alone.
        a.claim("t", 2, &stop, &store).await.unwrap();
        a.release("t", 1);
        a.release("t", 2);
        a.released(Duration::from_secs(10)).await;
        assert_eq!(expires_in_ms(&db, "t").await, None, "released");
        closing.cancel();
        beating.await.unwrap();
    }

    #[tokio::test]
    async fn a_lease_not_renewed_for_a_whole_lease_stops_its_run() {
        let db = database().await;
        let a = Cluster::new(db.clone(), Duration::from_millis(300));
        let stop = CancellationToken::new();
        a.claim("t", 1, &stop, &MemoryTraceStore::new()).await.unwrap();
        a.held.lock().unwrap().get_mut("t").unwrap().renewed -= Duration::from_millis(300);
        // The database is gone: nothing can be renewed.
        db.close().await;
        a.renew().await;
        assert!(stop.is_cancelled(), "another host may have the trace by now");
    }

    #[tokio::test]
    async fn a_claim_waits_for_the_release_of_a_trace_whose_run_has_ended() {
        use reson_trace::{Trace, TraceMode};
        let db = database().await;
        let store = Arc::new(MemoryTraceStore::new());
        let mut trace = Trace::new(TraceMode::Agent, "go", "default");
        trace.status = TraceStatus::Completed;
        store.create_trace(&trace).await.unwrap();
        let lease = Duration::from_secs(30);
        let (a, b) = (Cluster::new(db.clone(), lease), Cluster::new(db.clone(), lease));
        a.claim(&trace.id, 1, &CancellationToken::new(), &*store).await.unwrap();
        let waiting = {
            let (b, store, id) = (b.clone(), store.clone(), trace.id.clone());
            tokio::spawn(async move { b.claim(&id, 1, &CancellationToken::new(), &*store).await })
        };
        a.release(&trace.id, 1);
        waiting.await.unwrap().expect("the claim gets the released trace");
        let refused = a.claim(&trace.id, 2, &CancellationToken::new(), &*store).await;
        assert!(refused.is_err(), "b holds it now");
    }

    /// The listener's connection to the database.
    async fn listener_backends(db: &Database) -> Vec<i32> {
        sqlx::query_scalar(
            "SELECT pid FROM pg_stat_activity \
             WHERE datname = current_database() AND query LIKE 'LISTEN%'",
        )
        .fetch_all(db.pool())
        .await
        .unwrap()
    }

    #[tokio::test]
    async fn stops_and_events_reach_the_host_concerned_even_after_its_connection_drops() {
        let db = database().await;
        let store = MemoryTraceStore::new();
        let lease = Duration::from_secs(30);
        let (a, b) = (Cluster::new(db.clone(), lease), Cluster::new(db.clone(), lease));
        let runs = Runs::with_cluster(Some(a.clone()));
        let channels = Arc::new(Channels::default());
        let closing = CancellationToken::new();
        let hub = Arc::new(Hub { runs: runs.clone(), channels: channels.clone() });
        let listening = tokio::spawn(a.clone().listen(hub, closing.clone()));
        let mut watching = channels.subscribe("t");
        // The listener wakes the watchers once it listens.
        tokio::time::timeout(Duration::from_secs(30), watching.events.changed())
            .await
            .unwrap()
            .unwrap();

        sqlx::query("SELECT pg_notify('reson_events', 't 7')").execute(db.pool()).await.unwrap();
        tokio::time::timeout(Duration::from_secs(30), watching.events.changed())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(*watching.events.borrow_and_update(), 7);

        let claim = runs.claim_run("t", &store).await.unwrap();
        assert!(b.stop_elsewhere("t").await.unwrap(), "a live lease: the owner is told");
        tokio::time::timeout(Duration::from_secs(30), claim.stop.cancelled()).await.unwrap();
        assert!(!b.stop_elsewhere("other").await.unwrap(), "no lease: nobody to tell");

        // The connection drops: the listener connects again, and the
        // watchers read the store in case they missed an event.
        let killed: Vec<bool> =
            sqlx::query_scalar("SELECT pg_terminate_backend(pid) FROM unnest($1::int[]) AS pid")
                .bind(listener_backends(&db).await)
                .fetch_all(db.pool())
                .await
                .unwrap();
        assert_eq!(killed, [true]);
        tokio::time::timeout(Duration::from_secs(30), watching.events.changed())
            .await
            .unwrap()
            .unwrap();
        watching.events.borrow_and_update();
        // It listens again before it wakes them: a notification now arrives.
        sqlx::query("SELECT pg_notify('reson_events', 't 9')").execute(db.pool()).await.unwrap();
        tokio::time::timeout(Duration::from_secs(30), watching.events.changed())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(*watching.events.borrow_and_update(), 9);
        closing.cancel();
        listening.await.unwrap();
        drop(claim);
    }
}
