//! Browser sessions: one per trace and plugin, started on first use,
//! ended with the run (or the call, outside a trace), never shared. A
//! session has a Chromium of its own with a throwaway profile, or, where
//! the host keeps a browser up ([`super::kept`]), a browser context of its
//! own in that one.
//!
//! A page a page opens (a popup: `window.open`, a `target=_blank` link)
//! becomes a page of the session, with the next id, checked like any
//! other; a session at its page cap closes such a page at once.

use super::BrowserError;
use super::chromium::{CLOSE_GRACE, Chromium};
use super::guard::{self, Activity, BrowserItself, Guard};
use super::kept::{Kept, Lease};
use super::limits::MAX_PAGES;
use super::locate;
use super::profiles::Profiles;
use crate::config::JailMode;
use crate::observer::WorkObserver;
use crate::policy::Grants;
use chromiumoxide::cdp::browser_protocol::browser::{
    BrowserContextId, EventDownloadWillBegin, SetDownloadBehaviorBehavior,
    SetDownloadBehaviorParams,
};
use chromiumoxide::cdp::browser_protocol::target::{
    CreateBrowserContextParams, CreateTargetParams, EventAttachedToTarget, EventTargetDestroyed,
    TargetId,
};
use chromiumoxide::{Browser, Page};
use futures::StreamExt;
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::task::JoinSet;

/// Which session a call uses.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum SessionKey {
    /// The trace's session of one plugin.
    Trace { trace: String, plugin: Arc<str> },
    /// A call outside any trace: a session of its own, ended with it.
    Call(u64),
}

impl SessionKey {
    /// A key no other call has.
    pub(crate) fn fresh_call() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        Self::Call(NEXT.fetch_add(1, Ordering::Relaxed))
    }
}

/// One open page of a session.
pub(super) struct PageSlot {
    pub(super) page: Page,
    pub(super) activity: Arc<Activity>,
    _watch: JoinSet<()>,
}

/// The session's pages by target id, for what Chromium reports about a
/// page at the browser's level (its popups, its downloads).
type Targets = Arc<Mutex<HashMap<TargetId, Arc<Activity>>>>;

/// Where a session's pages live.
enum Home {
    /// A Chromium of the session's own, pages in its default context.
    Own(Box<Chromium>),
    /// A context of the session's own in the kept browser.
    Kept { context: BrowserContextId, _lease: Lease },
}

/// A browser, or a context in one, and the session's pages.
pub(crate) struct Session {
    browser: Arc<Browser>,
    pub(super) guard: Arc<Guard>,
    pub(super) pages: BTreeMap<u32, PageSlot>,
    /// A blank page opened before any call asked for one.
    ahead: Option<PageSlot>,
    next_page: u32,
    targets: Targets,
    /// Popups opened (and guarded) since they were last adopted.
    popups: mpsc::UnboundedReceiver<PageSlot>,
    /// What follows the browser's events for the session's pages, and the
    /// proxy of its context.
    tasks: JoinSet<()>,
    home: Home,
}

impl Session {
    /// A session with a Chromium of its own.
    async fn own(
        plugin: Arc<str>,
        grants: Arc<Grants>,
        profiles: &Profiles,
        chromium: Option<&std::path::Path>,
    ) -> Result<Self, BrowserError> {
        let program = locate::browser(chromium)?;
        let guard = Arc::new(Guard::new(plugin, grants.clone()));
        let isolate = grants.jail == JailMode::On;
        let chromium = Chromium::start(&program, profiles, guard.clone(), isolate, 0).await?;
        Self::open(chromium.browser.clone(), guard, JoinSet::new(), Home::Own(Box::new(chromium)))
            .await
    }

    /// A session in a context of its own in the kept browser.
    async fn in_kept(
        plugin: Arc<str>,
        grants: Arc<Grants>,
        mut lease: Lease,
    ) -> Result<Self, BrowserError> {
        let guard = Arc::new(Guard::new(plugin, grants));
        let (listener, port) = lease
            .proxy
            .take()
            .ok_or_else(|| BrowserError::Failed("a context's proxy was handed out twice".into()))?;
        let mut tasks = JoinSet::new();
        tasks.spawn(crate::jail::proxy::serve(listener, guard.clone()));
        // Every request of the context, loopback included, goes through
        // its proxy.
        let params = CreateBrowserContextParams::builder()
            .proxy_server(format!("http://127.0.0.1:{port}"))
            .proxy_bypass_list("<-loopback>")
            .build();
        let context = lease
            .browser
            .create_browser_context(params)
            .await
            .map_err(|e| BrowserError::Failed(format!("cannot make a browser context: {e}")))?;
        let browser = lease.browser.clone();
        Self::open(browser, guard, tasks, Home::Kept { context, _lease: lease }).await
    }

