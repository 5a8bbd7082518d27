//! The stores a host works with, opened as `[store]` says: traces (and
//! experiences and knowledge) in files on this machine, the embedded default, or in a
//! PostgreSQL database that several hosts share.

use crate::config::AgentConfig;
use crate::experience::{ExperienceStore, FileExperienceStore, PgExperienceStore};
use crate::knowledge::{FileKnowledgeStore, KnowledgeStore, PgKnowledgeStore};
use reson_sandbox::config::PluginsConfig;
use reson_trace::config::{StoreKind, TraceConfig};
use reson_trace::database::{Database, DatabaseError, DatabaseOptions};
use reson_trace::{FileTraceStore, PgTraceStore, TraceError, TraceStore};
use std::sync::Arc;

/// Why the configured stores could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The file store could not be opened.
    #[error(transparent)]
    Trace(#[from] TraceError),
    /// The database could not be reached or migrated.
    #[error(transparent)]
    Database(#[from] DatabaseError),
    /// `[store]` names a password that is not there.
    #[error("[store]: {0}")]
    Password(String),
}

/// The opened stores.
#[derive(Clone)]
pub struct Stores {
    /// Where traces live.
    pub traces: Arc<dyn TraceStore>,
    /// Where experiences live: `[experiences] path`, or the database.
    pub experiences: Arc<dyn ExperienceStore>,
    /// Where knowledge lives: the index at `[knowledge] path`, or the
    /// database.
    pub knowledge: Arc<dyn KnowledgeStore>,
    /// The database, when `[store] kind = "postgres"`: the server's leases
    /// and notifications between hosts use it too.
    pub database: Option<Database>,
}

impl Stores {
    /// Opens what `config` names; for PostgreSQL, connects and migrates.
    pub async fn open<C>(config: &C) -> Result<Self, StoreError>
    where
        C: AsRef<TraceConfig> + AsRef<AgentConfig> + AsRef<PluginsConfig>,
    {
        let traces_config: &TraceConfig = config.as_ref();
        match traces_config.store.kind {
            StoreKind::File => {
                let traces = FileTraceStore::open(
                    traces_config.traces_dir(),
                    traces_config.store.durability,
                )?;
                Ok(Self {
                    traces: Arc::new(traces),
                    experiences: Arc::new(FileExperienceStore::from_config(
                        AsRef::<AgentConfig>::as_ref(config),
                    )),
                    knowledge: Arc::new(FileKnowledgeStore::from_config(
                        AsRef::<AgentConfig>::as_ref(config),
                    )),
                    database: None,
                })
            }
            StoreKind::Postgres => {
                let database =
                    Database::connect_with(&database_options(traces_config, config.as_ref())?)
                        .await?;
                let traces = PgTraceStore::new(database.clone());
                Ok(Self {
                    traces: Arc::new(traces),
                    experiences: Arc::new(PgExperienceStore::new(database.clone())),
                    knowledge: Arc::new(PgKnowledgeStore::new(database.clone())),
                    database: Some(database),
                })
            }
        }
    }
}

/// How to reach the database `[store]` names, with its password from the
/// environment or `[secrets]`.
pub fn database_options(
    config: &TraceConfig,
    plugins: &PluginsConfig,
) -> Result<DatabaseOptions, StoreError> {
    let store = &config.store;
    let url = store
        .url
        .clone()
        .ok_or_else(|| StoreError::Password("kind = \"postgres\" needs a url".into()))?;
    let password = if let Some(var) = &store.password_env {
        Some(std::env::var(var).map_err(|_| {
            StoreError::Password(format!("password_env names {var}, which is not set"))
        })?)
    } else if let Some(name) = &store.password_secret {
        // As for plugins' secrets, the environment wins over the file.
        let value = std::env::var(name)
            .ok()
            .or_else(|| plugins.secrets.get(name).and_then(|s| s.value.clone()));
        Some(value.ok_or_else(|| {
            StoreError::Password(format!("password_secret names `{name}`, which has no value"))
        })?)
    } else {
        None
    };
    Ok(DatabaseOptions::new(url).password(password).max_connections(store.max_connections))
}
