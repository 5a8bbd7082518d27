//! The provider-author API: the chat types of `reson:plugin/chat-types`,
//! [`emit`] for streaming, and [`export_provider!`](crate::export_provider).
//!
//! A provider is one function, `fn chat(ChatRequest) -> Result<ChatResponse,
//! ProviderError>`. It talks to its API through [`host::http`](crate::host::http)
//! and, when [`Params::stream`] is set, hands the host each piece of the
//! answer with [`emit`] as it arrives, then returns the whole response. The
//! [`ProviderError`] case decides whether the host retries.
//!
//! ```no_run
//! use reson_sdk::provider::{
//!     self, ChatRequest, ChatResponse, ContentPart, Delta, FinishReason, Message, ProviderError,
//!     Role, Usage,
//! };
//!
//! /// Answers with the text of the last user message.
//! fn chat(request: ChatRequest) -> Result<ChatResponse, ProviderError> {
//!     let last_user = request.messages.iter().rev().find(|m| matches!(m.role, Role::User));
//!     let text = last_user
//!         .and_then(|m| m.content.iter().find_map(|part| match part {
//!             ContentPart::Text(text) => Some(text.clone()),
//!             ContentPart::Image(_) => None,
//!         }))
//!         .ok_or_else(|| ProviderError::BadRequest("no user text to echo".into()))?;
//!     if request.params.stream {
//!         provider::emit(Delta::Text(text.clone()));
//!     }
//!     Ok(ChatResponse {
//!         message: Message {
//!             role: Role::Assistant,
//!             content: vec![ContentPart::Text(text)],
//!             tool_calls: Vec::new(),
//!             tool_call_id: None,
//!             name: None,
//!             reasoning: None,
//!             provider_data: None,
//!         },
//!         usage: Usage {
//!             prompt_tokens: 0,
//!             completion_tokens: 0,
//!             reasoning_tokens: 0,
//!             cache_read_tokens: 0,
//!             cache_write_tokens: 0,
//!         },
//!         finish_reason: FinishReason::Stop,
//!         model: request.params.model,
//!         cost: None,
//!     })
//! }
//!
//! reson_sdk::export_provider!(chat);
//! ```
//!
//! The manifest of a provider that calls an API requests its host and key,
//! for example `http = ["api.example.com/v1"]` and `secrets =
//! ["EXAMPLE_API_KEY"]`; the plugin writes `{{secret:EXAMPLE_API_KEY}}` in a
//! header and the host substitutes it.

use crate::bindings::provider_world::reson::plugin::streaming;

pub use crate::bindings::provider_world::reson::plugin::chat_types::{
    ChatRequest, ChatResponse, ContentPart, Delta, FinishReason, ImageSource, Message, Params,
    ProviderError, RateLimit, Role, ServerError, ToolCall, ToolCallDelta, Usage,
};
// A request carries tool specs and a message may carry inline images, so a
// provider needs these shared types too.
pub use crate::bindings::tool_world::reson::plugin::types::{Image, ToolSpec};

/// Sends one piece of a streamed response to the run's event stream. Call it
/// only while `chat` runs, and only when the request asked for streaming
/// ([`Params::stream`]); the returned [`ChatResponse`] must still hold the
/// whole message, because the host stores that, not the deltas.
pub fn emit(delta: Delta) {
    streaming::emit(&delta);
}

/// Exports a `fn(ChatRequest) -> Result<ChatResponse, ProviderError>` as
/// this component's `reson:plugin/provider` interface. Use it once per
/// component; see the [`provider`](crate::provider) module for an example.
#[macro_export]
macro_rules! export_provider {
    ($chat:path) => {
        struct __ResonProviderPlugin;

        impl $crate::bindings::provider_world::exports::reson::plugin::provider::Guest
            for __ResonProviderPlugin
        {
            fn chat(
                request: $crate::provider::ChatRequest,
            ) -> ::std::result::Result<$crate::provider::ChatResponse, $crate::provider::ProviderError>
            {
                $chat(request)
            }
        }

        // Natively the crate is a library (its tests, the fuzz targets): the
        // component's export symbols exist only in the WebAssembly build.
        #[cfg(target_family = "wasm")]
        $crate::bindings::provider_world::export_provider_world!(__ResonProviderPlugin with_types_in $crate::bindings::provider_world);
        #[cfg(not(target_family = "wasm"))]
        const _: () = {
            let _ = $chat;
        };
    };
}
