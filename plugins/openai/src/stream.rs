//! Streamed answers: reading the event stream as it arrives, emitting each
//! piece as a delta, and assembling the whole response from the chunks.

use crate::errors;
use crate::response::{self, ApiToolCall, Choice, Completion, Parts};
use crate::settings::Settings;
use crate::sse;
use reson_sdk::host::http::HttpError;
use reson_sdk::provider::{
    ChatResponse, ContentPart, Delta, ProviderError, ToolCall, ToolCallDelta,
};
use serde_json::Value;

/// How many bytes one read asks the host for: big enough for a burst of
/// chunks, small enough that deltas are not held back.
pub const READ_BYTES: u32 = 64 * 1024;
/// How much of a malformed event goes into the error message.
const EXCERPT_CHARS: usize = 120;

/// Receives the answer to a streamed request whose response has `status`
/// and `headers`; `read` gives the next piece of the body (`None` at its
/// end) and `emit` gets each delta as soon as its chunk is complete.
pub fn receive(
    status: u16,
    headers: &[(String, String)],
    mut read: impl FnMut() -> Result<Option<Vec<u8>>, HttpError>,
    mut emit: impl FnMut(Delta),
    model: &str,
    settings: &Settings,
) -> Result<ChatResponse, ProviderError> {
    if !(200..300).contains(&status) {
        // The error is the status; a body cut short by a failing read still
        // says what it can.
        let mut body = Vec::new();
        let _ = read_all(&mut read, &mut body);
        return Err(errors::from_status(status, headers, &body, settings));
    }
    let content_type = errors::header(headers, "content-type").unwrap_or_default();
    if content_type.to_ascii_lowercase().starts_with("application/json") {
        // A server that ignores `stream: true` answers whole; the caller
        // still gets the deltas, all at once.
        let mut body = Vec::new();
        read_all(&mut read, &mut body).map_err(|e| errors::from_http(e, settings))?;
        let response = response::parse(status, &body, model, settings)?;
        replay(&response, &mut emit);
        return Ok(response);
    }
    let mut decoder = sse::Decoder::default();
    let mut assembler = Assembler::default();
    let mut events = Vec::new();
    loop {
        let chunk = read().map_err(|e| errors::from_http(e, settings))?;
        match &chunk {
            Some(bytes) => decoder.feed(bytes, &mut events),
            None => decoder.finish(&mut events),
        }
        let ended = chunk.is_none();
        for data in events.drain(..) {
            if assembler.event(&data, ended, &mut emit, status, settings)? {
                // Anything after `[DONE]` is not part of the answer.
                return assembler.finish(model, settings);
            }
        }
        if ended {
            return Err(assembler.cut_off());
        }
    }
}

/// Appends the rest of the body to `body`.
fn read_all(
    read: &mut impl FnMut() -> Result<Option<Vec<u8>>, HttpError>,
    body: &mut Vec<u8>,
) -> Result<(), HttpError> {
    while let Some(chunk) = read()? {
        body.extend_from_slice(&chunk);
    }
    Ok(())
}

/// Emits a whole response as the deltas a stream of it would have given.
fn replay(response: &ChatResponse, emit: &mut impl FnMut(Delta)) {
    let message = &response.message;
    if let Some(reasoning) = &message.reasoning {
        emit(Delta::Reasoning(reasoning.clone()));
    }
    for part in &message.content {
        if let ContentPart::Text(text) = part {
            emit(Delta::Text(text.clone()));
        }
    }
    for (index, call) in (0..).zip(&message.tool_calls) {
        emit(Delta::ToolCall(ToolCallDelta {
            index,
            id: Some(call.id.clone()),
            name: Some(call.name.clone()),
            arguments_fragment: call.arguments.clone(),
        }));
    }
}

/// The answer so far, built from the chunks received.
#[derive(Debug, Default)]
struct Assembler {
    events: usize,
    model: Option<String>,
    text: String,
    reasoning: String,
    /// In the order they first appeared, which is their delta index.
    calls: Vec<PartialCall>,
    finish_reason: Option<String>,
    usage: Option<response::ApiUsage>,
}

