//! Where the browser is: `[sandbox] chromium` when set, else the first of
//! the places each OS installs Chrome, Chromium or Edge that holds one.
//!
//! The places are a pure function of the OS and the environment, so that
//! the lists of every OS are tested on any.

use super::BrowserError;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

/// Where Debian installs Chromium.
pub const CHROMIUM: &str = "/usr/bin/chromium";

/// The program behind Debian's `chromium` wrapper script, which the host
/// starts directly: the wrapper adds flags and Google API keys of its own.
const CHROMIUM_BINARY: &str = "/usr/lib/chromium/chromium";

/// Browsers of macOS, under an `Applications` folder, best first.
const MACOS_APPS: [&str; 3] = [
    "/Google Chrome.app/Contents/MacOS/Google Chrome",
    "/Chromium.app/Contents/MacOS/Chromium",
    "/Microsoft Edge.app/Contents/MacOS/Microsoft Edge",
];

/// Browsers of Windows: the variable naming a folder, and the program
/// under it, best first. Chrome installs per machine (in either program
/// folder, by its age) or per user; Edge, part of Windows, in the 32-bit
/// program folder, where a few installs have it in the other.
const WINDOWS_APPS: [(&str, &str); 5] = [
    ("ProgramFiles", r"\Google\Chrome\Application\chrome.exe"),
    ("ProgramFiles(x86)", r"\Google\Chrome\Application\chrome.exe"),
    ("LocalAppData", r"\Google\Chrome\Application\chrome.exe"),
    ("ProgramFiles(x86)", r"\Microsoft\Edge\Application\msedge.exe"),
    ("ProgramFiles", r"\Microsoft\Edge\Application\msedge.exe"),
];

/// The operating systems whose browsers differ in where they are and how
/// they start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Os {
    /// Linux, and any other Unix but macOS: Debian's places.
    Linux,
    Mac,
    Windows,
}

impl Os {
    /// The OS the host was built for.
    pub(super) fn current() -> Self {
        if cfg!(target_os = "macos") {
            Self::Mac
        } else if cfg!(windows) {
            Self::Windows
        } else {
            Self::Linux
        }
    }
}

/// Where a browser may be on `os`, best first, with `env` the value of an
/// environment variable (unset or empty: the places under it are left out).
pub(super) fn candidates(os: Os, env: impl Fn(&str) -> Option<OsString>) -> Vec<PathBuf> {
    let var = |name: &str| env(name).filter(|value| !value.is_empty());
    // Joined as text, with the separator of `os` whatever the host's.
    let joined = |base: &OsStr, rest: &str| {
        let mut path = base.to_owned();
        path.push(rest);
        PathBuf::from(path)
    };
    match os {
        Os::Linux => vec![PathBuf::from(CHROMIUM_BINARY), PathBuf::from(CHROMIUM)],
        Os::Mac => {
            let user = var("HOME").map(|home| joined(&home, "/Applications"));
            let roots = std::iter::once(PathBuf::from("/Applications")).chain(user);
            roots.flat_map(|root| MACOS_APPS.map(|app| joined(root.as_os_str(), app))).collect()
        }
        Os::Windows => WINDOWS_APPS
            .iter()
            .filter_map(|(name, program)| Some(joined(&var(name)?, program)))
            .collect(),
    }
}

/// The browser to start: `setting` (`[sandbox] chromium`) when set, else
/// the first candidate of this OS that exists.
pub(super) fn browser(setting: Option<&Path>) -> Result<PathBuf, BrowserError> {
    pick(setting, &candidates(Os::current(), |name| std::env::var_os(name)))
}

