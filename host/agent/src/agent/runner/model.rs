//! The model call: the history sent (with goal reminders, compacted when
//! it is too long), streamed deltas going out as events, retries of
//! retryable errors with backoff, and a stop cutting it all at once.

use crate::agent::error::AgentError;
use crate::agent::hooks::HookPoint;
use crate::agent::runner::{AgentEvent, Run};
use crate::provider::{self, ChatRequest, ChatResponse, Delta};
use reson_trace::{CollaboratorKind, CollaboratorStatus, ContentPart, Message, Role, Trace};

impl Run {
    /// Every `goal_reminder_every` iterations, appends the goal tree (and
    /// collaborators) at the tail of the history; earlier messages are never
    /// rewritten, so prompt caches keep their prefix.
    pub(super) async fn remind_goals(&mut self, iteration: u32) -> Result<(), AgentError> {
        let every = self.config.goal_reminder_every;
        if every == 0
            || iteration == 1
            || !(iteration - 1).is_multiple_of(every)
            || self.goals.is_empty()
        {
            return Ok(());
        }
        let mut text = format!("<goal-tree>\n{}</goal-tree>", self.goals.render());
        text.push_str(&collaborators_section(&self.trace));
        let mut reminder = Message::new(Role::User, text);
        reminder.synthetic = true;
        self.persist(reminder).await?;
        Ok(())
    }

    /// The history sent to the model. Tool results older than the last
    /// assistant message are sent as their long-term memory when they have
    /// one, or left out when they asked to be shown only once; the newest
    /// results always go in full.
    pub(super) fn history(&self) -> Vec<Message> {
        let system = self.system_prompt.as_ref().map(|p| Message::new(Role::System, p.clone()));
        let last_answer = self.path.iter().rposition(|m| m.role == Role::Assistant);
        let shown = self.path.iter().enumerate().map(|(i, m)| {
            let older = last_answer.is_some_and(|a| i < a);
            match (&m.long_term_memory, m.include_output_only_once) {
                (Some(memory), _) if older && m.role == Role::Tool => with_text(m, memory.clone()),
                (None, true) if older && m.role == Role::Tool => {
                    with_text(m, "[output shown once; omitted from later history]".into())
                }
                _ => m.clone(),
            }
        });
        system.into_iter().chain(shown).collect()
    }

    /// The model's answer and the requests it took; `None` when the run was
    /// stopped meanwhile. Requests that produced no stored answer are
    /// counted in the trace's totals here; the others with their answer.
    pub(super) async fn call_model(
        &mut self,
        iteration: u32,
    ) -> Result<Option<(ChatResponse, u32)>, AgentError> {
        let tools = self.inner.offered_tools();
        let Some(mut messages) = self.compacted_history(iteration, &tools).await? else {
            return Ok(None);
        };
        self.load_images(&mut messages).await?;
        let request = ChatRequest { messages, tools, params: self.config.params.clone() };
        let provider = self.inner.provider.clone();
        let cancel = self.cancel.clone();
        let mut attempt = 1;
        loop {
            let events = self.events.clone();
            let on_delta = move |delta: Delta| {
                let event = match delta {
                    Delta::Text { text } => AgentEvent::TextDelta { text },
                    Delta::Reasoning { text } => AgentEvent::ReasoningDelta { text },
                    Delta::ToolCall { .. } => return,
                };
                let _ = events.send(event);
            };
            self.requests += 1;
            let span = self.span.chat(provider.name(), &request);
            let started = std::time::Instant::now();
            let call = provider::complete(&*provider, request.clone(), cancel.clone(), on_delta);
            // A stop cuts the call in flight at once, even on a provider
            // slow to see its token, and wins over an answer racing it.
            let result = tokio::select! {
                biased;
                () = cancel.cancelled() => None,
                result = call => Some(result),
            };
            let result = result.map(|result| {
                result.and_then(|response| match response.filtered(provider.name()) {
                    Some(blocked) => Err(blocked),
                    None => Ok(response),
                })
            });
            match &result {
                Some(result) => span.end_chat(result.as_ref()),
                None => span.end_stopped(),
            }
            match result {
                Some(Ok(response)) => return Ok(Some((response, attempt))),
                None => {
                    self.unanswered(attempt);
                    return Ok(None);
                }
                // A provider may end a cut call with an error of its own.
                Some(Err(_)) if self.stopped() => {
                    self.unanswered(attempt);
                    return Ok(None);
                }
                Some(Err(e)) if e.is_retryable() && attempt <= self.config.max_retries => {
                    let backoff = self.config.retry_base_delay * 2u32.saturating_pow(attempt - 1);
                    let jitter = backoff.mul_f64(fastrand::f64() * 0.25);
                    let delay = e.retry_after().unwrap_or(backoff + jitter);
                    self.attempt_failed(attempt, &e, started, Some(delay)).await?;
                    attempt += 1;
                    let mut event = self.hook(HookPoint::OnRetry, iteration);
                    event.attempt = Some(attempt);
                    event.error = Some(e.to_string());
                    if let Err(blocked) = self.inner.hooks.fire(&event).await {
                        self.unanswered(attempt - 1);
                        return Err(blocked);
                    }
                    self.emit(AgentEvent::Retrying {
                        attempt,
                        error: e.to_string(),
                        delay_ms: delay.as_millis() as u64,
                    });
                    let stopped = tokio::select! {
                        () = tokio::time::sleep(delay) => false,
                        () = cancel.cancelled() => true,
                    };
                    if stopped {
                        self.unanswered(attempt - 1);
                        return Ok(None);
                    }
                }
                Some(Err(e)) => {
                    self.attempt_failed(attempt, &e, started, None).await?;
                    self.unanswered(attempt);
                    return Err(AgentError::Llm(e));
                }
            }
        }
    }

