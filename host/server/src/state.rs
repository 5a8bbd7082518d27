//! What the handlers share: the runtime, the store, the runs of this
//! server, the pending approvals and the watchers' channels.

use super::ServerConfig;
use super::access::Traces;
use super::events::Channels;
use super::registry::Runs;
use reson_agent::agent::PendingApprovals;
use reson_sandbox::plugin::Runtime;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// The server's state; cheap to clone.
#[derive(Clone)]
pub(crate) struct AppState {
    pub(crate) runtime: Runtime,
    /// The tools every run is offered: plugins, MCP servers, skills,
    /// experiences (set up once, from the config).
    pub(crate) tools: reson_agent::tools::ToolRegistry,
    /// Where knowledge lives (the API's `/api/knowledge` routes).
    pub(crate) knowledge: Arc<dyn reson_agent::knowledge::KnowledgeStore>,
    /// Limits of the sub-agents runs start.
    pub(crate) sub_agents: reson_agent::agent::SubAgentSettings,
    /// Where runs' spans and metrics go (`[telemetry]`).
    pub(crate) telemetry: reson_agent::telemetry::Telemetry,
    /// The store, waking watchers on each event; routes reach a trace
    /// only through the caller.
    pub(crate) traces: Traces,
    pub(crate) config: Arc<ServerConfig>,
    /// Who may call, and as whom.
    pub(crate) users: Arc<super::users::Users>,
    /// Every run's approval requests, answered over HTTP.
    pub(crate) approvals: Arc<PendingApprovals>,
    /// Every run's questions to people, answered over HTTP.
    pub(crate) questions: Arc<reson_agent::agent::human::PendingQuestions>,
    pub(crate) runs: Arc<Runs>,
    pub(crate) channels: Arc<Channels>,
    /// Cancelled when the server shuts down: watchers close their sockets.
    pub(crate) closing: CancellationToken,
    /// The watchers' socket tasks, waited for at shutdown.
    pub(crate) watchers: TaskTracker,
}

/// Other hosts' notifications reach this server's runs and watchers.
impl super::cluster::Notified for AppState {
    fn stop(&self, trace_id: &str) -> bool {
        self.runs.stop(trace_id)
    }

    fn appended(&self, trace_id: &str, id: u64) {
        self.channels.appended(trace_id, id);
    }

    fn wake_all(&self) {
        self.channels.wake_all();
    }
}
