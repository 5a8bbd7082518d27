//! The stores against the scenarios the runner depends on: continue,
//! rewind, goals, events. The conformance scenarios run against
//! [`FileTraceStore`], [`MemoryTraceStore`] and [`PgTraceStore`] (on a real
//! throwaway PostgreSQL); crash leftovers and the on-disk layout are the
//! file store's own, several hosts on one database PostgreSQL's.

use super::*;
use std::fs;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Runs each scenario, an `async fn(&dyn TraceStore)`, against a fresh
/// store of each kind, as the tests `scenario::file`, `scenario::memory`
/// and `scenario::postgres`.
macro_rules! conformance {
    ($($scenario:ident),* $(,)?) => {$(
        mod $scenario {
            use super::*;

            #[tokio::test]
            async fn file() {
                let dir = tempfile::tempdir().unwrap();
                super::$scenario(&open(dir.path())).await;
            }

            #[tokio::test]
            async fn memory() {
                super::$scenario(&MemoryTraceStore::new()).await;
            }

            #[cfg(all(feature = "postgres", unix))]
            #[tokio::test]
            async fn postgres() {
                super::$scenario(&pg_store().await).await;
            }
        }
    )*};
}

/// A [`PgTraceStore`] on a fresh database of the test cluster (Unix
/// only, as the cluster is).
#[cfg(all(feature = "postgres", unix))]
async fn pg_store() -> PgTraceStore {
    let url = crate::database::test_cluster::cluster().fresh_database().await;
    PgTraceStore::new(crate::database::Database::connect(&url).await.unwrap())
}

conformance!(
    create_get_and_list_with_filters,
    ids_must_be_new_and_safe,
    unknown_traces_are_not_found,
    add_message_assigns_sequence_id_parent_and_totals,
    continue_and_rewind_keep_every_message_and_never_reuse_sequences,
    rewinding_onto_tool_calls_keeps_their_results,
    orphaned_calls_of_an_interrupted_run_can_be_healed,
    messages_by_goal_filters_on_the_goal_in_focus,
    goals_are_saved_and_read_back,
    a_branch_takes_its_last_goal_snapshot_with_stats_from_its_own_messages,
    results_without_snapshots_are_replayed_with_their_calls_in_path_order,
    events_get_increasing_ids_and_can_be_read_after_an_id,
    a_stale_update_is_reconciled_with_later_messages_and_events,
    what_the_store_keeps_passes_the_redaction_point,
    write_groups_store_their_event_with_them,
    inline_images_are_kept_beside_their_message,
    images_move_with_their_trace,
    objects_and_records_are_kept_and_move_with_their_trace,
);

fn open(dir: &Path) -> FileTraceStore {
    FileTraceStore::open(dir, Durability::Batched).unwrap()
}

async fn new_trace(store: &dyn TraceStore, id: &str) -> Trace {
    let mut trace = Trace::new(TraceMode::Agent, "fix the bug", "default");
    trace.id = id.into();
    store.create_trace(&trace).await.unwrap();
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

async fn create_get_and_list_with_filters(store: &dyn TraceStore) {
    let mut parent = Trace::new(TraceMode::Agent, "parent", "default");
    parent.created_at_ms = 1_000;
    store.create_trace(&parent).await.unwrap();
    let mut child = Trace::new(TraceMode::Task, "child", "explorer");
    child.parent_trace_id = Some(parent.id.clone());
    child.parent_goal_id = Some("g2".into());
    child.created_at_ms = 2_000;
    store.create_trace(&child).await.unwrap();
    let mut done = Trace::new(TraceMode::Task, "done", "default");
    done.status = TraceStatus::Completed;
    done.created_at_ms = 3_000;
    store.create_trace(&done).await.unwrap();

    assert_eq!(store.get_trace(&child.id).await.unwrap().as_ref(), Some(&child));
    assert_eq!(store.get_trace("tr_000000000000").await.unwrap(), None);

    let ids = async |filter: TraceFilter| {
        store.list_traces(&filter).await.unwrap().into_iter().map(|t| t.id).collect::<Vec<_>>()
    };
    assert_eq!(ids(TraceFilter::default()).await, [done.id.as_str(), &child.id, &parent.id]);
    assert_eq!(
        ids(TraceFilter { status: Some(TraceStatus::Running), ..TraceFilter::default() }).await,
        [child.id.as_str(), &parent.id]
    );
    assert_eq!(
        ids(TraceFilter { parent_trace_id: Some(parent.id.clone()), ..TraceFilter::default() })
            .await,
        [child.id.as_str()]
    );
    assert_eq!(
        ids(TraceFilter { roots_only: true, ..TraceFilter::default() }).await,
        [done.id.as_str(), &parent.id]
    );

    child.status = TraceStatus::Failed;
    child.error_message = Some("boom".into());
    store.update_trace(&child).await.unwrap();
    assert_eq!(
        ids(TraceFilter { status: Some(TraceStatus::Failed), ..TraceFilter::default() }).await,
        [child.id.as_str()]
    );
    store.sync().await.unwrap();
}

async fn ids_must_be_new_and_safe(store: &dyn TraceStore) {
    let trace = new_trace(store, "mine-1").await;
    assert!(
        matches!(store.create_trace(&trace).await, Err(TraceError::AlreadyExists(id)) if id == "mine-1")
    );
    for bad in ["", "../x", ".hidden", "a/b", "é"] {
        assert!(matches!(store.get_trace(bad).await, Err(TraceError::InvalidId(_))), "{bad:?}");
        let mut trace = Trace::new(TraceMode::Agent, "t", "default");
        trace.id = bad.into();
        assert!(matches!(store.create_trace(&trace).await, Err(TraceError::InvalidId(_))));
    }
}

#[tokio::test]
async fn a_half_created_trace_directory_is_no_trace() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    // A directory left by a create that crashed before meta.json.
    fs::create_dir(dir.path().join("half")).unwrap();
    assert_eq!(store.get_trace("half").await.unwrap(), None);
    assert!(
        store.list_traces(&TraceFilter::default()).await.unwrap().iter().all(|t| t.id != "half")
    );
    new_trace(&store, "half").await;
}

async fn unknown_traces_are_not_found(store: &dyn TraceStore) {
    let mut ghost = Trace::new(TraceMode::Agent, "t", "default");
    let not_found = |r: Result<(), TraceError>| matches!(r, Err(TraceError::NotFound(_)));
    assert!(not_found(store.update_trace(&ghost).await));
    assert!(not_found(
        store.add_message(&mut ghost, Message::new(Role::User, "hi"), None).await.map(drop)
    ));
    assert!(not_found(store.append_event(&mut ghost, EventKind::TraceStarted).await.map(drop)));
    assert!(not_found(store.get_messages(&ghost.id).await.map(drop)));
    assert!(not_found(store.get_message(&ghost.id, 1).await.map(drop)));
    assert!(not_found(store.get_main_path_messages(&ghost.id, 1).await.map(drop)));
    assert!(not_found(store.events_after(&ghost.id, 0).await.map(drop)));
    assert!(not_found(store.get_goals(&ghost.id).await.map(drop)));
    assert!(not_found(store.save_goals(&ghost.id, &GoalTree::new()).await));
    assert_eq!(ghost.last_sequence, 0);
    assert_eq!(store.owner(&ghost.id).await.unwrap(), None);

    // Whose a trace is, read alone, agrees with the trace, also after an
    // update.
    let mut owned = Trace::new(TraceMode::Agent, "owned", "default");
    owned.uid = Some("alice".into());
    store.create_trace(&owned).await.unwrap();
    owned.status = TraceStatus::Completed;
    store.update_trace(&owned).await.unwrap();
    assert_eq!(store.owner(&owned.id).await.unwrap(), Some(Some("alice".into())));
    let nobody = Trace::new(TraceMode::Agent, "nobody's", "default");
    store.create_trace(&nobody).await.unwrap();
    assert_eq!(store.owner(&nobody.id).await.unwrap(), Some(None));
}

async fn add_message_assigns_sequence_id_parent_and_totals(store: &dyn TraceStore) {
    let mut trace = new_trace(store, "t1").await;
    let system =
        store.add_message(&mut trace, Message::new(Role::System, "be brief"), None).await.unwrap();
    assert_eq!((system.sequence, system.parent_sequence, system.id.as_str()), (1, None, "t1-0001"));
    assert_eq!(system.trace_id, "t1");
    assert!(system.created_at_ms > 0);

    let mut answer = Message::new(Role::Assistant, "hello");
    answer.usage =
        Usage { prompt_tokens: 10, completion_tokens: 5, cache_read_tokens: 3, ..Usage::default() };
    answer.cost = 0.25;
    answer.duration_ms = 40;
    let answer = store.add_message(&mut trace, answer, None).await.unwrap();
    assert_eq!((answer.sequence, answer.parent_sequence), (2, Some(1)));
    assert_eq!((trace.last_sequence, trace.head_sequence), (2, Some(2)));
    assert_eq!(trace.totals.messages, 2);
    assert_eq!(trace.totals.usage.prompt_tokens, 10);
    assert_eq!(trace.totals.usage.cache_read_tokens, 3);
    assert_eq!((trace.totals.cost, trace.totals.duration_ms), (0.25, 40));

    assert_eq!(store.get_trace("t1").await.unwrap().unwrap(), trace);
    assert_eq!(store.get_message("t1", 2).await.unwrap().unwrap(), answer);
    assert_eq!(store.get_message("t1", 3).await.unwrap(), None);
}

