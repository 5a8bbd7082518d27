//! `ask_human`: a question to a person is a trace of its own under the
//! asking one, the asking run waits on it and shows the person as a
//! collaborator; no one there answers at once; a question outlives its
//! run, and an answer given later (over the API) continues the trace.

use crate::support;
use crate::support::api::{self, InProcess};
use reson::agent::human::{NoOneToAsk, PendingQuestions};
use reson::agent::{AgentEvent, RunConfig, Runner};
use reson::trace::{
    CollaboratorKind, CollaboratorStatus, FileTraceStore, Message, Role, Trace, TraceFilter,
    TraceStatus, TraceStore,
};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use support::TestDir;

fn ask(question: &str, choices: &[&str]) -> Value {
    json!({ "tool_calls": [{ "name": "ask_human", "arguments": { "question": question, "choices": choices } }] })
}

struct Setup {
    _dir: TestDir,
    runner: Runner,
    store: Arc<FileTraceStore>,
}

async fn setup(turns: Value, asker: Arc<dyn reson::agent::human::Asker>) -> Setup {
    let dir = TestDir::new();
    dir.install(support::plugins(), "scripted");
    let runtime = dir.open_scripted(&json!({ "turns": turns }), "").await;
    let store = dir.store();
    let runner = TestDir::scripted_runner(&runtime, store.clone()).with_asker(asker);
    Setup { _dir: dir, runner, store }
}

impl Setup {
    async fn questions_of(&self, id: &str) -> Vec<Trace> {
        let filter = TraceFilter { parent_trace_id: Some(id.to_owned()), ..TraceFilter::default() };
        self.store.list_traces(&filter).await.unwrap()
    }

    async fn tool_result(&self, id: &str) -> String {
        let messages = self.store.get_messages(id).await.unwrap();
        messages.iter().find(|m| m.role == Role::Tool).expect("a tool result").text()
    }
}

#[tokio::test]
async fn a_question_waits_for_its_answer_and_the_person_shows_as_a_collaborator() {
    let questions = PendingQuestions::new(Duration::from_secs(60));
    let s = setup(
        json!([ask("Which colour for the logo?", &["red", "blue"]), { "text": "blue it is" }]),
        questions.clone(),
    )
    .await;
    let mut handle = s
        .runner
        .run(vec![Message::new(Role::User, "make a logo")], RunConfig::default())
        .await
        .unwrap();
    let id = handle.trace_id().to_owned();
    let question = loop {
        match handle.next_event().await.expect("the question before the end") {
            AgentEvent::QuestionAsked { question } => break question,
            AgentEvent::Finished { .. } => panic!("the run ended without asking"),
            _ => {}
        }
    };
    assert_eq!((question.trace_id.as_str(), question.choices.len()), (id.as_str(), 2));
    assert_eq!(
        questions.pending(),
        std::slice::from_ref(&question),
        "the question waits to be answered"
    );

    // The question's own trace, waiting, under the asking trace.
    let asked = s.store.get_trace(&question.id).await.unwrap().unwrap();
    assert_eq!((asked.status, asked.agent_type.as_str()), (TraceStatus::Waiting, "human"));
    assert_eq!(asked.parent_trace_id.as_deref(), Some(id.as_str()));
    assert_eq!(asked.task, "Which colour for the logo?");
    let shown = s.store.get_messages(&question.id).await.unwrap();
    assert_eq!(shown[0].text(), "Which colour for the logo?\n  1. red\n  2. blue");
    // The person is a collaborator of the asking run, waiting: the run
    // stores it with a goal change, whose event follows the write.
    loop {
        let trace = s.store.get_trace(&id).await.unwrap().unwrap();
        if let Some(c) = trace.context.collaborators.first() {
            assert_eq!((c.kind, c.status), (CollaboratorKind::Human, CollaboratorStatus::Waiting));
            assert_eq!(c.trace_id.as_deref(), Some(question.id.as_str()));
            break;
        }
        handle.next_event().await.expect("the goal change that shows the person");
    }

    // "2" picks the second choice.
    assert!(questions.answer(&question.id, "2", "user alice"));
    while handle.next_event().await.is_some() {}
    let outcome = handle.wait().await.unwrap();
    assert_eq!(outcome.final_text.as_deref(), Some("blue it is"));
    assert_eq!(s.tool_result(&id).await, "Answer from user alice:\nblue");
    let answered = s.store.get_trace(&question.id).await.unwrap().unwrap();
    assert_eq!(answered.status, TraceStatus::Completed);
    let texts: Vec<String> =
        s.store.get_messages(&question.id).await.unwrap().iter().map(Message::text).collect();
    assert_eq!(texts[1], "blue");
    let trace = s.store.get_trace(&id).await.unwrap().unwrap();
    let person = &trace.context.collaborators[0];
    assert_eq!(
        (person.status, person.summary.as_deref()),
        (CollaboratorStatus::Completed, Some("blue"))
    );
}

