//! The sections of `reson.toml` the sandbox reads: where plugins live, the
//! engine-wide `[sandbox]` settings, which plugin signatures are trusted
//! (`[plugins] require_signature`, `trusted_keys`), what each plugin is
//! granted (`[plugins.NAME]`), and `[secrets]`.
//!
//! Nothing here can be widened by a plugin or a model: a plugin gets the
//! intersection of what its manifest requests and what these grant.

use serde::de::{self, MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::collections::BTreeMap;
use std::ops::{Deref, DerefMut};
use std::path::{Path, PathBuf};

/// The search path when `[sandbox] command_path` is not set.
#[cfg(unix)]
pub const DEFAULT_COMMAND_PATH: &[&str] = &["/usr/local/bin", "/usr/bin", "/bin"];
/// The search path when `[sandbox] command_path` is not set: none on
/// Windows, where commands run only with the jail off, and only from the
/// directories the user names.
#[cfg(not(unix))]
pub const DEFAULT_COMMAND_PATH: &[&str] = &[];

/// What `reson.toml` says about plugins: the keys `plugins_dir`,
/// `cache_dir`, `lock_file` and the tables `[sandbox]`, `[plugins]` (with
/// `[plugins.NAME]`) and `[secrets]`. Relative paths are relative to the
/// file.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct PluginsConfig {
    /// Directory holding `<name>.wasm` + `<name>.toml` pairs.
    pub plugins_dir: Option<PathBuf>,
    /// Directory for compiled code, keyed by digest and engine settings.
    pub cache_dir: Option<PathBuf>,
    /// The lock file pinning each plugin's digest and requests.
    pub lock_file: Option<PathBuf>,
    /// Engine-wide sandbox settings.
    pub sandbox: SandboxConfig,
    /// `[plugins]`: the signature policy, and grants per plugin name. A
    /// plugin not listed here is granted nothing beyond computing and
    /// logging.
    pub plugins: PluginsTable,
    /// Secrets by name, for plugins granted those names: a value
    /// (`NAME = "value"`) or a table (`[secrets.NAME] value = "..."`,
    /// `urls = [...]`) that binds the secret to the URLs it may be sent to.
    /// Environment variables of the same name take precedence over values.
    #[serde(skip_serializing)]
    pub secrets: BTreeMap<String, SecretConfig>,
    /// The directory relative paths resolve against.
    #[serde(skip)]
    pub base_dir: PathBuf,
}

impl PluginsConfig {
    /// Resolves a path from the file against the file's directory.
    pub fn resolve(&self, path: &Path) -> PathBuf {
        if path.is_absolute() { path.to_path_buf() } else { self.base_dir.join(path) }
    }

    /// The grant for `plugin`, or the empty grant.
    pub fn grant(&self, plugin: &str) -> PluginGrant {
        self.plugins.get(plugin).cloned().unwrap_or_default()
    }
}

impl AsRef<PluginsConfig> for PluginsConfig {
    fn as_ref(&self) -> &PluginsConfig {
        self
    }
}

/// The `[plugins]` table: the keys `require_signature` and `trusted_keys`,
/// and one `[plugins.NAME]` grant per plugin (so no plugin can be named
/// after either key). It derefs to the grants.
#[derive(Debug, Clone, Default)]
pub struct PluginsTable {
    /// Refuse every plugin that no trusted key signed, before it is
    /// compiled or taken from the compiled-code cache. Off, signatures are
    /// still checked and shown, and a bad one is a warning.
    pub require_signature: bool,
    /// The public keys whose signatures are trusted.
    pub trusted_keys: Vec<TrustedKey>,
    /// Grants by plugin name.
    pub grants: BTreeMap<String, PluginGrant>,
}

const REQUIRE_SIGNATURE: &str = "require_signature";
const TRUSTED_KEYS: &str = "trusted_keys";

impl Deref for PluginsTable {
    type Target = BTreeMap<String, PluginGrant>;

    fn deref(&self) -> &Self::Target {
        &self.grants
    }
}

impl DerefMut for PluginsTable {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.grants
    }
}

impl<'de> Deserialize<'de> for PluginsTable {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Table;
        impl<'de> Visitor<'de> for Table {
            type Value = PluginsTable;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("the [plugins] table")
            }

