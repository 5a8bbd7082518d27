//! The file store against the scenarios the runner depends on: continue,
//! rewind, crash leftovers.

use super::*;
use std::fs;
use std::io::Write;
use std::path::Path;

fn open(dir: &Path) -> FileTraceStore {
    FileTraceStore::open(dir, Durability::Batched).unwrap()
}

fn new_trace(store: &FileTraceStore, id: &str) -> Trace {
    let mut trace = Trace::new(TraceMode::Agent, "fix the bug", "default");
    trace.id = id.into();
    store.create(&trace).unwrap();
    trace
}

fn call(id: &str) -> ToolCall {
    ToolCall { id: id.into(), name: "read".into(), arguments: r#"{"path":"a"}"#.into() }
}

fn texts(messages: &[Message]) -> Vec<String> {
    messages.iter().map(Message::text).collect()
}

fn sequences(messages: &[Message]) -> Vec<u64> {
    messages.iter().map(|m| m.sequence).collect()
}

#[test]
fn create_get_and_list_with_filters() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let mut parent = Trace::new(TraceMode::Agent, "parent", "default");
    parent.created_at_ms = 1_000;
    store.create(&parent).unwrap();
    let mut child = Trace::new(TraceMode::Task, "child", "explorer");
    child.parent_trace_id = Some(parent.id.clone());
    child.parent_goal_id = Some("g2".into());
    child.created_at_ms = 2_000;
    store.create(&child).unwrap();
    let mut done = Trace::new(TraceMode::Task, "done", "default");
    done.status = TraceStatus::Completed;
    done.created_at_ms = 3_000;
    store.create(&done).unwrap();

    assert_eq!(store.get(&child.id).unwrap().as_ref(), Some(&child));
    assert_eq!(store.get("tr_000000000000").unwrap(), None);

    let ids = |filter: TraceFilter| {
        store.list(&filter).unwrap().into_iter().map(|t| t.id).collect::<Vec<_>>()
    };
    assert_eq!(ids(TraceFilter::default()), [done.id.as_str(), &child.id, &parent.id]);
    assert_eq!(
        ids(TraceFilter { status: Some(TraceStatus::Running), ..TraceFilter::default() }),
        [child.id.as_str(), &parent.id]
    );
    assert_eq!(
        ids(TraceFilter { parent_trace_id: Some(parent.id.clone()), ..TraceFilter::default() }),
        [child.id.as_str()]
    );

    child.status = TraceStatus::Failed;
    child.error_message = Some("boom".into());
    store.update(&child).unwrap();
    assert_eq!(
        ids(TraceFilter { status: Some(TraceStatus::Failed), ..TraceFilter::default() }),
        [child.id.as_str()]
    );
    store.sync().unwrap();
}

#[test]
fn ids_must_be_new_and_safe() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let trace = new_trace(&store, "mine-1");
    assert!(matches!(store.create(&trace), Err(TraceError::AlreadyExists(id)) if id == "mine-1"));
    for bad in ["", "../x", ".hidden", "a/b", "é"] {
        assert!(matches!(store.get(bad), Err(TraceError::InvalidId(_))), "{bad:?}");
    }
    // A directory left by a create that crashed before meta.json is no trace.
    fs::create_dir(dir.path().join("half")).unwrap();
    assert_eq!(store.get("half").unwrap(), None);
    assert!(store.list(&TraceFilter::default()).unwrap().iter().all(|t| t.id != "half"));
    new_trace(&store, "half");
}

#[test]
fn unknown_traces_are_not_found() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let mut ghost = Trace::new(TraceMode::Agent, "t", "default");
    let not_found = |r: Result<(), TraceError>| matches!(r, Err(TraceError::NotFound(_)));
    assert!(not_found(store.update(&ghost)));
    assert!(not_found(
        store.add_message(&mut ghost, Message::new(Role::User, "hi"), None).map(drop)
    ));
    assert!(not_found(store.append_event(&mut ghost, EventKind::TraceStarted).map(drop)));
    assert!(not_found(store.messages(&ghost.id).map(drop)));
    assert!(not_found(store.message(&ghost.id, 1).map(drop)));
    assert!(not_found(store.main_path(&ghost.id, 1).map(drop)));
    assert!(not_found(store.events_after(&ghost.id, 0).map(drop)));
    assert!(not_found(store.goals(&ghost.id).map(drop)));
    assert!(not_found(store.save_goals(&ghost.id, &GoalTree::new())));
    assert_eq!(ghost.last_sequence, 0);
}

