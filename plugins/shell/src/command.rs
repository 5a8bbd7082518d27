//! Turning a command line into a program and its arguments.
//!
//! No shell ever runs the command: a shell would let one granted pattern
//! (say `git *`) run anything after a `;`. So the line is split into words
//! with a shell's quoting rules, and whatever would need a shell to mean
//! something (pipes, redirections, command lists, substitutions) is refused
//! with a message that says so, instead of reaching the program as an
//! argument it would misread.

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
    if let Some(operator) = find_operator(line) {
        return Err(ToolError::invalid(format!(
            "{operator} needs a shell, and this tool runs one program without a shell: pipes, \
             redirections, `;`, `&&`, `||`, `&`, backticks and `$(...)` cannot work. Run one \
             program per call, use the cwd argument instead of `cd`, and quote the character if \
             it is meant literally."
        )));
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
    Ok(CommandLine { program, args: words.collect() })
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

/// The first shell operator of `line`, described for a message, if any. Only
/// unquoted operators count, except command substitutions, which a shell
/// performs inside double quotes too. `line` must have balanced quotes.
fn find_operator(line: &str) -> Option<String> {
    let mut state = State::Delimiter;
    let mut chars = line.chars().peekable();
    let mut seen_word = false;
    // A newline between two words would start a second command in a shell;
    // `split` would silently turn that command into more arguments.
    let mut pending_newline = false;
    while let Some(c) = chars.next() {
        let next = chars.peek().copied();
        let unquoted = matches!(state, State::Delimiter | State::Unquoted);
        let substitution = match c {
            '`' => Some("a backtick (command substitution)"),
            '$' if next == Some('(') => Some("`$(` (command substitution)"),
            _ => None,
        };
        if let Some(what) = substitution.filter(|_| unquoted || state == State::DoubleQuoted) {
            return Some(what.to_owned());
        }
        if unquoted {
            let operator = match (c, next) {
                ('|', Some('|')) => Some("`||`"),
                ('|', _) => Some("`|` (a pipe)"),
                ('&', Some('&')) => Some("`&&`"),
                ('&', _) => Some("`&`"),
                (';', _) => Some("`;`"),
                ('>' | '<', _) => Some("a redirection (`<` or `>`)"),
                _ => None,
            };
            if let Some(operator) = operator {
                return Some(operator.to_owned());
            }
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
                    return Some("a newline between two commands".to_owned());
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
    }
    None
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
        assert_eq!(words("echo $HOME (x)"), ["echo", "$HOME", "(x)"]);
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
