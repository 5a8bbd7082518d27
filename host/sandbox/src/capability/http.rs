//! `reson:plugin/http`: requests performed by the host, only to URLs both
//! requested and granted, with secrets filled in by the host after that
//! check and only where they are bound, and every secret scrubbed from
//! what comes back before the guest sees it.

use super::effects::Effects;
use super::secrets::{MARK_OPEN, SecretError, replace_refs};
use super::{HostState, HostTrap};
use crate::contract::bindings::tool::reson::plugin::http::{
    Header, Host, HostBodyStream, HttpError, Request, Response, StreamingResponse,
};
use reqwest::Client;
use reson_text::redact::{self, StreamRedactor, redact, redact_bytes};
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use wasmtime::component::Resource;

/// The most bytes one response body may have.
pub(crate) const MAX_RESPONSE_BYTES: u64 = 32 << 20;
/// Chunk size cap for one streamed read.
const MAX_READ_BYTES: u32 = 1 << 20;

/// A streamed response body, owned by the guest through a resource handle.
pub struct BodyStream {
    /// `None` for a body a replay answers from its recording (all `ready`).
    response: Option<reqwest::Response>,
    read: u64,
    deadline: Instant,
    /// `None` once the server's body has ended.
    redactor: Option<StreamRedactor>,
    /// Redacted bytes not yet handed to the guest, from `taken` on.
    ready: Vec<u8>,
    taken: usize,
    /// The call's effect log and the entry of this request, when recording.
    recording: Option<(Effects, usize)>,
}

/// The client of the current tokio runtime, built once per runtime. Its
/// pooled connections are driven by tasks of the runtime that opened them,
/// so a client shared with another runtime (each test has its own) would
/// reuse connections whose task is gone.
fn client() -> Client {
    static CLIENTS: OnceLock<Mutex<HashMap<tokio::runtime::Id, Client>>> = OnceLock::new();
    let runtime = tokio::runtime::Handle::current().id();
    let clients = CLIENTS.get_or_init(Mutex::default);
    let mut clients = clients.lock().unwrap_or_else(PoisonError::into_inner);
    clients
        .entry(runtime)
        .or_insert_with(|| {
            Client::builder()
                // A redirect could lead to a host that is not granted.
                .redirect(reqwest::redirect::Policy::none())
                // Proxies from the environment would be a way around the allowlist.
                .no_proxy()
                .build()
                .expect("the HTTP client builds with static settings")
        })
        .clone()
}

