//! Agent presets: named bundles of tools, permission rules and sampling
//! settings. Built-ins cover the common cases; `[presets.NAME]` in
//! `reson.toml` adds more or replaces a built-in of the same name.

use super::rules::{Decision, Rule, RuleError, RuleSet, ToolMatcher};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The built-in presets, sorted.
const BUILTINS: [&str; 4] = ["analyst", "browser", "default", "explore"];

/// The browser plugin's tools.
const BROWSER_TOOLS: [&str; 7] = [
    "browser_navigate",
    "browser_click",
    "browser_type",
    "browser_read",
    "browser_screenshot",
    "browser_back",
    "browser_wait",
];

/// Tools that only read, plus the goal tool, which only plans, and the
/// skill and experience look-ups.
const READ_ONLY: [&str; 10] = [
    "read",
    "glob",
    "grep",
    "list",
    "goal",
    "skill",
    "get_experience",
    "search",
    "read_pdf",
    "lsp_diagnostics",
];

/// A named way to run an agent.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Preset {
    /// The name; for a user preset, the key it is listed under.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// What the preset is for, for people choosing one.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// Only these tools are offered (subject to the rules); all when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_tools: Option<Vec<String>>,
    /// These tools are never offered.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub denied_tools: Vec<String>,
    /// Most model turns in one run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_iterations: Option<u32>,
    /// Sampling temperature.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    /// Skills loaded into the history.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skills: Vec<String>,
    /// Permission rules, after the global ones so that they win.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<Rule>,
}

impl Preset {
    /// The built-in preset `name`: `default` (every tool; reads run, changes,
    /// commands, fetches and code ask), `explore` (read-only tools only) or
    /// `analyst` (reads and fetches run, no shell, 30 turns, temperature 0.2)
    /// or `browser` (the browser tools and read-only file tools, with the
    /// `browser` skill; looking runs freely, clicking and typing ask).
    pub fn builtin(name: &str) -> Option<Preset> {
        let read_only = format!("{{{}}}", READ_ONLY.join(","));
        let preset = |description: &str, rules| Preset {
            name: name.to_owned(),
            description: description.to_owned(),
            rules,
            ..Preset::default()
        };
        match name {
            "default" => Some(preset(
                "All tools: reading and sub-agents run freely; writing, editing, commands, \
                 fetches and running code ask first.",
                vec![
                    rule(Decision::Allow, &read_only),
                    // A sub-agent is held to the caller's tools and rules
                    // as well as its own, so starting one needs no approval;
                    // a question to a person is its own approval.
                    rule(Decision::Allow, "{agent,evaluate,ask_human}"),
                    rule(Decision::Ask, "{write,edit,shell,webfetch,run_code}"),
                ],
            )),
            "explore" => Some(Preset {
                allowed_tools: Some(READ_ONLY.map(str::to_owned).to_vec()),
                ..preset(
                    "Read-only: reads, searches and lists files; nothing else is offered.",
                    vec![rule(Decision::Allow, &read_only)],
                )
            }),
            "analyst" => Some(Preset {
                denied_tools: vec!["shell".to_owned()],
                max_iterations: Some(30),
                temperature: Some(0.2),
                ..preset(
                    "Reads files and fetches web pages freely, never runs commands; focused \
                     sampling.",
                    vec![
                        rule(Decision::Allow, &read_only),
                        rule(Decision::Allow, "{webfetch,ask_human}"),
                    ],
                )
            }),
            "browser" => Some(Preset {
                allowed_tools: Some(
                    BROWSER_TOOLS.iter().chain(READ_ONLY.iter()).map(|t| (*t).to_owned()).collect(),
                ),
                max_iterations: Some(40),
                skills: vec!["browser".to_owned()],
                ..preset(
                    "Browses granted web pages with the headless browser: navigating, reading, \
                     screenshots and waiting run freely; clicking and typing ask first; no file \
                     changes or commands.",
                    vec![
                        rule(Decision::Allow, &read_only),
                        rule(
                            Decision::Allow,
                            "{browser_navigate,browser_read,browser_screenshot,browser_back,\
                             browser_wait}",
                        ),
                        rule(Decision::Ask, "{browser_click,browser_type}"),
                    ],
                )
            }),
            _ => None,
        }
    }

