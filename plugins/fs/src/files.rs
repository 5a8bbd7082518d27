//! The tools that work on one file or directory: `read`, `write`, `edit` and
//! `list`.

use crate::paths::{self, io_error};
use crate::text::{self, plural};
use reson_sdk::{Context, Output, ToolError};
use schemars::JsonSchema;
use serde::Deserialize;
use std::fs;
use std::io;
use std::path::Path;

/// Arguments of `read`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadArgs {
    /// The file to read: absolute, or relative to the first granted directory.
    path: String,
    /// 1-based number of the first line to show (default 1).
    #[schemars(range(min = 1))]
    offset: Option<usize>,
    /// How many lines to show at most (default 2000).
    #[schemars(range(min = 1))]
    limit: Option<usize>,
}

pub fn read(args: ReadArgs, ctx: &Context) -> Result<Output, ToolError> {
    let path = paths::resolve(ctx, &args.path)?;
    let content = paths::read_text(&path)?;
    text::number_lines(&content, args.offset, args.limit, &path).map(Output::text)
}

/// Arguments of `write`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteArgs {
    /// The file to write: absolute, or relative to the first granted
    /// directory. Missing parent directories are created.
    path: String,
    /// The complete new content of the file.
    content: String,
}

pub fn write(args: WriteArgs, ctx: &Context) -> Result<Output, ToolError> {
    let path = paths::resolve(ctx, &args.path)?;
    if path.is_dir() {
        return Err(ToolError::invalid(format!(
            "{} is a directory; give the path of a file",
            path.display()
        )));
    }
    if let Ok(meta) = fs::metadata(&path) {
        paths::require_regular(&path, &meta)?;
    }
    create_parents(&path)?;
    fs::write(&path, &args.content).map_err(|err| io_error(&path, err))?;
    Ok(Output::text(format!("wrote {} to {}", plural(args.content.len(), "byte"), path.display())))
}

/// Creates the missing directories above `path`. Errors name `path` itself:
/// it is the path the model gave, and the one to call outside the grant.
fn create_parents(path: &Path) -> Result<(), ToolError> {
    let Some(parent) = path.parent().filter(|parent| !parent.as_os_str().is_empty()) else {
        return Ok(());
    };
    match fs::metadata(parent) {
        Ok(meta) if meta.is_dir() => Ok(()),
        // create_dir_all would only say "File exists" here.
        Ok(_) => Err(ToolError::failed(format!(
            "{} cannot be created: {} is a file, not a directory",
            path.display(),
            parent.display()
        ))),
        Err(err) if err.kind() == io::ErrorKind::NotFound => {
            fs::create_dir_all(parent).map_err(|err| io_error(path, err))
        }
        Err(err) => Err(io_error(path, err)),
    }
}

/// Arguments of `edit`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EditArgs {
    /// The file to edit: absolute, or relative to the first granted directory.
    path: String,
    /// The exact text to replace, including whitespace and indentation. It
    /// must occur exactly once unless replace_all is set.
    old_string: String,
    /// The text to put in its place.
    new_string: String,
    /// Replace every occurrence of old_string instead of requiring exactly
    /// one (default false).
    #[serde(default)]
    replace_all: bool,
}

pub fn edit(args: EditArgs, ctx: &Context) -> Result<Output, ToolError> {
    text::check_edit(&args.old_string, &args.new_string)?;
    let path = paths::resolve(ctx, &args.path)?;
    let content = paths::read_text(&path)?;
    let (updated, count) =
        text::replace(&content, &args.old_string, &args.new_string, args.replace_all, &path)?;
    // A deliberately changed write, and report, built only by the replay
    // tests to show that a replay catches a plugin whose behaviour changed.
    let updated =
        if cfg!(feature = "changed-write") { format!("{updated}// edited\n") } else { updated };
    fs::write(&path, updated).map_err(|err| io_error(&path, err))?;
    if cfg!(feature = "changed-edit") {
        return Ok(Output::text(format!("edited {} ({count} changes)", path.display())));
    }
    Ok(Output::text(format!("replaced {} in {}", plural(count, "occurrence"), path.display())))
}

/// Arguments of `list`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListArgs {
    /// The directory to list: absolute, or relative to the first granted
    /// directory (default: the first granted directory).
    path: Option<String>,
}

/// One directory entry as `list` shows it.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Entry {
    name: String,
    /// The size in bytes, or `None` for a directory.
    size: Option<u64>,
}

pub fn list(args: ListArgs, ctx: &Context) -> Result<Output, ToolError> {
    let dir = paths::resolve_or_cwd(ctx, args.path.as_deref())?;
    paths::require_dir(&dir)?;
    let mut entries = Vec::new();
    for entry in fs::read_dir(&dir).map_err(|err| io_error(&dir, err))? {
        let entry = entry.map_err(|err| io_error(&dir, err))?;
        let path = entry.path();
        // Follow symbolic links so a link to a directory lists as one; a link
        // that dangles or leads outside the grant still shows, as itself.
        let meta = fs::metadata(&path)
            .or_else(|_| entry.metadata())
            .map_err(|err| io_error(&path, err))?;
        let size = (!meta.is_dir()).then_some(meta.len());
        entries.push(Entry { name: entry.file_name().to_string_lossy().into_owned(), size });
    }
    Ok(Output::text(format_listing(entries, &dir)))
}

/// The listing text: entries sorted by name, directories with a trailing
/// `/`, files followed by their size in bytes.
fn format_listing(mut entries: Vec<Entry>, dir: &Path) -> String {
    if entries.is_empty() {
        return format!("({} is empty)", dir.display());
    }
    entries.sort();
    let lines: Vec<String> = entries
        .into_iter()
        .map(|entry| match entry.size {
            None => format!("{}/", entry.name),
            Some(size) => format!("{}  {size}", entry.name),
        })
        .collect();
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listing_sorts_by_name_and_marks_directories() {
        let entries = vec![
            Entry { name: "notes.txt".into(), size: Some(120) },
            Entry { name: "src".into(), size: None },
            Entry { name: "Cargo.toml".into(), size: Some(0) },
        ];
        assert_eq!(format_listing(entries, Path::new("/g")), "Cargo.toml  0\nnotes.txt  120\nsrc/");
    }

    #[test]
    fn an_empty_directory_says_so() {
        assert_eq!(format_listing(Vec::new(), Path::new("/g/empty")), "(/g/empty is empty)");
    }
}