#[test]
fn add_message_assigns_sequence_id_parent_and_totals() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let mut trace = new_trace(&store, "t1");
    let system =
        store.add_message(&mut trace, Message::new(Role::System, "be brief"), None).unwrap();
    assert_eq!((system.sequence, system.parent_sequence, system.id.as_str()), (1, None, "t1-0001"));
    assert_eq!(system.trace_id, "t1");
    assert!(system.created_at_ms > 0);

    let mut answer = Message::new(Role::Assistant, "hello");
    answer.usage =
        Usage { prompt_tokens: 10, completion_tokens: 5, cache_read_tokens: 3, ..Usage::default() };
    answer.cost = 0.25;
    answer.duration_ms = 40;
    let answer = store.add_message(&mut trace, answer, None).unwrap();
    assert_eq!((answer.sequence, answer.parent_sequence), (2, Some(1)));
    assert_eq!((trace.last_sequence, trace.head_sequence), (2, Some(2)));
    assert_eq!(trace.totals.messages, 2);
    assert_eq!(trace.totals.usage.prompt_tokens, 10);
    assert_eq!(trace.totals.usage.cache_read_tokens, 3);
    assert_eq!((trace.totals.cost, trace.totals.duration_ms), (0.25, 40));

    assert_eq!(store.get("t1").unwrap().unwrap(), trace);
    assert_eq!(store.message("t1", 2).unwrap().unwrap(), answer);
    assert_eq!(store.message("t1", 3).unwrap(), None);
    assert!(dir.path().join("t1/messages/000002.json").is_file());
}

#[test]
fn continue_and_rewind_keep_every_message_and_never_reuse_sequences() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let mut trace = new_trace(&store, "t1");
    for (role, text) in
        [(Role::System, "sys"), (Role::User, "q1"), (Role::Assistant, "a1"), (Role::User, "q2")]
    {
        store.add_message(&mut trace, Message::new(role, text), None).unwrap();
    }
    // Continue: after the head.
    store.add_message(&mut trace, Message::new(Role::Assistant, "a2"), None).unwrap();
    assert_eq!(texts(&store.main_path("t1", 5).unwrap()), ["sys", "q1", "a1", "q2", "a2"]);

    // Rewind to after a1: a new branch, sequence 6.
    let q2b = store.add_message(&mut trace, Message::new(Role::User, "q2b"), Some(3)).unwrap();
    assert_eq!((q2b.sequence, q2b.parent_sequence), (6, Some(3)));
    store.add_message(&mut trace, Message::new(Role::Assistant, "a2b"), None).unwrap();
    assert_eq!(
        texts(&store.main_path("t1", trace.head_sequence.unwrap()).unwrap()),
        ["sys", "q1", "a1", "q2b", "a2b"]
    );
    assert_eq!(sequences(&store.main_path("t1", 7).unwrap()), [1, 2, 3, 6, 7]);

    // The old branch is still there, whole.
    assert_eq!(sequences(&store.messages("t1").unwrap()), [1, 2, 3, 4, 5, 6, 7]);
    assert_eq!(texts(&store.main_path("t1", 5).unwrap()), ["sys", "q1", "a1", "q2", "a2"]);

    // Switching back to it, then continuing there.
    store.set_head(&mut trace, 5).unwrap();
    let next = store.add_message(&mut trace, Message::new(Role::User, "q3"), None).unwrap();
    assert_eq!((next.sequence, next.parent_sequence), (8, Some(5)));
    assert_eq!(store.get("t1").unwrap().unwrap().head_sequence, Some(8));

    assert!(matches!(
        store.add_message(&mut trace, Message::new(Role::User, "x"), Some(99)),
        Err(TraceError::NoSuchMessage { sequence: 99, .. })
    ));
    assert!(matches!(
        store.set_head(&mut trace, 42),
        Err(TraceError::NoSuchMessage { sequence: 42, .. })
    ));
    assert!(matches!(
        store.main_path("t1", 42),
        Err(TraceError::NoSuchMessage { sequence: 42, .. })
    ));
    assert_eq!(trace.last_sequence, 8);
}

