//! Helpers for fuzzing a provider's parsers natively (feature `fuzzing`):
//! the same body cut into reads in several ways, and what a parsed answer
//! may be checked against. The bundled providers' fuzz targets
//! (tests/fuzz) use them.

use crate::provider::{ChatResponse, ContentPart, Delta};

/// `text` as a number of at most six digits.
pub fn small_number(text: &str) -> Option<u64> {
    let text = text.trim();
    let digits = !text.is_empty() && text.len() <= 6 && text.bytes().all(|b| b.is_ascii_digit());
    digits.then(|| text.parse().ok()).flatten()
}

/// Splits `rest` at its first blank line into header lines and the body;
/// without a blank line, it is all body.
pub fn headers_and_body(rest: &[u8]) -> (Vec<(String, String)>, &[u8]) {
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
pub fn assemble(deltas: &[Delta]) -> (String, String, Vec<(String, String, String)>) {
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

/// The ways of reading `payload` compared with reading it whole: reads of
/// `seed % 32 + 1` bytes, and a cut after every byte equal to `seed`
/// followed by an empty read, which lets the fuzzer aim at a `\r`, a `\n`
/// or the inside of a UTF-8 character.
pub fn splits(seed: u8, payload: &[u8]) -> [Vec<&[u8]>; 2] {
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
pub fn pieced_from(made: &[u8], input: &[u8]) -> bool {
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

/// Asserts that each way of reading in `ways` gives `expected` through
/// `outcome` (the result and deltas of reading that way, as one string),
/// saying how a failing way cut the body.
pub fn assert_reads_agree<'a>(
    ways: impl IntoIterator<Item = Vec<&'a [u8]>>,
    expected: &str,
    mut outcome: impl FnMut(&[&'a [u8]]) -> String,
) {
    for reads in ways {
        assert_eq!(outcome(&reads), expected, "read in pieces of {:?} bytes", sizes(&reads));
    }
}

/// The sizes of `reads`, to say how a failing input was read.
pub fn sizes(reads: &[&[u8]]) -> Vec<usize> {
    reads.iter().map(|read| read.len()).collect()
}

/// What any successful parse must satisfy: the deltas add up to the
/// message, the cost (prices set) is a real amount, and, when the body has
/// no escapes that could spell other characters, the text and reasoning
/// are made of pieces of it.
pub fn check_response(response: &ChatResponse, deltas: &[Delta], payload: &[u8]) {
    let message = &response.message;
    let text: String = message
        .content
        .iter()
        .map(|part| match part {
            ContentPart::Text(text) => text.as_str(),
            ContentPart::Image(_) => panic!("an answer with an image: {response:?}"),
        })
        .collect();
    let reasoning = message.reasoning.as_deref().unwrap_or_default();
    let (delta_text, delta_reasoning, calls) = assemble(deltas);
    assert_eq!(delta_text, text, "the text deltas");
    assert_eq!(delta_reasoning, reasoning, "the reasoning deltas");
    let expected: Vec<_> = message
        .tool_calls
        .iter()
        .map(|call| (call.id.clone(), call.name.clone(), call.arguments.clone()))
        .collect();
    assert_eq!(calls, expected, "the tool-call deltas");
    let cost = response.cost.expect("prices are set");
    assert!(cost.is_finite() && cost >= 0.0, "cost {cost}");
    if !payload.contains(&b'\\') {
        for made in [&text, reasoning] {
            assert!(pieced_from(made.as_bytes(), payload), "{made:?} is not from the input");
        }
    }
}
