//! Writing plugins outside this repository: `reson plugins new`, `build`
//! and `install`, and `reson wit`. A project is a directory holding the
//! plugin's manifest (`reson-plugin.toml`), the contract (`wit/`) and the
//! sources of one language; `build` leaves `dist/<name>.wasm` and
//! `dist/<name>.toml`, which `install` copies into a plugins directory
//! (and `publish` pushes to a registry).

mod js;
mod python;
mod rust;

use super::term::{Spinner, say_err};
use anyhow::{Context as _, bail};
use reson::plugin::Manifest;
use reson::registry::Plugin;
use std::path::{Path, PathBuf};

/// The contract, embedded so that a project can be made anywhere.
const WIT_FILES: [(&str, &str); 6] = [
    ("host.wit", include_str!("../../../../wit/host.wit")),
    ("plan-parser.wit", include_str!("../../../../wit/plan-parser.wit")),
    ("provider.wit", include_str!("../../../../wit/provider.wit")),
    ("tool.wit", include_str!("../../../../wit/tool.wit")),
    ("types.wit", include_str!("../../../../wit/types.wit")),
    ("worlds.wit", include_str!("../../../../wit/worlds.wit")),
];

const MANIFEST: &str = "reson-plugin.toml";
const MANIFEST_TEMPLATE: &str = include_str!("../../../templates/manifest.toml.tmpl");
const README_TEMPLATE: &str = include_str!("../../../templates/README.md.tmpl");

/// The languages a project can be written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Lang {
    /// Rust, with the `reson-sdk` crate.
    Rust,
    /// Python, built with componentize-py.
    Python,
    /// JavaScript, built with componentize-js.
    Js,
}

impl Lang {
    fn title(self) -> &'static str {
        match self {
            Self::Rust => "Rust",
            Self::Python => "Python",
            Self::Js => "JavaScript",
        }
    }

    /// The language of the project in `dir`, from the file only it has.
    fn of_project(dir: &Path) -> anyhow::Result<Self> {
        let found =
            [(Self::Rust, "Cargo.toml"), (Self::Python, python::ENTRY), (Self::Js, js::ENTRY)]
                .into_iter()
                .find(|(_, marker)| dir.join(marker).is_file());
        match found {
            Some((lang, _)) => Ok(lang),
            None => bail!(
                "{} is not a plugin project: it has no Cargo.toml, {} or {} (make one with \
                 `reson plugins new NAME --lang rust|python|js`)",
                dir.display(),
                python::ENTRY,
                js::ENTRY
            ),
        }
    }
}

/// Fills `{{key}}` placeholders.
pub(crate) fn render(template: &str, values: &[(&str, &str)]) -> String {
    values.iter().fold(template.to_owned(), |text, (key, value)| {
        text.replace(&format!("{{{{{key}}}}}"), value)
    })
}

/// Writes `content` to `dir/relative`, creating parents.
pub(crate) fn write(dir: &Path, relative: &str, content: &str) -> anyhow::Result<()> {
    let path = dir.join(relative);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    std::fs::write(&path, content).with_context(|| format!("writing {}", path.display()))
}

/// `reson wit [DIR]`: the contract's WIT files.
pub(crate) fn write_wit(dir: &Path) -> anyhow::Result<()> {
    for (file, text) in WIT_FILES {
        write(dir, file, text)?;
    }
    Ok(())
}

/// The WIT a Python or JavaScript project is built against.
struct Contract {
    path: PathBuf,
    _written: Option<tempfile::TempDir>,
}

/// The project's own `wit/`; where it has none, this host's contract,
/// written for the build alone (a project pins its contract by keeping
/// `wit/`, as `reson plugins new` makes it).
fn contract(dir: &Path) -> anyhow::Result<Contract> {
    let own = dir.join("wit");
    if own.exists() {
        return Ok(Contract { path: own, _written: None });
    }
    let written = tempfile::Builder::new()
        .prefix("reson-wit-")
        .tempdir()
        .context("making a directory for this host's contract")?;
    write_wit(written.path())?;
    say_err!(
        "{} has no wit/: building against this host's contract (`reson wit {}` keeps a copy \
         in the project)",
        dir.display(),
        own.display()
    );
    Ok(Contract { path: written.path().to_path_buf(), _written: Some(written) })
}

