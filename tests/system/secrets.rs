//! Secrets against servers that try to hand them back: a real echo server on
//! 127.0.0.1 reflects the request (line, query, path, headers) in its body
//! and its response headers in every encoding, plainly or chunked and split
//! mid-secret, to the `hostile` guest's `http` tool; the real `openai`
//! provider meets a 401 and an answer that repeat the key; and everything
//! the host wrote (what the guest got, stdout, stderr at debug level, every
//! trace file, the lock file) is searched for every form of the secret.
//! Also: bindings, placement in the URL, origin changes, weak values.

use crate::support;

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
use percent_encoding::{NON_ALPHANUMERIC, percent_decode_str, utf8_percent_encode};
use reson::plugin::{CallContext, CallError, Runtime, ToolFailure};
use reson::provider::{ChatRequest, LlmParams, PluginProvider, complete};
use reson::trace::{Message, Role};
use serde_json::json;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};
use support::TestDir;
use support::llm_server::{LlmServer, Reply};
use tokio_util::sync::CancellationToken;

/// Holds every character that changes when encoded, and those that could
/// move a URL elsewhere (`@`, `/`, `#`, `?`).
const SECRET: &str = "sk-T3st/9+x=Q@#?&z y~";
const KEY: &str = "SECRETS_TEST_KEY";

/// A request the echo server received.
#[derive(Clone, Debug)]
struct Seen {
    target: String,
    headers: Vec<(String, String)>,
}

/// How a test server answers one connection: what it received goes into
/// the first list, what it sent into the second.
type Handler = fn(TcpStream, &Mutex<Vec<Seen>>, &Mutex<Vec<u8>>);

/// The attacker's server: it answers every request with the request itself,
/// encoded every way it can think of.
struct Echo {
    addr: String,
    seen: Arc<Mutex<Vec<Seen>>>,
    sent: Arc<Mutex<Vec<u8>>>,
}

impl Echo {
    fn start() -> Self {
        Self::serve(reflect)
    }

    fn serve(handler: Handler) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sent = Arc::new(Mutex::new(Vec::new()));
        let (seen2, sent2) = (seen.clone(), sent.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (seen, sent) = (seen2.clone(), sent2.clone());
                std::thread::spawn(move || handler(stream, &seen, &sent));
            }
        });
        Self { addr, seen, sent }
    }

    fn url(&self, rest: &str) -> String {
        format!("http://{}{rest}", self.addr)
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    fn sent(&self) -> String {
        String::from_utf8_lossy(&self.sent.lock().unwrap()).into_owned()
    }
}

/// The request line and headers of the request on `stream`, as received
/// and as parsed.
fn read_head(stream: &TcpStream) -> (String, Seen) {
    let mut reader = BufReader::new(stream);
    let mut head = String::new();
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    head.push_str(&line);
    let target = line.split_whitespace().nth(1).unwrap_or_default().to_owned();
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line.trim().is_empty() {
            break;
        }
        head.push_str(&line);
        if let Some((k, v)) = line.split_once(':') {
            headers.push((k.trim().to_owned(), v.trim().to_owned()));
        }
    }
    (head, Seen { target, headers })
}

fn reflect(stream: TcpStream, seen: &Mutex<Vec<Seen>>, sent: &Mutex<Vec<u8>>) {
    let (head, Seen { target, headers }) = read_head(&stream);
    seen.lock().unwrap().push(Seen { target: target.clone(), headers: headers.clone() });

    // What the server picks out of the request to send back: each path
    // segment and query value decoded, each header value and its last word.
    let (path, query) = target.split_once('?').unwrap_or((&target, ""));
    let mut items: Vec<String> = path.split('/').map(decode).collect();
    items.extend(query.split('&').filter_map(|kv| kv.split_once('=')).map(|(_, v)| decode(v)));
    for (_, value) in &headers {
        items.push(value.clone());
        items.extend(value.split_once(' ').map(|(_, last)| last.to_owned()));
    }
    items.retain(|item| item.len() >= 8);
    items.sort();
    items.dedup();

    let mut body = String::new();
    let mut echoed = Vec::new();
    let mut all_forms = Vec::new();
    for item in std::iter::once(&head).chain(&items) {
        for (label, form) in encodings(item) {
            body.push_str(&format!("{label}: {form}\n"));
            all_forms.push(form.clone());
            let header_safe = form.bytes().all(|b| (b' '..=b'~').contains(&b));
            if item != &head && header_safe && echoed.len() < 80 {
                echoed.push(form);
            }
        }
    }
    // And once more inside JSON, as an API would: every form escaped again.
    body.push_str(&json!({ "request": head, "items": items, "forms": all_forms }).to_string());

    let chunked = target.starts_with("/chunked");
    let mut out = String::from("HTTP/1.1 200 OK\r\nconnection: close\r\n");
    for form in &echoed {
        out.push_str(&format!("x-echo: {form}\r\n"));
    }
    let mut wire = Vec::new();
    if chunked {
        out.push_str("transfer-encoding: chunked\r\n\r\n");
        wire.extend_from_slice(out.as_bytes());
        // Small chunks, so every secret straddles several.
        for piece in body.as_bytes().chunks(13) {
            wire.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
            wire.extend_from_slice(piece);
            wire.extend_from_slice(b"\r\n");
        }
        wire.extend_from_slice(b"0\r\n\r\n");
    } else {
        out.push_str(&format!("content-length: {}\r\n\r\n{body}", body.len()));
        wire.extend_from_slice(out.as_bytes());
    }
    sent.lock().unwrap().extend_from_slice(&wire);
    let mut stream = stream;
    for piece in wire.chunks(if chunked { 97 } else { wire.len() }) {
        if stream.write_all(piece).and_then(|()| stream.flush()).is_err() {
            return;
        }
    }
}

