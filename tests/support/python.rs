//! The Python toolchain that builds Python guests in the tests and benches:
//! componentize-py from PyPI, in a venv under `target/toolchains/python`,
//! installed once and reused by every later run (CI may be a fresh machine,
//! so the tests install it themselves rather than expect it).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The componentize-py release the host is tested against.
pub const COMPONENTIZE_PY: &str =
    include_str!("../../plugins/componentize-py.version").trim_ascii();

/// The venv's `bin/` directory, holding `componentize-py`; installs it first
/// if this checkout has none yet.
pub fn toolchain_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(install)
}

/// `PATH` with the toolchain first, for `reson plugins build`.
pub fn path_with_toolchain() -> std::ffi::OsString {
    let mut dirs = vec![toolchain_bin().to_path_buf()];
    dirs.extend(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()));
    std::env::join_paths(dirs).expect("PATH entries join")
}

fn install() -> PathBuf {
    let toolchains = super::root().join("target/toolchains");
    std::fs::create_dir_all(&toolchains).expect("creating target/toolchains");
    let venv = toolchains.join("python");
    let bin = venv.join("bin");
    // The marker is written last, so an install cut short is redone whole.
    let marker = venv.join(format!(".componentize-py-{COMPONENTIZE_PY}"));
    // Test binaries and benches may run at once: one installs, the others wait.
    let lock = File::create(toolchains.join("python.lock")).expect("creating the install lock");
    lock.lock().expect("taking the install lock");
    if marker.is_file() && bin.join("componentize-py").is_file() {
        return bin;
    }
    if venv.exists() {
        std::fs::remove_dir_all(&venv).expect("removing a half-made venv");
    }
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    run(Command::new(&python).args([
        "-c",
        "import sys; sys.exit(0 if sys.version_info >= (3, 10) else 'componentize-py needs Python >= 3.10')",
    ]));
    run(Command::new(&python).arg("-m").arg("venv").arg(&venv));
    run(Command::new(bin.join("python")).args([
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        &format!("componentize-py=={COMPONENTIZE_PY}"),
    ]));
    let version = Command::new(bin.join("componentize-py")).arg("--version").output().unwrap();
    let version = String::from_utf8_lossy(&version.stdout);
    assert!(version.contains(COMPONENTIZE_PY), "installed componentize-py says {version:?}");
    std::fs::write(&marker, "").expect("writing the install marker");
    bin
}

fn run(command: &mut Command) {
    let status = command.status().unwrap_or_else(|e| panic!("running {command:?}: {e}"));
    assert!(status.success(), "{command:?} failed ({status}) while installing a Python toolchain");
}

/// The python-lsp-server release the `lsp_diagnostics` tests run.
pub const PYLSP: &str = "1.13.1";
/// The pyflakes release it reports with.
pub const PYFLAKES: &str = "3.4.0";

/// A venv under `target/toolchains/pylsp` holding python-lsp-server and
/// pyflakes from PyPI, installed once; its directory.
pub fn pylsp_venv() -> &'static Path {
    static VENV: OnceLock<PathBuf> = OnceLock::new();
    VENV.get_or_init(|| {
        let toolchains = super::root().join("target/toolchains");
        std::fs::create_dir_all(&toolchains).expect("creating target/toolchains");
        let venv = toolchains.join("pylsp");
        let marker = venv.join(format!(".pylsp-{PYLSP}-pyflakes-{PYFLAKES}"));
        let lock = File::create(toolchains.join("pylsp.lock")).expect("creating the install lock");
        lock.lock().expect("taking the install lock");
        if marker.is_file() {
            return venv;
        }
        if venv.exists() {
            std::fs::remove_dir_all(&venv).expect("removing a half-made venv");
        }
        let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
        run(Command::new(&python).arg("-m").arg("venv").arg(&venv));
        run(Command::new(venv.join("bin/python")).args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            &format!("python-lsp-server=={PYLSP}"),
            &format!("pyflakes=={PYFLAKES}"),
        ]));
        std::fs::write(&marker, "").expect("writing the install marker");
        venv
    })
}
