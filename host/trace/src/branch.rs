//! What a branch's messages say about goals: each message's share of the
//! stats, and the goal tree as of the branch's end. Apart from the goal
//! tree and the messages themselves, which know nothing of each other's
//! history.

use super::goal::{GoalStats, GoalTree};
use super::message::{Message, Role, ToolCall};
use std::collections::HashMap;

impl GoalStats {
    /// The share of one message.
    pub fn of(message: &Message) -> Self {
        Self {
            messages: 1,
            usage: message.usage,
            cost: message.cost,
            duration_ms: message.duration_ms,
            requests: match message.role {
                Role::Assistant => u64::from(message.attempts.max(1)),
                _ => 0,
            },
        }
    }
}

impl GoalTree {
    /// The tree of the branch `path` (its messages, root first): the last
    /// snapshot on the path, or `initial` when there is none. A tool result
    /// stored without a snapshot (by a host that kept one tree per trace)
    /// goes to `replay` with the call it answers, which applies it if it
    /// changed goals. Stats are counted from the path's messages.
    pub fn of_branch(
        path: &[Message],
        initial: GoalTree,
        mut replay: impl FnMut(&mut GoalTree, &ToolCall, &Message),
    ) -> GoalTree {
        let mut tree = initial;
        // Ids are unique only within one answer (Gemini numbers each
        // answer's calls from `call_0`): a result answers the latest call
        // with its id.
        let mut calls: HashMap<&str, &ToolCall> = HashMap::new();
        for message in path {
            calls.extend(message.tool_calls.iter().map(|call| (call.id.as_str(), call)));
            if message.role != Role::Tool || message.synthetic {
                continue;
            }
            let call = message.tool_call_id.as_deref().and_then(|id| calls.get(id));
            match (&message.goals, call) {
                (Some(snapshot), _) => tree = snapshot.clone(),
                (None, Some(call)) => replay(&mut tree, call, message),
                (None, None) => {}
            }
        }
        let mut tree = tree.snapshot();
        for message in path {
            if let Some(goal_id) = &message.goal_id {
                // A goal missing from the tree (a hand-edited file) is
                // not counted.
                let _ = tree.record(goal_id, &GoalStats::of(message));
            }
        }
        tree
    }
}
