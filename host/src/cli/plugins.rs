//! `reson plugins ...`

use super::author::{self, Lang};
use super::exit;
use super::term::{Spinner, Stream, clean, one_line, paint, say, say_json, style, write_out};
use anyhow::Context as _;
use clap::Subcommand;
use reson::plugin::{self, Options, PluginInfo, PluginSource, PluginStatus, Runtime, signing};
use reson::registry::{self, OciRef, Settings};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Subcommand)]
pub(crate) enum Command {
    /// Every plugin found: version, world, tools, digest, grants, status.
    List {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Accept a plugin that changed and now requests more capabilities, or
    /// hand it the tool names another plugin serves.
    Accept {
        /// Plugin name.
        name: String,
    },
    /// Make a new plugin project: manifest, contract (wit/), a working tool
    /// and a README.
    New {
        /// Plugin name (lowercase letters, digits, `-`, `_`).
        name: String,
        /// The language to write it in.
        #[arg(long, value_enum, default_value = "rust")]
        lang: Lang,
        /// Where to make it [default: ./NAME]
        dir: Option<PathBuf>,
        /// Rust only: the reson-sdk crate to depend on [default: the sdk/
        /// of the checkout this binary was built from]
        #[arg(long)]
        sdk: Option<PathBuf>,
    },
    /// Build the plugin project in DIR into DIR/dist.
    Build {
        /// The project [default: .]
        #[arg(default_value = ".")]
        dir: PathBuf,
    },
    /// Copy a built plugin (a project directory, or a .wasm with its .toml
    /// beside it) into the plugins directory, or pull one from an OCI
    /// registry (oci://HOST[:PORT]/REPOSITORY:TAG or ...@sha256:DIGEST); the
    /// lock file records the registry reference and the digest pulled.
    Install {
        /// The project directory, the .wasm file, or an oci:// reference.
        path: PathBuf,
        /// Speak plain HTTP to a registry that is not on this machine.
        #[arg(long)]
        insecure: bool,
    },
    /// Push a plugin (as `install` takes it, or the name of one in the
    /// plugins directory) to an OCI registry; prints its digest.
    Publish {
        /// The project directory, the .wasm file, or an installed plugin's name.
        plugin: PathBuf,
        /// Where: oci://HOST[:PORT]/REPOSITORY:TAG.
        reference: String,
        /// Speak plain HTTP to a registry that is not on this machine.
        #[arg(long)]
        insecure: bool,
    },
    /// Make an Ed25519 key pair for signing plugins: DIR/NAME.key (secret,
    /// keep it private) and DIR/NAME.pub.
    Keygen {
        /// The key's name, shown as the signer once trusted.
        name: String,
        /// Where to write the two files.
        #[arg(long, default_value = ".")]
        dir: PathBuf,
    },
    /// Sign a plugin component: the signature is embedded (the file is
    /// rewritten), or written beside it as PLUGIN.wasm.sig with
    /// --detached. Signatures already there are kept.
    Sign {
        /// The .wasm file, or the name of a plugin in the plugins directory.
        plugin: PathBuf,
        /// The secret key file (from `reson plugins keygen`, or wasmsign2's).
        #[arg(long)]
        key: PathBuf,
        /// Write the signature beside the component instead of into it.
        #[arg(long)]
        detached: bool,
    },
}

impl Command {
    /// Whether the command works on loaded plugins (the others only write
    /// files).
    pub(crate) fn needs_runtime(&self) -> bool {
        matches!(self, Self::List { .. } | Self::Accept { .. })
    }
}

/// `plugin` as the user named it: a path, or the name of a plugin in
/// `plugins_dir`.
fn named_or_path(plugin: &Path, plugins_dir: &Path) -> PathBuf {
    let named = plugins_dir.join(plugin).with_extension("wasm");
    if !plugin.exists() && plugin.components().count() == 1 && named.exists() {
        named
    } else {
        plugin.to_path_buf()
    }
}

/// `reson plugins install oci://...`: pulls, writes the files as a local
/// install does, and records where they came from.
async fn install_from_registry(
    text: &str,
    insecure: bool,
    options: &Options,
) -> anyhow::Result<()> {
    let reference: OciRef = text.parse()?;
    let pulled = registry::pull(&reference, &Settings::from_env(insecure)).await?;
    let name = author::place(&pulled.plugin, &options.plugins_dir)
        .with_context(|| format!("installing {reference}"))?;
    let source = PluginSource { reference: reference.to_string(), digest: pulled.digest.clone() };
    plugin::record_source(&options.lock_file, &name, Some(source))
        .map_err(|e| anyhow::anyhow!("recording where {name} came from: {e}"))?;
    say!(
        "installed {name} from {reference} into {}\ndigest {}\npinned: {}\n(a plugin that \
         changed and asks for more waits for `reson plugins accept {name}`)",
        options.plugins_dir.display(),
        pulled.digest,
        reference.pinned(&pulled.digest)
    );
    Ok(())
}

/// The commands that need no runtime: making, building, installing and
/// publishing.
pub(crate) async fn run_offline(command: &Command, options: &Options) -> anyhow::Result<ExitCode> {
    let plugins_dir = &options.plugins_dir;
    match command {
        Command::New { name, lang, dir, sdk } => {
            let dir = author::new(name, *lang, dir.as_deref(), sdk.as_deref())?;
            let first = if *lang == Lang::Js {
                format!("`(cd {} && npm install)`, then ", dir.display())
            } else {
                String::new()
            };
            say!(
                "made {} in {}; next: {first}`reson plugins build {}`",
                name,
                dir.display(),
                dir.display()
            );
        }
        Command::Build { dir } => {
            let work = Spinner::for_terminal();
            let built = author::build(dir, work.as_deref());
            if let Some(work) = &work {
                work.finish();
            }
            say!("built {}", built?.display());
        }
        Command::Install { path, insecure } => {
            if let Some(text) = path.to_str().filter(|t| OciRef::is_oci(t)) {
                install_from_registry(text, *insecure, options).await?;
                return Ok(ExitCode::SUCCESS);
            }
            let name = author::install(path, plugins_dir)?;
            let sources = plugin::sources(&options.lock_file).map_err(anyhow::Error::msg)?;
            if sources.contains_key(&name) {
                plugin::record_source(&options.lock_file, &name, None)
                    .map_err(anyhow::Error::msg)?;
            }
            say!(
                "installed {name} into {}; `reson plugins list` shows it (a plugin that changed \
                 and asks for more waits for `reson plugins accept {name}`)",
                plugins_dir.display()
            );
        }
        Command::Keygen { name, dir } => {
            let keys = signing::keygen(dir, name)?;
            say!(
                "wrote {} (secret: keep it private) and {}; key id {}\n\
                 trust it in reson.toml:\n[plugins]\n\
                 trusted_keys = [{{ name = \"{name}\", key = \"{}\" }}]",
                keys.secret.display(),
                keys.public.display(),
                keys.key_id,
                keys.inline
            );
        }
        Command::Publish { plugin, reference, insecure } => {
            let file = named_or_path(plugin, plugins_dir);
            let bundle = author::read(&file)?;
            let reference: OciRef = reference.parse()?;
            let digest =
                registry::push(&reference, &bundle, &Settings::from_env(*insecure)).await?;
            say!(
                "published {} to {reference}\ndigest {digest}\ninstall it with `reson plugins \
                 install {}`",
                file.display(),
                reference.pinned(&digest)
            );
        }
        Command::Sign { plugin, key, detached } => {
            let file = named_or_path(plugin, plugins_dir);
            let signed = signing::sign(&file, key, *detached)?;
            say!(
                "signed {} with key id {} ({} signature{} now); wrote {}",
                file.display(),
                signed.key_id,
                signed.signatures,
                if signed.signatures == 1 { "" } else { "s" },
                signed.written.display()
            );
        }
        Command::List { .. } | Command::Accept { .. } => {
            anyhow::bail!("this command needs the plugin runtime")
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub(crate) async fn run(
    runtime: &Runtime,
    command: &Command,
    verbose: bool,
) -> anyhow::Result<ExitCode> {
    match command {
        Command::List { json: true } => {
            say_json(&serde_json::to_string_pretty(&runtime.plugins())?);
        }
        Command::List { json: false } => {
            let sources = plugin::sources(&runtime.options().lock_file).unwrap_or_default();
            print_table(&runtime.plugins(), &sources, verbose);
        }
        Command::New { .. }
        | Command::Build { .. }
        | Command::Install { .. }
        | Command::Publish { .. }
        | Command::Keygen { .. }
        | Command::Sign { .. } => {
            return run_offline(command, runtime.options()).await;
        }
        Command::Accept { name } => {
            runtime.accept(name).await?;
            let info = runtime.plugins().into_iter().find(|p| &p.name == name);
            match info.map(|p| p.status) {
                Some(PluginStatus::Ready) => say!("accepted {name}; it is loaded"),
                Some(PluginStatus::Failed(e) | PluginStatus::Stale(e)) => {
                    say!("accepted {name}, but it does not load: {e}");
                    return Ok(ExitCode::from(exit::HOST));
                }
                _ => say!("accepted {name}"),
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Each plugin on a line or two: name, version, world, status, then its
/// tools and what it may reach; a registry source, a signature, refused
/// tools and what its commands may do when there are any. `verbose` adds
/// the digest, every grant and the limits.
fn print_table(plugins: &[PluginInfo], sources: &BTreeMap<String, PluginSource>, verbose: bool) {
    if plugins.is_empty() {
        say!("no plugins found");
        return;
    }
    for p in plugins {
        let (word, style, why) = match &p.status {
            PluginStatus::Ready => ("ready", style::GOOD, None),
            PluginStatus::Disabled => ("disabled", style::PENDING, None),
            PluginStatus::Failed(e) => ("FAILED:", style::BAD, Some(e)),
            PluginStatus::Stale(e) => {
                ("STALE (previous version serving):", style::PENDING, Some(e))
            }
        };
        let status = paint(Stream::Out, style, word);
        let why = why.map(|e| format!(" {}", clean(&one_line(e)))).unwrap_or_default();
        let world = p.world.map(|w| w.to_string()).unwrap_or_else(|| "-".into());
        let version = one_line(p.version.as_deref().unwrap_or("?"));
        let head = clean(&format!("{} {version}  [{world}]", p.name));
        write_out(&format!("{head}  {status}{why}\n"));
        let dirs: Vec<String> = p.grants.as_ref().map_or_else(Vec::new, |g| {
            g.dirs.iter().map(|d| format!("{} ({})", d.host.display(), d.access)).collect()
        });
        if !verbose {
            let mut reach = Vec::new();
            if !p.tools.is_empty() {
                reach.push(format!("tools {}", p.tools.join(", ")));
            }
            if let Some(g) = &p.grants {
                for (what, list) in [("dirs", &dirs), ("http", &g.http), ("process", &g.process)] {
                    if !list.is_empty() {
                        reach.push(format!("{what} {}", list.join(", ")));
                    }
                }
            }
            if !reach.is_empty() {
                say!("    {}", reach.join("; "));
            }
        }
        if let Some(sha) = p.sha256.as_ref().filter(|_| verbose) {
            say!("    sha256  {sha}");
        }
        if let Some(source) = sources.get(&p.name) {
            say!("    source  {} ({})", one_line(&source.reference), one_line(&source.digest));
        }
        match &p.signature {
            Some(s) if s.is_bad() => say!("    signature WARNING: {}", one_line(&s.to_string())),
            Some(s) if verbose || !matches!(s, signing::SignatureStatus::Unsigned) => {
                say!("    signature {}", one_line(&s.to_string()))
            }
            _ => {}
        }
        if verbose && !p.tools.is_empty() {
            say!("    tools   {}", p.tools.join(", "));
        }
        for refused in &p.refused_tools {
            say!("    refused {}: {}", refused.name, one_line(&refused.reason));
        }
        if let Some(g) = &p.grants {
            let none = |v: &[String]| if v.is_empty() { "none".to_owned() } else { v.join(", ") };
            if verbose {
                say!("    dirs    {}", none(&dirs));
                say!("    http    {}", none(&g.http));
                say!("    process {}", none(&g.process));
            }
            // What widens a command is never left out.
            if !g.process.is_empty() {
                say!("    commands {}", g.command_reach());
            }
            if !g.env.is_empty() {
                say!("    env     {}", g.env.join(", "));
            }
            if !g.exec_vectors.is_empty() {
                say!("    exec    {} (may run other programs)", g.exec_vectors.join(", "));
            }
            if !verbose {
                continue;
            }
            say!("    secrets {}", none(&g.secrets));
            say!(
                "    limits  timeout {} ms, memory {} MiB, output {} bytes{}",
                g.limits.timeout.as_millis(),
                g.limits.memory_bytes >> 20,
                g.limits.output_bytes,
                g.limits.fuel.map(|f| format!(", fuel {f}")).unwrap_or_default()
            );
        }
    }
}
