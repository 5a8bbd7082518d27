//! The one redaction point: every secret value the host has handed to a
//! request is registered here, and every string the host writes (errors,
//! events, trace files, logs, terminal output) goes through [`redact`] on
//! its way out.

use std::borrow::Cow;
use std::sync::RwLock;

/// What a redacted secret is replaced with.
pub const REDACTED: &str = "[REDACTED]";

static VALUES: RwLock<Vec<String>> = RwLock::new(Vec::new());

/// Marks `value` as secret for the rest of the process.
pub fn register(value: &str) {
    if value.is_empty() {
        return;
    }
    let mut values = VALUES.write().unwrap_or_else(|e| e.into_inner());
    if !values.iter().any(|v| v == value) {
        values.push(value.to_owned());
        // Longest first, so a secret that contains another is replaced whole.
        values.sort_by_key(|v| std::cmp::Reverse(v.len()));
    }
}

/// `text` with every registered secret replaced by [`REDACTED`].
pub fn redact(text: &str) -> Cow<'_, str> {
    let values = VALUES.read().unwrap_or_else(|e| e.into_inner());
    let mut text = Cow::Borrowed(text);
    for value in values.iter() {
        if text.contains(value.as_str()) {
            text = Cow::Owned(text.replace(value.as_str(), REDACTED));
        }
    }
    text
}
