//! Turning a command line into a program and its arguments.
//!
//! No shell ever runs the command: a shell would let one granted pattern
//! (say `git *`) run anything after a `;`. So the line is split into words
//! with a shell's quoting rules, and whatever would need a shell to mean
//! something is refused with a message that says so, instead of reaching
//! the program as an argument it would misread: pipes, redirections,
//! command lists and substitutions, and also the expansions a shell makes
//! (`$NAME`, globs, `~`, `{a,b}`), parentheses and the shell's keywords. A
//! line this tool accepts runs exactly the argv bash would run for it (the
//! fuzz target `command_differential` compares the two).

use reson_sdk::ToolError;

/// A command line split into the program to run and its arguments.
#[derive(Debug, PartialEq, Eq)]
pub struct CommandLine {
    /// The program name or path.
    pub program: String,
    /// Its arguments, quotes removed.
    pub args: Vec<String>,
}

/// Splits `line` into words like a POSIX shell does (quotes, backslashes,
/// `#` comments), refusing unbalanced quotes and shell operators.
pub fn parse(line: &str) -> Result<CommandLine, ToolError> {
    let words = shell_words::split(line).map_err(|err| {
        ToolError::invalid(format!("the command line has an unbalanced quote ({err})"))
    })?;
    match find_shell_syntax(line) {
        Some(Syntax::Operator(operator)) => {
            return Err(ToolError::invalid(format!(
                "{operator} needs a shell, and this tool runs one program without a shell: pipes, \
                 redirections, `;`, `&&`, `||`, `&`, backticks and `$(...)` cannot work. Run one \
                 program per call, use the cwd argument instead of `cd`, and quote the character \
                 if it is meant literally."
            )));
        }
        Some(Syntax::Expansion(expansion)) => {
            return Err(ToolError::invalid(format!(
                "{expansion} is expanded by a shell, and this tool runs one program without a \
                 shell, which would pass it on unexpanded. Put it in single quotes to pass it as \
                 it stands, or write out what it stands for (file names, paths, values)."
            )));
        }
        None => {}
    }
    let mut words = words.into_iter();
    let Some(program) = words.next() else {
        return Err(ToolError::invalid("command is empty: give a program to run"));
    };
    if is_assignment(&program) {
        return Err(ToolError::invalid(format!(
            "`{program}` sets an environment variable, which needs a shell; this tool runs one \
             program without a shell and passes it no extra environment"
        )));
    }
    if KEYWORDS.contains(&program.as_str()) {
        return Err(ToolError::invalid(format!(
            "`{program}` is a keyword of the shell's language, which needs a shell; this tool \
             runs one program without a shell: name the program to run first"
        )));
    }
    Ok(CommandLine { program, args: words.collect() })
}

/// bash's reserved words: first in a command, they are the shell's syntax,
/// not a program (`time ls` runs `ls`).
const KEYWORDS: &[&str] = &[
    "!", "[[", "]]", "{", "}", "case", "coproc", "do", "done", "elif", "else", "esac", "fi", "for",
    "function", "if", "in", "select", "then", "time", "until", "while",
];

/// What in a line needs a shell, described for a message.
enum Syntax {
    /// Something that joins, feeds or substitutes commands.
    Operator(String),
    /// Something a shell would replace before the program sees it.
    Expansion(String),
}

/// Where the scanner is, following the states of `shell_words::split` so
/// that the words it sees as quoted are exactly the ones `split` unquotes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    /// Between words.
    Delimiter,
    /// Inside an unquoted word.
    Unquoted,
    /// After a backslash outside quotes: the next character is literal.
    /// Whether the backslash was inside a word decides where a line
    /// continuation (backslash, newline) leaves the scanner.
    Escaped {
        in_word: bool,
    },
    SingleQuoted,
    DoubleQuoted,
    /// After a backslash inside double quotes.
    DoubleQuotedEscaped,
    /// From a `#` that starts a word to the end of the line.
    Comment,
}

