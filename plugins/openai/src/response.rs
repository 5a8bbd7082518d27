//! Reading Chat Completions answers: the JSON shapes a whole response and a
//! stream chunk share, and turning a whole (non-streamed) response into a
//! [`ChatResponse`].
//!
//! Loosely typed fields are read as [`Value`]s because OpenAI-compatible
//! servers differ in them: content may be a list of parts, tool-call
//! arguments an object, reasoning may be `reasoning_content` or
//! `reasoning`.

use crate::errors;
use crate::settings::{Prices, Settings};
use reson_sdk::provider::{
    ChatResponse, ContentPart, FinishReason, Message, ProviderError, Role, ToolCall, Usage,
};
use serde::Deserialize;
use serde_json::Value;

/// A whole response or one stream chunk.
#[derive(Debug, Deserialize)]
pub struct Completion {
    pub model: Option<String>,
    pub choices: Option<Vec<Choice>>,
    pub usage: Option<ApiUsage>,
}

/// One choice; a response has `message`, a chunk `delta`.
#[derive(Debug, Deserialize)]
pub struct Choice {
    pub index: Option<u64>,
    pub message: Option<ApiMessage>,
    pub delta: Option<ApiMessage>,
    pub finish_reason: Option<String>,
}

/// A message, or the part of one that a chunk adds.
#[derive(Debug, Deserialize)]
pub struct ApiMessage {
    pub content: Option<Value>,
    pub refusal: Option<Value>,
    pub reasoning_content: Option<Value>,
    pub reasoning: Option<Value>,
    pub tool_calls: Option<Vec<ApiToolCall>>,
}

/// A tool call, or a fragment of one in a chunk.
#[derive(Debug, Deserialize)]
pub struct ApiToolCall {
    pub index: Option<u64>,
    pub id: Option<String>,
    pub function: Option<ApiFunction>,
}

/// The function part of a tool call.
#[derive(Debug, Deserialize)]
pub struct ApiFunction {
    pub name: Option<String>,
    pub arguments: Option<Value>,
}

/// Token counts as the API reports them.
#[derive(Debug, Default, Deserialize)]
pub struct ApiUsage {
    pub prompt_tokens: Option<u64>,
    pub completion_tokens: Option<u64>,
    pub prompt_tokens_details: Option<PromptDetails>,
    pub completion_tokens_details: Option<CompletionDetails>,
}

/// The breakdown of the prompt tokens.
#[derive(Debug, Deserialize)]
pub struct PromptDetails {
    pub cached_tokens: Option<u64>,
    /// OpenRouter reports the tokens written to a provider's cache.
    pub cache_write_tokens: Option<u64>,
}

/// The breakdown of the completion tokens.
#[derive(Debug, Deserialize)]
pub struct CompletionDetails {
    pub reasoning_tokens: Option<u64>,
}

impl Choice {
    /// Whether this is the first choice, the only one a request with `n = 1`
    /// gets (a server that leaves out `index` sends only that one).
    pub fn is_first(&self) -> bool {
        self.index.is_none_or(|i| i == 0)
    }
}

impl ApiMessage {
    /// The answer text: `content` as a string or as text parts. A refusal
    /// stands in for missing content, so the user sees why.
    pub fn text(&self) -> String {
        let text = self.content.as_ref().map(text_of).unwrap_or_default();
        if text.is_empty() { self.refusal.as_ref().map(text_of).unwrap_or_default() } else { text }
    }

    /// The reasoning text, under either name servers use; never both, as
    /// some send the same text twice.
    pub fn reasoning(&self) -> String {
        let reasoning = self.reasoning_content.as_ref().map(text_of).unwrap_or_default();
        if reasoning.is_empty() {
            self.reasoning.as_ref().map(text_of).unwrap_or_default()
        } else {
            reasoning
        }
    }
}

impl ApiFunction {
    /// The arguments (or a fragment of them) as text; a server that sends
    /// them as a JSON object gets them serialised.
    pub fn arguments(&self) -> String {
        match &self.arguments {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(text)) => text.clone(),
            Some(other) => other.to_string(),
        }
    }
}

/// The text of a string or a list of `{"type": "text", "text"}` parts.
fn text_of(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter(|part| part.get("type").and_then(Value::as_str).is_none_or(|t| t == "text"))
            .filter_map(|part| part.get("text").and_then(Value::as_str))
            .collect(),
        _ => String::new(),
    }
}

