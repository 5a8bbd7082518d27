//! `scripted`: a provider that replays a script of assistant turns, for tests
//! and the offline demo. It checks nothing about the request.
//!
//! Each call gets a fresh instance, so the plugin keeps no state: a request
//! plays the turn numbered by how many assistant messages its history holds
//! (turn 0 when there are none). A rewind or regeneration sends a shorter
//! history and the turn follows it.
//!
//! The script is the JSON file named by the `script` setting; the host grants
//! read access to its directory.
//!
//! ```json
//! {"turns": [
//!   {"text": "I'll look at the files.",
//!    "tool_calls": [{"name": "glob", "arguments": {"pattern": "**/*"}}]},
//!   {"text": "Done.", "usage": {"prompt_tokens": 10, "completion_tokens": 3},
//!    "finish_reason": "stop"}
//! ]}
//! ```
//!
//! Every field of a turn is optional; unknown fields are an error.
//!
//! One file can script several agents (a parent and its sub-agents): an
//! `agents` list of `{"match": "...", "turns": [...]}` is tried in order,
//! and the first entry whose `match` occurs in the request's first user
//! message plays its `turns`; a request no entry matches plays the
//! top-level `turns`.
//!
//! `"models": {"NAME": {"turns": [...]}}` gives requests whose model is
//! NAME a script of their own (a utility or summary model beside the
//! agent's), whose last turn answers every request past its end; every
//! other request plays the top-level `turns`.
//!
//! - `text`: the message's one text part (none when absent).
//! - `reasoning`: the message's reasoning.
//! - `tool_calls`: `{"name", "arguments", "id"}`. `arguments` is any JSON
//!   value, serialised (default `{}`); a JSON string is the arguments text
//!   itself, which is how a script produces invalid JSON. `id` defaults to
//!   `call_<turn>_<i>`, both 0-based.
//! - `usage`: any of `prompt_tokens`, `completion_tokens`,
//!   `reasoning_tokens`, `cache_read_tokens`, `cache_write_tokens` (0 when
//!   absent).
//! - `finish_reason`: `stop`, `tool-calls`, `length`, `content-filter`, or
//!   anything else for `other`; default `tool-calls` when the turn makes
//!   tool calls, else `stop`.
//! - `cost`: USD, reported as the response's cost (none when absent).
//! - `delay_ms`: sleep this long before answering, so that a test can act
//!   while a model call is in flight.
//! - `error`: `{"kind", "message", ...}` fails the call with that
//!   provider error instead of answering. `kind` is `rate-limited` (with
//!   optional `retry_after_ms`), `server` (with `status`, default 500),
//!   `auth`, `timeout`, `bad-request`, `network`, `invalid-response` or
//!   `other`; `message` defaults to "scripted error". The history of a retry
//!   is unchanged, so a retry plays the same error again.
//!
//! When the request asks for streaming, the answer is also emitted as
//! deltas first: reasoning and text word by word, each tool call in two
//! fragments.

mod reply;
mod script;

use reson_sdk::host::config;
use reson_sdk::provider::{self, ChatRequest, ChatResponse, ProviderError};
use script::Script;
use std::thread;
use std::time::Duration;

fn chat(request: ChatRequest) -> Result<ChatResponse, ProviderError> {
    let script = Script::load(config::get("script")).map_err(ProviderError::Other)?;
    let (script, index) =
        script.for_model(&request.params.model, script::turn_index(&request.messages));
    let turn = script.turn(&request.messages, index).map_err(ProviderError::Other)?;
    thread::sleep(Duration::from_millis(turn.delay_ms));
    let response = reply::response(turn, index, &request.params.model)?;
    if request.params.stream {
        for delta in reply::deltas(&response.message) {
            provider::emit(delta);
        }
    }
    Ok(response)
}

reson_sdk::export_provider!(chat);