            // Key by key, so that the TOML reader still names the line of a
            // bad grant.
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<PluginsTable, A::Error> {
                let mut table = PluginsTable::default();
                while let Some(key) = map.next_key::<String>()? {
                    match key.as_str() {
                        REQUIRE_SIGNATURE => table.require_signature = map.next_value()?,
                        TRUSTED_KEYS => table.trusted_keys = map.next_value()?,
                        _ => {
                            let grant = map.next_value()?;
                            if table.grants.insert(key.clone(), grant).is_some() {
                                return Err(de::Error::custom(format!(
                                    "[plugins.{key}] appears twice"
                                )));
                            }
                        }
                    }
                }
                Ok(table)
            }
        }
        deserializer.deserialize_map(Table)
    }
}

impl Serialize for PluginsTable {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        if self.require_signature {
            map.serialize_entry(REQUIRE_SIGNATURE, &true)?;
        }
        if !self.trusted_keys.is_empty() {
            map.serialize_entry(TRUSTED_KEYS, &self.trusted_keys)?;
        }
        for (name, grant) in &self.grants {
            map.serialize_entry(name, grant)?;
        }
        map.end()
    }
}

/// One entry of `[plugins] trusted_keys`: a key (`"ed25519:BASE64"`, as
/// `reson plugins keygen` prints it) or the path of a public key file (PEM,
/// DER or wasmsign2's raw form), alone or as `{ name = "...", key = "..." }`.
/// The name is what `reson plugins list` shows as the signer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TrustedKey {
    /// Shown as the signer; defaults to the key file's stem, or the key id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The key inline (`ed25519:` then the base64 of its 32 bytes), or a
    /// path to a key file (relative to the config file).
    pub key: String,
}

/// The prefix of a public key written inline.
pub const INLINE_KEY_PREFIX: &str = "ed25519:";

impl TrustedKey {
    /// The key's base64 text, when it is inline rather than a path.
    pub fn inline(&self) -> Option<&str> {
        self.key.strip_prefix(INLINE_KEY_PREFIX)
    }
}

/// Parses an inline key's base64 text (what follows `ed25519:`).
pub(crate) fn parse_inline_key(text: &str) -> Result<wasmsign2::PublicKey, String> {
    use base64::Engine as _;
    let raw = base64::engine::general_purpose::STANDARD
        .decode(text.trim())
        .map_err(|e| format!("not base64: {e}"))?;
    let raw: [u8; 32] =
        raw.try_into().map_err(|raw: Vec<u8>| format!("{} bytes, not 32", raw.len()))?;
    // wasmsign2's raw form: the algorithm id, then the key.
    wasmsign2::PublicKey::from_bytes(&[&[1u8][..], &raw].concat())
        .map_err(|e| e.to_string())
        .and_then(usable_key)
}

/// `pk`, if it is a canonical curve point of large order: any other key
/// could never verify a signature, so trusting it is a mistake to report.
pub(crate) fn usable_key(pk: wasmsign2::PublicKey) -> Result<wasmsign2::PublicKey, String> {
    pk.pk.validate().map_err(|e| format!("not a usable point ({e})"))?;
    Ok(pk)
}

impl PluginsConfig {
    /// Checks that a required signature has keys to be made with, the
    /// inline trusted keys, and that no name is listed twice (key files are
    /// read when the runtime opens).
    pub(crate) fn validate_trusted_keys(&self) -> Result<(), String> {
        if self.plugins.require_signature && self.plugins.trusted_keys.is_empty() {
            return Err("[plugins] require_signature is on, but trusted_keys is empty: every \
                 plugin would be refused; name the keys whose signatures you trust"
                .into());
        }
        let mut names = std::collections::BTreeSet::new();
        for entry in &self.plugins.trusted_keys {
            if let Some(text) = entry.inline() {
                parse_inline_key(text).map_err(|e| {
                    format!(
                        "[plugins] trusted_keys: `{}`: not an Ed25519 public key: {e}",
                        entry.key
                    )
                })?;
            }
            if let Some(name) = &entry.name
                && !names.insert(name.clone())
            {
                return Err(format!("[plugins] trusted_keys: the name `{name}` is used twice"));
            }
        }
        Ok(())
    }
}

impl<'de> Deserialize<'de> for TrustedKey {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Named {
            name: Option<String>,
            key: String,
        }
        struct Entry;
        impl<'de> Visitor<'de> for Entry {
            type Value = TrustedKey;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a key (\"ed25519:...\" or a key file's path) or { name, key }")
            }

            fn visit_str<E: de::Error>(self, key: &str) -> Result<TrustedKey, E> {
                Ok(TrustedKey { name: None, key: key.to_owned() })
            }

            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<TrustedKey, A::Error> {
                let Named { name, key } =
                    Named::deserialize(de::value::MapAccessDeserializer::new(map))?;
                Ok(TrustedKey { name, key })
            }
        }
        deserializer.deserialize_any(Entry)
    }
}

