//! The tools that walk directories: `glob` and `grep`.

use crate::paths;
use globset::{GlobBuilder, GlobMatcher};
use regex::{Regex, RegexBuilder};
use reson_sdk::{Context, Output, ToolError};
use schemars::JsonSchema;
use serde::Deserialize;
use std::fs::{self, Metadata};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};
use walkdir::WalkDir;

/// How many paths `glob` returns at most.
const MAX_GLOB_RESULTS: usize = 1000;
/// How many lines `grep` returns when max_results is not given.
const DEFAULT_GREP_RESULTS: usize = 200;
/// What a search that found nothing returns.
const NO_MATCHES: &str = "(no matches)";

/// Arguments of `glob`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GlobArgs {
    /// The glob each file's path relative to `path` must match, with `/`
    /// between directories: `*` and `?` stay within one directory, `**`
    /// spans any number of them, `[abc]` and `{a,b}` give alternatives.
    /// Example: `src/**/*.rs`.
    pattern: String,
    /// The directory to search: absolute, or relative to the first granted
    /// directory (default: the first granted directory).
    path: Option<String>,
}

pub fn glob(args: GlobArgs, ctx: &Context) -> Result<Output, ToolError> {
    let base = paths::resolve_or_cwd(ctx, args.path.as_deref())?;
    let matcher = compile_glob(relative_glob(&args.pattern, &base)?)?;
    paths::require_dir(&base)?;
    let found = walk_files(&base)
        .filter(|(path, _)| matcher.is_match(relative(path, &base)))
        .map(|(path, meta)| (path, meta.modified().unwrap_or(UNIX_EPOCH)))
        .collect();
    Ok(Output::text(format_glob(found, MAX_GLOB_RESULTS)))
}

/// Arguments of `grep`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GrepArgs {
    /// The regular expression to look for (Rust regex syntax). Each line is
    /// matched on its own.
    pattern: String,
    /// The directory to search, or a single file: absolute, or relative to
    /// the first granted directory (default: the first granted directory).
    path: Option<String>,
    /// When searching a directory, only search the files matching this
    /// glob: against the file name if the glob has no `/` (`*.rs`), else
    /// against the path relative to `path` (`src/**/*.rs`).
    glob: Option<String>,
    /// Match letters regardless of case (default false).
    #[serde(default)]
    case_insensitive: bool,
    /// Stop after this many matching lines (default 200).
    #[schemars(range(min = 1))]
    max_results: Option<usize>,
}

pub fn grep(args: GrepArgs, ctx: &Context) -> Result<Output, ToolError> {
    let regex = RegexBuilder::new(&args.pattern)
        .case_insensitive(args.case_insensitive)
        .build()
        .map_err(|err| ToolError::invalid(format!("invalid regex: {err}")))?;
    let max = args.max_results.unwrap_or(DEFAULT_GREP_RESULTS);
    if max == 0 {
        return Err(ToolError::invalid("max_results must be at least 1"));
    }
    let filter = args.glob.as_deref().map(FileFilter::new).transpose()?;
    let base = paths::resolve_or_cwd(ctx, args.path.as_deref())?;
    // One hit beyond the maximum tells whether the results were cut.
    let cap = max + 1;
    let mut hits = Vec::new();
    if paths::metadata(&base)?.is_file() {
        search_text(&regex, &paths::read_text(&base)?, &base, cap, &mut hits);
    } else {
        for (path, _) in walk_files(&base) {
            if hits.len() >= cap {
                break;
            }
            if filter.as_ref().is_some_and(|filter| !filter.matches(&path, &base)) {
                continue;
            }
            // Binary and unreadable files are not what a text search is for.
            let Some(text) = fs::read(&path).ok().and_then(|bytes| String::from_utf8(bytes).ok())
            else {
                continue;
            };
            search_text(&regex, &text, &path, cap, &mut hits);
        }
    }
    Ok(Output::text(format_hits(hits, max)))
}