async fn continue_and_rewind_keep_every_message_and_never_reuse_sequences(store: &dyn TraceStore) {
    let mut trace = new_trace(store, "t1").await;
    for (role, text) in
        [(Role::System, "sys"), (Role::User, "q1"), (Role::Assistant, "a1"), (Role::User, "q2")]
    {
        store.add_message(&mut trace, Message::new(role, text), None).await.unwrap();
    }
    // Continue: after the head.
    store.add_message(&mut trace, Message::new(Role::Assistant, "a2"), None).await.unwrap();
    assert_eq!(
        texts(&store.get_main_path_messages("t1", 5).await.unwrap()),
        ["sys", "q1", "a1", "q2", "a2"]
    );

    // Rewind to after a1: a new branch, sequence 6.
    let q2b =
        store.add_message(&mut trace, Message::new(Role::User, "q2b"), Some(3)).await.unwrap();
    assert_eq!((q2b.sequence, q2b.parent_sequence), (6, Some(3)));
    store.add_message(&mut trace, Message::new(Role::Assistant, "a2b"), None).await.unwrap();
    assert_eq!(
        texts(&store.get_main_path_messages("t1", trace.head_sequence.unwrap()).await.unwrap()),
        ["sys", "q1", "a1", "q2b", "a2b"]
    );
    assert_eq!(sequences(&store.get_main_path_messages("t1", 7).await.unwrap()), [1, 2, 3, 6, 7]);

    // The old branch is still there, whole.
    assert_eq!(sequences(&store.get_messages("t1").await.unwrap()), [1, 2, 3, 4, 5, 6, 7]);
    assert_eq!(
        texts(&store.get_main_path_messages("t1", 5).await.unwrap()),
        ["sys", "q1", "a1", "q2", "a2"]
    );

    // Switching back to it, then continuing there.
    store.set_head(&mut trace, 5).await.unwrap();
    let next = store.add_message(&mut trace, Message::new(Role::User, "q3"), None).await.unwrap();
    assert_eq!((next.sequence, next.parent_sequence), (8, Some(5)));
    assert_eq!(store.get_trace("t1").await.unwrap().unwrap().head_sequence, Some(8));

    assert!(matches!(
        store.add_message(&mut trace, Message::new(Role::User, "x"), Some(99)).await,
        Err(TraceError::NoSuchMessage { sequence: 99, .. })
    ));
    assert!(matches!(
        store.set_head(&mut trace, 42).await,
        Err(TraceError::NoSuchMessage { sequence: 42, .. })
    ));
    assert!(matches!(
        store.get_main_path_messages("t1", 42).await,
        Err(TraceError::NoSuchMessage { sequence: 42, .. })
    ));
    assert_eq!(trace.last_sequence, 8);
}

async fn rewinding_onto_tool_calls_keeps_their_results(store: &dyn TraceStore) {
    let mut trace = new_trace(store, "t1").await;
    store.add_message(&mut trace, Message::new(Role::User, "read a and b"), None).await.unwrap();
    let mut calls = Message::new(Role::Assistant, "");
    calls.tool_calls = vec![call("c1"), call("c2")];
    store.add_message(&mut trace, calls, None).await.unwrap();
    store.add_message(&mut trace, Message::tool_result(&call("c1"), "A"), None).await.unwrap();
    store.add_message(&mut trace, Message::tool_result(&call("c2"), "B"), None).await.unwrap();
    store.add_message(&mut trace, Message::new(Role::Assistant, "done"), None).await.unwrap();

    let mut tree = MessageTree::from_messages(&store.get_messages("t1").await.unwrap());
    let parent = tree.rewind_point(2);
    assert_eq!(parent, 4);
    let retry = store
        .add_message(&mut trace, Message::new(Role::User, "now only a"), Some(parent))
        .await
        .unwrap();
    tree.insert(&retry);
    let path = store.get_main_path_messages("t1", retry.sequence).await.unwrap();
    assert_eq!(sequences(&path), [1, 2, 3, 4, 6]);
    assert_eq!(sequences(&path), tree.main_path(6));
    assert!(tree.orphaned_tool_calls(6).is_empty());
}

#[tokio::test]
async fn the_metadata_is_written_for_branches_and_every_32nd_message() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let mut trace = new_trace(&store, "t1").await;
    // The newest version: meta.jsonl's last line, else meta.json.
    let on_disk = || -> Trace {
        let log = fs::read_to_string(dir.path().join("t1/meta.jsonl")).unwrap_or_default();
        match log.lines().last() {
            Some(line) => serde_json::from_str(line).unwrap(),
            None => {
                serde_json::from_slice(&fs::read(dir.path().join("t1/meta.json")).unwrap()).unwrap()
            }
        }
    };
    for text in ["a", "b", "c"] {
        store.add_message(&mut trace, Message::new(Role::User, text), None).await.unwrap();
    }
    let log = fs::read_to_string(dir.path().join("t1/messages.jsonl")).unwrap();
    assert_eq!(log.lines().count(), 3, "one line a message: {log}");
    assert!(!dir.path().join("t1/messages").exists(), "no file a message");
    assert_eq!(on_disk().last_sequence, 0, "continuations leave meta.json to `get_trace`");
    assert_eq!(store.get_trace("t1").await.unwrap().unwrap(), trace);

    store.add_message(&mut trace, Message::new(Role::User, "branch"), Some(1)).await.unwrap();
    assert_eq!((on_disk().last_sequence, on_disk().head_sequence), (4, Some(4)));
    while trace.last_sequence < 32 {
        store.add_message(&mut trace, Message::new(Role::User, "more"), None).await.unwrap();
    }
    assert_eq!(on_disk(), trace);
    assert_eq!(store.get_trace("t1").await.unwrap().unwrap(), trace);
}

#[tokio::test]
async fn metadata_and_goals_are_appended_versions_and_a_torn_one_never_counts() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let mut trace = new_trace(&store, "t1").await;
    let created = fs::read(dir.path().join("t1/meta.json")).unwrap();
    trace.model = Some("first".into());
    store.update_trace(&trace).await.unwrap();
    trace.model = Some("second".into());
    store.update_trace(&trace).await.unwrap();
    let mut goals = GoalTree::new();
    goals.add("one").unwrap();
    store.save_goals("t1", &goals).await.unwrap();
    goals.add("two").unwrap();
    store.save_goals("t1", &goals).await.unwrap();
    // No file is replaced: meta.json stays as the create wrote it.
    assert_eq!(fs::read(dir.path().join("t1/meta.json")).unwrap(), created);
    let lines = |name: &str| fs::read_to_string(dir.path().join("t1").join(name)).unwrap();
    assert_eq!((lines("meta.jsonl").lines().count(), lines("goal.jsonl").lines().count()), (2, 2));
    assert_eq!(store.get_trace("t1").await.unwrap().unwrap().model.as_deref(), Some("second"));
    assert_eq!(store.get_goals("t1").await.unwrap(), goals);

    // A crash mid-append leaves a torn last line: the version before it is
    // the current one, and the next append starts on a line of its own.
    for name in ["meta.jsonl", "goal.jsonl"] {
        let mut file =
            fs::OpenOptions::new().append(true).open(dir.path().join("t1").join(name)).unwrap();
        file.write_all(b"{\"id\":\"t1\",\"mod").unwrap();
    }
    assert_eq!(store.get_trace("t1").await.unwrap().unwrap().model.as_deref(), Some("second"));
    assert_eq!(store.get_goals("t1").await.unwrap(), goals);
    trace.model = Some("third".into());
    store.update_trace(&trace).await.unwrap();
    assert_eq!(store.get_trace("t1").await.unwrap().unwrap().model.as_deref(), Some("third"));
    assert!(lines("meta.jsonl").lines().all(|l| serde_json::from_str::<Trace>(l).is_ok()));

    // Versions a power loss kept of a trace whose create it lost are not
    // taken for a new trace's of the same id.
    fs::remove_file(dir.path().join("t1/meta.json")).unwrap();
    assert_eq!(store.get_trace("t1").await.unwrap(), None);
    let again = new_trace(&store, "t1").await;
    assert_eq!(store.get_trace("t1").await.unwrap().unwrap(), again);
    assert_eq!(store.get_goals("t1").await.unwrap(), GoalTree::new());
}

async fn orphaned_calls_of_an_interrupted_run_can_be_healed(store: &dyn TraceStore) {
    let mut trace = new_trace(store, "t1").await;
    store.add_message(&mut trace, Message::new(Role::User, "go"), None).await.unwrap();
    let mut calls = Message::new(Role::Assistant, "");
    calls.tool_calls = vec![call("c1"), call("c2")];
    store.add_message(&mut trace, calls, None).await.unwrap();
    store.add_message(&mut trace, Message::tool_result(&call("c1"), "A"), None).await.unwrap();
    // The host died here. Reloaded, the runner finds c2 unanswered.
    drop(trace);
    let mut trace = store.get_trace("t1").await.unwrap().unwrap();
    let tree = MessageTree::from_messages(&store.get_messages("t1").await.unwrap());
    let orphans = tree.orphaned_tool_calls(trace.head_sequence.unwrap());
    assert_eq!(orphans, [(2, call("c2"))]);
    let mut healed = Message::tool_result(&orphans[0].1, "interrupted");
    healed.synthetic = true;
    let healed = store.add_message(&mut trace, healed, None).await.unwrap();
    let tree = MessageTree::from_messages(&store.get_messages("t1").await.unwrap());
    assert!(tree.orphaned_tool_calls(healed.sequence).is_empty());
}

async fn messages_by_goal_filters_on_the_goal_in_focus(store: &dyn TraceStore) {
    let mut trace = new_trace(store, "t1").await;
    for (goal, text) in [(None, "q"), (Some("g1"), "a"), (Some("g2"), "b"), (Some("g1"), "c")] {
        let mut m = Message::new(Role::Assistant, text);
        m.goal_id = goal.map(str::to_owned);
        store.add_message(&mut trace, m, None).await.unwrap();
    }
    assert_eq!(texts(&store.get_messages_by_goal("t1", "g1").await.unwrap()), ["a", "c"]);
    assert!(store.get_messages_by_goal("t1", "g9").await.unwrap().is_empty());
}

async fn goals_are_saved_and_read_back(store: &dyn TraceStore) {
    new_trace(store, "t1").await;
    assert!(store.get_goals("t1").await.unwrap().is_empty());
    let mut tree = GoalTree::new();
    tree.ensure_root("fix the bug").unwrap();
    tree.add("reproduce").unwrap();
    store.save_goals("t1", &tree).await.unwrap();
    assert_eq!(store.get_goals("t1").await.unwrap(), tree);
}

