//! JavaScript plugins: an ES module (`app.js`) made into a component by
//! componentize-js (the StarlingMonkey engine with the module snapshotted
//! in), for the `tool-plugin` world.

use super::{render, run_captured, write};
use anyhow::{Context as _, bail};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The file only a JavaScript project has.
pub(super) const ENTRY: &str = "app.js";

/// The componentize-js release projects are made for and tested with.
const COMPONENTIZE_JS: &str = "0.23.0";
pub(super) const TOOLCHAIN: &str = "componentize-js";
const APP_TEMPLATE: &str = include_str!("../../../templates/js/app.js.tmpl");
const PACKAGE_TEMPLATE: &str = include_str!("../../../templates/js/package.json.tmpl");
const README_NOTE: &str = include_str!("../../../templates/js/README-note.md.tmpl");

/// Engine features left out of every component: `fetch()` would need
/// `wasi:http`, which the host does not offer (guests reach the network
/// through the `http` import, under their grant).
const DISABLED_FEATURES: [&str; 2] = ["http", "fetch-event"];

/// Writes `app.js` (one working tool) and a `package.json` that pins
/// componentize-js as a dev dependency, and tells the README's reader to
/// install it.
pub(super) fn scaffold(dir: &Path, name: &str) -> anyhow::Result<()> {
    // A tool name is what the model sees; `-` reads badly there.
    let tool = name.replace('-', "_");
    let values = [("name", name), ("tool", tool.as_str()), ("componentize_js", COMPONENTIZE_JS)];
    write(dir, ENTRY, &render(APP_TEMPLATE, &values))?;
    write(dir, "package.json", &render(PACKAGE_TEMPLATE, &values))?;
    write(dir, ".gitignore", "/node_modules\n/target\n/dist\n")?;
    let readme = dir.join("README.md");
    if readme.is_file() {
        let mut text = std::fs::read_to_string(&readme)
            .with_context(|| format!("reading {}", readme.display()))?;
        text.push_str(&render(README_NOTE, &values));
        std::fs::write(&readme, text).with_context(|| format!("writing {}", readme.display()))?;
    }
    Ok(())
}

/// The componentize-js to run: the project's own (`npm install` in it),
/// else one on PATH.
fn componentize_js(dir: &Path) -> anyhow::Result<PathBuf> {
    let local = dir.join("node_modules/.bin").join(TOOLCHAIN);
    if local.is_file() {
        return Ok(local);
    }
    let on_path = std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).map(|d| d.join(TOOLCHAIN)).find(|p| p.is_file()));
    on_path.flatten().with_context(|| {
        format!(
            "building a JavaScript plugin needs {TOOLCHAIN}: run `npm install` in {} (its \
             package.json pins @bytecodealliance/componentize-js {COMPONENTIZE_JS}), or `npm \
             install -g @bytecodealliance/componentize-js@{COMPONENTIZE_JS}`",
            dir.display()
        )
    })
}

/// Whether Node.js answers on PATH (componentize-js runs on it).
fn node_available() -> bool {
    Command::new("node").arg("--version").output().is_ok_and(|o| o.status.success())
}

/// Runs componentize-js on `app.js` for the `tool-plugin` world of `wit`,
/// leaving `target/NAME.wasm`.
pub(super) fn build(dir: &Path, name: &str, wit: &Path) -> anyhow::Result<PathBuf> {
    if !node_available() {
        bail!(
            "building a JavaScript plugin needs Node.js 18 or newer (`node` on PATH): install it \
             with your system's packages (e.g. `apt-get install nodejs npm`) or from nodejs.org"
        );
    }
    let toolchain = componentize_js(dir)?;
    let out_dir = dir.join("target");
    std::fs::create_dir_all(&out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    let out = out_dir.join(format!("{name}.wasm"));
    let mut command = Command::new(&toolchain);
    command
        .arg(dir.join(ENTRY))
        .arg("--wit")
        .arg(wit)
        .args(["--world-name", "tool-plugin", "--disable"])
        .args(DISABLED_FEATURES)
        .arg("--out")
        .arg(&out);
    // A stale component must not pass for this build's.
    let _ = std::fs::remove_file(&out);
    run_captured(command, TOOLCHAIN)?;
    if !out.is_file() {
        bail!("{TOOLCHAIN} reported success but wrote no {}", out.display());
    }
    Ok(out)
}