/// The regular files under `base` (or `base` itself if it is a file) in
/// sorted order, with their metadata. A symbolic link to a file counts as
/// that file; links to directories are not descended into, which keeps
/// cycles and duplicates out. Entries that cannot be read are skipped: a
/// walk reports what it can see.
fn walk_files(base: &Path) -> impl Iterator<Item = (PathBuf, Metadata)> {
    WalkDir::new(base)
        .sort_by_file_name()
        .into_iter()
        .filter_map(Result::ok)
        .filter(|entry| !entry.file_type().is_dir())
        .filter_map(|entry| {
            let meta = fs::metadata(entry.path()).ok()?;
            meta.is_file().then(|| (entry.into_path(), meta))
        })
}

/// `path` relative to the `base` it was found under.
fn relative<'a>(path: &'a Path, base: &Path) -> &'a Path {
    path.strip_prefix(base).unwrap_or(path)
}

/// The glob relative to `base`. Absolute globs that lie under `base` are
/// accepted too, since models often write them that way.
fn relative_glob<'a>(pattern: &'a str, base: &Path) -> Result<&'a str, ToolError> {
    if !pattern.starts_with('/') {
        return Ok(pattern);
    }
    let base = base.to_string_lossy();
    let base = base.trim_end_matches('/');
    pattern.strip_prefix(base).and_then(|rest| rest.strip_prefix('/')).ok_or_else(|| {
        ToolError::invalid(format!(
            "the glob {pattern} is not under {base}; give the directory to search as path \
             and the glob relative to it"
        ))
    })
}

/// Compiles a glob in which `*` and `?` do not cross `/`, so that `*.rs`
/// means the top level and `**/*.rs` every level, as in a shell.
fn compile_glob(pattern: &str) -> Result<GlobMatcher, ToolError> {
    GlobBuilder::new(pattern)
        .literal_separator(true)
        .build()
        .map(|glob| glob.compile_matcher())
        // globset's message names the glob.
        .map_err(ToolError::invalid)
}

/// grep's `glob` argument: a bare file-name glob, or a path glob.
struct FileFilter {
    matcher: GlobMatcher,
    by_name: bool,
}

impl FileFilter {
    fn new(pattern: &str) -> Result<Self, ToolError> {
        Ok(Self { matcher: compile_glob(pattern)?, by_name: !pattern.contains('/') })
    }

    fn matches(&self, path: &Path, base: &Path) -> bool {
        if self.by_name {
            path.file_name().is_some_and(|name| self.matcher.is_match(name))
        } else {
            self.matcher.is_match(relative(path, base))
        }
    }
}

/// The `glob` result: newest first (ties by path), one path a line, at most
/// `cap` of them with a note when there were more.
fn format_glob(mut found: Vec<(PathBuf, SystemTime)>, cap: usize) -> String {
    if found.is_empty() {
        return NO_MATCHES.to_owned();
    }
    found.sort_by(|(a_path, a_time), (b_path, b_time)| {
        b_time.cmp(a_time).then_with(|| a_path.cmp(b_path))
    });
    let mut lines: Vec<String> =
        found.iter().take(cap).map(|(path, _)| path.display().to_string()).collect();
    if found.len() > cap {
        lines.push(format!(
            "(showing the {cap} most recently modified of {} matching files; narrow the \
             pattern or path)",
            found.len()
        ));
    }
    lines.join("\n")
}

/// Appends the lines of `text` that match `regex`, as `path:line_number:text`,
/// until `hits` holds `cap` of them.
fn search_text(regex: &Regex, text: &str, path: &Path, cap: usize, hits: &mut Vec<String>) {
    for (number, line) in (1..).zip(text.lines()) {
        if hits.len() >= cap {
            return;
        }
        if regex.is_match(line) {
            hits.push(format!("{}:{number}:{line}", path.display()));
        }
    }
}

