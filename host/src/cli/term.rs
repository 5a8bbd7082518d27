//! Everything the command line prints goes through [`clean`]: secrets are
//! redacted, and control characters (which a guest, a model or a file name
//! could use to rewrite what the terminal shows) are escaped. Colours are
//! added after it ([`paint`]), so theirs are the only codes that reach a
//! terminal; JSON documents go through [`say_json`] instead, which keeps
//! them JSON.

use anstyle::{AnsiColor, Style};
use reson::text::{Lines, escape_controls};
use std::sync::{Arc, Mutex, OnceLock};

/// `text` as it may reach a terminal: redacted, with every control
/// character except newline and tab written as a visible escape.
pub(crate) fn clean(text: &str) -> String {
    escape_controls(&reson::redact::redact(text), Lines::Keep).into_owned()
}

/// A field that must stay on its line (a tool's name or arguments, a
/// plugin's version, an error in a listing): line breaks are escaped too,
/// so what a model or a guest wrote cannot add lines that look like the
/// host's own (an approval prompt, a result). [`clean`] still runs on the
/// whole line.
pub(crate) fn one_line(text: &str) -> String {
    escape_controls(text, Lines::Escape).into_owned()
}

/// Sets when to colour, before anything is printed: `--color always` and
/// `never` stand; `auto` colours a stream only when it is a terminal and
/// `NO_COLOR` is unset (anstream's rules, which also honour
/// `CLICOLOR_FORCE` and `TERM=dumb`).
pub(crate) fn choose_colours(choice: clap::ColorChoice) {
    let choice = match choice {
        clap::ColorChoice::Auto => anstream::ColorChoice::Auto,
        clap::ColorChoice::Always => anstream::ColorChoice::Always,
        clap::ColorChoice::Never => anstream::ColorChoice::Never,
    };
    choice.write_global();
}

/// Where a piece of text is going, as colours are decided per stream: a
/// run piped into a file may still colour its summary at the terminal.
#[derive(Clone, Copy)]
pub(crate) enum Stream {
    Out,
    Err,
}

/// Whether `stream` gets colours, decided once.
fn coloured(stream: Stream) -> bool {
    static DECIDED: OnceLock<[bool; 2]> = OnceLock::new();
    let [out, err] = *DECIDED.get_or_init(|| {
        let on = |choice| choice != anstream::ColorChoice::Never;
        [
            on(anstream::AutoStream::choice(&std::io::stdout())),
            on(anstream::AutoStream::choice(&std::io::stderr())),
        ]
    });
    match stream {
        Stream::Out => out,
        Stream::Err => err,
    }
}

/// The colours in use, by meaning.
pub(crate) mod style {
    use super::{AnsiColor, Style};

    pub(crate) const ERROR: Style = AnsiColor::Red.on_default().bold();
    pub(crate) const WARNING: Style = AnsiColor::Yellow.on_default().bold();
    /// Done well: a completed run, a ready plugin, a line a diff adds.
    pub(crate) const GOOD: Style = AnsiColor::Green.on_default();
    /// Gone wrong: a failed run or tool call, a line a diff removes.
    pub(crate) const BAD: Style = AnsiColor::Red.on_default();
    /// Neither: a run still going or stopped, a plugin serving its old version.
    pub(crate) const PENDING: Style = AnsiColor::Yellow.on_default();
    /// Where things are: a tool call, a diff's hunk header.
    pub(crate) const PLACE: Style = AnsiColor::Cyan.on_default();
    /// A diff's file header.
    pub(crate) const HEADER: Style = Style::new().bold();
}

/// `text` in `style` where `stream` gets colours. `text` must already be
/// [`clean`]: the colour codes added here are the only ones let through.
pub(crate) fn paint(stream: Stream, style: Style, text: &str) -> String {
    if coloured(stream) && !text.is_empty() {
        format!("{style}{text}{style:#}")
    } else {
        text.to_owned()
    }
}

