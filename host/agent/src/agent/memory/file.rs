//! A store that keeps each session in its own JSON file.

use super::SessionEntries;
use super::error::{MemoryError, validate_entries, validate_name};
use super::store::{MemoryStore, put, take, validate_address};
use async_trait::async_trait;
use serde_json::Value;
use std::fs::{self, File, OpenOptions, TryLockError};
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Mutex, MutexGuard};

/// Serialises read-modify-write cycles of every store on the directory.
/// Session files end in `.json`, so no session can be named onto it.
const LOCK_FILE: &str = ".memory.lock";

/// How long to wait before trying the directory lock again while another
/// store (another process, or another instance here) holds it. Each holds
/// it for one read and one small write, well under this.
const LOCK_RETRY: Duration = Duration::from_millis(1);

/// A [`MemoryStore`] keeping each session in `{dir}/{session}.json`, an
/// object of namespaces, each an object of keys.
///
/// Every call reads the file afresh, so any number of stores, in this
/// process or others, can share one directory and see each other's
/// writes. Writes replace the file atomically (a temporary file in the
/// same directory, renamed over it) under an exclusive lock on
/// `{dir}/.memory.lock`, so readers never see half a file and concurrent
/// writers never lose each other's entries. A session left with no entries
/// has no file. On a case-insensitive file system, session ids differing
/// only in case share a file.
///
/// The files are small, so they are read and written inline in the async
/// methods: cheaper than a hop to a blocking thread. Waiting for the lock,
/// which can take long, is awaited instead.
#[derive(Debug, Clone)]
pub struct FileMemoryStore {
    dir: PathBuf,
    // Queues the writers of this store and its clones in the process, so
    // that they wait their turn without polling the file lock.
    writers: Arc<Mutex<()>>,
}

/// The directory lock, released when dropped: the file first (fields drop
/// in order), so that the next writer queued here finds it free.
struct Held<'a> {
    _file: File,
    _writers: MutexGuard<'a, ()>,
}

impl FileMemoryStore {
    /// A store in `dir`, which is created if missing.
    pub fn new(dir: impl Into<PathBuf>) -> Result<Self, MemoryError> {
        let dir = dir.into();
        fs::create_dir_all(&dir).map_err(MemoryError::io(&dir))?;
        Ok(Self { dir, writers: Arc::default() })
    }

    /// The directory holding the session files.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path(&self, session: &str) -> PathBuf {
        self.dir.join(format!("{session}.json"))
    }

    /// Takes the exclusive lock on the directory. A blocking `lock` would
    /// hold a tokio worker for as long as another process keeps the lock,
    /// so a taken lock is retried after a short sleep instead.
    async fn lock(&self) -> Result<Held<'_>, MemoryError> {
        let writers = self.writers.lock().await;
        let path = self.dir.join(LOCK_FILE);
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(MemoryError::io(&path))?;
        loop {
            match file.try_lock() {
                Ok(()) => return Ok(Held { _file: file, _writers: writers }),
                Err(TryLockError::WouldBlock) => tokio::time::sleep(LOCK_RETRY).await,
                Err(TryLockError::Error(e)) => return Err(MemoryError::io(&path)(e)),
            }
        }
    }

    fn load(&self, session: &str) -> Result<SessionEntries, MemoryError> {
        let path = self.path(session);
        let bytes = match fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(SessionEntries::new()),
            Err(e) => return Err(MemoryError::io(&path)(e)),
        };
        let corrupt = |reason: String| MemoryError::Corrupt { path: path.clone(), reason };
        let mut entries: SessionEntries =
            serde_json::from_slice(&bytes).map_err(|e| corrupt(e.to_string()))?;
        // A hand-edited file may hold names the API refuses; they would break
        // the rendered prompt block, so the file is refused as a whole.
        validate_entries(&entries).map_err(|e| corrupt(e.to_string()))?;
        entries.retain(|_, keys| !keys.is_empty());
        Ok(entries)
    }

    fn save(&self, session: &str, entries: &SessionEntries) -> Result<(), MemoryError> {
        let path = self.path(session);
        if entries.is_empty() {
            return remove_file(&path);
        }
        let bytes = serde_json::to_vec_pretty(entries)
            .map_err(|e| MemoryError::Serde(format!("session {session}: {e}")))?;
        let mut tmp =
            tempfile::NamedTempFile::new_in(&self.dir).map_err(MemoryError::io(&self.dir))?;
        // Through the redaction point, like every file the host writes.
        let bytes = reson_text::redact::redact_bytes(&bytes);
        tmp.write_all(&bytes).map_err(MemoryError::io(tmp.path()))?;
        tmp.persist(&path).map_err(|e| MemoryError::io(&path)(e.error))?;
        Ok(())
    }

    /// Runs `change` on the session's entries under the lock and writes them
    /// back if it reports a change; returns what it reported.
    async fn update(
        &self,
        session: &str,
        change: impl FnOnce(&mut SessionEntries) -> bool + Send,
    ) -> Result<bool, MemoryError> {
        let _lock = self.lock().await?;
        let mut entries = self.load(session)?;
        let changed = change(&mut entries);
        if changed {
            self.save(session, &entries)?;
        }
        Ok(changed)
    }
}

#[async_trait]
impl MemoryStore for FileMemoryStore {
    async fn get(
        &self,
        session: &str,
        namespace: &str,
        key: &str,
    ) -> Result<Option<Value>, MemoryError> {
        validate_address(session, namespace, key)?;
        Ok(self.load(session)?.remove(namespace).and_then(|mut keys| keys.remove(key)))
    }

    async fn set(
        &self,
        session: &str,
        namespace: &str,
        key: &str,
        value: Value,
    ) -> Result<(), MemoryError> {
        validate_address(session, namespace, key)?;
        self.update(session, |entries| put(entries, namespace, key, value)).await?;
        Ok(())
    }

    async fn remove(&self, session: &str, namespace: &str, key: &str) -> Result<bool, MemoryError> {
        validate_address(session, namespace, key)?;
        self.update(session, |entries| take(entries, namespace, key)).await
    }

    async fn clear(&self, session: &str, namespace: Option<&str>) -> Result<(), MemoryError> {
        validate_name("session id", session)?;
        match namespace {
            // Deleting without reading is also the way out of a corrupt file.
            None => {
                let _lock = self.lock().await?;
                remove_file(&self.path(session))
            }
            Some(namespace) => {
                validate_name("namespace", namespace)?;
                self.update(session, |entries| entries.remove(namespace).is_some()).await?;
                Ok(())
            }
        }
    }

    async fn entries(&self, session: &str) -> Result<SessionEntries, MemoryError> {
        validate_name("session id", session)?;
        self.load(session)
    }

    /// One read and one write for the whole batch, instead of one per entry.
    async fn merge(&self, session: &str, entries: &SessionEntries) -> Result<(), MemoryError> {
        validate_name("session id", session)?;
        validate_entries(entries)?;
        self.update(session, |current| {
            let mut changed = false;
            for (namespace, keys) in entries {
                for (key, value) in keys {
                    changed |= put(current, namespace, key, value.clone());
                }
            }
            changed
        })
        .await?;
        Ok(())
    }
}

fn remove_file(path: &Path) -> Result<(), MemoryError> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != ErrorKind::NotFound => Err(MemoryError::io(path)(e)),
        _ => Ok(()),
    }
}
