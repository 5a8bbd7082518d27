//! One call's sandbox: a fresh Store with WASI confined to the grants, a
//! wall-clock deadline, optional fuel and a memory cap; and the mapping of
//! whatever went wrong into a typed [`CallError`].

use super::engine::{Sandbox, SlotPermit};
use super::error::{CallError, Limit, TrapKind};
use crate::capability::{HostState, HostTrap, MAX_GUEST_RESOURCES, Secrets};
use crate::config::Access;
use crate::policy::Grants;
use std::future::Future;
use std::sync::Arc;
use std::time::Instant;
use tokio_util::sync::CancellationToken;
use wasmtime::component::ResourceTableError;
use wasmtime::{Store, Trap, UpdateDeadline};
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{FsPerms, WasiCtx};

/// Enough of stderr to carry a panic message.
const STDERR_CAPTURE_BYTES: usize = 16 << 10;

/// Longest panic message kept from a guest's stderr.
const PANIC_MESSAGE_CHARS: usize = 2_000;

/// A Store ready for one call, the guest's captured stderr, and the
/// instance slot the call holds (freed after the Store is dropped: fields
/// drop in order). An idle kept Store holds none.
pub(crate) struct CallStore {
    pub(crate) store: Store<HostState>,
    stderr: MemoryOutputPipe,
    /// The deadline this call was given.
    timeout: std::time::Duration,
    slot: Option<SlotPermit>,
    /// The granted directories a Store that may be kept opened, as they
    /// were then; empty for one used once.
    dirs: Vec<(std::path::PathBuf, Option<DirIdentity>)>,
}

/// Which directory a path named: device and inode.
type DirIdentity = (u64, u64);

#[cfg(unix)]
fn identity(path: &std::path::Path) -> Option<DirIdentity> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// Without an inode to tell a replaced directory from the one opened, no
/// Store with a granted directory is kept: `None` never matches.
#[cfg(not(unix))]
fn identity(_path: &std::path::Path) -> Option<DirIdentity> {
    None
}

/// Which plugin and tool a failure belongs to, for error messages.
#[derive(Clone, Copy)]
pub(crate) struct Site<'a> {
    pub(crate) plugin: &'a str,
    pub(crate) tool: &'a str,
}

impl Site<'_> {
    fn internal(&self, message: String) -> CallError {
        CallError::Internal { plugin: self.plugin.into(), tool: self.tool.into(), message }
    }
}

impl CallStore {
    /// Waits for an instance slot, then sets up the Store. `timeout` counts
    /// from the moment the slot is held: waiting for one is not the
    /// guest's time. A Store that may be `kept` for later calls notes which
    /// directories it opened (see [`Self::dirs_unchanged`]).
    #[allow(clippy::too_many_arguments, reason = "the parts of one Store, each needed")]
    pub(crate) async fn new(
        sandbox: &Sandbox,
        plugin: &Arc<str>,
        grants: &Arc<Grants>,
        secrets: &Arc<Secrets>,
        cancel: Option<CancellationToken>,
        site: Site<'_>,
        timeout: std::time::Duration,
        kept: bool,
    ) -> Result<Self, CallError> {
        let slot = sandbox.slots.acquire(cancel.as_ref()).await.ok_or_else(|| {
            CallError::Cancelled { plugin: site.plugin.into(), tool: site.tool.into() }
        })?;
        let mut call = Self::idle(sandbox, plugin, grants, secrets, site, timeout, kept)?;
        call.store.data_mut().cancel = cancel;
        call.slot = Some(slot);
        Ok(call)
    }

