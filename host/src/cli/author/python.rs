//! Python plugins: a module `app` with a class `Tool`, made into a component
//! by componentize-py.

use super::{render, run_captured, write};
use crate::cli::term::say_warning;
use anyhow::{Context as _, bail};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The file only a python project has.
pub(super) const ENTRY: &str = "app.py";

/// The componentize-py release this host is tested against (kept in one
/// file, which `plugins/build.sh` and the tests read too).
const COMPONENTIZE_PY: &str =
    include_str!("../../../../plugins/componentize-py.version").trim_ascii();

const APP_TEMPLATE: &str = include_str!("../../../templates/python/app.py.tmpl");
const GITIGNORE: &str = include_str!("../../../templates/python/gitignore.tmpl");

/// Writes `app.py` (one working tool) and `.gitignore`.
pub(super) fn scaffold(dir: &Path, name: &str) -> anyhow::Result<()> {
    let tool = name.replace('-', "_");
    let values = [("name", name), ("tool", tool.as_str())];
    write(dir, ENTRY, &render(APP_TEMPLATE, &values))?;
    write(dir, ".gitignore", GITIGNORE)
}

/// Runs componentize-py on `app.py` against the `tool-plugin` world of
/// `wit_dir`, into `build/<name>.wasm` (the caller copies it to `dist/`).
pub(super) fn build(dir: &Path, name: &str, wit_dir: &Path) -> anyhow::Result<PathBuf> {
    if !wit_dir.join("worlds.wit").is_file() {
        bail!(
            "{} holds no contract: write it with `reson wit {}`",
            wit_dir.display(),
            wit_dir.display()
        );
    }
    // componentize-py runs inside the project (it writes `__pycache__`
    // there), so every path it gets must not depend on our own cwd.
    let absolute =
        |path: &Path| path.canonicalize().with_context(|| format!("resolving {}", path.display()));
    let (dir, wit_dir) = (absolute(dir)?, absolute(wit_dir)?);
    let componentize = toolchain(&dir)?;
    let out_dir = dir.join("build");
    std::fs::create_dir_all(&out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    let out = out_dir.join(format!("{name}.wasm"));
    let module = ENTRY.trim_end_matches(".py");
    let mut command = Command::new(&componentize);
    command
        .arg("--wit-path")
        .arg(&wit_dir)
        .args(["--world", "tool-plugin", "componentize", module, "--python-path"])
        .arg(&dir)
        .arg("--output")
        .arg(&out)
        .current_dir(&dir);
    run_captured(command, "componentize-py")?;
    Ok(out)
}

/// componentize-py from the project's `.venv`, else from `PATH`; warns when
/// its version is not the one this host is tested with.
fn toolchain(dir: &Path) -> anyhow::Result<PathBuf> {
    let local = dir.join(".venv/bin/componentize-py");
    let componentize = if local.is_file() { local } else { PathBuf::from("componentize-py") };
    let version = match Command::new(&componentize).arg("--version").output() {
        Ok(output) if output.status.success() => output.stdout,
        Ok(output) => bail!(
            "`{} --version` failed ({}): {}; {}",
            componentize.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim(),
            install_hint()
        ),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => bail!(
            "building a Python plugin needs componentize-py, found neither in .venv/ nor on \
             PATH; {}",
            install_hint()
        ),
        Err(err) => bail!("cannot run {}: {err}; {}", componentize.display(), install_hint()),
    };
    let version = String::from_utf8_lossy(&version);
    let version = version.trim().trim_start_matches("componentize-py").trim();
    if version != COMPONENTIZE_PY {
        say_warning!(
            "componentize-py {version} found; this host is tested with \
             {COMPONENTIZE_PY} (pip install componentize-py=={COMPONENTIZE_PY})"
        );
    }
    Ok(componentize)
}

fn install_hint() -> String {
    format!(
        "install it (Python >= 3.10) into the project with `python3 -m venv .venv && \
         .venv/bin/pip install componentize-py=={COMPONENTIZE_PY}`, or onto PATH with \
         `pip install componentize-py=={COMPONENTIZE_PY}`"
    )
}
