//! The command policy's reading of a line: the `shell` tool's parser, the
//! host's split, program resolution and canonical quoting, and the rules.
//! Beyond "never panics": quoting can never change a decision (a line and
//! the canonical quoting of the argv it runs are decided alike, so no
//! re-quoting slips past a deny), the tool and the host split a line into
//! the same words, and a matching deny rule always wins over an allow.
#![no_main]

use reson_agent::policy::{Decision, Rule, RuleSet, canonical_line, join, split};
use reson_fuzz::lines::line;
use reson_sandbox::policy::SearchPath;

fn rule(decision: Decision, pattern: Option<&str>) -> Rule {
    Rule {
        decision,
        tool: "shell".into(),
        pattern: pattern.map(str::to_owned),
        examples: Vec::new(),
        counter_examples: Vec::new(),
    }
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    // A pattern and a line, both from tokens, split at the first 0xff.
    let (pattern, rest) = match data.iter().position(|&b| b == 0xff) {
        Some(i) => (line(&data[..i], 40), &data[i + 1..]),
        None => ("* *".to_owned(), data),
    };
    let line = line(rest, 200);
    let path = SearchPath::default();
    let host_words = split(&line);
    let _ = canonical_line(&line, &path);
    if let Ok(words) = shell::fuzzing::parse(&line) {
        assert_eq!(
            host_words.as_ref().ok(),
            Some(&words),
            "the tool and the host split {line:?} apart"
        );
    }
    let Ok(allow) = RuleSet::compile(&[rule(Decision::Allow, Some(&pattern))]) else { return };
    let allow = allow.with_default(Decision::Deny);
    let decide = |rules: &RuleSet, line: &str| {
        rules.decide("shell", &serde_json::json!({ "command": line })).decision
    };
    let decision = decide(&allow, &line);
    if let Ok(words) = &host_words {
        let canonical = join(words);
        // The canonical quoting is a simple command whatever the original
        // was, so only an allowed original must stay allowed; a denied one
        // must never become allowed by quoting unless the original needed
        // a shell (which the canonical form no longer does).
        if decision == Decision::Allow {
            assert_eq!(decide(&allow, &canonical), Decision::Allow, "{line:?} vs {canonical:?}");
        }
        let denied =
            RuleSet::compile(&[rule(Decision::Allow, None), rule(Decision::Deny, Some(&pattern))])
                .expect("compiled once already");
        if decide(&allow, &canonical) == Decision::Allow {
            assert_eq!(
                decide(&denied, &line),
                Decision::Deny,
                "deny {pattern:?} let {line:?} through"
            );
        }
    }
});
