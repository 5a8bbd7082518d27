//! Message contents on spans, for users who opt in: the conventions'
//! `gen_ai.system_instructions`, `gen_ai.input.messages` and
//! `gen_ai.output.messages`, as JSON, every string passed through the
//! host's redaction. Images are named by kind only: their bytes would
//! swamp a tracing backend.

use crate::provider::{ChatRequest, ChatResponse};
use opentelemetry::KeyValue;
use reson_trace::{ContentPart, Message, Role};
use serde_json::{Value, json};

/// `text` with every registered secret replaced.
pub(super) fn redacted(text: &str) -> String {
    reson_text::redact::redact(text).into_owned()
}

/// The request's system instructions and messages.
pub(super) fn request(request: &ChatRequest) -> Vec<KeyValue> {
    let (system, messages): (Vec<&Message>, Vec<&Message>) =
        request.messages.iter().partition(|m| m.role == Role::System);
    let mut attributes = Vec::new();
    if !system.is_empty() {
        let parts: Vec<Value> = system.iter().flat_map(|m| parts(m)).collect();
        attributes.push(KeyValue::new("gen_ai.system_instructions", json_attribute(&parts)));
    }
    let messages: Vec<Value> = messages.iter().map(|m| message(m, None)).collect();
    attributes.push(KeyValue::new("gen_ai.input.messages", json_attribute(&messages)));
    attributes
}

/// The answer, as the one output message.
pub(super) fn response(response: &ChatResponse) -> Vec<KeyValue> {
    let output = [message(&response.message, Some(&response.finish_reason))];
    vec![KeyValue::new("gen_ai.output.messages", json_attribute(&output))]
}

fn json_attribute(value: &[Value]) -> String {
    redacted(&Value::from(value.to_vec()).to_string())
}

fn message(message: &Message, finish_reason: Option<&str>) -> Value {
    let role = match message.role {
        Role::System => "system",
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::Tool => "tool",
    };
    let mut out = json!({ "role": role, "parts": parts(message) });
    if let Some(reason) = finish_reason {
        out["finish_reason"] = reason.into();
    }
    out
}

fn parts(message: &Message) -> Vec<Value> {
    let mut parts = Vec::new();
    if let Some(id) = &message.tool_call_id {
        parts.push(json!({ "type": "tool_call_response", "id": id, "response": message.text() }));
    } else {
        for part in &message.content {
            parts.push(match part {
                ContentPart::Text { text } => json!({ "type": "text", "content": text }),
                ContentPart::ImageUrl { .. } | ContentPart::Image(_) => {
                    json!({ "type": "blob", "modality": "image" })
                }
            });
        }
    }
    for call in &message.tool_calls {
        let arguments = serde_json::from_str::<Value>(&call.arguments)
            .unwrap_or_else(|_| Value::String(call.arguments.clone()));
        parts.push(json!({
            "type": "tool_call", "id": call.id, "name": call.name, "arguments": arguments,
        }));
    }
    parts
}
