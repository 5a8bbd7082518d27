//! The entry point of the fuzz target `anthropic` (tests/fuzz): the
//! plugin's real parsers driven with arbitrary bytes, panicking when a
//! property that must hold for every input fails.
//!
//! An input is `[mode, seed, payload @ ..]`, `mode % 3` saying what the
//! payload is:
//!
//! - 0: the body of a streamed 200 answer (server-sent events);
//! - 1: the body of a whole 200 answer;
//! - 2: an error answer: two bytes of status (big-endian), then header
//!   lines (`name: value`) up to the first blank line, then the body.
//!
//! A stream is read whole and in the pieces `seed` cuts it into (see
//! [`splits`]); every way of reading must give the same deltas and result.

use crate::error;
use crate::response::{self, Block, Reply};
use crate::settings::Prices;
use crate::stream;
use crate::thinking::{self, Thinking};
use reson_sdk::fuzzing::{
    assemble, assert_reads_agree, headers_and_body, pieced_from, small_number, splits,
};
use reson_sdk::provider::{ChatResponse, ContentPart, Delta, ProviderError};

/// The model the request asked for.
const MODEL: &str = "requested-model";
/// The name of the API key's secret.
const SECRET: &str = "ANTHROPIC_API_KEY";

/// Runs one fuzz input; panics when a property fails.
pub fn run(data: &[u8]) {
    let [mode, seed, payload @ ..] = data else { return };
    match mode % 3 {
        0 => streamed(*seed, payload),
        1 => whole(*seed, payload),
        _ => status(payload),
    }
}

/// A streamed answer: the same outcome however the body is cut, and a
/// success only with `message_stop` and deltas that add up to the reply.
fn streamed(seed: u8, payload: &[u8]) {
    let (result, deltas) = read(&[payload]);
    let outcome = format!("{result:?} {deltas:?}");
    assert_reads_agree(splits(seed, payload), &outcome, |reads| {
        let (again, again_deltas) = read(reads);
        format!("{again:?} {again_deltas:?}")
    });
    let Ok(reply) = result else { return };
    if !payload.contains(&b'\\') {
        // Without it the stream may have been cut in transit.
        assert!(payload.windows(12).any(|w| w == b"message_stop"), "accepted without message_stop");
    }
    let (text, reasoning, calls) = assemble(&deltas);
    let blocks_text: String = reply
        .blocks
        .iter()
        .filter_map(|block| match block {
            Block::Text(text) => Some(text.as_str()),
            _ => None,
        })
        .collect();
    let blocks_reasoning: String = reply
        .blocks
        .iter()
        .filter_map(|block| match block {
            Block::Thinking(Thinking::Signed { thinking, .. }) => Some(thinking.as_str()),
            _ => None,
        })
        .collect();
    if !interleaved(payload) {
        assert_eq!(text, blocks_text, "the text deltas");
        assert_eq!(reasoning, blocks_reasoning, "the reasoning deltas");
    }
    let block_calls: Vec<_> = reply
        .blocks
        .iter()
        .filter_map(|block| match block {
            Block::ToolUse { id, name, arguments } => {
                Some((id.clone(), name.clone(), arguments.clone()))
            }
            _ => None,
        })
        .collect();
    // A call whose input never came is sent on as `{}`.
    let calls: Vec<_> = calls
        .into_iter()
        .map(|(id, name, args)| (id, name, if args.is_empty() { "{}".to_owned() } else { args }))
        .collect();
    assert_eq!(calls, block_calls, "the tool-call deltas");
    check_reply(reply, payload);
}

/// Whether a delta in the stream goes to another block than the last one
/// started: text and reasoning deltas carry no block index, so theirs then
/// interleave and need not add up to the blocks' in order.
fn interleaved(payload: &[u8]) -> bool {
    let mut parser = stream::SseParser::default();
    let mut events = Vec::new();
    let fed = parser.feed(payload, &mut events);
    if fed.is_ok() {
        events.extend(parser.finish().map(|(last, _)| last).unwrap_or_default());
    }
    let mut last = None;
    for event in events {
        let Ok(json) = serde_json::from_str::<serde_json::Value>(&event.data) else { continue };
        let index = json.get("index").and_then(serde_json::Value::as_u64);
        match json.get("type").and_then(serde_json::Value::as_str) {
            Some("content_block_start") => last = index,
            Some("content_block_delta") if index != last => return true,
            _ => {}
        }
    }
    false
}

