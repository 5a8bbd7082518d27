//! One language server over stdio: JSON-RPC messages framed with
//! `Content-Length`, requests answered by id, the server's own requests
//! answered with nothing, and the diagnostics it publishes kept by
//! document.

use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{oneshot, watch};

/// The largest message taken from a server.
const MAX_MESSAGE: usize = 16 << 20;

type Reply = oneshot::Sender<Result<Value, String>>;

/// Diagnostics published for one document, and how many times they were.
#[derive(Debug, Clone, Default)]
pub(super) struct Published {
    pub(super) times: u64,
    pub(super) diagnostics: Vec<Value>,
}

/// What the reader hands over to callers.
#[derive(Default)]
struct Shared {
    pending: Mutex<HashMap<u64, Reply>>,
    published: Mutex<HashMap<String, Published>>,
}

/// Where messages to the server go, shared by callers and the reader (which
/// answers the server's requests).
type Writer = std::sync::Arc<tokio::sync::Mutex<Box<dyn AsyncWrite + Send + Unpin>>>;

/// Writes one framed message.
async fn write(writer: &Writer, message: &Value) -> std::io::Result<()> {
    let body = message.to_string();
    let mut writer = writer.lock().await;
    writer.write_all(format!("Content-Length: {}\r\n\r\n", body.len()).as_bytes()).await?;
    writer.write_all(body.as_bytes()).await?;
    writer.flush().await
}

/// A connection to a running server.
pub(super) struct Client {
    writer: Writer,
    shared: std::sync::Arc<Shared>,
    next_id: AtomicU64,
    /// Ticks on every publication; errs once the server's output ended.
    published: watch::Receiver<u64>,
}

impl Client {
    /// Talks to a server writing to `input` and reading `output`; a task
    /// reads until the output ends.
    pub(super) fn new(
        input: impl AsyncWrite + Send + Unpin + 'static,
        output: impl AsyncBufRead + Send + Unpin + 'static,
    ) -> Self {
        let shared = std::sync::Arc::new(Shared::default());
        let (tick, published) = watch::channel(0);
        let writer: Writer = std::sync::Arc::new(tokio::sync::Mutex::new(Box::new(input)));
        tokio::spawn(read(output, shared.clone(), tick, writer.clone()));
        Self { writer, shared, next_id: AtomicU64::new(1), published }
    }

    async fn send(&self, message: &Value) -> std::io::Result<()> {
        write(&self.writer, message).await
    }

    /// Sends request `method` and waits up to `limit` for its result.
    pub(super) async fn request(
        &self,
        method: &str,
        params: Value,
        limit: Duration,
    ) -> Result<Value, String> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (reply, answer) = oneshot::channel();
        self.shared.pending.lock().expect("pending").insert(id, reply);
        let message = json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params });
        self.send(&message).await.map_err(|e| format!("writing to the server: {e}"))?;
        match tokio::time::timeout(limit, answer).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err("the server ended".into()),
            Err(_) => {
                self.shared.pending.lock().expect("pending").remove(&id);
                Err(format!("no answer to `{method}` within {} ms", limit.as_millis()))
            }
        }
    }

    /// Sends notification `method`.
    pub(super) async fn notify(&self, method: &str, params: Value) -> Result<(), String> {
        let message = json!({ "jsonrpc": "2.0", "method": method, "params": params });
        self.send(&message).await.map_err(|e| format!("writing to the server: {e}"))
    }

    /// Whether the server's output ended (it exited or crashed).
    pub(super) fn ended(&self) -> bool {
        self.published.has_changed().is_err()
    }

    /// What was published for `uri` so far.
    pub(super) fn published(&self, uri: &str) -> Published {
        self.shared.published.lock().expect("published").get(uri).cloned().unwrap_or_default()
    }

    /// Waits until `uri` has been published more than `times` times, or
    /// `limit` passes; what was published then.
    pub(super) async fn published_after(
        &self,
        uri: &str,
        times: u64,
        limit: Duration,
    ) -> Option<Published> {
        let mut ticks = self.published.clone();
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let now = self.published(uri);
            if now.times > times {
                return Some(now);
            }
            match tokio::time::timeout_at(deadline, ticks.changed()).await {
                Ok(Ok(())) => {}
                _ => return None,
            }
        }
    }
}

