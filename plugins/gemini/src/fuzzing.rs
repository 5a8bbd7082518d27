//! The entry point of the fuzz target `gemini` (tests/fuzz): the plugin's
//! real parsers driven with arbitrary bytes, panicking when a property that
//! must hold for every input fails.
//!
//! An input is `[mode, seed, payload @ ..]`, `mode % 3` saying what the
//! payload is:
//!
//! - 0: the body of a streamed 200 answer (server-sent events);
//! - 1: the body of a whole 200 answer, parsed as such and as the
//!   `application/json` answer to a streamed request;
//! - 2: an error answer: two bytes of status (big-endian), then header
//!   lines (`name: value`) up to the first blank line, then the body.
//!
//! Bodies are read whole and in the pieces `seed` cuts them into (see
//! [`splits`]); every way of reading must give the same deltas and result.

use crate::call;
use crate::error;
use crate::response;
use crate::settings::Settings;
use crate::signatures::Signatures;
use crate::sse::SseParser;
use reson_sdk::fuzzing::{self, assert_reads_agree, headers_and_body, small_number, splits};
use reson_sdk::provider::{ChatResponse, Delta, ProviderError};

/// The model the request asked for.
const MODEL: &str = "requested-model";

/// Runs one fuzz input; panics when a property fails.
pub fn run(data: &[u8]) {
    let [mode, seed, payload @ ..] = data else { return };
    // Prices make every successful parse compute a cost too.
    let settings = Settings::load(|key| match key {
        "price_input_per_mtok" => Some("1.25".to_owned()),
        "price_output_per_mtok" => Some("10".to_owned()),
        "price_cache_read_per_mtok" => Some("0.31".to_owned()),
        _ => None,
    })
    .expect("the fuzzing settings are valid");
    match mode % 3 {
        0 => streamed(*seed, payload, &settings),
        1 => whole(*seed, payload, &settings),
        _ => status(*seed, payload, &settings),
    }
}

/// A streamed answer: the same outcome however the body is cut and when
/// its events come as one JSON array instead; a success only with the final
/// chunk's reason and deltas that add up to it.
fn streamed(seed: u8, payload: &[u8], settings: &Settings) {
    let (result, deltas) = receive(200, &[], &[payload], settings);
    let outcome = format!("{result:?} {deltas:?}");
    assert_reads_agree(splits(seed, payload), &outcome, |reads| {
        let (again, again_deltas) = receive(200, &[], reads, settings);
        format!("{again:?} {again_deltas:?}")
    });
    let Ok(response) = result else { return };
    if !payload.contains(&b'\\') {
        // Without it the stream may have been cut in transit.
        let said = |what: &[u8]| payload.windows(what.len()).any(|w| w == what);
        assert!(said(b"finishReason") || said(b"blockReason"), "accepted without an end");
    }
    check_response(&response, &deltas, payload);
    // `streamGenerateContent` without `alt=sse` sends the same chunks as
    // one JSON array.
    let mut parser = SseParser::default();
    let mut events = Vec::new();
    parser.push(payload, &mut events).expect("an accepted stream parses");
    let array = format!("[{}]", events.join(","));
    if serde_json::from_str::<Vec<serde_json::Value>>(&array).is_ok() {
        let json = [("content-type".to_owned(), "application/json".to_owned())];
        let (again, again_deltas) = receive(200, &json, &[array.as_bytes()], settings);
        assert_eq!(format!("{again:?} {again_deltas:?}"), outcome, "as the array {array}");
    }
}

/// A whole answer: parsed directly or as the answer to a streamed request,
/// the same result; and no strict prefix of an accepted body is accepted.
fn whole(seed: u8, payload: &[u8], settings: &Settings) {
    let result = call::whole(200, &[], payload, MODEL, settings);
    // A JSON array is the stream's chunks, read by other rules.
    let array = serde_json::from_slice::<Vec<serde_json::Value>>(payload).is_ok();
    let json = [("Content-Type".to_owned(), "application/json; charset=UTF-8".to_owned())];
    let (streamed, deltas) = receive(200, &json, &[payload], settings);
    let outcome = format!("{streamed:?} {deltas:?}");
    assert_reads_agree(splits(seed, payload), &outcome, |reads| {
        let (again, again_deltas) = receive(200, &json, reads, settings);
        format!("{again:?} {again_deltas:?}")
    });
    if let Ok(response) = &streamed {
        check_response(response, &deltas, payload);
    }
    if array {
        return;
    }
    assert_eq!(format!("{streamed:?}"), format!("{result:?}"));
    if result.is_ok() {
        // An accepted body is a JSON object, which ends with its closing
        // brace: cut anywhere before, it must fail.
        let end = payload.trim_ascii_end().len();
        let prefix = &payload[..usize::from(seed) % end];
        assert!(
            response::parse(prefix, MODEL, settings.prices.as_ref()).is_err(),
            "the prefix {:?} was accepted",
            String::from_utf8_lossy(prefix)
        );
    }
}

/// An error answer: its case follows from the status, and reading the body
/// whole or in pieces gives the same error.
fn status(seed: u8, payload: &[u8], settings: &Settings) {
    let [high, low, rest @ ..] = payload else { return };
    let status = u16::from_be_bytes([*high, *low]);
    let (headers, body) = headers_and_body(rest);
    let err = error::from_status(status, &headers, body);
    use ProviderError::{Auth, BadRequest, InvalidResponse, RateLimited, Server, Timeout};
    let expected = match status {
        401 | 403 => matches!(err, Auth(_)),
        // Gemini reports a wrong key as a 400 whose detail says so.
        400 => matches!(err, BadRequest(_) | Auth(_)),
        429 => matches!(err, RateLimited(_)),
        408 | 504 => matches!(err, Timeout(_)),
        500..=599 => matches!(&err, Server(server) if server.status == status),
        401..=499 => matches!(err, BadRequest(_)),
        _ => matches!(err, InvalidResponse(_)),
    };
    assert!(expected, "status {status} gave {err:?}");
    if let RateLimited(limit) = &err {
        let retry_after = headers.iter().find(|(name, _)| name.eq_ignore_ascii_case("retry-after"));
        if let Some(seconds) = retry_after.and_then(|(_, value)| small_number(value)) {
            assert_eq!(limit.retry_after_ms, Some(seconds * 1000), "{headers:?}");
        }
    }
    if (200..300).contains(&status) {
        return;
    }
    let expected = format!("{:?} []", Err::<ChatResponse, _>(err));
    let whole = call::whole(status, &headers, body, MODEL, settings);
    assert_eq!(format!("{whole:?} []"), expected);
    assert_reads_agree(std::iter::once(vec![body]).chain(splits(seed, body)), &expected, |reads| {
        let (result, deltas) = receive(status, &headers, reads, settings);
        format!("{result:?} {deltas:?}")
    });
}
/// What a successful parse must satisfy: the SDK's checks, and the thought
/// signatures survive a round trip through provider data.
fn check_response(response: &ChatResponse, deltas: &[Delta], payload: &[u8]) {
    fuzzing::check_response(response, deltas, payload);
    let data = response.message.provider_data.as_deref();
    assert_eq!(Signatures::from_provider_data(data).to_provider_data().as_deref(), data);
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
    let result = call::streamed(
        status,
        headers,
        || Ok(reads.next()),
        &mut |delta| deltas.push(delta),
        MODEL,
        settings,
    );
    (result, deltas)
}
