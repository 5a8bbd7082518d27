//! Who may call the API, and as whom: users with hashed tokens, from
//! `[server.users]` and from a token file that `reson users add|revoke`
//! edit while the server runs.
//!
//! Only the SHA-256 of a token is ever stored. A request's token is hashed
//! and compared with every known hash in constant time, so neither the
//! tokens nor which entry matched leak through timing.
//!
//! The token file is TOML, one `[[token]]` table per token:
//!
//! ```toml
//! [[token]]
//! id = "tok_3f9a1c2b"
//! uid = "alice"
//! role = "user"
//! sha256 = "…64 hex digits…"
//! created_at = "2026-11-25T09:00:00Z"
//! ```
//!
//! The server checks the file's identity (inode, size, modification time)
//! on each request and reads it again when it changed, so a token added or
//! revoked counts from the next request, with no restart.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;
use subtle::ConstantTimeEq;

/// Why users or tokens could not be read, written or changed.
#[derive(Debug, thiserror::Error)]
pub enum UsersError {
    /// The token file could not be read or written.
    #[error("token file {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// The token file does not parse; nothing was written.
    #[error("malformed token file {path}: {message}")]
    Malformed {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// A user or token entry that cannot be used.
    #[error("{0}")]
    Invalid(String),
    /// No token has this id, and no token belongs to a user of this name.
    #[error("no token or user {0} in the token file")]
    Unknown(String),
    /// The system's random source failed.
    #[error("cannot draw a random token: {0}")]
    Random(String),
}

/// What a user may do.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Sees and drives only their own runs, approvals and experiences.
    #[default]
    User,
    /// Sees and drives everyone's.
    Admin,
}

/// `[server.users.<uid>]`: a user whose token is in the config.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct UserSettings {
    /// The SHA-256 of the user's token, in hex (`reson users hash` prints
    /// it; the token itself is never written down).
    pub token_sha256: String,
    /// `user` (the default) or `admin`.
    #[serde(default)]
    pub role: Role,
}

/// One token of the token file.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TokenEntry {
    /// Names the token, to revoke it.
    pub id: String,
    /// The user it authenticates.
    pub uid: String,
    /// `user` or `admin`.
    #[serde(default)]
    pub role: Role,
    /// The token's SHA-256, in hex.
    pub sha256: String,
    /// When it was added (RFC 3339).
    #[serde(default)]
    pub created_at: String,
}

/// The SHA-256 of `token`, in lowercase hex: what is stored of it.
pub fn hash_token(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// A fresh token: `rsn_` and 32 random bytes from the OS, in hex.
pub fn new_token() -> Result<String, UsersError> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| UsersError::Random(e.to_string()))?;
    Ok(format!("rsn_{}", hex::encode(bytes)))
}

/// Checks a user name and a stored hash.
fn check(uid: &str, sha256: &str) -> Result<(), UsersError> {
    if uid.trim().is_empty() || uid.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err(UsersError::Invalid(format!(
            "user name {uid:?}: it must be non-empty, without spaces or control characters"
        )));
    }
    if sha256.len() != 64
        || !sha256.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return Err(UsersError::Invalid(format!(
            "user {uid}: the token hash must be 64 lowercase hex digits (a SHA-256), not {} characters",
            sha256.len()
        )));
    }
    Ok(())
}

/// The token file: read and edited whole, written to a temporary file that
/// replaces it.
#[derive(Debug, Clone)]
pub struct TokenFile {
    path: PathBuf,
}

#[derive(Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct TokenDocument {
    #[serde(default)]
    token: Vec<TokenEntry>,
}

