//! The signals a run and a server stop on, registered at once (unlike
//! `tokio::signal::ctrl_c`, which listens only from its first poll), so no
//! signal from then on ends the process uncleanly. Unix: Ctrl-C is
//! SIGINT, and a service manager stops a server with SIGTERM. Windows:
//! Ctrl-C, and Ctrl-Break where a service manager would send SIGTERM.

use anyhow::Context as _;

/// Ctrl-C, each time it is pressed.
pub(crate) struct Interrupts {
    #[cfg(unix)]
    signal: tokio::signal::unix::Signal,
    #[cfg(windows)]
    signal: tokio::signal::windows::CtrlC,
}

impl Interrupts {
    pub(crate) fn new() -> anyhow::Result<Self> {
        #[cfg(unix)]
        let signal = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt());
        #[cfg(windows)]
        let signal = tokio::signal::windows::ctrl_c();
        Ok(Self { signal: signal.context("installing the Ctrl-C handler")? })
    }

    /// The next press; `None` once no more can come.
    pub(crate) async fn recv(&mut self) -> Option<()> {
        self.signal.recv().await
    }
}

/// A request to stop: Ctrl-C, or SIGTERM (Ctrl-Break on Windows).
pub(crate) struct StopRequests {
    interrupts: Interrupts,
    #[cfg(unix)]
    terminate: tokio::signal::unix::Signal,
    #[cfg(windows)]
    terminate: tokio::signal::windows::CtrlBreak,
}

impl StopRequests {
    pub(crate) fn new() -> anyhow::Result<Self> {
        #[cfg(unix)]
        let terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .context("installing the SIGTERM handler")?;
        #[cfg(windows)]
        let terminate =
            tokio::signal::windows::ctrl_break().context("installing the Ctrl-Break handler")?;
        Ok(Self { interrupts: Interrupts::new()?, terminate })
    }

    /// Completes at the first request.
    pub(crate) async fn first(mut self) {
        tokio::select! {
            _ = self.terminate.recv() => {}
            _ = self.interrupts.recv() => {}
        }
    }
}
