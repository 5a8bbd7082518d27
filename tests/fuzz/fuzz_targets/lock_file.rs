//! The lock file (`plugins.lock`, which another process may have written).
//! Beyond "never panics": recording a plugin's registry source into any lock
//! file that reads keeps every other plugin's source, and reads back.
#![no_main]

use reson_sandbox::plugin::{PluginSource, record_source, sources};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join("plugins.lock");
    std::fs::write(&path, data).expect("write the lock file");
    let Ok(before) = sources(&path) else { return };
    let source = PluginSource {
        reference: "oci://127.0.0.1:5000/tools/fuzz:1".into(),
        digest: format!("sha256:{}", "0".repeat(64)),
    };
    record_source(&path, "fuzzed", Some(source.clone())).expect("a lock that reads can be written");
    let mut after = sources(&path).expect("the written lock reads");
    assert_eq!(after.remove("fuzzed"), Some(source));
    let mut expected = before;
    expected.remove("fuzzed");
    assert_eq!(after, expected, "recording one source changed the others");
});
