//! Writing a plugin outside this repository, as a tool author would: the
//! contract from `reson wit`, a project from `reson plugins new`, built by
//! `reson plugins build`, installed by `reson plugins install` and called
//! through the real host.

use crate::support;

use std::path::Path;
use std::process::{Command, Output};

fn reson(cwd: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_reson"))
        .current_dir(cwd)
        .env_remove("RESON_CONFIG")
        .env_remove("RESON_PLUGINS_DIR")
        // Dependencies of every project built here compile once.
        .env("CARGO_TARGET_DIR", support::root().join("target/authoring"))
        .args(["--cache-dir", &support::cache_dir().to_string_lossy()])
        .args(args)
        .output()
        .expect("running reson")
}

fn ok(out: &Output) -> String {
    let text =
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{text}");
    text
}

fn failed(out: &Output) -> String {
    assert!(!out.status.success(), "expected a failure");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn the_contract_is_written_as_the_host_speaks_it() {
    let dir = tempfile::tempdir().unwrap();
    ok(&reson(dir.path(), &["wit", "contract"]));
    for entry in std::fs::read_dir(support::root().join("wit")).unwrap() {
        let entry = entry.unwrap();
        let written = std::fs::read_to_string(dir.path().join("contract").join(entry.file_name()));
        assert_eq!(
            written.unwrap(),
            std::fs::read_to_string(entry.path()).unwrap(),
            "{:?}",
            entry.file_name()
        );
    }
}

#[test]
fn a_rust_tool_is_made_built_installed_and_called_from_outside_the_repository() {
    let outside = tempfile::tempdir().unwrap();
    let project = outside.path().join("greeter");
    let project_arg = project.to_string_lossy().into_owned();
    let made = ok(&reson(
        outside.path(),
        &["plugins", "new", "hello-tool", "--lang", "rust", &project_arg],
    ));
    assert!(made.contains("reson plugins build"), "{made}");
    for file in ["reson-plugin.toml", "README.md", "Cargo.toml", "src/lib.rs", "wit/worlds.wit"] {
        assert!(project.join(file).is_file(), "{file} is missing");
    }
    let readme = std::fs::read_to_string(project.join("README.md")).unwrap();
    for command in ["reson plugins build", "reson plugins install", "reson tool call hello_tool"] {
        assert!(readme.contains(command), "{readme}");
    }
    // Nothing is copied from the repository: the SDK is a dependency.
    let cargo = std::fs::read_to_string(project.join("Cargo.toml")).unwrap();
    assert!(cargo.contains("reson-sdk = { path ="), "{cargo}");
    assert!(!project.join("sdk").exists());

    let again = reson(outside.path(), &["plugins", "new", "other", "--lang", "rust", &project_arg]);
    assert!(failed(&again).contains("is not empty"));
    let bad = reson(outside.path(), &["plugins", "new", "Bad Name", "--lang", "rust"]);
    assert!(failed(&bad).contains("cannot name a plugin"));

    let built = ok(&reson(&project, &["plugins", "build"]));
    assert!(built.contains("dist/hello-tool.wasm"), "{built}");

    let plugins = outside.path().join("plugins");
    let plugins_arg = plugins.to_string_lossy().into_owned();
    ok(&reson(
        outside.path(),
        &["--plugins-dir", &plugins_arg, "plugins", "install", &project_arg],
    ));
    assert!(plugins.join("hello-tool.wasm").is_file() && plugins.join("hello-tool.toml").is_file());

    let called = reson(
        outside.path(),
        &["--plugins-dir", &plugins_arg, "tool", "call", "hello_tool", r#"{"who":"Ada"}"#],
    );
    assert_eq!(ok(&called).trim(), "Hello, Ada!");
    let refused = reson(
        outside.path(),
        &["--plugins-dir", &plugins_arg, "tool", "call", "hello_tool", r#"{"who":" "}"#],
    );
    assert_eq!(refused.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("`who` is empty"));
}

#[test]
fn building_or_installing_what_is_not_a_project_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_string_lossy().into_owned();
    let missing = dir.path().join("no-such-project").to_string_lossy().into_owned();
    let build = reson(dir.path(), &["plugins", "build", &missing]);
    assert!(failed(&build).contains("no-such-project is not a directory"), "{}", failed(&build));
    let build = reson(dir.path(), &["plugins", "build", &path]);
    assert!(failed(&build).contains("reson-plugin.toml"), "{}", failed(&build));
    std::fs::write(dir.path().join("reson-plugin.toml"), "name = \"x\"\nversion = \"1\"\n")
        .unwrap();
    let build = reson(dir.path(), &["plugins", "build", &path]);
    assert!(failed(&build).contains("is not a plugin project"));
    let install = reson(dir.path(), &["--plugins-dir", &path, "plugins", "install", &path]);
    assert!(failed(&install).contains("is not built yet"));
}
