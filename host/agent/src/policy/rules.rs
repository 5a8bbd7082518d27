//! Permission rules: allow, ask or deny a tool call by tool name and by a
//! pattern over one of its arguments. The host evaluates them before every
//! call; nothing a model says can change what they decide.

use globset::{GlobBuilder, GlobMatcher};
use reqwest::Url;
use reson_sandbox::policy::{
    CommandPattern, PatternError, SearchPath, exec_vector, join, resolve, split,
};
use serde::{Deserialize, Serialize};
use std::fmt;

/// What happens to a tool call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    /// Run it.
    Allow,
    /// Run it only if the user says yes.
    Ask,
    /// Do not run it; the model is told why.
    Deny,
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Allow => "allow",
            Self::Ask => "ask",
            Self::Deny => "deny",
        })
    }
}

/// How an argument pattern is read, and how the argument is put in shape
/// before it is matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatternKind {
    /// A command-line glob such as `git *`: `*` matches across spaces and
    /// slashes. It is matched against the canonical line of the argv that
    /// will run (see [`reson_sandbox::policy`]): the line split into
    /// words as the `shell` plugin splits it, the program resolved on the
    /// fixed search path (`/bin/rm`, `'rm'` and `r\m` are all `rm`; a
    /// program the search path would not give stays its absolute path),
    /// the words joined with canonical quoting. A rule that allows by
    /// pattern covers only a simple command: one that chains, pipes,
    /// redirects or substitutes (unquoted `;`, `&`, `|`, `<`, `>`, a line
    /// break, or `` ` `` / `$(` anywhere outside single quotes) never
    /// matches it, so `git *` cannot let `git status; rm -rf ~` through;
    /// nor does it cover an exec vector (`git -c ...`, `find -exec`, `sh`,
    /// ...) unless `[permissions] exec_vectors` names the program.
    Command,
    /// A path glob: `*` stays within one directory, `**` spans any number.
    /// Paths stay relative or absolute as given, but are normalized
    /// lexically (`.` and empty components dropped, `..` applied), so
    /// `src/../../etc/passwd` does not pass for a path under `src/`.
    Path,
    /// A glob over a URL's host, case-insensitive: `docs.rs`,
    /// `*.example.com` (subdomains only). Scheme, port and path play no part.
    Host,
}

impl PatternKind {
    /// The argument put in shape for matching; `None` when it has no
    /// subject (a URL without a host).
    fn subject(self, raw: &str, path: &SearchPath) -> Option<Subject> {
        let plain = |text| Subject {
            text,
            simple: true,
            exec_vector: None,
            inner: Vec::new(),
            opaque: false,
        };
        match self {
            Self::Command => Some(command_subject(raw, path)),
            Self::Path => Some(plain(normalize_path(raw))),
            Self::Host => host_of(raw).map(plain),
        }
    }
}

/// An argument in the shape rules match, with what an allow rule must know.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Subject {
    /// What patterns match.
    text: String,
    /// False for a command line that needs a shell.
    simple: bool,
    /// The program family of a command's exec vector.
    exec_vector: Option<&'static str>,
    /// For an exec vector, the commands it may run (`rm -f x` in
    /// `timeout 5 rm -f x` or `sh -c 'rm -f x'`), which deny and ask
    /// patterns also match.
    inner: Vec<String>,
    /// An exec vector whose script starts a program only known when it
    /// runs (`sh -c '"$0" -f x' rm`): every deny and ask pattern matches it.
    opaque: bool,
}

/// A `shell` command line as the canonical line of the argv that will run.
/// A line that does not split (an unbalanced quote) keeps its words as
/// written; the `shell` plugin refuses to run it.
fn command_subject(raw: &str, path: &SearchPath) -> Subject {
    let words = split(raw).ok();
    let resolved = words.as_ref().and_then(|w| resolve(&w[0], &w[1..], path, &[]).ok());
    let text = match (&resolved, &words) {
        (Some(resolved), _) => resolved.line(),
        (None, Some(words)) => join(words),
        (None, None) => {
            raw.split([' ', '\t']).filter(|w| !w.is_empty()).collect::<Vec<_>>().join(" ")
        }
    };
    let exec_vector = resolved.as_ref().and_then(exec_vector).map(|v| v.program);
    let (inner, opaque) = match (&resolved, exec_vector) {
        (Some(resolved), Some(_)) => inner_commands(resolved.args(), path),
        _ => (Vec::new(), false),
    };
    let simple = words.is_some() && is_simple_command(raw);
    Subject { text, simple, exec_vector, inner, opaque }
}

/// Every command a runner's arguments could start: from each word that
/// names a program, to the end, both in the arguments themselves and in
/// any argument that reads as a script (a `-c` script, an `eval`'s text),
/// cut at every shell operator and read again inside. Errs on the side of
/// finding too many, since only deny and ask rules use them. Also whether
/// a script starts a program no rule can read (`$0`, `$cmd`, `` `...` ``).
fn inner_commands(args: &[String], path: &SearchPath) -> (Vec<String>, bool) {
    let mut found = Vec::new();
    let mut opaque = false;
    commands_in(args, path, 0, &mut found, &mut opaque);
    (found, opaque)
}

/// How deep scripts inside scripts are read.
const MAX_SCRIPT_DEPTH: usize = 4;

