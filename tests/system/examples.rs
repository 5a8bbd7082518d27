//! The examples, run as a user runs them: each binary must exit 0. They
//! check their own results with assertions, so a behaviour they show that
//! breaks fails here.

use std::path::Path;
use std::process::Command;
use std::sync::{Mutex, PoisonError};
use std::time::SystemTime;

/// When `path` was last written, if it exists.
fn modified(path: &Path) -> Option<SystemTime> {
    path.metadata().and_then(|m| m.modified()).ok()
}

/// When the newest build of library `crate_name` in `deps` was written.
fn newest_library(deps: &Path, crate_name: &str) -> Option<SystemTime> {
    let prefix = format!("lib{crate_name}-");
    std::fs::read_dir(deps)
        .ok()?
        .flatten()
        .filter(|entry| {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            name.starts_with(&prefix) && name.ends_with(".rlib")
        })
        .filter_map(|entry| modified(&entry.path()))
        .max()
}

/// What cargo sets for a test it runs, besides `CARGO_PKG_*`.
const CARGO_SETS: [&str; 7] = [
    "CARGO_MANIFEST_DIR",
    "CARGO_MANIFEST_PATH",
    "CARGO_CRATE_NAME",
    "CARGO_BIN_NAME",
    "CARGO_PRIMARY_PACKAGE",
    "CARGO_TARGET_TMPDIR",
    "OUT_DIR",
];

/// Every example, with the library (crate) whose package holds it.
const EXAMPLES: [(&str, &str); 9] = [
    ("custom_tool", "reson"),
    ("agent_session", "reson"),
    ("task_agent", "reson"),
    ("session_memory", "reson"),
    ("streaming_events", "reson"),
    ("rewind", "reson"),
    ("sub_agents", "reson"),
    ("learning", "reson"),
    ("sandbox_embed", "reson_sandbox"),
];

/// Runs example `name` and fails with its output unless it exits 0.
fn run_example(name: &str) {
    assert!(EXAMPLES.iter().any(|&(example, _)| example == name), "{name} is not in EXAMPLES");
    // One at a time: every example runs plugins/build.sh on the same
    // directory, and its copy-then-rename is not safe against itself. The
    // flag says whether this process has looked for the binaries yet.
    static BUILT: Mutex<bool> = Mutex::new(false);
    let mut built = BUILT.lock().unwrap_or_else(PoisonError::into_inner);
    // This test is `<target>/<profile dir>/deps/examples-<hash>`; the
    // examples are built into `<target>/<profile dir>/examples/`.
    let exe = std::env::current_exe().expect("the test binary's path");
    let profile_dir = exe.parent().and_then(Path::parent).expect("<target>/<profile dir>/deps");
    let binary = |name: &str| {
        profile_dir.join("examples").join(format!("{name}{}", std::env::consts::EXE_SUFFIX))
    };
    // `cargo test` builds each example after the library it links, before
    // it runs any test; a run of the system tests alone (`--test system`)
    // finds them missing, or older than a library cargo rebuilt for a
    // change they were not rebuilt for: running those would test the old
    // library. (Not "older than this binary": cargo links it and the
    // examples in either order, and the rebuild, resolved for two packages
    // rather than the workspace, compiled wasmtime again: 3 min 25 s of a
    // CI run.)
    let deps = exe.parent().expect("<target>/<profile dir>/deps");
    let stale = || {
        EXAMPLES.iter().any(|&(example, library)| {
            modified(&binary(example)).is_none_or(|built| {
                newest_library(deps, library).is_some_and(|library| built < library)
            })
        })
    };
    // Looked for once per process: each look lists the deps folder.
    if !*built && stale() {
        let profile = match profile_dir.file_name().and_then(|n| n.to_str()) {
            Some("debug") => "dev",
            Some(name) => name,
            None => panic!("no profile directory above {}", exe.display()),
        };
        // Without what cargo sets for this test process: the build that made
        // this binary had none of it, and a build script watching it (ring's
        // watches CARGO_MANIFEST_DIR) would rebuild its crate and all above
        // it, twice (here, and again in the next `cargo test`).
        let mut cargo = Command::new(env!("CARGO"));
        for (key, _) in std::env::vars_os() {
            let name = key.to_string_lossy();
            if name.starts_with("CARGO_PKG_") || CARGO_SETS.contains(&&*name) {
                cargo.env_remove(&key);
            }
        }
        let status = cargo
            .args([
                "build",
                "-p",
                "reson",
                "-p",
                "reson-sandbox",
                "--examples",
                "--profile",
                profile,
            ])
            .arg("--target-dir")
            .arg(profile_dir.parent().expect("<target>/<profile dir>"))
            .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join(".."))
            .status()
            .expect("running cargo build");
        assert!(status.success(), "building the examples failed");
    }
    *built = true;
    let binary = binary(name);
    assert!(binary.exists(), "no example binary at {}", binary.display());

    let out = Command::new(&binary).output().expect("running the example");
    assert!(
        out.status.success(),
        "example {name} exited with {}\n--- stdout\n{}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn custom_tool() {
    run_example("custom_tool");
}

#[test]
fn agent_session() {
    run_example("agent_session");
}

#[test]
fn task_agent() {
    run_example("task_agent");
}

#[test]
fn session_memory() {
    run_example("session_memory");
}

#[test]
fn streaming_events() {
    run_example("streaming_events");
}

#[test]
fn rewind() {
    run_example("rewind");
}

#[test]
fn sub_agents() {
    run_example("sub_agents");
}

#[test]
fn learning() {
    run_example("learning");
}

/// The sandbox crate alone, without the agent: grants and limits hold.
#[test]
fn sandbox_embed() {
    run_example("sandbox_embed");
}
