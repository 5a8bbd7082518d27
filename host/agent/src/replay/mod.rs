//! Replaying a trace offline: each recorded plugin tool call of its main
//! path runs again (today's plugin, or a new build) against its recorded
//! effects, with the model's answers taken from the trace, and the first
//! call that does not behave as recorded is reported.
//!
//! - `recording`: what a run files for each plugin call ([`CallRecording`]);
//! - `workspace`: the scratch copy of the writable directories a replay
//!   runs on ([`scratch`]).
//!
//! A replay calls no provider and reaches nothing outside the sandbox:
//! the plugin's `http`, `process` and browser calls are answered from the
//! recording (or refused), its clock and randomness are the recorded ones.

mod recording;
mod workspace;

pub use recording::{CallRecording, EFFECTS, RecordedOutput, record_key};
pub use workspace::{Scratch, scratch};

use crate::tools::{ToolContext, ToolResult, ToolSource};
use reson_sandbox::capability::effects::{Divergence, Effects};
use reson_sandbox::plugin::Runtime;
use reson_trace::{Role, TraceError, TraceStore};
use serde::Serialize;
use std::collections::HashSet;
use std::fmt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

/// Lines of context around the first differing line of an output.
const DIFF_CONTEXT: usize = 2;
/// Longest line a diff shows, in characters.
const DIFF_LINE_CHARS: usize = 200;

/// Why a replay could not be made at all.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// The trace store failed.
    #[error("trace store: {0}")]
    Store(#[from] TraceError),
    /// There is no such trace.
    #[error("no trace {0}")]
    NoSuchTrace(String),
    /// A recording is not one this host can read.
    #[error("the recording of call {call_id} cannot be read: {reason}")]
    BadRecording {
        /// The call.
        call_id: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The scratch workspace could not be made.
    #[error("cannot copy the workspace {path} for the replay: {reason}")]
    Workspace {
        /// The directory.
        path: PathBuf,
        /// Why.
        reason: String,
    },
}

/// How a replayed call differs from its recording.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "difference", rename_all = "kebab-case")]
pub enum Difference {
    /// It asked for an effect the recording lacks.
    Effect {
        /// The first such effect.
        divergence: Divergence,
    },
    /// It left recorded requests unasked.
    Unused {
        /// Each one, as `kind what`.
        effects: Vec<String>,
    },
    /// It returned something else.
    Output {
        /// A short diff, recorded (`-`) against replayed (`+`).
        diff: String,
    },
    /// Its message's calls left other files than the run's did (compared
    /// with the workspace checkpoint after them; reported at the last call
    /// of the message).
    Files {
        /// The files that differ, by their path in the run's workspace.
        paths: Vec<String>,
    },
}

/// The first call of a replay that did not behave as recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CallDivergence {
    /// The sequence of the assistant message that made the call.
    pub sequence: u64,
    /// The call's id.
    pub call_id: String,
    /// The tool.
    pub tool: String,
    /// The plugin that served it when recorded.
    pub plugin: String,
    /// That plugin's SHA-256 when recorded.
    pub recorded_sha256: String,
    /// The SHA-256 of the plugin that served it now, if one did.
    pub replayed_sha256: Option<String>,
    /// How it differs.
    #[serde(flatten)]
    pub difference: Difference,
}

/// The outcome of a replay.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReplayReport {
    /// The trace replayed.
    pub trace_id: String,
    /// Recorded plugin calls run again (up to and with a divergent one).
    pub replayed: usize,
    /// Calls with no recording (built-in and MCP tools), not run.
    pub skipped: usize,
    /// The first divergence; `None` when every call behaved as recorded.
    pub divergence: Option<CallDivergence>,
    /// Writable directories the trace has no checkpoint of, which the
    /// replay ran on as they are now rather than as they were.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub copied_as_now: Vec<PathBuf>,
}

impl ReplayReport {
    /// Whether every replayed call behaved as recorded.
    pub fn identical(&self) -> bool {
        self.divergence.is_none()
    }
}

