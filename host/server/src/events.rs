//! What wakes a trace's watchers: the trace store, wrapped so that each
//! appended event signals them, and the live frames (text deltas, approval
//! requests) of the runs this server started.
//!
//! Only traces with a watcher have a channel; the runs look theirs up per
//! event and never wait on a watcher: the event signal is a
//! `tokio::sync::watch` (a slow watcher sees the latest id and reads what
//! it missed from the store), the live frames a bounded broadcast.

use super::registry::Runs;
use super::response::to_json;
use async_trait::async_trait;
use futures::StreamExt as _;
use reson_agent::agent::{AgentEvent, ApprovalRequest, RunHandle};
use reson_trace::{
    Event, EventKind, GoalTree, Message, ObjectData, RecordData, Trace, TraceError, TraceFilter,
    TraceStore,
};
use serde::Serialize;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use tokio::sync::{Notify, broadcast, watch};

/// Live frames a watcher may fall behind by before it is closed.
const LIVE_BACKLOG: usize = 1024;

/// The watchers' channels, by trace, and the live sources of the runs.
#[derive(Default)]
pub(crate) struct Channels {
    traces: Mutex<HashMap<String, Channel>>,
    sources: Mutex<HashMap<String, Arc<LiveSource>>>,
}

struct Channel {
    /// The last event id appended.
    events: watch::Sender<u64>,
    /// Live frames.
    live: broadcast::Sender<LiveFrame>,
}

/// A frame only live watchers get, placed among the stored events: it
/// came after event `after` and before the next.
#[derive(Clone)]
pub(crate) struct LiveFrame {
    pub(crate) after: u64,
    /// The JSON text.
    pub(crate) text: Arc<str>,
}

/// One watcher's receivers; its trace's channel goes when the last
/// watcher's does.
pub(crate) struct Subscription {
    channels: Arc<Channels>,
    trace_id: String,
    /// Changes whenever an event is appended.
    pub(crate) events: watch::Receiver<u64>,
    /// The live frames.
    pub(crate) live: broadcast::Receiver<LiveFrame>,
}

impl Channels {
    /// Subscribes to `trace_id`'s events and live frames.
    pub(crate) fn subscribe(self: &Arc<Self>, trace_id: &str) -> Subscription {
        let mut traces = self.traces.lock().expect("channels");
        let channel = traces.entry(trace_id.to_owned()).or_insert_with(|| Channel {
            events: watch::Sender::new(0),
            live: broadcast::Sender::new(LIVE_BACKLOG),
        });
        Subscription {
            channels: self.clone(),
            trace_id: trace_id.to_owned(),
            events: channel.events.subscribe(),
            live: channel.live.subscribe(),
        }
    }

    /// Wakes `trace_id`'s watchers: event `id` was appended (here, or by
    /// another host).
    pub(crate) fn appended(&self, trace_id: &str, id: u64) {
        if let Some(channel) = self.traces.lock().expect("channels").get(trace_id) {
            channel.events.send_replace(id);
        }
    }

    /// Wakes every watcher to read the store: events may have been stored
    /// while no notification of them could come.
    pub(crate) fn wake_all(&self) {
        for channel in self.traces.lock().expect("channels").values() {
            channel.events.send_modify(|_| {});
        }
    }

    /// Sends a live frame to `trace_id`'s watchers, if it has any.
    pub(crate) fn live(&self, trace_id: &str, frame: LiveFrame) {
        if let Some(channel) = self.traces.lock().expect("channels").get(trace_id) {
            // No receiver left is no error: the channel is going.
            let _ = channel.live.send(frame);
        }
    }

    /// Sends a live frame that belongs to no trace (plugins changed) to
    /// every watcher, ahead of whatever events they have not read yet.
    pub(crate) fn broadcast(&self, text: Arc<str>) {
        for channel in self.traces.lock().expect("channels").values() {
            let _ = channel.live.send(LiveFrame { after: 0, text: text.clone() });
        }
    }

    /// Makes `source` the live source of its trace while its run goes.
    pub(crate) fn add_source(&self, source: Arc<LiveSource>) {
        self.sources.lock().expect("sources").insert(source.trace_id().to_owned(), source);
    }

    /// Forgets `source`, unless a later run of its trace has replaced it
    /// (a trace is free for its next run once its last event is stored).
    pub(crate) fn remove_source(&self, source: &Arc<LiveSource>) {
        let mut sources = self.sources.lock().expect("sources");
        if sources.get(source.trace_id()).is_some_and(|s| Arc::ptr_eq(s, source)) {
            sources.remove(source.trace_id());
        }
    }

