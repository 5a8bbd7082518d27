//! Turning a `<name>.wasm` + `<name>.toml` pair into a [`LoadedPlugin`]:
//! manifest, digest, signature and lock, compile (or cache), contract
//! check, grants, linking, and the tool list.

use super::cache::{self, Source};
use super::digest::{self, FileIdentity, sha256};
use super::engine::{KeptMark, Sandbox};
use super::error::{CallError, Limit, LoadError, ToolFailure};
use super::instance::{CallStore, Site};
use super::lock::LockFile;
use super::signing::{self, SignatureStatus, TrustStore};
use crate::capability::browser::{Scope, SessionKey};
use crate::capability::effects::Effects;
use crate::capability::{DeltaSink, HostState, Secrets};
use crate::config::PluginsConfig;
use crate::contract::bindings::plan_parser::PlanParserPluginPre;
use crate::contract::bindings::plan_parser::exports::reson::plugin::plan_parser as plan;
use crate::contract::bindings::provider::ProviderPluginPre;
use crate::contract::bindings::provider::reson::plugin::chat_types as chat;
use crate::contract::bindings::tool::exports::reson::plugin::tool as wit;
use crate::contract::bindings::tool::{ToolPlugin, ToolPluginPre};
use crate::contract::{self, World};
use crate::manifest::Manifest;
use crate::observer::WorkObserver;
use crate::policy::Grants;
use serde::Serialize;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;

const MAX_TOOL_NAME: usize = 64;
/// Most tools one plugin may list: enough for any real toolbox, and small
/// enough that a hostile list cannot make every start-up slow.
pub(crate) const MAX_TOOLS_PER_PLUGIN: usize = 256;
/// Longest tool description, in bytes.
pub(crate) const MAX_DESCRIPTION_BYTES: usize = 8 << 10;
/// Longest input schema (as JSON text), in bytes.
pub(crate) const MAX_SCHEMA_BYTES: usize = 64 << 10;
/// The longest `list()` may take, whatever the plugin's call limit: every
/// start-up and reload waits for it.
pub(crate) const LIST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);

/// A tool as the model sees it.
#[derive(Debug, Clone, Serialize)]
pub struct ToolSpec {
    /// Unique tool name.
    pub name: String,
    /// What it does.
    pub description: String,
    /// JSON Schema of its arguments.
    pub input_schema: super::Schema,
    /// The plugin serving it.
    pub plugin: String,
}

/// An image in a tool result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Image {
    /// IANA media type.
    pub media_type: String,
    /// Raw bytes.
    #[serde(skip)]
    pub data: Vec<u8>,
}

/// A tool's successful result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ToolOutput {
    /// The text for the model.
    pub text: String,
    /// A summary that replaces `text` in later history.
    pub long_term_memory: Option<String>,
    /// Send `text` once, then only the summary.
    pub include_output_only_once: bool,
    /// Accompanying images.
    pub images: Vec<Image>,
}

/// What the caller tells a tool about the call.
#[derive(Debug, Clone, Default)]
pub struct CallContext {
    /// The model's id for this tool call.
    pub call_id: String,
    /// The trace the call belongs to.
    pub trace_id: Option<String>,
    /// Cancel it to cut the call short (it then fails with
    /// [`CallError::Cancelled`]).
    pub cancel: Option<CancellationToken>,
    /// Where the call's host calls are recorded, or answered from in a
    /// replay; `None` records nothing.
    pub effects: Option<Effects>,
    /// Whose kept instances the call may use (`[instance] session_arg`):
    /// `trace_id`'s when `None`. A replay names its own, so that it never
    /// enters the instance a live run of the trace keeps.
    pub session: Option<String>,
}

pub(crate) struct ToolEntry {
    pub(crate) spec: ToolSpec,
    pub(crate) validator: jsonschema::Validator,
}

pub(crate) enum Exports {
    Tool { pre: ToolPluginPre<HostState>, tools: Vec<ToolEntry> },
    Provider { pre: ProviderPluginPre<HostState> },
    PlanParser { pre: PlanParserPluginPre<HostState> },
}

/// One generation of a loaded plugin. Calls hold an `Arc` to it, so a
/// reload never disturbs a call already running.
pub(crate) struct LoadedPlugin {
    /// Idle instances kept between calls, for plugins whose manifest asks
    /// (`[instance] keep_warm`); dropped with this generation.
    warm: Mutex<Vec<WarmTool>>,
    /// A never-used instance made after a fresh call, off its path, for
    /// the next fresh call to enter; dropped with this generation.
    spare: Mutex<Option<WarmTool>>,
    /// Whether a spare is being made: calls that end meanwhile leave it be.
    making_spare: std::sync::atomic::AtomicBool,
    /// Instances kept for one trace each (`[instance] session_arg`), by
    /// trace id; dropped when the trace's run ends or with this generation.
    sessions: Mutex<HashMap<String, KeptFor>>,
    pub(crate) name: Arc<str>,
    pub(crate) manifest: Manifest,
    pub(crate) sha256: String,
    pub(crate) world: World,
    pub(crate) grants: Arc<Grants>,
    pub(crate) exports: Exports,
    pub(crate) generation: u64,
    pub(crate) from_cache: bool,
    /// What its signature says.
    pub(crate) signature: SignatureStatus,
}

