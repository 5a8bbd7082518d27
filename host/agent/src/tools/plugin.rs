//! Plugin tools as a tool source: the plugin runtime serves them.

use crate::tools::{ToolContext, ToolResult, ToolSource};
use async_trait::async_trait;
use reson_sandbox::config::Access;
use reson_sandbox::plugin::ToolSpec;
use reson_sandbox::plugin::{CallError, Runtime};
use reson_trace::ToolCall;
use std::path::PathBuf;
use tokio::sync::watch;

#[async_trait]
impl ToolSource for Runtime {
    fn specs(&self) -> Vec<ToolSpec> {
        self.tools()
    }

    async fn call(&self, call: &ToolCall, context: &mut ToolContext<'_>) -> ToolResult {
        match self.call_tool(&call.name, &call.arguments, &context.call_context()).await {
            Ok(out) => ToolResult {
                text: out.text,
                ok: true,
                long_term_memory: out.long_term_memory,
                include_output_only_once: out.include_output_only_once,
                images: out.images,
                limit: None,
            },
            Err(e) => {
                let limit = match &e {
                    CallError::LimitExceeded { limit, .. } => Some(limit.clone()),
                    _ => None,
                };
                ToolResult { limit, ..ToolResult::error(format!("Error: {e}")) }
            }
        }
    }

    /// The read-write directories granted to the plugin serving `name`:
    /// its WASI writes and the commands it starts (jailed with the same
    /// directories) can change them.
    fn writes(&self, name: &str) -> Vec<PathBuf> {
        self.plugins()
            .into_iter()
            .find(|p| p.tools.iter().any(|t| t == name))
            .and_then(|p| p.grants)
            .map(|g| {
                g.dirs
                    .into_iter()
                    .filter(|d| d.access == Access::ReadWrite)
                    .map(|d| d.host)
                    .collect()
            })
            .unwrap_or_default()
    }

    fn changes(&self) -> Option<watch::Receiver<u64>> {
        Some(Runtime::changes(self))
    }

    fn run_started(&self, trace_id: &str, tools: &[String]) {
        self.prepare_run(trace_id, tools);
    }

    async fn run_ended(&self, trace_id: &str) {
        self.end_trace(trace_id).await;
    }
}
