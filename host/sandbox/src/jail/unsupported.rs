//! Platforms without a command jail (Windows, for now): every jailed
//! command is refused with an error that says how to run commands unjailed
//! on purpose, so nothing ever runs unjailed without the user saying so.

use super::{JailError, JailSpec};
use std::path::Path;

/// The platform's name, as the error says it.
const PLATFORM: &str = std::env::consts::OS;

/// Nothing to look for: the refusal comes first.
pub(super) fn missing(_bwrap: &Path) -> Option<JailError> {
    Some(JailError::Unsupported(PLATFORM))
}

/// Never made: [`build`] always refuses.
#[derive(Debug)]
pub(super) enum Guard {}

// Only the platform's backend is asked to explain a spawn.
#[cfg(not(any(target_os = "linux", target_os = "macos")))]
impl Guard {
    pub(super) fn spawn_error(&self, _error: std::io::Error) -> JailError {
        match *self {}
    }
}

pub(super) fn build(
    _bwrap: &Path,
    _spec: &JailSpec,
    _executable: &Path,
    _args: &[String],
    _env: &[(String, String)],
) -> Result<(tokio::process::Command, Guard), JailError> {
    Err(JailError::Unsupported(PLATFORM))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> JailSpec {
        JailSpec {
            dirs: Vec::new(),
            search_path: Vec::new(),
            network: Vec::new(),
            max_processes: 8,
            cwd: "/tmp".into(),
        }
    }

    #[test]
    fn a_platform_without_a_jail_refuses_and_names_the_way_out() {
        let spec = spec();
        let refused = build(Path::new("bwrap"), &spec, Path::new("/bin/true"), &[], &[]);
        let message = refused.unwrap_err().to_string();
        assert!(message.contains("no jail on"), "{message}");
        assert!(message.contains("`[sandbox] jail = \"off\"`"), "{message}");
        assert!(message.contains("warned about on every call"), "{message}");
        assert!(missing(Path::new("bwrap")).is_some(), "refused before any probe");
    }

    /// Where this backend is the platform's (Windows), the jail itself
    /// refuses, before anything is spawned.
    #[cfg(not(any(target_os = "linux", target_os = "macos")))]
    #[tokio::test]
    async fn here_every_jailed_command_is_refused() {
        let jail = crate::jail::Jail::default();
        let refused = jail.command(&spec(), Path::new("cmd.exe"), &[], &[]).await;
        let error = refused.map(|_| ()).unwrap_err();
        assert!(matches!(error, JailError::Unsupported(_)), "{error}");
        assert!(error.to_string().contains(&format!("no jail on {PLATFORM}")), "{error}");
    }
}
