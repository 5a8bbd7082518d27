//! Recorded effects: every host call a guest makes during one tool call
//! (`http`, `process`, the WASI clocks and randomness, and the digest of
//! each file it opens for reading), written down in order so that the
//! call can be run again offline, and answered (or, for a file, checked)
//! from that record when it is.
//!
//! A caller hands a tool call an [`Effects`] handle in its
//! [`CallContext`](crate::plugin::CallContext): [`Effects::record`] logs
//! what the guest asked and what it got (redacted, each body or output cut
//! at [`MAX_BLOB_BYTES`]); [`Effects::replay`] answers from such a log
//! without touching the network, starting a process or opening a browser.
//! A request the log lacks, or a clock or random value past its end, is a
//! divergence: the guest gets an error (or, for a value, the last one
//! recorded), and the handle keeps the first one for the report.
//!
//! The handle lives in the call's [`HostState`], set for each call, so a
//! kept-warm instance records each call into that call's own log. Without
//! a handle, every import here costs one branch.

use super::HostState;
use crate::contract::bindings::tool::reson::plugin::http::{HttpError, Request, Response};
use crate::contract::bindings::tool::reson::plugin::process::{Command, Output, ProcessError};
use base64::Engine as _;
use reson_text::redact::{redact, redact_bytes};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use wasmtime::component::Linker;
use wasmtime_wasi::HostMonotonicClock;
use wasmtime_wasi::p2::bindings::clocks::wall_clock::{self, Datetime};
use wasmtime_wasi::p2::bindings::random::{insecure, insecure_seed, random};

/// A streamed response's status and headers.
pub(crate) type Head = (u16, Vec<(String, String)>);

/// The most bytes of one body, output or random draw a recording keeps;
/// past it the entry is cut and says from how many bytes.
pub const MAX_BLOB_BYTES: usize = 1 << 20;

/// Bytes as a recording keeps them: UTF-8 text as it is, anything else in
/// base64; `cut_from` is the length before the cut, when there was one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Blob {
    /// The bytes as text, when they are UTF-8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// The bytes in standard base64, when they are not UTF-8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base64: Option<String>,
    /// The original length, when it was more than [`MAX_BLOB_BYTES`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cut_from: Option<u64>,
}

impl Blob {
    /// `bytes`, cut at [`MAX_BLOB_BYTES`] and redacted.
    pub fn new(bytes: &[u8]) -> Self {
        let cut_from = (bytes.len() > MAX_BLOB_BYTES).then_some(bytes.len() as u64);
        let kept = redact_bytes(&bytes[..bytes.len().min(MAX_BLOB_BYTES)]);
        match std::str::from_utf8(&kept) {
            Ok(text) => Self { text: Some(text.to_owned()), base64: None, cut_from },
            Err(_) => {
                let base64 = base64::engine::general_purpose::STANDARD.encode(&kept);
                Self { text: None, base64: Some(base64), cut_from }
            }
        }
    }

    /// The bytes kept (an undecodable base64 text gives none).
    pub fn bytes(&self) -> Vec<u8> {
        match (&self.text, &self.base64) {
            (Some(text), _) => text.clone().into_bytes(),
            (None, Some(b64)) => {
                base64::engine::general_purpose::STANDARD.decode(b64).unwrap_or_default()
            }
            (None, None) => Vec::new(),
        }
    }
}

/// An HTTP request as the guest asked for it, secrets still referenced by
/// name (the host fills them in later) and every value redacted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HttpRequest {
    /// `GET`, `POST`, ...
    pub method: String,
    /// The URL.
    pub url: String,
    /// The guest's headers, in its order.
    pub headers: Vec<(String, String)>,
    /// The body, if any.
    pub body: Option<Blob>,
}

impl HttpRequest {
    fn of(request: &Request) -> Self {
        let text = |s: &str| redact(s).into_owned();
        Self {
            method: request.method.clone(),
            url: text(&request.url),
            headers: request.headers.iter().map(|(n, v)| (text(n), text(v))).collect(),
            body: request.body.as_deref().map(Blob::new),
        }
    }
}

