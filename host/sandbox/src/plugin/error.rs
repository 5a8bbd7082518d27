//! Typed failures of loading a plugin and of calling a tool.

use serde::Serialize;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

/// Why a plugin file did not load. Each message is one line naming the file.
#[derive(Debug, Clone, thiserror::Error)]
pub enum LoadError {
    /// The file name is not a usable plugin name.
    #[error("{}: a plugin's file name must be 1 to 64 letters, digits, `_`, `-` or `.`, starting with a letter or digit", file.display())]
    BadName {
        /// The plugin file.
        file: PathBuf,
    },
    /// The `<name>.toml` beside the `.wasm` is missing.
    #[error("{}: missing manifest {}", file.display(), manifest.display())]
    MissingManifest {
        /// The plugin file.
        file: PathBuf,
        /// Where the manifest was expected.
        manifest: PathBuf,
    },
    /// The manifest does not parse or does not fit the file.
    #[error("{}: bad manifest: {reason}", file.display())]
    BadManifest {
        /// The plugin file.
        file: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The file does not start with the WebAssembly magic number.
    #[error("{}: not a WebAssembly file", file.display())]
    NotWasm {
        /// The plugin file.
        file: PathBuf,
    },
    /// A core module where a component is needed.
    #[error("{}: a core WebAssembly module, not a component (build for wasm32-wasip2, or wrap it with `wasm-tools component new`)", file.display())]
    CoreModule {
        /// The plugin file.
        file: PathBuf,
    },
    /// The component is malformed (for example truncated).
    #[error("{}: invalid component: {reason}", file.display())]
    Invalid {
        /// The plugin file.
        file: PathBuf,
        /// The validator's message.
        reason: String,
    },
    /// Built for another contract version, or for no Reson world at all.
    #[error("{}: {source}", file.display())]
    Contract {
        /// The plugin file.
        file: PathBuf,
        /// The mismatch.
        source: crate::contract::ContractError,
    },
    /// It imports something this host does not provide.
    #[error("{}: cannot be linked: {reason}", file.display())]
    Link {
        /// The plugin file.
        file: PathBuf,
        /// The linker's message.
        reason: String,
    },
    /// Changed since it was locked, and now requests more.
    #[error("{}: changed since it was locked and now requests more ({}); run `reson plugins accept {name}` to allow it", file.display(), grown.join(", "))]
    NeedsApproval {
        /// The plugin file.
        file: PathBuf,
        /// The plugin name.
        name: String,
        /// What it requests beyond the locked version.
        grown: Vec<String>,
    },
    /// The user's grant for it cannot be applied.
    #[error("{}: {reason}", file.display())]
    Grant {
        /// The plugin file.
        file: PathBuf,
        /// What is wrong with the grant.
        reason: String,
    },
    /// Asking it for its tools failed, or a tool spec is unusable.
    #[error("{}: {reason}", file.display())]
    Tools {
        /// The plugin file.
        file: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// `[plugins] require_signature` is on and no trusted key signed it.
    #[error("{}: refused before compiling, as `[plugins] require_signature` is on: {status}", file.display())]
    Signature {
        /// The plugin file.
        file: PathBuf,
        /// What its signature says.
        status: super::signing::SignatureStatus,
    },
    /// Reading a file failed.
    #[error("{}: {reason}", file.display())]
    Io {
        /// The file.
        file: PathBuf,
        /// The I/O error.
        reason: String,
    },
}

/// A limit a call ran into.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "limit", rename_all = "kebab-case")]
pub enum Limit {
    /// The wall-clock deadline.
    Timeout {
        /// The deadline in milliseconds.
        ms: u64,
    },
    /// The linear memory cap.
    Memory {
        /// The cap in bytes.
        bytes: u64,
    },
    /// The fuel budget.
    Fuel {
        /// Fuel granted per call.
        units: u64,
    },
    /// Open files, streams and other handles held at once.
    Handles {
        /// The cap.
        max: u64,
    },
    /// The output cap.
    Output {
        /// Bytes the call returned.
        returned: u64,
        /// The cap in bytes.
        bytes: u64,
    },
}

impl Limit {
    pub(crate) fn timeout(d: Duration) -> Self {
        Self::Timeout { ms: u64::try_from(d.as_millis()).unwrap_or(u64::MAX) }
    }
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Timeout { ms } => write!(f, "time limit of {ms} ms"),
            Self::Memory { bytes } => write!(f, "memory limit of {} MiB", bytes >> 20),
            Self::Fuel { units } => write!(f, "fuel limit of {units}"),
            Self::Handles { max } => {
                write!(f, "limit of {max} open files, streams and other handles held at once")
            }
            Self::Output { returned, bytes } => {
                write!(f, "output limit of {bytes} bytes (returned {returned})")
            }
        }
    }
}