    fn source(&self, trace_id: &str) -> Option<Arc<LiveSource>> {
        self.sources.lock().expect("sources").get(trace_id).cloned()
    }

    /// How many traces have watchers.
    #[cfg(test)]
    fn watched(&self) -> usize {
        self.traces.lock().expect("channels").len()
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut traces = self.channels.traces.lock().expect("channels");
        // Subscribing happens under this lock too, so the count is exact:
        // this subscription's receiver is the last when it is 1.
        if traces.get(&self.trace_id).is_some_and(|c| c.events.receiver_count() <= 1) {
            traces.remove(&self.trace_id);
        }
    }
}

/// A store whose event writes (`append_event`, `add_message_with_event`,
/// `commit_with_event`) wake the trace's watchers once the event is written
/// (after freeing the trace for its next run, when the event ends a run);
/// everything else goes straight to the store inside.
pub(crate) struct NotifyingStore {
    inner: Arc<dyn TraceStore>,
    channels: Arc<Channels>,
    runs: Arc<Runs>,
}

impl NotifyingStore {
    pub(crate) fn new(
        inner: Arc<dyn TraceStore>,
        channels: Arc<Channels>,
        runs: Arc<Runs>,
    ) -> Self {
        Self { inner, channels, runs }
    }

    /// Before an event is stored: the run's live frames so far go out, so
    /// no watcher sees them after it. (The run writes the event itself, so
    /// it emits nothing meanwhile.) Returns the run's live source.
    fn before_event(&self, trace_id: &str) -> Option<Arc<LiveSource>> {
        let source = self.channels.source(trace_id);
        if let Some(source) = &source {
            source.drain();
        }
        source
    }

    /// Once `event` is stored: places later live frames after it, frees
    /// the trace when the event ends its run, and wakes the watchers.
    fn after_event(&self, trace_id: &str, source: Option<Arc<LiveSource>>, event: &Event) {
        if let Some(source) = &source {
            source.stored(event.id);
        }
        if matches!(event.kind, EventKind::TraceFinished { .. }) {
            self.runs.finished(trace_id);
        }
        self.channels.appended(trace_id, event.id);
    }
}

#[async_trait]
impl TraceStore for NotifyingStore {
    async fn create_trace(&self, trace: &Trace) -> Result<(), TraceError> {
        self.inner.create_trace(trace).await
    }

    async fn get_trace(&self, id: &str) -> Result<Option<Trace>, TraceError> {
        self.inner.get_trace(id).await
    }

    async fn owner(&self, id: &str) -> Result<Option<Option<String>>, TraceError> {
        self.inner.owner(id).await
    }

    async fn update_trace(&self, trace: &Trace) -> Result<(), TraceError> {
        self.inner.update_trace(trace).await
    }

    async fn list_traces(&self, filter: &TraceFilter) -> Result<Vec<Trace>, TraceError> {
        self.inner.list_traces(filter).await
    }

    async fn add_message(
        &self,
        trace: &mut Trace,
        message: Message,
        parent: Option<u64>,
    ) -> Result<Message, TraceError> {
        self.inner.add_message(trace, message, parent).await
    }

    async fn set_head(&self, trace: &mut Trace, sequence: u64) -> Result<(), TraceError> {
        self.inner.set_head(trace, sequence).await
    }

    async fn get_messages(&self, id: &str) -> Result<Vec<Message>, TraceError> {
        self.inner.get_messages(id).await
    }

    async fn get_message(&self, id: &str, sequence: u64) -> Result<Option<Message>, TraceError> {
        self.inner.get_message(id, sequence).await
    }

    async fn get_main_path_messages(
        &self,
        id: &str,
        head: u64,
    ) -> Result<Vec<Message>, TraceError> {
        self.inner.get_main_path_messages(id, head).await
    }

    async fn get_messages_by_goal(
        &self,
        id: &str,
        goal_id: &str,
    ) -> Result<Vec<Message>, TraceError> {
        self.inner.get_messages_by_goal(id, goal_id).await
    }

    async fn append_event(&self, trace: &mut Trace, kind: EventKind) -> Result<Event, TraceError> {
        let source = self.before_event(&trace.id);
        let event = self.inner.append_event(trace, kind).await?;
        self.after_event(&trace.id, source, &event);
        Ok(event)
    }