/// The style of a trace's status word.
pub(crate) fn status_style(status: reson::trace::TraceStatus) -> Style {
    use reson::trace::TraceStatus;
    match status {
        TraceStatus::Completed => style::GOOD,
        TraceStatus::Failed => style::BAD,
        TraceStatus::Running | TraceStatus::Stopped | TraceStatus::Waiting => style::PENDING,
    }
}

/// `label: text` on stderr, the label coloured, the text [`clean`].
pub(crate) fn labelled(label: &str, style: Style, text: &str) {
    eprintln!("{} {}", paint(Stream::Err, style, label), clean(text));
}

/// A unified diff (as `similar` writes it) for a terminal: each line
/// [`clean`], added lines green, removed red, hunk headers cyan.
pub(crate) fn diff_text(patch: &str, stream: Stream) -> String {
    diff_painted(patch, |style, line| paint(stream, style, line))
}

/// [`diff_text`] with `paint` for the colouring.
fn diff_painted(patch: &str, paint: impl Fn(Style, &str) -> String) -> String {
    let mut out = String::with_capacity(patch.len());
    for line in clean(patch).split_inclusive('\n') {
        let (body, end) = match line.strip_suffix('\n') {
            Some(body) => (body, "\n"),
            None => (line, ""),
        };
        let style = if body.starts_with("+++") || body.starts_with("---") {
            Some(style::HEADER)
        } else if body.starts_with('+') {
            Some(style::GOOD)
        } else if body.starts_with('-') {
            Some(style::BAD)
        } else if body.starts_with("@@") {
            Some(style::PLACE)
        } else {
            None
        };
        match style {
            Some(style) => out.push_str(&paint(style, body)),
            None => out.push_str(body),
        }
        out.push_str(end);
    }
    out
}

/// Exit status of a process whose output reader went away, as if SIGPIPE
/// had ended it (Rust ignores the signal, so writes fail instead).
const BROKEN_PIPE_STATUS: i32 = 128 + 13;

/// Writes `text` to stdout at once. A reader that went away (`reson tool
/// list | head`) ends the process quietly, as it would any Unix tool.
pub(crate) fn write_out(text: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_all(text.as_bytes()).and_then(|()| out.flush())
        && e.kind() == std::io::ErrorKind::BrokenPipe
    {
        std::process::exit(BROKEN_PIPE_STATUS);
    }
}

/// `json`, one JSON document, on stdout alone on its line(s): redacted,
/// and with its control characters escaped the JSON way, so that it is
/// safe at a terminal and still JSON ([`clean`]'s `\u{..}` is not). Never
/// coloured.
pub(crate) fn say_json(json: &str) {
    let json = reson::redact::redact(json);
    write_out(&(reson::text::escape_controls_json(&json).into_owned() + "\n"));
}

/// `1 model call`, `2 model calls`.
pub(crate) fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// While alive, the terminal on stdin hands over each key as it is
/// pressed, without echo: an approval is one key, not a line. Restores the
/// terminal's settings when dropped; does nothing when stdin is no
/// terminal.
///
/// Windows consoles are left as they are: there a key reaches Reson with
/// Enter.
pub(crate) struct KeyMode {
    #[cfg(unix)]
    saved: Option<libc::termios>,
}

impl KeyMode {
    #[cfg(not(unix))]
    pub(crate) fn on() -> Self {
        Self {}
    }

    #[cfg(unix)]
    pub(crate) fn on() -> Self {
        // SAFETY: termios is plain data; tcgetattr fills it for fd 0 or fails.
        let mut saved: libc::termios = unsafe { std::mem::zeroed() };
        if unsafe { libc::tcgetattr(libc::STDIN_FILENO, &mut saved) } != 0 {
            return Self { saved: None };
        }
        let mut keys = saved;
        keys.c_lflag &= !(libc::ICANON | libc::ECHO);
        keys.c_cc[libc::VMIN] = 1;
        keys.c_cc[libc::VTIME] = 0;
        // SAFETY: a termios taken from this terminal, changed in two flags.
        let set = unsafe { libc::tcsetattr(libc::STDIN_FILENO, libc::TCSANOW, &keys) } == 0;
        Self { saved: set.then_some(saved) }
    }
}

