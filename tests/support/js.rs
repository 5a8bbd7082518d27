//! The JavaScript toolchain of the tests: componentize-js from npm, pinned
//! by `js-toolchain/package-lock.json` and installed with npm into
//! `target/toolchains/js` the first time a test needs it (again only when
//! the lock changes), and the test-only JavaScript guests built with it.

use super::root;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The componentize-js version the tests build with.
pub const COMPONENTIZE_JS: &str = "0.23.0";

const PACKAGE: &str = include_str!("js-toolchain/package.json");
const LOCK: &str = include_str!("js-toolchain/package-lock.json");

/// Marks a finished install: the lock it was made from. Written last, so an
/// install cut short is redone.
const STAMP: &str = ".installed-lock.json";

fn prefix() -> PathBuf {
    root().join("target/toolchains/js")
}

/// The toolchain's `node_modules/.bin`, installed if it is not yet (or was
/// installed from another lock). Needs `node` and `npm` on PATH.
pub fn bin_dir() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let prefix = prefix();
        let bin = prefix.join("node_modules/.bin");
        let current = std::fs::read_to_string(prefix.join(STAMP)).ok();
        if current.as_deref() == Some(LOCK) && bin.join("componentize-js").is_file() {
            return bin;
        }
        for program in ["node", "npm"] {
            let found = Command::new(program).arg("--version").output();
            assert!(
                found.is_ok_and(|o| o.status.success()),
                "the JavaScript tests need `{program}` on PATH: install Node.js 18 or newer \
                 with npm (e.g. `apt-get install nodejs npm`)"
            );
        }
        std::fs::create_dir_all(&prefix).expect("creating target/toolchains/js");
        let _ = std::fs::remove_file(prefix.join(STAMP));
        std::fs::write(prefix.join("package.json"), PACKAGE).unwrap();
        std::fs::write(prefix.join("package-lock.json"), LOCK).unwrap();
        // `npm install` follows the lock; `npm ci` would refuse it for the
        // other platforms' optional packages the lock leaves out. No package
        // of the lock has install scripts; refusing them keeps it that way.
        let status = Command::new("npm")
            .args(["install", "--no-audit", "--no-fund", "--ignore-scripts"])
            .current_dir(&prefix)
            .status()
            .expect("running npm install");
        assert!(status.success(), "npm install in {} failed", prefix.display());
        assert!(bin.join("componentize-js").is_file(), "npm installed no componentize-js");
        std::fs::write(prefix.join(STAMP), LOCK).unwrap();
        bin
    })
}

/// PATH with the toolchain first, for a `reson plugins build` of a
/// JavaScript project.
pub fn path_with_toolchain() -> std::ffi::OsString {
    let mut dirs = vec![bin_dir().to_path_buf()];
    dirs.extend(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()));
    std::env::join_paths(dirs).expect("PATH joins")
}

/// Runs componentize-js on `source` for `world` of the WIT in `wit`.
pub fn componentize(source: &Path, wit: &Path, world: &str, out: &Path) {
    let status = Command::new(bin_dir().join("componentize-js"))
        .arg(source)
        .arg("--wit")
        .arg(wit)
        .args(["--world-name", world, "--disable", "http", "fetch-event", "--out"])
        .arg(out)
        .status()
        .expect("running componentize-js");
    assert!(status.success(), "componentize-js failed on {}", source.display());
}

fn copy_dir(from: &Path, to: &Path, hash: &mut Sha256) {
    std::fs::create_dir_all(to).unwrap();
    let mut entries: Vec<_> = std::fs::read_dir(from).unwrap().map(|e| e.unwrap()).collect();
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target, hash);
        } else {
            let bytes = std::fs::read(entry.path()).unwrap();
            hash.update(entry.file_name().as_encoded_bytes());
            hash.update(&bytes);
            std::fs::write(target, bytes).unwrap();
        }
    }
}

/// The test-only JavaScript guest `tests/js-guests/NAME` (an `app.js` and
/// the `wit/` of its world, whose `reson:plugin` dependency is the
/// repository's contract), built into `target/js-guests/NAME.wasm`. A build
/// from the same sources is reused, so its compiled code stays cached too.
pub fn guest(name: &str, world: &str) -> PathBuf {
    let source = root().join("tests/js-guests").join(name);
    let work = root().join("target/js-guests").join(name);
    let wit = work.join("wit");
    let _ = std::fs::remove_dir_all(&wit);
    let mut hash = Sha256::new();
    hash.update(COMPONENTIZE_JS);
    hash.update(world);
    hash.update(std::fs::read(source.join("app.js")).unwrap());
    copy_dir(&source.join("wit"), &wit, &mut hash);
    copy_dir(&root().join("wit"), &wit.join("deps/reson-plugin"), &mut hash);
    let digest = hex::encode(hash.finalize());
    let out = work.join(format!("{name}.wasm"));
    let stamp = work.join("inputs.sha256");
    if out.is_file() && std::fs::read_to_string(&stamp).ok().as_deref() == Some(&digest) {
        return out;
    }
    componentize(&source.join("app.js"), &wit, world, &out);
    std::fs::write(stamp, digest).unwrap();
    out
}
