//! Starting and ending Chromium processes.
//!
//! Chromium is started by the host itself, not by the DevTools client, so
//! that it cannot outlive the host: each one runs in a process group of its
//! own (ended whole, helpers included) and gets `SIGKILL` when the thread
//! that forked it dies (`PR_SET_PDEATHSIG`). That signal follows the
//! forking *thread*, not the process, so every Chromium is forked by one
//! dedicated thread that lives as long as the host; a tokio worker or
//! blocking-pool thread may exit at any time and would take it along.
//!
//! What Chromium would fetch for itself (updates, account lookups,
//! spelling dictionaries, safe browsing, translation, hints) is turned off
//! by its flags and its profile's preferences, or pointed at a port it
//! never connects to; what is left, the proxy refuses and logs.

use super::BrowserError;
use super::network::Network;
use super::profiles::SessionDir;
use reson_text::text::Lines;
use std::io;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

/// Where Debian installs Chromium.
pub const CHROMIUM: &str = "/usr/bin/chromium";

/// The program behind Debian's `chromium` wrapper script, which the host
/// starts directly: the wrapper adds flags and Google API keys of its own.
const CHROMIUM_BINARY: &str = "/usr/lib/chromium/chromium";

/// How long Chromium may take to open its DevTools port.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// Heap cap of each page's JavaScript, in MiB.
const JS_HEAP_MB: u32 = 512;

/// Renderer processes one browser may run.
const MAX_RENDERERS: u32 = 4;

/// Where Chromium's own services (accounts, component updates) are sent:
/// port 9 (discard) is one Chromium refuses to connect to at all, on a
/// name that never resolves. Not a loopback address: Chromium isolates the
/// accounts origin, port aside, and would give every page of that host a
/// process of its own.
const NOWHERE: &str = "http://nowhere.invalid:9/";

/// How long reaping a killed Chromium may take before the caller goes on.
const REAP_TIMEOUT: Duration = Duration::from_secs(2);

/// The profile's preferences, for what only preferences turn off.
const PREFERENCES: &str = r#"{
  "spellcheck": { "dictionaries": [], "use_spelling_service": false },
  "safebrowsing": { "enabled": false },
  "translate": { "enabled": false },
  "search": { "suggest_enabled": false },
  "alternate_error_pages": { "enabled": false },
  "net": { "network_prediction_options": 2 },
  "signin": { "allowed": false }
}"#;

type Spawn = (Command, mpsc::Sender<io::Result<Child>>);

/// The thread that forks every Chromium.
fn launcher() -> &'static Mutex<mpsc::Sender<Spawn>> {
    static LAUNCHER: OnceLock<Mutex<mpsc::Sender<Spawn>>> = OnceLock::new();
    LAUNCHER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Spawn>();
        std::thread::Builder::new()
            .name("reson-browser-launcher".into())
            .spawn(move || {
                for (mut command, reply) in rx {
                    let _ = reply.send(command.spawn());
                }
            })
            .expect("the browser launcher thread starts");
        Mutex::new(tx)
    })
}

/// A running Chromium: its process, the leader of its own group.
pub(super) struct Process {
    child: Option<Child>,
    /// Where its standard error goes.
    log: PathBuf,
}