fn decode(text: &str) -> String {
    percent_decode_str(&text.replace('+', " ")).decode_utf8_lossy().into_owned()
}

fn lower_escapes(text: &str) -> String {
    let mut out = String::new();
    let mut left = 0u8;
    for c in text.chars() {
        out.push(if left > 0 { c.to_ascii_lowercase() } else { c });
        left = if c == '%' { 2 } else { left.saturating_sub(1) };
    }
    out
}

/// Every way the echo server writes `item`.
fn encodings(item: &str) -> Vec<(&'static str, String)> {
    let pct = utf8_percent_encode(item, NON_ALPHANUMERIC).to_string();
    let json = serde_json::to_string(item).unwrap();
    let mut out = vec![
        ("raw", item.to_owned()),
        ("percent", pct.clone()),
        ("percent-lower", lower_escapes(&pct)),
        ("form", pct.replace("%20", "+")),
        ("hex", hex::encode(item)),
        ("HEX", hex::encode_upper(item)),
        ("json-slash", json.replace('/', "\\/")),
        ("json", json),
        ("json-u", item.encode_utf16().map(|u| format!("\\u{u:04x}")).collect()),
    ];
    for prefix in ["", "x", "user:"] {
        let data = format!("{prefix}{item}");
        out.push(("base64", STANDARD.encode(&data)));
        out.push(("base64-nopad", STANDARD_NO_PAD.encode(&data)));
        out.push(("base64url", URL_SAFE.encode(&data)));
        out.push(("base64url-nopad", URL_SAFE_NO_PAD.encode(&data)));
    }
    out
}

/// What must never appear anywhere the host wrote: the forms of `secret`
/// that hold it whole (for base64, the characters that depend on the
/// secret alone, at each alignment).
fn needles(secret: &str) -> Vec<String> {
    let pct = utf8_percent_encode(secret, NON_ALPHANUMERIC).to_string();
    let mut out = vec![
        secret.to_owned(),
        pct.clone(),
        lower_escapes(&pct),
        hex::encode(secret),
        hex::encode_upper(secret),
        serde_json::to_string(secret).unwrap().replace('/', "\\/").trim_matches('"').to_owned(),
        secret.encode_utf16().map(|u| format!("\\u{u:04x}")).collect(),
    ];
    for lead in 0..3 {
        let data = format!("{}{secret}", "x".repeat(lead));
        let (start, end) = ((lead * 8).div_ceil(6), data.len() * 8 / 6);
        out.push(STANDARD.encode(&data)[start..end].to_owned());
        out.push(URL_SAFE.encode(&data)[start..end].to_owned());
    }
    out.sort();
    out.dedup();
    out
}

/// Panics if any form of `secret` is in `text`, naming it and `what`.
fn assert_clean(text: &str, secret: &str, what: &str) {
    for needle in needles(secret) {
        assert!(!text.contains(&needle), "{what} holds the secret as `{needle}`:\n{text}");
    }
}

/// The echo server really sent every form back (else the test proves nothing).
fn assert_sent_every_form(echo: &Echo, secret: &str) {
    let sent = echo.sent();
    for needle in needles(secret) {
        assert!(sent.contains(&needle), "the echo server never sent `{needle}`");
    }
}

async fn hostile(dir: &TestDir, extra: &str) -> Runtime {
    dir.install(support::test_plugins(), "hostile");
    dir.open(&format!("[plugins.hostile]\nlimits = {{ timeout_ms = 10000 }}\n{extra}")).await
}

async fn http(rt: &Runtime, args: serde_json::Value) -> Result<String, CallError> {
    rt.call_tool("http", &args.to_string(), &CallContext::default()).await.map(|o| o.text)
}

fn denial(result: Result<String, CallError>) -> String {
    match result {
        Err(CallError::Tool { failure: ToolFailure::Denied(message), .. }) => message,
        other => panic!("expected a denial, got {other:?}"),
    }
}

fn echo_config(echo: &Echo) -> String {
    format!(
        "http = [\"{addr}\"]\nsecrets = [\"{KEY}\"]\n[secrets.{KEY}]\nvalue = \"{SECRET}\"\nurls = [\"{addr}\"]\n",
        addr = echo.addr
    )
}

/// The request that puts the secret everywhere a plugin may put it.
fn everywhere(echo: &Echo, mode: &str) -> serde_json::Value {
    let secret = format!("{{{{secret:{KEY}}}}}");
    json!({
        "url": echo.url(&format!("/{mode}/p/{secret}?k={secret}&z=1")),
        "headers": {
            "authorization": format!("Bearer {secret}"),
            "x-api-key": secret,
        },
        "show_headers": true,
    })
}