fn commands_in(
    words: &[String],
    path: &SearchPath,
    depth: usize,
    found: &mut Vec<String>,
    opaque: &mut bool,
) {
    for start in 0..words.len() {
        let program = &words[start];
        if program.starts_with('-') || program.contains('=') {
            continue;
        }
        if let Ok(resolved) = resolve(program, &words[start + 1..], path, &[]) {
            found.push(resolved.line());
        }
    }
    if depth >= MAX_SCRIPT_DEPTH {
        return;
    }
    let operator = |c: char| ";&|()`{}<>\n".contains(c);
    for script in words.iter().filter(|w| w.contains(|c: char| c.is_whitespace() || operator(c))) {
        for segment in script.split(operator) {
            let inner = split(segment).unwrap_or_else(|_| {
                segment.split_whitespace().map(str::to_owned).collect::<Vec<_>>()
            });
            let program = inner.iter().find(|w| !w.contains('='));
            *opaque |= program.is_some_and(|p| p.contains('$'));
            if inner.len() > 1 || inner.first().is_some_and(|w| w != script) {
                commands_in(&inner, path, depth + 1, found, opaque);
            }
        }
    }
}

impl fmt::Display for PatternKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Command => "command",
            Self::Path => "path",
            Self::Host => "host",
        })
    }
}

/// Which argument of a tool a rule's pattern is matched against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToolArgument {
    /// The tool name.
    pub tool: &'static str,
    /// The argument (a string in the call's JSON object).
    pub argument: &'static str,
    /// How the pattern and the argument are read.
    pub kind: PatternKind,
    /// What an absent optional argument stands for.
    pub default: Option<&'static str>,
}

/// The tools whose calls a rule's pattern can match. A rule with a pattern
/// never matches a tool missing from this table.
pub const TOOL_ARGUMENTS: &[ToolArgument] = &[
    ToolArgument { tool: "shell", argument: "command", kind: PatternKind::Command, default: None },
    ToolArgument { tool: "read", argument: "path", kind: PatternKind::Path, default: None },
    ToolArgument { tool: "write", argument: "path", kind: PatternKind::Path, default: None },
    ToolArgument { tool: "edit", argument: "path", kind: PatternKind::Path, default: None },
    // The fs plugin searches and lists its first granted directory when no
    // path is given, and resolves relative paths against it: that is `.`.
    ToolArgument { tool: "glob", argument: "path", kind: PatternKind::Path, default: Some(".") },
    ToolArgument { tool: "grep", argument: "path", kind: PatternKind::Path, default: Some(".") },
    ToolArgument { tool: "list", argument: "path", kind: PatternKind::Path, default: Some(".") },
    ToolArgument { tool: "webfetch", argument: "url", kind: PatternKind::Host, default: None },
    ToolArgument { tool: "http", argument: "url", kind: PatternKind::Host, default: None },
];

fn tool_argument(tool: &str) -> Option<&'static ToolArgument> {
    TOOL_ARGUMENTS.iter().find(|a| a.tool.eq_ignore_ascii_case(tool))
}

/// What a rule's pattern is matched against for a call of `tool`: its
/// canonical command line (programs resolved on the default search path),
/// normalized path or URL host. `None` for a tool missing from
/// [`TOOL_ARGUMENTS`] or an argument that is not a string.
pub fn subject_of(tool: &str, args: &serde_json::Value) -> Option<String> {
    subject_in(tool, args, &SearchPath::default()).map(|s| s.text)
}

fn subject_in(tool: &str, args: &serde_json::Value, path: &SearchPath) -> Option<Subject> {
    let entry = tool_argument(tool)?;
    let raw = match args.get(entry.argument).filter(|v| !v.is_null()) {
        Some(value) => value.as_str()?,
        None => entry.default?,
    };
    entry.kind.subject(raw, path)
}

/// One permission rule, as written in `reson.toml` or a preset:
/// `{ decision = "allow", tool = "shell", pattern = "git *", examples = ["git status"] }`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    /// What happens to a call this rule matches.
    pub decision: Decision,
    /// A glob over the tool name: `shell`, `{read,glob}`, `*`.
    pub tool: String,
    /// A glob over the tool's argument (see [`TOOL_ARGUMENTS`] and
    /// [`PatternKind`]); without it the rule matches by tool name alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pattern: Option<String>,
    /// Subjects the rule must match, checked when the rules are compiled:
    /// arguments (`git status`, `src/main.rs`, `docs.rs` or a URL), or tool
    /// names for a rule without a pattern.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub examples: Vec<String>,
    /// Subjects the rule must not match, checked likewise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub counter_examples: Vec<String>,
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.decision, self.tool)?;
        if let Some(pattern) = &self.pattern {
            write!(f, " {pattern:?}")?;
        }
        Ok(())
    }
}

/// Rules that cannot be used, or a preset that cannot be found.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RuleError {
    /// A tool glob or an argument pattern does not parse.
    #[error("rule {} ({rule}): {source}", index + 1)]
    Pattern {
        /// Position in its list, from 0 (messages count from 1).
        index: usize,
        /// The rule as written.
        rule: String,
        /// What is wrong with the pattern.
        source: PatternError,
    },
    /// The tool glob covers tools whose arguments are read differently, so
    /// one pattern cannot mean one thing.
    #[error(
        "rule {} ({rule}): a pattern needs tools whose argument is of one kind, but `{tool}` \
         covers {kinds} tools",
        index + 1
    )]
    MixedKinds {
        /// Position in its list, from 0.
        index: usize,
        /// The rule as written.
        rule: String,
        /// The tool glob.
        tool: String,
        /// The kinds covered, e.g. `command, path`.
        kinds: String,
    },
    /// An example does not match its rule, or a counter-example does.
    #[error(
        "rule {} ({rule}): {} {example:?} {}",
        index + 1,
        if *expected_match { "example" } else { "counter-example" },
        if *expected_match { "does not match" } else { "matches" }
    )]
    Example {
        /// Position in its list, from 0.
        index: usize,
        /// The rule as written.
        rule: String,
        /// The offending example.
        example: String,
        /// True for an example, false for a counter-example.
        expected_match: bool,
    },
    /// No built-in or user preset has this name.
    #[error("unknown preset `{name}`; available: {}", available.join(", "))]
    UnknownPreset {
        /// The name asked for.
        name: String,
        /// Every preset name, sorted.
        available: Vec<String>,
    },
    /// A preset's own rules are wrong.
    #[error("preset `{name}`: {source}")]
    Preset {
        /// The preset.
        name: String,
        /// What is wrong.
        source: Box<RuleError>,
    },
}

