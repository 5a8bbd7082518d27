//! How Chromium reaches the network.
//!
//! On Linux, with the jail on, it runs in a network namespace of its own
//! ([`crate::jail::own_network`]) that has nothing but a loopback
//! interface: WebRTC's UDP, QUIC and whatever a later Chromium adds have
//! nowhere to go. Its one way out is the host's proxies: its own, on a
//! listener the namespace hands over, and one per browser context of a
//! kept browser, each on a socket of the namespace the host binds to a
//! port of its own there; the host reaches its DevTools port through a
//! socket of the namespace, relayed from a port on the host's loopback
//! that takes one connection. Elsewhere, or with `[sandbox] jail = "off"`,
//! it shares the host's network and only its launch flags keep those
//! channels shut.
//!
//! Its `TMPDIR` is the session's (so that nothing of it lands in the
//! system's), which in a namespace of its own is mounted as its `/tmp`:
//! Chromium makes a Unix socket in a directory there, and the path of one
//! must fit in 108 bytes, which a session's path may not leave room for.

use super::BrowserError;
use std::net::Ipv4Addr;
#[cfg(target_os = "linux")]
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use tokio::net::TcpListener;
#[cfg(target_os = "linux")]
use tokio::net::TcpSocket;
use tokio::task::JoinSet;

/// The longest `TMPDIR` whose Chromium socket path
/// (`/org.chromium.Chromium.XXXXXX/SingletonSocket`) still fits: in 108
/// bytes on Linux, 104 on macOS. Windows makes no such socket: any fits.
const MAX_TMPDIR: Option<usize> = if cfg!(target_os = "macos") {
    Some(56)
} else if cfg!(windows) {
    None
} else {
    Some(60)
};

/// The network a Chromium is about to be started on.
pub(super) enum Network {
    /// A namespace of its own; the child half runs between fork and exec.
    #[cfg(target_os = "linux")]
    Own {
        child: Option<crate::jail::OwnNetwork>,
        hand_over: Option<crate::jail::NetworkHandOver>,
        dialer: Option<TcpSocket>,
        /// Sockets of the namespace for the proxies of contexts, each
        /// bound to a port of its own there when one is asked for.
        spare: Vec<TcpSocket>,
        tmpdir: PathBuf,
    },
    /// The host's, with the proxy on the host's loopback.
    Shared { listener: Option<TcpListener>, port: u16, tmpdir: PathBuf },
}

impl Network {
    /// A network for one Chromium, whose `TMPDIR` is to be `tmp`: a
    /// namespace of its own when `isolate` and the platform has them, with
    /// room for the proxies of `contexts` browser contexts.
    pub(super) async fn new(
        isolate: bool,
        tmp: &Path,
        contexts: usize,
    ) -> Result<Self, BrowserError> {
        #[cfg(target_os = "linux")]
        if isolate {
            // A session under `/tmp` (a cache there) would be hidden by a
            // mount over it; its path is short enough anyway.
            let mounted = !tmp.starts_with("/tmp");
            let (child, hand_over) = crate::jail::own_network(mounted.then_some(tmp), 1 + contexts)
                .map_err(|e| {
                    BrowserError::Failed(format!(
                        "cannot give the browser a network of its own: {e}"
                    ))
                })?;
            let tmpdir = if mounted { PathBuf::from("/tmp") } else { short(tmp) };
            return Ok(Self::Own {
                child: Some(child),
                hand_over: Some(hand_over),
                dialer: None,
                spare: Vec::new(),
                tmpdir,
            });
        }
        #[cfg(not(target_os = "linux"))]
        let _ = (isolate, contexts);
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .await
            .map_err(|e| BrowserError::Failed(format!("cannot open the browser proxy: {e}")))?;
        let port = listener.local_addr().map_err(|e| BrowserError::Failed(e.to_string()))?.port();
        Ok(Self::Shared { listener: Some(listener), port, tmpdir: short(tmp) })
    }

    /// Chromium's `TMPDIR`, as it sees it.
    pub(super) fn tmpdir(&self) -> &Path {
        match self {
            #[cfg(target_os = "linux")]
            Self::Own { tmpdir, .. } => tmpdir,
            Self::Shared { tmpdir, .. } => tmpdir,
        }
    }

    /// Where Chromium finds the proxy, as it sees its loopback.
    pub(super) fn proxy_port(&self) -> u16 {
        match self {
            #[cfg(target_os = "linux")]
            Self::Own { .. } => crate::jail::PROXY_PORT,
            Self::Shared { port, .. } => *port,
        }
    }

    /// What the child runs between fork and exec to enter its network.
    pub(super) fn take_entry(&mut self) -> Entry {
        match self {
            #[cfg(target_os = "linux")]
            Self::Own { child, .. } => Entry { own: child.take() },
            Self::Shared { .. } => Entry {
                #[cfg(target_os = "linux")]
                own: None,
            },
        }
    }

    /// The error for a failed start, naming the namespace's step that
    /// failed when one did.
    pub(super) fn start_error(&self, program: &Path, error: std::io::Error) -> BrowserError {
        let program = program.display();
        match self {
            #[cfg(target_os = "linux")]
            Self::Own { hand_over: Some(hand_over), .. } => BrowserError::Failed(format!(
                "cannot start {program} in a network of its own: {}; `[sandbox] jail = \"off\"` \
                 runs it on the host's network",
                hand_over.spawn_error(error)
            )),
            _ => BrowserError::Failed(format!("cannot start {program}: {error}")),
        }
    }

