//! Group commit for the file store: a background thread that fsyncs what
//! the store wrote, so that writers do not wait for the disk.

use super::store::TraceError;
use std::collections::HashSet;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;

/// Something written that must reach the disk.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) enum Target {
    /// A file's contents.
    File(PathBuf),
    /// A directory's entries (a file created or renamed in it).
    Dir(PathBuf),
}

/// The fsync thread. Dropping it flushes what is queued and joins it.
pub(super) struct Flusher {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

struct Shared {
    queue: Mutex<Queue>,
    work: Condvar,
    flushed: Condvar,
}

#[derive(Default)]
struct Queue {
    targets: Vec<Target>,
    enqueued: u64,
    flushed: u64,
    failure: Option<TraceError>,
    stop: bool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        // The queue is consistent between statements, so a panic elsewhere
        // while holding the lock leaves nothing half-done.
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Flusher {
    /// Starts the thread.
    pub(super) fn start() -> io::Result<Self> {
        let shared = Arc::new(Shared {
            queue: Mutex::default(),
            work: Condvar::new(),
            flushed: Condvar::new(),
        });
        let worker = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("reson-trace-sync".into())
            .spawn(move || run(&worker))?;
        Ok(Self { shared, thread: Some(thread) })
    }

    /// Queues `targets`, in the order they were written.
    pub(super) fn enqueue(&self, targets: impl IntoIterator<Item = Target>) {
        let mut queue = self.shared.lock();
        queue.targets.extend(targets);
        queue.enqueued += 1;
        self.shared.work.notify_one();
    }

    /// Waits until everything queued before the call is synced; reports the
    /// first failure since the last call.
    pub(super) fn wait(&self) -> Result<(), TraceError> {
        let mut queue = self.shared.lock();
        let target = queue.enqueued;
        while queue.flushed < target {
            queue = self.shared.flushed.wait(queue).unwrap_or_else(PoisonError::into_inner);
        }
        queue.failure.take().map_or(Ok(()), Err)
    }
}

impl Drop for Flusher {
    fn drop(&mut self) {
        self.shared.lock().stop = true;
        self.shared.work.notify_one();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn run(shared: &Shared) {
    let mut queue = shared.lock();
    loop {
        while queue.targets.is_empty() && !queue.stop {
            queue = shared.work.wait(queue).unwrap_or_else(PoisonError::into_inner);
        }
        if queue.targets.is_empty() {
            return;
        }
        let batch = std::mem::take(&mut queue.targets);
        let upto = queue.enqueued;
        drop(queue);
        let result = sync_batch(batch);
        queue = shared.lock();
        queue.flushed = upto;
        if let Err(e) = result {
            tracing::error!("trace store: {e}");
            queue.failure.get_or_insert(e);
        }
        shared.flushed.notify_all();
    }
}

/// Syncs each target once, at its last place in the batch: a file's latest
/// contents may refer to anything written before them (meta.json to the
/// message files), so those are synced first.
fn sync_batch(batch: Vec<Target>) -> Result<(), TraceError> {
    let mut seen = HashSet::new();
    let mut order: Vec<Target> =
        batch.into_iter().rev().filter(|t| seen.insert(t.clone())).collect();
    order.reverse();
    for target in order {
        let (path, result) = match &target {
            Target::File(path) => (path, File::open(path).and_then(|f| f.sync_data())),
            Target::Dir(path) => (path, sync_dir(path)),
        };
        match result {
            // Removed since (a deleted trace): nothing left to keep.
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(source) => return Err(TraceError::Io { path: path.clone(), source }),
            Ok(()) => {}
        }
    }
    Ok(())
}

/// Makes the entries of `dir` (files created or renamed in it) durable.
#[cfg(unix)]
pub(super) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Directories cannot be opened for syncing here; their entries become
/// durable with the file system's own journal.
#[cfg(not(unix))]
pub(super) fn sync_dir(_dir: &Path) -> io::Result<()> {
    Ok(())
}