/// A tool call being streamed.
#[derive(Debug)]
struct PartialCall {
    /// The `index` the server gave it, if any.
    api_index: Option<u64>,
    id: String,
    /// Whether `id` came from the server rather than being made up.
    server_id: bool,
    name: String,
    arguments: String,
}

impl Assembler {
    /// Takes in one event's data; `true` once the stream's terminal
    /// `[DONE]` arrived. `ended` says the body ended before the event's
    /// blank line, so it may have been cut anywhere.
    fn event(
        &mut self,
        data: &[u8],
        ended: bool,
        emit: &mut impl FnMut(Delta),
        status: u16,
        settings: &Settings,
    ) -> Result<bool, ProviderError> {
        self.events += 1;
        let data = data.trim_ascii();
        if data.is_empty() {
            return Ok(false);
        }
        if data == b"[DONE]" {
            return Ok(true);
        }
        // A body that ends inside an event was cut in transit (retryable,
        // like any broken connection); a whole event that is not JSON is the
        // server's fault and would come back the same.
        let json: Value = serde_json::from_slice(data).map_err(|e| {
            if ended {
                ProviderError::Network(format!(
                    "openai: the stream ended in the middle of event {}, before its terminal \
                     `data: [DONE]` event: {}",
                    self.events,
                    excerpt(data)
                ))
            } else {
                ProviderError::InvalidResponse(format!(
                    "openai: stream event {} is not valid JSON ({e}): {}",
                    self.events,
                    excerpt(data)
                ))
            }
        })?;
        if json.get("error").is_some_and(|e| !e.is_null()) {
            return Err(errors::in_band(status, &json, settings));
        }
        let chunk: Completion = serde_json::from_value(json).map_err(|e| {
            ProviderError::InvalidResponse(format!(
                "openai: stream event {} is not a chat completion chunk: {e}: {}",
                self.events,
                excerpt(data)
            ))
        })?;
        if self.model.is_none() {
            self.model = chunk.model.filter(|m| !m.is_empty());
        }
        // With `include_usage` the last chunk has it; servers that report it
        // in every chunk have the running total last too.
        if chunk.usage.is_some() {
            self.usage = chunk.usage;
        }
        for choice in chunk.choices.iter().flatten().filter(|c| c.is_first()) {
            self.choice(choice, emit);
        }
        Ok(false)
    }

    fn choice(&mut self, choice: &Choice, emit: &mut impl FnMut(Delta)) {
        if let Some(reason) = choice.finish_reason.as_ref().filter(|r| !r.is_empty()) {
            self.finish_reason = Some(reason.clone());
        }
        let Some(delta) = &choice.delta else { return };
        let reasoning = delta.reasoning();
        if !reasoning.is_empty() {
            self.reasoning.push_str(&reasoning);
            emit(Delta::Reasoning(reasoning));
        }
        let text = delta.text();
        if !text.is_empty() {
            self.text.push_str(&text);
            emit(Delta::Text(text));
        }
        for call in delta.tool_calls.iter().flatten() {
            self.tool_call(call, emit);
        }
    }