/// Stores the branch `root → a (goal call) → result → b (goal call) →
/// result` and returns the trace; the results carry `snapshots`.
async fn goal_branch(store: &dyn TraceStore, snapshots: [Option<GoalTree>; 2]) -> Trace {
    let mut trace = new_trace(store, "t1").await;
    let mut root = Message::new(Role::User, "plan it");
    root.goal_id = Some("g1".into());
    store.add_message(&mut trace, root, None).await.unwrap();
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
        store.add_message(&mut trace, answer, head).await.unwrap();
        let mut result = Message::tool_result(&call, format!("added g{}", i + 2));
        result.goal_id = Some("g1".into());
        result.goals = snapshot;
        let head = trace.head_sequence;
        store.add_message(&mut trace, result, head).await.unwrap();
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

async fn a_branch_takes_its_last_goal_snapshot_with_stats_from_its_own_messages(
    store: &dyn TraceStore,
) {
    let mut with_stats = tree_with(&["step 0", "step 1"]);
    with_stats.record("g2", &GoalStats { messages: 99, ..GoalStats::default() }).unwrap();
    let trace =
        goal_branch(store, [Some(tree_with(&["step 0"]).snapshot()), Some(with_stats.snapshot())])
            .await;
    let path = store.get_main_path_messages("t1", trace.head_sequence.unwrap()).await.unwrap();
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
    let path = store.get_main_path_messages("t1", 3).await.unwrap();
    let tree = GoalTree::of_branch(&path, tree_with(&[]), |_, _, _| {});
    assert_eq!(tree.goals().len(), 2);
    // And before any goal call: the initial tree, with the root's stats.
    let path = store.get_main_path_messages("t1", 1).await.unwrap();
    let tree = GoalTree::of_branch(&path, tree_with(&[]), |_, _, _| {});
    assert_eq!(tree.goals().len(), 1);
    assert_eq!(tree.get("g1").unwrap().self_stats.messages, 1);
}

async fn results_without_snapshots_are_replayed_with_their_calls_in_path_order(
    store: &dyn TraceStore,
) {
    let trace = goal_branch(store, [None, Some(tree_with(&["step 0", "step 1"]).snapshot())]).await;
    let path = store.get_main_path_messages("t1", trace.head_sequence.unwrap()).await.unwrap();
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

async fn events_get_increasing_ids_and_can_be_read_after_an_id(store: &dyn TraceStore) {
    let mut trace = new_trace(store, "t1").await;
    assert!(store.events_after("t1", 0).await.unwrap().is_empty());
    let started = store.append_event(&mut trace, EventKind::TraceStarted).await.unwrap();
    let message =
        store.add_message(&mut trace, Message::new(Role::User, "hi"), None).await.unwrap();
    store
        .append_event(&mut trace, EventKind::MessageAdded { message: message.clone() })
        .await
        .unwrap();
    let finished = EventKind::TraceFinished { status: TraceStatus::Completed, error: None };
    store.append_event(&mut trace, finished.clone()).await.unwrap();
    assert_eq!(started.id, 1);
    assert_eq!(trace.last_event_id, 3);

    let all = store.events_after("t1", 0).await.unwrap();
    assert_eq!(all.iter().map(|e| e.id).collect::<Vec<_>>(), [1, 2, 3]);
    assert_eq!(all[1].kind, EventKind::MessageAdded { message });
    let later = store.events_after("t1", 2).await.unwrap();
    assert_eq!((later.len(), &later[0].kind), (1, &finished));
    assert!(store.events_after("t1", 3).await.unwrap().is_empty());
    // meta.json was last written before events 2 and 3; the file says more.
    assert_eq!(store.get_trace("t1").await.unwrap().unwrap().last_event_id, 3);
}

async fn a_stale_update_is_reconciled_with_later_messages_and_events(store: &dyn TraceStore) {
    let mut trace = new_trace(store, "t1").await;
    store.add_message(&mut trace, Message::new(Role::User, "q"), None).await.unwrap();
    let stale = trace.clone();
    let mut answer = Message::new(Role::Assistant, "a");
    answer.cost = 0.5;
    store.add_message(&mut trace, answer, None).await.unwrap();
    store.add_message(&mut trace, Message::new(Role::User, "q2"), None).await.unwrap();
    store.add_message(&mut trace, Message::new(Role::User, "side"), Some(1)).await.unwrap();
    store.append_event(&mut trace, EventKind::TraceStarted).await.unwrap();
    // A writer that missed messages 2..4 and the event stores its copy.
    store.update_trace(&stale).await.unwrap();

    let mut trace = store.get_trace("t1").await.unwrap().unwrap();
    assert_eq!(trace.last_sequence, 4);
    assert_eq!(trace.head_sequence, Some(3), "advanced along 2 and 3, not onto the side branch");
    assert_eq!((trace.totals.messages, trace.totals.cost), (4, 0.5));
    assert_eq!(trace.last_event_id, 1);
    let next =
        store.add_message(&mut trace, Message::new(Role::Assistant, "a2"), None).await.unwrap();
    assert_eq!((next.sequence, next.parent_sequence), (5, Some(3)));
    assert_eq!(store.append_event(&mut trace, EventKind::TraceStarted).await.unwrap().id, 2);
}

async fn what_the_store_keeps_passes_the_redaction_point(store: &dyn TraceStore) {
    let secret = "trace-key-4Zr/p\"8Lm";
    reson_text::redact::register(secret).unwrap();
    let mut trace = Trace::new(TraceMode::Agent, format!("use {secret}"), "default");
    trace.id = "t1".into();
    store.create_trace(&trace).await.unwrap();
    let said = store
        .add_message(&mut trace, Message::new(Role::User, format!("key {secret}")), None)
        .await
        .unwrap();
    // The caller's copy is the message as given; what is kept is redacted.
    assert_eq!(said.text(), format!("key {secret}"));
    let kept = store.get_message("t1", said.sequence).await.unwrap().unwrap();
    assert_eq!(kept.text(), "key [REDACTED]");
    let event = EventKind::MessageAdded { message: said };
    store.append_event(&mut trace, event).await.unwrap();
    let mut goals = GoalTree::new();
    goals.ensure_root(&format!("find {secret}")).unwrap();
    store.save_goals("t1", &goals).await.unwrap();

    let everything = format!(
        "{:?}{:?}{:?}{:?}",
        store.get_trace("t1").await.unwrap(),
        store.get_messages("t1").await.unwrap(),
        store.events_after("t1", 0).await.unwrap(),
        store.get_goals("t1").await.unwrap(),
    );
    assert!(!everything.contains("4Zr"), "{everything}");
    assert_eq!(everything.matches("[REDACTED]").count(), 4, "{everything}");
}

/// Runs writing different traces at once, as the runner's tasks do, each
/// end with its own messages and events, whole.
async fn concurrent_writers_keep_their_traces_apart(store: Arc<dyn TraceStore>) {
    let writers = (0..16).map(|w| {
        let store = Arc::clone(&store);
        tokio::spawn(async move {
            let mut trace = new_trace(&*store, &format!("w{w}")).await;
            for i in 0..20 {
                let text = format!("{w}/{i}");
                store.add_message(&mut trace, Message::new(Role::User, text), None).await.unwrap();
                store.append_event(&mut trace, EventKind::TraceStarted).await.unwrap();
            }
            trace
        })
    });
    for (w, writer) in writers.collect::<Vec<_>>().into_iter().enumerate() {
        let trace = writer.await.unwrap();
        assert_eq!(store.get_trace(&trace.id).await.unwrap().unwrap(), trace);
        let path = store.get_main_path_messages(&trace.id, 20).await.unwrap();
        let expected: Vec<String> = (0..20).map(|i| format!("{w}/{i}")).collect();
        assert_eq!(texts(&path), expected);
        assert_eq!(store.events_after(&trace.id, 0).await.unwrap().len(), 20);
    }
    assert_eq!(store.list_traces(&TraceFilter::default()).await.unwrap().len(), 16);
    store.sync().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writers_keep_their_traces_apart_in_files() {
    let dir = tempfile::tempdir().unwrap();
    concurrent_writers_keep_their_traces_apart(Arc::new(open(dir.path()))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writers_keep_their_traces_apart_in_memory() {
    concurrent_writers_keep_their_traces_apart(Arc::new(MemoryTraceStore::new())).await;
}

#[tokio::test]
async fn a_torn_event_line_is_ignored_then_cut_off() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let mut trace = new_trace(&store, "t1").await;
    store.append_event(&mut trace, EventKind::TraceStarted).await.unwrap();
    store
        .append_event(
            &mut trace,
            EventKind::ToolStarted {
                call_id: "c1".into(),
                name: "read".into(),
                arguments: "{}".into(),
            },
        )
        .await
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
    let mut trace = store.get_trace("t1").await.unwrap().unwrap();
    assert_eq!(trace.last_event_id, 2);
    assert_eq!(store.events_after("t1", 0).await.unwrap().len(), 2);
    let next = store.append_event(&mut trace, EventKind::TraceStarted).await.unwrap();
    assert_eq!(next.id, 3);
    assert_eq!(
        store.events_after("t1", 0).await.unwrap().iter().map(|e| e.id).collect::<Vec<_>>(),
        [1, 2, 3]
    );
    let text = fs::read_to_string(&events).unwrap();
    assert_eq!(text.lines().count(), 3);
    assert!(!text.contains("tool_fin\""), "{text}");
}

#[tokio::test]
async fn a_corrupt_complete_event_line_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let mut trace = new_trace(&store, "t1").await;
    store.append_event(&mut trace, EventKind::TraceStarted).await.unwrap();
    fs::OpenOptions::new()
        .append(true)
        .open(dir.path().join("t1/events.jsonl"))
        .unwrap()
        .write_all(b"garbage\n")
        .unwrap();
    let err = store.events_after("t1", 0).await.unwrap_err();
    assert!(
        matches!(&err, TraceError::Corrupt { reason, .. } if reason.starts_with("line 2:")),
        "{err}"
    );
}

#[tokio::test]
async fn a_message_written_without_its_meta_update_is_reconciled() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let mut trace = new_trace(&store, "t1").await;
    store.add_message(&mut trace, Message::new(Role::User, "q"), None).await.unwrap();
    let stale = trace.clone();
    let mut answer = Message::new(Role::Assistant, "a");
    answer.cost = 0.5;
    store.add_message(&mut trace, answer, None).await.unwrap();
    store.add_message(&mut trace, Message::new(Role::User, "q2"), None).await.unwrap();
    // A message on another branch, also written just before the crash.
    let mut side = store.get_message("t1", 3).await.unwrap().unwrap();
    side.sequence = 4;
    side.parent_sequence = Some(1);
    side.id = "t1-0004".into();
    let mut line = serde_json::to_vec(&side).unwrap();
    line.push(b'\n');
    fs::OpenOptions::new()
        .append(true)
        .open(dir.path().join("t1/messages.jsonl"))
        .unwrap()
        .write_all(&line)
        .unwrap();
    // meta.json as it was before messages 2..4.
    fs::write(dir.path().join("t1/meta.json"), serde_json::to_vec(&stale).unwrap()).unwrap();
    drop(store);

    let store = open(dir.path());
    let mut trace = store.get_trace("t1").await.unwrap().unwrap();
    assert_eq!(trace.last_sequence, 4);
    assert_eq!(trace.head_sequence, Some(3), "advanced along 2 and 3, not onto the side branch");
    assert_eq!(trace.totals.messages, 4);
    assert_eq!(trace.totals.cost, 0.5);
    let next =
        store.add_message(&mut trace, Message::new(Role::Assistant, "a2"), None).await.unwrap();
    assert_eq!((next.sequence, next.parent_sequence), (5, Some(3)));
    assert_eq!(sequences(&store.get_main_path_messages("t1", 5).await.unwrap()), [1, 2, 3, 5]);
}

/// A power loss under `Batched` keeps the log up to some point, perhaps
/// with a torn line, while meta.json may name a message after it.
#[tokio::test]
async fn messages_a_power_loss_cut_from_the_log_count_as_never_written() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let mut trace = new_trace(&store, "t1").await;
    store.add_message(&mut trace, Message::new(Role::User, "q"), None).await.unwrap();
    store.add_message(&mut trace, Message::new(Role::Assistant, "a"), None).await.unwrap();
    // A branch: meta.json names message 3 as the head.
    store.add_message(&mut trace, Message::new(Role::Assistant, "b"), Some(1)).await.unwrap();
    let log = dir.path().join("t1/messages.jsonl");
    let bytes = fs::read(&log).unwrap();
    let third = bytes[..bytes.len() - 1].iter().rposition(|&c| c == b'\n').unwrap() + 1;
    fs::write(&log, &bytes[..third + 10]).unwrap();
    drop(store);

    let store = open(dir.path());
    let mut trace = store.get_trace("t1").await.unwrap().unwrap();
    assert_eq!((trace.last_sequence, trace.head_sequence), (3, Some(2)));
    assert_eq!(sequences(&store.get_messages("t1").await.unwrap()), [1, 2]);
    assert_eq!(store.get_message("t1", 3).await.unwrap(), None);
    let next =
        store.add_message(&mut trace, Message::new(Role::Assistant, "again"), None).await.unwrap();
    assert_eq!((next.sequence, next.parent_sequence), (4, Some(2)));
    assert_eq!(sequences(&store.get_main_path_messages("t1", 4).await.unwrap()), [1, 2, 4]);
    let reopened = open(dir.path());
    assert_eq!(reopened.get_trace("t1").await.unwrap().unwrap(), trace);
}

#[tokio::test]
async fn a_torn_message_line_is_ignored_then_cut_off() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let mut trace = new_trace(&store, "t1").await;
    store.add_message(&mut trace, Message::new(Role::User, "q"), None).await.unwrap();
    store.add_message(&mut trace, Message::new(Role::Assistant, "a"), None).await.unwrap();
    // A crash in the middle of appending message 3.
    let log = dir.path().join("t1/messages.jsonl");
    fs::OpenOptions::new()
        .append(true)
        .open(&log)
        .unwrap()
        .write_all(br#"{"id":"t1-0003","trace_id":"t1","sequence":3,"parent_seq"#)
        .unwrap();
    drop(store);

    let store = open(dir.path());
    let mut trace = store.get_trace("t1").await.unwrap().unwrap();
    assert_eq!((trace.last_sequence, trace.head_sequence), (2, Some(2)));
    assert_eq!(sequences(&store.get_messages("t1").await.unwrap()), [1, 2]);
    assert_eq!(store.get_message("t1", 3).await.unwrap(), None);
    let next = store.add_message(&mut trace, Message::new(Role::User, "b"), None).await.unwrap();
    assert_eq!((next.sequence, next.parent_sequence), (3, Some(2)));
    assert_eq!(texts(&store.get_main_path_messages("t1", 3).await.unwrap()), ["q", "a", "b"]);
    let text = fs::read_to_string(&log).unwrap();
    assert_eq!(text.lines().count(), 3, "{text}");
    assert!(!text.contains("parent_seq\""), "the torn part is cut off: {text}");
    for line in text.lines() {
        serde_json::from_str::<Message>(line).unwrap();
    }
}

#[tokio::test]
async fn a_corrupt_complete_message_line_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let mut trace = new_trace(&store, "t1").await;
    store.add_message(&mut trace, Message::new(Role::User, "q"), None).await.unwrap();
    fs::OpenOptions::new()
        .append(true)
        .open(dir.path().join("t1/messages.jsonl"))
        .unwrap()
        .write_all(b"garbage\n")
        .unwrap();
    for err in [
        store.get_messages("t1").await.unwrap_err(),
        store.get_trace("t1").await.unwrap_err(),
        store.get_message("t1", 2).await.unwrap_err(),
    ] {
        assert!(
            matches!(&err, TraceError::Corrupt { reason, .. } if reason.starts_with("line 2:")),
            "{err}"
        );
    }
}

