use super::*;
use serde_json::json;
use std::path::Path;
use std::time::Duration;

/// Runs `check` against a fresh store of each kind.
async fn with_each_store(check: impl AsyncFn(Arc<dyn MemoryStore>)) {
    check(Arc::new(InMemoryStore::default())).await;
    let dir = tempfile::tempdir().unwrap();
    check(Arc::new(FileMemoryStore::new(dir.path()).unwrap())).await;
}

fn session(store: &Arc<dyn MemoryStore>, id: &str) -> SessionMemory {
    SessionMemory::new(id, Arc::clone(store)).unwrap()
}

#[tokio::test]
async fn sessions_are_isolated_in_both_stores() {
    with_each_store(async |store| {
        let a = session(&store, "a");
        let b = session(&store, "b");
        a.set("notes", "k", "from a").await.unwrap();
        b.set("notes", "k", "from b").await.unwrap();
        assert_eq!(a.get::<String>("notes", "k").await.unwrap().as_deref(), Some("from a"));
        assert_eq!(b.get::<String>("notes", "k").await.unwrap().as_deref(), Some("from b"));

        a.clear(None).await.unwrap();
        assert_eq!(a.get::<String>("notes", "k").await.unwrap(), None);
        assert_eq!(b.get::<String>("notes", "k").await.unwrap().as_deref(), Some("from b"));
        assert!(!b.remove("other", "k").await.unwrap());
        assert!(a.snapshot().await.unwrap().is_empty());
    })
    .await;
}

#[tokio::test]
async fn namespaces_are_isolated_in_both_stores() {
    with_each_store(async |store| {
        let memory = session(&store, "s");
        memory.set("one", "k", 1).await.unwrap();
        memory.set("two", "k", 2).await.unwrap();
        assert_eq!(memory.get::<i32>("one", "k").await.unwrap(), Some(1));
        assert_eq!(memory.get::<i32>("two", "k").await.unwrap(), Some(2));
        assert!(memory.remove("one", "k").await.unwrap());
        assert_eq!(memory.get::<i32>("one", "k").await.unwrap(), None);
        assert_eq!(memory.get::<i32>("two", "k").await.unwrap(), Some(2));
    })
    .await;
}

#[tokio::test]
async fn set_get_remove_round_trip_typed_values() {
    #[derive(Debug, PartialEq, Serialize, serde::Deserialize)]
    struct Plan {
        steps: Vec<String>,
        done: bool,
    }
    with_each_store(async |store| {
        let memory = session(&store, "s");
        let plan = Plan { steps: vec!["read".into(), "write".into()], done: false };
        memory.set("plan", "current", &plan).await.unwrap();
        assert_eq!(memory.get::<Plan>("plan", "current").await.unwrap(), Some(plan));

        memory.set("plan", "current", json!({"steps": [], "done": true})).await.unwrap();
        assert_eq!(
            memory.get::<Plan>("plan", "current").await.unwrap(),
            Some(Plan { steps: vec![], done: true })
        );
        assert!(matches!(memory.get::<u8>("plan", "current").await, Err(MemoryError::Serde(_))));

        assert!(memory.remove("plan", "current").await.unwrap());
        assert!(!memory.remove("plan", "current").await.unwrap());
        assert_eq!(memory.get::<Plan>("plan", "current").await.unwrap(), None);
        // Removing the last key leaves no empty namespace behind.
        assert!(memory.snapshot().await.unwrap().entries.is_empty());
    })
    .await;
}

#[tokio::test]
async fn clear_one_namespace_then_all() {
    with_each_store(async |store| {
        let memory = session(&store, "s");
        memory.set("a", "x", 1).await.unwrap();
        memory.set("a", "y", 2).await.unwrap();
        memory.set("b", "x", 3).await.unwrap();

        memory.clear(Some("a")).await.unwrap();
        let entries = memory.snapshot().await.unwrap().entries;
        assert_eq!(entries.keys().collect::<Vec<_>>(), ["b"]);
        assert_eq!(memory.get::<i32>("b", "x").await.unwrap(), Some(3));

        memory.clear(Some("missing")).await.unwrap();
        memory.clear(None).await.unwrap();
        assert!(memory.snapshot().await.unwrap().entries.is_empty());
        memory.clear(None).await.unwrap();
    })
    .await;
}

