//! The plugin runtime: the catalog of loaded plugins, tool calls through
//! it, and atomic replacement of single plugins on reload.

use super::engine::Sandbox;
use super::error::{CallError, LoadError};
use super::loader::{self, CallContext, LoadContext, LoadedPlugin, ToolOutput, ToolSpec};
use super::lock::LockFile;
use super::signing::{SignatureStatus, SigningError, TrustStore};
use crate::capability::browser::SessionKey;
use crate::capability::{DeltaSink, Secrets};
use crate::config::PluginsConfig;
use crate::contract::World;
use crate::contract::bindings::plan_parser::exports::reson::plugin::plan_parser as plan;
use crate::contract::bindings::provider::reson::plugin::chat_types as chat;
use crate::policy::Grants;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use tokio_util::sync::CancellationToken;

pub use crate::observer::WorkObserver;

/// Where the runtime finds and keeps things.
#[derive(Clone)]
pub struct Options {
    /// The user's plugin settings (grants, sandbox settings, secrets).
    pub config: PluginsConfig,
    /// Directory of `<name>.wasm` + `<name>.toml` pairs.
    pub plugins_dir: PathBuf,
    /// Directory for compiled code, and for the files of the host's
    /// browsers (`browser/`).
    pub cache_dir: PathBuf,
    /// The lock file.
    pub lock_file: PathBuf,
    /// Who hears of slow work (compiles, browser starts), if anyone.
    pub observer: Option<Arc<dyn WorkObserver>>,
}

impl std::fmt::Debug for Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Options")
            .field("config", &self.config)
            .field("plugins_dir", &self.plugins_dir)
            .field("cache_dir", &self.cache_dir)
            .field("lock_file", &self.lock_file)
            .field("observer", &self.observer.is_some())
            .finish()
    }
}

impl Options {
    /// Options from a config, with defaults for what it leaves unset: the
    /// plugins directory `plugins/` beside the config, the cache under the
    /// user's cache directory, and `reson.lock` in the plugins directory.
    pub fn from_config(config: impl Into<PluginsConfig>) -> Self {
        let config = config.into();
        let plugins_dir = config
            .plugins_dir
            .as_deref()
            .map_or_else(|| config.resolve(Path::new("plugins")), |p| config.resolve(p));
        let cache_dir =
            config.cache_dir.as_deref().map_or_else(default_cache_dir, |p| config.resolve(p));
        let lock_file = config
            .lock_file
            .as_deref()
            .map_or_else(|| plugins_dir.join("reson.lock"), |p| config.resolve(p));
        Self { config, plugins_dir, cache_dir, lock_file, observer: None }
    }
}

fn default_cache_dir() -> PathBuf {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("reson").join("compiled")
}