/// A tool plugin's Store and instance, kept for the next call.
struct WarmTool {
    call: CallStore,
    instance: ToolPlugin,
    /// Counts it among the idle instances while it is idle.
    _mark: Option<KeptMark>,
}

/// A fresh call's instance once its call has answered. Dropping it resets
/// its memory in place and frees its slot: work the runtime does after
/// the caller has the answer. What the guest left open through the host
/// (an HTTP body stream, a socket) was ended when the call ended.
pub(crate) struct Ended {
    _instance: WarmTool,
}

/// Idle kept instances per plugin: enough for calls that overlap a little.
const MAX_WARM_PER_PLUGIN: usize = 2;

/// A trace's own kept instance. The async lock is held for a whole call,
/// so a second call of the same trace waits rather than share it.
type Session = Arc<tokio::sync::Mutex<Option<WarmTool>>>;

/// Traces with a kept instance per plugin: each holds a whole guest (tens
/// of MiB for an interpreter), so past this the trace that asked longest
/// ago gives its instance up.
const MAX_SESSIONS_PER_PLUGIN: usize = 8;

/// A trace's kept instance and when a call last asked for it.
struct KeptFor {
    session: Session,
    asked: std::time::Instant,
}

/// What loading needs from the runtime.
pub(crate) struct LoadContext<'a> {
    pub(crate) sandbox: &'a Sandbox,
    pub(crate) config: &'a PluginsConfig,
    pub(crate) cache_dir: &'a Path,
    pub(crate) lock: &'a Mutex<LockFile>,
    pub(crate) secrets: &'a Arc<Secrets>,
    pub(crate) trust: &'a Arc<TrustStore>,
    pub(crate) observer: Option<&'a Arc<dyn WorkObserver>>,
}

/// The manifest path beside a plugin file.
pub(crate) fn manifest_path(file: &Path) -> PathBuf {
    file.with_extension("toml")
}

/// A plugin's files as read once from disk: the component's digest (and
/// its bytes, when they had to be read to find it), and the manifest text
/// and detached signature (if there are any).
pub(crate) struct PluginFiles {
    file: PathBuf,
    bytes: Option<Arc<[u8]>>,
    pub(crate) sha256: String,
    manifest: Option<String>,
    detached: Option<Vec<u8>>,
}

impl PluginFiles {
    /// Reads the manifest, and the component's digest: remembered in
    /// `cache_dir` by the file's identity (see [`digest`](super::digest)),
    /// else hashed from its bytes.
    pub(crate) fn read(file: &Path, cache_dir: &Path) -> Result<Self, LoadError> {
        let identity = FileIdentity::of(&regular_file(file, MAX_COMPONENT_BYTES)?);
        let (bytes, sha256) = match digest::remembered(cache_dir, file, identity) {
            Some(digest) => (None, digest),
            None => {
                let bytes = read_capped(file, MAX_COMPONENT_BYTES)?;
                let digest = sha256(&bytes);
                // Only what was read is remembered: a file written while
                // it was read has another identity by now.
                if regular_file(file, MAX_COMPONENT_BYTES)
                    .is_ok_and(|meta| FileIdentity::of(&meta) == identity)
                {
                    digest::remember(cache_dir, file, identity, &digest);
                }
                (Some(Arc::from(bytes)), digest)
            }
        };
        let manifest = match read_capped(&manifest_path(file), MAX_MANIFEST_BYTES) {
            Ok(bytes) => Some(String::from_utf8(bytes).map_err(|_| LoadError::Io {
                file: manifest_path(file),
                reason: "the manifest is not UTF-8 text".into(),
            })?),
            Err(LoadError::Io { reason, .. }) if reason == NOT_FOUND => None,
            Err(e) => return Err(e),
        };
        let detached = signing::read_detached(file)
            .map_err(|(file, reason)| LoadError::Io { file, reason })?;
        Ok(Self { file: file.to_owned(), bytes, sha256, manifest, detached })
    }

    /// The component's first bytes, for the header and signature checks.
    fn head(&self) -> Result<Vec<u8>, LoadError> {
        let len = signing::HEAD_BYTES;
        if let Some(bytes) = &self.bytes {
            return Ok(bytes.iter().take(len).copied().collect());
        }
        let mut head = Vec::with_capacity(len);
        std::fs::File::open(&self.file)
            .and_then(|f| {
                std::io::Read::read_to_end(&mut std::io::Read::take(f, len as u64), &mut head)
            })
            .map_err(|e| LoadError::Io { file: self.file.clone(), reason: e.to_string() })?;
        Ok(head)
    }

