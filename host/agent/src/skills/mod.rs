//! Skills: markdown instructions a model follows for a kind of work. Each
//! is a file with YAML front matter (`name`, `description`, `category`)
//! and the instructions as its body.
//!
//! The host ships built-ins (`browser`, `planning`, `research`); project skills come
//! from `./skills/*.md` or the directories set in `[skills] dirs`, and one
//! of the same name replaces a built-in. The skills a preset lists (all
//! when it lists none, or the list a run is given) go into the system
//! prompt when a trace starts; the built-in `skill` tool loads any other on
//! demand.
//!
//! ```
//! use reson_agent::skills::Skills;
//!
//! let skills = Skills::load(&[]).unwrap();
//! let chosen = skills.select(Some(&["planning".to_owned()])).unwrap();
//! assert!(Skills::prompt_section(&chosen).contains("## Skill: planning"));
//! ```

pub(crate) mod front_matter;

use serde::Deserialize;
use std::path::{Path, PathBuf};

/// The built-in skills, as shipped.
const BUILTINS: [(&str, &str); 3] = [
    ("browser", include_str!("../../skills/browser.md")),
    ("planning", include_str!("../../skills/planning.md")),
    ("research", include_str!("../../skills/research.md")),
];

/// Why skills could not be loaded or chosen.
#[derive(Debug, thiserror::Error)]
pub enum SkillError {
    /// A skill directory or file could not be read.
    #[error("cannot read skill {path}: {source}")]
    Read {
        /// The file or directory.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A skill file is not front matter plus instructions.
    #[error("malformed skill file {path}:{line}: {message}")]
    Malformed {
        /// The file.
        path: PathBuf,
        /// The 1-based line.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// Two files in the project define the same skill.
    #[error("skill `{name}` is defined twice: {first} and {second}")]
    Duplicate {
        /// The skill.
        name: String,
        /// One file.
        first: PathBuf,
        /// The other.
        second: PathBuf,
    },
    /// A skill was asked for by a name no skill has.
    #[error("no skill `{name}` (skills: {})", available.join(", "))]
    Unknown {
        /// The name asked for.
        name: String,
        /// The names there are.
        available: Vec<String>,
    },
}

/// Where a skill came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// Shipped with the host.
    Builtin,
    /// A project file.
    File(PathBuf),
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Builtin => f.write_str("built-in"),
            Self::File(path) => write!(f, "{}", path.display()),
        }
    }
}

/// One skill.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skill {
    /// Its name, unique among the skills loaded.
    pub name: String,
    /// When to use it, one line.
    pub description: String,
    /// A free grouping, such as `workflow`.
    pub category: String,
    /// The instructions.
    pub body: String,
    /// Where it came from.
    pub origin: Origin,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Header {
    name: String,
    description: String,
    #[serde(default)]
    category: String,
}

impl Skill {
    /// Parses one skill file's text; `origin` names it in errors.
    pub fn parse(text: &str, origin: Origin) -> Result<Self, SkillError> {
        let path = match &origin {
            Origin::Builtin => PathBuf::from("<built-in>"),
            Origin::File(path) => path.clone(),
        };
        let malformed =
            |line, message: String| SkillError::Malformed { path: path.clone(), line, message };
        let (yaml, line, body) =
            front_matter::single(text).map_err(|(line, message)| malformed(line, message))?;
        let header: Header = serde_yaml_ng::from_str(&yaml).map_err(|e| {
            malformed(line + e.location().map_or(0, |l| l.line()), format!("front matter: {e}"))
        })?;
        let name = header.name.trim().to_owned();
        let valid = !name.is_empty()
            && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_'));
        if !valid {
            return Err(malformed(line, format!("name `{name}`: use letters, digits, - and _")));
        }
        if body.is_empty() {
            return Err(malformed(line, format!("skill `{name}` has no instructions")));
        }
        Ok(Self {
            name,
            description: header.description.trim().to_owned(),
            category: header.category.trim().to_owned(),
            body,
            origin,
        })
    }
}

/// The skills on offer: the built-ins, then the project's.
#[derive(Debug, Clone)]
pub struct Skills {
    skills: Vec<Skill>,
}

impl Skills {
    /// The built-in skills and those of the config's `[skills] dirs`
    /// (relative to the config file).
    pub fn from_config(
        config: &impl AsRef<crate::config::AgentConfig>,
    ) -> Result<Self, SkillError> {
        let config = config.as_ref();
        let dirs: Vec<_> = config.skills.dirs.iter().map(|d| config.resolve(d)).collect();
        Self::load(&dirs)
    }

    /// The built-ins plus every `*.md` in `dirs` (a directory that does not
    /// exist is skipped). A project skill replaces a built-in of the same
    /// name; two project files of one name are an error, as is any
    /// malformed file.
    pub fn load(dirs: &[PathBuf]) -> Result<Self, SkillError> {
        let mut skills: Vec<Skill> = BUILTINS
            .iter()
            .map(|(_, text)| Skill::parse(text, Origin::Builtin))
            .collect::<Result<_, _>>()?;
        for dir in dirs {
            for path in markdown_files(dir)? {
                let text = std::fs::read_to_string(&path)
                    .map_err(|source| SkillError::Read { path: path.clone(), source })?;
                let skill = Skill::parse(&text, Origin::File(path.clone()))?;
                match skills.iter_mut().find(|s| s.name == skill.name) {
                    Some(old) if old.origin == Origin::Builtin => *old = skill,
                    Some(old) => {
                        let first = PathBuf::from(old.origin.to_string());
                        return Err(SkillError::Duplicate {
                            name: skill.name,
                            first,
                            second: path,
                        });
                    }
                    None => skills.push(skill),
                }
            }
        }
        skills.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(Self { skills })
    }