/// A trace written before `messages.jsonl`: meta.json, one file a message
/// (`messages/000001.json`, pretty JSON), an empty one left by a power
/// loss. It reads as it did, goes on in the log, and reads back whole.
/// Records filed one file each (before `records.jsonl`) are still read and
/// listed; a version in the log wins over the file; `get_record` sees
/// what was appended after its last look, a torn line only once it is
/// whole, and a trace made again under the same id never gets the old
/// log's records.
#[tokio::test]
async fn records_in_files_and_in_the_log_read_as_one_and_the_index_follows_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    new_trace(&store, "t1").await;
    let legacy = dir.path().join("t1/records/checkpoint");
    fs::create_dir_all(&legacy).unwrap();
    fs::write(legacy.join("000001.json"), br#"{"old": 1}"#).unwrap();
    fs::write(legacy.join("000002.json"), br#"{"old": 2}"#).unwrap();
    fs::write(legacy.join(".000003.json.tmp"), b"{\"torn").unwrap();
    let get = |kind: &'static str, key: &'static str| {
        let store = &store;
        async move { store.get_record("t1", kind, key).await.unwrap() }
    };
    assert_eq!(get("checkpoint", "000001").await, Some(serde_json::json!({"old": 1})));

    store.put_record("t1", "checkpoint", "000002", &serde_json::json!({"new": 2})).await.unwrap();
    store.put_record("t1", "effects", "call_1", &serde_json::json!([1])).await.unwrap();
    assert_eq!(get("checkpoint", "000002").await, Some(serde_json::json!({"new": 2})));
    assert_eq!(get("effects", "call_1").await, Some(serde_json::json!([1])));
    // Appended after the index last looked.
    store.put_record("t1", "effects", "call_1", &serde_json::json!([2])).await.unwrap();
    store.put_record("t1", "effects", "call_2", &serde_json::json!([3])).await.unwrap();
    assert_eq!(get("effects", "call_1").await, Some(serde_json::json!([2])));
    assert_eq!(get("effects", "call_2").await, Some(serde_json::json!([3])));
    let listed: Vec<_> = store
        .list_records("t1", None)
        .await
        .unwrap()
        .into_iter()
        .map(|r| (r.kind, r.key, r.body))
        .collect();
    let expected = [
        ("checkpoint", "000001", serde_json::json!({"old": 1})),
        ("checkpoint", "000002", serde_json::json!({"new": 2})),
        ("effects", "call_1", serde_json::json!([2])),
        ("effects", "call_2", serde_json::json!([3])),
    ];
    let expected: Vec<_> =
        expected.into_iter().map(|(k, key, b)| (k.to_owned(), key.to_owned(), b)).collect();
    assert_eq!(listed, expected);
    assert_eq!(store.list_records("t1", Some("effects")).await.unwrap().len(), 2);

    // A crash mid-append: the torn line counts as never written, for the
    // index too, and the next append cuts it off.
    let log = dir.path().join("t1/records.jsonl");
    let mut file = fs::OpenOptions::new().append(true).open(&log).unwrap();
    std::io::Write::write_all(&mut file, br#"{"kind":"effects","key":"call_3","bo"#).unwrap();
    // Closed before the trace's directory is removed below, which Windows
    // may refuse while a file in it is open.
    drop(file);
    assert_eq!(get("effects", "call_3").await, None);
    store.put_record("t1", "effects", "call_3", &serde_json::json!([4])).await.unwrap();
    assert_eq!(get("effects", "call_3").await, Some(serde_json::json!([4])));
    assert_eq!(store.list_records("t1", Some("effects")).await.unwrap().len(), 3);

    // The log rewritten in place (same file, so the same identity): a
    // line as long as the old log, then new lines. The index takes in only
    // the new lines; its old offsets now land inside the long line, so it
    // is rebuilt instead of answering from them.
    let old_len = usize::try_from(fs::metadata(&log).unwrap().len()).unwrap();
    let pad = |body: &str| format!(r#"{{"kind":"pad","key":"p","body":"{body}"}}"#);
    let filler = pad(&"x".repeat(old_len - pad("").len() - 1));
    let rewritten = [("effects", "call_3", "[5]"), ("effects", "call_2", "[6]")]
        .map(|(kind, key, body)| format!(r#"{{"kind":"{kind}","key":"{key}","body":{body}}}"#))
        .join("\n");
    fs::write(&log, format!("{filler}\n{rewritten}\n")).unwrap();
    assert_eq!(get("effects", "call_2").await, Some(serde_json::json!([6])));
    assert_eq!(get("effects", "call_1").await, None, "answered from a stale offset");
    assert_eq!(get("checkpoint", "000002").await, Some(serde_json::json!({"old": 2})));
    assert_eq!(get("effects", "call_3").await, Some(serde_json::json!([5])));

    // The trace made again under its id: a new, shorter log, then a longer
    // one at other offsets; the old index must not answer for either.
    fs::remove_dir_all(dir.path().join("t1")).unwrap();
    new_trace(&store, "t1").await;
    assert_eq!(get("effects", "call_1").await, None);
    let long = serde_json::json!(["a much longer body than any before it", 1, 2, 3, 4, 5, 6]);
    for key in ["call_9", "call_8", "call_7", "call_6", "call_5", "call_4"] {
        store.put_record("t1", "effects", key, &long).await.unwrap();
    }
    assert_eq!(get("effects", "call_2").await, None);
    assert_eq!(get("effects", "call_4").await, Some(long));
}

#[tokio::test]
async fn a_trace_in_the_old_layout_reads_and_goes_on_in_the_log() {
    let dir = tempfile::tempdir().unwrap();
    // The messages as any store numbers them: 1, 2, then 3 rewinding to
    // 1, then 4 continuing 3.
    let memory = MemoryTraceStore::new();
    let mut old = new_trace(&memory, "t1").await;
    memory.add_message(&mut old, Message::new(Role::User, "q"), None).await.unwrap();
    memory.add_message(&mut old, Message::new(Role::Assistant, "a"), None).await.unwrap();
    let mut b = Message::new(Role::Assistant, "b");
    b.cost = 0.25;
    memory.add_message(&mut old, b, Some(1)).await.unwrap();
    // meta.json as the old store left it: rewritten for the branch, not
    // for message 4 which continued the head.
    let meta = old.clone();
    memory.add_message(&mut old, Message::new(Role::User, "c"), None).await.unwrap();
    let trace_dir = dir.path().join("t1");
    fs::create_dir_all(trace_dir.join("messages")).unwrap();
    fs::write(trace_dir.join("meta.json"), serde_json::to_vec_pretty(&meta).unwrap()).unwrap();
    let written = memory.get_messages("t1").await.unwrap();
    for message in &written {
        let path = trace_dir.join(format!("messages/{:06}.json", message.sequence));
        fs::write(path, serde_json::to_vec_pretty(message).unwrap()).unwrap();
    }
    // Message 5, caught by a power loss before its sync.
    fs::write(trace_dir.join("messages/000005.json"), b"").unwrap();
    fs::write(trace_dir.join("messages/.000006.json.tmp"), b"{\"partial").unwrap();
    let file_of_1 = fs::read(trace_dir.join("messages/000001.json")).unwrap();

    let store = open(dir.path());
    let mut trace = store.get_trace("t1").await.unwrap().unwrap();
    assert_eq!((trace.last_sequence, trace.head_sequence), (5, Some(4)));
    assert_eq!((trace.totals.messages, trace.totals.cost), (4, 0.25));
    assert_eq!(store.get_messages("t1").await.unwrap(), written);
    assert_eq!(store.get_message("t1", 2).await.unwrap().as_ref(), Some(&written[1]));
    assert_eq!(store.get_message("t1", 5).await.unwrap(), None);

    let d = store.add_message(&mut trace, Message::new(Role::Assistant, "d"), None).await.unwrap();
    assert_eq!((d.sequence, d.parent_sequence), (6, Some(4)));
    // Rewinding onto a message of the old layout.
    let e = store.add_message(&mut trace, Message::new(Role::User, "e"), Some(2)).await.unwrap();
    assert_eq!((e.sequence, e.parent_sequence), (7, Some(2)));
    assert!(!trace_dir.join("messages/000006.json").exists(), "new messages go to the log");
    assert_eq!(fs::read_to_string(trace_dir.join("messages.jsonl")).unwrap().lines().count(), 2);
    assert_eq!(fs::read(trace_dir.join("messages/000001.json")).unwrap(), file_of_1);

    let reopened = open(dir.path());
    assert_eq!(reopened.get_trace("t1").await.unwrap().unwrap(), trace);
    assert_eq!(sequences(&reopened.get_messages("t1").await.unwrap()), [1, 2, 3, 4, 6, 7]);
    assert_eq!(
        texts(&reopened.get_main_path_messages("t1", 6).await.unwrap()),
        ["q", "b", "c", "d"]
    );
    assert_eq!(texts(&reopened.get_main_path_messages("t1", 7).await.unwrap()), ["q", "a", "e"]);
    assert_eq!(reopened.get_message("t1", 6).await.unwrap(), Some(d));
    reopened.set_head(&mut trace, 3).await.unwrap();
    assert_eq!(reopened.get_trace("t1").await.unwrap().unwrap().head_sequence, Some(3));

    // Moved to a fresh store, it is all in the log there, and reads the same.
    let snapshot = reopened.export_trace("t1").await.unwrap().unwrap();
    let fresh_dir = tempfile::tempdir().unwrap();
    let fresh = open(fresh_dir.path());
    fresh.import_trace(&snapshot).await.unwrap();
    assert_eq!(fresh.export_trace("t1").await.unwrap().unwrap(), snapshot);
    assert!(!fresh_dir.path().join("t1/messages").exists());
}

#[tokio::test]
async fn leftover_temporary_files_are_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let mut trace = new_trace(&store, "t1").await;
    store.add_message(&mut trace, Message::new(Role::User, "q"), None).await.unwrap();
    fs::create_dir_all(dir.path().join("t1/messages")).unwrap();
    fs::write(dir.path().join("t1/messages/.000002.json.tmp"), b"{\"partial").unwrap();
    fs::write(dir.path().join("t1/.meta.json.tmp"), b"{").unwrap();
    let mut trace = store.get_trace("t1").await.unwrap().unwrap();
    assert_eq!(trace.last_sequence, 1);
    assert_eq!(sequences(&store.get_messages("t1").await.unwrap()), [1]);
    assert_eq!(
        store.add_message(&mut trace, Message::new(Role::User, "q2"), None).await.unwrap().sequence,
        2
    );
}

#[tokio::test]
async fn immediate_durability_gives_the_same_results() {
    let dir = tempfile::tempdir().unwrap();
    let store = FileTraceStore::open(dir.path(), Durability::Immediate).unwrap();
    let mut trace = new_trace(&store, "t1").await;
    store.add_message(&mut trace, Message::new(Role::User, "q"), None).await.unwrap();
    store.add_message(&mut trace, Message::new(Role::User, "a"), None).await.unwrap();
    store.add_message(&mut trace, Message::new(Role::User, "b"), Some(1)).await.unwrap();
    store.set_head(&mut trace, 2).await.unwrap();
    store.append_event(&mut trace, EventKind::TraceStarted).await.unwrap();
    store.save_goals("t1", &GoalTree::new()).await.unwrap();
    store.sync().await.unwrap();
    let batched = open(dir.path());
    assert_eq!(batched.get_trace("t1").await.unwrap().unwrap(), trace);
    assert_eq!(batched.events_after("t1", 0).await.unwrap().len(), 1);
    assert_eq!(sequences(&batched.get_main_path_messages("t1", 2).await.unwrap()), [1, 2]);
}

/// Immediate durability fsyncs several times per call; those are awaited
/// on the store's sync thread, so other tasks keep running meanwhile, even
/// on a runtime with a single thread.
#[tokio::test]
async fn immediate_fsyncs_leave_the_runtime_free() {
    let dir = tempfile::tempdir().unwrap();
    let store = FileTraceStore::open(dir.path(), Durability::Immediate).unwrap();
    let mut trace = new_trace(&store, "t1").await;
    let ticks = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let ticker = tokio::spawn({
        let (ticks, done) = (Arc::clone(&ticks), Arc::clone(&done));
        async move {
            while !done.load(Ordering::Relaxed) {
                ticks.fetch_add(1, Ordering::Relaxed);
                tokio::task::yield_now().await;
            }
        }
    });
    for text in ["a", "b", "c", "d", "e"] {
        store.add_message(&mut trace, Message::new(Role::User, text), None).await.unwrap();
        store.append_event(&mut trace, EventKind::TraceStarted).await.unwrap();
    }
    done.store(true, Ordering::Relaxed);
    ticker.await.unwrap();
    // Blocking fsyncs would give the ticker no turn before the writes end.
    assert!(ticks.load(Ordering::Relaxed) > 0, "the writes never yielded");
    assert_eq!(store.get_messages("t1").await.unwrap().len(), 5);
}

/// Set in the child process of the kill -9 test: where it writes.
const CRASH_DIR: &str = "RESON_TRACE_CRASH_DIR";

/// In the kill -9 test's child process: writes loop iterations to one trace
/// until killed. In an ordinary test run it returns at once.
#[tokio::test]
async fn crash_writer_child() {
    let Some(dir) = std::env::var_os(CRASH_DIR) else { return };
    let store = open(Path::new(&dir));
    let mut trace = match store.get_trace("t1").await.unwrap() {
        Some(trace) => trace,
        None => new_trace(&store, "t1").await,
    };
    let mut goals = store.get_goals("t1").await.unwrap();
    goals.ensure_root("loop").unwrap();
    for i in 0.. {
        let mut calls = Message::new(Role::Assistant, "x".repeat(i % 5000));
        calls.tool_calls = vec![call(&format!("c{i}"))];
        let calls = store.add_message(&mut trace, calls, None).await.unwrap();
        store
            .append_event(&mut trace, EventKind::MessageAdded { message: calls.clone() })
            .await
            .unwrap();
        let result = store
            .add_message(&mut trace, Message::tool_result(&calls.tool_calls[0], "ok"), None)
            .await
            .unwrap();
        store.append_event(&mut trace, EventKind::MessageAdded { message: result }).await.unwrap();
        goals.record("g1", &GoalStats { messages: 2, ..GoalStats::default() }).unwrap();
        store.save_goals("t1", &goals).await.unwrap();
    }
}

#[tokio::test]
async fn kill_9_at_any_instant_leaves_a_loadable_trace() {
    let dir = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    for round in 0..6u64 {
        let mut child = std::process::Command::new(&exe)
            .args(["--exact", "tests::crash_writer_child", "--nocapture", "--test-threads=1"])
            .env(CRASH_DIR, dir.path())
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(150 + 37 * round)).await;
        child.kill().unwrap();
        child.wait().unwrap();

        let store = open(dir.path());
        let Some(mut trace) = store.get_trace("t1").await.unwrap() else { continue };
        let messages = store.get_messages("t1").await.unwrap();
        assert_eq!(
            messages.last().map(|m| m.sequence),
            Some(trace.last_sequence).filter(|&s| s > 0)
        );
        assert_eq!(messages.len() as u64, trace.totals.messages);
        let head = trace.head_sequence.unwrap();
        assert_eq!(
            store.get_main_path_messages("t1", head).await.unwrap().len() as u64,
            head,
            "one chain"
        );
        let events = store.events_after("t1", 0).await.unwrap();
        assert!(events.iter().map(|e| e.id).eq(1..=trace.last_event_id));
        store.get_goals("t1").await.unwrap();

        // The next run heals what the kill interrupted and goes on.
        let tree = MessageTree::from_messages(&messages);
        for (_, orphan) in tree.orphaned_tool_calls(head) {
            store
                .add_message(&mut trace, Message::tool_result(&orphan, "interrupted"), None)
                .await
                .unwrap();
        }
        let next = store.append_event(&mut trace, EventKind::TraceStarted).await.unwrap();
        assert_eq!(next.id as usize, events.len() + 1);
        let tree = MessageTree::from_messages(&store.get_messages("t1").await.unwrap());
        assert!(tree.orphaned_tool_calls(trace.head_sequence.unwrap()).is_empty());
    }
    let store = open(dir.path());
    assert!(
        store.get_trace("t1").await.unwrap().unwrap().last_sequence > 0,
        "the child never wrote"
    );
}

async fn write_groups_store_their_event_with_them(store: &dyn TraceStore) {
    let mut trace = new_trace(store, "t1").await;
    let (said, event) = store
        .add_message_with_event(&mut trace, Message::new(Role::User, "q"), None)
        .await
        .unwrap();
    assert_eq!((said.sequence, event.id), (1, 1));
    assert_eq!(event.kind, EventKind::MessageAdded { message: said.clone() });
    assert_eq!((trace.last_sequence, trace.head_sequence, trace.last_event_id), (1, Some(1), 1));

    let mut goals = GoalTree::new();
    goals.ensure_root("fix the bug").unwrap();
    trace.status = TraceStatus::Completed;
    trace.result_summary = Some("fixed".into());
    let finished = EventKind::TraceFinished { status: TraceStatus::Completed, error: None };
    let event = store.commit_with_event(&mut trace, &goals, finished.clone()).await.unwrap();
    assert_eq!((event.id, &event.kind), (2, &finished));
    assert_eq!(trace.last_event_id, 2);
    assert_eq!(store.get_trace("t1").await.unwrap().unwrap(), trace);
    assert_eq!(store.get_goals("t1").await.unwrap(), goals);
    let events = store.events_after("t1", 0).await.unwrap();
    assert_eq!(events.iter().map(|e| e.id).collect::<Vec<_>>(), [1, 2]);
    assert_eq!(events[0].kind, EventKind::MessageAdded { message: said });

    // A group that fails writes nothing.
    assert!(matches!(
        store.add_message_with_event(&mut trace, Message::new(Role::User, "x"), Some(9)).await,
        Err(TraceError::NoSuchMessage { sequence: 9, .. })
    ));
    let mut ghost = Trace::new(TraceMode::Agent, "t", "default");
    assert!(matches!(
        store.commit_with_event(&mut ghost, &goals, EventKind::TraceStarted).await,
        Err(TraceError::NotFound(_))
    ));
    assert_eq!((trace.last_sequence, trace.last_event_id), (1, 2));
    assert_eq!(store.events_after("t1", 0).await.unwrap().len(), 2);
    assert_eq!(store.get_messages("t1").await.unwrap().len(), 1);
}

#[cfg(all(feature = "postgres", unix))]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writers_keep_their_traces_apart_in_postgres() {
    concurrent_writers_keep_their_traces_apart(Arc::new(pg_store().await)).await;
}

/// Many runs at once, each writing its trace as the agent loop does
/// (messages with their events, metadata, a closing event): every write
/// is stored, in its trace's order, and the writes share commits.
#[cfg(all(feature = "postgres", unix))]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_writers_on_many_traces_share_commits_and_keep_their_order() {
    const TRACES: usize = 200;
    const MESSAGES: u64 = 8;
    let store = Arc::new(pg_store().await);
    let writers = (0..TRACES).map(|w| {
        let store = Arc::clone(&store);
        tokio::spawn(async move {
            let mut trace = new_trace(&*store, &format!("w{w}")).await;
            for i in 0..MESSAGES {
                let text = format!("{w}/{i}");
                store
                    .add_message_with_event(&mut trace, Message::new(Role::User, text), None)
                    .await
                    .unwrap();
                trace.status = TraceStatus::Running;
                store.update_trace(&trace).await.unwrap();
            }
            let goals = GoalTree::new();
            store.commit_with_event(&mut trace, &goals, EventKind::TraceStarted).await.unwrap();
            trace
        })
    });
    for (w, writer) in writers.collect::<Vec<_>>().into_iter().enumerate() {
        let trace = writer.await.unwrap();
        assert_eq!(store.get_trace(&trace.id).await.unwrap().unwrap(), trace);
        let path = store.get_main_path_messages(&trace.id, MESSAGES).await.unwrap();
        let expected: Vec<String> = (0..MESSAGES).map(|i| format!("{w}/{i}")).collect();
        assert_eq!(texts(&path), expected);
        let events = store.events_after(&trace.id, 0).await.unwrap();
        assert_eq!(
            events.iter().map(|e| e.id).collect::<Vec<_>>(),
            (1..=MESSAGES + 1).collect::<Vec<_>>()
        );
    }
    let writes = (TRACES as u64) * (2 + 2 * MESSAGES);
    let commits = store.write_commits();
    assert!(commits < writes / 2, "{commits} commits for {writes} writes");
}

/// Holds the rows of `count` fresh traces `held{i}` of `store` in an open
/// transaction on `url`, and sends an update of each: once they all wait
/// for the lock, every batch slot is taken, and what is written next
/// queues up for one batch.
#[cfg(all(feature = "postgres", unix))]
async fn fill_the_slots(
    store: &Arc<PgTraceStore>,
    url: &str,
) -> (sqlx::PgConnection, Vec<tokio::task::JoinHandle<()>>) {
    use sqlx::Connection as _;
    let slots = crate::group::IN_FLIGHT;
    let mut held = Vec::new();
    for i in 0..slots {
        held.push(new_trace(&**store, &format!("held{i}")).await);
    }
    let mut lock = sqlx::PgConnection::connect(url).await.unwrap();
    sqlx::raw_sql("BEGIN; SELECT 1 FROM traces WHERE id LIKE 'held%' FOR UPDATE")
        .execute(&mut lock)
        .await
        .unwrap();
    // One after another, so that each is a batch of its own.
    let mut watch = sqlx::PgConnection::connect(url).await.unwrap();
    let mut updates = Vec::new();
    for trace in held {
        let store = Arc::clone(store);
        updates.push(tokio::spawn(async move { store.update_trace(&trace).await.unwrap() }));
        loop {
            let waiting: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_stat_activity \
                 WHERE datname = current_database() AND wait_event_type = 'Lock'",
            )
            .fetch_one(&mut watch)
            .await
            .unwrap();
            if waiting == updates.len() as i64 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    }
    (lock, updates)
}

/// A write refused in the middle of a batch (a host whose copy of the
/// trace is behind, racing for an event id) fails only its caller, with
/// the error it has alone; the rest of the batch is stored.
#[cfg(all(feature = "postgres", unix))]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_refused_in_a_batch_fails_only_its_caller() {
    let url = crate::database::test_cluster::cluster().fresh_database().await;
    let store =
        Arc::new(PgTraceStore::new(crate::database::Database::connect(&url).await.unwrap()));
    let mut good = Vec::new();
    for i in 0..6 {
        good.push(new_trace(&*store, &format!("g{i}")).await);
    }
    let mut taken = new_trace(&*store, "taken").await;
    let mut behind = taken.clone();
    store.append_event(&mut taken, EventKind::TraceStarted).await.unwrap();

    let (mut lock, updates) = fill_the_slots(&store, &url).await;
    let before = store.write_commits();
    let mut writes: Vec<_> = good
        .iter_mut()
        .map(|t| store.add_message(t, Message::new(Role::User, "one"), None))
        .collect();
    let mut late = store.append_event(&mut behind, EventKind::TraceStarted);
    // One poll queues a write: the late one goes in the middle.
    for write in &mut writes[..3] {
        assert!(futures::poll!(write).is_pending());
    }
    assert!(futures::poll!(&mut late).is_pending());
    for write in &mut writes[3..] {
        assert!(futures::poll!(write).is_pending());
    }
    sqlx::raw_sql("COMMIT").execute(&mut lock).await.unwrap();

    for write in writes {
        write.await.unwrap();
    }
    let err = late.await.unwrap_err();
    let TraceError::Database(crate::database::DatabaseError::Query(e)) = &err else {
        panic!("{err}");
    };
    assert!(e.as_database_error().is_some_and(|e| e.is_unique_violation()), "{err}");
    for update in updates {
        update.await.unwrap();
    }
    for trace in &good {
        assert_eq!(texts(&store.get_messages(&trace.id).await.unwrap()), ["one"]);
    }
    assert_eq!(store.get_trace("taken").await.unwrap().unwrap(), taken);
    assert_eq!(store.events_after("taken", 0).await.unwrap().len(), 1);
    // The batch of seven, rolled back, then each of them alone.
    assert_eq!(store.write_commits() - before, 1 + 7);
}