    /// Identifies these exact files (component, manifest, detached
    /// signature), to skip reloads that change nothing.
    pub(crate) fn fingerprint(&self) -> String {
        let manifest = self.manifest.as_deref().unwrap_or_default();
        let signature = self.detached.as_deref().map(sha256).unwrap_or_default();
        sha256(&[self.sha256.as_bytes(), manifest.as_bytes(), signature.as_bytes()].concat())
    }

    /// The manifest, checked to name the file's plugin.
    pub(crate) fn manifest(&self, name: &str, file: &Path) -> Result<Manifest, LoadError> {
        let Some(text) = &self.manifest else {
            return Err(LoadError::MissingManifest {
                file: file.into(),
                manifest: manifest_path(file),
            });
        };
        let manifest = Manifest::parse(text)
            .map_err(|reason| LoadError::BadManifest { file: file.into(), reason })?;
        if manifest.name != name {
            return Err(LoadError::BadManifest {
                file: file.into(),
                reason: format!(
                    "it names the plugin `{}`, but the file is `{name}.wasm`",
                    manifest.name
                ),
            });
        }
        Ok(manifest)
    }
}

/// Largest component file loaded: compiling is not interruptible, so its
/// input is bounded instead.
const MAX_COMPONENT_BYTES: u64 = 128 << 20;
/// Largest manifest read.
const MAX_MANIFEST_BYTES: u64 = 64 << 10;
const NOT_FOUND: &str = "no such file";

/// The metadata of `path`, a regular file of at most `cap` bytes. Anything
/// else (a FIFO would block the loader, a device would never end) is an
/// error naming it.
fn regular_file(path: &Path, cap: u64) -> Result<std::fs::Metadata, LoadError> {
    let io = |reason: String| LoadError::Io { file: path.into(), reason };
    let meta = std::fs::metadata(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => io(NOT_FOUND.into()),
        _ => io(e.to_string()),
    })?;
    if !meta.is_file() {
        return Err(io("not a regular file".into()));
    }
    if meta.len() > cap {
        return Err(io(format!("{} bytes; at most {cap} are loaded", meta.len())));
    }
    Ok(meta)
}

/// Reads a regular file of at most `cap` bytes (see [`regular_file`]).
fn read_capped(path: &Path, cap: u64) -> Result<Vec<u8>, LoadError> {
    let io = |reason: String| LoadError::Io { file: path.into(), reason };
    let meta = regular_file(path, cap)?;
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    std::fs::File::open(path)
        .and_then(|f| std::io::Read::read_to_end(&mut std::io::Read::take(f, cap + 1), &mut bytes))
        .map_err(|e| io(e.to_string()))?;
    if bytes.len() as u64 > cap {
        return Err(io(format!("more than {cap} bytes; at most {cap} are loaded")));
    }
    Ok(bytes)
}

/// The bytes of the component at `file`, checked to be the ones `digest`
/// names (which the lock file admitted).
fn read_component(file: &Path, digest: &str) -> Result<Arc<[u8]>, LoadError> {
    let bytes = read_capped(file, MAX_COMPONENT_BYTES)?;
    if sha256(&bytes) != digest {
        return Err(LoadError::Io {
            file: file.into(),
            reason: "the file changed while it was being loaded".into(),
        });
    }
    Ok(Arc::from(bytes))
}

/// Checks the header: wasm magic, and the component layer.
fn check_header(file: &Path, bytes: &[u8]) -> Result<(), LoadError> {
    if bytes.len() < 8 || &bytes[..4] != b"\0asm" {
        return Err(LoadError::NotWasm { file: file.into() });
    }
    // Bytes 6..8 are the layer: 0 for a core module, 1 for a component.
    if bytes[6..8] == [0, 0] {
        return Err(LoadError::CoreModule { file: file.into() });
    }
    Ok(())
}