#[test]
fn rewinding_onto_tool_calls_keeps_their_results() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let mut trace = new_trace(&store, "t1");
    store.add_message(&mut trace, Message::new(Role::User, "read a and b"), None).unwrap();
    let mut calls = Message::new(Role::Assistant, "");
    calls.tool_calls = vec![call("c1"), call("c2")];
    store.add_message(&mut trace, calls, None).unwrap();
    store.add_message(&mut trace, Message::tool_result(&call("c1"), "A"), None).unwrap();
    store.add_message(&mut trace, Message::tool_result(&call("c2"), "B"), None).unwrap();
    store.add_message(&mut trace, Message::new(Role::Assistant, "done"), None).unwrap();

    let mut tree = MessageTree::from_messages(&store.messages("t1").unwrap());
    let parent = tree.rewind_point(2);
    assert_eq!(parent, 4);
    let retry = store
        .add_message(&mut trace, Message::new(Role::User, "now only a"), Some(parent))
        .unwrap();
    tree.insert(&retry);
    let path = store.main_path("t1", retry.sequence).unwrap();
    assert_eq!(sequences(&path), [1, 2, 3, 4, 6]);
    assert_eq!(sequences(&path), tree.main_path(6));
    assert!(tree.orphaned_tool_calls(6).is_empty());
}

#[test]
fn meta_json_is_rewritten_for_branches_and_every_32nd_message() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let mut trace = new_trace(&store, "t1");
    let on_disk = || -> Trace {
        serde_json::from_slice(&fs::read(dir.path().join("t1/meta.json")).unwrap()).unwrap()
    };
    for text in ["a", "b", "c"] {
        store.add_message(&mut trace, Message::new(Role::User, text), None).unwrap();
    }
    assert_eq!(on_disk().last_sequence, 0, "continuations leave meta.json to `get`");
    assert_eq!(store.get("t1").unwrap().unwrap(), trace);

    store.add_message(&mut trace, Message::new(Role::User, "branch"), Some(1)).unwrap();
    assert_eq!((on_disk().last_sequence, on_disk().head_sequence), (4, Some(4)));
    while trace.last_sequence < 32 {
        store.add_message(&mut trace, Message::new(Role::User, "more"), None).unwrap();
    }
    assert_eq!(on_disk(), trace);
    assert_eq!(store.get("t1").unwrap().unwrap(), trace);
}

#[test]
fn orphaned_calls_of_an_interrupted_run_can_be_healed() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let mut trace = new_trace(&store, "t1");
    store.add_message(&mut trace, Message::new(Role::User, "go"), None).unwrap();
    let mut calls = Message::new(Role::Assistant, "");
    calls.tool_calls = vec![call("c1"), call("c2")];
    store.add_message(&mut trace, calls, None).unwrap();
    store.add_message(&mut trace, Message::tool_result(&call("c1"), "A"), None).unwrap();
    // The host died here. Reloaded, the runner finds c2 unanswered.
    drop(store);
    let store = open(dir.path());
    let mut trace = store.get("t1").unwrap().unwrap();
    let tree = MessageTree::from_messages(&store.messages("t1").unwrap());
    let orphans = tree.orphaned_tool_calls(trace.head_sequence.unwrap());
    assert_eq!(orphans, [(2, call("c2"))]);
    let mut healed = Message::tool_result(&orphans[0].1, "interrupted");
    healed.synthetic = true;
    let healed = store.add_message(&mut trace, healed, None).unwrap();
    let tree = MessageTree::from_messages(&store.messages("t1").unwrap());
    assert!(tree.orphaned_tool_calls(healed.sequence).is_empty());
}

#[test]
fn messages_by_goal_filters_on_the_goal_in_focus() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let mut trace = new_trace(&store, "t1");
    for (goal, text) in [(None, "q"), (Some("g1"), "a"), (Some("g2"), "b"), (Some("g1"), "c")] {
        let mut m = Message::new(Role::Assistant, text);
        m.goal_id = goal.map(str::to_owned);
        store.add_message(&mut trace, m, None).unwrap();
    }
    assert_eq!(texts(&store.messages_by_goal("t1", "g1").unwrap()), ["a", "c"]);
    assert!(store.messages_by_goal("t1", "g9").unwrap().is_empty());
}

