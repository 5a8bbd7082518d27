//! Tool execution: each call of an assistant message checked (offered,
//! permitted), dispatched to the source serving it (in order with the goal
//! tree in hand, or concurrently), and recorded in call order. Nothing here
//! knows a tool by name: the registry settles who serves a name, and the
//! source how its calls run.

use crate::agent::approval::ApprovalRequest;
use crate::agent::error::AgentError;
use crate::agent::runner::{AgentEvent, Run, RunConfig, Runner};
use crate::policy::Meter;
use crate::replay::{CallRecording, EFFECTS, record_key};
use crate::telemetry::Span;
use crate::tools::{Dispatch, OnOffer, ToolContext, ToolResult, unknown_tool};
use futures::stream::{FuturesUnordered, StreamExt};
use reson_sandbox::capability::effects::Effects;
use reson_trace::{ContentPart, EventKind, GoalTree, Message, ToolCall, Trace, check_image};
use reson_workspace::Workspace;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// The result of a call the run reached only after `stop()`: it was
/// neither asked about nor run.
pub const STOPPED_BEFORE_CALL: &str =
    "Stopped: the run was stopped before this tool call ran; it was not run.";

/// A change a concurrent call makes to the calling run's trace and goal
/// tree; the run applies it in its own task and stores the tree.
pub(crate) type TraceUpdate = Box<dyn FnOnce(&mut Trace, &mut GoalTree) + Send>;

/// The calling run, as a tool that starts runs of its own (a sub-agent)
/// sees it: in the [`ToolContext::extensions`] of every concurrent call.
pub(crate) struct Caller {
    /// The runner of the calling run.
    pub(crate) runner: Runner,
    pub(crate) trace_id: String,
    pub(crate) agent_type: String,
    /// The goal in focus when the message's calls started.
    pub(crate) goal_id: Option<String>,
    /// The goal tree when the message's calls started.
    pub(crate) goals: GoalTree,
    pub(crate) config: RunConfig,
    /// What the calling run may still spend.
    pub(crate) meter: Arc<Meter>,
    /// The calling run's token.
    pub(crate) cancel: CancellationToken,
    /// The calling run's events.
    pub(crate) events: mpsc::UnboundedSender<AgentEvent>,
    /// Changes to the calling run's trace and goal tree.
    pub(crate) updates: mpsc::UnboundedSender<TraceUpdate>,
    /// Runs started by calls of this run, running now.
    pub(crate) active: Arc<AtomicUsize>,
    /// How many runs are above the calling one (0 for a root run).
    pub(crate) depth: u32,
}

/// One tool call's result, kept until the results of the calls before it
/// in its message are stored: results are stored (and sent to the model)
/// in the order of the calls, as some providers pair them by position.
struct CallOutcome {
    result: ToolResult,
    took: Duration,
    /// The goal in focus when the call ran.
    goal_id: Option<String>,
    /// For an in-order call: the goal tree after it.
    goals: Option<GoalTree>,
    /// The call's effect log, when the run records effects.
    effects: Option<Effects>,
}

impl Run {
    /// Runs the calls of one assistant message: once the run is stopped,
    /// every call left gets a "stopped" result; a call of a tool never
    /// offered gets an error at once, then permissions decide; in-order
    /// calls run here, the others concurrently. Each result is stored as
    /// soon as the results of every call before it are, so they stay in
    /// call order; `ToolFinished` goes out as each call ends.
    pub(super) async fn run_tools(&mut self, calls: &[ToolCall]) -> Result<(), AgentError> {
        let roots = if self.config.checkpoints.enabled {
            self.inner.tools.on_offer().writes(calls)
        } else {
            Vec::new()
        };
        if roots.is_empty() {
            return self.run_calls(calls).await;
        }
        // The disk as it is before the calls, whoever changed it since the
        // last checkpoint, so the next one holds only what they change.
        let sequence = self.trace.head_sequence.unwrap_or(0);
        let workspace = self.workspace.get_or_insert_with(|| {
            Workspace::new(&self.trace.id, self.config.checkpoints.options())
        });
        workspace.before(&*self.inner.store, &self.tree, sequence, &roots).await?;
        self.run_calls(calls).await?;
        let ids = calls.iter().map(|c| c.id.clone()).collect();
        let last = self.trace.head_sequence.unwrap_or(0);
        if let Some(workspace) = &mut self.workspace {
            workspace.after(&*self.inner.store, last, ids).await?;
        }
        Ok(())
    }

