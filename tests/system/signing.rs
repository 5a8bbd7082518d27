//! Signed plugins: real components from plugins/ signed with Ed25519
//! (embedded and detached), checked against `[plugins] trusted_keys`, and
//! refused under `require_signature` before they are compiled or taken
//! from the compiled-code cache.

use crate::support;

use reson::plugin::signing::{self, KeyFiles};
use reson::plugin::{CallContext, Placement, PluginInfo, PluginStatus, Runtime, SignatureStatus};
use std::path::Path;
use std::process::Output;
use support::{TestDir, replace, wait_for};

const ARGS: &str = r#"{"text":"ping"}"#;

fn key(dir: &TestDir, name: &str) -> KeyFiles {
    signing::keygen(&dir.path().join("keys"), name).unwrap()
}

/// `[plugins]` requiring a signature or not, trusting `keys`.
fn policy(require: bool, keys: &[&KeyFiles]) -> String {
    let keys: Vec<String> = keys
        .iter()
        .map(|k| {
            let name = k.public.file_stem().unwrap().to_string_lossy();
            format!("{{ name = \"{name}\", key = \"{}\" }}", k.inline)
        })
        .collect();
    format!("[plugins]\nrequire_signature = {require}\ntrusted_keys = [{}]\n", keys.join(", "))
}

fn info(rt: &Runtime, name: &str) -> PluginInfo {
    rt.plugins().into_iter().find(|p| p.name == name).expect("the plugin is listed")
}

fn failure(rt: &Runtime, name: &str) -> String {
    match info(rt, name).status {
        PluginStatus::Failed(e) => e,
        other => panic!("{name} should have failed, but is {other:?}"),
    }
}

fn install_echo(dir: &TestDir) -> std::path::PathBuf {
    dir.install(support::plugins(), "echo");
    dir.plugins().join("echo.wasm")
}

/// The component without its first section (the embedded signature).
fn strip(bytes: &[u8]) -> Vec<u8> {
    assert_eq!(bytes[8], 0, "the first section is a custom section");
    let (mut size, mut shift, mut at) = (0usize, 0, 9);
    loop {
        let byte = bytes[at];
        size |= usize::from(byte & 0x7f) << shift;
        at += 1;
        shift += 7;
        if byte & 0x80 == 0 {
            break;
        }
    }
    [&bytes[..8], &bytes[at + size..]].concat()
}

fn flip_last_byte(file: &Path) {
    let mut bytes = std::fs::read(file).unwrap();
    *bytes.last_mut().unwrap() ^= 0x01;
    std::fs::write(file, bytes).unwrap();
}

async fn call(rt: &Runtime) -> String {
    rt.call_tool("echo", ARGS, &CallContext::default()).await.unwrap().text
}

#[tokio::test]
async fn embedded_and_detached_signatures_by_a_trusted_key_load() {
    let dir = TestDir::new();
    let alice = key(&dir, "alice");
    let file = install_echo(&dir);
    let original = std::fs::read(&file).unwrap();

    let signed = signing::sign(&file, &alice.secret, false).unwrap();
    assert_eq!((signed.written.as_path(), signed.signatures), (file.as_path(), 1));
    assert_eq!(signed.key_id, alice.key_id);
    assert_eq!(strip(&std::fs::read(&file).unwrap()), original, "only a section was added");
    let rt = dir.open(&policy(true, &[&alice])).await;
    let echo = info(&rt, "echo");
    assert_eq!(echo.status, PluginStatus::Ready);
    assert_eq!(
        echo.signature,
        Some(SignatureStatus::Signed {
            signers: vec!["alice".into()],
            placement: Placement::Embedded
        })
    );
    assert_eq!(call(&rt).await, "ping");

    let dir = TestDir::new();
    let (alice, bob) = (key(&dir, "alice"), key(&dir, "bob"));
    let file = install_echo(&dir);
    let signed = signing::sign(&file, &alice.secret, true).unwrap();
    assert_eq!(signed.written, dir.plugins().join("echo.wasm.sig"));
    assert_eq!(std::fs::read(&file).unwrap(), original, "a detached signature leaves the file");
    // A second signer adds to the detached signature.
    assert_eq!(signing::sign(&file, &bob.secret, true).unwrap().signatures, 2);
    let err = signing::sign(&file, &bob.secret, true).unwrap_err().to_string();
    assert!(err.contains("already signed by key id"), "{err}");
    let rt = dir.open(&policy(true, &[&alice, &bob])).await;
    assert_eq!(
        info(&rt, "echo").signature,
        Some(SignatureStatus::Signed {
            signers: vec!["alice".into(), "bob".into()],
            placement: Placement::Detached
        })
    );
    assert_eq!(call(&rt).await, "ping");
}

