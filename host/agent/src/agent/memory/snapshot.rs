//! A point-in-time copy of a session's memory: rendered into the system
//! prompt, or restored into another session.

use super::{MemoryError, SessionEntries, SessionMemory};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt::Write;

/// Every entry of one session at the moment it was taken, by namespace.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemorySnapshot {
    /// The session it was taken from.
    pub session_id: String,
    /// Keys and values by namespace.
    pub entries: SessionEntries,
}

impl MemorySnapshot {
    /// Whether there is no entry at all.
    pub fn is_empty(&self) -> bool {
        self.entries.values().all(BTreeMap::is_empty)
    }

    /// The block a session appends to its system prompt, or an empty string
    /// when there are no entries:
    ///
    /// ```text
    /// <session-context>
    /// [namespace]
    /// key: value
    /// other_key: {"a":1}
    ///
    /// [other-namespace]
    /// k: v
    /// </session-context>
    /// ```
    ///
    /// Namespaces and keys come sorted; values are compact JSON except that
    /// strings appear without quotes. There is no trailing newline. Control
    /// characters in names and strings are escaped (`\n`, `\u0007`), so an
    /// entry is always one line and a value cannot start a fake header.
    pub fn render(&self) -> String {
        let mut namespaces = self.entries.iter().filter(|(_, keys)| !keys.is_empty()).peekable();
        if namespaces.peek().is_none() {
            return String::new();
        }
        let mut out = String::from("<session-context>\n");
        for (i, (namespace, keys)) in namespaces.enumerate() {
            if i > 0 {
                out.push('\n');
            }
            out.push('[');
            push_one_line(&mut out, namespace);
            out.push_str("]\n");
            for (key, value) in keys {
                push_one_line(&mut out, key);
                out.push_str(": ");
                match value {
                    Value::String(text) => push_one_line(&mut out, text),
                    // Compact JSON escapes control characters itself.
                    other => {
                        let _ = write!(out, "{other}");
                    }
                }
                out.push('\n');
            }
        }
        out.push_str("</session-context>");
        out
    }

    /// Writes every entry into `memory`'s session, replacing values under
    /// the same keys and keeping its other entries: how a context is
    /// carried from one session into another.
    pub async fn restore_into(&self, memory: &SessionMemory) -> Result<(), MemoryError> {
        memory.store.merge(&memory.session_id, &self.entries).await
    }
}

/// Appends `text` with control and line-separator characters escaped.
fn push_one_line(out: &mut String, text: &str) {
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() || matches!(c, '\u{2028}' | '\u{2029}') => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
}
