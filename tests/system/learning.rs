//! Skills, experiences, reflection and compaction end to end, on the real
//! `scripted` provider and `echo` tool components, a file trace store and
//! real `experiences.md` files; and the `reson` binary's commands for them.

use crate::support;

use reson::agent::compaction::{self, TokenCounter};
use reson::agent::{
    AgentEvent, HookDecision, HookEvent, HookPoint, Hooks, RunConfig, RunOutcome, Runner,
};
use reson::experience::{
    self, ExperienceError, ExperienceStore, Experiences, FileExperienceStore, Rating,
};
use reson::plugin::Runtime;
use reson::provider::{ChatRequest, LlmParams, PluginProvider};
use reson::skills::Skills;
use reson::tools::ToolRegistry;
use reson::trace::{Durability, EventKind, FileTraceStore, Message, Role, TraceStore};
use serde_json::{Value, json};
use std::process::Command;
use std::sync::{Arc, Mutex};
use support::{Recording, TestDir};

struct Setup {
    dir: TestDir,
    runtime: Runtime,
    store: Arc<FileTraceStore>,
    provider: Arc<Recording>,
}

impl Setup {
    async fn new(script: Value) -> Self {
        let dir = TestDir::new();
        dir.install(support::plugins(), "scripted").install(support::plugins(), "echo");
        let runtime = dir.open_scripted(&script, "").await;
        let store =
            Arc::new(FileTraceStore::open(dir.path().join("traces"), Durability::Batched).unwrap());
        let inner = PluginProvider::new(runtime.clone(), "scripted");
        let provider = Arc::new(Recording::new(inner));
        Self { dir, runtime, store, provider }
    }

    fn experiences(&self) -> FileExperienceStore {
        FileExperienceStore::new(self.dir.path().join(".reson/experiences.md"))
    }

    fn runner(&self, tools: ToolRegistry, hooks: Hooks) -> Runner {
        Runner::new(self.store.clone(), self.provider.clone(), tools, hooks)
    }

    fn requests(&self) -> Vec<ChatRequest> {
        self.provider.requests()
    }

    async fn main_path(&self, trace_id: &str) -> Vec<Message> {
        let trace = self.store.get_trace(trace_id).await.unwrap().unwrap();
        self.store.get_main_path_messages(trace_id, trace.head_sequence.unwrap()).await.unwrap()
    }
}

fn user(text: &str) -> Vec<Message> {
    vec![Message::new(Role::User, text)]
}