#[tokio::test]
async fn an_echoing_server_hands_back_nothing_of_the_secret() {
    let echo = Echo::start();
    let dir = TestDir::new();
    let rt = hostile(&dir, &echo_config(&echo)).await;
    let cases = [
        ("plain", json!({})),
        ("chunked", json!({})),
        ("chunked", json!({ "stream": true, "read_bytes": 7 })),
        ("plain", json!({ "stream": true, "read_bytes": 1 })),
        ("chunked", json!({ "stream": true })),
    ];
    for (mode, extra) in cases {
        let mut args = everywhere(&echo, mode);
        args.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        let out = http(&rt, args.clone()).await.unwrap();
        assert!(out.starts_with("status: 200\n"), "{out}");
        assert!(out.contains("x-echo: [REDACTED]"), "the headers came back redacted: {out}");
        assert!(out.contains("raw: [REDACTED]") && out.contains("\"request\""), "{out}");
        assert_clean(&out, SECRET, &format!("what the guest got ({mode} {args})"));
        let json: serde_json::Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
        let decoded: Vec<&str> =
            json["forms"].as_array().unwrap().iter().flat_map(|f| f.as_str()).collect();
        assert!(decoded.len() > 20, "{json}");
        assert_clean(&decoded.join("\n"), SECRET, "the JSON the guest got, decoded");
    }
    assert_sent_every_form(&echo, SECRET);
    let seen = echo.seen();
    assert_eq!(seen.len(), 5);
    let encoded = utf8_percent_encode(SECRET, NON_ALPHANUMERIC).to_string();
    for request in seen {
        let header =
            |name: &str| request.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
        assert_eq!(header("authorization"), Some(format!("Bearer {SECRET}")));
        assert_eq!(header("x-api-key").as_deref(), Some(SECRET));
        // Percent-encoded in path and query, with `-` `.` `_` `~` left as they are.
        let in_url = decoded_target(&request.target);
        assert_eq!(in_url.matches(SECRET).count(), 2, "{} ({encoded})", request.target);
        assert!(request.target.ends_with("&z=1"), "the value cannot add query fields");
    }
}

fn decoded_target(target: &str) -> String {
    percent_decode_str(target).decode_utf8_lossy().into_owned()
}

#[tokio::test]
async fn a_secret_goes_only_where_it_is_bound() {
    let bound = Echo::start();
    let other = Echo::start();
    let dir = TestDir::new();
    let rt = hostile(
        &dir,
        &format!(
            "http = [\"{}\", \"{}\"]\nsecrets = [\"{KEY}\"]\n[secrets.{KEY}]\nvalue = \"{SECRET}\"\nurls = [\"{}/only\"]\n",
            bound.addr, other.addr, bound.addr
        ),
    ).await;
    let reference = format!("{{{{secret:{KEY}}}}}");
    let attempts = [
        json!({ "url": other.url(&format!("/only?k={reference}")) }),
        json!({ "url": other.url("/only"), "headers": { "authorization": format!("Bearer {reference}") } }),
        json!({ "url": bound.url(&format!("/elsewhere?k={reference}")) }),
        json!({ "url": bound.url("/elsewhere"), "headers": { "x-key": reference.clone() } }),
    ];
    for args in attempts {
        let message = denial(http(&rt, args.clone()).await);
        assert!(message.contains(&format!("`{KEY}` is not bound")), "{args}: {message}");
        assert!(message.contains("urls = [...]"), "the refusal says how to bind it: {message}");
    }
    assert!(other.seen().is_empty() && bound.seen().is_empty(), "nothing was sent");
    let ok =
        http(&rt, json!({ "url": bound.url(&format!("/only/x?k={reference}")) })).await.unwrap();
    assert!(ok.starts_with("status: 200"), "{ok}");
    assert_eq!(bound.seen().len(), 1);
}

#[tokio::test]
async fn an_unbound_secret_goes_only_to_exactly_granted_hosts() {
    let echo = Echo::start();
    let reference = format!("{{{{secret:{KEY}}}}}");
    let args = json!({ "url": echo.url("/x"), "headers": { "authorization": reference } });
    let plain = format!("[secrets]\n{KEY} = \"{SECRET}\"\n");

    let dir = TestDir::new();
    let wildcard = hostile(&dir, &format!("http = [\"*\"]\nsecrets = [\"{KEY}\"]\n{plain}")).await;
    let message = denial(http(&wildcard, args.clone()).await);
    assert!(message.contains("not bound") && message.contains("names exactly"), "{message}");
    assert!(echo.seen().is_empty());

    let dir = TestDir::new();
    let exact =
        hostile(&dir, &format!("http = [\"{}\"]\nsecrets = [\"{KEY}\"]\n{plain}", echo.addr)).await;
    let out = http(&exact, args).await.unwrap();
    assert!(out.starts_with("status: 200") && out.contains("[REDACTED]"), "{out}");
    assert_clean(&out, SECRET, "what the guest got");
    assert_eq!(echo.seen().len(), 1, "the plain `[secrets] NAME = value` form still works");
}

#[tokio::test]
async fn a_reference_outside_path_query_and_header_values_is_refused() {
    let echo = Echo::start();
    let dir = TestDir::new();
    let rt = hostile(&dir, &echo_config(&echo)).await;
    let r = format!("{{{{secret:{KEY}}}}}");
    let addr = &echo.addr;
    let urls = [
        format!("http://{r}/x"),
        format!("http://{r}.{addr}/x"),
        format!("http://{r}@{addr}/x"),
        format!("http://user:{r}@{addr}/x"),
        format!("http://{addr}/x#{r}"),
        format!("http://{addr}{r}/x"),
        format!("http://127.0.0.1:{r}/x"),
        format!("{r}://{addr}/x"),
    ];
    for url in urls {
        match http(&rt, json!({ "url": url })).await {
            Err(CallError::Tool { failure: ToolFailure::Denied(m), .. }) => {
                assert!(m.contains("path or query") || m.contains("not granted"), "{url}: {m}")
            }
            Err(CallError::Tool { failure: ToolFailure::Failed(m), .. }) => {
                assert!(m.contains("invalid request"), "{url}: {m}")
            }
            other => panic!("{url} was not refused: {other:?}"),
        }
    }
    assert!(echo.seen().is_empty(), "nothing reached the server");
}

