//! Reading a streamed answer: server-sent events parsed incrementally from
//! body chunks that may split anywhere, and the Messages API events
//! assembled into the whole reply while their deltas go out as they come.

use crate::error::{self, ApiError};
use crate::response::{ApiBlock, ApiUsage, Block, Reply};
use crate::thinking::Thinking;
use reson_sdk::provider::{Delta, ProviderError, ToolCallDelta};
use serde::Deserialize;
use std::collections::BTreeMap;

/// One server-sent event.
#[derive(Debug, Clone, PartialEq)]
pub struct SseEvent {
    /// The `event:` field (`message` when absent).
    pub event: String,
    /// The `data:` lines, joined by `\n`.
    pub data: String,
}

/// An incremental parser of `text/event-stream` (the WHATWG rules: lines
/// end with `\n`, `\r\n` or `\r`; a blank line dispatches the event;
/// `:` starts a comment). Only whole lines are decoded, so a chunk may end
/// inside a UTF-8 character or between `\r` and `\n`.
#[derive(Debug, Default)]
pub struct SseParser {
    /// Bytes of the line not yet ended.
    buf: Vec<u8>,
    /// How much of `buf` is known to hold no line end, so that a long line
    /// arriving in many chunks is scanned once.
    scanned: usize,
    pending: PendingEvent,
}

/// The fields of the event being read.
#[derive(Debug, Default)]
struct PendingEvent {
    event: String,
    data: String,
    has_data: bool,
}

impl SseParser {
    /// Feeds the next chunk, adding the events it completes to `events`.
    /// A line that is not UTF-8 is an error, but the events completed
    /// before it are still added: the error must not depend on where the
    /// reads happened to split the stream.
    pub fn feed(&mut self, chunk: &[u8], events: &mut Vec<SseEvent>) -> Result<(), ProviderError> {
        let Self { buf, scanned, pending } = self;
        buf.extend_from_slice(chunk);
        let mut line_start = 0;
        let mut pos = *scanned;
        loop {
            let Some(offset) = buf[pos..].iter().position(|&b| b == b'\n' || b == b'\r') else {
                pos = buf.len();
                break;
            };
            let end = pos + offset;
            let next = match (buf[end], buf.get(end + 1)) {
                (b'\r', Some(b'\n')) => end + 2,
                // A `\r` last in the chunk may be the first half of `\r\n`:
                // wait for the next byte.
                (b'\r', None) => {
                    pos = end;
                    break;
                }
                _ => end + 1,
            };
            pending.line(&buf[line_start..end], events)?;
            line_start = next;
            pos = next;
        }
        buf.drain(..line_start);
        *scanned = pos - line_start;
        Ok(())
    }

    /// Ends the stream: returns the events a final `\r` completes, and
    /// whether an event was left unfinished (bytes of a line, or fields
    /// without the blank line that dispatches them), which is dropped.
    pub fn finish(mut self) -> Result<(Vec<SseEvent>, bool), ProviderError> {
        let mut events = Vec::new();
        if let Some((b'\r', line)) = self.buf.split_last() {
            self.pending.line(line, &mut events)?;
            self.buf.clear();
        }
        let cut = !self.buf.is_empty() || self.pending.has_data || !self.pending.event.is_empty();
        Ok((events, cut))
    }
}

impl PendingEvent {
    fn line(&mut self, line: &[u8], events: &mut Vec<SseEvent>) -> Result<(), ProviderError> {
        if line.is_empty() {
            let event = std::mem::take(&mut self.event);
            let mut data = std::mem::take(&mut self.data);
            if std::mem::take(&mut self.has_data) {
                data.pop();
                let event = if event.is_empty() { "message".to_owned() } else { event };
                events.push(SseEvent { event, data });
            }
            return Ok(());
        }
        let line = std::str::from_utf8(line).map_err(|_| {
            ProviderError::InvalidResponse("anthropic: the event stream is not UTF-8".to_owned())
        })?;
        if line.starts_with(':') {
            return Ok(());
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match field {
            "event" => value.clone_into(&mut self.event),
            "data" => {
                self.data.push_str(value);
                self.data.push('\n');
                self.has_data = true;
            }
            // `id` and `retry` matter only to reconnecting clients.
            _ => {}
        }
        Ok(())
    }
}

/// A Messages API stream event (the `data` of an SSE event; its `type`
/// repeats the SSE event name). Unknown types are skipped, as the API's
/// versioning policy asks.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Event {
    MessageStart {
        message: StartMessage,
    },
    ContentBlockStart {
        index: u64,
        content_block: ApiBlock,
    },
    ContentBlockDelta {
        index: u64,
        delta: BlockDelta,
    },
    ContentBlockStop {},
    MessageDelta {
        delta: MessageDelta,
        usage: Option<ApiUsage>,
    },
    MessageStop {},
    Ping {},
    Error {
        error: ApiError,
    },
    #[serde(other)]
    Unknown,
}

