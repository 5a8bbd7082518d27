//! Gemini's `GenerateContentResponse`, read into the host's chat response.
//! A whole response and each chunk of a stream have the same shape, so one
//! [`Assembler`] reads both: a stream's chunks carry the next parts, and the
//! last one the finish reason and the final usage.

use crate::error;
use crate::settings::Prices;
use crate::signatures::Signatures;
use reson_sdk::provider::{
    ChatResponse, ContentPart, Delta, FinishReason, Message, ProviderError, Role, ToolCall,
    ToolCallDelta, Usage,
};
use serde::Deserialize;
use serde_json::Value;

/// One response, or one chunk of a stream. Fields this plugin does not use
/// (safety ratings, citations, logprobs) are skipped.
#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct Chunk {
    candidates: Vec<Candidate>,
    usage_metadata: Option<UsageMetadata>,
    model_version: Option<String>,
    prompt_feedback: Option<PromptFeedback>,
    /// An error reported inside a stream.
    error: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct Candidate {
    content: Option<Content>,
    finish_reason: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Content {
    parts: Vec<Part>,
}

/// A part of the answer. Other kinds (executable code, generated images)
/// have no place in the host's message and are skipped.
#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct Part {
    text: Option<String>,
    /// The text is a thought summary, not the answer.
    thought: bool,
    thought_signature: Option<String>,
    function_call: Option<FunctionCall>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct FunctionCall {
    name: String,
    args: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct PromptFeedback {
    block_reason: Option<String>,
}

#[derive(Debug, Default, Clone, Copy, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct UsageMetadata {
    prompt_token_count: u64,
    candidates_token_count: u64,
    thoughts_token_count: u64,
    cached_content_token_count: u64,
    tool_use_prompt_token_count: u64,
}

/// How a response was received, which decides what counts as complete.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Received {
    /// One JSON body.
    Whole,
    /// Chunks of a stream, the last with the finish reason.
    Stream,
}

/// Collects a response from its chunks, emitting deltas as parts arrive.
#[derive(Debug)]
pub struct Assembler {
    model: String,
    text: String,
    reasoning: String,
    calls: Vec<ToolCall>,
    signatures: Signatures,
    finish_reason: Option<String>,
    block_reason: Option<String>,
    usage: UsageMetadata,
    chunks: usize,
    candidates: usize,
}

impl Assembler {
    /// An empty response from `model` (the name reported unless the API
    /// names the model version that answered).
    pub fn new(model: &str) -> Self {
        Self {
            model: model.to_owned(),
            text: String::new(),
            reasoning: String::new(),
            calls: Vec::new(),
            signatures: Signatures::default(),
            finish_reason: None,
            block_reason: None,
            usage: UsageMetadata::default(),
            chunks: 0,
            candidates: 0,
        }
    }

    /// Reads one response or stream chunk (JSON), passing each new piece to
    /// `emit`.
    pub fn chunk(&mut self, json: &[u8], emit: &mut dyn FnMut(Delta)) -> Result<(), ProviderError> {
        let invalid = |e: serde_json::Error| {
            ProviderError::InvalidResponse(format!(
                "the Gemini response is not a valid GenerateContentResponse: {e}"
            ))
        };
        let value: Value = serde_json::from_slice(json).map_err(invalid)?;
        // serde would read a struct from an array too.
        if !value.is_object() {
            return Err(ProviderError::InvalidResponse(
                "the Gemini response is not a valid GenerateContentResponse: not a JSON object"
                    .to_owned(),
            ));
        }
        let chunk: Chunk = serde_json::from_value(value).map_err(invalid)?;
        if let Some(error) = &chunk.error {
            return Err(error::from_stream_error(error));
        }
        self.chunks += 1;
        if let Some(version) = chunk.model_version.filter(|v| !v.is_empty()) {
            self.model = version;
        }
        // Each chunk's usage covers the whole response so far.
        if let Some(usage) = chunk.usage_metadata {
            self.usage = usage;
        }
        if let Some(reason) = chunk.prompt_feedback.and_then(|f| f.block_reason) {
            self.block_reason = Some(reason);
        }
        // One candidate is asked for; any others are ignored.
        let Some(candidate) = chunk.candidates.into_iter().next() else { return Ok(()) };
        self.candidates += 1;
        for part in candidate.content.map(|c| c.parts).unwrap_or_default() {
            self.part(part, emit)?;
        }
        if let Some(reason) = candidate.finish_reason {
            self.finish_reason = Some(reason);
        }
        Ok(())
    }

