//! `reson:plugin/http`: requests performed by the host, only to URLs both
//! requested and granted, with secrets filled in by the host.

use super::HostState;
use super::secrets::SecretError;
use crate::contract::bindings::tool::reson::plugin::http::{
    Header, Host, HostBodyStream, HttpError, Request, Response, StreamingResponse,
};
use reqwest::blocking::Client;
use std::io::Read;
use std::sync::OnceLock;
use std::time::{Duration, Instant};
use wasmtime::component::Resource;

/// The most bytes one response body may have.
pub(crate) const MAX_RESPONSE_BYTES: u64 = 32 << 20;
/// Chunk size cap for one streamed read.
const MAX_READ_BYTES: u32 = 1 << 20;

/// A streamed response body, owned by the guest through a resource handle.
pub struct BodyStream {
    response: reqwest::blocking::Response,
    read: u64,
    deadline: Instant,
}

/// One client for the whole process: it owns a runtime thread, which must
/// never be dropped from inside an async context.
fn client() -> &'static Client {
    static CLIENT: OnceLock<Client> = OnceLock::new();
    CLIENT.get_or_init(|| {
        Client::builder()
            // A redirect could lead to a host that is not granted.
            .redirect(reqwest::redirect::Policy::none())
            // Proxies from the environment would be a way around the allowlist.
            .no_proxy()
            .build()
            .expect("the HTTP client builds with static settings")
    })
}

impl HostState {
    fn prepare(
        &mut self,
        request: Request,
    ) -> Result<(reqwest::blocking::RequestBuilder, Duration), HttpError> {
        let shown_url = request.url.clone();
        let fill = |state: &mut Self, text: &str| -> Result<String, HttpError> {
            let grants = state.grants.clone();
            state.secrets.substitute(text, |name| grants.allows_secret(name)).map_err(|e| {
                let detail = match e {
                    SecretError::NotGranted(name) => format!("secret `{name}` is not granted"),
                    SecretError::Unset(name) => format!("secret `{name}` is not set"),
                };
                HttpError::Denied(state.deny("secret", detail))
            })
        };
        let url = fill(self, &request.url)?;
        let url = reqwest::Url::parse(&url)
            .map_err(|e| HttpError::InvalidRequest(format!("bad URL `{shown_url}`: {e}")))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(HttpError::InvalidRequest(format!("unsupported scheme in `{shown_url}`")));
        }
        if !self.grants.allows_url(&url) {
            let detail = format!(
                "{} {shown_url} is not granted to plugin `{}`",
                request.method, self.plugin
            );
            return Err(HttpError::Denied(self.deny("http", detail)));
        }
        let method = reqwest::Method::from_bytes(request.method.as_bytes())
            .map_err(|_| HttpError::InvalidRequest(format!("bad method `{}`", request.method)))?;
        let remaining = self.deadline.saturating_duration_since(Instant::now());
        let timeout = request
            .timeout_ms
            .map_or(remaining, |ms| Duration::from_millis(ms.into()).min(remaining));
        let mut builder = client().request(method, url).timeout(timeout);
        for (name, value) in &request.headers {
            builder = builder.header(name, fill(self, value)?);
        }
        if let Some(body) = request.body {
            builder = builder.body(body);
        }
        Ok((builder, timeout))
    }

    fn classify(&self, err: &reqwest::Error) -> HttpError {
        let message = self.secrets.redact_named(&err.to_string(), self.grants.secrets.iter());
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

    fn start(&mut self, request: Request) -> Result<reqwest::blocking::Response, HttpError> {
        let (builder, _) = self.prepare(request)?;
        let response = builder.send().map_err(|e| self.classify(&e))?;
        if response.content_length().is_some_and(|len| len > MAX_RESPONSE_BYTES) {
            return Err(HttpError::TooLarge(MAX_RESPONSE_BYTES));
        }
        Ok(response)
    }
}

fn headers_of(response: &reqwest::blocking::Response) -> Vec<Header> {
    response
        .headers()
        .iter()
        .map(|(k, v)| (k.to_string(), String::from_utf8_lossy(v.as_bytes()).into_owned()))
        .collect()
}

impl Host for HostState {
    fn send(&mut self, request: Request) -> wasmtime::Result<Result<Response, HttpError>> {
        self.remaining()?;
        let response = match self.start(request) {
            Ok(response) => response,
            Err(e) => return Ok(Err(e)),
        };
        let status = response.status().as_u16();
        let headers = headers_of(&response);
        let mut body = Vec::new();
        let read = response.take(MAX_RESPONSE_BYTES + 1).read_to_end(&mut body);
        self.remaining()?;
        Ok(match read {
            Err(e) => Err(HttpError::Io(e.to_string())),
            Ok(_) if body.len() as u64 > MAX_RESPONSE_BYTES => {
                Err(HttpError::TooLarge(MAX_RESPONSE_BYTES))
            }
            Ok(_) => Ok(Response { status, headers, body }),
        })
    }

    fn send_streaming(
        &mut self,
        request: Request,
    ) -> wasmtime::Result<Result<StreamingResponse, HttpError>> {
        self.remaining()?;
        let response = match self.start(request) {
            Ok(response) => response,
            Err(e) => return Ok(Err(e)),
        };
        let status = response.status().as_u16();
        let headers = headers_of(&response);
        let body = self.table.push(BodyStream { response, read: 0, deadline: self.deadline })?;
        Ok(Ok(StreamingResponse { status, headers, body }))
    }
}

impl HostBodyStream for HostState {
    fn read(
        &mut self,
        stream: Resource<BodyStream>,
        max_bytes: u32,
    ) -> wasmtime::Result<Result<Option<Vec<u8>>, HttpError>> {
        self.remaining()?;
        let body = self.table.get_mut(&stream)?;
        if Instant::now() >= body.deadline {
            return Ok(Err(HttpError::Timeout));
        }
        let mut chunk = vec![0; max_bytes.clamp(1, MAX_READ_BYTES) as usize];
        let n = match body.response.read(&mut chunk) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {
                return Ok(Err(HttpError::Timeout));
            }
            Err(e) => return Ok(Err(HttpError::Io(e.to_string()))),
        };
        body.read += n as u64;
        if body.read > MAX_RESPONSE_BYTES {
            return Ok(Err(HttpError::TooLarge(MAX_RESPONSE_BYTES)));
        }
        if n == 0 {
            return Ok(Ok(None));
        }
        chunk.truncate(n);
        Ok(Ok(Some(chunk)))
    }

    fn drop(&mut self, stream: Resource<BodyStream>) -> wasmtime::Result<()> {
        self.table.delete(stream)?;
        Ok(())
    }
}
