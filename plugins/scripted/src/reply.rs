//! Turning a scripted turn into the provider's answer: the response, and the
//! deltas a streamed request sees first.

use crate::script::Turn;
use reson_sdk::provider::{
    ChatResponse, ContentPart, Delta, FinishReason, Message, ProviderError, Role, ToolCall,
    ToolCallDelta, Usage,
};

/// The model name reported when the request names none.
const DEFAULT_MODEL: &str = "scripted";

/// The answer to a request playing `turn`, the `index`-th (0-based) turn.
pub fn response(turn: &Turn, index: usize, model: &str) -> Result<ChatResponse, ProviderError> {
    if let Some(error) = &turn.error {
        return Err(error.to_provider_error());
    }
    let tool_calls: Vec<ToolCall> = turn
        .tool_calls
        .iter()
        .enumerate()
        .map(|(i, call)| ToolCall {
            // The turn index keeps generated ids unique across a conversation.
            id: call.id.clone().unwrap_or_else(|| format!("call_{index}_{i}")),
            name: call.name.clone(),
            arguments: call.arguments_text(),
        })
        .collect();
    let finish_reason = match turn.finish_reason.as_deref() {
        None if tool_calls.is_empty() => FinishReason::Stop,
        None => FinishReason::ToolCalls,
        Some("stop") => FinishReason::Stop,
        Some("tool-calls") => FinishReason::ToolCalls,
        Some("length") => FinishReason::Length,
        Some("content-filter") => FinishReason::ContentFilter,
        Some(other) => FinishReason::Other(other.to_owned()),
    };
    let usage = &turn.usage;
    Ok(ChatResponse {
        message: Message {
            role: Role::Assistant,
            content: turn.text.iter().map(|text| ContentPart::Text(text.clone())).collect(),
            tool_calls,
            tool_call_id: None,
            name: None,
            reasoning: turn.reasoning.clone(),
            provider_data: None,
        },
        usage: Usage {
            prompt_tokens: usage.prompt_tokens,
            completion_tokens: usage.completion_tokens,
            reasoning_tokens: usage.reasoning_tokens,
            cache_read_tokens: usage.cache_read_tokens,
            cache_write_tokens: usage.cache_write_tokens,
        },
        finish_reason,
        model: if model.is_empty() { DEFAULT_MODEL } else { model }.to_owned(),
        cost: turn.cost,
    })
}

/// The deltas that stream `message` the way a real API would: reasoning,
/// then text, word by word, then each tool call in two fragments (id and
/// name with the first half of the arguments, then the rest), so the host's
/// reassembly is exercised. Concatenated, they give back the message.
pub fn deltas(message: &Message) -> Vec<Delta> {
    let mut deltas = Vec::new();
    if let Some(reasoning) = &message.reasoning {
        deltas.extend(words(reasoning).map(|w| Delta::Reasoning(w.to_owned())));
    }
    for part in &message.content {
        if let ContentPart::Text(text) = part {
            deltas.extend(words(text).map(|w| Delta::Text(w.to_owned())));
        }
    }
    for (index, call) in (0u32..).zip(&message.tool_calls) {
        let middle = call.arguments.floor_char_boundary(call.arguments.len() / 2);
        let (head, tail) = call.arguments.split_at(middle);
        deltas.push(Delta::ToolCall(ToolCallDelta {
            index,
            id: Some(call.id.clone()),
            name: Some(call.name.clone()),
            arguments_fragment: head.to_owned(),
        }));
        deltas.push(Delta::ToolCall(ToolCallDelta {
            index,
            id: None,
            name: None,
            arguments_fragment: tail.to_owned(),
        }));
    }
    deltas
}

