//! What comes back from the host's HTTP calls, turned into the chat
//! response: a whole body, or a stream read in pieces, parsed as SSE and
//! emitted as deltas while the response is assembled.

use crate::error;
use crate::response::{self, Assembler, Received};
use crate::settings::Settings;
use crate::sse::SseParser;
use reson_sdk::host::http::HttpError;
use reson_sdk::provider::{ChatResponse, Delta, ProviderError};

/// The most bytes of an error response's body read from a stream: its
/// status decides the error, the body only adds the message.
const MAX_ERROR_BODY: usize = 64 * 1024;

/// The answer in a whole response (`generateContent`).
pub fn whole(
    status: u16,
    headers: &[(String, String)],
    body: &[u8],
    model: &str,
    settings: &Settings,
) -> Result<ChatResponse, ProviderError> {
    if !(200..300).contains(&status) {
        return Err(error::from_status(status, headers, body));
    }
    response::parse(body, model, settings.prices.as_ref())
}

/// The answer in a streamed response (`streamGenerateContent?alt=sse`),
/// whose body comes from `read` (`None` at the end); each new piece goes to
/// `emit` as soon as its event is complete.
pub fn streamed(
    status: u16,
    headers: &[(String, String)],
    mut read: impl FnMut() -> Result<Option<Vec<u8>>, HttpError>,
    emit: &mut dyn FnMut(Delta),
    model: &str,
    settings: &Settings,
) -> Result<ChatResponse, ProviderError> {
    if !(200..300).contains(&status) {
        let mut body = Vec::new();
        // A read failing here loses only the message, not the error.
        while body.len() < MAX_ERROR_BODY {
            match read() {
                Ok(Some(bytes)) => body.extend(bytes),
                Ok(None) | Err(_) => break,
            }
        }
        return Err(error::from_status(status, headers, &body));
    }
    let json = headers.iter().any(|(name, value)| {
        name.eq_ignore_ascii_case("content-type")
            && value.trim_start().to_ascii_lowercase().starts_with("application/json")
    });
    if json {
        // A server that ignores `alt=sse` answers with one JSON body, whole:
        // not a stream cut short.
        let mut body = Vec::new();
        while let Some(bytes) = read().map_err(|e| error::from_http(e, &settings.secret))? {
            body.extend(bytes);
        }
        return json_stream(&body, emit, model, settings);
    }
    let mut sse = SseParser::default();
    let mut assembler = Assembler::new(model);
    while let Some(bytes) = read().map_err(|e| error::from_http(e, &settings.secret))? {
        let mut events = Vec::new();
        // The events before a line that is not UTF-8 come first: they may
        // carry an error of their own, and their deltas go out regardless.
        let pushed = sse.push(&bytes, &mut events);
        for event in events {
            assembler.chunk(event.as_bytes(), emit)?;
        }
        pushed?;
    }
    // Gemini sends no end marker: the stream ends at EOF, after the chunk
    // with the finish reason.
    sse.finish()?;
    assembler.finish(Received::Stream, settings.prices.as_ref())
}