/// Loads one plugin. Every failure is a one-line [`LoadError`]. `serving`:
/// an earlier generation answers calls until this one is ready.
pub(crate) async fn load(
    cx: &LoadContext<'_>,
    name: &str,
    file: &Path,
    files: &PluginFiles,
    generation: u64,
    serving: bool,
) -> Result<LoadedPlugin, LoadError> {
    let manifest = files.manifest(name, file)?;
    let sha256 = files.sha256.clone();
    let head = files.head()?;
    check_header(file, &head)?;
    // Before the lock records it and before any compiled code is used: a
    // refused component leaves no trace but its error. Its bytes are read
    // (and hashed, off the async workers) only when its verdict is not
    // remembered.
    let verify = {
        let (trust, cache_dir) = (cx.trust.clone(), cx.cache_dir.to_owned());
        let (file, digest, detached) = (file.to_owned(), sha256.clone(), files.detached.clone());
        let mut bytes = files.bytes.clone();
        move || {
            let signature = trust.check(&cache_dir, &digest, &head, detached.as_deref(), || {
                let read = match bytes.clone() {
                    Some(read) => read,
                    None => read_component(&file, &digest)?,
                };
                bytes = Some(read.clone());
                Ok::<_, LoadError>(read)
            })?;
            Ok((signature, bytes))
        }
    };
    let (signature, bytes) = tokio::task::spawn_blocking(verify).await.unwrap_or_else(|e| {
        Err(LoadError::Io {
            file: file.into(),
            reason: format!("checking its signature failed: {e}"),
        })
    })?;
    if cx.trust.require && !signature.is_trusted() {
        return Err(LoadError::Signature { file: file.into(), status: signature });
    }
    if signature.is_bad() {
        tracing::warn!(plugin = %name, "{}: {signature}", file.display());
    }
    cx.lock.lock().expect("lock file mutex").admit(name, &sha256, &manifest.requests).map_err(
        |grown| LoadError::NeedsApproval { file: file.into(), name: name.into(), grown },
    )?;

    let (engine, fingerprint) = (cx.sandbox.engine.clone(), cx.sandbox.fingerprint.clone());
    let (dir, digest) = (cx.cache_dir.to_owned(), sha256.clone());
    // Read only on a cache miss: a hit needs the digest alone.
    let wasm = {
        let (file, digest) = (files.file.clone(), sha256.clone());
        move || match bytes {
            Some(bytes) => Ok(bytes),
            None => read_component(&file, &digest).map_err(|e| e.to_string()),
        }
    };
    // A large component (a Python tool) compiles for a minute or more on a
    // debug build: whoever reads the log learns why nothing changed yet.
    let compiling = {
        let (plugin, file) = (name.to_owned(), file.to_owned());
        let observer = cx.observer.cloned();
        move |bytes: usize| {
            let meanwhile =
                if serving { "; the previous version serves until it is ready" } else { "" };
            let shown = file.display();
            tracing::info!(plugin = %plugin, "compiling {shown} ({}){meanwhile}", size_text(bytes));
            if let Some(observer) = observer {
                observer.compiling(&plugin, &file, bytes);
            }
        }
    };
    let started = std::time::Instant::now();
    let compiled = tokio::task::spawn_blocking(move || {
        cache::load_or_compile(&engine, &fingerprint, &dir, &digest, wasm, compiling)
    })
    .await
    .unwrap_or_else(|e| Err(format!("the compiler failed: {e}")));
    if let Some(observer) = cx.observer
        && !matches!(compiled, Ok((_, Source::Cache)))
    {
        observer.compiled(name);
    }
    let (component, source) =
        compiled.map_err(|reason| LoadError::Invalid { file: file.into(), reason })?;
    if source == Source::Compiled {
        let took = started.elapsed().as_secs_f64();
        tracing::info!(plugin = %name, "compiled {} in {took:.1} s", file.display());
    }
    let world = contract::inspect(&cx.sandbox.engine, &component)
        .map_err(|source| LoadError::Contract { file: file.into(), source })?;
    let grants = Grants::intersect(&manifest, &cx.config.grant(name), &cx.config.sandbox, |p| {
        cx.config.resolve(p)
    })
    .map_err(|e| LoadError::Grant { file: file.into(), reason: e.to_string() })?;
    let grants = Arc::new(grants);

    let link = |reason: wasmtime::Error| LoadError::Link {
        file: file.into(),
        reason: format!("{reason:#}"),
    };
    let pre = cx.sandbox.linker.instantiate_pre(&component).map_err(link)?;
    let name: Arc<str> = name.into();
    let exports = match world {
        World::ToolPlugin => {
            let pre = ToolPluginPre::new(pre).map_err(link)?;
            let tools = list_tools(cx, &name, &grants, &pre)
                .await
                .map_err(|reason| LoadError::Tools { file: file.into(), reason })?;
            Exports::Tool { pre, tools }
        }
        World::ProviderPlugin => {
            Exports::Provider { pre: ProviderPluginPre::new(pre).map_err(link)? }
        }
        World::PlanParserPlugin => {
            Exports::PlanParser { pre: PlanParserPluginPre::new(pre).map_err(link)? }
        }
    };
    Ok(LoadedPlugin {
        warm: Mutex::new(Vec::new()),
        spare: Mutex::new(None),
        making_spare: std::sync::atomic::AtomicBool::new(false),
        sessions: Mutex::new(HashMap::new()),
        name,
        manifest,
        sha256,
        world,
        grants,
        exports,
        generation,
        from_cache: source == Source::Cache,
        signature,
    })
}

