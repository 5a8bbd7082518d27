//! The message tree of a trace held in memory: enough of each message
//! (parent, role, tool calls) to walk the main path, find a safe rewind
//! point and spot unanswered tool calls without touching the disk.

use super::message::{Message, Role, ToolCall};

/// Messages of one trace linked by `parent_sequence`, indexed by sequence.
///
/// Build it once with [`from_messages`](Self::from_messages) and keep it up
/// to date with [`insert`](Self::insert) as messages are added.
#[derive(Debug, Clone, Default)]
pub struct MessageTree {
    // Indexed by sequence: sequences are dense from 1, so a vector beats a
    // map for both memory and the parent walks of a long trace.
    slots: Vec<Slot>,
}

#[derive(Debug, Clone, Default)]
struct Slot {
    node: Option<Node>,
    // Children as an intrusive list (0 = none) so that a 100k-message chain
    // needs no allocation per message.
    first_child: u64,
}

#[derive(Debug, Clone)]
struct Node {
    parent: Option<u64>,
    role: Role,
    tool_calls: Vec<ToolCall>,
    tool_call_id: Option<String>,
    next_sibling: u64,
}

impl MessageTree {
    /// An empty tree.
    pub fn new() -> Self {
        Self::default()
    }

    /// The tree of `messages`, in any order.
    pub fn from_messages<'a>(messages: impl IntoIterator<Item = &'a Message>) -> Self {
        let mut tree = Self::new();
        for message in messages {
            tree.insert(message);
        }
        tree
    }

    /// Adds a stored message. Stored messages never change, so a sequence
    /// already in the tree is left as it is; sequence 0 (never stored) is
    /// ignored.
    pub fn insert(&mut self, message: &Message) {
        let seq = message.sequence;
        if seq == 0 || self.node(seq).is_some() {
            return;
        }
        let mut next_sibling = 0;
        if let Some(parent) = message.parent_sequence.filter(|&p| p < seq) {
            let slot = self.slot_mut(parent);
            next_sibling = slot.first_child;
            slot.first_child = seq;
        }
        self.slot_mut(seq).node = Some(Node {
            parent: message.parent_sequence,
            role: message.role,
            tool_calls: message.tool_calls.clone(),
            tool_call_id: message.tool_call_id.clone(),
            next_sibling,
        });
    }

    /// The sequences from the root to `head`, inclusive. Empty when `head`
    /// is not in the tree; starts below a missing ancestor.
    pub fn main_path(&self, head: u64) -> Vec<u64> {
        let mut path = Vec::new();
        let mut at = Some(head);
        while let Some(seq) = at {
            let Some(node) = self.node(seq) else { break };
            path.push(seq);
            // Parents are always older; anything else is a corrupt link and
            // would otherwise loop.
            at = node.parent.filter(|&p| p < seq);
        }
        path.reverse();
        path
    }

    /// Where history may be cut so that it stays valid when rewinding to
    /// `after_sequence`: an assistant message with tool calls (or a tool
    /// result among its results) is extended along its branch past every
    /// result that answers one of its calls, so no call loses its answer.
    /// Any other message, or one not in the tree, is returned as is.
    pub fn rewind_point(&self, after_sequence: u64) -> u64 {
        let Some(node) = self.node(after_sequence) else { return after_sequence };
        let mut answered: Vec<&str> = Vec::new();
        let assistant = match node.role {
            Role::Assistant if !node.tool_calls.is_empty() => node,
            Role::Tool => {
                let mut at = node;
                loop {
                    answered.extend(at.tool_call_id.as_deref());
                    match at.parent.and_then(|p| self.node(p)) {
                        Some(parent) if parent.role == Role::Tool => at = parent,
                        Some(parent) if parent.role == Role::Assistant => break parent,
                        _ => return after_sequence,
                    }
                }
            }
            _ => return after_sequence,
        };
        let open = |id: &str, answered: &[&str]| {
            assistant.tool_calls.iter().any(|c| c.id == id) && !answered.contains(&id)
        };
        let mut at = after_sequence;
        loop {
            // Several answers to one point only exist after an unsafe rewind;
            // the latest is the one the run went on from.
            let next = self
                .children(at)
                .filter_map(|c| Some((c, self.node(c)?)))
                .filter(|(_, n)| n.role == Role::Tool)
                .filter_map(|(c, n)| Some((c, n.tool_call_id.as_deref()?)))
                .filter(|(_, id)| open(id, &answered))
                .max_by_key(|(c, _)| *c);
            match next {
                Some((c, id)) => {
                    answered.push(id);
                    at = c;
                }
                None => return at,
            }
        }
    }

    /// Tool calls on the main path to `head` that no later tool message on
    /// that path answers, with the sequence of the assistant message that
    /// made them, in path order.
    pub fn orphaned_tool_calls(&self, head: u64) -> Vec<(u64, ToolCall)> {
        let mut open: Vec<(u64, &ToolCall)> = Vec::new();
        for seq in self.main_path(head) {
            let Some(node) = self.node(seq) else { continue };
            match node.role {
                Role::Assistant => open.extend(node.tool_calls.iter().map(|c| (seq, c))),
                Role::Tool => {
                    // Some providers reuse call ids across turns: a result
                    // answers the latest open call with its id.
                    if let Some(id) = &node.tool_call_id
                        && let Some(i) = open.iter().rposition(|(_, c)| &c.id == id)
                    {
                        open.remove(i);
                    }
                }
                Role::System | Role::User => {}
            }
        }
        open.into_iter().map(|(seq, c)| (seq, c.clone())).collect()
    }

    fn node(&self, seq: u64) -> Option<&Node> {
        self.slots.get(usize::try_from(seq).ok()?)?.node.as_ref()
    }

    fn slot_mut(&mut self, seq: u64) -> &mut Slot {
        let at = seq as usize;
        if at >= self.slots.len() {
            self.slots.resize_with(at + 1, Slot::default);
        }
        &mut self.slots[at]
    }

    fn children(&self, seq: u64) -> impl Iterator<Item = u64> + '_ {
        let first = self.slots.get(seq as usize).map_or(0, |s| s.first_child);
        std::iter::successors(Some(first), |&c| self.node(c).map(|n| n.next_sibling))
            .take_while(|&c| c != 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(seq: u64, parent: Option<u64>, role: Role) -> Message {
        let mut m = Message::new(role, format!("m{seq}"));
        m.sequence = seq;
        m.parent_sequence = parent;
        m
    }

    fn call(id: &str) -> ToolCall {
        ToolCall { id: id.into(), name: "read".into(), arguments: "{}".into() }
    }

    fn assistant(seq: u64, parent: u64, calls: &[&str]) -> Message {
        let mut m = msg(seq, Some(parent), Role::Assistant);
        m.tool_calls = calls.iter().map(|c| call(c)).collect();
        m
    }

    fn result(seq: u64, parent: u64, id: &str) -> Message {
        let mut m = Message::tool_result(&call(id), "ok");
        m.sequence = seq;
        m.parent_sequence = Some(parent);
        m
    }

    /// 1 system, 2 user, 3 assistant[a,b], 4 result a, 5 result b,
    /// 6 assistant, then a rewind: 7 user after 2, 8 assistant after 7.
    fn branched() -> Vec<Message> {
        vec![
            msg(1, None, Role::System),
            msg(2, Some(1), Role::User),
            assistant(3, 2, &["a", "b"]),
            result(4, 3, "a"),
            result(5, 4, "b"),
            msg(6, Some(5), Role::Assistant),
            msg(7, Some(2), Role::User),
            msg(8, Some(7), Role::Assistant),
        ]
    }

    #[test]
    fn main_path_follows_parents_from_any_head() {
        let mut messages = branched();
        messages.reverse();
        let tree = MessageTree::from_messages(&messages);
        assert_eq!(tree.main_path(6), [1, 2, 3, 4, 5, 6]);
        assert_eq!(tree.main_path(8), [1, 2, 7, 8]);
        assert_eq!(tree.main_path(2), [1, 2]);
        assert!(tree.main_path(99).is_empty());
    }

    #[test]
    fn rewinding_onto_tool_calls_extends_past_their_results() {
        let tree = MessageTree::from_messages(&branched());
        assert_eq!(tree.rewind_point(3), 5);
        assert_eq!(tree.rewind_point(4), 5, "a result in the middle of the answers");
        assert_eq!(tree.rewind_point(5), 5);
        assert_eq!(tree.rewind_point(2), 2);
        assert_eq!(tree.rewind_point(6), 6);
        assert_eq!(tree.rewind_point(99), 99);
    }

    #[test]
    fn rewind_point_stops_where_results_are_missing() {
        let mut messages = branched();
        messages.truncate(4);
        let tree = MessageTree::from_messages(&messages);
        assert_eq!(tree.rewind_point(3), 4);
        assert_eq!(tree.orphaned_tool_calls(4), [(3, call("b"))]);
    }

    #[test]
    fn rewind_point_follows_the_latest_answer() {
        let mut messages = branched();
        // A second answer to `a`, written after an unsafe rewind to 3.
        messages.push(result(9, 3, "a"));
        messages.push(result(10, 9, "b"));
        let tree = MessageTree::from_messages(&messages);
        assert_eq!(tree.rewind_point(3), 10);
    }

    #[test]
    fn orphaned_tool_calls_are_found_on_the_main_path_only() {
        let mut messages = branched();
        messages.push(assistant(9, 8, &["c", "d"]));
        messages.push(result(10, 9, "d"));
        let tree = MessageTree::from_messages(&messages);
        assert_eq!(tree.orphaned_tool_calls(10), [(9, call("c"))]);
        assert_eq!(tree.orphaned_tool_calls(9), [(9, call("c")), (9, call("d"))]);
        assert!(tree.orphaned_tool_calls(6).is_empty());
        assert!(tree.orphaned_tool_calls(8).is_empty());
    }

    #[test]
    fn reused_call_ids_are_matched_to_the_latest_call() {
        let messages = vec![
            msg(1, None, Role::User),
            assistant(2, 1, &["call_0"]),
            assistant(3, 2, &["call_0"]),
            result(4, 3, "call_0"),
        ];
        let tree = MessageTree::from_messages(&messages);
        assert_eq!(tree.orphaned_tool_calls(4), [(2, call("call_0"))]);
    }
}
