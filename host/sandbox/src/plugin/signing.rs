//! Signed plugins: Ed25519 signatures over a whole component in
//! wasmsign2's format, embedded as the component's first custom section or
//! detached beside it (`NAME.wasm.sig`); the trust store `[plugins]
//! trusted_keys` names; and each component's verdict, remembered by
//! content so that a load from the compiled-code cache neither reads nor
//! hashes the component again.
//!
//! A verdict is a function of the component's digest, the detached
//! signature's bytes and the trusted keys, so it is remembered under a key
//! made of all three: a changed file has another digest (see
//! [`digest`](super::digest)), a changed `.sig` or key list another key.

use super::digest::{self, sha256};
use crate::config::{INLINE_KEY_PREFIX, PluginsConfig, parse_inline_key, usable_key};
use base64::Engine as _;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::fmt;
use std::io::Cursor;
use std::path::{Path, PathBuf};
use wasmsign2::{KeyPair, Module, PublicKey, PublicKeySet, SecretKey, SignatureData, WSError};

/// Largest detached signature read: room for every signature wasmsign2
/// allows on one component.
const MAX_SIGNATURE_BYTES: u64 = 64 << 10;
/// The name of the custom section that carries an embedded signature.
const SECTION_NAME: &[u8] = b"signature";
/// Bytes of a component's start that tell whether it carries a signature:
/// the header, the section id, its size and its name.
pub(crate) const HEAD_BYTES: usize = 32;

/// Where a component's signature is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Placement {
    /// The component's first custom section.
    Embedded,
    /// `NAME.wasm.sig` beside the component.
    Detached,
}

impl fmt::Display for Placement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Embedded => "embedded",
            Self::Detached => "detached",
        })
    }
}

/// What a plugin's signature says about it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "kebab-case")]
pub enum SignatureStatus {
    /// No signature, embedded or detached.
    Unsigned,
    /// Trusted keys signed exactly this content.
    Signed {
        /// The trusted keys' names, sorted.
        signers: Vec<String>,
        /// Where the signature is.
        placement: Placement,
    },
    /// Signed for this content, but by no trusted key.
    Untrusted {
        /// The key ids the signatures name (hex), if they name any.
        key_ids: Vec<String>,
        /// Where the signature is.
        placement: Placement,
    },
    /// The signature does not match the content: the component changed
    /// after it was signed, or a trusted key's signature was altered.
    Mismatch {
        /// Where the signature is.
        placement: Placement,
    },
    /// The signature cannot be read.
    Malformed {
        /// What is wrong with it.
        reason: String,
        /// Where the signature is.
        placement: Placement,
    },
}

impl SignatureStatus {
    /// Whether a trusted key signed the content.
    pub fn is_trusted(&self) -> bool {
        matches!(self, Self::Signed { .. })
    }

    /// Whether there is a signature and it is bad (unsigned is not bad).
    pub fn is_bad(&self) -> bool {
        !matches!(self, Self::Unsigned | Self::Signed { .. })
    }
}

impl fmt::Display for SignatureStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unsigned => f.write_str("unsigned"),
            Self::Signed { signers, placement } => {
                write!(f, "signed by {} ({placement})", signers.join(", "))
            }
            Self::Untrusted { key_ids, placement } if key_ids.is_empty() => {
                write!(f, "signed ({placement}), but by no trusted key")
            }
            Self::Untrusted { key_ids, placement } => write!(
                f,
                "signed ({placement}), but by no trusted key (key id {})",
                key_ids.join(", ")
            ),
            Self::Mismatch { placement } => write!(
                f,
                "the {placement} signature does not match the content (changed after signing, \
                 or the signature was altered)"
            ),
            Self::Malformed { reason, placement } => {
                write!(f, "the {placement} signature is unreadable: {reason}")
            }
        }
    }
}

