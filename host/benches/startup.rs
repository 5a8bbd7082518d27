//! Start-up as a user meets it: the `reson` binary run as a new process.
//!
//! - `reson plugins list` with 20 plugins whose code is in the
//!   compiled-code cache (the 11 bundled ones and 9 more providers under
//!   other names), from process start to exit; and the same load inside
//!   one process (`Runtime::open`), to tell the process's own start-up
//!   from the plugins';
//! - the same in-process load with all 20 plugins signed (embedded) and
//!   `require_signature` on: with every verdict remembered (the cached
//!   path), and with none (each component read, hashed and verified);
//! - the time to the first streamed token of a scripted `reson run`, from
//!   process start to the first word of the model's answer on stdout.
//!
//! `cargo bench -p reson --bench startup` prints criterion's figures and a
//! `== figures ==` summary measured in the same run.

#[path = "../../tests/support/mod.rs"]
mod support;

use criterion::{Criterion, criterion_group, criterion_main};
use reson::plugin::{Options, PluginStatus, Runtime, signing};
use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The providers copied under other names, to make 20 plugins: providers
/// name no tools, so the copies load beside the originals.
const COPIED: [&str; 9] = [
    "openai",
    "anthropic",
    "gemini",
    "scripted",
    "openai",
    "anthropic",
    "gemini",
    "scripted",
    "openai",
];

const PLUGINS: usize = 20;

/// The answer whose first word is timed.
const ANSWER: &str = "Ready when you are.";

/// A directory with the 20 plugins, a config and a script.
fn setup() -> support::TestDir {
    let dir = support::TestDir::new();
    let bundled = support::plugins();
    for entry in std::fs::read_dir(bundled).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "wasm") {
            let name = path.file_stem().unwrap().to_str().unwrap().to_owned();
            dir.install(bundled, &name);
        }
    }
    for (n, original) in COPIED.iter().enumerate() {
        let name = format!("{original}-{n}");
        let plugins = dir.plugins();
        std::fs::copy(
            bundled.join(format!("{original}.wasm")),
            plugins.join(format!("{name}.wasm")),
        )
        .unwrap();
        let manifest = std::fs::read_to_string(bundled.join(format!("{original}.toml"))).unwrap();
        let renamed =
            manifest.replacen(&format!("name = \"{original}\""), &format!("name = \"{name}\""), 1);
        assert_ne!(renamed, manifest, "{original}'s manifest names it");
        std::fs::write(plugins.join(format!("{name}.toml")), renamed).unwrap();
    }
    let count = std::fs::read_dir(dir.plugins())
        .unwrap()
        .filter(|e| e.as_ref().unwrap().path().extension().is_some_and(|x| x == "wasm"))
        .count();
    assert_eq!(count, PLUGINS, "the bench's plugins directory");
    let script = dir.path().join("script.json");
    std::fs::write(&script, serde_json::json!({ "turns": [{ "text": ANSWER }] }).to_string())
        .unwrap();
    dir.config(&format!(
        "plugins_dir = \"plugins\"\ncache_dir = \"cache\"\nlock_file = \"reson.lock\"\n\
         traces_dir = \"traces\"\n\n[plugins.scripted]\n\
         dirs = [{{ path = \".\", access = \"read\" }}]\nconfig = {{ script = \"{}\" }}\n",
        script.display()
    ));
    dir
}

/// A copy of `dir` whose plugins are all signed (embedded) by one key that
/// its config trusts and requires.
fn signed_copy(dir: &Path) -> support::TestDir {
    let signed = support::TestDir::new();
    for entry in std::fs::read_dir(dir.join("plugins")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "wasm" || e == "toml") {
            std::fs::copy(&path, signed.plugins().join(path.file_name().unwrap())).unwrap();
        }
    }
    let key = signing::keygen(&signed.path().join("keys"), "bench").unwrap();
    for entry in std::fs::read_dir(signed.plugins()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "wasm") {
            signing::sign(&path, &key.secret, false).unwrap();
        }
    }
    let config = std::fs::read_to_string(dir.join("reson.toml")).unwrap();
    let policy = format!(
        "[plugins]\nrequire_signature = true\ntrusted_keys = [\"{}\"]\n",
        key.public.display()
    );
    std::fs::write(
        signed.path().join("reson.toml"),
        config.replacen("[plugins.scripted]", &format!("{policy}\n[plugins.scripted]"), 1),
    )
    .unwrap();
    signed
}

fn reson(dir: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_reson"));
    command.env("RESON_CONFIG", dir.join("reson.toml")).current_dir(dir);
    command
}

/// `reson plugins list`, start to exit.
fn plugins_list(dir: &Path) -> Duration {
    let start = Instant::now();
    let out = reson(dir).args(["plugins", "list"]).output().expect("running reson");
    let took = start.elapsed();
    assert!(out.status.success(), "plugins list: {}", String::from_utf8_lossy(&out.stderr));
    let listed = String::from_utf8_lossy(&out.stdout);
    assert!(listed.contains("openai-8"), "every plugin listed:\n{listed}");
    took
}

