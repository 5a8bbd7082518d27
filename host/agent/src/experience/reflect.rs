//! Reflection: the model looks back on a trace and writes down what it
//! learnt. The prompt and the answer go on a side branch (a child of the
//! head), so the trace's head and main path stay as they were.

use super::{Experience, ExperienceError, ExperienceStore, Tags, json_object};
use crate::provider::{self, ChatProvider, ChatRequest, LlmParams};
use crate::scope::Scope;
use reson_trace::{Message, MessageTree, Role, TraceStatus, TraceStore};
use serde::Deserialize;
use tokio_util::sync::CancellationToken;

/// What a reflection did.
#[derive(Debug, Clone)]
pub struct Reflection {
    /// The trace.
    pub trace_id: String,
    /// The reflection prompt's sequence (a child of the head).
    pub prompt_sequence: u64,
    /// The model's answer's sequence (a child of the prompt).
    pub answer_sequence: u64,
    /// The experiences appended to the store.
    pub experiences: Vec<Experience>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Answer {
    experiences: Vec<Learnt>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Learnt {
    category: String,
    rule: String,
    #[serde(default)]
    tags: Tags,
    /// When it applies.
    #[serde(default)]
    condition: String,
    /// The sequences of the messages that taught it.
    #[serde(default)]
    evidence: Vec<u64>,
}

/// Reflects on trace `trace_id`: appends a reflection prompt (about
/// `focus`, when given) as a child of the head, asks `provider` with the
/// main path as history, stores the answer after the prompt, moves the
/// head back, then appends the experiences the answer lists to
/// `experiences`, each rated helpful once. An answer that is not the JSON
/// asked for is [`ExperienceError::BadAnswer`] and appends nothing (the
/// answer stays in the trace, on its side branch, to be read).
pub async fn reflect(
    store: &dyn TraceStore,
    provider: &dyn ChatProvider,
    params: LlmParams,
    experiences: &dyn ExperienceStore,
    trace_id: &str,
    focus: Option<&str>,
) -> Result<Reflection, ExperienceError> {
    let mut trace = store
        .get_trace(trace_id)
        .await?
        .ok_or_else(|| ExperienceError::NoTrace(trace_id.into()))?;
    let not_ready = |reason: &str| ExperienceError::NotReady {
        trace_id: trace_id.to_owned(),
        reason: reason.to_owned(),
    };
    if trace.status == TraceStatus::Running {
        return Err(not_ready("it is running; reflect once it has ended"));
    }
    let head = trace.head_sequence.ok_or_else(|| not_ready("it has no messages"))?;
    let path = store.get_main_path_messages(trace_id, head).await?;
    let mut history: Vec<Message> = trace
        .context
        .extra
        .get("system_prompt")
        .and_then(|v| v.as_str())
        .map(|p| Message::new(Role::System, p))
        .into_iter()
        .chain(path.iter().cloned())
        .collect();
    // Calls a crash left unanswered get a result in this request only: the
    // main path is not written to.
    let all = store.get_messages(trace_id).await?;
    for (_, call) in MessageTree::from_messages(&all).orphaned_tool_calls(head) {
        history.push(Message::tool_result(&call, reson_trace::INTERRUPTED));
    }
    let mut prompt = Message::new(Role::User, prompt_text(focus));
    prompt.synthetic = true;
    let prompt = store.add_message(&mut trace, prompt, Some(head)).await?;
    store.set_head(&mut trace, head).await?;
    history.push(prompt.clone());
    let request = ChatRequest {
        messages: history,
        tools: Vec::new(),
        params: LlmParams { stream: false, ..params },
    };
    let response = provider::complete(provider, request, CancellationToken::new(), |_| {}).await?;
    let mut message = response.message;
    message.tool_calls.clear();
    let text = message.text();
    let answer = store.add_message(&mut trace, message, Some(prompt.sequence)).await?;
    store.set_head(&mut trace, head).await?;
    store.sync().await?;
    let bad = |why: String| {
        ExperienceError::BadAnswer(format!(
            "{why} (the answer is message {} of {trace_id})",
            answer.sequence
        ))
    };
    let parsed: Answer = json_object(&text).map_err(bad)?;
    let mut learnt = Vec::with_capacity(parsed.experiences.len());
    for (i, l) in parsed.experiences.into_iter().enumerate() {
        let category = l.category.trim();
        if category.is_empty() || l.rule.trim().is_empty() {
            return Err(bad(format!("experience {} needs a category and a rule", i + 1)));
        }
        let mut e = Experience::new(trace_id, category, l.tags, &l.rule);
        // What a user's run teaches is that user's.
        e.scope = Scope::of_user(trace.uid.as_deref());
        e.condition = l.condition.trim().to_owned();
        // Cited messages of the main path; the head when none is.
        e.evidence = path
            .iter()
            .filter(|m| l.evidence.contains(&m.sequence))
            .map(|m| m.id.clone())
            .collect();
        if e.evidence.is_empty() {
            e.evidence.extend(path.last().map(|m| m.id.clone()));
        }
        learnt.push(e);
    }
    if learnt.is_empty() {
        return Err(bad("it lists no experiences".into()));
    }
    experiences.append(learnt.clone()).await?;
    Ok(Reflection {
        trace_id: trace_id.to_owned(),
        prompt_sequence: prompt.sequence,
        answer_sequence: answer.sequence,
        experiences: learnt,
    })
}

fn prompt_text(focus: Option<&str>) -> String {
    let focus = focus.map(|f| format!(" Focus on: {f}.")).unwrap_or_default();
    format!(
        "Reflect on the run above.{focus} Write the lessons a future agent should follow on a \
         similar task: what worked, what failed and why, facts about the environment. Answer \
         with only a JSON object: {{\"experiences\": [{{\"category\": \"tool_usage | logic_flow \
         | environment | ...\", \"rule\": \"one actionable rule\", \"tags\": {{\"intent\": \
         [\"what the task wanted, short words\"], \"state\": [\"the situation: languages, \
         tools, files\"]}}, \"condition\": \"when it applies\", \"evidence\": [the sequence \
         numbers of the messages that taught it]}}]}}"
    )
}
