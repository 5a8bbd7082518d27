//! Doom-loop detection: a model repeating itself instead of progressing.

use reson_trace::ToolCall;

/// Watches the tool calls of a run.
#[derive(Debug)]
pub(crate) struct DoomLoopDetector {
    threshold: usize,
    history: Vec<String>,
}

/// Longest repeating cycle looked for (`a b a b a b` is length 2).
const MAX_CYCLE: usize = 4;

impl DoomLoopDetector {
    /// Trips when the same step (one message's tool calls, same arguments)
    /// repeats `threshold` times in a row, or a cycle of up to four steps
    /// repeats `threshold` times.
    pub(crate) fn new(threshold: usize) -> Self {
        Self { threshold: threshold.max(2), history: Vec::new() }
    }

    /// Records the calls of one assistant message (as one step: calls made
    /// together in parallel are not a repetition); returns a description of
    /// the loop when one is detected.
    pub(crate) fn record(&mut self, calls: &[ToolCall]) -> Option<String> {
        let step: Vec<String> = calls
            .iter()
            .map(|call| {
                let args = serde_json::from_str::<serde_json::Value>(&call.arguments)
                    .map_or_else(|_| call.arguments.clone(), |v| v.to_string());
                format!("{}({args})", call.name)
            })
            .collect();
        self.history.push(step.join(" + "));
        let h = &self.history;
        for cycle in 1..=MAX_CYCLE {
            let span = cycle * self.threshold;
            if h.len() < span {
                break;
            }
            let tail = &h[h.len() - span..];
            if tail.chunks(cycle).all(|c| c == &tail[..cycle]) {
                let what = tail[..cycle].join(", ");
                return Some(if cycle == 1 {
                    format!(
                        "doom loop: the same tool call {what} {} times in a row",
                        self.threshold
                    )
                } else {
                    format!("doom loop: the cycle [{what}] repeated {} times", self.threshold)
                });
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(name: &str, args: &str) -> ToolCall {
        ToolCall { id: "x".into(), name: name.into(), arguments: args.into() }
    }

    #[test]
    fn same_call_repeated() {
        let mut d = DoomLoopDetector::new(3);
        assert!(d.record(&[call("read", r#"{"path":"a"}"#)]).is_none());
        assert!(d.record(&[call("read", r#"{ "path": "a" }"#)]).is_none());
        let hit = d.record(&[call("read", r#"{"path":"a"}"#)]).unwrap();
        assert!(hit.contains("the same tool call read({\"path\":\"a\"}) 3 times"), "{hit}");
    }

    #[test]
    fn identical_calls_in_one_message_are_not_a_loop() {
        let mut d = DoomLoopDetector::new(3);
        let same = call("read", "{}");
        assert!(d.record(&[same.clone(), same.clone(), same]).is_none());
    }

    #[test]
    fn different_arguments_are_progress() {
        let mut d = DoomLoopDetector::new(3);
        for i in 0..10 {
            assert!(d.record(&[call("read", &format!(r#"{{"path":"{i}"}}"#))]).is_none());
        }
    }

    #[test]
    fn short_cycles() {
        let mut d = DoomLoopDetector::new(3);
        let (a, b) = (call("read", "{}"), call("write", "{}"));
        let mut hit = None;
        for _ in 0..3 {
            assert!(hit.is_none());
            hit = d.record(std::slice::from_ref(&a)).or(d.record(std::slice::from_ref(&b)));
        }
        assert!(hit.unwrap().contains("cycle [read({}), write({})] repeated 3 times"));
    }
}