    /// The session in `home`, following its pages' popups and downloads;
    /// ended again if that fails.
    async fn open(
        browser: Arc<Browser>,
        guard: Arc<Guard>,
        tasks: JoinSet<()>,
        home: Home,
    ) -> Result<Self, BrowserError> {
        let (found, popups) = mpsc::unbounded_channel();
        let mut session = Self {
            browser,
            guard,
            pages: BTreeMap::new(),
            ahead: None,
            next_page: 1,
            targets: Targets::default(),
            popups,
            tasks,
            home,
        };
        match session.follow(found).await {
            Ok(()) => Ok(session),
            Err(e) => {
                session.close().await;
                Err(e)
            }
        }
    }

    /// Whether the session's browser has exited (crashed, or killed).
    async fn exited(&mut self) -> bool {
        match &mut self.home {
            Home::Own(chromium) => chromium.exited(),
            Home::Kept { _lease: lease, .. } => lease.exited().await,
        }
    }

    /// The context the session's pages open in: `None`, the browser's
    /// default.
    fn context(&self) -> Option<&BrowserContextId> {
        match &self.home {
            Home::Own(_) => None,
            Home::Kept { context, .. } => Some(context),
        }
    }

    /// Follows the pages' popups (sent to `found`) and downloads, and
    /// refuses every download.
    async fn follow(&mut self, found: mpsc::UnboundedSender<PageSlot>) -> Result<(), BrowserError> {
        let (browser, guard, targets) = (&self.browser, &self.guard, &self.targets);
        watch_targets(browser, guard, targets, found, &mut self.tasks).await?;
        // Without the events, a navigation that turns into a download just
        // never ends.
        let mut downloads = SetDownloadBehaviorParams::builder()
            .behavior(SetDownloadBehaviorBehavior::Deny)
            .events_enabled(true);
        if let Some(context) = self.context() {
            downloads = downloads.browser_context_id(context.clone());
        }
        let downloads = downloads.build().map_err(BrowserError::Failed)?;
        self.browser
            .execute(downloads)
            .await
            .map_err(|e| BrowserError::Failed(format!("cannot turn downloads off: {e}")))?;
        Ok(())
    }

    /// Opens a blank page whose every request is checked from the start:
    /// the one opened ahead, if any.
    pub(super) async fn new_page(&mut self) -> Result<u32, BrowserError> {
        if self.pages.len() >= MAX_PAGES {
            return Err(BrowserError::TooLarge(MAX_PAGES as u64));
        }
        let slot = match self.ahead.take() {
            Some(ready) if !ready.activity.closed() => ready,
            gone => {
                if let Some(gone) = gone {
                    self.untrack(&gone);
                }
                self.blank_page().await?
            }
        };
        let id = self.next_page;
        self.next_page += 1;
        self.pages.insert(id, slot);
        Ok(id)
    }

    /// Opens the page the session's first call will ask for, so that the
    /// call does not wait for it (for its renderer process, mostly). The
    /// page is the session's only once a call opens a page.
    pub(super) async fn open_ahead(&mut self) -> Result<(), BrowserError> {
        if self.ahead.is_none() && self.pages.is_empty() {
            self.ahead = Some(self.blank_page().await?);
            tracing::debug!(target: "reson::browser", "a page is open ahead");
        }
        Ok(())
    }

    /// A blank page in the session's context, guarded.
    async fn blank_page(&self) -> Result<PageSlot, BrowserError> {
        let mut params = CreateTargetParams::new("about:blank");
        params.browser_context_id = self.context().cloned();
        let page = self
            .browser
            .new_page(params)
            .await
            .map_err(|e| BrowserError::Failed(format!("cannot open a page: {e}")))?;
        guarded(page, &self.guard, &self.targets).await
    }

    /// Stops following `slot`'s page at the browser's level.
    fn untrack(&self, slot: &PageSlot) {
        self.targets.lock().unwrap_or_else(PoisonError::into_inner).remove(slot.page.target_id());
    }