#[tokio::test]
async fn snapshot_renders_exact_block() {
    with_each_store(async |store| {
        let memory = session(&store, "s");
        // Written out of order: the block must come out sorted.
        memory.set("other-namespace", "k", "v").await.unwrap();
        memory.set("namespace", "other_key", json!({"a": 1})).await.unwrap();
        memory.set("namespace", "key", "value").await.unwrap();
        memory.set("namespace", "list", [1, 2]).await.unwrap();
        memory.set("namespace", "nothing", ()).await.unwrap();
        memory.set("namespace", "quoted", json!({"s": "x\ny"})).await.unwrap();
        assert_eq!(
            memory.snapshot().await.unwrap().render(),
            "<session-context>\n\
             [namespace]\n\
             key: value\n\
             list: [1,2]\n\
             nothing: null\n\
             other_key: {\"a\":1}\n\
             quoted: {\"s\":\"x\\ny\"}\n\
             \n\
             [other-namespace]\n\
             k: v\n\
             </session-context>"
        );
    })
    .await;
}

#[tokio::test]
async fn empty_snapshot_renders_nothing() {
    let memory = SessionMemory::in_memory("s").unwrap();
    assert_eq!(memory.snapshot().await.unwrap().render(), "");
    let hollow = MemorySnapshot {
        session_id: "s".into(),
        entries: [("ns".to_owned(), BTreeMap::new())].into(),
    };
    assert!(hollow.is_empty());
    assert_eq!(hollow.render(), "");
}

#[tokio::test]
async fn render_keeps_every_entry_on_one_line() {
    let memory = SessionMemory::in_memory("s").unwrap();
    memory.set("ns", "multi\nline key", "a\nb\r\n[fake]\tc\u{7}\u{2028}").await.unwrap();
    assert_eq!(
        memory.snapshot().await.unwrap().render(),
        "<session-context>\n\
         [ns]\n\
         multi\\nline key: a\\nb\\r\\n[fake]\\tc\\u0007\\u2028\n\
         </session-context>"
    );
}

#[tokio::test]
async fn restore_into_bridges_two_sessions() {
    let dir = tempfile::tempdir().unwrap();
    let file_store: Arc<dyn MemoryStore> = Arc::new(FileMemoryStore::new(dir.path()).unwrap());
    let source = session(&file_store, "source");
    source.set("facts", "city", "Lyon").await.unwrap();
    source.set("facts", "year", 2024).await.unwrap();
    source.set("prefs", "tone", "terse").await.unwrap();

    let target = SessionMemory::in_memory("target").unwrap();
    target.set("facts", "city", "Paris").await.unwrap();
    target.set("own", "kept", true).await.unwrap();

    let snapshot = source.snapshot().await.unwrap();
    assert_eq!(snapshot.session_id, "source");
    snapshot.restore_into(&target).await.unwrap();

    assert_eq!(target.get::<String>("facts", "city").await.unwrap().as_deref(), Some("Lyon"));
    assert_eq!(target.get::<i32>("facts", "year").await.unwrap(), Some(2024));
    assert_eq!(target.get::<String>("prefs", "tone").await.unwrap().as_deref(), Some("terse"));
    assert_eq!(target.get::<bool>("own", "kept").await.unwrap(), Some(true));
    assert_eq!(target.snapshot().await.unwrap().render(), {
        let mut expected = snapshot.clone();
        expected.entries.insert("own".into(), [("kept".to_owned(), json!(true))].into());
        expected.render()
    });

    // Into another session of the same file store, and unchanged at its source.
    let sibling = session(&file_store, "sibling");
    snapshot.restore_into(&sibling).await.unwrap();
    assert_eq!(sibling.snapshot().await.unwrap().entries, snapshot.entries);
    assert_eq!(source.snapshot().await.unwrap(), snapshot);
}