    /// Every skill, by name.
    pub fn all(&self) -> &[Skill] {
        &self.skills
    }

    /// The skill called `name`.
    pub fn get(&self, name: &str) -> Result<&Skill, SkillError> {
        self.skills.iter().find(|s| s.name == name).ok_or_else(|| SkillError::Unknown {
            name: name.to_owned(),
            available: self.skills.iter().map(|s| s.name.clone()).collect(),
        })
    }

    /// The skills named in `names`, in that order; every skill when `None`.
    /// An unknown name is an error.
    pub fn select(&self, names: Option<&[String]>) -> Result<Vec<&Skill>, SkillError> {
        match names {
            None => Ok(self.skills.iter().collect()),
            Some(names) => names.iter().map(|n| self.get(n)).collect(),
        }
    }

    /// The system-prompt section for `chosen`: each skill's name,
    /// description and instructions.
    pub fn prompt_section(chosen: &[&Skill]) -> String {
        chosen
            .iter()
            .map(|s| format!("## Skill: {}\n{}\n\n{}\n", s.name, s.description, s.body))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The system prompt of a new trace: `base`, then the skills `names`
    /// chooses (every skill when `None`), then the names of the others,
    /// which the `skill` tool loads.
    pub fn system_prompt(
        &self,
        base: Option<&str>,
        names: Option<&[String]>,
    ) -> Result<String, SkillError> {
        let chosen = self.select(names)?;
        let mut prompt = base.unwrap_or_default().trim_end().to_owned();
        if !chosen.is_empty() {
            prompt.push_str("\n\n# Skills\n\n");
            prompt.push_str(&Self::prompt_section(&chosen));
        }
        let others: Vec<String> = self
            .skills
            .iter()
            .filter(|s| !chosen.iter().any(|c| c.name == s.name))
            .map(|s| format!("- {}: {}", s.name, s.description))
            .collect();
        if !others.is_empty() {
            prompt.push_str("\n\n# More skills\nLoad one with the `skill` tool when it fits:\n");
            prompt.push_str(&others.join("\n"));
        }
        Ok(prompt.trim_start().to_owned())
    }
}

/// The `*.md` files directly in `dir`, sorted; none when `dir` is missing.
fn markdown_files(dir: &Path) -> Result<Vec<PathBuf>, SkillError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => return Err(SkillError::Read { path: dir.to_path_buf(), source }),
    };
    let mut files = Vec::new();
    for entry in entries {
        let path =
            entry.map_err(|source| SkillError::Read { path: dir.to_path_buf(), source })?.path();
        if path.extension().is_some_and(|e| e == "md") && path.is_file() {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtins_load_and_a_project_skill_replaces_one() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("planning.md"),
            "---\nname: planning\ndescription: ours\n---\nPlan our way.\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("notes.txt"), "not a skill").unwrap();
        let skills = Skills::load(&[dir.path().to_path_buf()]).unwrap();
        let names: Vec<&str> = skills.all().iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["browser", "planning", "research"]);
        let planning = skills.get("planning").unwrap();
        assert_eq!(planning.body, "Plan our way.");
        assert_eq!(planning.origin, Origin::File(dir.path().join("planning.md")));
        assert_eq!(skills.get("research").unwrap().origin, Origin::Builtin);
        // A markdown rule in the instructions is just text.
        let ruled = "---\nname: ruled\ndescription: d\n---\none\n---\ntwo\n";
        assert_eq!(Skill::parse(ruled, Origin::Builtin).unwrap().body, "one\n---\ntwo");
    }

    #[test]
    fn malformed_files_are_errors_naming_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.md");
        let cases = [
            ("no front matter\n", "bad.md:1"),
            ("---\nname: x\n", "never closed"),
            ("---\nname: x\ndescription: [unclosed\n---\nbody\n", "front matter"),
            ("---\nname: x\n---\nbody\n", "description"),
            ("---\nname: a b\ndescription: d\n---\nbody\n", "name `a b`"),
            ("---\nname: x\ndescription: d\n---\n\n", "no instructions"),
            ("---\nname: x\ndescription: d\nextra: 1\n---\nbody\n", "unknown field `extra`"),
        ];
        for (text, expected) in cases {
            std::fs::write(&path, text).unwrap();
            let err = Skills::load(&[dir.path().to_path_buf()]).unwrap_err().to_string();
            assert!(err.contains("bad.md") && err.contains(expected), "{text:?}: {err}");
        }
    }

    #[test]
    fn selection_filters_and_unknown_names_fail() {
        let skills = Skills::load(&[]).unwrap();
        let prompt = skills.system_prompt(Some("Base."), Some(&["research".into()])).unwrap();
        assert!(prompt.starts_with("Base.\n\n# Skills"), "{prompt}");
        assert!(prompt.contains("## Skill: research") && !prompt.contains("## Skill: planning"));
        assert!(prompt.contains("- planning: "), "{prompt}");
        let all = skills.system_prompt(None, None).unwrap();
        assert!(all.contains("## Skill: research") && all.contains("## Skill: planning"));
        let err = skills.select(Some(&["nope".into()])).unwrap_err().to_string();
        assert_eq!(err, "no skill `nope` (skills: browser, planning, research)");
    }
}