/// A caller dropped while its write waits in a batch leaves the batch and
/// the other callers alone, and the store goes on.
#[cfg(all(feature = "postgres", unix))]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_dropped_while_its_batch_runs_disturbs_no_one() {
    let url = crate::database::test_cluster::cluster().fresh_database().await;
    let store =
        Arc::new(PgTraceStore::new(crate::database::Database::connect(&url).await.unwrap()));
    let mut traces = Vec::new();
    for i in 0..5 {
        traces.push(new_trace(&*store, &format!("t{i}")).await);
    }
    let (mut lock, updates) = fill_the_slots(&store, &url).await;
    let before = store.write_commits();
    let mut writes: Vec<_> = traces
        .iter_mut()
        .map(|t| store.add_message_with_event(t, Message::new(Role::User, "one"), None))
        .collect();
    for write in &mut writes {
        assert!(futures::poll!(write).is_pending());
    }
    drop(writes.remove(2));
    sqlx::raw_sql("COMMIT").execute(&mut lock).await.unwrap();
    for write in writes {
        write.await.unwrap();
    }
    for update in updates {
        update.await.unwrap();
    }
    // One batch, committed once; the dropped caller's write was in it.
    assert_eq!(store.write_commits() - before, 1);
    for trace in &traces {
        let trace = store.get_trace(&trace.id).await.unwrap().unwrap();
        assert_eq!(texts(&store.get_messages(&trace.id).await.unwrap()), ["one"]);
        assert_eq!(store.events_after(&trace.id, 0).await.unwrap().len(), 1);
    }
    let mut t2 = store.get_trace("t2").await.unwrap().unwrap();
    store.add_message(&mut t2, Message::new(Role::User, "two"), None).await.unwrap();
    store.sync().await.unwrap();
}

