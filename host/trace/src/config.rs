//! The sections of `reson.toml` the trace stores read: `traces_dir` and
//! `[store]`.

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// What `reson.toml` says about where traces live: the key `traces_dir`
/// and the table `[store]`. Relative paths are relative to the file.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct TraceConfig {
    /// Where traces are stored when `[store] kind = "file"`.
    pub traces_dir: Option<PathBuf>,
    /// Which store keeps traces and experiences: files (the default) or
    /// PostgreSQL.
    pub store: StoreConfig,
    /// The directory relative paths resolve against.
    #[serde(skip)]
    pub base_dir: PathBuf,
}

impl TraceConfig {
    /// Checks what the types alone cannot.
    pub fn validate(&self) -> Result<(), String> {
        self.store.validate().map_err(|e| format!("[store]: {e}"))
    }

    /// The directory of the file trace store: `traces_dir`, default
    /// `.reson/traces`, relative to the config file.
    pub fn traces_dir(&self) -> PathBuf {
        self.traces_dir
            .as_deref()
            .map_or_else(|| PathBuf::from(".reson/traces"), |p| self.resolve(p))
    }

    fn resolve(&self, path: &Path) -> PathBuf {
        if path.is_absolute() { path.to_path_buf() } else { self.base_dir.join(path) }
    }
}

impl AsRef<TraceConfig> for TraceConfig {
    fn as_ref(&self) -> &TraceConfig {
        self
    }
}

/// `[store]`: where traces and experiences live.
///
/// ```toml
/// [store]
/// kind = "postgres"
/// url = "postgres://reson@db.internal/reson"
/// password_env = "RESON_DB_PASSWORD"   # or password_secret = "db" ([secrets.db])
/// ```
#[derive(Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct StoreConfig {
    /// `file` (traces under `traces_dir`, experiences in
    /// `[experiences] path`) or `postgres`.
    pub kind: StoreKind,
    /// The database, for `postgres`. Keep the password out of it: URLs end
    /// up in shell histories and logs. Serialized without its password.
    #[serde(serialize_with = "serialize_redacted_url")]
    pub url: Option<String>,
    /// An environment variable holding the database password.
    pub password_env: Option<String>,
    /// A `[secrets]` entry holding the database password.
    pub password_secret: Option<String>,
    /// Most connections one host opens.
    pub max_connections: u32,
    /// How long a host's claim on a running trace lasts without a
    /// heartbeat: when the host dies, another may continue the trace after
    /// this long.
    pub lease_ms: u64,
    /// When the file store's writes reach stable storage: `batched` (a
    /// write survives the process being killed; fsync'd a few milliseconds
    /// later) or `immediate` (a call returns only once its writes are
    /// fsync'd, group-committed across traces). PostgreSQL always commits
    /// durably.
    pub durability: Durability,
}

/// Which store `[store]` names.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum StoreKind {
    /// Files on this machine: the embedded default.
    #[default]
    File,
    /// A PostgreSQL database several hosts may share.
    Postgres,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            kind: StoreKind::File,
            url: None,
            password_env: None,
            password_secret: None,
            max_connections: 16,
            lease_ms: 15_000,
            durability: Durability::Batched,
        }
    }
}

impl std::fmt::Debug for StoreConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let url = self.url.as_ref().map(|u| redact_url(u));
        f.debug_struct("StoreConfig")
            .field("kind", &self.kind)
            .field("url", &url)
            .field("password_env", &self.password_env)
            .field("password_secret", &self.password_secret)
            .field("max_connections", &self.max_connections)
            .field("lease_ms", &self.lease_ms)
            .field("durability", &self.durability)
            .finish()
    }
}

fn serialize_redacted_url<S: serde::Serializer>(
    url: &Option<String>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    url.as_ref().map(|u| redact_url(u)).serialize(serializer)
}

impl StoreConfig {
    pub fn validate(&self) -> Result<(), String> {
        match (self.kind, &self.url) {
            (StoreKind::Postgres, None) => {
                Err("kind = \"postgres\" needs url = \"postgres://...\"".into())
            }
            (StoreKind::Postgres, Some(url))
                if !url.starts_with("postgres://") && !url.starts_with("postgresql://") =>
            {
                Err("url must start with postgres:// or postgresql://".into())
            }
            _ if self.password_env.is_some() && self.password_secret.is_some() => {
                Err("give password_env or password_secret, not both".into())
            }
            _ if self.lease_ms < 1_000 => Err("lease_ms must be at least 1000".into()),
            _ => Ok(()),
        }
    }
}

/// `url` with the password part of its user info replaced, for messages.
pub fn redact_url(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut parsed) if parsed.password().is_some() => {
            let _ = parsed.set_password(Some("[REDACTED]"));
            parsed.to_string()
        }
        Ok(_) => url.to_owned(),
        Err(_) => "(unparsable URL)".to_owned(),
    }
}

/// When writes reach stable storage: `[store] durability`, `"batched"`
/// (the default) or `"immediate"`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Durability {
    /// Calls return once their writes are with the OS, which survives the
    /// process being killed at any instant; a background thread fsyncs them
    /// in write order a few milliseconds later (group commit), and
    /// [`TraceStore::sync`](crate::TraceStore::sync) awaits it. A power loss before then may lose
    /// the latest writes.
    #[default]
    Batched,
    /// Calls return only once their writes and the directory entries
    /// naming them are fsync'd, which survives a power loss too. The
    /// fsyncs are done by the store's background thread while the call
    /// awaits them, so that no tokio worker blocks on the disk, and they
    /// are group-committed: one batch serves every call, of any trace,
    /// that waits meanwhile.
    Immediate,
}