/// Reads messages until the output ends or is not the protocol.
async fn read(
    mut output: impl AsyncBufRead + Unpin,
    shared: std::sync::Arc<Shared>,
    tick: watch::Sender<u64>,
    writer: Writer,
) {
    while let Some(message) = next_message(&mut output).await {
        let id = message.get("id").cloned();
        match (message.get("method").and_then(Value::as_str), id) {
            (Some("textDocument/publishDiagnostics"), None) => {
                let params = &message["params"];
                let Some(uri) = params["uri"].as_str() else { continue };
                let diagnostics = params["diagnostics"].as_array().cloned().unwrap_or_default();
                let mut published = shared.published.lock().expect("published");
                let entry = published.entry(uri.to_owned()).or_default();
                entry.times += 1;
                entry.diagnostics = diagnostics;
                drop(published);
                tick.send_modify(|n| *n += 1);
            }
            // A request of the server's (configuration, progress,
            // registrations): answered with nothing, which servers take.
            (Some(method), Some(id)) => {
                let result = if method == "workspace/configuration" {
                    let items = message["params"]["items"].as_array().map_or(0, Vec::len);
                    Value::Array(vec![Value::Null; items])
                } else {
                    Value::Null
                };
                let answer = json!({ "jsonrpc": "2.0", "id": id, "result": result });
                if write(&writer, &answer).await.is_err() {
                    break;
                }
            }
            (Some(_), None) => {}
            (None, Some(id)) => {
                let Some(id) = id.as_u64() else { continue };
                let Some(reply) = shared.pending.lock().expect("pending").remove(&id) else {
                    continue;
                };
                let result = match message.get("error") {
                    Some(error) => Err(error["message"].as_str().unwrap_or("an error").to_owned()),
                    None => Ok(message.get("result").cloned().unwrap_or(Value::Null)),
                };
                let _ = reply.send(result);
            }
            (None, None) => {}
        }
    }
    // The output ended: whoever waits hears it.
    shared.pending.lock().expect("pending").clear();
    drop(tick);
}

/// The next framed message; `None` at the end or on a framing error.
async fn next_message(output: &mut (impl AsyncBufRead + Unpin)) -> Option<Value> {
    let mut length = None;
    loop {
        let mut line = String::new();
        if output.read_line(&mut line).await.ok()? == 0 {
            return None;
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse::<usize>().ok();
        }
    }
    let length = length.filter(|&n| n <= MAX_MESSAGE)?;
    let mut body = vec![0; length];
    output.read_exact(&mut body).await.ok()?;
    serde_json::from_slice(&body).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(value: Value) -> Vec<u8> {
        let body = value.to_string();
        format!("Content-Length: {}\r\n\r\n{body}", body.len()).into_bytes()
    }

    #[tokio::test]
    async fn answers_reach_their_requests_and_publications_are_kept() {
        let (client_end, mut server_end) = tokio::io::duplex(1 << 16);
        let (to_client, from_server) = tokio::io::duplex(1 << 16);
        let client = Client::new(client_end, tokio::io::BufReader::new(from_server));
        let mut to_client = to_client;
        let server = tokio::spawn(async move {
            let mut reader = tokio::io::BufReader::new(&mut server_end);
            let request = next_message(&mut reader).await.unwrap();
            assert_eq!(request["method"], "initialize");
            // The server asks something of its own first.
            to_client.write_all(&frame(json!({ "jsonrpc": "2.0", "id": 90, "method": "workspace/configuration", "params": { "items": [{}, {}] } }))).await.unwrap();
            let answer = next_message(&mut reader).await.unwrap();
            assert_eq!(answer, json!({ "jsonrpc": "2.0", "id": 90, "result": [null, null] }));
            to_client.write_all(&frame(json!({ "jsonrpc": "2.0", "method": "textDocument/publishDiagnostics", "params": { "uri": "file:///a.py", "diagnostics": [{ "message": "x" }] } }))).await.unwrap();
            to_client.write_all(&frame(json!({ "jsonrpc": "2.0", "id": request["id"], "result": { "capabilities": {} } }))).await.unwrap();
            to_client
        });
        let result =
            client.request("initialize", json!({}), Duration::from_secs(10)).await.unwrap();
        assert_eq!(result, json!({ "capabilities": {} }));
        let published =
            client.published_after("file:///a.py", 0, Duration::from_secs(10)).await.unwrap();
        assert_eq!((published.times, published.diagnostics.len()), (1, 1));
        let to_client = server.await.unwrap();
        drop(to_client);
        let ended = client.request("shutdown", Value::Null, Duration::from_secs(10)).await;
        assert!(ended.is_err(), "{ended:?}");
        assert_eq!(
            client
                .published_after("file:///b.py", 0, Duration::from_millis(50))
                .await
                .map(|p| p.times),
            None
        );
    }
}
