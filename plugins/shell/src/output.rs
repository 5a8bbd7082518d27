//! The text the model gets back from a finished command.

use reson_sdk::host::process::Output;

/// The most characters of a result; longer ones keep their head and tail,
/// where commands put what matters most (what ran, and how it ended).
pub const MAX_CHARS: usize = 30_000;
/// The line that separates stdout from stderr.
pub const STDERR_MARKER: &str = "--- stderr ---";
/// The last line when the host cut stdout or stderr at its capture cap.
pub const HOST_CAP_MARKER: &str = "[output truncated at the host's cap]";

/// `exit code N` (or why there is none), then stdout, then stderr under
/// [`STDERR_MARKER`] when there is any, then [`HOST_CAP_MARKER`] when the
/// host cut the output; the whole capped at [`MAX_CHARS`] by [`cap`].
pub fn render(output: &Output) -> String {
    let mut lines = vec![match output.exit_code {
        Some(code) => format!("exit code {code}"),
        None => "no exit code: killed by a signal".to_owned(),
    }];
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !stdout.is_empty() {
        lines.push(stdout.trim_end_matches('\n').to_owned());
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !stderr.is_empty() {
        lines.push(STDERR_MARKER.to_owned());
        lines.push(stderr.trim_end_matches('\n').to_owned());
    }
    if output.truncated {
        lines.push(HOST_CAP_MARKER.to_owned());
    }
    cap(lines.join("\n"), MAX_CHARS)
}

/// `text` if it has at most `max` characters; otherwise its first and last
/// `max / 2` characters around a line `[... N characters omitted ...]`.
pub fn cap(text: String, max: usize) -> String {
    let total = text.chars().count();
    if total <= max {
        return text;
    }
    let head = max / 2;
    let tail = max - head;
    let byte_at = |chars: usize| text.char_indices().nth(chars).map_or(text.len(), |(i, _)| i);
    let (head_end, tail_start) = (byte_at(head), byte_at(total - tail));
    format!(
        "{}\n[... {} characters omitted ...]\n{}",
        &text[..head_end],
        total - head - tail,
        &text[tail_start..]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn output(exit_code: Option<i32>, stdout: &str, stderr: &str, truncated: bool) -> Output {
        Output {
            exit_code,
            stdout: stdout.as_bytes().to_vec(),
            stderr: stderr.as_bytes().to_vec(),
            truncated,
        }
    }

    #[test]
    fn the_exit_code_comes_first_then_stdout() {
        assert_eq!(render(&output(Some(0), "a\nb\n", "", false)), "exit code 0\na\nb");
        assert_eq!(render(&output(Some(0), "", "", false)), "exit code 0");
    }

    #[test]
    fn stderr_follows_its_marker_and_failures_say_so_first() {
        assert_eq!(
            render(&output(Some(2), "partial\n", "error: boom\n", false)),
            "exit code 2\npartial\n--- stderr ---\nerror: boom"
        );
        assert_eq!(
            render(&output(None, "", "killed\n", false)),
            "no exit code: killed by a signal\n--- stderr ---\nkilled"
        );
    }

    #[test]
    fn a_host_cut_is_marked_last() {
        assert_eq!(
            render(&output(Some(0), "lots", "", true)),
            "exit code 0\nlots\n[output truncated at the host's cap]"
        );
    }

    #[test]
    fn invalid_utf8_is_shown_lossily() {
        let out = Output {
            exit_code: Some(0),
            stdout: vec![b'a', 0xff],
            stderr: vec![],
            truncated: false,
        };
        assert_eq!(render(&out), "exit code 0\na\u{fffd}");
    }

    #[test]
    fn long_output_keeps_head_and_tail() {
        assert_eq!(cap("short".to_owned(), 5), "short");
        assert_eq!(cap("abcdefghij".to_owned(), 4), "ab\n[... 6 characters omitted ...]\nij");
        assert_eq!(cap("ééééé".to_owned(), 3), "é\n[... 2 characters omitted ...]\néé");

        let stdout = "x".repeat(40_000);
        let rendered = render(&output(Some(0), &stdout, "", true));
        let full = format!("exit code 0\n{stdout}\n{HOST_CAP_MARKER}").chars().count();
        let marker = format!("\n[... {} characters omitted ...]\n", full - MAX_CHARS);
        assert!(rendered.starts_with("exit code 0\nxxx"));
        assert!(rendered.ends_with("xxx\n[output truncated at the host's cap]"));
        assert!(rendered.contains(&marker), "{}", &rendered[14_990..15_050]);
        let kept = rendered.chars().count() - marker.len();
        assert_eq!(kept, MAX_CHARS);
    }
}
