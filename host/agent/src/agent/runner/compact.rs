//! What a run does with experiences when it starts and with compaction
//! before each model call (see [`crate::agent::compaction`]).

use super::{AgentEvent, Inner, Run, RunConfig};
use crate::agent::compaction::{self, TokenCounter};
use crate::agent::error::AgentError;
use crate::agent::hooks::HookPoint;
use crate::experience::ExperienceError;
use crate::provider::{self, ChatRequest, LlmParams};
use reson_sandbox::plugin::ToolSpec;
use reson_trace::{ContentPart, EventKind, Message, Role};
use tokio_util::sync::CancellationToken;

/// A run's compaction state.
#[derive(Default)]
pub(super) struct State {
    /// The request's tokenizer, loaded at the first count.
    counter: Option<TokenCounter>,
    /// The goals the last level-1 event left out: a new event is recorded
    /// only when they change.
    goals: Vec<String>,
}

/// Appends the experiences relevant to `task` to the first user message of
/// a new trace, under `## Relevant experience`. A file that cannot be read
/// or parsed fails the run (it is the user's to fix); a tagging call that
/// fails or answers badly only costs the injection.
pub(super) async fn add_experience(
    inner: &Inner,
    config: &RunConfig,
    messages: &mut [Message],
    task: &str,
    cancel: &CancellationToken,
) -> Result<(), AgentError> {
    let Some(experiences) = inner.tools.experiences() else { return Ok(()) };
    let Some(first) = messages.iter_mut().find(|m| m.role == Role::User) else { return Ok(()) };
    let visible = crate::scope::Visible::run(config.uid.as_deref(), &config.agent_type);
    let found =
        experiences.relevant(&inner.provider, &config.params, task, &visible, cancel.clone()).await;
    let section = match found {
        Ok(section) => section,
        Err(e @ (ExperienceError::Model(_) | ExperienceError::BadAnswer(_))) => {
            tracing::warn!("no experiences for this run: the tagging call failed: {e}");
            None
        }
        Err(e) => return Err(AgentError::Config(e.to_string())),
    };
    if let Some(section) = section {
        first.content.push(ContentPart::Text { text: format!("\n\n{section}") });
    }
    Ok(())
}

impl Run {
    fn counter(&mut self) -> TokenCounter {
        let model = &self.config.params.model;
        *self.compaction.counter.get_or_insert_with(|| TokenCounter::for_model(model))
    }

    /// The history for the next model call, compacted when it is over the
    /// budget; `None` when the run was stopped meanwhile.
    pub(super) async fn compacted_history(
        &mut self,
        iteration: u32,
        tools: &[ToolSpec],
    ) -> Result<Option<Vec<Message>>, AgentError> {
        let history = self.history();
        let config = &self.config.compaction;
        if !config.enabled {
            return Ok(Some(history));
        }
        let budget = config.budget(&self.config.params.model);
        let counter = self.counter();
        let before = counter.request(&history, tools);
        if before <= budget {
            return Ok(Some(history));
        }
        let level1 = compaction::level1(&history, &self.goals);
        let after = counter.request(&level1.messages, tools);
        if after <= budget {
            if level1.goals != self.compaction.goals {
                let span = self.span.compaction(1);
                self.compaction_hook(HookPoint::PreCompaction, iteration, 1).await?;
                self.compacted(1, level1.goals.clone(), level1.dropped, None, before, after)
                    .await?;
                self.compaction.goals = level1.goals;
                self.compaction_hook(HookPoint::PostCompaction, iteration, 1).await?;
                span.end_compaction(before, after);
            }
            return Ok(Some(level1.messages));
        }
        // What no compaction can shrink: the system prompt, the task and
        // the tools. When that alone nearly fills the budget, a summary
        // would not make room, only cost a call each turn.
        let fixed = usize::from(self.system_prompt.is_some()) + compaction::kept_prefix(&self.path);
        if counter.request(&history[..fixed.min(history.len())], tools) >= budget * 9 / 10 {
            tracing::warn!(
                "the system prompt, task and tools alone nearly fill the {budget}-token budget; \
                 not summarising"
            );
            return Ok(Some(level1.messages));
        }
        if !self.summarise(iteration, tools, before, budget).await? {
            return Ok(None);
        }
        Ok(Some(self.history()))
    }

