//! The storage contract and the default, in-process store.

use super::SessionEntries;
use super::error::{MemoryError, validate_entries, validate_key, validate_name};
use async_trait::async_trait;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{PoisonError, RwLock};

/// Where session memory lives. Every method validates the session id,
/// namespace and key it is given and fails with
/// [`MemoryError::InvalidName`] before touching anything.
#[async_trait]
pub trait MemoryStore: Send + Sync {
    /// The value under `namespace`/`key` of `session`, if any.
    async fn get(
        &self,
        session: &str,
        namespace: &str,
        key: &str,
    ) -> Result<Option<Value>, MemoryError>;

    /// Stores `value` under `namespace`/`key` of `session`, replacing any
    /// value already there.
    async fn set(
        &self,
        session: &str,
        namespace: &str,
        key: &str,
        value: Value,
    ) -> Result<(), MemoryError>;

    /// Removes `namespace`/`key` of `session`; `true` if it was there.
    async fn remove(&self, session: &str, namespace: &str, key: &str) -> Result<bool, MemoryError>;

    /// Removes every entry of `namespace` in `session`, or the whole
    /// session when `None`.
    async fn clear(&self, session: &str, namespace: Option<&str>) -> Result<(), MemoryError>;

    /// Every entry of `session`, empty if it has none.
    async fn entries(&self, session: &str) -> Result<SessionEntries, MemoryError>;

    /// Writes every entry of `entries` into `session`, replacing values
    /// under the same keys and keeping the session's other entries. All
    /// names are checked before anything is written.
    async fn merge(&self, session: &str, entries: &SessionEntries) -> Result<(), MemoryError> {
        validate_name("session id", session)?;
        validate_entries(entries)?;
        for (namespace, keys) in entries {
            for (key, value) in keys {
                self.set(session, namespace, key, value.clone()).await?;
            }
        }
        Ok(())
    }
}

/// A [`MemoryStore`] in process memory: fast, shared by every handle on the
/// same instance, gone when the instance is dropped.
#[derive(Debug, Default)]
pub struct InMemoryStore {
    sessions: RwLock<HashMap<String, SessionEntries>>,
}

impl InMemoryStore {
    /// Every mutation is a single map operation, so a panic elsewhere while
    /// the lock was held cannot have left the map half-updated.
    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<String, SessionEntries>> {
        self.sessions.write().unwrap_or_else(PoisonError::into_inner)
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<String, SessionEntries>> {
        self.sessions.read().unwrap_or_else(PoisonError::into_inner)
    }
}

// No method awaits, so the std lock is never held across an `.await`.
#[async_trait]
impl MemoryStore for InMemoryStore {
    async fn get(
        &self,
        session: &str,
        namespace: &str,
        key: &str,
    ) -> Result<Option<Value>, MemoryError> {
        validate_address(session, namespace, key)?;
        Ok(self
            .read()
            .get(session)
            .and_then(|s| s.get(namespace))
            .and_then(|n| n.get(key))
            .cloned())
    }

    async fn set(
        &self,
        session: &str,
        namespace: &str,
        key: &str,
        value: Value,
    ) -> Result<(), MemoryError> {
        validate_address(session, namespace, key)?;
        put(self.write().entry(session.to_owned()).or_default(), namespace, key, value);
        Ok(())
    }

    async fn remove(&self, session: &str, namespace: &str, key: &str) -> Result<bool, MemoryError> {
        validate_address(session, namespace, key)?;
        let mut sessions = self.write();
        let Some(entries) = sessions.get_mut(session) else { return Ok(false) };
        let removed = take(entries, namespace, key);
        if entries.is_empty() {
            sessions.remove(session);
        }
        Ok(removed)
    }

    async fn clear(&self, session: &str, namespace: Option<&str>) -> Result<(), MemoryError> {
        validate_name("session id", session)?;
        let mut sessions = self.write();
        match namespace {
            None => {
                sessions.remove(session);
            }
            Some(namespace) => {
                validate_name("namespace", namespace)?;
                if let Some(entries) = sessions.get_mut(session) {
                    entries.remove(namespace);
                    if entries.is_empty() {
                        sessions.remove(session);
                    }
                }
            }
        }
        Ok(())
    }

    async fn entries(&self, session: &str) -> Result<SessionEntries, MemoryError> {
        validate_name("session id", session)?;
        Ok(self.read().get(session).cloned().unwrap_or_default())
    }
}

/// Checks the three parts that address one entry.
pub(super) fn validate_address(
    session: &str,
    namespace: &str,
    key: &str,
) -> Result<(), MemoryError> {
    validate_name("session id", session)?;
    validate_name("namespace", namespace)?;
    validate_key(key)
}

/// Sets `namespace`/`key`; `true` if that changed anything, so a file store
/// can skip rewriting an unchanged session.
pub(super) fn put(entries: &mut SessionEntries, namespace: &str, key: &str, value: Value) -> bool {
    let keys = entries.entry(namespace.to_owned()).or_default();
    if keys.get(key) == Some(&value) {
        return false;
    }
    keys.insert(key.to_owned(), value);
    true
}

/// Removes `namespace`/`key`, dropping the namespace once it is empty so
/// stores never list empty namespaces; `true` if the entry was there.
pub(super) fn take(entries: &mut SessionEntries, namespace: &str, key: &str) -> bool {
    let Some(keys) = entries.get_mut(namespace) else { return false };
    let removed = keys.remove(key).is_some();
    if keys.is_empty() {
        entries.remove(namespace);
    }
    removed
}