/// The message shell of `message_start`: no content yet.
#[derive(Debug, Deserialize)]
struct StartMessage {
    model: Option<String>,
    #[serde(default)]
    usage: ApiUsage,
}

/// The `delta` of a `content_block_delta` event.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum BlockDelta {
    TextDelta {
        text: String,
    },
    InputJsonDelta {
        partial_json: String,
    },
    ThinkingDelta {
        thinking: String,
    },
    SignatureDelta {
        signature: String,
    },
    /// Citations and future kinds, which add nothing this plugin returns.
    #[serde(other)]
    Other,
}

/// The `delta` of a `message_delta` event.
#[derive(Debug, Deserialize)]
struct MessageDelta {
    stop_reason: Option<String>,
}

/// A block being streamed.
#[derive(Debug)]
struct OpenBlock {
    block: Block,
    /// For a tool call: its index among the message's calls.
    call: u32,
}

/// Assembles the events of one streamed message.
#[derive(Debug, Default)]
pub struct Assembler {
    /// `message_start` arrived.
    started: bool,
    /// `message_stop` arrived.
    stopped: bool,
    /// Events taken, for the message of a stream that ends early.
    events: usize,
    model: Option<String>,
    /// In the order they started, which is the order their deltas went
    /// out (the API's indices need not be); `None` for a kind that is
    /// skipped.
    blocks: Vec<Option<OpenBlock>>,
    /// Where each of the API's block indices is in `blocks`.
    positions: BTreeMap<u64, usize>,
    /// Tool calls opened so far, which numbers the next one.
    calls: u32,
    usage: ApiUsage,
    stop_reason: Option<String>,
}

impl Assembler {
    /// Takes one SSE event, emitting the deltas it carries.
    pub fn event(
        &mut self,
        sse: &SseEvent,
        emit: &mut dyn FnMut(Delta),
    ) -> Result<(), ProviderError> {
        self.events += 1;
        let event: Event = serde_json::from_str(&sse.data).map_err(|e| {
            ProviderError::InvalidResponse(format!(
                "anthropic: invalid `{}` event in the stream: {e}",
                sse.event
            ))
        })?;
        let needs_start = !matches!(
            event,
            Event::MessageStart { .. } | Event::Ping {} | Event::Error { .. } | Event::Unknown
        );
        if needs_start && !self.started {
            return Err(ProviderError::InvalidResponse(format!(
                "anthropic: a `{}` event came before `message_start`",
                sse.event
            )));
        }
        match event {
            Event::MessageStart { message } => {
                self.started = true;
                self.model = message.model;
                self.usage.update(message.usage);
            }
            Event::ContentBlockStart { index, content_block } => {
                if self.positions.contains_key(&index) {
                    return Err(ProviderError::InvalidResponse(format!(
                        "anthropic: content block {index} started twice"
                    )));
                }
                let open = self.open(content_block, emit);
                self.positions.insert(index, self.blocks.len());
                self.blocks.push(open);
            }
            Event::ContentBlockDelta { index, delta } => {
                let at = *self.positions.get(&index).ok_or_else(|| {
                    ProviderError::InvalidResponse(format!(
                        "anthropic: a delta for content block {index}, which never started"
                    ))
                })?;
                if let Some(open) = &mut self.blocks[at] {
                    apply(open, delta, index, emit)?;
                }
            }
            Event::MessageDelta { delta, usage } => {
                if delta.stop_reason.is_some() {
                    self.stop_reason = delta.stop_reason;
                }
                if let Some(usage) = usage {
                    self.usage.update(usage);
                }
            }
            Event::MessageStop {} => self.stopped = true,
            Event::ContentBlockStop {} | Event::Ping {} | Event::Unknown => {}
            Event::Error { error } => return Err(error::from_stream_error(&error)),
        }
        Ok(())
    }