/// [`browser`], among `candidates`.
fn pick(setting: Option<&Path>, candidates: &[PathBuf]) -> Result<PathBuf, BrowserError> {
    if let Some(path) = setting {
        return if !path.is_absolute() {
            Err(BrowserError::Failed(format!(
                "`[sandbox] chromium = \"{}\"` is not an absolute path",
                path.display()
            )))
        } else if path.is_file() {
            Ok(path.to_path_buf())
        } else {
            Err(BrowserError::Failed(format!(
                "no browser at {}, where `[sandbox] chromium` says it is",
                path.display()
            )))
        };
    }
    if let Some(found) = candidates.iter().find(|path| path.is_file()) {
        return Ok(found.clone());
    }
    let looked: Vec<String> = candidates.iter().map(|p| p.display().to_string()).collect();
    Err(BrowserError::Failed(format!(
        "no Chrome, Chromium or Edge found (looked at {}); install one there, or set \
         `[sandbox] chromium = \"PATH\"` in reson.toml to the browser's program",
        looked.join(", ")
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<OsString> {
        let vars: HashMap<String, OsString> =
            vars.iter().map(|(k, v)| ((*k).to_owned(), OsString::from(v))).collect();
        move |name| vars.get(name).cloned()
    }

    fn strings(paths: Vec<PathBuf>) -> Vec<String> {
        paths.into_iter().map(|p| p.to_string_lossy().into_owned()).collect()
    }

    fn failure(result: Result<PathBuf, BrowserError>) -> String {
        match result {
            Err(BrowserError::Failed(message)) => message,
            other => panic!("expected a failure, got {other:?}"),
        }
    }

    #[test]
    fn linux_looks_where_debian_installs_chromium_as_before() {
        assert_eq!(
            strings(candidates(Os::Linux, env(&[("HOME", "/home/u")]))),
            ["/usr/lib/chromium/chromium", "/usr/bin/chromium"]
        );
    }

    #[test]
    fn macos_looks_in_the_system_applications_then_the_users() {
        assert_eq!(
            strings(candidates(Os::Mac, env(&[("HOME", "/Users/u")]))),
            [
                "/Applications/Google Chrome.app/Contents/MacOS/Google Chrome",
                "/Applications/Chromium.app/Contents/MacOS/Chromium",
                "/Applications/Microsoft Edge.app/Contents/MacOS/Microsoft Edge",
                "/Users/u/Applications/Google Chrome.app/Contents/MacOS/Google Chrome",
                "/Users/u/Applications/Chromium.app/Contents/MacOS/Chromium",
                "/Users/u/Applications/Microsoft Edge.app/Contents/MacOS/Microsoft Edge",
            ]
        );
        assert_eq!(candidates(Os::Mac, env(&[("HOME", "")])).len(), 3, "no HOME, no user's");
    }

    #[test]
    fn windows_looks_in_the_program_folders_and_the_users() {
        let vars = [
            ("ProgramFiles", r"C:\Program Files"),
            ("ProgramFiles(x86)", r"C:\Program Files (x86)"),
            ("LocalAppData", r"C:\Users\u\AppData\Local"),
        ];
        assert_eq!(
            strings(candidates(Os::Windows, env(&vars))),
            [
                r"C:\Program Files\Google\Chrome\Application\chrome.exe",
                r"C:\Program Files (x86)\Google\Chrome\Application\chrome.exe",
                r"C:\Users\u\AppData\Local\Google\Chrome\Application\chrome.exe",
                r"C:\Program Files (x86)\Microsoft\Edge\Application\msedge.exe",
                r"C:\Program Files\Microsoft\Edge\Application\msedge.exe",
            ]
        );
        // A 32-bit Windows has no `ProgramFiles(x86)`.
        assert_eq!(
            strings(candidates(Os::Windows, env(&vars[..1]))),
            [
                r"C:\Program Files\Google\Chrome\Application\chrome.exe",
                r"C:\Program Files\Microsoft\Edge\Application\msedge.exe",
            ]
        );
    }

    #[test]
    fn the_first_candidate_that_exists_is_taken() {
        let dir = tempfile::tempdir().unwrap();
        let (missing, present) = (dir.path().join("chrome"), dir.path().join("edge"));
        std::fs::write(&present, "").unwrap();
        let found = pick(None, &[missing, present.clone(), dir.path().to_path_buf()]);
        assert_eq!(found.unwrap(), present);
    }

    #[test]
    fn none_found_names_the_places_and_the_setting() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a/chrome"), dir.path().join("b/msedge.exe"));
        let message = failure(pick(None, &[a.clone(), b.clone()]));
        assert!(message.contains(&a.display().to_string()), "{message}");
        assert!(message.contains(&b.display().to_string()), "{message}");
        assert!(message.contains("[sandbox] chromium"), "{message}");
    }

    #[test]
    fn the_setting_wins_over_the_candidates_and_must_exist() {
        let dir = tempfile::tempdir().unwrap();
        let (mine, installed) = (dir.path().join("my-chrome"), dir.path().join("chromium"));
        std::fs::write(&mine, "").unwrap();
        std::fs::write(&installed, "").unwrap();
        let candidates = [installed];
        assert_eq!(pick(Some(&mine), &candidates).unwrap(), mine);

        let gone = dir.path().join("gone");
        let message = failure(pick(Some(&gone), &candidates));
        assert!(message.contains(&gone.display().to_string()), "{message}");
        assert!(message.contains("[sandbox] chromium"), "{message}");

        let message = failure(pick(Some(Path::new("chrome")), &candidates));
        assert!(message.contains("absolute"), "{message}");
    }
}
