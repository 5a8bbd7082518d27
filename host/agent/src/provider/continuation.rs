//! Cross-provider continuation: a trace started on one provider continues
//! on another. Before each request the history is made acceptable to the
//! target: tool-call ids another provider minted but this one would reject
//! are rewritten (each call and its result the same way), and
//! provider-specific leftovers meant for another provider are dropped.

use reson_trace::Message;
use sha2::{Digest, Sha256};
use std::borrow::Cow;
use std::collections::HashMap;

/// Longest id every supported API accepts (OpenAI's limit).
const MAX_ID: usize = 40;

/// Whether every supported API accepts `id` (Anthropic allows only
/// `[a-zA-Z0-9_-]`; OpenAI at most 40 characters; Gemini has no ids).
fn acceptable(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_ID
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// A stable replacement: the same id always maps to the same new one.
fn replacement(id: &str) -> String {
    format!("call_{}", &hex::encode(Sha256::digest(id.as_bytes()))[..24])
}

/// `messages` as `provider` should see them; borrowed when nothing changes.
pub(crate) fn prepare<'a>(messages: &'a [Message], provider: &str) -> Cow<'a, [Message]> {
    let needs_ids = messages.iter().any(|m| {
        m.tool_calls.iter().any(|c| !acceptable(&c.id))
            || m.tool_call_id.as_deref().is_some_and(|id| !acceptable(id))
    });
    let foreign_data =
        messages.iter().any(|m| m.provider_data.as_ref().is_some_and(|d| !own_only(d, provider)));
    if !needs_ids && !foreign_data {
        return Cow::Borrowed(messages);
    }
    let mut renamed: HashMap<String, String> = HashMap::new();
    let mut rename = |id: &str| -> String {
        if acceptable(id) {
            return id.to_owned();
        }
        renamed.entry(id.to_owned()).or_insert_with(|| replacement(id)).clone()
    };
    let out = messages
        .iter()
        .map(|m| {
            let mut m = m.clone();
            for call in &mut m.tool_calls {
                call.id = rename(&call.id);
            }
            if let Some(id) = &m.tool_call_id {
                m.tool_call_id = Some(rename(id));
            }
            m.provider_data = m.provider_data.take().and_then(|d| keep_own(d, provider));
            m
        })
        .collect();
    Cow::Owned(out)
}

/// Provider data is an object keyed by provider name; only the target's
/// entry may go to the target.
fn own_only(data: &serde_json::Value, provider: &str) -> bool {
    data.as_object().is_some_and(|o| o.keys().all(|k| k == provider))
}

fn keep_own(data: serde_json::Value, provider: &str) -> Option<serde_json::Value> {
    let mut object = match data {
        serde_json::Value::Object(object) => object,
        _ => return None,
    };
    let own = object.remove(provider)?;
    Some(serde_json::json!({ provider: own }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use reson_trace::{Role, ToolCall};
    use serde_json::json;

    fn call(id: &str) -> Message {
        let mut m = Message::new(Role::Assistant, "");
        m.tool_calls =
            vec![ToolCall { id: id.into(), name: "read".into(), arguments: "{}".into() }];
        m
    }

    fn result(id: &str) -> Message {
        Message::tool_result(
            &ToolCall { id: id.into(), name: "read".into(), arguments: "{}".into() },
            "ok",
        )
    }

    #[test]
    fn a_history_in_the_right_format_is_passed_untouched() {
        let mut thinking = call("toolu_01A");
        thinking.provider_data = Some(json!({ "anthropic": { "thinking": [] } }));
        let history = vec![Message::new(Role::User, "hi"), thinking, result("toolu_01A")];
        assert!(matches!(prepare(&history, "anthropic"), Cow::Borrowed(_)));
    }

    #[test]
    fn rejected_ids_are_rewritten_consistently() {
        let long = "call_".to_owned() + &"x".repeat(60);
        let history =
            vec![call("fc.1:abc"), result("fc.1:abc"), call(&long), result(&long), call("ok_id")];
        let out = prepare(&history, "anthropic");
        let first = &out[0].tool_calls[0].id;
        assert!(acceptable(first) && first.starts_with("call_"), "{first}");
        assert_eq!(
            out[1].tool_call_id.as_deref(),
            Some(first.as_str()),
            "call and result still match"
        );
        let second = &out[2].tool_calls[0].id;
        assert!(acceptable(second) && second != first);
        assert_eq!(out[3].tool_call_id.as_deref(), Some(second.as_str()));
        assert_eq!(out[4].tool_calls[0].id, "ok_id", "acceptable ids are kept");
        assert_eq!(
            prepare(&history, "openai")[0].tool_calls[0].id,
            *first,
            "stable across requests"
        );
    }

    #[test]
    fn another_providers_leftovers_are_dropped() {
        let mut m = call("a1");
        m.provider_data = Some(json!({ "anthropic": { "thinking": [{ "signature": "sig" }] } }));
        let out = prepare(std::slice::from_ref(&m), "openai");
        assert_eq!(out[0].provider_data, None);
        let kept = prepare(std::slice::from_ref(&m), "anthropic");
        assert_eq!(kept[0].provider_data, m.provider_data);
    }
}