    /// Whether `message_stop` arrived: nothing after it matters.
    pub fn is_done(&self) -> bool {
        self.stopped
    }

    /// The reply, once the message is complete (a stream that ended before
    /// `message_stop` is a network error). `cut` says the body ended inside
    /// an event, for the message.
    pub fn finish(self, cut: bool) -> Result<Reply, ProviderError> {
        if !self.stopped {
            let seen = match self.events {
                0 => "no event at all".to_owned(),
                1 => "1 event".to_owned(),
                n => format!("{n} events"),
            };
            let cut = if cut { ", in the middle of an event" } else { "" };
            // The connection was cut before the end: retried like any
            // broken connection.
            return Err(ProviderError::Network(format!(
                "anthropic: the event stream ended before `message_stop` (after {seen}{cut})"
            )));
        }
        let stop_reason = self.stop_reason.ok_or_else(|| {
            ProviderError::InvalidResponse(
                "anthropic: the stream's `message_delta` events carried no stop_reason".to_owned(),
            )
        })?;
        let blocks = self
            .blocks
            .into_iter()
            .flatten()
            .map(|open| match open.block {
                // A tool without parameters may stream no input at all.
                Block::ToolUse { id, name, arguments } if arguments.is_empty() => {
                    Block::ToolUse { id, name, arguments: "{}".to_owned() }
                }
                block => block,
            })
            .collect();
        Ok(Reply { model: self.model, blocks, usage: self.usage, stop_reason })
    }

    /// The block a `content_block_start` opens, emitting what it already
    /// holds.
    fn open(&mut self, block: ApiBlock, emit: &mut dyn FnMut(Delta)) -> Option<OpenBlock> {
        let block = match block {
            ApiBlock::Text { text } => {
                if !text.is_empty() {
                    emit(Delta::Text(text.clone()));
                }
                Block::Text(text)
            }
            ApiBlock::ToolUse { id, name, input: _ } => {
                // The start carries `input: {}`; the real input follows as
                // `input_json_delta` fragments.
                let call = self.calls;
                self.calls += 1;
                emit(Delta::ToolCall(ToolCallDelta {
                    index: call,
                    id: Some(id.clone()),
                    name: Some(name.clone()),
                    arguments_fragment: String::new(),
                }));
                return Some(OpenBlock {
                    block: Block::ToolUse { id, name, arguments: String::new() },
                    call,
                });
            }
            ApiBlock::Thinking { thinking, signature } => {
                if !thinking.is_empty() {
                    emit(Delta::Reasoning(thinking.clone()));
                }
                Block::Thinking(Thinking::Signed { thinking, signature })
            }
            ApiBlock::RedactedThinking { data } => Block::Thinking(Thinking::Redacted { data }),
            ApiBlock::Other => return None,
        };
        Some(OpenBlock { block, call: 0 })
    }
}

/// Adds one delta to its block and emits it.
fn apply(
    open: &mut OpenBlock,
    delta: BlockDelta,
    index: u64,
    emit: &mut dyn FnMut(Delta),
) -> Result<(), ProviderError> {
    match (&mut open.block, delta) {
        (Block::Text(text), BlockDelta::TextDelta { text: more }) => {
            text.push_str(&more);
            emit(Delta::Text(more));
        }
        (Block::ToolUse { arguments, .. }, BlockDelta::InputJsonDelta { partial_json }) => {
            arguments.push_str(&partial_json);
            emit(Delta::ToolCall(ToolCallDelta {
                index: open.call,
                id: None,
                name: None,
                arguments_fragment: partial_json,
            }));
        }
        (
            Block::Thinking(Thinking::Signed { thinking, .. }),
            BlockDelta::ThinkingDelta { thinking: more },
        ) => {
            thinking.push_str(&more);
            emit(Delta::Reasoning(more));
        }
        (
            Block::Thinking(Thinking::Signed { signature, .. }),
            BlockDelta::SignatureDelta { signature: more },
        ) => signature.push_str(&more),
        (_, BlockDelta::Other) => {}
        (block, delta) => {
            return Err(ProviderError::InvalidResponse(format!(
                "anthropic: content block {index} ({}) got a delta of another kind: {delta:?}",
                kind(block)
            )));
        }
    }
    Ok(())
}