/// Why a key could not be made or read, or a component not signed.
#[derive(Debug, thiserror::Error)]
pub enum SigningError {
    /// Reading or writing a file failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A key file or inline key is not an Ed25519 key.
    #[error("{key}: not an Ed25519 {kind} key ({reason})")]
    BadKey {
        /// The file, or the inline key.
        key: String,
        /// `public` or `secret`.
        kind: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// A key name that is no plain file name.
    #[error("key name {0:?}: use letters, digits, `-`, `_` and `.`, not starting with `.`")]
    BadName(String),
    /// `keygen` would overwrite a key.
    #[error("{}: already exists; choose another name or directory", .0.display())]
    Exists(PathBuf),
    /// The file is not a WebAssembly component or module.
    #[error("{}: not a WebAssembly file wasmsign2 can sign ({reason})", path.display())]
    NotWasm {
        /// The file.
        path: PathBuf,
        /// The parser's message.
        reason: String,
    },
    /// A detached signature was asked for a component that carries one.
    #[error(
        "{}: already carries an embedded signature; sign it without --detached to add one",
        .0.display()
    )]
    AlreadyEmbedded(PathBuf),
    /// The key signed this component already.
    #[error("{}: already signed by key id {key_id}", path.display())]
    AlreadySigned {
        /// The component.
        path: PathBuf,
        /// The signing key's id.
        key_id: String,
    },
    /// The signature written would not verify: wasmsign2 re-encodes the
    /// sections it signs, and this file's encoding is not the one it
    /// writes.
    #[error(
        "{}: the signature would not verify against this file (its section sizes are not \
         minimally encoded); sign it embedded, which rewrites the file",
        .0.display()
    )]
    NotCanonical(PathBuf),
    /// wasmsign2 failed.
    #[error("{}: cannot sign: {reason}", path.display())]
    Sign {
        /// The component.
        path: PathBuf,
        /// wasmsign2's message.
        reason: String,
    },
}

/// The detached signature file of the component at `component`.
pub fn detached_path(component: &Path) -> PathBuf {
    let mut name = component.as_os_str().to_owned();
    name.push(".sig");
    PathBuf::from(name)
}

/// A public key's id: wasmsign2's default (an HMAC of the key), in hex.
fn key_id(pk: &PublicKey) -> String {
    hex::encode(pk.clone().attach_default_key_id().key_id.unwrap_or_default())
}

/// The inline form of a public key (`ed25519:` and the base64 of its 32
/// bytes), as `[plugins] trusted_keys` takes it.
fn inline(pk: &PublicKey) -> String {
    format!("{INLINE_KEY_PREFIX}{}", base64::engine::general_purpose::STANDARD.encode(*pk.pk))
}

/// A key pair written by [`keygen`].
#[derive(Debug, Clone)]
pub struct KeyFiles {
    /// The secret key (PEM, readable by its owner only).
    pub secret: PathBuf,
    /// The public key (PEM).
    pub public: PathBuf,
    /// The public key inline, for `[plugins] trusted_keys`.
    pub inline: String,
    /// The public key's id, as signatures and `reson plugins list` show it.
    pub key_id: String,
}

/// Makes an Ed25519 key pair and writes it to `dir/NAME.key` (readable by
/// its owner only) and `dir/NAME.pub`, never over existing files.
pub fn keygen(dir: &Path, name: &str) -> Result<KeyFiles, SigningError> {
    use std::io::Write;
    let io = |path: &Path| {
        let path = path.to_owned();
        move |source| SigningError::Io { path, source }
    };
    let plain = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    if name.is_empty() || name.starts_with('.') || !name.chars().all(plain) {
        return Err(SigningError::BadName(name.to_owned()));
    }
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let (secret, public) = (dir.join(format!("{name}.key")), dir.join(format!("{name}.pub")));
    for path in [&secret, &public] {
        if path.exists() {
            return Err(SigningError::Exists(path.clone()));
        }
    }
    let pair = KeyPair::generate();
    let write = |path: &Path, mode: u32, text: &str| {
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        // Windows keeps the secret key private by the user profile's ACL.
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, mode);
        #[cfg(not(unix))]
        let _ = mode;
        let mut file = options.open(path).map_err(|e| match e.kind() {
            std::io::ErrorKind::AlreadyExists => SigningError::Exists(path.to_owned()),
            _ => SigningError::Io { path: path.to_owned(), source: e },
        })?;
        file.write_all(text.as_bytes()).map_err(io(path))
    };
    write(&secret, 0o600, &pair.sk.to_pem())?;
    write(&public, 0o644, &pair.pk.to_pem())?;
    Ok(KeyFiles { secret, public, inline: inline(&pair.pk), key_id: key_id(&pair.pk) })
}