impl TokenFile {
    /// The file at `path`; it need not exist yet.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self { path: path.into() }
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn io(&self) -> impl FnOnce(std::io::Error) -> UsersError + '_ {
        |source| UsersError::Io { path: self.path.clone(), source }
    }

    /// Every token, in file order; none when the file does not exist.
    pub fn list(&self) -> Result<Vec<TokenEntry>, UsersError> {
        let text = match std::fs::read_to_string(&self.path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(self.io()(e)),
        };
        let malformed =
            |message: String| UsersError::Malformed { path: self.path.clone(), message };
        let document: TokenDocument =
            toml::from_str(&text).map_err(|e| malformed(e.to_string()))?;
        for (i, entry) in document.token.iter().enumerate() {
            check(&entry.uid, &entry.sha256).map_err(|e| malformed(e.to_string()))?;
            if document.token[..i].iter().any(|o| o.id == entry.id) {
                return Err(malformed(format!("token id {} appears twice", entry.id)));
            }
        }
        Ok(document.token)
    }

    /// Adds a new token for `uid` with `role`; returns its entry and the
    /// token itself, which is stored nowhere (only its hash is).
    pub fn add(&self, uid: &str, role: Role) -> Result<(TokenEntry, String), UsersError> {
        let token = new_token()?;
        let sha256 = hash_token(&token);
        check(uid, &sha256)?;
        let mut all = self.list()?;
        let entry = TokenEntry {
            id: format!("tok_{}", &hash_token(&sha256)[..12]),
            uid: uid.to_owned(),
            role,
            sha256,
            created_at: humantime::format_rfc3339_seconds(SystemTime::now()).to_string(),
        };
        all.push(entry.clone());
        self.write(all)?;
        Ok((entry, token))
    }

    /// Removes the token with this id, or every token of the user of this
    /// name; returns those removed.
    pub fn revoke(&self, id_or_uid: &str) -> Result<Vec<TokenEntry>, UsersError> {
        let (removed, kept): (Vec<_>, Vec<_>) =
            self.list()?.into_iter().partition(|e| e.id == id_or_uid || e.uid == id_or_uid);
        if removed.is_empty() {
            return Err(UsersError::Unknown(id_or_uid.to_owned()));
        }
        self.write(kept)?;
        Ok(removed)
    }

    fn write(&self, token: Vec<TokenEntry>) -> Result<(), UsersError> {
        let text = toml::to_string(&TokenDocument { token })
            .map_err(|e| UsersError::Invalid(format!("cannot write the token file: {e}")))?;
        let dir =
            self.path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir).map_err(self.io())?;
        let mut file = tempfile::NamedTempFile::new_in(dir).map_err(self.io())?;
        file.write_all(text.as_bytes()).map_err(self.io())?;
        file.as_file().sync_all().map_err(self.io())?;
        set_private(file.path()).map_err(self.io())?;
        file.persist(&self.path).map_err(|e| self.io()(e.error))?;
        Ok(())
    }
}

/// Only the owner reads the hashes: they are no secret, but no one else
/// needs them.
#[cfg(unix)]
fn set_private(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
}

/// Windows: the file inherits the user profile's ACL, which keeps other
/// users out already.
#[cfg(not(unix))]
fn set_private(_path: &Path) -> std::io::Result<()> {
    Ok(())
}

/// Who a request is: a user, or an admin (who may have no user name: the
/// single `token`, or a server with no token at all on loopback).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Identity {
    pub(crate) uid: Option<String>,
    pub(crate) admin: bool,
}

/// A stored hash and who it authenticates.
#[derive(Debug, Clone)]
struct Known {
    sha256: String,
    identity: Identity,
}

/// What identifies the file's current version.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stamp {
    inode: u64,
    len: u64,
    modified: Option<SystemTime>,
}

