//! `gemini`: a provider for Google's Gemini API, `generateContent` for
//! whole answers and `streamGenerateContent?alt=sse` for streamed ones.
//!
//! Settings (`[plugins.gemini.config]` in `reson.toml`, all optional):
//!
//! - `base_url`: the API root, default
//!   `https://generativelanguage.googleapis.com/v1beta`.
//! - `api_key_secret`: the name of the secret holding the API key, default
//!   `GEMINI_API_KEY`. The plugin sends `x-goog-api-key: {{secret:NAME}}`
//!   and the host fills the key in; a secret not granted or not set comes
//!   back as an `auth` error naming it.
//! - `price_input_per_mtok`, `price_output_per_mtok`,
//!   `price_cache_read_per_mtok`, `price_cache_write_per_mtok`: USD per
//!   million tokens. With any of them set, responses carry a cost (an unset
//!   cache price is charged at the input price); with none, no cost.
//!
//! The conversion: system messages become the `systemInstruction`; user
//! and tool messages `user` turns, assistant messages `model` turns, and
//! consecutive messages of one role share a turn, as Gemini wants the roles
//! to alternate. Tool calls are `functionCall` parts and tool results
//! `functionResponse` parts naming their function; a result's images go
//! inside its `functionResponse` for Gemini 3 models and after it, in the
//! same turn, for earlier ones. Gemini issues no call
//! ids, so each answer's calls get `call_0`, `call_1`, ... Thought
//! signatures, which Gemini 3 requires back with the calls they came with,
//! are kept in the message's provider data. Thought summaries (asked for
//! with `extra = {"generationConfig": {"thinkingConfig": {"includeThoughts":
//! true}}}`) become the message's reasoning.
//!
//! Usage: `prompt_tokens` is Gemini's prompt count (cached tokens
//! included), `completion_tokens` the candidates' plus the thinking tokens
//! (both billed as output), `reasoning_tokens` the thinking tokens,
//! `cache_read_tokens` the cached content tokens.

mod call;
mod error;
mod request;
mod response;
mod schema;
mod settings;
mod signatures;
mod sse;

use reson_sdk::host::{config, http};
use reson_sdk::provider::{self, ChatRequest, ChatResponse, ProviderError};
use settings::Settings;

/// The most bytes asked of the host per streamed read.
const READ_BYTES: u32 = 64 * 1024;

fn chat(request: ChatRequest) -> Result<ChatResponse, ProviderError> {
    let settings = Settings::load(config::get)?;
    let http_request = request::http_request(&settings, &request)?;
    let model = &request.params.model;
    if request.params.stream {
        let response = http::send_streaming(&http_request)
            .map_err(|e| error::from_http(e, &settings.secret))?;
        call::streamed(
            response.status,
            &response.headers,
            || response.body.read(READ_BYTES),
            &mut provider::emit,
            model,
            &settings,
        )
    } else {
        let response =
            http::send(&http_request).map_err(|e| error::from_http(e, &settings.secret))?;
        call::whole(response.status, &response.headers, &response.body, model, &settings)
    }
}

reson_sdk::export_provider!(chat);

#[cfg(feature = "fuzzing")]
pub mod fuzzing;
