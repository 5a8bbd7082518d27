//! Thought signatures: opaque tokens Gemini's thinking models attach to the
//! parts of an answer and want back, on the same parts, when the
//! conversation is sent again (Gemini 3 refuses a function call replayed
//! without its signature). They travel in the message's `provider-data`,
//! which the host stores and returns but drops when the provider changes.

use serde::{Deserialize, Serialize};

/// The signatures of one assistant message.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
pub struct Signatures {
    /// The signature of the text (carried by a text or thought part).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// The signature of each tool call, by index; most have none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<Option<String>>,
}

/// The `provider-data` object. The host keys provider data by provider
/// name and passes a provider only its own entry.
#[derive(Serialize, Deserialize)]
struct ProviderData {
    gemini: GeminiData,
}

#[derive(Serialize, Deserialize)]
struct GeminiData {
    thought_signatures: Signatures,
}

impl Signatures {
    /// The signatures stored in a message's `provider-data`; none when it is
    /// absent or not ours.
    pub fn from_provider_data(data: Option<&str>) -> Self {
        data.and_then(|text| serde_json::from_str::<ProviderData>(text).ok())
            .map(|data| data.gemini.thought_signatures)
            .unwrap_or_default()
    }

    /// The `provider-data` to store, or `None` when there is no signature.
    pub fn to_provider_data(&self) -> Option<String> {
        let any = self.text.is_some() || self.tool_calls.iter().any(Option::is_some);
        let data = ProviderData { gemini: GeminiData { thought_signatures: self.clone() } };
        any.then(|| serde_json::to_string(&data).ok()).flatten()
    }

    /// The signature of tool call `index`.
    pub fn tool_call(&self, index: usize) -> Option<&str> {
        self.tool_calls.get(index).and_then(Option::as_deref)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_round_trip_through_provider_data() {
        let signatures =
            Signatures { text: Some("t1".into()), tool_calls: vec![None, Some("c1".into())] };
        let data = signatures.to_provider_data().unwrap();
        assert_eq!(
            data,
            r#"{"gemini":{"thought_signatures":{"text":"t1","tool_calls":[null,"c1"]}}}"#
        );
        let back = Signatures::from_provider_data(Some(&data));
        assert_eq!(back, signatures);
        assert_eq!(back.tool_call(1), Some("c1"));
        assert_eq!(back.tool_call(0), None);
        assert_eq!(back.tool_call(7), None);
    }

    #[test]
    fn no_signature_means_no_provider_data_and_foreign_data_is_ignored() {
        assert_eq!(Signatures { text: None, tool_calls: vec![None] }.to_provider_data(), None);
        assert_eq!(
            Signatures::from_provider_data(Some(r#"{"openai": {"item_id": "x"}}"#)),
            Signatures::default()
        );
        assert_eq!(Signatures::from_provider_data(Some("not json")), Signatures::default());
        assert_eq!(Signatures::from_provider_data(None), Signatures::default());
    }
}