/// The outcome of [`RuleSet::decide`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Verdict {
    /// What to do with the call.
    pub decision: Decision,
    /// Position of the deciding rule in the set; `None` for the default.
    pub rule_index: Option<usize>,
    /// The deciding rule, rendered for people.
    pub rule: Option<String>,
}

/// Which tools a compiled rule covers.
#[derive(Debug, Clone)]
pub(super) enum ToolMatcher {
    /// Tools whose name matches the glob.
    Glob(GlobMatcher),
    /// Exactly these tools.
    Named(Vec<String>),
    /// Every tool but these.
    AllBut(Vec<String>),
}

impl ToolMatcher {
    /// Tool names differing only by ASCII case are one name to the plugin
    /// runtime, so they are one name here: `deny shell` covers `Shell`.
    fn matches(&self, tool: &str) -> bool {
        match self {
            Self::Glob(glob) => glob.is_match(tool),
            Self::Named(names) => names.iter().any(|n| n.eq_ignore_ascii_case(tool)),
            Self::AllBut(names) => !names.iter().any(|n| n.eq_ignore_ascii_case(tool)),
        }
    }
}

#[derive(Debug, Clone)]
enum ArgumentMatcher {
    Command(CommandPattern),
    Path(GlobMatcher),
    Host(GlobMatcher),
}

impl ArgumentMatcher {
    fn compile(kind: PatternKind, pattern: &str) -> Result<Self, PatternError> {
        let invalid = |reason: String| PatternError { pattern: pattern.to_owned(), reason };
        let glob = |text: &str, case_insensitive: bool| {
            GlobBuilder::new(text)
                .literal_separator(true)
                .case_insensitive(case_insensitive)
                .build()
                .map(|g| g.compile_matcher())
                .map_err(|e| invalid(e.kind().to_string()))
        };
        match kind {
            PatternKind::Command => CommandPattern::parse(pattern).map(Self::Command),
            PatternKind::Path => glob(&normalize_path(pattern), false).map(Self::Path),
            // A lone colon is a port; IPv6 addresses have several.
            PatternKind::Host if pattern.contains('/') || pattern.matches(':').count() == 1 => {
                Err(invalid(
                    "a host pattern is a host such as `docs.rs` or `*.example.com`, without \
                     scheme, port or path"
                        .to_owned(),
                ))
            }
            PatternKind::Host => glob(pattern, true).map(Self::Host),
        }
    }

    fn kind(&self) -> PatternKind {
        match self {
            Self::Command(_) => PatternKind::Command,
            Self::Path(_) => PatternKind::Path,
            Self::Host(_) => PatternKind::Host,
        }
    }

    /// Whether the pattern matches; an allow pattern never covers a
    /// command that needs a shell, nor an exec vector of a program missing
    /// from `exec_vectors`.
    fn matches(&self, subject: &Subject, decision: Decision, exec_vectors: &[String]) -> bool {
        match self {
            Self::Command(pattern) if decision != Decision::Allow => {
                subject.opaque
                    || pattern.matches(&subject.text)
                    || subject.inner.iter().any(|c| pattern.matches(c))
            }
            Self::Command(pattern) => {
                pattern.matches(&subject.text)
                    && (decision != Decision::Allow
                        || subject.simple
                            && subject
                                .exec_vector
                                .is_none_or(|p| exec_vectors.iter().any(|e| e == p)))
            }
            Self::Path(glob) | Self::Host(glob) => glob.is_match(&subject.text),
        }
    }
}

#[derive(Debug, Clone)]
enum Arguments {
    /// No pattern: any call of a covered tool.
    Any,
    Matching(ArgumentMatcher),
    /// A pattern on tools outside [`TOOL_ARGUMENTS`].
    Never,
}

#[derive(Debug, Clone)]
struct CompiledRule {
    decision: Decision,
    tools: ToolMatcher,
    arguments: Arguments,
    rendered: String,
}

impl CompiledRule {
    fn compile(index: usize, rule: &Rule) -> Result<Self, RuleError> {
        let rendered = rule.to_string();
        let pattern_error = |source| RuleError::Pattern { index, rule: rendered.clone(), source };
        let tools = GlobBuilder::new(&rule.tool)
            .case_insensitive(true)
            .build()
            .map_err(|e| {
                pattern_error(PatternError {
                    pattern: rule.tool.clone(),
                    reason: e.kind().to_string(),
                })
            })?
            .compile_matcher();
        let arguments = match &rule.pattern {
            None => Arguments::Any,
            Some(pattern) => {
                let mut kinds = Vec::new();
                for entry in TOOL_ARGUMENTS.iter().filter(|a| tools.is_match(a.tool)) {
                    if !kinds.contains(&entry.kind) {
                        kinds.push(entry.kind);
                    }
                }
                match kinds[..] {
                    [] => Arguments::Never,
                    [kind] => Arguments::Matching(
                        ArgumentMatcher::compile(kind, pattern).map_err(pattern_error)?,
                    ),
                    _ => {
                        let kinds: Vec<String> = kinds.iter().map(ToString::to_string).collect();
                        return Err(RuleError::MixedKinds {
                            index,
                            rule: rendered,
                            tool: rule.tool.clone(),
                            kinds: kinds.join(", "),
                        });
                    }
                }
            }
        };
        let compiled =
            Self { decision: rule.decision, tools: ToolMatcher::Glob(tools), arguments, rendered };
        let checks = [(&rule.examples, true), (&rule.counter_examples, false)];
        for (examples, expected_match) in checks {
            if let Some(example) =
                examples.iter().find(|e| compiled.matches_example(e) != expected_match)
            {
                return Err(RuleError::Example {
                    index,
                    rule: compiled.rendered,
                    example: example.clone(),
                    expected_match,
                });
            }
        }
        Ok(compiled)
    }