/// What an HTTP request produced, as the guest saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HttpOutcome {
    /// A response, its body read whole.
    Response {
        /// The status code.
        status: u16,
        /// The headers, redacted.
        headers: Vec<(String, String)>,
        /// The body, redacted.
        body: Blob,
    },
    /// Refused by the host.
    Denied(String),
    /// Timed out.
    Timeout,
    /// Connecting failed.
    Connect(String),
    /// The body was bigger than the host allows (the cap, in bytes).
    TooLarge(u64),
    /// A malformed request.
    InvalidRequest(String),
    /// Reading or writing failed.
    Io(String),
}

impl HttpOutcome {
    fn of(answer: &Result<Response, HttpError>) -> Self {
        match answer {
            Ok(r) => Self::Response {
                status: r.status,
                headers: r.headers.clone(),
                body: Blob::new(&r.body),
            },
            Err(HttpError::Denied(m)) => Self::Denied(m.clone()),
            Err(HttpError::Timeout) => Self::Timeout,
            Err(HttpError::Connect(m)) => Self::Connect(m.clone()),
            Err(HttpError::TooLarge(n)) => Self::TooLarge(*n),
            Err(HttpError::InvalidRequest(m)) => Self::InvalidRequest(m.clone()),
            Err(HttpError::Io(m)) => Self::Io(m.clone()),
        }
    }

    fn answer(&self) -> Result<Response, HttpError> {
        match self.clone() {
            Self::Response { status, headers, body } => {
                Ok(Response { status, headers, body: body.bytes() })
            }
            Self::Denied(m) => Err(HttpError::Denied(m)),
            Self::Timeout => Err(HttpError::Timeout),
            Self::Connect(m) => Err(HttpError::Connect(m)),
            Self::TooLarge(n) => Err(HttpError::TooLarge(n)),
            Self::InvalidRequest(m) => Err(HttpError::InvalidRequest(m)),
            Self::Io(m) => Err(HttpError::Io(m)),
        }
    }
}

/// A command as the guest asked for it, redacted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessCommand {
    /// The program and its arguments.
    pub argv: Vec<String>,
    /// The guest's working directory, if it named one.
    pub cwd: Option<String>,
    /// The variables the guest asked for.
    pub env: Vec<(String, String)>,
    /// Bytes for its stdin.
    pub stdin: Option<Blob>,
}

impl ProcessCommand {
    fn of(command: &Command) -> Self {
        let text = |s: &str| redact(s).into_owned();
        Self {
            argv: std::iter::once(&command.program).chain(&command.args).map(|a| text(a)).collect(),
            cwd: command.cwd.as_deref().map(text),
            env: command.env.iter().map(|(n, v)| (text(n), text(v))).collect(),
            stdin: command.stdin.as_deref().map(Blob::new),
        }
    }
}

/// What a command produced, as the guest saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProcessOutcome {
    /// It ran.
    Output {
        /// Its exit code; `None` when a signal ended it.
        exit_code: Option<i32>,
        /// Its stdout, redacted.
        stdout: Blob,
        /// Its stderr, redacted.
        stderr: Blob,
        /// Whether the host cut stdout or stderr at its cap.
        truncated: bool,
    },
    /// Refused by the host.
    Denied(String),
    /// It could not start.
    Spawn(String),
    /// It ran past its timeout.
    Timeout,
}

impl ProcessOutcome {
    fn of(answer: &Result<Output, ProcessError>) -> Self {
        match answer {
            Ok(o) => Self::Output {
                exit_code: o.exit_code,
                stdout: Blob::new(&o.stdout),
                stderr: Blob::new(&o.stderr),
                truncated: o.truncated,
            },
            Err(ProcessError::Denied(m)) => Self::Denied(m.clone()),
            Err(ProcessError::Spawn(m)) => Self::Spawn(m.clone()),
            Err(ProcessError::Timeout) => Self::Timeout,
        }
    }