    /// [`run_tools`](Self::run_tools) without the checkpoints.
    async fn run_calls(&mut self, calls: &[ToolCall]) -> Result<(), AgentError> {
        for call in calls {
            self.inner
                .store
                .append_event(
                    &mut self.trace,
                    EventKind::ToolStarted {
                        call_id: call.id.clone(),
                        name: call.name.clone(),
                        arguments: call.arguments.clone(),
                    },
                )
                .await?;
            self.emit(AgentEvent::ToolStarted {
                call_id: call.id.clone(),
                name: call.name.clone(),
                arguments: call.arguments.clone(),
            });
        }
        let specs = self.inner.offered_tools();
        let offered: Vec<String> = specs.iter().map(|t| t.name.clone()).collect();
        let spans: Vec<Span> = calls.iter().map(|c| self.span.execute_tool(c, &specs)).collect();
        let on_offer = self.inner.tools.on_offer();
        let mut done: Vec<Option<CallOutcome>> = calls.iter().map(|_| None).collect();
        let mut stored = 0;
        let mut concurrent = Vec::new();
        for (i, call) in calls.iter().enumerate() {
            // A stop (perhaps given while an earlier call awaited approval)
            // ends the message here: no more prompts, nothing more runs.
            let span = &spans[i];
            let now = if self.stopped() {
                Some(self.finished(call, span, ToolResult::error(STOPPED_BEFORE_CALL.into()), None))
            } else if !offered.contains(&call.name) {
                // Checked before the permissions: a name the model made up
                // must not wait for an approval no one can give.
                Some(self.finished(call, span, unknown_tool(&call.name, &offered), None))
            } else if let Some(denied) = self.permitted(call, span).await? {
                Some(self.finished(call, span, denied, None))
            } else if on_offer.dispatch(&call.name) == Some(Dispatch::InOrder) {
                Some(self.in_order(&on_offer, call, span).await?)
            } else {
                concurrent.push(i);
                None
            };
            done[i] = now;
            self.store_ready(calls, &mut done, &mut stored).await?;
        }
        if self.stopped() {
            for &i in &concurrent {
                let stopped = ToolResult::error(STOPPED_BEFORE_CALL.into());
                done[i] = Some(self.finished(&calls[i], &spans[i], stopped, None));
            }
            return self.store_ready(calls, &mut done, &mut stored).await;
        }
        // The calls are futures of this task, so they end with it; each
        // gets the run's token, so a stop cuts them. While a result is
        // stored the others are not polled: a store is short next to a
        // tool call, and their deadlines run on the clock meanwhile.
        let (updates, mut updated) = mpsc::unbounded_channel();
        let caller = Arc::new(Caller {
            runner: Runner { inner: self.inner.clone() },
            trace_id: self.trace.id.clone(),
            agent_type: self.trace.agent_type.clone(),
            goal_id: self.goals.current().map(|g| g.id.clone()),
            goals: self.goals.clone(),
            config: self.config.clone(),
            meter: self.meter.clone(),
            cancel: self.cancel.clone(),
            events: self.events.clone(),
            updates,
            active: self.active.clone(),
            depth: self.depth,
        });
        let (trace_id, cancel) = (&self.trace.id, &self.cancel);
        let record = self.config.record_effects;
        let visible = Arc::new(self.visible());
        let mut running: FuturesUnordered<_> = concurrent
            .iter()
            .map(|&i| {
                let effects = record.then(Effects::record);
                let mut context = ToolContext {
                    call_id: calls[i].id.clone(),
                    trace_id: Some(trace_id.clone()),
                    cancel: cancel.clone(),
                    effects: effects.clone(),
                    ..ToolContext::default()
                };
                context.extensions.insert(caller.clone());
                context.extensions.insert(visible.clone());
                // A sub-agent's span goes under this call's.
                context.extensions.insert(Arc::new(spans[i].clone()));
                let on_offer = &on_offer;
                async move {
                    let started = Instant::now();
                    let result = on_offer.call(&calls[i], &mut context).await;
                    (i, result, started.elapsed(), effects)
                }
            })
            .collect();
        loop {
            tokio::select! {
                next = running.next() => {
                    let Some((i, result, took, effects)) = next else { break };
                    let mut finished = self.finished(&calls[i], &spans[i], result, None);
                    finished.took = took;
                    finished.effects = effects;
                    done[i] = Some(finished);
                    self.store_ready(calls, &mut done, &mut stored).await?;
                }
                Some(update) = updated.recv() => self.trace_update(update).await?,
            }
        }
        while let Ok(update) = updated.try_recv() {
            self.trace_update(update).await?;
        }
        Ok(())
    }

