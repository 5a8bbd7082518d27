//! `fs`: reads, writes, edits and searches files in the directories the user
//! granted. The host enforces the grant (only those directories are
//! preopened); these tools add line-numbered reading, exact-match editing and
//! searches, with errors that name the path and say what went wrong.

mod files;
mod paths;
mod search;
mod text;

use reson_sdk::Toolbox;

fn tools() -> Toolbox {
    Toolbox::new()
        .tool(
            "read",
            "Reads a UTF-8 text file and returns its lines numbered like `cat -n` (line number, \
             tab, line). Shows up to 2000 lines; use offset and limit to page through longer \
             files. A last line such as `(lines 1-40 of 120)` says when more remains.",
            files::read,
        )
        .tool(
            "write",
            "Writes a whole file, replacing it if it exists and creating missing parent \
             directories. To change part of a file, use edit.",
            files::write,
        )
        .tool(
            "edit",
            "Replaces old_string by new_string in a file. old_string must match the file's text \
             exactly (whitespace included) and occur exactly once, unless replace_all is set. \
             Read the file first.",
            files::edit,
        )
        .tool(
            "glob",
            "Finds files whose path relative to a directory matches a glob such as `**/*.rs`. \
             Returns absolute paths, most recently modified first, at most 1000.",
            search::glob,
        )
        .tool(
            "grep",
            "Searches files for lines matching a regular expression, in a directory (walked in \
             sorted order, optionally filtered by a glob) or a single file. Returns \
             `path:line_number:text` lines. Files that are not UTF-8 text are skipped.",
            search::grep,
        )
        .tool(
            "list",
            "Lists a directory, sorted by name: subdirectories end with `/`, files are followed \
             by their size in bytes.",
            files::list,
        )
}

reson_sdk::export_tools!(tools);
