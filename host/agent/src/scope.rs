//! Whose a stored experience or knowledge entry is ([`Scope`]), and which
//! of them a run or an API caller sees ([`Visible`]). The experience and
//! knowledge stores, the runner and the server all decide with these.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Longest user or agent type name in a scope, in bytes.
const MAX_NAME_BYTES: usize = 128;

/// A scope that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("scope `{text}`: {why}")]
pub struct ScopeError {
    text: String,
    why: &'static str,
}

/// Who something is for; written `global`, `user:{uid}` or `agent:{type}`
/// (in files, rows and the API alike).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum Scope {
    /// Everyone's.
    #[default]
    Global,
    /// One user's.
    User(String),
    /// One agent type's (preset).
    Agent(String),
}

impl Scope {
    /// Whether it is [`Scope::Global`].
    pub fn is_global(&self) -> bool {
        *self == Scope::Global
    }

    /// Where a run or caller of `uid` saves: the user's scope, or global
    /// for one nobody owns.
    pub fn of_user(uid: Option<&str>) -> Self {
        uid.map_or(Scope::Global, |u| Scope::User(u.to_owned()))
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scope::Global => f.write_str("global"),
            Scope::User(uid) => write!(f, "user:{uid}"),
            Scope::Agent(kind) => write!(f, "agent:{kind}"),
        }
    }
}

impl std::str::FromStr for Scope {
    type Err = ScopeError;

    fn from_str(s: &str) -> Result<Self, ScopeError> {
        let error = |why| ScopeError { text: s.to_owned(), why };
        let named = |name: &str, make: fn(String) -> Scope| {
            let ok = !name.is_empty()
                && name.len() <= MAX_NAME_BYTES
                && name.chars().all(|c| !c.is_whitespace() && !c.is_control());
            ok.then(|| make(name.to_owned())).ok_or_else(|| {
                error("the name after the colon must be 1 to 128 characters without spaces")
            })
        };
        match s.trim().split_once(':') {
            None if s.trim() == "global" => Ok(Scope::Global),
            Some(("user", uid)) => named(uid, Scope::User),
            Some(("agent", kind)) => named(kind, Scope::Agent),
            _ => Err(error("use global, user:NAME or agent:TYPE")),
        }
    }
}

impl TryFrom<String> for Scope {
    type Error = ScopeError;

    fn try_from(s: String) -> Result<Self, ScopeError> {
        s.parse()
    }
}

impl From<Scope> for String {
    fn from(scope: Scope) -> String {
        scope.to_string()
    }
}

/// The scopes one run, or one API caller, sees: always the global one,
/// then a user's and one or every agent type's, or everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Visible {
    /// Everything: an admin, or a host without users.
    pub all: bool,
    /// This user's.
    pub uid: Option<String>,
    /// This agent type's; every agent type's when `None`.
    pub agent_type: Option<String>,
}

impl Visible {
    /// Every scope.
    pub fn everything() -> Self {
        Self { all: true, ..Self::default() }
    }

    /// What a run of `uid` with preset `agent_type` sees: global, its
    /// user's and its agent type's. A run nobody owns sees global and its
    /// agent type's only.
    pub fn run(uid: Option<&str>, agent_type: &str) -> Self {
        Self { all: false, uid: uid.map(str::to_owned), agent_type: Some(agent_type.to_owned()) }
    }

    /// What an API caller sees: everything for an admin; else global,
    /// every agent type's, and their own.
    pub fn caller(uid: Option<&str>, admin: bool) -> Self {
        Self { all: admin, uid: uid.map(str::to_owned), agent_type: None }
    }

    /// Whether `scope` is visible.
    pub fn sees(&self, scope: &Scope) -> bool {
        match scope {
            _ if self.all => true,
            Scope::Global => true,
            Scope::User(uid) => self.uid.as_ref() == Some(uid),
            Scope::Agent(kind) => self.agent_type.as_ref().is_none_or(|k| k == kind),
        }
    }

    /// Where what this run (or caller) saves goes: its user's scope, else
    /// the global one.
    pub fn home(&self) -> Scope {
        Scope::of_user(self.uid.as_deref())
    }

    /// The SQL condition on a `scope` column that keeps what is visible,
    /// with its three values bound from parameter `$first` on (see
    /// [`sql_values`](Self::sql_values)).
    pub(crate) fn sql_condition(first: usize) -> String {
        Self::sql_condition_on("scope", first)
    }

    /// [`sql_condition`](Self::sql_condition) on the SQL expression
    /// `scope` (a column, or one the planner cannot look up in an index).
    pub(crate) fn sql_condition_on(scope: &str, first: usize) -> String {
        let (all, user, agent) = (first, first + 1, first + 2);
        format!(
            "(${all} OR {scope} = 'global' OR {scope} = ${user} \
              OR ({scope} LIKE 'agent:%' AND (${agent}::text IS NULL OR {scope} = ${agent})))"
        )
    }

    /// The values of [`sql_condition`](Self::sql_condition)'s parameters:
    /// all, the user scope, the agent scope.
    pub(crate) fn sql_values(&self) -> (bool, Option<String>, Option<String>) {
        (
            self.all,
            self.uid.as_ref().map(|u| Scope::User(u.clone()).to_string()),
            self.agent_type.as_ref().map(|t| Scope::Agent(t.clone()).to_string()),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_parse_and_print_and_refuse_the_malformed() {
        for s in ["global", "user:alice", "agent:coder"] {
            assert_eq!(s.parse::<Scope>().unwrap().to_string(), s);
        }
        assert_eq!(" global ".parse::<Scope>().unwrap(), Scope::Global);
        for bad in [
            "",
            "user:",
            "user:a b",
            "team:x",
            "Global",
            "agent",
            &format!("user:{}", "x".repeat(129)),
        ] {
            let err = bad.parse::<Scope>().unwrap_err().to_string();
            assert!(err.contains("scope"), "{bad}: {err}");
        }
        let json = serde_json::to_string(&Scope::User("ann".into())).unwrap();
        assert_eq!(json, "\"user:ann\"");
        assert!(serde_json::from_str::<Scope>("\"team:x\"").is_err());
    }

    #[test]
    fn a_run_sees_global_its_agent_and_its_user_and_saves_to_its_user() {
        let run = Visible::run(Some("ann"), "coder");
        assert_eq!(run.home(), Scope::User("ann".into()));
        assert!(run.sees(&Scope::Global));
        assert!(run.sees(&Scope::Agent("coder".into())));
        assert!(run.sees(&Scope::User("ann".into())));
        assert!(!run.sees(&Scope::User("bob".into())));
        assert!(!run.sees(&Scope::Agent("other".into())));
        assert_eq!(Visible::run(None, "coder").home(), Scope::Global);
    }

    #[test]
    fn a_caller_sees_every_agent_type_and_an_admin_everything() {
        let ann = Visible::caller(Some("ann"), false);
        assert!(ann.sees(&Scope::Agent("any".into())) && ann.sees(&Scope::User("ann".into())));
        assert!(!ann.sees(&Scope::User("bob".into())));
        let admin = Visible::caller(None, true);
        assert!(admin.sees(&Scope::User("bob".into())));
        assert_eq!(admin.home(), Scope::Global);
    }
}
