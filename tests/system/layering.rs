//! The host's shape: its crates depend only on crates below them, and inside
//! a crate no modules depend on each other in a circle. Both decay silently
//! (a `use` here, a dependency line there) and are costly to undo once code
//! leans on them, so this reads the sources and refuses the first step.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::{Path, PathBuf};

/// Each host crate, its folder, and the reson crates it may depend on.
const LAYERS: &[(&str, &str, &[&str])] = &[
    ("reson-text", "host/text", &[]),
    ("reson-origin-guard", "host/origin-guard", &[]),
    ("reson-registry", "host/registry", &[]),
    ("reson-sandbox", "host/sandbox", &["reson-text"]),
    ("reson-trace", "host/trace", &["reson-text"]),
    ("reson-workspace", "host/workspace", &["reson-text", "reson-trace"]),
    (
        "reson-agent",
        "host/agent",
        &["reson-text", "reson-sandbox", "reson-trace", "reson-workspace"],
    ),
    (
        "reson-mcp",
        "host/mcp",
        &[
            "reson-text",
            "reson-sandbox",
            "reson-trace",
            "reson-workspace",
            "reson-agent",
            "reson-origin-guard",
        ],
    ),
    (
        "reson-server",
        "host/server",
        &[
            "reson-text",
            "reson-sandbox",
            "reson-trace",
            "reson-workspace",
            "reson-agent",
            "reson-mcp",
            "reson-origin-guard",
        ],
    ),
    (
        "reson",
        "host",
        &[
            "reson-text",
            "reson-sandbox",
            "reson-trace",
            "reson-workspace",
            "reson-agent",
            "reson-mcp",
            "reson-origin-guard",
            "reson-registry",
            "reson-server",
        ],
    ),
];

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("host/ has a parent").to_path_buf()
}

