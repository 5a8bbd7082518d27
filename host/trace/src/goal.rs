//! The goal tree of a trace: what the agent set out to do, broken down,
//! with what each part cost.

use super::usage::Usage;
use serde::{Deserialize, Serialize};
use std::fmt;

/// Messages, tokens, cost and time spent: a goal's own share, or (as
/// [`Trace::totals`](super::Trace::totals)) a whole trace's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct GoalStats {
    /// How many messages.
    pub messages: u64,
    /// Tokens, summed by kind.
    pub usage: Usage,
    /// Cost in USD.
    pub cost: f64,
    /// Model and tool time, in milliseconds.
    pub duration_ms: u64,
    /// Model requests, failed attempts included.
    pub requests: u64,
}

impl std::ops::AddAssign<&GoalStats> for GoalStats {
    fn add_assign(&mut self, o: &GoalStats) {
        self.messages += o.messages;
        self.usage += o.usage;
        self.cost += o.cost;
        self.duration_ms += o.duration_ms;
        self.requests += o.requests;
    }
}

/// What a goal is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GoalKind {
    /// Work the agent does itself.
    #[default]
    Normal,
    /// Work handed to sub-agents, whose traces are `sub_trace_ids`.
    AgentCall,
}

/// How an agent call hands work out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AgentMode {
    /// One sub-agent.
    Delegate,
    /// Several sub-agents in parallel.
    Explore,
    /// An evaluator judging a goal's result.
    Evaluate,
}

/// Where a goal stands.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GoalStatus {
    /// Not started.
    #[default]
    Pending,
    /// Being worked on (the current goal and its ancestors).
    InProgress,
    /// Done, with a summary.
    Completed,
    /// Given up, with a reason.
    Abandoned,
}

impl GoalStatus {
    fn is_open(self) -> bool {
        matches!(self, Self::Pending | Self::InProgress)
    }

    fn marker(self) -> &'static str {
        match self {
            Self::Pending => "[ ]",
            Self::InProgress => "[>]",
            Self::Completed => "[x]",
            Self::Abandoned => "[-]",
        }
    }
}

impl fmt::Display for GoalStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Pending => "pending",
            Self::InProgress => "in progress",
            Self::Completed => "completed",
            Self::Abandoned => "abandoned",
        })
    }
}

/// A stored knowledge entry found for a goal when it was added, shown
/// under the goal while it is open.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GoalKnowledge {
    /// The entry's id.
    pub id: String,
    /// Its title.
    pub title: String,
    /// The part of its content that matched.
    pub snippet: String,
}

/// One goal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Goal {
    /// `g1`, `g2`, … in order of creation, unique in the tree.
    pub id: String,
    /// The goal this one is part of; `None` at the top level.
    #[serde(default)]
    pub parent_id: Option<String>,
    /// What is to be done.
    pub description: String,
    /// Own work or a sub-agent's.
    #[serde(default)]
    pub kind: GoalKind,
    /// For an agent call: the sub-agents' traces, in order of creation.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sub_trace_ids: Vec<String>,
    /// For an agent call: how the work was handed out (the last call's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_mode: Option<AgentMode>,
    /// Where it stands.
    #[serde(default)]
    pub status: GoalStatus,
    /// What was achieved, once completed.
    #[serde(default)]
    pub summary: Option<String>,
    /// Why it was given up, once abandoned.
    #[serde(default)]
    pub abandon_reason: Option<String>,
    /// Spent on messages written while this goal was current.
    #[serde(default)]
    pub self_stats: GoalStats,
    /// `self_stats` plus those of every descendant, kept up to date by
    /// [`GoalTree::record`].
    #[serde(default)]
    pub cumulative_stats: GoalStats,
    /// Stored knowledge that matched it when it was added, best first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub knowledge: Vec<GoalKnowledge>,
}

/// Why a goal operation was refused. The messages go back to the model, so
/// each names the goal and says what to do instead.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GoalError {
    /// No goal has this id.
    #[error("there is no goal {0}")]
    Unknown(String),
    /// `done` or `abandon` with nothing in focus.
    #[error("there is no current goal: focus one first")]
    NoCurrent,
    /// The goal is completed or abandoned.
    #[error("goal {id} is {status} and cannot be reopened: add a new goal instead")]
    Closed {
        /// The goal.
        id: String,
        /// Its status.
        status: GoalStatus,
    },
    /// An empty description.
    #[error("a goal needs a description")]
    EmptyDescription,
}