#[tokio::test]
async fn with_no_one_there_the_tool_says_so_at_once() {
    let s =
        setup(json!([ask("Shall I?", &[]), { "text": "went ahead" }]), Arc::new(NoOneToAsk)).await;
    let outcome =
        s.runner.run(vec![Message::new(Role::User, "do it")], RunConfig::default()).await.unwrap();
    let outcome = tokio::time::timeout(Duration::from_secs(60), outcome.wait())
        .await
        .expect("no wait")
        .unwrap();
    assert_eq!(outcome.final_text.as_deref(), Some("went ahead"));
    assert_eq!(s.tool_result(&outcome.trace_id).await, reson::tools::ask_human::NO_ONE);
    assert!(s.questions_of(&outcome.trace_id).await.is_empty(), "nothing was asked");
}

#[tokio::test]
async fn an_unanswered_question_times_out_and_stays_open() {
    let s = setup(
        json!([ask("Anyone?", &[]), { "text": "assumed yes" }]),
        PendingQuestions::new(Duration::from_millis(50)),
    )
    .await;
    let handle =
        s.runner.run(vec![Message::new(Role::User, "go")], RunConfig::default()).await.unwrap();
    let outcome = handle.wait().await.unwrap();
    assert_eq!(outcome.final_text.as_deref(), Some("assumed yes"));
    assert!(s.tool_result(&outcome.trace_id).await.starts_with("No answer came in time."));
    let open = s.questions_of(&outcome.trace_id).await;
    assert_eq!(open.len(), 1);
    assert_eq!(open[0].status, TraceStatus::Waiting, "an answer may still come");
}

