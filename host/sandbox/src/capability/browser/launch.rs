//! Starting and ending Chromium processes.
//!
//! Chromium is started by the host itself, not by the DevTools client, so
//! that it cannot outlive the host. How far that holds is the OS's:
//!
//! - Linux: each one runs in a process group of its own (ended whole,
//!   helpers included) and gets `SIGKILL` when the thread that forked it
//!   dies (`PR_SET_PDEATHSIG`). That signal follows the forking *thread*,
//!   not the process, so every Chromium is forked by one dedicated thread
//!   that lives as long as the host; a tokio worker or blocking-pool
//!   thread may exit at any time and would take it along.
//! - macOS: a process group of its own too, ended whole when the host ends
//!   it or drops it (and on a clean exit); but macOS has no parent-death
//!   signal, so a host killed outright (`SIGKILL`) leaves it running.
//! - Windows: no process groups; the host kills the browser's process,
//!   whose helpers (renderers, GPU, network service) are not reached,
//!   nor is anything when the host is killed: a Job object would be.
//!
//! Every OS starts it from the same dedicated thread, needed on Linux
//! only, so that there is one way in.
//!
//! What Chromium would fetch for itself (updates, account lookups,
//! spelling dictionaries, safe browsing, translation, hints) is turned off
//! by its flags and its profile's preferences, or pointed at a port it
//! never connects to; what is left, the proxy refuses and logs.

use super::BrowserError;
use super::locate::Os;
use super::network::{Entry, Network};
use super::profiles::SessionDir;
use reson_text::text::Lines;
use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

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

/// A running Chromium: its process, the leader of its own group where
/// the OS has them.
pub(super) struct Process {
    child: Option<Child>,
    /// Where its standard error goes.
    log: PathBuf,
}