    /// A Store that holds no slot: [`Self::new`]'s before it takes one, or
    /// one made ahead for a later call (a spare, `kept`), which the call
    /// arms with its slot (see [`Self::rearm`]).
    pub(crate) fn idle(
        sandbox: &Sandbox,
        plugin: &Arc<str>,
        grants: &Arc<Grants>,
        secrets: &Arc<Secrets>,
        site: Site<'_>,
        timeout: std::time::Duration,
        kept: bool,
    ) -> Result<Self, CallError> {
        let stderr = MemoryOutputPipe::new(STDERR_CAPTURE_BYTES);
        let mut wasi = WasiCtx::builder();
        wasi.stderr(stderr.clone())
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .allow_blocking_current_thread(true)
            .monotonic_clock(crate::capability::clock::GuestClock);
        // Noted before the opens: a directory replaced in between makes the
        // Store look stale (a fresh one is made), never the other way round.
        let dirs = if kept {
            grants.dirs.iter().map(|d| (d.host.clone(), identity(&d.host))).collect()
        } else {
            Vec::new()
        };
        for dir in &grants.dirs {
            let perms = if dir.access == Access::ReadWrite {
                FsPerms::ReadWrite
            } else {
                FsPerms::ReadOnly
            };
            wasi.preopened_dir(&dir.host, &dir.guest, perms).map_err(|e| {
                site.internal(format!("cannot open granted directory {}: {e}", dir.host.display()))
            })?;
        }
        let limits = grants.limits;
        let deadline = Instant::now() + timeout;
        let state =
            HostState::new(wasi.build(), plugin.clone(), grants.clone(), secrets.clone(), deadline);
        let mut store = Store::new(&sandbox.engine, state);
        store.limiter(|state| &mut state.limiter);
        // Read from the store's data, so a kept instance gets each call's
        // own deadline and cancel flag. A guest still running at a tick
        // yields its worker thread to other tasks, then goes on: this is
        // `epoch_deadline_async_yield_and_update(1)` plus the deadline.
        store.epoch_deadline_callback(|store| {
            let state = store.data();
            Ok(if state.cancelled() || Instant::now() >= state.deadline {
                UpdateDeadline::Interrupt
            } else {
                UpdateDeadline::YieldCustom(1, Box::pin(tokio::task::yield_now()))
            })
        });
        store.set_epoch_deadline(1);
        if sandbox.fuel {
            store
                .set_fuel(limits.fuel.unwrap_or(u64::MAX))
                .map_err(|e| site.internal(format!("cannot set fuel: {e}")))?;
        }
        Ok(Self { store, stderr, timeout, slot: None, dirs })
    }

    /// Whether each granted directory's path still names the directory
    /// this Store opened. An idle Store holds its directories open: after
    /// one is replaced (removed and made again, renamed over), it would
    /// see the old one, where a fresh instance sees the new.
    pub(crate) fn dirs_unchanged(&self) -> bool {
        self.dirs.iter().all(|(path, opened)| opened.is_some() && identity(path) == *opened)
    }

    /// Gives up the call's slot: the Store goes idle.
    pub(crate) fn release_slot(&mut self) {
        self.slot = None;
    }

    /// Arms an idle Store for a call that holds `slot`: its deadline,
    /// cancel flag and fuel start over.
    pub(crate) fn rearm(
        &mut self,
        slot: SlotPermit,
        cancel: Option<CancellationToken>,
        timeout: std::time::Duration,
        fuel: Option<u64>,
    ) -> Result<(), CallError> {
        self.slot = Some(slot);
        self.timeout = timeout;
        self.store.data_mut().begin_call(Instant::now() + timeout, cancel);
        self.store.set_epoch_deadline(1);
        if let Some(fuel) = fuel {
            let plugin = self.store.data().plugin.to_string();
            self.store.set_fuel(fuel).map_err(|e| CallError::Internal {
                plugin,
                tool: "call".into(),
                message: format!("cannot set fuel: {e}"),
            })?;
        }
        Ok(())
    }

