//! The WIT boundary: the `raw-output` guest (tests/guests/raw-output), whose
//! answer to a call is laid out byte for byte by the fuzzer, loaded by a
//! real [`Runtime`] and called through the host's whole tool path.

use reson::config::Config;
use reson::plugin::{CallContext, CallError, Options, Runtime, ToolOutput};
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
    _dir: tempfile::TempDir,
}

impl Guest {
    /// Builds the test guests (once; later builds find them up to date) and
    /// opens a runtime on `raw-output` alone.
    pub fn start() -> Self {
        let root = root();
        let built = root.join("target/test-plugins");
        let status = Command::new("bash")
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
        options.plugins_dir = plugins;
        options.cache_dir = root.join("target/fuzz/cache");
        options.lock_file = dir.path().join("reson.lock");
        let tokio = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("a tokio runtime");
        let runtime = tokio.block_on(Runtime::open(options)).expect("the runtime opens");
        Self { runtime, tokio, _dir: dir }
    }

    /// Calls `output` with `payload` (see the guest's documentation).
    pub fn call(&self, payload: &[u8]) -> Result<ToolOutput, CallError> {
        let hex: String = payload.iter().map(|b| format!("{b:02x}")).collect();
        let args = format!(r#"{{"p":"{hex}"}}"#);
        self.tokio.block_on(self.runtime.call_tool("output", &args, &CallContext::default()))
    }
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