/// A whole answer: no strict prefix of an accepted body is accepted.
fn whole(seed: u8, payload: &[u8]) {
    let Ok(reply) = response::parse(payload) else { return };
    // An accepted body is a JSON object or array, which ends with its
    // closing bracket: cut anywhere before, it must fail.
    let end = payload.trim_ascii_end().len();
    let prefix = &payload[..usize::from(seed) % end];
    assert!(
        response::parse(prefix).is_err(),
        "the prefix {:?} was accepted",
        String::from_utf8_lossy(prefix)
    );
    check_reply(reply, payload);
}

/// What every reply must satisfy: its text and reasoning are made of pieces
/// of the body when the body has no escapes that could spell other
/// characters; the response keeps every block, its thinking for the next
/// turn, and a cost that is a real amount.
fn check_reply(reply: Reply, payload: &[u8]) {
    let raw = !payload.contains(&b'\\');
    let mut thinking_blocks = 0;
    let mut texts = 0;
    for block in &reply.blocks {
        let made = match block {
            Block::Text(text) => {
                texts += usize::from(!text.is_empty());
                text
            }
            Block::Thinking(Thinking::Signed { thinking, .. }) => {
                thinking_blocks += 1;
                thinking
            }
            Block::Thinking(Thinking::Redacted { .. }) => {
                thinking_blocks += 1;
                continue;
            }
            Block::ToolUse { .. } => continue,
        };
        assert!(!raw || pieced_from(made.as_bytes(), payload), "{made:?} is not from the input");
    }
    let calls = reply.blocks.iter().filter(|b| matches!(b, Block::ToolUse { .. })).count();
    let prices =
        Prices { input: Some(3.0), output: Some(15.0), cache_read: Some(0.3), cache_write: None };
    let response: ChatResponse = response::into_response(reply, MODEL, &prices);
    let message = &response.message;
    assert!(
        message.content.iter().all(|part| matches!(part, ContentPart::Text(t) if !t.is_empty()))
    );
    assert_eq!(message.content.len(), texts);
    assert_eq!(message.tool_calls.len(), calls);
    let kept = thinking::api_blocks(message.provider_data.as_deref());
    assert_eq!(kept.len(), thinking_blocks, "thinking kept for the next turn: {kept:?}");
    let cost = response.cost.expect("prices are set");
    assert!(cost.is_finite() && cost >= 0.0, "cost {cost}");
}

/// An error answer: its case follows from the status.
fn status(payload: &[u8]) {
    let [high, low, rest @ ..] = payload else { return };
    let status = u16::from_be_bytes([*high, *low]);
    let (headers, body) = headers_and_body(rest);
    let err = error::from_status(status, &headers, body, SECRET);
    use ProviderError::{Auth, BadRequest, InvalidResponse, RateLimited, Server, Timeout};
    let expected = match status {
        401 | 403 => matches!(err, Auth(_)),
        429 => matches!(err, RateLimited(_)),
        408 | 504 => matches!(err, Timeout(_)),
        400 | 404 | 422 => matches!(err, BadRequest(_)),
        500..=599 => matches!(&err, Server(server) if server.status == status),
        // Other client errors say what they are in the body's error type.
        400..=499 => match &err {
            BadRequest(_) | Auth(_) | RateLimited(_) | Timeout(_) => true,
            Server(server) => [500, 529].contains(&server.status),
            _ => false,
        },
        _ => matches!(err, InvalidResponse(_)),
    };
    assert!(expected, "status {status} gave {err:?}");
    if let ProviderError::RateLimited(limit) = &err
        && status == 429
    {
        let retry_after = headers.iter().find(|(name, _)| name.eq_ignore_ascii_case("retry-after"));
        if let Some(seconds) = retry_after.and_then(|(_, value)| small_number(value)) {
            assert_eq!(limit.retry_after_ms, Some(seconds * 1000), "{headers:?}");
        }
    }
}

/// Reads a stream arriving as `reads`.
fn read(reads: &[&[u8]]) -> (Result<Reply, ProviderError>, Vec<Delta>) {
    let mut reads = reads.iter().map(|read| read.to_vec());
    let mut deltas = Vec::new();
    let result = stream::read(|| Ok(reads.next()), &mut |delta| deltas.push(delta));
    (result, deltas)
}