    /// Adds a tool-call fragment. OpenAI gives the `index`, and the id and
    /// name only in a call's first fragment. Other servers leave out the
    /// index (a fragment then continues the last call), repeat the id and
    /// name in every fragment, or send each call whole under the same
    /// index; so a different id or name than the call's starts a new call.
    fn tool_call(&mut self, fragment: &ApiToolCall, emit: &mut impl FnMut(Delta)) {
        let id = fragment.id.as_ref().filter(|id| !id.is_empty());
        let name =
            fragment.function.as_ref().and_then(|f| f.name.as_ref()).filter(|n| !n.is_empty());
        let arguments = fragment.function.as_ref().map(|f| f.arguments()).unwrap_or_default();
        let found = match fragment.index {
            Some(index) => self.calls.iter().rposition(|c| c.api_index == Some(index)),
            None => self.calls.len().checked_sub(1),
        };
        let found = found.filter(|&at| {
            let call = &self.calls[at];
            let same_id = id.is_none_or(|id| !call.server_id || *id == call.id);
            let same_name = name.is_none_or(|name| call.name.is_empty() || *name == call.name);
            same_id && same_name
        });
        let at = found.unwrap_or_else(|| {
            let at = self.calls.len();
            self.calls.push(PartialCall {
                api_index: fragment.index,
                // Servers that give no id still need one for the result to
                // refer to.
                id: id.cloned().unwrap_or_else(|| format!("call_{at}")),
                server_id: id.is_some(),
                name: String::new(),
                arguments: String::new(),
            });
            at
        });
        let is_new = found.is_none();
        let call = &mut self.calls[at];
        let new_name = name.filter(|_| call.name.is_empty());
        if let Some(name) = new_name {
            call.name = name.clone();
        }
        call.arguments.push_str(&arguments);
        if is_new || new_name.is_some() || !arguments.is_empty() {
            emit(Delta::ToolCall(ToolCallDelta {
                // `at` is bounded by the number of fragments, far below u32::MAX.
                index: u32::try_from(at).unwrap_or(u32::MAX),
                id: is_new.then(|| call.id.clone()),
                name: new_name.cloned(),
                arguments_fragment: arguments,
            }));
        }
    }

    /// The whole answer, once `[DONE]` arrived.
    fn finish(self, model: &str, settings: &Settings) -> Result<ChatResponse, ProviderError> {
        let tool_calls: Vec<ToolCall> = self
            .calls
            .into_iter()
            .map(|call| ToolCall { id: call.id, name: call.name, arguments: call.arguments })
            .collect();
        Parts {
            model: self.model.unwrap_or_else(|| model.to_owned()),
            text: self.text,
            reasoning: self.reasoning,
            finish_reason: response::finish_reason(
                self.finish_reason.as_deref(),
                !tool_calls.is_empty(),
            ),
            tool_calls,
            usage: response::usage(self.usage.as_ref()),
        }
        .into_response(&settings.prices)
    }

    /// The error for a stream that ended before `[DONE]`: the connection
    /// was cut, so it is a network error, retried like one.
    fn cut_off(&self) -> ProviderError {
        let finished = if self.finish_reason.is_some() {
            ""
        } else {
            "; no chunk had a finish_reason, so the answer is incomplete"
        };
        ProviderError::Network(format!(
            "openai: the stream ended without its terminal `data: [DONE]` event (after {} \
             events{finished})",
            self.events
        ))
    }
}

/// The start of a malformed event, for the error message.
fn excerpt(data: &[u8]) -> String {
    let text = String::from_utf8_lossy(data);
    match text.char_indices().nth(EXCERPT_CHARS) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.into_owned(),
    }
}

#[cfg(test)]
pub mod tests {
    use super::*;
    use crate::errors::tests::kind;
    use crate::response::tests::settings;
    use crate::settings::Prices;
    use reson_sdk::provider::FinishReason;

    /// A streamed `gpt-4o-mini` answer as the API sends it, with
    /// `include_usage`: a role chunk, content chunks, the finish chunk, the
    /// usage chunk with no choices, then `[DONE]`.
    pub const TEXT_STREAM: &str = concat!(
        r#"data: {"id":"chatcmpl-AyPK9","object":"chat.completion.chunk","created":1738960589,"model":"gpt-4o-mini-2024-07-18","service_tier":"default","system_fingerprint":"fp_72ed7ab54c","choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}],"usage":null}"#,
        "\n\n",
        r#"data: {"id":"chatcmpl-AyPK9","object":"chat.completion.chunk","created":1738960589,"model":"gpt-4o-mini-2024-07-18","service_tier":"default","system_fingerprint":"fp_72ed7ab54c","choices":[{"index":0,"delta":{"content":"Hello"},"logprobs":null,"finish_reason":null}],"usage":null}"#,
        "\n\n",
        r#"data: {"id":"chatcmpl-AyPK9","object":"chat.completion.chunk","created":1738960589,"model":"gpt-4o-mini-2024-07-18","service_tier":"default","system_fingerprint":"fp_72ed7ab54c","choices":[{"index":0,"delta":{"content":", wörld 🌍!"},"logprobs":null,"finish_reason":null}],"usage":null}"#,
        "\n\n",
        r#"data: {"id":"chatcmpl-AyPK9","object":"chat.completion.chunk","created":1738960589,"model":"gpt-4o-mini-2024-07-18","service_tier":"default","system_fingerprint":"fp_72ed7ab54c","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}],"usage":null}"#,
        "\n\n",
        r#"data: {"id":"chatcmpl-AyPK9","object":"chat.completion.chunk","created":1738960589,"model":"gpt-4o-mini-2024-07-18","service_tier":"default","system_fingerprint":"fp_72ed7ab54c","choices":[],"usage":{"prompt_tokens":2048,"completion_tokens":5,"total_tokens":2053,"prompt_tokens_details":{"cached_tokens":1920,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}}}"#,
        "\n\n",
        "data: [DONE]\n\n",
    );

