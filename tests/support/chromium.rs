//! A real headless Chromium for page tests: Debian's `chromium`, installed
//! with apt-get when missing (a fresh CI machine installs it, never skips),
//! driven over the DevTools protocol, with every console error, uncaught
//! exception and failed request of a page recorded.

#![allow(dead_code, reason = "each test binary uses a different subset")]

// Also included alone (the crates' own tests, some benches), where there is
// no `support::apt` to use.
#[allow(clippy::duplicate_mod)]
#[path = "apt.rs"]
mod apt;

use chromiumoxide::cdp::browser_protocol::log::{EventEntryAdded, LogEntryLevel};
use chromiumoxide::cdp::browser_protocol::network::{EventLoadingFailed, EventResponseReceived};
use chromiumoxide::cdp::js_protocol::runtime::{
    ConsoleApiCalledType, EventConsoleApiCalled, EventExceptionThrown,
};
use chromiumoxide::page::ScreenshotParams;
use chromiumoxide::{Browser, BrowserConfig, Page};
use futures::StreamExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

const CHROMIUM: &str = "/usr/bin/chromium";

/// How long a page may take to show what a test waits for.
pub const PAGE_WAIT: Duration = Duration::from_secs(30);

/// The Chromium binary, installed first if it is missing.
pub fn executable() -> &'static Path {
    static INSTALLED: OnceLock<()> = OnceLock::new();
    INSTALLED.get_or_init(|| apt::ensure(|| Path::new(CHROMIUM).exists(), &["chromium"]));
    Path::new(CHROMIUM)
}

/// A headless Chromium with its own throwaway profile; closed when dropped.
pub struct Chromium {
    pub browser: Browser,
    handler: tokio::task::JoinHandle<()>,
    _profile: tempfile::TempDir,
    // Last, so it is let go once the browser has gone.
    _turn: tokio::sync::MutexGuard<'static, ()>,
}

/// Taken by every Chromium a test of this process starts, here and in the
/// host's browser tests: those count this process's Chromium children, so
/// no other test's may run beside them (and two cores gain nothing from
/// two browsers at once).
pub static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

impl Chromium {
    pub async fn launch() -> Self {
        let turn = ONE_AT_A_TIME.lock().await;
        let profile = tempfile::tempdir().unwrap();
        let config = BrowserConfig::builder()
            .chrome_executable(executable())
            .new_headless_mode()
            // The tests run as root, where Chromium's sandbox cannot start.
            .no_sandbox()
            .user_data_dir(profile.path())
            .window_size(1280, 1000)
            // The page lays out at the window's size, not an emulated 800x600.
            .viewport(None)
            .request_timeout(PAGE_WAIT + Duration::from_secs(10))
            .arg("--disable-gpu")
            .arg("--disable-dev-shm-usage")
            .build()
            .expect("browser config");
        let (browser, mut handler) = Browser::launch(config).await.expect("launching chromium");
        // Drives the DevTools connection; messages this crate cannot parse
        // (from a newer Chromium) are skipped, not fatal.
        let handler = tokio::spawn(async move { while handler.next().await.is_some() {} });
        Self { browser, handler, _profile: profile, _turn: turn }
    }

    /// A blank page whose problems are recorded from the start.
    pub async fn page(&self) -> Watched {
        let page = self.browser.new_page("about:blank").await.expect("new page");
        Watched::attach(page).await
    }

    pub async fn close(mut self) {
        self.browser.close().await.expect("closing chromium");
        self.browser.wait().await.expect("chromium exits");
        self.handler.abort();
    }
}

/// A page and everything that went wrong on it.
pub struct Watched {
    pub page: Page,
    problems: Arc<Mutex<Vec<String>>>,
}

