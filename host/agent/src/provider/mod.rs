//! LLM providers: the host's view of a chat call, and the adapter that
//! runs it through a provider plugin. Messages cross in the stored
//! (OpenAI-compatible) shape; each plugin converts to its own API.

mod continuation;
mod convert;

use futures::{Stream, StreamExt};
use reson_sandbox::plugin::{CallError, Runtime, ToolSpec};
use reson_trace::{Message, Usage};
use serde::{Deserialize, Serialize};
use std::pin::Pin;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Sampling and transport parameters of a chat call.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct LlmParams {
    /// Model name, as the provider knows it.
    pub model: String,
    /// Sampling temperature.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    /// Nucleus sampling.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f32>,
    /// Cap on completion tokens.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// Stop sequences.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub stop: Vec<String>,
    /// Stream the answer (deltas reach the run's events as they arrive).
    pub stream: bool,
    /// Provider-specific extras.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub extra: Option<serde_json::Value>,
}

/// One chat call.
#[derive(Debug, Clone)]
pub struct ChatRequest {
    /// The history, oldest first.
    pub messages: Vec<Message>,
    /// Tools the model may call.
    pub tools: Vec<ToolSpec>,
    /// Parameters.
    pub params: LlmParams,
}

/// A finished chat call. `message` is an assistant message not yet stored.
#[derive(Debug, Clone)]
pub struct ChatResponse {
    /// The assistant's message.
    pub message: Message,
    /// Tokens of every kind.
    pub usage: Usage,
    /// `stop`, `tool_calls`, `length`, `content_filter` or the provider's own.
    pub finish_reason: String,
    /// The model that answered.
    pub model: String,
    /// Cost in USD, when the provider knows it.
    pub cost: Option<f64>,
}

/// A piece of a streamed answer.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Delta {
    /// Answer text.
    Text {
        /// The new text.
        text: String,
    },
    /// Reasoning text.
    Reasoning {
        /// The new text.
        text: String,
    },
    /// A fragment of a tool call.
    ToolCall {
        /// Which call of the message.
        index: u32,
        /// Its id, in the first fragment.
        id: Option<String>,
        /// Its name, in the first fragment.
        name: Option<String>,
        /// More of its arguments.
        arguments: String,
    },
}

/// One item of a chat call's stream.
#[derive(Debug, Clone)]
pub enum ChatEvent {
    /// A streamed piece of the answer.
    Delta(Delta),
    /// The whole answer; the last item.
    Done(Box<ChatResponse>),
}

/// A chat call in flight: deltas as they arrive, then one
/// [`ChatEvent::Done`] or one error. Dropping it cuts the call.
pub type ChatStream = Pin<Box<dyn Stream<Item = Result<ChatEvent, ProviderError>> + Send>>;

/// Why a chat call failed. The case decides retries.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ProviderError {
    /// Bad or missing credentials.
    #[error("authentication failed: {0}")]
    Auth(String),
    /// Too many requests.
    #[error("rate limited: {message}")]
    RateLimited {
        /// The server's message.
        message: String,
        /// How long the server asked to wait.
        retry_after: Option<Duration>,
    },
    /// The request timed out.
    #[error("timed out: {0}")]
    Timeout(String),
    /// The request was rejected as invalid.
    #[error("bad request: {0}")]
    BadRequest(String),
    /// The server failed (5xx).
    #[error("server error {status}: {message}")]
    Server {
        /// HTTP status.
        status: u16,
        /// The server's message.
        message: String,
    },
    /// The connection failed.
    #[error("network error: {0}")]
    Network(String),
    /// The answer could not be understood.
    #[error("invalid response: {0}")]
    InvalidResponse(String),
    /// The provider's content filter withheld the answer, or refused the
    /// prompt: nothing came back. Not retried, as the same request would be
    /// blocked again.
    #[error("blocked by the provider's content filter: {0}")]
    ContentFiltered(String),
    /// The plugin failed for its own reasons.
    #[error("{0}")]
    Other(String),
    /// The plugin could not run (not loaded, trapped, out of time).
    #[error(transparent)]
    Plugin(#[from] CallError),
}

impl ProviderError {
    /// Whether trying the same request again may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Self::RateLimited { .. } | Self::Timeout(_) | Self::Server { .. } | Self::Network(_)
        )
    }

    /// The delay the server asked for, if any.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::RateLimited { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

