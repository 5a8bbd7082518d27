//! The runs of this server: a trace is claimed before its run starts and
//! released when it ends, here and, with other hosts on the database, as a
//! lease there.

use super::cluster::Cluster;
use super::error::ApiError;
use reson_trace::TraceStore;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// The traces running in this server. A trace is claimed before its run is
/// prepared and released when the run has ended, so two requests for one
/// trace never both run it: the second finds the claim. With other hosts
/// on the database, a claim here is then a lease there.
pub(crate) struct Runs {
    state: Mutex<Registry>,
    /// How many runs there are, for waiting on them at shutdown.
    count: watch::Sender<usize>,
    /// The other hosts' part, when the store is shared.
    cluster: Option<Arc<Cluster>>,
}

#[derive(Default)]
struct Registry {
    /// Each running trace's claim number and stop token.
    running: HashMap<String, (u64, CancellationToken)>,
    /// Numbers claims, so that a claim released early is never mistaken
    /// for a later claim of the same trace.
    claims: u64,
    /// Set at shutdown: no run starts after it.
    closed: bool,
}

/// A trace's place in [`Runs`] (and its lease), released when dropped
/// (if [`Runs::finished`] has not released it first).
pub(crate) struct Claim {
    runs: Arc<Runs>,
    trace_id: String,
    number: u64,
    /// Cancelled to stop the run.
    pub(crate) stop: CancellationToken,
}

impl Runs {
    /// The runs of a server alone on its store.
    #[cfg(test)]
    pub(crate) fn new() -> Arc<Self> {
        Self::with_cluster(None)
    }

    /// The runs of a server whose claims are leases in `cluster` too.
    pub(crate) fn with_cluster(cluster: Option<Arc<Cluster>>) -> Arc<Self> {
        Arc::new(Self { state: Mutex::default(), count: watch::Sender::new(0), cluster })
    }

    /// Claims `trace_id` for a new run, here and, when the store is shared,
    /// against every other host (whose run is a 409 too).
    pub(crate) async fn claim_run(
        self: &Arc<Self>,
        trace_id: &str,
        store: &dyn TraceStore,
    ) -> Result<Claim, ApiError> {
        // In this process first: no database round trip for a run here.
        let claim = self.claim(trace_id)?;
        if let Some(cluster) = &self.cluster {
            cluster.claim(trace_id, claim.number, &claim.stop, store).await?;
        }
        Ok(claim)
    }

    /// Claims `trace_id` in this process only.
    pub(crate) fn claim(self: &Arc<Self>, trace_id: &str) -> Result<Claim, ApiError> {
        let mut state = self.state.lock().expect("runs");
        if state.closed {
            return Err(ApiError::ShuttingDown);
        }
        if state.running.contains_key(trace_id) {
            return Err(ApiError::Conflict(format!("trace {trace_id} is already running")));
        }
        let stop = CancellationToken::new();
        state.claims += 1;
        let number = state.claims;
        state.running.insert(trace_id.to_owned(), (number, stop.clone()));
        self.count.send_replace(state.running.len());
        Ok(Claim { runs: self.clone(), trace_id: trace_id.to_owned(), number, stop })
    }

    /// Releases `trace_id`: its run has stored its last event. Called
    /// before watchers hear of that event, so a client that saw the run
    /// end may start the next one at once.
    pub(crate) fn finished(&self, trace_id: &str) {
        let mut state = self.state.lock().expect("runs");
        if let Some((number, _)) = state.running.remove(trace_id) {
            self.count.send_replace(state.running.len());
            if let Some(cluster) = &self.cluster {
                cluster.release(trace_id, number);
            }
        }
    }

    /// Asks `trace_id`'s run to stop; false when it is not running here.
    pub(crate) fn stop(&self, trace_id: &str) -> bool {
        let state = self.state.lock().expect("runs");
        state.running.get(trace_id).inspect(|(_, stop)| stop.cancel()).is_some()
    }

    /// Asks `trace_id`'s run to stop, here or on the host that runs it;
    /// false when it runs nowhere.
    pub(crate) async fn stop_anywhere(&self, trace_id: &str) -> Result<bool, ApiError> {
        if self.stop(trace_id) {
            return Ok(true);
        }
        match &self.cluster {
            Some(cluster) => cluster.stop_elsewhere(trace_id).await,
            None => Ok(false),
        }
    }