#[tokio::test]
async fn snapshot_round_trips_through_json_and_is_checked_on_restore() {
    let memory = SessionMemory::in_memory("s").unwrap();
    memory.set("ns", "k", json!({"deep": [1, "two"]})).await.unwrap();
    let snapshot = memory.snapshot().await.unwrap();
    let text = serde_json::to_string(&snapshot).unwrap();
    assert_eq!(text, r#"{"session_id":"s","entries":{"ns":{"k":{"deep":[1,"two"]}}}}"#);
    assert_eq!(serde_json::from_str::<MemorySnapshot>(&text).unwrap(), snapshot);

    let forged: MemorySnapshot =
        serde_json::from_str(r#"{"session_id":"x","entries":{"ok":{"k":1},"../escape":{"k":2}}}"#)
            .unwrap();
    let target = SessionMemory::in_memory("t").unwrap();
    assert!(matches!(
        forged.restore_into(&target).await,
        Err(MemoryError::InvalidName { what: "namespace", .. })
    ));
    // Checked before anything was written.
    assert!(target.snapshot().await.unwrap().is_empty());
}

#[tokio::test]
async fn file_store_persists_across_instances() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = FileMemoryStore::new(dir.path()).unwrap();
        let memory = SessionMemory::new("s-1", Arc::new(store)).unwrap();
        memory.set("ns", "k", "kept").await.unwrap();
    }
    assert!(dir.path().join("s-1.json").is_file());

    let open = || SessionMemory::new("s-1", Arc::new(FileMemoryStore::new(dir.path()).unwrap()));
    let reopened = open().unwrap();
    assert_eq!(reopened.get::<String>("ns", "k").await.unwrap().as_deref(), Some("kept"));

    // Two live stores on one directory see each other's writes at once.
    let other = open().unwrap();
    other.set("ns", "k2", 2).await.unwrap();
    assert_eq!(reopened.get::<i32>("ns", "k2").await.unwrap(), Some(2));
    reopened.remove("ns", "k").await.unwrap();
    assert_eq!(other.get::<String>("ns", "k").await.unwrap(), None);

    // An emptied session leaves no file behind.
    other.clear(Some("ns")).await.unwrap();
    assert!(!dir.path().join("s-1.json").exists());
    assert_eq!(json_files(dir.path()), Vec::<String>::new());
}