#[tokio::test]
async fn a_value_cannot_move_the_request_to_another_origin() {
    let echo = Echo::start();
    let evil = Echo::start();
    let dir = TestDir::new();
    // Filled in raw, this value would make the URL `http://granted/@evil/#`
    // or `http://granted?@evil/`: userinfo, another host, a cut path.
    let value = format!("x@{}/steal#frag?q=1", evil.addr);
    let rt = hostile(
        &dir,
        &format!(
            "http = [\"{a}\"]\nsecrets = [\"SECRETS_TEST_OTHER\"]\n[secrets.SECRETS_TEST_OTHER]\nvalue = \"{value}\"\nurls = [\"{a}\"]\n",
            a = echo.addr
        ),
    ).await;
    for url in
        [echo.url("/{{secret:SECRETS_TEST_OTHER}}"), echo.url("/a?{{secret:SECRETS_TEST_OTHER}}")]
    {
        match http(&rt, json!({ "url": url })).await {
            Ok(out) => {
                assert!(out.starts_with("status: 200"), "{out}");
                assert_clean(&out, &value, "what the guest got");
            }
            Err(err) => panic!("{url}: {err:?}"),
        }
    }
    assert!(evil.seen().is_empty(), "the value moved a request elsewhere");
    let seen = echo.seen();
    assert_eq!(seen.len(), 2);
    for request in seen {
        assert!(!request.target.contains('#') && !request.target.contains('@'), "{request:?}");
        assert_eq!(decoded_target(&request.target).matches(&value).count(), 1, "{request:?}");
    }
}

#[tokio::test]
async fn weak_and_ungranted_secrets_are_refused_and_common_text_is_untouched() {
    let echo = Echo::start();
    let dir = TestDir::new();
    let rt = hostile(
        &dir,
        &format!(
            "http = [\"{}\"]\nsecrets = [\"SECRETS_TEST_WEAK\", \"SECRETS_TEST_IP\"]\n[secrets]\nSECRETS_TEST_WEAK = \"abc12\"\nSECRETS_TEST_IP = \"192.168.7.45\"\nSECRETS_TEST_OTHER = \"ungranted-value-9Zq\"\n",
            echo.addr
        ),
    ).await;
    let call = async |name: &str| {
        let reference = format!("{{{{secret:{name}}}}}");
        denial(http(&rt, json!({ "url": echo.url("/x"), "headers": { "x-key": reference } })).await)
    };
    let weak = call("SECRETS_TEST_WEAK").await;
    assert!(weak.contains("`SECRETS_TEST_WEAK`") && weak.contains("shorter than 8"), "{weak}");
    let ip = call("SECRETS_TEST_IP").await;
    assert!(ip.contains("`SECRETS_TEST_IP`") && ip.contains("looks like"), "{ip}");
    let ungranted = call("SECRETS_TEST_OTHER").await;
    assert!(ungranted.contains("`SECRETS_TEST_OTHER` is not granted"), "{ungranted}");
    assert!(echo.seen().is_empty());
    let text = "route 192.168.7.45 via abc12, then 192.168.7.45 again";
    let out =
        rt.call_tool("echo", &json!({ "text": text }).to_string(), &CallContext::default()).await;
    assert_eq!(out.unwrap().text, text, "a refused value redacts nothing");
}

/// What the echoing server below says before the key.
const SAID: &str = "you sent the key ";

/// A real server's obliging ways, each of which would hand an echoed key
/// back in a shape no redactor can match: it compresses its answer when
/// asked (`Accept-Encoding`, or `TE` as a transfer coding), or always
/// under `/always-gzip` and `/always-te`, and it serves any byte range
/// asked for.
fn oblige(stream: TcpStream, seen: &Mutex<Vec<Seen>>, sent: &Mutex<Vec<u8>>) {
    let (_, request) = read_head(&stream);
    seen.lock().unwrap().push(request.clone());
    let header = |name: &str| {
        let found = request.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name));
        found.map_or(String::new(), |(_, v)| v.clone())
    };
    let mut body = format!("{SAID}{}\n", header("x-api-key")).into_bytes();
    let mut head = String::from("HTTP/1.1 200 OK\r\nconnection: close\r\n");
    if let Some((from, to)) = header("range").strip_prefix("bytes=").and_then(|r| r.split_once('-'))
    {
        let from: usize = from.parse::<usize>().unwrap().min(body.len());
        let to = to.parse::<usize>().unwrap().min(body.len() - 1).max(from);
        head = format!(
            "HTTP/1.1 206 Partial Content\r\nconnection: close\r\ncontent-range: bytes {from}-{to}/{}\r\n",
            body.len()
        );
        body = body[from..=to].to_vec();
    }
    if header("accept-encoding").contains("gzip") || request.target.starts_with("/always-gzip") {
        body = gzip(&body, "-c");
        head.push_str("content-encoding: gzip\r\n");
    }
    let mut wire = Vec::new();
    if header("te").contains("gzip") || request.target.starts_with("/always-te") {
        let packed = gzip(&body, "-c");
        wire.extend(
            format!("{head}transfer-encoding: gzip, chunked\r\n\r\n{:x}\r\n", packed.len()).bytes(),
        );
        wire.extend(packed);
        wire.extend(b"\r\n0\r\n\r\n");
    } else {
        wire.extend(format!("{head}content-length: {}\r\n\r\n", body.len()).bytes());
        wire.extend(body);
    }
    sent.lock().unwrap().extend_from_slice(&wire);
    let _ = (&stream).write_all(&wire);
}