/// Why the runtime could not start.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The wasmtime engine could not be set up.
    #[error("cannot set up the sandbox: {0}")]
    Engine(String),
    /// The lock file is unreadable.
    #[error("cannot read lock file {0}")]
    Lock(String),
    /// The plugins directory cannot be read.
    #[error("cannot read plugins directory {}: {source}", path.display())]
    PluginsDir {
        /// The directory.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The plugins directory does not exist.
    #[error(
        "no plugins directory at {}: `reson init` sets up one with the bundled plugins (in a checkout, `bash plugins/build.sh {}` builds them there), or point `--plugins-dir` (or `plugins_dir` in reson.toml) at one",
        path.display(), path.display()
    )]
    NoPluginsDir {
        /// The directory.
        path: PathBuf,
    },
    /// A key `[plugins] trusted_keys` names cannot be read.
    #[error("cannot read a trusted key: {0}")]
    TrustedKey(#[from] SigningError),
    /// No plugin of that name is loaded.
    #[error("no plugin named `{0}`")]
    NoSuchPlugin(String),
    /// Setting up the directory watcher failed.
    #[error("cannot watch the plugins directory: {0}")]
    Watch(String),
    /// Writing a file failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// State of one plugin in `reson plugins list`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", content = "error", rename_all = "kebab-case")]
pub enum PluginStatus {
    /// Loaded and serving.
    Ready,
    /// Turned off in the config.
    Disabled,
    /// Did not load; nothing is served.
    Failed(String),
    /// The newest file did not load; the previous version keeps serving.
    Stale(String),
}

/// What the runtime knows about one plugin.
#[derive(Debug, Clone, Serialize)]
pub struct PluginInfo {
    /// Plugin name (the file stem).
    pub name: String,
    /// The plugin file.
    pub file: PathBuf,
    /// Its version, from the manifest of the serving generation.
    pub version: Option<String>,
    /// Its description.
    pub description: Option<String>,
    /// The world it implements.
    pub world: Option<World>,
    /// Tools it serves (granted ones it owns).
    pub tools: Vec<String>,
    /// Tools it lists that the host or another plugin serves instead.
    pub refused_tools: Vec<RefusedTool>,
    /// SHA-256 of the serving file.
    pub sha256: Option<String>,
    /// What it may do.
    pub grants: Option<Grants>,
    /// Increases with every successful (re)load.
    pub generation: u64,
    /// Whether the serving generation came from the compiled-code cache.
    pub from_cache: bool,
    /// Idle instances for the next call: kept ones (`[instance]
    /// keep_warm`) and the spare made ahead (`[sandbox] spare_instances`).
    pub idle_instances: usize,
    /// Traces with an instance of their own (`[instance] session_arg`).
    pub trace_sessions: usize,
    /// What the serving generation's signature says.
    pub signature: Option<SignatureStatus>,
    /// Ready, disabled, failed or stale.
    pub status: PluginStatus,
}

/// Tool names the host serves itself. No plugin may serve them, whether
/// the built-in exists yet or not, so that adding one never changes who
/// answers a name.
pub const RESERVED_TOOL_NAMES: &[&str] = &[
    "goal",
    "agent",
    "evaluate",
    "skill",
    "experience",
    "get_experience",
    "knowledge_save",
    "knowledge_search",
    "ask_human",
    "lsp_diagnostics",
];

/// A tool a plugin lists but does not serve, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RefusedTool {
    /// The tool name.
    pub name: String,
    /// Why the plugin does not serve it.
    pub reason: String,
}

#[derive(Clone)]
struct Slot {
    file: PathBuf,
    active: Option<Arc<LoadedPlugin>>,
    status: PluginStatus,
    /// Digest of wasm + manifest last attempted, to skip no-op reloads.
    attempted: Option<String>,
    /// Tools it lists that another plugin or the host serves.
    refused: Vec<RefusedTool>,
    /// Its newest file asks for more than the lock file allows: tried again
    /// when the lock file changes (`reson plugins accept` in another process).
    held_back: bool,
}

/// An immutable snapshot; replaced whole on every change.
#[derive(Clone, Default)]
struct Catalog {
    slots: BTreeMap<String, Slot>,
    tools: HashMap<String, (Arc<LoadedPlugin>, usize)>,
}

/// Who serves a tool name that one or more plugins list.
enum Claim {
    Owner(String),
    Refused(String),
}

