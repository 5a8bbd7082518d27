//! A started Chromium: its process, its files, its network and the
//! DevTools connection to it. A session owns one, or shares a kept one
//! ([`super::kept`]) through a browser context of its own.

use super::BrowserError;
use super::launch::Process;
use super::network::Network;
use super::profiles::{Profiles, SessionDir};
use crate::jail::proxy::Reach;
use chromiumoxide::Browser;
use chromiumoxide::cdp::browser_protocol::browser::CloseParams;
use chromiumoxide::handler::HandlerConfig;
use futures::StreamExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::task::JoinSet;

/// How long a graceful close may take before the group is killed.
pub(super) const CLOSE_GRACE: Duration = Duration::from_secs(2);

/// A running Chromium and the client of its DevTools.
pub(super) struct Chromium {
    pub(super) browser: Arc<Browser>,
    network: Network,
    /// The DevTools connection, its relay and the browser's proxy.
    tasks: JoinSet<()>,
    // Field order is drop order: Chromium is killed before its files go.
    process: Process,
    _dir: SessionDir,
}

impl Chromium {
    /// Starts `program` with a fresh profile under `profiles`, in a network
    /// of its own when `isolate`, with room for the proxies of `contexts`
    /// browser contexts. Its own requests, and its default context's, go
    /// through a proxy that asks `reach`.
    pub(super) async fn start(
        program: &Path,
        profiles: &Profiles,
        reach: Arc<impl Reach>,
        isolate: bool,
        contexts: usize,
    ) -> Result<Self, BrowserError> {
        let dir = profiles.session()?;
        let mut network = Network::new(isolate, &dir.tmp(), contexts).await?;
        let mut process = Process::start(program, &dir, &mut network)?;
        let mut tasks = JoinSet::new();
        tasks.spawn(crate::jail::proxy::serve(network.proxy().await?, reach));
        let (port, path) = process.devtools_endpoint(&dir.profile()).await?;
        let ws_url = network.devtools(port, &path, &mut tasks).await?;
        let config = HandlerConfig {
            ignore_https_errors: false,
            request_timeout: Duration::from_secs(60),
            ..HandlerConfig::default()
        };
        let (browser, mut handler) = Browser::connect_with_config(&ws_url, config)
            .await
            .map_err(|e| BrowserError::Failed(format!("cannot reach chromium: {e}")))?;
        // Drives the DevTools connection; messages this client cannot
        // parse (from a newer Chromium) are skipped, not fatal.
        tasks.spawn(async move { while handler.next().await.is_some() {} });
        tracing::info!(
            target: "reson::browser",
            pid = process.pid(),
            profile = %dir.profile().display(),
            "browser started"
        );
        Ok(Self { browser: Arc::new(browser), network, tasks, process, _dir: dir })
    }

    /// A listener for a browser context's proxy, and the port the browser
    /// reaches it at; `None` when this browser has no room for another.
    pub(super) async fn context_proxy(
        &mut self,
    ) -> Result<Option<(TcpListener, u16)>, BrowserError> {
        self.network.context_proxy().await
    }

    /// Whether the browser has exited (crashed, or killed by someone).
    pub(super) fn exited(&mut self) -> bool {
        self.process.exited()
    }

    /// Closes Chromium: politely first, then its whole process group.
    pub(super) async fn close(mut self) {
        let _ =
            tokio::time::timeout(CLOSE_GRACE, self.browser.execute(CloseParams::default())).await;
        self.process.end().await;
        self.tasks.abort_all();
        tracing::info!(target: "reson::browser", "browser closed");
    }
}
