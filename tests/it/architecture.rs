//! The layout keeps its promises: in each crate, no top-level module uses
//! one that uses it back (directly or through others), and in the runtime
//! nothing below `cli` reaches up into it. References are read from the
//! non-test source (`crate::<module>` paths); test code may use anything.
//!
//! The runtime is also checked file by file, so a parent module and its
//! children, or two siblings, cannot use each other either: there a
//! reference is any path through `crate::`, `super::`, `self::` or a child
//! module's name (`mrguard::` in `main.rs`), resolved to the deepest module
//! file it names.

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

/// The policy crate's tiers: folders of modules, not modules of their own.
const POLICY_TIERS: [&str; 3] = ["admission", "cluster", "commands"];

/// The module a file under `src` belongs to: its top-level module, or in a
/// tier folder the tier's module (`admission::rules`); a tier's own
/// `mod.rs` is the tier (`cluster`).
fn module_at(rel: &Path) -> String {
    let parts: Vec<String> = rel
        .components()
        .map(|c| {
            c.as_os_str()
                .to_string_lossy()
                .trim_end_matches(".rs")
                .to_string()
        })
        .collect();
    match parts.as_slice() {
        [tier, second, ..] if POLICY_TIERS.contains(&tier.as_str()) && second != "mod" => {
            format!("{tier}::{}", second.trim_end_matches(".rs"))
        }
        [first, ..] => first.clone(),
        [] => String::new(),
    }
}

/// Module → the modules its code names (`crate::<module>`, with a tier's
/// module named through its tier: `crate::admission::rules`).
fn graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    sources(src, &mut files);
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (path, code) in files {
        let module = module_at(path.strip_prefix(src).unwrap());
        if module == "lib" || module == "main" {
            continue;
        }
        let deps = g.entry(module.clone()).or_default();
        for (i, _) in code.match_indices("crate::") {
            let rest = &code[i + "crate::".len()..];
            let mut name = ident(rest);
            if POLICY_TIERS.contains(&name.as_str()) {
                let inner = ident(rest[name.len()..].trim_start_matches("::"));
                let child = src.join(&name).join(&inner);
                if !inner.is_empty() && (child.is_dir() || child.with_extension("rs").is_file()) {
                    name = format!("{name}::{inner}");
                }
            }
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
        g["admission::rules"].contains("admission::config")
            && g["admission::decider"].contains("admission::rules"),
        "{g:?}"
    );
    if let Some(c) = cycle(&g) {
        panic!("module cycle in mrguard-policy: {}", c.join(" → "));
    }
    // The bottom layer names nothing above it.
    for leaf in ["admission::model", "admission::fieldpath"] {
        assert!(g[leaf].is_empty(), "{leaf} uses {:?}", g[leaf]);
    }
}

