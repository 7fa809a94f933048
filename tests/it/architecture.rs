//! The layout keeps its promises: in each crate, no top-level module uses
//! one that uses it back (directly or through others), and in the runtime
//! nothing below `cli` reaches up into it. References are read from the
//! non-test source (`crate::<module>` paths); test code may use anything.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::support::root;

/// `text` without its test code: a `#[cfg(test)]` module block (they sit at
/// the end of a file) and the item after any other `#[cfg(test)]`. Returns
/// the names of test-only module files it declares (`#[cfg(test)] mod x;`).
fn strip_tests(text: &str) -> (String, Vec<String>) {
    let mut code = String::new();
    let mut test_files = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if line.trim() != "#[cfg(test)]" {
            code.push_str(line);
            code.push('\n');
            continue;
        }
        let Some(item) = lines.next() else { break };
        let item = item.trim();
        let item = item
            .strip_prefix("pub(crate) ")
            .or_else(|| item.strip_prefix("pub "))
            .unwrap_or(item);
        if let Some(name) = item.strip_prefix("mod ").and_then(|r| r.strip_suffix(';')) {
            test_files.push(name.trim().to_string());
        } else if item.starts_with("mod ") {
            break;
        }
    }
    (code, test_files)
}

/// The non-test Rust source of every file under `dir`.
fn sources(dir: &Path, out: &mut Vec<(PathBuf, String)>) {
    let mut all = Vec::new();
    read_all(dir, &mut all);
    let mut test_only = BTreeSet::new();
    let mut stripped = Vec::new();
    for (p, text) in all {
        let (code, tests) = strip_tests(&text);
        let dir = p.parent().unwrap().to_path_buf();
        // `mod x;` in `a/mod.rs` or `a.rs` names `a/x.rs` or `a/x/mod.rs`.
        let base = if p
            .file_stem()
            .is_some_and(|s| s == "mod" || s == "lib" || s == "main")
        {
            dir
        } else {
            dir.join(p.file_stem().unwrap())
        };
        for t in tests {
            test_only.insert(base.join(format!("{t}.rs")));
            test_only.insert(base.join(&t).join("mod.rs"));
        }
        stripped.push((p, code));
    }
    out.extend(stripped.into_iter().filter(|(p, _)| !test_only.contains(p)));
}

fn read_all(dir: &Path, out: &mut Vec<(PathBuf, String)>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            read_all(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push((p.clone(), std::fs::read_to_string(&p).unwrap()));
        }
    }
}

/// Top-level module → the top-level modules its code names.
fn graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    sources(src, &mut files);
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (path, code) in files {
        let rel = path.strip_prefix(src).unwrap();
        let first = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy();
        let module = first.trim_end_matches(".rs").to_string();
        if module == "lib" || module == "main" {
            continue;
        }
        let deps = g.entry(module.clone()).or_default();
        for (i, _) in code.match_indices("crate::") {
            let rest = &code[i + "crate::".len()..];
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() && name != module {
                deps.insert(name);
            }
        }
    }
    g
}

/// A cycle through `from`, if any, as a path of module names.
fn cycle(g: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        g: &BTreeMap<String, BTreeSet<String>>,
        node: &str,
        stack: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = stack.iter().position(|n| n == node) {
            let mut c = stack[i..].to_vec();
            c.push(node.to_string());
            return Some(c);
        }
        if done.contains(node) {
            return None;
        }
        stack.push(node.to_string());
        for d in g.get(node).into_iter().flatten() {
            if let Some(c) = visit(g, d, stack, done) {
                return Some(c);
            }
        }
        stack.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    for node in g.keys() {
        if let Some(c) = visit(g, node, &mut Vec::new(), &mut done) {
            return Some(c);
        }
    }
    None
}

#[test]
fn the_policy_crate_has_no_module_cycle() {
    let g = graph(&root().join("crates/policy/src"));
    // The reader sees the real edges.
    assert!(
        g["rules"].contains("config") && g["admission"].contains("rules"),
        "{g:?}"
    );
    if let Some(c) = cycle(&g) {
        panic!("module cycle in mrguard-policy: {}", c.join(" → "));
    }
    // The bottom layer names nothing above it.
    for leaf in ["model", "fieldpath"] {
        assert!(g[leaf].is_empty(), "{leaf} uses {:?}", g[leaf]);
    }
}

#[test]
fn test_code_is_left_out() {
    let (code, files) = strip_tests(
        "use crate::a::X;\n#[cfg(test)]\npub(crate) mod mock;\n#[cfg(test)]\nuse crate::b::Y;\nfn f() {}\n#[cfg(test)]\nmod tests {\n    use crate::c::Z;\n}\n",
    );
    assert_eq!(code, "use crate::a::X;\nfn f() {}\n");
    assert_eq!(files, ["mock"]);
}

#[test]
fn the_checker_finds_a_cycle() {
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    g.entry("a".into()).or_default().insert("b".into());
    g.entry("b".into()).or_default().insert("c".into());
    g.entry("c".into()).or_default().insert("a".into());
    assert_eq!(cycle(&g).unwrap(), ["a", "b", "c", "a"]);
    g.get_mut("c").unwrap().clear();
    assert!(cycle(&g).is_none());
}