/// The first thing in `line` that needs a shell, if any: operators and
/// substitutions (only unquoted ones count, except command substitutions,
/// which a shell performs inside double quotes too), parameter expansions
/// (unquoted or in double quotes), and unquoted globs, tildes, brace
/// expansions and parentheses. Where bash's rules are intricate (is this
/// `[` a glob? this `~` a home?) it errs on the side of refusing: a refused
/// line only needs quoting, an accepted one must mean what bash means.
/// `line` must have balanced quotes.
fn find_shell_syntax(line: &str) -> Option<Syntax> {
    let operator = |what: &str| Some(Syntax::Operator(what.to_owned()));
    let expansion = |what: &str| Some(Syntax::Expansion(what.to_owned()));
    let mut state = State::Delimiter;
    let mut chars = line.chars().peekable();
    let mut seen_word = false;
    // A newline between two words would start a second command in a shell;
    // `split` would silently turn that command into more arguments.
    let mut pending_newline = false;
    // Within the current word: an unquoted `[` (a `]` after it makes a
    // glob), an unquoted `{` (a `,` or `..` and a `}` after it make a brace
    // expansion), and the last character if it was unquoted (a `~` after
    // `=` or `:` is a home directory in an assignment-like word).
    let mut bracket = false;
    let mut brace = false;
    let mut brace_list = false;
    let mut previous_unquoted = None;
    while let Some(c) = chars.next() {
        let next = chars.peek().copied();
        let unquoted = matches!(state, State::Delimiter | State::Unquoted);
        let in_double = state == State::DoubleQuoted;
        let substitution = match c {
            '`' => Some("a backtick (command substitution)"),
            '$' if next == Some('(') => Some("`$(` (command substitution)"),
            _ => None,
        };
        if let Some(what) = substitution.filter(|_| unquoted || in_double) {
            return operator(what);
        }
        if c == '$' && (unquoted || in_double) {
            let literal = match next {
                None | Some(' ' | '\t' | '\n') => true,
                Some('"') => in_double,
                _ => false,
            };
            if !literal {
                let shown: String = std::iter::once(c).chain(next).collect();
                return expansion(&format!("`{shown}`"));
            }
        }
        if unquoted {
            let found = match (c, next) {
                ('|', Some('|')) => operator("`||`"),
                ('|', _) => operator("`|` (a pipe)"),
                ('&', Some('&')) => operator("`&&`"),
                ('&', _) => operator("`&`"),
                (';', _) => operator("`;`"),
                ('>' | '<', _) => operator("a redirection (`<` or `>`)"),
                ('(' | ')', _) => operator("a parenthesis (a subshell or a function)"),
                ('*' | '?', _) => expansion(&format!("`{c}` (a glob, matching file names)")),
                ('~', _)
                    if state == State::Delimiter
                        || matches!(previous_unquoted, Some('=' | ':')) =>
                {
                    expansion("`~` (a home directory)")
                }
                _ => None,
            };
            if found.is_some() {
                return found;
            }
            match (c, next) {
                ('[', _) => bracket = true,
                ('{', _) => brace = true,
                _ => {}
            }
        }
        match (c, next) {
            (']', _) if bracket => return expansion("`[...]` (a glob, matching file names)"),
            (',', _) | ('.', Some('.')) if brace => brace_list = true,
            ('}', _) if brace_list => return expansion("`{...}` (a brace expansion)"),
            _ => {}
        }
        state = match (state, c) {
            (State::Delimiter, ' ' | '\t') => State::Delimiter,
            (State::Delimiter, '\n') => {
                pending_newline = seen_word;
                State::Delimiter
            }
            (State::Delimiter, '#') => State::Comment,
            (State::Delimiter, c) => {
                if pending_newline {
                    return operator("a newline between two commands");
                }
                seen_word = true;
                match c {
                    '\'' => State::SingleQuoted,
                    '"' => State::DoubleQuoted,
                    '\\' => State::Escaped { in_word: false },
                    _ => State::Unquoted,
                }
            }
            (State::Unquoted, ' ' | '\t') => State::Delimiter,
            (State::Unquoted, '\n') => {
                pending_newline = true;
                State::Delimiter
            }
            (State::Unquoted, '\'') => State::SingleQuoted,
            (State::Unquoted, '"') => State::DoubleQuoted,
            (State::Unquoted, '\\') => State::Escaped { in_word: true },
            (State::Escaped { in_word: false }, '\n') => State::Delimiter,
            (State::Unquoted | State::Escaped { .. }, _) => State::Unquoted,
            (State::SingleQuoted, '\'') => State::Unquoted,
            (State::SingleQuoted, _) => State::SingleQuoted,
            (State::DoubleQuoted, '"') => State::Unquoted,
            (State::DoubleQuoted, '\\') => State::DoubleQuotedEscaped,
            (State::DoubleQuoted | State::DoubleQuotedEscaped, _) => State::DoubleQuoted,
            (State::Comment, '\n') => {
                pending_newline = seen_word;
                State::Delimiter
            }
            (State::Comment, _) => State::Comment,
        };
        previous_unquoted = (unquoted && state == State::Unquoted).then_some(c);
        if state == State::Delimiter {
            (bracket, brace, brace_list) = (false, false, false);
        }
    }
    // bash drops a backslash that ends the line (a line continuation with
    // nothing after it); `split` keeps it as an argument.
    matches!(state, State::Escaped { .. })
        .then(|| Syntax::Operator("a backslash at the end of the line".to_owned()))
}