/// A plugin name that is also a valid crate, Python module stem and npm
/// package name: lowercase letters, digits, `-` and `_`.
fn check_name(name: &str) -> anyhow::Result<()> {
    let ok = name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
    if !ok {
        bail!(
            "`{name}` cannot name a plugin: use 1 to 64 lowercase letters, digits, `-` or `_`, \
             starting with a letter"
        );
    }
    Ok(())
}

/// `reson plugins new NAME --lang LANG [DIR]`.
pub(crate) fn new(
    name: &str,
    lang: Lang,
    dir: Option<&Path>,
    sdk: Option<&Path>,
) -> anyhow::Result<PathBuf> {
    check_name(name)?;
    let dir = dir.map_or_else(|| PathBuf::from(name), Path::to_path_buf);
    if dir.exists() && std::fs::read_dir(&dir)?.next().is_some() {
        bail!("{} exists and is not empty; pick a new directory", dir.display());
    }
    // A tool name is what the model sees; `-` reads badly there.
    let tool = name.replace('-', "_");
    let values = [("name", name), ("tool", tool.as_str()), ("lang", lang.title())];
    write(&dir, MANIFEST, &render(MANIFEST_TEMPLATE, &values))?;
    write(&dir, "README.md", &render(README_TEMPLATE, &values))?;
    write_wit(&dir.join("wit"))?;
    match lang {
        Lang::Rust => rust::scaffold(&dir, name, &tool, sdk)?,
        Lang::Python => python::scaffold(&dir, name)?,
        Lang::Js => js::scaffold(&dir, name)?,
    }
    Ok(dir)
}

