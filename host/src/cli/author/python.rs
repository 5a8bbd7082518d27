//! Python tool projects, built into components by componentize-py.

use crate::cli::term::say_err;
use anyhow::{Context, bail};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The componentize-py release this host is tested against.
const COMPONENTIZE_PY: &str = "0.25.1";

/// The module componentize-py wraps: `app.py` at the project's root.
const APP_MODULE: &str = "app";

const APP_PY: &str = include_str!("../../../templates/python/app.py.tmpl");
const GITIGNORE: &str = include_str!("../../../templates/python/gitignore.tmpl");

/// Writes `app.py` (one working tool) and `.gitignore`.
pub(super) fn scaffold(dir: &Path, name: &str) -> anyhow::Result<()> {
    let app = APP_PY.replace("{{name}}", name).replace("{{tool}}", &super::tool_name(name));
    for (file, text) in [("app.py", app.as_str()), (".gitignore", GITIGNORE)] {
        let path = dir.join(file);
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// Runs componentize-py on `app.py` against the `tool-plugin` world of
/// `wit_dir`; the component lands in `dist/<name>.wasm`.
pub(super) fn build(dir: &Path, name: &str, wit_dir: &Path) -> anyhow::Result<PathBuf> {
    if !dir.join(format!("{APP_MODULE}.py")).is_file() {
        bail!(
            "{} has no {APP_MODULE}.py: a Python tool plugin is a module `{APP_MODULE}` with a class `Tool` \
             (`reson plugins new NAME --lang python` writes one)",
            dir.display()
        );
    }
    let tool = toolchain(dir)?;
    let dist = dir.join("dist");
    std::fs::create_dir_all(&dist).with_context(|| format!("creating {}", dist.display()))?;
    let out = dist.join(format!("{name}.wasm"));
    // Written aside and renamed, so a failed build never leaves a torn
    // component where a watching host could load it.
    let partial = dist.join(format!(".{name}.wasm.partial"));
    let output = Command::new(&tool)
        .arg("--wit-path")
        .arg(wit_dir)
        .args(["--world", "tool-plugin", "componentize", APP_MODULE, "--python-path"])
        .arg(dir)
        .arg("--output")
        .arg(&partial)
        .current_dir(dir)
        .output()
        .with_context(|| format!("running {}", tool.display()))?;
    if !output.status.success() {
        let _ = std::fs::remove_file(&partial);
        bail!(
            "componentize-py failed ({}):\n{}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    std::fs::rename(&partial, &out).with_context(|| format!("writing {}", out.display()))?;
    Ok(out)
}

/// componentize-py from the project's `.venv`, else from `PATH`; warns when
/// its version is not the one this host was tested with.
fn toolchain(dir: &Path) -> anyhow::Result<PathBuf> {
    let local = dir.join(".venv/bin/componentize-py");
    let tool = if local.is_file() { local } else { PathBuf::from("componentize-py") };
    let version = match Command::new(&tool).arg("--version").output() {
        Ok(output) if output.status.success() => output.stdout,
        Ok(output) => bail!(
            "`{} --version` failed ({}): {}; {}",
            tool.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim(),
            install_hint()
        ),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            bail!("componentize-py is not installed (neither in .venv/ nor on PATH); {}", install_hint())
        }
        Err(err) => bail!("cannot run {}: {err}; {}", tool.display(), install_hint()),
    };
    let version = String::from_utf8_lossy(&version);
    let version = version.trim().trim_start_matches("componentize-py").trim();
    if version != COMPONENTIZE_PY {
        say_err!(
            "warning: componentize-py {version} found; this host is tested with {COMPONENTIZE_PY} \
             (pip install componentize-py=={COMPONENTIZE_PY})"
        );
    }
    Ok(tool)
}

fn install_hint() -> String {
    format!(
        "install it (Python >= 3.10) in the project with \
         `python3 -m venv .venv && .venv/bin/pip install componentize-py=={COMPONENTIZE_PY}`, \
         or anywhere on PATH with `pip install componentize-py=={COMPONENTIZE_PY}`"
    )
}