#[tokio::test]
async fn a_tampered_byte_is_refused_before_compiling() {
    for detached in [false, true] {
        let dir = TestDir::new();
        let alice = key(&dir, "alice");
        let file = install_echo(&dir);
        signing::sign(&file, &alice.secret, detached).unwrap();
        flip_last_byte(&file);
        let rt = dir.open(&policy(true, &[&alice])).await;
        let error = failure(&rt, "echo");
        let placement = if detached { "detached" } else { "embedded" };
        assert!(error.contains("echo.wasm: refused before compiling, as "), "{error}");
        assert!(
            error.contains(&format!("the {placement} signature does not match the content")),
            "{error}"
        );
        assert!(rt.tools().is_empty());
    }
}

#[tokio::test]
async fn a_signature_by_an_untrusted_key_is_refused_or_warned_about() {
    let dir = TestDir::new();
    let (alice, mallory) = (key(&dir, "alice"), key(&dir, "mallory"));
    let file = install_echo(&dir);
    signing::sign(&file, &mallory.secret, false).unwrap();

    let rt = dir.open(&policy(true, &[&alice])).await;
    let error = failure(&rt, "echo");
    assert!(
        error.contains(&format!(
            "signed (embedded), but by no trusted key (key id {})",
            mallory.key_id
        )),
        "{error}"
    );

    // Not required: it loads, and the list says what is wrong.
    let rt = dir.open(&policy(false, &[&alice])).await;
    let echo = info(&rt, "echo");
    assert_eq!(echo.status, PluginStatus::Ready);
    let signature = echo.signature.unwrap();
    assert!(signature.is_bad());
    assert_eq!(
        signature,
        SignatureStatus::Untrusted {
            key_ids: vec![mallory.key_id.clone()],
            placement: Placement::Embedded
        }
    );
    assert_eq!(call(&rt).await, "ping");
}

#[tokio::test]
async fn a_stripped_signature_leaves_an_unsigned_plugin() {
    let dir = TestDir::new();
    let alice = key(&dir, "alice");
    let file = install_echo(&dir);
    signing::sign(&file, &alice.secret, false).unwrap();
    std::fs::write(&file, strip(&std::fs::read(&file).unwrap())).unwrap();
    let rt = dir.open(&policy(true, &[&alice])).await;
    assert!(
        failure(&rt, "echo").ends_with(
            "refused before compiling, as `[plugins] require_signature` is on: unsigned"
        )
    );

    // A detached signature removed: unsigned too, even though the verdict
    // on the signed pair was remembered.
    let dir = TestDir::new();
    let alice = key(&dir, "alice");
    let file = install_echo(&dir);
    signing::sign(&file, &alice.secret, true).unwrap();
    assert_eq!(info(&dir.open(&policy(true, &[&alice])).await, "echo").status, PluginStatus::Ready);
    std::fs::remove_file(signing::detached_path(&file)).unwrap();
    let rt = dir.open(&policy(true, &[&alice])).await;
    assert!(failure(&rt, "echo").ends_with("is on: unsigned"));
}

#[tokio::test]
async fn unsigned_plugins_load_unless_a_signature_is_required() {
    let dir = TestDir::new();
    let alice = key(&dir, "alice");
    install_echo(&dir);
    let rt = dir.open("").await;
    let echo = info(&rt, "echo");
    assert_eq!(
        (echo.status, echo.signature),
        (PluginStatus::Ready, Some(SignatureStatus::Unsigned))
    );
    assert_eq!(call(&rt).await, "ping");

    // The same component's compiled code is in the cache now; requiring a
    // signature refuses it all the same.
    let rt = dir.open(&policy(true, &[&alice])).await;
    assert!(failure(&rt, "echo").contains("is on: unsigned"));
    assert!(rt.call_tool("echo", ARGS, &CallContext::default()).await.is_err());
}

