//! Plugins from an OCI registry: the real `reson` binary publishing the
//! bundled plugins to, and installing them from, Debian's `docker-registry`
//! on 127.0.0.1, then calling them.

use crate::support;

use reson::plugin::signing;
use reson::registry::{self, OciRef, RegistryError, Settings};
use std::path::Path;
use std::process::Output;
use support::TestDir;
use support::registry::Registry;

const ARGS: &str = r#"{"text":"ping"}"#;

/// `reson --plugins-dir DIR/plugins ARGS` in `dir`.
fn reson(dir: &TestDir, args: &[&str]) -> Output {
    let plugins = dir.plugins();
    let mut all = vec!["--plugins-dir", plugins.to_str().unwrap()];
    all.extend_from_slice(args);
    support::reson_cli(dir.path(), &all)
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Runs `args`, which must succeed; its stdout.
fn ok(dir: &TestDir, args: &[&str]) -> String {
    let out = reson(dir, args);
    assert!(out.status.success(), "{args:?}: {}{}", stdout(&out), stderr(&out));
    stdout(&out)
}

/// Runs `args`, which must fail; its stderr.
fn fails(dir: &TestDir, args: &[&str]) -> String {
    let out = reson(dir, args);
    assert!(!out.status.success(), "{args:?} succeeded: {}", stdout(&out));
    stderr(&out)
}

/// The `digest sha256:...` line `publish` and `install` print.
fn digest_in(out: &str) -> String {
    let line = out.lines().find_map(|l| l.strip_prefix("digest ")).expect("a digest line");
    assert!(line.starts_with("sha256:") && line.len() == 71, "{line}");
    line.to_owned()
}

/// A directory holding the bundled `echo`, to publish from.
fn echo_source() -> TestDir {
    let dir = TestDir::new();
    dir.install(support::plugins(), "echo");
    dir
}

fn lock(dir: &TestDir) -> String {
    std::fs::read_to_string(dir.plugins().join("reson.lock")).unwrap()
}

#[test]
fn publish_then_install_by_tag_and_by_digest_and_call_it() {
    let registry = Registry::start();
    let source = echo_source();
    let tagged = registry.url("tools/echo:1.0");
    let published = ok(&source, &["plugins", "publish", "echo", &tagged]);
    let digest = digest_in(&published);
    let pinned = registry.url(&format!("tools/echo@{digest}"));
    assert!(published.contains(&format!("reson plugins install {pinned}")), "{published}");

    let original = std::fs::read(source.plugins().join("echo.wasm")).unwrap();
    for reference in [&tagged, &pinned] {
        let fresh = TestDir::new();
        let installed = ok(&fresh, &["plugins", "install", reference]);
        assert_eq!(digest_in(&installed), digest);
        assert_eq!(std::fs::read(fresh.plugins().join("echo.wasm")).unwrap(), original);
        assert_eq!(
            std::fs::read_to_string(fresh.plugins().join("echo.toml")).unwrap(),
            std::fs::read_to_string(source.plugins().join("echo.toml")).unwrap()
        );
        let lock = lock(&fresh);
        assert!(lock.contains(&format!("reference = \"{reference}\"")), "{lock}");
        assert!(lock.contains(&format!("digest = \"{digest}\"")), "{lock}");

        assert_eq!(ok(&fresh, &["tool", "call", "echo", ARGS]).trim_end(), "ping");
        let list = ok(&fresh, &["plugins", "list"]);
        assert!(list.contains(&format!("source  {reference} ({digest})")), "{list}");
        // The runtime rewrote the lock file when it admitted echo; the
        // source survives that.
        assert!(lock_has_source(&fresh, &digest));

        // A local install over it forgets the registry.
        ok(&fresh, &["plugins", "install", source.plugins().join("echo.wasm").to_str().unwrap()]);
        assert!(!lock_has_source(&fresh, &digest), "{}", self::lock(&fresh));
    }
}

fn lock_has_source(dir: &TestDir, digest: &str) -> bool {
    let lock: toml::Table = lock(dir).parse().unwrap();
    lock.get("sources")
        .and_then(|s| s.get("echo"))
        .is_some_and(|echo| echo["digest"].as_str() == Some(digest))
}

#[tokio::test]
async fn bad_references_and_bad_artifacts_are_refused_and_install_nothing() {
    let registry = Registry::start();
    let source = echo_source();
    let published = ok(&source, &["plugins", "publish", "echo", &registry.url("tools/echo:1")]);
    let digest = digest_in(&published);
    let fresh = TestDir::new();
    let install = |reference: &str| fails(&fresh, &["plugins", "install", reference]);

    let error = install(&registry.url("tools/echo:2"));
    assert!(error.contains("tools/echo:2 is not in the registry"), "{error}");
    let error = install(&registry.url("tools/nothing:1"));
    assert!(error.contains("is not in the registry"), "{error}");
    let absent = format!("sha256:{}", "0".repeat(64));
    let error = install(&registry.url(&format!("tools/echo@{absent}")));
    assert!(error.contains("is not in the registry"), "{error}");
    let (_refusing, port) = support::registry::refusing_port();
    let error = install(&format!("oci://127.0.0.1:{port}/tools/echo:1"));
    assert!(error.contains("cannot be reached"), "{error}");
    let error = install("oci://tools/echo:1");
    assert!(error.contains("must be the registry's HOST[:PORT]"), "{error}");

    // A component as the component tools publish it: no Reson manifest.
    let wasm = std::fs::read(source.plugins().join("echo.wasm")).unwrap();
    registry
        .push_raw(
            "plain/echo:1",
            registry::WASM_CONFIG_MEDIA_TYPE,
            &[(registry::WASM_LAYER_MEDIA_TYPE, &wasm)],
            serde_json::json!({}),
        )
        .await;
    let error = install(&registry.url("plain/echo:1"));
    assert!(error.contains("no Reson plugin manifest"), "{error}");
    assert!(error.contains(registry::MANIFEST_ANNOTATION), "{error}");

    // A manifest annotation that is not a plugin manifest.
    registry
        .push_raw(
            "odd/echo:1",
            registry::WASM_CONFIG_MEDIA_TYPE,
            &[(registry::WASM_LAYER_MEDIA_TYPE, &wasm)],
            serde_json::json!({ registry::MANIFEST_ANNOTATION: "name = 1" }),
        )
        .await;
    let error = install(&registry.url("odd/echo:1"));
    assert!(error.contains("installing oci://") && error.contains("manifest"), "{error}");

    // A container image is not a plugin.
    registry
        .push_raw(
            "image/app:1",
            "application/vnd.oci.image.config.v1+json",
            &[("application/vnd.oci.image.layer.v1.tar", b"not a plugin")],
            serde_json::json!({}),
        )
        .await;
    let error = install(&registry.url("image/app:1"));
    assert!(
        error.contains("the config has media type `application/vnd.oci.image.config.v1+json`"),
        "{error}"
    );

    // A component the registry serves changed: its digest gives it away.
    let blob = registry.blob_file(&support::registry::sha256(&wasm));
    let mut tampered = std::fs::read(&blob).unwrap();
    *tampered.last_mut().unwrap() ^= 1;
    std::fs::write(&blob, tampered).unwrap();
    let error = install(&registry.url(&format!("tools/echo@{digest}")));
    assert!(
        error.contains("the component has digest sha256:")
            && error.contains(&format!("not {}", support::registry::sha256(&wasm))),
        "{error}"
    );

    // So does a manifest: asked for by digest, it must hash to it.
    let manifest = registry.blob_file(&digest);
    let text = std::fs::read_to_string(&manifest).unwrap();
    std::fs::write(&manifest, text.replace("unchanged", "changed!!")).unwrap();
    let error = install(&registry.url(&format!("tools/echo@{digest}")));
    assert!(error.contains("the manifest has digest sha256:"), "{error}");
    assert!(error.contains(&format!("not {digest}")), "{error}");

    let names: Vec<_> = std::fs::read_dir(fresh.plugins()).unwrap().collect();
    assert!(names.is_empty(), "a failed install left {names:?}");
}

#[tokio::test]
async fn a_component_over_the_cap_is_refused_before_it_is_downloaded() {
    let registry = Registry::start();
    let source = echo_source();
    let reference = registry.url("tools/echo:1");
    ok(&source, &["plugins", "publish", "echo", &reference]);
    let reference: OciRef = reference.parse().unwrap();
    let settings = Settings { max_layer_bytes: 1000, ..Settings::from_env(false) };
    let error = registry::pull(&reference, &settings).await.unwrap_err();
    let size = std::fs::metadata(source.plugins().join("echo.wasm")).unwrap().len();
    assert!(
        matches!(error, RegistryError::TooLarge { size: s, cap: 1000, .. } if s == size),
        "{error}"
    );
    let pulled = registry::pull(&reference, &Settings::from_env(false)).await.unwrap();
    assert_eq!(pulled.plugin.wasm.len() as u64, size);
    assert_eq!(pulled.plugin.signature, None);
}

#[test]
fn a_registry_behind_a_login_takes_the_credentials_from_the_environment() {
    let registry = Registry::start_with_login("alice", "s3cret");
    let source = echo_source();
    let reference = registry.url("private/echo:1");
    let login = [(registry::USER_ENV, "alice"), (registry::PASSWORD_ENV, "s3cret")];
    let wrong = [(registry::USER_ENV, "alice"), (registry::PASSWORD_ENV, "guess")];
    let run = |dir: &TestDir, args: &[&str], env: &[(&str, &str)]| {
        let plugins = dir.plugins();
        let mut all = vec!["--plugins-dir", plugins.to_str().unwrap()];
        all.extend_from_slice(args);
        support::reson_cli_env(dir.path(), &all, env)
    };

    for env in [&[][..], &wrong] {
        let refused = run(&source, &["plugins", "publish", "echo", &reference], env);
        assert!(!refused.status.success());
        let error = stderr(&refused);
        assert!(error.contains("refused access") && error.contains(registry::USER_ENV), "{error}");
    }
    let published = run(&source, &["plugins", "publish", "echo", &reference], &login);
    assert!(published.status.success(), "{}", stderr(&published));

    let user = TestDir::new();
    let refused = run(&user, &["plugins", "install", &reference], &[]);
    assert!(stderr(&refused).contains("refused access"), "{}", stderr(&refused));
    let installed = run(&user, &["plugins", "install", &reference], &login);
    assert!(installed.status.success(), "{}", stderr(&installed));
    assert_eq!(ok(&user, &["tool", "call", "echo", ARGS]).trim_end(), "ping");
}

/// `echo.wasm` changed (a custom section added), asking for `requests`.
fn echo_update(dir: &TestDir, requests: &str) {
    let wasm = dir.plugins().join("echo.wasm");
    let mut bytes = std::fs::read(&wasm).unwrap();
    // A custom section named "v2": id 0, size 3, name length 2.
    bytes.extend_from_slice(&[0, 3, 2, b'v', b'2']);
    std::fs::write(&wasm, bytes).unwrap();
    let toml = dir.plugins().join("echo.toml");
    let manifest = std::fs::read_to_string(&toml).unwrap();
    std::fs::write(&toml, format!("{manifest}\n[requests]\n{requests}\n")).unwrap();
}

#[test]
fn an_update_from_the_registry_that_asks_for_more_waits_for_accept() {
    let registry = Registry::start();
    let source = echo_source();
    let reference = registry.url("tools/echo:latest");
    ok(&source, &["plugins", "publish", "echo", &reference]);
    let user = TestDir::new();
    ok(&user, &["plugins", "install", &reference]);
    assert_eq!(ok(&user, &["tool", "call", "echo", ARGS]).trim_end(), "ping");

    echo_update(&source, "http = [\"api.example.com\"]");
    let updated = digest_in(&ok(&source, &["plugins", "publish", "echo", &reference]));
    let installed = ok(&user, &["plugins", "install", &reference]);
    assert_eq!(digest_in(&installed), updated);

    let list = ok(&user, &["plugins", "list"]);
    assert!(list.contains("changed since it was locked and now requests more"), "{list}");
    assert!(list.contains("reson plugins accept echo"), "{list}");
    let call = reson(&user, &["tool", "call", "echo", ARGS]);
    assert!(!call.status.success(), "{}", stdout(&call));
    let accepted = ok(&user, &["plugins", "accept", "echo"]);
    assert!(accepted.contains("accepted echo; it is loaded"), "{accepted}");
    assert_eq!(ok(&user, &["tool", "call", "echo", ARGS]).trim_end(), "ping");
    assert!(lock(&user).contains(&updated));
}

/// `[plugins]` requiring a signature by `key`.
fn require_signature(dir: &TestDir, key: &signing::KeyFiles) {
    dir.config(&format!(
        "[plugins]\nrequire_signature = true\n\
         trusted_keys = [{{ name = \"alice\", key = \"{}\" }}]\n",
        key.inline
    ));
}

#[test]
fn a_signed_plugin_from_the_registry_loads_and_a_tampered_one_is_refused() {
    let registry = Registry::start();
    let source = echo_source();
    let alice = signing::keygen(&source.path().join("keys"), "alice").unwrap();
    let wasm = source.plugins().join("echo.wasm");
    signing::sign(&wasm, &alice.secret, true).unwrap();
    ok(&source, &["plugins", "publish", "echo", &registry.url("signed/echo:1")]);
    flip_last_byte(&wasm);
    ok(&source, &["plugins", "publish", "echo", &registry.url("signed/echo:tampered")]);

    let user = TestDir::new();
    require_signature(&user, &alice);
    ok(&user, &["plugins", "install", &registry.url("signed/echo:1")]);
    assert!(user.plugins().join("echo.wasm.sig").is_file());
    assert_eq!(ok(&user, &["tool", "call", "echo", ARGS]).trim_end(), "ping");

    let user = TestDir::new();
    require_signature(&user, &alice);
    ok(&user, &["plugins", "install", &registry.url("signed/echo:tampered")]);
    let list = ok(&user, &["plugins", "list"]);
    assert!(list.contains("the detached signature does not match the content"), "{list}");
    let call = reson(&user, &["tool", "call", "echo", ARGS]);
    assert!(!call.status.success(), "{}", stdout(&call));
}

fn flip_last_byte(file: &Path) {
    let mut bytes = std::fs::read(file).unwrap();
    *bytes.last_mut().unwrap() ^= 0x01;
    std::fs::write(file, bytes).unwrap();
}