#[cfg(unix)]
impl Drop for KeyMode {
    fn drop(&mut self) {
        if let Some(saved) = &self.saved {
            // SAFETY: restores the settings tcgetattr gave.
            unsafe { libc::tcsetattr(libc::STDIN_FILENO, libc::TCSANOW, saved) };
        }
    }
}

/// The frames of every spinner the command line draws.
pub(crate) const FRAMES: [char; 4] = ['|', '/', '-', '\\'];

/// A spinner on stderr saying what long work is under way ("compiling
/// fs.wasm (1.2 MB)…"), drawn only while there is some and only when
/// stderr is a terminal: never in a pipe, a log or `--json` output. It
/// clears its line when the work is done.
pub(crate) struct Spinner {
    shared: Arc<Mutex<Under>>,
}

#[derive(Default)]
struct Under {
    /// What is under way, by key, in the order it began.
    work: Vec<(String, String)>,
    drawn: bool,
    stopped: bool,
}

impl Spinner {
    /// A spinner, or `None` when stderr is no terminal.
    pub(crate) fn for_terminal() -> Option<Arc<Self>> {
        use std::io::IsTerminal as _;
        if !std::io::stderr().is_terminal() {
            return None;
        }
        let shared = Arc::new(Mutex::new(Under::default()));
        let drawing = shared.clone();
        std::thread::Builder::new()
            .name("reson-spinner".into())
            .spawn(move || {
                for frame in FRAMES.iter().cycle() {
                    std::thread::sleep(std::time::Duration::from_millis(100));
                    let mut under = drawing.lock().expect("spinner");
                    if under.stopped {
                        return;
                    }
                    let Some(line) = under.line() else { continue };
                    under.drawn = true;
                    eprint!("\r\x1b[2K{frame} {line}");
                }
            })
            .ok()?;
        Some(Arc::new(Self { shared }))
    }

    /// Shows `what` as under way, under `key`.
    pub(crate) fn begin(&self, key: &str, what: String) {
        self.shared.lock().expect("spinner").work.push((key.to_owned(), one_line(&what)));
    }

    /// `key`'s work is done. The line is cleared at once when nothing
    /// else is under way: what the command prints next must not be wiped.
    pub(crate) fn end(&self, key: &str) {
        let mut under = self.shared.lock().expect("spinner");
        under.work.retain(|(k, _)| k != key);
        if under.work.is_empty() {
            under.clear();
        }
    }

    /// What is under way, as the spinner draws it (without its frame), or
    /// `None` when nothing is. For a holder that draws it itself once the
    /// spinner is finished: `reson run`, between the lines of a run.
    pub(crate) fn current(&self) -> Option<String> {
        let under = self.shared.lock().expect("spinner");
        under.line()
    }

    /// Stops drawing for good, clearing the line; what a holder reports
    /// from now on is still kept, for [`Spinner::current`].
    pub(crate) fn finish(&self) {
        let mut under = self.shared.lock().expect("spinner");
        under.stopped = true;
        under.clear();
    }
}

/// Awaits `work`, drawing on stderr what `spinner` reports meanwhile
/// (starting a browser), for a command that prints nothing until its one
/// result: the spinner's own thread is finished by then. Clears the line
/// before returning.
pub(crate) async fn drawing_while<T>(
    spinner: Option<&Spinner>,
    work: impl std::future::Future<Output = T>,
) -> T {
    let Some(spinner) = spinner else { return work.await };
    let mut ticks = tokio::time::interval(std::time::Duration::from_millis(100));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut work = std::pin::pin!(work);
    let (mut frame, mut drawn) = (0, false);
    let done = loop {
        tokio::select! {
            done = &mut work => break done,
            _ = ticks.tick() => match spinner.current() {
                Some(line) => {
                    frame += 1;
                    drawn = true;
                    eprint!("\r\x1b[2K{} {line}", FRAMES[frame % FRAMES.len()]);
                }
                None if std::mem::take(&mut drawn) => eprint!("\r\x1b[2K"),
                None => {}
            },
        }
    };
    if drawn {
        eprint!("\r\x1b[2K");
    }
    done
}

