//! Extended-thinking blocks, carried between turns in a message's
//! `provider_data` as `{"anthropic": {"thinking": [...]}}`.
//!
//! The API checks the signatures of the thinking blocks sent back with an
//! assistant turn (they must come back unchanged while a tool-use loop is in
//! progress), so the blocks are kept whole, in order. Redacted blocks are
//! kept as `{"data": ...}` entries of the same list.

use serde_json::{Value, json};

/// One thinking block of an assistant turn.
#[derive(Debug, Clone, PartialEq)]
pub enum Thinking {
    /// Visible reasoning and the signature that vouches for it.
    Signed { thinking: String, signature: String },
    /// Reasoning the API encrypted; only `data` goes back.
    Redacted { data: String },
}

/// The `provider_data` text that carries `blocks`, or `None` when there are
/// none.
pub fn to_provider_data(blocks: &[Thinking]) -> Option<String> {
    if blocks.is_empty() {
        return None;
    }
    let entries: Vec<Value> = blocks
        .iter()
        .map(|block| match block {
            Thinking::Signed { thinking, signature } => {
                json!({"thinking": thinking, "signature": signature})
            }
            Thinking::Redacted { data } => json!({"data": data}),
        })
        .collect();
    Some(json!({"anthropic": {"thinking": entries}}).to_string())
}

/// The API content blocks for the thinking held in `provider_data`.
/// Anything else in it is ignored, and so is an entry without a signature,
/// which the API would refuse.
pub fn api_blocks(provider_data: Option<&str>) -> Vec<Value> {
    let Some(data) = provider_data.and_then(|text| serde_json::from_str::<Value>(text).ok()) else {
        return Vec::new();
    };
    let Some(entries) = data.pointer("/anthropic/thinking").and_then(Value::as_array) else {
        return Vec::new();
    };
    entries
        .iter()
        .filter_map(|entry| {
            if let Some(data) = entry.get("data").and_then(Value::as_str) {
                return Some(json!({"type": "redacted_thinking", "data": data}));
            }
            let thinking = entry.get("thinking").and_then(Value::as_str)?;
            let signature = entry.get("signature").and_then(Value::as_str)?;
            Some(json!({"type": "thinking", "thinking": thinking, "signature": signature}))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_round_trip_through_provider_data() {
        let blocks = vec![
            Thinking::Signed { thinking: "Check the file.".into(), signature: "EqQBCkYI".into() },
            Thinking::Redacted { data: "EmwKAhgB".into() },
        ];
        let data = to_provider_data(&blocks).unwrap();
        let value: Value = serde_json::from_str(&data).unwrap();
        assert_eq!(
            value,
            json!({"anthropic": {"thinking": [
                {"thinking": "Check the file.", "signature": "EqQBCkYI"},
                {"data": "EmwKAhgB"}
            ]}})
        );
        assert_eq!(
            api_blocks(Some(&data)),
            [
                json!({"type": "thinking", "thinking": "Check the file.", "signature": "EqQBCkYI"}),
                json!({"type": "redacted_thinking", "data": "EmwKAhgB"}),
            ]
        );
    }

    #[test]
    fn no_blocks_means_no_provider_data() {
        assert_eq!(to_provider_data(&[]), None);
    }

    #[test]
    fn foreign_or_broken_provider_data_gives_no_blocks() {
        assert!(api_blocks(None).is_empty());
        assert!(api_blocks(Some("not json")).is_empty());
        assert!(api_blocks(Some(r#"{"openai": {"reasoning_id": "rs_1"}}"#)).is_empty());
        assert!(api_blocks(Some(r#"{"anthropic": {"thinking": "x"}}"#)).is_empty());
        let unsigned = r#"{"anthropic": {"thinking": [{"thinking": "t"}, 7]}}"#;
        assert!(api_blocks(Some(unsigned)).is_empty());
    }
}
