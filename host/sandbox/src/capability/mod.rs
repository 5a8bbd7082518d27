//! What the host gives guests: `log`, `config`, `http`, `process`,
//! `streaming`, `browser`, and WASI p2 confined to the granted directories;
//! [`effects`] records what a call does through them, or replays it.
//!
//! Every import checks the call's deadline on entry, so a guest looping over
//! host calls is stopped as surely as one looping in pure wasm, and every
//! capability is checked against the plugin's [`Grants`] on every call.

pub mod browser;
pub(crate) mod clock;
mod config;
pub mod effects;
pub(crate) mod files;
pub(crate) mod http;
mod log;
mod process;
mod secrets;
mod streaming;

use crate::contract::bindings::provider::reson::plugin::chat_types::Delta;
use crate::policy::Grants;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

pub(crate) use secrets::Secrets;

/// Receives streamed deltas from a provider plugin while it runs.
pub type DeltaSink = Box<dyn FnMut(Delta) + Send>;

/// Refusals written to the audit log per call; a guest asking again and
/// again for what it may not have would otherwise flood it.
const MAX_AUDITED_DENIALS: usize = 100;

/// Why the host stopped a guest from inside a host call or a limiter.
#[derive(Debug, thiserror::Error)]
pub(crate) enum HostTrap {
    #[error("the call's deadline passed during a host call")]
    Deadline,
    #[error("memory limit of {cap} bytes reached (asked for {requested})")]
    Memory { requested: usize, cap: usize },
    #[error("streamed {streamed} bytes of deltas; the output cap is {cap}")]
    Streamed { streamed: u64, cap: u64 },
}

/// The data of one call's Store.
pub(crate) struct HostState {
    wasi: WasiCtx,
    table: ResourceTable,
    pub(crate) limiter: MemoryLimiter,
    pub(crate) plugin: Arc<str>,
    pub(crate) grants: Arc<Grants>,
    pub(crate) secrets: Arc<Secrets>,
    pub(crate) deadline: Instant,
    /// Refusals in this call.
    denied: usize,
    pub(crate) deltas: Option<DeltaSink>,
    /// Set by the caller to cut the call short.
    pub(crate) cancel: Option<CancellationToken>,
    /// The browser session of a tool call; `None` outside tool calls.
    pub(crate) browser: Option<browser::Scope>,
    logged: usize,
    /// Bytes of deltas streamed in this call.
    streamed: u64,
    /// This call's effect log, when the caller keeps one.
    pub(crate) effects: Option<effects::Effects>,
}

impl HostState {
    pub(crate) fn new(
        wasi: WasiCtx,
        plugin: Arc<str>,
        grants: Arc<Grants>,
        secrets: Arc<Secrets>,
        deadline: Instant,
    ) -> Self {
        let cap = usize::try_from(grants.limits.memory_bytes).unwrap_or(usize::MAX);
        Self {
            wasi,
            table: guest_resources(),
            limiter: MemoryLimiter { cap, peak: 0 },
            plugin,
            grants,
            secrets,
            deadline,
            denied: 0,
            deltas: None,
            cancel: None,
            browser: None,
            logged: 0,
            streamed: 0,
            effects: None,
        }
    }

    /// Makes a kept instance's state ready for its next call: a new
    /// deadline and cancel flag, and the per-call counters back at zero.
    pub(crate) fn begin_call(&mut self, deadline: Instant, cancel: Option<CancellationToken>) {
        self.deadline = deadline;
        self.cancel = cancel;
        self.denied = 0;
        self.logged = 0;
        self.streamed = 0;
    }

    /// Whether the caller cancelled the call.
    pub(crate) fn cancelled(&self) -> bool {
        self.cancel.as_ref().is_some_and(CancellationToken::is_cancelled)
    }

    /// Time left before the deadline, or a trap if it has passed or the
    /// call was cancelled.
    fn remaining(&self) -> wasmtime::Result<Duration> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || self.cancelled() {
            Err(wasmtime::Error::new(HostTrap::Deadline))
        } else {
            Ok(left)
        }
    }

    /// Writes a refusal to the audit log and returns the message for the
    /// guest.
    fn deny(&mut self, capability: &'static str, detail: String) -> String {
        let detail = reson_text::redact::redact(&detail).into_owned();
        self.denied += 1;
        let plugin = &*self.plugin;
        match self.denied.cmp(&MAX_AUDITED_DENIALS) {
            std::cmp::Ordering::Less => {
                tracing::warn!(target: "reson::audit", plugin, capability, %detail, "denied")
            }
            std::cmp::Ordering::Equal => tracing::warn!(
                target: "reson::audit",
                plugin,
                capability,
                %detail,
                "denied; further refusals in this call are not logged"
            ),
            std::cmp::Ordering::Greater => {}
        }
        format!("{capability} denied: {detail}")
    }
}

/// Most resources one call may hold at once: open files and directories,
/// response streams, pollables. Each open file or stream is a descriptor of
/// the host process, shared by every call; without a cap, one guest could
/// take them all and fail every other call and the trace store with them.
pub(crate) const MAX_GUEST_RESOURCES: usize = 256;

fn guest_resources() -> ResourceTable {
    let mut table = ResourceTable::new();
    table.set_max_capacity(MAX_GUEST_RESOURCES);
    table
}

impl HostState {
    /// Ends what the guest holds through the host (HTTP body streams, WASI
    /// streams and sockets): done as its call ends, when the instance
    /// itself may be dropped later.
    pub(crate) fn end_resources(&mut self) {
        self.table = guest_resources();
    }
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

/// Caps linear memory, recording a hit as [`HostTrap::Memory`] so that it is
/// told apart from other traps.
pub(crate) struct MemoryLimiter {
    cap: usize,
    /// The largest linear memory granted so far, in bytes.
    peak: usize,
}

impl MemoryLimiter {
    /// Whether the guest has used at most half of its cap, so that a kept
    /// instance's next call is not the one that runs out.
    pub(crate) fn has_headroom(&self) -> bool {
        self.peak <= self.cap / 2
    }
}

const MAX_TABLE_ELEMENTS: usize = 100_000;

impl wasmtime::ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.cap {
            return Err(wasmtime::Error::new(HostTrap::Memory {
                requested: desired,
                cap: self.cap,
            }));
        }
        self.peak = self.peak.max(desired);
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= MAX_TABLE_ELEMENTS)
    }
}

impl crate::contract::bindings::tool::reson::plugin::types::Host for HostState {}
impl crate::contract::bindings::provider::reson::plugin::chat_types::Host for HostState {}