impl fmt::Display for ReplayReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for dir in &self.copied_as_now {
            writeln!(f, "(no checkpoint of {}: replayed on it as it is now)", dir.display())?;
        }
        let Some(d) = &self.divergence else {
            let calls = if self.replayed == 1 { "call" } else { "calls" };
            return write!(f, "identical ({} {calls}, {} skipped)", self.replayed, self.skipped);
        };
        writeln!(
            f,
            "diverged at call {} of `{}` (plugin {}) in message {}:",
            d.call_id, d.tool, d.plugin, d.sequence
        )?;
        match &d.difference {
            Difference::Effect { divergence } => {
                write!(f, "  it asked for {divergence}")?;
            }
            Difference::Unused { effects } => {
                write!(f, "  recorded effects it never asked for: {}", effects.join("; "))?;
            }
            Difference::Output { diff } => write!(f, "  its output differs:\n{diff}")?,
            Difference::Files { paths } => write!(
                f,
                "  the files after its message's calls differ from the run's: {}",
                paths.join(", ")
            )?,
        }
        if d.replayed_sha256.as_ref().is_some_and(|now| *now != d.recorded_sha256) {
            write!(f, "\n  (the plugin changed since the recording)")?;
        }
        Ok(())
    }
}

/// The kind of the trace records that keep replay reports, one per
/// replay, keyed by when it ran.
pub const REPORT_KIND: &str = "replay";

/// A kept replay report: when the replay ran, the report as `reson traces
/// replay` words it, and the report itself.
#[derive(Serialize)]
struct KeptReport<'a> {
    /// Milliseconds since the epoch.
    at_ms: u64,
    /// The report in words.
    summary: String,
    report: &'a ReplayReport,
}

/// Replays trace `trace_id` of `store` from message `from` on: every
/// plugin tool call of its main path that has a recording runs in
/// `runtime` with [`Effects::replay`], in call order, until one diverges.
/// `runtime` should serve `workspace` (made by [`scratch`] from its
/// config): before the first call, it is filled with the directories as
/// they were at that call's message, and the calls write into it.
///
/// The report is kept in the trace (a [`REPORT_KIND`] record), for the
/// viewer and anyone reading the trace later.
pub async fn replay(
    store: &dyn TraceStore,
    trace_id: &str,
    runtime: &Runtime,
    workspace: Option<&Scratch>,
    from: u64,
) -> Result<ReplayReport, ReplayError> {
    // The calls' kept instances are the replay's own, made afresh and
    // ended with it, as a run's are its own.
    static REPLAYS: AtomicU64 = AtomicU64::new(0);
    let session = format!("replay {} of {trace_id}", REPLAYS.fetch_add(1, Ordering::Relaxed));
    let report = run_again(store, trace_id, runtime, workspace, from, &session).await;
    runtime.end_trace(&session).await;
    let report = report?;
    let at_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let kept = KeptReport { at_ms, summary: report.to_string(), report: &report };
    let body = serde_json::to_value(&kept).expect("a report serializes");
    store.put_record(trace_id, REPORT_KIND, &format!("{at_ms:013}"), &body).await?;
    Ok(report)
}

