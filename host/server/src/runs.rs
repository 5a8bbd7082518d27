//! Starting runs for the API: each on the provider and preset it names,
//! with the server's shared approvals, in the background; its live frames
//! go to the trace's watchers.

use super::caller::Caller;
use super::error::ApiError;
use super::events::LiveSource;
use super::registry::Claim;
use super::state::AppState;
use reson_agent::agent::{AgentEvent, Hooks, Permissions, RunConfig, RunMode, Runner};
use reson_agent::policy::Budget;
use reson_agent::provider::{LlmParams, PluginProvider};
use reson_sandbox::contract::World;
use reson_sandbox::plugin::PluginStatus;
use reson_trace::{Message, Trace, TraceMode};
use std::sync::Arc;

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
    /// A new trace's user; a run of an existing trace is its owner's.
    pub(crate) uid: Option<String>,
    /// With `after_sequence`: restore the workspace files first.
    pub(crate) restore_files: bool,
    /// With `restore_files`: over files changed outside Reson too.
    pub(crate) force: bool,
}

/// Starts a run and returns its trace and mode once the trace is prepared;
/// the run goes on in the background.
pub(crate) async fn start(
    state: &AppState,
    caller: &Caller,
    request: RunRequest,
) -> Result<(String, RunMode), ApiError> {
    let defaults = &state.config.defaults;
    let existing = match &request.trace_id {
        Some(id) => Some(state.traces.get(caller, id).await?.trace),
        None => None,
    };
    let uid = match &existing {
        Some(trace) => trace.uid.clone(),
        None => request.uid.clone(),
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
    let claim = state.runs.claim_run(&trace_id, &**state.traces.unscoped()).await?;
    let head = existing.as_ref().and_then(|t| t.head_sequence);
    let run_config = RunConfig {
        trace_id: request.trace_id.clone(),
        new_trace_id: request.trace_id.is_none().then(|| trace_id.clone()),
        // Rewinding to the head is a continue.
        // (Unless the files are restored: the head's state is a target too.)
        after_sequence: request
            .after_sequence
            .filter(|after| Some(*after) != head || request.restore_files),
        system_prompt: request
            .system_prompt
            .or_else(|| existing.is_none().then(|| defaults.system_prompt.clone()).flatten()),
        agent_type: preset.name.clone(),
        uid,
        task: request.task,
        params,
        max_iterations,
        // The config's budget holds; a request can only tighten it.
        budget: request.budget.map_or(config.budget, |asked| config.budget.tightest(asked)),
        skills: (!preset.skills.is_empty()).then(|| preset.skills.clone()),
        compaction: config.compaction.clone(),
        checkpoints: config.checkpoints.clone(),
        restore_files: request.restore_files,
        force_restore: request.force,
        ..RunConfig::default()
    };
    let runner = Runner::new(
        state.traces.unscoped().clone(),
        Arc::new(PluginProvider::new(state.runtime.clone(), provider)),
        state.tools.clone(),
        Hooks::none(),
    )
    .with_permissions(Permissions::new(rules, state.approvals.clone()))
    .with_sub_agents(state.sub_agents.clone())
    .with_asker(state.questions.clone())
    .with_telemetry(state.telemetry.clone());
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
            () = source.repolled() => {}
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
        tracing::info!("run of trace {} failed: {e}", source.trace_id());
    }
    drop(claim);
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