    async fn compaction_hook(
        &self,
        point: HookPoint,
        iteration: u32,
        level: u8,
    ) -> Result<(), AgentError> {
        let mut event = self.hook(point, iteration);
        event.compaction_level = Some(level);
        self.inner.hooks.fire(&event).await
    }

    async fn compacted(
        &mut self,
        level: u8,
        goals: Vec<String>,
        sequences: Vec<u64>,
        summary_sequence: Option<u64>,
        tokens_before: u64,
        tokens_after: u64,
    ) -> Result<(), AgentError> {
        let kind = EventKind::Compacted {
            level,
            goals: goals.clone(),
            sequences: sequences.clone(),
            summary_sequence,
            tokens_before,
            tokens_after,
        };
        self.inner.store.append_event(&mut self.trace, kind).await?;
        self.emit(AgentEvent::Compacted {
            level,
            goals,
            sequences,
            summary_sequence,
            tokens_before,
            tokens_after,
        });
        Ok(())
    }

    /// Level 2: summarises the main path after its leading user messages
    /// into one message stored after them. Returns false when the run was
    /// stopped meanwhile; does nothing when there is nothing to summarise.
    async fn summarise(
        &mut self,
        iteration: u32,
        tools: &[ToolSpec],
        before: u64,
        budget: u64,
    ) -> Result<bool, AgentError> {
        let keep = compaction::kept_prefix(&self.path);
        if keep == 0 || keep >= self.path.len() {
            return Ok(true);
        }
        let span = self.span.compaction(2);
        self.compaction_hook(HookPoint::PreCompaction, iteration, 2).await?;
        let range = self.path[keep..].to_vec();
        let counter = self.counter();
        let shown = compaction::level1(&range, &self.goals).messages;
        // Room for the instructions and the summary itself.
        let room = budget.saturating_sub(counter.count(compaction::SUMMARY_PROMPT)) * 3 / 4;
        let transcript = compaction::transcript(&shown, &self.goals, &counter, room);
        let mut params = LlmParams { stream: false, ..self.config.params.clone() };
        if let Some(model) = &self.config.compaction.model {
            params.model = model.clone();
        }
        let request = ChatRequest {
            messages: vec![
                Message::new(Role::System, compaction::SUMMARY_PROMPT),
                Message::new(Role::User, transcript),
            ],
            tools: Vec::new(),
            params,
        };
        self.requests += 1;
        let chat = span.chat(self.inner.provider.name(), &request);
        let call = provider::complete(&*self.inner.provider, request, self.cancel.clone(), |_| {});
        let response = tokio::select! {
            biased;
            () = self.cancel.cancelled() => None,
            response = call => Some(response),
        };
        let Some(response) = response else {
            chat.end_stopped();
            span.end_stopped();
            return Ok(false);
        };
        chat.end_chat(response.as_ref());
        let response = match response {
            Err(_) if self.stopped() => {
                span.end_stopped();
                return Ok(false);
            }
            Err(e) => {
                span.end_failed(&e.to_string());
                return Err(e.into());
            }
            Ok(response) => response,
        };
        let mut summary =
            compaction::summary_message(&response.message.text(), &self.goals, &range);
        summary.usage = response.usage;
        summary.cost = response.cost.unwrap_or(0.0);
        self.usage += response.usage;
        self.cost += summary.cost;
        let parent = self.path[keep - 1].sequence;
        let stored = self.persist_after(summary, Some(parent)).await?;
        let after = counter.request(&self.history(), tools);
        let sequences = range.iter().map(|m| m.sequence).collect();
        self.compacted(2, Vec::new(), sequences, Some(stored.sequence), before, after).await?;
        self.compaction.goals.clear();
        self.compaction_hook(HookPoint::PostCompaction, iteration, 2).await?;
        span.end_compaction(before, after);
        Ok(true)
    }
}