impl Catalog {
    /// Rebuilds the tool index. A name, once served, keeps its server: the
    /// plugin the lock file records for it (or, failing that, the one that
    /// served it before this change) keeps it, even while that plugin is
    /// removed, disabled or failing; a name nobody served goes to
    /// its only claimant; two new claimants at once both wait for the user.
    /// Newcomers are refused with a reason naming the owner. Names that
    /// differ only by ASCII case are one name: a model, a rule or a reader
    /// of an approval prompt would take `Read` for `read`.
    fn reindex(&mut self, previous: &Catalog, lock: &Mutex<LockFile>) {
        let mut claims: BTreeMap<String, Vec<(String, usize)>> = BTreeMap::new();
        for (name, slot) in &mut self.slots {
            slot.refused.clear();
            let Some(plugin) = &slot.active else { continue };
            for (i, tool) in plugin.tools().iter().enumerate() {
                if plugin.grants.allows_tool(&tool.spec.name) {
                    let key = tool.spec.name.to_ascii_lowercase();
                    claims.entry(key).or_default().push((name.clone(), i));
                }
            }
        }
        let served_before: HashMap<String, String> = previous
            .tools
            .iter()
            .map(|(tool, (plugin, _))| (tool.to_ascii_lowercase(), plugin.name.to_string()))
            .collect();
        let mut lock = lock.lock().expect("lock file mutex");
        let mut tools = HashMap::new();
        let mut refusals: Vec<(String, RefusedTool)> = Vec::new();
        for (key, claimants) in &claims {
            let before = served_before.get(key).map(String::as_str);
            let claim = self.claim(key, claimants, lock.owner(key), before);
            let spelling = |plugin: &str, index: usize| {
                let loaded = self.slots[plugin].active.as_ref().expect("claimants are active");
                loaded.tools()[index].spec.name.clone()
            };
            for (plugin, index) in claimants {
                let tool = spelling(plugin, *index);
                match &claim {
                    Claim::Owner(owner) if owner == plugin => {
                        let loaded =
                            self.slots[plugin].active.clone().expect("claimants are active");
                        tools.insert(tool, (loaded, *index));
                    }
                    Claim::Owner(owner) => {
                        let served = claimants
                            .iter()
                            .find(|(c, _)| c == owner)
                            .map_or_else(|| tool.clone(), |(c, i)| spelling(c, *i));
                        let same = if served == tool {
                            String::new()
                        } else {
                            format!(" as `{served}` (names differing only by case are one name)")
                        };
                        refusals.push((
                            plugin.clone(),
                            RefusedTool {
                                reason: format!(
                                    "tool `{tool}` is already served by plugin `{owner}`{same}; \
                                     `reson plugins accept {plugin}` would hand it over"
                                ),
                                name: tool,
                            },
                        ));
                    }
                    Claim::Refused(reason) => refusals
                        .push((plugin.clone(), RefusedTool { name: tool, reason: reason.clone() })),
                }
            }
        }
        for (plugin, refused) in refusals {
            tracing::warn!(plugin = %plugin, tool = %refused.name, "{}", refused.reason);
            if let Some(slot) = self.slots.get_mut(&plugin) {
                slot.refused.push(refused);
            }
        }
        lock.record_owners(tools.iter().map(|(tool, (plugin, _))| (tool.as_str(), &*plugin.name)));
        self.tools = tools;
    }

    /// Why a tool some plugin lists is not served: left out by the user's
    /// grant, or refused for its name.
    fn not_served(&self, tool: &str) -> Option<CallError> {
        self.slots.iter().find_map(|(name, slot)| {
            let denied = |reason: String| CallError::Denied {
                plugin: name.clone(),
                tool: tool.into(),
                reason,
            };
            if let Some(refused) = slot.refused.iter().find(|r| r.name == tool) {
                return Some(denied(refused.reason.clone()));
            }
            let plugin = slot.active.as_ref()?;
            let listed = plugin.tools().iter().any(|t| t.spec.name == tool);
            (listed && !plugin.grants.allows_tool(tool))
                .then(|| denied("the config's `tools` list for this plugin leaves it out".into()))
        })
    }

    /// Decides who serves `tool` (a name in lower case) and every other
    /// spelling of it.
    fn claim(
        &self,
        tool: &str,
        claimants: &[(String, usize)],
        recorded: Option<&str>,
        before: Option<&str>,
    ) -> Claim {
        if RESERVED_TOOL_NAMES.iter().any(|r| r.eq_ignore_ascii_case(tool)) {
            return Claim::Refused(format!(
                "tool `{tool}` is a built-in of the host; no plugin may serve it"
            ));
        }
        let claims = |plugin: &str| claimants.iter().any(|(c, _)| c == plugin);
        for holder in recorded.into_iter().chain(before) {
            match self.slots.get(holder) {
                Some(_) if claims(holder) => return Claim::Owner(holder.to_owned()),
                // Loaded, but no longer lists the tool: the name is free.
                Some(slot) if slot.active.is_some() => {}
                // Removed, disabled or not loading: nobody takes its names
                // meanwhile, or an update that deletes before it writes, or
                // breaking a plugin, would be a way to steal them. Only the
                // user hands them over.
                _ => {
                    return Claim::Refused(format!(
                        "tool `{tool}` belongs to plugin `{holder}`, which is not loaded \
                         (removed, disabled or failing); `reson plugins accept NAME` hands it \
                         to another plugin"
                    ));
                }
            }
        }
        match claimants {
            [(only, _)] => Claim::Owner(only.clone()),
            _ => {
                let names: Vec<String> =
                    claimants.iter().map(|(plugin, _)| format!("`{plugin}`")).collect();
                Claim::Refused(format!(
                    "tool `{tool}` is listed by plugins {} at once and none served it before, \
                     so none serves it: remove one, leave it out of the others' `tools` grant, \
                     or choose one with `reson plugins accept NAME`",
                    names.join(" and ")
                ))
            }
        }
    }
}