fn read_toml(path: &Path) -> toml::Table {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.parse().unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn crates_depend_only_downward() {
    let root = workspace_root();
    let workspace = read_toml(&root.join("Cargo.toml"));
    let workspace = workspace["workspace"].as_table().expect("[workspace]");
    let workspace_deps = workspace.get("dependencies").and_then(|d| d.as_table());
    let mut failures = Vec::new();

    // A new crate under host/ with no row here would escape every check below.
    for member in workspace["members"].as_array().expect("workspace.members") {
        let dir = member.as_str().expect("a member is a path");
        if (dir == "host" || dir.starts_with("host/")) && !LAYERS.iter().any(|l| l.1 == dir) {
            failures.push(format!("{dir} is a workspace member with no place in LAYERS"));
        }
    }

    for &(name, dir, allowed) in LAYERS {
        let manifest = read_toml(&root.join(dir).join("Cargo.toml"));
        let package = manifest["package"]["name"].as_str().expect("package.name");
        assert_eq!(package, name, "{dir}/Cargo.toml names another crate than LAYERS says");

        // Target-specific tables count too: a dependency behind cfg(unix) still
        // ties the crates together.
        let mut tables: Vec<&toml::Table> = vec![&manifest];
        if let Some(targets) = manifest.get("target").and_then(|t| t.as_table()) {
            tables.extend(targets.values().filter_map(|t| t.as_table()));
        }
        for table in tables {
            for kind in ["dependencies", "dev-dependencies", "build-dependencies"] {
                let Some(deps) = table.get(kind).and_then(|d| d.as_table()) else { continue };
                for (key, spec) in deps {
                    // A renamed dependency is known by its `package`, in the
                    // crate's own line or in the workspace's.
                    let renamed = |spec: &toml::Value| {
                        spec.get("package").and_then(|p| p.as_str()).map(str::to_string)
                    };
                    let inherited = || workspace_deps.and_then(|w| w.get(key)).and_then(renamed);
                    let dep = renamed(spec).or_else(inherited).unwrap_or_else(|| key.clone());
                    if !dep.starts_with("reson") || allowed.contains(&dep.as_str()) {
                        continue;
                    }
                    if LAYERS.iter().any(|l| l.0 == dep) {
                        failures.push(format!(
                            "{name} depends on {dep} ([{kind}] in {dir}/Cargo.toml), which is \
                             not below it; it may use only {allowed:?}"
                        ));
                    } else {
                        failures.push(format!(
                            "{name} depends on {dep} ([{kind}] in {dir}/Cargo.toml), which has \
                             no place in LAYERS"
                        ));
                    }
                }
            }
        }
    }
    assert!(failures.is_empty(), "crate layering broken:\n{}", failures.join("\n"));
}

#[test]
fn no_module_cycles_inside_a_crate() {
    let root = workspace_root();
    let mut failures = Vec::new();
    for &(name, dir, _) in LAYERS {
        let src = root.join(dir).join("src");
        let mut files = Vec::new();
        collect_sources(&src, &src, &mut files);
        let sources: Vec<(&str, &str)> =
            files.iter().map(|(path, text)| (path.as_str(), text.as_str())).collect();
        let mut uses = module_uses(&sources);

        // wasmtime's bindgen! maps the generated WIT resource type onto the
        // host's own type only through a `with:` path written inside the
        // contract module, so contract -> capability cannot be avoided there;
        // the same edge from anywhere else is a real cycle.
        if name == "reson-sandbox" {
            let before = uses.len();
            uses.retain(|u| {
                !(u.file == "contract/bindings.rs"
                    && u.from.first().is_some_and(|m| m == "contract")
                    && u.to.first().is_some_and(|m| m == "capability"))
            });
            assert!(
                uses.len() < before,
                "reson-sandbox: contract/bindings.rs no longer reaches capability; \
                 drop its exemption from this test"
            );
        }

        for depth in [1, 2] {
            for cycle in find_cycles(&edges(&uses, depth)) {
                failures.push(describe(name, dir, &cycle));
            }
        }
    }
    assert!(failures.is_empty(), "module cycles:\n\n{}", failures.join("\n\n"));
}

/// A route of `reson serve` reaches a trace only through its caller
/// (`access::Traces::get`): the whole store is for the server's own work,
/// so a route that forgot whose a trace is cannot compile its way past it.
#[test]
fn server_routes_reach_traces_only_through_the_caller() {
    let src = workspace_root().join("host/server/src");
    let mut files = Vec::new();
    collect_sources(&src, &src.join("routes"), &mut files);
    assert!(files.len() >= 5, "the routes moved: {files:?}");
    let mut failures = Vec::new();
    for (path, text) in &files {
        let code = code_only(text);
        for (line, row) in code.lines().enumerate() {
            for forbidden in [".unscoped(", "TraceStore"] {
                if row.contains(forbidden) {
                    failures.push(format!("{path}:{}: `{forbidden}` in {}", line + 1, row.trim()));
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "routes that reach the trace store around the caller:\n{}",
        failures.join("\n")
    );
}

/// Every route of `reson serve` that answers with data is in its OpenAPI
/// document (`routes!`), which `tests/system/users.rs` walks with another user's
/// ids. Routes outside it are the viewer's static files and the document
/// itself, neither of which holds anyone's data; a new plain `.route(` must
/// be documented instead, or named here with the reason.
#[test]
fn every_server_route_with_data_is_in_the_openapi_document() {
    let src = workspace_root().join("host/server/src");
    let mut files = Vec::new();
    collect_sources(&src, &src, &mut files);
    let mut plain = Vec::new();
    for (path, text) in &files {
        let code = code_only(text);
        for forbidden in [".route(", ".nest(", ".route_service(", ".nest_service("] {
            plain.extend(std::iter::repeat_n(
                (path.as_str(), forbidden),
                code.matches(forbidden).count(),
            ));
        }
    }
    plain.sort();
    let allowed = [
        // `/api/openapi.json`: the document, behind the token.
        ("lib.rs", ".route("),
        // `/` and `/assets/*`: the page's files, compiled in.
        ("viewer/mod.rs", ".route("),
    ];
    assert_eq!(plain, allowed, "routes outside the OpenAPI document");
}

/// Every `.rs` file under `dir`, as (path relative to `src` with `/`, text),
/// sorted so the file:line a failure names is the same on every run.
fn collect_sources(src: &Path, dir: &Path, out: &mut Vec<(String, String)>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            collect_sources(src, &path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let relative = path.strip_prefix(src).expect("under src");
            let relative: Vec<_> = relative.iter().map(|part| part.to_string_lossy()).collect();
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            out.push((relative.join("/"), text));
        }
    }
}

/// One `crate::`/`super::` path: the module it is written in, the module it
/// lands in, and where.
struct Use {
    from: Vec<String>,
    to: Vec<String>,
    file: String,
    line: usize,
}

/// A dependency between two modules at one depth, with a place that causes it.
#[derive(Debug, Clone)]
struct Edge {
    from: String,
    to: String,
    file: String,
    line: usize,
}

/// The module a file defines: `a/b.rs` is `a::b`; `lib.rs`, `main.rs` and
/// `mod.rs` are their folder's.
fn file_module(path: &str) -> Vec<String> {
    let mut parts: Vec<String> =
        path.trim_end_matches(".rs").split('/').map(str::to_string).collect();
    if matches!(parts.last().map(String::as_str), Some("lib" | "main" | "mod")) {
        parts.pop();
    }
    parts
}

/// What one file tells: the paths it uses, the names it re-exports, and the
/// modules it declares inline or only for tests.
#[derive(Default)]
struct FileScan {
    uses: Vec<(Vec<String>, Vec<String>, usize)>,
    reexports: Vec<(Vec<String>, String, Vec<String>)>,
    inline_modules: Vec<Vec<String>>,
    test_modules: Vec<Vec<String>>,
}

/// Resolves every `crate::`/`super::` path of the crate made of `sources`
/// ((path under src, text) pairs) to the module it lands in.
fn module_uses(sources: &[(&str, &str)]) -> Vec<Use> {
    let scans: Vec<(&str, FileScan)> = sources
        .iter()
        .map(|&(path, text)| (path, scan(&file_module(path), &tokens(&code_only(text)))))
        .collect();
    let test_modules: Vec<&Vec<String>> = scans.iter().flat_map(|(_, s)| &s.test_modules).collect();
    let is_test = |module: &[String]| test_modules.iter().any(|t| module.starts_with(t));

    let mut modules: BTreeSet<Vec<String>> = BTreeSet::new();
    let mut reexports: BTreeMap<(Vec<String>, String), Vec<String>> = BTreeMap::new();
    for (path, scan) in &scans {
        let module = file_module(path);
        if is_test(&module) {
            continue;
        }
        modules.insert(module);
        modules.extend(scan.inline_modules.iter().cloned());
        for (module, name, target) in &scan.reexports {
            reexports.entry((module.clone(), name.clone())).or_insert_with(|| target.clone());
        }
    }
    let crate_map = CrateMap { modules, reexports };

    let mut uses = Vec::new();
    for (path, scan) in &scans {
        if is_test(&file_module(path)) {
            continue;
        }
        for (from, written, line) in &scan.uses {
            uses.push(Use {
                from: from.clone(),
                to: crate_map.resolve(written, 0),
                file: path.to_string(),
                line: *line,
            });
        }
    }
    uses
}

struct CrateMap {
    modules: BTreeSet<Vec<String>>,
    /// (module, name) -> the path the module re-exports under that name.
    reexports: BTreeMap<(Vec<String>, String), Vec<String>>,
}

impl CrateMap {
    /// The deepest module `path` reaches, following re-exports to where the
    /// item really lives: `crate::agent::Runner` re-exported from
    /// `agent::runner` lands in `agent::runner`, not `agent`.
    fn resolve(&self, path: &[String], hops: usize) -> Vec<String> {
        let mut module = Vec::new();
        for segment in path {
            let mut deeper = module.clone();
            deeper.push(segment.clone());
            if self.modules.contains(&deeper) {
                module = deeper;
                continue;
            }
            // Re-exports may chain, and a malformed one may point at itself.
            if hops < 8
                && let Some(target) = self.reexports.get(&(module.clone(), segment.clone()))
            {
                return self.resolve(target, hops + 1);
            }
            break;
        }
        module
    }
}

/// `src` with comments and the insides of string and char literals blanked,
/// newlines kept, so paths in prose or text do not count and lines still do.
fn code_only(src: &str) -> String {
    let chars: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len());
    let blank = |out: &mut String, c: char| out.push(if c == '\n' { '\n' } else { ' ' });
    let is_ident = |c: Option<&char>| c.is_some_and(|c| c.is_alphanumeric() || *c == '_');
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    blank(&mut out, chars[i]);
                    i += 1;
                }
            }
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    i += 1;
                }
                if let Some(&c) = chars.get(i) {
                    blank(&mut out, c);
                }
                i += 1;
            }
            i += 1;
        } else if c == 'r'
            && (i == 0
                || !is_ident(chars.get(i - 1))
                || (chars[i - 1] == 'b' && (i == 1 || !is_ident(chars.get(i - 2)))))
            && let hashes = chars[i + 1..].iter().take_while(|&&c| c == '#').count()
            && chars.get(i + 1 + hashes) == Some(&'"')
        {
            i += hashes + 2;
            let closes = |at: usize| {
                chars[at] == '"' && (1..=hashes).all(|k| chars.get(at + k) == Some(&'#'))
            };
            while i < chars.len() && !closes(i) {
                blank(&mut out, chars[i]);
                i += 1;
            }
            i += hashes + 1;
        } else if c == '\'' && next == Some('\\') {
            i += 3;
            while i < chars.len() && chars[i] != '\'' {
                i += 1;
            }
            i += 1;
        } else if c == '\'' && chars.get(i + 2) == Some(&'\'') {
            i += 3;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

struct Token {
    text: String,
    line: usize,
}

/// Identifiers, `::`, and single punctuation characters, with their lines.
fn tokens(code: &str) -> Vec<Token> {
    let chars: Vec<char> = code.chars().collect();
    let mut out = Vec::new();
    let mut line = 1;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let start = i;
        if c == '\n' {
            line += 1;
            i += 1;
            continue;
        } else if c.is_whitespace() {
            i += 1;
            continue;
        } else if c.is_alphanumeric() || c == '_' {
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
        } else if c == ':' && chars.get(i + 1) == Some(&':') {
            i += 2;
        } else {
            i += 1;
        }
        out.push(Token { text: chars[start..i].iter().collect(), line });
    }
    out
}