fn kind(block: &Block) -> &'static str {
    match block {
        Block::Text(_) => "text",
        Block::ToolUse { .. } => "tool_use",
        Block::Thinking(Thinking::Signed { .. }) => "thinking",
        Block::Thinking(Thinking::Redacted { .. }) => "redacted_thinking",
    }
}

/// Reads a whole stream: `next` gives the body's chunks (`None` at the
/// end), `emit` receives the deltas as they arrive. Reading stops at
/// `message_stop`.
pub fn read(
    mut next: impl FnMut() -> Result<Option<Vec<u8>>, ProviderError>,
    emit: &mut dyn FnMut(Delta),
) -> Result<Reply, ProviderError> {
    let mut parser = SseParser::default();
    let mut assembler = Assembler::default();
    while let Some(chunk) = next()? {
        let mut events = Vec::new();
        // The events before a line that is not UTF-8 come first: they may
        // end the message or carry an error of their own.
        let fed = parser.feed(&chunk, &mut events);
        for event in events {
            assembler.event(&event, emit)?;
            if assembler.is_done() {
                return assembler.finish(false);
            }
        }
        fed?;
    }
    let (events, cut) = parser.finish()?;
    for event in events {
        assembler.event(&event, emit)?;
    }
    assembler.finish(cut)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::response::{self, tests::TOOL_USE_RESPONSE};
    use crate::settings::Prices;
    use reson_sdk::provider::{ContentPart, FinishReason};

    /// A streamed text answer, as the API sends it (with a multi-byte
    /// character so that splits land inside one).
    const TEXT_STREAM: &str = "event: message_start
data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1nZdL29xx5MUA1yADyHTEsnR8uuvGzszyY\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"claude-sonnet-4-5-20250929\",\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":25,\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":0,\"output_tokens\":1}}}

event: content_block_start
data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}

event: ping
data: {\"type\": \"ping\"}

event: content_block_delta
data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hello\"}}

event: content_block_delta
data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\" wörld 🌍!\"}}

event: content_block_stop
data: {\"type\":\"content_block_stop\",\"index\":0}

event: message_delta
data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":15}}

event: message_stop
data: {\"type\":\"message_stop\"}

";

    /// Thinking, then text, then a tool call whose input arrives in
    /// fragments, as in the API's documentation.
    const TOOL_STREAM: &str = r#"event: message_start
data: {"type":"message_start","message":{"id":"msg_014p7gG3wDgGV9EUtLvnow3U","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","stop_sequence":null,"usage":{"input_tokens":472,"output_tokens":2,"cache_read_input_tokens":100,"cache_creation_input_tokens":0},"content":[],"stop_reason":null}}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Need the weather"}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":" in San Francisco."}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"}}

event: content_block_stop
data: {"type":"content_block_stop","index":0}

event: content_block_start
data: {"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Okay, let's check the weather for San Francisco, CA:"}}

event: content_block_stop
data: {"type":"content_block_stop","index":1}

event: content_block_start
data: {"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_01T1x1fJ34qAmk2tNTrN7Up6","name":"get_weather","input":{}}}

event: content_block_delta
data: {"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"location\":"}}

event: content_block_delta
data: {"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":" \"San Fra"}}

event: content_block_delta
data: {"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"ncisco, CA\", \"unit\": \"fahrenheit\"}"}}

event: content_block_stop
data: {"type":"content_block_stop","index":2}

event: content_block_start
data: {"type":"content_block_start","index":3,"content_block":{"type":"tool_use","id":"toolu_02","name":"get_time","input":{}}}

event: content_block_stop
data: {"type":"content_block_stop","index":3}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":89}}

