//! `GET /api/traces/{id}/watch`: a trace's events over a WebSocket. First
//! every stored event after `since`, then each new one as it is stored,
//! with the live frames (text deltas, approval requests) of runs of this
//! server in between.
//!
//! No gap and no duplicate: the watcher subscribes to the trace's event
//! signal before it reads the store, reads only ids above the last one it
//! sent, and reads again after every signal. A slow client costs only its
//! own socket: the event signal keeps just the latest id, so a watcher
//! behind reads what it missed from the store, and one too far behind on
//! live frames is closed (1008) and may resume with `since`.
//!
//! A socket lasts longer than the token that opened it may: its token is
//! checked again every [`RECHECK`], and once it is revoked (or now names
//! another user or role) the socket is closed with [`REVOKED`] (4401).
//! Runs go on: they are the user's, not the token's.

use crate::access::Visible;
use crate::auth::Credential;
use crate::caller::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::events::{LiveFrame, Subscription};
use crate::extract::Params;
use crate::response::to_json;
use crate::state::AppState;
use axum::Extension;
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{CloseFrame, Message, Utf8Bytes, WebSocket, WebSocketUpgrade, close_code};
use axum::extract::{Path, State};
use axum::response::Response;
use futures::stream::{SplitSink, SplitStream};
use futures::{SinkExt, StreamExt};
use reson_trace::Event;
use serde::Deserialize;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::broadcast;
use tokio::sync::broadcast::error::{RecvError, TryRecvError};
use tokio_tungstenite::tungstenite;
use utoipa::IntoParams;

/// How long one frame may take to reach a client before the socket is
/// dropped: a client that stopped reading must not hold its watcher.
const SEND_TIMEOUT: Duration = Duration::from_secs(30);

/// The most live frames taken at once.
const LIVE_BATCH: usize = 256;

/// How often an open socket's token is checked again. The token file is
/// looked at then (a stat; read only when it changed).
const RECHECK: Duration = Duration::from_secs(1);

/// The close code of a socket whose token was revoked or changed (4000
/// to 4999 are the application's; 4401 echoes HTTP's 401).
const REVOKED: u16 = 4401;

/// `GET /api/traces/{id}/watch` parameters (and `token`, which the auth
/// layer reads).
#[derive(Debug, Deserialize, IntoParams)]
pub(crate) struct WatchQuery {
    /// Send the events after this id [default: 0, every event].
    since: Option<u64>,
}

/// Streams a trace's events (WebSocket).
#[utoipa::path(get, path = "/api/traces/{id}/watch",
    params(("id" = String, Path, description = "Trace id"), WatchQuery,
        ("token" = Option<String>, Query, description = "The token, for clients that cannot set headers (browsers)")),
    responses(
        (status = 101, description = "Text frames, one JSON object each: stored events (with `id`) and live-only frames (`text_delta`, `reasoning_delta`, `approval_needed`, and `plugins_changed` on every socket when a plugin is installed, rebuilt, held back or removed; without `id`). Closed with 4401 within a second of its token being revoked or given another user or role; 1008 when the client fell too far behind (resume with `since`); 1001 when the server shuts down."),
        (status = 404, body = ErrorBody),
    ))]
