//! Compaction: keeping a long run's history inside the model's window.
//!
//! Before each model call, when the history (with the tools offered)
//! counts more tokens than `threshold × context window`:
//!
//! - **Level 1**, no model call: system and user messages stay, and so do
//!   the messages of goals still pending or in progress; the messages of
//!   each completed or abandoned goal are left out of the request, replaced
//!   by one note with the goal's summary (or reason). The trace is not
//!   touched: this is how the history is sent.
//! - **Level 2**, when that is still over: one model call summarises the
//!   run so far (with the goal tree and its summaries as context). The
//!   summary is stored as a message whose parent is the last message
//!   before the summarised range, so the main path walks past the range
//!   and nothing is deleted; a rewind to any message in it sees the full
//!   history again.
//!
//! An assistant message and the results of its tool calls are kept or
//! left out together, so the history stays valid for every provider: it
//! starts with a user message, and every tool call is answered right after
//! it. Each compaction is an event of the trace, and hooks fire before and
//! after it.

mod tokens;

pub use tokens::{TokenCounter, context_window};

pub use crate::config::CompactionConfig;
use reson_trace::{ContentPart, GoalStatus, GoalTree, Message, Role};

impl CompactionConfig {
    /// The token budget of a request to `model`.
    pub fn budget(&self, model: &str) -> u64 {
        let window = self.context_window.unwrap_or_else(|| context_window(model));
        (window as f64 * self.threshold.clamp(0.05, 1.0)) as u64
    }
}

/// A history with the messages of closed goals left out.
#[derive(Debug, Clone, PartialEq)]
pub struct Level1 {
    /// The history to send.
    pub messages: Vec<Message>,
    /// The closed goals whose messages were left out, in order.
    pub goals: Vec<String>,
    /// The sequences left out.
    pub dropped: Vec<u64>,
}

/// Level 1 over `history` (as sent: system prompt first, then the main
/// path): see the module docs. The newest assistant message and its
/// results always stay.
pub fn level1(history: &[Message], goals: &GoalTree) -> Level1 {
    let closed = |m: &Message| {
        m.goal_id
            .as_deref()
            .and_then(|g| goals.get(g))
            .filter(|g| matches!(g.status, GoalStatus::Completed | GoalStatus::Abandoned))
    };
    let units = units(history);
    // The goal a unit is left out for: none for system and user messages
    // and for the newest unit.
    let dropped_for = |u: usize| {
        let first = &history[units[u].start];
        match first.role {
            Role::System | Role::User => None,
            _ if u + 1 == units.len() => None,
            _ => closed(first),
        }
    };
    let mut answers: Vec<(&str, usize)> = Vec::new();
    for (u, range) in units.iter().enumerate() {
        if let Some(goal) = dropped_for(u) {
            let n = answers_in(&history[range.clone()]);
            match answers.iter_mut().find(|(g, _)| *g == goal.id) {
                Some((_, total)) => *total += n,
                None => answers.push((&goal.id, n)),
            }
        }
    }
    let mut out = Level1 {
        messages: Vec::with_capacity(history.len()),
        goals: Vec::new(),
        dropped: Vec::new(),
    };
    for (u, range) in units.iter().enumerate() {
        let Some(goal) = dropped_for(u) else {
            out.messages.extend(history[range.clone()].iter().cloned());
            continue;
        };
        if !out.goals.contains(&goal.id) {
            out.goals.push(goal.id.clone());
            let outcome = match goal.status {
                GoalStatus::Abandoned => format!(
                    "abandoned: {}",
                    goal.abandon_reason.as_deref().unwrap_or("no reason given")
                ),
                _ => format!("done: {}", goal.summary.as_deref().unwrap_or("no summary given")),
            };
            let n = answers.iter().find(|(g, _)| *g == goal.id).map_or(0, |(_, n)| *n);
            let mut note = Message::new(
                Role::User,
                format!(
                    "{NOTE}{n} answers on goal {} \"{}\" are left out here; {outcome}]",
                    goal.id, goal.description
                ),
            );
            note.synthetic = true;
            note.goal_id = Some(goal.id.clone());
            out.messages.push(note);
        }
        out.dropped.extend(history[range.clone()].iter().map(|m| m.sequence));
    }
    out
}

