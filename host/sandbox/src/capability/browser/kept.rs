//! One browser kept up between sessions (`[sandbox] warm_browser_ms`), so
//! that a trace's first browser call does not wait for Chromium to start.
//!
//! Each session gets a browser context of its own in it (CDP
//! `Target.createBrowserContext`): cookies, storage and cache in memory,
//! seen by no other context and gone when the session disposes of it,
//! and a proxy of its own, which checks the session's plugin's grant. The
//! browser's own requests go through a proxy that refuses them all.
//!
//! The browser ends once no session has used it for the idle time, or
//! once it has served [`CONTEXTS`] sessions and the last of them ended
//! (so that what a long-lived browser accumulates is bounded); the next
//! session then starts another.

use super::BrowserError;
use super::chromium::Chromium;
use chromiumoxide::Browser;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;
use tokio::net::TcpListener;

/// Sessions one kept browser serves before it retires.
pub(super) const CONTEXTS: usize = 16;

/// The browser kept up for the sessions of one runtime.
pub(super) struct Kept {
    /// How long it stays up with no session in it.
    idle: Duration,
    current: tokio::sync::Mutex<Option<Arc<Shared>>>,
    /// Every browser started, the current one and those retired that
    /// still serve sessions or are being ended.
    started: Mutex<Vec<Weak<Shared>>>,
}

/// One kept Chromium.
struct Shared {
    browser: Arc<Browser>,
    /// Whether it runs in a network of its own (`[sandbox] jail`).
    isolated: bool,
    /// `None` once it is closed. Held while a lease is handed out and while
    /// it is closed, so that neither happens halfway through the other.
    chromium: tokio::sync::Mutex<Option<Chromium>>,
    usage: Mutex<Usage>,
}

#[derive(Default)]
struct Usage {
    /// Sessions in it now.
    users: usize,
    /// Sessions it was handed to in all.
    handed: usize,
    /// Changes whenever a session comes or goes: an idle end scheduled
    /// before the last change is stale.
    changes: u64,
    /// No new session goes to it (it was replaced).
    retired: bool,
}

/// A session's place in a kept browser: the listener of its context's
/// proxy until the session takes it.
pub(super) struct Lease {
    pub(super) browser: Arc<Browser>,
    pub(super) proxy: Option<(TcpListener, u16)>,
    shared: Arc<Shared>,
    idle: Duration,
}

impl Kept {
    /// A kept browser that ends after `idle` without a session.
    pub(super) fn new(idle: Duration) -> Self {
        Self { idle, current: tokio::sync::Mutex::default(), started: Mutex::default() }
    }

    /// A place in the kept browser, started by `start` (given the number
    /// of contexts to make room for) when there is none, or none with
    /// room, or it is gone, or it runs on the other kind of network.
    pub(super) async fn lease(
        &self,
        isolated: bool,
        start: impl AsyncFnOnce(usize) -> Result<Chromium, BrowserError>,
    ) -> Result<Lease, BrowserError> {
        let mut current = self.current.lock().await;
        if let Some(shared) = current.as_ref() {
            if let Some(lease) = shared.lease(isolated, self.idle).await? {
                return Ok(lease);
            }
            shared.retire();
        }
        let chromium = start(CONTEXTS).await?;
        let shared = Arc::new(Shared {
            browser: chromium.browser.clone(),
            isolated,
            chromium: tokio::sync::Mutex::new(Some(chromium)),
            usage: Mutex::default(),
        });
        *current = Some(shared.clone());
        {
            let mut started = self.started.lock().unwrap_or_else(PoisonError::into_inner);
            started.retain(|browser| browser.strong_count() > 0);
            started.push(Arc::downgrade(&shared));
        }
        shared.lease(isolated, self.idle).await?.ok_or_else(|| {
            BrowserError::Failed("a browser just started has no room for a context".into())
        })
    }

    /// Ends the kept browser, and any retired one still up, now (their
    /// sessions were ended before); returns once they are.
    pub(super) async fn close(&self) {
        self.current.lock().await.take();
        let started =
            std::mem::take(&mut *self.started.lock().unwrap_or_else(PoisonError::into_inner));
        for shared in started.iter().filter_map(Weak::upgrade) {
            shared.retire();
            shared.end().await;
        }
    }
}

impl Shared {
    async fn lease(
        self: &Arc<Self>,
        isolated: bool,
        idle: Duration,
    ) -> Result<Option<Lease>, BrowserError> {
        if self.isolated != isolated {
            return Ok(None);
        }
        let mut chromium = self.chromium.lock().await;
        let Some(running) = chromium.as_mut() else { return Ok(None) };
        if self.usage.lock().unwrap_or_else(PoisonError::into_inner).handed >= CONTEXTS {
            return Ok(None);
        }
        if running.exited() {
            tracing::info!(target: "reson::browser", "the kept browser is gone: starting another");
            return Ok(None);
        }
        let Some(proxy) = running.context_proxy().await? else { return Ok(None) };
        self.change(|usage| {
            usage.users += 1;
            usage.handed += 1;
            usage.retired |= usage.handed >= CONTEXTS;
        });
        Ok(Some(Lease {
            browser: self.browser.clone(),
            proxy: Some(proxy),
            shared: self.clone(),
            idle,
        }))
    }

    /// Applies `change` to the usage; the usage after it.
    fn change(&self, change: impl FnOnce(&mut Usage)) -> (usize, u64, bool) {
        let mut usage = self.usage.lock().unwrap_or_else(PoisonError::into_inner);
        change(&mut usage);
        usage.changes += 1;
        (usage.users, usage.changes, usage.retired)
    }

    fn retire(&self) {
        self.usage.lock().unwrap_or_else(PoisonError::into_inner).retired = true;
    }

    /// Ends the browser if no session came or went since change `stamp`.
    async fn end_unless_used_since(&self, stamp: u64) {
        let mut chromium = self.chromium.lock().await;
        let used = {
            let usage = self.usage.lock().unwrap_or_else(PoisonError::into_inner);
            usage.users > 0 || usage.changes != stamp
        };
        if !used && let Some(running) = chromium.take() {
            running.close().await;
        }
    }

    async fn end(&self) {
        if let Some(running) = self.chromium.lock().await.take() {
            running.close().await;
        }
    }
}

impl Lease {
    /// No new session goes to this browser: it ends once it is empty.
    pub(super) fn retire(&self) {
        self.shared.retire();
    }

    /// Whether the browser has exited, or was ended.
    pub(super) async fn exited(&self) -> bool {
        self.shared.chromium.lock().await.as_mut().is_none_or(Chromium::exited)
    }
}

impl Drop for Lease {
    /// The session left: with none left, the browser ends after the idle
    /// time, or at once when it is retired. Outside a tokio runtime nothing
    /// is scheduled: the browser is killed when the last handle on it goes.
    fn drop(&mut self) {
        let (users, stamp, retired) = self.shared.change(|usage| usage.users -= 1);
        if users > 0 {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        let wait = if retired { Duration::ZERO } else { self.idle };
        let shared: Weak<Shared> = Arc::downgrade(&self.shared);
        runtime.spawn(async move {
            tokio::time::sleep(wait).await;
            if let Some(shared) = shared.upgrade() {
                shared.end_unless_used_since(stamp).await;
            }
        });
    }
}