impl Process {
    /// Starts `program` (a Chromium, Chrome or Edge) headless, with its
    /// profile and `TMPDIR` in `dir`, on `network`, sending every request
    /// through the proxy there.
    pub(super) fn start(
        program: &Path,
        dir: &SessionDir,
        network: &mut Network,
    ) -> Result<Self, BrowserError> {
        let os = Os::current();
        let profile = dir.profile();
        let preferences = profile.join("Default");
        std::fs::create_dir_all(&preferences)
            .and_then(|()| std::fs::write(preferences.join("Preferences"), PREFERENCES))
            .map_err(|e| {
                BrowserError::Failed(format!("cannot prepare the browser profile: {e}"))
            })?;
        let mut command = Command::new(program);
        command.args(arguments(os, &profile, network.proxy_port())).stdin(Stdio::null());
        // Its log says why, should it end at start.
        let log = std::fs::File::create(dir.log()).map_or_else(|_| Stdio::null(), Stdio::from);
        command.stdout(Stdio::null()).stderr(log).env_clear();
        let host = |name: &str| std::env::var_os(name);
        command.envs(environment(os, &profile, network.tmpdir(), host));
        contain(&mut command, network.take_entry());
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

    /// Whether Chromium has exited (or was ended).
    pub(super) fn exited(&mut self) -> bool {
        self.child.as_mut().is_none_or(|child| !matches!(child.try_wait(), Ok(None)))
    }

    /// The process id of Chromium, which is also its process group's on
    /// Unix.
    pub(super) fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Kills Chromium and, where the OS lets it, every helper of it, and
    /// reaps it off the caller's thread; the handle says when it is
    /// reaped.
    fn kill(&mut self) -> Option<std::thread::JoinHandle<()>> {
        let mut child = self.child.take()?;
        kill_all(&mut child);
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

/// Makes `command`'s child the leader of a process group of its own, that
/// dies with the host, and moves it into its network (`entry`) before it
/// runs Chromium.
#[cfg(target_os = "linux")]
fn contain(command: &mut Command, entry: Entry) {
    use std::os::unix::process::CommandExt;
    let parent = std::process::id();
    // SAFETY: only async-signal-safe calls between fork and exec (the
    // network's are raw system calls on memory prepared before).
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 || libc::setpgid(0, 0) != 0 {
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
}

/// Makes `command`'s child the leader of a process group of its own, which
/// [`kill_all`] ends whole. macOS has no parent-death signal: a host that
/// ends, or drops the browser, kills the group, but one killed outright
/// (`SIGKILL`) leaves the browser running, an orphan.
#[cfg(all(unix, not(target_os = "linux")))]
fn contain(command: &mut Command, entry: Entry) {
    use std::os::unix::process::CommandExt;
    // SAFETY: only async-signal-safe calls between fork and exec (`entry`
    // has no network of its own to enter here).
    unsafe {
        command.pre_exec(move || {
            if libc::setpgid(0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            entry.enter()
        });
    }
}

/// Windows has no process groups, nor a network to enter (`entry` is
/// empty): the browser is one process the host kills. Its helpers and the
/// case of a host killed outright would take a Job object that kills its
/// processes when closed, a later step.
#[cfg(windows)]
fn contain(_command: &mut Command, _entry: Entry) {}

/// Kills Chromium and every helper in its group (the group [`contain`]
/// made).
#[cfg(unix)]
fn kill_all(child: &mut Child) {
    if let Ok(pgid) = libc::pid_t::try_from(child.id()) {
        // SAFETY: signals the group this host made for this Chromium.
        unsafe { libc::killpg(pgid, libc::SIGKILL) };
    }
    let _ = child.kill();
}

/// Kills Chromium's own process. Its helpers are not reached without a Job
/// object (a later step); they end when they find their browser gone,
/// which nothing here forces.
#[cfg(windows)]
fn kill_all(child: &mut Child) {
    let _ = child.kill();
}

/// The browser's whole environment on `os`: of the host's (`host`), only
/// what it needs to run, and its home and temporary directories the
/// session's.
fn environment(
    os: Os,
    profile: &Path,
    tmp: &Path,
    host: impl Fn(&str) -> Option<OsString>,
) -> Vec<(&'static str, OsString)> {
    let (kept, own): (&[&str], &[(&str, &Path)]) = match os {
        Os::Linux | Os::Mac => (&["PATH", "LANG", "TZ"], &[("HOME", profile), ("TMPDIR", tmp)]),
        // What Windows programs take for granted (without `SystemRoot`
        // even its sockets fail); none of it is a secret. Windows' own
        // calls find the home folders in the registry, not here.
        Os::Windows => (
            &[
                "PATH",
                "LANG",
                "TZ",
                "SystemRoot",
                "SystemDrive",
                "windir",
                "USERPROFILE",
                "APPDATA",
                "LOCALAPPDATA",
                "ProgramData",
                "ProgramFiles",
                "ProgramFiles(x86)",
                "CommonProgramFiles",
                "CommonProgramFiles(x86)",
            ],
            &[("TMP", tmp), ("TEMP", tmp)],
        ),
    };
    let kept = kept.iter().filter_map(|&name| Some((name, host(name)?)));
    kept.chain(own.iter().map(|&(name, path)| (name, path.as_os_str().to_owned()))).collect()
}

fn arguments(os: Os, profile: &Path, proxy_port: u16) -> Vec<String> {
    let mut args: Vec<String> = vec!["--headless=new".into()];
    // The host is often root on Linux, where Chromium's own sandbox cannot
    // start; macOS and Windows keep it.
    if os == Os::Linux {
        args.push("--no-sandbox".into());
    }
    let rest: [String; _] = [
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
    ];
    args.extend(rest);
    args
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(name: &str) -> Option<OsString> {
        Some(OsString::from(format!("host {name}")))
    }

    fn names(env: &[(&'static str, OsString)]) -> Vec<&'static str> {
        env.iter().map(|(name, _)| *name).collect()
    }

    #[test]
    fn unix_browsers_keep_path_lang_tz_and_live_in_the_session() {
        let (profile, tmp) = (Path::new("/s/profile"), Path::new("/s/tmp"));
        for os in [Os::Linux, Os::Mac] {
            let env = environment(os, profile, tmp, host);
            assert_eq!(names(&env), ["PATH", "LANG", "TZ", "HOME", "TMPDIR"]);
            assert_eq!(env[0].1, "host PATH");
            assert_eq!(env[3].1, profile.as_os_str());
            assert_eq!(env[4].1, tmp.as_os_str());
        }
        let unset = environment(Os::Linux, profile, tmp, |_| None);
        assert_eq!(names(&unset), ["HOME", "TMPDIR"], "what the host lacks stays unset");
    }

    #[test]
    fn windows_browsers_keep_what_windows_needs_and_their_temp_is_the_sessions() {
        let tmp = Path::new(r"C:\s\tmp");
        let env = environment(Os::Windows, Path::new(r"C:\s\profile"), tmp, host);
        let names = names(&env);
        for needed in ["PATH", "SystemRoot", "windir", "LOCALAPPDATA"] {
            assert!(names.contains(&needed), "{needed} in {names:?}");
        }
        assert!(!names.contains(&"HOME") && !names.contains(&"TMPDIR"), "{names:?}");
        let temp: Vec<_> = env.iter().filter(|(n, _)| matches!(*n, "TMP" | "TEMP")).collect();
        assert_eq!(temp.len(), 2, "{names:?}");
        assert!(temp.iter().all(|(_, value)| value == tmp.as_os_str()));
    }

    #[test]
    fn only_linux_turns_chromiums_own_sandbox_off() {
        let linux = arguments(Os::Linux, Path::new("/p"), 1);
        assert_eq!(linux[..2], ["--headless=new", "--no-sandbox"]);
        for os in [Os::Mac, Os::Windows] {
            let args = arguments(os, Path::new("/p"), 1);
            assert!(!args.iter().any(|a| a == "--no-sandbox"), "{os:?}");
            assert_eq!(args.len(), linux.len() - 1);
        }
        assert!(linux.contains(&"--proxy-server=http://127.0.0.1:1".to_owned()));
    }
}