#[tokio::test]
async fn a_secret_in_session_memory_is_never_written_to_disk() {
    let secret = "mem-key-9Wq/x\"7";
    reson_text::redact::register(secret).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let memory =
        SessionMemory::new("s-2", Arc::new(FileMemoryStore::new(dir.path()).unwrap())).unwrap();
    memory.set("ns", "token", format!("Bearer {secret}")).await.unwrap();
    memory.set("ns", "nested", json!({ "inner": [secret] })).await.unwrap();
    let written = std::fs::read_to_string(dir.path().join("s-2.json")).unwrap();
    assert!(written.contains("Bearer [REDACTED]"), "{written}");
    assert!(!written.contains("9Wq"), "{written}");
    assert_eq!(
        memory.get::<String>("ns", "token").await.unwrap().as_deref(),
        Some("Bearer [REDACTED]")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_stores_on_one_dir_lose_no_concurrent_writes() {
    let dir = tempfile::tempdir().unwrap();
    // Separate stores contend through the file lock; clones of one store
    // (writers 2 and 3 share one) through their in-process queue too.
    let shared = FileMemoryStore::new(dir.path()).unwrap();
    let stores = [
        FileMemoryStore::new(dir.path()).unwrap(),
        FileMemoryStore::new(dir.path()).unwrap(),
        shared.clone(),
        shared,
    ];
    let writers: Vec<_> = stores
        .into_iter()
        .enumerate()
        .map(|(writer, store)| {
            tokio::spawn(async move {
                let memory = SessionMemory::new("shared", Arc::new(store)).unwrap();
                for i in 0..25 {
                    memory.set(&format!("w{writer}"), &format!("k{i:02}"), i).await.unwrap();
                }
            })
        })
        .collect();
    for writer in writers {
        writer.await.unwrap();
    }
    let store = FileMemoryStore::new(dir.path()).unwrap();
    let entries = store.entries("shared").await.unwrap();
    assert_eq!(entries.len(), 4);
    assert!(entries.values().all(|keys| keys.len() == 25));
    assert_eq!(json_files(dir.path()), ["shared.json"]);
}

#[tokio::test]
async fn corrupt_file_is_reported_and_recoverable() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn MemoryStore> = Arc::new(FileMemoryStore::new(dir.path()).unwrap());
    let broken = session(&store, "broken");
    let healthy = session(&store, "healthy");
    healthy.set("ns", "k", 1).await.unwrap();

    let path = dir.path().join("broken.json");
    for (content, reason) in [
        ("{ not json", "key must be a string"),
        (r#"["a list"]"#, "invalid type"),
        (r#"{"bad/ns":{"k":1}}"#, "invalid namespace"),
    ] {
        std::fs::write(&path, content).unwrap();
        for result in [
            broken.get::<i32>("ns", "k").await.map(drop),
            broken.set("ns", "k", 2).await,
            broken.clear(Some("ns")).await,
            broken.snapshot().await.map(drop),
        ] {
            match result {
                Err(MemoryError::Corrupt { path: p, reason: r }) => {
                    assert_eq!(p, path);
                    assert!(r.contains(reason), "{r:?} should mention {reason:?}");
                }
                other => panic!("expected Corrupt for {content:?}, got {other:?}"),
            }
        }
        // The damage was not overwritten by the refused writes.
        assert_eq!(std::fs::read_to_string(&path).unwrap(), content);
    }
    let message = broken.get::<i32>("ns", "k").await.unwrap_err().to_string();
    assert!(message.starts_with("corrupt memory file ") && message.contains("broken.json"));

    // Other sessions are unaffected, and clearing the session recovers it.
    assert_eq!(healthy.get::<i32>("ns", "k").await.unwrap(), Some(1));
    broken.clear(None).await.unwrap();
    broken.set("ns", "k", 3).await.unwrap();
    assert_eq!(broken.get::<i32>("ns", "k").await.unwrap(), Some(3));
}

#[tokio::test]
async fn invalid_names_are_rejected() {
    for bad in ["", "a/b", "a\\b", "../x", "with space", "new\nline", "é", &"x".repeat(129)] {
        assert!(
            matches!(
                SessionMemory::in_memory(bad),
                Err(MemoryError::InvalidName { what: "session id", ref name }) if name == bad
            ),
            "session id {bad:?} accepted"
        );
    }
    for good in ["a", "A-z_0.9", "..", &"x".repeat(128)] {
        SessionMemory::in_memory(good).unwrap();
    }

    with_each_store(async |store| {
        let memory = session(&store, "s");
        for bad in ["", "a/b", "../x", "a b"] {
            let invalid = |r: Result<(), MemoryError>| {
                matches!(r, Err(MemoryError::InvalidName { what: "namespace", .. }))
            };
            assert!(invalid(memory.set(bad, "k", 1).await), "namespace {bad:?} accepted");
            assert!(invalid(memory.get::<i32>(bad, "k").await.map(drop)));
            assert!(invalid(memory.remove(bad, "k").await.map(drop)));
            assert!(invalid(memory.clear(Some(bad)).await));
            // The store checks too, not only the handle.
            assert!(matches!(
                store.entries(bad).await,
                Err(MemoryError::InvalidName { what: "session id", .. })
            ));
            assert!(store.set(bad, "ns", "k", json!(1)).await.is_err());
        }
        assert!(matches!(
            memory.set("ns", "", 1).await,
            Err(MemoryError::InvalidName { what: "key", .. })
        ));
        assert!(memory.snapshot().await.unwrap().is_empty());
    })
    .await;
    // Nothing escapes the store's directory.
    let dir = tempfile::tempdir().unwrap();
    let store = FileMemoryStore::new(dir.path().join("mem")).unwrap();
    assert!(store.set("../x", "ns", "k", json!(1)).await.is_err());
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
}

fn json_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|name| name.ends_with(".json"))
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn a_lock_held_elsewhere_is_awaited_without_blocking_the_runtime() {
    let dir = tempfile::tempdir().unwrap();
    let store = FileMemoryStore::new(dir.path()).unwrap();
    // Another process holding the directory lock, until the check below.
    let holder = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.path().join(".memory.lock"))
        .unwrap();
    holder.lock().unwrap();
    // The bound only lets a writer that blocks the runtime (and so the
    // check) fail the test rather than hang it.
    let (release, released) = std::sync::mpsc::channel::<()>();
    let releaser = std::thread::spawn(move || {
        let _ = released.recv_timeout(Duration::from_secs(30));
        drop(holder);
    });
    let memory = SessionMemory::new("s", Arc::new(store)).unwrap();
    let writer = tokio::spawn(async move { memory.set("ns", "k", 1).await.map(|()| memory) });
    // On this single-threaded runtime a writer blocked in the OS would keep
    // the sleep below from ending until the lock is released, and would by
    // then have written.
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(!writer.is_finished(), "blocked the runtime, or wrote through a held lock");
    release.send(()).unwrap();
    let memory = writer.await.unwrap().unwrap();
    assert_eq!(memory.get::<i32>("ns", "k").await.unwrap(), Some(1));
    releaser.join().unwrap();
}