/// [`replay`], without keeping the report.
async fn run_again(
    store: &dyn TraceStore,
    trace_id: &str,
    runtime: &Runtime,
    workspace: Option<&Scratch>,
    from: u64,
    session: &str,
) -> Result<ReplayReport, ReplayError> {
    let trace = store
        .get_trace(trace_id)
        .await?
        .ok_or_else(|| ReplayError::NoSuchTrace(trace_id.into()))?;
    let mut report = ReplayReport {
        trace_id: trace_id.to_owned(),
        replayed: 0,
        skipped: 0,
        divergence: None,
        copied_as_now: Vec::new(),
    };
    let mut filled = workspace.is_none();
    let checkpointed: HashSet<u64> = match workspace {
        Some(_) => reson_workspace::checkpoints(store, trace_id)
            .await
            .map_err(|e| ReplayError::Workspace {
                path: PathBuf::from(trace_id),
                reason: e.to_string(),
            })?
            .into_iter()
            .map(|(_, checkpoint)| checkpoint.sequence)
            .collect(),
        None => HashSet::new(),
    };
    let Some(head) = trace.head_sequence else { return Ok(report) };
    let path = store.get_main_path_messages(trace_id, head).await?;
    for (at, message) in path.iter().enumerate() {
        if message.role != Role::Assistant || message.sequence < from {
            continue;
        }
        let sequence = message.sequence;
        let mut last = None;
        for call in &message.tool_calls {
            let Some(value) = store.get_record(trace_id, EFFECTS, &record_key(&call.id)).await?
            else {
                report.skipped += 1;
                continue;
            };
            let bad =
                |reason: String| ReplayError::BadRecording { call_id: call.id.clone(), reason };
            let recording: CallRecording =
                serde_json::from_value(value).map_err(|e| bad(e.to_string()))?;
            if recording.call_id != call.id {
                // Another call whose id sanitises to the same key.
                report.skipped += 1;
                continue;
            }
            if let (false, Some(workspace)) = (filled, workspace) {
                report.copied_as_now = workspace.fill(store, trace_id, sequence).await?;
                filled = true;
            }
            report.replayed += 1;
            let effects = Effects::replay(recording.effects.clone());
            let mut context = ToolContext {
                call_id: call.id.clone(),
                trace_id: Some(trace_id.to_owned()),
                effects: Some(effects.clone()),
                session: Some(session.to_owned()),
                ..ToolContext::default()
            };
            let result = ToolSource::call(runtime, call, &mut context).await;
            let diverged = |difference| CallDivergence {
                sequence,
                call_id: call.id.clone(),
                tool: call.name.clone(),
                plugin: recording.plugin.clone(),
                recorded_sha256: recording.sha256.clone(),
                replayed_sha256: effects.call().map(|c| c.sha256),
                difference,
            };
            if let Some(difference) = compare(&recording, &result, &effects) {
                report.divergence = Some(diverged(difference));
                return Ok(report);
            }
            last = Some(diverged(Difference::Files { paths: Vec::new() }));
        }
        // The files the message's calls left, against the checkpoint the
        // run took after its results (the last of them on the path), when
        // it took one (a run killed before it did has none to compare).
        let (Some(mut divergence), Some(workspace)) = (last, workspace) else { continue };
        let results = path[at + 1..].iter().take_while(|m| m.role == Role::Tool);
        let after = results.last().map_or(sequence, |m| m.sequence);
        if !checkpointed.contains(&after) {
            continue;
        }
        let paths = workspace.differences(store, trace_id, after, &report.copied_as_now).await?;
        if !paths.is_empty() {
            divergence.difference = Difference::Files { paths };
            report.divergence = Some(divergence);
            return Ok(report);
        }
    }
    Ok(report)
}

/// How the replayed call (`result`, `effects`) differs from `recording`.
fn compare(
    recording: &CallRecording,
    result: &ToolResult,
    effects: &Effects,
) -> Option<Difference> {
    if let Some(divergence) = effects.divergence() {
        return Some(Difference::Effect { divergence });
    }
    let unused = effects.unused();
    if !unused.is_empty() {
        let effects = unused.iter().map(|e| format!("{} {}", e.kind(), e.asked())).collect();
        return Some(Difference::Unused { effects });
    }
    let replayed = RecordedOutput::of(result);
    (replayed != recording.output)
        .then(|| Difference::Output { diff: diff(&recording.output, &replayed) })
}