/// A trace with rewinds, a regenerate and a branch off a branch, built
/// through `store`; returns every message.
#[cfg(all(feature = "postgres", unix))]
async fn branched_trace(store: &dyn TraceStore) -> Vec<Message> {
    let mut trace = new_trace(store, "t1").await;
    let add = async |trace: &mut Trace, text: &str, parent: Option<u64>| {
        store.add_message(trace, Message::new(Role::User, text), parent).await.unwrap().sequence
    };
    for i in 0..6 {
        add(&mut trace, &format!("main {i}"), None).await;
    }
    // A rewind to 3, continued.
    let b = add(&mut trace, "b0", Some(3)).await;
    add(&mut trace, "b1", None).await;
    let b2 = add(&mut trace, "b2", None).await;
    // A branch off that branch, and another off its first message.
    add(&mut trace, "c0", Some(b)).await;
    add(&mut trace, "c1", None).await;
    add(&mut trace, "d0", Some(b2)).await;
    // A regenerate: back to 5, then a new answer there.
    store.set_head(&mut trace, 5).await.unwrap();
    add(&mut trace, "r0", None).await;
    add(&mut trace, "r1", None).await;
    // Back onto the old main path's end, continued; a second root.
    store.set_head(&mut trace, 6).await.unwrap();
    add(&mut trace, "main 6", None).await;
    add(&mut trace, "again", Some(1)).await;
    add(&mut trace, "again 2", Some(1)).await;
    store.get_messages("t1").await.unwrap()
}

