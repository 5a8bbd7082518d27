//! Session memory: namespaced key-value entries that belong to one session.
//! Two sessions, one in process memory and one in JSON files, keep their
//! entries apart; a `MemorySnapshot` carries one's context into the other.
//!
//! ```sh
//! cargo run -p reson --example session_memory
//! ```
//!
//! No model and no plugin: memory is plain host code. A session appends
//! `snapshot().render()` to its system prompt (see the `agent_session`
//! example).

use anyhow::Result;
use reson::agent::memory::{FileMemoryStore, MemorySnapshot, SessionMemory};
use std::sync::Arc;

#[tokio::main]
async fn main() -> Result<()> {
    let dir = tempfile::tempdir()?;

    // A planner whose memory lives and dies with this process.
    let planner = SessionMemory::in_memory("planner")?;
    planner.set("user", "name", "Ada").await?;
    planner.set("project", "language", "Rust").await?;
    planner.set("project", "deadline", serde_json::json!({ "day": "Friday", "hour": 17 })).await?;

    // A coder whose memory is a file per session, so other processes see it.
    let files = Arc::new(FileMemoryStore::new(dir.path().join("memory"))?);
    let coder = SessionMemory::new("coder", files.clone())?;
    coder.set("scratch", "todo", "write the parser").await?;

    println!("== planner (in memory) ==\n{}\n", planner.snapshot().await?.render());
    println!("== coder (in {}) ==\n{}\n", files.dir().display(), coder.snapshot().await?.render());

    // Isolation: neither sees the other's entries, and a second session on
    // the very same file store starts empty.
    assert_eq!(coder.get::<String>("user", "name").await?, None);
    assert_eq!(planner.get::<String>("scratch", "todo").await?, None);
    let reviewer = SessionMemory::new("reviewer", files.clone())?;
    assert!(reviewer.snapshot().await?.is_empty());
    println!("isolated: the coder has no user/name, the planner no scratch/todo, and a reviewer");
    println!("on the coder's store starts empty\n");

    // The bridge: a snapshot of the planner, restored into the coder. It is
    // a copy, made once; it may also travel as JSON to another process.
    let snapshot = planner.snapshot().await?;
    let json = serde_json::to_string(&snapshot)?;
    let carried: MemorySnapshot = serde_json::from_str(&json)?;
    carried.restore_into(&coder).await?;
    println!(
        "== coder after restoring the planner's snapshot ==\n{}\n",
        coder.snapshot().await?.render()
    );
    assert_eq!(coder.get::<String>("user", "name").await?.as_deref(), Some("Ada"));
    assert_eq!(coder.get::<String>("scratch", "todo").await?.as_deref(), Some("write the parser"));
    assert_eq!(planner.get::<String>("scratch", "todo").await?, None, "the bridge is one way");

    // Later changes stay in their session.
    planner.set("user", "name", "Grace").await?;
    assert_eq!(coder.get::<String>("user", "name").await?.as_deref(), Some("Ada"));
    println!("after the planner renames the user to Grace, the coder still has Ada");

    // The coder's entries are on disk: a store opened afresh on the
    // directory (as another process would) reads them back.
    let reopened = SessionMemory::new("coder", Arc::new(FileMemoryStore::new(files.dir())?))?;
    assert_eq!(reopened.snapshot().await?.entries, coder.snapshot().await?.entries);
    println!("a fresh store on {} reads the coder's entries back", files.dir().display());
    Ok(())
}