/// What [`sign`] did.
#[derive(Debug, Clone)]
pub struct Signed {
    /// The file written: the component, or its detached signature.
    pub written: PathBuf,
    /// The signing key's id.
    pub key_id: String,
    /// Signatures the component now carries, this one included.
    pub signatures: usize,
}

/// Signs the component at `component` with the secret key in the file
/// `secret_key` (PEM, DER or wasmsign2's raw form), adding to any
/// signatures it has: embedded (the component is rewritten, atomically)
/// or detached (into [`detached_path`]). The result is verified before
/// anything is written.
pub fn sign(component: &Path, secret_key: &Path, detached: bool) -> Result<Signed, SigningError> {
    let read = |path: &Path| {
        std::fs::read(path).map_err(|source| SigningError::Io { path: path.to_owned(), source })
    };
    let sk = SecretKey::from_any(&read(secret_key)?).map_err(|e| SigningError::BadKey {
        key: secret_key.display().to_string(),
        kind: "secret",
        reason: e.to_string(),
    })?;
    let pk = PublicKey { pk: sk.sk.public_key(), key_id: None };
    let id = key_id(&pk);
    let bytes = read(component)?;
    let not_wasm =
        |e: WSError| SigningError::NotWasm { path: component.to_owned(), reason: e.to_string() };
    let module = Module::deserialize(&mut Cursor::new(&bytes)).map_err(not_wasm)?;
    let embedded = module.sections.first().is_some_and(|s| s.is_signature_header());
    let sig_path = detached_path(component);
    let module = match (detached, embedded) {
        (true, true) => return Err(SigningError::AlreadyEmbedded(component.to_owned())),
        (true, false) if sig_path.exists() => {
            module.attach_signature(&read(&sig_path)?).map_err(not_wasm)?
        }
        _ => module,
    };
    let failed = |e: WSError| match e {
        WSError::DuplicateSignature => {
            SigningError::AlreadySigned { path: component.to_owned(), key_id: id.clone() }
        }
        e => SigningError::Sign { path: component.to_owned(), reason: e.to_string() },
    };
    let key_id_bytes = pk.clone().attach_default_key_id().key_id;
    let (signed, header) =
        sk.sign_multi(module, key_id_bytes.as_ref(), false, false).map_err(failed)?;
    let signatures = SignatureData::deserialize(&header)
        .map(|d| d.signed_hashes_set.iter().map(|s| s.signatures.len()).sum())
        .map_err(failed)?;
    let (written, out, check) = if detached {
        let (_, signature) = signed.detach_signature().map_err(failed)?;
        let check = pk.verify(&mut Cursor::new(&bytes), Some(&signature));
        (sig_path, signature, check)
    } else {
        let mut out = Vec::with_capacity(bytes.len() + 256);
        signed.serialize(&mut out).map_err(failed)?;
        let check = pk.verify(&mut Cursor::new(&out), None);
        (component.to_owned(), out, check)
    };
    if check.is_err() {
        return Err(SigningError::NotCanonical(component.to_owned()));
    }
    digest::write_atomically(&written, &out, std::fs::metadata(component).ok())
        .map_err(|source| SigningError::Io { path: written.clone(), source })?;
    Ok(Signed { written, key_id: id, signatures })
}

/// A public key the config trusts.
struct Trusted {
    name: String,
    key_id: String,
    pk: PublicKey,
}

/// The keys `[plugins] trusted_keys` names, and whether a signature by one
/// of them is required.
pub(crate) struct TrustStore {
    keys: Vec<Trusted>,
    set: PublicKeySet,
    pub(crate) require: bool,
    /// Identifies the keys and their names, for remembered verdicts.
    fingerprint: String,
}

