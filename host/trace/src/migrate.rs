//! Copying every trace from one store into another, as stored: what
//! `reson traces migrate` does between the file store and PostgreSQL.

use super::store::{TraceError, TraceFilter, TraceSnapshot, TraceStore, check_id};
use std::path::PathBuf;

/// What [`copy_traces`] did, trace by trace.
#[derive(Debug, Default)]
pub struct Migration {
    /// Traces copied.
    pub copied: Vec<String>,
    /// Traces already in the target, identical: left as they were.
    pub identical: Vec<String>,
    /// Traces already in the target that differ from the source's: left
    /// alone, for a person to look at.
    pub differing: Vec<String>,
    /// Traces that could not be read or written, and why.
    pub failed: Vec<(String, TraceError)>,
}

impl Migration {
    /// Whether every trace is now in the target as it is in the source.
    pub fn is_complete(&self) -> bool {
        self.differing.is_empty() && self.failed.is_empty()
    }
}

/// Copies every trace of `from` that `to` lacks, losslessly (ids,
/// sequences, branches, event ids, times, goal trees, sub-trace links):
/// `to.export_trace` of a copy equals `from.export_trace` of the original.
/// A trace `to` already has is compared, not overwritten. Parents are
/// copied before their sub-traces. Fails only when `from` cannot be listed;
/// a trace that fails is reported in [`Migration::failed`] and the others
/// are still copied.
pub async fn copy_traces(
    from: &dyn TraceStore,
    to: &dyn TraceStore,
) -> Result<Migration, TraceError> {
    let mut traces = from.list_traces(&TraceFilter::default()).await?;
    // Oldest first: a sub-trace is created after the trace that started it.
    traces.reverse();
    let mut done = Migration::default();
    for trace in traces {
        let id = trace.id;
        match copy_one(from, to, &id).await {
            Ok(Outcome::Copied) => done.copied.push(id),
            Ok(Outcome::Identical) => done.identical.push(id),
            Ok(Outcome::Differing) => done.differing.push(id),
            Err(e) => done.failed.push((id, e)),
        }
    }
    Ok(done)
}

enum Outcome {
    Copied,
    Identical,
    Differing,
}

async fn copy_one(
    from: &dyn TraceStore,
    to: &dyn TraceStore,
    id: &str,
) -> Result<Outcome, TraceError> {
    let Some(snapshot) = from.export_trace(id).await? else {
        return Err(TraceError::NotFound(id.to_owned()));
    };
    if let Some(there) = to.export_trace(id).await? {
        return Ok(if there == snapshot { Outcome::Identical } else { Outcome::Differing });
    }
    match to.import_trace(&snapshot).await {
        Ok(()) => Ok(Outcome::Copied),
        // Another migration got there first: judge what it wrote.
        Err(TraceError::AlreadyExists(_)) => match to.export_trace(id).await? {
            Some(there) if there == snapshot => Ok(Outcome::Identical),
            _ => Ok(Outcome::Differing),
        },
        Err(e) => Err(e),
    }
}

/// Refuses a snapshot no store could have written: messages of another
/// trace, sequences not increasing, a message whose parent is not older,
/// event ids not increasing, an image missing or misnamed, an object whose
/// bytes do not match its digest, a record misnamed. Stores check it before importing, so a bad
/// snapshot leaves nothing behind.
pub(super) fn check_snapshot(snapshot: &TraceSnapshot) -> Result<(), TraceError> {
    let id = &snapshot.trace.id;
    check_id(id)?;
    let bad = |reason: String| TraceError::Corrupt {
        path: PathBuf::from(id),
        reason: format!("snapshot: {reason}"),
    };
    let mut last = 0;
    for message in &snapshot.messages {
        let seq = message.sequence;
        if message.trace_id != *id {
            return Err(bad(format!("message {seq} belongs to trace {}", message.trace_id)));
        }
        if seq <= last {
            return Err(bad(format!("message {seq} comes after message {last}")));
        }
        if message.parent_sequence.is_some_and(|p| p >= seq) {
            return Err(bad(format!("message {seq} follows a later message")));
        }
        last = seq;
    }
    for image in snapshot.messages.iter().flat_map(super::message::referenced) {
        if !snapshot.images.iter().any(|i| i.name == image.name) {
            return Err(bad(format!("image {} is missing", image.name)));
        }
    }
    for image in &snapshot.images {
        if super::image::image_media_type(&image.name).is_none() {
            return Err(bad(format!("{:?} is not an image name", image.name)));
        }
    }
    for object in &snapshot.objects {
        if super::artifact::digest_of(&object.data) != object.digest {
            return Err(bad(format!(
                "object {:?} does not hold what its digest says",
                object.digest
            )));
        }
    }
    for record in &snapshot.records {
        super::artifact::check_record_name(id, &record.kind)?;
        super::artifact::check_record_name(id, &record.key)?;
    }
    let mut last = 0;
    for event in &snapshot.events {
        if event.id <= last {
            return Err(bad(format!("event {} comes after event {last}", event.id)));
        }
        last = event.id;
    }
    Ok(())
}
