//! A command's working directory, opened and checked to lie in a granted
//! directory.
//!
//! On Linux the command starts in the directory opened here, through
//! `/proc/self/fd`, so a link swapped in after the check cannot move it.
//! Other platforms have no such path to a descriptor; there the command
//! starts at the checked real path, and the jail (which shows nothing
//! outside the grant) is what holds if the path is swapped meanwhile.

use crate::contract::bindings::tool::reson::plugin::process::ProcessError;
use std::path::{Path, PathBuf};

/// An open working directory.
pub(super) struct WorkDir {
    #[cfg(target_os = "linux")]
    file: std::fs::File,
    /// Where the directory really is, as opened.
    pub(super) real: Option<PathBuf>,
    /// Whether the directory really opened lies outside the granted one.
    pub(super) escaped: bool,
}

impl WorkDir {
    /// Opens `path`, which must lie in `root` once links are followed.
    pub(super) fn open(path: &Path, root: Option<&Path>) -> Result<Self, ProcessError> {
        let error = |e: std::io::Error| ProcessError::Spawn(format!("working directory: {e}"));
        #[cfg(target_os = "linux")]
        let dir = {
            use std::os::unix::fs::OpenOptionsExt;
            let file = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC)
                .open(path)
                .map_err(error)?;
            let dir = Self { file, real: None, escaped: false };
            Self { real: std::fs::read_link(dir.path()).ok(), ..dir }
        };
        #[cfg(not(target_os = "linux"))]
        let dir = {
            let real = path.canonicalize().map_err(error)?;
            if !real.is_dir() {
                return Err(error(std::io::Error::other("not a directory")));
            }
            Self { real: Some(real), escaped: false }
        };
        let escaped =
            root.is_some_and(|root| !dir.real.as_ref().is_some_and(|r| r.starts_with(root)));
        Ok(Self { escaped, ..dir })
    }

    /// The path a child starts in.
    #[cfg(target_os = "linux")]
    pub(super) fn path(&self) -> PathBuf {
        use std::os::fd::AsRawFd;
        PathBuf::from(format!("/proc/self/fd/{}", self.file.as_raw_fd()))
    }

    /// The path a child starts in.
    #[cfg(not(target_os = "linux"))]
    pub(super) fn path(&self) -> PathBuf {
        self.real.clone().unwrap_or_default()
    }
}