    /// Two streamed tool calls: the first fragment of each has the id and
    /// name, the arguments follow in pieces split mid-token.
    pub const TOOL_STREAM: &str = concat!(
        r#"data: {"id":"chatcmpl-B1","object":"chat.completion.chunk","created":1739000000,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_50cad350e4","choices":[{"index":0,"delta":{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_DdmO9pD3xa9XTPNJ32zg2hcA","type":"function","function":{"name":"get_weather","arguments":""}}],"refusal":null},"logprobs":null,"finish_reason":null}],"usage":null}"#,
        "\n\n",
        r#"data: {"id":"chatcmpl-B1","object":"chat.completion.chunk","created":1739000000,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_50cad350e4","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"lo"}}]},"logprobs":null,"finish_reason":null}],"usage":null}"#,
        "\n\n",
        r#"data: {"id":"chatcmpl-B1","object":"chat.completion.chunk","created":1739000000,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_50cad350e4","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"cation\":\"Par"}}]},"logprobs":null,"finish_reason":null}],"usage":null}"#,
        "\n\n",
        r#"data: {"id":"chatcmpl-B1","object":"chat.completion.chunk","created":1739000000,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_50cad350e4","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"is, Fran"}}]},"logprobs":null,"finish_reason":null}],"usage":null}"#,
        "\n\n",
        r#"data: {"id":"chatcmpl-B1","object":"chat.completion.chunk","created":1739000000,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_50cad350e4","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"ce\"}"}}]},"logprobs":null,"finish_reason":null}],"usage":null}"#,
        "\n\n",
        r#"data: {"id":"chatcmpl-B1","object":"chat.completion.chunk","created":1739000000,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_50cad350e4","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_Xk3aP0s9LmQe7rT2uV4wY6z8","type":"function","function":{"name":"get_time","arguments":""}}]},"logprobs":null,"finish_reason":null}],"usage":null}"#,
        "\n\n",
        r#"data: {"id":"chatcmpl-B1","object":"chat.completion.chunk","created":1739000000,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_50cad350e4","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":"{}"}}]},"logprobs":null,"finish_reason":null}],"usage":null}"#,
        "\n\n",
        r#"data: {"id":"chatcmpl-B1","object":"chat.completion.chunk","created":1739000000,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_50cad350e4","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"tool_calls"}],"usage":null}"#,
        "\n\n",
        r#"data: {"id":"chatcmpl-B1","object":"chat.completion.chunk","created":1739000000,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_50cad350e4","choices":[],"usage":{"prompt_tokens":88,"completion_tokens":41,"total_tokens":129,"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}}}"#,
        "\n\n",
        "data: [DONE]\n\n",
    );

    const SSE: &[(&str, &str)] = &[("content-type", "text/event-stream; charset=utf-8")];

    /// Streams `pieces` as successive reads of a 200 response.
    pub fn run(
        headers: &[(&str, &str)],
        pieces: &[&[u8]],
        settings: &Settings,
    ) -> (Result<ChatResponse, ProviderError>, Vec<Delta>) {
        run_status(200, headers, pieces, settings)
    }

