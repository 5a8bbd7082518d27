//! Starting runs for the API: each on the provider and preset it names,
//! with the server's shared approvals, in the background; its live frames
//! go to the trace's watchers.

use super::error::ApiError;
use super::events::{Channels, LiveFrame};
use super::extract::to_json;
use super::state::{AppState, Claim};
use futures::StreamExt as _;
use reson_agent::agent::{
    AgentEvent, ApprovalRequest, Hooks, Permissions, RunConfig, RunHandle, RunMode, Runner,
};
use reson_agent::policy::Budget;
use reson_agent::provider::{LlmParams, PluginProvider};
use reson_sandbox::contract::World;
use reson_sandbox::plugin::PluginStatus;
use reson_trace::{Message, Trace, TraceMode};
use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use tokio::sync::Notify;

/// A run to start: a new trace (`trace_id` unset) or a continue, rewind or
/// regenerate of one.
#[derive(Default)]
pub(crate) struct RunRequest {
    pub(crate) trace_id: Option<String>,
    pub(crate) after_sequence: Option<u64>,
    pub(crate) messages: Vec<Message>,
    pub(crate) task: Option<String>,
    pub(crate) system_prompt: Option<String>,
    pub(crate) provider: Option<String>,
    pub(crate) model: Option<String>,
    pub(crate) preset: Option<String>,
    pub(crate) max_iterations: Option<u32>,
    pub(crate) budget: Option<Budget>,
}