impl Catalog {
    /// Whether `other` serves the same: the same generations, statuses and
    /// tool owners. A reload that changed nothing (a file rewritten with
    /// the same bytes) is no change to announce.
    fn serves_as(&self, other: &Catalog) -> bool {
        let slot = |s: &Slot| {
            (s.active.as_ref().map(|p| p.generation), s.status.clone(), s.refused.clone())
        };
        let tools = |c: &Catalog| {
            let mut tools: Vec<(String, u64, usize)> =
                c.tools.iter().map(|(t, (p, i))| (t.clone(), p.generation, *i)).collect();
            tools.sort();
            tools
        };
        self.slots.len() == other.slots.len()
            && self
                .slots
                .iter()
                .zip(&other.slots)
                .all(|((a, x), (b, y))| a == b && slot(x) == slot(y))
            && tools(self) == tools(other)
    }

    fn apply(&mut self, name: String, outcome: Outcome) {
        let (file, attempted, result) = match outcome {
            Outcome::Unchanged => return,
            Outcome::Removed => {
                if self.slots.remove(&name).is_some() {
                    tracing::info!(plugin = %name, "unloaded");
                }
                return;
            }
            Outcome::Disabled(file) => {
                let slot = Slot {
                    file,
                    active: None,
                    status: PluginStatus::Disabled,
                    attempted: None,
                    refused: Vec::new(),
                    held_back: false,
                };
                self.slots.insert(name, slot);
                return;
            }
            Outcome::Loaded(file, attempted, result) => (file, attempted, *result),
        };
        let slot = match result {
            Ok(plugin) => {
                tracing::info!(plugin = %name, generation = plugin.generation, cached = plugin.from_cache, "loaded");
                Slot {
                    file,
                    active: Some(Arc::new(plugin)),
                    status: PluginStatus::Ready,
                    attempted,
                    refused: Vec::new(),
                    held_back: false,
                }
            }
            Err(err) => {
                tracing::error!(plugin = %name, "{err}");
                // The last good generation, if any, keeps serving.
                let active = self.slots.get(&name).and_then(|s| s.active.clone());
                let held_back = matches!(err, LoadError::NeedsApproval { .. });
                let status = match active {
                    Some(_) => PluginStatus::Stale(err.to_string()),
                    None => PluginStatus::Failed(err.to_string()),
                };
                Slot { file, active, status, attempted, refused: Vec::new(), held_back }
            }
        };
        self.slots.insert(name, slot);
    }
}

struct Inner {
    sandbox: Sandbox,
    options: Options,
    secrets: Arc<Secrets>,
    trust: Arc<TrustStore>,
    lock: Mutex<LockFile>,
    catalog: RwLock<Arc<Catalog>>,
    /// Serialises reloads; calls never take it.
    reload: tokio::sync::Mutex<()>,
    generation: AtomicU64,
    /// Counts the reloads that changed what is served, for those who
    /// follow the tool list.
    changed: tokio::sync::watch::Sender<u64>,
}

/// Loads plugins from a directory and calls their tools, each call in a
/// fresh sandboxed instance. Cheap to clone; clones share everything.
#[derive(Clone)]
pub struct Runtime {
    inner: Arc<Inner>,
}

impl Runtime {
    /// Sets up the sandbox and loads every plugin in the directory. A
    /// plugin that fails to load is reported in [`Runtime::plugins`]; the
    /// others load regardless.
    pub async fn open(options: Options) -> Result<Self, RuntimeError> {
        if !options.plugins_dir.is_dir() {
            return Err(RuntimeError::NoPluginsDir { path: options.plugins_dir });
        }
        // Browsers keep their files beside the compiled code; what a host
        // killed outright left there goes now.
        let browser_dir = options.cache_dir.join("browser");
        let functions_dir = options.cache_dir.join("functions");
        let sandbox = Sandbox::new(
            &options.config.sandbox,
            functions_dir,
            browser_dir,
            options.observer.clone(),
        )
        .map_err(|e| RuntimeError::Engine(format!("{e:#}")))?;
        let lock = LockFile::open(&options.lock_file).map_err(RuntimeError::Lock)?;
        let secrets = Arc::new(Secrets::from_config(&options.config));
        let trust = Arc::new(TrustStore::from_config(&options.config)?);
        let runtime = Self {
            inner: Arc::new(Inner {
                sandbox,
                options,
                secrets,
                trust,
                lock: Mutex::new(lock),
                catalog: RwLock::new(Arc::default()),
                reload: tokio::sync::Mutex::new(()),
                generation: AtomicU64::new(0),
                changed: tokio::sync::watch::Sender::new(0),
            }),
        };
        runtime.rescan().await?;
        Ok(runtime)
    }