    fn answer(&self) -> Result<Output, ProcessError> {
        match self.clone() {
            Self::Output { exit_code, stdout, stderr, truncated } => {
                Ok(Output { exit_code, stdout: stdout.bytes(), stderr: stderr.bytes(), truncated })
            }
            Self::Denied(m) => Err(ProcessError::Denied(m)),
            Self::Spawn(m) => Err(ProcessError::Spawn(m)),
            Self::Timeout => Err(ProcessError::Timeout),
        }
    }
}

/// One host call of a guest and what it got.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Effect {
    /// `http.send`, or `http.send-streaming` with the body as the guest
    /// read it.
    Http {
        /// Sent with `send-streaming`.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        streaming: bool,
        /// The request.
        request: HttpRequest,
        /// The response or error.
        outcome: HttpOutcome,
    },
    /// `process.run`.
    Process {
        /// The command.
        command: ProcessCommand,
        /// Its output or error.
        outcome: ProcessOutcome,
    },
    /// `wasi:clocks/wall-clock.now`.
    WallClock {
        /// Seconds since the Unix epoch.
        seconds: u64,
        /// And nanoseconds.
        nanoseconds: u32,
    },
    /// `wasi:clocks/monotonic-clock.now`.
    MonotonicClock {
        /// The instant, in nanoseconds.
        nanoseconds: u64,
    },
    /// `get-random-bytes` or `get-insecure-random-bytes`.
    RandomBytes {
        /// From `wasi:random/insecure`.
        insecure: bool,
        /// The bytes.
        bytes: Blob,
    },
    /// `get-random-u64` or `get-insecure-random-u64`.
    RandomU64 {
        /// From `wasi:random/insecure`.
        insecure: bool,
        /// The value.
        value: u64,
    },
    /// `wasi:random/insecure-seed.insecure-seed`.
    InsecureSeed {
        /// The two halves.
        value: (u64, u64),
    },
    /// A regular file opened for reading (`wasi:filesystem` `open-at`).
    FileRead {
        /// The path as the guest named it, relative to the directory it
        /// opened it from.
        path: String,
        /// Its size when opened.
        bytes: u64,
        /// The SHA-256 of its content; `None` over [`MAX_HASHED_FILE_BYTES`].
        #[serde(default, skip_serializing_if = "Option::is_none")]
        sha256: Option<String>,
    },
}

/// Largest file whose content is hashed when it is opened for reading:
/// a larger one is recorded by its size alone.
pub const MAX_HASHED_FILE_BYTES: u64 = 16 << 20;

impl Effect {
    /// The kind of host call, as a recording names it.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Http { .. } => "http",
            Self::Process { .. } => "process",
            Self::WallClock { .. } => "wall-clock",
            Self::MonotonicClock { .. } => "monotonic-clock",
            Self::RandomBytes { insecure: false, .. } => "random-bytes",
            Self::RandomBytes { insecure: true, .. } => "insecure-random-bytes",
            Self::RandomU64 { insecure: false, .. } => "random-u64",
            Self::RandomU64 { insecure: true, .. } => "insecure-random-u64",
            Self::InsecureSeed { .. } => "insecure-seed",
            Self::FileRead { .. } => "file-read",
        }
    }

    /// What was asked, in one line.
    pub fn asked(&self) -> String {
        match self {
            Self::Http { request, .. } => format!("{} {}", request.method, request.url),
            Self::Process { command, .. } => command.argv.join(" "),
            Self::RandomBytes { bytes, .. } => format!("{} bytes", bytes.bytes().len()),
            Self::FileRead { path, .. } => path.clone(),
            _ => "a value".to_owned(),
        }
    }

    /// Whether a replay must use it: a request left unused means the guest
    /// did less than it did; a clock or random value left over does not.
    fn is_request(&self) -> bool {
        matches!(self, Self::Http { .. } | Self::Process { .. })
    }
}

/// The first thing a replayed call did that its recording cannot answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{kind} {asked}: {why}")]
pub struct Divergence {
    /// The kind of host call (`http`, `process`, `browser`, `wall-clock`, ...).
    pub kind: String,
    /// What the guest asked for.
    pub asked: String,
    /// Why the recording could not answer.
    pub why: String,
}