/// A size for people: `840 KB`, `13.2 MB`.
pub(crate) fn size_text(bytes: usize) -> String {
    match bytes {
        b if b < 1_000 => format!("{b} bytes"),
        b if b < 1_000_000 => format!("{} KB", b / 1_000),
        b => format!("{:.1} MB", b as f64 / 1e6),
    }
}

/// Asks the component for its tools, under the same sandbox as a call.
async fn list_tools(
    cx: &LoadContext<'_>,
    plugin: &Arc<str>,
    grants: &Arc<Grants>,
    pre: &ToolPluginPre<HostState>,
) -> Result<Vec<ToolEntry>, String> {
    let site = Site { plugin, tool: "list" };
    let timeout = grants.limits.timeout.min(LIST_TIMEOUT);
    let mut call =
        CallStore::new(cx.sandbox, plugin, grants, cx.secrets, None, site, timeout, false)
            .await
            .map_err(|e| e.to_string())?;
    let (deadline, cancel) = call.limits();
    let list = async {
        let instance = pre.instantiate_async(&mut call.store).await?;
        instance.reson_plugin_tool().call_list(&mut call.store).await
    };
    let specs = CallStore::bounded(deadline, cancel, list)
        .await
        .map_err(|e| format!("listing its tools failed: {}", call.classify(&e, site)))?;
    drop(call);
    if specs.len() > MAX_TOOLS_PER_PLUGIN {
        return Err(format!(
            "it lists {} tools; a plugin may serve at most {MAX_TOOLS_PER_PLUGIN}",
            specs.len()
        ));
    }
    let mut tools: Vec<ToolEntry> = Vec::with_capacity(specs.len());
    for spec in specs {
        let name_ok = !spec.name.is_empty()
            && spec.name.len() <= MAX_TOOL_NAME
            && spec.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            && !spec.name.contains("__");
        if !name_ok {
            return Err(format!(
                "tool {:?}: a tool name must match [a-zA-Z0-9_-]{{1,{MAX_TOOL_NAME}}} without \
                 `__` (reserved for the host's namespaced tools)",
                spec.name.chars().take(MAX_TOOL_NAME).collect::<String>()
            ));
        }
        let bad = |reason: String| format!("tool `{}`: {reason}", spec.name);
        if spec.description.len() > MAX_DESCRIPTION_BYTES {
            return Err(bad(format!(
                "its description has {} bytes; at most {MAX_DESCRIPTION_BYTES} are allowed",
                spec.description.len()
            )));
        }
        if spec.input_schema.len() > MAX_SCHEMA_BYTES {
            return Err(bad(format!(
                "its input schema has {} bytes; at most {MAX_SCHEMA_BYTES} are allowed",
                spec.input_schema.len()
            )));
        }
        // One name to the runtime, whatever its case.
        if tools.iter().any(|t| t.spec.name.eq_ignore_ascii_case(&spec.name)) {
            return Err(bad("listed twice (names differing only by case are one name)".into()));
        }
        let schema: serde_json::Value = serde_json::from_str(&spec.input_schema)
            .map_err(|e| bad(format!("input schema is not JSON: {e}")))?;
        if !schema.is_object() {
            return Err(bad("input schema must be a JSON object".into()));
        }
        let validator = jsonschema::validator_for(&schema)
            .map_err(|e| bad(format!("invalid input schema: {e}")))?;
        tools.push(ToolEntry {
            spec: ToolSpec {
                name: spec.name,
                description: spec.description,
                input_schema: schema.into(),
                plugin: plugin.to_string(),
            },
            validator,
        });
    }
    Ok(tools)
}

/// `text` from a guest, on its way to the model, with every secret
/// redacted: a tool reads what its grant reaches (a project's `.env`, a
/// command's output), and what it returns is the model's next prompt,
/// sent to the provider as it is.
fn scrub(text: String) -> String {
    match reson_text::redact::redact(&text) {
        std::borrow::Cow::Borrowed(_) => text,
        std::borrow::Cow::Owned(redacted) => redacted,
    }
}

