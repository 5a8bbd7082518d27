//! Reading a Messages API answer: the whole-JSON response, and the parts
//! that the streamed form shares with it (content blocks, usage, the final
//! `ChatResponse`).

use crate::settings::Prices;
use crate::thinking::{self, Thinking};
use reson_sdk::provider::{
    ChatResponse, ContentPart, FinishReason, Message, ProviderError, Role, ToolCall, Usage,
};
use serde::Deserialize;
use serde_json::Value;

/// A content block as the API sends it, in a response or in a
/// `content_block_start` event. Kinds this plugin does not use (server
/// tool results, for instance) are `Other` and skipped.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ApiBlock {
    Text {
        text: String,
    },
    ToolUse {
        id: String,
        name: String,
        input: Value,
    },
    Thinking {
        thinking: String,
        // Absent from the `content_block_start` of a streamed block; a
        // `signature_delta` brings it.
        #[serde(default)]
        signature: String,
    },
    RedactedThinking {
        data: String,
    },
    #[serde(other)]
    Other,
}

/// Token counts as the API reports them. Every field may be absent or
/// `null` (the streamed `message_delta` carries only what changed).
#[derive(Debug, Default, Clone, Deserialize)]
pub struct ApiUsage {
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
    pub cache_read_input_tokens: Option<u64>,
    pub cache_creation_input_tokens: Option<u64>,
}

impl ApiUsage {
    /// Takes the counts `newer` reports; they are running totals, not
    /// increments.
    pub fn update(&mut self, newer: ApiUsage) {
        self.input_tokens = newer.input_tokens.or(self.input_tokens);
        self.output_tokens = newer.output_tokens.or(self.output_tokens);
        self.cache_read_input_tokens =
            newer.cache_read_input_tokens.or(self.cache_read_input_tokens);
        self.cache_creation_input_tokens =
            newer.cache_creation_input_tokens.or(self.cache_creation_input_tokens);
    }

    fn to_usage(&self) -> Usage {
        Usage {
            prompt_tokens: self.input_tokens.unwrap_or(0),
            completion_tokens: self.output_tokens.unwrap_or(0),
            // The API counts thinking inside the output tokens and reports
            // no separate figure.
            reasoning_tokens: 0,
            cache_read_tokens: self.cache_read_input_tokens.unwrap_or(0),
            cache_write_tokens: self.cache_creation_input_tokens.unwrap_or(0),
        }
    }
}

/// A finished content block.
#[derive(Debug, Clone, PartialEq)]
pub enum Block {
    Text(String),
    /// `arguments` is the JSON text of the tool's input.
    ToolUse {
        id: String,
        name: String,
        arguments: String,
    },
    Thinking(Thinking),
}

/// An answer read whole, from either form.
#[derive(Debug, Clone)]
pub struct Reply {
    /// The model that answered, when the API said.
    pub model: Option<String>,
    pub blocks: Vec<Block>,
    pub usage: ApiUsage,
    pub stop_reason: String,
}

/// A non-streamed response body.
#[derive(Deserialize)]
struct ApiMessage {
    model: Option<String>,
    content: Vec<ApiBlock>,
    stop_reason: Option<String>,
    #[serde(default)]
    usage: ApiUsage,
}

/// Parses a non-streamed response body.
pub fn parse(body: &[u8]) -> Result<Reply, ProviderError> {
    let message: ApiMessage = serde_json::from_slice(body).map_err(|e| {
        ProviderError::InvalidResponse(format!(
            "anthropic: the response is not a Messages API message: {e}"
        ))
    })?;
    let stop_reason = message.stop_reason.ok_or_else(|| {
        ProviderError::InvalidResponse("anthropic: the response has no stop_reason".to_owned())
    })?;
    let blocks = message
        .content
        .into_iter()
        .filter_map(|block| match block {
            ApiBlock::Text { text } => Some(Block::Text(text)),
            ApiBlock::ToolUse { id, name, input } => {
                Some(Block::ToolUse { id, name, arguments: input.to_string() })
            }
            ApiBlock::Thinking { thinking, signature } => {
                Some(Block::Thinking(Thinking::Signed { thinking, signature }))
            }
            ApiBlock::RedactedThinking { data } => {
                Some(Block::Thinking(Thinking::Redacted { data }))
            }
            ApiBlock::Other => None,
        })
        .collect();
    Ok(Reply { model: message.model, blocks, usage: message.usage, stop_reason })
}