    /// Takes in the popups the session's pages opened since the last call:
    /// each becomes a page of the session, or is closed when the session
    /// is at its page cap. Pages a page closed itself are dropped.
    pub(super) async fn adopt_popups(&mut self) {
        while let Ok(slot) = self.popups.try_recv() {
            if self.pages.len() >= MAX_PAGES {
                tracing::info!(
                    target: "reson::browser",
                    "a popup was closed: the session has {MAX_PAGES} pages already"
                );
                self.untrack(&slot);
                let _ = slot.page.close().await;
                continue;
            }
            let id = self.next_page;
            self.next_page += 1;
            self.pages.insert(id, slot);
        }
        let gone: Vec<u32> = self
            .pages
            .iter()
            .filter(|(_, slot)| slot.activity.closed())
            .map(|(id, _)| *id)
            .collect();
        for id in gone {
            self.forget(id);
        }
    }

    fn forget(&mut self, id: u32) -> Option<PageSlot> {
        let slot = self.pages.remove(&id)?;
        self.untrack(&slot);
        Some(slot)
    }

    /// Closes page `id`.
    pub(super) async fn close_page(&mut self, id: u32) -> Result<(), BrowserError> {
        self.page(id)?;
        if let Some(slot) = self.forget(id) {
            let _ = slot.page.close().await;
        }
        Ok(())
    }

    /// Replaces page `id` by a fresh blank one under the same id (a page
    /// stuck on Chromium's error page cannot navigate from inside).
    pub(super) async fn renew_page(&mut self, id: u32) -> Result<(), BrowserError> {
        if let Some(old) = self.forget(id) {
            let _ = old.page.close().await;
        }
        let fresh = self.new_page().await?;
        if let Some(slot) = self.pages.remove(&fresh) {
            self.pages.insert(id, slot);
        }
        Ok(())
    }

    /// The page `id`, or a clear error naming the open ones.
    pub(super) fn page(&self, id: u32) -> Result<&PageSlot, BrowserError> {
        self.pages.get(&id).ok_or_else(|| {
            let open: Vec<String> = self.pages.keys().map(ToString::to_string).collect();
            BrowserError::Failed(format!(
                "no page {id} (open pages: {})",
                if open.is_empty() { "none".to_owned() } else { open.join(", ") }
            ))
        })
    }

    /// Ends the session: its own Chromium (politely first, then its whole
    /// process group), or its context in the kept browser, pages and all.
    async fn close(mut self) {
        match self.home {
            Home::Own(chromium) => (*chromium).close().await,
            Home::Kept { context, _lease: lease } => {
                let disposed = self.browser.dispose_browser_context(context);
                if !matches!(tokio::time::timeout(CLOSE_GRACE, disposed).await, Ok(Ok(()))) {
                    // What the context holds must not outlive the browser's
                    // next idle time: it ends as soon as it is empty.
                    tracing::warn!(target: "reson::browser", "a browser context was not disposed of");
                    lease.retire();
                }
            }
        }
        self.tasks.abort_all();
    }
}

/// `page`, its every request checked from now on, known by its target.
async fn guarded(
    page: Page,
    guard: &Arc<Guard>,
    targets: &Targets,
) -> Result<PageSlot, BrowserError> {
    let activity = Arc::new(Activity::default());
    let watch = guard::watch(&page, guard.clone(), activity.clone())
        .await
        .map_err(|e| BrowserError::Failed(format!("cannot guard the page: {e}")))?;
    targets
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(page.target_id().clone(), activity.clone());
    Ok(PageSlot { page, activity, _watch: watch })
}