/// Awaits `work` until the call's `deadline` or its cancellation, whichever
/// comes first; `None` when it was cut short.
async fn within_call<T>(
    deadline: Instant,
    cancel: Option<CancellationToken>,
    work: impl Future<Output = T>,
) -> Option<T> {
    let cancelled = async {
        match &cancel {
            Some(token) => token.cancelled().await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        out = work => Some(out),
        () = tokio::time::sleep_until(deadline.into()) => None,
        () = cancelled => None,
    }
}

impl HostState {
    /// Checks `request` and builds it. The URL is parsed and checked with
    /// its secret references still in, each standing as a random token of
    /// lower-case letters and digits (which no part of a URL rewrites), so
    /// the host knows where every reference sits before any value exists:
    /// references outside the path and query are refused, and the values,
    /// percent-encoded, cannot move the request to another origin.
    fn prepare(
        &mut self,
        request: Request,
    ) -> Result<(reqwest::RequestBuilder, Duration), HttpError> {
        let shown_url = redact(&request.url).into_owned();
        let token = format!("rsnsecret{:016x}n", fastrand::u64(..));
        let mut names = Vec::new();
        let masked = replace_refs(&request.url, |name| {
            names.push(name.to_owned());
            Ok(format!("{token}{}e", names.len() - 1))
        })
        .map_err(|e| self.refuse(e))?;
        let checked = reqwest::Url::parse(&masked)
            .map_err(|e| HttpError::InvalidRequest(format!("bad URL `{shown_url}`: {e}")))?;
        if !matches!(checked.scheme(), "http" | "https") {
            return Err(HttpError::InvalidRequest(format!("unsupported scheme in `{shown_url}`")));
        }
        let authority_or_fragment = [
            checked.username(),
            checked.password().unwrap_or_default(),
            checked.host_str().unwrap_or_default(),
            checked.fragment().unwrap_or_default(),
        ];
        if authority_or_fragment.iter().any(|part| part.contains(&token)) {
            return Err(self.refuse(SecretError::Placement));
        }
        if !self.grants.allows_url(&checked) {
            let detail = format!(
                "{} {shown_url} is not granted to plugin `{}`",
                request.method, self.plugin
            );
            return Err(HttpError::Denied(self.deny("http", detail)));
        }
        let mut filled = checked.as_str().to_owned();
        for (i, name) in names.iter().enumerate() {
            let value = self.granted_value(name).map_err(|e| self.refuse(e))?;
            filled = filled.replace(&format!("{token}{i}e"), &redact::percent_encoded(&value));
        }
        let url = reqwest::Url::parse(&filled)
            .map_err(|_| HttpError::InvalidRequest(format!("bad URL `{shown_url}`")))?;
        let same_place = url.origin() == checked.origin()
            && url.username() == checked.username()
            && url.password() == checked.password();
        if !same_place || !self.grants.allows_url(&url) {
            let detail =
                format!("{shown_url} leaves its granted origin once secrets are filled in");
            return Err(HttpError::Denied(self.deny("secret", detail)));
        }
        if let Some(name) = names.iter().find(|n| !self.secrets.bound_to(n, &url, &self.grants)) {
            let unbound = SecretError::Unbound { name: name.clone(), url: shown_url };
            return Err(self.refuse(unbound));
        }
        let carries_secret =
            !names.is_empty() || request.headers.iter().any(|(_, value)| value.contains(MARK_OPEN));
        for (name, value) in &request.headers {
            if let Some(why) = owned_header(name, value, carries_secret) {
                let detail = format!("header `{name}` on {shown_url}: {why}");
                return Err(HttpError::Denied(self.deny("http", detail)));
            }
        }
        let mut headers = Vec::with_capacity(request.headers.len() + 1);
        if !request.headers.iter().any(|(name, _)| name.eq_ignore_ascii_case("accept-encoding")) {
            // A body in the clear, the only kind the host can scrub.
            headers.push(("accept-encoding".to_owned(), "identity".to_owned()));
        }
        for (name, value) in &request.headers {
            let value = replace_refs(value, |secret| {
                let value = self.granted_value(secret)?;
                if !self.secrets.bound_to(secret, &url, &self.grants) {
                    let url = shown_url.clone();
                    return Err(SecretError::Unbound { name: secret.to_owned(), url });
                }
                Ok(value)
            })
            .map_err(|e| self.refuse(e))?;
            headers.push((name.clone(), value));
        }
        let method = reqwest::Method::from_bytes(request.method.as_bytes())
            .map_err(|_| HttpError::InvalidRequest(format!("bad method `{}`", request.method)))?;
        let remaining = self.deadline.saturating_duration_since(Instant::now());
        let timeout = request
            .timeout_ms
            .map_or(remaining, |ms| Duration::from_millis(ms.into()).min(remaining));
        let mut builder = client().request(method, url).timeout(timeout);
        for (name, value) in headers {
            builder = builder.header(name, value);
        }
        if let Some(body) = request.body {
            builder = builder.body(body);
        }
        Ok((builder, timeout))
    }

    /// The value of secret `name`, if the plugin is granted it.
    fn granted_value(&self, name: &str) -> Result<String, SecretError> {
        if !self.grants.allows_secret(name) {
            return Err(SecretError::NotGranted(name.to_owned()));
        }
        self.secrets.value(name)
    }

    /// Records a refused secret and returns the error for the guest.
    fn refuse(&mut self, err: SecretError) -> HttpError {
        HttpError::Denied(self.deny("secret", err.to_string()))
    }

    fn classify(&self, err: &reqwest::Error) -> HttpError {
        let message = redact(&err.to_string()).into_owned();
        if err.is_timeout() {
            HttpError::Timeout
        } else if err.is_connect() {
            HttpError::Connect(message)
        } else if err.is_builder() {
            HttpError::InvalidRequest(message)
        } else {
            HttpError::Io(message)
        }
    }

    /// Sends `request` and returns its response once the headers are in:
    /// the inner error for the guest, or the outer trap when the call's
    /// deadline passed or the call was cancelled meanwhile.
    async fn start(
        &mut self,
        request: Request,
    ) -> wasmtime::Result<Result<reqwest::Response, HttpError>> {
        let (builder, _) = match self.prepare(request) {
            Ok(prepared) => prepared,
            Err(e) => return Ok(Err(e)),
        };
        let sent = within_call(self.deadline, self.cancel.clone(), builder.send()).await;
        let sent = sent.ok_or_else(cut_short)?;
        Ok(sent.map_err(|e| self.classify(&e)).and_then(checked))
    }
}

/// `response`, unless its body is one the host could not scrub or is
/// bigger than a response may be.
fn checked(response: reqwest::Response) -> Result<reqwest::Response, HttpError> {
    if let Some(coding) = unreadable_coding(response.headers()) {
        return Err(HttpError::Io(format!(
            "the response is encoded as `{}`, which the host does not decode, so it \
             cannot be scrubbed of secrets",
            redact(&coding)
        )));
    }
    if response.content_length().is_some_and(|len| len > MAX_RESPONSE_BYTES) {
        return Err(HttpError::TooLarge(MAX_RESPONSE_BYTES));
    }
    Ok(response)
}

/// Why the guest may not set header `name` to `value`, if it may not.
/// `Host` would send the request, and the secrets in it, to another site
/// behind the checked address (domain fronting). A content or transfer
/// coding other than identity would make the server compress what it
/// echoes, past the redactor, for the guest to inflate. A byte range of a
/// response to a request that carries a secret could cut an echoed secret
/// into pieces that no longer match it.
fn owned_header(name: &str, value: &str, carries_secret: bool) -> Option<&'static str> {
    let name = name.trim();
    if name.eq_ignore_ascii_case("host") {
        return Some("the host sends the request to the URL's own host, and names it itself");
    }
    let is_coding = name.eq_ignore_ascii_case("accept-encoding") || name.eq_ignore_ascii_case("te");
    let clear = |coding: &str| {
        let coding = coding.split(';').next().unwrap_or_default().trim();
        ["identity", "trailers", ""].iter().any(|c| coding.eq_ignore_ascii_case(c))
    };
    if is_coding && !value.split(',').all(clear) {
        return Some(
            "only `identity` is accepted: the host scrubs secrets from bodies it can read",
        );
    }
    let is_range = name.eq_ignore_ascii_case("range") || name.eq_ignore_ascii_case("if-range");
    if is_range && carries_secret {
        return Some("a request that carries a secret gets its whole response, never a part");
    }
    None
}

