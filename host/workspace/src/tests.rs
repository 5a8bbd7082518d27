use super::*;
use reson_trace::{
    MemoryTraceStore, Message, MessageTree, Role, ToolCall, Trace, TraceMode, TraceStore,
};
use std::fs;
#[cfg(unix)]
use std::os::unix::fs::symlink;
#[cfg(windows)]
use std::os::windows::fs::symlink_file as symlink;

/// A trace of: 1 user, 2 assistant calling `a`, 3 its result.
async fn trace(store: &MemoryTraceStore) -> (Trace, MessageTree) {
    let mut trace = Trace::new(TraceMode::Agent, "edit", "default");
    store.create_trace(&trace).await.unwrap();
    let call = ToolCall { id: "a".into(), name: "write".into(), arguments: "{}".into() };
    let mut assistant = Message::new(Role::Assistant, "");
    assistant.tool_calls = vec![call.clone()];
    for message in [Message::new(Role::User, "go"), assistant, Message::tool_result(&call, "ok")] {
        store.add_message(&mut trace, message, None).await.unwrap();
    }
    let tree = MessageTree::from_messages(&store.get_messages(&trace.id).await.unwrap());
    (trace, tree)
}

fn workspace() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    fs::create_dir_all(dir.path().join("src")).unwrap();
    fs::write(dir.path().join("src/main.rs"), "hello\nworld\n").unwrap();
    fs::write(dir.path().join("README"), "readme").unwrap();
    dir
}

fn read(dir: &tempfile::TempDir, path: &str) -> Option<String> {
    fs::read_to_string(dir.path().join(path)).ok()
}

/// Runs the trace's call: a base before, an edit and a new directory
/// during, a checkpoint after.
async fn edited(store: &MemoryTraceStore) -> (Trace, tempfile::TempDir, PathBuf) {
    let (trace, tree) = trace(store).await;
    let dir = workspace();
    let root = dir.path().canonicalize().unwrap();
    let mut ws = Workspace::new(&trace.id, Options::default());
    assert_eq!(ws.before(store, &tree, 2, std::slice::from_ref(&root)).await.unwrap(), ["000000"]);
    fs::write(root.join("src/main.rs"), "bonjour\nworld\n").unwrap();
    fs::create_dir_all(root.join("notes")).unwrap();
    fs::write(root.join("notes/done.txt"), "done").unwrap();
    let key = ws.after(store, 3, vec!["a".into()]).await.unwrap();
    assert_eq!(key.as_deref(), Some("000003"));
    (trace, dir, root)
}

#[tokio::test]
async fn a_call_is_checkpointed_with_only_what_it_changed() {
    let store = MemoryTraceStore::new();
    let (trace, _dir, root) = edited(&store).await;
    let all = checkpoints(&store, &trace.id).await.unwrap();
    assert_eq!(all.len(), 2);
    let (base, call) = (&all[0].1, &all[1].1);
    assert_eq!(base.cause, Cause::Base);
    assert_eq!(base.paths(), 2);
    assert_eq!(call.cause, Cause::Calls { calls: vec!["a".into()] });
    let changed: Vec<&String> = call.roots[&root].keys().collect();
    assert_eq!(changed, ["notes/done.txt", "src/main.rs"]);
    // Old and new bytes are both kept.
    let objects = store.list_objects(&trace.id).await.unwrap();
    for text in ["hello\nworld\n", "bonjour\nworld\n", "done", "readme"] {
        assert!(objects.contains(&reson_trace::digest_of(text.as_bytes())), "{text}");
    }
}

#[tokio::test]
async fn restore_puts_files_back_and_removes_new_ones() {
    let store = MemoryTraceStore::new();
    let (trace, dir, _root) = edited(&store).await;
    let restored = restore(&store, &trace.id, 1, false, &Options::default()).await.unwrap();
    assert_eq!(read(&dir, "src/main.rs").as_deref(), Some("hello\nworld\n"));
    assert!(!dir.path().join("notes").exists(), "the emptied directory goes too");
    assert_eq!((restored.written.len(), restored.removed.len()), (1, 1));
    assert_eq!(restored.checkpoint.as_deref(), Some("000001"));
    // Back to after the call: the latest state is the restored one, so no conflict.
    restore(&store, &trace.id, 3, false, &Options::default()).await.unwrap();
    assert_eq!(read(&dir, "src/main.rs").as_deref(), Some("bonjour\nworld\n"));
    assert_eq!(read(&dir, "notes/done.txt").as_deref(), Some("done"));
    let nothing = restore(&store, &trace.id, 3, false, &Options::default()).await.unwrap();
    assert_eq!(nothing, Restored::default());
}