/// `history` cut into units that stay together: an assistant message with
/// the tool results that follow it, or one message.
fn units(history: &[Message]) -> Vec<std::ops::Range<usize>> {
    let mut units = Vec::new();
    let mut i = 0;
    while i < history.len() {
        let mut end = i + 1;
        if history[i].role == Role::Assistant && !history[i].tool_calls.is_empty() {
            while end < history.len() && history[end].role == Role::Tool {
                end += 1;
            }
        }
        units.push(i..end);
        i = end;
    }
    units
}

/// How a note that stands for left-out messages starts; the number of
/// model answers it stands for follows, so a history keeps counting its
/// turns (the offline `scripted` provider plays turns by that count).
const NOTE: &str = "[compacted: ";

/// The model answers `messages` hold or stand for: assistant messages,
/// plus the count each compaction note names.
pub fn answers_in(messages: &[Message]) -> usize {
    messages
        .iter()
        .map(|m| match m.role {
            Role::Assistant => 1,
            Role::User if m.synthetic => m
                .text()
                .strip_prefix(NOTE)
                .and_then(|rest| rest.split(' ').next())
                .and_then(|n| n.parse().ok())
                .unwrap_or(0),
            _ => 0,
        })
        .sum()
}

/// How many messages at the start of `path` a level-2 summary keeps: the
/// leading user messages (the task).
pub fn kept_prefix(path: &[Message]) -> usize {
    path.iter().position(|m| m.role != Role::User).unwrap_or(path.len())
}

/// Heading of the user's own words inside a summary, so that a later
/// summary carries them on.
const USER_WORDS: &str = "## The user's messages, verbatim";

/// The text the summary call gets: the goal tree, then `range` as a
/// transcript, oldest messages cut first (each message at most 2,000
/// characters) until it counts at most `budget` tokens.
pub fn transcript(
    range: &[Message],
    goals: &GoalTree,
    counter: &TokenCounter,
    budget: u64,
) -> String {
    let head = format!("# Goals\n{}\n# Transcript\n", goals.render());
    let lines: Vec<String> = range.iter().map(line).collect();
    let mut total = counter.count(&head);
    let mut start = lines.len();
    while start > 0 {
        let n = counter.count(&lines[start - 1]) + 1;
        if total + n > budget {
            break;
        }
        total += n;
        start -= 1;
    }
    let cut =
        if start > 0 { format!("[{start} older messages left out]\n") } else { String::new() };
    format!("{head}{cut}{}", lines[start..].join("\n"))
}

fn line(m: &Message) -> String {
    const MAX: usize = 2_000;
    let mut text = m.text();
    if text.len() > MAX {
        let end = (0..=MAX).rev().find(|&i| text.is_char_boundary(i)).unwrap_or(0);
        text.truncate(end);
        text.push_str(" […]");
    }
    // The summary call gets text only: each image becomes a note saying
    // what was there.
    for part in &m.content {
        match part {
            ContentPart::Image(image) => text.push_str(&format!(
                " [image removed by compaction: {}, {} bytes]",
                image.name, image.bytes
            )),
            ContentPart::ImageUrl { .. } => text.push_str(" [image removed by compaction]"),
            ContentPart::Text { .. } => {}
        }
    }
    let calls: Vec<String> =
        m.tool_calls.iter().map(|c| format!(" → {}({})", c.name, c.arguments)).collect();
    let who = match m.role {
        Role::System => "system".to_owned(),
        Role::User => "user".to_owned(),
        Role::Assistant => "assistant".to_owned(),
        Role::Tool => format!("tool {}", m.name.as_deref().unwrap_or("")),
    };
    format!("[{who}] {text}{}", calls.concat())
}

/// The instructions of the summary call.
pub const SUMMARY_PROMPT: &str = "You compact the history of an agent's run so that it can go on \
with less context. Write a handoff summary for the agent itself: what the task is, what has been \
done (files, commands, results, with exact names), what failed and why, and what remains. Keep \
identifiers and numbers exact. Answer with the summary only.";

