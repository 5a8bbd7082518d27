//! Who answers a question the model puts to a person (`ask_human`): the
//! question as an [`Asker`] sees it, and the askers that need no run: no
//! one ([`NoOneToAsk`]), and answers through a library call
//! ([`PendingQuestions`], the API of `reson serve`). The tool itself is in
//! the human module.

use crate::tools::ask_human::AskArgs;
use async_trait::async_trait;
use reson_trace::{Trace, TraceStatus};
use serde::Serialize;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::oneshot;

/// The agent type of a question's trace.
pub const HUMAN: &str = "human";

/// Key in a question trace's `context.extra`: the `ask_human` call.
pub(crate) const CALL_KEY: &str = "call_id";
/// Key in a question trace's `context.extra`: the choices offered.
pub(crate) const CHOICES_KEY: &str = "choices";

/// A question waiting for a person.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Question {
    /// The question's own trace; answer with this id.
    pub id: String,
    /// The trace that asked.
    pub trace_id: String,
    /// The `ask_human` call that asked.
    pub call_id: String,
    /// The question.
    pub question: String,
    /// Answers offered; any answer is taken, and a choice's number stands
    /// for the choice.
    pub choices: Vec<String>,
    /// When it was asked, in milliseconds since the epoch.
    pub asked_at_ms: u64,
}

impl Question {
    /// The question a `waiting` question trace holds; `None` for any other
    /// trace.
    pub fn of(trace: &Trace) -> Option<Self> {
        if trace.agent_type != HUMAN || trace.status != TraceStatus::Waiting {
            return None;
        }
        let extra = &trace.context.extra;
        let choices = extra
            .get(CHOICES_KEY)
            .and_then(|c| serde_json::from_value(c.clone()).ok())
            .unwrap_or_default();
        Some(Self {
            id: trace.id.clone(),
            trace_id: trace.parent_trace_id.clone()?,
            call_id: extra.get(CALL_KEY)?.as_str()?.to_owned(),
            question: trace.task.clone(),
            choices,
            asked_at_ms: trace.created_at_ms,
        })
    }

    pub(crate) fn args(&self) -> AskArgs {
        AskArgs { question: self.question.clone(), choices: self.choices.clone() }
    }
}

/// Puts a question on the run's event stream.
pub type AnnounceQuestion = dyn Fn(&Question) + Send + Sync;

/// Someone who answers questions.
#[async_trait]
pub trait Asker: Send + Sync {
    /// Puts `question` to a person: the answer and who gave it (`user
    /// alice`, `the terminal`), or `None` when none came in time. Call
    /// `announce` once an answer can be taken. A stop of the run drops
    /// this future.
    async fn ask(
        &self,
        question: &Question,
        announce: &AnnounceQuestion,
    ) -> Option<(String, String)>;

    /// Whether anyone is there to ask; when not, the tool says so at once.
    fn present(&self) -> bool {
        true
    }
}

/// No one to ask: a run with no terminal, client or server.
pub struct NoOneToAsk;

#[async_trait]
impl Asker for NoOneToAsk {
    async fn ask(&self, _: &Question, _: &AnnounceQuestion) -> Option<(String, String)> {
        None
    }

    fn present(&self) -> bool {
        false
    }
}

/// A question waiting here, and where its answer (and who gave it) goes.
type Waiter = (Question, oneshot::Sender<(String, String)>);

/// Questions answered through a library call (the API of `reson serve`):
/// each waits, up to a timeout, for [`PendingQuestions::answer`].
pub struct PendingQuestions {
    timeout: Duration,
    waiting: Mutex<HashMap<String, Waiter>>,
}

impl PendingQuestions {
    /// Questions wait `timeout` for an answer; after it the asking run goes
    /// on, and the question stays open.
    pub fn new(timeout: Duration) -> Arc<Self> {
        Arc::new(Self { timeout, waiting: Mutex::default() })
    }

    /// Answers question `id` as `by`; false when no run waits on it here.
    pub fn answer(&self, id: &str, answer: &str, by: &str) -> bool {
        match self.waiting.lock().expect("questions").remove(id) {
            Some((_, reply)) => reply.send((answer.to_owned(), by.to_owned())).is_ok(),
            None => false,
        }
    }

    /// The questions runs wait on here, oldest first.
    pub fn pending(&self) -> Vec<Question> {
        let mut all: Vec<Question> =
            self.waiting.lock().expect("questions").values().map(|(q, _)| q.clone()).collect();
        all.sort_by_key(|q| q.asked_at_ms);
        all
    }
}

/// Takes a question off the list however its wait ends.
struct Waiting<'a> {
    questions: &'a PendingQuestions,
    id: &'a str,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.questions.waiting.lock().expect("questions").remove(self.id);
    }
}

#[async_trait]
impl Asker for PendingQuestions {
    async fn ask(
        &self,
        question: &Question,
        announce: &AnnounceQuestion,
    ) -> Option<(String, String)> {
        let (reply, answer) = oneshot::channel();
        self.waiting
            .lock()
            .expect("questions")
            .insert(question.id.clone(), (question.clone(), reply));
        let _waiting = Waiting { questions: self, id: &question.id };
        announce(question);
        tokio::time::timeout(self.timeout, answer).await.ok()?.ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_answer_reaches_the_waiting_question_once_and_a_silent_one_times_out() {
        let questions = PendingQuestions::new(Duration::from_secs(30));
        let answering = questions.clone();
        let question = Question {
            id: "tr_q".into(),
            trace_id: "tr_a".into(),
            call_id: "c".into(),
            question: "Which?".into(),
            choices: Vec::new(),
            asked_at_ms: 1,
        };
        let announce = move |q: &Question| {
            assert_eq!(
                answering.pending(),
                std::slice::from_ref(q),
                "announced once it can be answered"
            );
            assert!(answering.answer(&q.id, "this one", "user alice"));
        };
        let answered = questions.ask(&question, &announce).await;
        assert_eq!(answered, Some(("this one".into(), "user alice".into())));
        assert!(questions.pending().is_empty());
        assert!(!questions.answer("tr_q", "again", "user bob"), "answered once");

        let quiet = PendingQuestions::new(Duration::from_millis(20));
        assert_eq!(quiet.ask(&question, &|_: &Question| {}).await, None);
        assert!(quiet.pending().is_empty(), "a timed-out question leaves the list");
    }
}