#[cfg(all(feature = "postgres", unix))]
#[tokio::test]
async fn the_postgres_main_path_is_the_tree_s_from_every_head() {
    let store = pg_store().await;
    let messages = branched_trace(&store).await;
    let tree = MessageTree::from_messages(&messages);
    for head in messages.iter().map(|m| m.sequence) {
        let path = store.get_main_path_messages("t1", head).await.unwrap();
        assert_eq!(sequences(&path), tree.main_path(head), "head {head}");
        let by_seq = |s: u64| messages.iter().find(|m| m.sequence == s).unwrap();
        assert!(path.iter().all(|m| m == by_seq(m.sequence)));
    }
    assert!(matches!(
        store.get_main_path_messages("t1", 999).await,
        Err(TraceError::NoSuchMessage { sequence: 999, .. })
    ));
}

#[cfg(all(feature = "postgres", unix))]
#[tokio::test]
async fn a_trace_exported_from_one_store_imports_into_postgres_unchanged() {
    let memory = MemoryTraceStore::new();
    let messages = branched_trace(&memory).await;
    let mut trace = memory.get_trace("t1").await.unwrap().unwrap();
    memory.append_event(&mut trace, EventKind::TraceStarted).await.unwrap();
    let mut goals = GoalTree::new();
    goals.ensure_root("fix the bug").unwrap();
    memory.save_goals("t1", &goals).await.unwrap();
    let snapshot = memory.export_trace("t1").await.unwrap().unwrap();

    let pg = pg_store().await;
    pg.import_trace(&snapshot).await.unwrap();
    assert_eq!(pg.export_trace("t1").await.unwrap().unwrap(), snapshot);
    assert!(matches!(pg.import_trace(&snapshot).await, Err(TraceError::AlreadyExists(_))));
    // Imported chains serve the main path as written ones do.
    let tree = MessageTree::from_messages(&messages);
    for head in messages.iter().map(|m| m.sequence) {
        let path = pg.get_main_path_messages("t1", head).await.unwrap();
        assert_eq!(sequences(&path), tree.main_path(head), "head {head}");
    }
    // And the trace goes on where it was.
    let mut trace = pg.get_trace("t1").await.unwrap().unwrap();
    let next = pg.add_message(&mut trace, Message::new(Role::User, "on"), None).await.unwrap();
    assert_eq!(next.sequence, snapshot.trace.last_sequence + 1);
    assert_eq!(pg.append_event(&mut trace, EventKind::TraceStarted).await.unwrap().id, 2);
    assert_eq!(pg.export_trace("nope").await.unwrap(), None);

    // A snapshot no store could have written is refused, and nothing of it kept.
    let mut bad = snapshot.clone();
    bad.trace.id = "t2".into();
    for m in &mut bad.messages {
        m.trace_id = "t2".into();
    }
    bad.messages[3].parent_sequence = Some(bad.messages[3].sequence);
    assert!(matches!(pg.import_trace(&bad).await, Err(TraceError::Corrupt { .. })));
    bad.messages.swap(1, 2);
    assert!(matches!(pg.import_trace(&bad).await, Err(TraceError::Corrupt { .. })));
    assert_eq!(pg.get_trace("t2").await.unwrap(), None);
}

/// Two hosts on one database: what one writes, the other reads at once,
/// and each event is announced on `reson_events` when it is readable.
#[cfg(all(feature = "postgres", unix))]
#[tokio::test]
async fn a_second_host_reads_what_the_first_wrote_and_hears_its_events() {
    let url = crate::database::test_cluster::cluster().fresh_database().await;
    let first = PgTraceStore::new(crate::database::Database::connect(&url).await.unwrap());
    let second = PgTraceStore::new(crate::database::Database::connect(&url).await.unwrap());
    let mut listener = sqlx::postgres::PgListener::connect(&url).await.unwrap();
    listener.listen("reson_events").await.unwrap();

    let mut trace = new_trace(&first, "t1").await;
    let (said, _) = first
        .add_message_with_event(&mut trace, Message::new(Role::User, "hello"), None)
        .await
        .unwrap();
    first.append_event(&mut trace, EventKind::TraceStarted).await.unwrap();
    for id in 1..=2 {
        let note = listener.recv().await.unwrap();
        assert_eq!(note.payload(), format!("t1 {id}"));
        assert_eq!(second.events_after("t1", id - 1).await.unwrap()[0].id, id);
    }
    assert_eq!(second.get_trace("t1").await.unwrap().unwrap(), trace);
    assert_eq!(second.get_main_path_messages("t1", 1).await.unwrap(), [said]);

    // The second host takes the trace over from what it reads.
    let mut taken = second.get_trace("t1").await.unwrap().unwrap();
    second.add_message(&mut taken, Message::new(Role::Assistant, "hi"), None).await.unwrap();
    assert_eq!(second.append_event(&mut taken, EventKind::TraceStarted).await.unwrap().id, 3);
    assert_eq!(listener.recv().await.unwrap().payload(), "t1 3");
    assert_eq!(first.get_trace("t1").await.unwrap().unwrap(), taken);

    // The first host, its copy now behind, is refused rather than writing
    // a second message 2 or event 3; nothing of its write group is kept.
    let late = first.add_message_with_event(&mut trace, Message::new(Role::User, "late"), None);
    assert!(matches!(late.await, Err(TraceError::Database(_))));
    let late = first.append_event(&mut trace, EventKind::TraceStarted).await;
    assert!(matches!(late, Err(TraceError::Database(_))));
    assert_eq!(second.get_trace("t1").await.unwrap().unwrap(), taken);
    assert_eq!(texts(&second.get_messages("t1").await.unwrap()), ["hello", "hi"]);
    assert_eq!(second.events_after("t1", 0).await.unwrap().len(), 3);
}

/// A message with two inline images (the 1x1 PNG and a 2x1 one), text
/// around them, and an `https:` image, which stays a URL.
fn with_images() -> (Message, Vec<u8>) {
    use base64::Engine as _;
    let wide = {
        let mut png = crate::image::tests::PNG.to_vec();
        // IHDR width 2 (its CRC is not checked by the header reader).
        png[19] = 2;
        png
    };
    let url = |data: &[u8]| ContentPart::ImageUrl {
        url: format!(
            "data:image/png;base64,{}",
            base64::engine::general_purpose::STANDARD.encode(data)
        ),
    };
    let mut message = Message::tool_result(&call("c1"), "two shots:");
    message.content.push(url(crate::image::tests::PNG));
    message.content.push(ContentPart::Text { text: "and".into() });
    message.content.push(url(&wide));
    message.content.push(ContentPart::ImageUrl { url: "https://example.com/a.png".into() });
    (message, wide)
}