/// Follows what Chromium reports at the browser's level: a page the
/// session's pages open is guarded at once and sent to `popups`, to become
/// a page of the session; a download a page starts goes to its activity.
/// Pages of other sessions (in other contexts of a kept browser) are not
/// among `targets`, and what they do is left to their own sessions.
async fn watch_targets(
    browser: &Arc<Browser>,
    guard: &Arc<Guard>,
    targets: &Targets,
    popups: mpsc::UnboundedSender<PageSlot>,
    tasks: &mut JoinSet<()>,
) -> Result<(), BrowserError> {
    let failed = |e: chromiumoxide::error::CdpError| {
        BrowserError::Failed(format!("cannot follow the browser's pages: {e}"))
    };
    // Attached, not just created: the client has a page for it only then.
    let mut attached = browser.event_listener::<EventAttachedToTarget>().await.map_err(failed)?;
    let mut downloads = browser.event_listener::<EventDownloadWillBegin>().await.map_err(failed)?;
    let mut destroyed = browser.event_listener::<EventTargetDestroyed>().await.map_err(failed)?;
    let (browser, guard, ours) = (browser.clone(), guard.clone(), targets.clone());
    tasks.spawn(async move {
        while let Some(event) = attached.next().await {
            let info = &event.target_info;
            let Some(opener) = info.opener_id.as_ref().filter(|_| info.r#type == "page") else {
                continue;
            };
            if !ours.lock().unwrap_or_else(PoisonError::into_inner).contains_key(opener) {
                continue;
            }
            let popup = match browser.get_page(info.target_id.clone()).await {
                Ok(page) => guarded(page, &guard, &ours).await,
                Err(e) => Err(BrowserError::Failed(e.to_string())),
            };
            match popup {
                Ok(slot) => {
                    let _ = popups.send(slot);
                }
                Err(e) => tracing::warn!(target: "reson::browser", "a popup is not guarded: {e:?}"),
            }
        }
    });
    let ours = targets.clone();
    tasks.spawn(async move {
        while let Some(event) = downloads.next().await {
            // A page's main frame has the page's target id.
            let target = TargetId::from(event.frame_id.inner().clone());
            let known = ours.lock().unwrap_or_else(PoisonError::into_inner).get(&target).cloned();
            match known {
                Some(activity) => activity.downloaded(&event.url),
                None => tracing::debug!(target: "reson::browser", "a frame's download was refused"),
            }
        }
    });
    // A page may close itself (`window.close()`, a popup most often).
    let ours = targets.clone();
    tasks.spawn(async move {
        while let Some(event) = destroyed.next().await {
            if let Some(activity) =
                ours.lock().unwrap_or_else(PoisonError::into_inner).get(&event.target_id)
            {
                activity.close();
            }
        }
    });
    Ok(())
}

/// Every browser session of a runtime.
pub(crate) struct Browsers {
    sessions: Mutex<HashMap<SessionKey, Arc<tokio::sync::Mutex<Option<Session>>>>>,
    profiles: Profiles,
    /// `[sandbox] chromium`: the browser to start, instead of the first
    /// one found where the OS installs them.
    chromium: Option<PathBuf>,
    /// Told when a browser starts: a second or more that someone waits for.
    observer: Option<Arc<dyn WorkObserver>>,
    /// The browser kept up between sessions, if the host keeps one.
    kept: Option<Kept>,
}

impl Browsers {
    /// The sessions of a runtime whose browser files go under `dir`;
    /// what a host that is gone left there is removed now.
    pub(crate) fn new(dir: PathBuf, observer: Option<Arc<dyn WorkObserver>>) -> Self {
        Self {
            sessions: Mutex::default(),
            profiles: Profiles::new(dir),
            chromium: None,
            observer,
            kept: None,
        }
    }

    /// These sessions, starting the browser at `chromium` (`[sandbox]
    /// chromium`) when it is set.
    pub(crate) fn with_chromium(self, chromium: Option<PathBuf>) -> Self {
        Self { chromium, ..self }
    }

    /// These sessions, each in a context of its own in one browser kept
    /// up until it has gone `idle` without one (`[sandbox]
    /// warm_browser_ms`), instead of each in a Chromium of its own.
    pub(crate) fn with_kept_browser(self, idle: Option<Duration>) -> Self {
        Self { kept: idle.map(Kept::new), ..self }
    }

    /// The session for `key`, started when it has none; it enforces
    /// `grants` from now on.
    pub(super) async fn session(
        &self,
        key: &SessionKey,
        plugin: &Arc<str>,
        grants: &Arc<Grants>,
    ) -> Result<tokio::sync::OwnedMutexGuard<Option<Session>>, BrowserError> {
        let slot = self
            .sessions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(key.clone())
            .or_default()
            .clone();
        let mut session = slot.lock_owned().await;
        if let Some(running) = &mut *session
            && running.exited().await
        {
            tracing::warn!(
                target: "reson::browser",
                plugin = &**plugin,
                "a browser exited under its session (it crashed or was killed); its pages are gone"
            );
            if let Some(dead) = session.take() {
                dead.close().await;
            }
            return Err(BrowserError::Failed(
                "the browser of this trace exited (it crashed or was killed), and its pages with \
                 it; the next browser call starts a new one"
                    .into(),
            ));
        }
        match &mut *session {
            Some(running) => {
                running.guard.update(grants.clone());
                running.adopt_popups().await;
            }
            None => *session = Some(self.start(plugin, grants).await?),
        }
        Ok(session)
    }

