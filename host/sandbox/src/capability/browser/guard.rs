//! The grant, enforced on every request a browser makes: on each page
//! through DevTools request interception (`Fetch`, every URL, before it is
//! sent), and at `host:port` by the proxy Chromium must send everything
//! through, which also sees what interception misses (WebSocket
//! handshakes, workers, pages the host did not open).

use crate::jail::proxy::Reach;
use crate::policy::Grants;
use chromiumoxide::Page;
use chromiumoxide::cdp::browser_protocol::fetch::{
    ContinueRequestParams, ContinueResponseParams, EnableParams, EventRequestPaused,
    FailRequestParams, RequestPattern, RequestStage,
};
use chromiumoxide::cdp::browser_protocol::network::{
    self, ErrorReason, EventLoadingFailed, EventLoadingFinished, EventRequestWillBeSent,
    ResourceType,
};
use chromiumoxide::cdp::browser_protocol::page::{
    DialogType, EventJavascriptDialogOpening, EventLifecycleEvent, HandleJavaScriptDialogParams,
};
use futures::StreamExt;
use reqwest::Url;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
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

/// Requests in flight on a page, for "wait until the network is idle",
/// and whether Chromium said the main frame's network went idle (its
/// `networkIdle` lifecycle event): a request that never ends (a frame the
/// page may not load) leaves the count above zero but not that.
#[derive(Default)]
pub(super) struct Activity {
    state: Mutex<(HashSet<String>, Option<Instant>)>,
    idle: AtomicBool,
    /// A main-frame navigation refused since the last look.
    refused: Mutex<Option<String>>,
    /// A download the page started since the last look (refused).
    download: Mutex<Option<String>>,
    /// Whether the page is gone (it closed itself).
    closed: AtomicBool,
}

impl Activity {
    /// The main-frame navigation refused since the last call, if any.
    pub(super) fn refused_navigation(&self) -> Option<String> {
        self.refused.lock().unwrap_or_else(PoisonError::into_inner).take()
    }

    /// The page started a download of `url`, which Chromium refused.
    pub(super) fn downloaded(&self, url: &str) {
        *self.download.lock().unwrap_or_else(PoisonError::into_inner) = Some(url.to_owned());
    }

    /// The download the page started since the last call, if any.
    pub(super) fn download(&self) -> Option<String> {
        self.download.lock().unwrap_or_else(PoisonError::into_inner).take()
    }

    /// The page is gone.
    pub(super) fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
    }

    /// Whether the page is gone.
    pub(super) fn closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    fn lifecycle(&self, name: &str) {
        let idle = match name {
            "init" => false,
            "networkIdle" => true,
            _ => return,
        };
        self.idle.store(idle, Ordering::SeqCst);
    }

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
        if self.idle.load(Ordering::SeqCst) {
            return true;
        }
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.0.is_empty() && state.1.is_none_or(|at| at.elapsed() >= quiet)
    }
}

/// Where a paused response redirects to, resolved against its request's
/// URL; `None` for a response that is no redirect.
fn redirect_target(event: &EventRequestPaused) -> Option<String> {
    let status = event.response_status_code?;
    if !(300..400).contains(&status) {
        return None;
    }
    let location = event
        .response_headers
        .as_ref()?
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("location"))?;
    let base = Url::parse(&event.request.url).ok()?;
    Some(base.join(&location.value).map_or_else(|_| location.value.clone(), String::from))
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
    let mut lifecycle = page.event_listener::<EventLifecycleEvent>().await?;
    let mut dialogs = page.event_listener::<EventJavascriptDialogOpening>().await?;
    // Every request before it is sent, and every response before it is
    // used: Chromium follows a redirect without pausing its next hop, so a
    // redirect is judged by its `Location` while it is still a response.
    let stage = |stage| RequestPattern::builder().url_pattern("*").request_stage(stage).build();
    let enable = EnableParams::builder()
        .pattern(stage(RequestStage::Request))
        .pattern(stage(RequestStage::Response))
        .build();
    page.execute(enable).await?;
    page.execute(network::EnableParams::default()).await?;
    let mut tasks = JoinSet::new();
    let answering = page.clone();
    let refusals = activity.clone();
    tasks.spawn(async move {
        let mut answers = JoinSet::new();
        while let Some(event) = paused.next().await {
            while answers.try_join_next().is_some() {}
            let at_response = event.response_status_code.is_some() || event.response_error_reason.is_some();
            let target = if at_response { redirect_target(&event) } else { Some(event.request.url.clone()) };
            let Some(url) = &target else {
                let page = answering.clone();
                let id = event.request_id.clone();
                answers.spawn(async move {
                    let _ = page.execute(ContinueResponseParams::new(id)).await;
                });
                continue;
            };
            let verdict = match url.split_once(':').map(|(scheme, _)| scheme) {
                // Inline content fetches nothing; only a page of it is refused.
                Some("data" | "blob") if event.resource_type != ResourceType::Document => Ok(()),
                _ => guard.check(url),
            };
            if let Err(reason) = &verdict {
                guard.refuse(url, reason, "interception");
                let main = answering.mainframe().await.ok().flatten();
                if event.resource_type == ResourceType::Document && main == Some(event.frame_id.clone()) {
                    *refusals.refused.lock().unwrap_or_else(PoisonError::into_inner) = Some(url.clone());
                }
            }
            // Answered concurrently: one answer Chromium is slow to
            // acknowledge must not hold every other request of the page.
            let id = event.request_id.clone();
            let page = answering.clone();
            answers.spawn(async move {
                let answered = match verdict {
                    Ok(()) if at_response => page.execute(ContinueResponseParams::new(id)).await.map(drop),
                    Ok(()) => page.execute(ContinueRequestParams::new(id)).await.map(drop),
                    Err(_) => {
                        let fail = FailRequestParams::new(id, ErrorReason::BlockedByClient);
                        page.execute(fail).await.map(drop)
                    }
                };
                if let Err(e) = answered {
                    tracing::debug!(target: "reson::browser", "a paused request went unanswered: {e}");
                }
            });
        }
    });
    let seen = activity.clone();
    tasks.spawn(async move {
        while let Some(event) = sent.next().await {
            seen.started(event.request_id.inner());
        }
    });
    // A dialog holds the page's scripts, and so every action on it, until
    // someone answers: the host does, saying no where it is asked.
    let answering = page.clone();
    tasks.spawn(async move {
        while let Some(event) = dialogs.next().await {
            let accept = !matches!(event.r#type, DialogType::Confirm | DialogType::Prompt);
            tracing::info!(
                target: "reson::browser",
                kind = ?event.r#type,
                accept,
                "answered a page's dialog"
            );
            let _ = answering.execute(HandleJavaScriptDialogParams::new(accept)).await;
        }
    });
    let seen = activity.clone();
    tasks.spawn(async move {
        while let Some(event) = finished.next().await {
            seen.ended(event.request_id.inner());
        }
    });
    let seen = activity.clone();
    tasks.spawn(async move {
        while let Some(event) = failed.next().await {
            seen.ended(event.request_id.inner());
        }
    });
    let main = page.clone();
    tasks.spawn(async move {
        while let Some(event) = lifecycle.next().await {
            if main.mainframe().await.ok().flatten().as_ref() == Some(&event.frame_id) {
                activity.lifecycle(&event.name);
            }
        }
    });
    Ok(tasks)
}