fn text(tokens: &[Token], i: usize) -> &str {
    tokens.get(i).map_or("", |t| t.text.as_str())
}

fn starts_with(tokens: &[Token], i: usize, expected: &[&str]) -> bool {
    expected.iter().enumerate().all(|(k, e)| text(tokens, i + k) == *e)
}

fn is_ident(text: &str) -> bool {
    text.starts_with(|c: char| c.is_alphabetic() || c == '_')
}

/// The index just past the bracket closing the one at `open`.
fn past_closing(tokens: &[Token], open: usize) -> usize {
    let (opening, closing) = match text(tokens, open) {
        "(" => ("(", ")"),
        "[" => ("[", "]"),
        _ => ("{", "}"),
    };
    let mut depth = 0;
    for (i, token) in tokens.iter().enumerate().skip(open) {
        if token.text == opening {
            depth += 1;
        } else if token.text == closing {
            depth -= 1;
            if depth == 0 {
                return i + 1;
            }
        }
    }
    tokens.len()
}

/// Walks one file's tokens, keeping track of inline `mod x { }` blocks so a
/// `super::` inside one means what the compiler reads.
fn scan(file_module: &[String], tokens: &[Token]) -> FileScan {
    let mut found = FileScan::default();
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0;
    let mut i = 0;
    while i < tokens.len() {
        let mut module = file_module.to_vec();
        module.extend(inline.iter().map(|(name, _)| name.clone()));
        match text(tokens, i) {
            "#" if starts_with(tokens, i, &["#", "[", "cfg", "(", "test", ")", "]"]) => {
                let mut j = i + 7;
                while text(tokens, j) == "#" && text(tokens, j + 1) == "[" {
                    j = past_closing(tokens, j + 1);
                }
                if text(tokens, j) == "pub" {
                    j += 1;
                    if text(tokens, j) == "(" {
                        j = past_closing(tokens, j);
                    }
                }
                if text(tokens, j) == "mod" && is_ident(text(tokens, j + 1)) {
                    match text(tokens, j + 2) {
                        "{" => {
                            i = past_closing(tokens, j + 2);
                            continue;
                        }
                        ";" => {
                            let mut test_module = module.clone();
                            test_module.push(text(tokens, j + 1).to_string());
                            found.test_modules.push(test_module);
                        }
                        _ => {}
                    }
                }
            }
            "mod" if is_ident(text(tokens, i + 1)) && text(tokens, i + 2) == "{" => {
                let name = text(tokens, i + 1).to_string();
                let mut inner = module.clone();
                inner.push(name.clone());
                found.inline_modules.push(inner);
                inline.push((name, depth));
                depth += 1;
                i += 3;
                continue;
            }
            "{" => depth += 1,
            "}" => {
                depth -= 1;
                if inline.last().is_some_and(|&(_, open)| open == depth) {
                    inline.pop();
                }
            }
            "pub" => {
                let mut j = i + 1;
                if text(tokens, j) == "(" {
                    j = past_closing(tokens, j);
                }
                if text(tokens, j) == "use" {
                    let mut leaves = Vec::new();
                    use_tree(tokens, j + 1, module.clone(), &mut leaves);
                    for (path, name) in leaves {
                        if let Some(name) = name {
                            found.reexports.push((module.clone(), name, path));
                        }
                    }
                }
            }
            "crate" | "super" if text(tokens, i + 1) == "::" => {
                let mut leaves = Vec::new();
                let line = tokens[i].line;
                i = use_tree(tokens, i, module.clone(), &mut leaves);
                found.uses.extend(leaves.into_iter().map(|(path, _)| (module.clone(), path, line)));
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    found
}

/// Reads a path or use tree starting at `i`, relative to `path`; pushes each
/// leaf as (absolute path, name it is bound to, if any) and returns the index
/// after the tree.
fn use_tree(
    tokens: &[Token],
    mut i: usize,
    mut path: Vec<String>,
    out: &mut Vec<(Vec<String>, Option<String>)>,
) -> usize {
    loop {
        match text(tokens, i) {
            "{" => {
                i += 1;
                while !matches!(text(tokens, i), "}" | "") {
                    let next = use_tree(tokens, i, path.clone(), out);
                    if next == i {
                        return i;
                    }
                    i = next;
                    if text(tokens, i) == "," {
                        i += 1;
                    }
                }
                return i + 1;
            }
            "*" => {
                out.push((path, None));
                return i + 1;
            }
            "crate" => path.clear(),
            "super" => {
                path.pop();
            }
            "self" => {}
            segment if is_ident(segment) => path.push(segment.to_string()),
            _ => {
                out.push((path, None));
                return i;
            }
        }
        i += 1;
        if text(tokens, i) == "::" {
            i += 1;
            continue;
        }
        let name = if text(tokens, i) == "as" && is_ident(text(tokens, i + 1)) {
            i += 2;
            Some(text(tokens, i - 1).to_string())
        } else {
            path.last().cloned()
        };
        out.push((path, name));
        return i;
    }
}

/// The node a module is at `depth`: `agent::runner::model` is `agent` at
/// depth 1 and `agent::runner` at depth 2.
fn node(module: &[String], depth: usize) -> String {
    if module.is_empty() {
        "crate".to_string()
    } else {
        module[..depth.min(module.len())].join("::")
    }
}

fn edges(uses: &[Use], depth: usize) -> Vec<Edge> {
    uses.iter()
        .filter_map(|u| {
            let (from, to) = (node(&u.from, depth), node(&u.to, depth));
            // Between top-level modules depth 1 already judges; depth 2 looks
            // only inside one of them.
            let same_top = from.split("::").next() == to.split("::").next();
            (from != to && (depth == 1 || same_top)).then(|| Edge {
                from,
                to,
                file: u.file.clone(),
                line: u.line,
            })
        })
        .collect()
}

/// One cycle to show, and every module in a cycle with it: fixing the shown
/// one may leave another among the same modules.
#[derive(Debug)]
struct Cycle {
    edges: Vec<Edge>,
    group: Vec<String>,
}

type Graph<'a> = BTreeMap<&'a str, BTreeMap<&'a str, &'a Edge>>;

/// One shortest cycle per group of modules that all reach each other. The
/// first place found stands for an edge; sources come sorted, so it is stable.
fn find_cycles(edges: &[Edge]) -> Vec<Cycle> {
    let mut graph: Graph = BTreeMap::new();
    for edge in edges {
        graph.entry(&edge.from).or_default().entry(&edge.to).or_insert(edge);
    }
    let mut reported: BTreeSet<&str> = BTreeSet::new();
    let mut cycles = Vec::new();
    for &start in graph.keys() {
        if reported.contains(start) {
            continue;
        }
        let Some(cycle) = shortest_cycle(&graph, start) else { continue };
        let group: Vec<&str> = reachable(&graph, start)
            .into_iter()
            .filter(|&node| reachable(&graph, node).contains(start))
            .collect();
        reported.extend(&group);
        cycles.push(Cycle {
            edges: cycle.into_iter().cloned().collect(),
            group: group.into_iter().map(str::to_string).collect(),
        });
    }
    cycles
}

fn reachable<'a>(graph: &Graph<'a>, from: &'a str) -> BTreeSet<&'a str> {
    let mut seen = BTreeSet::new();
    let mut queue = VecDeque::from([from]);
    while let Some(node) = queue.pop_front() {
        for &next in graph.get(node).into_iter().flat_map(|n| n.keys()) {
            if seen.insert(next) {
                queue.push_back(next);
            }
        }
    }
    seen
}

fn shortest_cycle<'a>(graph: &Graph<'a>, start: &'a str) -> Option<Vec<&'a Edge>> {
    let mut came_by: BTreeMap<&str, &Edge> = BTreeMap::new();
    let mut queue = VecDeque::from([start]);
    while let Some(node) = queue.pop_front() {
        for (&next, &edge) in graph.get(node).into_iter().flatten() {
            if next == start {
                let mut cycle = vec![edge];
                let mut at = node;
                while at != start {
                    let edge = came_by[at];
                    cycle.push(edge);
                    at = &edge.from;
                }
                cycle.reverse();
                return Some(cycle);
            }
            if !came_by.contains_key(next) {
                came_by.insert(next, edge);
                queue.push_back(next);
            }
        }
    }
    None
}

/// `a -> b -> a`, then for each edge one line of source that makes it.
fn describe(name: &str, dir: &str, cycle: &Cycle) -> String {
    let mut chain: Vec<&str> = cycle.edges.iter().map(|e| e.from.as_str()).collect();
    chain.push(&cycle.edges[0].from);
    let mut out = format!("{name}: {}", chain.join(" -> "));
    for edge in &cycle.edges {
        out +=
            &format!("\n    {} -> {}: {dir}/src/{}:{}", edge.from, edge.to, edge.file, edge.line);
    }
    if cycle.group.len() > cycle.edges.len() {
        out += &format!("\n    (all in one cycle: {})", cycle.group.join(", "));
    }
    out
}

/// A crate in strings whose `a` and `b` depend on each other, through a
/// grouped import, a re-export and `super::super`; `c` only looks like it
/// closes cycles, from a comment, a string and a test block.
fn synthetic_crate(b_inner: &'static str) -> Vec<(&'static str, &'static str)> {
    vec![
        ("lib.rs", "mod a;\nmod b;\nmod c;\n"),
        ("a.rs", "use crate::{b::Helper, c};\npub fn run() {}\n"),
        ("b/mod.rs", "mod inner;\npub use inner::Helper;\npub fn f() { crate::b::inner::g() }\n"),
        ("b/inner.rs", b_inner),
        (
            "c.rs",
            "// crate::a::run\nconst S: &str = \"crate::a::run\";\n\
             #[cfg(test)]\nmod tests {\n    use crate::a;\n}\npub fn c() {}\n",
        ),
    ]
}

#[test]
fn finder_sees_a_cycle() {
    let sources = synthetic_crate(
        "pub struct Helper;\n\
         pub fn g<'a>(_: &'a str) { let _ = '\"'; super::super::a::run() }\n",
    );
    let uses = module_uses(&sources);
    let cycles = find_cycles(&edges(&uses, 1));
    assert_eq!(cycles.len(), 1, "{cycles:?}");
    assert_eq!(cycles[0].group, ["a", "b"]);
    assert_eq!(
        describe("synthetic", "x", &cycles[0]),
        "synthetic: a -> b -> a\n    a -> b: x/src/a.rs:1\n    b -> a: x/src/b/inner.rs:2"
    );
    assert!(find_cycles(&edges(&uses, 2)).is_empty());
}

#[test]
fn finder_passes_a_crate_without_cycles() {
    // `super` inside the inline module means b::inner, so b -> b::inner is
    // not answered by b::inner -> b.
    let sources = synthetic_crate(
        "pub struct Helper;\npub fn g() { super::super::c::c() }\n\
         pub mod nested {\n    pub fn h() { super::g() }\n}\n",
    );
    let uses = module_uses(&sources);
    for depth in [1, 2] {
        let cycles = find_cycles(&edges(&uses, depth));
        assert!(cycles.is_empty(), "depth {depth}: {cycles:?}");
    }
}
