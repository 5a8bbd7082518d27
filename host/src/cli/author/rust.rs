//! Rust plugins: a cdylib crate on `reson-sdk`, built for wasm32-wasip2.

use super::{available, render, run_tool, write};
use anyhow::{Context as _, bail};
use std::path::{Path, PathBuf};
use std::process::Command;

const CARGO_TEMPLATE: &str = include_str!("../../../templates/rust/Cargo.toml.tmpl");
const LIB_TEMPLATE: &str = include_str!("../../../templates/rust/lib.rs.tmpl");
const TARGET: &str = "wasm32-wasip2";

/// The SDK of the checkout this binary was built from, if it is still there.
fn bundled_sdk() -> Option<PathBuf> {
    let sdk = Path::new(env!("CARGO_MANIFEST_DIR")).join("../sdk");
    sdk.join("Cargo.toml").is_file().then(|| sdk.canonicalize().ok()).flatten()
}

/// Writes `Cargo.toml` and `src/lib.rs`; the SDK is a path dependency on
/// `sdk` (or on the checkout this binary came from).
pub(super) fn scaffold(
    dir: &Path,
    name: &str,
    tool: &str,
    sdk: Option<&Path>,
) -> anyhow::Result<()> {
    let sdk = match sdk {
        Some(path) => {
            path.canonicalize().with_context(|| format!("the SDK at {}", path.display()))?
        }
        None => bundled_sdk().context(
            "cannot find reson-sdk: pass --sdk PATH to the sdk/ folder of a reson checkout",
        )?,
    };
    if !sdk.join("Cargo.toml").is_file() {
        bail!("{} is not the reson-sdk crate (it has no Cargo.toml)", sdk.display());
    }
    let dependency = format!("{{ path = {:?} }}", sdk.to_string_lossy());
    let values = [("name", name), ("tool", tool), ("sdk", dependency.as_str())];
    write(dir, "Cargo.toml", &render(CARGO_TEMPLATE, &values))?;
    write(dir, "src/lib.rs", &render(LIB_TEMPLATE, &values))?;
    write(dir, ".gitignore", "/target\n/dist\n")
}

/// `cargo build --release --target wasm32-wasip2`, adding the target with
/// rustup when it is missing.
pub(super) fn build(dir: &Path, name: &str) -> anyhow::Result<PathBuf> {
    let cargo = PathBuf::from(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    if !available(&cargo) {
        bail!("building a Rust plugin needs cargo: install Rust with rustup (https://rustup.rs)");
    }
    let installed = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).lines().any(|l| l.trim() == TARGET));
    match installed {
        Ok(true) => {}
        Ok(false) => {
            let mut add = Command::new("rustup");
            add.args(["target", "add", TARGET]);
            run_tool(add, "rustup target add wasm32-wasip2")?;
        }
        Err(_) => bail!(
            "building a Rust plugin needs the {TARGET} target: install rustup \
             (https://rustup.rs), then `rustup target add {TARGET}`"
        ),
    }
    let target_dir =
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| dir.join("target"), PathBuf::from);
    let mut command = Command::new(&cargo);
    command
        .args(["build", "--release", "--target", TARGET, "--manifest-path"])
        .arg(dir.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(&target_dir);
    run_tool(command, "cargo build")?;
    let wasm =
        target_dir.join(TARGET).join("release").join(format!("{}.wasm", name.replace('-', "_")));
    if !wasm.is_file() {
        bail!("cargo built no {}: is the crate a cdylib named `{name}`?", wasm.display());
    }
    Ok(wasm)
}