    /// Whether `trace_id` runs here.
    pub(crate) fn is_running(&self, trace_id: &str) -> bool {
        self.state.lock().expect("runs").running.contains_key(trace_id)
    }

    /// Whether `trace_id` runs here or on another host.
    pub(crate) async fn is_running_anywhere(&self, trace_id: &str) -> Result<bool, ApiError> {
        if self.is_running(trace_id) {
            return Ok(true);
        }
        match &self.cluster {
            Some(cluster) => cluster.is_running(trace_id).await,
            None => Ok(false),
        }
    }

    /// The traces running here.
    pub(crate) fn running(&self) -> Vec<String> {
        let mut ids: Vec<String> =
            self.state.lock().expect("runs").running.keys().cloned().collect();
        ids.sort_unstable();
        ids
    }

    /// The traces running here or on another host.
    pub(crate) async fn running_anywhere(&self) -> Result<Vec<String>, ApiError> {
        let mut ids = self.running();
        if let Some(cluster) = &self.cluster {
            ids.extend(cluster.running().await?);
            ids.sort_unstable();
            ids.dedup();
        }
        Ok(ids)
    }

    /// How many runs there are.
    pub(crate) fn len(&self) -> usize {
        *self.count.borrow()
    }

    /// Starts no more runs, stops every one, and waits up to `bound` for
    /// them to end; false when some were still going.
    pub(crate) async fn stop_all(&self, bound: Duration) -> bool {
        {
            let mut state = self.state.lock().expect("runs");
            state.closed = true;
            state.running.values().for_each(|(_, stop)| stop.cancel());
        }
        let mut count = self.count.subscribe();
        tokio::time::timeout(bound, count.wait_for(|n| *n == 0)).await.is_ok()
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        let mut state = self.runs.state.lock().expect("runs");
        if state.running.get(&self.trace_id).is_some_and(|(n, _)| *n == self.number) {
            state.running.remove(&self.trace_id);
            self.runs.count.send_replace(state.running.len());
        }
        if let Some(cluster) = &self.runs.cluster {
            cluster.release(&self.trace_id, self.number);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trace_is_claimed_once_until_released() {
        let runs = Runs::new();
        let claim = runs.claim("t").unwrap();
        let again = runs.claim("t").err().unwrap();
        assert_eq!(again.status().as_u16(), 409, "{again}");
        assert!(runs.is_running("t") && runs.len() == 1);
        assert!(runs.stop("t"));
        assert!(claim.stop.is_cancelled());
        drop(claim);
        assert!(!runs.stop("t"), "a released trace is not running");
        assert!(runs.claim("t").is_ok(), "and may run again");
    }

    #[test]
    fn a_finished_run_frees_its_trace_before_its_claim_goes() {
        let runs = Runs::new();
        let old = runs.claim("t").unwrap();
        runs.finished("t");
        assert_eq!(runs.len(), 0);
        let new = runs.claim("t").expect("the next run may start");
        drop(old);
        assert!(runs.is_running("t"), "the old claim going does not free the new run's");
        drop(new);
        assert!(!runs.is_running("t"));
    }

    #[tokio::test]
    async fn stop_all_stops_every_run_and_refuses_new_ones() {
        let runs = Runs::new();
        let claims = [runs.claim("a").unwrap(), runs.claim("b").unwrap()];
        let stops: Vec<CancellationToken> = claims.iter().map(|c| c.stop.clone()).collect();
        let ending = tokio::spawn(async move {
            for stop in &stops {
                stop.cancelled().await;
            }
            drop(claims);
        });
        assert!(runs.stop_all(Duration::from_secs(10)).await);
        ending.await.unwrap();
        assert!(matches!(runs.claim("c"), Err(ApiError::ShuttingDown)));
        let runs = Runs::new();
        let _stuck = runs.claim("stuck").unwrap();
        assert!(!runs.stop_all(Duration::from_millis(10)).await, "a run that does not end");
    }
}
