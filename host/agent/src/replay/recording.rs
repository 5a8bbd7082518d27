//! What a run keeps of each plugin tool call so that it can be replayed:
//! the call, the plugin that served it, its raw output and its effects,
//! filed with the trace as a record of kind [`EFFECTS`].

use crate::tools::ToolResult;
use reson_sandbox::capability::effects::{Effect, Effects};
use reson_trace::ToolCall;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The record kind recordings are filed under.
pub const EFFECTS: &str = "effects";

/// Longest record key a store takes.
const MAX_KEY: usize = 128;

/// The record key of call `call_id`: its characters outside
/// `[A-Za-z0-9_.-]` made `_`, at most 128 of them, never starting with a
/// dot. Two ids may share a key; the record names its own call, and a
/// replay checks it.
pub fn record_key(call_id: &str) -> String {
    let mut key: String = call_id
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-') { c } else { '_' })
        .take(MAX_KEY)
        .collect();
    if key.is_empty() || key.starts_with('.') {
        key.insert(0, '_');
        key.truncate(MAX_KEY);
    }
    key
}

/// A tool's result as the run got it: images by SHA-256 digest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedOutput {
    /// The text for the model.
    pub text: String,
    /// Whether the tool succeeded.
    pub ok: bool,
    /// The summary that replaces the text later, if any.
    pub long_term_memory: Option<String>,
    /// Whether the text goes to the model only once.
    pub include_output_only_once: bool,
    /// Each image's media type and SHA-256 (hex).
    pub images: Vec<(String, String)>,
}

impl RecordedOutput {
    /// What `result` holds.
    pub fn of(result: &ToolResult) -> Self {
        Self {
            text: result.text.clone(),
            ok: result.ok,
            long_term_memory: result.long_term_memory.clone(),
            include_output_only_once: result.include_output_only_once,
            images: result
                .images
                .iter()
                .map(|i| (i.media_type.clone(), hex::encode(Sha256::digest(&i.data))))
                .collect(),
        }
    }
}

/// One plugin tool call, as recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallRecording {
    /// The model's id of the call.
    pub call_id: String,
    /// The tool.
    pub tool: String,
    /// The plugin that served it.
    pub plugin: String,
    /// The SHA-256 of the plugin's component.
    pub sha256: String,
    /// The arguments, as the model wrote them.
    pub arguments: String,
    /// What the call returned.
    pub output: RecordedOutput,
    /// Its host calls, in order.
    pub effects: Vec<Effect>,
}

impl CallRecording {
    /// The recording of `call`, which gave `result` with `effects`
    /// recording; `None` when no plugin served it (a built-in or MCP tool).
    pub fn new(call: &ToolCall, result: &ToolResult, effects: &Effects) -> Option<Self> {
        let served = effects.call()?;
        Some(Self {
            call_id: call.id.clone(),
            tool: call.name.clone(),
            plugin: served.plugin,
            sha256: served.sha256,
            arguments: call.arguments.clone(),
            output: RecordedOutput::of(result),
            effects: effects.effects(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_keep_the_allowed_characters_only() {
        assert_eq!(record_key("call_1"), "call_1");
        assert_eq!(record_key("toolu/01 x"), "toolu_01_x");
        assert_eq!(record_key(".hidden"), "_.hidden");
        assert_eq!(record_key(""), "_");
        assert_eq!(record_key(&"x".repeat(300)).len(), MAX_KEY);
        assert_eq!(record_key(&format!(".{}", "x".repeat(300))).len(), MAX_KEY);
    }

    #[test]
    fn a_call_no_plugin_served_has_no_recording() {
        let call = ToolCall { id: "c".into(), name: "goal".into(), arguments: "{}".into() };
        let result = ToolResult::error("no".into());
        assert!(CallRecording::new(&call, &result, &Effects::record()).is_none());
    }
}