/// Whether `word` is a `NAME=value` assignment, which a shell would apply to
/// the environment of the command after it.
fn is_assignment(word: &str) -> bool {
    let Some((name, _)) = word.split_once('=') else {
        return false;
    };
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(line: &str) -> Vec<String> {
        let parsed = parse(line).unwrap();
        std::iter::once(parsed.program).chain(parsed.args).collect()
    }

    fn refusal(line: &str) -> String {
        match parse(line) {
            Err(ToolError::InvalidArguments(message)) => message,
            other => panic!("{line:?} was not refused: {other:?}"),
        }
    }

    #[test]
    fn splits_words_with_shell_quoting() {
        assert_eq!(words("ls -la src"), ["ls", "-la", "src"]);
        assert_eq!(
            words("  grep -n 'fn main' \"src/my file.rs\"  "),
            ["grep", "-n", "fn main", "src/my file.rs"]
        );
        assert_eq!(words(r"echo a\ b 'it''s' "), ["echo", "a b", "its"]);
        assert_eq!(words("cargo test \\\n  --all\n"), ["cargo", "test", "--all"]);
        assert_eq!(words("ls # list the files | really"), ["ls"]);
        assert_eq!(words("echo a#b"), ["echo", "a#b"]);
    }

    #[test]
    fn quoted_operators_are_plain_arguments() {
        assert_eq!(words("grep -E 'a|b' f"), ["grep", "-E", "a|b", "f"]);
        assert_eq!(words(r#"echo "a && b; c > d""#), ["echo", "a && b; c > d"]);
        assert_eq!(words(r"echo \| \; \> \&"), ["echo", "|", ";", ">", "&"]);
        assert_eq!(words("echo '$(date)' '`x`'"), ["echo", "$(date)", "`x`"]);
        assert_eq!(words(r#"echo "\$(date) \`x\`""#), ["echo", "$(date) `x`"]);
        assert_eq!(
            words(r#"echo '$HOME' "(x)" a$ "$" 'a*' \~ x~ '{a,b}' "$ " {} a,b"#),
            ["echo", "$HOME", "(x)", "a$", "$", "a*", "~", "x~", "{a,b}", "$ ", "{}", "a,b"]
        );
        assert_eq!(words("[ -f x ]"), ["[", "-f", "x", "]"]);
    }

    #[test]
    fn what_a_shell_would_expand_is_refused() {
        let cases = [
            ("echo $HOME", "`$H`"),
            (r#"echo "${x}""#, "`${`"),
            ("echo $1 $@", "`$1`"),
            ("echo $'a'", "`$'`"),
            ("ls *.rs", "`*` (a glob"),
            ("ls a?", "`?` (a glob"),
            ("ls [ab]", "`[...]` (a glob"),
            ("ls x[a']'", "`[...]` (a glob"),
            ("cat ~/x", "`~` (a home"),
            ("echo a=~", "`~` (a home"),
            ("echo PATH=a:~/bin", "`~` (a home"),
            ("echo {a,b}", "`{...}` (a brace"),
            ("echo x{1..3}", "`{...}` (a brace"),
        ];
        for (line, what) in cases {
            let message = refusal(line);
            assert!(message.contains(what), "{line:?}: {message}");
            assert!(message.contains("single quotes"), "{line:?}: {message}");
        }
        assert!(refusal("echo a \\").contains("a backslash at the end of the line"));
        assert_eq!(words("echo a\\ "), ["echo", "a "]);
        for line in ["echo (x)", "echo a)"] {
            assert!(refusal(line).contains("a parenthesis"), "{line:?}");
        }
        for line in ["time ls", "if true", "! ls", "[[ -f x ]]", "{ ls", "while true"] {
            assert!(refusal(line).contains("keyword of the shell's language"), "{line:?}");
        }
    }

    #[test]
    fn shell_operators_are_refused() {
        let cases = [
            ("ls | wc -l", "`|` (a pipe)"),
            ("cat a|wc", "`|` (a pipe)"),
            ("make || true", "`||`"),
            ("cd src && ls", "`&&`"),
            ("sleep 5 &", "`&`"),
            ("ls; pwd", "`;`"),
            ("echo hi > out.txt", "redirection"),
            ("sort < in", "redirection"),
            ("make 2>&1", "redirection"),
            ("echo `date`", "backtick"),
            ("echo $(date)", "`$(`"),
            (r#"echo "today: $(date)""#, "`$(`"),
            ("ls\npwd", "newline"),
            ("ls 'a'\n  pwd", "newline"),
            ("ls # list\npwd", "newline"),
        ];
        for (line, operator) in cases {
            let message = refusal(line);
            assert!(message.contains(operator), "{line:?}: {message}");
            assert!(message.contains("without a shell"), "{line:?}: {message}");
        }
    }

    #[test]
    fn a_newline_that_separates_no_commands_is_fine() {
        assert_eq!(words("\n  ls -l\n\n"), ["ls", "-l"]);
        assert_eq!(words("# list\nls"), ["ls"]);
        assert_eq!(words("echo 'two\nlines'"), ["echo", "two\nlines"]);
    }

    #[test]
    fn unbalanced_quotes_empty_lines_and_assignments_are_refused() {
        assert!(refusal("echo 'oops").contains("unbalanced quote"));
        assert!(refusal(r#"echo "oops"#).contains("unbalanced quote"));
        assert!(refusal("   ").contains("command is empty"));
        assert!(refusal("# only a comment").contains("command is empty"));
        assert!(
            refusal("RUST_LOG=debug cargo run").contains("`RUST_LOG=debug` sets an environment")
        );
        assert_eq!(words("./configure --prefix=/usr"), ["./configure", "--prefix=/usr"]);
        assert_eq!(words("/bin/a=b"), ["/bin/a=b"]);
    }
}
