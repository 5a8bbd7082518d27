//! The wasmtime engine every plugin runs on, its epoch ticker, and the
//! linkers of the three worlds.

use super::function_cache::FunctionCache;
use crate::capability::HostState;
use crate::config::SandboxConfig;
use crate::contract::bindings;
use crate::observer::WorkObserver;
use std::hash::{Hash, Hasher};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use wasmtime::component::{HasSelf, Linker};
use wasmtime::{Config, Enabled, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

/// How often the epoch advances. Deadlines are checked against the wall
/// clock at each tick, so this is their resolution.
pub(crate) const EPOCH_TICK: Duration = Duration::from_millis(2);

/// Freed instance slots decommitted together.
const DECOMMIT_BATCH: usize = 16;

/// Memories, tables and stacks freed but still waiting in wasmtime's
/// decommit queues (up to a batch per queue, one queue per core, at most
/// 16) are not reusable until a queue is flushed. A failed allocation
/// flushes them, but two calls racing for one flush leave the loser
/// failing ("maximum concurrent limit ... reached") while slots are about
/// to be free. The pool gets that many slots beyond what the calls the
/// slot semaphore admits can use, so an admitted call always finds one.
fn decommit_headroom() -> u32 {
    let queues = std::thread::available_parallelism().map_or(1, |n| n.get()).min(16);
    u32::try_from(queues * DECOMMIT_BATCH).unwrap_or(u32::MAX)
}

/// Bytes of each table kept resident, zeroed in place, when its instance ends.
const TABLE_KEEP_RESIDENT: usize = 64 << 10;

/// Bytes of each linear memory kept resident when its instance ends, where
/// the kernel has `PAGEMAP_SCAN` (Linux 6.7): only the pages the guest
/// wrote are copied back from the module's image or zeroed, so the next
/// instance in the slot takes no page faults and needs no `madvise` (and
/// its TLB shootdowns). What a guest wrote beyond this is decommitted as
/// before. Without the scan wasmtime would reset these bytes blindly,
/// which costs more than the faults it saves.
const MEMORY_KEEP_RESIDENT: usize = 1 << 20;

/// Core instances, tables and memories one component may need (a Rust
/// guest has a handful of core instances for its shims).
const CORE_INSTANCES_PER_COMPONENT: u32 = 8;

/// The engine and the linkers shared by all plugins.
pub(crate) struct Sandbox {
    pub(crate) engine: Engine,
    pub(crate) linker: Linker<HostState>,
    /// Identifies the engine settings in compiled-code cache keys.
    pub(crate) fingerprint: String,
    /// Whether fuel is counted (every Store then needs fuel set).
    pub(crate) fuel: bool,
    /// Whether fresh calls leave a spare instance made ahead
    /// (`[sandbox] spare_instances`).
    pub(crate) spares: bool,
    /// One per instance the pool holds; every call takes one first.
    pub(crate) slots: Arc<Slots>,
    /// The browser sessions of tool calls.
    pub(crate) browsers: Arc<crate::capability::browser::Browsers>,
    ticker_stop: Arc<AtomicBool>,
}

/// Idle kept instances at most, beside `calls` slots for calls: a quarter
/// more; as many spares again.
fn idle_limit(calls: u32) -> u32 {
    calls / 4
}

/// The pooling allocator's instance slots, handed out one per call, so
/// that calls beyond the pool's size wait their turn instead of failing;
/// and the count of idle instances, which live in room of their own.
pub(crate) struct Slots {
    free: Arc<Semaphore>,
    total: u32,
    /// Idle instances kept for a next call (`[instance] keep_warm`).
    kept: AtomicU32,
    /// Never-used instances made ahead (`[sandbox] spare_instances`).
    spares: AtomicU32,
}

/// Marks one idle instance, kept or spare; dropping it stops counting it.
pub(crate) struct KeptMark {
    slots: Arc<Slots>,
    spare: bool,
}

impl Drop for KeptMark {
    fn drop(&mut self) {
        self.slots.count(self.spare).fetch_sub(1, Ordering::Relaxed);
    }
}

/// A slot held by one call; dropping it frees the slot.
pub(crate) struct SlotPermit {
    _permit: OwnedSemaphorePermit,
}

impl Slots {
    fn new(count: u32) -> Arc<Self> {
        Arc::new(Self {
            free: Arc::new(Semaphore::new(count as usize)),
            total: count,
            kept: AtomicU32::new(0),
            spares: AtomicU32::new(0),
        })
    }

    fn count(&self, spare: bool) -> &AtomicU32 {
        if spare { &self.spares } else { &self.kept }
    }

    /// Counts one more idle kept instance, unless there are already as
    /// many as the pool has room for beside the calls' slots. An idle
    /// instance holds no call's slot: a call that takes one takes a slot
    /// too.
    pub(crate) fn keep(self: &Arc<Self>) -> Option<KeptMark> {
        self.mark(false)
    }

    /// Counts one more spare, as [`Self::keep`] does kept instances, in
    /// room of their own: spares never stand in a kept instance's way.
    pub(crate) fn spare(self: &Arc<Self>) -> Option<KeptMark> {
        self.mark(true)
    }

    fn mark(self: &Arc<Self>, spare: bool) -> Option<KeptMark> {
        let limit = idle_limit(self.total);
        self.count(spare)
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| (n < limit).then_some(n + 1))
            .ok()
            .map(|_| KeptMark { slots: self.clone(), spare })
    }

    /// Waits (first come, first served) for a free slot; `None` if
    /// `cancel` fires first.
    pub(crate) async fn acquire(&self, cancel: Option<&CancellationToken>) -> Option<SlotPermit> {
        // A free slot is taken at once: the waiting future and its select
        // are a measurable part of a small call. Freed permits go to
        // waiters first, so this jumps no queue.
        if cancel.is_some_and(CancellationToken::is_cancelled) {
            return None;
        }
        if let Ok(permit) = self.free.clone().try_acquire_owned() {
            return Some(SlotPermit { _permit: permit });
        }
        let permit = self.free.clone().acquire_owned();
        let permit = match cancel {
            Some(cancel) => tokio::select! {
                biased;
                () = cancel.cancelled() => return None,
                permit = permit => permit,
            },
            None => permit.await,
        };
        // The semaphore is never closed.
        permit.ok().map(|permit| SlotPermit { _permit: permit })
    }
}

