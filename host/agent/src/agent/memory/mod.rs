//! Session memory: namespaced key-value entries that belong to one agent
//! session, kept in a pluggable [`MemoryStore`].
//!
//! A session reaches its memory through a [`SessionMemory`] handle; a
//! [`MemorySnapshot`] of it renders the `<session-context>` block the
//! session appends to its system prompt, and can be restored into another
//! session to carry context across.

mod error;
mod file;
mod snapshot;
mod store;
#[cfg(test)]
mod tests;

pub use error::MemoryError;
pub use file::FileMemoryStore;
pub use snapshot::MemorySnapshot;
pub use store::{InMemoryStore, MemoryStore};

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

/// All entries of one session: keys and values by namespace, both sorted.
/// Stores never hold an empty namespace.
pub type SessionEntries = BTreeMap<String, BTreeMap<String, Value>>;

/// The handle a session uses to read and write its own memory. Cloning it
/// shares the store.
#[derive(Clone)]
pub struct SessionMemory {
    session_id: String,
    store: Arc<dyn MemoryStore>,
}

impl SessionMemory {
    /// The memory of `session_id` in `store`. Fails with
    /// [`MemoryError::InvalidName`] unless the id is 1 to 128 characters from
    /// `[A-Za-z0-9_.-]`.
    pub fn new(
        session_id: impl Into<String>,
        store: Arc<dyn MemoryStore>,
    ) -> Result<Self, MemoryError> {
        let session_id = session_id.into();
        error::validate_name("session id", &session_id)?;
        Ok(Self { session_id, store })
    }

    /// The memory of `session_id` in a fresh [`InMemoryStore`] of its own,
    /// shared with nothing but clones of this handle.
    pub fn in_memory(session_id: impl Into<String>) -> Result<Self, MemoryError> {
        Self::new(session_id, Arc::new(InMemoryStore::default()))
    }

    /// The session this memory belongs to.
    pub fn session_id(&self) -> &str {
        &self.session_id
    }

    /// The store behind this handle, to open other sessions on it.
    pub fn store(&self) -> &Arc<dyn MemoryStore> {
        &self.store
    }

    /// Stores `value` as JSON under `namespace`/`key`, replacing any value
    /// already there.
    pub async fn set(
        &self,
        namespace: &str,
        key: &str,
        value: impl Serialize,
    ) -> Result<(), MemoryError> {
        let value = serde_json::to_value(value)
            .map_err(|e| MemoryError::Serde(format!("{namespace}/{key}: {e}")))?;
        self.store.set(&self.session_id, namespace, key, value).await
    }

    /// The value under `namespace`/`key`, if any, as a `T`.
    pub async fn get<T: DeserializeOwned>(
        &self,
        namespace: &str,
        key: &str,
    ) -> Result<Option<T>, MemoryError> {
        let Some(value) = self.store.get(&self.session_id, namespace, key).await? else {
            return Ok(None);
        };
        serde_json::from_value(value)
            .map(Some)
            .map_err(|e| MemoryError::Serde(format!("{namespace}/{key}: {e}")))
    }

    /// Removes `namespace`/`key`; `true` if it was there.
    pub async fn remove(&self, namespace: &str, key: &str) -> Result<bool, MemoryError> {
        self.store.remove(&self.session_id, namespace, key).await
    }

    /// Removes every entry of `namespace`, or of the whole session when
    /// `None`.
    pub async fn clear(&self, namespace: Option<&str>) -> Result<(), MemoryError> {
        self.store.clear(&self.session_id, namespace).await
    }

    /// A copy of every entry of the session as it is now.
    pub async fn snapshot(&self) -> Result<MemorySnapshot, MemoryError> {
        Ok(MemorySnapshot {
            session_id: self.session_id.clone(),
            entries: self.store.entries(&self.session_id).await?,
        })
    }
}

impl fmt::Debug for SessionMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SessionMemory")
            .field("session_id", &self.session_id)
            .finish_non_exhaustive()
    }
}