    /// The options the runtime was opened with.
    pub fn options(&self) -> &Options {
        &self.inner.options
    }

    fn catalog(&self) -> Arc<Catalog> {
        self.inner.catalog.read().expect("catalog lock").clone()
    }

    /// Every plugin file found, loaded or not, by name.
    pub fn plugins(&self) -> Vec<PluginInfo> {
        let catalog = self.catalog();
        catalog
            .slots
            .iter()
            .map(|(name, slot)| {
                let active = slot.active.as_deref();
                PluginInfo {
                    name: name.clone(),
                    file: slot.file.clone(),
                    version: active.map(|p| p.manifest.version.clone()),
                    description: active.map(|p| p.manifest.description.clone()),
                    world: active.map(|p| p.world),
                    tools: active
                        .map(|p| {
                            p.tools()
                                .iter()
                                .map(|t| t.spec.name.clone())
                                .filter(|t| {
                                    catalog
                                        .tools
                                        .get(t)
                                        .is_some_and(|(owner, _)| owner.name == p.name)
                                })
                                .collect()
                        })
                        .unwrap_or_default(),
                    refused_tools: slot.refused.clone(),
                    sha256: active.map(|p| p.sha256.clone()),
                    grants: active.map(|p| (*p.grants).clone()),
                    generation: active.map_or(0, |p| p.generation),
                    from_cache: active.is_some_and(|p| p.from_cache),
                    idle_instances: active.map_or(0, LoadedPlugin::idle_instances),
                    trace_sessions: active.map_or(0, LoadedPlugin::sessions),
                    signature: active.map(|p| p.signature.clone()),
                    status: slot.status.clone(),
                }
            })
            .collect()
    }

    /// The tools on offer, sorted by name.
    pub fn tools(&self) -> Vec<ToolSpec> {
        let catalog = self.catalog();
        let mut tools: Vec<ToolSpec> =
            catalog.tools.iter().map(|(_, (plugin, i))| plugin.tools()[*i].spec.clone()).collect();
        tools.sort_by(|a, b| a.name.cmp(&b.name));
        tools
    }

    /// Calls a tool: lookup (a tool the grant leaves out, or whose name
    /// another plugin serves, is refused), schema check of `args` (a JSON
    /// object), then a fresh instance (waiting for a free instance slot
    /// when every one is busy).
    pub async fn call_tool(
        &self,
        name: &str,
        args: &str,
        context: &CallContext,
    ) -> Result<ToolOutput, CallError> {
        let catalog = self.catalog();
        let Some((plugin, index)) = catalog.tools.get(name) else {
            return Err(catalog.not_served(name).unwrap_or_else(|| CallError::UnknownTool {
                name: name.into(),
                available: self.tools().into_iter().map(|t| t.name).collect(),
            }));
        };
        let invalid = |message: String| CallError::InvalidArguments { tool: name.into(), message };
        let value: serde_json::Value = serde_json::from_str(args)
            .map_err(|e| invalid(format!("arguments are not valid JSON: {e}")))?;
        let validator = &plugin.tools()[*index].validator;
        // Most calls are valid, and a plain check of those costs a fraction
        // of collecting what is wrong.
        if !validator.is_valid(&value) {
            let errors: Vec<String> = validator
                .iter_errors(&value)
                .map(|e| {
                    let at = e.instance_path.to_string();
                    if at.is_empty() { e.to_string() } else { format!("at {at}: {e}") }
                })
                .collect();
            return Err(invalid(errors.join("; ")));
        }
        let plugin = plugin.clone();
        let keep = plugin.asks_session(&value);
        let sandbox = &self.inner.sandbox;
        let mut ended = None;
        let output = plugin
            .call_tool(sandbox, &self.inner.secrets, name, args, keep, context, &mut ended)
            .await;
        // Spawned from a task, the spare's maker runs on the same thread
        // once the caller waits (tokio's next-task slot): the ended
        // instance is dropped (its memory reset) and the spare built where
        // the call ran, with its caches warm, after the caller has its
        // answer and not in the next call's wait. A caller outside any
        // task (`block_on`) would send it to another thread, where a spare
        // was measured to slow calls back to back (27.9 against 24.4 µs):
        // none is made there. Without a spare to make, the ended instance
        // is dropped here: a task for it alone cost more than it saved
        // when many callers share the workers.
        if !keep && tokio::task::try_id().is_some() && plugin.wants_spare(sandbox) {
            let inner = self.inner.clone();
            tokio::spawn(async move {
                drop(ended);
                plugin.make_spare(&inner.sandbox, &inner.secrets).await;
            });
        }
        output
    }