impl Process {
    /// Starts headless Chromium with its profile and `TMPDIR` in `dir`,
    /// on `network`, sending every request through the proxy there.
    pub(super) fn start(dir: &SessionDir, network: &mut Network) -> Result<Self, BrowserError> {
        let program = if Path::new(CHROMIUM_BINARY).exists() { CHROMIUM_BINARY } else { CHROMIUM };
        let profile = dir.profile();
        let preferences = profile.join("Default");
        std::fs::create_dir_all(&preferences)
            .and_then(|()| std::fs::write(preferences.join("Preferences"), PREFERENCES))
            .map_err(|e| {
                BrowserError::Failed(format!("cannot prepare the browser profile: {e}"))
            })?;
        let mut command = Command::new(program);
        command.args(arguments(&profile, network.proxy_port())).stdin(Stdio::null());
        // Its log says why, should it end at start.
        let log = std::fs::File::create(dir.log()).map_or_else(|_| Stdio::null(), Stdio::from);
        command.stdout(Stdio::null()).stderr(log).env_clear();
        for keep in ["PATH", "LANG", "TZ"] {
            if let Some(value) = std::env::var_os(keep) {
                command.env(keep, value);
            }
        }
        command.env("HOME", &profile).env("TMPDIR", network.tmpdir());
        let parent = std::process::id();
        let entry = network.take_entry();
        // SAFETY: only async-signal-safe calls between fork and exec (the
        // network's are raw system calls on memory prepared before).
        unsafe {
            command.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0
                    || libc::setpgid(0, 0) != 0
                {
                    return Err(io::Error::last_os_error());
                }
                entry.enter()?;
                // The host died before the signal was armed.
                if libc::getppid() != parent as libc::pid_t {
                    libc::_exit(1);
                }
                Ok(())
            });
        }
        let (tx, rx) = mpsc::channel();
        let gone = || BrowserError::Failed("the browser launcher thread is gone".into());
        launcher()
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .send((command, tx))
            .map_err(|_| gone())?;
        let child = rx.recv().map_err(|_| gone())?.map_err(|e| network.start_error(program, e))?;
        Ok(Self { child: Some(child), log: dir.log() })
    }

    /// The DevTools port and path Chromium writes into `profile` once it
    /// listens (`--remote-debugging-port=0` picks a free port).
    pub(super) async fn devtools_endpoint(
        &mut self,
        profile: &Path,
    ) -> Result<(u16, String), BrowserError> {
        let file = profile.join("DevToolsActivePort");
        let started = Instant::now();
        loop {
            if let Ok(text) = std::fs::read_to_string(&file) {
                let mut lines = text.lines();
                if let (Some(Ok(port)), Some(path)) = (lines.next().map(str::parse), lines.next()) {
                    return Ok((port, path.to_owned()));
                }
            }
            if let Some(child) = &mut self.child
                && let Ok(Some(status)) = child.try_wait()
            {
                return Err(BrowserError::Failed(format!(
                    "chromium exited at start: {status}{}",
                    fatal_line(&self.log)
                )));
            }
            if started.elapsed() > START_TIMEOUT {
                return Err(BrowserError::Failed(format!(
                    "chromium did not open its DevTools port within {START_TIMEOUT:?}"
                )));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The process id of Chromium, which is also its process group's.
    pub(super) fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Kills Chromium and every helper in its group, and reaps it off the
    /// caller's thread; the handle says when it is reaped.
    fn kill(&mut self) -> Option<std::thread::JoinHandle<()>> {
        let mut child = self.child.take()?;
        if let Ok(pgid) = libc::pid_t::try_from(child.id()) {
            // SAFETY: signals the group this host made for this Chromium.
            unsafe { libc::killpg(pgid, libc::SIGKILL) };
        }
        let _ = child.kill();
        // A killed group exits at once, but waiting is still a blocking call.
        Some(std::thread::spawn(move || {
            let _ = child.wait();
        }))
    }

    /// Kills Chromium's group and waits (a little) until it is reaped, so
    /// that nothing of it still writes to its profile.
    pub(super) async fn end(&mut self) {
        let Some(reaping) = self.kill() else { return };
        let reaped = tokio::task::spawn_blocking(move || reaping.join());
        let _ = tokio::time::timeout(REAP_TIMEOUT, reaped).await;
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `; it said: ...` with the fatal error Chromium logged to `log`, if any.
fn fatal_line(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines().rev().find(|line| line.contains(":FATAL:")).map_or_else(String::new, |line| {
        format!("; it said: {}", reson_text::text::escape_controls(line, Lines::Escape))
    })
}

fn arguments(profile: &Path, proxy_port: u16) -> Vec<String> {
    vec![
        "--headless=new".into(),
        // The host is often root, where Chromium's own sandbox cannot start.
        "--no-sandbox".into(),
        "--disable-gpu".into(),
        "--disable-dev-shm-usage".into(),
        "--remote-debugging-port=0".into(),
        "--remote-debugging-address=127.0.0.1".into(),
        format!("--user-data-dir={}", profile.display()),
        // Every request, loopback included, goes through the host's proxy.
        format!("--proxy-server=http://127.0.0.1:{proxy_port}"),
        "--proxy-bypass-list=<-loopback>".into(),
        // What could go around the proxy, should Chromium share the host's
        // network: WebRTC's UDP (STUN/TURN to any host and port) and QUIC.
        "--force-webrtc-ip-handling-policy=disable_non_proxied_udp".into(),
        "--disable-quic".into(),
        // Cross-site frames stay in the page's process, where the page's
        // request interception sees their requests.
        "--disable-features=IsolateOrigins,site-per-process,Translate,MediaRouter,\
         OptimizationHints,AutofillServerCommunication,NetworkTimeServiceQuerying,\
         CertificateTransparencyComponentUpdater"
            .into(),
        "--disable-site-isolation-trials".into(),
        format!("--js-flags=--max-old-space-size={JS_HEAP_MB}"),
        format!("--renderer-process-limit={MAX_RENDERERS}"),
        "--no-first-run".into(),
        "--no-default-browser-check".into(),
        "--disable-background-networking".into(),
        "--disable-component-update".into(),
        // Asked for anyway (account lookups, on-demand components): sent
        // nowhere.
        format!("--gaia-url={NOWHERE}"),
        format!("--component-updater=url-source={NOWHERE}"),
        "--disable-client-side-phishing-detection".into(),
        "--disable-domain-reliability".into(),
        "--no-pings".into(),
        "--disable-sync".into(),
        "--disable-extensions".into(),
        "--disable-default-apps".into(),
        "--disable-breakpad".into(),
        "--password-store=basic".into(),
        "--use-mock-keychain".into(),
        "--mute-audio".into(),
        "--hide-scrollbars".into(),
        "--window-size=1280,900".into(),
        "about:blank".into(),
    ]
}
