//! The stdio transport: one JSON-RPC message per line. rmcp's own drops a
//! line over its limit without a word, so a client that sent one waited
//! for its answer forever; this one answers it with a JSON-RPC error that
//! carries the request's id when the start of the line holds one, and
//! `null` otherwise. JSON that is not a message MCP knows gets the same
//! kind of answer (rmcp's carries no id).

use rmcp::RoleServer;
use rmcp::model::{
    ClientRequest, ErrorData, GetMeta as _, JsonRpcMessage, ProtocolVersion, RequestId,
    ServerResult,
};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::transport::async_rw::{JsonRpcMessageCodec, JsonRpcMessageCodecError};
use serde::de::{Deserializer as _, IgnoredAny, MapAccess, Visitor};
use std::sync::Arc;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::Mutex;
use tokio_util::bytes::BytesMut;
use tokio_util::codec::Decoder as _;
use tokio_util::task::TaskTracker;

/// The longest line read, newline included: rmcp's limit, the largest SSE
/// event its HTTP transport takes.
pub(crate) const MAX_LINE: usize = rmcp::transport::async_rw::DEFAULT_MAX_LINE_LENGTH;

/// How much of a line's start is searched for its id: JSON-RPC clients
/// write `jsonrpc` and `id` before `params`.
const ID_WINDOW: usize = 4096;

/// Newline-delimited JSON-RPC over a reader and a writer (stdin and
/// stdout).
pub(crate) struct LineTransport<R, W> {
    read: BufReader<R>,
    /// The line read so far. It lives here, not in `receive`, because rmcp
    /// polls `receive` in a `select!` and may drop it mid-line.
    line: BytesMut,
    /// The rest of a line over the limit is being skipped.
    skipping: bool,
    max_line: usize,
    /// rmcp's parsing, with its allowances for clients' quirks.
    codec: JsonRpcMessageCodec<RxJsonRpcMessage<RoleServer>>,
    write: Arc<Mutex<W>>,
    /// The errors being written, waited for at close.
    answers: TaskTracker,
    /// rmcp's handshake is over: it answered an `initialize`, or took a
    /// request that carries its own metadata.
    open: bool,
}

/// What one read of a line found.
enum Line {
    /// A whole line (with its newline) is in `line`.
    Whole,
    /// A line over the limit was skipped; the id its start held.
    Oversized(Option<RequestId>),
    /// The reader ended or failed.
    End,
}

impl<R, W> LineTransport<R, W>
where
    R: AsyncRead + Send + Unpin,
    W: AsyncWrite + Send + Unpin + 'static,
{
    /// Reads `read` and writes `write`, taking lines of up to `max_line`
    /// bytes.
    pub(crate) fn new(read: R, write: W, max_line: usize) -> Self {
        Self {
            read: BufReader::new(read),
            line: BytesMut::new(),
            skipping: false,
            max_line,
            codec: JsonRpcMessageCodec::new(),
            write: Arc::new(Mutex::new(write)),
            answers: TaskTracker::new(),
            open: false,
        }
    }

    /// Reads the next line into `line`, never holding more than
    /// `max_line` bytes of it. Every change of state happens after an
    /// await, with none between, so a dropped call loses nothing.
    async fn read_line(&mut self) -> Line {
        loop {
            let available = match self.read.fill_buf().await {
                Ok([]) => return Line::End,
                Ok(available) => available,
                Err(e) => {
                    tracing::error!("mcp stdio: reading: {e}");
                    return Line::End;
                }
            };
            let newline = available.iter().position(|b| *b == b'\n');
            let take = newline.map_or(available.len(), |at| at + 1);
            let mut found = None;
            if self.skipping {
                self.skipping = newline.is_none();
            } else if self.line.len() + take > self.max_line {
                let room = self.max_line - self.line.len();
                self.line.extend_from_slice(&available[..room]);
                found = Some(Line::Oversized(sniff_id(&self.line)));
                self.line.clear();
                self.skipping = newline.is_none();
            } else {
                self.line.extend_from_slice(&available[..take]);
                found = newline.map(|_| Line::Whole);
            }
            self.read.consume(take);
            if let Some(found) = found {
                return found;
            }
        }
    }

    /// Sends a JSON-RPC error for a line that got no message through.
    fn answer(&self, message: String, id: Option<RequestId>) {
        // JSON-RPC 2.0 wants `"id": null` when the id cannot be read; rmcp's
        // own error type leaves the field out then.
        let error = ErrorData::invalid_request(message, None);
        let mut line =
            serde_json::json!({ "jsonrpc": "2.0", "id": id, "error": error }).to_string();
        line.push('\n');
        // A task of its own: rmcp may drop `receive` at any await, and half
        // a line written would break the stream.
        self.answers.spawn(write_line(self.write.clone(), line.into_bytes()));
    }
}

