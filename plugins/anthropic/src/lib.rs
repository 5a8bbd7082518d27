//! `anthropic`: a provider for Anthropic's Messages API (Claude models).
//!
//! Each call is one `POST {base_url}/v1/messages` with the headers
//! `x-api-key: {{secret:ANTHROPIC_API_KEY}}` (the host fills in the key, so
//! the plugin never sees it), `anthropic-version: 2023-06-01` and
//! `content-type: application/json`. When the request asks for streaming,
//! the answer is read as server-sent events and its text, reasoning and
//! tool-call fragments are emitted as they arrive; the whole message is
//! returned either way.
//!
//! Settings (`[plugins.anthropic.config]` in `reson.toml`), all optional:
//!
//! - `base_url`: default `https://api.anthropic.com`; the host must grant
//!   its host.
//! - `api_key_secret`: the name of the secret holding the key, default
//!   `ANTHROPIC_API_KEY`; the host must grant it too.
//! - `price_input_per_mtok`, `price_output_per_mtok`,
//!   `price_cache_read_per_mtok`, `price_cache_write_per_mtok`: USD per
//!   million tokens, for the response's cost (none when no price is set).
//!
//! Conversion: system messages go to the top-level `system`; tool results
//! become `tool_result` blocks of the user turn after the assistant's
//! `tool_use` blocks; images become base64 or URL sources; tool schemas
//! with `oneOf`/`anyOf`/`allOf` at the root, which the API refuses, are
//! flattened (see the `schema` module); `max_tokens`
//! defaults to 4096; `params.extra` (a JSON object) is merged into the body
//! last, which is how to turn on extended thinking
//! (`{"thinking": {"type": "enabled", "budget_tokens": 2048}}`). Thinking
//! blocks come back as the message's reasoning, and with their signatures
//! in `provider_data` (`{"anthropic": {"thinking": [...]}}`) so that the
//! next turn can send them back as the API requires.

mod error;
mod request;
mod response;
mod schema;
mod settings;
mod stream;
mod thinking;

use reson_sdk::host::{config, http};
use reson_sdk::provider::{self, ChatRequest, ChatResponse, ProviderError};
use response::Reply;
use settings::Settings;

/// Bytes asked for per read of a streamed body: a few events' worth, so
/// deltas are not held back.
const READ_CHUNK_BYTES: u32 = 16 * 1024;

fn chat(request: ChatRequest) -> Result<ChatResponse, ProviderError> {
    let settings = Settings::load(config::get)?;
    let body = request::body(&request)?;
    let http_request = http::Request {
        method: "POST".to_owned(),
        url: settings.messages_url(),
        headers: request::headers(&settings),
        body: Some(body.to_string().into_bytes()),
        // The host bounds every request by the call's deadline, which is
        // the limit that matters for a model call.
        timeout_ms: None,
    };
    let reply = if request.params.stream {
        streamed(&http_request, &settings)?
    } else {
        whole(&http_request, &settings)?
    };
    Ok(response::into_response(reply, &request.params.model, &settings.prices))
}

/// Sends the request and parses the whole JSON answer.
fn whole(request: &http::Request, settings: &Settings) -> Result<Reply, ProviderError> {
    let response = http::send(request).map_err(|e| error::from_http(e, settings))?;
    if !(200..300).contains(&response.status) {
        return Err(error::from_status(
            response.status,
            &response.headers,
            &response.body,
            &settings.api_key_secret,
        ));
    }
    response::parse(&response.body)
}

/// Sends the request and reads the answer as a stream of events.
fn streamed(request: &http::Request, settings: &Settings) -> Result<Reply, ProviderError> {
    let response = http::send_streaming(request).map_err(|e| error::from_http(e, settings))?;
    let next = || response.body.read(READ_CHUNK_BYTES).map_err(|e| error::from_http(e, settings));
    if !(200..300).contains(&response.status) {
        // An error answer is a small JSON body, not a stream. If reading it
        // fails, the status still says what went wrong.
        let mut body = Vec::new();
        while let Ok(Some(chunk)) = next() {
            body.extend(chunk);
        }
        return Err(error::from_status(
            response.status,
            &response.headers,
            &body,
            &settings.api_key_secret,
        ));
    }
    let json = response.headers.iter().any(|(name, value)| {
        name.eq_ignore_ascii_case("content-type")
            && value.trim_start().to_ascii_lowercase().starts_with("application/json")
    });
    if json {
        // A server that ignores `stream` answers whole: a complete body,
        // not a stream cut short (which would be retried).
        let mut body = Vec::new();
        while let Some(chunk) = next()? {
            body.extend(chunk);
        }
        return response::parse(&body);
    }
    stream::read(next, &mut provider::emit)
}

reson_sdk::export_provider!(chat);

#[cfg(feature = "fuzzing")]
pub mod fuzzing;