/// `reson run` on the scripted provider: from process start to the first
/// word of the answer on stdout, and to exit.
fn first_token(dir: &Path) -> (Duration, Duration) {
    let start = Instant::now();
    let mut child = reson(dir)
        .args(["run", "Are you there?"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("running reson");
    let mut stdout = child.stdout.take().unwrap();
    let (mut seen, mut buf, mut first) = (Vec::new(), [0u8; 4096], None);
    let word = ANSWER.split(' ').next().unwrap().as_bytes();
    loop {
        let n = stdout.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        seen.extend_from_slice(&buf[..n]);
        if first.is_none() && seen.windows(word.len()).any(|w| w == word) {
            first = Some(start.elapsed());
        }
    }
    assert!(child.wait().unwrap().success(), "reson run: {}", String::from_utf8_lossy(&seen));
    (first.expect("the answer reached stdout"), start.elapsed())
}

fn bench(c: &mut Criterion) {
    let dir = setup();
    let path = dir.path().to_owned();
    // Compiles every plugin into the cache (and remembers their digests).
    let cold = plugins_list(&path);

    let tokio = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    // Every plugin loads from the compiled-code cache; in the signed copy,
    // every one is signed by the trusted key.
    let open_at = |path: &Path, signed: bool| {
        let options =
            Options::from_config(reson::config::Config::load(&path.join("reson.toml")).unwrap());
        let start = Instant::now();
        let runtime = tokio.block_on(Runtime::open(options)).expect("runtime opens");
        let took = start.elapsed();
        let plugins = runtime.plugins();
        assert_eq!(plugins.len(), PLUGINS);
        for p in &plugins {
            assert!(p.status == PluginStatus::Ready && p.from_cache, "{}: {:?}", p.name, p.status);
            assert_eq!(p.signature.as_ref().is_some_and(|s| s.is_trusted()), signed, "{}", p.name);
        }
        took
    };
    let open = || open_at(&path, false);

    let signed = signed_copy(&path);
    let signed_path = signed.path().to_owned();
    // Compiles the signed components (other bytes, other digests) once.
    let signed_cold = plugins_list(&signed_path);
    let verdicts = signed_path.join("cache/signatures");
    let open_signed = || open_at(&signed_path, true);
    let open_signed_unremembered = || {
        std::fs::remove_dir_all(&verdicts).unwrap();
        open_at(&signed_path, true)
    };

    let mut group = c.benchmark_group("startup");
    group.sample_size(20);
    group.bench_function("reson plugins list, 20 cached plugins (process)", |b| {
        b.iter_custom(|n| (0..n).map(|_| plugins_list(&path)).sum())
    });
    group.bench_function("Runtime::open, 20 cached plugins (in process)", |b| {
        b.iter_custom(|n| (0..n).map(|_| open()).sum())
    });
    group.bench_function("Runtime::open, 20 cached signed plugins, verdicts remembered", |b| {
        b.iter_custom(|n| (0..n).map(|_| open_signed()).sum())
    });
    group.bench_function("Runtime::open, 20 cached signed plugins, verifying each", |b| {
        b.iter_custom(|n| (0..n).map(|_| open_signed_unremembered()).sum())
    });
    group.bench_function("reson run, time to first token", |b| {
        b.iter_custom(|n| (0..n).map(|_| first_token(&path).0).sum())
    });
    group.finish();

    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let list = support::median((0..20).map(|_| ms(plugins_list(&path))).collect());
    let opened = support::median((0..20).map(|_| ms(open())).collect());
    let signed_opened = support::median((0..20).map(|_| ms(open_signed())).collect());
    let verified = support::median((0..20).map(|_| ms(open_signed_unremembered())).collect());
    let runs: Vec<(Duration, Duration)> = (0..20).map(|_| first_token(&path)).collect();
    let token = support::median(runs.iter().map(|r| ms(r.0)).collect());
    let exit = support::median(runs.iter().map(|r| ms(r.1)).collect());
    println!("\n== figures ==");
    println!("reson plugins list, 20 plugins, first (compiles):  {:>8.1} ms", ms(cold));
    println!(
        "reson plugins list, 20 cached plugins:             {:>8.1} ms  (target <= 50 ms)",
        list
    );
    println!("  of which Runtime::open in process:               {:>8.1} ms", opened);
    println!("reson plugins list, 20 signed, first (compiles):   {:>8.1} ms", ms(signed_cold));
    println!("Runtime::open, 20 signed, required, remembered:    {:>8.1} ms", signed_opened);
    println!("Runtime::open, 20 signed, required, verifying all: {:>8.1} ms", verified);
    println!("reson run (scripted), process start to 1st token:  {:>8.1} ms", token);
    println!("reson run (scripted), process start to exit:       {:>8.1} ms", exit);
}

criterion_group!(benches, bench);
criterion_main!(benches);