/// Writes one whole line, under the lock every message takes.
async fn write_line<W: AsyncWrite + Unpin>(
    write: Arc<Mutex<W>>,
    line: Vec<u8>,
) -> std::io::Result<()> {
    let mut write = write.lock().await;
    write.write_all(&line).await?;
    write.flush().await
}

impl<R, W> Transport<RoleServer> for LineTransport<R, W>
where
    R: AsyncRead + Send + Unpin,
    W: AsyncWrite + Send + Unpin + 'static,
{
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), std::io::Error>> + Send + 'static {
        if let JsonRpcMessage::Response(response) = &item
            && matches!(response.result, ServerResult::InitializeResult(_))
        {
            self.open = true;
        }
        let write = self.write.clone();
        async move {
            let mut line = serde_json::to_vec(&item)?;
            line.push(b'\n');
            write_line(write, line).await
        }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        loop {
            match self.read_line().await {
                Line::Whole => {}
                Line::Oversized(id) => {
                    let limit = self.max_line;
                    tracing::warn!("mcp stdio: skipped a message over {limit} bytes (id {id:?})");
                    self.answer(format!("the message is over the limit of {limit} bytes"), id);
                    continue;
                }
                // A line cut by the end has no newline: nothing to deliver.
                Line::End => return None,
            }
            // The codec consumes the line; an error's answer needs its id.
            let head = self.line[..self.line.len().min(ID_WINDOW)].to_vec();
            let mut line = self.line.split();
            match self.codec.decode(&mut line) {
                Ok(Some(message)) if self.open => return Some(message),
                Ok(Some(JsonRpcMessage::Request(request))) => {
                    self.open = serves_outright(&request.request);
                    return Some(JsonRpcMessage::Request(request));
                }
                // rmcp would end the session on it; a notification needs
                // no answer, and a response answers nothing of the server's.
                Ok(Some(_)) => {
                    tracing::debug!("mcp stdio: ignoring a message before the handshake")
                }
                // What rmcp skips: a notification outside MCP, or anything
                // named `notifications/...` that it does not know. One with
                // an id is a request, and its sender waits for an answer.
                Ok(None) => {
                    if let Some(id) = sniff_id(&head) {
                        self.answer("not a JSON-RPC message MCP knows".into(), Some(id));
                    }
                }
                Err(JsonRpcMessageCodecError::Serde(e))
                    if e.classify() == serde_json::error::Category::Data =>
                {
                    self.answer(format!("not a JSON-RPC message MCP knows: {e}"), sniff_id(&head));
                }
                // Text that is not JSON gets no answer, as in rmcp and the
                // other SDKs: a peer that echoed it would start an endless
                // exchange of errors.
                Err(e) => tracing::debug!("mcp stdio: ignoring a line: {e}"),
            }
        }
    }

    /// Waits for the errors still being written: the client may have
    /// closed its side right after the line they answer.
    async fn close(&mut self) -> Result<(), std::io::Error> {
        self.answers.close();
        self.answers.wait().await;
        self.write.lock().await.flush().await
    }
}