fn stamp(path: &Path) -> std::io::Result<Option<Stamp>> {
    // A file renamed over this one shows a new inode on Unix; on Windows
    // its length and time have to tell.
    #[cfg(unix)]
    let inode = |meta: &std::fs::Metadata| std::os::unix::fs::MetadataExt::ino(meta);
    #[cfg(not(unix))]
    let inode = |_: &std::fs::Metadata| 0;
    match std::fs::metadata(path) {
        Ok(meta) => {
            Ok(Some(Stamp { inode: inode(&meta), len: meta.len(), modified: meta.modified().ok() }))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// The token file as last read.
struct Loaded {
    stamp: Option<Stamp>,
    known: Vec<Known>,
}

/// Everyone who may call the API.
pub(crate) struct Users {
    /// The single `token` of `[server]`: an admin without a user name.
    single: Option<String>,
    configured: Vec<Known>,
    file: Option<(TokenFile, Mutex<Loaded>)>,
}

fn known(entries: Vec<TokenEntry>) -> Vec<Known> {
    entries
        .into_iter()
        .map(|e| Known {
            sha256: e.sha256,
            identity: Identity { uid: Some(e.uid), admin: e.role == Role::Admin },
        })
        .collect()
}

impl Users {
    /// The single token, `[server.users]` and the token file (read now: a
    /// malformed one is an error).
    pub(crate) fn new(
        single: Option<String>,
        users: &BTreeMap<String, UserSettings>,
        token_file: Option<&Path>,
    ) -> Result<Self, UsersError> {
        let mut configured = Vec::new();
        for (uid, user) in users {
            check(uid, &user.token_sha256)?;
            configured.push(Known {
                sha256: user.token_sha256.clone(),
                identity: Identity { uid: Some(uid.clone()), admin: user.role == Role::Admin },
            });
        }
        let file = match token_file {
            Some(path) => {
                let file = TokenFile::new(path);
                let stamp = stamp(path)
                    .map_err(|source| UsersError::Io { path: path.to_path_buf(), source })?;
                let known = known(file.list()?);
                Some((file, Mutex::new(Loaded { stamp, known })))
            }
            None => None,
        };
        Ok(Self { single, configured, file })
    }

    /// Whether no token of any kind is set: every request is an admin's.
    pub(crate) fn open(&self) -> bool {
        self.single.is_none() && self.configured.is_empty() && self.file.is_none()
    }

    /// Who `token` authenticates, if anyone.
    pub(crate) fn identify(&self, token: &str) -> Option<Identity> {
        let mut found = None;
        if let Some(single) = &self.single
            && bool::from(single.as_bytes().ct_eq(token.as_bytes()))
        {
            found = Some(Identity { uid: None, admin: true });
        }
        let hash = hash_token(token);
        // Every entry is compared, matched or not.
        let mut pick = |known: &[Known]| {
            for k in known {
                if bool::from(k.sha256.as_bytes().ct_eq(hash.as_bytes())) && found.is_none() {
                    found = Some(k.identity.clone());
                }
            }
        };
        pick(&self.configured);
        if let Some((file, loaded)) = &self.file {
            let mut loaded = loaded.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            refresh(file, &mut loaded);
            pick(&loaded.known);
        }
        found
    }
}

/// Reads the token file again when it changed. A file that cannot be read
/// or does not parse authenticates no one until it is fixed: a revocation
/// must never be undone by a broken edit.
fn refresh(file: &TokenFile, loaded: &mut Loaded) {
    let now = match stamp(file.path()) {
        Ok(now) => now,
        Err(e) => {
            tracing::warn!("token file {}: {e}; its tokens are refused", file.path().display());
            loaded.known.clear();
            loaded.stamp = None;
            return;
        }
    };
    if now.is_some() && now == loaded.stamp {
        return;
    }
    loaded.known = match file.list() {
        Ok(entries) => known(entries),
        Err(e) => {
            tracing::warn!("{e}; its tokens are refused until it is fixed");
            Vec::new()
        }
    };
    loaded.stamp = now;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_random_and_stored_as_their_hash_only() {
        let dir = tempfile::tempdir().unwrap();
        let file = TokenFile::new(dir.path().join("tokens.toml"));
        let (alice, token) = file.add("alice", Role::User).unwrap();
        let (_, other) = file.add("alice", Role::User).unwrap();
        assert_ne!(token, other);
        assert!(token.starts_with("rsn_") && token.len() == 68, "{token}");
        assert_eq!(alice.sha256, hash_token(&token));
        let text = std::fs::read_to_string(file.path()).unwrap();
        assert!(!text.contains(&token) && !text.contains(&other), "{text}");
        assert!(text.contains(&alice.sha256));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(file.path()).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        assert_eq!(file.list().unwrap().len(), 2);
        assert_eq!(file.revoke(&alice.id).unwrap(), [alice]);
        assert_eq!(file.revoke("alice").unwrap().len(), 1);
        assert!(matches!(file.revoke("alice"), Err(UsersError::Unknown(_))));
    }

    #[test]
    fn users_are_identified_by_their_token_s_hash() {
        let token = "alice-secret-token";
        let users = BTreeMap::from([
            (
                "alice".to_owned(),
                UserSettings { token_sha256: hash_token(token), role: Role::User },
            ),
            (
                "root".to_owned(),
                UserSettings { token_sha256: hash_token("root-token"), role: Role::Admin },
            ),
        ]);
        let all = Users::new(Some("single".into()), &users, None).unwrap();
        assert!(!all.open());
        assert_eq!(all.identify(token), Some(Identity { uid: Some("alice".into()), admin: false }));
        assert_eq!(
            all.identify("root-token"),
            Some(Identity { uid: Some("root".into()), admin: true })
        );
        assert_eq!(all.identify("single"), Some(Identity { uid: None, admin: true }));
        for wrong in ["", "alice-secret-toke", &hash_token(token)] {
            assert_eq!(all.identify(wrong), None, "{wrong}");
        }
        assert!(Users::new(None, &BTreeMap::new(), None).unwrap().open());
    }

    #[test]
    fn bad_user_entries_are_refused_with_their_name() {
        let bad = |uid: &str, hash: &str| {
            let users = BTreeMap::from([(
                uid.to_owned(),
                UserSettings { token_sha256: hash.into(), role: Role::User },
            )]);
            Users::new(None, &users, None).err().map(|e| e.to_string())
        };
        assert!(bad("alice", "plaintext-token").unwrap().contains("user alice: the token hash"));
        assert!(bad("alice", &hash_token("x").to_uppercase()).is_some());
        assert!(bad("a b", &hash_token("x")).unwrap().contains("user name"));
        assert!(bad("alice", &hash_token("x")).is_none());
    }

    #[test]
    fn the_token_file_is_read_again_when_it_changes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens.toml");
        let file = TokenFile::new(&path);
        let users = Users::new(None, &BTreeMap::new(), Some(&path)).unwrap();
        assert_eq!(users.identify("anything"), None, "no file yet: no one");
        let (entry, token) = file.add("bob", Role::Admin).unwrap();
        assert_eq!(users.identify(&token), Some(Identity { uid: Some("bob".into()), admin: true }));
        file.revoke(&entry.id).unwrap();
        assert_eq!(users.identify(&token), None);
        let (_, token) = file.add("bob", Role::User).unwrap();
        assert!(users.identify(&token).is_some());
        std::fs::write(&path, "[[token]]\nid = 3\n").unwrap();
        assert_eq!(users.identify(&token), None, "a broken file authenticates no one");
        let err = Users::new(None, &BTreeMap::new(), Some(&path)).err().unwrap();
        assert!(err.to_string().starts_with("malformed token file"), "{err}");
    }
}
