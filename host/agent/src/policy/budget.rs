//! Budgets: what a trace tree (a root run and every sub-agent under it) may
//! spend together in tokens, dollars and time. A sub-agent's budget is
//! carved from what its parent has left, so no part of a tree can spend
//! more than the whole was given.

use serde::{Deserialize, Serialize};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Limits on spending; `None` is unlimited. Plain data, as given by the
/// command line, the config or an API request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Budget {
    /// Prompt plus completion tokens.
    pub max_tokens: Option<u64>,
    /// Cost in USD, as the provider reports it.
    pub max_cost_usd: Option<f64>,
    /// Wall-clock time from the start of the run, in milliseconds.
    pub max_duration_ms: Option<u64>,
}

/// Why a budget cannot be used or was used up.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BudgetError {
    /// A cost limit that is negative or not a number.
    #[error("invalid budget: max_cost_usd must be a finite number of dollars, 0 or more (got {0})")]
    InvalidCost(f64),
    /// Nothing is left of a limit to give a sub-agent.
    #[error("budget exhausted: no {limit} left to give a sub-agent ({spent} spent of {of})")]
    NothingLeft {
        /// The limit, such as `max_tokens`.
        limit: &'static str,
        /// What was spent, with its unit.
        spent: String,
        /// The limit, with its unit.
        of: String,
    },
}

impl Budget {
    /// Whether no limit is set.
    #[cfg(test)]
    fn is_unlimited(&self) -> bool {
        *self == Self::default()
    }

    /// Checks that every limit can be held to.
    pub fn validate(&self) -> Result<(), BudgetError> {
        match self.max_cost_usd {
            Some(cost) if !cost.is_finite() || cost < 0.0 => Err(BudgetError::InvalidCost(cost)),
            _ => Ok(()),
        }
    }

    /// The tighter of `self` and `other`, limit by limit.
    pub fn tightest(self, other: Budget) -> Budget {
        fn min<T: PartialOrd>(a: Option<T>, b: Option<T>) -> Option<T> {
            match (a, b) {
                (Some(a), Some(b)) => Some(if b < a { b } else { a }),
                (a, b) => a.or(b),
            }
        }
        Budget {
            max_tokens: min(self.max_tokens, other.max_tokens),
            max_cost_usd: min(self.max_cost_usd, other.max_cost_usd),
            max_duration_ms: min(self.max_duration_ms, other.max_duration_ms),
        }
    }
}

#[derive(Debug, Default, Clone, Copy)]
struct Spent {
    tokens: u64,
    cost: f64,
}

/// What one run (and, through its children, its sub-agents) spent, held
/// against its budget and every ancestor's. Shared by the run and the
/// meters of its sub-agents.
#[derive(Debug)]
pub(crate) struct Meter {
    limits: Budget,
    started: Instant,
    spent: Mutex<Spent>,
    parent: Option<Arc<Meter>>,
}

impl Meter {
    /// The meter of a root run.
    pub(crate) fn root(limits: Budget) -> Arc<Self> {
        Arc::new(Self { limits, started: Instant::now(), spent: Mutex::default(), parent: None })
    }

    /// The limits this meter holds its run to (ancestors' apart).
    pub(crate) fn limits(&self) -> Budget {
        self.limits
    }

    /// A sub-agent's meter: what this meter and its ancestors have left,
    /// capped by `cap`. Fails when any limit has nothing left.
    pub(crate) fn carve(self: &Arc<Self>, cap: Budget) -> Result<Arc<Meter>, BudgetError> {
        cap.validate()?;
        let mut limits = cap;
        let mut meter = Some(self);
        while let Some(m) = meter {
            limits = limits.tightest(m.remaining()?);
            meter = m.parent.as_ref();
        }
        Ok(Arc::new(Self {
            limits,
            started: Instant::now(),
            spent: Mutex::default(),
            parent: Some(self.clone()),
        }))
    }

    /// What this meter alone has left; an error when a limit is used up.
    fn remaining(&self) -> Result<Budget, BudgetError> {
        let spent = self.spent();
        let elapsed = self.started.elapsed().as_millis() as u64;
        let nothing =
            |limit, spent: String, of: String| BudgetError::NothingLeft { limit, spent, of };
        let mut left = Budget::default();
        if let Some(max) = self.limits.max_tokens {
            if spent.tokens >= max {
                return Err(nothing(
                    "max_tokens",
                    format!("{} tokens", spent.tokens),
                    format!("{max}"),
                ));
            }
            left.max_tokens = Some(max - spent.tokens);
        }
        if let Some(max) = self.limits.max_cost_usd {
            if spent.cost >= max {
                return Err(nothing("max_cost_usd", dollars(spent.cost), dollars(max)));
            }
            left.max_cost_usd = Some(max - spent.cost);
        }
        if let Some(max) = self.limits.max_duration_ms {
            if elapsed >= max {
                return Err(nothing(
                    "max_duration_ms",
                    format!("{elapsed} ms"),
                    format!("{max} ms"),
                ));
            }
            left.max_duration_ms = Some(max - elapsed);
        }
        Ok(left)
    }

