//! Checks the crate's module graph from its source: dependencies run one
//! way (`main` → `cli` → the runtime modules), and no module imports one
//! that imports it back, parents and children included.
//!
//! A module is a file. An import is a path through `crate::`, `super::`,
//! `self::` (`mrguard::` in `main.rs`) or a child module's name, resolved
//! to the deepest module it names; test code counts too. Inline modules
//! are the top-level `mod name {` blocks rustfmt closes with a `}` at the
//! start of a line (the tests); `super` inside them is the file's module.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Module path ("crate::a::b") → the modules it imports.
type Graph = BTreeMap<String, BTreeSet<String>>;

/// The module a file under `src/` defines.
fn module_of(rel: &Path) -> String {
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    match parts.last().map(String::as_str) {
        Some("lib") if parts.len() == 1 => return "crate".into(),
        Some("main") if parts.len() == 1 => return "main".into(),
        Some("mod") => {
            parts.pop();
        }
        _ => {}
    }
    std::iter::once("crate".to_string())
        .chain(parts)
        .collect::<Vec<_>>()
        .join("::")
}

fn parent(module: &str) -> String {
    match module.rsplit_once("::") {
        Some((p, _)) => p.to_string(),
        None => "crate".into(),
    }
}

/// The code of a line without its `//` comment.
fn code(line: &str) -> &str {
    let trimmed = line.trim_start();
    if trimmed.starts_with("//") {
        return "";
    }
    match line.find(" //") {
        Some(i) => &line[..i],
        None => line,
    }
}

fn ident_at(s: &str) -> (&str, &str) {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    (&s[..end], &s[end..])
}

/// The modules a path names, walking down from `base` while the segments
/// are modules; a `{...}` group names one per item.
fn resolve(base: &str, rest: &str, modules: &BTreeSet<String>, out: &mut BTreeSet<String>) {
    let mut current = base.to_string();
    let mut rest = rest;
    while let Some(after) = rest.strip_prefix("::") {
        if let Some(group) = after.strip_prefix('{') {
            let inner = group.split('}').next().unwrap_or("");
            for item in inner.split(',') {
                let (first, tail) = ident_at(item.trim());
                let candidate = format!("{current}::{first}");
                if modules.contains(&candidate) {
                    resolve(&candidate, tail, modules, out);
                } else {
                    out.insert(current.clone());
                }
            }
            return;
        }
        let (seg, tail) = ident_at(after);
        let candidate = format!("{current}::{seg}");
        if seg.is_empty() || !modules.contains(&candidate) {
            break;
        }
        current = candidate;
        rest = tail;
    }
    out.insert(current);
}

/// The import graph of `files` (paths relative to `src/`, contents).
fn graph(files: &[(PathBuf, String)]) -> Graph {
    let modules: BTreeSet<String> = files.iter().map(|(p, _)| module_of(p)).collect();
    let mut g = Graph::new();
    for (path, text) in files {
        let module = module_of(path);
        let children: Vec<String> = modules
            .iter()
            .filter(|m| parent(m) == module && m.as_str() != "crate")
            .cloned()
            .collect();
        let mut targets = BTreeSet::new();
        let mut inline = false;
        for line in text.lines() {
            let declared = ["pub(crate) ", "pub "]
                .iter()
                .find_map(|v| line.strip_prefix(v))
                .unwrap_or(line);
            if !inline && declared.starts_with("mod ") && line.trim_end().ends_with('{') {
                inline = true;
                continue;
            }
            if inline && line.starts_with('}') {
                inline = false;
                continue;
            }
            let line = code(line);
            // The module `super` names here.
            let sup = if inline {
                module.clone()
            } else {
                parent(&module)
            };
            let bytes = line.as_bytes();
            let mut i = 0;
            while i < line.len() {
                let boundary = i == 0 || {
                    let b = bytes[i - 1];
                    !(b.is_ascii_alphanumeric() || b == b'_' || b == b':')
                };
                let (word, rest) = ident_at(&line[i..]);
                if word.is_empty() {
                    i += line[i..].chars().next().map_or(1, char::len_utf8);
                    continue;
                }
                if boundary && rest.starts_with("::") {
                    let base = match word {
                        "crate" => Some("crate".to_string()),
                        "mrguard" if module == "main" => Some("crate".to_string()),
                        "self" => Some(module.clone()),
                        "super" => {
                            // super::super:: and so on.
                            let mut base = sup.clone();
                            let mut r = rest;
                            while let Some(more) = r.strip_prefix("::super") {
                                base = parent(&base);
                                r = more;
                            }
                            resolve(&base, r, &modules, &mut targets);
                            None
                        }
                        w => children
                            .iter()
                            .find(|c| c.ends_with(&format!("::{w}")))
                            .cloned(),
                    };
                    if let Some(base) = base {
                        resolve(&base, rest, &modules, &mut targets);
                    }
                }
                i += word.len();
            }
        }
        targets.remove(&module);
        g.insert(module, targets);
    }
    g
}