pub(crate) async fn watch(
    State(state): State<AppState>,
    caller: Caller,
    Extension(credential): Extension<Credential>,
    Path(id): Path<String>,
    Params(query): Params<WatchQuery>,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Result<Response, ApiError> {
    let trace = state.traces.get(&caller, &id).await?;
    let upgrade = upgrade.map_err(|e| {
        ApiError::BadRequest(format!("a WebSocket upgrade is needed: {}", e.body_text()))
    })?;
    let limit = state.config.max_ws_message_bytes;
    let since = query.since.unwrap_or(0);
    let watchers = state.watchers.clone();
    // Subscribed before the 101 goes out: a client that is told it is
    // watching gets every live frame from then on.
    let subscription = state.channels.subscribe(&id);
    let watcher = Watcher { state, trace, caller, credential };
    Ok(upgrade.max_message_size(limit).max_frame_size(limit).on_upgrade(move |socket| {
        watchers.track_future(stream(watcher, since, subscription, socket))
    }))
}

/// Who watches which trace, with the token they came in with.
struct Watcher {
    state: AppState,
    trace: Visible,
    caller: Caller,
    credential: Credential,
}

impl Watcher {
    /// Whether the token that opened the socket still lets its caller in.
    fn still_allowed(&self) -> bool {
        self.credential.still_names(&self.state.users, &self.caller)
    }
}

/// Why the server ends a socket.
enum End {
    /// The client closed it, or it broke: nothing more to send.
    Gone,
    /// Close with this code and reason.
    Close(u16, &'static str),
}

async fn stream(watcher: Watcher, since: u64, subscription: Subscription, socket: WebSocket) {
    let (mut sink, mut incoming) = socket.split();
    let end = pump(&watcher, since, subscription, &mut sink, &mut incoming).await;
    if let End::Close(code, reason) = end {
        let frame = CloseFrame { code, reason: Utf8Bytes::from_static(reason) };
        let _ = tokio::time::timeout(SEND_TIMEOUT, sink.send(Message::Close(Some(frame)))).await;
    }
    let _ = tokio::time::timeout(SEND_TIMEOUT, sink.close()).await;
}

async fn pump(
    watcher: &Watcher,
    mut last: u64,
    mut subscription: Subscription,
    sink: &mut SplitSink<WebSocket, Message>,
    incoming: &mut SplitStream<WebSocket>,
) -> End {
    let (state, id) = (&watcher.state, watcher.trace.id());
    // Live frames received, in order, not sent yet.
    let mut held: VecDeque<LiveFrame> = VecDeque::new();
    let mut read = true;
    let mut recheck = tokio::time::interval_at(tokio::time::Instant::now() + RECHECK, RECHECK);
    recheck.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        if read {
            // Marked seen before the read: an event stored during it
            // signals again, and is read next time round.
            subscription.events.borrow_and_update();
            let events = match watcher.trace.events_after(last).await {
                Ok(events) => events,
                Err(e) => {
                    tracing::warn!("watch {id}: {e}");
                    return End::Close(close_code::ERROR, "cannot read the trace's events");
                }
            };
            // Taken after the read: a frame that came before a stored
            // event was queued before that event was stored.
            if let Err(end) = take_live(&mut subscription.live, &mut held) {
                return end;
            }
            let out = interleave(&events, &mut held, last);
            last = events.last().map_or(last, |e| e.id);
            // A frame that follows an event stored after the read: read again.
            read = !held.is_empty();
            if !out.is_empty() && !send_all(sink, &out).await {
                return End::Gone;
            }
            if read {
                continue;
            }
        }
        tokio::select! {
            changed = subscription.events.changed() => {
                read = true;
                if changed.is_err() {
                    return End::Close(close_code::ERROR, "the trace's channel closed");
                }
            }
            frame = subscription.live.recv() => {
                match frame {
                    Ok(frame) => held.push_back(frame),
                    Err(RecvError::Lagged(_)) => return End::Close(close_code::POLICY, TOO_FAR_BEHIND),
                    Err(RecvError::Closed) => return End::Close(close_code::ERROR, "the trace's channel closed"),
                }
                if let Err(end) = take_live(&mut subscription.live, &mut held) {
                    return end;
                }
                // Frames that follow events already sent go out now; one
                // that follows an event not read yet waits for the read.
                if held.iter().all(|f| f.after <= last) {
                    let out: Vec<Arc<str>> = held.drain(..).map(|f| f.text).collect();
                    if !send_all(sink, &out).await {
                        return End::Gone;
                    }
                } else {
                    read = true;
                }
            }
            message = incoming.next() => match message {
                None | Some(Ok(Message::Close(_))) => return End::Gone,
                Some(Ok(_)) => {}
                Some(Err(e)) => return read_failed(e),
            },
            _ = recheck.tick() => if !watcher.still_allowed() {
                return End::Close(REVOKED, TOKEN_REVOKED);
            },
            () = state.closing.cancelled() => {
                // The runs have ended by now: their last events go out first.
                if let Ok(events) = watcher.trace.events_after(last).await
                    && !send_all(sink, &events.iter().map(frame_of).collect::<Vec<_>>()).await
                {
                    return End::Gone;
                }
                return End::Close(close_code::AWAY, "the server is shutting down");
            }
        }
    }
}

/// The stored `events` (all those after `last`) with the `held` live
/// frames in their places: a frame goes after the event it follows. Frames
/// that follow an event not among them stay held.
fn interleave(events: &[Event], held: &mut VecDeque<LiveFrame>, last: u64) -> Vec<Arc<str>> {
    let newest = events.last().map_or(last, |e| e.id);
    let mut out = Vec::with_capacity(events.len() + held.len());
    for event in events {
        while let Some(frame) = held.pop_front_if(|f| f.after < event.id) {
            out.push(frame.text);
        }
        out.push(frame_of(event));
    }
    while let Some(frame) = held.pop_front_if(|f| f.after <= newest) {
        out.push(frame.text);
    }
    out
}

const TOO_FAR_BEHIND: &str = "too far behind: reconnect with ?since=LAST_ID";

const TOKEN_REVOKED: &str = "the token was revoked or changed: reconnect with a valid one";

/// Moves the live frames queued for this watcher (up to a batch) into
/// `held`; a watcher that missed some is closed.
fn take_live(
    live: &mut broadcast::Receiver<LiveFrame>,
    held: &mut VecDeque<LiveFrame>,
) -> Result<(), End> {
    for _ in 0..LIVE_BATCH {
        match live.try_recv() {
            Ok(frame) => held.push_back(frame),
            Err(TryRecvError::Lagged(_)) => {
                return Err(End::Close(close_code::POLICY, TOO_FAR_BEHIND));
            }
            Err(TryRecvError::Empty | TryRecvError::Closed) => break,
        }
    }
    Ok(())
}

/// A stored event's frame: its `events.jsonl` line.
fn frame_of(event: &Event) -> Arc<str> {
    to_json(event).unwrap_or_default().into()
}

/// Sends text frames with one flush; false when the client is gone or too
/// slow.
async fn send_all(sink: &mut SplitSink<WebSocket, Message>, texts: &[Arc<str>]) -> bool {
    let all = async {
        for text in texts {
            sink.feed(Message::Text((&**text).into())).await?;
        }
        sink.flush().await
    };
    matches!(tokio::time::timeout(SEND_TIMEOUT, all).await, Ok(Ok(())))
}

/// How a failed read ends the socket: a message over the limit is closed
/// with 1009, a broken protocol with 1002; a broken connection is gone.
fn read_failed(error: axum::Error) -> End {
    match error.into_inner().downcast_ref::<tungstenite::Error>() {
        Some(tungstenite::Error::Capacity(_)) => {
            End::Close(close_code::SIZE, "the message is over the limit")
        }
        Some(tungstenite::Error::Protocol(_) | tungstenite::Error::Utf8(_)) => {
            End::Close(close_code::PROTOCOL, "a WebSocket protocol error")
        }
        _ => End::Gone,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use reson_trace::EventKind;

    fn event(id: u64) -> Event {
        Event { id, at_ms: 0, kind: EventKind::TraceStarted }
    }

    fn frame(after: u64, text: &str) -> LiveFrame {
        LiveFrame { after, text: text.into() }
    }

    fn names(out: &[Arc<str>]) -> Vec<String> {
        out.iter()
            .map(|t| match serde_json::from_str::<serde_json::Value>(t) {
                Ok(v) => format!("#{}", v["id"]),
                Err(_) => t.to_string(),
            })
            .collect()
    }

    #[test]
    fn live_frames_go_between_the_events_they_came_between() {
        let mut held: VecDeque<LiveFrame> =
            [frame(2, "a"), frame(2, "b"), frame(3, "c"), frame(5, "d")].into();
        let out = interleave(&[event(3), event(4)], &mut held, 2);
        assert_eq!(names(&out), ["a", "b", "#3", "c", "#4"]);
        assert_eq!(held.len(), 1, "d follows event 5, not read yet");
        let out = interleave(&[event(5)], &mut held, 4);
        assert_eq!(names(&out), ["#5", "d"]);
        assert!(held.is_empty());
    }

    #[test]
    fn with_no_new_event_frames_after_the_last_go_out() {
        let mut held: VecDeque<LiveFrame> = [frame(7, "x"), frame(8, "y")].into();
        let out = interleave(&[], &mut held, 7);
        assert_eq!(names(&out), ["x"]);
        assert_eq!(held.front().map(|f| f.after), Some(8));
    }
}
