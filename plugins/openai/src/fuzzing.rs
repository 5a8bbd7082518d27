//! The entry point of the fuzz target `openai` (tests/fuzz): the plugin's
//! real parsers driven with arbitrary bytes, panicking when a property that
//! must hold for every input fails.
//!
//! An input is `[mode, seed, payload @ ..]`, `mode % 3` saying what the
//! payload is:
//!
//! - 0: the body of a streamed 200 answer (`text/event-stream`);
//! - 1: the body of a whole 200 answer, parsed as such and as the
//!   `application/json` answer to a streamed request;
//! - 2: an error answer: two bytes of status (big-endian), then header
//!   lines (`name: value`) up to the first blank line, then the body.
//!
//! Bodies are read whole and in the pieces `seed` cuts them into (see
//! [`splits`]); every way of reading must give the same deltas and result.

use crate::errors;
use crate::response;
use crate::settings::Settings;
use crate::stream;
use reson_sdk::fuzzing::{self, assert_reads_agree, headers_and_body, sizes, small_number, splits};
use reson_sdk::provider::{ChatResponse, Delta, ProviderError};

/// The model the request asked for.
const MODEL: &str = "requested-model";

/// Runs one fuzz input; panics when a property fails.
pub fn run(data: &[u8]) {
    let [mode, seed, payload @ ..] = data else { return };
    // Prices make every successful parse compute a cost too.
    let prices = [
        ("price_input_per_mtok", "2.5"),
        ("price_output_per_mtok", "10"),
        ("price_cache_read_per_mtok", "1.25"),
        ("price_cache_write_per_mtok", "3"),
    ];
    let settings = Settings::from_config(|key| {
        prices.iter().find(|(name, _)| *name == key).map(|(_, value)| (*value).to_owned())
    })
    .expect("the fuzzing settings are valid");
    match mode % 3 {
        0 => streamed(*seed, payload, &settings),
        1 => whole(*seed, payload, &settings),
        _ => error(*seed, payload, &settings),
    }
}

/// A streamed answer: the same outcome however the body is cut, and a
/// success only with the terminal `[DONE]` and deltas that add up to it.
fn streamed(seed: u8, payload: &[u8], settings: &Settings) {
    let headers = [("content-type".to_owned(), "text/event-stream".to_owned())];
    let (result, deltas) = receive(200, &headers, &[payload], settings);
    let outcome = format!("{result:?} {deltas:?}");
    assert_reads_agree(splits(seed, payload), &outcome, |reads| {
        let (again, again_deltas) = receive(200, &headers, reads, settings);
        format!("{again:?} {again_deltas:?}")
    });
    if let Ok(response) = result {
        // Without it the stream may have been cut in transit.
        assert!(payload.windows(6).any(|w| w == b"[DONE]"), "accepted without [DONE]");
        check_response(&response, &deltas, payload);
    }
}

/// A whole answer: parsed directly or replayed to a streamed request, the
/// same result; and no strict prefix of an accepted body is accepted.
fn whole(seed: u8, payload: &[u8], settings: &Settings) {
    let result = response::parse(200, payload, MODEL, settings);
    let headers = [("Content-Type".to_owned(), "application/json; charset=utf-8".to_owned())];
    let reads = splits(seed, payload);
    for reads in std::iter::once(vec![payload]).chain(reads) {
        let (streamed, deltas) = receive(200, &headers, &reads, settings);
        assert_eq!(
            format!("{streamed:?}"),
            format!("{result:?}"),
            "read in pieces of {:?} bytes",
            sizes(&reads)
        );
        match &streamed {
            Ok(response) => check_response(response, &deltas, payload),
            Err(_) => assert!(deltas.is_empty(), "a failed parse emitted {deltas:?}"),
        }
    }
    if result.is_ok() {
        // An accepted body is a JSON object or array, which ends with its
        // closing bracket: cut anywhere before, it must fail.
        let end = payload.trim_ascii_end().len();
        let cut = usize::from(seed) % end;
        let prefix = &payload[..cut];
        assert!(
            response::parse(200, prefix, MODEL, settings).is_err(),
            "the prefix {:?} was accepted",
            String::from_utf8_lossy(prefix)
        );
    }
}

/// An error answer: its case follows from the status, and reading the body
/// of a streamed request in any pieces gives the same error.
fn error(seed: u8, payload: &[u8], settings: &Settings) {
    let [high, low, rest @ ..] = payload else { return };
    let status = u16::from_be_bytes([*high, *low]);
    let (headers, body) = headers_and_body(rest);
    let err = errors::from_status(status, &headers, body, settings);
    use ProviderError::{Auth, BadRequest, InvalidResponse, RateLimited, Server, Timeout};
    let expected = match status {
        401 | 403 => matches!(err, Auth(_)),
        // A spent quota is an account problem, reported as 429.
        429 => matches!(err, RateLimited(_) | Auth(_)),
        408 | 504 => matches!(err, Timeout(_)),
        500..=599 => matches!(&err, Server(server) if server.status == status),
        300..=499 => matches!(err, BadRequest(_)),
        _ => matches!(err, InvalidResponse(_)),
    };
    assert!(expected, "status {status} gave {err:?}");
    if let ProviderError::RateLimited(limit) = &err {
        let header = |name: &str| errors::header(&headers, name);
        let seconds = header("retry-after").and_then(small_number);
        if header("retry-after-ms").is_none()
            && let Some(seconds) = seconds
        {
            assert_eq!(limit.retry_after_ms, Some(seconds * 1000), "{headers:?}");
        }
    }
    if (200..300).contains(&status) {
        return;
    }
    let expected = format!("{:?} []", Err::<ChatResponse, _>(err));
    assert_reads_agree(std::iter::once(vec![body]).chain(splits(seed, body)), &expected, |reads| {
        let (result, deltas) = receive(status, &headers, reads, settings);
        format!("{result:?} {deltas:?}")
    });
}
/// What a successful parse must satisfy: the SDK's checks, and every
/// tool call has an id and a name.
fn check_response(response: &ChatResponse, deltas: &[Delta], payload: &[u8]) {
    fuzzing::check_response(response, deltas, payload);
    let calls = &response.message.tool_calls;
    assert!(calls.iter().all(|call| !call.name.is_empty() && !call.id.is_empty()));
}

/// Streams `reads` as successive reads of a response.
fn receive(
    status: u16,
    headers: &[(String, String)],
    reads: &[&[u8]],
    settings: &Settings,
) -> (Result<ChatResponse, ProviderError>, Vec<Delta>) {
    let mut reads = reads.iter().map(|read| read.to_vec());
    let mut deltas = Vec::new();
    let result = stream::receive(
        status,
        headers,
        || Ok(reads.next()),
        |delta| deltas.push(delta),
        MODEL,
        settings,
    );
    (result, deltas)
}