event: message_stop
data: {"type":"message_stop"}

"#;

    fn feed(parser: &mut SseParser, chunk: &[u8]) -> Result<Vec<SseEvent>, ProviderError> {
        let mut events = Vec::new();
        parser.feed(chunk, &mut events).map(|()| events)
    }

    fn collect(chunks: &[&[u8]]) -> (Result<Reply, ProviderError>, Vec<Delta>) {
        let mut chunks = chunks.iter().map(|c| c.to_vec());
        let mut deltas = Vec::new();
        let reply = read(|| Ok(chunks.next()), &mut |d| deltas.push(d));
        (reply, deltas)
    }

    fn whole(stream: &str) -> (Reply, Vec<Delta>) {
        let (reply, deltas) = collect(&[stream.as_bytes()]);
        (reply.unwrap(), deltas)
    }

    fn cut_off(result: Result<Reply, ProviderError>) -> String {
        match result {
            Err(ProviderError::Network(message)) => message,
            other => panic!("expected a network error, got {other:?}"),
        }
    }

    fn invalid(result: Result<Reply, ProviderError>) -> String {
        match result {
            Err(ProviderError::InvalidResponse(message)) => message,
            other => panic!("expected an invalid response, got {other:?}"),
        }
    }

    #[test]
    fn sse_parsing_follows_the_spec() {
        let mut parser = SseParser::default();
        let events = feed(
            &mut parser,
            b": comment\nevent: a\ndata: 1\ndata:2\nid: 7\nretry: 10\n\ndata: x\r\n\r\nevent: b\rdata\r\rdata: z\n\n",
        )
        .unwrap();
        assert_eq!(
            events,
            [
                SseEvent { event: "a".into(), data: "1\n2".into() },
                SseEvent { event: "message".into(), data: "x".into() },
                SseEvent { event: "b".into(), data: "".into() },
                SseEvent { event: "message".into(), data: "z".into() },
            ]
        );
        // An event name without data dispatches nothing and does not leak.
        assert_eq!(feed(&mut parser, b"event: lone\n\ndata: y\n\n").unwrap()[0].event, "message");
        let (rest, cut) = parser.finish().unwrap();
        assert!(rest.is_empty() && !cut);
    }

    #[test]
    fn a_trailing_carriage_return_waits_for_the_next_chunk() {
        let mut parser = SseParser::default();
        assert!(feed(&mut parser, b"data: a\r").unwrap().is_empty());
        // `\n` completes `\r\n`: one line end, not an extra blank line.
        assert!(feed(&mut parser, b"\n").unwrap().is_empty());
        assert_eq!(feed(&mut parser, b"\r").unwrap(), []);
        let (events, cut) = parser.finish().unwrap();
        assert_eq!(events, [SseEvent { event: "message".into(), data: "a".into() }]);
        assert!(!cut);
    }

    #[test]
    fn invalid_utf8_in_a_line_is_an_invalid_response() {
        let mut parser = SseParser::default();
        let err = feed(&mut parser, b"data: \xff\xfe\n").unwrap_err();
        assert!(matches!(err, ProviderError::InvalidResponse(m) if m.contains("UTF-8")));
    }

    #[test]
    fn blocks_keep_the_order_they_started_in() {
        // Found by fuzzing: blocks were ordered by the API's index, so a
        // stream that numbered them out of order returned a message in
        // another order than its deltas had shown.
        let stream = concat!(
            "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{}}}\n\n",
            "data: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"text\",\"text\":\"B\"}}\n\n",
            "data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"A\"}}\n\n",
            "data: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"text_delta\",\"text\":\"b\"}}\n\n",
            "data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"}}\n\n",
            "data: {\"type\":\"message_stop\"}\n\n",
        );
        let (reply, deltas) = whole(stream);
        assert_eq!(reply.blocks, [Block::Text("Bb".into()), Block::Text("A".into())]);
        let texts: Vec<_> = deltas
            .iter()
            .map(|d| match d {
                Delta::Text(t) => t.as_str(),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(texts, ["B", "A", "b"]);
    }

    #[test]
    fn a_line_that_is_not_utf8_fails_only_after_the_events_before_it() {
        // Found by fuzzing: the bad line used to fail the whole read it came
        // in, so the outcome depended on where the reads split the stream.
        let mut after_stop = TEXT_STREAM.as_bytes().to_vec();
        after_stop.extend_from_slice(b"data: \xff\n\n");
        let (reply, deltas) = collect(&[&after_stop]);
        assert!(reply.is_ok(), "{reply:?}");
        assert_eq!(deltas.len(), 2);
        let error = b"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"rate_limit_error\",\"message\":\"slow\"}}\n\ndata: \xff\n\n";
        assert!(matches!(collect(&[error]).0, Err(ProviderError::RateLimited(_))));
        let cut = TEXT_STREAM.find("event: content_block_stop").unwrap();
        let mut text = TEXT_STREAM.as_bytes()[..cut].to_vec();
        text.extend_from_slice(b": \xff\n");
        let (reply, deltas) = collect(&[&text]);
        assert!(invalid(reply).contains("UTF-8"));
        assert_eq!(deltas.len(), 2, "the text before the bad line still went out");
    }

    #[test]
    fn streamed_text_is_emitted_and_assembled() {
        let (reply, deltas) = whole(TEXT_STREAM);
        let texts: Vec<_> = deltas
            .iter()
            .map(|d| match d {
                Delta::Text(t) => t.as_str(),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(texts, ["Hello", " wörld 🌍!"]);
        let response = response::into_response(reply, "requested", &Prices::default());
        assert!(
            matches!(&response.message.content[..], [ContentPart::Text(t)] if t == "Hello wörld 🌍!")
        );
        assert!(matches!(response.finish_reason, FinishReason::Stop));
        assert_eq!(response.model, "claude-sonnet-4-5-20250929");
        assert_eq!((response.usage.prompt_tokens, response.usage.completion_tokens), (25, 15));
    }

    #[test]
    fn streamed_tool_call_arguments_are_joined_and_usage_comes_last() {
        let (reply, deltas) = whole(TOOL_STREAM);
        let prices = Prices { input: Some(1.0), output: Some(1.0), ..Prices::default() };
        let response = response::into_response(reply, "requested", &prices);
        let message = &response.message;
        assert!(matches!(response.finish_reason, FinishReason::ToolCalls));
        assert_eq!(message.reasoning.as_deref(), Some("Need the weather in San Francisco."));
        let data: serde_json::Value =
            serde_json::from_str(message.provider_data.as_deref().unwrap()).unwrap();
        assert_eq!(
            data["anthropic"]["thinking"][0]["signature"],
            "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"
        );
        assert!(matches!(&message.content[..], [ContentPart::Text(t)]
            if t == "Okay, let's check the weather for San Francisco, CA:"));
        assert_eq!(message.tool_calls.len(), 2);
        let call = &message.tool_calls[0];
        assert_eq!(
            (call.id.as_str(), call.name.as_str()),
            ("toolu_01T1x1fJ34qAmk2tNTrN7Up6", "get_weather")
        );
        assert_eq!(call.arguments, r#"{"location": "San Francisco, CA", "unit": "fahrenheit"}"#);
        assert_eq!(message.tool_calls[1].arguments, "{}");
        // message_start's input count survives message_delta's output count.
        let usage = &response.usage;
        assert_eq!(
            (usage.prompt_tokens, usage.completion_tokens, usage.cache_read_tokens),
            (472, 89, 100)
        );
        assert_eq!(response.cost, Some((472.0 + 89.0) / 1e6));

        let mut reasoning = String::new();
        let mut calls: Vec<Vec<&ToolCallDelta>> = vec![Vec::new(), Vec::new()];
        for delta in &deltas {
            match delta {
                Delta::Reasoning(r) => reasoning.push_str(r),
                Delta::ToolCall(call) => calls[call.index as usize].push(call),
                Delta::Text(_) => {}
            }
        }
        assert_eq!(reasoning, "Need the weather in San Francisco.");
        let first = &calls[0];
        assert_eq!(first[0].id.as_deref(), Some("toolu_01T1x1fJ34qAmk2tNTrN7Up6"));
        assert_eq!(first[0].name.as_deref(), Some("get_weather"));
        assert!(first[1..].iter().all(|f| f.id.is_none() && f.name.is_none()));
        let joined: String = first.iter().map(|f| f.arguments_fragment.as_str()).collect();
        assert_eq!(joined, call.arguments);
        assert_eq!(calls[1].len(), 1);
    }

    #[test]
    fn a_stream_gives_the_same_reply_however_it_is_split() {
        let crlf = TOOL_STREAM.replace('\n', "\r\n");
        for stream in [TEXT_STREAM, TOOL_STREAM, crlf.as_str()] {
            let bytes = stream.as_bytes();
            let (reference, reference_deltas) = whole(stream);
            let reference_deltas = format!("{reference_deltas:?}");
            let reference = format!("{reference:?}");
            for cut in 0..=bytes.len() {
                let (reply, deltas) = collect(&[&bytes[..cut], &bytes[cut..]]);
                assert_eq!(format!("{:?}", reply.unwrap()), reference, "split at {cut}");
                assert_eq!(format!("{deltas:?}"), reference_deltas);
            }
            let single: Vec<&[u8]> = bytes.chunks(1).collect();
            let (reply, _) = collect(&single);
            assert_eq!(format!("{:?}", reply.unwrap()), reference);
        }
    }

    #[test]
    fn reading_stops_at_message_stop() {
        let trailing = format!("{TEXT_STREAM}event: junk\ndata: not json\n\n");
        let mut chunks = vec![trailing.into_bytes()].into_iter();
        let reply = read(|| Ok(chunks.next()), &mut |_| {});
        assert!(reply.is_ok());
    }

    #[test]
    fn a_stream_cut_off_is_a_network_error() {
        let cut = TEXT_STREAM.find("event: message_delta").unwrap() + 30;
        let message = cut_off(collect(&[&TEXT_STREAM.as_bytes()[..cut]]).0);
        assert_eq!(
            message,
            "anthropic: the event stream ended before `message_stop` (after 6 events, in the \
             middle of an event)"
        );
        let between = TEXT_STREAM.find("event: message_stop").unwrap();
        let message = cut_off(collect(&[&TEXT_STREAM.as_bytes()[..between]]).0);
        assert_eq!(
            message,
            "anthropic: the event stream ended before `message_stop` (after 7 events)"
        );
        let message = cut_off(collect(&[]).0);
        assert_eq!(
            message,
            "anthropic: the event stream ended before `message_stop` (after no event at all)"
        );
    }

    #[test]
    fn error_events_become_provider_errors() {
        let stream = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"m\",\"usage\":{\"input_tokens\":3}}}\n\n\
                      event: error\ndata: {\"type\": \"error\", \"error\": {\"type\": \"overloaded_error\", \"message\": \"Overloaded\"}}\n\n";
        let (result, _) = collect(&[stream.as_bytes()]);
        assert!(matches!(result, Err(ProviderError::Server(s)) if s.status == 529
            && s.message == "anthropic: error event in the stream: overloaded_error: Overloaded"));
        let early = "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"rate_limit_error\",\"message\":\"slow\"}}\n\n";
        assert!(matches!(collect(&[early.as_bytes()]).0, Err(ProviderError::RateLimited(_))));
    }

    #[test]
    fn protocol_violations_are_invalid_responses() {
        let start = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{}}}\n\n";
        let cases = [
            ("data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n".to_owned(),
             "a `message` event came before `message_start`"),
            (format!("{start}data: {{\"type\":\"content_block_delta\",\"index\":4,\"delta\":{{\"type\":\"text_delta\",\"text\":\"x\"}}}}\n\n"),
             "a delta for content block 4, which never started"),
            (format!("{start}data: {{\"type\":\"content_block_start\",\"index\":0,\"content_block\":{{\"type\":\"text\",\"text\":\"\"}}}}\n\n\
                      data: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"input_json_delta\",\"partial_json\":\"{{\"}}}}\n\n"),
             "content block 0 (text) got a delta of another kind"),
            (format!("{start}data: {{\"type\":\"content_block_start\",\"index\":0,\"content_block\":{{\"type\":\"text\",\"text\":\"\"}}}}\n\n\
                      data: {{\"type\":\"content_block_start\",\"index\":0,\"content_block\":{{\"type\":\"text\",\"text\":\"\"}}}}\n\n"),
             "content block 0 started twice"),
            (format!("{start}event: message_stop\ndata: {{\"type\":\"message_stop\"}}\n\n"),
             "carried no stop_reason"),
            (format!("{start}event: content_block_delta\ndata: {{\"type\":\"content_block_delta\"}}\n\n"),
             "invalid `content_block_delta` event in the stream: missing field `index`"),
            ("event: message_start\ndata: [DONE]\n\n".to_owned(), "invalid `message_start` event"),
        ];
        for (stream, expected) in cases {
            let message = invalid(collect(&[stream.as_bytes()]).0);
            assert!(message.contains(expected), "{message}");
        }
    }

    #[test]
    fn unknown_events_blocks_and_deltas_are_skipped() {
        let stream = TEXT_STREAM.replace(
            "event: ping",
            "event: future_event\ndata: {\"type\":\"future_event\",\"x\":1}\n\n\
             event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":5,\"content_block\":{\"type\":\"server_tool_use\",\"id\":\"srvtoolu_1\",\"name\":\"web_search\",\"input\":{}}}\n\n\
             event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":5,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{}\"}}\n\n\
             event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"citations_delta\",\"citation\":{}}}\n\n\
             event: ping",
        );
        let (reply, deltas) = whole(&stream);
        assert_eq!(reply.blocks, [Block::Text("Hello wörld 🌍!".into())]);
        assert_eq!(deltas.len(), 2);
    }

    /// A tiny xorshift64 generator, so the property tests are reproducible
    /// without a crate.
    struct XorShift(u64);

    impl XorShift {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    /// Random bytes drawn mostly from the characters that matter to the
    /// parsers, so that inputs get past the first byte.
    fn random_input(rng: &mut XorShift) -> Vec<u8> {
        const PIECES: &[&[u8]] = &[
            b"event: ",
            b"data: ",
            b"\n",
            b"\r",
            b"\r\n",
            b":",
            b"{",
            b"}",
            b"\"",
            b"type",
            b"message_start",
            b"message_stop",
            b"content_block_delta",
            b"index",
            b"0",
            b"\xf0\x9f",
            b"\xff",
            b" ",
            b"error",
        ];
        let len = rng.below(200);
        let mut bytes = Vec::new();
        for _ in 0..len {
            if rng.below(3) == 0 {
                bytes.push(rng.next() as u8);
            } else {
                bytes.extend_from_slice(PIECES[rng.below(PIECES.len())]);
            }
        }
        bytes
    }

    #[test]
    fn random_bytes_never_panic_and_never_pass_as_a_reply() {
        let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
        for _ in 0..2000 {
            let bytes = random_input(&mut rng);
            assert!(response::parse(&bytes).is_err(), "{bytes:?}");
            let split = rng.below(bytes.len() + 1);
            assert!(collect(&[&bytes[..split], &bytes[split..]]).0.is_err(), "{bytes:?}");
            let status = 400 + rng.below(200) as u16;
            let _ = error::from_status(status, &[], &bytes, "ANTHROPIC_API_KEY");
            let _ = crate::thinking::api_blocks(std::str::from_utf8(&bytes).ok());
        }
    }

    #[test]
    fn every_truncation_of_a_real_response_is_an_error() {
        for stream in [TEXT_STREAM, TOOL_STREAM] {
            let bytes = stream.as_bytes();
            // Dropping only the final blank line leaves `message_stop`
            // undispatched, so every strict prefix must fail, as a cut
            // connection.
            for cut in 0..bytes.len() {
                let (result, _) = collect(&[&bytes[..cut]]);
                assert!(
                    matches!(result, Err(ProviderError::Network(_))),
                    "prefix of {cut} bytes: {result:?}"
                );
            }
        }
        let body = TOOL_USE_RESPONSE.as_bytes();
        for cut in 0..body.trim_ascii_end().len() {
            assert!(
                matches!(response::parse(&body[..cut]), Err(ProviderError::InvalidResponse(_))),
                "prefix of {cut} bytes"
            );
        }
    }
}
