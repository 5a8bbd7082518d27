//! Shared by the whole-system tests and the benchmarks: real plugin
//! components built once per process, a shared compiled-code cache, and
//! throwaway plugin directories.

#![allow(dead_code, reason = "each test binary uses a different subset")]

pub mod api;
// The PostgreSQL and Chromium harnesses, also built into binaries without
// this module (the library's own tests, the trace bench), load it too.
#[allow(clippy::duplicate_mod)]
pub mod apt;
pub mod chromium;
pub mod js;
pub mod llm_server;
mod margin;
pub mod mcp;
pub mod pdf;
pub mod postgres;
pub mod python;
pub mod registry;

#[allow(unused_imports, reason = "the benchmarks bound no time")]
pub use margin::MARGIN;
use reson::config::Config;
use reson::plugin::{Options, Runtime};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The repository root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("host/ has a parent").to_path_buf()
}

/// Runs `plugins/build.sh` on `workspace` into `target/<out>`; Python
/// plugins are left out unless `python` (see the script).
fn build(workspace: &str, out: &str, python: bool) -> PathBuf {
    let root = root();
    let out = root.join("target").join(out);
    let mut command = Command::new("bash");
    command.arg(root.join("plugins/build.sh")).args([
        "--workspace",
        &root.join(workspace).to_string_lossy(),
        &out.to_string_lossy(),
    ]);
    if python {
        command
            .env("RESON_PYTHON_PLUGINS", "require")
            .env("RESON_COMPONENTIZE_PY", python::toolchain_bin().join("componentize-py"));
    } else {
        command.env("RESON_PYTHON_PLUGINS", "skip");
    }
    let status = command.status().expect("running plugins/build.sh");
    assert!(status.success(), "building {workspace} failed");
    out
}

/// The bundled plugins (plugins/), built for wasm32-wasip2.
pub fn plugins() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| build("plugins", "plugins", false))
}

/// The bundled plugins with the Python ones (`run-code`), componentize-py
/// installed first; a directory of its own, so that the other tests see
/// the same plugins whether or not this ran.
pub fn plugins_with_python() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| build("plugins", "plugins-with-python", true))
}

/// The test-only guests (tests/guests/), built for wasm32-wasip2.
pub fn test_plugins() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| build("tests/guests", "test-plugins", false))
}

/// A guest artifact that has no manifest (and so is not installed).
pub fn raw_guest(crate_name: &str) -> PathBuf {
    test_plugins();
    root().join("target/wasm/wasm32-wasip2/release").join(format!("{crate_name}.wasm"))
}

/// The files under `dir`, at any depth (none where it cannot be read).
pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() { files.extend(files_under(&path)) } else { files.push(path) }
    }
    files
}

/// Compiled code shared by every test, so each plugin compiles once.
pub fn cache_dir() -> PathBuf {
    root().join("target/test-cache")
}

/// What `runtime`'s cache holds compiled for `plugin` goes, so its next
/// load compiles: the component's entry, and with `functions` every
/// compiled function as well (a compile from nothing).
pub fn forget_compiled(runtime: &Runtime, plugin: &str, functions: bool) {
    let info = runtime.plugins().into_iter().find(|p| p.name == plugin).expect("plugin loaded");
    let sha = info.sha256.expect("a digest");
    let cache_dir = &runtime.options().cache_dir;
    for entry in std::fs::read_dir(cache_dir).unwrap() {
        let path = entry.unwrap().path();
        if path.file_name().unwrap().to_string_lossy().starts_with(&sha) {
            std::fs::remove_file(path).unwrap();
        }
    }
    if functions {
        let _ = std::fs::remove_dir_all(cache_dir.join("functions"));
    }
}

/// A throwaway directory holding a plugins directory, a workspace and a
/// config file.
pub struct TestDir {
    pub dir: tempfile::TempDir,
}