#[test]
fn goals_are_saved_and_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    new_trace(&store, "t1");
    assert!(store.goals("t1").unwrap().is_empty());
    let mut tree = GoalTree::new();
    tree.ensure_root("fix the bug").unwrap();
    tree.add("reproduce").unwrap();
    store.save_goals("t1", &tree).unwrap();
    assert_eq!(store.goals("t1").unwrap(), tree);
}

/// Stores the branch `root → a (goal call) → result → b (goal call) →
/// result` and returns the trace; the results carry `snapshots`.
fn goal_branch(store: &FileTraceStore, snapshots: [Option<GoalTree>; 2]) -> Trace {
    let mut trace = new_trace(store, "t1");
    let mut root = Message::new(Role::User, "plan it");
    root.goal_id = Some("g1".into());
    store.add_message(&mut trace, root, None).unwrap();
    for (i, snapshot) in snapshots.into_iter().enumerate() {
        let call = ToolCall {
            id: format!("c{i}"),
            name: "goal".into(),
            arguments: format!(r#"{{"add":"step {i}"}}"#),
        };
        let mut answer = Message::new(Role::Assistant, "");
        answer.tool_calls = vec![call.clone()];
        answer.goal_id = Some("g1".into());
        answer.attempts = 2;
        answer.usage.prompt_tokens = 10;
        let head = trace.head_sequence;
        store.add_message(&mut trace, answer, head).unwrap();
        let mut result = Message::tool_result(&call, format!("added g{}", i + 2));
        result.goal_id = Some("g1".into());
        result.goals = snapshot;
        let head = trace.head_sequence;
        store.add_message(&mut trace, result, head).unwrap();
    }
    trace
}

fn tree_with(steps: &[&str]) -> GoalTree {
    let mut tree = GoalTree::new();
    tree.ensure_root("plan it").unwrap();
    for step in steps {
        tree.add(step).unwrap();
    }
    tree
}

#[test]
fn a_branch_takes_its_last_goal_snapshot_with_stats_from_its_own_messages() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let mut with_stats = tree_with(&["step 0", "step 1"]);
    with_stats.record("g2", &GoalStats { messages: 99, ..GoalStats::default() }).unwrap();
    let trace =
        goal_branch(&store, [Some(tree_with(&["step 0"]).snapshot()), Some(with_stats.snapshot())]);
    let path = store.main_path("t1", trace.head_sequence.unwrap()).unwrap();
    let mut replayed = 0;
    let tree = GoalTree::of_branch(&path, tree_with(&[]), |_, _, _| replayed += 1);
    assert_eq!(replayed, 0, "results with snapshots are not replayed");
    let ids: Vec<&str> = tree.goals().iter().map(|g| g.id.as_str()).collect();
    assert_eq!(ids, ["g1", "g2", "g3"]);
    // Stats come from the path, not from the snapshot: 5 messages, of which
    // 2 answers that took 2 requests each.
    let root = tree.get("g1").unwrap();
    assert_eq!(root.self_stats.messages, 5);
    assert_eq!(root.self_stats.requests, 4);
    assert_eq!(root.self_stats.usage.prompt_tokens, 20);
    assert_eq!(tree.get("g2").unwrap().self_stats, GoalStats::default());
    assert_eq!(trace.totals.requests, 4, "the trace's totals count requests too");

    // Cut after the first result: that branch has only its own goal.
    let path = store.main_path("t1", 3).unwrap();
    let tree = GoalTree::of_branch(&path, tree_with(&[]), |_, _, _| {});
    assert_eq!(tree.goals().len(), 2);
    // And before any goal call: the initial tree, with the root's stats.
    let path = store.main_path("t1", 1).unwrap();
    let tree = GoalTree::of_branch(&path, tree_with(&[]), |_, _, _| {});
    assert_eq!(tree.goals().len(), 1);
    assert_eq!(tree.get("g1").unwrap().self_stats.messages, 1);
}