/// `bytes` through the system's `gzip` with `flag` (`-c` packs, `-dc`
/// unpacks).
fn gzip(bytes: &[u8], flag: &str) -> Vec<u8> {
    let mut child = Command::new("gzip")
        .arg(flag)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let input = bytes.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    out.stdout
}

/// The body the guest got through `hex_body`, unpacked as the guest would
/// unpack it if it is gzip.
fn unpacked(out: &str) -> String {
    let hex_body = out.split_once('\n').map_or("", |(_, body)| body);
    let bytes = hex::decode(hex_body.trim()).unwrap();
    let bytes = if bytes.starts_with(&[0x1f, 0x8b]) { gzip(&bytes, "-dc") } else { bytes };
    String::from_utf8_lossy(&bytes).into_owned()
}

#[tokio::test]
async fn no_coding_or_byte_range_hands_an_echoed_secret_back_past_the_redactor() {
    let server = Echo::serve(oblige);
    let dir = TestDir::new();
    let rt = hostile(&dir, &echo_config(&server)).await;
    let key = format!("{{{{secret:{KEY}}}}}");
    let ask = async |path: &str, extra: &[(&str, &str)]| {
        let mut headers = serde_json::Map::new();
        headers.insert("x-api-key".into(), json!(key));
        for (name, value) in extra {
            headers.insert((*name).into(), json!(value));
        }
        http(&rt, json!({ "url": server.url(path), "headers": headers, "hex_body": true })).await
    };
    // The server compresses its echo, asked to or not; the guest inflates it.
    let codings: [(&str, &[(&str, &str)]); 6] = [
        ("/gzip", &[("accept-encoding", "gzip")]),
        ("/gzip", &[("Accept-Encoding", "identity;q=0.5, gzip")]),
        ("/gzip", &[("accept-encoding", "identity"), ("ACCEPT-ENCODING", "br, gzip")]),
        ("/te", &[("te", "gzip")]),
        ("/always-gzip", &[]),
        ("/always-te", &[]),
    ];
    for (path, extra) in codings {
        match ask(path, extra).await {
            Ok(out) => assert_clean(&unpacked(&out), SECRET, &format!("{path} {extra:?}")),
            Err(CallError::Tool { failure: ToolFailure::Denied(m), .. }) => {
                assert!(m.contains("only `identity`"), "{path} {extra:?}: {m}")
            }
            Err(CallError::Tool { failure: ToolFailure::Failed(m), .. }) => {
                assert!(m.contains("`gzip`") && m.contains("cannot be scrubbed"), "{m}");
                assert!(path.starts_with("/always"), "only a server that asked no one: {m}");
            }
            Err(other) => panic!("{path} {extra:?}: {other:?}"),
        }
    }
    // The echo eight bytes at a time: no piece holds the whole key.
    let mut pieces = String::new();
    for from in (0..SAID.len() + SECRET.len() + 1).step_by(8) {
        match ask("/range", &[("range", &format!("bytes={from}-{}", from + 7))]).await {
            Ok(out) => pieces.push_str(&unpacked(&out)),
            Err(err) => assert!(denial(Err(err)).contains("whole response")),
        }
    }
    assert_clean(&pieces, SECRET, "the byte ranges put together");
    for path in ["/always-gzip", "/always-te"] {
        let failed = format!("{:?}", ask(path, &[]).await.unwrap_err());
        assert!(failed.contains("cannot be scrubbed"), "{path}: {failed}");
    }
    // What stays allowed: identity, and ranges of requests without a secret.
    let clear = ask("/gzip", &[("accept-encoding", "identity")]).await.unwrap();
    assert_eq!(unpacked(&clear), format!("{SAID}[REDACTED]\n"));
    let part = http(
        &rt,
        json!({ "url": server.url("/range"), "headers": { "range": "bytes=0-7" }, "hex_body": true }),
    ).await
    .unwrap();
    assert!(part.starts_with("status: 206") && unpacked(&part) == SAID[..8], "{part}");
    let seen = server.seen();
    assert!(seen.len() >= 3, "the server was reached: {seen:?}");
    for request in seen {
        let coding: Vec<_> = request
            .headers
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case("accept-encoding"))
            .collect();
        assert_eq!(coding.len(), 1, "{request:?}");
        assert_eq!(coding[0].1, "identity", "the host asks for the clear: {request:?}");
        assert!(!request.headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("te")), "{request:?}");
    }
}

#[tokio::test]
async fn a_guest_cannot_name_another_site_behind_a_granted_address() {
    let echo = Echo::start();
    let dir = TestDir::new();
    let rt = hostile(&dir, &echo_config(&echo)).await;
    let key = format!("Bearer {{{{secret:{KEY}}}}}");
    // Behind one address (a CDN, a reverse proxy) `Host` picks the site
    // that gets the request, and the key in it.
    for name in ["host", "Host", "HOST"] {
        for headers in
            [json!({ name: "evil.example", "authorization": key }), json!({ name: "evil.example" })]
        {
            let message =
                denial(http(&rt, json!({ "url": echo.url("/x"), "headers": headers })).await);
            assert!(message.contains(&format!("header `{name}`")), "{message}");
        }
    }
    let ok = http(&rt, json!({ "url": echo.url("/x"), "headers": { "authorization": key } }))
        .await
        .unwrap();
    assert!(ok.starts_with("status: 200"), "{ok}");
    let seen = echo.seen();
    assert_eq!(seen.len(), 1, "{seen:?}");
    let hosts: Vec<_> =
        seen[0].headers.iter().filter(|(k, _)| k.eq_ignore_ascii_case("host")).collect();
    assert_eq!(hosts.len(), 1);
    assert_eq!(hosts[0].1, echo.addr);
}

