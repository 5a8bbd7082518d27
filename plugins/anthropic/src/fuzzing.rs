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
    for reads in splits(seed, payload) {
        let (again, again_deltas) = read(&reads);
        assert_eq!(
            format!("{again:?} {again_deltas:?}"),
            outcome,
            "read in pieces of {:?} bytes",
            sizes(&reads)
        );
    }
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

/// `text` as a number of at most six digits.
fn small_number(text: &str) -> Option<u64> {
    let text = text.trim();
    let digits = !text.is_empty() && text.len() <= 6 && text.bytes().all(|b| b.is_ascii_digit());
    digits.then(|| text.parse().ok()).flatten()
}

/// Splits `rest` at its first blank line into header lines and the body;
/// without a blank line, it is all body.
fn headers_and_body(rest: &[u8]) -> (Vec<(String, String)>, &[u8]) {
    let Some(blank) = rest.windows(2).position(|w| w == b"\n\n") else {
        return (Vec::new(), rest);
    };
    let headers = String::from_utf8_lossy(&rest[..blank])
        .lines()
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.to_owned(), value.to_owned()))
        .collect();
    (headers, &rest[blank + 2..])
}

/// The text, the reasoning and the tool calls (id, name, arguments) that
/// `deltas` add up to, checking that each call is numbered in order and
/// gets its id first and its id and name once.
fn assemble(deltas: &[Delta]) -> (String, String, Vec<(String, String, String)>) {
    let mut text = String::new();
    let mut reasoning = String::new();
    let mut calls: Vec<(String, Option<String>, String)> = Vec::new();
    for delta in deltas {
        match delta {
            Delta::Text(more) => text.push_str(more),
            Delta::Reasoning(more) => reasoning.push_str(more),
            Delta::ToolCall(fragment) => {
                let index = fragment.index as usize;
                if index == calls.len() {
                    let id = fragment.id.clone().expect("a call's first delta has its id");
                    calls.push((id, None, String::new()));
                } else {
                    assert!(index < calls.len(), "call {index} skips a number");
                    assert!(fragment.id.is_none(), "call {index} got a second id");
                }
                let call = &mut calls[index];
                if let Some(name) = &fragment.name {
                    assert!(call.1.is_none(), "call {index} got a second name");
                    call.1 = Some(name.clone());
                }
                call.2.push_str(&fragment.arguments_fragment);
            }
        }
    }
    let calls = calls.into_iter().map(|(id, name, args)| (id, name.unwrap_or_default(), args));
    (text, reasoning, calls.collect())
}

/// Reads a stream arriving as `reads`.
fn read(reads: &[&[u8]]) -> (Result<Reply, ProviderError>, Vec<Delta>) {
    let mut reads = reads.iter().map(|read| read.to_vec());
    let mut deltas = Vec::new();
    let result = stream::read(|| Ok(reads.next()), &mut |delta| deltas.push(delta));
    (result, deltas)
}

/// The ways of reading `payload` compared with reading it whole: reads of
/// `seed % 32 + 1` bytes, and a cut after every byte equal to `seed`
/// followed by an empty read, which lets the fuzzer aim at a `\r`, a `\n`
/// or the inside of a UTF-8 character.
fn splits(seed: u8, payload: &[u8]) -> [Vec<&[u8]>; 2] {
    let fixed = payload.chunks(usize::from(seed % 32) + 1).collect();
    let mut at_byte = Vec::new();
    let mut start = 0;
    for (at, _) in payload.iter().enumerate().filter(|(_, byte)| **byte == seed) {
        at_byte.extend([&payload[start..=at], &[][..]]);
        start = at + 1;
    }
    at_byte.push(&payload[start..]);
    [fixed, at_byte]
}

/// Whether `made` is a concatenation of pieces of `input`. Taking the
/// longest piece at each step is enough, because any part of a piece is a
/// piece too.
fn pieced_from(made: &[u8], input: &[u8]) -> bool {
    let mut at = 0;
    while at < made.len() {
        let mut starts: Vec<usize> = (0..input.len()).filter(|&i| input[i] == made[at]).collect();
        if starts.is_empty() {
            return false;
        }
        let mut len = 1;
        while at + len < made.len() {
            let next = made[at + len];
            let longer: Vec<usize> =
                starts.iter().copied().filter(|&i| input.get(i + len) == Some(&next)).collect();
            if longer.is_empty() {
                break;
            }
            starts = longer;
            len += 1;
        }
        at += len;
    }
    true
}

/// The sizes of `reads`, to say how a failing input was read.
fn sizes(reads: &[&[u8]]) -> Vec<usize> {
    reads.iter().map(|read| read.len()).collect()
}