/// The goals of a trace, flat, linked by `parent_id`; siblings keep their
/// order in the list. At most one goal is current.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GoalTree {
    #[serde(default)]
    goals: Vec<Goal>,
    #[serde(default)]
    current: Option<String>,
}

impl GoalTree {
    /// An empty tree.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every goal, parents before the goals added under them.
    pub fn goals(&self) -> &[Goal] {
        &self.goals
    }

    /// Whether there are no goals.
    pub fn is_empty(&self) -> bool {
        self.goals.is_empty()
    }

    /// The goal in focus.
    pub fn current(&self) -> Option<&Goal> {
        self.current.as_deref().and_then(|id| self.get(id))
    }

    /// The goal with this id.
    pub fn get(&self, id: &str) -> Option<&Goal> {
        self.goals.iter().find(|g| g.id == id)
    }

    /// Adds a pending goal under the current goal, or at the top level when
    /// none is current.
    pub fn add(&mut self, description: &str) -> Result<String, GoalError> {
        let parent = self.current.clone();
        self.insert(parent, description, self.goals.len())
    }

    /// Adds a pending goal as the last child of `parent_id`.
    pub fn under(&mut self, parent_id: &str, description: &str) -> Result<String, GoalError> {
        self.index(parent_id)?;
        self.insert(Some(parent_id.to_owned()), description, self.goals.len())
    }

    /// Adds a pending goal right after `sibling_id` among its parent's
    /// children.
    pub fn after(&mut self, sibling_id: &str, description: &str) -> Result<String, GoalError> {
        let at = self.index(sibling_id)?;
        let parent = self.goals[at].parent_id.clone();
        self.insert(parent, description, at + 1)
    }

    /// Makes `id` the current goal and marks it, and any pending ancestor,
    /// in progress.
    pub fn focus(&mut self, id: &str) -> Result<(), GoalError> {
        let at = self.open_index(id)?;
        for i in self.ancestry(at) {
            if self.goals[i].status == GoalStatus::Pending {
                self.goals[i].status = GoalStatus::InProgress;
            }
        }
        self.current = Some(id.to_owned());
        Ok(())
    }

    /// Completes the current goal with `summary`; focus moves to its next
    /// pending sibling, else to its nearest open ancestor.
    pub fn done(&mut self, summary: &str) -> Result<(), GoalError> {
        let at = self.current_index()?;
        self.goals[at].status = GoalStatus::Completed;
        self.goals[at].summary = Some(summary.to_owned());
        self.move_focus_from(at)
    }

    /// Gives up the current goal for `reason`; focus moves as for
    /// [`done`](Self::done).
    pub fn abandon(&mut self, reason: &str) -> Result<(), GoalError> {
        let at = self.current_index()?;
        self.goals[at].status = GoalStatus::Abandoned;
        self.goals[at].abandon_reason = Some(reason.to_owned());
        self.move_focus_from(at)
    }

    /// In an empty tree, adds `task` as the root goal and focuses it. Returns
    /// the root: the new one, or the first top-level goal already there.
    pub fn ensure_root(&mut self, task: &str) -> Result<String, GoalError> {
        if let Some(root) = self.goals.iter().find(|g| g.parent_id.is_none()) {
            return Ok(root.id.clone());
        }
        let id = self.insert(None, task, self.goals.len())?;
        self.focus(&id)?;
        Ok(id)
    }

    /// Marks `goal_id` as handed (in `mode`) to the sub-agent whose trace
    /// is `sub_trace_id`.
    pub fn link_sub_trace(
        &mut self,
        goal_id: &str,
        sub_trace_id: &str,
        mode: AgentMode,
    ) -> Result<(), GoalError> {
        let at = self.index(goal_id)?;
        let goal = &mut self.goals[at];
        goal.kind = GoalKind::AgentCall;
        goal.agent_mode = Some(mode);
        if !goal.sub_trace_ids.iter().any(|id| id == sub_trace_id) {
            goal.sub_trace_ids.push(sub_trace_id.to_owned());
        }
        Ok(())
    }