    fn run_status(
        status: u16,
        headers: &[(&str, &str)],
        pieces: &[&[u8]],
        settings: &Settings,
    ) -> (Result<ChatResponse, ProviderError>, Vec<Delta>) {
        let headers: Vec<(String, String)> =
            headers.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        let mut reads = pieces.iter().map(|p| p.to_vec());
        let mut deltas = Vec::new();
        let result = receive(
            status,
            &headers,
            || Ok(reads.next()),
            |d| deltas.push(d),
            "requested-model",
            settings,
        );
        (result, deltas)
    }

    /// What a stream made, in a comparable form.
    fn summary(response: &ChatResponse) -> String {
        let m = &response.message;
        let u = &response.usage;
        format!(
            "{:?}|{:?}|{:?}|{:?}|{}|{:?}|{}/{}/{}/{}/{}|{:?}",
            m.content.iter().map(|p| format!("{p:?}")).collect::<Vec<_>>(),
            m.reasoning,
            m.tool_calls.iter().map(|c| (&c.id, &c.name, &c.arguments)).collect::<Vec<_>>(),
            response.finish_reason,
            response.model,
            m.role,
            u.prompt_tokens,
            u.completion_tokens,
            u.reasoning_tokens,
            u.cache_read_tokens,
            u.cache_write_tokens,
            response.cost,
        )
    }

    fn texts(deltas: &[Delta]) -> Vec<&str> {
        deltas
            .iter()
            .filter_map(|d| match d {
                Delta::Text(t) => Some(t.as_str()),
                _ => None,
            })
            .collect()
    }

    fn cut(result: Result<ChatResponse, ProviderError>) -> String {
        match result {
            Err(ProviderError::Network(message)) => message,
            other => panic!("expected a network error, got {other:?}"),
        }
    }

    fn invalid(result: Result<ChatResponse, ProviderError>) -> String {
        match result {
            Err(ProviderError::InvalidResponse(message)) => message,
            other => panic!("expected an invalid response, got {other:?}"),
        }
    }

    #[test]
    fn streamed_text_is_emitted_as_it_arrives_and_assembled() {
        let (result, deltas) = run(SSE, &[TEXT_STREAM.as_bytes()], &settings());
        let response = result.unwrap();
        assert_eq!(texts(&deltas), ["Hello", ", wörld 🌍!"]);
        assert_eq!(deltas.len(), 2, "the empty role chunk emits nothing: {deltas:?}");
        let [ContentPart::Text(text)] = &response.message.content[..] else {
            panic!("{response:?}")
        };
        assert_eq!(text, "Hello, wörld 🌍!");
        assert!(response.message.tool_calls.is_empty());
        assert!(matches!(response.finish_reason, FinishReason::Stop));
        assert_eq!(response.model, "gpt-4o-mini-2024-07-18");
    }

    #[test]
    fn usage_from_the_last_chunk_is_reported_and_costed() {
        let prices = Prices {
            input: Some(0.15),
            output: Some(0.6),
            cache_read: Some(0.075),
            cache_write: None,
        };
        let priced = Settings { prices, ..settings() };
        let (result, _) = run(SSE, &[TEXT_STREAM.as_bytes()], &priced);
        let response = result.unwrap();
        let u = &response.usage;
        assert_eq!((u.prompt_tokens, u.completion_tokens, u.cache_read_tokens), (2048, 5, 1920));
        let expected = (128.0 * 0.15 + 1920.0 * 0.075 + 5.0 * 0.6) / 1e6;
        assert!((response.cost.unwrap() - expected).abs() < 1e-15);
        let (result, _) = run(SSE, &[TEXT_STREAM.as_bytes()], &settings());
        assert_eq!(result.unwrap().cost, None);
    }

