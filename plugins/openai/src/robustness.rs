//! Property-style checks of the parsers: any bytes, and every truncation of
//! a real answer, give an error — never a panic, and never a made-up
//! answer.

use crate::errors;
use crate::response::tests::{PLAIN, TOOL_CALLS, settings};
use crate::response::{self};
use crate::sse;
use crate::stream::tests::{TEXT_STREAM, TOOL_STREAM, run};
use reson_sdk::provider::ProviderError;
use std::panic::{AssertUnwindSafe, catch_unwind};

/// How many pseudo-random inputs each check gets.
const CASES: usize = 2000;

/// Marsaglia's xorshift64: deterministic, so a failure reproduces.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// A number in `0..n`.
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Runs `f`, failing the test with the input that made it panic.
fn no_panic<T>(what: &str, input: &[u8], f: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(f))
        .unwrap_or_else(|_| panic!("{what} panicked on {:?}", String::from_utf8_lossy(input)))
}

/// Streams `bytes` in reads cut at `cuts` pseudo-random places.
fn stream_in_pieces(
    rng: &mut XorShift,
    bytes: &[u8],
) -> Result<reson_sdk::provider::ChatResponse, ProviderError> {
    let mut cuts: Vec<usize> = (0..rng.below(4)).map(|_| rng.below(bytes.len() + 1)).collect();
    cuts.sort_unstable();
    let mut pieces = Vec::new();
    let mut start = 0;
    for cut in cuts.into_iter().chain([bytes.len()]) {
        pieces.push(&bytes[start..cut]);
        start = cut;
    }
    run(&[("content-type", "text/event-stream")], &pieces, &settings()).0
}

/// Pieces of the SSE and JSON syntax, so that inputs reach past the first
/// check of each parser. `[DONE]` is left out: with it, a stream of these
/// could be a valid (empty) answer.
const SOUP: &[&str] = &[
    "data: ",
    "data:",
    "\n",
    "\r\n",
    "\r",
    "\n\n",
    ": ping",
    "event: x",
    "{",
    "}",
    "[",
    "]",
    "\"",
    ":",
    ",",
    "null",
    "0",
    "-1",
    "1e999",
    "\"choices\"",
    "\"delta\"",
    "\"message\"",
    "\"content\"",
    "\"tool_calls\"",
    "\"index\"",
    "\"id\"",
    "\"function\"",
    "\"name\"",
    "\"arguments\"",
    "\"usage\"",
    "\"error\"",
    "\"finish_reason\"",
    "\"stop\"",
    "\"reasoning\"",
    "\\u00e9",
    "é",
    "🌍",
    "\u{0}",
    "\\",
    "\\ud800",
];

#[test]
fn random_bytes_are_errors_and_never_panic() {
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
    let s = settings();
    for case in 0..CASES {
        let bytes: Vec<u8> = if case % 2 == 0 {
            (0..rng.below(512)).map(|_| rng.next() as u8).collect()
        } else {
            (0..rng.below(64)).flat_map(|_| SOUP[rng.below(SOUP.len())].bytes()).collect()
        };
        let streamed = no_panic("the stream", &bytes, || stream_in_pieces(&mut rng, &bytes));
        assert!(
            streamed.is_err(),
            "a stream of {:?} was accepted",
            String::from_utf8_lossy(&bytes)
        );
        let whole = no_panic("parse", &bytes, || response::parse(200, &bytes, "m", &s));
        if case % 2 == 0 {
            assert!(whole.is_err(), "{:?} was accepted", String::from_utf8_lossy(&bytes));
        }
        let status = [400, 401, 404, 408, 422, 429, 500, 503][rng.below(8)];
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let headers =
            [("retry-after".to_owned(), text.clone()), ("retry-after-ms".to_owned(), text)];
        no_panic("from_status", &bytes, || errors::from_status(status, &headers, &bytes, &s));
        no_panic("the decoder", &bytes, || {
            let mut decoder = sse::Decoder::default();
            let mut events = Vec::new();
            decoder.feed(&bytes, &mut events);
            decoder.finish(&mut events);
        });
    }
}

#[test]
fn every_truncation_of_a_whole_answer_is_an_error() {
    for fixture in [PLAIN, TOOL_CALLS] {
        let bytes = fixture.as_bytes();
        assert!(response::parse(200, bytes, "m", &settings()).is_ok());
        for end in 0..bytes.len() {
            let cut = &bytes[..end];
            let result = no_panic("parse", cut, || response::parse(200, cut, "m", &settings()));
            assert!(
                matches!(result, Err(ProviderError::InvalidResponse(_))),
                "cut at {end}: {result:?}"
            );
        }
    }
}

#[test]
fn every_truncation_of_a_stream_before_done_is_an_error() {
    let mut rng = XorShift(0x2545_F491_4F6C_DD1D);
    for fixture in [TEXT_STREAM, TOOL_STREAM] {
        let bytes = fixture.as_bytes();
        // A last event needs no blank line after it, so the stream is whole
        // once `[DONE]` is.
        let complete = fixture.find("[DONE]").unwrap() + "[DONE]".len();
        for end in 0..=bytes.len() {
            let cut = &bytes[..end];
            let result = no_panic("the stream", cut, || stream_in_pieces(&mut rng, cut));
            if end < complete {
                // Cut in transit, whatever the point: retried as a network error.
                assert!(
                    matches!(result, Err(ProviderError::Network(_))),
                    "cut at {end}: {result:?}"
                );
            } else {
                assert!(result.is_ok(), "cut at {end}: {result:?}");
            }
        }
    }
}