async fn run(
    runner: &Runner,
    messages: Vec<Message>,
    config: RunConfig,
) -> (RunOutcome, Vec<AgentEvent>) {
    let mut handle = runner.run(messages, config).await.unwrap();
    let mut events = Vec::new();
    while let Some(event) = handle.next_event().await {
        events.push(event);
    }
    (handle.wait().await.unwrap(), events)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skills_follow_the_preset_list_the_run_override_and_the_skill_tool() {
    let s = Setup::new(json!({ "turns": [
        { "tool_calls": [{ "name": "skill", "arguments": { "name": "research" } }] },
        { "text": "done" }
    ]}))
    .await;
    let project = s.dir.path().join("skills");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(
        project.join("deploy.md"),
        "---\nname: deploy\ndescription: Ship a release.\ncategory: ops\n---\nTag, build, push.\n",
    )
    .unwrap();
    let skills = Arc::new(Skills::load(&[project]).unwrap());
    let tools = ToolRegistry::new(s.runtime.clone()).with_skills(skills);
    let runner = s.runner(tools, Hooks::none());

    // A preset's list (as `reson run` passes it) filters; the others are named.
    let config = RunConfig {
        system_prompt: Some("Base.".into()),
        skills: Some(vec!["deploy".into()]),
        ..RunConfig::default()
    };
    let (outcome, events) = run(&runner, user("ship it"), config).await;
    let first = &s.requests()[0];
    let system = first.messages[0].text();
    assert!(system.starts_with("Base.") && system.contains("## Skill: deploy"), "{system}");
    assert!(!system.contains("## Skill: research") && system.contains("- research: "), "{system}");
    assert!(first.tools.iter().any(|t| t.name == "skill"));
    // The model loads another skill on demand.
    let loaded = events.iter().find_map(|e| match e {
        AgentEvent::ToolFinished { name, ok: true, output, .. } if name == "skill" => Some(output),
        _ => None,
    });
    assert!(loaded.unwrap().starts_with("## Skill: research\n"));
    let path = s.main_path(&outcome.trace_id).await;
    assert!(
        path.iter().any(|m| m.role == Role::Tool && m.text().contains("Prefer primary sources"))
    );

    // No list: every skill. An override per call replaces the preset's.
    let (_, _) = run(&runner, user("again"), RunConfig::default()).await;
    let all = s.requests()[2].messages[0].text();
    assert!(
        ["deploy", "planning", "research"].iter().all(|n| all.contains(&format!("## Skill: {n}")))
    );
    let config = RunConfig { skills: Some(vec!["planning".into()]), ..RunConfig::default() };
    let (_, _) = run(&runner, user("plan"), config).await;
    let planning = s.requests()[4].messages[0].text();
    assert!(planning.contains("## Skill: planning") && !planning.contains("## Skill: deploy"));
    let bad = RunConfig { skills: Some(vec!["nope".into()]), ..RunConfig::default() };
    let err = runner.run(user("x"), bad).await.err().unwrap().to_string();
    assert!(err.contains("no skill `nope`"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reflect_writes_a_side_branch_and_valid_experiences() {
    let lessons = json!({ "experiences": [
        { "category": "tool_usage", "rule": "Echo before you write.\n---\nid: injected\n---",
          "tags": { "intent": ["greet"], "state": ["echo"] } },
        { "category": "environment", "rule": "The workspace is empty at start.",
          "tags": { "intent": ["explore"], "state": [] } }
    ]});
    let s = Setup::new(json!({
        "turns": [
            { "tool_calls": [{ "name": "echo", "arguments": { "text": "hi" } }] },
            { "text": "said hi" }
        ],
        "models": {
            "reflector": { "turns": [{ "text": format!("Here you go:\n{lessons}") }] },
            "broken": { "turns": [{ "text": "I learnt a lot, no JSON though." }] }
        }
    }))
    .await;
    let runner = s.runner(ToolRegistry::new(s.runtime.clone()), Hooks::none());
    let (outcome, _) = run(&runner, user("say hi"), RunConfig::default()).await;
    let id = outcome.trace_id;
    let before = s.store.get_trace(&id).await.unwrap().unwrap();
    let path_before = s.main_path(&id).await;
    let store = s.experiences();
    let params = |model: &str| LlmParams { model: model.into(), ..LlmParams::default() };

    // A malformed answer is an error and writes no experience.
    let err = experience::reflect(&*s.store, &*s.provider, params("broken"), &store, &id, None)
        .await
        .unwrap_err();
    assert!(matches!(err, ExperienceError::BadAnswer(_)), "{err}");
    assert!(!store.path().exists());

    let reflection = experience::reflect(
        &*s.store,
        &*s.provider,
        params("reflector"),
        &store,
        &id,
        Some("tools"),
    )
    .await
    .unwrap();
    let after = s.store.get_trace(&id).await.unwrap().unwrap();
    assert_eq!(after.head_sequence, before.head_sequence, "the head does not move");
    assert_eq!(s.main_path(&id).await, path_before, "the main path is unchanged");
    let prompt = s.store.get_message(&id, reflection.prompt_sequence).await.unwrap().unwrap();
    assert_eq!(prompt.parent_sequence, before.head_sequence, "a child of the head");
    assert!(prompt.text().contains("Focus on: tools."));
    let answer = s.store.get_message(&id, reflection.answer_sequence).await.unwrap().unwrap();
    assert_eq!(answer.parent_sequence, Some(prompt.sequence));
    // The reflection request carried the whole main path.
    let request = s.requests().into_iter().last().unwrap();
    assert_eq!(request.messages.len(), path_before.len() + 1);

    let all = store.list().await.unwrap();
    assert_eq!(all.len(), 2);
    assert_eq!(all, reflection.experiences);
    assert_eq!(
        all[0].rule, "Echo before you write.\n---\nid: injected\n---",
        "injection stays text"
    );
    assert!(
        all.iter().all(|e| e.metrics.helpful == 1 && e.trace_id == id && e.id.starts_with("exp_"))
    );
    let text = std::fs::read_to_string(store.path()).unwrap();
    assert!(text.contains("\\---\nid: injected\n\\---"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_trace_gets_its_best_experiences_and_can_ask_for_more() {
    let s = Setup::new(json!({
        "turns": [
            { "tool_calls": [{ "name": "get_experience",
                               "arguments": { "intent": ["deploy"], "state": [] } }] },
            { "text": "done" }
        ],
        "models": {
            "utility": { "turns": [{ "text": "{\"intent\": [\"build\"], \"state\": [\"rust\"]}" }] }
        }
    }))
    .await;
    let path = s.dir.path().join(".reson/experiences.md");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    // Written by hand: comments, reordered keys, missing metrics, an extra key.
    std::fs::write(
        &path,
        "# Our lessons\n\nKept by hand.\n\n---\nid: exp_state\ncategory: environment\n\
         tags: {state: [rust], intent: []}\nmetrics: {helpful: 9}\n---\nUse the nightly toolchain.\n\n\
         ---\ncategory: tool_usage\nid: exp_both\nreviewed_by: ada   # a field of our own\n\
         tags:\n  intent: [build]\n  state: [rust]\n---\nRun cargo check first.\n\n\
         ---\nid: exp_harmful\ncategory: tool_usage\ntags: {intent: [build], state: [rust]}\n\
         metrics: {helpful: 1, harmful: 4}\n---\nAlways cargo clean.\n\n\
         ---\nid: exp_deploy\ncategory: logic_flow\ntags: {intent: [deploy]}\n---\nTag before you push.\n",
    )
    .unwrap();
    let mut experiences = Experiences::new(Arc::new(FileExperienceStore::new(&path)));
    experiences.utility_model = "utility".into();
    experiences.top_k = 2;
    let tools = ToolRegistry::new(s.runtime.clone()).with_experiences(Arc::new(experiences));
    let runner = s.runner(tools, Hooks::none());
    let (outcome, events) = run(&runner, user("build the rust crate"), RunConfig::default()).await;

    let requests = s.requests();
    assert_eq!(requests[0].params.model, "utility", "the tagging call comes first");
    let first = s.main_path(&outcome.trace_id).await[0].text();
    let section = first.split_once("## Relevant experience\n").unwrap().1;
    assert!(first.starts_with("build the rust crate"));
    assert!(section.starts_with("- [exp_both] (tool_usage) Run cargo check first.\n"), "{section}");
    assert!(section.contains("[exp_harmful]") && !section.contains("exp_state"), "{section}");
    let asked = events.iter().find_map(|e| match e {
        AgentEvent::ToolFinished { name, output, .. } if name == "get_experience" => Some(output),
        _ => None,
    });
    assert!(asked.unwrap().starts_with("- [exp_deploy] (logic_flow) Tag before you push."));

    // Ratings change the order: the harmful one, rated up, passes.
    let store = FileExperienceStore::new(&path);
    for _ in 0..5 {
        store.rate("exp_harmful", Rating::Helpful).await.unwrap();
    }
    let all = store.list().await.unwrap();
    let best = experience::rank(&all, &["build".into()], &["rust".into()], 1);
    assert_eq!(best[0].id, "exp_harmful");
    // Hand-written parts survive the rewrite.
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(
        text.starts_with("# Our lessons\n\nKept by hand.\n") && text.contains("reviewed_by: ada")
    );
    assert!(matches!(
        store.rate("exp_none", Rating::Harmful).await,
        Err(ExperienceError::UnknownId(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn experiences_md_refuses_bad_blocks_and_survives_concurrent_writers() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("experiences.md");
    let store = FileExperienceStore::new(&path);
    let one = |i: usize| {
        let tags = experience::Tags { intent: vec!["x".into()], state: vec![] };
        experience::Experience::new(
            "tr_x",
            "tool_usage",
            tags,
            &format!("rule {i}\n---\nnot a block"),
        )
    };
    // Two writers at once, many times: no block is lost, none interleaves.
    let writers: Vec<_> = (0..16)
        .map(|i| {
            let store = store.clone();
            let e = one(i);
            tokio::spawn(async move { store.append(vec![e]).await.unwrap() })
        })
        .collect();
    for w in writers {
        w.await.unwrap();
    }
    let all = store.list().await.unwrap();
    assert_eq!(all.len(), 16);
    assert!(all.iter().all(|e| e.rule.ends_with("\n---\nnot a block")));

    // A hand edit that breaks a block: a clear error naming file and line,
    // and nothing written over it.
    let good = std::fs::read_to_string(&path).unwrap();
    let broken = good.replacen("metrics:", "metrics: [", 1);
    std::fs::write(&path, &broken).unwrap();
    let err = store.list().await.unwrap_err().to_string();
    assert!(err.starts_with(&format!("malformed experiences file {}:", path.display())), "{err}");
    assert!(store.append(vec![one(99)]).await.is_err());
    assert_eq!(std::fs::read_to_string(&path).unwrap(), broken, "nothing was written");
    // A hand-written `---` line in a rule splits it: the rest is no block.
    std::fs::write(&path, format!("{good}\n---\njust text\n")).unwrap();
    let err = store.list().await.unwrap_err().to_string();
    assert!(err.contains("never closed"), "{err}");

    // A big file (20,000 blocks) reads whole.
    let many: Vec<_> = (0..20_000).map(one).collect();
    std::fs::remove_file(&path).unwrap();
    store.append(many).await.unwrap();
    assert_eq!(store.list().await.unwrap().len(), 20_000);
}

/// A long, tool-heavy task for a 2,000-token window: goal g2 takes two
/// short echoes and closes; goal g3 then echoes long texts.
fn long_task() -> Value {
    let echo = |n: usize, len: usize| {
        json!({ "tool_calls": [{ "name": "echo",
            "arguments": { "text": format!("step {n}: {}", "lorem ipsum ".repeat(len / 12)) } }] })
    };
    let mut turns = vec![json!({ "tool_calls": [
        { "name": "goal", "arguments": { "action": "add", "description": "collect the inputs" } },
        { "name": "goal", "arguments": { "action": "add", "description": "process them" } },
        { "name": "goal", "arguments": { "action": "focus", "goal_id": "g2" } }
    ]})];
    turns.push(echo(1, 300));
    turns.push(echo(2, 300));
    turns.push(json!({ "tool_calls": [
        { "name": "goal", "arguments": { "action": "done", "summary": "inputs collected: 2 echoes" } }
    ]}));
    for n in 3..=12 {
        turns.push(echo(n, 600));
    }
    turns.push(json!({ "text": "all processed" }));
    json!({
        "turns": turns,
        "models": { "summarizer": { "turns": [{ "text": "Echoed steps 1-8; inputs collected." }] } }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_run_compacts_at_level_1_then_2_within_the_window() {
    let s = Setup::new(long_task()).await;
    let hooks_seen = Arc::new(Mutex::new(Vec::new()));
    let seen = hooks_seen.clone();
    let hooks = Hooks::none()
        .on(HookPoint::PreCompaction, {
            let seen = seen.clone();
            move |e: &HookEvent| {
                seen.lock().unwrap().push(("pre", e.compaction_level));
                HookDecision::Continue
            }
        })
        .on(HookPoint::PostCompaction, move |e: &HookEvent| {
            seen.lock().unwrap().push(("post", e.compaction_level));
            HookDecision::Continue
        });
    let runner = s.runner(ToolRegistry::new(s.runtime.clone()), hooks);
    let window = 2_000;
    let config = RunConfig {
        compaction: compaction::CompactionConfig {
            context_window: Some(window),
            model: Some("summarizer".into()),
            ..Default::default()
        },
        ..RunConfig::default()
    };
    let (outcome, events) =
        run(&runner, user("echo the inputs, then process them"), config.clone()).await;
    assert_eq!(outcome.final_text.as_deref(), Some("all processed"));

    // Every request fit the window and was valid for every provider.
    let counter = TokenCounter::estimate();
    let requests = s.requests();
    for (i, r) in requests.iter().enumerate() {
        let tokens = counter.request(&r.messages, &r.tools);
        assert!(tokens <= window, "request {i}: {tokens} tokens");
        assert_eq!(compaction::invalid(&r.messages), None, "request {i}");
    }
    let levels: Vec<u8> = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::Compacted { level, .. } => Some(*level),
            _ => None,
        })
        .collect();
    let first_two = levels.iter().position(|&l| l == 2).expect("a level-2 compaction");
    assert!(levels[..first_two].contains(&1), "level 1 came first: {levels:?}");
    let hooks = hooks_seen.lock().unwrap().clone();
    assert_eq!(hooks[0], ("pre", Some(1)));
    assert!(hooks.contains(&("post", Some(2))), "{hooks:?}");

    // The trace still holds every message; the events name what was done.
    let id = &outcome.trace_id;
    let all = s.store.get_messages(id).await.unwrap();
    let trace = s.store.get_trace(id).await.unwrap().unwrap();
    assert_eq!(all.len() as u64, trace.last_sequence);
    let stored_events = s.store.events_after(id, 0).await.unwrap();
    let (summarised, summary) = stored_events
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::Compacted { level: 2, sequences, summary_sequence, .. } => {
                Some((sequences.clone(), summary_sequence.unwrap()))
            }
            _ => None,
        })
        .unwrap();
    assert!(stored_events.iter().any(|e| matches!(&e.kind,
        EventKind::Compacted { level: 1, goals, .. } if goals == &["g2".to_owned()])));
    let summary_message = all.iter().find(|m| m.sequence == summary).unwrap();
    assert_eq!(summary_message.parent_sequence, Some(1), "the summary skips the range");
    assert!(summary_message.text().contains("Echoed steps 1-8"));
    let path = s.main_path(id).await;
    assert_eq!(path[1].sequence, summary, "the main path walks past the range");
    assert!(summarised.iter().all(|seq| !path.iter().any(|m| m.sequence == *seq)));
    assert!(summarised.iter().all(|seq| all.iter().any(|m| m.sequence == *seq)), "nothing deleted");

    // A rewind to before the compaction sees the full history again (sent
    // whole here, with compaction off).
    let before = *summarised.last().unwrap();
    let sent = s.requests().len();
    let rewind = RunConfig {
        trace_id: Some(id.clone()),
        after_sequence: Some(before),
        compaction: compaction::CompactionConfig { enabled: false, ..Default::default() },
        ..config
    };
    let (rewound, _) = run(&runner, user("one more thing"), rewind).await;
    assert_eq!(rewound.final_text.as_deref(), Some("all processed"));
    let first = &s.requests()[sent];
    assert!(summarised.iter().all(|seq| first.messages.iter().any(|m| m.sequence == *seq)));
    assert!(!first.messages.iter().any(|m| m.sequence == summary));
    let path = s.main_path(id).await;
    assert!(summarised.iter().all(|seq| path.iter().any(|m| m.sequence == *seq)));
}

/// A tool's image goes to the model while its message is in the history;
/// once compaction summarises that message, the summary call gets a note
/// naming the image instead, and no later request carries it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_summarised_image_becomes_a_note() {
    let echo = |n: usize| {
        json!({ "tool_calls": [{ "name": "echo",
            "arguments": { "text": format!("step {n}: {}", "lorem ipsum ".repeat(50)) } }] })
    };
    let mut turns = vec![json!({ "tool_calls": [
        { "name": "picture", "arguments": { "caption": "the page", "images": ["red"] } }
    ]})];
    turns.extend((1..=8).map(echo));
    turns.push(json!({ "text": "all seen" }));
    let script = json!({
        "turns": turns,
        "models": { "summarizer": { "turns": [{ "text": "Saw a red page; echoed steps." }] } }
    });
    let s = Setup::new(script.clone()).await;
    s.dir.install(support::test_plugins(), "picture");
    let runtime = s.dir.open_scripted(&script, "").await;
    let provider =
        Arc::new(support::Recording::new(PluginProvider::new(runtime.clone(), "scripted")));
    let runner =
        Runner::new(s.store.clone(), provider.clone(), ToolRegistry::new(runtime), Hooks::none());
    let config = RunConfig {
        compaction: compaction::CompactionConfig {
            context_window: Some(2_500),
            model: Some("summarizer".into()),
            ..Default::default()
        },
        ..RunConfig::default()
    };
    let (outcome, events) = run(&runner, user("look at the page, then echo"), config).await;
    assert_eq!(outcome.final_text.as_deref(), Some("all seen"));
    assert!(events.iter().any(|e| matches!(e, AgentEvent::Compacted { level: 2, .. })));

    use base64::Engine as _;
    let red = std::fs::read(support::root().join("tests/guests/picture/src/red.png")).unwrap();
    let url =
        format!("data:image/png;base64,{}", base64::engine::general_purpose::STANDARD.encode(&red));
    let images = |r: &ChatRequest| -> Vec<String> {
        r.messages
            .iter()
            .flat_map(|m| &m.content)
            .filter_map(|p| match p {
                reson::trace::ContentPart::ImageUrl { url } => Some(url.clone()),
                reson::trace::ContentPart::Image(i) => Some(i.name.clone()),
                reson::trace::ContentPart::Text { .. } => None,
            })
            .collect()
    };
    let requests = provider.requests();
    assert_eq!(images(&requests[1]), [url], "the image went to the model, loaded");
    let note = format!("[image removed by compaction: 000003.png, {} bytes]", red.len());
    let summary_call = requests
        .iter()
        .position(|r| r.messages.iter().any(|m| m.text().contains(&note)))
        .expect("a summary call noting the image");
    assert!(images(&requests[summary_call]).is_empty());
    assert!(requests[summary_call + 1..].iter().all(|r| images(r).is_empty()), "gone after it");
    // The trace still has it, beside its message.
    let image = s.store.get_image(&outcome.trace_id, "000003.png").await.unwrap();
    assert_eq!(image, Some(red));
}

/// An image gone from the store (a file deleted by hand) does not stop a
/// continued run: the model is told it is missing, and the trace reads on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_image_becomes_a_note_and_the_run_goes_on() {
    let script = json!({ "turns": [
        { "tool_calls": [{ "name": "picture", "arguments": { "caption": "the page", "images": ["red"] } }] },
        { "text": "a red page" },
        { "text": "still a red page" },
    ]});
    let s = Setup::new(script.clone()).await;
    s.dir.install(support::test_plugins(), "picture");
    let runtime = s.dir.open_scripted(&script, "").await;
    let provider =
        Arc::new(support::Recording::new(PluginProvider::new(runtime.clone(), "scripted")));
    let runner =
        Runner::new(s.store.clone(), provider.clone(), ToolRegistry::new(runtime), Hooks::none());
    let (first, _) = run(&runner, user("look"), RunConfig::default()).await;
    let id = first.trace_id;
    let file = s.dir.path().join("traces").join(&id).join("messages/000003.png");
    std::fs::remove_file(&file).unwrap();

    let again = RunConfig { trace_id: Some(id.clone()), ..RunConfig::default() };
    let (second, _) = run(&runner, user("and now?"), again).await;
    assert_eq!(second.final_text.as_deref(), Some("still a red page"));
    let last = provider.requests().pop().unwrap();
    let tool = last.messages.iter().find(|m| m.role == Role::Tool).unwrap();
    assert_eq!(tool.text(), "the page[image 000003.png is missing from the trace]");
    let stored = s.store.get_message(&id, 3).await.unwrap().unwrap();
    assert!(
        matches!(&stored.content[1], reson::trace::ContentPart::Image(i) if i.name == "000003.png")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hook_can_block_a_compaction() {
    let s = Setup::new(long_task()).await;
    let hooks = Hooks::none()
        .on(HookPoint::PreCompaction, |_: &HookEvent| HookDecision::Block("keep it all".into()));
    let runner = s.runner(ToolRegistry::new(s.runtime.clone()), hooks);
    let config = RunConfig {
        compaction: compaction::CompactionConfig {
            context_window: Some(2_000),
            ..Default::default()
        },
        ..RunConfig::default()
    };
    let handle = runner.run(user("go"), config).await.unwrap();
    let err = handle.wait().await.unwrap_err().to_string();
    assert_eq!(err, "blocked by a hook at pre-compaction: keep it all");
}

fn reson(dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_reson"))
        .current_dir(dir)
        .args(args)
        .env("RESON_PLUGINS_DIR", support::plugins())
        .env("RESON_CACHE_DIR", support::cache_dir())
        .output()
        .unwrap()
}

#[test]
fn the_cli_lists_skills_reflects_and_rates() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(d.join("skills")).unwrap();
    std::fs::write(
        d.join("skills/review.md"),
        "---\nname: review\ndescription: Review a diff.\n---\nRead it all.\n",
    )
    .unwrap();
    let out = reson(d, &["skills", "list"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(text.contains("planning") && text.contains("built-in"), "{text}");
    assert!(text.contains("review") && text.contains("skills/review.md"), "{text}");
    std::fs::write(d.join("skills/broken.md"), "name: broken\n").unwrap();
    let out = reson(d, &["skills", "list"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("skills/broken.md:1"), "{err}");
    std::fs::remove_file(d.join("skills/broken.md")).unwrap();

    let script = json!({
        "turns": [{ "text": "hello" }],
        "models": { "reflector": { "turns": [{ "text": json!({ "experiences": [
            { "category": "logic_flow", "rule": "Say hello first.", "tags": { "intent": ["greet"] } }
        ]}).to_string() }] } }
    });
    std::fs::write(d.join("script.json"), script.to_string()).unwrap();
    let out = reson(d, &["run", "--script", "script.json", "--json", "hi"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let started: Value =
        serde_json::from_str(String::from_utf8_lossy(&out.stdout).lines().next().unwrap()).unwrap();
    let id = started["trace_id"].as_str().unwrap().to_owned();
    let out =
        reson(d, &["traces", "reflect", &id, "--script", "script.json", "--model", "reflector"]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("logic_flow  Say hello first."), "{text}");
    let exp_id = text.split_whitespace().next().unwrap().to_owned();
    let out = reson(d, &["experiences", "rate", &exp_id, "harmful"]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("{exp_id}: helpful 1, harmful 1")
    );
    let out = reson(d, &["experiences", "rate", "exp_nope", "helpful"]);
    assert_eq!(out.status.code(), Some(2));
    let out = reson(d, &["traces", "reflect", "tr_nope", "--script", "script.json"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("no trace tr_nope"));
    let listed = reson(d, &["experiences", "list"]);
    assert!(String::from_utf8_lossy(&listed.stdout).contains("Say hello first."));
}