#[test]
fn results_without_snapshots_are_replayed_with_their_calls_in_path_order() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let trace = goal_branch(&store, [None, Some(tree_with(&["step 0", "step 1"]).snapshot())]);
    let path = store.main_path("t1", trace.head_sequence.unwrap()).unwrap();
    let mut seen = Vec::new();
    let tree = GoalTree::of_branch(&path, tree_with(&[]), |tree, call, result| {
        seen.push((call.id.clone(), result.text()));
        tree.add("replayed").unwrap();
    });
    assert_eq!(seen, [("c0".to_owned(), "added g2".to_owned())]);
    // The later snapshot replaces what the replay built.
    let descriptions: Vec<&str> = tree.goals().iter().map(|g| g.description.as_str()).collect();
    assert_eq!(descriptions, ["plan it", "step 0", "step 1"]);

    // With the id of the first call reused by the second answer (as Gemini
    // does), each result is replayed with its own call.
    let mut reused = path.clone();
    reused[3].tool_calls[0].id = "c0".into();
    reused[4].tool_call_id = Some("c0".into());
    reused[4].goals = None;
    let mut replayed = Vec::new();
    GoalTree::of_branch(&reused, tree_with(&[]), |_, call, _| {
        replayed.push(call.arguments.clone())
    });
    assert_eq!(replayed, [r#"{"add":"step 0"}"#, r#"{"add":"step 1"}"#]);

    // A synthetic result (a healed call) and a result whose call is not on
    // the path are skipped.
    let mut healed = path[..3].to_vec();
    healed[2].synthetic = true;
    let mut orphan = path[..3].to_vec();
    orphan.remove(1);
    for path in [healed, orphan] {
        let tree = GoalTree::of_branch(&path, tree_with(&[]), |_, _, _| panic!("replayed"));
        assert_eq!(tree.goals().len(), 1);
    }
}

#[test]
fn messages_of_older_traces_load_without_attempts_or_snapshots() {
    let old = r#"{"id":"t1-0002","trace_id":"t1","sequence":2,"parent_sequence":1,
        "role":"assistant","content":[{"type":"text","text":"hi"}],"created_at_ms":5}"#;
    let message: Message = serde_json::from_str(old).unwrap();
    assert_eq!((message.attempts, message.goals.is_none()), (0, true));
    assert_eq!(GoalStats::of(&message).requests, 1, "an answer took at least one request");
    let line = serde_json::to_string(&message).unwrap();
    assert!(!line.contains("attempts") && !line.contains("goals"), "{line}");
    let mut result = Message::new(Role::Tool, "added g2");
    result.goals = Some(tree_with(&["x"]));
    let back: Message = serde_json::from_str(&serde_json::to_string(&result).unwrap()).unwrap();
    assert_eq!(back.goals, result.goals);
    assert_eq!(GoalStats::of(&back).requests, 0);
}

#[test]
fn events_get_increasing_ids_and_can_be_read_after_an_id() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let mut trace = new_trace(&store, "t1");
    assert!(store.events_after("t1", 0).unwrap().is_empty());
    let started = store.append_event(&mut trace, EventKind::TraceStarted).unwrap();
    let message = store.add_message(&mut trace, Message::new(Role::User, "hi"), None).unwrap();
    store.append_event(&mut trace, EventKind::MessageAdded { message: message.clone() }).unwrap();
    let finished = EventKind::TraceFinished { status: TraceStatus::Completed, error: None };
    store.append_event(&mut trace, finished.clone()).unwrap();
    assert_eq!(started.id, 1);
    assert_eq!(trace.last_event_id, 3);

    let all = store.events_after("t1", 0).unwrap();
    assert_eq!(all.iter().map(|e| e.id).collect::<Vec<_>>(), [1, 2, 3]);
    assert_eq!(all[1].kind, EventKind::MessageAdded { message });
    let later = store.events_after("t1", 2).unwrap();
    assert_eq!((later.len(), &later[0].kind), (1, &finished));
    assert!(store.events_after("t1", 3).unwrap().is_empty());
    // meta.json was last written before events 2 and 3; the file says more.
    assert_eq!(store.get("t1").unwrap().unwrap().last_event_id, 3);
}