impl Sandbox {
    /// The engine for `settings`, keeping compiled functions under
    /// `functions_dir`, its browsers keeping their files under `browser_dir`
    /// and telling `observer` when one starts.
    pub(crate) fn new(
        settings: &SandboxConfig,
        functions_dir: PathBuf,
        browser_dir: PathBuf,
        observer: Option<Arc<dyn WorkObserver>>,
    ) -> wasmtime::Result<Self> {
        let mut pool = PoolingAllocationConfig::default();
        let calls = settings.max_instances.max(1);
        // Idle kept instances and spares live beside the calls' slots,
        // never in them, each in room of their own.
        let n = calls + 2 * idle_limit(calls);
        let queued = decommit_headroom();
        pool.total_component_instances(n)
            .total_core_instances(n * CORE_INSTANCES_PER_COMPONENT)
            .total_memories(n * 2 + queued)
            .total_tables(n * CORE_INSTANCES_PER_COMPONENT + queued)
            // Every call runs on a fiber stack of its own.
            .total_stacks(n + queued)
            // Freed slots are handed back to the OS in batches, with one
            // `process_madvise` each where the kernel has it: every
            // madvise is a TLB shootdown on each core running this process.
            .decommit_batch_size(DECOMMIT_BATCH)
            // Tables are small: zeroed in place, their pages never fault
            // (and shoot down TLBs) again when the slot is reused.
            .table_keep_resident(TABLE_KEEP_RESIDENT)
            .max_memory_size(usize::try_from(settings.max_memory_mb << 20).unwrap_or(usize::MAX));
        if PoolingAllocationConfig::is_pagemap_scan_available() {
            pool.pagemap_scan(Enabled::Yes).linear_memory_keep_resident(MEMORY_KEEP_RESIDENT);
        }
        let mut config = Config::new();
        config
            .epoch_interruption(true)
            .consume_fuel(settings.fuel)
            .wasm_component_model(true)
            .allocation_strategy(InstanceAllocationStrategy::Pooling(pool))
            .enable_incremental_compilation(Arc::new(FunctionCache::new(functions_dir)))?;
        let engine = Engine::new(&config)?;

        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
        crate::capability::clock::add_to_linker(&mut linker)?;
        crate::capability::effects::add_to_linker(&mut linker)?;
        crate::capability::files::add_to_linker(&mut linker)?;
        // The three worlds share their host interfaces; `streaming` is the
        // provider world's only extra import.
        bindings::tool::ToolPlugin::add_to_linker::<_, HasSelf<_>>(&mut linker, |s| s)?;
        bindings::provider::reson::plugin::chat_types::add_to_linker::<_, HasSelf<_>>(
            &mut linker,
            |s| s,
        )?;
        bindings::provider::reson::plugin::streaming::add_to_linker::<_, HasSelf<_>>(
            &mut linker,
            |s| s,
        )?;

        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        let fingerprint = format!("{:016x}", hasher.finish());

        let ticker_stop = Arc::new(AtomicBool::new(false));
        spawn_ticker(engine.clone(), ticker_stop.clone());
        Ok(Self {
            engine,
            linker,
            fingerprint,
            fuel: settings.fuel,
            spares: settings.spare_instances,
            slots: Slots::new(calls),
            browsers: Arc::new(
                crate::capability::browser::Browsers::new(browser_dir, observer)
                    .with_chromium(settings.chromium.clone())
                    .with_kept_browser(
                        settings
                            .warm_browser_ms
                            .filter(|&ms| ms > 0)
                            .map(std::time::Duration::from_millis),
                    ),
            ),
            ticker_stop,
        })
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        self.ticker_stop.store(true, Ordering::Relaxed);
    }
}

/// Advances the epoch on an absolute schedule: a plain sleep loop drifts.
fn spawn_ticker(engine: Engine, stop: Arc<AtomicBool>) {
    std::thread::Builder::new()
        .name("reson-epoch".into())
        .spawn(move || {
            let start = Instant::now();
            let mut ticks: u32 = 0;
            while !stop.load(Ordering::Relaxed) {
                ticks = ticks.wrapping_add(1);
                let next = start + EPOCH_TICK * ticks;
                if let Some(wait) = next.checked_duration_since(Instant::now()) {
                    std::thread::sleep(wait);
                }
                engine.increment_epoch();
            }
        })
        .expect("spawning the epoch thread");
}