/// The plugin that served a recorded call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallInfo {
    /// The plugin's name.
    pub plugin: String,
    /// The SHA-256 of its component.
    pub sha256: String,
    /// The tool called.
    pub tool: String,
}

#[derive(Debug, Default)]
struct Log {
    replaying: bool,
    entries: Vec<Effect>,
    /// In a replay, which entries were answered.
    used: Vec<bool>,
    divergence: Option<Divergence>,
    call: Option<CallInfo>,
    /// The bodies of streamed responses read so far, by entry (a cut
    /// body keeps one byte past the cap, to show it was cut).
    streamed: HashMap<usize, Vec<u8>>,
}

impl Log {
    fn diverge(&mut self, kind: &str, asked: String, why: &str) {
        if self.divergence.is_none() {
            self.divergence = Some(Divergence { kind: kind.into(), asked, why: why.into() });
        }
    }

    /// The first unused entry `wanted` accepts, now used.
    fn take(&mut self, wanted: impl Fn(&Effect) -> bool) -> Option<Effect> {
        let i = (0..self.entries.len()).find(|&i| !self.used[i] && wanted(&self.entries[i]))?;
        self.used[i] = true;
        Some(self.entries[i].clone())
    }

    /// The next recorded value of `kind`; past the last one, the last one
    /// again and a divergence; `None` when there never was one.
    fn next_value(&mut self, kind: &str) -> Option<Effect> {
        if let Some(effect) = self.take(|e| e.kind() == kind) {
            return Some(effect);
        }
        self.diverge(kind, "a value".into(), "the recording has no more values of this kind");
        self.entries.iter().rev().find(|e| e.kind() == kind).cloned()
    }
}

/// The effect log of one tool call, recording or replaying; cheap to
/// clone (clones share the log).
#[derive(Debug, Clone, Default)]
pub struct Effects(Arc<Mutex<Log>>);

impl Effects {
    /// A log that records what the call does.
    pub fn record() -> Self {
        Self::default()
    }

    /// A log that answers the call from `recording`, in place of the world.
    pub fn replay(recording: Vec<Effect>) -> Self {
        let used = vec![false; recording.len()];
        Self(Arc::new(Mutex::new(Log {
            replaying: true,
            entries: recording,
            used,
            ..Log::default()
        })))
    }

    fn log(&self) -> std::sync::MutexGuard<'_, Log> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether this log answers from a recording.
    pub fn is_replay(&self) -> bool {
        self.log().replaying
    }

    /// The plugin that served the call; `None` when no plugin ran it (a
    /// built-in or MCP tool).
    pub fn call(&self) -> Option<CallInfo> {
        self.log().call.clone()
    }

    /// The effects recorded so far (in a replay: the recording).
    pub fn effects(&self) -> Vec<Effect> {
        let log = self.log();
        let mut entries = log.entries.clone();
        for (&index, read) in &log.streamed {
            if let Some(Effect::Http { outcome: HttpOutcome::Response { body, .. }, .. }) =
                entries.get_mut(index)
            {
                *body = Blob::new(read);
            }
        }
        entries
    }

    /// The first divergence of a replay.
    pub fn divergence(&self) -> Option<Divergence> {
        self.log().divergence.clone()
    }

    /// The recorded requests a replay never asked for, in order.
    pub fn unused(&self) -> Vec<Effect> {
        let log = self.log();
        let unused =
            log.entries.iter().zip(&log.used).filter(|(e, used)| !**used && e.is_request());
        unused.map(|(e, _)| e.clone()).collect()
    }

    /// Notes which plugin serves the call.
    pub(crate) fn begin(&self, plugin: &str, sha256: &str, tool: &str) {
        self.log().call = Some(CallInfo {
            plugin: plugin.to_owned(),
            sha256: sha256.to_owned(),
            tool: tool.to_owned(),
        });
    }

    fn push(&self, effect: Effect) {
        self.log().entries.push(effect);
    }