#[tokio::test]
async fn restore_refuses_to_overwrite_an_outside_change() {
    let store = MemoryTraceStore::new();
    let (trace, dir, root) = edited(&store).await;
    fs::write(root.join("src/main.rs"), "edited by hand\n").unwrap();
    let err = restore(&store, &trace.id, 1, false, &Options::default()).await.unwrap_err();
    match &err {
        WorkspaceError::Conflicts { paths, .. } => assert_eq!(paths, &[root.join("src/main.rs")]),
        other => panic!("{other}"),
    }
    assert!(err.to_string().contains(&root.join("src/main.rs").display().to_string()), "{err}");
    assert_eq!(read(&dir, "src/main.rs").as_deref(), Some("edited by hand\n"));
    assert_eq!(read(&dir, "notes/done.txt").as_deref(), Some("done"), "nothing written");
    restore(&store, &trace.id, 1, true, &Options::default()).await.unwrap();
    assert_eq!(read(&dir, "src/main.rs").as_deref(), Some("hello\nworld\n"));
}

#[tokio::test]
async fn changes_reson_did_not_make_are_recorded_as_outside() {
    let store = MemoryTraceStore::new();
    let (mut trace, _dir, root) = edited(&store).await;
    // A new process: the run opens the workspace again.
    fs::write(root.join("README"), "changed outside").unwrap();
    let call = ToolCall { id: "b".into(), name: "write".into(), arguments: "{}".into() };
    let mut assistant = Message::new(Role::Assistant, "");
    assistant.tool_calls = vec![call];
    store.add_message(&mut trace, assistant, None).await.unwrap();
    let tree = MessageTree::from_messages(&store.get_messages(&trace.id).await.unwrap());
    let mut ws = Workspace::new(&trace.id, Options::default());
    let keys = ws.before(&store, &tree, 4, std::slice::from_ref(&root)).await.unwrap();
    assert_eq!(keys, ["000004"]);
    let all = checkpoints(&store, &trace.id).await.unwrap();
    let outside = &all.last().unwrap().1;
    assert_eq!(outside.cause, Cause::Outside);
    assert_eq!(outside.roots[&root].keys().collect::<Vec<_>>(), ["README"]);
    // Nothing changed in the call: no checkpoint.
    assert_eq!(ws.after(&store, 5, vec!["b".into()]).await.unwrap(), None);
}

#[tokio::test]
async fn diff_shows_text_changes_and_additions() {
    let store = MemoryTraceStore::new();
    let (trace, _dir, _root) = edited(&store).await;
    let files = diff(&store, &trace.id, 1, 3).await.unwrap();
    let summary: Vec<(&str, Change)> = files.iter().map(|f| (f.path.as_str(), f.change)).collect();
    assert_eq!(summary, [("notes/done.txt", Change::Added), ("src/main.rs", Change::Modified)]);
    let patch = files[1].patch.as_deref().unwrap();
    assert!(patch.contains("-hello\n+bonjour\n"), "{patch}");
    assert!(patch.contains("--- a/src/main.rs"), "{patch}");
    assert!(diff(&store, &trace.id, 3, 3).await.unwrap().is_empty());
    assert!(matches!(
        diff(&store, &trace.id, 1, 99).await,
        Err(WorkspaceError::NoSuchMessage { sequence: 99, .. })
    ));
}

#[tokio::test]
async fn each_checkpoint_lists_what_it_changed_against_the_state_before_it() {
    let store = MemoryTraceStore::new();
    let (mut trace, _dir, root) = edited(&store).await;
    fs::write(root.join("README"), "changed outside").unwrap();
    let mut assistant = Message::new(Role::Assistant, "");
    assistant.tool_calls =
        vec![ToolCall { id: "b".into(), name: "write".into(), arguments: "{}".into() }];
    store.add_message(&mut trace, assistant, None).await.unwrap();
    let tree = MessageTree::from_messages(&store.get_messages(&trace.id).await.unwrap());
    let mut ws = Workspace::new(&trace.id, Options::default());
    ws.before(&store, &tree, 4, std::slice::from_ref(&root)).await.unwrap();

    let all = changes(&store, &trace.id).await.unwrap();
    let causes: Vec<(&str, u64, &Cause)> =
        all.iter().map(|c| (c.key.as_str(), c.sequence, &c.cause)).collect();
    let calls = Cause::Calls { calls: vec!["a".into()] };
    assert_eq!(
        causes,
        [("000000", 0, &Cause::Base), ("000003", 3, &calls), ("000004", 4, &Cause::Outside)]
    );
    // The first look lists nothing as changed; it counts what it recorded.
    assert!(all[0].files.is_empty() && all[0].paths == 2, "{:?}", all[0]);
    let edit: Vec<(&str, Change)> =
        all[1].files.iter().map(|f| (f.path.as_str(), f.change)).collect();
    assert_eq!(edit, [("notes/done.txt", Change::Added), ("src/main.rs", Change::Modified)]);
    assert!(all[1].files[1].patch.as_deref().unwrap().contains("-hello\n+bonjour\n"));
    let outside = &all[2].files;
    assert_eq!(outside.len(), 1);
    assert_eq!((outside[0].path.as_str(), outside[0].change), ("README", Change::Modified));
    assert!(outside[0].patch.as_deref().unwrap().contains("-readme"), "{:?}", outside[0]);
    assert!(matches!(changes(&store, "tr_none").await, Err(WorkspaceError::Store(_))));
}