impl TestDir {
    pub fn new() -> Self {
        // Commands plugins start run in the jail, which needs bubblewrap.
        apt::ensure(|| std::path::Path::new(reson::jail::DEFAULT_BWRAP).exists(), &["bubblewrap"]);
        // Jails made ahead wait in `reson`, as in the binary: every test
        // that runs a second command of a grant starts it in one.
        reson::jail::spares_wait_in(Path::new(env!("CARGO_BIN_EXE_reson")))
            .expect("the reson binary, for jails made ahead");
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir_all(dir.path().join("plugins")).unwrap();
        std::fs::create_dir_all(dir.path().join("workspace")).unwrap();
        Self { dir }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn plugins(&self) -> PathBuf {
        self.path().join("plugins")
    }

    /// The workspace, canonical (that is the path the guest sees).
    pub fn workspace(&self) -> PathBuf {
        self.path().join("workspace").canonicalize().unwrap()
    }

    /// Copies plugin `name` (`.wasm` and `.toml`) from `from`.
    pub fn install(&self, from: &Path, name: &str) -> &Self {
        for ext in ["wasm", "toml"] {
            std::fs::copy(
                from.join(format!("{name}.{ext}")),
                self.plugins().join(format!("{name}.{ext}")),
            )
            .unwrap_or_else(|e| panic!("installing {name}.{ext}: {e}"));
        }
        self
    }

    /// Writes `reson.toml` (paths in it are relative to this directory).
    pub fn config(&self, toml: &str) -> Config {
        let path = self.path().join("reson.toml");
        std::fs::write(&path, toml).unwrap();
        Config::load(&path).expect("test config parses")
    }

    /// Options for this directory with the shared compiled-code cache.
    pub fn options(&self, toml: &str) -> Options {
        let mut options = Options::from_config(self.config(toml));
        options.plugins_dir = self.plugins();
        options.cache_dir = cache_dir();
        options.lock_file = self.path().join("reson.lock");
        options
    }

    /// Opens a runtime on this directory with `toml` as its config.
    pub async fn open(&self, toml: &str) -> Runtime {
        Runtime::open(self.options(toml)).await.expect("runtime opens")
    }

    /// The trace store in `traces/`.
    pub fn store(&self) -> std::sync::Arc<reson::trace::FileTraceStore> {
        let traces = self.path().join("traces");
        let store = reson::trace::FileTraceStore::open(traces, reson::trace::Durability::Batched);
        std::sync::Arc::new(store.expect("the trace store opens"))
    }

    /// A runner on `runtime`'s `scripted` provider and plugin tools, writing
    /// to `store`.
    pub fn scripted_runner(
        runtime: &Runtime,
        store: std::sync::Arc<reson::trace::FileTraceStore>,
    ) -> reson::agent::Runner {
        reson::agent::Runner::new(
            store,
            std::sync::Arc::new(reson::provider::PluginProvider::new(runtime.clone(), "scripted")),
            reson::tools::ToolRegistry::new(runtime.clone()),
            reson::agent::Hooks::none(),
        )
    }

    /// A runtime whose `scripted` provider (installed by the caller)
    /// replays `script`, written to `script.json` here; every tool call is
    /// allowed (these tests are about the loop), then `extra` config.
    pub async fn open_scripted(&self, script: &serde_json::Value, extra: &str) -> Runtime {
        let script_path = self.path().join("script.json");
        std::fs::write(&script_path, script.to_string()).unwrap();
        self.open(&format!(
            "[permissions]\ndefault = \"allow\"\n[plugins.scripted]\n\
             dirs = [{{ path = \".\", access = \"read\" }}]\nconfig = {{ script = \"{}\" }}\n{extra}",
            script_path.display()
        ))
        .await
    }
}

/// The process's current number of OS threads.
pub fn os_threads() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find_map(|l| l.strip_prefix("Threads:")).unwrap();
    line.trim().parse().unwrap()
}

/// Samples the process's number of OS threads every 5 ms, on a task of the
/// test's runtime, until [`ThreadPeak::stop`] gives the peak.
pub struct ThreadPeak {
    peak: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    sampling: tokio_util::sync::CancellationToken,
    sampler: tokio::task::JoinHandle<()>,
}