/// The `grep` result: at most `max` hits, with a note when there were more.
fn format_hits(mut hits: Vec<String>, max: usize) -> String {
    if hits.is_empty() {
        return NO_MATCHES.to_owned();
    }
    if hits.len() > max {
        hits.truncate(max);
        hits.push(format!(
            "(stopped after {max} matching lines; narrow the pattern, path or glob, or raise \
             max_results)"
        ));
    }
    hits.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    #[test]
    fn glob_results_are_newest_first_then_by_path() {
        let found = vec![
            (PathBuf::from("/g/b"), at(5)),
            (PathBuf::from("/g/old"), at(1)),
            (PathBuf::from("/g/a"), at(5)),
            (PathBuf::from("/g/new"), at(9)),
        ];
        assert_eq!(format_glob(found, 10), "/g/new\n/g/a\n/g/b\n/g/old");
    }

    #[test]
    fn glob_results_are_capped_with_a_note() {
        let found = (0..5).map(|n| (PathBuf::from(format!("/g/{n}")), at(n))).collect();
        assert_eq!(
            format_glob(found, 2),
            "/g/4\n/g/3\n(showing the 2 most recently modified of 5 matching files; narrow \
             the pattern or path)"
        );
        assert_eq!(format_glob(Vec::new(), 2), "(no matches)");
    }

    #[test]
    fn globs_keep_star_within_a_directory() {
        let matcher = compile_glob("*.rs").unwrap();
        assert!(matcher.is_match("lib.rs"));
        assert!(!matcher.is_match("src/lib.rs"));
        let matcher = compile_glob("**/*.rs").unwrap();
        assert!(matcher.is_match("lib.rs"));
        assert!(matcher.is_match("src/deep/lib.rs"));
        assert!(
            matches!(compile_glob("a[").map(drop), Err(ToolError::InvalidArguments(m)) if m.contains("a["))
        );
    }

    #[test]
    fn absolute_globs_under_the_base_become_relative() {
        let base = Path::new("/g/proj");
        assert_eq!(relative_glob("src/*.rs", base).unwrap(), "src/*.rs");
        assert_eq!(relative_glob("/g/proj/src/*.rs", base).unwrap(), "src/*.rs");
        assert_eq!(relative_glob("/etc/*", Path::new("/")).unwrap(), "etc/*");
        assert!(matches!(
            relative_glob("/g/projects/*", base),
            Err(ToolError::InvalidArguments(_))
        ));
    }

    #[test]
    fn grep_filters_match_names_or_relative_paths() {
        let base = Path::new("/g");
        let by_name = FileFilter::new("*.rs").unwrap();
        assert!(by_name.matches(Path::new("/g/src/deep/lib.rs"), base));
        assert!(!by_name.matches(Path::new("/g/src/notes.md"), base));
        let by_path = FileFilter::new("src/*.rs").unwrap();
        assert!(by_path.matches(Path::new("/g/src/lib.rs"), base));
        assert!(!by_path.matches(Path::new("/g/src/deep/lib.rs"), base));
    }

    #[test]
    fn matching_lines_are_numbered_and_capped() {
        let regex = Regex::new("o+").unwrap();
        let mut hits = Vec::new();
        search_text(&regex, "foo\nbar\r\nboo\nzoo\n", Path::new("/g/a.txt"), 2, &mut hits);
        assert_eq!(hits, ["/g/a.txt:1:foo", "/g/a.txt:3:boo"]);
    }

    #[test]
    fn hits_are_cut_at_the_maximum_with_a_note() {
        let hits = vec!["a:1:x".to_owned(), "a:2:x".to_owned(), "a:3:x".to_owned()];
        assert_eq!(format_hits(hits.clone(), 3), "a:1:x\na:2:x\na:3:x");
        assert_eq!(
            format_hits(hits, 2),
            "a:1:x\na:2:x\n(stopped after 2 matching lines; narrow the pattern, path or glob, \
             or raise max_results)"
        );
        assert_eq!(format_hits(Vec::new(), 2), "(no matches)");
    }
}
