//! Debian packages a test needs, installed with apt-get when missing: a
//! fresh CI machine installs them, it never skips the test.

use std::path::Path;
use std::process::Command;

/// Installs `packages` unless `present()` already holds. Test binaries
/// running at once take a file lock under `target/`, so apt-get runs once.
pub fn ensure(present: impl Fn() -> bool, packages: &[&str]) {
    if present() {
        return;
    }
    let target = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target");
    std::fs::create_dir_all(&target).unwrap();
    let lock = std::fs::File::create(target.join("apt-install.lock")).unwrap();
    lock.lock().expect("locking the package install");
    if present() {
        return;
    }
    // A fresh machine may have no package lists yet.
    apt(&["update"]);
    let mut install = vec!["install", "-y", "--no-install-recommends"];
    install.extend_from_slice(packages);
    apt(&install);
    assert!(present(), "apt-get installed {packages:?} but what the tests need is still missing");
}

fn apt(args: &[&str]) {
    let status = Command::new("apt-get")
        .args(["-o", "DPkg::Lock::Timeout=600"])
        .args(args)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .status()
        .expect("running apt-get");
    assert!(status.success(), "apt-get {args:?} failed: {status}");
}