/// A streamed request answered with JSON: one response, or the array of
/// chunks `streamGenerateContent` sends without `alt=sse`.
fn json_stream(
    body: &[u8],
    emit: &mut dyn FnMut(Delta),
    model: &str,
    settings: &Settings,
) -> Result<ChatResponse, ProviderError> {
    let mut assembler = Assembler::new(model);
    let Ok(chunks) = serde_json::from_slice::<Vec<serde_json::Value>>(body) else {
        assembler.chunk(body, emit)?;
        return assembler.finish(Received::Whole, settings.prices.as_ref());
    };
    for chunk in chunks {
        assembler.chunk(chunk.to_string().as_bytes(), emit)?;
    }
    assembler.finish(Received::Stream, settings.prices.as_ref())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::response::tests::PLAIN;
    use crate::signatures::Signatures;
    use reson_sdk::provider::{ContentPart, FinishReason};

    /// A streamed answer as Gemini sends it: one JSON chunk per event,
    /// usage growing, the finish reason and final usage in the last.
    const TEXT_STREAM: &str = concat!(
        "data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"The\"}],\"role\": \"model\"},",
        "\"index\": 0}],\"usageMetadata\": {\"promptTokenCount\": 9,\"totalTokenCount\": 9,",
        "\"promptTokensDetails\": [{\"modality\": \"TEXT\",\"tokenCount\": 9}]},",
        "\"modelVersion\": \"gemini-2.5-flash\",\"responseId\": \"2EMfaZ3CNNOtkdUP2ZHXqA0\"}\r\n\r\n",
        "data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \" capital of France is Paris, ",
        "known for the Eiffel Tower\"}],\"role\": \"model\"},\"index\": 0}],\"usageMetadata\": ",
        "{\"promptTokenCount\": 9,\"totalTokenCount\": 9,\"promptTokensDetails\": [{\"modality\": ",
        "\"TEXT\",\"tokenCount\": 9}]},\"modelVersion\": \"gemini-2.5-flash\",",
        "\"responseId\": \"2EMfaZ3CNNOtkdUP2ZHXqA0\"}\r\n\r\n",
        "data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \" and café culture ☕.\"}],",
        "\"role\": \"model\"},\"finishReason\": \"STOP\",\"index\": 0}],\"usageMetadata\": ",
        "{\"promptTokenCount\": 9,\"candidatesTokenCount\": 18,\"totalTokenCount\": 52,",
        "\"promptTokensDetails\": [{\"modality\": \"TEXT\",\"tokenCount\": 9}],",
        "\"thoughtsTokenCount\": 25},\"modelVersion\": \"gemini-2.5-flash\",",
        "\"responseId\": \"2EMfaZ3CNNOtkdUP2ZHXqA0\"}\r\n\r\n",
    );

    /// Thought summary, text, then tool calls in separate chunks (a
    /// Gemini 3 model with `includeThoughts`).
    const TOOL_STREAM: &str = concat!(
        "data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"**Planning** I need the ",
        "weather.\",\"thought\": true}],\"role\": \"model\"},\"index\": 0}],\"usageMetadata\": ",
        "{\"promptTokenCount\": 310,\"totalTokenCount\": 310},\"modelVersion\": ",
        "\"gemini-3-pro-preview\",\"responseId\": \"Nk4faf3wEd\"}\r\n\r\n",
        "data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"Let me check.\"}],\"role\": ",
        "\"model\"},\"index\": 0}],\"usageMetadata\": {\"promptTokenCount\": 310,",
        "\"totalTokenCount\": 310},\"modelVersion\": \"gemini-3-pro-preview\",\"responseId\": ",
        "\"Nk4faf3wEd\"}\r\n\r\n",
        "data: {\"candidates\": [{\"content\": {\"parts\": [{\"functionCall\": {\"name\": ",
        "\"get_weather\",\"args\": {\"city\": \"Zürich\",\"days\": 3}},\"thoughtSignature\": ",
        "\"EpwCCpkCAdHtim8=\"}],\"role\": \"model\"},\"index\": 0}],\"usageMetadata\": ",
        "{\"promptTokenCount\": 310,\"totalTokenCount\": 310},\"modelVersion\": ",
        "\"gemini-3-pro-preview\",\"responseId\": \"Nk4faf3wEd\"}\r\n\r\n",
        "data: {\"candidates\": [{\"content\": {\"parts\": [{\"functionCall\": {\"name\": ",
        "\"get_time\",\"args\": {\"tz\": \"Europe/Zurich\"}}}],\"role\": \"model\"},",
        "\"finishReason\": \"STOP\",\"index\": 0}],\"usageMetadata\": {\"promptTokenCount\": 310,",
        "\"candidatesTokenCount\": 52,\"totalTokenCount\": 462,\"cachedContentTokenCount\": 256,",
        "\"thoughtsTokenCount\": 100},\"modelVersion\": \"gemini-3-pro-preview\",",
        "\"responseId\": \"Nk4faf3wEd\"}\r\n\r\n",
    );

    fn settings() -> Settings {
        Settings::load(|key| match key {
            "price_input_per_mtok" => Some("1.25".into()),
            "price_output_per_mtok" => Some("10".into()),
            _ => None,
        })
        .unwrap()
    }

    /// Runs a stream whose body arrives in `reads`; returns the result and
    /// the deltas emitted.
    fn stream(
        status: u16,
        reads: Vec<Vec<u8>>,
    ) -> (Result<ChatResponse, ProviderError>, Vec<Delta>) {
        let mut reads = reads.into_iter();
        let mut deltas = Vec::new();
        let result = streamed(
            status,
            &[],
            || Ok(reads.next()),
            &mut |delta| deltas.push(delta),
            "gemini-2.5-flash",
            &settings(),
        );
        (result, deltas)
    }

    fn in_reads(bytes: &[u8], size: usize) -> Vec<Vec<u8>> {
        bytes.chunks(size.max(1)).map(<[u8]>::to_vec).collect()
    }

    fn text_of(response: &ChatResponse) -> String {
        response
            .message
            .content
            .iter()
            .filter_map(|part| match part {
                ContentPart::Text(text) => Some(text.as_str()),
                ContentPart::Image(_) => None,
            })
            .collect()
    }

    /// Checks that the deltas add up to the response: the same text,
    /// reasoning and tool calls, ids and names on each call's first fragment.
    fn assert_deltas_match(deltas: &[Delta], response: &ChatResponse) {
        let mut text = String::new();
        let mut reasoning = String::new();
        let mut calls: Vec<(String, String, String)> = Vec::new();
        for delta in deltas {
            match delta {
                Delta::Text(t) => text.push_str(t),
                Delta::Reasoning(r) => reasoning.push_str(r),
                Delta::ToolCall(call) => {
                    let index = call.index as usize;
                    if index == calls.len() {
                        let id = call.id.clone().expect("id on the first fragment");
                        let name = call.name.clone().expect("name on the first fragment");
                        calls.push((id, name, String::new()));
                    }
                    calls[index].2.push_str(&call.arguments_fragment);
                }
            }
        }
        assert_eq!(text, text_of(response));
        assert_eq!(reasoning, response.message.reasoning.clone().unwrap_or_default());
        let expected: Vec<_> = response
            .message
            .tool_calls
            .iter()
            .map(|c| (c.id.clone(), c.name.clone(), c.arguments.clone()))
            .collect();
        assert_eq!(calls, expected);
    }

    #[test]
    fn streamed_text_is_emitted_chunk_by_chunk_with_usage_from_the_last() {
        let (result, deltas) = stream(200, in_reads(TEXT_STREAM.as_bytes(), 4096));
        let response = result.unwrap();
        let texts: Vec<_> = deltas
            .iter()
            .map(|d| match d {
                Delta::Text(t) => t.as_str(),
                other => panic!("unexpected {other:?}"),
            })
            .collect();
        assert_eq!(
            texts,
            [
                "The",
                " capital of France is Paris, known for the Eiffel Tower",
                " and café culture ☕."
            ]
        );
        assert_eq!(
            text_of(&response),
            "The capital of France is Paris, known for the Eiffel Tower and café culture ☕."
        );
        assert!(matches!(response.finish_reason, FinishReason::Stop));
        assert_eq!(response.usage.prompt_tokens, 9);
        assert_eq!(response.usage.completion_tokens, 43);
        assert_eq!(response.usage.reasoning_tokens, 25);
        assert_eq!(response.model, "gemini-2.5-flash");
        let expected = (9.0 * 1.25 + 43.0 * 10.0) / 1e6;
        assert!((response.cost.unwrap() - expected).abs() < 1e-12);
    }

    #[test]
    fn streamed_tool_calls_across_chunks_and_reads_keep_indices_ids_and_arguments() {
        let bytes = TOOL_STREAM.as_bytes();
        let (whole, _) = stream(200, vec![bytes.to_vec()]);
        let whole = whole.unwrap();
        assert_eq!(whole.message.reasoning.as_deref(), Some("**Planning** I need the weather."));
        assert_eq!(text_of(&whole), "Let me check.");
        let calls: Vec<_> = whole
            .message
            .tool_calls
            .iter()
            .map(|c| (c.id.as_str(), c.name.as_str(), c.arguments.as_str()))
            .collect();
        assert_eq!(
            calls,
            [
                ("call_0", "get_weather", r#"{"city":"Zürich","days":3}"#),
                ("call_1", "get_time", r#"{"tz":"Europe/Zurich"}"#)
            ]
        );
        assert!(matches!(whole.finish_reason, FinishReason::ToolCalls));
        assert_eq!(whole.usage.cache_read_tokens, 256);
        assert_eq!(whole.usage.completion_tokens, 152);
        let signatures = Signatures::from_provider_data(whole.message.provider_data.as_deref());
        assert_eq!(signatures.tool_calls, [Some("EpwCCpkCAdHtim8=".to_owned()), None]);
        // Reads of every size split events, JSON strings, `ü` and `\r\n`
        // anywhere; the deltas and the response stay the same.
        for size in 1..=bytes.len() / 3 {
            let (result, deltas) = stream(200, in_reads(bytes, size));
            let response = result.unwrap();
            assert_eq!(response.message.tool_calls.len(), 2, "reads of {size}");
            assert_eq!(response.message.provider_data, whole.message.provider_data);
            assert_deltas_match(&deltas, &response);
            assert_deltas_match(&deltas, &whole);
        }
    }

    #[test]
    fn a_stream_cut_off_is_a_network_error_and_says_what_was_missing() {
        let bytes = TEXT_STREAM.as_bytes();
        let last_event = TEXT_STREAM.rfind("data:").unwrap();
        // Mid-event: half of the last chunk's JSON.
        let (result, deltas) = stream(200, vec![bytes[..last_event + 200].to_vec()]);
        assert!(
            matches!(result, Err(ProviderError::Network(m)) if m.contains("middle of an event"))
        );
        // What was complete went out before the cut.
        assert_eq!(deltas.len(), 2);
        // Between events: the final chunk never came.
        let (result, _) = stream(200, vec![bytes[..last_event].to_vec()]);
        assert!(matches!(result, Err(ProviderError::Network(m)) if m.contains("no finishReason")));
        let (result, _) = stream(200, vec![]);
        assert!(matches!(result, Err(ProviderError::Network(m)) if m.contains("without any")));
        // A whole event that is not JSON stays an invalid response.
        let (result, _) = stream(200, vec![b"data: {\"candidates\": [\n\n".to_vec()]);
        assert!(
            matches!(result, Err(ProviderError::InvalidResponse(m)) if m.contains("not a valid"))
        );
    }

    #[test]
    fn a_line_that_is_not_utf8_fails_only_after_the_events_before_it() {
        // Found by fuzzing: the bad line used to fail the whole read it came
        // in, so the outcome depended on where the reads split the stream.
        let mut bytes = TEXT_STREAM.as_bytes().to_vec();
        bytes.extend_from_slice(b": \xff\r\n");
        let (result, deltas) = stream(200, vec![bytes]);
        assert!(matches!(result, Err(ProviderError::InvalidResponse(m)) if m.contains("UTF-8")));
        assert_eq!(deltas.len(), 3, "the text before the bad line still went out");
        let overloaded =
            b"data: {\"error\": {\"code\": 503, \"message\": \"overloaded\"}}\n\ndata: \xff\n\n";
        let (result, _) = stream(200, vec![overloaded.to_vec()]);
        assert!(matches!(result, Err(ProviderError::Server(s)) if s.status == 503));
    }

    #[test]
    fn a_json_answer_to_a_streamed_request_is_read_whole() {
        let json = [("content-type".to_owned(), "application/json; charset=UTF-8".to_owned())];
        let run = |body: &str| {
            let mut reads = vec![body.as_bytes().to_vec()].into_iter();
            let mut deltas = Vec::new();
            let result = streamed(
                200,
                &json,
                || Ok(reads.next()),
                &mut |d| deltas.push(d),
                "m",
                &settings(),
            );
            (result, deltas)
        };
        let (result, deltas) = run(PLAIN);
        assert!(!text_of(&result.unwrap()).is_empty());
        assert!(!deltas.is_empty(), "the text still reaches the caller");
        let array = r#"[{"candidates": [{"content": {"parts": [{"text": "a"}]}}]},
            {"candidates": [{"content": {"parts": [{"text": "b"}]}, "finishReason": "STOP"}]}]"#;
        assert_eq!(text_of(&run(array).0.unwrap()), "ab");
        let blocked = r#"{"candidates": [{"finishReason": "SAFETY", "index": 0}]}"#;
        assert!(matches!(run(blocked).0.unwrap().finish_reason, FinishReason::ContentFilter));
        assert!(matches!(run("{\"candid").0, Err(ProviderError::InvalidResponse(_))));
    }

    #[test]
    fn every_truncation_of_a_real_stream_is_an_error() {
        for bytes in [TEXT_STREAM.as_bytes(), TOOL_STREAM.as_bytes()] {
            // Cut before its last byte, the final `\r\n\r` already ends the
            // event (the `\n` would only complete the `\r`).
            for cut in 0..bytes.len() - 1 {
                for size in [cut.max(1), 7] {
                    let (result, _) = stream(200, in_reads(&bytes[..cut], size));
                    assert!(result.is_err(), "cut at {cut} of {}", bytes.len());
                }
            }
        }
        // With `\n` line ends, every proper prefix fails.
        let lf = TEXT_STREAM.replace("\r\n", "\n");
        for cut in 0..lf.len() {
            assert!(stream(200, vec![lf.as_bytes()[..cut].to_vec()]).0.is_err(), "cut at {cut}");
        }
        assert!(stream(200, vec![lf.into_bytes()]).0.is_ok());
    }

    #[test]
    fn error_statuses_read_the_body_and_map_it() {
        let body = br#"{"error": {"code": 429, "message": "Resource has been exhausted (e.g. check quota).",
            "status": "RESOURCE_EXHAUSTED", "details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo",
            "retryDelay": "7s"}]}}"#;
        let (result, deltas) = stream(429, in_reads(body, 10));
        assert!(matches!(result, Err(ProviderError::RateLimited(r))
            if r.retry_after_ms == Some(7_000) && r.message.starts_with("Resource has been exhausted")));
        assert!(deltas.is_empty());
        let mut reads =
            vec![Ok(Some(br#"{"error": {"code": 503, "mess"#.to_vec())), Err(HttpError::Timeout)]
                .into_iter();
        let result = streamed(503, &[], || reads.next().unwrap(), &mut |_| {}, "m", &settings());
        assert!(matches!(result, Err(ProviderError::Server(s)) if s.status == 503));
        let result = whole(
            401,
            &[],
            br#"{"error": {"code": 401, "message": "no key", "status": "UNAUTHENTICATED"}}"#,
            "m",
            &settings(),
        );
        assert!(matches!(result, Err(ProviderError::Auth(m)) if m.contains("no key")));
        let result = whole(200, &[], PLAIN.as_bytes(), "m", &settings()).unwrap();
        assert_eq!(text_of(&result), "The capital of France is Paris.");
    }

    #[test]
    fn an_error_event_or_a_failed_read_ends_the_stream_with_its_error() {
        let bytes = concat!(
            "data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"Par\"}],\"role\": \"model\"}}]}\r\n\r\n",
            "data: {\"error\": {\"code\": 503, \"message\": \"The model is overloaded. Please try again later.\", ",
            "\"status\": \"UNAVAILABLE\"}}\r\n\r\n"
        );
        let (result, deltas) = stream(200, vec![bytes.as_bytes().to_vec()]);
        assert!(matches!(result, Err(ProviderError::Server(s))
            if s.status == 503 && s.message.contains("overloaded")));
        assert_eq!(deltas.len(), 1);
        let mut reads = vec![
            Ok(Some(TEXT_STREAM.as_bytes()[..100].to_vec())),
            Err(HttpError::Io("reset".into())),
        ]
        .into_iter();
        let result = streamed(200, &[], || reads.next().unwrap(), &mut |_| {}, "m", &settings());
        assert!(matches!(result, Err(ProviderError::Network(m)) if m.contains("reset")));
        let mut reads = vec![Err(HttpError::Timeout)].into_iter();
        let result = streamed(200, &[], || reads.next().unwrap(), &mut |_| {}, "m", &settings());
        assert!(matches!(result, Err(ProviderError::Timeout(_))));
    }

    /// A xorshift64 generator: deterministic, so a failure reproduces.
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

        fn below(&mut self, n: usize) -> usize {
            (self.next() % n.max(1) as u64) as usize
        }
    }

    #[test]
    fn random_bytes_and_truncations_are_errors_and_never_panic() {
        let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
        for _ in 0..2000 {
            let len = rng.below(400);
            let bytes: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
            assert!(response::parse(&bytes, "m", None).is_err());
            assert!(whole(200, &[], &bytes, "m", &settings()).is_err());
            let size = 1 + rng.below(64);
            assert!(stream(200, in_reads(&bytes, size)).0.is_err());
            // Only the case matters here: any body maps to some error.
            let _ = error::from_status(400 + rng.below(200) as u16, &[], &bytes);
            // As data of an event, too.
            let mut event = b"data: ".to_vec();
            event.extend(&bytes);
            event.extend(b"\r\n\r\n");
            assert!(stream(200, in_reads(&event, size)).0.is_err());
        }
        for cut in 0..PLAIN.len() {
            assert!(response::parse(&PLAIN.as_bytes()[..cut], "m", None).is_err(), "cut at {cut}");
        }
    }

    #[test]
    fn mutated_streams_never_panic_and_what_succeeds_is_consistent() {
        let mut rng = XorShift(0x2545_F491_4F6C_DD1D);
        let fixtures = [TEXT_STREAM.as_bytes(), TOOL_STREAM.as_bytes()];
        let mut successes = 0;
        for i in 0..2000 {
            let mut bytes = fixtures[i % 2].to_vec();
            for _ in 0..1 + rng.below(4) {
                let at = rng.below(bytes.len());
                match rng.below(3) {
                    0 => bytes[at] = rng.next() as u8,
                    1 => {
                        bytes.remove(at);
                    }
                    _ => {
                        let alphabet = b"{}[]\":,\r\n\\ax0";
                        bytes.insert(at, alphabet[rng.below(alphabet.len())]);
                    }
                }
            }
            let (result, deltas) = stream(200, in_reads(&bytes, 1 + rng.below(300)));
            if let Ok(response) = result {
                successes += 1;
                assert_deltas_match(&deltas, &response);
            }
        }
        // Some mutations land in a JSON string and keep the stream valid.
        assert!(successes > 0);
    }
}