/// Whether rmcp's handshake serves `request` as the first of the session
/// (2026-07-28, which has no `initialize`): it carries the metadata of a
/// version the server speaks, and is not one of the requests answered
/// during the handshake.
fn serves_outright(request: &ClientRequest) -> bool {
    if matches!(
        request,
        ClientRequest::InitializeRequest(_)
            | ClientRequest::PingRequest(_)
            | ClientRequest::DiscoverRequest(_)
    ) {
        return false;
    }
    let meta = request.get_meta();
    let supported = ProtocolVersion::known_up_to(&crate::PROTOCOL_VERSION);
    meta.missing_required_keys(&ProtocolVersion::V_2026_07_28).is_empty()
        && meta.protocol_version().is_some_and(|version| supported.contains(&version))
}

/// The `id` of the JSON-RPC object that `line` starts, when it comes
/// within the first [`ID_WINDOW`] bytes.
fn sniff_id(line: &[u8]) -> Option<RequestId> {
    /// Reads an object's keys in order until `id`, and keeps its value.
    struct IdOf<'a>(&'a mut Option<RequestId>);

    impl<'de> Visitor<'de> for IdOf<'_> {
        type Value = ();

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a JSON-RPC message")
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            while let Some(key) = map.next_key::<String>()? {
                if key == "id" {
                    *self.0 = Some(map.next_value()?);
                    return Ok(());
                }
                map.next_value::<IgnoredAny>()?;
            }
            Ok(())
        }
    }

    let head = &line[..line.len().min(ID_WINDOW)];
    let head = head.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(head);
    let mut id = None;
    // The window usually ends inside the object, so the parse as a whole
    // fails; what it found before then is all that counts.
    let _ = serde_json::Deserializer::from_slice(head).deserialize_map(IdOf(&mut id));
    id
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};
    use tokio::io::AsyncBufReadExt;

    #[test]
    fn the_id_is_read_from_the_start_of_a_line() {
        let number = sniff_id(br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"x":"#);
        assert_eq!(number, Some(RequestId::Number(7)));
        let string = sniff_id(br#"  {"method":"ping","params":{"id":1},"id":"a\"b","#);
        assert_eq!(string, Some(RequestId::String("a\"b".into())), "nested ids are not it");
        let bom = sniff_id(b"\xEF\xBB\xBF{\"id\":3");
        assert_eq!(bom, Some(RequestId::Number(3)));
        for none in [
            &br#"{"jsonrpc":"2.0","method":"notifications/x","params":"#[..],
            br#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#,
            br#"{"id":1.5}"#,
            br#"[{"id":1}]"#,
            b"not json",
            b"",
        ] {
            assert_eq!(sniff_id(none), None, "{}", String::from_utf8_lossy(none));
        }
        let late = format!(r#"{{"params":"{}","id":4}}"#, "x".repeat(ID_WINDOW));
        assert_eq!(sniff_id(late.as_bytes()), None, "only the start of a line is searched");
    }

    /// A transport over in-memory pipes with lines of at most `max`
    /// bytes: its client's writer and reader.
    fn transport(
        max: usize,
    ) -> (
        LineTransport<tokio::io::DuplexStream, tokio::io::DuplexStream>,
        tokio::io::DuplexStream,
        tokio::io::Lines<BufReader<tokio::io::DuplexStream>>,
    ) {
        let (client_in, server_in) = tokio::io::duplex(1 << 16);
        let (server_out, client_out) = tokio::io::duplex(1 << 16);
        let transport = LineTransport::new(server_in, server_out, max);
        (transport, client_in, BufReader::new(client_out).lines())
    }

    async fn next_line(lines: &mut tokio::io::Lines<BufReader<tokio::io::DuplexStream>>) -> Value {
        let line = lines.next_line().await.unwrap().expect("a line");
        serde_json::from_str(&line).unwrap()
    }

    #[tokio::test]
    async fn a_line_over_the_limit_gets_an_error_and_the_next_one_is_read() {
        let (mut transport, mut client, mut answers) = transport(200);
        let long = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"ping\",\"params\":{{\"x\":\"{}\"}}}}\n",
            "y".repeat(300)
        );
        let anonymous = format!(
            "{{\"jsonrpc\":\"2.0\",\"method\":\"x\",\"params\":\"{}\"}}\n",
            "z".repeat(300)
        );
        let ping = "{\"jsonrpc\":\"2.0\",\"id\":8,\"method\":\"ping\"}\n";
        let input = [long.as_str(), &anonymous, ping].concat();
        let writing = tokio::spawn(async move {
            client.write_all(input.as_bytes()).await.unwrap();
            client
        });
        let message = transport.receive().await.expect("the ping after the long lines");
        let message = serde_json::to_value(message).unwrap();
        assert_eq!((&message["id"], &message["method"]), (&json!(8), &json!("ping")));

        // Each answer is written by a task of its own: in either order.
        let mut errors = [next_line(&mut answers).await, next_line(&mut answers).await];
        errors.sort_by_key(|e| e["id"].is_null());
        let [with_id, without] = errors;
        assert_eq!((&with_id["id"], &with_id["error"]["code"]), (&json!(7), &json!(-32600)));
        let message = with_id["error"]["message"].as_str().unwrap();
        assert!(message.contains("limit of 200 bytes"), "{message}");
        assert!(without.as_object().unwrap().contains_key("id"), "`id` is null, not left out");
        assert_eq!(without["error"]["code"], -32600);

        // A line of exactly the limit, newline included, is whole.
        let ping = "{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"ping\"}";
        let fits = format!("{ping}{}\n", " ".repeat(200 - 1 - ping.len()));
        let mut client = writing.await.unwrap();
        client.write_all(fits.as_bytes()).await.unwrap();
        let message = serde_json::to_value(transport.receive().await.unwrap()).unwrap();
        assert_eq!(message["id"], 9);
        drop(client);
        assert!(transport.receive().await.is_none(), "the end of input ends the transport");
    }

    #[tokio::test]
    async fn the_answer_to_a_last_line_is_written_before_close_returns() {
        let (mut transport, mut client, mut answers) = transport(100);
        let long = format!("{{\"id\":5,\"params\":\"{}\"}}\n", "p".repeat(200));
        client.write_all(long.as_bytes()).await.unwrap();
        drop(client);
        assert!(transport.receive().await.is_none());
        transport.close().await.unwrap();
        drop(transport);
        assert_eq!(next_line(&mut answers).await["id"], 5);
    }

    #[tokio::test]
    async fn a_request_rmcp_skips_as_a_notification_gets_an_error() {
        let (mut transport, mut client, mut answers) = transport(MAX_LINE);
        // Found by the mcp_server fuzz target: this went unanswered.
        let input = "{\"jsonrpc\":\"2.0\",\"id\":10,\"method\":\"notifications/foo\",\"params\":7}\n\
                     {\"jsonrpc\":\"2.0\",\"method\":\"notifications/foo\",\"params\":7}\n\
                     {\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\"}\n";
        client.write_all(input.as_bytes()).await.unwrap();
        let message = serde_json::to_value(transport.receive().await.unwrap()).unwrap();
        assert_eq!(message["id"], 2, "the lines before were not messages: {message}");
        let answer = next_line(&mut answers).await;
        assert_eq!((&answer["id"], &answer["error"]["code"]), (&json!(10), &json!(-32600)));
        drop(client);
        assert!(transport.receive().await.is_none());
        transport.close().await.unwrap();
        drop(transport);
        assert!(answers.next_line().await.unwrap().is_none(), "the notification is not answered");
    }

    #[tokio::test]
    async fn a_message_mcp_does_not_know_gets_an_error_with_its_id() {
        let (mut transport, mut client, mut answers) = transport(MAX_LINE);
        let input = "{\"jsonrpc\":\"2.0\",\"id\":\"q\",\"method\":\"tools/call\",\"params\":7}\n\
                     not json at all\n\
                     {\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\"}\n";
        client.write_all(input.as_bytes()).await.unwrap();
        let message = serde_json::to_value(transport.receive().await.unwrap()).unwrap();
        assert_eq!(message["id"], 2, "the lines before were not messages: {message}");
        let answer = next_line(&mut answers).await;
        assert_eq!((&answer["id"], &answer["error"]["code"]), (&json!("q"), &json!(-32600)));
        drop(client);
        assert!(transport.receive().await.is_none());
        transport.close().await.unwrap();
        drop(transport);
        assert!(answers.next_line().await.unwrap().is_none(), "nothing answered the text");
    }
}