/// A cycle through the graph, when there is one.
fn find_cycle(g: &Graph) -> Option<Vec<String>> {
    fn visit(
        m: &str,
        g: &Graph,
        stack: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = stack.iter().position(|s| s == m) {
            let mut cycle = stack[at..].to_vec();
            cycle.push(m.to_string());
            return Some(cycle);
        }
        if done.contains(m) {
            return None;
        }
        stack.push(m.to_string());
        for next in g.get(m).into_iter().flatten() {
            if let Some(c) = visit(next, g, stack, done) {
                return Some(c);
            }
        }
        stack.pop();
        done.insert(m.to_string());
        None
    }
    let mut done = BTreeSet::new();
    g.keys()
        .find_map(|m| visit(m, g, &mut Vec::new(), &mut done))
}

fn source_files() -> Vec<(PathBuf, String)> {
    fn walk(dir: &Path, root: &Path, out: &mut Vec<(PathBuf, String)>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, root, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let rel = path.strip_prefix(root).unwrap().to_path_buf();
                // This file's own text is full of the patterns it looks for.
                if rel != Path::new("layering.rs") {
                    out.push((rel, std::fs::read_to_string(&path).unwrap()));
                }
            }
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut out = Vec::new();
    walk(&root, &root, &mut out);
    out
}

#[test]
fn no_module_imports_one_that_imports_it_back() {
    let g = graph(&source_files());
    assert!(g.contains_key("crate::server::admission"), "{g:?}");
    assert!(g["crate::cli::serve"].contains("crate::server"), "{g:?}");
    if let Some(cycle) = find_cycle(&g) {
        panic!("module cycle: {}", cycle.join(" → "));
    }
}

#[test]
fn only_main_and_the_command_line_use_the_command_line() {
    for (module, imports) in graph(&source_files()) {
        if module != "main" && module != "crate::cli" && !module.starts_with("crate::cli::") {
            let back: Vec<_> = imports
                .iter()
                .filter(|m| m.starts_with("crate::cli"))
                .collect();
            assert!(back.is_empty(), "{module} imports {back:?}");
        }
    }
}

/// The checker sees what it must: group imports, `super` in and out of
/// tests, child modules named from their parent, and a parent-child cycle.
#[test]
fn the_checker_finds_cycles_through_every_kind_of_path() {
    let file = |p: &str, t: &str| (PathBuf::from(p), t.to_string());
    let files = vec![
        file("lib.rs", "pub mod a;\npub mod b;\n"),
        file(
            "a/mod.rs",
            "mod child;\nuse crate::{b::Thing, other};\nfn f() { child::go(); }\n",
        ),
        file(
            "a/child.rs",
            "fn g() {}\nmod tests {\n    use super::*;\n    use super::super::Item;\n}\n",
        ),
        file("b.rs", "// use crate::a::x;\nfn h() { let s = \"a\"; }\n"),
    ];
    let g = graph(&files);
    assert_eq!(
        g["crate::a"],
        ["crate", "crate::a::child", "crate::b"]
            .map(String::from)
            .into()
    );
    assert_eq!(g["crate::a::child"], ["crate::a".to_string()].into());
    assert!(g["crate::b"].is_empty(), "comments are not imports: {g:?}");
    let cycle = find_cycle(&g).expect("a ↔ a::child is a cycle");
    assert!(cycle.contains(&"crate::a::child".to_string()), "{cycle:?}");
}
