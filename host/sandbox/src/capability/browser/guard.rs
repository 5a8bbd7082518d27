//! The grant, enforced on every request a browser makes: on each page
//! through DevTools request interception (`Fetch`, every URL, before it is
//! sent), and at `host:port` by the proxy Chromium must send everything
//! through, which also sees what interception misses (WebSocket
//! handshakes, workers, pages the host did not open).

use crate::jail::proxy::Reach;
use crate::policy::Grants;
use chromiumoxide::Page;
use chromiumoxide::cdp::browser_protocol::fetch::{
    ContinueRequestParams, EnableParams, EventRequestPaused, FailRequestParams, RequestPattern,
    RequestStage,
};
use chromiumoxide::cdp::browser_protocol::network::{
    self, ErrorReason, EventLoadingFailed, EventLoadingFinished, EventRequestWillBeSent,
    ResourceType,
};
use futures::StreamExt;
use reqwest::Url;
use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};
use tokio::task::JoinSet;

/// Refusals kept for the next report; beyond it they are only logged.
const MAX_PENDING_BLOCKED: usize = 100;

/// The grant a session enforces, and the refusals not yet reported.
pub(super) struct Guard {
    plugin: Arc<str>,
    grants: RwLock<Arc<Grants>>,
    blocked: Mutex<Vec<String>>,
}

impl Guard {
    pub(super) fn new(plugin: Arc<str>, grants: Arc<Grants>) -> Self {
        Self { plugin, grants: RwLock::new(grants), blocked: Mutex::default() }
    }

    /// The grant in force from now on (a reloaded plugin's may differ).
    pub(super) fn update(&self, grants: Arc<Grants>) {
        *self.grants.write().unwrap_or_else(PoisonError::into_inner) = grants;
    }

    fn grants(&self) -> Arc<Grants> {
        self.grants.read().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Whether the browser may load `url`, or why not.
    pub(super) fn check(&self, url: &str) -> Result<(), String> {
        let parsed = Url::parse(url).map_err(|e| format!("not a URL: {e}"))?;
        self.grants().browser_allows(&parsed)
    }

    /// Logs a refusal and keeps it for the next report to the plugin.
    pub(super) fn refuse(&self, url: &str, reason: &str, by: &'static str) {
        let shown: String = reson_text::redact::redact(url).chars().take(300).collect();
        tracing::warn!(
            target: "reson::audit",
            plugin = &*self.plugin,
            capability = "browser",
            by,
            url = %shown,
            %reason,
            "denied"
        );
        let mut blocked = self.blocked.lock().unwrap_or_else(PoisonError::into_inner);
        if blocked.len() < MAX_PENDING_BLOCKED {
            blocked.push(format!("{shown} ({reason})"));
        }
    }

    /// The refusals since the last call, oldest first.
    pub(super) fn take_blocked(&self) -> Vec<String> {
        std::mem::take(&mut *self.blocked.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

impl Reach for Guard {
    fn check(&self, host: &str, port: u16, url: Option<&Url>) -> Result<(), String> {
        let verdict = match url {
            Some(url) => self.grants().browser_allows(url),
            None if self.grants().browser_allows_authority(host, port) => Ok(()),
            None => Err("host and port not in the plugin's browser grant".to_owned()),
        };
        verdict.map_err(|reason| {
            let target = url.map_or_else(|| format!("{host}:{port}"), ToString::to_string);
            self.refuse(&target, &reason, "proxy");
            format!("reson browser: {target} refused: {reason}")
        })
    }

    fn one_request_per_connection(&self) -> bool {
        true
    }
}

/// Requests in flight on a page, for "wait until the network is idle".
#[derive(Default)]
pub(super) struct Activity {
    state: Mutex<(HashSet<String>, Option<Instant>)>,
}

impl Activity {
    fn started(&self, id: &str) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.0.insert(id.to_owned());
        state.1 = Some(Instant::now());
    }

    fn ended(&self, id: &str) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.0.remove(id);
        state.1 = Some(Instant::now());
    }

    /// Whether nothing has been in flight for `quiet`.
    pub(super) fn idle_for(&self, quiet: Duration) -> bool {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.0.is_empty() && state.1.is_none_or(|at| at.elapsed() >= quiet)
    }
}

/// Turns on interception of every request of `page` and answers each one
/// by the grant; the returned tasks run until the page goes.
pub(super) async fn watch(
    page: &Page,
    guard: Arc<Guard>,
    activity: Arc<Activity>,
) -> Result<JoinSet<()>, chromiumoxide::error::CdpError> {
    let mut paused = page.event_listener::<EventRequestPaused>().await?;
    let mut sent = page.event_listener::<EventRequestWillBeSent>().await?;
    let mut finished = page.event_listener::<EventLoadingFinished>().await?;
    let mut failed = page.event_listener::<EventLoadingFailed>().await?;
    let pattern =
        RequestPattern::builder().url_pattern("*").request_stage(RequestStage::Request).build();
    page.execute(EnableParams::builder().pattern(pattern).build()).await?;
    page.execute(network::EnableParams::default()).await?;
    let mut tasks = JoinSet::new();
    let answering = page.clone();
    tasks.spawn(async move {
        while let Some(event) = paused.next().await {
            let url = &event.request.url;
            let verdict = match url.split_once(':').map(|(scheme, _)| scheme) {
                // Inline content fetches nothing; only a page of it is refused.
                Some("data" | "blob") if event.resource_type != ResourceType::Document => Ok(()),
                _ => guard.check(url),
            };
            let id = event.request_id.clone();
            let answered = match verdict {
                Ok(()) => answering.execute(ContinueRequestParams::new(id)).await.map(drop),
                Err(reason) => {
                    guard.refuse(url, &reason, "interception");
                    let fail = FailRequestParams::new(id, ErrorReason::BlockedByClient);
                    answering.execute(fail).await.map(drop)
                }
            };
            if answered.is_err() {
                tracing::debug!(target: "reson::browser", "a paused request went with its page");
            }
        }
    });
    let seen = activity.clone();
    tasks.spawn(async move {
        while let Some(event) = sent.next().await {
            seen.started(event.request_id.inner());
        }
    });
    let seen = activity.clone();
    tasks.spawn(async move {
        while let Some(event) = finished.next().await {
            seen.ended(event.request_id.inner());
        }
    });
    tasks.spawn(async move {
        while let Some(event) = failed.next().await {
            activity.ended(event.request_id.inner());
        }
    });
    Ok(tasks)
}