#[tokio::test]
async fn materialize_copies_a_state_elsewhere() {
    let store = MemoryTraceStore::new();
    let (trace, _dir, root) = edited(&store).await;
    let scratch = tempfile::tempdir().unwrap();
    let into = scratch.path().join("copy");
    materialize(&store, &trace.id, 1, &[(root.clone(), into.clone())]).await.unwrap();
    assert_eq!(fs::read_to_string(into.join("src/main.rs")).unwrap(), "hello\nworld\n");
    assert!(!into.join("notes").exists());
    let unknown = materialize(&store, &trace.id, 1, &[(into.clone(), into.clone())]).await;
    assert!(matches!(unknown, Err(WorkspaceError::UnknownRoot(_))));
}

#[tokio::test]
async fn large_files_are_recorded_by_digest_and_not_restored() {
    let store = MemoryTraceStore::new();
    let (trace, tree) = trace(&store).await;
    let dir = workspace();
    let root = dir.path().canonicalize().unwrap();
    fs::write(root.join("big.bin"), vec![1u8; 64]).unwrap();
    let options = Options { max_file_bytes: 32, skip: Vec::new() };
    let mut ws = Workspace::new(&trace.id, options.clone());
    ws.before(&store, &tree, 2, std::slice::from_ref(&root)).await.unwrap();
    fs::write(root.join("big.bin"), vec![2u8; 64]).unwrap();
    ws.after(&store, 3, vec!["a".into()]).await.unwrap();
    let objects = store.list_objects(&trace.id).await.unwrap();
    assert!(!objects.contains(&reson_trace::digest_of(&[1u8; 64])));
    let restored = restore(&store, &trace.id, 1, false, &options).await.unwrap();
    assert_eq!(restored.not_restorable, [root.join("big.bin")]);
    assert_eq!(fs::read(root.join("big.bin")).unwrap(), vec![2u8; 64]);
}

#[tokio::test]
async fn a_read_only_file_is_restored_read_only_and_can_be_replaced() {
    let store = MemoryTraceStore::new();
    let (trace, tree) = trace(&store).await;
    let dir = workspace();
    let root = dir.path().canonicalize().unwrap();
    let path = root.join("README");
    let read_only = |on: bool| {
        let mut permissions = fs::metadata(&path).unwrap().permissions();
        permissions.set_readonly(on);
        fs::set_permissions(&path, permissions).unwrap();
    };
    read_only(true);
    let mut ws = Workspace::new(&trace.id, Options::default());
    ws.before(&store, &tree, 2, std::slice::from_ref(&root)).await.unwrap();
    read_only(false);
    fs::write(&path, "rewritten").unwrap();
    ws.after(&store, 3, vec!["a".into()]).await.unwrap();
    restore(&store, &trace.id, 1, false, &Options::default()).await.unwrap();
    assert_eq!(read(&dir, "README").as_deref(), Some("readme"));
    assert!(fs::metadata(&path).unwrap().permissions().readonly());
    // Over the read-only file, which a rename on Windows does not replace.
    restore(&store, &trace.id, 3, false, &Options::default()).await.unwrap();
    assert_eq!(read(&dir, "README").as_deref(), Some("rewritten"));
    assert!(!fs::metadata(&path).unwrap().permissions().readonly());
}

#[tokio::test]
async fn links_are_recorded_and_restored_as_links() {
    let store = MemoryTraceStore::new();
    let (trace, tree) = trace(&store).await;
    let dir = workspace();
    let root = dir.path().canonicalize().unwrap();
    symlink("/etc/passwd", root.join("link")).unwrap();
    let mut ws = Workspace::new(&trace.id, Options::default());
    ws.before(&store, &tree, 2, std::slice::from_ref(&root)).await.unwrap();
    fs::remove_file(root.join("link")).unwrap();
    symlink("src/main.rs", root.join("link")).unwrap();
    ws.after(&store, 3, vec!["a".into()]).await.unwrap();
    restore(&store, &trace.id, 1, false, &Options::default()).await.unwrap();
    assert_eq!(fs::read_link(root.join("link")).unwrap(), PathBuf::from("/etc/passwd"));
}

#[tokio::test]
async fn without_events_a_stat_walk_finds_the_changes() {
    let store = MemoryTraceStore::new();
    let (trace, tree) = trace(&store).await;
    let dir = workspace();
    let root = dir.path().canonicalize().unwrap();
    let mut ws = Workspace::new(&trace.id, Options::default()).walking();
    ws.before(&store, &tree, 2, std::slice::from_ref(&root)).await.unwrap();
    fs::write(root.join("src/main.rs"), "changed\n").unwrap();
    fs::remove_file(root.join("README")).unwrap();
    fs::create_dir_all(root.join("a/b")).unwrap();
    fs::write(root.join("a/b/c.txt"), "new").unwrap();
    ws.after(&store, 3, vec!["a".into()]).await.unwrap();
    let all = checkpoints(&store, &trace.id).await.unwrap();
    let changed = &all.last().unwrap().1.roots[&root];
    let paths: Vec<(&str, bool)> = changed.iter().map(|(p, e)| (p.as_str(), e.is_some())).collect();
    assert_eq!(paths, [("README", false), ("a/b/c.txt", true), ("src/main.rs", true)]);
}
