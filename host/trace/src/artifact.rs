//! What a trace keeps beside its messages so that a run can be travelled
//! back to and replayed: objects and records.
//!
//! - An **object** is bytes kept once under their SHA-256 (the contents of
//!   a workspace file at a checkpoint). Writing one that is already kept
//!   costs a lookup, not a copy: a file that changes back and forth, or
//!   that many checkpoints share, is kept once per trace.
//! - A **record** is a JSON document filed under a kind and a key (a
//!   checkpoint's manifest, the effects a tool call had). Writing one
//!   again replaces it. Records pass the redaction point as every other
//!   JSON a store keeps; objects, like images, are kept byte for byte.
//!
//! Both move with the trace: [`TraceSnapshot`](super::TraceSnapshot)
//! carries them, so `reson traces migrate` keeps them.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// An object's bytes with the digest they are kept under, as a
/// [`TraceSnapshot`](super::TraceSnapshot) carries them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectData {
    /// The lowercase hex SHA-256 of `data`.
    pub digest: String,
    /// The bytes.
    #[serde(with = "base64_bytes")]
    pub data: Vec<u8>,
}

impl ObjectData {
    /// `data` with its digest.
    pub fn new(data: Vec<u8>) -> Self {
        Self { digest: digest_of(&data), data }
    }
}

/// A record of a trace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordData {
    /// What it is (`checkpoint`, `effects`, ...): records of one kind are
    /// listed together.
    pub kind: String,
    /// Which one, within its kind; listed in the order of keys.
    pub key: String,
    /// The document.
    pub body: serde_json::Value,
}

/// The lowercase hex SHA-256 of `data`: the name an object is kept under.
pub fn digest_of(data: &[u8]) -> String {
    hex::encode(Sha256::digest(data))
}

/// Objects travel in snapshots (JSON) as base64, not as arrays of numbers.
mod base64_bytes {
    use base64::Engine;
    use base64::engine::general_purpose::STANDARD;
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(data: &[u8], serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&STANDARD.encode(data))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(d)?;
        STANDARD.decode(text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_object_is_named_by_its_sha256() {
        let object = ObjectData::new(b"hello".to_vec());
        assert_eq!(
            object.digest,
            "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
        );
    }

    #[test]
    fn objects_travel_as_base64() {
        let object = ObjectData::new(vec![0, 159, 146, 150]);
        let json = serde_json::to_string(&object).unwrap();
        assert!(json.contains("\"AJ+Slg==\""), "{json}");
        assert_eq!(serde_json::from_str::<ObjectData>(&json).unwrap(), object);
    }
}
