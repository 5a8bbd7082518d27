//! Markdown with YAML front matter: a `---` line, YAML, a `---` line, then
//! the body. Shared by skill files and `experiences.md`.

/// One `---`-fenced block: its YAML and its body, with the 1-based line
/// numbers where each starts (for error messages).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Block<'a> {
    /// Line of the opening `---`.
    pub line: usize,
    /// The YAML between the fences.
    pub yaml: String,
    /// The text after the closing fence, up to the next block or the end.
    pub body: Vec<&'a str>,
}

/// Whether `line` is a fence.
fn is_fence(line: &str) -> bool {
    line.trim_end() == "---"
}

/// A parse failure: the 1-based line and what is wrong.
pub(crate) type Failure = (usize, String);

/// The text before the first fence, and the blocks.
pub(crate) type Blocks<'a> = (Vec<&'a str>, Vec<Block<'a>>);

/// Splits `text` into the text before the first fence and the blocks
/// after it. A block whose closing fence is missing is an error naming the
/// line of its opening one.
pub(crate) fn blocks(text: &str) -> Result<Blocks<'_>, Failure> {
    let lines: Vec<&str> = text.lines().collect();
    let first = lines.iter().position(|l| is_fence(l)).unwrap_or(lines.len());
    let preamble = lines[..first].to_vec();
    let mut blocks = Vec::new();
    let mut at = first;
    while at < lines.len() {
        let open = at;
        let Some(close) = lines[open + 1..].iter().position(|l| is_fence(l)).map(|i| open + 1 + i)
        else {
            return Err((
                open + 1,
                "front matter opened here is never closed by a `---` line".into(),
            ));
        };
        let yaml = lines[open + 1..close].join("\n");
        let end = lines[close + 1..]
            .iter()
            .position(|l| is_fence(l))
            .map_or(lines.len(), |i| close + 1 + i);
        blocks.push(Block { line: open + 1, yaml, body: lines[close + 1..end].to_vec() });
        at = end;
    }
    Ok((preamble, blocks))
}

/// A file with one front matter: its YAML, the line of its opening fence
/// and the body (everything after the closing fence, `---` lines
/// included, as markdown rules).
pub(crate) fn single(text: &str) -> Result<(String, usize, String), Failure> {
    let lines: Vec<&str> = text.lines().collect();
    let open = lines.iter().position(|l| !l.trim().is_empty());
    let Some(open) = open.filter(|&i| is_fence(lines[i])) else {
        return Err((1, "the file must start with `---` front matter".into()));
    };
    let close = lines[open + 1..]
        .iter()
        .position(|l| is_fence(l))
        .ok_or((open + 1, "front matter opened here is never closed by a `---` line".into()))?;
    let close = open + 1 + close;
    Ok((
        lines[open + 1..close].join("\n"),
        open + 1,
        lines[close + 1..].join("\n").trim().to_owned(),
    ))
}

/// A body as written: every line that would read as a fence (`---`, or a
/// fence already escaped) gets one more backslash, so no text can open or
/// close a block.
pub(crate) fn escape_body(body: &str) -> String {
    body.lines()
        .map(|l| if is_escaped_fence(l) || is_fence(l) { format!("\\{l}") } else { l.to_owned() })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The body's text, with the escaping of [`escape_body`] undone.
pub(crate) fn unescape_body(lines: &[&str]) -> String {
    let text: Vec<&str> =
        lines.iter().map(|l| if is_escaped_fence(l) { &l[1..] } else { *l }).collect();
    text.join("\n").trim().to_owned()
}

fn is_escaped_fence(line: &str) -> bool {
    let rest = line.trim_start_matches('\\');
    rest.len() < line.len() && is_fence(rest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_blocks_and_keeps_line_numbers() {
        let text = "# title\n---\na: 1\n---\nbody one\n---\nb: 2\n---\nbody two\nmore\n";
        let (preamble, found) = blocks(text).unwrap();
        assert_eq!(preamble, ["# title"]);
        assert_eq!(found.len(), 2);
        assert_eq!((found[0].line, found[0].yaml.as_str()), (2, "a: 1"));
        assert_eq!(unescape_body(&found[1].body), "body two\nmore");
        assert_eq!(
            blocks(text.trim_end_matches("more\n").replace("body two", "---").as_str())
                .unwrap_err()
                .0,
            9
        );
    }

    #[test]
    fn an_escaped_body_never_opens_a_block() {
        let hostile = "keep\n---\nid: evil\n---\n\\---\nend";
        let text = format!("---\nid: a\n---\n{}\n", escape_body(hostile));
        let (_, found) = blocks(&text).unwrap();
        assert_eq!(found.len(), 1);
        assert_eq!(unescape_body(&found[0].body), hostile);
    }
}