/// The summary message that replaces `range`: the model's `summary`, the
/// goal tree, and the user's own messages from `range`, verbatim (from an
/// earlier summary's list, too).
pub fn summary_message(summary: &str, goals: &GoalTree, range: &[Message]) -> Message {
    let mut words: Vec<String> = Vec::new();
    for m in range.iter().filter(|m| m.role == Role::User) {
        let text = m.text();
        match text.split_once(&format!("\n{USER_WORDS}\n")) {
            Some((_, earlier)) if m.synthetic => words.push(earlier.trim().to_owned()),
            None if !m.synthetic => words.push(format!("- {}", text.replace('\n', "\n  "))),
            _ => {}
        }
    }
    let mut text = format!(
        "{NOTE}{} earlier answers of this run are summarised here]\n\n{}\n\n## Goals\n{}",
        answers_in(range),
        summary.trim(),
        goals.render()
    );
    if !words.is_empty() {
        text.push_str(&format!("\n{USER_WORDS}\n{}", words.join("\n")));
    }
    let mut message = Message::new(Role::User, text);
    message.synthetic = true;
    message
}

/// Why a history would be refused by some provider, if it would.
pub fn invalid(history: &[Message]) -> Option<String> {
    let first = history.iter().position(|m| m.role != Role::System)?;
    if history[first].role != Role::User {
        return Some(format!(
            "message {first} starts the conversation as {:?}",
            history[first].role
        ));
    }
    if let Some(i) = history[first..].iter().position(|m| m.role == Role::System) {
        return Some(format!("a system message at {} after the conversation started", first + i));
    }
    let mut open: Vec<&str> = Vec::new();
    for (i, m) in history.iter().enumerate() {
        match m.role {
            Role::Tool => {
                let id = m.tool_call_id.as_deref().unwrap_or("");
                let Some(at) = open.iter().position(|c| *c == id) else {
                    return Some(format!("tool result {i} answers no call just before it"));
                };
                open.remove(at);
            }
            _ if !open.is_empty() => {
                return Some(format!("message {i} comes before calls {open:?} are answered"));
            }
            Role::Assistant => open = m.tool_calls.iter().map(|c| c.id.as_str()).collect(),
            _ => {}
        }
    }
    (!open.is_empty()).then(|| format!("calls {open:?} are never answered"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use reson_trace::ToolCall;

    fn msg(seq: u64, role: Role, goal: &str, calls: &[&str], answers: Option<&str>) -> Message {
        let mut m = Message::new(role, format!("m{seq}"));
        m.sequence = seq;
        m.goal_id = Some(goal.to_owned());
        m.tool_calls = calls
            .iter()
            .map(|id| ToolCall { id: (*id).into(), name: "read".into(), arguments: "{}".into() })
            .collect();
        m.tool_call_id = answers.map(str::to_owned);
        m
    }

    fn tree() -> GoalTree {
        let mut goals = crate::tools::goal::initial("task").unwrap();
        goals.add("first").unwrap();
        goals.add("second").unwrap();
        goals.focus("g2").unwrap();
        goals.done("did the first").unwrap();
        goals.focus("g3").unwrap();
        goals
    }

    #[test]
    fn level1_drops_closed_goals_whole_pairs_and_stays_valid() {
        let history = vec![
            Message::new(Role::System, "sys"),
            msg(1, Role::User, "g1", &[], None),
            msg(2, Role::Assistant, "g2", &["a", "b"], None),
            msg(3, Role::Tool, "g2", &[], Some("a")),
            // The result of the call that closed g2 carries the next goal.
            msg(4, Role::Tool, "g3", &[], Some("b")),
            msg(5, Role::Assistant, "g3", &["c"], None),
            msg(6, Role::Tool, "g3", &[], Some("c")),
        ];
        assert_eq!(invalid(&history), None);
        let out = level1(&history, &tree());
        assert_eq!(out.goals, ["g2"]);
        assert_eq!(out.dropped, [2, 3, 4]);
        assert_eq!(invalid(&out.messages), None, "{:#?}", out.messages);
        let texts: Vec<String> = out.messages.iter().map(Message::text).collect();
        assert_eq!(texts[0..2], ["sys", "m1"]);
        assert!(texts[2].starts_with("[compacted: 1 answers on goal g2 \"first\""), "{}", texts[2]);
        assert!(texts[2].contains("did the first"));
        assert_eq!(answers_in(&out.messages), answers_in(&history));
        assert_eq!(texts[3..], ["m5", "m6"]);
    }

    #[test]
    fn the_newest_unit_stays_even_when_its_goal_closed() {
        let history = vec![
            msg(1, Role::User, "g1", &[], None),
            msg(2, Role::Assistant, "g2", &["a"], None),
            msg(3, Role::Tool, "g2", &[], Some("a")),
        ];
        assert_eq!(level1(&history, &tree()).messages, history);
        let mut longer = history.clone();
        longer.push(msg(4, Role::Assistant, "g2", &["b"], None));
        longer.push(msg(5, Role::Tool, "g2", &[], Some("b")));
        let out = level1(&longer, &tree());
        assert!(
            out.messages[1].text().starts_with("[compacted: 1 answers"),
            "{:?}",
            out.messages[1]
        );
        assert_eq!(answers_in(&out.messages), answers_in(&longer));
    }

    #[test]
    fn invalid_histories_are_named() {
        let split =
            vec![msg(1, Role::User, "g1", &[], None), msg(2, Role::Assistant, "g1", &["a"], None)];
        assert!(invalid(&split).unwrap().contains("never answered"));
        let orphan =
            vec![msg(1, Role::User, "g1", &[], None), msg(2, Role::Tool, "g1", &[], Some("x"))];
        assert!(invalid(&orphan).unwrap().contains("answers no call"));
    }

    #[test]
    fn a_summary_carries_the_users_words_on() {
        let goals = tree();
        let first = summary_message("did things", &goals, &[msg(1, Role::User, "g1", &[], None)]);
        assert!(first.text().contains("- m1"), "{}", first.text());
        let second =
            summary_message("more", &goals, &[first.clone(), msg(9, Role::User, "g3", &[], None)]);
        let text = second.text();
        assert!(text.starts_with("[compacted: 0 earlier answers"), "{text}");
        let answered = [msg(2, Role::Assistant, "g1", &[], None), first];
        assert_eq!(answers_in(&[summary_message("s", &goals, &answered)]), 1);
        assert!(
            text.contains("- m1") && text.contains("- m9") && !text.contains("did things"),
            "{text}"
        );
    }

    #[test]
    fn the_transcript_notes_each_image_it_leaves_out() {
        let mut shot = msg(3, Role::Tool, "g1", &[], None);
        shot.name = Some("browser_screenshot".into());
        shot.content.push(ContentPart::Image(reson_trace::ImageRef {
            media_type: "image/png".into(),
            name: "000003.png".into(),
            bytes: 1234,
            width: 10,
            height: 10,
        }));
        shot.content.push(ContentPart::ImageUrl { url: "data:image/png;base64,iVBO".into() });
        let text = transcript(&[shot], &tree(), &TokenCounter::estimate(), 1_000);
        assert!(
            text.ends_with(
                "[tool browser_screenshot] m3 [image removed by compaction: 000003.png, 1234 \
                 bytes] [image removed by compaction]"
            ),
            "{text}"
        );
        assert!(!text.contains("iVBO"), "{text}");
    }

    #[test]
    fn the_transcript_fits_its_budget_cutting_the_oldest() {
        let range: Vec<Message> = (1..=50).map(|i| msg(i, Role::User, "g1", &[], None)).collect();
        let counter = TokenCounter::estimate();
        let text = transcript(&range, &tree(), &counter, 120);
        assert!(counter.count(&text) <= 130, "{}", counter.count(&text));
        assert!(text.contains("older messages left out") && text.ends_with("[user] m50"));
    }
}
