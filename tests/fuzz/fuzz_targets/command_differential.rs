//! The command policy against bash itself: for a generated line the `shell`
//! tool accepts, whose program resolves and which a `shell` allow rule lets
//! through (a line Reson would run), bash must run exactly one command, with
//! exactly the argv the tool runs, and the rule must mean that argv. Any
//! disagreement where Reson allows is a finding.
#![no_main]

use reson_agent::policy::{CommandPattern, Decision, Rule, RuleSet, SearchPath, resolve};
use reson_fuzz::bash::Bash;
use reson_fuzz::lines::{RULES, command_line};
use std::sync::{LazyLock, Mutex};

static BASH: LazyLock<Mutex<Bash>> = LazyLock::new(|| Mutex::new(Bash::start()));

/// Lines generated, and lines Reson would run (each compared with bash).
static COUNTS: Mutex<(u64, u64)> = Mutex::new((0, 0));

/// Counts a line; every 100,000 lines, says how many were compared.
fn count(compared: bool) {
    let mut counts = COUNTS.lock().unwrap();
    counts.0 += 1;
    counts.1 += u64::from(compared);
    if counts.0.is_multiple_of(100_000) {
        eprintln!(
            "differential: {} lines, {} run by Reson and compared with bash",
            counts.0, counts.1
        );
    }
}

static RULE_SETS: LazyLock<Vec<RuleSet>> = LazyLock::new(|| {
    RULES
        .iter()
        .map(|pattern| {
            let rule = Rule {
                decision: Decision::Allow,
                tool: "shell".into(),
                pattern: Some((*pattern).into()),
                examples: Vec::new(),
                counter_examples: Vec::new(),
            };
            RuleSet::compile(&[rule]).expect("the rules compile").with_default(Decision::Deny)
        })
        .collect()
});

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else { return };
    let line = command_line(rest, 160);
    let Ok(words) = shell::fuzzing::parse(&line) else { return count(false) };
    let rules = &RULE_SETS[usize::from(pick) % RULES.len()];
    let args = serde_json::json!({ "command": line });
    if rules.decide("shell", &args).decision != Decision::Allow {
        return count(false);
    }
    // A program that does not resolve never runs, whatever the rule says.
    if resolve(&words[0], &words[1..], &SearchPath::default(), &[]).is_err() {
        return count(false);
    }
    count(true);
    let ran = BASH.lock().unwrap().run(&line);
    assert_eq!(
        ran,
        std::slice::from_ref(&words),
        "bash runs something else than Reson for {line:?} (allowed by {:?})",
        RULES[usize::from(pick) % RULES.len()]
    );
    // What the rule means on that argv: its pattern against the argv's
    // canonical line, as the program resolves on the host.
    let pattern = CommandPattern::parse(RULES[usize::from(pick) % RULES.len()]).expect("parses");
    let resolved = resolve(&ran[0][0], &ran[0][1..], &SearchPath::default(), &[])
        .expect("bash ran what Reson resolved");
    assert!(
        pattern.matches(&resolved.line()),
        "the rule allows {line:?} but does not match the argv bash runs for it, {:?}",
        ran[0]
    );
});