#[tokio::test]
async fn a_remembered_verdict_follows_the_trusted_keys() {
    let dir = TestDir::new();
    let (alice, bob) = (key(&dir, "alice"), key(&dir, "bob"));
    let file = install_echo(&dir);
    signing::sign(&file, &alice.secret, false).unwrap();
    let rt = dir.open(&policy(true, &[&alice])).await;
    assert_eq!(info(&rt, "echo").status, PluginStatus::Ready);
    drop(rt);

    // Cached compiled code and a remembered "signed by alice" do not let
    // it in once alice is no longer trusted.
    let rt = dir.open(&policy(true, &[&bob])).await;
    assert!(failure(&rt, "echo").contains("by no trusted key"));
    let rt = dir.open(&policy(true, &[&alice])).await;
    let echo = info(&rt, "echo");
    assert!(echo.from_cache, "the second load of the same bytes is a cache hit");
    assert_eq!(echo.status, PluginStatus::Ready);

    // The same key under another name: the list shows the name in force.
    let renamed = format!(
        "[plugins]\nrequire_signature = true\ntrusted_keys = [{{ name = \"a2\", key = \"{}\" }}]\n",
        alice.inline
    );
    let rt = dir.open(&renamed).await;
    assert_eq!(
        info(&rt, "echo").signature,
        Some(SignatureStatus::Signed {
            signers: vec!["a2".into()],
            placement: Placement::Embedded
        })
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_badly_signed_replacement_keeps_the_last_good_version_serving() {
    let dir = TestDir::new();
    let (alice, mallory) = (key(&dir, "alice"), key(&dir, "mallory"));
    let file = install_echo(&dir);
    signing::sign(&file, &alice.secret, false).unwrap();
    let rt = dir.open(&policy(true, &[&alice])).await;
    let _watcher = rt.watch().unwrap();
    assert_eq!(call(&rt).await, "ping");

    let staging = dir.path().join("echo-v2.wasm");
    std::fs::copy(support::test_plugins().join("echo-v2.wasm"), &staging).unwrap();
    let v2 = std::fs::read(&staging).unwrap();
    signing::sign(&staging, &mallory.secret, false).unwrap();
    replace(&std::fs::read(&staging).unwrap(), &file);
    wait_for("the refusal", || matches!(info(&rt, "echo").status, PluginStatus::Stale(_))).await;
    let PluginStatus::Stale(error) = info(&rt, "echo").status else { unreachable!() };
    assert!(error.contains("by no trusted key"), "{error}");
    assert_eq!(call(&rt).await, "ping");

    // Unsigned: refused too. Then its detached signature arrives, and the
    // watcher loads it.
    replace(&v2, &file);
    wait_for("the unsigned refusal", || {
        matches!(info(&rt, "echo").status, PluginStatus::Stale(e) if e.ends_with("is on: unsigned"))
    })
    .await;
    assert_eq!(call(&rt).await, "ping");
    signing::sign(&file, &alice.secret, true).unwrap();
    wait_for("the signed version", || info(&rt, "echo").status == PluginStatus::Ready).await;
    assert_eq!(call(&rt).await, "v2:ping");
}

fn ok(out: Output) -> String {
    let text =
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{text}");
    text
}

#[test]
fn the_cli_signs_and_lists_who_signed_what() {
    let dir = TestDir::new();
    dir.install(support::plugins(), "echo").install(support::plugins(), "fs");
    let made = ok(support::reson_cli(dir.path(), &["plugins", "keygen", "alice", "--dir", "keys"]));
    assert!(made.contains("trusted_keys = [{ name = \"alice\", key = \"ed25519:"), "{made}");
    let again = support::reson_cli(dir.path(), &["plugins", "keygen", "alice", "--dir", "keys"]);
    assert!(String::from_utf8_lossy(&again.stderr).contains("already exists"));
    ok(support::reson_cli(dir.path(), &["plugins", "keygen", "mallory", "--dir", "keys"]));
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(dir.path().join("keys/alice.key")).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "the secret key is its owner's alone");
    let bad = support::reson_cli(dir.path(), &["plugins", "keygen", "../alice", "--dir", "keys"]);
    assert!(String::from_utf8_lossy(&bad.stderr).contains("key name \"../alice\""));

    let signed =
        ok(support::reson_cli(dir.path(), &["plugins", "sign", "echo", "--key", "keys/alice.key"]));
    assert!(signed.contains("wrote plugins/echo.wasm"), "{signed}");
    let signed = ok(support::reson_cli(
        dir.path(),
        &["plugins", "sign", "plugins/fs.wasm", "--key", "keys/alice.key", "--detached"],
    ));
    assert!(signed.contains("wrote plugins/fs.wasm.sig"), "{signed}");
    std::fs::write(
        dir.path().join("reson.toml"),
        "[plugins]\nrequire_signature = true\ntrusted_keys = [\"keys/alice.pub\"]\n",
    )
    .unwrap();
    let list = ok(support::reson_cli(dir.path(), &["plugins", "list"]));
    assert!(list.contains("    signature signed by alice (embedded)"), "{list}");
    assert!(list.contains("    signature signed by alice (detached)"), "{list}");

    // Signed again by an untrusted key: still trusted (alice signed too).
    ok(support::reson_cli(dir.path(), &["plugins", "sign", "echo", "--key", "keys/mallory.key"]));
    let json = ok(support::reson_cli(dir.path(), &["plugins", "list", "--json"]));
    let json: serde_json::Value = serde_json::from_str(&json).unwrap();
    let echo = json.as_array().unwrap().iter().find(|p| p["name"] == "echo").unwrap();
    assert_eq!(echo["signature"]["state"], "signed");
    assert_eq!(echo["signature"]["signers"], serde_json::json!(["alice"]));

    // Not required, an untrusted signature is a warning.
    std::fs::remove_file(dir.plugins().join("fs.wasm.sig")).unwrap();
    ok(support::reson_cli(
        dir.path(),
        &["plugins", "sign", "fs", "--key", "keys/mallory.key", "--detached"],
    ));
    std::fs::write(
        dir.path().join("reson.toml"),
        "[plugins]\ntrusted_keys = [\"keys/alice.pub\"]\n",
    )
    .unwrap();
    let list = ok(support::reson_cli(dir.path(), &["plugins", "list"]));
    assert!(
        list.contains("    signature WARNING: signed (detached), but by no trusted key (key id "),
        "{list}"
    );
    std::fs::write(
        dir.path().join("reson.toml"),
        "[plugins]\nrequire_signature = true\ntrusted_keys = [\"keys/alice.pub\"]\n",
    )
    .unwrap();
    let list = ok(support::reson_cli(dir.path(), &["plugins", "list"]));
    assert!(list.contains("FAILED: "), "{list}");
    assert!(list.contains("is on: signed (detached), but by no trusted key"), "{list}");

    // `plugins install` brings a detached signature along.
    let staging = dir.path().join("staging");
    std::fs::create_dir(&staging).unwrap();
    for ext in ["wasm", "toml"] {
        std::fs::copy(
            support::plugins().join(format!("echo.{ext}")),
            staging.join(format!("echo.{ext}")),
        )
        .unwrap();
    }
    ok(support::reson_cli(
        dir.path(),
        &["plugins", "sign", "staging/echo.wasm", "--key", "keys/alice.key", "--detached"],
    ));
    ok(support::reson_cli(dir.path(), &["plugins", "install", "staging/echo.wasm"]));
    assert_eq!(
        std::fs::read(dir.plugins().join("echo.wasm.sig")).unwrap(),
        std::fs::read(staging.join("echo.wasm.sig")).unwrap()
    );
    let list = ok(support::reson_cli(dir.path(), &["plugins", "list"]));
    assert!(list.contains("    signature signed by alice (detached)"), "{list}");
}
