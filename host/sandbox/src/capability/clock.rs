//! Sleeping guests. A guest's sleep is a wait inside a host call, where
//! epoch interruption cannot reach; the call's own deadline timer ends it
//! there, but a sleep asked to last past the deadline should not even be
//! set up that way. These replacements wake at the call's deadline at the
//! latest (the guest is then stopped on its way back into wasm) or as soon
//! as the call is cancelled.

use super::HostState;
use std::sync::OnceLock;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use wasmtime::component::{Linker, Resource};
use wasmtime_wasi::HostMonotonicClock;
use wasmtime_wasi::p2::{DynPollable, Pollable, subscribe};

/// The `wasi:clocks` version wasmtime-wasi 48 provides; guests importing
/// older 0.2 versions are matched to it by semver.
const MONOTONIC_CLOCK: &str = "wasi:clocks/monotonic-clock@0.2.12";

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// The monotonic clock guests read, so that `subscribe-instant` can be
/// measured against the same time.
pub(crate) struct GuestClock;

impl HostMonotonicClock for GuestClock {
    fn resolution(&self) -> u64 {
        1
    }

    fn now(&self) -> u64 {
        u64::try_from(epoch().elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}

struct Sleep {
    until: Instant,
    cancel: Option<CancellationToken>,
}

#[wasmtime_wasi::async_trait]
impl Pollable for Sleep {
    async fn ready(&mut self) {
        let sleep = tokio::time::sleep_until(self.until.into());
        match &self.cancel {
            Some(cancel) => tokio::select! {
                () = sleep => {}
                () = cancel.cancelled() => {}
            },
            None => sleep.await,
        }
    }
}

impl HostState {
    fn sleep(&mut self, duration: Duration) -> wasmtime::Result<Resource<DynPollable>> {
        let wanted = Instant::now().checked_add(duration).unwrap_or(self.deadline);
        let sleep = Sleep { until: wanted.min(self.deadline), cancel: self.cancel.clone() };
        let resource = self.table.push(sleep)?;
        subscribe(&mut self.table, resource)
    }
}

/// Replaces `subscribe-duration` and `subscribe-instant` in `linker`.
pub(crate) fn add_to_linker(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    let mut clock = linker.instance(MONOTONIC_CLOCK)?;
    clock.func_wrap("subscribe-duration", |mut cx, (nanos,): (u64,)| {
        Ok((cx.data_mut().sleep(Duration::from_nanos(nanos))?,))
    })?;
    clock.func_wrap("subscribe-instant", |mut cx, (when,): (u64,)| {
        let now = GuestClock.now();
        Ok((cx.data_mut().sleep(Duration::from_nanos(when.saturating_sub(now)))?,))
    })?;
    linker.allow_shadowing(false);
    Ok(())
}