#[test]
fn a_torn_event_line_is_ignored_then_cut_off() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let mut trace = new_trace(&store, "t1");
    store.append_event(&mut trace, EventKind::TraceStarted).unwrap();
    store
        .append_event(
            &mut trace,
            EventKind::ToolStarted {
                call_id: "c1".into(),
                name: "read".into(),
                arguments: "{}".into(),
            },
        )
        .unwrap();
    // A crash in the middle of appending event 3.
    let events = dir.path().join("t1/events.jsonl");
    fs::OpenOptions::new()
        .append(true)
        .open(&events)
        .unwrap()
        .write_all(br#"{"id":3,"at_ms":1,"kind":"tool_fin"#)
        .unwrap();
    drop(store);

    let store = open(dir.path());
    let mut trace = store.get("t1").unwrap().unwrap();
    assert_eq!(trace.last_event_id, 2);
    assert_eq!(store.events_after("t1", 0).unwrap().len(), 2);
    let next = store.append_event(&mut trace, EventKind::TraceStarted).unwrap();
    assert_eq!(next.id, 3);
    assert_eq!(
        store.events_after("t1", 0).unwrap().iter().map(|e| e.id).collect::<Vec<_>>(),
        [1, 2, 3]
    );
    let text = fs::read_to_string(&events).unwrap();
    assert_eq!(text.lines().count(), 3);
    assert!(!text.contains("tool_fin\""), "{text}");
}

#[test]
fn a_corrupt_complete_event_line_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let mut trace = new_trace(&store, "t1");
    store.append_event(&mut trace, EventKind::TraceStarted).unwrap();
    fs::OpenOptions::new()
        .append(true)
        .open(dir.path().join("t1/events.jsonl"))
        .unwrap()
        .write_all(b"garbage\n")
        .unwrap();
    let err = store.events_after("t1", 0).unwrap_err();
    assert!(
        matches!(&err, TraceError::Corrupt { reason, .. } if reason.starts_with("line 2:")),
        "{err}"
    );
}

#[test]
fn a_message_written_without_its_meta_update_is_reconciled() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let mut trace = new_trace(&store, "t1");
    store.add_message(&mut trace, Message::new(Role::User, "q"), None).unwrap();
    let stale = trace.clone();
    let mut answer = Message::new(Role::Assistant, "a");
    answer.cost = 0.5;
    store.add_message(&mut trace, answer, None).unwrap();
    store.add_message(&mut trace, Message::new(Role::User, "q2"), None).unwrap();
    // A message on another branch, also written just before the crash.
    let mut side = store.message("t1", 3).unwrap().unwrap();
    side.sequence = 4;
    side.parent_sequence = Some(1);
    side.id = "t1-0004".into();
    fs::write(dir.path().join("t1/messages/000004.json"), serde_json::to_vec(&side).unwrap())
        .unwrap();
    // meta.json as it was before messages 2..4.
    fs::write(dir.path().join("t1/meta.json"), serde_json::to_vec(&stale).unwrap()).unwrap();
    drop(store);

    let store = open(dir.path());
    let mut trace = store.get("t1").unwrap().unwrap();
    assert_eq!(trace.last_sequence, 4);
    assert_eq!(trace.head_sequence, Some(3), "advanced along 2 and 3, not onto the side branch");
    assert_eq!(trace.totals.messages, 4);
    assert_eq!(trace.totals.cost, 0.5);
    let next = store.add_message(&mut trace, Message::new(Role::Assistant, "a2"), None).unwrap();
    assert_eq!((next.sequence, next.parent_sequence), (5, Some(3)));
    assert_eq!(sequences(&store.main_path("t1", 5).unwrap()), [1, 2, 3, 5]);
}

#[test]
fn an_empty_message_file_left_by_a_power_loss_counts_as_never_written() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let mut trace = new_trace(&store, "t1");
    store.add_message(&mut trace, Message::new(Role::User, "q"), None).unwrap();
    store.add_message(&mut trace, Message::new(Role::Assistant, "a"), None).unwrap();
    fs::write(dir.path().join("t1/messages/000002.json"), b"").unwrap();
    drop(store);

    let store = open(dir.path());
    let mut trace = store.get("t1").unwrap().unwrap();
    assert_eq!((trace.last_sequence, trace.head_sequence), (2, Some(1)));
    assert_eq!(sequences(&store.messages("t1").unwrap()), [1]);
    let next = store.add_message(&mut trace, Message::new(Role::Assistant, "again"), None).unwrap();
    assert_eq!((next.sequence, next.parent_sequence), (3, Some(1)));
}

#[test]
fn leftover_temporary_files_are_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let mut trace = new_trace(&store, "t1");
    store.add_message(&mut trace, Message::new(Role::User, "q"), None).unwrap();
    fs::write(dir.path().join("t1/messages/.000002.json.tmp"), b"{\"partial").unwrap();
    fs::write(dir.path().join("t1/.meta.json.tmp"), b"{").unwrap();
    let mut trace = store.get("t1").unwrap().unwrap();
    assert_eq!(trace.last_sequence, 1);
    assert_eq!(sequences(&store.messages("t1").unwrap()), [1]);
    assert_eq!(
        store.add_message(&mut trace, Message::new(Role::User, "q2"), None).unwrap().sequence,
        2
    );
}

