//! A real HTTP/1.1 server on 127.0.0.1 for provider tests: it records every
//! request and answers with canned replies in order — JSON bodies, or
//! server-sent events written piece by piece with delays, so streaming,
//! cut-off streams and slow streams are the real thing on the wire.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One canned reply.
#[derive(Clone, Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    /// Body pieces, each written after its delay.
    pub chunks: Vec<(Duration, Vec<u8>)>,
}

impl Reply {
    /// A JSON body.
    pub fn json(status: u16, body: &serde_json::Value) -> Self {
        Self::raw(status, "application/json", body.to_string())
    }

    /// Any body with a content type.
    pub fn raw(status: u16, content_type: &str, body: impl Into<Vec<u8>>) -> Self {
        Self {
            status,
            headers: vec![("content-type".into(), content_type.into())],
            chunks: vec![(Duration::ZERO, body.into())],
        }
    }

    /// An SSE stream: each item is written as its own piece (include the
    /// `data: ...\n\n` framing yourself, so tests can split events anywhere).
    pub fn sse(pieces: impl IntoIterator<Item = impl Into<String>>) -> Self {
        Self {
            status: 200,
            headers: vec![("content-type".into(), "text/event-stream".into())],
            chunks: pieces
                .into_iter()
                .map(|p| (Duration::from_millis(5), p.into().into_bytes()))
                .collect(),
        }
    }

    /// Adds a header.
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Waits `delay` before each piece.
    pub fn paced(mut self, delay: Duration) -> Self {
        for chunk in &mut self.chunks {
            chunk.0 = delay;
        }
        self
    }
}

/// A request the server received.
#[derive(Clone, Debug)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Recorded {
    /// The body as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("request body is JSON")
    }

    /// A header's value (case-insensitive name).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

/// The server; it stops with the test process.
pub struct LlmServer {
    pub addr: String,
    requests: Arc<Mutex<Vec<Recorded>>>,
}

impl LlmServer {
    /// Serves `replies` in order, one per request; past the last, 500.
    pub fn start(replies: Vec<Reply>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let seen = requests.clone();
        std::thread::spawn(move || {
            let mut replies = replies.into_iter();
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let Some(request) = read_request(&stream) else { continue };
                seen.lock().unwrap().push(request);
                let reply = replies.next().unwrap_or_else(|| {
                    Reply::json(
                        500,
                        &serde_json::json!({"error": {"message": "test server: no more replies"}}),
                    )
                });
                // Each reply on its own thread, so a slow stream does not
                // hold up the next request (a retry after a timeout).
                std::thread::spawn(move || write_reply(stream, &reply));
            }
        });
        Self { addr, requests }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().unwrap().clone()
    }
}

fn read_request(stream: &TcpStream) -> Option<Recorded> {
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next()?.to_owned(), parts.next()?.to_owned());
    let mut headers = Vec::new();
    loop {
        let mut header = String::new();
        reader.read_line(&mut header).ok()?;
        let header = header.trim_end();
        if header.is_empty() {
            break;
        }
        let (k, v) = header.split_once(':')?;
        headers.push((k.trim().to_owned(), v.trim().to_owned()));
    }
    let length = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse::<usize>().ok())
        .unwrap_or(0);
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some(Recorded { method, path, headers, body })
}

fn write_reply(mut stream: TcpStream, reply: &Reply) {
    let reason = match reply.status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        _ => "Status",
    };
    let mut head = format!("HTTP/1.1 {} {reason}\r\nconnection: close\r\n", reply.status);
    for (k, v) in &reply.headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    // Without a length the body runs to the close, as SSE streams do.
    head.push_str("\r\n");
    if stream.write_all(head.as_bytes()).is_err() {
        return;
    }
    for (delay, piece) in &reply.chunks {
        std::thread::sleep(*delay);
        if stream.write_all(piece).and_then(|()| stream.flush()).is_err() {
            return;
        }
    }
}

/// Replies in the shape of OpenAI's chat completions API.
pub mod openai {
    use super::Reply;
    use serde_json::{Value, json};

    /// A whole text answer with its token counts.
    pub fn text(text: &str, prompt: u64, completion: u64) -> Reply {
        Reply::json(
            200,
            &json!({
                "id": "chatcmpl-1", "object": "chat.completion", "model": "gpt-test",
                "choices": [{ "index": 0, "message": { "role": "assistant", "content": text }, "finish_reason": "stop" }],
                "usage": { "prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion }
            }),
        )
    }

    /// An answer calling one tool.
    pub fn tool_call(id: &str, name: &str, args: Value) -> Reply {
        Reply::json(
            200,
            &json!({
                "id": "chatcmpl-2", "object": "chat.completion", "model": "gpt-test",
                "choices": [{ "index": 0, "finish_reason": "tool_calls", "message": { "role": "assistant", "content": null,
                    "tool_calls": [{ "id": id, "type": "function", "function": { "name": name, "arguments": args.to_string() } }] } }],
                "usage": { "prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15 }
            }),
        )
    }

    /// An error answer.
    pub fn error(status: u16, message: &str) -> Reply {
        Reply::json(status, &json!({ "error": { "message": message, "type": "test_error" } }))
    }
}