    #[test]
    fn streamed_tool_call_arguments_split_across_chunks_are_concatenated() {
        let (result, deltas) = run(SSE, &[TOOL_STREAM.as_bytes()], &settings());
        let response = result.unwrap();
        let calls = &response.message.tool_calls;
        assert_eq!(calls.len(), 2);
        assert_eq!(
            (calls[0].id.as_str(), calls[0].name.as_str(), calls[0].arguments.as_str()),
            ("call_DdmO9pD3xa9XTPNJ32zg2hcA", "get_weather", r#"{"location":"Paris, France"}"#)
        );
        assert_eq!(
            (calls[1].id.as_str(), calls[1].name.as_str(), calls[1].arguments.as_str()),
            ("call_Xk3aP0s9LmQe7rT2uV4wY6z8", "get_time", "{}")
        );
        assert!(response.message.content.is_empty());
        assert!(matches!(response.finish_reason, FinishReason::ToolCalls));
        assert_eq!(response.usage.completion_tokens, 41);

        let fragments: Vec<(u32, Option<&str>, Option<&str>, &str)> = deltas
            .iter()
            .map(|d| match d {
                Delta::ToolCall(c) => {
                    (c.index, c.id.as_deref(), c.name.as_deref(), c.arguments_fragment.as_str())
                }
                other => panic!("unexpected {other:?}"),
            })
            .collect();
        assert_eq!(
            fragments,
            [
                (0, Some("call_DdmO9pD3xa9XTPNJ32zg2hcA"), Some("get_weather"), ""),
                (0, None, None, r#"{"lo"#),
                (0, None, None, r#"cation":"Par"#),
                (0, None, None, "is, Fran"),
                (0, None, None, r#"ce"}"#),
                (1, Some("call_Xk3aP0s9LmQe7rT2uV4wY6z8"), Some("get_time"), ""),
                (1, None, None, "{}"),
            ]
        );
    }

    #[test]
    fn reads_split_at_any_byte_give_the_same_answer() {
        for fixture in [TEXT_STREAM, TOOL_STREAM] {
            let crlf = fixture.replace('\n', "\r\n");
            for stream in [fixture, crlf.as_str()] {
                let bytes = stream.as_bytes();
                let (whole, whole_deltas) = run(SSE, &[bytes], &settings());
                let whole = summary(&whole.unwrap());
                for cut in 0..=bytes.len() {
                    let (result, deltas) = run(SSE, &[&bytes[..cut], &bytes[cut..]], &settings());
                    assert_eq!(summary(&result.unwrap()), whole, "cut at {cut}");
                    assert_eq!(format!("{deltas:?}"), format!("{whole_deltas:?}"), "cut at {cut}");
                }
                let single: Vec<&[u8]> = bytes.chunks(1).collect();
                let (result, _) = run(SSE, &single, &settings());
                assert_eq!(summary(&result.unwrap()), whole);
            }
        }
    }

    #[test]
    fn a_stream_cut_off_is_a_network_error() {
        let bytes = TEXT_STREAM.as_bytes();
        // Cut inside the `ö` of "wörld", in the third event.
        let middle_of_third = TEXT_STREAM.find("wörld").unwrap() + 2;
        let (result, deltas) = run(SSE, &[&bytes[..middle_of_third]], &settings());
        let message = cut(result);
        let start = "openai: the stream ended in the middle of event 3, before its terminal \
                     `data: [DONE]` event: {\"id\":\"chatcmpl-AyPK9\"";
        assert!(message.starts_with(start), "{message}");
        assert_eq!(texts(&deltas), ["Hello"], "what arrived before the cut was still emitted");

        let before_done = TEXT_STREAM.find("data: [DONE]").unwrap();
        assert_eq!(
            cut(run(SSE, &[&bytes[..before_done]], &settings()).0),
            "openai: the stream ended without its terminal `data: [DONE]` event (after 5 events)"
        );
        // The start of the fourth event, the one with the finish_reason.
        let before_finish = TEXT_STREAM.match_indices("data: ").nth(3).unwrap().0;
        assert_eq!(
            cut(run(SSE, &[&bytes[..before_finish]], &settings()).0),
            "openai: the stream ended without its terminal `data: [DONE]` event (after 3 events; \
             no chunk had a finish_reason, so the answer is incomplete)"
        );
        assert_eq!(
            cut(run(SSE, &[], &settings()).0),
            "openai: the stream ended without its terminal `data: [DONE]` event (after 0 events; \
             no chunk had a finish_reason, so the answer is incomplete)"
        );
    }

    #[test]
    fn malformed_events_are_invalid_responses_quoting_the_event() {
        let message = invalid(run(SSE, &[b"data: {\"choices\": [}\n\n"], &settings()).0);
        let expected = "openai: stream event 1 is not valid JSON (expected value at line 1 column \
                        14): {\"choices\": [}";
        assert_eq!(message, expected);
        let message = invalid(run(SSE, &[b"data: {\"choices\": 5}\n\n"], &settings()).0);
        assert!(
            message.starts_with(
                "openai: stream event 1 is not a chat completion chunk: invalid type: integer `5`"
            ),
            "{message}"
        );
        let long = format!("data: {}\n\n", "x".repeat(500));
        let message = invalid(run(SSE, &[long.as_bytes()], &settings()).0);
        assert!(message.ends_with(&format!("{}…", "x".repeat(120))), "{message}");
        assert!(matches!(
            run(SSE, &[b"data: {\"s\": \"\xff\"}\n\n"], &settings()).0,
            Err(ProviderError::InvalidResponse(_))
        ));
    }

    #[test]
    fn compatible_servers_reasoning_missing_ids_and_comments_are_understood() {
        // llama.cpp / vLLM / OpenRouter style: keep-alive comments, reasoning
        // under either name, tool calls without ids or indexes, no usage.
        let stream = concat!(
            ": OPENROUTER PROCESSING\n\n",
            r#"data: {"choices":[{"index":0,"delta":{"role":"assistant","reasoning_content":"Think"}}]}"#,
            "\n\n",
            r#"data: {"choices":[{"index":0,"delta":{"reasoning":"ing…","reasoning_details":[]}}]}"#,
            "\n\n",
            r#"data: {"choices":[{"index":0,"delta":{"content":"Checking."}}]}"#,
            "\n\n",
            r#"data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"name":"ls","arguments":"{\"dir\":"}}]}}]}"#,
            "\n\n",
            r#"data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\".\"}"}}]}}]}"#,
            "\n\n",
            r#"data: {"choices":[{"delta":{"tool_calls":[{"function":{"name":"pwd","arguments":{}}}]}}]}"#,
            "\n\n",
            r#"data: {"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#,
            "\n\n",
            "data: [DONE]\n\n",
        );
        let (result, deltas) = run(SSE, &[stream.as_bytes()], &settings());
        let response = result.unwrap();
        assert_eq!(response.message.reasoning.as_deref(), Some("Thinking…"));
        let [Delta::Reasoning(first), Delta::Reasoning(second), ..] = &deltas[..] else {
            panic!("{deltas:?}")
        };
        assert_eq!([first, second], ["Think", "ing…"]);
        let calls: Vec<_> = response
            .message
            .tool_calls
            .iter()
            .map(|c| (c.id.as_str(), c.name.as_str(), c.arguments.as_str()))
            .collect();
        assert_eq!(calls, [("call_0", "ls", r#"{"dir":"."}"#), ("call_1", "pwd", "{}")]);
        assert_eq!(response.model, "requested-model");
        assert_eq!(response.usage.prompt_tokens, 0);
    }

    #[test]
    fn calls_sent_whole_under_one_index_stay_apart() {
        // Some servers send every call whole with index 0 and its own id.
        let stream = concat!(
            r#"data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"read","arguments":"{\"p\":1}"}}]}}]}"#,
            "\n\n",
            r#"data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"b","function":{"name":"read","arguments":"{\"p\":2}"}}]}}]}"#,
            "\n\n",
            r#"data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"b","function":{"name":"read","arguments":""}}]},"finish_reason":"tool_calls"}]}"#,
            "\n\n",
            r#"data: {"choices":[{"index":1,"delta":{"content":"second choice, ignored"}}]}"#,
            "\n\n",
            "data: [DONE]\n\n",
        );
        let (result, deltas) = run(SSE, &[stream.as_bytes()], &settings());
        let calls = result.unwrap().message.tool_calls;
        let calls: Vec<_> = calls.iter().map(|c| (c.id.as_str(), c.arguments.as_str())).collect();
        assert_eq!(calls, [("a", r#"{"p":1}"#), ("b", r#"{"p":2}"#)]);
        assert_eq!(deltas.len(), 2, "the repeated id and name emit nothing: {deltas:?}");
    }

    #[test]
    fn an_error_event_in_the_stream_is_an_error() {
        let stream = concat!(
            r#"data: {"choices":[{"index":0,"delta":{"content":"Hel"}}]}"#,
            "\n\n",
            r#"data: {"error":{"message":"Provider returned error","code":502}}"#,
            "\n\n",
        );
        let (result, deltas) = run(SSE, &[stream.as_bytes()], &settings());
        let err = result.unwrap_err();
        let (kind_of, message) = kind(&err);
        assert_eq!(kind_of, "server 502");
        assert!(message.contains("Provider returned error"), "{message}");
        assert_eq!(texts(&deltas), ["Hel"]);
    }

    #[test]
    fn an_error_status_reads_the_body_for_its_message() {
        let body = br#"{"error":{"message":"Rate limit reached for requests","type":"requests",
            "param":null,"code":"rate_limit_exceeded"}}"#;
        let json = &[("content-type", "application/json"), ("retry-after", "7")];
        let (result, deltas) = run_status(429, json, &[&body[..40], &body[40..]], &settings());
        let err = result.unwrap_err();
        let (kind_of, message) = kind(&err);
        assert_eq!(kind_of, "rate-limited Some(7000)");
        assert!(message.contains("Rate limit reached for requests"), "{message}");
        assert!(deltas.is_empty());
        let (result, _) =
            run_status(401, json, &[b"{\"error\":{\"message\":\"bad key\"}}"], &settings());
        let err = result.unwrap_err();
        let expected = "openai: the API answered 401: bad key (the API key is the secret \
                        `OPENAI_API_KEY`)";
        assert_eq!(kind(&err), ("auth".to_owned(), expected));
        let (result, _) = run_status(503, SSE, &[], &settings());
        assert_eq!(kind(&result.unwrap_err()).0, "server 503");
    }

    #[test]
    fn a_whole_json_answer_to_a_streamed_request_is_replayed_as_deltas() {
        let json = &[("Content-Type", "application/json")];
        let body = crate::response::tests::PLAIN.as_bytes();
        let (result, deltas) = run(json, &[&body[..100], &body[100..]], &settings());
        assert_eq!(
            summary(&result.unwrap()),
            summary(&crate::response::parse(200, body, "m", &settings()).unwrap())
        );
        assert_eq!(texts(&deltas), ["Hello! How can I assist you today? ¿Qué tal?"]);
    }

    #[test]
    fn failed_reads_map_to_retryable_errors() {
        let s = settings();
        let fail = |err: HttpError| {
            let mut first = true;
            receive(
                200,
                &[],
                || {
                    if std::mem::take(&mut first) {
                        Ok(Some(b"data: {\"choices\":[]}\n\n".to_vec()))
                    } else {
                        Err(err.clone())
                    }
                },
                |_| {},
                "m",
                &s,
            )
        };
        assert_eq!(kind(&fail(HttpError::Timeout).unwrap_err()).0, "timeout");
        let err = fail(HttpError::Io("connection reset".into())).unwrap_err();
        assert_eq!(kind(&err).0, "network");
        assert!(kind(&err).1.ends_with("connection reset"), "{err:?}");
        let err = fail(HttpError::TooLarge(1 << 25)).unwrap_err();
        assert_eq!(kind(&err).0, "invalid-response");
    }

    #[test]
    fn data_after_done_is_not_read() {
        let mut reads = vec![b"data: [DONE]\n\n".to_vec()].into_iter();
        let mut after = 0;
        let result = receive(
            200,
            &[],
            || match reads.next() {
                Some(bytes) => Ok(Some(bytes)),
                None => {
                    after += 1;
                    Err(HttpError::Io("read past the end".into()))
                }
            },
            |_| {},
            "m",
            &settings(),
        );
        let response = result.unwrap();
        assert!(response.message.content.is_empty());
        assert!(matches!(response.finish_reason, FinishReason::Stop));
        assert_eq!(after, 0);
    }
}
