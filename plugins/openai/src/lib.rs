//! `openai`: a provider for the OpenAI Chat Completions API and the servers
//! that speak it (OpenRouter, Ollama, vLLM, llama.cpp's server, ...).
//!
//! Each call is one `POST {base_url}/chat/completions`. The API key never
//! enters the plugin: the `authorization` header is `Bearer
//! {{secret:OPENAI_API_KEY}}` and the host fills in the secret, if the
//! user granted and set it.
//!
//! Settings (`[plugins.openai.config]` in `reson.toml`):
//!
//! - `base_url`: the API root, default `https://api.openai.com/v1`. Its host
//!   must be requested by the manifest and granted.
//! - `api_key_secret`: the name of the secret holding the key, default
//!   `OPENAI_API_KEY`; empty for a local server that takes no key. The
//!   secret must be requested by the manifest and granted.
//! - `price_input_per_mtok`, `price_output_per_mtok`,
//!   `price_cache_read_per_mtok`, `price_cache_write_per_mtok`: USD per
//!   million tokens, to report each call's cost (none when no price is set).
//!
//! A streamed request (`params.stream`) asks for `stream_options:
//! {"include_usage": true}` and emits text, reasoning and tool-call deltas
//! as the server-sent events arrive. `params.extra` is merged into the
//! request body last; a `null` there removes a key.

mod errors;
mod request;
mod response;
mod settings;
mod sse;
mod stream;

#[cfg(test)]
mod robustness;

use reson_sdk::host::{config, http};
use reson_sdk::provider::{self, ChatRequest, ChatResponse, ProviderError};
use settings::Settings;

fn chat(request: ChatRequest) -> Result<ChatResponse, ProviderError> {
    let settings = Settings::from_config(config::get)?;
    let outgoing = request::http_request(&settings, &request)?;
    let model = &request.params.model;
    if request.params.stream {
        let response =
            http::send_streaming(&outgoing).map_err(|e| errors::from_http(e, &settings))?;
        let body = response.body;
        stream::receive(
            response.status,
            &response.headers,
            || body.read(stream::READ_BYTES),
            provider::emit,
            model,
            &settings,
        )
    } else {
        let response = http::send(&outgoing).map_err(|e| errors::from_http(e, &settings))?;
        if !(200..300).contains(&response.status) {
            return Err(errors::from_status(
                response.status,
                &response.headers,
                &response.body,
                &settings,
            ));
        }
        response::parse(response.status, &response.body, model, &settings)
    }
}

reson_sdk::export_provider!(chat);

#[cfg(feature = "fuzzing")]
pub mod fuzzing;