#[test]
fn immediate_durability_gives_the_same_results() {
    let dir = tempfile::tempdir().unwrap();
    let store = FileTraceStore::open(dir.path(), Durability::Immediate).unwrap();
    let mut trace = new_trace(&store, "t1");
    store.add_message(&mut trace, Message::new(Role::User, "q"), None).unwrap();
    store.append_event(&mut trace, EventKind::TraceStarted).unwrap();
    store.save_goals("t1", &GoalTree::new()).unwrap();
    store.sync().unwrap();
    let batched = open(dir.path());
    assert_eq!(batched.get("t1").unwrap().unwrap(), trace);
    assert_eq!(batched.events_after("t1", 0).unwrap().len(), 1);
}

/// Set in the child process of the kill -9 test: where it writes.
const CRASH_DIR: &str = "RESON_TRACE_CRASH_DIR";

/// In the kill -9 test's child process: writes loop iterations to one trace
/// until killed. In an ordinary test run it returns at once.
#[test]
fn crash_writer_child() {
    let Some(dir) = std::env::var_os(CRASH_DIR) else { return };
    let store = open(Path::new(&dir));
    let mut trace = match store.get("t1").unwrap() {
        Some(trace) => trace,
        None => new_trace(&store, "t1"),
    };
    let mut goals = store.goals("t1").unwrap();
    goals.ensure_root("loop").unwrap();
    for i in 0.. {
        let mut calls = Message::new(Role::Assistant, "x".repeat(i % 5000));
        calls.tool_calls = vec![call(&format!("c{i}"))];
        let calls = store.add_message(&mut trace, calls, None).unwrap();
        store.append_event(&mut trace, EventKind::MessageAdded { message: calls.clone() }).unwrap();
        let result = store
            .add_message(&mut trace, Message::tool_result(&calls.tool_calls[0], "ok"), None)
            .unwrap();
        store.append_event(&mut trace, EventKind::MessageAdded { message: result }).unwrap();
        goals.record("g1", &GoalStats { messages: 2, ..GoalStats::default() }).unwrap();
        store.save_goals("t1", &goals).unwrap();
    }
}

#[test]
fn kill_9_at_any_instant_leaves_a_loadable_trace() {
    let dir = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    for round in 0..6u64 {
        let mut child = std::process::Command::new(&exe)
            .args([
                "--exact",
                "trace::tests::crash_writer_child",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CRASH_DIR, dir.path())
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(150 + 37 * round));
        child.kill().unwrap();
        child.wait().unwrap();

        let store = open(dir.path());
        let Some(mut trace) = store.get("t1").unwrap() else { continue };
        let messages = store.messages("t1").unwrap();
        assert_eq!(
            messages.last().map(|m| m.sequence),
            Some(trace.last_sequence).filter(|&s| s > 0)
        );
        assert_eq!(messages.len() as u64, trace.totals.messages);
        let head = trace.head_sequence.unwrap();
        assert_eq!(store.main_path("t1", head).unwrap().len() as u64, head, "one chain");
        let events = store.events_after("t1", 0).unwrap();
        assert!(events.iter().map(|e| e.id).eq(1..=trace.last_event_id));
        store.goals("t1").unwrap();

        // The next run heals what the kill interrupted and goes on.
        let tree = MessageTree::from_messages(&messages);
        for (_, orphan) in tree.orphaned_tool_calls(head) {
            store
                .add_message(&mut trace, Message::tool_result(&orphan, "interrupted"), None)
                .unwrap();
        }
        let next = store.append_event(&mut trace, EventKind::TraceStarted).unwrap();
        assert_eq!(next.id as usize, events.len() + 1);
        let tree = MessageTree::from_messages(&store.messages("t1").unwrap());
        assert!(tree.orphaned_tool_calls(trace.head_sequence.unwrap()).is_empty());
    }
    let store = open(dir.path());
    assert!(store.get("t1").unwrap().unwrap().last_sequence > 0, "the child never wrote");
}