    async fn add_message_with_event(
        &self,
        trace: &mut Trace,
        message: Message,
        parent: Option<u64>,
    ) -> Result<(Message, Event), TraceError> {
        let source = self.before_event(&trace.id);
        let (message, event) = self.inner.add_message_with_event(trace, message, parent).await?;
        self.after_event(&trace.id, source, &event);
        Ok((message, event))
    }

    async fn commit_with_event(
        &self,
        trace: &mut Trace,
        goals: &GoalTree,
        kind: EventKind,
    ) -> Result<Event, TraceError> {
        let source = self.before_event(&trace.id);
        let event = self.inner.commit_with_event(trace, goals, kind).await?;
        self.after_event(&trace.id, source, &event);
        Ok(event)
    }

    async fn events_after(&self, id: &str, after_event_id: u64) -> Result<Vec<Event>, TraceError> {
        self.inner.events_after(id, after_event_id).await
    }

    async fn get_image(&self, id: &str, name: &str) -> Result<Option<Vec<u8>>, TraceError> {
        self.inner.get_image(id, name).await
    }

    async fn put_object(&self, id: &str, object: &ObjectData) -> Result<(), TraceError> {
        self.inner.put_object(id, object).await
    }

    async fn get_object(&self, id: &str, digest: &str) -> Result<Option<Vec<u8>>, TraceError> {
        self.inner.get_object(id, digest).await
    }

    async fn list_objects(&self, id: &str) -> Result<Vec<String>, TraceError> {
        self.inner.list_objects(id).await
    }

    async fn put_record(
        &self,
        id: &str,
        kind: &str,
        key: &str,
        body: &serde_json::Value,
    ) -> Result<(), TraceError> {
        self.inner.put_record(id, kind, key, body).await
    }

    async fn get_record(
        &self,
        id: &str,
        kind: &str,
        key: &str,
    ) -> Result<Option<serde_json::Value>, TraceError> {
        self.inner.get_record(id, kind, key).await
    }

    async fn list_records(
        &self,
        id: &str,
        kind: Option<&str>,
    ) -> Result<Vec<RecordData>, TraceError> {
        self.inner.list_records(id, kind).await
    }

    async fn get_goals(&self, id: &str) -> Result<GoalTree, TraceError> {
        self.inner.get_goals(id).await
    }

    async fn save_goals(&self, id: &str, tree: &GoalTree) -> Result<(), TraceError> {
        self.inner.save_goals(id, tree).await
    }

    async fn import_trace(&self, snapshot: &reson_trace::TraceSnapshot) -> Result<(), TraceError> {
        self.inner.import_trace(snapshot).await
    }

    async fn sync(&self) -> Result<(), TraceError> {
        self.inner.sync().await
    }
}

