//! People in the loop: the `ask_human` tool at run time. A question is a
//! trace of its own (agent type `human`, status `waiting` until answered)
//! under the asking trace and goal; the asking run shows the person as a
//! collaborator, `waiting` then `completed` with the answer's first line,
//! and blocks on an [`Asker`]: a person at a terminal, or the API and
//! viewer of `reson serve` ([`PendingQuestions`]). With no one there the
//! tool says so at once. A question whose run stopped, timed out
//! or died stays `waiting`; [`answer_later`] records an answer given
//! after, for the host to continue the asking trace with.

pub use super::question::{AnnounceQuestion, Asker, HUMAN, NoOneToAsk, PendingQuestions, Question};
use super::question::{CALL_KEY, CHOICES_KEY};
use crate::agent::runner::{AgentEvent, Caller, Runner};
use crate::tools::ask_human::{self, AskArgs};
use crate::tools::{ToolContext, ToolRegistry, ToolResult, ToolSource};
use async_trait::async_trait;
use reson_sandbox::plugin::ToolSpec;
use reson_trace::{
    Collaborator, CollaboratorKind, CollaboratorStatus, Message, Role, ToolCall, Trace, TraceError,
    TraceMode, TraceStatus, TraceStore,
};
use std::sync::Arc;

impl Runner {
    /// The same runner offering `ask_human`, whose questions go to `asker`.
    pub fn with_asker(self, asker: Arc<dyn Asker>) -> Self {
        let tools = offer(self.tools().clone(), asker);
        self.with_tools(tools)
    }
}

/// `tools` with `ask_human`, whose questions go to `asker`.
pub(crate) fn offer(tools: ToolRegistry, asker: Arc<dyn Asker>) -> ToolRegistry {
    tools.with_builtin(Arc::new(Humans { asker }))
}

/// The `ask_human` tool.
struct Humans {
    asker: Arc<dyn Asker>,
}

#[async_trait]
impl ToolSource for Humans {
    fn specs(&self) -> Vec<ToolSpec> {
        vec![ask_human::spec()]
    }

    async fn call(&self, call: &ToolCall, context: &mut ToolContext<'_>) -> ToolResult {
        let Some(caller) = context.extensions.get::<Caller>() else {
            return ToolResult::error(format!("Error: `{}` works only inside a run", call.name));
        };
        let args = match AskArgs::parse(&call.arguments) {
            Ok(args) => args,
            Err(e) => return ToolResult::error(e),
        };
        if !self.asker.present() {
            return ToolResult::text(ask_human::NO_ONE.to_owned());
        }
        match self.ask(&caller, call, &args).await {
            Ok(result) => result,
            Err(e) => ToolResult::error(format!("Error: the question could not be kept: {e}")),
        }
    }

    fn needs_run(&self) -> bool {
        true
    }
}

impl Humans {
    async fn ask(
        &self,
        caller: &Caller,
        call: &ToolCall,
        args: &AskArgs,
    ) -> Result<ToolResult, TraceError> {
        let store = caller.runner.store().clone();
        let mut trace = Trace::new(TraceMode::Task, args.question.trim(), HUMAN);
        trace.uid.clone_from(&caller.config.uid);
        trace.parent_trace_id = Some(caller.trace_id.clone());
        trace.parent_goal_id.clone_from(&caller.goal_id);
        // Running, so not yet listed as open, until an asker can take the
        // answer: a question is never shown that no one would receive.
        trace.status = TraceStatus::Running;
        trace.context.extra.insert(CALL_KEY.into(), call.id.clone().into());
        trace.context.extra.insert(CHOICES_KEY.into(), args.choices.clone().into());
        store.create_trace(&trace).await?;
        store.add_message(&mut trace, Message::new(Role::User, args.text()), None).await?;
        let waiting = Trace { status: TraceStatus::Waiting, ..trace.clone() };
        let question = Question::of(&waiting).expect("a waiting question trace");
        collaborator(caller, &trace.id, &args.question, CollaboratorStatus::Waiting, None);

        // The asker says when it can take the answer; the question is then
        // stored as open and announced, in that order, so whoever hears of
        // it finds it listed.
        let ready = Arc::new(tokio::sync::Notify::new());
        let announced = ready.clone();
        let announce = move |_: &Question| announced.notify_one();
        let cancel = caller.cancel.clone();
        let asking = self.asker.ask(&question, &announce);
        tokio::pin!(asking);
        let mut open = false;
        let answered = loop {
            tokio::select! {
                biased;
                () = cancel.cancelled() => {
                    if !open {
                        store_open(&*store, &mut trace).await?;
                    }
                    return Ok(ToolResult::error(format!(
                        "Stopped: the run was stopped while the question waited. It stays \
                         open (trace {}): an answer given later continues this trace.",
                        trace.id
                    )));
                }
                () = ready.notified(), if !open => {
                    store_open(&*store, &mut trace).await?;
                    open = true;
                    let asked = AgentEvent::QuestionAsked { question: question.clone() };
                    let _ = caller.events.send(asked);
                }
                answered = &mut asking => break answered,
            }
        };
        let Some((answer, by)) = answered else {
            if !open {
                store_open(&*store, &mut trace).await?;
            }
            return Ok(ToolResult::text(format!(
                "No answer came in time. The question stays open (trace {}): an answer given \
                 later continues this trace. Go on with your best judgement meanwhile and say \
                 what you assumed.",
                trace.id
            )));
        };
        let answer = record_answer(&*store, &mut trace, &question, &answer, &by).await?;
        collaborator(
            caller,
            &trace.id,
            &args.question,
            CollaboratorStatus::Completed,
            Some(first_line(&answer)),
        );
        Ok(ToolResult::text(format!("Answer from {by}:\n{answer}")))
    }
}