    /// The loaded generation of `plugin`, or why there is none.
    fn active(&self, plugin: &str, tool: &str) -> Result<Arc<LoadedPlugin>, CallError> {
        let catalog = self.catalog();
        if let Some(loaded) = catalog.slots.get(plugin).and_then(|s| s.active.clone()) {
            return Ok(loaded);
        }
        let message = match catalog.slots.get(plugin).map(|s| &s.status) {
            Some(PluginStatus::Failed(e)) => e.clone(),
            Some(PluginStatus::Disabled) => "disabled in the config".into(),
            _ => format!("no plugin `{plugin}` in {}", self.inner.options.plugins_dir.display()),
        };
        Err(CallError::Internal { plugin: plugin.into(), tool: tool.into(), message })
    }

    /// Calls the provider plugin `plugin` once.
    pub async fn chat(
        &self,
        plugin: &str,
        request: &chat::ChatRequest,
        deltas: Option<DeltaSink>,
        cancel: Option<CancellationToken>,
    ) -> Result<Result<chat::ChatResponse, chat::ProviderError>, CallError> {
        self.active(plugin, "chat")?
            .chat(&self.inner.sandbox, &self.inner.secrets, request, deltas, cancel)
            .await
    }

    /// Parses a plan with the plan parser plugin `plugin`.
    pub async fn parse_plan(
        &self,
        plugin: &str,
        raw: &str,
        goal: &str,
    ) -> Result<Result<plan::Plan, plan::ParseError>, CallError> {
        self.active(plugin, "parse")?
            .parse_plan(&self.inner.sandbox, &self.inner.secrets, raw, goal)
            .await
    }

    /// Ends the browsers of `trace` (one per plugin that used one): their
    /// Chromium processes and throwaway profiles. The runner calls it when
    /// a run ends; a later call in the trace starts a fresh browser.
    pub async fn close_browser(&self, trace: &str) {
        self.inner.sandbox.browsers.close_trace(trace).await;
    }