/// A frame only live watchers get; never stored, never replayed.
#[derive(Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum LiveFrameBody<'a> {
    TextDelta { text: &'a str },
    ReasoningDelta { text: &'a str },
    ApprovalNeeded { request: &'a ApprovalRequest },
}

/// Starts a run and returns its trace and mode once the trace is prepared;
/// the run goes on in the background.
pub(crate) async fn start(
    state: &AppState,
    request: RunRequest,
) -> Result<(String, RunMode), ApiError> {
    let defaults = &state.config.defaults;
    let existing = match &request.trace_id {
        Some(id) => Some(
            state
                .store
                .get_trace(id)
                .await?
                .ok_or_else(|| ApiError::NotFound(format!("no trace {id}")))?,
        ),
        None => None,
    };
    // A continue keeps the trace's provider, model and preset unless the
    // request names others.
    let provider = request
        .provider
        .clone()
        .or_else(|| existing.as_ref().and_then(|t| t.provider.clone()))
        .unwrap_or_else(|| defaults.provider.clone());
    check_provider(state, &provider)?;
    let config = &state.config.agent;
    let preset_name = match (&request.preset, &existing) {
        (Some(name), _) => name.clone(),
        // A trace's agent type is the preset it ran under, when it names one.
        (None, Some(trace)) if config.preset(&trace.agent_type).is_ok() => trace.agent_type.clone(),
        _ => defaults.preset.clone(),
    };
    let (preset, rules) = config
        .preset(&preset_name)
        .map_err(|e| ApiError::BadRequest(format!("preset `{preset_name}`: {e}")))?;
    let mut params = existing
        .as_ref()
        .and_then(|t| serde_json::from_value::<LlmParams>(t.llm_params.clone()).ok())
        .unwrap_or_else(|| LlmParams { temperature: preset.temperature, ..LlmParams::default() });
    params.stream = true;
    if let Some(model) =
        request.model.clone().or_else(|| existing.is_none().then(|| defaults.model.clone()))
    {
        params.model = model;
    }
    // A request may lower the preset's budget, never raise it.
    let max_iterations = match (request.max_iterations, preset.max_iterations) {
        (Some(asked), Some(cap)) => asked.min(cap),
        (asked, cap) => asked.or(cap).unwrap_or(defaults.max_iterations),
    };

    let trace_id = match &request.trace_id {
        Some(id) => id.clone(),
        None => Trace::new(TraceMode::Agent, "", "").id,
    };
    let claim = state.runs.claim_run(&trace_id, &*state.store).await?;
    let head = existing.as_ref().and_then(|t| t.head_sequence);
    let run_config = RunConfig {
        trace_id: request.trace_id.clone(),
        new_trace_id: request.trace_id.is_none().then(|| trace_id.clone()),
        // Rewinding to the head is a continue.
        after_sequence: request.after_sequence.filter(|after| Some(*after) != head),
        system_prompt: request
            .system_prompt
            .or_else(|| existing.is_none().then(|| defaults.system_prompt.clone()).flatten()),
        agent_type: preset.name.clone(),
        task: request.task,
        params,
        max_iterations,
        // The config's budget holds; a request can only tighten it.
        budget: request.budget.map_or(config.budget, |asked| config.budget.tightest(asked)),
        skills: (!preset.skills.is_empty()).then(|| preset.skills.clone()),
        compaction: config.compaction.clone(),
        ..RunConfig::default()
    };
    let runner = Runner::new(
        state.store.clone(),
        Arc::new(PluginProvider::new(state.runtime.clone(), provider)),
        state.tools.clone(),
        Hooks::none(),
    )
    .with_permissions(Permissions::new(rules, state.approvals.clone()))
    .with_sub_agents(state.sub_agents.clone());
    // In place before the run writes its first event, which sets the
    // source's last event id.
    let source = Arc::new(LiveSource::new(trace_id.clone(), state.channels.clone()));
    state.channels.add_source(source.clone());
    let mut handle = match runner.run(request.messages, run_config).await {
        Ok(handle) => handle,
        Err(e) => {
            state.channels.remove_source(&source);
            return Err(e.into());
        }
    };
    let mode = match handle.next_event().await {
        Some(AgentEvent::TraceStarted { mode, .. }) => mode,
        other => {
            state.channels.remove_source(&source);
            return Err(ApiError::Internal(format!("the run began with {other:?}")));
        }
    };
    source.attach(handle);
    tokio::spawn(pump(state.clone(), source, claim));
    Ok((trace_id, mode))
}

/// Runs a run to its end: forwards its live frames, stops it when its
/// claim is stopped, and releases the claim when it has ended.
async fn pump(state: AppState, source: Arc<LiveSource>, claim: Claim) {
    let stop = claim.stop.clone();
    let mut stopping = false;
    loop {
        tokio::select! {
            ended = std::future::poll_fn(|cx| source.poll_forward(cx)) => if ended { break },
            // The store drained the run's events: poll again, so that the
            // run wakes this task, not the store's no-op.
            () = source.repoll.notified() => {}
            () = stop.cancelled(), if !stopping => {
                stopping = true;
                source.stop();
            }
        }
    }
    state.channels.remove_source(&source);
    // The outcome is in the trace; a failure is its `error_message`.
    if let Some(handle) = source.detach()
        && let Err(e) = handle.wait().await
    {
        tracing::info!("run of trace {} failed: {e}", source.trace_id);
    }
    drop(claim);
}

/// The most events forwarded in one poll, so a run streaming without pause
/// cannot hold the pump's thread.
const MAX_PER_POLL: usize = 1024;

/// The most deltas merged into one live frame.
const MAX_MERGED: usize = 512;

/// A run's events, turned into live frames for its trace's watchers. The
/// pump forwards them as they come; the store forwards what is queued
/// before it stores an event, so a frame never reaches a watcher after an
/// event that followed it.
pub(crate) struct LiveSource {
    trace_id: String,
    channels: Arc<Channels>,
    handle: Mutex<Option<RunHandle>>,
    /// The trace's last stored event: frames forwarded now follow it.
    last_event: AtomicU64,
    repoll: Notify,
}

impl LiveSource {
    pub(crate) fn new(trace_id: String, channels: Arc<Channels>) -> Self {
        Self {
            trace_id,
            channels,
            handle: Mutex::new(None),
            last_event: AtomicU64::new(0),
            repoll: Notify::new(),
        }
    }

    pub(crate) fn trace_id(&self) -> &str {
        &self.trace_id
    }

    fn attach(&self, handle: RunHandle) {
        *self.handle.lock().expect("live source") = Some(handle);
    }

    fn detach(&self) -> Option<RunHandle> {
        self.handle.lock().expect("live source").take()
    }

    fn stop(&self) {
        if let Some(handle) = self.handle.lock().expect("live source").as_ref() {
            handle.stop();
        }
    }

    /// Event `id` was stored.
    pub(crate) fn stored(&self, id: u64) {
        self.last_event.store(id, Ordering::Release);
    }

    /// Forwards what the run has queued, now.
    pub(crate) fn drain(&self) {
        let mut cx = Context::from_waker(Waker::noop());
        while self.poll_forward(&mut cx) == Poll::Ready(false) {}
        self.repoll.notify_one();
    }

    /// Forwards the events ready on the run's stream: `Ready(true)` once
    /// the stream has ended, `Ready(false)` when there may be more ready.
    fn poll_forward(&self, cx: &mut Context<'_>) -> Poll<bool> {
        let mut handle = self.handle.lock().expect("live source");
        let Some(events) = handle.as_mut() else { return Poll::Pending };
        // Read under the lock the store takes to drain: frames taken here
        // came after this event.
        let after = self.last_event.load(Ordering::Acquire);
        let mut frames = Frames::new(|frame: &LiveFrameBody| {
            if let Ok(text) = to_json(frame) {
                self.channels.live(&self.trace_id, LiveFrame { after, text: text.into() });
            }
        });
        for _ in 0..MAX_PER_POLL {
            match events.poll_next_unpin(cx) {
                Poll::Ready(Some(event)) => frames.push(event),
                Poll::Ready(None) => {
                    frames.flush();
                    return Poll::Ready(true);
                }
                Poll::Pending => {
                    frames.flush();
                    return Poll::Pending;
                }
            }
        }
        frames.flush();
        Poll::Ready(false)
    }
}

/// Turns events into frames, merging runs of deltas of one kind.
struct Frames<F: Fn(&LiveFrameBody)> {
    send: F,
    /// (reasoning?, text, deltas) merged so far.
    merged: Option<(bool, String, usize)>,
}

impl<F: Fn(&LiveFrameBody)> Frames<F> {
    fn new(send: F) -> Self {
        Self { send, merged: None }
    }

    fn push(&mut self, event: AgentEvent) {
        let delta = match &event {
            AgentEvent::TextDelta { text } => Some((false, text)),
            AgentEvent::ReasoningDelta { text } => Some((true, text)),
            _ => None,
        };
        match (delta, &mut self.merged) {
            (Some((reasoning, text)), Some((kind, so_far, count)))
                if *kind == reasoning && *count < MAX_MERGED =>
            {
                so_far.push_str(text);
                *count += 1;
            }
            (Some((reasoning, text)), _) => {
                self.flush();
                self.merged = Some((reasoning, text.clone(), 1));
            }
            (None, _) => {
                self.flush();
                if let Some(request) = event.approval_request() {
                    (self.send)(&LiveFrameBody::ApprovalNeeded { request });
                }
            }
        }
    }

    fn flush(&mut self) {
        match self.merged.take() {
            Some((false, text, _)) => (self.send)(&LiveFrameBody::TextDelta { text: &text }),
            Some((true, text, _)) => (self.send)(&LiveFrameBody::ReasoningDelta { text: &text }),
            None => {}
        }
    }
}

/// Checks that `name` is a loaded provider plugin (and, for the scripted
/// provider, that it has a script).
pub(crate) fn check_provider(state: &AppState, name: &str) -> Result<(), ApiError> {
    let plugins = state.runtime.plugins();
    let serving =
        |status: &PluginStatus| matches!(status, PluginStatus::Ready | PluginStatus::Stale(_));
    let found = plugins
        .iter()
        .find(|p| p.name == name && p.world == Some(World::ProviderPlugin) && serving(&p.status));
    if found.is_none() {
        let providers: Vec<&str> = plugins
            .iter()
            .filter(|p| p.world == Some(World::ProviderPlugin) && serving(&p.status))
            .map(|p| p.name.as_str())
            .collect();
        let there = if providers.is_empty() { "none".to_owned() } else { providers.join(", ") };
        return Err(ApiError::BadRequest(format!(
            "no loaded provider plugin `{name}` (providers: {there})"
        )));
    }
    let config = &state.runtime.options().config;
    if name == "scripted" && !config.grant("scripted").config.contains_key("script") {
        return Err(ApiError::BadRequest(
            "the scripted provider has no script: start the server with --script FILE".into(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    #[test]
    fn deltas_queued_together_become_one_frame_of_each_kind() {
        let sent = RefCell::new(Vec::new());
        let mut frames =
            Frames::new(|f: &LiveFrameBody| sent.borrow_mut().push(to_json(f).unwrap()));
        let text = |t: &str| AgentEvent::TextDelta { text: t.into() };
        frames.push(text("Hel"));
        frames.push(text("lo"));
        frames.push(AgentEvent::ReasoningDelta { text: "hm".into() });
        frames.push(AgentEvent::ModelRequest { iteration: 2 });
        frames.push(text("!"));
        frames.flush();
        for _ in 0..MAX_MERGED + 1 {
            frames.push(text("w"));
        }
        frames.flush();
        let sent = sent.into_inner();
        assert_eq!(
            sent[..3],
            [
                r#"{"kind":"text_delta","text":"Hello"}"#,
                r#"{"kind":"reasoning_delta","text":"hm"}"#,
                r#"{"kind":"text_delta","text":"!"}"#,
            ]
        );
        assert_eq!(sent.len(), 5, "a merged frame holds at most {MAX_MERGED} deltas");
    }
}