/// A short diff of two outputs: the fields that differ, and for the text
/// its first differing line with a little context.
fn diff(recorded: &RecordedOutput, replayed: &RecordedOutput) -> String {
    let mut out = Vec::new();
    if recorded.ok != replayed.ok {
        out.push(format!("ok: {} -> {}", recorded.ok, replayed.ok));
    }
    if recorded.text != replayed.text {
        out.push(text_diff(&recorded.text, &replayed.text));
    }
    if recorded.long_term_memory != replayed.long_term_memory {
        out.push(format!(
            "long-term memory: {:?} -> {:?}",
            recorded.long_term_memory, replayed.long_term_memory
        ));
    }
    if recorded.include_output_only_once != replayed.include_output_only_once {
        out.push(format!(
            "include output only once: {} -> {}",
            recorded.include_output_only_once, replayed.include_output_only_once
        ));
    }
    if recorded.images != replayed.images {
        out.push(format!("images: {:?} -> {:?}", recorded.images, replayed.images));
    }
    out.join("\n")
}

fn text_diff(recorded: &str, replayed: &str) -> String {
    let (old, new): (Vec<&str>, Vec<&str>) =
        (recorded.lines().collect(), replayed.lines().collect());
    let first = old.iter().zip(&new).position(|(a, b)| a != b).unwrap_or(old.len().min(new.len()));
    let start = first.saturating_sub(DIFF_CONTEXT);
    let shown = |line: &str| -> String {
        let cut: String = line.chars().take(DIFF_LINE_CHARS).collect();
        if cut.len() < line.len() { format!("{cut}…") } else { cut }
    };
    let mut out = vec![format!("@@ line {} @@", first + 1)];
    out.extend(old[start..first].iter().map(|l| format!("  {}", shown(l))));
    let end = |lines: &[&str]| (first + 1 + DIFF_CONTEXT).min(lines.len());
    out.extend(old[first..end(&old)].iter().map(|l| format!("- {}", shown(l))));
    out.extend(new[first..end(&new)].iter().map(|l| format!("+ {}", shown(l))));
    if old.len() == new.len() && first == old.len() {
        // Same lines, other line endings.
        out.push(format!("- {recorded:?}\n+ {replayed:?}"));
    }
    out.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn output(text: &str) -> RecordedOutput {
        RecordedOutput {
            text: text.into(),
            ok: true,
            long_term_memory: None,
            include_output_only_once: false,
            images: Vec::new(),
        }
    }

    #[test]
    fn a_diff_shows_the_first_differing_line_with_context() {
        let diff = diff(&output("a\nb\nc\nd\ne"), &output("a\nb\nC\nd\ne"));
        assert_eq!(diff, "@@ line 3 @@\n  a\n  b\n- c\n- d\n- e\n+ C\n+ d\n+ e");
        let mut failed = output("x");
        failed.ok = false;
        assert!(super::diff(&output("x"), &failed).starts_with("ok: true -> false"));
        let longer = super::diff(&output("a"), &output("a\nb"));
        assert_eq!(longer, "@@ line 2 @@\n  a\n+ b");
    }

    #[test]
    fn a_report_says_identical_or_where_it_diverged() {
        let mut report = ReplayReport {
            trace_id: "t".into(),
            replayed: 3,
            skipped: 2,
            divergence: None,
            copied_as_now: Vec::new(),
        };
        assert_eq!(report.to_string(), "identical (3 calls, 2 skipped)");
        report.divergence = Some(CallDivergence {
            sequence: 7,
            call_id: "call_9".into(),
            tool: "edit".into(),
            plugin: "fs".into(),
            recorded_sha256: "aa".into(),
            replayed_sha256: Some("bb".into()),
            difference: Difference::Output { diff: "@@ line 1 @@".into() },
        });
        let shown = report.to_string();
        assert!(shown.contains("call call_9 of `edit` (plugin fs) in message 7"), "{shown}");
        assert!(shown.contains("the plugin changed"), "{shown}");
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["divergence"]["difference"], "output");
        assert!(json.get("copied_as_now").is_none(), "{json}");
        report.copied_as_now.push("/work/space".into());
        assert!(report.to_string().starts_with("(no checkpoint of /work/space: replayed on it"));
    }
}