    /// The scopes this run sees (experiences and knowledge): global, its
    /// user's and its agent type's.
    pub(super) fn visible(&self) -> crate::scope::Visible {
        crate::scope::Visible::run(self.config.uid.as_deref(), &self.config.agent_type)
    }

    /// Runs an in-order call here, with the goal tree in hand; a tree a
    /// successful call may have changed is stored, and the result carries
    /// the tree after it.
    async fn in_order(
        &mut self,
        on_offer: &OnOffer,
        call: &ToolCall,
        span: &Span,
    ) -> Result<CallOutcome, AgentError> {
        let started = Instant::now();
        let effects = self.config.record_effects.then(Effects::record);
        let result = {
            let visible = Arc::new(self.visible());
            let mut context = ToolContext {
                call_id: call.id.clone(),
                trace_id: Some(self.trace.id.clone()),
                cancel: self.cancel.clone(),
                goals: Some(&mut self.goals),
                effects: effects.clone(),
                ..ToolContext::default()
            };
            context.extensions.insert(visible);
            on_offer.call(call, &mut context).await
        };
        if result.ok {
            self.goal_changed().await?;
        }
        let mut finished = self.finished(call, span, result, Some(self.goals.snapshot()));
        finished.took = started.elapsed();
        finished.effects = effects;
        Ok(finished)
    }

    /// Applies what a concurrent call changed in the trace and goal tree.
    async fn trace_update(&mut self, update: TraceUpdate) -> Result<(), AgentError> {
        update(&mut self.trace, &mut self.goals);
        // The trace (its collaborators) is stored with the goal change.
        self.goal_changed().await
    }

    /// A call has its result: the live event goes out now, the result waits
    /// for its turn to be stored.
    fn finished(
        &self,
        call: &ToolCall,
        span: &Span,
        result: ToolResult,
        goals: Option<GoalTree>,
    ) -> CallOutcome {
        span.end_tool(&result);
        self.emit(AgentEvent::ToolFinished {
            call_id: call.id.clone(),
            name: call.name.clone(),
            ok: result.ok,
            output: result.text.clone(),
        });
        CallOutcome {
            result,
            took: Duration::ZERO,
            goal_id: self.goals.current().map(|g| g.id.clone()),
            goals,
            effects: None,
        }
    }

    /// Stores the results from `stored` on, in call order, up to the first
    /// call still running.
    async fn store_ready(
        &mut self,
        calls: &[ToolCall],
        done: &mut [Option<CallOutcome>],
        stored: &mut usize,
    ) -> Result<(), AgentError> {
        while let Some(finished) = done.get_mut(*stored).and_then(Option::take) {
            self.record_result(&calls[*stored], finished).await?;
            *stored += 1;
        }
        Ok(())
    }