    /// The proxy's listener, once Chromium started.
    pub(super) async fn proxy(&mut self) -> Result<TcpListener, BrowserError> {
        let gone = || BrowserError::Failed("the browser proxy was already handed out".into());
        match self {
            #[cfg(target_os = "linux")]
            Self::Own { hand_over, dialer, spare, .. } => {
                let (listener, mut sockets) = hand_over
                    .take()
                    .ok_or_else(gone)?
                    .sockets()
                    .await
                    .map_err(|e| BrowserError::Failed(format!("the browser's network: {e}")))?;
                *spare = sockets.split_off(1);
                *dialer = sockets.pop();
                Ok(listener)
            }
            Self::Shared { listener, .. } => listener.take().ok_or_else(gone),
        }
    }

    /// A listener for one more proxy (a browser context's), and the port
    /// Chromium reaches it at; `None` when the network has no room left.
    pub(super) async fn context_proxy(
        &mut self,
    ) -> Result<Option<(TcpListener, u16)>, BrowserError> {
        let failed =
            |e: std::io::Error| BrowserError::Failed(format!("cannot open a context's proxy: {e}"));
        match self {
            #[cfg(target_os = "linux")]
            Self::Own { spare, .. } => {
                let Some(socket) = spare.pop() else { return Ok(None) };
                // Ports above the browser's own proxy, one per socket used.
                let port = crate::jail::PROXY_PORT + 1 + u16::try_from(spare.len()).unwrap_or(0);
                socket.bind(SocketAddr::from((Ipv4Addr::LOCALHOST, port))).map_err(failed)?;
                Ok(Some((socket.listen(128).map_err(failed)?, port)))
            }
            Self::Shared { .. } => {
                let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.map_err(failed)?;
                let port = listener.local_addr().map_err(failed)?.port();
                Ok(Some((listener, port)))
            }
        }
    }

    /// The URL the DevTools client connects to, for the `port` and `path`
    /// Chromium announced; a relay for it runs in `tasks`.
    pub(super) async fn devtools(
        &mut self,
        port: u16,
        path: &str,
        tasks: &mut JoinSet<()>,
    ) -> Result<String, BrowserError> {
        match self {
            #[cfg(target_os = "linux")]
            Self::Own { dialer, .. } => {
                let dialer = dialer.take().ok_or_else(|| {
                    BrowserError::Failed("the browser's network handed over no socket".into())
                })?;
                let outside = relay(dialer, port, tasks).await.map_err(|e| {
                    BrowserError::Failed(format!("cannot reach the browser's DevTools: {e}"))
                })?;
                Ok(format!("ws://{outside}{path}"))
            }
            Self::Shared { .. } => {
                #[cfg(not(target_os = "linux"))]
                let _ = tasks;
                Ok(format!("ws://127.0.0.1:{port}{path}"))
            }
        }
    }
}

/// How a child enters its network between fork and exec: raw system calls
/// on memory prepared before, nothing else.
pub(super) struct Entry {
    #[cfg(target_os = "linux")]
    own: Option<crate::jail::OwnNetwork>,
}

impl Entry {
    /// Moves the calling (forked) process into its network, if it has one
    /// of its own. Windows forks nothing to call it in.
    #[cfg(unix)]
    pub(super) fn enter(&self) -> std::io::Result<()> {
        #[cfg(target_os = "linux")]
        if let Some(own) = &self.own {
            return own.enter();
        }
        Ok(())
    }
}

/// `tmp`, or the system's temporary directory when Chromium could not make
/// its socket in `tmp` (which leaves it an empty directory there).
fn short(tmp: &Path) -> PathBuf {
    if MAX_TMPDIR.is_none_or(|max| tmp.as_os_str().len() <= max) {
        return tmp.to_path_buf();
    }
    tracing::info!(
        target: "reson::browser",
        "{} is too long a path for the browser's TMPDIR; it uses the system's",
        tmp.display()
    );
    std::env::temp_dir()
}

/// Connects `dialer` (a socket of Chromium's namespace) to its DevTools
/// `port` there, and relays the first connection to a fresh port on the
/// host's loopback to it; that address.
#[cfg(target_os = "linux")]
async fn relay(
    dialer: TcpSocket,
    port: u16,
    tasks: &mut JoinSet<()>,
) -> std::io::Result<SocketAddr> {
    let mut inside = dialer.connect(SocketAddr::from((Ipv4Addr::LOCALHOST, port))).await?;
    let outside = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
    let address = outside.local_addr()?;
    // Each DevTools message is small and answered at once: Nagle's
    // algorithm would hold one back for the other side's delayed ACK.
    inside.set_nodelay(true)?;
    tasks.spawn(async move {
        // One client, the host's; the listener closes as it comes in.
        let Ok((mut client, _)) = outside.accept().await else { return };
        drop(outside);
        let _ = client.set_nodelay(true);
        let _ = tokio::io::copy_bidirectional(&mut client, &mut inside).await;
    });
    Ok(address)
}