/// The manifest of the project in `dir`.
fn project_manifest(dir: &Path) -> anyhow::Result<Manifest> {
    let path = dir.join(MANIFEST);
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("{} has no {MANIFEST}", dir.display()))?;
    Manifest::parse(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

/// `reson plugins build [DIR]`: the component and its manifest in `dist/`.
///
/// `work` shows what is under way while a toolchain that prints nothing
/// until it is done runs (componentize-py, componentize-js: a minute for a
/// Python component); cargo shows its own progress.
pub(crate) fn build(dir: &Path, work: Option<&Spinner>) -> anyhow::Result<PathBuf> {
    if !dir.is_dir() {
        bail!(
            "{} is not a directory: name a plugin project's (`reson plugins new NAME --lang \
             rust|python|js` makes one)",
            dir.display()
        );
    }
    let manifest = project_manifest(dir)?;
    // The contract is found (and said) before the spinner starts, which
    // would draw over what is said.
    let begin = |toolchain: &str| {
        if let Some(work) = work {
            work.begin("build", format!("building {} with {toolchain}", manifest.name));
        }
    };
    let wasm = match Lang::of_project(dir)? {
        Lang::Rust => rust::build(dir, &manifest.name)?,
        Lang::Python => {
            let wit = contract(dir)?;
            begin("componentize-py");
            python::build(dir, &manifest.name, &wit.path)?
        }
        Lang::Js => {
            let wit = contract(dir)?;
            begin(js::TOOLCHAIN);
            js::build(dir, &manifest.name, &wit.path)?
        }
    };
    let dist = dir.join("dist");
    std::fs::create_dir_all(&dist)?;
    let out = dist.join(format!("{}.wasm", manifest.name));
    std::fs::copy(&wasm, &out)
        .with_context(|| format!("copying {} to {}", wasm.display(), out.display()))?;
    std::fs::copy(dir.join(MANIFEST), dist.join(format!("{}.toml", manifest.name)))?;
    Ok(out)
}

/// The plugin at `path` as `reson plugins install` accepts it: a project
/// directory (its `dist/`), or a `.wasm` with its manifest (and detached
/// signature, if it has one) beside it.
pub(crate) fn read(path: &Path) -> anyhow::Result<Plugin> {
    let (wasm, manifest_file) = if path.is_dir() {
        let manifest = project_manifest(path)?;
        let dist = path.join("dist");
        let wasm = dist.join(format!("{}.wasm", manifest.name));
        if !wasm.is_file() {
            bail!(
                "{} is not built yet: run `reson plugins build {}`",
                path.display(),
                path.display()
            );
        }
        (wasm, dist.join(format!("{}.toml", manifest.name)))
    } else {
        (path.to_path_buf(), path.with_extension("toml"))
    };
    let manifest = std::fs::read_to_string(&manifest_file).with_context(|| {
        format!("{} needs its manifest beside it: {}", wasm.display(), manifest_file.display())
    })?;
    Manifest::parse(&manifest).map_err(|e| anyhow::anyhow!("{}: {e}", manifest_file.display()))?;
    let signature_file = reson::plugin::signing::detached_path(&wasm);
    let signature = if signature_file.is_file() {
        Some(
            std::fs::read(&signature_file)
                .with_context(|| format!("reading {}", signature_file.display()))?,
        )
    } else {
        None
    };
    let wasm = std::fs::read(&wasm).with_context(|| format!("reading {}", wasm.display()))?;
    Ok(Plugin { wasm, manifest, signature })
}

/// `reson plugins install PATH`: the plugin at `path` (see [`read`])
/// copied into `plugins_dir`.
pub(crate) fn install(path: &Path, plugins_dir: &Path) -> anyhow::Result<String> {
    place(&read(path)?, plugins_dir)
}

/// Writes `plugin` into `plugins_dir` under the name its manifest gives.
/// Each file is written aside and renamed, so a watching host never loads
/// half a file.
pub(crate) fn place(plugin: &Plugin, plugins_dir: &Path) -> anyhow::Result<String> {
    let manifest = Manifest::parse(&plugin.manifest)
        .map_err(|e| anyhow::anyhow!("the plugin's manifest: {e}"))?;
    check_name(&manifest.name)?;
    if !plugins_dir.is_dir() {
        std::fs::create_dir_all(plugins_dir)
            .with_context(|| format!("creating {}", plugins_dir.display()))?;
    }
    // A detached signature goes with the component, first, so the new
    // component never meets the old one's signature; none removes the old.
    let mut files: Vec<(&[u8], &str)> = Vec::new();
    match &plugin.signature {
        Some(signature) => files.push((signature, "wasm.sig")),
        None => {
            let stale = plugins_dir.join(format!("{}.wasm.sig", manifest.name));
            if stale.exists() {
                std::fs::remove_file(&stale)
                    .with_context(|| format!("removing the old signature {}", stale.display()))?;
            }
        }
    }
    files.push((&plugin.wasm, "wasm"));
    files.push((plugin.manifest.as_bytes(), "toml"));
    for (bytes, ext) in files {
        let to = plugins_dir.join(format!("{}.{ext}", manifest.name));
        let aside = plugins_dir.join(format!(".{}.{ext}.tmp", manifest.name));
        std::fs::write(&aside, bytes).with_context(|| format!("writing {}", aside.display()))?;
        std::fs::rename(&aside, &to)?;
    }
    Ok(manifest.name)
}

/// Runs `command`, its output going where ours goes.
pub(crate) fn run_tool(mut command: std::process::Command, what: &str) -> anyhow::Result<()> {
    let status = command.status().with_context(|| format!("running {what}"))?;
    if !status.success() {
        bail!("{what} failed ({status})");
    }
    Ok(())
}

/// Runs `command` with its output kept, so that a spinner can stand in for
/// it meanwhile; fails with that output when it fails.
pub(crate) fn run_captured(mut command: std::process::Command, what: &str) -> anyhow::Result<()> {
    let output = command.output().with_context(|| format!("running {what}"))?;
    if !output.status.success() {
        bail!(
            "{what} failed ({}):\n{}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(())
}

/// Whether `program` can be started (it answers `--version`).
pub(crate) fn available(program: &Path) -> bool {
    std::process::Command::new(program)
        .arg("--version")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}
