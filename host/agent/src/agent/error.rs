//! What can go wrong in an agent run, and whether trying again may help.

use crate::provider::ProviderError;
use reson_sandbox::plugin::CallError;

/// An agent-level failure.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The model call failed (after retries, where retrying made sense).
    #[error("model call failed: {0}")]
    Llm(#[from] ProviderError),
    /// A tool could not be run at all (not a tool's own error, which goes
    /// back to the model as a result).
    #[error("tool error: {0}")]
    Tool(#[from] CallError),
    /// Reading or writing traces or session memory failed.
    #[error("memory error: {0}")]
    Memory(String),
    /// A plan could not be parsed.
    #[error("plan parse error: {0}")]
    PlanParse(String),
    /// A hook refused to let the run go on.
    #[error("blocked by a hook at {point}: {reason}")]
    HookBlocked {
        /// Where the hook fired.
        point: String,
        /// The hook's reason.
        reason: String,
    },
    /// A limit was reached: iterations, or a doom loop.
    #[error("limit exceeded: {0}")]
    LimitExceeded(String),
    /// The trace to continue does not exist.
    #[error("no trace {0}")]
    NoSuchTrace(String),
    /// Another run has the trace: one run writes a trace at a time.
    #[error("trace {0} is already running")]
    AlreadyRunning(String),
    /// The sequence to rewind to is not a message of the trace.
    #[error("trace {trace_id} has no message {sequence} (last sequence {last})")]
    NoSuchMessage {
        /// The trace.
        trace_id: String,
        /// The sequence asked for.
        sequence: u64,
        /// The trace's highest sequence.
        last: u64,
    },
    /// A workspace checkpoint or restore failed; a restore's conflicts
    /// (files changed outside Reson) are listed, and nothing was written.
    #[error("workspace checkpoint: {0}")]
    Checkpoint(#[from] reson_workspace::WorkspaceError),
    /// The agent was built or configured wrongly.
    #[error("configuration error: {0}")]
    Config(String),
    /// Anything else.
    #[error("{0}")]
    Other(String),
}

impl AgentError {
    /// Whether the same request may succeed later (a continue of the
    /// trace, or a retry by the caller).
    pub fn is_recoverable(&self) -> bool {
        match self {
            Self::Llm(e) => e.is_retryable(),
            Self::Tool(_) | Self::Memory(_) => true,
            Self::Checkpoint(e) => !matches!(e, reson_workspace::WorkspaceError::Conflicts { .. }),
            Self::PlanParse(_)
            | Self::HookBlocked { .. }
            | Self::LimitExceeded(_)
            | Self::NoSuchTrace(_)
            | Self::AlreadyRunning(_)
            | Self::NoSuchMessage { .. }
            | Self::Config(_)
            | Self::Other(_) => false,
        }
    }
}

impl From<reson_trace::TraceError> for AgentError {
    fn from(e: reson_trace::TraceError) -> Self {
        Self::Memory(e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recoverability_follows_the_cause() {
        assert!(AgentError::Llm(ProviderError::Network("reset".into())).is_recoverable());
        assert!(!AgentError::Llm(ProviderError::Auth("bad key".into())).is_recoverable());
        assert!(!AgentError::Config("no provider".into()).is_recoverable());
        assert!(
            !AgentError::HookBlocked { point: "pre-request".into(), reason: "no".into() }
                .is_recoverable()
        );
        assert!(AgentError::Memory("disk full".into()).is_recoverable());
    }
}