    /// Records a `send-streaming` request and its answer (the status and
    /// headers, or the error); the body follows as the guest reads it.
    /// Returns the entry's index.
    pub(crate) fn record_streamed(
        &self,
        request: &Request,
        answer: &Result<Head, HttpError>,
    ) -> usize {
        let outcome = match answer {
            Ok((status, headers)) => HttpOutcome::Response {
                status: *status,
                headers: headers.clone(),
                body: Blob::new(&[]),
            },
            Err(e) => HttpOutcome::of(&Err(e.clone())),
        };
        let mut log = self.log();
        log.entries.push(Effect::Http {
            streaming: true,
            request: HttpRequest::of(request),
            outcome,
        });
        log.entries.len() - 1
    }

    /// Adds `chunk`, read by the guest, to the body of streamed entry `index`.
    pub(crate) fn streamed_read(&self, index: usize, chunk: &[u8]) {
        let mut log = self.log();
        let body = log.streamed.entry(index).or_default();
        let room = (MAX_BLOB_BYTES + 1).saturating_sub(body.len());
        body.extend_from_slice(&chunk[..chunk.len().min(room)]);
    }

    /// A replay's answer to `send-streaming`: the recorded status, headers
    /// and body, or the error for the guest.
    pub(crate) fn streamed_answer(&self, request: &Request) -> Result<(Head, Vec<u8>), HttpError> {
        let asked = HttpRequest::of(request);
        let mut log = self.log();
        let found = log.take(
            |e| matches!(e, Effect::Http { streaming: true, request, .. } if *request == asked),
        );
        match found {
            Some(Effect::Http { outcome, .. }) => {
                outcome.answer().map(|r| ((r.status, r.headers), r.body))
            }
            _ => {
                let line = format!("{} {} (streamed)", asked.method, asked.url);
                log.diverge("http", line.clone(), "the recording has no such request");
                Err(HttpError::Io(format!("replay: no recorded response to {line}")))
            }
        }
    }

    /// A replay's answer to a host call it cannot make: the reason, as a
    /// divergence, for the guest's error.
    pub(crate) fn refuse(&self, kind: &str, asked: String) -> String {
        let why = "a replay makes no such call";
        self.log().diverge(kind, asked.clone(), why);
        format!("replay: {kind} {asked}: {why}")
    }
}

impl HostState {
    /// `http.send`, recorded or answered from a recording.
    pub(super) async fn send_with_effects(
        &mut self,
        request: Request,
    ) -> wasmtime::Result<Result<Response, HttpError>> {
        let Some(effects) = self.effects.clone() else { return self.send_live(request).await };
        let asked = HttpRequest::of(&request);
        if effects.is_replay() {
            self.remaining()?;
            let mut log = effects.log();
            let found = log.take(
                |e| matches!(e, Effect::Http { streaming: false, request, .. } if *request == asked),
            );
            return Ok(match found {
                Some(Effect::Http { outcome, .. }) => outcome.answer(),
                _ => {
                    let line = format!("{} {}", asked.method, asked.url);
                    log.diverge("http", line.clone(), "the recording has no such request");
                    Err(HttpError::Io(format!("replay: no recorded response to {line}")))
                }
            });
        }
        let answer = self.send_live(request).await?;
        let outcome = HttpOutcome::of(&answer);
        effects.push(Effect::Http { streaming: false, request: asked, outcome });
        Ok(answer)
    }

    /// `process.run`, recorded or answered from a recording.
    pub(super) async fn run_with_effects(
        &mut self,
        command: Command,
    ) -> wasmtime::Result<Result<Output, ProcessError>> {
        let Some(effects) = self.effects.clone() else { return self.run_live(command).await };
        let asked = ProcessCommand::of(&command);
        if effects.is_replay() {
            self.remaining()?;
            let mut log = effects.log();
            let found =
                log.take(|e| matches!(e, Effect::Process { command, .. } if *command == asked));
            return Ok(match found {
                Some(Effect::Process { outcome, .. }) => outcome.answer(),
                _ => {
                    let line = asked.argv.join(" ");
                    log.diverge("process", line.clone(), "the recording has no such command");
                    Err(ProcessError::Spawn(format!("replay: no recorded run of `{line}`")))
                }
            });
        }
        let answer = self.run_live(command).await?;
        effects.push(Effect::Process { command: asked, outcome: ProcessOutcome::of(&answer) });
        Ok(answer)
    }