/// The host's response for `reply`. `requested_model` stands in when the
/// API did not name the model; `prices` give the cost.
pub fn into_response(reply: Reply, requested_model: &str, prices: &Prices) -> ChatResponse {
    let mut content = Vec::new();
    let mut tool_calls = Vec::new();
    let mut thinking = Vec::new();
    for block in reply.blocks {
        match block {
            Block::Text(text) if text.is_empty() => {}
            Block::Text(text) => content.push(ContentPart::Text(text)),
            Block::ToolUse { id, name, arguments } => {
                tool_calls.push(ToolCall { id, name, arguments })
            }
            Block::Thinking(block) => thinking.push(block),
        }
    }
    let shown: Vec<&str> = thinking
        .iter()
        .filter_map(|block| match block {
            Thinking::Signed { thinking, .. } if !thinking.is_empty() => Some(thinking.as_str()),
            _ => None,
        })
        .collect();
    let reasoning = (!shown.is_empty()).then(|| shown.join("\n\n"));
    let usage = reply.usage.to_usage();
    ChatResponse {
        message: Message {
            role: Role::Assistant,
            content,
            tool_calls,
            tool_call_id: None,
            name: None,
            reasoning,
            provider_data: thinking::to_provider_data(&thinking),
        },
        cost: prices.cost(&usage),
        usage,
        finish_reason: finish_reason(&reply.stop_reason),
        model: reply.model.filter(|m| !m.is_empty()).unwrap_or_else(|| requested_model.to_owned()),
    }
}