#[tokio::test]
async fn what_a_command_prints_is_scrubbed_before_the_guest_sees_it() {
    let dir = TestDir::new();
    // A grant as harmless-looking as `cat *` reads files the guest itself
    // is never given: here a copy of the config, which holds the key, in a
    // directory the command (jailed to it) may read.
    let grant = format!(
        "dirs = [{{ path = \"workspace\", access = \"read\" }}]\nprocess = [\"cat *\"]\n\
         secrets = [\"{KEY}\"]\n[secrets]\n{KEY} = \"{SECRET}\"\n"
    );
    let rt = hostile(&dir, &grant).await;
    let config = dir.workspace().join("reson-copy.toml");
    std::fs::copy(dir.path().join("reson.toml"), &config).unwrap();
    let stored = dir.workspace().join("stored.json");
    std::fs::write(&stored, json!({ "token": SECRET, "b64": STANDARD.encode(SECRET) }).to_string())
        .unwrap();
    for file in [&config, &stored] {
        let file = file.to_str().unwrap();
        // Reversed by the guest, so that only what it was given is judged.
        let args = json!({ "program": "cat", "args": [file], "reverse": true });
        let out =
            rt.call_tool("exec", &args.to_string(), &CallContext::default()).await.unwrap().text;
        let out: String = out.chars().rev().collect();
        assert!(out.contains("[REDACTED]"), "cat really ran: {out}");
        assert_clean(&out, SECRET, &format!("what `cat {file}` gave the guest"));
    }
}

#[tokio::test]
async fn a_secret_pasted_into_a_plugin_setting_reaches_the_guest_redacted() {
    let dir = TestDir::new();
    let base = format!("https://llm.example/v1?api-key={}", url_form(SECRET));
    let rt = hostile(
        &dir,
        &format!(
            "secrets = [\"{KEY}\"]\nconfig = {{ base_url = \"{base}\", model = \"m-1\" }}\n[secrets]\n{KEY} = \"{SECRET}\"\n"
        ),
    ).await;
    let out = rt.call_tool("settings", "{}", &CallContext::default()).await.unwrap().text;
    let got: String = out.chars().rev().collect();
    assert!(got.contains("base_url=https://llm.example/v1?api-key=[REDACTED]"), "{got}");
    assert!(got.contains("model=m-1"), "{got}");
    assert_clean(&got, SECRET, "the settings the guest got");
}

/// `secret` as it would be pasted into a URL.
fn url_form(secret: &str) -> String {
    utf8_percent_encode(secret, NON_ALPHANUMERIC).to_string()
}

