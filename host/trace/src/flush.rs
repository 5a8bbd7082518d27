//! The file store's fsyncs, on a thread of their own (and a few more for a
//! large batch): group commit for
//! [`Durability::Batched`](super::Durability::Batched), and the awaited
//! syncs of [`Durability::Immediate`](super::Durability::Immediate). An
//! fsync can take milliseconds on a busy disk; done on a tokio worker it
//! would stall every task queued there, and a `spawn_blocking` per fsync
//! would grow the blocking pool with the number of concurrent runs.
//!
//! Awaited syncs are group-committed too: every caller that asked while the
//! thread was busy is served by the next batch, one pass over the union of
//! their targets, and each is answered once its own targets are on stable
//! storage. A thousand traces writing at once then wait for a few batches,
//! not for a thousand fsyncs in a row.
//!
//! A large batch on Linux is made durable with one `syncfs` of the store's
//! file system instead of an fsync per file: on ext4 each fsync costs
//! ~0.1 ms of CPU (3,000 of them 0.3 s on this project's machines, against
//! 15 ms of wall time for one `syncfs` covering the same files).

use super::store::TraceError;
use std::collections::HashSet;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use tokio::sync::{oneshot, watch};

/// Something written that must reach the disk.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) enum Target {
    /// A file's contents.
    File(PathBuf),
    /// A directory's entries (a file created or renamed in it).
    Dir(PathBuf),
}

/// The fsync thread. Dropping it lets the thread sync what is queued and
/// end, without waiting for it: a drop may happen on a tokio worker, and
/// what is queued is already with the OS (only a power loss could lose it,
/// which [`Flusher::wait`] is for).
pub(super) struct Flusher {
    shared: Arc<Shared>,
}

struct Shared {
    queue: Mutex<Queue>,
    work: Condvar,
    /// How many [`Flusher::enqueue`] calls are synced; awaited by
    /// [`Flusher::wait`].
    flushed: watch::Sender<u64>,
    /// Batches of awaited syncs done, for the test that they are shared.
    #[cfg(test)]
    batches: std::sync::atomic::AtomicU64,
}

/// Targets one caller awaits, with where to send the outcome.
struct Urgent {
    targets: Vec<Target>,
    done: oneshot::Sender<Result<(), TraceError>>,
}

#[derive(Default)]
struct Queue {
    targets: Vec<Target>,
    urgent: Vec<Urgent>,
    enqueued: u64,
    failure: Option<TraceError>,
    stop: bool,
}

