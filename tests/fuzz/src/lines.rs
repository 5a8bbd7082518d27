//! Command lines from fuzzer bytes. Each byte picks a token, so that the
//! fuzzer's byte mutations are token mutations: quotes, escapes, every
//! character a shell gives a meaning to, reserved words and real programs.

/// The tokens a line is made of: one per byte value, modulo its length.
const TOKENS: &[&str] = &[
    " ",
    " ",
    " ",
    "\t",
    "\n",
    "\r",
    "a",
    "b",
    "ab",
    "x",
    "1",
    "-l",
    "--x=",
    "-",
    "/",
    ".",
    "..",
    "'",
    "'",
    "\"",
    "\"",
    "\\",
    "\\",
    "$",
    "${",
    "$(",
    "`",
    "$'",
    "$\"",
    "$$",
    "$@",
    "$1",
    "$#",
    "$?",
    "$-",
    "$[",
    "$((",
    "*",
    "?",
    "[",
    "]",
    "[a]",
    "{",
    "}",
    ",",
    "{a,b}",
    "{1..2}",
    "~",
    "=",
    ":",
    "#",
    "!",
    "(",
    ")",
    ";",
    "&",
    "|",
    "<",
    ">",
    "%",
    "^",
    "@",
    "+",
    "é",
    "→",
    "HOME",
    "echo",
    "ls",
    "git",
    "status",
    "printf",
    "env",
    "true",
    "test",
    "time",
    "if",
    "then",
    "fi",
    "!",
    "{",
    "}",
    "[[",
    "]]",
    "case",
    "in",
    "esac",
    "for",
    "do",
    "done",
    "function",
    "coproc",
    "select",
    "while",
    "until",
    "command",
    "exec",
    "eval",
    "builtin",
    "/usr/bin/echo",
    "/bin/ls",
    "/usr/bin/env",
    "/usr/bin/../bin/echo",
    "a=b",
    "A=1",
    "~/",
    "~root",
    "*.rs",
    "x?",
    "\\\n",
    "#x",
    "%s",
    "\\$",
    "\\'",
    "\\\"",
    "\\ ",
];

/// The line the bytes stand for, at most `max` bytes of tokens long.
pub fn line(bytes: &[u8], max: usize) -> String {
    let mut line = String::new();
    for &b in bytes {
        let token = TOKENS[usize::from(b) % TOKENS.len()];
        if line.len() + token.len() > max {
            break;
        }
        line.push_str(token);
    }
    line
}

/// Programs a command line of [`command_line`] starts with, most of them on
/// the search path, some spelled oddly, some the shell's keywords.
const PROGRAMS: &[&str] = &[
    "echo",
    "ls",
    "git",
    "printf",
    "true",
    "test",
    "[",
    "env",
    "time",
    "/usr/bin/echo",
    "/bin/ls",
    "/usr/bin/../bin/echo",
    "'echo'",
    "e\\cho",
    "\"ec\"ho",
    "!",
    "if",
    "{",
    "command",
    "cat",
];

/// A command line that mostly starts with a real program: the first byte
/// picks it (or, from 0xf0 up, none), the rest are tokens as in [`line`].
pub fn command_line(bytes: &[u8], max: usize) -> String {
    match bytes.split_first() {
        Some((&pick, rest)) if pick < 0xf0 => {
            let program = PROGRAMS[usize::from(pick) % PROGRAMS.len()];
            format!("{program} {}", line(rest, max.saturating_sub(program.len() + 1)))
        }
        Some((_, rest)) => line(rest, max),
        None => String::new(),
    }
}

/// The `shell` permission patterns a case is decided under: one per case,
/// picked by its first byte.
pub const RULES: &[&str] = &[
    "echo *",
    "ls *",
    "git status*",
    "*",
    "echo a",
    "printf *",
    "env *",
    "time *",
    "test *",
    "\\[ *",
    "true*",
    "/usr/bin/echo *",
];