fn reson(dir: &TestDir, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_reson"));
    cmd.args(["--config", &dir.path().join("reson.toml").to_string_lossy()])
        .args(["--plugins-dir", &dir.plugins().to_string_lossy()])
        .args(["--cache-dir", &support::cache_dir().to_string_lossy()])
        .args(["--traces-dir", &dir.path().join("traces").to_string_lossy()])
        .args(args)
        .env("RESON_LOG", "debug")
        .env_remove("OPENAI_API_KEY");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

/// stdout, stderr and every file the host wrote under `dir` (traces, the
/// lock file), but for the config and `.env` (the test's own, which hold
/// the secret) and the plugins it installed.
fn everything_written(dir: &TestDir, out: &Output) -> String {
    let mut all = format!(
        "--- stdout\n{}\n--- stderr\n{}\n",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let mut files = 0;
    for path in support::files_under(dir.path()) {
        let name = path.file_name().unwrap().to_string_lossy();
        let installed = name.ends_with(".wasm") || path.starts_with(dir.plugins());
        if name == "reson.toml" || name == ".env" || (installed && name != "reson.lock") {
            continue;
        }
        files += 1;
        all.push_str(&format!("--- {}\n", path.display()));
        all.push_str(&String::from_utf8_lossy(&std::fs::read(&path).unwrap()));
    }
    assert!(files > 0 && all.contains("reson.lock"), "the host wrote no lock file: {all}");
    all
}

#[test]
fn the_cli_writes_no_form_of_a_secret_an_echoing_server_returned() {
    let echo = Echo::start();
    let dir = TestDir::new();
    dir.install(support::test_plugins(), "hostile");
    dir.config(&format!("[plugins.hostile]\n{}", echo_config(&echo)));
    for extra in [json!({}), json!({ "stream": true, "read_bytes": 5 })] {
        let mut args = everywhere(&echo, "chunked");
        args.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        let out = reson(&dir, &["tool", "call", "http", &args.to_string()], &[]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let all = everything_written(&dir, &out);
        assert!(all.contains("raw: [REDACTED]"), "{all}");
        assert!(all.contains("DEBUG"), "debug logging was on: {all}");
        assert_clean(&all, SECRET, "what `reson tool call` wrote");
    }
    assert_sent_every_form(&echo, SECRET);
    assert_eq!(echo.seen().len(), 2);
    let message = repeated(SECRET);
    let out =
        reson(&dir, &["tool", "call", "log", &json!({ "message": message }).to_string()], &[]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("DEBUG") && stderr.matches("key [REDACTED]").count() == 3, "{stderr}");
    assert_clean(&stderr, SECRET, "the log");
}

/// `reson run --provider openai` against `server`, the key in the
/// environment and bound by the CLI to the `base_url` host (the grant
/// itself is `*`, so without that binding the key would go nowhere).
fn run_openai(server: &LlmServer) -> (TestDir, Output) {
    let dir = TestDir::new();
    dir.install(support::plugins(), "openai");
    dir.config(&format!(
        "[plugins.openai]\nhttp = [\"*\"]\nconfig = {{ base_url = \"{}/v1\" }}\n",
        server.url()
    ));
    let out = reson(
        &dir,
        &["run", "--provider", "openai", "--model", "gpt-test", "say the key"],
        &[("OPENAI_API_KEY", SECRET)],
    );
    (dir, out)
}

/// The secret in the forms a server might repeat it in, for canned replies.
fn repeated(secret: &str) -> String {
    let mut text = format!("key {secret} ");
    for (label, form) in encodings(secret) {
        text.push_str(&format!("{label}={form} "));
    }
    text
}

fn key_error_body() -> serde_json::Value {
    json!({ "error": { "message": format!("Incorrect API key provided: {}", repeated(SECRET)), "type": "invalid_request_error" } })
}

/// A 401 whose body and headers repeat the key.
fn key_error() -> Reply {
    Reply::json(401, &key_error_body()).header("x-echo-key", SECRET)
}

fn answer_text() -> String {
    format!("Your key is {SECRET} and encoded {}", repeated(SECRET))
}

/// A streamed answer that holds the key, written in pieces that cut it.
fn streamed_answer() -> Reply {
    let event = format!(
        "data: {}\n\n",
        json!({ "object": "chat.completion.chunk", "choices": [{ "index": 0, "delta": { "content": answer_text() }, "finish_reason": null }] })
    );
    let cut = event.find("T3st").unwrap();
    Reply::sse([
        event[..cut].to_owned(),
        event[cut..cut + 5].to_owned(),
        event[cut + 5..].to_owned(),
        format!(
            "data: {}\n\n",
            json!({ "object": "chat.completion.chunk", "choices": [{ "index": 0, "delta": {}, "finish_reason": "stop" }], "usage": { "prompt_tokens": 4, "completion_tokens": 9 } })
        ),
        "data: [DONE]\n\n".to_owned(),
    ])
}

/// A whole answer that holds the key.
fn answer() -> Reply {
    Reply::json(
        200,
        &json!({
            "id": "chatcmpl-1", "object": "chat.completion", "model": "gpt-test",
            "choices": [{ "index": 0, "message": { "role": "assistant", "content": answer_text() }, "finish_reason": "stop" }],
            "usage": { "prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8 }
        }),
    )
    .header("x-echo-key", SECRET)
}

#[tokio::test]
async fn the_provider_plugin_never_sees_the_key() {
    let server = LlmServer::start(vec![key_error(), streamed_answer(), answer()]);
    let dir = TestDir::new();
    dir.install(support::plugins(), "openai");
    let rt = dir.open(&format!(
        "[plugins.openai]\nhttp = [\"{addr}\"]\nsecrets = [\"OPENAI_API_KEY\"]\nconfig = {{ base_url = \"{url}/v1\" }}\n[secrets.OPENAI_API_KEY]\nvalue = \"{SECRET}\"\nurls = [\"{addr}\"]\n",
        addr = server.addr,
        url = server.url(),
    )).await;
    let provider = PluginProvider::new(rt, "openai");
    let request = |stream| ChatRequest {
        messages: vec![Message::new(Role::User, "say the key")],
        tools: Vec::new(),
        params: LlmParams { model: "gpt-test".into(), stream, ..LlmParams::default() },
    };
    let err =
        complete(&provider, request(false), CancellationToken::new(), |_| {}).await.unwrap_err();
    let err = format!("{err} {err:?}");
    assert!(err.contains("Incorrect API key provided: key [REDACTED]"), "{err}");
    assert_clean(&err, SECRET, "the provider's error");

    let mut deltas = String::new();
    let streamed = complete(&provider, request(true), CancellationToken::new(), |d| {
        deltas.push_str(&format!("{d:?}"))
    })
    .await
    .unwrap();
    let whole =
        complete(&provider, request(false), CancellationToken::new(), |_| {}).await.unwrap();
    for (what, text) in [
        ("the streamed answer", streamed.message.text()),
        ("the deltas", deltas),
        ("the whole answer", whole.message.text()),
    ] {
        assert!(text.contains("Your key is [REDACTED]"), "{what}: {text}");
        assert_clean(&text, SECRET, what);
    }
    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    assert!(
        requests.iter().all(|r| r.header("authorization") == Some(&format!("Bearer {SECRET}")))
    );
    let repeated = key_error_body()["error"]["message"].as_str().unwrap().to_owned();
    assert!(needles(SECRET).iter().all(|n| repeated.contains(n.as_str())), "{repeated}");
}

#[test]
fn a_provider_error_that_repeats_the_key_leaks_nothing() {
    let server = LlmServer::start(vec![key_error()]);
    let (dir, out) = run_openai(&server);
    assert!(!out.status.success());
    let requests = server.requests();
    assert_eq!(requests.len(), 1, "auth errors are not retried");
    assert_eq!(requests[0].header("authorization"), Some(format!("Bearer {SECRET}").as_str()));
    let all = everything_written(&dir, &out);
    assert!(all.contains("Incorrect API key provided: key [REDACTED]"), "{all}");
    assert!(all.contains("meta.json") && all.contains("events.jsonl"), "{all}");
    assert_clean(&all, SECRET, "what `reson run` wrote after a 401");
}

#[test]
fn a_provider_answer_that_contains_the_key_leaks_nothing() {
    let server = LlmServer::start(vec![streamed_answer()]);
    let (dir, out) = run_openai(&server);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(server.requests().len(), 1);
    let all = everything_written(&dir, &out);
    assert!(all.contains("Your key is [REDACTED]"), "{all}");
    assert!(all.contains("messages"), "the trace's messages were searched: {all}");
    assert_clean(&all, SECRET, "what `reson run` wrote after an answer holding the key");
}

#[tokio::test]
async fn a_failed_request_reports_no_secret() {
    let closed = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = closed.local_addr().unwrap().to_string();
    drop(closed);
    let dir = TestDir::new();
    let rt = hostile(
        &dir,
        &format!(
            "http = [\"127.0.0.1\"]\nsecrets = [\"{KEY}\"]\n[secrets.{KEY}]\nvalue = \"{SECRET}\"\nurls = [\"127.0.0.1\"]\n"
        ),
    ).await;
    let url = format!("http://{addr}/x/{{{{secret:{KEY}}}}}?k={{{{secret:{KEY}}}}}");
    match http(&rt, json!({ "url": url })).await {
        Err(CallError::Tool { failure: ToolFailure::Failed(message), .. }) => {
            // reqwest names the URL it could not reach, filled in.
            assert!(
                message.contains("http connect") && message.contains("[REDACTED]"),
                "{message}"
            );
            assert_clean(&message, SECRET, "the connect error");
        }
        other => panic!("expected a connect failure, got {other:?}"),
    }
}

#[test]
fn the_cli_does_not_widen_a_binding_the_config_gives() {
    let server = LlmServer::start(vec![answer()]);
    let dir = TestDir::new();
    dir.install(support::plugins(), "openai");
    dir.config(&format!(
        "[plugins.openai]\nhttp = [\"{}\"]\nconfig = {{ base_url = \"{}/v1\" }}\n[secrets.OPENAI_API_KEY]\nurls = [\"https://api.openai.com\"]\n",
        server.addr,
        server.url()
    ));
    let out = reson(
        &dir,
        &["run", "--provider", "openai", "--model", "gpt-test", "hi"],
        &[("OPENAI_API_KEY", SECRET)],
    );
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("`OPENAI_API_KEY` is not bound"), "{stderr}");
    assert!(server.requests().is_empty(), "the key went to a host it is not bound to");
    assert_clean(&everything_written(&dir, &out), SECRET, "what `reson run` wrote");
}

/// One streamed chat answer: `delta`, then the end with `finish`.
fn streamed(delta: serde_json::Value, finish: &str) -> Reply {
    let chunk = |delta: serde_json::Value, finish: Option<&str>| {
        let body = json!({ "object": "chat.completion.chunk", "choices": [{ "index": 0, "delta": delta, "finish_reason": finish }], "usage": { "prompt_tokens": 4, "completion_tokens": 2 } });
        format!("data: {body}\n\n")
    };
    Reply::sse([chunk(delta, None), chunk(json!({}), Some(finish)), "data: [DONE]\n\n".to_owned()])
}

#[test]
fn a_secret_a_tool_reads_never_reaches_the_model() {
    let read_env = json!({ "role": "assistant", "tool_calls": [{ "index": 0, "id": "call_1", "type": "function", "function": { "name": "read", "arguments": json!({ "path": ".env" }).to_string() } }] });
    let server = LlmServer::start(vec![
        streamed(read_env, "tool_calls"),
        streamed(json!({ "role": "assistant", "content": "read it" }), "stop"),
    ]);
    let dir = TestDir::new();
    dir.install(support::plugins(), "openai").install(support::plugins(), "fs");
    // The project holds a `.env` with the key, and the `fs` plugin may
    // read the project: its tool output is the model's next prompt.
    std::fs::write(dir.path().join(".env"), format!("OPENAI_API_KEY={SECRET}\n")).unwrap();
    dir.config(&format!(
        "[permissions]\ndefault = \"allow\"\n[plugins.openai]\nhttp = [\"*\"]\nconfig = {{ base_url = \"{}/v1\" }}\n[plugins.fs]\ndirs = [{{ path = \".\", access = \"read\" }}]\n",
        server.url()
    ));
    let out = reson(
        &dir,
        &["run", "--provider", "openai", "--model", "gpt-test", "read .env"],
        &[("OPENAI_API_KEY", SECRET)],
    );
    let all = everything_written(&dir, &out);
    assert!(out.status.success(), "{all}");
    assert_clean(&all, SECRET, "what `reson run` wrote");
    let requests = server.requests();
    assert_eq!(requests.len(), 2, "{all}");
    let prompt = String::from_utf8_lossy(&requests[1].body).into_owned();
    assert!(
        prompt.contains("OPENAI_API_KEY=[REDACTED]"),
        "the tool result reached the model: {prompt}"
    );
    assert_clean(&prompt, SECRET, "the model's prompt after the tool ran");
}