    /// Makes ready, in the background, what the first calls of a run of
    /// `trace` that offers `tools` would otherwise wait for, for each
    /// plugin that serves one of them: the trace's browser where the plugin
    /// is granted sites to browse (Chromium, its first page), the command
    /// jail where it is granted commands (see [`Jail::prepare`]). The
    /// runner calls it when such a run starts; [`Self::end_trace`] ends the
    /// browsers as usual. Outside a tokio runtime it does nothing.
    ///
    /// [`Jail::prepare`]: crate::jail::Jail::prepare
    pub fn prepare_run(&self, trace: &str, tools: &[String]) {
        for slot in self.catalog().slots.values() {
            let Some(plugin) = &slot.active else { continue };
            let offered = plugin.tools().iter().any(|t| tools.contains(&t.spec.name));
            if !offered {
                continue;
            }
            if plugin.grants.runs_commands()
                && let Some(jail) = plugin.grants.jail()
            {
                jail.prepare();
                // The jail of a command in the default working directory
                // (the first grant), for the run's first command to start in.
                let cwd = plugin.grants.dirs.first().and_then(|d| d.host.canonicalize().ok());
                let cwd = cwd.unwrap_or_else(|| PathBuf::from(crate::jail::PRIVATE_TMP));
                let spec = plugin.grants.jail_spec(cwd);
                if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                    runtime.spawn(async move {
                        jail.make_ahead(&spec, Path::new("/bin/sh")).await;
                    });
                }
            }
            if !plugin.grants.browser.is_empty() {
                let key =
                    SessionKey::Trace { trace: trace.to_owned(), plugin: plugin.name.clone() };
                self.inner.sandbox.browsers.prepare(
                    key,
                    plugin.name.clone(),
                    plugin.grants.clone(),
                );
            }
        }
    }

    /// Ends what the plugins keep for `trace`: its browsers (see
    /// [`Self::close_browser`]) and the instances kept for it. The runner
    /// calls it when a run ends.
    pub async fn end_trace(&self, trace: &str) {
        for slot in self.catalog().slots.values() {
            if let Some(active) = &slot.active {
                active.end_session(trace);
            }
        }
        self.close_browser(trace).await;
    }

    /// Ends every browser this runtime started.
    pub async fn close_browsers(&self) {
        self.inner.sandbox.browsers.close_all().await;
    }

    /// Re-reads the whole plugins directory: new and changed files load,
    /// removed ones unload, unchanged ones are left alone.
    pub async fn rescan(&self) -> Result<(), RuntimeError> {
        let dir = &self.inner.options.plugins_dir;
        let mut names: Vec<String> = Vec::new();
        match std::fs::read_dir(dir) {
            Ok(entries) => {
                for entry in entries {
                    let path = entry?.path();
                    if let Some(name) = plugin_name(&path) {
                        names.push(name);
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => return Err(RuntimeError::PluginsDir { path: dir.clone(), source }),
        }
        let known: Vec<String> = self.catalog().slots.keys().cloned().collect();
        let mut affected: Vec<String> = known.into_iter().filter(|n| !names.contains(n)).collect();
        affected.extend(names);
        self.reload(&affected).await;
        Ok(())
    }

    /// Reloads the named plugins, concurrently. Each is validated and
    /// compiled off the call path, then swapped in atomically: calls
    /// already running finish on the old generation. A failed load keeps
    /// the previous generation serving. A plugin whose file is gone unloads.
    pub async fn reload(&self, names: &[String]) {
        let _serial = self.inner.reload.lock().await;
        // Another process may have accepted a plugin since the last reload.
        self.inner.lock.lock().expect("lock file mutex").refresh();
        let before = self.catalog();
        let dir = &self.inner.options.plugins_dir;
        let config = &self.inner.options.config;
        let cx = LoadContext {
            sandbox: &self.inner.sandbox,
            config,
            cache_dir: &self.inner.options.cache_dir,
            lock: &self.inner.lock,
            secrets: &self.inner.secrets,
            trust: &self.inner.trust,
            observer: self.inner.options.observer.as_ref(),
        };
        let (cx, previous) = (&cx, &before);
        // Compiles run on the blocking pool, so a cold start compiles in
        // parallel and no async worker waits on the compiler.
        let outcomes = futures::future::join_all(names.iter().map(|name| async move {
            let slot = previous.slots.get(name);
            let attempted = slot.and_then(|s| s.attempted.as_deref());
            let serving = slot.is_some_and(|s| s.active.is_some());
            let file = dir.join(format!("{name}.wasm"));
            let generation = &self.inner.generation;
            (name.clone(), load_outcome(cx, name, file, attempted, serving, generation).await)
        }))
        .await;

        let mut next = (*self.catalog()).clone();
        for (name, outcome) in outcomes {
            next.apply(name, outcome);
        }
        next.reindex(&before, &self.inner.lock);
        let changed = !next.serves_as(&before);
        let replaced = std::mem::replace(
            &mut *self.inner.catalog.write().expect("catalog lock"),
            Arc::new(next),
        );
        if changed {
            self.inner.changed.send_modify(|n| *n += 1);
        }
        // The last hold on a replaced generation frees its code: unmapping
        // tens of megabytes for a Python tool. That is nobody's wait.
        tokio::task::spawn_blocking(move || drop((replaced, before)));
    }

    /// Ticks after every reload that changed what is served: a plugin
    /// added, replaced, removed, held back or failing, or a tool handed to
    /// another plugin. A file rewritten with the same bytes does not tick.
    pub fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.inner.changed.subscribe()
    }

    /// Accepts a plugin as it is now: one held back because it changed and
    /// asks for more, or one whose tool names another plugin serves (they
    /// are handed to it). Records it in the lock file and loads it.
    pub async fn accept(&self, name: &str) -> Result<(), RuntimeError> {
        let file = self.inner.options.plugins_dir.join(format!("{name}.wasm"));
        if !file.exists() {
            return Err(RuntimeError::NoSuchPlugin(name.into()));
        }
        let bad = |e: LoadError| RuntimeError::Lock(e.to_string());
        let files = loader::PluginFiles::read(&file, &self.inner.options.cache_dir).map_err(bad)?;
        let manifest = files.manifest(name, &file).map_err(bad)?;
        self.inner.lock.lock().expect("lock file mutex").accept(
            name,
            &files.sha256,
            &manifest.requests,
        )?;
        self.forget_attempt(name).await;
        self.reload(&[name.to_owned()]).await;
        let listed: Vec<String> = self
            .catalog()
            .slots
            .get(name)
            .and_then(|slot| slot.active.as_ref())
            .map(|p| p.tools().iter().map(|t| t.spec.name.clone()).collect())
            .unwrap_or_default();
        if !listed.is_empty() {
            self.inner.lock.lock().expect("lock file mutex").transfer(name, &listed)?;
            self.reload(&[]).await;
        }
        Ok(())
    }

    /// Loads again the plugins held back for asking more than the lock
    /// file allowed: the watcher calls it when the lock file changes, so
    /// that `reson plugins accept` in another process counts here too.
    pub(crate) async fn retry_held_back(&self) {
        let held: Vec<String> = self
            .catalog()
            .slots
            .iter()
            .filter(|(_, slot)| slot.held_back)
            .map(|(name, _)| name.clone())
            .collect();
        if held.is_empty() {
            return;
        }
        for name in &held {
            self.forget_attempt(name).await;
        }
        self.reload(&held).await;
    }

    async fn forget_attempt(&self, name: &str) {
        // A reload running meanwhile (the watcher's) would otherwise replace
        // the catalog with one that still remembers the attempt, or this
        // would put back a catalog from before that reload.
        let _serial = self.inner.reload.lock().await;
        let mut next = (*self.catalog()).clone();
        if let Some(slot) = next.slots.get_mut(name) {
            slot.attempted = None;
        }
        *self.inner.catalog.write().expect("catalog lock") = Arc::new(next);
    }
}

enum Outcome {
    Unchanged,
    Removed,
    Disabled(PathBuf),
    Loaded(PathBuf, Option<String>, Box<Result<LoadedPlugin, LoadError>>),
}

/// Decides what to do about one plugin and, if it changed, loads it.
async fn load_outcome(
    cx: &LoadContext<'_>,
    name: &str,
    file: PathBuf,
    previous: Option<&str>,
    serving: bool,
    generation: &AtomicU64,
) -> Outcome {
    if !file.exists() {
        return Outcome::Removed;
    }
    if !cx.config.grant(name).enabled {
        return Outcome::Disabled(file);
    }
    if !valid_plugin_name(name) {
        return Outcome::Loaded(file.clone(), None, Box::new(Err(LoadError::BadName { file })));
    }
    let files = match loader::PluginFiles::read(&file, cx.cache_dir) {
        Ok(files) => files,
        Err(e) => return Outcome::Loaded(file, None, Box::new(Err(e))),
    };
    let fp = files.fingerprint();
    if Some(fp.as_str()) == previous {
        return Outcome::Unchanged;
    }
    let next = generation.fetch_add(1, Ordering::Relaxed) + 1;
    let loaded = loader::load(cx, name, &file, &files, next, serving).await;
    Outcome::Loaded(file, Some(fp), Box::new(loaded))
}

/// Whether `name` may name a plugin: it shows up in tool errors, logs and
/// terminals, so it is kept to letters, digits, `_`, `-` and `.`.
fn valid_plugin_name(name: &str) -> bool {
    name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

/// The plugin a path in the plugins directory belongs to (its component,
/// manifest or detached signature), if any.
pub(crate) fn plugin_name(path: &Path) -> Option<String> {
    let ext = path.extension()?.to_str()?;
    let stem = path.file_stem()?.to_str()?;
    let stem = match ext {
        "wasm" | "toml" => stem,
        "sig" => stem.strip_suffix(".wasm")?,
        _ => return None,
    };
    (!stem.starts_with('.') && stem != "reson").then(|| stem.to_owned())
}