/// Token counts; a server that reports none gives zeros.
pub fn usage(usage: Option<&ApiUsage>) -> Usage {
    let none = ApiUsage::default();
    let usage = usage.unwrap_or(&none);
    let prompt = usage.prompt_tokens_details.as_ref();
    Usage {
        prompt_tokens: usage.prompt_tokens.unwrap_or(0),
        completion_tokens: usage.completion_tokens.unwrap_or(0),
        reasoning_tokens: usage
            .completion_tokens_details
            .as_ref()
            .and_then(|d| d.reasoning_tokens)
            .unwrap_or(0),
        cache_read_tokens: prompt.and_then(|d| d.cached_tokens).unwrap_or(0),
        cache_write_tokens: prompt.and_then(|d| d.cache_write_tokens).unwrap_or(0),
    }
}

/// The finish reason; a server that gives none is taken to have stopped
/// normally (or for its tool calls).
pub fn finish_reason(reason: Option<&str>, has_tool_calls: bool) -> FinishReason {
    match reason.filter(|r| !r.is_empty()) {
        Some("stop") => FinishReason::Stop,
        // `function_call` is the legacy name, still sent by some servers.
        Some("tool_calls" | "function_call") => FinishReason::ToolCalls,
        Some("length") => FinishReason::Length,
        Some("content_filter") => FinishReason::ContentFilter,
        Some(other) => FinishReason::Other(other.to_owned()),
        None if has_tool_calls => FinishReason::ToolCalls,
        None => FinishReason::Stop,
    }
}

/// What an answer is made of, whole or assembled from a stream.
pub struct Parts {
    pub model: String,
    pub text: String,
    pub reasoning: String,
    pub tool_calls: Vec<ToolCall>,
    pub finish_reason: FinishReason,
    pub usage: Usage,
}

impl Parts {
    /// The response, costed with `prices`. A tool call without a name
    /// cannot be run or answered, so it makes the answer invalid.
    pub fn into_response(self, prices: &Prices) -> Result<ChatResponse, ProviderError> {
        if let Some(call) = self.tool_calls.iter().find(|call| call.name.is_empty()) {
            return Err(ProviderError::InvalidResponse(format!(
                "openai: the answer has a tool call without a function name (id {})",
                call.id
            )));
        }
        let cost = prices.cost(&self.usage);
        Ok(ChatResponse {
            message: Message {
                role: Role::Assistant,
                content: if self.text.is_empty() {
                    Vec::new()
                } else {
                    vec![ContentPart::Text(self.text)]
                },
                tool_calls: self.tool_calls,
                tool_call_id: None,
                name: None,
                reasoning: (!self.reasoning.is_empty()).then_some(self.reasoning),
                provider_data: None,
            },
            usage: self.usage,
            finish_reason: self.finish_reason,
            model: self.model,
            cost,
        })
    }
}

/// The response in a whole (non-streamed) 2xx `body`; `model` is reported
/// when the body names none.
pub fn parse(
    status: u16,
    body: &[u8],
    model: &str,
    settings: &Settings,
) -> Result<ChatResponse, ProviderError> {
    let json: Value = serde_json::from_slice(body).map_err(|e| {
        ProviderError::InvalidResponse(format!("openai: the response is not valid JSON: {e}"))
    })?;
    if json.get("error").is_some_and(|e| !e.is_null()) {
        return Err(errors::in_band(status, &json, settings));
    }
    let completion: Completion = serde_json::from_value(json).map_err(|e| {
        ProviderError::InvalidResponse(format!(
            "openai: the response is not a chat completion: {e}"
        ))
    })?;
    let choice =
        completion.choices.iter().flatten().find(|choice| choice.is_first()).ok_or_else(|| {
            ProviderError::InvalidResponse("openai: the response has no choices".into())
        })?;
    let message = choice.message.as_ref().ok_or_else(|| {
        ProviderError::InvalidResponse("openai: the response's choice has no message".into())
    })?;
    let tool_calls: Vec<ToolCall> = (0..)
        .zip(message.tool_calls.iter().flatten())
        .map(|(i, call)| ToolCall {
            id: call.id.clone().filter(|id| !id.is_empty()).unwrap_or_else(|| format!("call_{i}")),
            name: call.function.as_ref().and_then(|f| f.name.clone()).unwrap_or_default(),
            arguments: call.function.as_ref().map(ApiFunction::arguments).unwrap_or_default(),
        })
        .collect();
    Parts {
        model: completion.model.filter(|m| !m.is_empty()).unwrap_or_else(|| model.to_owned()),
        text: message.text(),
        reasoning: message.reasoning(),
        finish_reason: finish_reason(choice.finish_reason.as_deref(), !tool_calls.is_empty()),
        tool_calls,
        usage: usage(completion.usage.as_ref()),
    }
    .into_response(&settings.prices)
}

#[cfg(test)]
pub mod tests {
    use super::*;