    /// The preset `name`: a user preset of that name, else the built-in.
    /// Fails with the names available when there is neither.
    pub fn resolve(
        name: &str,
        user_presets: &BTreeMap<String, Preset>,
    ) -> Result<Preset, RuleError> {
        if let Some(preset) = user_presets.get(name) {
            return Ok(Preset { name: name.to_owned(), ..preset.clone() });
        }
        Self::builtin(name).ok_or_else(|| {
            let mut available: Vec<String> = BUILTINS
                .iter()
                .map(|&b| b.to_owned())
                .chain(user_presets.keys().cloned())
                .collect();
            available.sort();
            available.dedup();
            RuleError::UnknownPreset { name: name.to_owned(), available }
        })
    }

    /// The rules in force under this preset: `global`'s, then the preset's
    /// (a built-in preset's rules come first instead: they are defaults,
    /// and the user's global rules win over them), then denials for tools outside `allowed_tools` and for
    /// `denied_tools`, last so that they win. Fails when the preset's own
    /// rules do not compile or their examples fail.
    pub fn rule_set(&self, global: &RuleSet) -> Result<RuleSet, RuleError> {
        let own = RuleSet::compile(&self.rules).map_err(|source| RuleError::Preset {
            name: self.name.clone(),
            source: Box::new(source),
        })?;
        let mut set = if Self::builtin(&self.name).as_ref() == Some(self) {
            RuleSet::layered(&own.with_settings_of(global), global)
        } else {
            RuleSet::layered(global, &own)
        };
        if let Some(allowed) = &self.allowed_tools {
            set = set.then_deny(
                ToolMatcher::AllBut(allowed.clone()),
                format!(
                    "deny every tool but {} (allowed_tools of preset `{}`)",
                    allowed.join(", "),
                    self.name
                ),
            );
        }
        if !self.denied_tools.is_empty() {
            set = set.then_deny(
                ToolMatcher::Named(self.denied_tools.clone()),
                format!(
                    "deny {} (denied_tools of preset `{}`)",
                    self.denied_tools.join(", "),
                    self.name
                ),
            );
        }
        Ok(set)
    }

    /// Whether the preset's tool lists let `tool` be offered. Rules can hide
    /// more tools; [`RuleSet::offered`] on [`Preset::rule_set`] tells.
    pub fn offers(&self, tool: &str) -> bool {
        self.allowed_tools.as_ref().is_none_or(|tools| tools.iter().any(|t| t == tool))
            && !self.denied_tools.iter().any(|t| t == tool)
    }
}