    /// Turns each image stored beside a message into the `data:` URL the
    /// providers take. An image missing from the store becomes a note:
    /// the model hears that something was there, and the run goes on.
    async fn load_images(&mut self, messages: &mut [Message]) -> Result<(), AgentError> {
        use base64::Engine as _;
        for part in messages.iter_mut().flat_map(|m| m.content.iter_mut()) {
            let ContentPart::Image(image) = part else { continue };
            if !self.images.contains_key(&image.name) {
                let Some(data) = self.inner.store.get_image(&self.trace.id, &image.name).await?
                else {
                    tracing::warn!("trace {}: image {} is missing", self.trace.id, image.name);
                    *part = ContentPart::Text {
                        text: format!("[image {} is missing from the trace]", image.name),
                    };
                    continue;
                };
                let data = base64::engine::general_purpose::STANDARD.encode(data);
                let url = format!("data:{};base64,{data}", image.media_type);
                self.images.insert(image.name.clone(), url);
            }
            let url = self.images[&image.name].clone();
            *part = ContentPart::ImageUrl { url };
        }
        Ok(())
    }

    /// Counts requests that produced no answer in the trace's totals.
    /// Records a failed model request in the trace's events, so that the
    /// trace shows each attempt with its time and error; `retry_in` is the
    /// wait before the next attempt, when there is one.
    async fn attempt_failed(
        &mut self,
        attempt: u32,
        error: &impl std::fmt::Display,
        started: std::time::Instant,
        retry_in: Option<std::time::Duration>,
    ) -> Result<(), AgentError> {
        let kind = reson_trace::EventKind::ModelFailed {
            attempt,
            error: error.to_string(),
            duration_ms: started.elapsed().as_millis() as u64,
            retrying: retry_in.is_some(),
            retry_in_ms: retry_in.map_or(0, |d| d.as_millis() as u64),
        };
        self.inner.store.append_event(&mut self.trace, kind).await?;
        Ok(())
    }

    pub(super) fn unanswered(&mut self, requests: u32) {
        self.trace.totals.requests += u64::from(requests);
    }
}

/// `message` with its content replaced by `text`.
fn with_text(message: &Message, text: String) -> Message {
    let mut shown = message.clone();
    shown.content = vec![reson_trace::ContentPart::Text { text }];
    shown
}

/// The `## Active Collaborators` section of a goal reminder: the runs this
/// trace started (its sub-agents) and where they stand; empty when there
/// are none.
pub(crate) fn collaborators_section(trace: &Trace) -> String {
    use std::fmt::Write as _;
    let collaborators = &trace.context.collaborators;
    if collaborators.is_empty() {
        return String::new();
    }
    let mut out = "\n## Active Collaborators\n".to_owned();
    for c in collaborators {
        let json = |v: serde_json::Value| v.as_str().unwrap_or_default().to_owned();
        let kind = json(serde_json::to_value(c.kind).unwrap_or_default());
        // A person who answered has "answered", as people say it.
        let status = match (c.kind, c.status) {
            (CollaboratorKind::Human, CollaboratorStatus::Completed) => "answered".to_owned(),
            _ => json(serde_json::to_value(c.status).unwrap_or_default()),
        };
        let _ = write!(out, "- {} ({kind}, {status}", c.name);
        if let Some(id) = &c.trace_id {
            let _ = write!(out, ", trace {id}");
        }
        let _ = write!(out, "): {}", c.description);
        if let Some(summary) = &c.summary {
            let _ = write!(out, " — {summary}");
        }
        out.push('\n');
    }
    out
}
