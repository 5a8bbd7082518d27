//! The PostgreSQL database several hosts share: one connection pool, the
//! schema migrated when it opens.
//!
//! The schema's migrations (`host/migrations/*.sql`) are embedded in the
//! binary and applied in order, under PostgreSQL's advisory lock, so hosts
//! starting together migrate once. A database migrated by a newer binary
//! (a version this one does not know) is refused rather than written with
//! an older idea of the schema.
//!
//! The stores built on it are [`PgTraceStore`](crate::PgTraceStore)
//! and the experiences' PostgreSQL store; the server's leases and
//! notifications between hosts use the same pool.

use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use std::str::FromStr;
use std::time::Duration;

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

/// Why the database could not be opened or used.
#[derive(Debug, thiserror::Error)]
pub enum DatabaseError {
    /// The URL does not parse. The URL is named without its password.
    #[error("invalid database URL {url}: {reason}")]
    InvalidUrl {
        /// The URL, password removed.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// No connection could be made.
    #[error("cannot connect to {url}: {source}")]
    Connect {
        /// The URL, password removed.
        url: String,
        /// What the driver said.
        source: sqlx::Error,
    },
    /// A newer binary migrated the database.
    #[error(
        "the database schema is at version {database}, newer than this binary's ({binary}): \
         upgrade reson on this host before pointing it at this database"
    )]
    SchemaTooNew {
        /// The newest version applied to the database.
        database: i64,
        /// The newest version this binary knows.
        binary: i64,
    },
    /// A migration applied to the database differs from this binary's.
    #[error(
        "schema migration {version} in the database differs from this binary's: the database \
         was migrated by a different build of reson"
    )]
    SchemaModified {
        /// The migration's version.
        version: i64,
    },
    /// Applying the migrations failed.
    #[error("migrating the database schema: {0}")]
    Migrate(String),
    /// A query failed (the database went away, a constraint, ...).
    #[error("database: {0}")]
    Query(#[from] sqlx::Error),
}

/// How to reach the database.
#[derive(Clone)]
pub struct DatabaseOptions {
    url: String,
    password: Option<String>,
    max_connections: u32,
    acquire_timeout: Duration,
}

impl std::fmt::Debug for DatabaseOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The password never reaches a log, whichever way it was given.
        f.debug_struct("DatabaseOptions")
            .field("url", &crate::config::redact_url(&self.url))
            .field("password", &self.password.as_ref().map(|_| "[REDACTED]"))
            .field("max_connections", &self.max_connections)
            .field("acquire_timeout", &self.acquire_timeout)
            .finish()
    }
}

impl DatabaseOptions {
    /// `url` is `postgres://user@host:port/dbname` (a Unix socket with
    /// `?host=/path/to/dir`). A password in the URL is used, but prefer
    /// [`password`](Self::password) or `PGPASSWORD`: URLs get logged.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            password: None,
            max_connections: 16,
            acquire_timeout: Duration::from_secs(10),
        }
    }

    /// The password, when not in the URL (it wins over `PGPASSWORD`).
    pub fn password(mut self, password: Option<String>) -> Self {
        self.password = password;
        self
    }

    /// The most connections the pool opens (default 16).
    pub fn max_connections(mut self, n: u32) -> Self {
        self.max_connections = n.max(1);
        self
    }

    /// How long a query waits for a free connection before failing
    /// (default 10 s): a database that went away fails a run, it does not
    /// hang it.
    pub fn acquire_timeout(mut self, timeout: Duration) -> Self {
        self.acquire_timeout = timeout;
        self
    }

    /// The URL with any password replaced, for messages.
    pub fn display_url(&self) -> String {
        crate::config::redact_url(&self.url)
    }
}

/// A pool of connections to a migrated database; cheap to clone.
#[derive(Clone, Debug)]
pub struct Database {
    pool: PgPool,
}

impl Database {
    /// Connects with default options and migrates the schema.
    pub async fn connect(url: &str) -> Result<Self, DatabaseError> {
        Self::connect_with(&DatabaseOptions::new(url)).await
    }