/// One entry of `[secrets]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(from = "SecretEntry")]
pub struct SecretConfig {
    /// The value, used when the environment has no variable of this name.
    pub value: Option<String>,
    /// URL patterns (`[scheme://]host[:port][/path-prefix]`) the secret may
    /// be sent to. Unbound (`None`), it may go only to URLs that the
    /// plugin's own `http` grant names by an exact host (not `*` or
    /// `*.domain`).
    pub urls: Option<Vec<String>>,
}

/// `NAME = "value"` or `[secrets.NAME]`.
#[derive(Deserialize)]
#[serde(untagged)]
enum SecretEntry {
    Value(String),
    Table(SecretTable),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SecretTable {
    value: Option<String>,
    urls: Option<Vec<String>>,
}

impl From<SecretEntry> for SecretConfig {
    fn from(entry: SecretEntry) -> Self {
        match entry {
            SecretEntry::Value(value) => Self { value: Some(value), urls: None },
            SecretEntry::Table(SecretTable { value, urls }) => Self { value, urls },
        }
    }
}

/// Engine-wide settings. Changing them changes the compiled-code cache key.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct SandboxConfig {
    /// Count fuel, so that plugins with a `fuel` limit can be held to it.
    /// Costs some speed for every plugin.
    pub fuel: bool,
    /// Most plugin instances alive at once (the pooling allocator's size).
    pub max_instances: u32,
    /// The largest memory any plugin may be granted, in MiB.
    pub max_memory_mb: u64,
    /// Default limits for plugins that set none.
    pub defaults: Limits,
    /// The fixed search path for the programs plugins run and for the
    /// program names in `shell` permission rules: absolute directories,
    /// searched in order. Never the host's or a guest's `PATH`.
    pub command_path: Vec<PathBuf>,
    /// Whether the commands plugins start run in the OS jail
    /// ([`crate::jail`]): `"on"` (the default) or `"off"`, which runs them
    /// with all of the host's rights and is warned about on every call.
    /// With it on, the host's browser runs in a network namespace of its
    /// own too, whose one way out is the host's proxy.
    pub jail: JailMode,
    /// Where bubblewrap is, for the jail.
    pub bwrap: PathBuf,
    /// The program of the browser the host drives for plugins with a
    /// `browser` grant (Chrome, Chromium or Edge), an absolute path. Unset,
    /// the host takes the first it finds where the OS installs one: Debian's
    /// `/usr/lib/chromium/chromium` or `/usr/bin/chromium`; on macOS
    /// `Google Chrome.app`, `Chromium.app`, `Microsoft Edge.app` in
    /// `/Applications` or `~/Applications`; on Windows `chrome.exe` under
    /// `%ProgramFiles%`, `%ProgramFiles(x86)%`, `%LocalAppData%`, then
    /// `msedge.exe` under the program folders.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chromium: Option<PathBuf>,
    /// Keep one browser up between traces, for this many milliseconds
    /// without a trace using it: each trace then gets a browser context of
    /// its own in it (cookies, storage and cache in memory, thrown away
    /// with the run; requests checked by a proxy of its own), and its first
    /// browser call does not wait for Chromium to start. Unset, `reson
    /// serve` keeps one for 300000 (five minutes) and every other host
    /// starts a Chromium of its own per trace; `0` turns it off everywhere.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warm_browser_ms: Option<u64>,
    /// After a tool call in a fresh instance, free that instance and make
    /// the plugin's next one ahead, both off the call's path, so that the
    /// next call enters a never-used instance instead of waiting for one
    /// to be built (on by default). Each plugin called then holds one idle
    /// instance, in room of its own in the pool (a quarter of
    /// `max_instances`).
    pub spare_instances: bool,
    /// Make the next jail of a grant that ran a command ahead, off the
    /// call's path (once a command started in the last one, or ended in
    /// one made on its path), so that the next command of that grant
    /// starts in it instead of waiting for bubblewrap (Linux; on by
    /// default). A jail made ahead is used once, and only while what its
    /// mounts were made from (the grants, the repository metadata in them)
    /// is unchanged. Each grant with commands then holds a waiting jail
    /// (three idle processes and an empty private `/tmp`), four at most.
    pub spare_jails: bool,
}

/// `[sandbox] jail`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum JailMode {
    /// Every command runs jailed, or not at all.
    #[default]
    On,
    /// Commands run unjailed, with the host's rights; the browser shares
    /// the host's network (its flags alone keep WebRTC and QUIC off).
    Off,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        Self {
            fuel: false,
            max_instances: 64,
            max_memory_mb: 1024,
            defaults: Limits::default(),
            command_path: DEFAULT_COMMAND_PATH.iter().map(PathBuf::from).collect(),
            jail: JailMode::On,
            bwrap: PathBuf::from(crate::jail::DEFAULT_BWRAP),
            chromium: None,
            warm_browser_ms: None,
            spare_instances: true,
            spare_jails: true,
        }
    }
}

