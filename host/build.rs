//! Builds the bundled plugins (`plugins/`) into the `reson` binary, so that
//! `reson init` sets up a working directory anywhere, without the checkout.
//!
//! The plugins compile into `<target>/wasm`, the directory `plugins/build.sh`
//! and the tests use, so a build and a test run compile each plugin once.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let dir = build(&out);
    let mut plugins: Vec<(String, PathBuf, PathBuf)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot read the bundled plugins in {}: {e}", dir.display()))
        .filter_map(|entry| {
            let wasm = entry.ok()?.path();
            let name = wasm.file_stem()?.to_str()?.to_owned();
            (wasm.extension()? == "wasm").then(|| (name, wasm.with_extension("toml"), wasm))
        })
        .collect();
    plugins.sort();
    assert!(!plugins.is_empty(), "no plugins (NAME.wasm + NAME.toml) in {}", dir.display());
    let mut code = String::from("&[\n");
    for (name, manifest, wasm) in &plugins {
        assert!(manifest.is_file(), "{} has no manifest beside it", wasm.display());
        writeln!(
            code,
            "    Bundled {{ name: {name:?}, component: include_bytes!({:?}), manifest: include_str!({:?}) }},",
            wasm.display(),
            manifest.display()
        )
        .expect("writing to a String");
    }
    code.push_str("]\n");
    std::fs::write(out.join("bundled.rs"), code).expect("writing bundled.rs");
}

/// Runs `plugins/build.sh` into `OUT_DIR/plugins` and returns that directory.
fn build(out: &Path) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let script = root.join("plugins/build.sh");
    assert!(
        script.is_file(),
        "the bundled plugins are built from the repository's plugins/, and {} is missing",
        script.display()
    );
    for source in ["plugins/Cargo.toml", "plugins/Cargo.lock", "plugins/build.sh", "sdk", "wit"] {
        println!("cargo:rerun-if-changed={}", root.join(source).display());
    }
    // Not `plugins/` itself: `cargo test --manifest-path plugins/Cargo.toml`
    // writes plugins/target, which would make every build rerun this script.
    for entry in std::fs::read_dir(root.join("plugins")).expect("reading plugins/") {
        let path = entry.expect("reading plugins/").path();
        if path.join("reson-plugin.toml").is_file() && path.join("Cargo.toml").is_file() {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
    let dir = out.join("plugins");
    let status = Command::new("bash")
        .arg(&script)
        .arg(&dir)
        .env("RESON_WASM_TARGET_DIR", target_dir(out).join("wasm"))
        // The binary carries the Rust plugins only: the Python one needs a
        // toolchain from PyPI, and what a build bundles must not depend on
        // what the machine happens to have (see plugins/build.sh).
        .env("RESON_PYTHON_PLUGINS", "skip")
        // Cargo hands these to build scripts for the host; the plugins build
        // for wasm32-wasip2 with the flags the tests build them with.
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("RUSTC")
        .status()
        .expect("running bash plugins/build.sh");
    assert!(status.success(), "plugins/build.sh failed ({status}); see its output above");
    dir
}

/// The target directory this build writes to: the first ancestor of
/// `OUT_DIR` that cargo marked with `CACHEDIR.TAG`.
fn target_dir(out: &Path) -> PathBuf {
    out.ancestors().find(|dir| dir.join("CACHEDIR.TAG").is_file()).unwrap_or(out).to_path_buf()
}