impl TrustStore {
    /// Reads the keys the config names (files relative to it).
    pub(crate) fn from_config(config: &PluginsConfig) -> Result<Self, SigningError> {
        let mut keys: Vec<Trusted> = Vec::new();
        for entry in &config.plugins.trusted_keys {
            let (pk, default_name) = match entry.inline() {
                Some(text) => {
                    let pk = parse_inline_key(text).map_err(|reason| SigningError::BadKey {
                        key: entry.key.clone(),
                        kind: "public",
                        reason,
                    })?;
                    let id = key_id(&pk);
                    (pk, id)
                }
                None => {
                    let path = config.resolve(Path::new(&entry.key));
                    let bytes = std::fs::read(&path)
                        .map_err(|source| SigningError::Io { path: path.clone(), source })?;
                    let pk = PublicKey::from_any(&bytes)
                        .map_err(|e| e.to_string())
                        .and_then(usable_key)
                        .map_err(|reason| SigningError::BadKey {
                            key: path.display().to_string(),
                            kind: "public",
                            reason,
                        })?;
                    let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned());
                    let name = stem.unwrap_or_else(|| key_id(&pk));
                    (pk, name)
                }
            };
            if keys.iter().any(|k| k.pk == pk) {
                return Err(SigningError::BadKey {
                    key: entry.key.clone(),
                    kind: "public",
                    reason: "[plugins] trusted_keys lists this key twice".into(),
                });
            }
            let name = entry.name.clone().unwrap_or(default_name);
            keys.push(Trusted { name, key_id: key_id(&pk), pk });
        }
        // Names too: a remembered verdict shows them.
        let mut named: Vec<String> =
            keys.iter().map(|k| format!("{}={:?}", hex::encode(*k.pk.pk), k.name)).collect();
        named.sort_unstable();
        let fingerprint = sha256(named.join(" ").as_bytes());
        let set = PublicKeySet::new(keys.iter().map(|k| k.pk.clone()).collect());
        Ok(Self { keys, set, require: config.plugins.require_signature, fingerprint })
    }

    /// The verdict on a component whose first bytes are `head` and whose
    /// digest is `digest`, with the detached signature `detached` if there
    /// is one: remembered in `cache_dir`, or found from the bytes that
    /// `bytes` reads (only then).
    pub(crate) fn check<E>(
        &self,
        cache_dir: &Path,
        digest: &str,
        head: &[u8],
        detached: Option<&[u8]>,
        bytes: impl FnOnce() -> Result<std::sync::Arc<[u8]>, E>,
    ) -> Result<SignatureStatus, E> {
        // A component that carries a signature is judged by it; a detached
        // one beside it would sign other bytes (the section included).
        let detached = if embedded(head) { None } else { detached };
        if !embedded(head) && detached.is_none() {
            return Ok(SignatureStatus::Unsigned);
        }
        let sig = detached.map_or_else(|| "embedded".to_owned(), sha256);
        let key = sha256(format!("v1 {digest} {sig} {}", self.fingerprint).as_bytes());
        let entry = cache_dir.join("signatures").join(&key[..32]);
        if let Some(status) =
            std::fs::read(&entry).ok().and_then(|text| serde_json::from_slice(&text).ok())
        {
            return Ok(status);
        }
        let status = self.verify(&bytes()?, detached);
        let text = serde_json::to_vec(&status).expect("a status serializes");
        if let Err(e) = digest::write_atomically(&entry, &text, None) {
            tracing::warn!(path = %entry.display(), "cannot remember a signature verdict: {e}");
        }
        Ok(status)
    }

    /// Verifies `bytes` against the trusted keys.
    fn verify(&self, bytes: &[u8], detached: Option<&[u8]>) -> SignatureStatus {
        let placement = if detached.is_some() { Placement::Detached } else { Placement::Embedded };
        let malformed = |reason: String| SignatureStatus::Malformed { reason, placement };
        let (data, content) = match detached {
            Some(signature) => (SignatureData::deserialize(signature), bytes.get(8..)),
            None => match first_section(bytes) {
                Some((payload, rest)) => (signature_payload(payload), Some(rest)),
                None => return malformed("the signature section is cut short".into()),
            },
        };
        let (data, content) = match (data, content) {
            (Ok(data), Some(content)) => (data, content),
            (Err(e), _) => return malformed(e.to_string()),
            (_, None) => return malformed("the component is cut short".into()),
        };
        match self.set.verify(&mut Cursor::new(bytes), detached) {
            Ok(valid) => {
                let mut signers: Vec<String> = self
                    .keys
                    .iter()
                    .filter(|k| valid.contains(&k.pk))
                    .map(|k| k.name.clone())
                    .collect();
                signers.sort();
                SignatureStatus::Signed { signers, placement }
            }
            Err(WSError::VerificationFailed) => {
                let hash = Sha256::digest(content).to_vec();
                let signed_this = data.signed_hashes_set.iter().any(|s| s.hashes.contains(&hash));
                let mut key_ids: Vec<String> = data
                    .signed_hashes_set
                    .iter()
                    .flat_map(|s| &s.signatures)
                    .filter_map(|s| s.key_id.as_deref().map(hex::encode))
                    .collect();
                key_ids.sort();
                key_ids.dedup();
                let claims_trusted =
                    key_ids.iter().any(|id| self.keys.iter().any(|k| k.key_id == *id));
                if signed_this && !claims_trusted {
                    SignatureStatus::Untrusted { key_ids, placement }
                } else {
                    SignatureStatus::Mismatch { placement }
                }
            }
            Err(e) => malformed(e.to_string()),
        }
    }
}