/// Stores the question's trace as `waiting`: listed as open, answerable
/// later.
async fn store_open(store: &dyn TraceStore, trace: &mut Trace) -> Result<(), TraceError> {
    trace.status = TraceStatus::Waiting;
    store.update_trace(trace).await
}

/// Shows the person in the asking run's collaborators (one entry per
/// question), the change stored with the run's next goal change.
fn collaborator(
    caller: &Caller,
    trace_id: &str,
    question: &str,
    status: CollaboratorStatus,
    summary: Option<String>,
) {
    let entry = Collaborator {
        name: HUMAN.to_owned(),
        kind: CollaboratorKind::Human,
        description: first_line(question),
        trace_id: Some(trace_id.to_owned()),
        status,
        summary,
    };
    let _ = caller.updates.send(Box::new(move |trace, _| upsert(trace, entry)));
}

fn upsert(trace: &mut Trace, entry: Collaborator) {
    let all = &mut trace.context.collaborators;
    match all.iter_mut().find(|c| c.trace_id == entry.trace_id) {
        Some(found) => *found = entry,
        None => all.push(entry),
    }
}

/// The first line of `text`, at most 120 characters.
fn first_line(text: &str) -> String {
    let line = text.trim().lines().next().unwrap_or_default();
    match line.char_indices().nth(120) {
        Some((cut, _)) => format!("{}…", &line[..cut]),
        None => line.to_owned(),
    }
}

/// Stores `answer` (a choice's number resolved) in the question's trace,
/// which ends completed; the answer as stored.
async fn record_answer(
    store: &dyn TraceStore,
    trace: &mut Trace,
    question: &Question,
    answer: &str,
    by: &str,
) -> Result<String, TraceError> {
    let answer = question.args().resolve(answer);
    store.add_message(trace, Message::new(Role::Assistant, answer.clone()), None).await?;
    trace.status = TraceStatus::Completed;
    trace.result_summary = Some(format!("{by}: {}", first_line(&answer)));
    trace.finished_at_ms = Some(trace.updated_at_ms);
    store.update_trace(trace).await?;
    Ok(answer)
}

/// A question answered after the run that asked stopped waiting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnsweredLater {
    /// The question.
    pub question: Question,
    /// The answer as stored (a choice's number resolved).
    pub answer: String,
    /// The message to continue the asking trace with.
    pub message: String,
}

/// Why a question cannot be answered.
#[derive(Debug, thiserror::Error)]
pub enum AnswerError {
    /// No waiting question has that id.
    #[error("no open question {0}")]
    NotOpen(String),
    /// An empty answer.
    #[error("an answer needs some text")]
    Empty,
    /// The store failed.
    #[error(transparent)]
    Store(#[from] TraceError),
}

/// Records `answer` (by `by`) to question `id` whose run no longer waits
/// on it, and marks the person as answered in the asking trace; the
/// message to continue that trace with. The caller makes sure no run of
/// the asking trace is going.
pub async fn answer_later(
    store: &dyn TraceStore,
    id: &str,
    answer: &str,
    by: &str,
) -> Result<AnsweredLater, AnswerError> {
    if answer.trim().is_empty() {
        return Err(AnswerError::Empty);
    }
    let mut trace = store.get_trace(id).await?.ok_or_else(|| AnswerError::NotOpen(id.into()))?;
    let question = Question::of(&trace).ok_or_else(|| AnswerError::NotOpen(id.into()))?;
    let answer = record_answer(store, &mut trace, &question, answer, by).await?;
    if let Some(mut asking) = store.get_trace(&question.trace_id).await? {
        let entry = Collaborator {
            name: HUMAN.to_owned(),
            kind: CollaboratorKind::Human,
            description: first_line(&question.question),
            trace_id: Some(id.to_owned()),
            status: CollaboratorStatus::Completed,
            summary: Some(first_line(&answer)),
        };
        upsert(&mut asking, entry);
        store.update_trace(&asking).await?;
    }
    let message = format!(
        "Answer from {by} to your question \"{}\" (the ask_human call {} ended before it \
         came):\n{answer}",
        first_line(&question.question),
        question.call_id
    );
    Ok(AnsweredLater { question, answer, message })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_person_shows_in_the_goal_reminder_waiting_then_answered() {
        use crate::agent::runner::collaborators_section;
        let mut trace = Trace::new(TraceMode::Agent, "task", "default");
        let person = |status, summary: Option<&str>| Collaborator {
            name: HUMAN.to_owned(),
            kind: CollaboratorKind::Human,
            description: "Which colour?".into(),
            trace_id: Some("tr_q".into()),
            status,
            summary: summary.map(str::to_owned),
        };
        upsert(&mut trace, person(CollaboratorStatus::Waiting, None));
        assert_eq!(
            collaborators_section(&trace),
            "\n## Active Collaborators\n- human (human, waiting, trace tr_q): Which colour?\n"
        );
        upsert(&mut trace, person(CollaboratorStatus::Completed, Some("blue")));
        assert_eq!(trace.context.collaborators.len(), 1, "one entry per question");
        assert_eq!(
            collaborators_section(&trace),
            "\n## Active Collaborators\n- human (human, answered, trace tr_q): Which colour? — blue\n"
        );
    }

    #[test]
    fn first_lines_are_short() {
        assert_eq!(first_line("  yes\nand more"), "yes");
        assert_eq!(first_line(&"x".repeat(200)).chars().count(), 121);
    }
}