    fn matches(&self, tool: &str, subject: Option<&Subject>, exec_vectors: &[String]) -> bool {
        self.tools.matches(tool)
            && match &self.arguments {
                Arguments::Any => true,
                Arguments::Matching(matcher) => {
                    subject.is_some_and(|s| matcher.matches(s, self.decision, exec_vectors))
                }
                Arguments::Never => false,
            }
    }

    /// Examples are checked with the default search path and no exec
    /// vectors allowed.
    fn matches_example(&self, example: &str) -> bool {
        match &self.arguments {
            Arguments::Any => self.tools.matches(example),
            Arguments::Matching(matcher) => matcher
                .kind()
                .subject(example, &SearchPath::default())
                .is_some_and(|s| matcher.matches(&s, self.decision, &[])),
            Arguments::Never => false,
        }
    }
}

/// Compiled permission rules. The last rule that matches a call decides it;
/// when none does, the default decision does.
#[derive(Debug, Clone)]
pub struct RuleSet {
    rules: Vec<CompiledRule>,
    default: Decision,
    search_path: SearchPath,
    exec_vectors: Vec<String>,
}

impl RuleSet {
    /// Compiles `rules` with the default decision `ask`. Fails when a
    /// pattern does not parse, when an example does not match its own rule,
    /// or when a counter-example does.
    pub fn compile(rules: &[Rule]) -> Result<Self, RuleError> {
        let rules = rules
            .iter()
            .enumerate()
            .map(|(index, rule)| CompiledRule::compile(index, rule))
            .collect::<Result<_, _>>()?;
        Ok(Self {
            rules,
            default: Decision::Ask,
            search_path: SearchPath::default(),
            exec_vectors: Vec::new(),
        })
    }

    /// The decision for calls no rule matches.
    pub fn default(&self) -> Decision {
        self.default
    }

    /// Sets the decision for calls no rule matches.
    pub fn with_default(mut self, default: Decision) -> Self {
        self.default = default;
        self
    }

    /// Resolves the programs of `shell` commands on `path` (default: the
    /// built-in search path).
    pub fn with_search_path(mut self, path: SearchPath) -> Self {
        self.search_path = path;
        self
    }

    /// Lets allow patterns cover the exec vectors of these programs
    /// (`git`, `find`, ...), which they never cover otherwise.
    pub fn with_exec_vectors(mut self, programs: Vec<String>) -> Self {
        self.exec_vectors = programs;
        self
    }

    /// `global`'s rules, then `preset`'s, so that a preset rule wins over a
    /// global one when both match. The default decision, the search path
    /// and the exec vectors are `global`'s: they are the host's choice (ask
    /// when someone can answer), not the preset's.
    pub fn layered(global: &RuleSet, preset: &RuleSet) -> RuleSet {
        let rules = global.rules.iter().chain(&preset.rules).cloned().collect();
        RuleSet { rules, ..global.clone() }
    }

    /// `self` with the default decision, search path and exec vectors of
    /// `host`, for a set layered below `host`'s rules.
    pub(super) fn with_settings_of(self, host: &RuleSet) -> Self {
        RuleSet { rules: self.rules, ..host.clone() }
    }

    /// Appends a rule denying `tools`, after every other rule so that it wins.
    pub(super) fn then_deny(mut self, tools: ToolMatcher, rendered: String) -> Self {
        self.rules.push(CompiledRule {
            decision: Decision::Deny,
            tools,
            arguments: Arguments::Any,
            rendered,
        });
        self
    }

    /// Decides a call of `tool` with JSON arguments `args`.
    pub fn decide(&self, tool: &str, args: &serde_json::Value) -> Verdict {
        let subject = subject_in(tool, args, &self.search_path);
        let matching = |r: &&CompiledRule| r.matches(tool, subject.as_ref(), &self.exec_vectors);
        match self.rules.iter().enumerate().rev().find(|(_, r)| matching(r)) {
            Some((index, rule)) => Verdict {
                decision: rule.decision,
                rule_index: Some(index),
                rule: Some(rule.rendered.clone()),
            },
            None => Verdict { decision: self.default, rule_index: None, rule: None },
        }
    }

    /// Whether `tool` is offered to the model at all: not when a rule
    /// without a pattern denies it and no later rule could allow it or ask
    /// for it. The default decision plays no part.
    pub fn offered(&self, tool: &str) -> bool {
        for rule in self.rules.iter().rev().filter(|r| r.tools.matches(tool)) {
            match (rule.decision, &rule.arguments) {
                (Decision::Deny, Arguments::Any) => return false,
                (Decision::Deny, _) | (_, Arguments::Never) => {}
                (Decision::Allow | Decision::Ask, _) => return true,
            }
        }
        true
    }
}

/// Whether `command` is one simple command for a POSIX shell: nothing that
/// chains, pipes or redirects outside quotes, and no command substitution
/// outside single quotes. Unsure (an unclosed quote) counts as not simple.
fn is_simple_command(command: &str) -> bool {
    let mut chars = command.chars().peekable();
    let mut quote = None;
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some('\''), '\'') => quote = None,
            (Some('\''), _) => {}
            (_, '\\') => {
                chars.next();
            }
            (_, '`') => return false,
            (_, '$') if chars.peek() == Some(&'(') => return false,
            (Some(_), '"') => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"') => quote = Some(c),
            (None, ';' | '&' | '|' | '<' | '>' | '\n' | '\r') => return false,
            (None, _) => {}
        }
    }
    quote.is_none()
}