    /// Counts `tokens` and `cost` here and in every ancestor.
    pub(crate) fn spend(&self, tokens: u64, cost: f64) {
        let mut meter = Some(self);
        while let Some(m) = meter {
            let mut spent = m.spent.lock().expect("meter");
            spent.tokens += tokens;
            spent.cost += cost;
            drop(spent);
            meter = m.parent.as_deref();
        }
    }

    /// Tokens and cost counted here (this run and its sub-agents).
    #[cfg(test)]
    fn spent_tokens_and_cost(&self) -> (u64, f64) {
        let spent = self.spent();
        (spent.tokens, spent.cost)
    }

    fn spent(&self) -> Spent {
        *self.spent.lock().expect("meter")
    }

    /// The budget used up, here or in an ancestor, as a reason that names
    /// it; `None` while every limit holds.
    pub(crate) fn exceeded(&self) -> Option<String> {
        let mut chain = vec![self];
        while let Some(parent) = chain[chain.len() - 1].parent.as_deref() {
            chain.push(parent);
        }
        // Outermost first: a share carved from a used-up tree is used up
        // because the tree is, and the tree is what to name.
        chain.into_iter().rev().find_map(|m| match m.remaining() {
            Err(BudgetError::NothingLeft { limit, spent, of }) => {
                let whose =
                    if m.parent.is_some() { "this sub-agent's share" } else { "the trace tree" };
                Some(format!("budget exhausted: {limit} of {whose} ({spent} spent of {of})"))
            }
            _ => None,
        })
    }

    /// The earliest deadline of this meter and its ancestors.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        let mut deadline: Option<Instant> = None;
        let mut meter = Some(self);
        while let Some(m) = meter {
            if let Some(max) = m.limits.max_duration_ms {
                let at = m.started + Duration::from_millis(max);
                deadline = Some(deadline.map_or(at, |d| d.min(at)));
            }
            meter = m.parent.as_deref();
        }
        deadline
    }
}

/// Dollars for people: cents as usual, less than a cent with two
/// significant digits (`$0.00042`, never `$0.0000`).
pub fn dollars(usd: f64) -> String {
    if usd >= 0.01 || usd <= 0.0 {
        return format!("${usd:.2}");
    }
    let digits = (1 - usd.log10().floor() as i32).max(2) as usize;
    format!("${usd:.digits$}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(n: u64) -> Budget {
        Budget { max_tokens: Some(n), ..Budget::default() }
    }

    #[test]
    fn spending_counts_up_the_tree_and_names_the_budget_used_up() {
        let root = Meter::root(tokens(100));
        let child = root.carve(tokens(60)).unwrap();
        assert_eq!(child.limits().max_tokens, Some(60));
        child.spend(50, 0.5);
        assert_eq!(root.spent_tokens_and_cost(), (50, 0.5));
        assert_eq!(child.exceeded(), None);
        // The second child gets only what is left of the root, under the cap.
        let second = root.carve(tokens(60)).unwrap();
        assert_eq!(second.limits().max_tokens, Some(50));
        child.spend(10, 0.0);
        assert_eq!(
            child.exceeded().as_deref(),
            Some("budget exhausted: max_tokens of this sub-agent's share (60 tokens spent of 60)")
        );
        second.spend(40, 0.0);
        assert_eq!(
            second.exceeded().as_deref(),
            Some("budget exhausted: max_tokens of the trace tree (100 tokens spent of 100)")
        );
    }

    #[test]
    fn nothing_is_carved_from_an_exhausted_or_invalid_budget() {
        let root = Meter::root(Budget { max_cost_usd: Some(1.0), ..Budget::default() });
        root.spend(0, 1.25);
        assert_eq!(
            root.carve(Budget::default()).unwrap_err().to_string(),
            "budget exhausted: no max_cost_usd left to give a sub-agent ($1.25 spent of $1.00)"
        );
        let root = Meter::root(Budget::default());
        let bad = Budget { max_cost_usd: Some(-1.0), ..Budget::default() };
        assert_eq!(root.carve(bad).unwrap_err(), BudgetError::InvalidCost(-1.0));
        assert!(Budget { max_cost_usd: Some(f64::NAN), ..bad }.validate().is_err());
        assert!(root.carve(Budget::default()).unwrap().limits().is_unlimited());
    }

    #[test]
    fn the_deadline_is_the_earliest_in_the_chain() {
        let root = Meter::root(Budget { max_duration_ms: Some(1_000), ..Budget::default() });
        let child =
            root.carve(Budget { max_duration_ms: Some(60_000), ..Budget::default() }).unwrap();
        let deadline = child.deadline().unwrap();
        assert!(deadline <= Instant::now() + Duration::from_millis(1_000));
        assert!(child.limits().max_duration_ms.unwrap() <= 1_000);
        assert_eq!(Meter::root(Budget::default()).deadline(), None);
    }

    #[test]
    fn costs_under_a_cent_keep_two_significant_digits() {
        assert_eq!(dollars(1.5), "$1.50");
        assert_eq!(dollars(0.0042), "$0.0042");
        assert_eq!(dollars(0.000_123), "$0.00012");
    }
}