impl Watched {
    async fn attach(page: Page) -> Self {
        let problems = Arc::new(Mutex::new(Vec::new()));
        let record = |problems: &Arc<Mutex<Vec<String>>>, what: String| {
            problems.lock().unwrap().push(what);
        };
        let mut console = page.event_listener::<EventConsoleApiCalled>().await.unwrap();
        let mut exceptions = page.event_listener::<EventExceptionThrown>().await.unwrap();
        let mut log = page.event_listener::<EventEntryAdded>().await.unwrap();
        let mut failed = page.event_listener::<EventLoadingFailed>().await.unwrap();
        let mut responses = page.event_listener::<EventResponseReceived>().await.unwrap();
        let p = problems.clone();
        tokio::spawn(async move {
            while let Some(e) = console.next().await {
                if matches!(e.r#type, ConsoleApiCalledType::Error | ConsoleApiCalledType::Warning) {
                    let args: Vec<_> = e.args.iter().map(|a| format!("{:?}", a.value)).collect();
                    record(&p, format!("console.{:?}: {}", e.r#type, args.join(" ")));
                }
            }
        });
        let p = problems.clone();
        tokio::spawn(async move {
            while let Some(e) = exceptions.next().await {
                let d = &e.exception_details;
                record(
                    &p,
                    format!(
                        "exception: {} {:?} at {:?}:{}",
                        d.text, d.exception, d.url, d.line_number
                    ),
                );
            }
        });
        let p = problems.clone();
        tokio::spawn(async move {
            while let Some(e) = log.next().await {
                if matches!(e.entry.level, LogEntryLevel::Error | LogEntryLevel::Warning) {
                    record(
                        &p,
                        format!("log {:?}: {} ({:?})", e.entry.level, e.entry.text, e.entry.url),
                    );
                }
            }
        });
        let p = problems.clone();
        tokio::spawn(async move {
            while let Some(e) = failed.next().await {
                if e.canceled != Some(true) {
                    record(&p, format!("request failed: {:?} {}", e.r#type, e.error_text));
                }
            }
        });
        let p = problems.clone();
        tokio::spawn(async move {
            while let Some(e) = responses.next().await {
                if e.response.status >= 400 {
                    record(&p, format!("HTTP {} for {}", e.response.status, e.response.url));
                }
            }
        });
        page.enable_log().await.unwrap();
        page.enable_runtime().await.unwrap();
        Self { page, problems }
    }

    /// Goes to `url` and waits for its load event.
    pub async fn open(&self, url: &str) {
        self.page.goto(url).await.unwrap_or_else(|e| panic!("opening {url}: {e}"));
    }

    /// Everything that went wrong so far.
    pub fn problems(&self) -> Vec<String> {
        self.problems.lock().unwrap().clone()
    }

    /// Waits until a problem `matches`: they are recorded by tasks of their
    /// own, which may run after the test sees what caused one.
    pub async fn wait_problem(&self, matches: impl Fn(&str) -> bool, what: &str) {
        crate::support::wait_for(&format!("a problem recorded for {what}"), || {
            self.problems().iter().any(|p| matches(p))
        })
        .await;
    }

    /// Evaluates `expression` (which may be a promise) to JSON.
    pub async fn eval<T: serde::de::DeserializeOwned>(&self, expression: &str) -> T {
        self.page
            .evaluate_expression(expression)
            .await
            .unwrap_or_else(|e| panic!("evaluating {expression}: {e}"))
            .into_value()
            .unwrap_or_else(|e| panic!("the value of {expression}: {e}"))
    }

    /// Waits until the JavaScript `condition` holds, re-checking it on
    /// every change of the document (a MutationObserver in the page), and
    /// fails the test with `what` and the page's text after [`PAGE_WAIT`].
    pub async fn wait_for(&self, condition: &str, what: &str) {
        let script = format!(
            "new Promise((resolve) => {{
                const holds = () => {{ try {{ return !!({condition}); }} catch (e) {{ return false; }} }};
                if (holds()) return resolve(true);
                const observer = new MutationObserver(() => {{
                    if (holds()) {{ observer.disconnect(); resolve(true); }}
                }});
                observer.observe(document, {{ subtree: true, childList: true, attributes: true, characterData: true }});
                setTimeout(() => {{ observer.disconnect(); resolve(holds()); }}, {});
            }})",
            PAGE_WAIT.as_millis()
        );
        if !self.eval::<bool>(&script).await {
            let text: String = self.eval("document.body.innerText").await;
            panic!("timed out waiting for {what} ({condition}); the page shows:\n{text}");
        }
    }

    /// Clicks the element `selector` finds, with a real mouse event,
    /// finding it again while the page replaces it under the click (a list
    /// redrawn by a refresh) or it is not there yet, for up to
    /// [`PAGE_WAIT`].
    pub async fn click(&self, selector: &str) {
        let deadline = Instant::now() + PAGE_WAIT;
        loop {
            let clicked = match self.page.find_element(selector).await {
                Ok(element) => {
                    element.click().await.map(drop).map_err(|e| format!("clicking: {e}"))
                }
                Err(e) => Err(format!("finding: {e}")),
            };
            match clicked {
                Ok(()) => return,
                Err(e) if Instant::now() >= deadline => panic!("element {selector}: {e}"),
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }

    /// Saves a full-page PNG as `target/viewer/NAME.png`; its path.
    pub async fn screenshot(&self, name: &str) -> PathBuf {
        let path = crate::support::root().join("target/viewer").join(format!("{name}.png"));
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        self.page
            .save_screenshot(ScreenshotParams::builder().full_page(true).build(), &path)
            .await
            .expect("screenshot");
        path
    }
}
