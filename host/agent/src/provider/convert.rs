//! Between the stored message shape and the contract's chat types.

use super::{ChatResponse, Delta, LlmParams, ProviderError};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use reson_sandbox::contract::bindings::provider::reson::plugin::chat_types as wit;
use reson_sandbox::contract::bindings::tool::reson::plugin::types as wit_types;
use reson_sandbox::plugin::ToolSpec;
use reson_trace::{ContentPart, Message, Role, ToolCall, Usage};
use std::time::Duration;

pub(super) fn request(messages: &[Message], tools: &[ToolSpec], p: &LlmParams) -> wit::ChatRequest {
    wit::ChatRequest {
        messages: messages.iter().map(message).collect(),
        tools: tools
            .iter()
            .map(|t| wit_types::ToolSpec {
                name: t.name.clone(),
                description: t.description.clone(),
                input_schema: t.input_schema.text().to_owned(),
            })
            .collect(),
        params: wit::Params {
            model: p.model.clone(),
            temperature: p.temperature,
            top_p: p.top_p,
            max_tokens: p.max_tokens,
            stop: p.stop.clone(),
            stream: p.stream,
            extra: p.extra.as_ref().map(|v| v.to_string()),
        },
    }
}

fn message(m: &Message) -> wit::Message {
    wit::Message {
        role: match m.role {
            Role::System => wit::Role::System,
            Role::User => wit::Role::User,
            Role::Assistant => wit::Role::Assistant,
            Role::Tool => wit::Role::Tool,
        },
        content: m
            .content
            .iter()
            .map(|part| match part {
                ContentPart::Text { text } => wit::ContentPart::Text(text.clone()),
                ContentPart::ImageUrl { url } => {
                    wit::ContentPart::Image(wit::ImageSource::Url(url.clone()))
                }
                // The runner loads stored images before it calls a
                // provider; a caller that did not gets a note, not a
                // failed call.
                ContentPart::Image(image) => wit::ContentPart::Text(format!(
                    "[image {} ({}, {} bytes) not loaded]",
                    image.name, image.media_type, image.bytes
                )),
            })
            .collect(),
        tool_calls: m
            .tool_calls
            .iter()
            .map(|c| wit::ToolCall {
                id: c.id.clone(),
                name: c.name.clone(),
                arguments: c.arguments.clone(),
            })
            .collect(),
        tool_call_id: m.tool_call_id.clone(),
        name: m.name.clone(),
        reasoning: m.reasoning.clone(),
        provider_data: m.provider_data.as_ref().map(|v| v.to_string()),
    }
}

pub(super) fn response(r: wit::ChatResponse) -> ChatResponse {
    let m = r.message;
    let mut message = Message::new(Role::Assistant, "");
    message.content = m
        .content
        .into_iter()
        .map(|part| match part {
            wit::ContentPart::Text(text) => ContentPart::Text { text },
            wit::ContentPart::Image(wit::ImageSource::Url(url)) => ContentPart::ImageUrl { url },
            wit::ContentPart::Image(wit::ImageSource::Inline(image)) => ContentPart::ImageUrl {
                url: format!("data:{};base64,{}", image.media_type, BASE64.encode(&image.data)),
            },
        })
        .collect();
    message.tool_calls = m
        .tool_calls
        .into_iter()
        .map(|c| ToolCall { id: c.id, name: c.name, arguments: c.arguments })
        .collect();
    message.reasoning = m.reasoning;
    message.provider_data = m.provider_data.and_then(|text| serde_json::from_str(&text).ok());
    let finish_reason = match r.finish_reason {
        wit::FinishReason::Stop => "stop".to_owned(),
        wit::FinishReason::ToolCalls => "tool_calls".to_owned(),
        wit::FinishReason::Length => "length".to_owned(),
        wit::FinishReason::ContentFilter => "content_filter".to_owned(),
        wit::FinishReason::Other(other) => other,
    };
    let u = r.usage;
    let usage = Usage {
        prompt_tokens: u.prompt_tokens,
        completion_tokens: u.completion_tokens,
        reasoning_tokens: u.reasoning_tokens,
        cache_read_tokens: u.cache_read_tokens,
        cache_write_tokens: u.cache_write_tokens,
    };
    message.usage = usage;
    message.cost = r.cost.unwrap_or(0.0);
    message.finish_reason = Some(finish_reason.clone());
    ChatResponse { message, usage, finish_reason, model: r.model, cost: r.cost }
}

pub(super) fn delta(d: wit::Delta) -> Delta {
    match d {
        wit::Delta::Text(text) => Delta::Text { text },
        wit::Delta::Reasoning(text) => Delta::Reasoning { text },
        wit::Delta::ToolCall(c) => Delta::ToolCall {
            index: c.index,
            id: c.id,
            name: c.name,
            arguments: c.arguments_fragment,
        },
    }
}

impl From<wit::ProviderError> for ProviderError {
    fn from(e: wit::ProviderError) -> Self {
        match e {
            wit::ProviderError::Auth(m) => Self::Auth(m),
            wit::ProviderError::RateLimited(r) => Self::RateLimited {
                message: r.message,
                retry_after: r.retry_after_ms.map(Duration::from_millis),
            },
            wit::ProviderError::Timeout(m) => Self::Timeout(m),
            wit::ProviderError::BadRequest(m) => Self::BadRequest(m),
            wit::ProviderError::Server(s) => Self::Server { status: s.status, message: s.message },
            wit::ProviderError::Network(m) => Self::Network(m),
            wit::ProviderError::InvalidResponse(m) => Self::InvalidResponse(m),
            wit::ProviderError::Other(m) => Self::Other(m),
        }
    }
}