    /// A real `gpt-4o` answer, as the API sends it.
    pub const PLAIN: &str = r#"{
  "id": "chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT",
  "object": "chat.completion",
  "created": 1741569952,
  "model": "gpt-4o-2024-08-06",
  "choices": [
    {
      "index": 0,
      "message": {
        "role": "assistant",
        "content": "Hello! How can I assist you today? ¿Qué tal?",
        "refusal": null,
        "annotations": []
      },
      "logprobs": null,
      "finish_reason": "stop"
    }
  ],
  "usage": {
    "prompt_tokens": 1219,
    "completion_tokens": 12,
    "total_tokens": 1231,
    "prompt_tokens_details": {
      "cached_tokens": 1024,
      "audio_tokens": 0
    },
    "completion_tokens_details": {
      "reasoning_tokens": 0,
      "audio_tokens": 0,
      "accepted_prediction_tokens": 0,
      "rejected_prediction_tokens": 0
    }
  },
  "service_tier": "default",
  "system_fingerprint": "fp_fc9f1d7035"
}"#;

    pub const TOOL_CALLS: &str = r#"{
  "id": "chatcmpl-abc123",
  "object": "chat.completion",
  "created": 1699896916,
  "model": "gpt-4o-mini-2024-07-18",
  "choices": [
    {
      "index": 0,
      "message": {
        "role": "assistant",
        "content": null,
        "tool_calls": [
          {
            "id": "call_abc123",
            "type": "function",
            "function": {
              "name": "get_current_weather",
              "arguments": "{\n\"location\": \"Boston, MA\"\n}"
            }
          },
          {
            "id": "call_def456",
            "type": "function",
            "function": {"name": "get_time", "arguments": "{}"}
          }
        ],
        "refusal": null
      },
      "logprobs": null,
      "finish_reason": "tool_calls"
    }
  ],
  "usage": {
    "prompt_tokens": 82,
    "completion_tokens": 17,
    "total_tokens": 99,
    "completion_tokens_details": {"reasoning_tokens": 0}
  },
  "system_fingerprint": "fp_44709d6fcb"
}"#;

    pub fn settings() -> Settings {
        Settings::from_config(|_| None).unwrap()
    }

    fn priced() -> Settings {
        let prices = Prices {
            input: Some(2.5),
            output: Some(10.0),
            cache_read: Some(1.25),
            cache_write: None,
        };
        Settings { prices, ..settings() }
    }

    fn text_of(response: &ChatResponse) -> Vec<&str> {
        response
            .message
            .content
            .iter()
            .map(|part| match part {
                ContentPart::Text(text) => text.as_str(),
                ContentPart::Image(_) => panic!("unexpected image"),
            })
            .collect()
    }

    #[test]
    fn a_plain_answer_has_text_usage_and_cost() {
        let response = parse(200, PLAIN.as_bytes(), "gpt-4o", &priced()).unwrap();
        assert_eq!(text_of(&response), ["Hello! How can I assist you today? ¿Qué tal?"]);
        assert!(matches!(response.message.role, Role::Assistant));
        assert!(response.message.tool_calls.is_empty());
        assert_eq!(response.message.reasoning, None);
        assert!(matches!(response.finish_reason, FinishReason::Stop));
        assert_eq!(response.model, "gpt-4o-2024-08-06");
        let u = &response.usage;
        assert_eq!(
            (u.prompt_tokens, u.completion_tokens, u.reasoning_tokens, u.cache_read_tokens),
            (1219, 12, 0, 1024)
        );
        let expected = (195.0 * 2.5 + 1024.0 * 1.25 + 12.0 * 10.0) / 1e6;
        assert!((response.cost.unwrap() - expected).abs() < 1e-12);
        assert_eq!(parse(200, PLAIN.as_bytes(), "gpt-4o", &settings()).unwrap().cost, None);
    }

    #[test]
    fn tool_calls_keep_their_ids_names_and_argument_text() {
        let response = parse(200, TOOL_CALLS.as_bytes(), "gpt-4o-mini", &settings()).unwrap();
        assert!(response.message.content.is_empty());
        let calls = &response.message.tool_calls;
        assert_eq!(calls.len(), 2);
        assert_eq!(
            (calls[0].id.as_str(), calls[0].name.as_str()),
            ("call_abc123", "get_current_weather")
        );
        assert_eq!(calls[0].arguments, "{\n\"location\": \"Boston, MA\"\n}");
        assert_eq!((calls[1].id.as_str(), calls[1].arguments.as_str()), ("call_def456", "{}"));
        assert!(matches!(response.finish_reason, FinishReason::ToolCalls));
        assert_eq!(response.usage.prompt_tokens, 82);
        assert_eq!(response.usage.cache_read_tokens, 0);
    }

    #[test]
    fn compatible_servers_without_usage_ids_or_string_arguments_are_understood() {
        // Ollama-style: no usage, no tool call id, arguments as an object,
        // reasoning under `reasoning`, no model.
        let body = r#"{"choices": [{"message": {"role": "assistant", "content": "",
            "reasoning": "The user wants the weather.",
            "tool_calls": [{"function": {"name": "weather", "arguments": {"city": "Oslo"}}}]},
            "finish_reason": "tool_calls"}]}"#;
        let response = parse(200, body.as_bytes(), "qwen3", &priced()).unwrap();
        let call = &response.message.tool_calls[0];
        assert_eq!((call.id.as_str(), call.name.as_str()), ("call_0", "weather"));
        assert_eq!(call.arguments, r#"{"city":"Oslo"}"#);
        assert_eq!(response.message.reasoning.as_deref(), Some("The user wants the weather."));
        assert_eq!(response.model, "qwen3");
        assert_eq!(response.usage.prompt_tokens, 0);
        assert_eq!(response.cost, Some(0.0));
        // DeepSeek-style reasoning, content as parts, an unknown finish reason.
        let body = r#"{"model": "deepseek-reasoner", "choices": [{"index": 0, "message": {
            "content": [{"type": "text", "text": "4"}, {"type": "image_url"}, {"type": "text", "text": "2"}],
            "reasoning_content": "6 times 7"}, "finish_reason": "insufficient_system_resource"}],
            "usage": null}"#;
        let response = parse(200, body.as_bytes(), "x", &settings()).unwrap();
        assert_eq!(text_of(&response), ["42"]);
        assert_eq!(response.message.reasoning.as_deref(), Some("6 times 7"));
        let FinishReason::Other(reason) = &response.finish_reason else { panic!("{response:?}") };
        assert_eq!(reason, "insufficient_system_resource");
    }

    #[test]
    fn finish_reasons_map_to_their_cases() {
        assert!(matches!(finish_reason(Some("stop"), false), FinishReason::Stop));
        assert!(matches!(finish_reason(Some("tool_calls"), true), FinishReason::ToolCalls));
        assert!(matches!(finish_reason(Some("function_call"), true), FinishReason::ToolCalls));
        assert!(matches!(finish_reason(Some("length"), false), FinishReason::Length));
        assert!(matches!(
            finish_reason(Some("content_filter"), false),
            FinishReason::ContentFilter
        ));
        assert!(matches!(finish_reason(None, true), FinishReason::ToolCalls));
        assert!(matches!(finish_reason(Some(""), false), FinishReason::Stop));
    }

    #[test]
    fn a_refusal_is_shown_as_the_text() {
        let body = r#"{"model": "gpt-4o", "choices": [{"index": 0, "message": {"role": "assistant",
            "content": null, "refusal": "I'm sorry, I can't help with that."}, "finish_reason": "stop"}]}"#;
        let response = parse(200, body.as_bytes(), "gpt-4o", &settings()).unwrap();
        assert_eq!(text_of(&response), ["I'm sorry, I can't help with that."]);
    }

    #[test]
    fn malformed_or_empty_answers_are_invalid_responses_saying_what_is_wrong() {
        let s = settings();
        let invalid = |body: &str| match parse(200, body.as_bytes(), "m", &s) {
            Err(ProviderError::InvalidResponse(message)) => message,
            other => panic!("{body}: {other:?}"),
        };
        assert!(
            invalid(r#"{"choices": [{"message": {"content": "hi"}"#)
                .starts_with("openai: the response is not valid JSON: EOF while parsing")
        );
        assert!(
            invalid("<html>Bad gateway</html>")
                .starts_with("openai: the response is not valid JSON")
        );
        assert!(invalid("").starts_with("openai: the response is not valid JSON"));
        assert_eq!(invalid(r#"{"choices": []}"#), "openai: the response has no choices");
        assert_eq!(invalid(r#"{"id": "x"}"#), "openai: the response has no choices");
        assert_eq!(
            invalid(r#"{"choices": [{"index": 1, "message": {}}]}"#),
            "openai: the response has no choices"
        );
        assert_eq!(
            invalid(r#"{"choices": [{"finish_reason": "stop"}]}"#),
            "openai: the response's choice has no message"
        );
        assert!(
            invalid(r#"{"choices": "many"}"#)
                .starts_with("openai: the response is not a chat completion: invalid type")
        );
        assert!(invalid("[1, 2]").starts_with("openai: the response is not a chat completion"));
        let nameless = r#"{"choices": [{"message": {"tool_calls": [
            {"id": "c", "function": {"arguments": "{}"}}]}}]}"#;
        assert_eq!(
            invalid(nameless),
            "openai: the answer has a tool call without a function name (id c)"
        );
    }

    #[test]
    fn an_error_body_with_status_200_is_an_error() {
        let body = r#"{"error": {"message": "Upstream idle timeout", "code": 504}}"#;
        let err = parse(200, body.as_bytes(), "m", &settings()).unwrap_err();
        assert!(
            matches!(&err, ProviderError::Timeout(m) if m.contains("Upstream idle timeout")),
            "{err:?}"
        );
    }
}