/// Through `reson serve`: a question a run waits on is answered over the
/// API; one whose run was stopped is answered later and continues the
/// trace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_the_api_a_question_is_answered_and_a_late_answer_continues_the_trace() {
    let dir = api::dir_with(&["scripted"]);
    api::set_script(
        dir.path(),
        json!([ask("Ship it on Friday?", &["yes", "no"]), { "text": "noted" }]),
    );
    let toml = api::config(&format!(
        "[plugins.scripted]\ndirs = [{{ path = \".\", access = \"read\" }}]\nconfig = {{ script = \"{}\" }}\n",
        dir.path().join("script.json").display()
    ));
    let server = InProcess::start(&dir, &toml).await;
    let api = &server.api;

    // Answered while the run waits.
    let id = api.start("plan the release", json!({})).await;
    let question = open_question(api, &id).await;
    assert_eq!(question["run_waiting"], true, "{question}");
    assert_eq!(question["question"], "Ship it on Friday?");
    let reply = api
        .post(
            &format!("/api/questions/{}", question["id"].as_str().unwrap()),
            json!({ "answer": "1" }),
        )
        .await
        .expect(200);
    assert_eq!(
        (reply["resumed"].as_bool(), reply["answered_by"].as_str()),
        (Some(false), Some("the API"))
    );
    api.finish(&id, 0).await;
    let messages = api.messages(&id, "main_path").await;
    let texts: Vec<&str> = messages["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["content"][0]["text"].as_str())
        .collect();
    assert!(texts.contains(&"Answer from the API:\nyes"), "{texts:?}");

    // Stopped while it waits: the question stays open, and a late answer
    // continues the trace.
    let id = api.start("plan the next release", json!({})).await;
    let question = open_question(api, &id).await;
    let qid = question["id"].as_str().unwrap().to_owned();
    let since = api.last_event(&id).await;
    api.post(&format!("/api/traces/{id}/stop"), json!({})).await.expect(200);
    api.finish(&id, since).await;
    assert_eq!(api.trace(&id).await["trace"]["status"], "stopped");
    let open = api.get("/api/questions").await.expect(200);
    let still: Vec<&Value> =
        open["questions"].as_array().unwrap().iter().filter(|q| q["id"] == qid.as_str()).collect();
    assert_eq!(still.len(), 1, "{open}");
    assert_eq!(still[0]["run_waiting"], false);
    api.post(&format!("/api/questions/{qid}"), json!({ "answer": " " }))
        .await
        .expect_error(400, "bad_request");
    let since = api.last_event(&id).await;
    let reply = api
        .post(&format!("/api/questions/{qid}"), json!({ "answer": "no, Monday" }))
        .await
        .expect(200);
    assert_eq!(reply["resumed"], true);
    api.finish(&id, since).await;
    let trace = api.trace(&id).await;
    assert_eq!(trace["trace"]["status"], "completed", "{trace}");
    let person = &trace["trace"]["context"]["collaborators"][0];
    assert_eq!(
        (person["status"].as_str(), person["summary"].as_str()),
        (Some("completed"), Some("no, Monday"))
    );
    let messages = api.messages(&id, "main_path").await;
    let users: Vec<&str> = messages["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .filter_map(|m| m["content"][0]["text"].as_str())
        .collect();
    assert!(
        users.last().unwrap().contains("no, Monday")
            && users.last().unwrap().contains("Ship it on Friday?"),
        "{users:?}"
    );
    // Answered once: a second answer finds nothing open.
    api.post(&format!("/api/questions/{qid}"), json!({ "answer": "again" }))
        .await
        .expect_error(404, "not_found");
    assert!(
        api.get("/api/questions").await.expect(200)["questions"].as_array().unwrap().is_empty()
    );
    server.stop().await;
}

/// The open question of trace `id`, once it is asked: the question's
/// trace is stored before the asking run stores the person as its
/// collaborator, so each stored event of the run is a moment to look.
async fn open_question(api: &api::Api, id: &str) -> Value {
    let mut events = api.watch(id, 0).await;
    loop {
        let open = api.get("/api/questions").await.expect(200);
        if let Some(q) = open["questions"].as_array().unwrap().iter().find(|q| q["trace_id"] == id)
        {
            return q.clone();
        }
        events.next().await.expect("the run's next event");
    }
}

/// A `reson serve` killed while a run waits on a question: the next server
/// still lists the question, and its answer continues the trace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_survives_its_host_dying_and_the_answer_resumes_the_trace() {
    let dir = api::dir_with(&["scripted"]);
    let script =
        api::set_script(dir.path(), json!([ask("Deploy now?", &[]), { "text": "deploying" }]));
    dir.config(&api::config(&format!(
        "[plugins.scripted]\ndirs = [{{ path = \".\", access = \"read\" }}]\nconfig = {{ script = \"{}\" }}\n",
        script.display()
    )));
    let mut first = api::ServerProcess::start(dir.path(), &[]).await;
    let id = first.api.start("release", json!({})).await;
    let qid = open_question(&first.api, &id).await["id"].as_str().unwrap().to_owned();
    first.signal("KILL");
    first.exit_code().await;

    let second = api::ServerProcess::start(dir.path(), &[]).await;
    let api = &second.api;
    let open = api.get("/api/questions").await.expect(200);
    let listed: Vec<(&str, bool)> = open["questions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| (q["id"].as_str().unwrap(), q["run_waiting"].as_bool().unwrap()))
        .collect();
    assert_eq!(listed, [(qid.as_str(), false)], "{open}");
    let since = api.last_event(&id).await;
    let reply =
        api.post(&format!("/api/questions/{qid}"), json!({ "answer": "yes" })).await.expect(200);
    assert_eq!(reply["resumed"], true);
    api.finish(&id, since).await;
    let trace = api.trace(&id).await;
    assert_eq!(trace["trace"]["status"], "completed", "{trace}");
    let messages = api.messages(&id, "main_path").await;
    let texts: Vec<&str> = messages["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["content"][0]["text"].as_str())
        .collect();
    // The cut call was healed, then the answer and the model's next turn.
    assert!(texts.iter().any(|t| t.starts_with("Interrupted")), "{texts:?}");
    assert!(texts.iter().any(|t| t.contains("Deploy now?") && t.ends_with("\nyes")), "{texts:?}");
    assert_eq!(texts.last(), Some(&"deploying"));
}