    /// Adds what a sub-agent of `goal_id` spent to the cumulative stats of
    /// it and every ancestor (not to its own: it did not spend it itself).
    pub fn record_descendant(&mut self, goal_id: &str, stats: &GoalStats) -> Result<(), GoalError> {
        let at = self.index(goal_id)?;
        for i in self.ancestry(at) {
            self.goals[i].cumulative_stats += stats;
        }
        Ok(())
    }

    /// Adds `stats` to `goal_id`'s own stats and to the cumulative stats of
    /// it and every ancestor.
    pub fn record(&mut self, goal_id: &str, stats: &GoalStats) -> Result<(), GoalError> {
        let at = self.index(goal_id)?;
        self.goals[at].self_stats += stats;
        for i in self.ancestry(at) {
            self.goals[i].cumulative_stats += stats;
        }
        Ok(())
    }

    /// The tree without its stats, as stored in a `goal` tool result: the
    /// stats of a branch are counted from the branch's own messages.
    pub fn snapshot(&self) -> GoalTree {
        let mut tree = self.clone();
        for goal in &mut tree.goals {
            goal.self_stats = GoalStats::default();
            goal.cumulative_stats = GoalStats::default();
        }
        tree
    }

    /// Attaches `knowledge` to `goal_id`, replacing what it had.
    pub fn attach_knowledge(
        &mut self,
        goal_id: &str,
        knowledge: Vec<GoalKnowledge>,
    ) -> Result<(), GoalError> {
        let at = self.index(goal_id)?;
        self.goals[at].knowledge = knowledge;
        Ok(())
    }

    /// `goal_id`'s stats together with those of all its descendants.
    pub fn cumulative(&self, goal_id: &str) -> Result<GoalStats, GoalError> {
        Ok(self.goals[self.index(goal_id)?].cumulative_stats)
    }

    /// The tree as a trace that is no longer running left it: no goal is
    /// current, and the goals it left in progress show as open, not as
    /// being worked on.
    pub fn settled(&self) -> GoalTree {
        let mut tree = self.clone();
        tree.current = None;
        for goal in &mut tree.goals {
            if goal.status == GoalStatus::InProgress {
                goal.status = GoalStatus::Pending;
            }
        }
        tree
    }

    /// The tree as indented text, one goal a line: `[x]` completed, `[>]` in
    /// progress, `[ ]` pending, `[-]` abandoned; the current goal is marked
    /// `(current)`, summaries and reasons follow a dash. Under an open goal,
    /// one line per knowledge entry attached to it, labelled as stored
    /// knowledge.
    pub fn render(&self) -> String {
        if self.goals.is_empty() {
            return "(no goals)\n".to_owned();
        }
        let mut out = String::new();
        // A goal whose parent is missing (a hand-edited file) still shows,
        // at the top level.
        for (i, goal) in self.goals.iter().enumerate() {
            let parent_known = goal.parent_id.as_deref().is_some_and(|p| self.get(p).is_some());
            if !parent_known {
                self.render_into(i, 0, &mut out);
            }
        }
        out
    }

    fn render_into(&self, at: usize, depth: usize, out: &mut String) {
        use std::fmt::Write as _;
        let goal = &self.goals[at];
        let _ = write!(
            out,
            "{:indent$}{} {} {}",
            "",
            goal.status.marker(),
            goal.id,
            goal.description,
            indent = depth * 2
        );
        if !goal.sub_trace_ids.is_empty() {
            let _ = write!(out, " (agent: {})", goal.sub_trace_ids.join(", "));
        }
        if self.current.as_deref() == Some(goal.id.as_str()) {
            out.push_str(" (current)");
        }
        match (goal.status, &goal.summary, &goal.abandon_reason) {
            (GoalStatus::Completed, Some(summary), _) => {
                let _ = write!(out, " — {summary}");
            }
            (GoalStatus::Abandoned, _, Some(reason)) => {
                let _ = write!(out, " — abandoned: {reason}");
            }
            _ => {}
        }
        out.push('\n');
        if goal.status.is_open() {
            for k in &goal.knowledge {
                let _ = writeln!(
                    out,
                    "{:indent$}knowledge [{}] {}: {}",
                    "",
                    k.id,
                    k.title,
                    k.snippet,
                    indent = depth * 2 + 4
                );
            }
        }
        // Each goal has one parent, so descending from the top level visits
        // every goal at most once even if the file holds a cycle.
        for (i, child) in self.goals.iter().enumerate() {
            if child.parent_id.as_deref() == Some(goal.id.as_str()) {
                self.render_into(i, depth + 1, out);
            }
        }
    }