impl ChatResponse {
    /// The error for an answer the provider's content filter emptied: a
    /// `content_filter` finish with no text and no tool calls. An answer
    /// that kept some content is the model's answer, cut short.
    pub fn filtered(&self, provider: &str) -> Option<ProviderError> {
        let empty = self.message.text().trim().is_empty() && self.message.tool_calls.is_empty();
        (self.finish_reason == "content_filter" && empty).then(|| {
            ProviderError::ContentFiltered(format!(
                "{provider} returned no answer (finish reason content_filter): the prompt or the \
                 answer was blocked for safety; change the request, or rewind to before it"
            ))
        })
    }
}

/// Something that answers chat calls.
pub trait ChatProvider: Send + Sync {
    /// The provider's name (the plugin name).
    fn name(&self) -> &str;
    /// Starts one call. Cancelling `cancel`, or dropping the stream, cuts
    /// it short.
    fn chat(&self, request: ChatRequest, cancel: CancellationToken) -> ChatStream;
}

/// Runs one call of `provider` to its end, handing each delta to
/// `on_delta` as it arrives.
pub async fn complete(
    provider: &dyn ChatProvider,
    request: ChatRequest,
    cancel: CancellationToken,
    mut on_delta: impl FnMut(Delta) + Send,
) -> Result<ChatResponse, ProviderError> {
    let mut stream = provider.chat(request, cancel);
    while let Some(item) = stream.next().await {
        match item? {
            ChatEvent::Delta(delta) => on_delta(delta),
            ChatEvent::Done(response) => return Ok(*response),
        }
    }
    Err(ProviderError::InvalidResponse(format!(
        "provider `{}` ended its stream without an answer",
        provider.name()
    )))
}

/// A provider served by a provider plugin.
#[derive(Clone)]
pub struct PluginProvider {
    runtime: Runtime,
    plugin: String,
}

impl PluginProvider {
    /// The provider plugin `plugin` of `runtime`.
    pub fn new(runtime: Runtime, plugin: impl Into<String>) -> Self {
        Self { runtime, plugin: plugin.into() }
    }
}

impl ChatProvider for PluginProvider {
    fn name(&self) -> &str {
        &self.plugin
    }

    /// The call runs on a task of its own, so that deltas flow while the
    /// caller reads them; it must be made inside a tokio runtime.
    fn chat(&self, request: ChatRequest, cancel: CancellationToken) -> ChatStream {
        let (items, mut received) = tokio::sync::mpsc::unbounded_channel();
        // Its own token: dropping the stream cancels this call only, and a
        // cancel of `cancel` still reaches it.
        let call = cancel.child_token();
        let dropped = call.clone().drop_guard();
        let (runtime, plugin) = (self.runtime.clone(), self.plugin.clone());
        tokio::spawn(async move {
            let history = continuation::prepare(&request.messages, &plugin);
            let wit_request = convert::request(&history, &request.tools, &request.params);
            let deltas = items.clone();
            let sink = Box::new(move |d| {
                // A reader that went away has cancelled the call.
                let _ = deltas.send(Ok(ChatEvent::Delta(convert::delta(d))));
            });
            let answer = match runtime.chat(&plugin, &wit_request, Some(sink), Some(call)).await {
                Ok(Ok(response)) => Ok(ChatEvent::Done(Box::new(convert::response(response)))),
                Ok(Err(e)) => Err(e.into()),
                Err(e) => Err(e.into()),
            };
            let _ = items.send(answer);
        });
        Box::pin(futures::stream::poll_fn(move |cx| {
            let _cancel_on_drop = &dropped;
            received.poll_recv(cx)
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use reson_trace::{Role, ToolCall};

    fn response(finish_reason: &str, text: &str, calls: usize) -> ChatResponse {
        let mut message = Message::new(Role::Assistant, text);
        message.tool_calls = (0..calls)
            .map(|i| ToolCall { id: format!("c{i}"), name: "echo".into(), arguments: "{}".into() })
            .collect();
        ChatResponse {
            message,
            usage: Usage::default(),
            finish_reason: finish_reason.into(),
            model: "m".into(),
            cost: None,
        }
    }

    #[test]
    fn only_an_answer_the_filter_left_empty_is_an_error() {
        let blocked = response("content_filter", " \n", 0).filtered("gemini");
        let Some(ProviderError::ContentFiltered(message)) = &blocked else { panic!("{blocked:?}") };
        assert!(message.starts_with("gemini returned no answer"), "{message}");
        assert!(!blocked.unwrap().is_retryable());
        // Something came through: the model's answer, cut short.
        assert!(response("content_filter", "Here is", 0).filtered("gemini").is_none());
        assert!(response("content_filter", "", 1).filtered("gemini").is_none());
        // An empty answer for another reason is the model's business.
        assert!(response("stop", "", 0).filtered("gemini").is_none());
        assert!(response("length", "", 0).filtered("gemini").is_none());
    }
}