    /// Checks one call against the permissions; a call that may not run
    /// gets its result (the reason). Every decision is recorded.
    async fn permitted(
        &mut self,
        call: &ToolCall,
        span: &Span,
    ) -> Result<Option<ToolResult>, AgentError> {
        let Some(permissions) = self.inner.permissions.clone() else { return Ok(None) };
        let events = self.events.clone();
        let announce = move |request: &ApprovalRequest| {
            let _ = events.send(AgentEvent::ApprovalNeeded { request: request.clone() });
        };
        let cancel = self.cancel.clone();
        let asked = std::time::Instant::now();
        let ruling = tokio::select! {
            biased;
            () = cancel.cancelled() => None,
            ruling = permissions.check(&self.trace.id, call, &announce) => Some(ruling),
        };
        let waited = asked.elapsed();
        // A stop ends an approval wait at once; nothing was decided, and
        // the call does not run.
        let Some(ruling) = ruling else {
            return Ok(Some(ToolResult::error(STOPPED_BEFORE_CALL.into())));
        };
        span.permission(ruling.decision, ruling.rule.as_deref());
        self.inner
            .store
            .append_event(
                &mut self.trace,
                EventKind::PermissionDecided {
                    call_id: call.id.clone(),
                    tool: call.name.clone(),
                    decision: ruling.decision.to_owned(),
                    rule: ruling.rule.clone(),
                    // Only an ask waits: a rule's decision takes no time
                    // worth showing.
                    waited_ms: if ruling.decision.starts_with("ask-") {
                        waited.as_millis() as u64
                    } else {
                        0
                    },
                    answered_by: ruling.answered_by.clone(),
                },
            )
            .await?;
        if ruling.run {
            return Ok(None);
        }
        let why =
            ruling.rule.map_or_else(|| "no rule allows it".to_owned(), |r| format!("rule {r}"));
        let text = match ruling.decision {
            "ask-denied" => format!("Error: the user denied this call of `{}`.", call.name),
            "ask-timeout" => format!(
                "Error: no one approved this call of `{}` in time; it was denied.",
                call.name
            ),
            "ask-unattended" => format!(
                "Error: this call of `{}` needs approval and no one is there to give it; it \
                 was denied.",
                call.name
            ),
            _ => format!("Error: permission denied for `{}` ({why}).", call.name),
        };
        Ok(Some(ToolResult::error(text)))
    }

    async fn record_result(
        &mut self,
        call: &ToolCall,
        finished: CallOutcome,
    ) -> Result<(), AgentError> {
        let CallOutcome { result, took, goal_id, goals, effects } = finished;
        // Filed before the result, so that a result in the trace always
        // has its recording (a crash between the two leaves a recording
        // whose call has no result yet, which a replay never reaches).
        if let Some(recording) = effects.and_then(|e| CallRecording::new(call, &result, &e)) {
            let value = serde_json::to_value(&recording)
                .map_err(|e| AgentError::Memory(format!("recording of call {}: {e}", call.id)))?;
            self.inner
                .store
                .put_record(&self.trace.id, EFFECTS, &record_key(&call.id), &value)
                .await?;
        }
        let mut message = Message::tool_result(call, result.text.clone());
        message.long_term_memory = result.long_term_memory;
        message.include_output_only_once = result.include_output_only_once;
        message.goal_id = goal_id;
        message.goals = goals;
        // A bad image is left out and the model told why, in its place:
        // the result's text and its other images still go through.
        for (n, image) in result.images.iter().enumerate() {
            match check_image(&image.media_type, &image.data, self.config.max_image_bytes) {
                Ok(_) => {
                    use base64::Engine as _;
                    let data = base64::engine::general_purpose::STANDARD.encode(&image.data);
                    message.content.push(ContentPart::ImageUrl {
                        url: format!("data:{};base64,{data}", image.media_type),
                    });
                }
                Err(e) => {
                    tracing::warn!("tool {}: image {} left out: {e}", call.name, n + 1);
                    message.content.push(ContentPart::Text {
                        text: format!("\n[image {} of this result left out: {e}]", n + 1),
                    });
                }
            }
        }
        message.duration_ms = took.as_millis() as u64;
        self.persist(message).await?;
        let summary: String = result.text.chars().take(200).collect();
        self.inner
            .store
            .append_event(
                &mut self.trace,
                EventKind::ToolFinished {
                    call_id: call.id.clone(),
                    name: call.name.clone(),
                    ok: result.ok,
                    summary,
                },
            )
            .await?;
        Ok(())
    }
}