async fn inline_images_are_kept_beside_their_message(store: &dyn TraceStore) {
    let png = crate::image::tests::PNG;
    let mut trace = new_trace(store, "t1").await;
    store.add_message(&mut trace, Message::new(Role::User, "look"), None).await.unwrap();
    let (message, wide) = with_images();
    let (stored, event) = store.add_message_with_event(&mut trace, message, None).await.unwrap();
    let image = |name: &str, width| {
        ContentPart::Image(ImageRef {
            media_type: "image/png".into(),
            name: name.into(),
            bytes: png.len() as u64,
            width,
            height: 1,
        })
    };
    let expected = vec![
        ContentPart::Text { text: "two shots:".into() },
        image("000002-1.png", 1),
        ContentPart::Text { text: "and".into() },
        image("000002-2.png", 2),
        ContentPart::ImageUrl { url: "https://example.com/a.png".into() },
    ];
    assert_eq!(stored.content, expected, "the caller gets the message as stored");
    assert_eq!(store.get_message("t1", 2).await.unwrap().unwrap().content, expected);
    let EventKind::MessageAdded { message } = event.kind else { panic!("{event:?}") };
    assert_eq!(message.content, expected, "the event carries names, not bytes");
    assert_eq!(store.get_image("t1", "000002-1.png").await.unwrap().as_deref(), Some(png));
    assert_eq!(store.get_image("t1", "000002-2.png").await.unwrap(), Some(wide));
    assert_eq!(store.get_image("t1", "000002-3.png").await.unwrap(), None);
    assert_eq!(store.get_image("t1", "000002.json").await.unwrap(), None);
    assert!(matches!(store.get_image("nope", "000002-1.png").await, Err(TraceError::NotFound(_))));
    // A message of an older trace, image inline in its JSON, reads as it was.
    let mut old = Message::new(Role::User, "");
    old.content.push(ContentPart::ImageUrl { url: "data:image/png;base64,bm90IGEgcG5n".into() });
    let kept = store.add_message(&mut trace, old.clone(), None).await.unwrap();
    assert_eq!(kept.content, old.content, "not a valid image: kept as it came");
}

async fn images_move_with_their_trace(store: &dyn TraceStore) {
    let mut trace = new_trace(store, "t1").await;
    store.add_message(&mut trace, Message::new(Role::User, "look"), None).await.unwrap();
    store.add_message(&mut trace, with_images().0, None).await.unwrap();
    let snapshot = store.export_trace("t1").await.unwrap().unwrap();
    let names: Vec<&str> = snapshot.images.iter().map(|i| i.name.as_str()).collect();
    assert_eq!(names, ["000002-1.png", "000002-2.png"]);

    let dir = tempfile::tempdir().unwrap();
    let targets: Vec<Box<dyn TraceStore>> =
        vec![Box::new(MemoryTraceStore::new()), Box::new(open(dir.path()))];
    for target in &targets {
        let done = copy_traces(store, &**target).await.unwrap();
        assert_eq!(done.copied, ["t1"]);
        assert_eq!(target.export_trace("t1").await.unwrap().unwrap(), snapshot);
        let bytes = target.get_image("t1", "000002-1.png").await.unwrap();
        assert_eq!(bytes.as_deref(), Some(crate::image::tests::PNG));
    }
    assert!(dir.path().join("t1/messages/000002-2.png").is_file());

    // And into the store under test, from a snapshot of another store.
    let mut copy = targets[0].export_trace("t1").await.unwrap().unwrap();
    copy.trace.id = "t3".into();
    for m in &mut copy.messages {
        m.trace_id = "t3".into();
    }
    store.import_trace(&copy).await.unwrap();
    assert_eq!(store.export_trace("t3").await.unwrap().unwrap(), copy);
    let bytes = store.get_image("t3", "000002-2.png").await.unwrap();
    assert_eq!(bytes, Some(with_images().1));

    // A snapshot that names an image it lacks is refused whole.
    let mut bad = snapshot.clone();
    bad.trace.id = "t2".into();
    for m in &mut bad.messages {
        m.trace_id = "t2".into();
    }
    bad.images.pop();
    let err = store.import_trace(&bad).await.unwrap_err();
    assert!(err.to_string().contains("image 000002-2.png is missing"), "{err}");
    assert_eq!(store.get_trace("t2").await.unwrap(), None);
}

/// On disk an image is a file beside its message, written before it: an
/// image whose message never made it is ignored.
#[tokio::test]
async fn images_are_files_beside_their_message() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let mut trace = new_trace(&store, "t1").await;
    store.add_message(&mut trace, Message::new(Role::User, "look"), None).await.unwrap();
    let (message, wide) = with_images();
    store.add_message(&mut trace, message, None).await.unwrap();
    let messages = dir.path().join("t1/messages");
    assert_eq!(fs::read(messages.join("000002-1.png")).unwrap(), crate::image::tests::PNG);
    assert_eq!(fs::read(messages.join("000002-2.png")).unwrap(), wide);
    let log = fs::read_to_string(dir.path().join("t1/messages.jsonl")).unwrap();
    let json = log.lines().nth(1).unwrap();
    assert!(json.contains("\"name\":\"000002-1.png\""), "{json}");
    assert!(!json.contains("base64"), "no bytes in the JSON: {json}");

    // A crash after an image, before its message: the image is a leftover.
    fs::write(messages.join("000003.png"), crate::image::tests::PNG).unwrap();
    let reopened = open(dir.path());
    let trace = reopened.get_trace("t1").await.unwrap().unwrap();
    assert_eq!(trace.last_sequence, 2);
    assert_eq!(reopened.get_messages("t1").await.unwrap().len(), 2);
    // ... overwritten by the message that takes the sequence.
    let mut trace = trace;
    let mut one = Message::tool_result(&call("c2"), "");
    one.content = with_images().0.content[..2].to_vec();
    let stored = reopened.add_message(&mut trace, one, None).await.unwrap();
    assert!(matches!(&stored.content[1], ContentPart::Image(i) if i.name == "000003.png"));
}

async fn objects_and_records_are_kept_and_move_with_their_trace(store: &dyn TraceStore) {
    let trace = new_trace(store, "t1").await;
    let hello = ObjectData::new(b"hello\n".to_vec());
    let binary = ObjectData::new((0..=255u8).collect());
    store.put_object(&trace.id, &hello).await.unwrap();
    store.put_object(&trace.id, &binary).await.unwrap();
    // Kept once: a second write of the same digest changes nothing.
    store.put_object(&trace.id, &hello).await.unwrap();
    let mut digests = vec![hello.digest.clone(), binary.digest.clone()];
    digests.sort();
    assert_eq!(store.list_objects("t1").await.unwrap(), digests);
    assert_eq!(store.get_object("t1", &binary.digest).await.unwrap(), Some(binary.data.clone()));
    assert_eq!(store.get_object("t1", &digest_of(b"other")).await.unwrap(), None);
    assert_eq!(store.get_object("t1", "../meta.json").await.unwrap(), None);
    assert!(matches!(store.get_object("nope", &hello.digest).await, Err(TraceError::NotFound(_))));
    assert!(matches!(store.put_object("nope", &hello).await, Err(TraceError::NotFound(_))));

    let body = serde_json::json!({"files": {"src/main.rs": hello.digest}});
    store.put_record("t1", "checkpoint", "000002", &body).await.unwrap();
    store
        .put_record("t1", "checkpoint", "000001", &serde_json::json!({"first": true}))
        .await
        .unwrap();
    store.put_record("t1", "effects", "call_1", &serde_json::json!([1, 2])).await.unwrap();
    // Filed again: replaced.
    store.put_record("t1", "effects", "call_1", &serde_json::json!([3])).await.unwrap();
    assert_eq!(store.get_record("t1", "checkpoint", "000002").await.unwrap(), Some(body));
    assert_eq!(store.get_record("t1", "checkpoint", "000009").await.unwrap(), None);
    let listed = store.list_records("t1", Some("checkpoint")).await.unwrap();
    let keys: Vec<&str> = listed.iter().map(|r| r.key.as_str()).collect();
    assert_eq!(keys, ["000001", "000002"]);
    let all = store.list_records("t1", None).await.unwrap();
    let names: Vec<(&str, &str)> = all.iter().map(|r| (r.kind.as_str(), r.key.as_str())).collect();
    assert_eq!(names, [("checkpoint", "000001"), ("checkpoint", "000002"), ("effects", "call_1")]);
    assert_eq!(all[2].body, serde_json::json!([3]));
    assert!(store.list_records("t1", Some("none")).await.unwrap().is_empty());
    for bad in ["../x", ".hidden", ""] {
        assert!(store.put_record("t1", bad, "k", &body_of(1)).await.is_err(), "{bad:?}");
        assert!(store.put_record("t1", "k", bad, &body_of(1)).await.is_err(), "{bad:?}");
    }

    let snapshot = store.export_trace("t1").await.unwrap().unwrap();
    assert_eq!(snapshot.objects.len(), 2);
    assert_eq!(snapshot.records.len(), 3);
    let dir = tempfile::tempdir().unwrap();
    let targets: Vec<Box<dyn TraceStore>> =
        vec![Box::new(MemoryTraceStore::new()), Box::new(open(dir.path()))];
    for target in &targets {
        copy_traces(store, &**target).await.unwrap();
        assert_eq!(target.export_trace("t1").await.unwrap().unwrap(), snapshot);
    }
    let on_disk = dir.path().join("t1/objects").join(&hello.digest[..2]).join(&hello.digest[2..]);
    assert_eq!(fs::read(on_disk).unwrap(), hello.data);
    assert!(dir.path().join("t1/records.jsonl").is_file());

    // A snapshot whose object does not hold what its digest says is refused whole.
    let mut bad = snapshot.clone();
    bad.trace.id = "t2".into();
    bad.objects[0].data.push(b'!');
    let err = store.import_trace(&bad).await.unwrap_err();
    assert!(err.to_string().contains("does not hold what its digest says"), "{err}");
    assert_eq!(store.get_trace("t2").await.unwrap(), None);
}

fn body_of(n: u64) -> serde_json::Value {
    serde_json::json!({ "n": n })
}

#[test]
fn digests_and_record_names_are_checked() {
    use store::{check_digest, check_record_name};
    let digest = digest_of(b"hello");
    assert!(check_digest("t", &digest).is_ok());
    assert!(check_digest("t", &digest.to_uppercase()).is_err());
    assert!(check_digest("t", "../../etc/passwd").is_err());
    assert!(check_record_name("t", "checkpoint").is_ok());
    assert!(check_record_name("t", "call_1.json").is_ok());
    for bad in ["", ".hidden", "a/b", "..", &"x".repeat(129)] {
        assert!(check_record_name("t", bad).is_err(), "{bad:?}");
    }
}