    fn index(&self, id: &str) -> Result<usize, GoalError> {
        self.goals.iter().position(|g| g.id == id).ok_or_else(|| GoalError::Unknown(id.to_owned()))
    }

    fn open_index(&self, id: &str) -> Result<usize, GoalError> {
        let at = self.index(id)?;
        let status = self.goals[at].status;
        if status.is_open() { Ok(at) } else { Err(GoalError::Closed { id: id.to_owned(), status }) }
    }

    fn current_index(&self) -> Result<usize, GoalError> {
        self.open_index(self.current.as_deref().ok_or(GoalError::NoCurrent)?)
    }

    fn insert(
        &mut self,
        parent_id: Option<String>,
        description: &str,
        at: usize,
    ) -> Result<String, GoalError> {
        let description = description.trim();
        if description.is_empty() {
            return Err(GoalError::EmptyDescription);
        }
        // Ids stay unique even in a file whose goals were reordered or
        // partly removed by hand.
        let next = self
            .goals
            .iter()
            .filter_map(|g| g.id.strip_prefix('g')?.parse::<u64>().ok())
            .max()
            .unwrap_or(0)
            + 1;
        let id = format!("g{next}");
        let goal = Goal {
            id: id.clone(),
            parent_id,
            description: description.to_owned(),
            kind: GoalKind::Normal,
            sub_trace_ids: Vec::new(),
            agent_mode: None,
            status: GoalStatus::Pending,
            summary: None,
            abandon_reason: None,
            self_stats: GoalStats::default(),
            cumulative_stats: GoalStats::default(),
            knowledge: Vec::new(),
        };
        self.goals.insert(at, goal);
        Ok(id)
    }

    /// `at` and its ancestors, nearest first. Bounded by the number of goals
    /// so that a cycle in a hand-edited file cannot hang the host.
    fn ancestry(&self, at: usize) -> Vec<usize> {
        let mut chain = vec![at];
        while chain.len() < self.goals.len() {
            let last = &self.goals[chain[chain.len() - 1]];
            match last.parent_id.as_deref().and_then(|p| self.index(p).ok()) {
                Some(parent) if !chain.contains(&parent) => chain.push(parent),
                _ => break,
            }
        }
        chain
    }