    async fn start(
        &self,
        plugin: &Arc<str>,
        grants: &Arc<Grants>,
    ) -> Result<Session, BrowserError> {
        let Some(kept) = &self.kept else {
            return self
                .starting(
                    plugin,
                    Session::own(
                        plugin.clone(),
                        grants.clone(),
                        &self.profiles,
                        self.chromium.as_deref(),
                    ),
                )
                .await;
        };
        let isolate = grants.jail == JailMode::On;
        let lease = kept
            .lease(isolate, async |contexts| {
                let program = locate::browser(self.chromium.as_deref())?;
                let start = Chromium::start(
                    &program,
                    &self.profiles,
                    Arc::new(BrowserItself),
                    isolate,
                    contexts,
                );
                self.starting(plugin, start).await
            })
            .await?;
        Session::in_kept(plugin.clone(), grants.clone(), lease).await
    }

    /// Awaits `start`, a browser starting for `plugin`, telling the
    /// observer.
    async fn starting<T>(
        &self,
        plugin: &Arc<str>,
        start: impl Future<Output = Result<T, BrowserError>>,
    ) -> Result<T, BrowserError> {
        if let Some(observer) = &self.observer {
            observer.browser_starting(plugin);
        }
        let started = start.await;
        if let Some(observer) = &self.observer {
            observer.browser_started(plugin);
        }
        started
    }

    /// Starts the session for `key` on a task of its own, so that the
    /// first call finds its browser up (or waits only for the rest of the
    /// start). A session ended before its start began is not started; one
    /// that fails to start is left for that first call to start again and
    /// report.
    pub(crate) fn prepare(
        self: &Arc<Self>,
        key: SessionKey,
        plugin: Arc<str>,
        grants: Arc<Grants>,
    ) {
        // Outside a tokio runtime there is nothing to start it on; the
        // first call starts it then.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        let slot = {
            let mut sessions = self.sessions.lock().unwrap_or_else(PoisonError::into_inner);
            sessions.entry(key.clone()).or_default().clone()
        };
        let browsers = self.clone();
        runtime.spawn(async move {
            let mut session = slot.clone().lock_owned().await;
            let current = browsers
                .sessions
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .get(&key)
                .is_some_and(|s| Arc::ptr_eq(s, &slot));
            if current && session.is_none() {
                match browsers.start(&plugin, &grants).await {
                    Ok(mut started) => {
                        // Without it, the first call opens its page itself.
                        if let Err(e) = started.open_ahead().await {
                            tracing::debug!(target: "reson::browser", "no page opened ahead: {e:?}");
                        }
                        *session = Some(started);
                    }
                    Err(e) => {
                        tracing::debug!(target: "reson::browser", "a browser started ahead failed: {e:?}")
                    }
                }
            }
        });
    }

    /// Ends the sessions `close` picks, waiting for calls using them.
    async fn close_where(&self, close: impl Fn(&SessionKey) -> bool) {
        let slots: Vec<_> = {
            let mut sessions = self.sessions.lock().unwrap_or_else(PoisonError::into_inner);
            let keys: Vec<SessionKey> = sessions.keys().filter(|k| close(k)).cloned().collect();
            keys.iter().filter_map(|k| sessions.remove(k)).collect()
        };
        for slot in slots {
            if let Some(session) = slot.lock().await.take() {
                session.close().await;
            }
        }
    }

    /// Ends every session of `trace`.
    pub(crate) async fn close_trace(&self, trace: &str) {
        self.close_where(|k| matches!(k, SessionKey::Trace { trace: t, .. } if t == trace)).await;
    }

    /// Ends the session of one call.
    pub(crate) async fn close_key(&self, key: &SessionKey) {
        self.close_where(|k| k == key).await;
    }

    /// Ends every session, and the kept browser.
    pub(crate) async fn close_all(&self) {
        self.close_where(|_| true).await;
        if let Some(kept) = &self.kept {
            kept.close().await;
        }
    }
}