/// The first content or transfer coding of a response that the host would
/// pass on undecoded (anything but identity, and chunked framing, which
/// the HTTP client removes).
fn unreadable_coding(headers: &reqwest::header::HeaderMap) -> Option<String> {
    let codings = |name| {
        headers
            .get_all(name)
            .iter()
            .flat_map(|v| {
                String::from_utf8_lossy(v.as_bytes())
                    .split(',')
                    .map(|c| c.trim().to_ascii_lowercase())
                    .collect::<Vec<_>>()
            })
            .collect::<Vec<_>>()
    };
    let content = codings(reqwest::header::CONTENT_ENCODING);
    let transfer = codings(reqwest::header::TRANSFER_ENCODING);
    content.into_iter().find(|c| !c.is_empty() && c != "identity").or_else(|| {
        transfer.into_iter().find(|c| !c.is_empty() && c != "identity" && c != "chunked")
    })
}

/// The response headers as the guest may see them: every secret redacted
/// (a server may echo a request header back).
fn headers_of(response: &reqwest::Response) -> Vec<Header> {
    response
        .headers()
        .iter()
        .map(|(k, v)| {
            let value = String::from_utf8_lossy(v.as_bytes());
            (redact(k.as_str()).into_owned(), redact(&value).into_owned())
        })
        .collect()
}

/// Reads the body of `response`, stopping as soon as it holds more than a
/// response may.
async fn read_capped(response: &mut reqwest::Response) -> reqwest::Result<Vec<u8>> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        body.extend_from_slice(&chunk);
        if body.len() as u64 > MAX_RESPONSE_BYTES {
            break;
        }
    }
    Ok(body)
}

/// The trap for a host call cut short by its deadline or a cancel.
fn cut_short() -> wasmtime::Error {
    wasmtime::Error::new(HostTrap::Deadline)
}

impl HostState {
    /// `http.send` on the network.
    pub(super) async fn send_live(
        &mut self,
        request: Request,
    ) -> wasmtime::Result<Result<Response, HttpError>> {
        self.remaining()?;
        let mut response = match self.start(request).await? {
            Ok(response) => response,
            Err(e) => return Ok(Err(e)),
        };
        let status = response.status().as_u16();
        let headers = headers_of(&response);
        let read = within_call(self.deadline, self.cancel.clone(), read_capped(&mut response));
        let read = read.await.ok_or_else(cut_short)?;
        self.remaining()?;
        Ok(match read {
            Err(e) => Err(HttpError::Io(redact(&e.to_string()).into_owned())),
            Ok(body) if body.len() as u64 > MAX_RESPONSE_BYTES => {
                Err(HttpError::TooLarge(MAX_RESPONSE_BYTES))
            }
            Ok(body) => Ok(Response { status, headers, body: redact_bytes(&body).into_owned() }),
        })
    }
}

