//! Path arguments, and the file-system calls every tool shares, with errors
//! that name the path.
//!
//! The host confines the component: only the granted directories are
//! preopened, at guest paths equal to their host paths. This module only has
//! to tell the model clearly which path failed and why.

use reson_sdk::{Context, ToolError};
use std::fs::{self, Metadata};
use std::io;
use std::path::{Path, PathBuf};

/// The errno wasi-libc reports as ENOTCAPABLE: the host refused a path that
/// leads outside the preopened directories.
const ENOTCAPABLE: i32 = 76;

/// Resolves a path argument against the call's working directory. The
/// components are rebuilt so that `.` and doubled slashes do not show up in
/// messages; `..` is kept, since only the host knows where it leads.
pub fn resolve(ctx: &Context, path: &str) -> Result<PathBuf, ToolError> {
    if path.is_empty() {
        return Err(ToolError::invalid("path is empty"));
    }
    Ok(ctx.resolve(path).components().collect())
}

/// Resolves an optional directory argument, defaulting to the working
/// directory.
pub fn resolve_or_cwd(ctx: &Context, path: Option<&str>) -> Result<PathBuf, ToolError> {
    match (path, &ctx.cwd) {
        (Some(path), _) => resolve(ctx, path),
        (None, Some(cwd)) => Ok(Path::new(cwd).components().collect()),
        (None, None) => Err(ToolError::invalid(
            "no path given, and no directory is granted to this plugin to default to",
        )),
    }
}

/// The metadata of `path`, following symbolic links.
pub fn metadata(path: &Path) -> Result<Metadata, ToolError> {
    fs::metadata(path).map_err(|err| io_error(path, err))
}

/// Checks that `path` is a directory, for the tools that walk or list one.
pub fn require_dir(path: &Path) -> Result<(), ToolError> {
    if metadata(path)?.is_dir() {
        Ok(())
    } else {
        Err(ToolError::invalid(format!("{} is not a directory", path.display())))
    }
}

/// Reads a whole file as text. Directories and non-UTF-8 content are refused
/// with a message saying so, rather than an OS error or mangled text.
pub fn read_text(path: &Path) -> Result<String, ToolError> {
    let meta = metadata(path)?;
    if meta.is_dir() {
        return Err(ToolError::invalid(format!(
            "{} is a directory, not a file; use list to see its entries",
            path.display()
        )));
    }
    require_regular(path, &meta)?;
    let bytes = fs::read(path).map_err(|err| io_error(path, err))?;
    String::from_utf8(bytes).map_err(|_| {
        ToolError::invalid(format!("{} is a binary file (not UTF-8 text)", path.display()))
    })
}

/// Refuses what is neither a regular file nor a directory: opening a FIFO
/// would wait for a writer, and a device never ends.
pub fn require_regular(path: &Path, meta: &Metadata) -> Result<(), ToolError> {
    if meta.is_file() || meta.is_dir() {
        Ok(())
    } else {
        Err(ToolError::invalid(format!(
            "{} is not a regular file (a FIFO, socket or device); the file tools read and write \
             regular files only",
            path.display()
        )))
    }
}

/// Turns a failed file-system call on `path` into a message for the model.
pub fn io_error(path: &Path, err: io::Error) -> ToolError {
    let shown = path.display();
    let refused = is_refusal(&err);
    if (refused || err.kind() == io::ErrorKind::NotFound) && !within_grant(path) {
        return ToolError::Denied(format!(
            "{shown} is outside the directories granted to this plugin"
        ));
    }
    if refused {
        return ToolError::Denied(format!(
            "{shown}: permission denied ({}); the directory may be granted read-only",
            describe(&err)
        ));
    }
    match err.kind() {
        io::ErrorKind::NotFound => ToolError::Failed(format!("{shown} does not exist")),
        _ => ToolError::Failed(format!("{shown}: {}", describe(&err))),
    }
}

/// Whether the host refused the call, as opposed to the file system failing.
fn is_refusal(err: &io::Error) -> bool {
    err.raw_os_error() == Some(ENOTCAPABLE) || err.kind() == io::ErrorKind::PermissionDenied
}

/// Whether `path` lies in a granted directory, judged by whether it or an
/// ancestor can be looked at. This is needed because wasi-libc reports a path
/// under no preopened directory as not found, just like a missing file inside
/// one; and a path that escapes a grant through `..` or a symbolic link is
/// refused by the host all the way up to the point where it leaves.
fn within_grant(path: &Path) -> bool {
    for candidate in path.ancestors() {
        match fs::metadata(candidate) {
            Ok(_) => return true,
            Err(err) if is_refusal(&err) => return false,
            // Missing, or a file where a directory was expected: look higher up.
            Err(_) => {}
        }
    }
    false
}

/// An OS error's text without the `(os error N)` suffix, whose WASI errno
/// numbers mean nothing to the model.
fn describe(err: &io::Error) -> String {
    let text = err.to_string();
    match text.find(" (os error ") {
        Some(end) => text[..end].to_owned(),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx(cwd: Option<&str>) -> Context {
        Context { cwd: cwd.map(str::to_owned), ..Context::default() }
    }

    #[test]
    fn relative_paths_resolve_against_cwd_and_lose_dot_components() {
        let ctx = ctx(Some("/work/dir/"));
        assert_eq!(resolve(&ctx, "./src//lib.rs").unwrap(), Path::new("/work/dir/src/lib.rs"));
        assert_eq!(resolve(&ctx, "/abs/./x").unwrap(), Path::new("/abs/x"));
        assert_eq!(resolve(&ctx, "../up").unwrap(), Path::new("/work/dir/../up"));
        assert!(matches!(resolve(&ctx, ""), Err(ToolError::InvalidArguments(_))));
    }

    #[test]
    fn a_missing_directory_argument_defaults_to_cwd() {
        assert_eq!(resolve_or_cwd(&ctx(Some("/w/")), None).unwrap(), Path::new("/w"));
        assert_eq!(resolve_or_cwd(&ctx(Some("/w")), Some("a")).unwrap(), Path::new("/w/a"));
        assert!(matches!(resolve_or_cwd(&ctx(None), None), Err(ToolError::InvalidArguments(_))));
    }

    #[test]
    fn os_error_numbers_are_dropped_from_messages() {
        let err = io::Error::from_raw_os_error(2);
        assert!(!describe(&err).contains("os error"));
        assert_eq!(describe(&io::Error::other("boom")), "boom");
    }
}