    /// A regular file the guest opened for reading: its digest recorded,
    /// or, in a replay, checked against the recording (a read the
    /// recording lacks, or of other content, is a divergence; the guest
    /// reads the file either way).
    pub(super) fn file_read(&mut self, path: &str, file: &std::fs::File) {
        let Some(effects) = self.effects.clone() else { return };
        let (bytes, sha256) = file_digest(file);
        if !effects.is_replay() {
            effects.push(Effect::FileRead { path: path.to_owned(), bytes, sha256 });
            return;
        }
        let mut log = effects.log();
        let found = log.take(|e| matches!(e, Effect::FileRead { path: p, .. } if p == path));
        match found {
            Some(Effect::FileRead { sha256: recorded, bytes: size, .. })
                if recorded != sha256 || size != bytes =>
            {
                log.diverge("file-read", path.to_owned(), "its content differs from the recording");
            }
            Some(_) => {}
            None => log.diverge("file-read", path.to_owned(), "the recording has no read of it"),
        }
    }

    /// A browser call in a replay, which opens no browser: the error for
    /// the guest.
    pub(super) fn browser_replayed(&self) -> Option<String> {
        let effects = self.effects.as_ref().filter(|e| e.is_replay())?;
        Some(effects.refuse("browser", "a browser call".into()))
    }

    /// A clock or random value: the live one `live` makes (recorded when
    /// recording), or the recording's next one of `kind`, read by `read`.
    fn value<T: Default>(
        &mut self,
        kind: &str,
        live: impl FnOnce(&mut Self) -> wasmtime::Result<T>,
        record: impl FnOnce(&T) -> Effect,
        read: impl FnOnce(Effect) -> Option<T>,
    ) -> wasmtime::Result<T> {
        let Some(effects) = self.effects.clone() else { return live(self) };
        if effects.is_replay() {
            return Ok(effects.log().next_value(kind).and_then(read).unwrap_or_default());
        }
        let value = live(self)?;
        effects.push(record(&value));
        Ok(value)
    }

    fn wall_now(&mut self) -> wasmtime::Result<Datetime> {
        let live = |state: &mut Self| {
            let mut view = wasmtime_wasi::clocks::WasiClocksCtxView {
                ctx: state.wasi.clocks(),
                table: &mut state.table,
            };
            let now = wall_clock::Host::now(&mut view)?;
            Ok((now.seconds, now.nanoseconds))
        };
        let (seconds, nanoseconds) = self.value(
            "wall-clock",
            live,
            |&(seconds, nanoseconds)| Effect::WallClock { seconds, nanoseconds },
            |e| match e {
                Effect::WallClock { seconds, nanoseconds } => Some((seconds, nanoseconds)),
                _ => None,
            },
        )?;
        Ok(Datetime { seconds, nanoseconds })
    }

    fn random_bytes(&mut self, insecure: bool, len: u64) -> wasmtime::Result<Vec<u8>> {
        let kind = if insecure { "insecure-random-bytes" } else { "random-bytes" };
        let live = |state: &mut Self| {
            let ctx = state.wasi.random();
            if insecure {
                insecure::Host::get_insecure_random_bytes(ctx, len)
            } else {
                random::Host::get_random_bytes(ctx, len)
            }
        };
        let mut bytes = self.value(
            kind,
            live,
            |b| Effect::RandomBytes { insecure, bytes: Blob::new(b) },
            |e| match e {
                Effect::RandomBytes { bytes, .. } => Some(bytes.bytes()),
                _ => None,
            },
        )?;
        let wanted = usize::try_from(len).unwrap_or(usize::MAX);
        if bytes.len() != wanted {
            if let Some(effects) = &self.effects {
                let why = format!("the recorded draw has {} bytes", bytes.len());
                effects.log().diverge(kind, format!("{len} bytes"), &why);
            }
            bytes.resize(wanted.min(MAX_BLOB_BYTES), 0);
        }
        Ok(bytes)
    }