/// Access to a directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Access {
    /// No access.
    #[default]
    None,
    /// Read files and list directories.
    Read,
    /// Read, create, change and delete.
    ReadWrite,
}

impl Access {
    /// How `reson.toml` spells it: `none`, `read`, `read-write`.
    pub fn as_str(self) -> &'static str {
        match self {
            Access::None => "none",
            Access::Read => "read",
            Access::ReadWrite => "read-write",
        }
    }
}

impl std::fmt::Display for Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A directory the user grants to a plugin.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct DirGrant {
    /// Host directory (relative to the config file).
    pub path: PathBuf,
    /// The most the plugin may do there.
    pub access: Access,
    /// Where the guest sees it; defaults to the absolute host path, so paths
    /// a model reads in one tool's output work in another's arguments.
    pub mount: Option<String>,
    /// What commands may do to `.git` and `.reson` in a writable directory:
    /// read-only unless this says `"read-write"` (`git commit` on purpose).
    #[serde(default = "read_only")]
    pub metadata: Access,
}

fn read_only() -> Access {
    Access::Read
}

/// Resource limits. `None` means "no opinion": the tighter of the
/// plugin's request and the user's grant wins, then the host default.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// Wall-clock deadline of one call, including time in host calls.
    pub timeout_ms: Option<u64>,
    /// Linear memory cap of one instance, in MiB.
    pub memory_mb: Option<u64>,
    /// Fuel per call (only when `sandbox.fuel` is on).
    pub fuel: Option<u64>,
    /// Cap on the bytes a call may return.
    pub output_bytes: Option<u64>,
    /// Processes and threads the commands of one call may hold at once.
    pub max_processes: Option<u32>,
}

/// What the user grants one plugin.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PluginGrant {
    /// Set to false to keep the plugin unloaded.
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Directories, preopened for WASI.
    #[serde(default)]
    pub dirs: Vec<DirGrant>,
    /// URL patterns: `host[:port][/path-prefix]`, `*.host` for subdomains.
    #[serde(default)]
    pub http: Vec<String>,
    /// URL patterns every request of the host's browser must match for a
    /// plugin that drives it (`https://docs.example.org/*`); loopback hosts
    /// only when a pattern names them exactly.
    #[serde(default)]
    pub browser: Vec<String>,
    /// Command-line globs such as `git *`, matched against the canonical
    /// command line (program resolved on `[sandbox] command_path`).
    #[serde(default)]
    pub process: Vec<String>,
    /// Environment variables the plugin may pass to commands, by exact
    /// name, beyond the safe built-ins (`LANG`, `LC_*`, `TZ`, `NO_COLOR`,
    /// `TERM`, `COLUMNS`).
    #[serde(default)]
    pub env: Vec<String>,
    /// Programs (`git`, `find`, `python`, `sh`, ...) whose exec vectors
    /// (`git -c`, `find -exec`, `python -c`, any use of `sh`) may run when
    /// a granted pattern matches.
    #[serde(default)]
    pub exec_vectors: Vec<String>,
    /// `host:port` pairs (`*.host:port` for subdomains) the plugin's
    /// commands may reach, through the jail's proxy; none by default.
    #[serde(default)]
    pub command_network: Vec<String>,
    /// Processes and threads one call's commands may hold at once; the
    /// same as `limits.max_processes` (the tighter of the two holds).
    pub max_processes: Option<u32>,
    /// Names of secrets the plugin may reference.
    #[serde(default)]
    pub secrets: Vec<String>,
    /// Only these tools of the plugin are offered; all when unset.
    pub tools: Option<Vec<String>>,
    /// Limits the user sets for this plugin.
    #[serde(default)]
    pub limits: Limits,
    /// Non-secret settings the plugin reads through `config`.
    #[serde(default)]
    pub config: BTreeMap<String, String>,
}

fn yes() -> bool {
    true
}

impl Default for PluginGrant {
    fn default() -> Self {
        Self {
            enabled: true,
            dirs: Vec::new(),
            http: Vec::new(),
            browser: Vec::new(),
            process: Vec::new(),
            env: Vec::new(),
            exec_vectors: Vec::new(),
            command_network: Vec::new(),
            max_processes: None,
            secrets: Vec::new(),
            tools: None,
            limits: Limits::default(),
            config: BTreeMap::new(),
        }
    }
}
