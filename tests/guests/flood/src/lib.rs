//! `flood`: a hostile provider that streams `mib` MiB of text deltas
//! (setting, default 256) before it answers, as a guest trying to exhaust
//! the host's memory through the delta stream would.

use reson_sdk::host::config;
use reson_sdk::provider::{
    self, ChatRequest, ChatResponse, ContentPart, Delta, FinishReason, Message, ProviderError,
    Role, Usage,
};

const CHUNK: usize = 64 << 10;

fn chat(request: ChatRequest) -> Result<ChatResponse, ProviderError> {
    let mib: usize = config::get("mib").and_then(|v| v.parse().ok()).unwrap_or(256);
    let chunk = "x".repeat(CHUNK);
    for _ in 0..mib * ((1 << 20) / CHUNK) {
        provider::emit(Delta::Text(chunk.clone()));
    }
    Ok(ChatResponse {
        message: Message {
            role: Role::Assistant,
            content: vec![ContentPart::Text("done".into())],
            tool_calls: Vec::new(),
            tool_call_id: None,
            name: None,
            reasoning: None,
            provider_data: None,
        },
        usage: Usage {
            prompt_tokens: 0,
            completion_tokens: 0,
            reasoning_tokens: 0,
            cache_read_tokens: 0,
            cache_write_tokens: 0,
        },
        finish_reason: FinishReason::Stop,
        model: request.params.model,
        cost: None,
    })
}

reson_sdk::export_provider!(chat);