    /// Connects and migrates the schema; refuses a database a newer binary
    /// migrated.
    pub async fn connect_with(options: &DatabaseOptions) -> Result<Self, DatabaseError> {
        let url = options.display_url();
        let mut connect = PgConnectOptions::from_str(&options.url)
            .map_err(|e| DatabaseError::InvalidUrl { url: url.clone(), reason: e.to_string() })?
            .application_name("reson")
            // The store's queries are small and indexed; the JIT only ever
            // triggers on the long main-path scan, where compiling costs
            // more (about 13 ms) than it saves.
            .options([("jit", "off")]);
        if let Some(password) = &options.password {
            // A password too weak to redact safely is still used; it is
            // never written anywhere by the host in the first place.
            let _ = reson_text::redact::register(password);
            connect = connect.password(password);
        }
        let pool = PgPoolOptions::new()
            .max_connections(options.max_connections)
            .acquire_timeout(options.acquire_timeout)
            .connect_with(connect)
            .await
            .map_err(|source| DatabaseError::Connect { url: url.clone(), source })?;
        migrate(&pool).await?;
        Ok(Self { pool })
    }

    /// The newest schema version this binary knows.
    pub fn schema_version() -> i64 {
        MIGRATOR.iter().map(|m| m.version).max().unwrap_or(0)
    }

    /// The pool, for the stores built on it.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Closes every connection; later queries fail.
    pub async fn close(&self) {
        self.pool.close().await;
    }
}

async fn migrate(pool: &PgPool) -> Result<(), DatabaseError> {
    use sqlx::migrate::MigrateError;
    match MIGRATOR.run(pool).await {
        Ok(()) => Ok(()),
        Err(MigrateError::VersionMissing(missing)) => {
            let newest: Option<i64> =
                sqlx::query_scalar("SELECT max(version) FROM _sqlx_migrations")
                    .fetch_one(pool)
                    .await
                    .unwrap_or(Some(missing));
            Err(DatabaseError::SchemaTooNew {
                database: newest.unwrap_or(missing).max(missing),
                binary: Database::schema_version(),
            })
        }
        Err(MigrateError::VersionMismatch(version)) => {
            Err(DatabaseError::SchemaModified { version })
        }
        Err(other) => Err(DatabaseError::Migrate(other.to_string())),
    }
}

/// Debian's PostgreSQL in a throwaway cluster on a Unix socket: the tests
/// that need it are built on Unix only.
#[cfg(all(test, unix))]
#[path = "../../../../tests/support/postgres.rs"]
pub(crate) mod test_cluster;

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    #[tokio::test]
    async fn a_database_migrated_by_a_newer_binary_is_refused() {
        let url = test_cluster::cluster().fresh_database().await;
        let db = Database::connect(&url).await.unwrap();
        Database::connect(&url).await.expect("migrating twice changes nothing");
        let future = Database::schema_version() + 1;
        sqlx::query(
            "INSERT INTO _sqlx_migrations \
             (version, description, success, checksum, execution_time) \
             VALUES ($1, 'from the future', true, '\\x00', 0)",
        )
        .bind(future)
        .execute(db.pool())
        .await
        .unwrap();
        let err = Database::connect(&url).await.unwrap_err();
        assert!(
            matches!(err, DatabaseError::SchemaTooNew { database, binary }
                if database == future && binary == future - 1),
            "{err}"
        );
        assert!(err.to_string().contains("newer than this binary"), "{err}");
    }

    #[tokio::test]
    async fn an_unreachable_database_is_a_clear_error_without_the_password() {
        let dir = tempfile::tempdir().unwrap();
        let options = DatabaseOptions::new(format!(
            "postgres://reson:pw-secret-123@localhost/none?host={}",
            dir.path().display()
        ))
        .acquire_timeout(Duration::from_secs(2));
        let err = Database::connect_with(&options).await.unwrap_err();
        let text = err.to_string();
        assert!(text.starts_with("cannot connect to postgres://reson:"), "{text}");
        assert!(!text.contains("pw-secret-123"), "{text}");
    }

    #[test]
    fn passwords_never_show() {
        let options =
            DatabaseOptions::new("postgres://reson:hunter2-secret@db.internal:5432/reson")
                .password(Some("another-secret".into()));
        let shown = format!("{options:?} {}", options.display_url());
        assert!(!shown.contains("hunter2") && !shown.contains("another-secret"), "{shown}");
        assert!(shown.contains("db.internal:5432/reson"), "{shown}");
    }
}