impl Under {
    /// The line for what is under way, if anything is.
    fn line(&self) -> Option<String> {
        match self.work.as_slice() {
            [] => None,
            [(_, what)] => Some(format!("{what}…")),
            [(_, what), rest @ ..] => Some(format!("{what}… (and {} more)", rest.len())),
        }
    }

    fn clear(&mut self) {
        if std::mem::take(&mut self.drawn) {
            eprint!("\r\x1b[2K");
        }
    }
}

impl reson::plugin::WorkObserver for Spinner {
    fn compiling(&self, plugin: &str, file: &std::path::Path, bytes: usize) {
        let name = file.file_name().map_or_else(|| plugin.into(), |n| n.to_string_lossy());
        self.begin(plugin, format!("compiling {name} ({})", size_text(bytes)));
    }

    fn compiled(&self, plugin: &str) {
        self.end(plugin);
    }

    fn browser_starting(&self, plugin: &str) {
        self.begin(&format!("browser {plugin}"), format!("starting Chromium for {plugin}"));
    }

    fn browser_started(&self, plugin: &str) {
        self.end(&format!("browser {plugin}"));
    }
}

/// `println!` through [`clean`].
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::cli::term::write_out(&($crate::cli::term::clean(&format!($($arg)*)) + "\n"))
    };
}

/// `eprintln!` through [`clean`].
macro_rules! say_err {
    ($($arg:tt)*) => { eprintln!("{}", $crate::cli::term::clean(&format!($($arg)*))) };
}

/// `error: ...` on stderr, through [`clean`], the label in red where
/// stderr gets colours.
macro_rules! say_error {
    ($($arg:tt)*) => {
        $crate::cli::term::labelled("error:", $crate::cli::term::style::ERROR, &format!($($arg)*))
    };
}

/// `warning: ...` on stderr, as [`say_error`] in yellow.
macro_rules! say_warning {
    ($($arg:tt)*) => {
        $crate::cli::term::labelled("warning:", $crate::cli::term::style::WARNING, &format!($($arg)*))
    };
}

/// `print!` through [`clean`].
macro_rules! say_part {
    ($($arg:tt)*) => { $crate::cli::term::write_out(&$crate::cli::term::clean(&format!($($arg)*))) };
}

pub(crate) use {say, say_err, say_error, say_part, say_warning};

/// A size for people: `12 bytes`, `3.4 KB`, `13.2 MB`.
pub(crate) fn size_text(bytes: usize) -> String {
    match bytes {
        1 => "1 byte".to_owned(),
        b if b < 1_000 => format!("{b} bytes"),
        b if b < 1_000_000 => format!("{:.1} KB", b as f64 / 1e3),
        b => format!("{:.1} MB", b as f64 / 1e6),
    }
}

#[cfg(test)]
mod tests {
    use super::{clean, diff_painted, one_line, style};

    #[test]
    fn terminal_text_keeps_its_lines_and_loses_its_escapes() {
        assert_eq!(clean("a\x1b[2Jb\nc"), "a\\u{1b}[2Jb\nc");
        assert_eq!(one_line("{\"a\":\n1}\r\n"), "{\"a\":\\u{a}1}\\u{d}\\u{a}");
    }

    #[test]
    fn a_diff_is_painted_line_by_line_after_its_escapes_are_cleaned() {
        let patch = "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-old\n+new\x1b[2J\n same";
        let names = [
            (style::HEADER, "head"),
            (style::GOOD, "good"),
            (style::BAD, "bad"),
            (style::PLACE, "place"),
        ];
        let name = |s| names.iter().find(|(n, _)| *n == s).map(|(_, name)| *name).unwrap();
        let painted = diff_painted(patch, |s, line| format!("<{}>{line}</>", name(s)));
        assert_eq!(
            painted,
            "<head>--- a/x</>\n<head>+++ b/x</>\n<place>@@ -1 +1 @@</>\n<bad>-old</>\n\
             <good>+new\\u{1b}[2J</>\n same"
        );
    }
}