/// How a guest crashed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "trap", content = "message", rename_all = "kebab-case")]
pub enum TrapKind {
    /// The guest panicked; the panic message, as the guest wrote it to its
    /// stderr (guest-controlled text).
    Panic(String),
    /// The guest overflowed its stack.
    StackOverflow,
    /// Any other trap, described.
    Other(String),
}

impl fmt::Display for TrapKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // The message is the guest's own stderr: quoted and escaped, so
            // that it never reads as the host's diagnosis.
            Self::Panic(msg) => write!(f, "the guest panicked; its stderr says {msg:?}"),
            Self::StackOverflow => f.write_str("stack overflow"),
            Self::Other(msg) => f.write_str(msg),
        }
    }
}

/// The error a tool itself returned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", content = "message", rename_all = "kebab-case")]
pub enum ToolFailure {
    /// The arguments were unusable.
    InvalidArguments(String),
    /// The component does not serve that tool name.
    UnknownTool(String),
    /// The host refused a capability the tool needed.
    Denied(String),
    /// Anything else.
    Failed(String),
}

impl fmt::Display for ToolFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InvalidArguments(m) => write!(f, "invalid arguments: {m}"),
            Self::UnknownTool(m) => write!(f, "unknown tool: {m}"),
            Self::Denied(m) => write!(f, "denied: {m}"),
            Self::Failed(m) => f.write_str(m),
        }
    }
}

/// Why a tool call produced no output. The host is unharmed in every case,
/// and the next call to the same plugin gets a fresh instance.
#[derive(Debug, Clone, thiserror::Error, Serialize)]
#[serde(tag = "error", rename_all = "kebab-case")]
pub enum CallError {
    /// No loaded plugin serves this tool.
    #[error("unknown tool `{name}`; available tools: {}", if available.is_empty() { "none".to_owned() } else { available.join(", ") })]
    UnknownTool {
        /// The name asked for.
        name: String,
        /// The tools that exist.
        available: Vec<String>,
    },
    /// The arguments are not JSON or fail the tool's schema; nothing ran.
    #[error("invalid arguments for `{tool}`: {message}")]
    InvalidArguments {
        /// The tool.
        tool: String,
        /// Every schema violation, with its path.
        message: String,
    },
    /// The user's grants do not offer this tool.
    #[error("tool `{tool}` of plugin `{plugin}` is not granted: {reason}")]
    Denied {
        /// The plugin.
        plugin: String,
        /// The tool.
        tool: String,
        /// Why.
        reason: String,
    },
    /// The call ran into a limit and was stopped.
    #[error("tool `{tool}` of plugin `{plugin}` exceeded its {limit}")]
    LimitExceeded {
        /// The plugin.
        plugin: String,
        /// The tool.
        tool: String,
        /// Which limit.
        limit: Limit,
    },
    /// The guest trapped.
    #[error("tool `{tool}` of plugin `{plugin}` crashed: {trap}")]
    Trapped {
        /// The plugin.
        plugin: String,
        /// The tool.
        tool: String,
        /// How.
        trap: TrapKind,
    },
    /// The tool ran and returned an error.
    #[error("tool `{tool}` of plugin `{plugin}` failed: {failure}")]
    Tool {
        /// The plugin.
        plugin: String,
        /// The tool.
        tool: String,
        /// The tool's error.
        failure: ToolFailure,
    },
    /// The caller cancelled the call (for example, the run was stopped).
    #[error("tool `{tool}` of plugin `{plugin}` was cancelled")]
    Cancelled {
        /// The plugin.
        plugin: String,
        /// The tool.
        tool: String,
    },
    /// The host could not set up the call.
    #[error("could not run tool `{tool}` of plugin `{plugin}`: {message}")]
    Internal {
        /// The plugin.
        plugin: String,
        /// The tool.
        tool: String,
        /// What failed.
        message: String,
    },
}