    fn part(&mut self, part: Part, emit: &mut dyn FnMut(Delta)) -> Result<(), ProviderError> {
        if let Some(call) = part.function_call {
            if call.name.is_empty() {
                return Err(ProviderError::InvalidResponse(
                    "a Gemini functionCall part has no name".to_owned(),
                ));
            }
            let index = self.calls.len();
            // Gemini issues no call ids; these are unique within the answer.
            let id = format!("call_{index}");
            let arguments = call.args.map_or_else(|| "{}".to_owned(), |args| args.to_string());
            emit(Delta::ToolCall(ToolCallDelta {
                index: u32::try_from(index).unwrap_or(u32::MAX),
                id: Some(id.clone()),
                name: Some(call.name.clone()),
                arguments_fragment: arguments.clone(),
            }));
            self.calls.push(ToolCall { id, name: call.name, arguments });
            self.signatures.tool_calls.push(part.thought_signature);
            return Ok(());
        }
        if part.thought_signature.is_some() {
            self.signatures.text = part.thought_signature;
        }
        match part.text.filter(|text| !text.is_empty()) {
            Some(text) if part.thought => {
                self.reasoning.push_str(&text);
                emit(Delta::Reasoning(text));
            }
            Some(text) => {
                self.text.push_str(&text);
                emit(Delta::Text(text));
            }
            None => {}
        }
        Ok(())
    }

    /// The complete response, or what was missing from it.
    pub fn finish(
        self,
        received: Received,
        prices: Option<&Prices>,
    ) -> Result<ChatResponse, ProviderError> {
        let stream = received == Received::Stream;
        // A stream that stops early was cut in transit: a network error,
        // retried like any broken connection.
        if stream && self.chunks == 0 {
            return Err(ProviderError::Network(
                "the Gemini stream ended without any `data:` event".to_owned(),
            ));
        }
        if self.block_reason.is_none() {
            if stream && self.finish_reason.is_none() {
                return Err(ProviderError::Network(
                    "the Gemini stream ended before its final chunk (no finishReason received)"
                        .to_owned(),
                ));
            }
            if self.candidates == 0 {
                return Err(ProviderError::InvalidResponse(
                    "the Gemini response has no candidates and no promptFeedback.blockReason"
                        .to_owned(),
                ));
            }
        }
        let finish_reason = finish_reason(
            self.finish_reason.as_deref(),
            self.block_reason.is_some(),
            !self.calls.is_empty(),
        );
        let u = self.usage;
        let usage = Usage {
            // Tokens of tool-use prompts (grounding) are billed as input.
            prompt_tokens: u.prompt_token_count.saturating_add(u.tool_use_prompt_token_count),
            // Thinking is billed as output; `candidatesTokenCount` leaves it out.
            completion_tokens: u.candidates_token_count.saturating_add(u.thoughts_token_count),
            reasoning_tokens: u.thoughts_token_count,
            cache_read_tokens: u.cached_content_token_count,
            cache_write_tokens: 0,
        };
        Ok(ChatResponse {
            message: Message {
                role: Role::Assistant,
                content: if self.text.is_empty() {
                    Vec::new()
                } else {
                    vec![ContentPart::Text(self.text)]
                },
                tool_calls: self.calls,
                tool_call_id: None,
                name: None,
                reasoning: (!self.reasoning.is_empty()).then_some(self.reasoning),
                provider_data: self.signatures.to_provider_data(),
            },
            cost: prices.map(|prices| prices.cost(&usage)),
            usage,
            finish_reason,
            model: self.model,
        })
    }
}

/// A whole (non-streamed) response body.
pub fn parse(
    body: &[u8],
    model: &str,
    prices: Option<&Prices>,
) -> Result<ChatResponse, ProviderError> {
    let mut assembler = Assembler::new(model);
    assembler.chunk(body, &mut |_| {})?;
    assembler.finish(Received::Whole, prices)
}

