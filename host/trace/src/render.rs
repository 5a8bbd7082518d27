//! Text renderings of a trace's message tree, for people.

use super::{ContentPart, ImageRef, Message, MessageTree, Role};
use reson_text::text::{Lines, escape_controls};
use std::collections::{BTreeMap, HashSet};

/// The message tree as text, one message a line, `*` marking the main path
/// from the root to `head`: a chain continues at the same depth, and each
/// branch point indents its children. Each image of a message gets a line
/// of its own below it, saying where it is as `image` puts it (a file's
/// path, say).
pub fn render_tree(
    messages: &[Message],
    head: Option<u64>,
    image: &dyn Fn(&ImageRef) -> String,
) -> String {
    let tree = MessageTree::from_messages(messages);
    let main: HashSet<u64> =
        head.map(|h| tree.main_path(h).into_iter().collect()).unwrap_or_default();
    let mut children: BTreeMap<Option<u64>, Vec<&Message>> = BTreeMap::new();
    for m in messages {
        children.entry(m.parent_sequence).or_default().push(m);
    }
    let mut out = String::new();
    let mut stack: Vec<(&Message, usize)> = children
        .get(&None)
        .map(|roots| roots.iter().rev().map(|m| (*m, 0)).collect())
        .unwrap_or_default();
    while let Some((m, depth)) = stack.pop() {
        let mark = if main.contains(&m.sequence) { '*' } else { ' ' };
        out.push_str(&format!(
            "{mark} {:indent$}#{} {}\n",
            "",
            m.sequence,
            line(m),
            indent = depth * 2
        ));
        for part in &m.content {
            let shown = match part {
                ContentPart::Image(i) => format!(
                    "{} ({}, {}x{}, {} bytes)",
                    image(i),
                    i.media_type,
                    i.width,
                    i.height,
                    i.bytes
                ),
                ContentPart::ImageUrl { url } if url.starts_with("data:") => {
                    format!("<inline in the message, {} bytes of data: URL>", url.len())
                }
                ContentPart::ImageUrl { url } => escape_controls(url, Lines::Escape).into_owned(),
                ContentPart::Text { .. } => continue,
            };
            out.push_str(&format!("  {:indent$}   image: {shown}\n", "", indent = depth * 2));
        }
        let kids = children.get(&Some(m.sequence)).map(Vec::as_slice).unwrap_or_default();
        let child_depth = if kids.len() > 1 { depth + 1 } else { depth };
        stack.extend(kids.iter().rev().map(|k| (*k, child_depth)));
    }
    out
}

/// `text` on one line, cut to `max` characters with `…` after.
fn short(text: &str, max: usize) -> String {
    let line = escape_controls(text, Lines::Escape);
    match line.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &line[..at]),
        None => line.into_owned(),
    }
}

fn line(m: &Message) -> String {
    let text: String = m.text().replace('\n', " ").chars().take(70).collect();
    // Names come from the model: one line each, whatever they hold.
    let name = |n: &str| escape_controls(n, Lines::Escape).into_owned();
    match m.role {
        Role::Tool => format!("tool {}: {text}", name(m.name.as_deref().unwrap_or("?"))),
        Role::Assistant if !m.tool_calls.is_empty() => {
            let calls: Vec<String> = m
                .tool_calls
                .iter()
                .map(|c| format!("{}({})", name(&c.name), short(&c.arguments, 60)))
                .collect();
            format!("assistant: {text} → {}", calls.join(", "))
        }
        role => format!(
            "{}: {text}",
            serde_json::to_value(role).unwrap_or_default().as_str().unwrap_or("")
        ),
    }
}