    fn move_focus_from(&mut self, at: usize) -> Result<(), GoalError> {
        let parent = self.goals[at].parent_id.clone();
        let next_sibling = self.goals[at + 1..]
            .iter()
            .find(|g| g.parent_id == parent && g.status == GoalStatus::Pending)
            .map(|g| g.id.clone());
        let next = next_sibling.or_else(|| {
            self.ancestry(at)
                .into_iter()
                .skip(1)
                .find(|&i| self.goals[i].status.is_open())
                .map(|i| self.goals[i].id.clone())
        });
        match next {
            Some(id) => self.focus(&id),
            None => {
                self.current = None;
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attached_knowledge_shows_under_open_goals_and_old_trees_load() {
        let old =
            r#"{"goals":[{"id":"g1","description":"ship","status":"in_progress"}],"current":"g1"}"#;
        let mut tree: GoalTree = serde_json::from_str(old).unwrap();
        assert!(tree.get("g1").unwrap().knowledge.is_empty());
        assert!(!serde_json::to_string(&tree).unwrap().contains("knowledge"), "omitted when empty");
        let note =
            GoalKnowledge { id: "kn_1".into(), title: "Release".into(), snippet: "tag it".into() };
        tree.attach_knowledge("g1", vec![note.clone()]).unwrap();
        assert_eq!(tree.render(), "[>] g1 ship (current)\n    knowledge [kn_1] Release: tag it\n");
        let back: GoalTree = serde_json::from_str(&serde_json::to_string(&tree).unwrap()).unwrap();
        assert_eq!(back.get("g1").unwrap().knowledge, [note]);
        assert_eq!(tree.attach_knowledge("g9", Vec::new()), Err(GoalError::Unknown("g9".into())));
        tree.done("shipped").unwrap();
        assert_eq!(tree.render(), "[x] g1 ship — shipped\n", "a closed goal no longer needs it");
    }

    fn stats(messages: u64, prompt: u64, cost: f64) -> GoalStats {
        GoalStats {
            messages,
            usage: Usage { prompt_tokens: prompt, ..Usage::default() },
            cost,
            duration_ms: messages * 10,
            requests: messages,
        }
    }

    #[test]
    fn add_goes_under_the_current_goal_or_the_top_level() {
        let mut tree = GoalTree::new();
        let g1 = tree.add("ship").unwrap();
        assert_eq!(g1, "g1");
        assert_eq!(tree.get("g1").unwrap().parent_id, None);
        assert_eq!(tree.get("g1").unwrap().status, GoalStatus::Pending);
        tree.focus("g1").unwrap();
        let g2 = tree.add("write changelog").unwrap();
        assert_eq!(tree.get(&g2).unwrap().parent_id.as_deref(), Some("g1"));
        assert_eq!(tree.current().unwrap().id, "g1");
    }

    #[test]
    fn under_and_after_place_goals_among_siblings() {
        let mut tree = GoalTree::new();
        tree.add("root").unwrap();
        tree.under("g1", "a").unwrap();
        tree.under("g1", "c").unwrap();
        tree.after("g2", "b").unwrap();
        tree.under("g2", "a.1").unwrap();
        let children: Vec<_> = tree
            .goals()
            .iter()
            .filter(|g| g.parent_id.as_deref() == Some("g1"))
            .map(|g| g.description.as_str())
            .collect();
        assert_eq!(children, ["a", "b", "c"]);
        assert_eq!(tree.get("g4").unwrap().description, "b");
        assert_eq!(tree.get("g5").unwrap().parent_id.as_deref(), Some("g2"));
        tree.after("g1", "second root").unwrap();
        assert_eq!(tree.get("g6").unwrap().parent_id, None);
    }

    #[test]
    fn unknown_ids_and_missing_focus_are_errors() {
        let mut tree = GoalTree::new();
        assert_eq!(tree.under("g9", "x"), Err(GoalError::Unknown("g9".into())));
        assert_eq!(tree.after("g9", "x"), Err(GoalError::Unknown("g9".into())));
        assert_eq!(tree.focus("g9"), Err(GoalError::Unknown("g9".into())));
        assert_eq!(tree.record("g9", &GoalStats::default()), Err(GoalError::Unknown("g9".into())));
        assert_eq!(tree.cumulative("g9"), Err(GoalError::Unknown("g9".into())));
        assert_eq!(
            tree.link_sub_trace("g9", "tr_x", AgentMode::Delegate),
            Err(GoalError::Unknown("g9".into()))
        );
        assert_eq!(
            tree.record_descendant("g9", &GoalStats::default()),
            Err(GoalError::Unknown("g9".into()))
        );
        assert_eq!(tree.done("ok"), Err(GoalError::NoCurrent));
        assert_eq!(tree.abandon("no"), Err(GoalError::NoCurrent));
        assert_eq!(tree.add("  "), Err(GoalError::EmptyDescription));
        assert_eq!(GoalError::Unknown("g9".into()).to_string(), "there is no goal g9");
        assert!(tree.is_empty());
    }

    #[test]
    fn closed_goals_cannot_be_focused() {
        let mut tree = GoalTree::new();
        tree.ensure_root("task").unwrap();
        tree.done("did it").unwrap();
        assert_eq!(tree.current(), None);
        let err = tree.focus("g1").unwrap_err();
        assert_eq!(err, GoalError::Closed { id: "g1".into(), status: GoalStatus::Completed });
        assert_eq!(
            err.to_string(),
            "goal g1 is completed and cannot be reopened: add a new goal instead"
        );
    }

    #[test]
    fn focus_marks_the_goal_and_its_ancestors_in_progress() {
        let mut tree = GoalTree::new();
        tree.add("root").unwrap();
        tree.under("g1", "child").unwrap();
        tree.focus("g2").unwrap();
        assert_eq!(tree.current().unwrap().id, "g2");
        assert_eq!(tree.get("g1").unwrap().status, GoalStatus::InProgress);
        assert_eq!(tree.get("g2").unwrap().status, GoalStatus::InProgress);
    }

    #[test]
    fn done_and_abandon_move_focus_to_the_next_pending_sibling_then_the_parent() {
        let mut tree = GoalTree::new();
        assert_eq!(tree.ensure_root("root").unwrap(), "g1");
        assert_eq!(tree.ensure_root("other").unwrap(), "g1");
        for d in ["a", "b", "c"] {
            tree.add(d).unwrap();
        }
        tree.focus("g2").unwrap();
        tree.done("a done").unwrap();
        assert_eq!(tree.current().unwrap().id, "g3");
        assert_eq!(tree.get("g2").unwrap().summary.as_deref(), Some("a done"));
        tree.abandon("b not needed").unwrap();
        assert_eq!(tree.current().unwrap().id, "g4");
        assert_eq!(tree.get("g3").unwrap().abandon_reason.as_deref(), Some("b not needed"));
        tree.done("c done").unwrap();
        assert_eq!(tree.current().unwrap().id, "g1");
        tree.done("all done").unwrap();
        assert_eq!(tree.current(), None);
    }

    #[test]
    fn record_accumulates_up_the_tree() {
        let mut tree = GoalTree::new();
        tree.ensure_root("root").unwrap();
        tree.add("a").unwrap();
        tree.under("g2", "a.1").unwrap();
        tree.add("b").unwrap();
        tree.record("g1", &stats(1, 100, 0.5)).unwrap();
        tree.record("g3", &stats(2, 10, 0.25)).unwrap();
        tree.record("g4", &stats(1, 1, 0.125)).unwrap();
        assert_eq!(tree.get("g3").unwrap().self_stats, stats(2, 10, 0.25));
        assert_eq!(tree.cumulative("g3").unwrap(), stats(2, 10, 0.25));
        assert_eq!(tree.cumulative("g2").unwrap(), stats(2, 10, 0.25));
        assert_eq!(tree.get("g2").unwrap().self_stats, GoalStats::default());
        assert_eq!(tree.cumulative("g1").unwrap(), stats(4, 111, 0.875));
        assert_eq!(tree.get("g1").unwrap().self_stats, stats(1, 100, 0.5));
        // A sub-agent's spending joins the cumulative stats only.
        tree.record_descendant("g3", &stats(3, 1000, 1.0)).unwrap();
        assert_eq!(tree.get("g3").unwrap().self_stats, stats(2, 10, 0.25));
        assert_eq!(tree.cumulative("g3").unwrap(), stats(5, 1010, 1.25));
        assert_eq!(tree.cumulative("g1").unwrap(), stats(7, 1111, 1.875));
    }

    #[test]
    fn render_shows_status_current_and_summaries() {
        assert_eq!(GoalTree::new().render(), "(no goals)\n");
        let mut tree = GoalTree::new();
        tree.ensure_root("Ship the release").unwrap();
        tree.add("Write the changelog").unwrap();
        tree.add("Bump the version").unwrap();
        tree.add("Tag the release").unwrap();
        tree.under("g1", "Announce").unwrap();
        tree.under("g4", "Sign the tag").unwrap();
        tree.link_sub_trace("g5", "tr_0123456789ab", AgentMode::Explore).unwrap();
        tree.link_sub_trace("g5", "tr_ba9876543210", AgentMode::Explore).unwrap();
        tree.focus("g2").unwrap();
        tree.done("12 entries").unwrap();
        tree.abandon("already bumped").unwrap();
        tree.focus("g6").unwrap();
        assert_eq!(
            tree.render(),
            "[>] g1 Ship the release\n\
             \x20 [x] g2 Write the changelog — 12 entries\n\
             \x20 [-] g3 Bump the version — abandoned: already bumped\n\
             \x20 [>] g4 Tag the release\n\
             \x20   [>] g6 Sign the tag (current)\n\
             \x20 [ ] g5 Announce (agent: tr_0123456789ab, tr_ba9876543210)\n"
        );
        assert_eq!(tree.get("g5").unwrap().kind, GoalKind::AgentCall);
    }

    #[test]
    fn the_tree_round_trips_through_json() {
        let mut tree = GoalTree::new();
        tree.ensure_root("root").unwrap();
        tree.add("a").unwrap();
        tree.record("g2", &stats(1, 5, 0.5)).unwrap();
        let json = serde_json::to_string(&tree).unwrap();
        assert_eq!(serde_json::from_str::<GoalTree>(&json).unwrap(), tree);
        assert!(json.contains(r#""status":"in_progress""#), "{json}");
    }
}