/// A LEB128 `u32` at the start of `bytes`, and the bytes it took.
fn leb_u32(bytes: &[u8]) -> Option<(u32, usize)> {
    let mut value = 0u32;
    for (i, byte) in bytes.iter().take(5).enumerate() {
        value |= u32::from(byte & 0x7f).checked_shl(7 * i as u32)?;
        if byte & 0x80 == 0 {
            return Some((value, i + 1));
        }
    }
    None
}

/// The payload of the first section of the component `bytes`, and what
/// follows it.
fn first_section(bytes: &[u8]) -> Option<(&[u8], &[u8])> {
    let after_id = bytes.get(9..)?;
    let (size, n) = leb_u32(after_id)?;
    let start = 9 + n;
    let end = start.checked_add(usize::try_from(size).ok()?)?;
    Some((bytes.get(start..end)?, bytes.get(end..)?))
}

/// The signature data in a custom section's payload (its name, then the
/// data).
fn signature_payload(payload: &[u8]) -> Result<SignatureData, WSError> {
    let (len, n) = leb_u32(payload).ok_or(WSError::ParseError)?;
    let data = payload.get(n + len as usize..).ok_or(WSError::ParseError)?;
    SignatureData::deserialize(data)
}

/// Whether a component starting with `head` carries an embedded signature:
/// its first section is the custom section `signature`.
pub(crate) fn embedded(head: &[u8]) -> bool {
    let Some(after_id) = head.get(9..).filter(|_| head.get(8) == Some(&0)) else {
        return false;
    };
    let Some((_, n)) = leb_u32(after_id) else { return false };
    let name = &after_id[n..];
    leb_u32(name).is_some_and(|(len, m)| {
        len as usize == SECTION_NAME.len()
            && name.get(m..m + SECTION_NAME.len()) == Some(SECTION_NAME)
    })
}

/// Reads the detached signature beside `component`, if there is one.
pub(crate) fn read_detached(component: &Path) -> Result<Option<Vec<u8>>, (PathBuf, String)> {
    let path = detached_path(component);
    let meta = match std::fs::metadata(&path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err((path, e.to_string())),
    };
    if !meta.is_file() || meta.len() > MAX_SIGNATURE_BYTES {
        return Err((path, format!("not a signature file of at most {MAX_SIGNATURE_BYTES} bytes")));
    }
    std::fs::read(&path).map(Some).map_err(|e| (path, e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signature_section_is_told_from_the_first_bytes() {
        let header = *b"\0asm\x0d\0\x01\0";
        let signed = [&header[..], &[0, 0x80, 0x01, 9], b"signature", &[0; 16]].concat();
        assert!(embedded(&signed[..HEAD_BYTES]));
        let other = [&header[..], &[0, 5, 4], b"name", &[0; 8]].concat();
        assert!(!embedded(&other));
        let core = [&header[..], &[1, 0x80, 0x80, 0x80, 0x80, 0x01]].concat();
        assert!(!embedded(&core));
        assert!(!embedded(&header));
    }

    #[test]
    fn inline_keys_must_be_32_base64_bytes() {
        let pair = KeyPair::generate();
        let text = inline(&pair.pk);
        assert_eq!(
            parse_inline_key(text.strip_prefix(INLINE_KEY_PREFIX).unwrap()).unwrap(),
            pair.pk
        );
        assert!(parse_inline_key("AAAA").unwrap_err().contains("3 bytes"));
        assert!(parse_inline_key("not base64!").unwrap_err().contains("base64"));
    }
}