impl Host for HostState {
    async fn send(&mut self, request: Request) -> wasmtime::Result<Result<Response, HttpError>> {
        self.send_with_effects(request).await
    }

    async fn send_streaming(
        &mut self,
        request: Request,
    ) -> wasmtime::Result<Result<StreamingResponse, HttpError>> {
        self.remaining()?;
        let effects = self.effects.clone();
        if let Some(effects) = effects.as_ref().filter(|e| e.is_replay()) {
            let ((status, headers), ready) = match effects.streamed_answer(&request) {
                Ok(answer) => answer,
                Err(e) => return Ok(Err(e)),
            };
            let body = self.table.push(BodyStream {
                response: None,
                read: 0,
                deadline: self.deadline,
                redactor: None,
                ready,
                taken: 0,
                recording: None,
            })?;
            return Ok(Ok(StreamingResponse { status, headers, body }));
        }
        let asked = effects.as_ref().map(|_| request.clone());
        let response = match self.start(request).await? {
            Ok(response) => response,
            Err(e) => {
                if let (Some(effects), Some(asked)) = (&effects, &asked) {
                    effects.record_streamed(asked, &Err(e.clone()));
                }
                return Ok(Err(e));
            }
        };
        let status = response.status().as_u16();
        let headers = headers_of(&response);
        let recording = match (effects, asked) {
            (Some(effects), Some(asked)) => {
                let index = effects.record_streamed(&asked, &Ok((status, headers.clone())));
                Some((effects, index))
            }
            _ => None,
        };
        let body = self.table.push(BodyStream {
            response: Some(response),
            read: 0,
            deadline: self.deadline,
            redactor: Some(StreamRedactor::default()),
            ready: Vec::new(),
            taken: 0,
            recording,
        })?;
        Ok(Ok(StreamingResponse { status, headers, body }))
    }
}

impl HostBodyStream for HostState {
    async fn read(
        &mut self,
        stream: Resource<BodyStream>,
        max_bytes: u32,
    ) -> wasmtime::Result<Result<Option<Vec<u8>>, HttpError>> {
        self.remaining()?;
        let (deadline, cancel) = (self.deadline, self.cancel.clone());
        let body = self.table.get_mut(&stream)?;
        let max = max_bytes.clamp(1, MAX_READ_BYTES) as usize;
        // Bytes the redactor holds back (a possible start of a secret) wait
        // for the next read from the server; the guest gets only what has
        // been judged.
        while body.taken == body.ready.len() {
            let (Some(redactor), Some(response)) = (body.redactor.as_mut(), body.response.as_mut())
            else {
                return Ok(Ok(None));
            };
            if Instant::now() >= body.deadline {
                return Ok(Err(HttpError::Timeout));
            }
            let next = within_call(deadline, cancel.clone(), response.chunk());
            let chunk = match next.await.ok_or_else(cut_short)? {
                Ok(chunk) => chunk,
                Err(e) if e.is_timeout() => return Ok(Err(HttpError::Timeout)),
                Err(e) => return Ok(Err(HttpError::Io(redact(&e.to_string()).into_owned()))),
            };
            body.read += chunk.as_ref().map_or(0, |c| c.len() as u64);
            if body.read > MAX_RESPONSE_BYTES {
                return Ok(Err(HttpError::TooLarge(MAX_RESPONSE_BYTES)));
            }
            body.ready = match chunk {
                Some(chunk) => redactor.push(&chunk),
                None => body.redactor.take().map(StreamRedactor::finish).unwrap_or_default(),
            };
            body.taken = 0;
        }
        let end = (body.taken + max).min(body.ready.len());
        let chunk = body.ready[body.taken..end].to_vec();
        body.taken = end;
        if let Some((effects, index)) = &body.recording {
            effects.streamed_read(*index, &chunk);
        }
        Ok(Ok(Some(chunk)))
    }

    async fn drop(&mut self, stream: Resource<BodyStream>) -> wasmtime::Result<()> {
        self.table.delete(stream)?;
        Ok(())
    }
}
