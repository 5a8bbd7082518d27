//! The WIT boundary: the `raw-output` guest (tests/guests/raw-output), whose
//! answer to a call is laid out byte for byte by the fuzzer, loaded by a
//! real [`Runtime`] and called through the host's whole tool path; and
//! component files of the fuzzer's making, loaded beside it.

use reson::config::Config;
use reson::plugin::{CallContext, CallError, Options, PluginStatus, Runtime, ToolOutput};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The repository root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("the repository")
}

/// A runtime serving the `raw-output` guest, with the temporary directory
/// it lives in.
pub struct Guest {
    runtime: Runtime,
    tokio: tokio::runtime::Runtime,
    dir: tempfile::TempDir,
    /// The compiled-code cache as the guest left it: what a fuzzed
    /// component adds is cleared now and then.
    cached: Vec<PathBuf>,
    loads: std::sync::atomic::AtomicU64,
}

/// The name the fuzzed component is loaded under, with a manifest of its
/// own.
const FUZZED: &str = "fuzzed";

impl Guest {
    /// Builds the test guests (once; later builds find them up to date) and
    /// opens a runtime on `raw-output` alone.
    pub fn start() -> Self {
        let root = root();
        let built = root.join("target/test-plugins");
        // Under `cargo fuzz run` the environment carries the fuzz build's
        // flags (coverage passes, opt-level), which are not for guests.
        let status = Command::new("bash")
            .env_remove("RUSTFLAGS")
            .env_remove("CARGO_ENCODED_RUSTFLAGS")
            .env_remove("CARGO_PROFILE_RELEASE_OPT_LEVEL")
            .arg(root.join("plugins/build.sh"))
            .args(["--workspace", &root.join("tests/guests").to_string_lossy()])
            .arg(&built)
            .status()
            .expect("bash runs plugins/build.sh");
        assert!(status.success(), "building the test guests failed");
        let dir = tempfile::tempdir().expect("a temp dir");
        let plugins = dir.path().join("plugins");
        std::fs::create_dir_all(&plugins).expect("a plugins dir");
        for ext in ["wasm", "toml"] {
            let name = format!("raw-output.{ext}");
            std::fs::copy(built.join(&name), plugins.join(&name)).expect("the guest is built");
        }
        let config = Config::parse(
            "[plugins.raw-output]\nlimits = { timeout_ms = 5000, memory_mb = 64, output_bytes = 65536 }\n",
        )
        .expect("the config parses");
        let mut options = Options::from_config(config);
        options.plugins_dir = plugins.clone();
        std::fs::write(
            plugins.join(format!("{FUZZED}.toml")),
            format!("name = \"{FUZZED}\"\nversion = \"0.1.0\"\n"),
        )
        .expect("a manifest");
        options.cache_dir = dir.path().join("cache");
        options.lock_file = dir.path().join("reson.lock");
        let tokio = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("a tokio runtime");
        let runtime = tokio.block_on(Runtime::open(options)).expect("the runtime opens");
        let cached = cache_entries(&dir.path().join("cache"));
        Self { runtime, tokio, dir, cached, loads: std::sync::atomic::AtomicU64::new(0) }
    }

    /// Loads `bytes` as the component of plugin `fuzzed` (the previous one
    /// keeps serving when it fails), and says how that went: `Ok` with the
    /// tools it serves, or the error the host gives the user.
    pub fn load(&self, bytes: &[u8]) -> Result<Vec<String>, String> {
        std::fs::write(self.dir.path().join("plugins").join(format!("{FUZZED}.wasm")), bytes)
            .expect("write the component");
        self.tokio.block_on(self.runtime.reload(&[FUZZED.to_owned()]));
        let loads = self.loads.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        if loads.is_multiple_of(100) {
            for entry in cache_entries(&self.dir.path().join("cache")) {
                if !self.cached.contains(&entry) {
                    let _ =
                        std::fs::remove_file(&entry).or_else(|_| std::fs::remove_dir_all(&entry));
                }
            }
        }
        let info = self.runtime.plugins().into_iter().find(|p| p.name == FUZZED);
        let info = info.expect("a plugin with a file is listed");
        match info.status {
            PluginStatus::Ready => Ok(info.tools),
            PluginStatus::Failed(e) | PluginStatus::Stale(e) => Err(e),
            PluginStatus::Disabled => unreachable!("nothing disables it"),
        }
    }

    /// Calls `output` with `payload` (see the guest's documentation).
    pub fn call(&self, payload: &[u8]) -> Result<ToolOutput, CallError> {
        let hex: String = payload.iter().map(|b| format!("{b:02x}")).collect();
        let args = format!(r#"{{"p":"{hex}"}}"#);
        self.tokio.block_on(self.runtime.call_tool("output", &args, &CallContext::default()))
    }
}

fn cache_entries(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|entries| entries.flatten().map(|e| e.path()).collect())
        .unwrap_or_default()
}

/// A payload the guest answers `text` to, well formed in every byte.
pub fn well_formed(text: &str) -> Vec<u8> {
    let mut area = [0u8; 36];
    area[8..12].copy_from_slice(&(text.len() as u32).to_le_bytes());
    let mut payload = vec![0];
    payload.extend_from_slice(&area);
    payload.extend_from_slice(text.as_bytes());
    payload
}