    fn random_u64(&mut self, insecure: bool) -> wasmtime::Result<u64> {
        let kind = if insecure { "insecure-random-u64" } else { "random-u64" };
        let live = |state: &mut Self| {
            let ctx = state.wasi.random();
            if insecure {
                insecure::Host::get_insecure_random_u64(ctx)
            } else {
                random::Host::get_random_u64(ctx)
            }
        };
        self.value(
            kind,
            live,
            |&value| Effect::RandomU64 { insecure, value },
            |e| match e {
                Effect::RandomU64 { value, .. } => Some(value),
                _ => None,
            },
        )
    }
}

/// The size and, up to [`MAX_HASHED_FILE_BYTES`], the SHA-256 of `file`,
/// read at offsets (the guest's position in it does not move). A file that
/// cannot be read is recorded by its size, as the guest will find out.
fn file_digest(file: &std::fs::File) -> (u64, Option<String>) {
    use sha2::Digest as _;
    let bytes = file.metadata().map_or(0, |m| m.len());
    if bytes > MAX_HASHED_FILE_BYTES {
        return (bytes, None);
    }
    let mut hasher = sha2::Sha256::new();
    let mut buf = vec![0u8; 64 << 10];
    let mut at = 0u64;
    loop {
        match read_at(file, &mut buf, at) {
            Ok(0) => return (bytes, Some(hex::encode(hasher.finalize()))),
            Ok(n) => {
                hasher.update(&buf[..n]);
                at += n as u64;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return (bytes, None),
        }
    }
}

/// Reads at `at`. Windows moves the handle's position doing it; nothing
/// reads the position there (wasmtime-wasi's streams keep their own).
fn read_at(file: &std::fs::File, buf: &mut [u8], at: u64) -> std::io::Result<usize> {
    #[cfg(unix)]
    return std::os::unix::fs::FileExt::read_at(file, buf, at);
    #[cfg(windows)]
    return std::os::windows::fs::FileExt::seek_read(file, buf, at);
}

/// Replaces the WASI clock reads and random draws in `linker` with ones
/// that go through the call's [`Effects`].
pub(crate) fn add_to_linker(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    const WALL: &str = "wasi:clocks/wall-clock@0.2.12";
    const MONOTONIC: &str = "wasi:clocks/monotonic-clock@0.2.12";
    const RANDOM: &str = "wasi:random/random@0.2.12";
    const INSECURE: &str = "wasi:random/insecure@0.2.12";
    const SEED: &str = "wasi:random/insecure-seed@0.2.12";
    linker.allow_shadowing(true);
    linker.instance(WALL)?.func_wrap("now", |mut cx, (): ()| Ok((cx.data_mut().wall_now()?,)))?;
    linker.instance(MONOTONIC)?.func_wrap("now", |mut cx, (): ()| {
        let now = cx.data_mut().value(
            "monotonic-clock",
            |_| Ok(super::clock::GuestClock.now()),
            |&nanoseconds| Effect::MonotonicClock { nanoseconds },
            |e| match e {
                Effect::MonotonicClock { nanoseconds } => Some(nanoseconds),
                _ => None,
            },
        )?;
        Ok((now,))
    })?;
    let mut random = linker.instance(RANDOM)?;
    random.func_wrap("get-random-bytes", |mut cx, (len,): (u64,)| {
        Ok((cx.data_mut().random_bytes(false, len)?,))
    })?;
    random
        .func_wrap("get-random-u64", |mut cx, (): ()| Ok((cx.data_mut().random_u64(false)?,)))?;
    let mut insecure = linker.instance(INSECURE)?;
    insecure.func_wrap("get-insecure-random-bytes", |mut cx, (len,): (u64,)| {
        Ok((cx.data_mut().random_bytes(true, len)?,))
    })?;
    insecure.func_wrap("get-insecure-random-u64", |mut cx, (): ()| {
        Ok((cx.data_mut().random_u64(true)?,))
    })?;
    linker.instance(SEED)?.func_wrap("insecure-seed", |mut cx, (): ()| {
        let seed = cx.data_mut().value(
            "insecure-seed",
            |state| insecure_seed::Host::insecure_seed(state.wasi.random()),
            |&value| Effect::InsecureSeed { value },
            |e| match e {
                Effect::InsecureSeed { value } => Some(value),
                _ => None,
            },
        )?;
        Ok((seed,))
    })?;
    linker.allow_shadowing(false);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn http(url: &str, body: &str) -> Effect {
        Effect::Http {
            streaming: false,
            request: HttpRequest {
                method: "GET".into(),
                url: url.into(),
                headers: Vec::new(),
                body: None,
            },
            outcome: HttpOutcome::Response {
                status: 200,
                headers: Vec::new(),
                body: Blob::new(body.as_bytes()),
            },
        }
    }

    #[test]
    fn blobs_keep_text_and_binary_and_say_where_they_were_cut() {
        let text = Blob::new(b"hello");
        assert_eq!((text.text.as_deref(), text.cut_from), (Some("hello"), None));
        let binary = Blob::new(&[0xff, 0x00, 0x80]);
        assert!(binary.text.is_none());
        assert_eq!(binary.bytes(), vec![0xff, 0x00, 0x80]);
        let big = Blob::new(&vec![b'x'; MAX_BLOB_BYTES + 10]);
        assert_eq!(big.cut_from, Some(MAX_BLOB_BYTES as u64 + 10));
        assert_eq!(big.bytes().len(), MAX_BLOB_BYTES);
    }

    #[test]
    fn a_replay_answers_the_first_unused_matching_request_and_reports_the_rest() {
        let effects = Effects::replay(vec![http("http://a/", "one"), http("http://a/", "two")]);
        let mut log = effects.log();
        let url = |e: &Effect, want: &str| matches!(e, Effect::Http { request, .. } if request.url == want);
        let first = log.take(|e| url(e, "http://a/")).unwrap();
        let second = log.take(|e| url(e, "http://a/")).unwrap();
        assert_ne!(first, second);
        assert!(log.take(|e| url(e, "http://a/")).is_none());
        drop(log);
        assert!(effects.unused().is_empty());
        let effects = Effects::replay(vec![http("http://a/", "one")]);
        assert_eq!(effects.unused().len(), 1);
    }

    #[test]
    fn values_come_in_order_then_the_last_one_with_a_divergence() {
        let effects = Effects::replay(vec![
            Effect::MonotonicClock { nanoseconds: 5 },
            Effect::MonotonicClock { nanoseconds: 9 },
        ]);
        let mut log = effects.log();
        let next = |log: &mut Log| match log.next_value("monotonic-clock") {
            Some(Effect::MonotonicClock { nanoseconds }) => nanoseconds,
            other => panic!("{other:?}"),
        };
        assert_eq!((next(&mut log), next(&mut log)), (5, 9));
        assert!(log.divergence.is_none());
        assert_eq!(next(&mut log), 9);
        assert_eq!(log.divergence.as_ref().unwrap().kind, "monotonic-clock");
        assert!(log.next_value("wall-clock").is_none());
        // The first divergence is the one kept.
        assert_eq!(log.divergence.as_ref().unwrap().kind, "monotonic-clock");
    }

    #[test]
    fn recordings_round_trip_through_json() {
        let recording = vec![
            http("http://a/", "body"),
            Effect::InsecureSeed { value: (1, 2) },
            Effect::RandomBytes { insecure: false, bytes: Blob::new(&[1, 2, 255]) },
        ];
        let json = serde_json::to_value(&recording).unwrap();
        assert_eq!(json[0]["kind"], "http");
        let back: Vec<Effect> = serde_json::from_value(json).unwrap();
        assert_eq!(back, recording);
    }
}