/// Gemini's finish reason in the host's terms.
fn finish_reason(reason: Option<&str>, blocked: bool, has_calls: bool) -> FinishReason {
    match reason {
        None if blocked => FinishReason::ContentFilter,
        None | Some("STOP") if has_calls => FinishReason::ToolCalls,
        None | Some("STOP") => FinishReason::Stop,
        Some("MAX_TOKENS") => FinishReason::Length,
        Some(
            "SAFETY"
            | "RECITATION"
            | "BLOCKLIST"
            | "PROHIBITED_CONTENT"
            | "SPII"
            | "IMAGE_SAFETY"
            | "IMAGE_PROHIBITED_CONTENT"
            | "IMAGE_RECITATION",
        ) => FinishReason::ContentFilter,
        Some(other) => FinishReason::Other(other.to_ascii_lowercase()),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::settings::Settings;

    /// A plain answer from a thinking model, as `generateContent` sends it.
    pub(crate) const PLAIN: &str = r#"{
  "candidates": [
    {
      "content": {
        "parts": [
          {
            "text": "The capital of France is Paris."
          }
        ],
        "role": "model"
      },
      "finishReason": "STOP",
      "index": 0
    }
  ],
  "usageMetadata": {
    "promptTokenCount": 9,
    "candidatesTokenCount": 7,
    "totalTokenCount": 41,
    "promptTokensDetails": [
      {
        "modality": "TEXT",
        "tokenCount": 9
      }
    ],
    "thoughtsTokenCount": 25
  },
  "modelVersion": "gemini-2.5-flash",
  "responseId": "mEMfafOjD-ixkdUPyNbY4Ac"
}"#;

    /// Two parallel calls from Gemini 3, the first with its signature.
    const TOOL_CALLS: &str = r#"{
  "candidates": [
    {
      "content": {
        "parts": [
          {
            "text": "I'll check both cities."
          },
          {
            "functionCall": {
              "name": "get_weather",
              "args": {
                "city": "Paris",
                "unit": "celsius"
              }
            },
            "thoughtSignature": "CiQBjz1rX9Ms1gXkEbGRRsvL0Zr6yBNR7aBfUQ=="
          },
          {
            "functionCall": {
              "name": "get_weather",
              "args": {
                "city": "Rome"
              }
            }
          },
          {
            "functionCall": {
              "name": "now"
            }
          }
        ],
        "role": "model"
      },
      "finishReason": "STOP",
      "index": 0,
      "finishMessage": "Model generated function call(s)."
    }
  ],
  "usageMetadata": {
    "promptTokenCount": 1200,
    "candidatesTokenCount": 40,
    "totalTokenCount": 1340,
    "cachedContentTokenCount": 1024,
    "thoughtsTokenCount": 100
  },
  "modelVersion": "gemini-3-pro-preview",
  "responseId": "Xk8fadCJBNrJvdIPh_Tn8QE"
}"#;

    fn text_of(response: &ChatResponse) -> String {
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
    fn a_plain_answer() {
        let response = parse(PLAIN.as_bytes(), "gemini-2.5-flash", None).unwrap();
        assert!(matches!(response.message.role, Role::Assistant));
        assert_eq!(text_of(&response), "The capital of France is Paris.");
        assert!(response.message.tool_calls.is_empty());
        assert!(matches!(response.finish_reason, FinishReason::Stop));
        assert_eq!(response.usage.prompt_tokens, 9);
        assert_eq!(response.usage.completion_tokens, 32);
        assert_eq!(response.usage.reasoning_tokens, 25);
        assert_eq!(response.usage.cache_read_tokens, 0);
        assert_eq!(response.model, "gemini-2.5-flash");
        assert_eq!(response.cost, None);
        assert_eq!(response.message.provider_data, None);
    }

    #[test]
    fn tool_calls_get_synthesized_ids_and_keep_their_signatures() {
        let settings = Settings::load(|key| match key {
            "price_input_per_mtok" => Some("2".into()),
            "price_output_per_mtok" => Some("12".into()),
            "price_cache_read_per_mtok" => Some("0.2".into()),
            _ => None,
        })
        .unwrap();
        let response =
            parse(TOOL_CALLS.as_bytes(), "gemini-3-pro", settings.prices.as_ref()).unwrap();
        assert_eq!(text_of(&response), "I'll check both cities.");
        let calls: Vec<_> = response
            .message
            .tool_calls
            .iter()
            .map(|c| (c.id.as_str(), c.name.as_str(), c.arguments.as_str()))
            .collect();
        assert_eq!(
            calls,
            [
                ("call_0", "get_weather", r#"{"city":"Paris","unit":"celsius"}"#),
                ("call_1", "get_weather", r#"{"city":"Rome"}"#),
                ("call_2", "now", "{}"),
            ]
        );
        assert!(matches!(response.finish_reason, FinishReason::ToolCalls));
        assert_eq!(response.model, "gemini-3-pro-preview");
        let signatures = Signatures::from_provider_data(response.message.provider_data.as_deref());
        assert_eq!(signatures.tool_call(0), Some("CiQBjz1rX9Ms1gXkEbGRRsvL0Zr6yBNR7aBfUQ=="));
        assert_eq!(signatures.tool_call(1), None);
        assert_eq!(response.usage.cache_read_tokens, 1024);
        assert_eq!(response.usage.completion_tokens, 140);
        // 176 uncached at $2, 1024 cached at $0.2, 140 out at $12 per million.
        let expected = (176.0 * 2.0 + 1024.0 * 0.2 + 140.0 * 12.0) / 1e6;
        assert!((response.cost.unwrap() - expected).abs() < 1e-12);
    }

    #[test]
    fn finish_reasons_map_to_the_hosts() {
        let reason = |name: &str, calls: bool| finish_reason(Some(name), false, calls);
        assert!(matches!(reason("STOP", false), FinishReason::Stop));
        assert!(matches!(reason("STOP", true), FinishReason::ToolCalls));
        assert!(matches!(reason("MAX_TOKENS", true), FinishReason::Length));
        for filtered in ["SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII"] {
            assert!(matches!(reason(filtered, false), FinishReason::ContentFilter));
        }
        assert!(matches!(reason("MALFORMED_FUNCTION_CALL", false),
            FinishReason::Other(r) if r == "malformed_function_call"));
        assert!(matches!(reason("OTHER", false), FinishReason::Other(r) if r == "other"));
        assert!(matches!(finish_reason(None, true, false), FinishReason::ContentFilter));
    }

    #[test]
    fn thoughts_become_reasoning_and_a_text_signature_is_kept() {
        let body = r#"{"candidates": [{"content": {"parts": [
            {"text": "**Weighing options**\nThe user wants", "thought": true},
            {"text": "Use a map.", "thoughtSignature": "c2lnVA=="}], "role": "model"},
            "finishReason": "STOP"}],
            "usageMetadata": {"promptTokenCount": 5, "candidatesTokenCount": 3, "thoughtsTokenCount": 50}}"#;
        let response = parse(body.as_bytes(), "gemini-2.5-pro", None).unwrap();
        assert_eq!(
            response.message.reasoning.as_deref(),
            Some("**Weighing options**\nThe user wants")
        );
        assert_eq!(text_of(&response), "Use a map.");
        let signatures = Signatures::from_provider_data(response.message.provider_data.as_deref());
        assert_eq!(signatures.text.as_deref(), Some("c2lnVA=="));
        // The model asked for is reported when the API names none.
        assert_eq!(response.model, "gemini-2.5-pro");
    }

    #[test]
    fn a_blocked_prompt_is_an_empty_filtered_answer() {
        let body = r#"{"promptFeedback": {"blockReason": "SAFETY", "safetyRatings": [
            {"category": "HARM_CATEGORY_DANGEROUS_CONTENT", "probability": "HIGH"}]},
            "usageMetadata": {"promptTokenCount": 12, "totalTokenCount": 12},
            "modelVersion": "gemini-2.5-flash"}"#;
        let response = parse(body.as_bytes(), "m", None).unwrap();
        assert!(response.message.content.is_empty());
        assert!(matches!(response.finish_reason, FinishReason::ContentFilter));
        assert_eq!(response.usage.prompt_tokens, 12);
        // A candidate cut for safety has no content at all.
        let body = r#"{"candidates": [{"finishReason": "SAFETY", "index": 0}]}"#;
        let response = parse(body.as_bytes(), "m", None).unwrap();
        assert!(matches!(response.finish_reason, FinishReason::ContentFilter));
    }

    #[test]
    fn malformed_responses_are_invalid() {
        let invalid = |body: &str| match parse(body.as_bytes(), "m", None) {
            Err(ProviderError::InvalidResponse(message)) => message,
            other => panic!("{body}: unexpected {other:?}"),
        };
        assert!(invalid(&PLAIN[..PLAIN.len() / 2]).contains("not a valid GenerateContentResponse"));
        assert!(invalid("").contains("not a valid"));
        assert!(invalid("[]").contains("not a valid"));
        assert!(invalid(r#"{"candidates": "none"}"#).contains("not a valid"));
        assert!(
            invalid(r#"{"candidates": [{"content": {"parts": [{"text": 5}]}}]}"#)
                .contains("not a valid")
        );
        assert!(invalid("{}").contains("no candidates"));
        assert!(invalid(r#"{"candidates": []}"#).contains("no candidates"));
        assert!(
            invalid(
                r#"{"candidates": [{"content": {"parts": [{"functionCall": {"args": {}}}]}}]}"#
            )
            .contains("no name")
        );
        assert!(invalid(r#"{"usageMetadata": {"promptTokenCount": -1}}"#).contains("not a valid"));
        // Missing optional parts are fine: a whole response needs no finishReason.
        let response =
            parse(br#"{"candidates": [{"content": {"parts": [{"text": "hi"}]}}]}"#, "m", None);
        assert!(matches!(response.unwrap().finish_reason, FinishReason::Stop));
    }
}