/// Splits `text` into words, each keeping the whitespace that follows it
/// (leading whitespace stays with the first), so that the pieces
/// concatenate to `text`.
fn words(text: &str) -> impl Iterator<Item = &str> {
    let mut rest = text;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let word_start = rest.find(|c: char| !c.is_whitespace()).unwrap_or(rest.len());
        let word_end =
            rest[word_start..].find(char::is_whitespace).map_or(rest.len(), |i| word_start + i);
        let end = rest[word_end..]
            .find(|c: char| !c.is_whitespace())
            .map_or(rest.len(), |i| word_end + i);
        let (piece, tail) = rest.split_at(end);
        rest = tail;
        Some(piece)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::script::Script;

    fn turn(json: &str) -> Turn {
        let mut script = Script::parse("s.json", &format!(r#"{{"turns": [{json}]}}"#)).unwrap();
        script.turns.remove(0)
    }

    fn text_of(message: &Message) -> Vec<&str> {
        message
            .content
            .iter()
            .map(|part| match part {
                ContentPart::Text(text) => text.as_str(),
                ContentPart::Image(_) => panic!("unexpected image"),
            })
            .collect()
    }

    #[test]
    fn a_text_turn_answers_with_one_text_part_and_stops() {
        let turn = turn(
            r#"{"text": "Done.", "usage": {"prompt_tokens": 10, "completion_tokens": 3},
                "cost": 0.5}"#,
        );
        let response = response(&turn, 1, "gpt-test").unwrap();
        assert!(matches!(response.message.role, Role::Assistant));
        assert_eq!(text_of(&response.message), ["Done."]);
        assert!(response.message.tool_calls.is_empty());
        assert!(response.message.reasoning.is_none());
        assert!(matches!(response.finish_reason, FinishReason::Stop));
        assert_eq!(response.usage.prompt_tokens, 10);
        assert_eq!(response.usage.completion_tokens, 3);
        assert_eq!(response.usage.reasoning_tokens, 0);
        assert_eq!(response.model, "gpt-test");
        assert_eq!(response.cost, Some(0.5));
    }

    #[test]
    fn a_tool_call_turn_gets_ids_and_finishes_with_tool_calls() {
        let turn = turn(
            r#"{"text": "I'll look.", "reasoning": "Need files.", "tool_calls": [
                {"name": "glob", "arguments": {"pattern": "**/*"}},
                {"id": "mine", "name": "read", "arguments": {"path": "a"}}]}"#,
        );
        let response = response(&turn, 2, "").unwrap();
        let calls = &response.message.tool_calls;
        assert_eq!((calls[0].id.as_str(), calls[0].name.as_str()), ("call_2_0", "glob"));
        assert_eq!(calls[0].arguments, r#"{"pattern":"**/*"}"#);
        assert_eq!(calls[1].id, "mine");
        assert_eq!(response.message.reasoning.as_deref(), Some("Need files."));
        assert!(matches!(response.finish_reason, FinishReason::ToolCalls));
        assert_eq!(response.model, "scripted");
        assert_eq!(response.cost, None);
    }

    #[test]
    fn an_empty_turn_has_no_content() {
        let response = response(&turn("{}"), 0, "m").unwrap();
        assert!(response.message.content.is_empty());
        assert!(matches!(response.finish_reason, FinishReason::Stop));
    }

    #[test]
    fn explicit_finish_reasons_win() {
        let reason = |name: &str| {
            let turn =
                turn(&format!(r#"{{"tool_calls": [{{"name": "x"}}], "finish_reason": "{name}"}}"#));
            response(&turn, 0, "m").unwrap().finish_reason
        };
        assert!(matches!(reason("stop"), FinishReason::Stop));
        assert!(matches!(reason("tool-calls"), FinishReason::ToolCalls));
        assert!(matches!(reason("length"), FinishReason::Length));
        assert!(matches!(reason("content-filter"), FinishReason::ContentFilter));
        assert!(matches!(reason("max_turns"), FinishReason::Other(r) if r == "max_turns"));
    }

    #[test]
    fn an_error_turn_returns_its_error() {
        let turn = turn(
            r#"{"text": "unused", "error": {"kind": "rate-limited", "message": "slow",
                "retry_after_ms": 250}}"#,
        );
        let err = response(&turn, 0, "m").unwrap_err();
        assert!(matches!(err, ProviderError::RateLimited(r) if r.retry_after_ms == Some(250)));
    }

    #[test]
    fn words_keep_their_whitespace_and_concatenate_back() {
        let pieces: Vec<_> = words("I'll look  at\nthe files.").collect();
        assert_eq!(pieces, ["I'll ", "look  ", "at\n", "the ", "files."]);
        assert_eq!(words("  lead").collect::<Vec<_>>(), ["  lead"]);
        assert_eq!(words("trail ").collect::<Vec<_>>(), ["trail "]);
        assert_eq!(words("").count(), 0);
        assert_eq!(words("   ").collect::<Vec<_>>(), ["   "]);
    }

    #[test]
    fn deltas_stream_reasoning_text_and_tool_calls_in_order() {
        let turn = turn(
            r#"{"text": "Looking now.", "reasoning": "Hmm ok", "tool_calls": [
                {"name": "glob", "arguments": {"pattern": "é*"}}, {"name": "list"}]}"#,
        );
        let message = response(&turn, 0, "m").unwrap().message;
        let deltas = deltas(&message);

        let mut reasoning = Vec::new();
        let mut text = Vec::new();
        let mut calls: Vec<Vec<&ToolCallDelta>> = vec![Vec::new(), Vec::new()];
        for delta in &deltas {
            match delta {
                Delta::Reasoning(r) => {
                    assert!(text.is_empty() && calls[0].is_empty(), "reasoning comes first");
                    reasoning.push(r.as_str());
                }
                Delta::Text(t) => {
                    assert!(calls[0].is_empty(), "text comes before tool calls");
                    text.push(t.as_str());
                }
                Delta::ToolCall(call) => calls[call.index as usize].push(call),
            }
        }
        assert_eq!(reasoning, ["Hmm ", "ok"]);
        assert_eq!(text, ["Looking ", "now."]);
        for (fragments, call) in calls.iter().zip(&message.tool_calls) {
            assert_eq!(fragments.len(), 2);
            assert_eq!(fragments[0].id.as_deref(), Some(call.id.as_str()));
            assert_eq!(fragments[0].name.as_deref(), Some(call.name.as_str()));
            assert!(fragments[1].id.is_none() && fragments[1].name.is_none());
            let joined: String = fragments.iter().map(|f| f.arguments_fragment.as_str()).collect();
            assert_eq!(joined, call.arguments);
        }
        assert_eq!(calls[1][0].arguments_fragment, "{");
        assert_eq!(calls[1][1].arguments_fragment, "}");
    }
}