impl Queue {
    fn is_idle(&self) -> bool {
        self.targets.is_empty() && self.urgent.is_empty()
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        // The queue is consistent between statements, so a panic elsewhere
        // while holding the lock leaves nothing half-done.
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Flusher {
    /// Starts the thread, for a store whose files are under `root`.
    pub(super) fn start(root: &Path) -> io::Result<Self> {
        let whole = WholeFs::open(root)?;
        let shared = Arc::new(Shared {
            queue: Mutex::default(),
            work: Condvar::new(),
            flushed: watch::Sender::new(0),
            #[cfg(test)]
            batches: std::sync::atomic::AtomicU64::new(0),
        });
        let worker = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("reson-trace-sync".into())
            .spawn(move || run(&worker, whole.as_ref()))?;
        Ok(Self { shared })
    }

    /// Queues `targets`, in the order they were written, to be synced in
    /// the background.
    pub(super) fn enqueue(&self, targets: Vec<Target>) {
        // An empty call would count as enqueued but never wake the thread,
        // and `wait` would then wait for the next write.
        if targets.is_empty() {
            return;
        }
        let mut queue = self.shared.lock();
        queue.targets.extend(targets);
        queue.enqueued += 1;
        self.shared.work.notify_one();
    }

    /// Waits until everything queued before the call is synced; reports the
    /// first failure since the last call.
    pub(super) async fn wait(&self) -> Result<(), TraceError> {
        let target = self.shared.lock().enqueued;
        let mut flushed = self.shared.flushed.subscribe();
        // The sender lives in `shared`, which `self` keeps alive, so the
        // wait ends only once the count is reached.
        let _ = flushed.wait_for(|&n| n >= target).await;
        self.shared.lock().failure.take().map_or(Ok(()), Err)
    }

    /// Syncs `targets` in order, ahead of the background queue, and returns
    /// once they are on stable storage.
    pub(super) async fn sync_now(&self, targets: Vec<Target>) -> Result<(), TraceError> {
        let first = match targets.first() {
            Some(Target::File(path) | Target::Dir(path)) => path.clone(),
            None => return Ok(()),
        };
        let (done, outcome) = oneshot::channel();
        self.shared.lock().urgent.push(Urgent { targets, done });
        self.shared.work.notify_one();
        outcome.await.unwrap_or_else(|_| {
            Err(TraceError::Io { path: first, source: io::Error::other("the sync thread ended") })
        })
    }
}

impl Drop for Flusher {
    fn drop(&mut self) {
        self.shared.lock().stop = true;
        self.shared.work.notify_one();
    }
}

fn run(shared: &Shared, whole: Option<&WholeFs>) {
    let mut queue = shared.lock();
    loop {
        while queue.is_idle() && !queue.stop {
            queue = shared.work.wait(queue).unwrap_or_else(PoisonError::into_inner);
        }
        if queue.is_idle() {
            return;
        }
        let batch = std::mem::take(&mut queue.targets);
        let urgent = std::mem::take(&mut queue.urgent);
        let upto = queue.enqueued;
        drop(queue);
        #[cfg(test)]
        if !urgent.is_empty() {
            shared.batches.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        sync_urgent(urgent, whole);
        let result = sync_batch(batch, whole);
        queue = shared.lock();
        if let Err(e) = result {
            tracing::error!("trace store: {e}");
            queue.failure.get_or_insert(e);
        }
        // Published after the failure is recorded, so that a waiter woken
        // by it finds the failure.
        shared.flushed.send_if_modified(|n| std::mem::replace(n, upto) != upto);
    }
}

/// Syncs what every waiting caller asked for in one batch, and answers
/// each with the outcome of its own targets.
fn sync_urgent(jobs: Vec<Urgent>, whole: Option<&WholeFs>) {
    if jobs.is_empty() {
        return;
    }
    let all = jobs.iter().flat_map(|job| job.targets.iter().cloned()).collect();
    let failed = sync_all(all, whole);
    for job in jobs {
        let outcome = job
            .targets
            .iter()
            .find_map(|t| failed.iter().find(|(f, _)| f == t))
            .map_or(Ok(()), |(target, e)| Err(failure(target, e)));
        // The caller may have given up waiting; the sync stands anyway.
        let _ = job.done.send(outcome);
    }
}

/// Syncs a batch; its first failure, if any.
fn sync_batch(batch: Vec<Target>, whole: Option<&WholeFs>) -> Result<(), TraceError> {
    sync_all(batch, whole).first().map_or(Ok(()), |(target, e)| Err(failure(target, e)))
}

/// Syncs each target once, at its last place in the batch: a file's latest
/// contents may refer to anything written before them (meta.json to the
/// messages), so those are synced first. A large batch (many runs
/// writing at once) is synced by several threads instead: every fsync
/// waits for the disk, and the disk serves many at once about as fast as
/// one. Its files go first, then the directories naming them; among files,
/// order is the disk's then, which the reader tolerates as it does a power
/// loss between two syncs (a message the log lost counts as never
/// written, the head falls back to the newest that survived). From
/// [`SYNCFS_FROM`] targets on, the store's file system is synced whole
/// instead, where it can be. Returns the targets that failed, each with
/// its error; the others are on stable storage.
fn sync_all(batch: Vec<Target>, whole: Option<&WholeFs>) -> Vec<(Target, io::Error)> {
    let mut seen = HashSet::new();
    let mut order: Vec<Target> =
        batch.into_iter().rev().filter(|t| seen.insert(t.clone())).collect();
    order.reverse();
    if let Some(whole) = whole
        && order.len() >= SYNCFS_FROM
    {
        return whole.sync(order);
    }
    if order.len() < PARALLEL_FROM {
        return order.into_iter().filter_map(synced).collect();
    }
    let (files, dirs): (Vec<Target>, Vec<Target>) =
        order.into_iter().partition(|t| matches!(t, Target::File(_)));
    let mut failed = sync_parallel(files);
    failed.extend(sync_parallel(dirs));
    failed
}

/// From this many targets on, a batch is synced with one `syncfs` where
/// the store's file system allows it. Below, per-file fsyncs cost less
/// than writing back whatever else is dirty on that file system.
const SYNCFS_FROM: usize = 32;
/// From this many targets on, a batch is synced by [`SYNC_THREADS`] threads.
const PARALLEL_FROM: usize = 16;
/// Threads syncing one large batch.
const SYNC_THREADS: usize = 8;

fn sync_parallel(targets: Vec<Target>) -> Vec<(Target, io::Error)> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let take = || targets.get(next.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..SYNC_THREADS.min(targets.len()))
            .map(|_| {
                scope.spawn(|| {
                    let mut failed = Vec::new();
                    while let Some(target) = take() {
                        failed.extend(synced(target.clone()));
                    }
                    failed
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    })
}

/// The file system the store's files are on, synced whole (`syncfs`).
#[cfg(target_os = "linux")]
struct WholeFs {
    /// The store's root, held open: `syncfs` reports the write-back errors
    /// of the file system since the descriptor's last call, so one
    /// descriptor for the store's life sees every error of its writes.
    root: File,
    device: u64,
}

/// Other OSes have no `syncfs` (one that reports the write-back errors of
/// what it synced): there is never a whole file system to sync, and every
/// target is synced by itself.
#[cfg(not(target_os = "linux"))]
enum WholeFs {}

impl WholeFs {
    #[cfg(target_os = "linux")]
    fn open(root: &Path) -> io::Result<Option<Self>> {
        use std::os::unix::fs::MetadataExt;
        let root = File::open(root)?;
        let device = root.metadata()?.dev();
        Ok(Some(Self { root, device }))
    }

    #[cfg(not(target_os = "linux"))]
    fn open(_root: &Path) -> io::Result<Option<Self>> {
        Ok(None)
    }

    /// Makes `targets` durable: those on the store's file system with one
    /// `syncfs` (a file system mounted inside the store's tree is not
    /// covered by it, so its targets are synced one by one).
    #[cfg(target_os = "linux")]
    fn sync(&self, targets: Vec<Target>) -> Vec<(Target, io::Error)> {
        use std::os::unix::fs::MetadataExt;
        let mut covered = Vec::new();
        let mut elsewhere = Vec::new();
        let mut failed = Vec::new();
        for target in targets {
            let (Target::File(path) | Target::Dir(path)) = &target;
            match std::fs::metadata(path) {
                Ok(meta) if meta.dev() == self.device => covered.push((target, meta.len())),
                Ok(_) => elsewhere.push(target),
                // Removed since (a deleted trace): nothing left to keep.
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => failed.push((target, e)),
            }
        }
        #[cfg(test)]
        synced::whole_fs_synced();
        match rustix::fs::syncfs(&self.root) {
            Ok(()) =>
            {
                #[cfg(test)]
                for (target, len) in &covered {
                    if let Target::File(path) = target {
                        synced::record(path, *len);
                    }
                }
            }
            Err(e) => {
                let e = io::Error::from(e);
                failed.extend(
                    covered.into_iter().map(|(t, _)| (t, io::Error::new(e.kind(), e.to_string()))),
                );
            }
        }
        failed.extend(elsewhere.into_iter().filter_map(synced));
        failed
    }

    #[cfg(not(target_os = "linux"))]
    fn sync(&self, _targets: Vec<Target>) -> Vec<(Target, io::Error)> {
        match *self {}
    }
}

/// Syncs `target`; on failure, the target with its error.
fn synced(target: Target) -> Option<(Target, io::Error)> {
    match sync_target(&target) {
        Ok(()) => None,
        Err(e) => Some((target, e)),
    }
}

/// The error a caller gets for `target`'s failed sync: io errors are not
/// `Clone`, and one failure may be several callers' to report.
fn failure(target: &Target, e: &io::Error) -> TraceError {
    let (Target::File(path) | Target::Dir(path)) = target;
    TraceError::Io { path: path.clone(), source: io::Error::new(e.kind(), e.to_string()) }
}

fn sync_target(target: &Target) -> io::Result<()> {
    let result = match target {
        Target::File(path) => open_to_sync(path).and_then(|f| {
            #[cfg(test)]
            let len = f.metadata()?.len();
            f.sync_data()?;
            #[cfg(test)]
            synced::record(path, len);
            Ok(())
        }),
        Target::Dir(path) => sync_dir(path),
    };
    match result {
        // Removed since (a deleted trace): nothing left to keep.
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

#[cfg(unix)]
fn open_to_sync(path: &Path) -> io::Result<File> {
    File::open(path)
}

/// Windows flushes a file only through a handle that may write to it.
#[cfg(not(unix))]
fn open_to_sync(path: &Path) -> io::Result<File> {
    std::fs::OpenOptions::new().write(true).open(path)
}

/// Makes the entries of `dir` (files created or renamed in it) durable.
#[cfg(unix)]
fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Directories cannot be opened for syncing here; their entries become
/// durable with the file system's own journal.
#[cfg(not(unix))]
fn sync_dir(_dir: &Path) -> io::Result<()> {
    Ok(())
}

/// For tests: how much of each file the syncs are known to have covered.
#[cfg(test)]
pub(super) mod synced {
    use std::collections::HashMap;
    use std::path::{Path, PathBuf};
    #[cfg(target_os = "linux")]
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Mutex, PoisonError};

    static SYNCED: Mutex<Option<HashMap<PathBuf, u64>>> = Mutex::new(None);

    /// `path` was synced when `len` bytes long (or longer).
    pub(in super::super) fn record(path: &Path, len: u64) {
        let mut synced = SYNCED.lock().unwrap_or_else(PoisonError::into_inner);
        let at = synced.get_or_insert_default().entry(path.to_owned()).or_default();
        *at = (*at).max(len);
    }

    /// How many bytes of `path` a sync is known to have covered.
    pub(in super::super) fn len(path: &Path) -> u64 {
        let synced = SYNCED.lock().unwrap_or_else(PoisonError::into_inner);
        synced.as_ref().and_then(|s| s.get(path)).copied().unwrap_or(0)
    }

    #[cfg(target_os = "linux")]
    static WHOLE_FS: AtomicU64 = AtomicU64::new(0);

    /// One more `syncfs` of a store's file system.
    #[cfg(target_os = "linux")]
    pub(in super::super) fn whole_fs_synced() {
        WHOLE_FS.fetch_add(1, Ordering::Relaxed);
    }

    /// `syncfs` calls so far, by every store of the process.
    #[cfg(target_os = "linux")]
    pub(in super::super) fn whole_fs_syncs() -> u64 {
        WHOLE_FS.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
impl Flusher {
    /// Batches of awaited syncs done so far.
    pub(super) fn urgent_batches(&self) -> u64 {
        self.shared.batches.load(std::sync::atomic::Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A path whose sync fails, beside the file `file`: a path under it on
    /// Unix (ENOTDIR). On Windows that is merely missing, which counts as
    /// removed, but a directory cannot be opened to be flushed.
    fn unsyncable(file: &Path) -> PathBuf {
        if cfg!(unix) { file.join("not-a-directory") } else { file.parent().unwrap().to_owned() }
    }

    /// Callers waiting at once share batches, and each hears only of its
    /// own targets' failure.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn awaited_syncs_are_group_committed_and_failures_stay_their_callers() {
        let dir = tempfile::tempdir().unwrap();
        let flusher = std::sync::Arc::new(Flusher::start(dir.path()).unwrap());
        let mut callers = tokio::task::JoinSet::new();
        for i in 0..200 {
            let file = dir.path().join(format!("{i}.json"));
            std::fs::write(&file, "{}").unwrap();
            let target = if i == 77 {
                Target::File(unsyncable(&dir.path().join("0.json")))
            } else {
                Target::File(file)
            };
            let flusher = std::sync::Arc::clone(&flusher);
            let parent = Target::Dir(dir.path().to_owned());
            callers.spawn(async move { (i, flusher.sync_now(vec![target, parent]).await) });
        }
        let mut failed = Vec::new();
        while let Some(joined) = callers.join_next().await {
            let (i, outcome) = joined.unwrap();
            if outcome.is_err() {
                failed.push(i);
            }
        }
        assert_eq!(failed, [77]);
        let batches = flusher.shared.batches.load(std::sync::atomic::Ordering::Relaxed);
        assert!(batches < 200, "200 waiting callers took {batches} batches");
    }

    #[test]
    fn a_large_batch_is_synced_whole_and_any_failure_is_the_batchs() {
        let dir = tempfile::tempdir().unwrap();
        let file = |i: usize| dir.path().join(format!("{i}.json"));
        let mut batch = Vec::new();
        for i in 0..64 {
            std::fs::write(file(i), "{}").unwrap();
            batch.push(Target::File(file(i)));
        }
        batch.push(Target::Dir(dir.path().to_owned()));
        // Removed since it was written: nothing left to keep.
        batch.push(Target::File(dir.path().join("gone.json")));
        sync_batch(batch, None).unwrap();

        let bad = unsyncable(&file(0));
        let mut batch: Vec<Target> = (1..40).map(|i| Target::File(file(i))).collect();
        batch.insert(20, Target::File(bad.clone()));
        match sync_batch(batch, None) {
            Err(TraceError::Io { path, .. }) => assert_eq!(path, bad),
            other => panic!("a failed fsync was not reported: {other:?}"),
        }
    }

    /// A large batch is one `syncfs`: every file of it on the store's file
    /// system counts as synced at the length it had, while a file on
    /// another file system (a tmpfs here, as if mounted inside the store)
    /// is synced by itself, and a bad target fails alone.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_large_batch_is_one_syncfs_and_a_target_elsewhere_is_synced_by_itself() {
        let dir = tempfile::tempdir().unwrap();
        let other = tempfile::tempdir_in("/dev/shm").unwrap();
        let whole = WholeFs::open(dir.path()).unwrap().unwrap();
        let file = |i: usize| dir.path().join(format!("{i}.jsonl"));
        let mut batch = Vec::new();
        for i in 0..SYNCFS_FROM {
            std::fs::write(file(i), "x".repeat(i + 1)).unwrap();
            batch.push(Target::File(file(i)));
        }
        let apart = other.path().join("apart.jsonl");
        std::fs::write(&apart, "apart").unwrap();
        batch.push(Target::File(apart.clone()));
        batch.push(Target::Dir(dir.path().to_owned()));
        batch.push(Target::File(dir.path().join("gone.jsonl")));
        let bad = file(0).join("not-a-directory");
        batch.push(Target::File(bad.clone()));

        let before = synced::whole_fs_syncs();
        let failed = sync_all(batch, Some(&whole));
        assert!(synced::whole_fs_syncs() > before, "no syncfs for a batch of {SYNCFS_FROM}");
        let failed: Vec<_> = failed.into_iter().map(|(t, _)| t).collect();
        assert_eq!(failed, [Target::File(bad)]);
        for i in 0..SYNCFS_FROM {
            assert_eq!(synced::len(&file(i)), i as u64 + 1, "{}", file(i).display());
        }
        assert_eq!(synced::len(&apart), 5, "the file on another file system was not synced");
    }
}
