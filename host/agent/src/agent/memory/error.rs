//! Why a memory operation failed, and the name rules behind
//! [`MemoryError::InvalidName`].

use super::SessionEntries;
use std::path::{Path, PathBuf};

/// The longest session id or namespace accepted: short enough that
/// `{session}.json` fits every common file system's name limit.
const MAX_NAME_LEN: usize = 128;

/// Why a memory operation failed.
#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    /// A session id, namespace or key breaks the naming rules.
    #[error(
        "invalid {what} {name:?}: session ids and namespaces are 1 to {MAX_NAME_LEN} characters \
         from [A-Za-z0-9_.-]; keys are non-empty"
    )]
    InvalidName {
        /// `session id`, `namespace` or `key`.
        what: &'static str,
        /// The rejected name.
        name: String,
    },
    /// A file of a [`FileMemoryStore`](super::FileMemoryStore) could not be
    /// read or written.
    #[error("memory file {path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A session file holds something other than this store's JSON.
    #[error("corrupt memory file {path}: {reason}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A value could not be converted to or from JSON.
    #[error("cannot convert memory value {0}")]
    Serde(String),
}

impl MemoryError {
    /// Adapts an I/O error on `path`, for `map_err`.
    pub(super) fn io(path: &Path) -> impl FnOnce(std::io::Error) -> Self + '_ {
        move |source| Self::Io { path: path.to_path_buf(), source }
    }
}

/// Session ids become file names and namespaces become prompt headers, so
/// both are held to a charset with no separators, quotes or line breaks.
pub(super) fn validate_name(what: &'static str, name: &str) -> Result<(), MemoryError> {
    let valid = !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    if valid { Ok(()) } else { Err(MemoryError::InvalidName { what, name: name.to_owned() }) }
}

/// Keys are free text, which the prompt rendering escapes; only an empty
/// key is refused, as it would render as a bare `: value`.
pub(super) fn validate_key(key: &str) -> Result<(), MemoryError> {
    if key.is_empty() {
        return Err(MemoryError::InvalidName { what: "key", name: String::new() });
    }
    Ok(())
}

/// Checks every namespace and key of `entries`.
pub(super) fn validate_entries(entries: &SessionEntries) -> Result<(), MemoryError> {
    for (namespace, keys) in entries {
        validate_name("namespace", namespace)?;
        keys.keys().try_for_each(|key| validate_key(key))?;
    }
    Ok(())
}