impl ThreadPeak {
    pub fn start() -> Self {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let peak = std::sync::Arc::new(AtomicUsize::new(os_threads()));
        let sampling = tokio_util::sync::CancellationToken::new();
        let sampler = tokio::spawn({
            let (peak, sampling) = (peak.clone(), sampling.clone());
            async move {
                while !sampling.is_cancelled() {
                    peak.fetch_max(os_threads(), Ordering::SeqCst);
                    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                }
            }
        });
        Self { peak, sampling, sampler }
    }

    /// Takes one more sample.
    pub fn sample(&self) {
        self.peak.fetch_max(os_threads(), std::sync::atomic::Ordering::SeqCst);
    }

    /// Stops sampling; the most threads seen.
    pub async fn stop(self) -> usize {
        self.sampling.cancel();
        self.sampler.await.unwrap();
        self.peak.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// A provider that records every request it is sent, then passes it on.
pub struct Recording {
    inner: reson::provider::PluginProvider,
    requests: std::sync::Mutex<Vec<reson::provider::ChatRequest>>,
}

impl Recording {
    /// Records what goes to `inner`.
    pub fn new(inner: reson::provider::PluginProvider) -> Self {
        Self { inner, requests: std::sync::Mutex::default() }
    }

    /// Every request so far, in order.
    pub fn requests(&self) -> Vec<reson::provider::ChatRequest> {
        self.requests.lock().unwrap().clone()
    }
}

impl reson::provider::ChatProvider for Recording {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn chat(
        &self,
        request: reson::provider::ChatRequest,
        cancel: tokio_util::sync::CancellationToken,
    ) -> reson::provider::ChatStream {
        self.requests.lock().unwrap().push(request.clone());
        self.inner.chat(request, cancel)
    }
}

/// Nanoseconds per call of `f` over `calls` calls in a row.
pub async fn ns_per_call(mut f: impl AsyncFnMut(), calls: usize) -> f64 {
    let start = std::time::Instant::now();
    for _ in 0..calls {
        f().await;
    }
    start.elapsed().as_nanos() as f64 / calls as f64
}

/// The width and height of each image `message` carries, in order.
pub fn image_sizes(message: &reson::trace::Message) -> Vec<(u32, u32)> {
    message
        .content
        .iter()
        .filter_map(|part| match part {
            reson::trace::ContentPart::Image(image) => Some((image.width, image.height)),
            _ => None,
        })
        .collect()
}

/// The middle of `v` once sorted.
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Polls `done` every 20 ms until it holds; fails the test after a minute,
/// naming `what` it waited for.
pub async fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let start = std::time::Instant::now();
    while !done() {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(60),
            "timed out waiting for {what}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// The name the test harness gives test `test` of the module at `module`
/// (pass `module_path!()`): the path without the crate's name.
pub fn test_name(module: &str, test: &str) -> String {
    match module.split_once("::") {
        Some((_, path)) => format!("{path}::{test}"),
        None => test.to_owned(),
    }
}

/// Whether this process runs test `test` of `module` (as [`test_name`])
/// alone. Anywhere else it runs that test again in a process of its own,
/// waits, fails if it failed, and answers false. For a test that measures
/// its whole process (its threads, its open descriptors), which the tests
/// running beside it on other threads of the same process would disturb.
pub fn alone(module: &str, test: &str) -> bool {
    const ALONE: &str = "RESON_TEST_ALONE";
    let name = test_name(module, test);
    if std::env::var_os(ALONE).is_some_and(|running| running == *name) {
        return true;
    }
    let out = Command::new(std::env::current_exe().expect("the test binary's path"))
        .args(["--exact", &name, "--test-threads=1", "--nocapture"])
        .env(ALONE, &name)
        .output()
        .expect("running the test binary");
    let said =
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && said.contains("1 passed"), "{name}, run alone:\n{said}");
    false
}

/// Replaces a file the way installers should: write aside, then rename.
pub fn replace(src: &[u8], dst: &Path) {
    let tmp = dst.with_extension("partial");
    std::fs::write(&tmp, src).unwrap();
    std::fs::rename(&tmp, dst).unwrap();
}

/// Makes `dst` an executable copy of `src`, written by a child process
/// (`install`). A file this process writes stays open for writing in every
/// child another test's thread forks meanwhile, until that child execs; run
/// in that moment, it fails with "Text file busy" (ETXTBSY).
pub fn install_executable(src: &Path, dst: &Path) {
    let status = Command::new("install")
        .args(["-m", "755"])
        .arg(src)
        .arg(dst)
        .status()
        .expect("running install");
    assert!(status.success(), "install {} {}: {status}", src.display(), dst.display());
}

/// An executable file at `dst` holding `text`, made as
/// [`install_executable`] makes one.
pub fn write_executable(dst: &Path, text: &str) {
    let source = dst.with_extension("source");
    std::fs::write(&source, text).unwrap();
    install_executable(&source, dst);
    std::fs::remove_file(&source).unwrap();
}

/// A finished command's status, stdout and stderr, for a failed
/// assertion's message.
pub fn shown(output: &std::process::Output) -> String {
    format!(
        "status {}\nstdout:\n{}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// The real `reson` binary run in `cwd` with `args`, on the shared
/// compiled-code cache and no configuration from the environment.
pub fn reson_cli(cwd: &Path, args: &[&str]) -> std::process::Output {
    reson_cli_env(cwd, args, &[])
}

/// [`reson_cli`] with `env` set as well.
pub fn reson_cli_env(cwd: &Path, args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_reson"))
        .current_dir(cwd)
        .env_remove("RESON_CONFIG")
        .env_remove("RESON_PLUGINS_DIR")
        .envs(env.iter().copied())
        .args(["--cache-dir", &cache_dir().to_string_lossy()])
        .args(args)
        .output()
        .expect("running reson")
}

/// A terminal for a test: a tmux session on a server of its own (its own
/// socket, killed when dropped), 200 columns wide, running `command`.
pub struct Tmux {
    socket: String,
}

impl Tmux {
    pub fn start(cwd: &std::path::Path, command: &str) -> Self {
        apt::ensure(|| std::path::Path::new("/usr/bin/tmux").exists(), &["tmux"]);
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmux = Self { socket: format!("reson-test-{}-{n}", std::process::id()) };
        let status = tmux
            .command()
            .args(["new-session", "-d", "-s", "t", "-x", "200", "-y", "50", "-c"])
            .arg(cwd)
            .arg(command)
            .status()
            .unwrap();
        assert!(status.success(), "starting tmux");
        tmux
    }

    /// [`Tmux::start`], with every byte `command` writes to the terminal
    /// (lines it clears again too, and colour codes) appended to `record`:
    /// the command waits until the recording is on.
    pub fn start_recorded(cwd: &std::path::Path, command: &str, record: &std::path::Path) -> Self {
        let gate = record.with_extension("go");
        let gated = format!("while [ ! -e '{}' ]; do sleep 0.05; done; {command}", gate.display());
        let tmux = Self::start(cwd, &gated);
        let pipe = format!("cat >> '{}'", record.display());
        let piped = tmux.command().args(["pipe-pane", "-o", "-t", "t", &pipe]).status().unwrap();
        assert!(piped.success(), "recording the pane");
        std::fs::write(&gate, "").unwrap();
        tmux
    }

    pub fn command(&self) -> std::process::Command {
        let mut command = std::process::Command::new("tmux");
        command.args(["-L", &self.socket]);
        command
    }

    pub fn screen(&self) -> String {
        let out = self.command().args(["capture-pane", "-p", "-J", "-t", "t"]).output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Waits for `text` on the screen (a minute at most); the screen.
    pub fn until(&self, text: &str) -> String {
        let start = std::time::Instant::now();
        loop {
            let screen = self.screen();
            if screen.contains(text) {
                return screen;
            }
            assert!(
                start.elapsed() < std::time::Duration::from_secs(60),
                "no {text:?} on:\n{screen}"
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }

    /// Presses `key`, and nothing else (no Enter).
    pub fn key(&self, key: &str) {
        assert!(self.command().args(["send-keys", "-t", "t", key]).status().unwrap().success());
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.command().arg("kill-server").status();
    }
}