/// The host's finish reason for an API `stop_reason`.
fn finish_reason(stop_reason: &str) -> FinishReason {
    match stop_reason {
        "end_turn" | "stop_sequence" => FinishReason::Stop,
        "tool_use" => FinishReason::ToolCalls,
        // Out of room either way: the answer is cut short.
        "max_tokens" | "model_context_window_exceeded" => FinishReason::Length,
        "refusal" => FinishReason::ContentFilter,
        other => FinishReason::Other(other.to_owned()),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A real-shaped answer with thinking, text and a tool call.
    pub const TOOL_USE_RESPONSE: &str = r#"{
  "id": "msg_01Aq9w938a90dw8q",
  "type": "message",
  "role": "assistant",
  "model": "claude-sonnet-4-5-20250929",
  "content": [
    {"type": "thinking", "thinking": "The user wants the weather in Paris; I should call get_weather.", "signature": "EqQBCkYIARgCIkB3c2d3"},
    {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"},
    {"type": "text", "text": "I'll check the weather in Paris for you."},
    {"type": "tool_use", "id": "toolu_01A09q90qw90lq917835lq9", "name": "get_weather", "input": {"location": "Paris, France", "unit": "celsius"}}
  ],
  "stop_reason": "tool_use",
  "stop_sequence": null,
  "usage": {"input_tokens": 472, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 1024, "output_tokens": 89, "service_tier": "standard"}
}"#;

    fn prices() -> Prices {
        Prices { input: Some(3.0), output: Some(15.0), cache_read: Some(0.3), cache_write: None }
    }

    fn respond(body: &str) -> ChatResponse {
        into_response(parse(body.as_bytes()).unwrap(), "claude-sonnet-4-5", &prices())
    }

    #[test]
    fn a_plain_answer_gives_text_usage_cost_and_stop() {
        let response = respond(
            r#"{"id": "msg_013Zva2CMHLNnXjNJJKqJ2EF", "type": "message", "role": "assistant",
                "model": "claude-sonnet-4-5-20250929",
                "content": [{"type": "text", "text": "Hi! My name is Claude."}],
                "stop_reason": "end_turn", "stop_sequence": null,
                "usage": {"input_tokens": 2095, "output_tokens": 503,
                          "cache_creation_input_tokens": 2051, "cache_read_input_tokens": 0}}"#,
        );
        let message = &response.message;
        assert!(matches!(message.role, Role::Assistant));
        assert!(
            matches!(&message.content[..], [ContentPart::Text(t)] if t == "Hi! My name is Claude.")
        );
        assert!(message.tool_calls.is_empty() && message.reasoning.is_none());
        assert!(message.provider_data.is_none());
        assert!(matches!(response.finish_reason, FinishReason::Stop));
        assert_eq!(response.model, "claude-sonnet-4-5-20250929");
        let usage = &response.usage;
        assert_eq!(
            (usage.prompt_tokens, usage.completion_tokens, usage.cache_read_tokens),
            (2095, 503, 0)
        );
        assert_eq!(usage.cache_write_tokens, 2051);
        let expected = (2095.0 * 3.0 + 503.0 * 15.0) / 1e6;
        assert!((response.cost.unwrap() - expected).abs() < 1e-12);
    }

    #[test]
    fn tool_calls_and_thinking_are_returned() {
        let response = respond(TOOL_USE_RESPONSE);
        let message = &response.message;
        assert!(matches!(response.finish_reason, FinishReason::ToolCalls));
        assert!(matches!(&message.content[..], [ContentPart::Text(t)]
            if t == "I'll check the weather in Paris for you."));
        let call = &message.tool_calls[0];
        assert_eq!(call.id, "toolu_01A09q90qw90lq917835lq9");
        assert_eq!(call.name, "get_weather");
        let input: Value = serde_json::from_str(&call.arguments).unwrap();
        assert_eq!(input, serde_json::json!({"location": "Paris, France", "unit": "celsius"}));
        assert_eq!(
            message.reasoning.as_deref(),
            Some("The user wants the weather in Paris; I should call get_weather.")
        );
        let data: Value = serde_json::from_str(message.provider_data.as_deref().unwrap()).unwrap();
        assert_eq!(
            data,
            serde_json::json!({"anthropic": {"thinking": [
                {"thinking": "The user wants the weather in Paris; I should call get_weather.",
                 "signature": "EqQBCkYIARgCIkB3c2d3"},
                {"data": "EmwKAhgBEgy3va3pzix"}
            ]}})
        );
        assert_eq!(response.usage.cache_read_tokens, 1024);
    }

    #[test]
    fn stop_reasons_map_to_finish_reasons() {
        assert!(matches!(finish_reason("end_turn"), FinishReason::Stop));
        assert!(matches!(finish_reason("stop_sequence"), FinishReason::Stop));
        assert!(matches!(finish_reason("tool_use"), FinishReason::ToolCalls));
        assert!(matches!(finish_reason("max_tokens"), FinishReason::Length));
        assert!(matches!(finish_reason("refusal"), FinishReason::ContentFilter));
        assert!(matches!(finish_reason("pause_turn"), FinishReason::Other(r) if r == "pause_turn"));
    }

    #[test]
    fn unknown_blocks_are_skipped_and_missing_fields_default() {
        let response = into_response(
            parse(
                br#"{"content": [{"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search",
                     "input": {"query": "x"}}, {"type": "text", "text": ""}],
                     "stop_reason": "end_turn", "usage": {"input_tokens": 5, "output_tokens": 1,
                     "cache_creation_input_tokens": null}}"#,
            )
            .unwrap(),
            "claude-requested",
            &Prices::default(),
        );
        assert!(response.message.content.is_empty() && response.message.tool_calls.is_empty());
        assert_eq!(response.model, "claude-requested");
        assert_eq!(response.usage.cache_write_tokens, 0);
        assert_eq!(response.cost, None);
    }

    #[test]
    fn malformed_responses_are_invalid_and_say_what_is_wrong() {
        let cases: [(&[u8], &str); 4] = [
            (b"{not json", "not a Messages API message: key must be a string"),
            (br#"{"type": "message", "stop_reason": "end_turn"}"#, "missing field `content`"),
            (
                br#"{"content": [{"type": "text"}], "stop_reason": "end_turn"}"#,
                "missing field `text`",
            ),
            (br#"{"content": [], "stop_reason": null}"#, "the response has no stop_reason"),
        ];
        for (body, expected) in cases {
            let err = parse(body).unwrap_err();
            assert!(
                matches!(&err, ProviderError::InvalidResponse(m) if m.contains(expected)),
                "{err:?}"
            );
        }
    }
}