/// Lexical normalization; symlinks are the sandbox's business, which only
/// preopens the granted directories.
fn normalize_path(path: &str) -> String {
    let absolute = path.starts_with('/');
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => match parts.last() {
                Some(&last) if last != ".." => {
                    parts.pop();
                }
                // The root is its own parent.
                _ if absolute => {}
                _ => parts.push(".."),
            },
            _ => parts.push(part),
        }
    }
    let joined = parts.join("/");
    match (absolute, joined.is_empty()) {
        (true, _) => format!("/{joined}"),
        (false, true) => ".".to_owned(),
        (false, false) => joined,
    }
}

/// The host of a URL, lowercase, without IPv6 brackets or a trailing dot
/// (`docs.rs.` is `docs.rs`). A URL without a scheme is read as https, so
/// that `docs.rs/x` has a host too.
fn host_of(url: &str) -> Option<String> {
    let url = url.trim();
    let parsed =
        if url.contains("://") { Url::parse(url) } else { Url::parse(&format!("https://{url}")) }
            .ok()?;
    let host = parsed.host_str()?.trim_start_matches('[').trim_end_matches(']');
    let host = host.strip_suffix('.').unwrap_or(host);
    (!host.is_empty()).then(|| host.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;
    use Decision::{Allow, Ask, Deny};
    use serde_json::{Value, json};

    fn rule(decision: Decision, tool: &str, pattern: Option<&str>) -> Rule {
        Rule {
            decision,
            tool: tool.to_owned(),
            pattern: pattern.map(str::to_owned),
            examples: Vec::new(),
            counter_examples: Vec::new(),
        }
    }

    /// Found by the fuzz target `command_policy`: the canonical quoting left
    /// a carriage return bare, and a bare one makes a line need a shell, so
    /// a line an allow rule let through was refused in its canonical form.
    #[test]
    fn a_line_and_its_canonical_quoting_are_decided_alike() {
        let rules = RuleSet::compile(&[rule(Allow, "shell", Some("ls *"))]).unwrap();
        let rules = rules.with_default(Deny);
        let line = "ls ab \\\r x";
        let canonical = subject_of("shell", &json!({ "command": line })).unwrap();
        assert_eq!(canonical, "ls ab '\r' x");
        for command in [line, canonical.as_str()] {
            assert_eq!(rules.decide("shell", &json!({ "command": command })).decision, Allow);
        }
    }

    #[test]
    fn precedence_table() {
        let shell = |c: &str| json!({ "command": c });
        let path = |p: &str| json!({ "path": p });
        let url = |u: &str| json!({ "url": u });
        // (what, global rules, preset rules, tool, args, decision, rule index)
        type Row<'a> = (&'a str, Vec<Rule>, Vec<Rule>, &'a str, Value, Decision, Option<usize>);
        let rows: Vec<Row> = vec![
            ("no rules: default", vec![], vec![], "shell", shell("ls"), Ask, None),
            (
                "no rule matches: default",
                vec![rule(Allow, "read", None)],
                vec![],
                "write",
                path("a"),
                Ask,
                None,
            ),
            (
                "global applies when the preset is silent",
                vec![rule(Allow, "read", None)],
                vec![rule(Deny, "shell", None)],
                "read",
                path("a"),
                Allow,
                Some(0),
            ),
            (
                "preset wins over global",
                vec![rule(Deny, "write", None)],
                vec![rule(Allow, "write", Some("src/**"))],
                "write",
                path("src/a.rs"),
                Allow,
                Some(1),
            ),
            (
                "global still decides what the preset rule does not match",
                vec![rule(Deny, "write", None)],
                vec![rule(Allow, "write", Some("src/**"))],
                "write",
                path("docs/a.md"),
                Deny,
                Some(0),
            ),
            (
                "last match wins: narrower deny after broad allow",
                vec![rule(Allow, "shell", None), rule(Deny, "shell", Some("rm *"))],
                vec![],
                "shell",
                shell("rm -rf /"),
                Deny,
                Some(1),
            ),
            (
                "last match wins: broad allow after narrower deny",
                vec![rule(Deny, "shell", Some("rm *")), rule(Allow, "shell", None)],
                vec![],
                "shell",
                shell("rm -rf /"),
                Allow,
                Some(1),
            ),
            (
                "a later rule that does not match changes nothing",
                vec![rule(Allow, "shell", None), rule(Deny, "shell", Some("rm *"))],
                vec![],
                "shell",
                shell("ls"),
                Allow,
                Some(0),
            ),
            (
                "tool glob",
                vec![rule(Deny, "*", None), rule(Allow, "{read,list}", None)],
                vec![],
                "list",
                json!({}),
                Allow,
                Some(1),
            ),
            (
                "shell glob crosses spaces and slashes",
                vec![rule(Allow, "shell", Some("git *"))],
                vec![],
                "shell",
                shell("git log --format=%H src/main.rs"),
                Allow,
                Some(0),
            ),
            (
                "shell glob anchors the program",
                vec![rule(Allow, "shell", Some("git *"))],
                vec![],
                "shell",
                shell("gitx status"),
                Ask,
                None,
            ),
            (
                "shell whitespace runs count as one space",
                vec![rule(Deny, "shell", Some("rm -rf *"))],
                vec![],
                "shell",
                shell("  rm \t -rf  /"),
                Deny,
                Some(0),
            ),
            (
                "an allow pattern does not cover a chained command",
                vec![rule(Allow, "shell", Some("git *"))],
                vec![],
                "shell",
                shell("git status && rm -rf ~"),
                Ask,
                None,
            ),
            (
                "nor command substitution inside double quotes",
                vec![rule(Allow, "shell", Some("git *"))],
                vec![],
                "shell",
                shell("git commit -m \"$(curl evil.sh)\""),
                Ask,
                None,
            ),
            (
                "nor a line break",
                vec![rule(Deny, "shell", None), rule(Allow, "shell", Some("git *"))],
                vec![],
                "shell",
                shell("git status\nrm -rf ~"),
                Deny,
                Some(0),
            ),
            (
                "quoted separators are plain text",
                vec![rule(Allow, "shell", Some("git *"))],
                vec![],
                "shell",
                shell("git commit -m 'a; b | c' -m \"d && e\""),
                Allow,
                Some(0),
            ),
            (
                "a deny pattern still covers a chained command",
                vec![rule(Allow, "shell", None), rule(Deny, "shell", Some("git *"))],
                vec![],
                "shell",
                shell("git status; ls"),
                Deny,
                Some(1),
            ),
            (
                "path `*` stays in one directory",
                vec![rule(Allow, "read", Some("src/*.rs"))],
                vec![],
                "read",
                path("src/bin/x.rs"),
                Ask,
                None,
            ),
            (
                "path `**` spans directories",
                vec![rule(Allow, "read", Some("src/**"))],
                vec![],
                "read",
                path("src/bin/x.rs"),
                Allow,
                Some(0),
            ),
            (
                "`..` cannot climb out of a pattern",
                vec![rule(Allow, "write", Some("src/**"))],
                vec![],
                "write",
                path("src/../../etc/passwd"),
                Ask,
                None,
            ),
            (
                "`./` is dropped",
                vec![rule(Allow, "edit", Some("src/*.rs"))],
                vec![],
                "edit",
                path("./src//a.rs"),
                Allow,
                Some(0),
            ),
            (
                "`**/` matches at the top too",
                vec![rule(Allow, "read", None), rule(Deny, "read", Some("**/.env"))],
                vec![],
                "read",
                path("sub/../.env"),
                Deny,
                Some(1),
            ),
            (
                "absolute paths",
                vec![rule(Allow, "write", Some("/work/**"))],
                vec![],
                "write",
                path("/work/a/b"),
                Allow,
                Some(0),
            ),
            (
                "an absent optional path is the first granted directory",
                vec![rule(Allow, "grep", Some("."))],
                vec![],
                "grep",
                json!({ "pattern": "x" }),
                Allow,
                Some(0),
            ),
            (
                "subdomain pattern, case-insensitive",
                vec![rule(Allow, "webfetch", Some("*.example.com"))],
                vec![],
                "webfetch",
                url("https://API.Example.com/v1?x=1"),
                Allow,
                Some(0),
            ),
            (
                "subdomain pattern excludes the domain itself",
                vec![rule(Allow, "webfetch", Some("*.example.com"))],
                vec![],
                "webfetch",
                url("https://example.com/"),
                Ask,
                None,
            ),
            (
                "host only: the path does not count",
                vec![rule(Allow, "http", Some("docs.rs"))],
                vec![],
                "http",
                url("https://evil.com/docs.rs"),
                Ask,
                None,
            ),
            (
                "host only: userinfo, port and trailing dot do not fool it",
                vec![rule(Deny, "webfetch", Some("evil.com"))],
                vec![],
                "webfetch",
                url("http://docs.rs@EVIL.com.:8080/x"),
                Deny,
                Some(0),
            ),
            (
                "pattern on an unknown tool never matches",
                vec![rule(Allow, "mytool", Some("*"))],
                vec![],
                "mytool",
                path("x"),
                Ask,
                None,
            ),
            (
                "no pattern on an unknown tool matches by name",
                vec![rule(Allow, "mytool", None)],
                vec![],
                "mytool",
                path("x"),
                Allow,
                Some(0),
            ),
            (
                "an argument that is not a string never matches a pattern",
                vec![rule(Deny, "read", Some("**"))],
                vec![],
                "read",
                json!({ "path": 7 }),
                Ask,
                None,
            ),
        ];
        for (what, global, preset, tool, args, decision, rule_index) in rows {
            let global = RuleSet::compile(&global).unwrap();
            let preset = RuleSet::compile(&preset).unwrap();
            let verdict = RuleSet::layered(&global, &preset).decide(tool, &args);
            assert_eq!((verdict.decision, verdict.rule_index), (decision, rule_index), "{what}");
            assert_eq!(verdict.rule.is_some(), rule_index.is_some(), "{what}");
        }
    }

    // Command lines here name Unix paths (`/bin/rm`), which are relative on Windows.
    #[cfg(unix)]
    #[test]
    fn command_rules_match_the_argv_that_runs() {
        let decide =
            |set: &RuleSet, line: &str| set.decide("shell", &json!({ "command": line })).decision;
        let deny_rm =
            RuleSet::compile(&[rule(Allow, "shell", None), rule(Deny, "shell", Some("rm *"))])
                .unwrap();
        for line in [
            "rm -f x",
            "'rm' -f x",
            r"r\m -f x",
            "\"rm\" -f x",
            "/bin/rm -f x",
            "/usr/bin/../bin/rm -f x",
            "/usr//bin/./rm -f x",
            " rm\t-f  x",
        ] {
            assert_eq!(decide(&deny_rm, line), Deny, "{line}");
        }
        let allow_git = RuleSet::compile(&[rule(Allow, "shell", Some("git *"))]).unwrap();
        assert_eq!(decide(&allow_git, "git status"), Allow);
        assert_eq!(decide(&allow_git, "'git' log -p"), Allow);
        for line in [
            "git -c alias.x=!touch status",
            "'git' '-c' 'alias.x=!touch' x",
            "git -c core.pager=touch log",
            "git --exec-path=/tmp status",
            "git config core.fsmonitor touch",
            "git st",
            "git fetch --upload-pack=touch origin",
        ] {
            assert_eq!(decide(&allow_git, line), Ask, "{line}");
        }
        // Deny and ask patterns still cover exec vectors, and the commands
        // inside them.
        let deny_git =
            RuleSet::compile(&[rule(Allow, "shell", None), rule(Deny, "shell", Some("git *"))])
                .unwrap();
        assert_eq!(decide(&deny_git, "git -c alias.x=!touch x"), Deny);
        for line in [
            "env rm -f x",
            "env A=b /bin/rm -f x",
            "timeout 5 rm -f x",
            "nice -n 5 nohup rm -f x",
            "sh -c 'rm -f x'",
            "bash -c 'cd / && rm -f x'",
            r"find . -exec rm -f {} \;",
            "xargs rm -f",
            // Operators without spaces, substitutions, scripts in scripts.
            "sh -c 'true;rm -f x'",
            "sh -c 'true&&rm -f x'",
            "bash -c 'echo $(rm -f x)'",
            "bash -c 'echo `rm -f x`'",
            "sh -c '{ rm -f x; }'",
            r#"sh -c 'eval "rm -f x"'"#,
            "sh -c 'for f in *; do rm -f \"$f\"; done'",
            // The program is only known when the script runs.
            r#"sh -c '"$0" -f x' rm"#,
            "sh -c 'p=rm; $p -f x'",
            // Newlines and NULs inside a word are still inside the word.
            "rm -f 'a\nb'",
            "rm -f 'a\u{0}b'",
            "sh -c 'true\nrm -f x'",
        ] {
            assert_eq!(decide(&deny_rm, line), Deny, "{line}");
        }
        assert_eq!(decide(&deny_rm, "echo rm -f x"), Allow);
        assert_eq!(decide(&deny_rm, "sh -c 'echo $HOME; ls -l'"), Allow);
        // A program the search path would not give keeps its path.
        let other_git = std::env::temp_dir().join("git");
        assert_eq!(decide(&allow_git, &format!("{} status", other_git.display())), Ask);
        let find = RuleSet::compile(&[rule(Allow, "shell", Some("find *"))]).unwrap();
        assert_eq!(decide(&find, "find . -name x"), Allow);
        assert_eq!(decide(&find, r"find . -exec touch x \;"), Ask);
        let find = find.with_exec_vectors(vec!["find".into()]);
        assert_eq!(decide(&find, r"find . -exec touch x \;"), Allow);
        let layered = RuleSet::layered(&find, &RuleSet::compile(&[]).unwrap());
        assert_eq!(decide(&layered, r"find . -exec touch x \;"), Allow);
    }

    #[test]
    fn verdict_names_the_rule_and_the_default_is_the_hosts() {
        let global =
            RuleSet::compile(&[rule(Allow, "shell", Some("git *"))]).unwrap().with_default(Deny);
        let preset = RuleSet::compile(&[]).unwrap().with_default(Allow);
        let set = RuleSet::layered(&global, &preset);
        let verdict = set.decide("shell", &json!({ "command": "git status" }));
        assert_eq!(verdict.rule.as_deref(), Some(r#"allow shell "git *""#));
        assert_eq!(set.decide("shell", &json!({ "command": "ls" })).decision, Deny);
    }

    fn compile_error(rules: &[Rule]) -> String {
        RuleSet::compile(rules).unwrap_err().to_string()
    }

    #[test]
    fn examples_and_counter_examples_are_checked() {
        let git = |examples: &[&str], counter: &[&str]| Rule {
            examples: examples.iter().map(|e| e.to_string()).collect(),
            counter_examples: counter.iter().map(|e| e.to_string()).collect(),
            ..rule(Allow, "shell", Some("git *"))
        };
        let fine = rule(Allow, "read", None);
        let ok = git(&["git status", "git  log -p"], &["rm -rf /", "git status; rm -rf /"]);
        assert!(RuleSet::compile(&[ok]).is_ok());
        assert_eq!(
            compile_error(&[fine.clone(), fine.clone(), git(&["gti status"], &[])]),
            r#"rule 3 (allow shell "git *"): example "gti status" does not match"#
        );
        assert_eq!(
            compile_error(&[git(&["git status"], &["git push --force"])]),
            r#"rule 1 (allow shell "git *"): counter-example "git push --force" matches"#
        );
        // An allow pattern covers simple commands only, and examples say so.
        assert_eq!(
            compile_error(&[git(&["git add . && git commit"], &[])]),
            r#"rule 1 (allow shell "git *"): example "git add . && git commit" does not match"#
        );
        let err = RuleSet::compile(&[git(&["x"], &[])]).unwrap_err();
        let RuleError::Example { index: 0, example, expected_match: true, .. } = err else {
            panic!("{err:?}");
        };
        assert_eq!(example, "x");
        // Without a pattern, examples are tool names.
        let tools = Rule { examples: vec!["read".into()], ..rule(Deny, "{read,grep}", None) };
        assert!(RuleSet::compile(&[tools]).is_ok());
        // Host examples may be hosts or URLs.
        let host = Rule {
            examples: vec!["docs.rs".into(), "https://DOCS.rs/serde".into()],
            counter_examples: vec!["https://evil.com/docs.rs".into()],
            ..rule(Allow, "webfetch", Some("docs.rs"))
        };
        assert!(RuleSet::compile(&[host]).is_ok());
    }

    #[test]
    fn bad_patterns_are_config_errors() {
        let err = compile_error(&[rule(Allow, "shell", Some("a["))]);
        assert!(err.starts_with(r#"rule 1 (allow shell "a["): invalid pattern `a[`: "#), "{err}");
        let err = compile_error(&[rule(Deny, "{read", None)]);
        assert!(err.starts_with("rule 1 (deny {read): invalid pattern `{read`: "), "{err}");
        let err = compile_error(&[rule(Allow, "webfetch", Some("https://docs.rs"))]);
        assert!(err.contains("without scheme, port or path"), "{err}");
        assert!(RuleSet::compile(&[rule(Allow, "webfetch", Some("docs.rs:443"))]).is_err());
        assert!(RuleSet::compile(&[rule(Allow, "webfetch", Some("::1"))]).is_ok());
        assert_eq!(
            compile_error(&[rule(Deny, "*", Some("**/.env"))]),
            concat!(
                r#"rule 1 (deny * "**/.env"): "#,
                "a pattern needs tools whose argument is of one kind, ",
                "but `*` covers command, path, host tools"
            )
        );
    }

    #[test]
    fn pattern_on_unknown_tool_never_matches() {
        let unknown =
            Rule { counter_examples: vec!["anything".into()], ..rule(Deny, "mytool", Some("*")) };
        let set = RuleSet::compile(&[rule(Allow, "mytool", None), unknown.clone()]).unwrap();
        let verdict = set.decide("mytool", &json!({ "path": "x", "command": "x", "url": "x" }));
        assert_eq!((verdict.decision, verdict.rule_index), (Allow, Some(0)));
        assert!(set.offered("mytool"));
        let with_example = Rule { examples: vec!["anything".into()], ..unknown };
        assert_eq!(
            compile_error(&[with_example]),
            r#"rule 1 (deny mytool "*"): example "anything" does not match"#
        );
    }

    #[test]
    fn offered_only_without_a_later_way_in() {
        let offered = |rules: &[Rule], tool: &str| RuleSet::compile(rules).unwrap().offered(tool);
        assert!(offered(&[], "shell"));
        assert!(offered(&[rule(Allow, "shell", None)], "shell"));
        assert!(!offered(&[rule(Deny, "shell", None)], "shell"));
        assert!(offered(&[rule(Deny, "shell", None)], "read"));
        assert!(!offered(&[rule(Allow, "shell", None), rule(Deny, "*", None)], "shell"));
        assert!(offered(&[rule(Deny, "shell", None), rule(Ask, "shell", None)], "shell"));
        assert!(offered(
            &[rule(Deny, "shell", None), rule(Allow, "shell", Some("git *"))],
            "shell"
        ));
        assert!(offered(&[rule(Deny, "shell", Some("rm *"))], "shell"));
        assert!(!offered(
            &[rule(Deny, "mytool", None), rule(Allow, "mytool", Some("*"))],
            "mytool"
        ));
        let deny_default = RuleSet::compile(&[]).unwrap().with_default(Deny);
        assert!(deny_default.offered("shell"));
        let all_but = RuleSet::compile(&[rule(Allow, "*", None)])
            .unwrap()
            .then_deny(ToolMatcher::AllBut(vec!["read".into()]), "deny all but read".into());
        assert!(all_but.offered("read") && !all_but.offered("write"));
    }

    #[test]
    fn tool_names_differing_only_by_case_are_one_name_to_the_rules() {
        let set = RuleSet::compile(&[
            rule(Allow, "*", None),
            rule(Deny, "shell", Some("rm *")),
            rule(Deny, "{web*,http}", None),
        ])
        .unwrap();
        let decide = |tool, args| set.decide(tool, &args).decision;
        assert_eq!(decide("SHELL", json!({ "command": "rm -rf x" })), Deny);
        assert_eq!(decide("Shell", json!({ "command": "ls" })), Allow);
        assert_eq!(decide("WebFetch", json!({ "url": "a.b" })), Deny);
        assert_eq!(decide("HTTP", json!({ "url": "a.b" })), Deny);
        let all_but = RuleSet::compile(&[rule(Allow, "*", None)])
            .unwrap()
            .then_deny(ToolMatcher::AllBut(vec!["read".into()]), "deny all but read".into());
        assert!(all_but.offered("Read") && !all_but.offered("Write"));
    }

    #[test]
    fn subjects() {
        assert_eq!(
            subject_of("shell", &json!({ "command": " git\t status " })).unwrap(),
            "git status"
        );
        assert_eq!(subject_of("read", &json!({ "path": "a/./b/../c/" })).unwrap(), "a/c");
        assert_eq!(subject_of("read", &json!({ "path": "../../x" })).unwrap(), "../../x");
        assert_eq!(subject_of("read", &json!({ "path": "/../etc" })).unwrap(), "/etc");
        assert_eq!(subject_of("list", &json!({ "path": null })).unwrap(), ".");
        assert_eq!(subject_of("read", &json!({})), None);
        assert_eq!(subject_of("webfetch", &json!({ "url": "docs.rs/x" })).unwrap(), "docs.rs");
        assert_eq!(subject_of("http", &json!({ "url": "http://[::1]:3000/" })).unwrap(), "::1");
        assert_eq!(subject_of("webfetch", &json!({ "url": "file:///etc/passwd" })), None);
        assert_eq!(subject_of("goal", &json!({ "path": "x" })), None);
    }

    #[test]
    fn rules_parse_from_toml() {
        #[derive(Deserialize)]
        struct Doc {
            rules: Vec<Rule>,
        }
        let doc: Doc = toml::from_str(
            r#"rules = [{ decision = "allow", tool = "shell", pattern = "git *",
                          examples = ["git status"], counter_examples = ["rm -rf /"] }]"#,
        )
        .unwrap();
        assert_eq!(doc.rules[0].to_string(), r#"allow shell "git *""#);
        assert!(RuleSet::compile(&doc.rules).is_ok());
        let err = toml::from_str::<Doc>(r#"rules = [{ decision = "maybe", tool = "x" }]"#);
        assert!(err.is_err());
    }
}