    /// Runs `call`, a guest call on this Store, until it ends, the call's
    /// deadline passes or the call is cancelled. Epoch interruption stops a
    /// guest running wasm; this also ends one waiting inside a host call
    /// (a request, a process, a sleep), wherever it waits. Dropping the
    /// guest's future unwinds it; the Store is not entered again.
    pub(crate) async fn bounded<T>(
        deadline: Instant,
        cancel: Option<CancellationToken>,
        call: impl Future<Output = wasmtime::Result<T>>,
    ) -> wasmtime::Result<T> {
        // A guest that never waits on the host finishes in its first poll,
        // and then needs no timer: registering one in tokio's wheel and
        // removing it is a noticeable part of a kept instance's call.
        let mut call = std::pin::pin!(call);
        if let std::task::Poll::Ready(result) = futures::poll!(call.as_mut()) {
            return result;
        }
        let cancelled = async {
            match cancel {
                Some(cancel) => cancel.cancelled_owned().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            result = call => result,
            // `classify` tells a cancel from a deadline by the token.
            () = cancelled => Err(wasmtime::Error::new(HostTrap::Deadline)),
            () = tokio::time::sleep_until(deadline.into()) => {
                Err(wasmtime::Error::new(HostTrap::Deadline))
            }
        }
    }

    /// The deadline and cancel token of the call this Store is armed for.
    pub(crate) fn limits(&self) -> (Instant, Option<CancellationToken>) {
        let state = self.store.data();
        (state.deadline, state.cancel.clone())
    }

    /// Whether the guest's stderr capture still has room for a panic
    /// message, so the Store may serve another call.
    pub(crate) fn stderr_has_room(&self) -> bool {
        self.stderr.contents().len() < STDERR_CAPTURE_BYTES / 2
    }

    /// Turns a failed guest call into a typed error naming the limit or trap.
    pub(crate) fn classify(&self, err: &wasmtime::Error, site: Site<'_>) -> CallError {
        let limits = self.store.data().grants.limits;
        let limit = |limit| CallError::LimitExceeded {
            plugin: site.plugin.into(),
            tool: site.tool.into(),
            limit,
        };
        let trapped =
            |trap| CallError::Trapped { plugin: site.plugin.into(), tool: site.tool.into(), trap };
        if self.store.data().cancelled() {
            return CallError::Cancelled { plugin: site.plugin.into(), tool: site.tool.into() };
        }
        if let Some(host) = find::<HostTrap>(err) {
            return match host {
                HostTrap::Deadline => limit(Limit::timeout(self.timeout)),
                HostTrap::Memory { .. } => limit(Limit::Memory { bytes: limits.memory_bytes }),
                HostTrap::Streamed { streamed, cap } => {
                    limit(Limit::Output { returned: *streamed, bytes: *cap })
                }
            };
        }
        if let Some(ResourceTableError::Full) = find::<ResourceTableError>(err) {
            return limit(Limit::Handles { max: MAX_GUEST_RESOURCES as u64 });
        }
        match find::<Trap>(err) {
            Some(Trap::Interrupt) => limit(Limit::timeout(self.timeout)),
            Some(Trap::OutOfFuel) => limit(Limit::Fuel { units: limits.fuel.unwrap_or(u64::MAX) }),
            Some(Trap::StackOverflow) => trapped(TrapKind::StackOverflow),
            // A Rust guest's panic aborts through `unreachable`; text on
            // stderr alone does not make any other failure a panic.
            Some(Trap::UnreachableCodeReached) if let Some(message) = self.panic_message() => {
                trapped(TrapKind::Panic(message))
            }
            other => trapped(TrapKind::Other(match other {
                Some(trap) => trap.to_string(),
                None => format!("{err:#}"),
            })),
        }
    }

    /// The message of a Rust guest's panic, from its stderr; for a Python
    /// guest (componentize-py), the exception its traceback ends with.
    fn panic_message(&self) -> Option<String> {
        // Redacted before it is cut, so that no cut leaves part of a secret.
        let stderr = String::from_utf8_lossy(&self.stderr.contents()).into_owned();
        let stderr = reson_text::redact::redact(&stderr).into_owned();
        let start = stderr.find("panicked at ")?;
        if let Some(exception) = python_exception(&stderr[..start]) {
            return Some(exception.chars().take(PANIC_MESSAGE_CHARS).collect());
        }
        let rest = &stderr[start..];
        // "panicked at src/lib.rs:3:5:\nmessage\nnote: ..."
        let message = rest.split_once(":\n").map_or(rest, |(_, m)| m);
        let message = message.split("\nnote:").next().unwrap_or(message);
        Some(message.trim().chars().take(PANIC_MESSAGE_CHARS).collect())
    }
}

/// `ExceptionType: message (File "app.py", line 3, in f)` from the last
/// Python traceback in `stderr`: componentize-py prints the traceback, then
/// panics with a message that does not say what was raised.
fn python_exception(stderr: &str) -> Option<String> {
    let traceback = &stderr[stderr.rfind("Traceback (most recent call last):")?..];
    let lines: Vec<&str> = traceback.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    let frame = lines.iter().rev().find(|l| l.starts_with("File \""));
    // Python 3.11+ underlines the failing expression with `~` and `^`.
    let exception = lines
        .iter()
        .rev()
        .find(|l| !l.starts_with("thread ") && !l.chars().all(|c| matches!(c, '^' | '~' | ' ')))?;
    Some(match frame {
        Some(frame) => format!("{exception} ({frame})"),
        None => (*exception).to_owned(),
    })
}

fn find<E: std::error::Error + Send + Sync + 'static>(err: &wasmtime::Error) -> Option<&E> {
    err.downcast_ref::<E>().or_else(|| err.chain().find_map(|e| e.downcast_ref::<E>()))
}

#[cfg(test)]
mod tests {
    use super::python_exception;

    #[test]
    fn a_python_traceback_gives_its_exception_and_innermost_frame() {
        let stderr = "Traceback (most recent call last):\n  File \"app.py\", line 9, in call\n    \
            return run(args)\n  File \"app.py\", line 3, in run\n    return args[\"x\"]\n           \
            ~~~~^^^^^\nKeyError: 'x'\nthread '<unnamed>' ";
        assert_eq!(
            python_exception(stderr).as_deref(),
            Some("KeyError: 'x' (File \"app.py\", line 3, in run)")
        );
        assert_eq!(python_exception("thread '<unnamed>' "), None);
    }
}