fn rule(decision: Decision, tool: &str) -> Rule {
    Rule {
        decision,
        tool: tool.to_owned(),
        pattern: None,
        examples: Vec::new(),
        counter_examples: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn decide(preset: &Preset, global: &[Rule], tool: &str, args: serde_json::Value) -> Decision {
        let global = RuleSet::compile(global).unwrap();
        preset.rule_set(&global).unwrap().decide(tool, &args).decision
    }

    #[test]
    fn every_builtin_exists_and_compiles() {
        for name in BUILTINS {
            let preset = Preset::builtin(name).unwrap();
            assert_eq!(preset.name, name);
            preset.rule_set(&RuleSet::compile(&[]).unwrap()).unwrap();
        }
        assert!(Preset::builtin("nope").is_none());
    }

    #[test]
    fn default_reads_freely_and_asks_for_changes() {
        let preset = Preset::builtin("default").unwrap();
        assert_eq!(decide(&preset, &[], "read", json!({ "path": "a" })), Decision::Allow);
        assert_eq!(decide(&preset, &[], "goal", json!({})), Decision::Allow);
        assert_eq!(decide(&preset, &[], "agent", json!({ "task": "x" })), Decision::Allow);
        for tool in ["write", "edit", "shell", "webfetch"] {
            assert_eq!(decide(&preset, &[], tool, json!({})), Decision::Ask, "{tool}");
        }
        assert!(preset.offers("shell"));
    }

    #[test]
    fn explore_denies_write_and_shell() {
        let preset = Preset::builtin("explore").unwrap();
        // Even a global allow cannot bring back a tool the preset leaves out.
        let global = [rule(Decision::Allow, "*")];
        assert_eq!(decide(&preset, &global, "write", json!({ "path": "a" })), Decision::Deny);
        assert_eq!(decide(&preset, &global, "shell", json!({ "command": "ls" })), Decision::Deny);
        assert_eq!(decide(&preset, &[], "grep", json!({ "pattern": "x" })), Decision::Allow);
        let set = preset.rule_set(&RuleSet::compile(&global).unwrap()).unwrap();
        assert!(!set.offered("write") && !set.offered("shell") && set.offered("read"));
        assert!(!preset.offers("write") && preset.offers("list"));
        assert!(!set.offered("ask_human"), "explore runs without asking anyone");
        assert!(set.offered("search"), "explore searches the web");
        assert_eq!(decide(&preset, &[], "search", json!({ "query": "x" })), Decision::Allow);
        let default = Preset::builtin("default").unwrap();
        assert_eq!(decide(&default, &[], "ask_human", json!({ "question": "?" })), Decision::Allow);
        let verdict = set.decide("shell", &json!({ "command": "ls" }));
        assert_eq!(
            verdict.rule.as_deref(),
            Some(concat!(
                "deny every tool but read, glob, grep, list, goal, skill, get_experience, search, \
                 read_pdf, lsp_diagnostics ",
                "(allowed_tools of preset `explore`)"
            ))
        );
    }

    #[test]
    fn browser_offers_the_browser_tools_and_asks_before_acting() {
        let preset = Preset::builtin("browser").unwrap();
        let url = json!({ "url": "https://docs.example.org/" });
        assert_eq!(decide(&preset, &[], "browser_navigate", url), Decision::Allow);
        assert_eq!(decide(&preset, &[], "browser_read", json!({})), Decision::Allow);
        assert_eq!(decide(&preset, &[], "browser_click", json!({})), Decision::Ask);
        assert_eq!(decide(&preset, &[], "browser_type", json!({ "text": "x" })), Decision::Ask);
        assert_eq!(decide(&preset, &[], "shell", json!({ "command": "ls" })), Decision::Deny);
        assert!(preset.offers("browser_screenshot") && preset.offers("read"));
        assert!(!preset.offers("write") && !preset.offers("webfetch"));
        assert_eq!(preset.skills, ["browser"]);
    }

    #[test]
    fn analyst_denies_shell_and_allows_webfetch() {
        let preset = Preset::builtin("analyst").unwrap();
        let global = [rule(Decision::Allow, "shell")];
        assert_eq!(decide(&preset, &global, "shell", json!({ "command": "ls" })), Decision::Deny);
        let fetch = json!({ "url": "https://docs.rs/" });
        assert_eq!(decide(&preset, &[], "webfetch", fetch), Decision::Allow);
        assert_eq!(decide(&preset, &[], "read", json!({ "path": "a" })), Decision::Allow);
        assert_eq!(decide(&preset, &[], "write", json!({ "path": "a" })), Decision::Ask);
        assert!(!preset.offers("shell") && preset.offers("webfetch"));
        assert!(!preset.rule_set(&RuleSet::compile(&[]).unwrap()).unwrap().offered("shell"));
        assert_eq!((preset.max_iterations, preset.temperature), (Some(30), Some(0.2)));
    }

    #[test]
    fn global_rules_apply_where_the_preset_is_silent() {
        let preset = Preset::builtin("analyst").unwrap();
        let global = [Rule { pattern: Some("src/**".into()), ..rule(Decision::Allow, "write") }];
        assert_eq!(decide(&preset, &global, "write", json!({ "path": "src/a" })), Decision::Allow);
    }

    #[test]
    fn global_rules_win_over_a_builtin_presets_defaults() {
        let preset = Preset::builtin("default").unwrap();
        let global = [
            Rule { pattern: Some("**/.env".into()), ..rule(Decision::Deny, "read") },
            Rule { pattern: Some("git *".into()), ..rule(Decision::Allow, "shell") },
        ];
        assert_eq!(decide(&preset, &global, "read", json!({ "path": "app/.env" })), Decision::Deny);
        assert_eq!(
            decide(&preset, &global, "read", json!({ "path": "app/main.rs" })),
            Decision::Allow
        );
        assert_eq!(
            decide(&preset, &global, "shell", json!({ "command": "git status" })),
            Decision::Allow
        );
        assert_eq!(
            decide(&preset, &global, "shell", json!({ "command": "rm -rf /" })),
            Decision::Ask
        );
    }

    #[test]
    fn user_preset_overrides_builtin() {
        let user = Preset {
            description: "mine".into(),
            rules: vec![rule(Decision::Allow, "shell")],
            ..Preset::default()
        };
        let presets = BTreeMap::from([("explore".to_owned(), user)]);
        let preset = Preset::resolve("explore", &presets).unwrap();
        assert_eq!((preset.name.as_str(), preset.description.as_str()), ("explore", "mine"));
        assert_eq!(preset.allowed_tools, None);
        assert_eq!(decide(&preset, &[], "shell", json!({ "command": "ls" })), Decision::Allow);
        assert_eq!(
            Preset::resolve("analyst", &presets).unwrap(),
            Preset::builtin("analyst").unwrap()
        );
    }

    #[test]
    fn unknown_preset_lists_the_available_ones() {
        let presets = BTreeMap::from([
            ("review".to_owned(), Preset::default()),
            ("default".to_owned(), Preset::default()),
        ]);
        let err = Preset::resolve("reveiw", &presets).unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown preset `reveiw`; available: analyst, browser, default, explore, review"
        );
    }

    #[test]
    fn bad_preset_rules_name_the_preset() {
        let preset = Preset {
            name: "review".into(),
            rules: vec![Rule {
                pattern: Some("git *".into()),
                examples: vec!["gti diff".into()],
                ..rule(Decision::Allow, "shell")
            }],
            ..Preset::default()
        };
        let err = preset.rule_set(&RuleSet::compile(&[]).unwrap()).unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"preset `review`: rule 1 (allow shell "git *"): example "gti diff" does not match"#
        );
    }

    #[test]
    fn toml_round_trip() {
        let text = r#"
            [review]
            description = "Reviews changes"
            allowed_tools = ["read", "grep", "shell"]
            denied_tools = ["write"]
            max_iterations = 12
            temperature = 0.3
            skills = ["code-review"]

            [[review.rules]]
            decision = "allow"
            tool = "shell"
            pattern = "git *"
            examples = ["git diff"]
            counter_examples = ["rm -rf /"]

            [[review.rules]]
            decision = "deny"
            tool = "read"
            pattern = "**/.env"
        "#;
        let presets: BTreeMap<String, Preset> = toml::from_str(text).unwrap();
        let preset = Preset::resolve("review", &presets).unwrap();
        assert_eq!(preset.rules[1].decision, Decision::Deny);
        assert_eq!(preset.temperature, Some(0.3));
        let again: BTreeMap<String, Preset> =
            toml::from_str(&toml::to_string(&presets).unwrap()).unwrap();
        assert_eq!(again, presets);
        let serialized = toml::to_string(&preset).unwrap();
        assert!(serialized.contains(r#"decision = "allow""#), "{serialized}");
        assert_eq!(toml::from_str::<Preset>(&serialized).unwrap(), preset);
        let set = preset.rule_set(&RuleSet::compile(&[]).unwrap()).unwrap();
        assert_eq!(
            set.decide("shell", &json!({ "command": "git diff" })).decision,
            Decision::Allow
        );
        assert_eq!(set.decide("read", &json!({ "path": "a/.env" })).decision, Decision::Deny);
        assert_eq!(set.decide("list", &json!({})).decision, Decision::Deny);
        assert!(toml::from_str::<Preset>("allowed = []").is_err());
    }
}