/// A frame only live watchers get; never stored, never replayed.
#[derive(Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum LiveFrameBody<'a> {
    TextDelta { text: &'a str },
    ReasoningDelta { text: &'a str },
    ApprovalNeeded { request: &'a ApprovalRequest },
    QuestionAsked { question: &'a reson_agent::agent::human::Question },
}

/// The most events forwarded in one poll, so a run streaming without pause
/// cannot hold the pump's thread.
const MAX_PER_POLL: usize = 1024;

/// The most deltas merged into one live frame.
const MAX_MERGED: usize = 512;

/// A run's events, turned into live frames for its trace's watchers. The
/// pump forwards them as they come; the store forwards what is queued
/// before it stores an event, so a frame never reaches a watcher after an
/// event that followed it.
pub(crate) struct LiveSource {
    trace_id: String,
    channels: Arc<Channels>,
    handle: Mutex<Option<RunHandle>>,
    /// The trace's last stored event: frames forwarded now follow it.
    last_event: AtomicU64,
    repoll: Notify,
}

impl LiveSource {
    pub(crate) fn new(trace_id: String, channels: Arc<Channels>) -> Self {
        Self {
            trace_id,
            channels,
            handle: Mutex::new(None),
            last_event: AtomicU64::new(0),
            repoll: Notify::new(),
        }
    }

    pub(crate) fn trace_id(&self) -> &str {
        &self.trace_id
    }

    pub(crate) fn attach(&self, handle: RunHandle) {
        *self.handle.lock().expect("live source") = Some(handle);
    }

    pub(crate) fn detach(&self) -> Option<RunHandle> {
        self.handle.lock().expect("live source").take()
    }

    pub(crate) fn stop(&self) {
        if let Some(handle) = self.handle.lock().expect("live source").as_ref() {
            handle.stop();
        }
    }

    /// Event `id` was stored.
    pub(crate) fn stored(&self, id: u64) {
        self.last_event.store(id, Ordering::Release);
    }

    /// Forwards what the run has queued, now.
    pub(crate) fn drain(&self) {
        let mut cx = Context::from_waker(Waker::noop());
        while self.poll_forward(&mut cx) == Poll::Ready(false) {}
        self.repoll.notify_one();
    }

    /// Resolves when the store has drained the run's events: the pump then
    /// polls again, so that the run wakes the pump, not the store's no-op.
    pub(crate) async fn repolled(&self) {
        self.repoll.notified().await;
    }

    /// Forwards the events ready on the run's stream: `Ready(true)` once
    /// the stream has ended, `Ready(false)` when there may be more ready.
    pub(crate) fn poll_forward(&self, cx: &mut Context<'_>) -> Poll<bool> {
        let mut handle = self.handle.lock().expect("live source");
        let Some(events) = handle.as_mut() else { return Poll::Pending };
        // Read under the lock the store takes to drain: frames taken here
        // came after this event.
        let after = self.last_event.load(Ordering::Acquire);
        let mut frames = Frames::new(|frame: &LiveFrameBody| {
            if let Ok(text) = to_json(frame) {
                self.channels.live(&self.trace_id, LiveFrame { after, text: text.into() });
            }
        });
        for _ in 0..MAX_PER_POLL {
            match events.poll_next_unpin(cx) {
                Poll::Ready(Some(event)) => frames.push(event),
                Poll::Ready(None) => {
                    frames.flush();
                    return Poll::Ready(true);
                }
                Poll::Pending => {
                    frames.flush();
                    return Poll::Pending;
                }
            }
        }
        frames.flush();
        Poll::Ready(false)
    }
}

/// Turns events into frames, merging runs of deltas of one kind.
struct Frames<F: Fn(&LiveFrameBody)> {
    send: F,
    /// (reasoning?, text, deltas) merged so far.
    merged: Option<(bool, String, usize)>,
}

impl<F: Fn(&LiveFrameBody)> Frames<F> {
    fn new(send: F) -> Self {
        Self { send, merged: None }
    }

    fn push(&mut self, event: AgentEvent) {
        let delta = match &event {
            AgentEvent::TextDelta { text } => Some((false, text)),
            AgentEvent::ReasoningDelta { text } => Some((true, text)),
            _ => None,
        };
        match (delta, &mut self.merged) {
            (Some((reasoning, text)), Some((kind, so_far, count)))
                if *kind == reasoning && *count < MAX_MERGED =>
            {
                so_far.push_str(text);
                *count += 1;
            }
            (Some((reasoning, text)), _) => {
                self.flush();
                self.merged = Some((reasoning, text.clone(), 1));
            }
            (None, _) => {
                self.flush();
                if let Some(request) = event.approval_request() {
                    (self.send)(&LiveFrameBody::ApprovalNeeded { request });
                }
                if let Some(question) = event.question() {
                    (self.send)(&LiveFrameBody::QuestionAsked { question });
                }
            }
        }
    }

    fn flush(&mut self) {
        match self.merged.take() {
            Some((false, text, _)) => (self.send)(&LiveFrameBody::TextDelta { text: &text }),
            Some((true, text, _)) => (self.send)(&LiveFrameBody::ReasoningDelta { text: &text }),
            None => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use reson_trace::{MemoryTraceStore, TraceMode};
    use std::cell::RefCell;

    #[tokio::test]
    async fn an_appended_event_wakes_the_watchers_of_its_trace_only() {
        let channels = Arc::new(Channels::default());
        let runs = Runs::new();
        let store =
            NotifyingStore::new(Arc::new(MemoryTraceStore::new()), channels.clone(), runs.clone());
        let (mut a, mut b) = (
            Trace::new(TraceMode::Agent, "a", "default"),
            Trace::new(TraceMode::Agent, "b", "default"),
        );
        store.create_trace(&a).await.unwrap();
        store.create_trace(&b).await.unwrap();
        let mut watching_a = channels.subscribe(&a.id);
        let mut watching_b = channels.subscribe(&b.id);
        watching_a.events.borrow_and_update();
        watching_b.events.borrow_and_update();
        store.append_event(&mut a, EventKind::TraceStarted).await.unwrap();
        assert!(watching_a.events.has_changed().unwrap());
        assert_eq!(*watching_a.events.borrow_and_update(), 1);
        assert!(!watching_b.events.has_changed().unwrap());
        store.append_event(&mut b, EventKind::TraceStarted).await.unwrap();
        assert!(watching_b.events.has_changed().unwrap());
        let _claim = runs.claim(&b.id).unwrap();
        let finished =
            EventKind::TraceFinished { status: reson_trace::TraceStatus::Stopped, error: None };
        store.append_event(&mut b, finished).await.unwrap();
        assert!(!runs.is_running(&b.id), "the run's end frees the trace");
    }

    #[tokio::test]
    async fn write_groups_wake_the_watchers_and_free_the_trace_as_events_do() {
        let channels = Arc::new(Channels::default());
        let runs = Runs::new();
        let store =
            NotifyingStore::new(Arc::new(MemoryTraceStore::new()), channels.clone(), runs.clone());
        let mut trace = Trace::new(TraceMode::Agent, "a", "default");
        store.create_trace(&trace).await.unwrap();
        let mut watching = channels.subscribe(&trace.id);
        watching.events.borrow_and_update();
        let _claim = runs.claim(&trace.id).unwrap();
        let said = Message::new(reson_trace::Role::User, "hi");
        store.add_message_with_event(&mut trace, said, None).await.unwrap();
        assert_eq!(*watching.events.borrow_and_update(), 1);
        let finished =
            EventKind::TraceFinished { status: reson_trace::TraceStatus::Completed, error: None };
        store.commit_with_event(&mut trace, &GoalTree::new(), finished).await.unwrap();
        assert_eq!(*watching.events.borrow_and_update(), 2);
        assert!(!runs.is_running(&trace.id), "the run's end frees the trace");
    }

    #[test]
    fn an_ended_run_leaves_the_next_run_s_source_in_place() {
        let channels = Arc::new(Channels::default());
        let old = Arc::new(LiveSource::new("t".into(), channels.clone()));
        let new = Arc::new(LiveSource::new("t".into(), channels.clone()));
        channels.add_source(old.clone());
        channels.add_source(new.clone());
        channels.remove_source(&old);
        assert!(channels.source("t").is_some_and(|s| Arc::ptr_eq(&s, &new)));
        channels.remove_source(&new);
        assert!(channels.source("t").is_none());
    }

    #[tokio::test]
    async fn a_channel_lives_as_long_as_its_watchers() {
        let channels = Arc::new(Channels::default());
        let first = channels.subscribe("t");
        let mut second = channels.subscribe("t");
        let frame = |text: &str| LiveFrame { after: 0, text: text.into() };
        channels.live("t", frame("one"));
        drop(first);
        assert_eq!(channels.watched(), 1, "a watcher is left");
        assert_eq!(&*second.live.recv().await.unwrap().text, "one");
        drop(second);
        assert_eq!(channels.watched(), 0);
        channels.live("t", frame("nobody"));
        channels.appended("t", 3);
        assert_eq!(channels.watched(), 0, "frames without watchers make no channel");
    }

    #[test]
    fn deltas_queued_together_become_one_frame_of_each_kind() {
        let sent = RefCell::new(Vec::new());
        let mut frames =
            Frames::new(|f: &LiveFrameBody| sent.borrow_mut().push(to_json(f).unwrap()));
        let text = |t: &str| AgentEvent::TextDelta { text: t.into() };
        frames.push(text("Hel"));
        frames.push(text("lo"));
        frames.push(AgentEvent::ReasoningDelta { text: "hm".into() });
        frames.push(AgentEvent::ModelRequest { iteration: 2 });
        frames.push(text("!"));
        frames.flush();
        for _ in 0..MAX_MERGED + 1 {
            frames.push(text("w"));
        }
        frames.flush();
        let sent = sent.into_inner();
        assert_eq!(
            sent[..3],
            [
                r#"{"kind":"text_delta","text":"Hello"}"#,
                r#"{"kind":"reasoning_delta","text":"hm"}"#,
                r#"{"kind":"text_delta","text":"!"}"#,
            ]
        );
        assert_eq!(sent.len(), 5, "a merged frame holds at most {MAX_MERGED} deltas");
    }
}
