//! Every fuzz target, built without coverage instrumentation as the rest of
//! the suite is, runs once over each file of its seed corpus
//! (`corpus/TARGET/`): the targets keep building, and every input that once
//! crashed one (kept there with its fix) stays fixed. Fuzzing itself is
//! `tests/fuzz/run fuzz TARGET`.

use std::path::Path;
use std::process::Command;

fn replay(target: &str, binary: &str) {
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus").join(target);
    let mut seeds: Vec<_> = std::fs::read_dir(&corpus)
        .unwrap_or_else(|e| panic!("{}: {e}", corpus.display()))
        .map(|entry| entry.expect("a corpus entry").path())
        .collect();
    seeds.sort();
    assert!(!seeds.is_empty(), "{target} has no seed corpus in {}", corpus.display());
    let output = Command::new(binary)
        .args(["-timeout=60", "-rss_limit_mb=4096"])
        .args(&seeds)
        .output()
        .unwrap_or_else(|e| panic!("running {binary}: {e}"));
    let log = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{target} failed on its seed corpus:\n{log}");
    let ran = log.matches("Executed ").count();
    assert_eq!(ran, seeds.len(), "{target} ran {ran} of {} seeds:\n{log}", seeds.len());
}

macro_rules! targets {
    ($($target:ident),* $(,)?) => {$(
        #[test]
        fn $target() {
            replay(stringify!($target), env!(concat!("CARGO_BIN_EXE_", stringify!($target))));
        }
    )*};
}

targets!(
    openai,
    anthropic,
    gemini,
    command_policy,
    command_differential,
    url_pattern,
    manifest,
    lock_file,
    config,
    server_request,
    mcp_server,
    guest_output,
    component,
);