/// The tiers point one way: the commands sit on top and nothing below
/// uses them; the cluster tier reads the admission core's vocabulary and
/// configuration, never its rules or chains, which read the cluster tier.
#[test]
fn the_policy_tiers_point_down() {
    let g = graph(&root().join("crates/policy/src"));
    let mut wrong = Vec::new();
    for (module, deps) in &g {
        for d in deps {
            let up = |tier: &str| d == tier || d.starts_with(&format!("{tier}::"));
            let here = |tier: &str| module == tier || module.starts_with(&format!("{tier}::"));
            if up("commands") && !here("commands") {
                wrong.push(format!("{module} uses the command tier's {d}"));
            }
            let core_above = [
                "admission::rules",
                "admission::decider",
                "admission::api_server",
            ];
            if here("cluster") && core_above.contains(&d.as_str()) {
                wrong.push(format!("{module} (cluster knowledge) uses {d}"));
            }
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
    // Every module of the crate lives in a tier.
    let loose: Vec<_> = g
        .keys()
        .filter(|m| {
            !POLICY_TIERS
                .iter()
                .any(|t| *m == t || m.starts_with(&format!("{t}::")))
        })
        .collect();
    assert!(loose.is_empty(), "modules outside the tiers: {loose:?}");
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

/// What reads a clock: the wall clock, or the monotonic one.
const CLOCKS: [&str; 4] = [
    "Timestamp::now()",
    "Zoned::now()",
    "SystemTime::now()",
    "Instant::now()",
];

/// The lines of `files` that name one of `needles`, comments left out.
fn lines_naming<'f>(files: &'f [(PathBuf, String)], needles: &[&str]) -> Vec<(&'f Path, String)> {
    let mut found = Vec::new();
    for (path, code) in files {
        for line in code.lines().map(str::trim) {
            if !line.starts_with("//") && needles.iter().any(|c| line.contains(c)) {
                found.push((path.as_path(), line.to_string()));
            }
        }
    }
    found
}

/// The lines of `files` that read a clock, comments left out.
fn clock_reads(files: &[(PathBuf, String)]) -> Vec<String> {
    lines_naming(files, &CLOCKS)
        .into_iter()
        .map(|(path, line)| format!("{}: {line}", path.display()))
        .collect()
}

/// Where the policy crate's non-test code may keep state per thread or
/// read the monotonic clock, and why: one CEL evaluation is metered from
/// inside `cel`'s function overloads, which are plain `fn`s with no
/// argument to carry a meter or a clock in. Each entry must still be
/// needed, so the list cannot outlive what it excuses.
const PER_THREAD: [(&str, &str); 2] = [
    (
        "admission/cel/budget.rs",
        "the cost meter of one evaluation and its time backstop (TIME_LIMIT)",
    ),
    (
        "admission/cel/env.rs",
        "compiled regular expressions, a cache: the same answers without it",
    ),
];

/// The policy crate's non-test source, with what it must hold to be read.
fn policy_sources() -> Vec<(PathBuf, String)> {
    let mut files = Vec::new();
    sources(&root().join("crates/policy/src"), &mut files);
    assert!(files
        .iter()
        .any(|(p, _)| p.ends_with("admission/decider/mod.rs")));
    files
}

/// Whether `path` is one of [`PER_THREAD`]'s files.
fn excused(path: &Path) -> bool {
    PER_THREAD.iter().any(|(file, _)| path.ends_with(file))
}

/// The policy crate is pure: the instant it judges at (staged rules,
/// exception expiry) and the clock that times its CEL rules
/// (`cel::Clock`) come from its caller, so a what-if tool or a test
/// judges at a chosen time. Its tests may read the clock; the CEL
/// evaluation's time backstop ([`PER_THREAD`]) reads the monotonic one.
#[test]
fn the_policy_crate_reads_no_clock() {
    let files = policy_sources();
    let found: Vec<String> = lines_naming(&files, &CLOCKS)
        .into_iter()
        .filter(|(path, line)| !(line.contains("Instant::now()") && excused(path)))
        .map(|(path, line)| format!("{}: {line}", path.display()))
        .collect();
    assert!(
        found.is_empty(),
        "mrguard-policy reads the clock; take the instant or the clock from the caller: {found:#?}"
    );
}

/// The policy crate keeps no state per thread, so nothing reaches a
/// decision or leaves it except through its arguments and what it
/// returns (the CEL rules' timings are in the decision). The exceptions
/// are [`PER_THREAD`].
#[test]
fn the_policy_crate_keeps_no_per_thread_state() {
    let files = policy_sources();
    let found = lines_naming(&files, &["thread_local!"]);
    let unexcused: Vec<String> = found
        .iter()
        .filter(|(path, _)| !excused(path))
        .map(|(path, line)| format!("{}: {line}", path.display()))
        .collect();
    assert!(
        unexcused.is_empty(),
        "mrguard-policy keeps state per thread; pass it in and return it: {unexcused:#?}"
    );
    for (file, why) in PER_THREAD {
        assert!(
            found.iter().any(|(path, _)| path.ends_with(file)),
            "{file} no longer keeps state per thread ({why}): take it off PER_THREAD"
        );
    }
}

#[test]
fn the_clock_and_thread_checkers_skip_comments_and_tests() {
    let (code, _) = strip_tests(
        "/// Not `Timestamp::now()`: the caller's.\nfn f(now: Timestamp) {}\nfn g() { std::time::SystemTime::now(); }\n#[cfg(test)]\nmod tests {\n    fn h() { jiff::Timestamp::now(); }\n}\n",
    );
    let found = clock_reads(&[(PathBuf::from("a.rs"), code)]);
    assert_eq!(found, ["a.rs: fn g() { std::time::SystemTime::now(); }"]);
    let (code, _) = strip_tests(
        "fn t() { let t = Instant::now(); }\n// thread_local! { static X: u8 = 0; }\nthread_local! { static Y: u8 = 0; }\n#[cfg(test)]\nmod tests {\n    thread_local! { static Z: u8 = 0; }\n}\n",
    );
    let files = [(PathBuf::from("b.rs"), code)];
    assert_eq!(
        clock_reads(&files),
        ["b.rs: fn t() { let t = Instant::now(); }"]
    );
    let per_thread: Vec<String> = lines_naming(&files, &["thread_local!"])
        .into_iter()
        .map(|(_, line)| line)
        .collect();
    assert_eq!(per_thread, ["thread_local! { static Y: u8 = 0; }"]);
}

// ------------------------------------------------- the runtime, per file

type Graph = BTreeMap<String, BTreeSet<String>>;

/// The module a file under `src/` defines: `crate::a::b`, or `main`.
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

fn ident_at(s: &str) -> (&str, &str) {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    (&s[..end], &s[end..])
}

/// Adds the modules a path names, walking down from `base` while its
/// segments are modules; a `{...}` group names one per item.
fn resolve(base: &str, rest: &str, modules: &BTreeSet<String>, out: &mut BTreeSet<String>) {
    let mut current = base.to_string();
    let mut rest = rest;
    while let Some(after) = rest.strip_prefix("::") {
        if let Some(group) = after.strip_prefix('{') {
            for item in group.split('}').next().unwrap_or("").split(',') {
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
        let (segment, tail) = ident_at(after);
        let candidate = format!("{current}::{segment}");
        if !modules.contains(&candidate) {
            break;
        }
        current = candidate;
        rest = tail;
    }
    out.insert(current);
}

/// Module file → the module files its code names; `files` are paths
/// relative to `src/` with their non-test code.
fn file_graph(files: &[(PathBuf, String)]) -> Graph {
    let modules: BTreeSet<String> = files.iter().map(|(p, _)| module_of(p)).collect();
    let mut g = Graph::new();
    for (path, text) in files {
        let module = module_of(path);
        let children: Vec<&String> = modules
            .iter()
            .filter(|m| m.as_str() != "crate" && parent(m) == module)
            .collect();
        let mut targets = BTreeSet::new();
        for line in text.lines() {
            let line = match line.find("//") {
                Some(i) => &line[..i],
                None => line,
            };
            let mut i = 0;
            while i < line.len() {
                let (word, rest) = ident_at(&line[i..]);
                if word.is_empty() {
                    i += line[i..].chars().next().map_or(1, char::len_utf8);
                    continue;
                }
                let after_path = line[..i].ends_with("::");
                if !after_path && rest.starts_with("::") {
                    match word {
                        "crate" => resolve("crate", rest, &modules, &mut targets),
                        "mrguard" if module == "main" => {
                            resolve("crate", rest, &modules, &mut targets)
                        }
                        "self" => resolve(&module, rest, &modules, &mut targets),
                        "super" => {
                            let mut base = parent(&module);
                            let mut r = rest;
                            while let Some(more) = r.strip_prefix("::super") {
                                base = parent(&base);
                                r = more;
                            }
                            resolve(&base, r, &modules, &mut targets);
                        }
                        w => {
                            if let Some(child) =
                                children.iter().find(|c| c.ends_with(&format!("::{w}")))
                            {
                                resolve(child, rest, &modules, &mut targets);
                            }
                        }
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

fn runtime_files() -> Vec<(PathBuf, String)> {
    let src = root().join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    files
        .into_iter()
        .map(|(p, code)| (p.strip_prefix(&src).unwrap().to_path_buf(), code))
        .collect()
}

#[test]
fn no_runtime_module_uses_one_that_uses_it_back() {
    let g = file_graph(&runtime_files());
    // The reader sees the real edges, parent to child and child to sibling.
    assert!(
        g["crate::server"].contains("crate::server::routes")
            && g["crate::controller::leader::certs"]
                .contains("crate::controller::leader::webhooks")
            && g["main"].contains("crate::cli"),
        "{g:?}"
    );
    if let Some(c) = cycle(&g) {
        panic!("module cycle in mrguard: {}", c.join(" → "));
    }
}

#[test]
fn only_main_and_the_command_line_use_the_command_line() {
    for (module, uses) in file_graph(&runtime_files()) {
        if module == "main" || module == "crate::cli" || module.starts_with("crate::cli::") {
            continue;
        }
        let up: Vec<_> = uses
            .iter()
            .filter(|m| m.starts_with("crate::cli"))
            .collect();
        assert!(up.is_empty(), "{module} uses {up:?}");
    }
}

/// Group imports, `super` chains, a child named from its parent and
/// comments, down to a parent-child cycle.
#[test]
fn the_file_checker_reads_every_kind_of_path() {
    let file = |p: &str, t: &str| (PathBuf::from(p), t.to_string());
    let files = [
        file("lib.rs", "pub mod a;\npub mod b;\n"),
        file("a/mod.rs", "mod child;\nuse crate::{b::Thing, other};\nfn f() { child::go(); x::y::child::no(); }\n"),
        file("a/child.rs", "use super::super::b;\nfn g() { super::Item::new(); }\n"),
        file("b.rs", "// use crate::a::x;\nfn h() {}\n"),
    ];
    let g = file_graph(&files);
    let set = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
    assert_eq!(
        g["crate::a"],
        set(&["crate", "crate::a::child", "crate::b"])
    );
    assert_eq!(g["crate::a::child"], set(&["crate::a", "crate::b"]));
    assert!(g["crate::b"].is_empty(), "comments are not uses: {g:?}");
    let c = cycle(&g).expect("a and a::child use each other");
    assert!(c.contains(&"crate::a::child".to_string()), "{c:?}");
}

/// The command line stays thin: it parses arguments and calls
/// one `src/app/` function per subcommand, so `src/cli` holds at most
/// 2,000 lines and no file over 400.
#[test]
fn the_command_line_stays_thin() {
    let mut files = Vec::new();
    read_all(&root().join("src/cli"), &mut files);
    let mut total = 0;
    for (path, text) in &files {
        let n = text.lines().count();
        assert!(n <= 400, "{} has {n} lines (at most 400)", path.display());
        total += n;
    }
    assert!(total <= 2000, "src/cli has {total} lines (at most 2,000)");
}

// ------------------------------------------- the controller's three layers

/// The controller's floors, top down: the supervisor (`mod.rs`), `leader/`
/// (what only the Lease holder writes), `replica/` (what every replica
/// watches), `kube/` (talking to the API server). The shared bit beside
/// the supervisor (`changes`) sits below them all.
const CONTROLLER_LAYERS: [&str; 5] = ["root", "leader", "replica", "kube", "shared"];

/// Which floor a controller module is on, or `None` outside the controller.
fn controller_layer(module: &str) -> Option<&'static str> {
    if module == "crate::kube" || module.starts_with("crate::kube::") {
        return Some("kube");
    }
    let rest = module.strip_prefix("crate::controller")?;
    if rest.is_empty() {
        return Some("root");
    }
    let first = rest.strip_prefix("::")?.split("::").next()?;
    Some(match first {
        "leader" => "leader",
        "replica" => "replica",
        _ => "shared",
    })
}

/// Every use in the controller that points up a floor, one line each.
fn layer_violations(g: &Graph) -> Vec<String> {
    let floor = |layer: &str| CONTROLLER_LAYERS.iter().position(|l| *l == layer).unwrap();
    let mut problems = Vec::new();
    for (module, uses) in g {
        let Some(from) = controller_layer(module) else {
            continue;
        };
        for used in uses {
            let Some(to) = controller_layer(used) else {
                continue;
            };
            if floor(to) < floor(from) {
                problems.push(format!(
                    "{module} ({from}) uses {used} ({to}): the controller's imports point \
                     down, root → leader → replica → kube → shared (changes)"
                ));
            }
        }
    }
    problems
}

/// `src/kube` is the runtime's Kubernetes layer for the controller and the
/// commands alike: it uses no command, no command line, no server and
/// nothing of the controller. The metrics it counts its API errors and
/// retries in are `crate::metrics::controller`, outside the controller.
#[test]
fn the_kube_layer_uses_nothing_above_it() {
    let g = file_graph(&runtime_files());
    assert!(
        g.keys().any(|m| m.starts_with("crate::kube::")),
        "the reader sees src/kube: {g:?}"
    );
    let mut wrong = Vec::new();
    for (module, uses) in &g {
        if !(module == "crate::kube" || module.starts_with("crate::kube::")) {
            continue;
        }
        for used in uses {
            let above = [
                "crate::app",
                "crate::cli",
                "crate::server",
                "crate::controller",
            ]
            .iter()
            .any(|a| used == a || used.starts_with(&format!("{a}::")));
            if above {
                wrong.push(format!("{module} uses {used}"));
            }
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// The Kubernetes layer left the controller for good: no code names
/// `controller::kube`, and the folder is gone, so nothing grows a second
/// copy of it there.
#[test]
fn the_kube_layer_is_not_under_the_controller() {
    assert!(
        !root().join("src/controller/kube").exists(),
        "src/controller/kube is back: the Kubernetes layer is src/kube"
    );
    let mut files = Vec::new();
    for dir in ["src", "tests", "benches"] {
        read_all(&root().join(dir), &mut files);
    }
    let this = root().join("tests/it/architecture.rs");
    let naming: Vec<String> = lines_naming(&files, &["controller::kube"])
        .into_iter()
        .filter(|(path, _)| *path != this.as_path())
        .map(|(path, line)| format!("{}: {line}", path.display()))
        .collect();
    assert!(naming.is_empty(), "use crate::kube instead: {naming:#?}");
}

/// Key words of a write to the cluster: the parameters of an `Api`'s
/// create, replace, patch and delete, and kube's Event recorder.
const WRITES: [&str; 4] = ["PostParams", "PatchParams", "DeleteParams", "Recorder"];

/// What only the Lease holder does lives in `leader/`: nothing in
/// `replica/`, which every replica runs, writes to the cluster, and the
/// supervisor spawns the leader's tasks from `leader::` only (a task
/// spawned from `replica::` there would be leader-only code in the
/// replica's layer).
#[test]
fn leader_only_tasks_live_under_leader() {
    let src = root().join("src");
    let mut files = Vec::new();
    sources(&src.join("controller"), &mut files);
    let under = |dir: &str| -> Vec<(PathBuf, String)> {
        files
            .iter()
            .filter(|(p, _)| p.starts_with(src.join("controller").join(dir)))
            .cloned()
            .collect()
    };
    // The reader sees the leader's writes.
    let leader = under("leader");
    assert!(
        lines_naming(&leader, &WRITES)
            .iter()
            .any(|(p, _)| p.ends_with("leader/leak_events.rs")),
        "{:?}",
        leader.iter().map(|(p, _)| p).collect::<Vec<_>>()
    );
    let replica = under("replica");
    assert!(replica.len() > 5, "the reader sees replica/");
    let writes: Vec<String> = lines_naming(&replica, &WRITES)
        .into_iter()
        .map(|(path, line)| format!("{}: {line}", path.display()))
        .collect();
    assert!(
        writes.is_empty(),
        "replica/ writes to the cluster; only the leader does, from leader/: {writes:#?}"
    );
    let supervisor = std::fs::read_to_string(src.join("controller/mod.rs")).unwrap();
    let (code, _) = strip_tests(&supervisor);
    let spawn_all = code
        .split("fn spawn_all(")
        .nth(1)
        .and_then(|rest| rest.split("\n    }\n").next())
        .expect("LeaderContext::spawn_all in src/controller/mod.rs");
    assert!(
        spawn_all.contains("leader::audit::") && spawn_all.contains("leader::leak_events::"),
        "the reader sees the leader's tasks: {spawn_all}"
    );
    let from_replica: Vec<&str> = spawn_all
        .lines()
        .filter(|l| l.contains("replica::"))
        .map(str::trim)
        .collect();
    assert!(
        from_replica.is_empty(),
        "the leader spawns a task from replica/; move it to leader/: {from_replica:#?}"
    );
}

/// `mrguard audit` and the controller's passes judge with one copy of
/// the audit's listing, so the command finds what the controller finds;
/// the loop that keeps results between passes is the controller's alone.
#[test]
fn the_audit_command_and_the_controller_share_one_listing() {
    let g = file_graph(&runtime_files());
    let listing = "crate::controller::leader::audit::listing";
    for user in ["crate::app::audit", "crate::controller::leader::audit"] {
        assert!(g[user].contains(listing), "{user} uses {:?}", g[user]);
    }
    assert!(
        !g["crate::app::audit"].contains("crate::controller::leader::audit"),
        "mrguard audit runs the listing, not the controller's passes: {:?}",
        g["crate::app::audit"]
    );
}

#[test]
fn the_controller_layers_point_down() {
    let g = file_graph(&runtime_files());
    // The reader sees the real edges across floors.
    assert!(
        g["crate::controller::leader::audit::listing"]
            .contains("crate::controller::replica::identity")
            && g["crate::controller::replica::identity"]
                .contains("crate::controller::replica::mr_states")
            && g["crate::controller::replica::crds"].contains("crate::kube::retry"),
        "{g:?}"
    );
    let problems = layer_violations(&g);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_layer_checker_finds_an_import_that_points_up() {
    let file = |p: &str, t: &str| (PathBuf::from(p), t.to_string());
    let files = [
        file(
            "controller/mod.rs",
            "pub mod replica;\nfn f() { replica::go(); }\n",
        ),
        file("controller/changes.rs", "fn m() {}\n"),
        file("kube/mod.rs", "pub mod retry;\n"),
        file(
            "kube/retry.rs",
            "use crate::controller::changes::M;\nuse crate::controller::replica::crds::Crds;\n",
        ),
        file("controller/replica/mod.rs", "pub mod crds;\n"),
        file(
            "controller/replica/crds.rs",
            "use crate::kube::retry;\nuse crate::controller::Settings;\n",
        ),
    ];
    let problems = layer_violations(&file_graph(&files));
    assert_eq!(problems.len(), 2, "{problems:#?}");
    assert!(problems.iter().any(|p| p
        .starts_with("crate::kube::retry (kube) uses crate::controller::replica::crds (replica)")));
    assert!(problems.iter().any(|p| p
        .starts_with("crate::controller::replica::crds (replica) uses crate::controller (root)")));
}

/// The test harness has no module cycle either (`cluster` and `version`
/// both read where the binaries are, from `assets`).
#[test]
fn the_harness_has_no_module_cycle() {
    let g = graph(&root().join("crates/envtest/src"));
    assert!(
        g["cluster"].contains("assets") && g["version"].contains("assets"),
        "{g:?}"
    );
    if let Some(c) = cycle(&g) {
        panic!("module cycle in mrguard-envtest: {}", c.join(" → "));
    }
}

/// No `#[path]` reaches into another crate: shared test code is a crate
/// (`crates/testdata`), so each crate's files are its own.
#[test]
fn no_path_attribute_leaves_its_crate() {
    let mut files = Vec::new();
    for dir in ["src", "crates", "tests", "benches", "fuzz"] {
        let d = root().join(dir);
        if d.is_dir() {
            read_all(&d, &mut files);
        }
    }
    let crate_root = |p: &Path| {
        p.ancestors()
            .find(|a| a.join("Cargo.toml").is_file())
            .map(Path::to_path_buf)
    };
    let mut leaving = Vec::new();
    for (p, text) in &files {
        for line in text.lines().map(str::trim) {
            let Some(rest) = line.strip_prefix("#[path = \"") else {
                continue;
            };
            let target = rest.split('"').next().unwrap_or("");
            let resolved = p.parent().unwrap().join(target);
            let inside = match (crate_root(p), resolved.canonicalize()) {
                (Some(own), Ok(t)) => {
                    t.starts_with(own.canonicalize().unwrap())
                        && crate_root(&t).map(|c| c.canonicalize().unwrap())
                            == Some(own.canonicalize().unwrap())
                }
                _ => false,
            };
            if !inside {
                leaving.push(format!("{}: {line}", p.display()));
            }
        }
    }
    assert!(
        leaving.is_empty(),
        "#[path] into another crate: {leaving:#?}"
    );
}