impl LoadedPlugin {
    /// Runs `tool` in a fresh instance, or in a kept one when the manifest
    /// asks for `keep_warm` or `keep` says the call asks for its trace's
    /// ([`Self::asks_session`]). `args` has passed the schema. A fresh
    /// instance that answered is left in `ended`, for the caller to drop.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn call_tool(
        &self,
        sandbox: &Sandbox,
        secrets: &Arc<Secrets>,
        tool: &str,
        args: &str,
        keep: bool,
        context: &CallContext,
        ended: &mut Option<Ended>,
    ) -> Result<ToolOutput, CallError> {
        let site = Site { plugin: &self.name, tool };
        let Exports::Tool { pre, .. } = &self.exports else {
            return Err(CallError::Internal {
                plugin: self.name.to_string(),
                tool: tool.into(),
                message: format!("plugin is a {}, not a tool plugin", self.world),
            });
        };
        let timeout = self.grants.limits.timeout;
        let mut session = match keep.then(|| self.session(context)).flatten() {
            Some(session) => Some(match &context.cancel {
                Some(cancel) => tokio::select! {
                    biased;
                    () = cancel.cancelled() => {
                        return Err(CallError::Cancelled {
                            plugin: self.name.to_string(),
                            tool: tool.into(),
                        });
                    }
                    guard = session.lock_owned() => guard,
                },
                None => session.lock_owned().await,
            }),
            None => None,
        };
        let kept = match session.as_mut() {
            Some(kept) => kept.take(),
            None => self.take_warm().or_else(|| self.take_spare()),
        }
        .filter(|idle| idle.call.dirs_unchanged());
        let (mut call, instance) = match kept {
            Some(WarmTool { mut call, instance, _mark: idle }) => {
                let slot =
                    sandbox.slots.acquire(context.cancel.as_ref()).await.ok_or_else(|| {
                        CallError::Cancelled { plugin: self.name.to_string(), tool: tool.into() }
                    })?;
                drop(idle);
                let fuel = sandbox.fuel.then(|| self.grants.limits.fuel.unwrap_or(u64::MAX));
                call.rearm(slot, context.cancel.clone(), timeout, fuel)?;
                (call, instance)
            }
            None => {
                let mut call = CallStore::new(
                    sandbox,
                    &self.name,
                    &self.grants,
                    secrets,
                    context.cancel.clone(),
                    site,
                    timeout,
                    self.manifest.instance.keep_warm || session.is_some(),
                )
                .await?;
                let (deadline, cancel) = call.limits();
                let instance =
                    CallStore::bounded(deadline, cancel, pre.instantiate_async(&mut call.store))
                        .await
                        .map_err(|e| call.classify(&e, site))?;
                (call, instance)
            }
        };
        // A call in a trace uses the trace's browser; any other call one of
        // its own, ended with it. A plugin granted no site never opens one
        // (the browser import refuses it first), so its calls skip this.
        let key = (!self.grants.browser.is_empty()).then(|| match &context.trace_id {
            Some(trace) => SessionKey::Trace { trace: trace.clone(), plugin: self.name.clone() },
            None => SessionKey::fresh_call(),
        });
        call.store.data_mut().browser =
            key.clone().map(|key| Scope { browsers: sandbox.browsers.clone(), key });
        if let Some(effects) = &context.effects {
            effects.begin(&self.name, &self.sha256, tool);
        }
        call.store.data_mut().effects = context.effects.clone();
        let wit_context = wit::CallContext {
            call_id: context.call_id.clone(),
            trace_id: context.trace_id.clone(),
            cwd: self.grants.dirs.first().map(|d| d.guest.clone()),
        };
        let (deadline, cancel) = call.limits();
        let args = args.to_owned();
        let result = CallStore::bounded(
            deadline,
            cancel,
            instance.reson_plugin_tool().call_call(&mut call.store, tool, &args, &wit_context),
        )
        .await;
        if let Some(key) = key.filter(|_| context.trace_id.is_none()) {
            sandbox.browsers.close_key(&key).await;
        }
        call.store.data_mut().browser = None;
        call.store.data_mut().effects = None;
        let result = match result {
            Ok(answer) => {
                // The guest returned normally: its instance can be entered again.
                let warm = WarmTool { call, instance, _mark: None };
                match session.as_mut() {
                    Some(kept) => **kept = Self::keepable(sandbox, warm),
                    None => *ended = self.keep_warm(sandbox, warm),
                }
                answer
            }
            Err(e) => return Err(call.classify(&e, site)),
        };
        match result {
            Ok(out) => self.checked_output(tool, out),
            Err(failure) => Err(CallError::Tool {
                plugin: self.name.to_string(),
                tool: tool.into(),
                failure: match failure {
                    wit::ToolError::InvalidArguments(m) => ToolFailure::InvalidArguments(scrub(m)),
                    wit::ToolError::UnknownTool(m) => ToolFailure::UnknownTool(scrub(m)),
                    wit::ToolError::Denied(m) => ToolFailure::Denied(scrub(m)),
                    wit::ToolError::Failed(m) => ToolFailure::Failed(scrub(m)),
                },
            }),
        }
    }

    /// Whether a fresh call that just ended leaves a spare to be made (see
    /// [`Self::make_spare`]): for a tool plugin that keeps no instance
    /// warm, has none and is making none, where `[sandbox]
    /// spare_instances` is on. Answering yes, it counts one in the making.
    pub(crate) fn wants_spare(&self, sandbox: &Sandbox) -> bool {
        use std::sync::atomic::Ordering;
        sandbox.spares
            && matches!(self.exports, Exports::Tool { .. })
            && !self.manifest.instance.keep_warm
            && self.spare.lock().expect("spare").is_none()
            && !self.making_spare.swap(true, Ordering::AcqRel)
    }

    /// Makes the never-used instance the next fresh call enters (as a
    /// kept instance is entered: re-armed with the call's deadline, cancel
    /// flag and fuel), unless the pool's room for spares is full. Called
    /// once [`Self::wants_spare`] said yes. Its Store notes the granted
    /// directories it opened, so a directory replaced meanwhile makes the
    /// call build a fresh instance instead.
    pub(crate) async fn make_spare(&self, sandbox: &Sandbox, secrets: &Arc<Secrets>) {
        self.build_spare(sandbox, secrets).await;
        self.making_spare.store(false, std::sync::atomic::Ordering::Release);
    }

    async fn build_spare(&self, sandbox: &Sandbox, secrets: &Arc<Secrets>) {
        let Exports::Tool { pre, .. } = &self.exports else { return };
        let Some(mark) = sandbox.slots.spare() else { return };
        let site = Site { plugin: &self.name, tool: "(spare)" };
        let timeout = self.grants.limits.timeout;
        let Ok(mut call) =
            CallStore::idle(sandbox, &self.name, &self.grants, secrets, site, timeout, true)
        else {
            return;
        };
        let (deadline, cancel) = call.limits();
        let made = CallStore::bounded(deadline, cancel, pre.instantiate_async(&mut call.store));
        if let Ok(instance) = made.await {
            *self.spare.lock().expect("spare") =
                Some(WarmTool { call, instance, _mark: Some(mark) });
        }
    }

    fn take_spare(&self) -> Option<WarmTool> {
        self.spare.lock().expect("spare").take()
    }

    /// Idle instances for the next call: kept ones and the spare.
    pub(crate) fn idle_instances(&self) -> usize {
        let spare = usize::from(self.spare.lock().expect("spare").is_some());
        self.warm.lock().expect("warm pool").len() + spare
    }

    /// An idle kept instance, if the plugin keeps them and one is free.
    fn take_warm(&self) -> Option<WarmTool> {
        if !self.manifest.instance.keep_warm {
            return None;
        }
        self.warm.lock().expect("warm pool").pop()
    }

    /// Keeps `warm` for the next call when the plugin asks for that and
    /// [`Self::keepable`] lets it. A plugin that keeps none gets it back as
    /// [`Ended`], for the caller to drop; one the pool has no room for is
    /// dropped here.
    fn keep_warm(&self, sandbox: &Sandbox, mut warm: WarmTool) -> Option<Ended> {
        if !self.manifest.instance.keep_warm {
            warm.call.store.data_mut().end_resources();
            return Some(Ended { _instance: warm });
        }
        let mut pool = self.warm.lock().expect("warm pool");
        if pool.len() < MAX_WARM_PER_PLUGIN
            && let Some(warm) = Self::keepable(sandbox, warm)
        {
            pool.push(warm);
        }
        None
    }

    /// `warm`, idle and giving its call's slot back, if it has used at most
    /// half its memory cap and the host has room for one more idle instance.
    fn keepable(sandbox: &Sandbox, warm: WarmTool) -> Option<WarmTool> {
        // An instance whose memory grew past half its cap is let go before
        // its state makes some later call run out.
        let has_room = warm.call.stderr_has_room() && warm.call.store.data().limiter.has_headroom();
        let mark = sandbox.slots.keep().filter(|_| has_room)?;
        let mut warm = WarmTool { _mark: Some(mark), ..warm };
        warm.call.release_slot();
        Some(warm)
    }

    /// Whether a call with these arguments asks for its trace's kept
    /// instance: the manifest names a `session_arg` and `args` set it `true`.
    pub(crate) fn asks_session(&self, args: &serde_json::Value) -> bool {
        self.manifest
            .instance
            .session_arg
            .as_deref()
            .is_some_and(|arg| args.get(arg) == Some(&serde_json::Value::Bool(true)))
    }

    /// The kept instance of the call's trace (or session), for a call that
    /// [`Self::asks_session`]; made on first use. When
    /// the plugin keeps [`MAX_SESSIONS_PER_PLUGIN`] traces' already, the
    /// one asked for longest ago goes; none when every one is in a call.
    fn session(&self, context: &CallContext) -> Option<Session> {
        let trace = context.session.as_deref().or(context.trace_id.as_deref())?;
        let mut sessions = self.sessions.lock().expect("sessions");
        let now = std::time::Instant::now();
        if let Some(kept) = sessions.get_mut(trace) {
            kept.asked = now;
            return Some(kept.session.clone());
        }
        if sessions.len() >= MAX_SESSIONS_PER_PLUGIN {
            // The trace that asked longest ago and is not in a call gives
            // its instance up: its next `keep` call starts a new one and
            // is told so, where refusing this trace one would tell it
            // "new" at every call.
            let oldest = sessions
                .iter()
                .filter(|(_, kept)| kept.session.try_lock().is_ok())
                .min_by_key(|(_, kept)| kept.asked)
                .map(|(trace, _)| trace.clone())?;
            sessions.remove(&oldest);
        }
        let session = Session::default();
        sessions.insert(trace.to_owned(), KeptFor { session: session.clone(), asked: now });
        Some(session)
    }

    /// Drops the instance kept for `trace`, if any; a call still using it
    /// drops it when it ends.
    pub(crate) fn end_session(&self, trace: &str) {
        self.sessions.lock().expect("sessions").remove(trace);
    }

    /// Traces with a kept instance.
    pub(crate) fn sessions(&self) -> usize {
        self.sessions.lock().expect("sessions").len()
    }

    /// Runs one chat call of a provider plugin in a fresh instance;
    /// `deltas` receives streamed pieces while it runs.
    pub(crate) async fn chat(
        &self,
        sandbox: &Sandbox,
        secrets: &Arc<Secrets>,
        request: &chat::ChatRequest,
        deltas: Option<DeltaSink>,
        cancel: Option<CancellationToken>,
    ) -> Result<Result<chat::ChatResponse, chat::ProviderError>, CallError> {
        let site = Site { plugin: &self.name, tool: "chat" };
        let Exports::Provider { pre } = &self.exports else {
            return Err(CallError::Internal {
                plugin: self.name.to_string(),
                tool: "chat".into(),
                message: format!("plugin is a {}, not a provider plugin", self.world),
            });
        };
        let mut call = CallStore::new(
            sandbox,
            &self.name,
            &self.grants,
            secrets,
            cancel,
            site,
            self.grants.limits.timeout,
            false,
        )
        .await?;
        call.store.data_mut().deltas = deltas;
        let (deadline, cancel) = call.limits();
        let chat = async {
            let instance = pre.instantiate_async(&mut call.store).await?;
            instance.reson_plugin_provider().call_chat(&mut call.store, request).await
        };
        let answer = CallStore::bounded(deadline, cancel, chat)
            .await
            .map_err(|e| call.classify(&e, site))?;
        // A cancel cuts the guest's waits short, and the guest may then
        // still finish before the next epoch tick stops it: a stop asked for
        // during the call wins over an answer that races it.
        if call.store.data().cancelled() {
            return Err(CallError::Cancelled {
                plugin: self.name.to_string(),
                tool: "chat".into(),
            });
        }
        Ok(answer)
    }

    /// Parses `raw` with a plan parser plugin in a fresh instance.
    pub(crate) async fn parse_plan(
        &self,
        sandbox: &Sandbox,
        secrets: &Arc<Secrets>,
        raw: &str,
        goal: &str,
    ) -> Result<Result<plan::Plan, plan::ParseError>, CallError> {
        let site = Site { plugin: &self.name, tool: "parse" };
        let Exports::PlanParser { pre } = &self.exports else {
            return Err(CallError::Internal {
                plugin: self.name.to_string(),
                tool: "parse".into(),
                message: format!("plugin is a {}, not a plan parser plugin", self.world),
            });
        };
        let mut call = CallStore::new(
            sandbox,
            &self.name,
            &self.grants,
            secrets,
            None,
            site,
            self.grants.limits.timeout,
            false,
        )
        .await?;
        let (deadline, cancel) = call.limits();
        let parse = async {
            let instance = pre.instantiate_async(&mut call.store).await?;
            instance.reson_plugin_plan_parser().call_parse(&mut call.store, raw, goal).await
        };
        CallStore::bounded(deadline, cancel, parse).await.map_err(|e| call.classify(&e, site))
    }

    fn checked_output(&self, tool: &str, out: wit::ToolOutput) -> Result<ToolOutput, CallError> {
        let returned = out.text.len()
            + out.long_term_memory.as_ref().map_or(0, String::len)
            + out.images.iter().map(|i| i.data.len() + i.media_type.len()).sum::<usize>();
        let cap = self.grants.limits.output_bytes;
        if returned as u64 > cap {
            return Err(CallError::LimitExceeded {
                plugin: self.name.to_string(),
                tool: tool.into(),
                limit: Limit::Output { returned: returned as u64, bytes: cap },
            });
        }
        Ok(ToolOutput {
            text: scrub(out.text),
            long_term_memory: out.long_term_memory.map(scrub),
            include_output_only_once: out.include_output_only_once,
            images: out
                .images
                .into_iter()
                .map(|i| Image { media_type: i.media_type, data: i.data })
                .collect(),
        })
    }

    pub(crate) fn tools(&self) -> &[ToolEntry] {
        match &self.exports {
            Exports::Tool { tools, .. } => tools,
            _ => &[],
        }
    }
}
