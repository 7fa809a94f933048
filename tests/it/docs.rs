//! The documentation is checked like code:
//! - the references generated from what the code knows (rules, command
//!   line, metrics) match the committed copies; `MRGUARD_UPDATE_DOCS=1`
//!   rewrites them;
//! - every key of the configuration file is documented;
//! - every relative link and anchor of every Markdown file resolves (GitHub's
//!   heading anchors), and so does every repository path named in a
//!   message or in the docs, at the path it is named by (not merely a file
//!   of that name somewhere);
//! - nothing outside `.ci/` reaches into the folder beside the repository.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Component, Path, PathBuf};

use clap::CommandFactory;
use pulldown_cmark::{BrokenLink, CowStr, Event, LinkType, Options, Parser, Tag, TagEnd};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

// ---------------------------------------------------------------------------
// Generated blocks.

/// Compares the block `name` of `file` with `text`, or rewrites it when
/// `MRGUARD_UPDATE_DOCS=1`. Fails with a line diff.
fn check_generated(file: &str, name: &str, text: &str) {
    let path = root().join(file);
    let doc = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{file}: {e}"));
    let begin = format!("<!-- BEGIN GENERATED: {name} -->\n");
    let end = format!("<!-- END GENERATED: {name} -->");
    let start = doc
        .find(&begin)
        .unwrap_or_else(|| panic!("{file} has no {begin:?} marker"))
        + begin.len();
    let stop = start
        + doc[start..]
            .find(&end)
            .unwrap_or_else(|| panic!("{file} has no {end:?} marker"));
    let committed = &doc[start..stop];
    if committed == text {
        return;
    }
    if std::env::var("MRGUARD_UPDATE_DOCS").as_deref() == Ok("1") {
        let updated = format!("{}{text}{}", &doc[..start], &doc[stop..]);
        std::fs::write(&path, updated).unwrap();
        return;
    }
    let old: BTreeSet<&str> = committed.lines().collect();
    let new: BTreeSet<&str> = text.lines().collect();
    let mut diff = String::new();
    for l in committed.lines().filter(|l| !new.contains(l)) {
        let _ = writeln!(diff, "- {l}");
    }
    for l in text.lines().filter(|l| !old.contains(l)) {
        let _ = writeln!(diff, "+ {l}");
    }
    panic!(
        "{file}, block {name:?}, is out of date (- committed, + generated):\n{diff}\n\
         Regenerate with: MRGUARD_UPDATE_DOCS=1 cargo test -p mrguard --test it docs::"
    );
}

/// Text for a Markdown table cell.
fn cell(s: &str) -> String {
    s.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
        .replace('*', "\\*")
        .replace('<', "&lt;")
}

#[test]
fn the_rule_reference_is_generated_from_the_rules() {
    use mrguard_policy::admission::rules::RULES;
    let mut t = String::from(
        "| rule | operations | default | what it catches, and why | how to fix it | exempt users |\n\
         |---|---|---|---|---|---|\n",
    );
    for r in RULES {
        let ops: Vec<&str> = r.operations().iter().map(|o| o.as_str()).collect();
        let _ = writeln!(
            t,
            "| `{}` | {} | {} | {} | {} | {} |",
            r.name(),
            ops.join(", "),
            r.default_action().as_str(),
            r.summary().replace('|', "\\|"),
            r.fix().replace('|', "\\|"),
            if r.honours_exemptions() {
                "skipped"
            } else {
                "judged"
            },
        );
    }
    check_generated("docs/rules.md", "rules", &t);
}

/// The flags of one command, as a table.
fn flags_table(cmd: &clap::Command, out: &mut String) {
    let args: Vec<&clap::Arg> = cmd
        .get_arguments()
        .filter(|a| !a.is_hide_set() && !a.is_global_set())
        .filter(|a| !matches!(a.get_id().as_str(), "help" | "version"))
        .collect();
    if args.is_empty() {
        out.push_str("No flags.\n");
        return;
    }
    out.push_str("| flag | environment | default | meaning |\n|---|---|---|---|\n");
    for a in args {
        let value = a
            .get_value_names()
            .map(|v| {
                v.iter()
                    .map(|n| format!("<{n}>"))
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .unwrap_or_else(|| format!("<{}>", a.get_id().as_str().to_uppercase()));
        let takes_value = a.get_action().takes_values();
        let flag = match (a.get_short(), a.get_long()) {
            (Some(s), Some(l)) if takes_value => format!("`-{s}`, `--{l} {value}`"),
            (Some(s), Some(l)) => format!("`-{s}`, `--{l}`"),
            (None, Some(l)) if takes_value => format!("`--{l} {value}`"),
            (None, Some(l)) => format!("`--{l}`"),
            (Some(s), None) => format!("`-{s}`"),
            (None, None) => format!("`{value}` (argument)"),
        };
        let env = a
            .get_env()
            .map(|e| format!("`{}`", e.to_string_lossy()))
            .unwrap_or_default();
        let defaults: Vec<String> = a
            .get_default_values()
            .iter()
            .map(|d| d.to_string_lossy().into_owned())
            .collect();
        let default = match defaults.as_slice() {
            [] if a.is_required_set() => "required".to_string(),
            [] => String::new(),
            [d] if d.is_empty() => "empty".to_string(),
            ds if !takes_value && ds == ["false"] => "off".to_string(),
            ds => format!("`{}`", ds.join(",")),
        };
        let mut meaning = cell(&a.get_help().map(|h| h.to_string()).unwrap_or_default());
        let values: Vec<String> = a
            .get_possible_values()
            .iter()
            .filter(|v| !v.is_hide_set())
            .map(|v| format!("`{}`", v.get_name()))
            .collect();
        if takes_value && !values.is_empty() && !(values.len() == 2 && values[0] == "`true`") {
            let _ = write!(meaning, "; one of {}", values.join(", "));
        }
        let _ = writeln!(out, "| {flag} | {env} | {default} | {meaning} |");
    }
}

fn command_reference(cmd: &clap::Command, path: &str, out: &mut String) {
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        if sub.get_name() == "help" {
            continue;
        }
        let here = format!("{path} {}", sub.get_name());
        let _ = writeln!(out, "\n### `{here}`\n");
        if let Some(about) = sub.get_long_about().or(sub.get_about()) {
            let _ = writeln!(out, "{}\n", cell(&about.to_string()));
        }
        if sub.has_subcommands() {
            let names: Vec<String> = sub
                .get_subcommands()
                .filter(|s| s.get_name() != "help")
                .map(|s| format!("`{here} {}`", s.get_name()))
                .collect();
            let _ = writeln!(out, "Subcommands: {}.", names.join(", "));
            command_reference(sub, &here, out);
        } else {
            flags_table(sub, out);
        }
    }
}

#[test]
fn the_cli_reference_is_generated_from_clap() {
    let mut cmd = mrguard::cli::Cli::command();
    cmd.build();
    let mut out = String::from("### Global flags\n\nThese work with every command.\n\n");
    let globals = clap::Command::new("globals").args(
        cmd.get_arguments()
            .filter(|a| a.is_global_set())
            .map(|a| a.clone().global(false)),
    );
    flags_table(&globals, &mut out);
    command_reference(&cmd, "mrguard", &mut out);
    check_generated("docs/cli.md", "cli", &out);
}

/// `src/lib.rs` names every subcommand in its paragraph on [`cli`], and
/// nothing that is not one as a plain code word.
#[test]
fn the_crate_docs_name_every_subcommand() {
    let lib = std::fs::read_to_string(root().join("src/lib.rs")).unwrap();
    let start = lib
        .find("//! - [`cli`]")
        .expect("src/lib.rs has a bullet on cli");
    let para: String = lib[start..]
        .lines()
        .take_while(|l| l.starts_with("//!") && l.trim() != "//!")
        .enumerate()
        .take_while(|(i, l)| *i == 0 || !l.starts_with("//! - "))
        .map(|(_, l)| l.trim_start_matches("//!"))
        .collect::<Vec<_>>()
        .join(" ");
    // Intra-doc links (`[`app`]`) are modules, not subcommands.
    let para = regex::Regex::new(r"\[`[^`]*`\]")
        .unwrap()
        .replace_all(&para, "")
        .into_owned();
    let named: BTreeSet<&str> = para
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|w| w.chars().all(|c| c.is_ascii_lowercase()))
        .collect();
    let cmd = mrguard::cli::Cli::command();
    let subcommands: BTreeSet<&str> = cmd
        .get_subcommands()
        .map(|c| c.get_name())
        .filter(|n| *n != "help")
        .collect();
    assert!(subcommands.len() >= 10, "{subcommands:?}");
    assert_eq!(named, subcommands, "src/lib.rs: {para}");
}

#[test]
fn the_controller_flags_are_generated_from_clap() {
    use clap::Args as _;
    let mut cmd = mrguard::cli::ControllerArgs::augment_args(clap::Command::new("controller"));
    cmd.build();
    let mut out = String::new();
    flags_table(&cmd, &mut out);
    check_generated("docs/controller.md", "controller-flags", &out);
}

#[test]
fn the_metrics_reference_is_generated_from_the_registered_metrics() {
    let metrics = mrguard::metrics::catalogue().unwrap();
    let names: BTreeSet<&str> = metrics.iter().map(|m| m.name.as_str()).collect();
    for required in [
        "mrguard_admission_requests_total",
        "mrguard_admission_duration_seconds",
        "mrguard_rule_findings_total",
        "mrguard_config_reloads_total",
        "mrguard_config_last_reload_success_timestamp_seconds",
        "mrguard_tls_certificate_expiry_timestamp_seconds",
        "mrguard_audit_violations",
        "mrguard_managed_resources",
    ] {
        assert!(names.contains(required), "{required} is not registered");
    }
    let mut t =
        String::from("| metric | type | labels | from | meaning |\n|---|---|---|---|---|\n");
    for m in &metrics {
        let labels: Vec<String> = m.labels.iter().map(|l| format!("`{l}`")).collect();
        let _ = writeln!(
            t,
            "| `{}` | {} | {} | {} | {} |",
            m.name,
            m.kind,
            labels.join(", "),
            m.source,
            cell(&m.help)
        );
    }
    check_generated("docs/metrics.md", "metrics", &t);
}

// ---------------------------------------------------------------------------
// Configuration keys.

/// The keys a part of the configuration accepts, read from the strict
/// parser's answer to an unknown key ("expected one of a, b, c").
fn accepted_keys(yaml: &str) -> Vec<String> {
    let e = mrguard_policy::admission::config::Config::from_yaml(yaml)
        .err()
        .unwrap_or_else(|| panic!("{yaml:?} was accepted"))
        .to_string();
    let line = e
        .lines()
        .find(|l| l.contains("unknown field"))
        .unwrap_or_else(|| panic!("no unknown-field error for {yaml:?}: {e}"));
    let list = line
        .split_once("expected one of ")
        .or_else(|| line.split_once("expected "))
        .unwrap_or_else(|| panic!("no key list in {line:?}"))
        .1;
    let keys: Vec<String> = list
        .split(", ")
        .map(|k| k.trim().trim_matches('`').to_string())
        .filter(|k| !k.is_empty())
        .collect();
    assert!(!keys.is_empty(), "{line}");
    keys
}

#[test]
fn every_configuration_key_is_documented() {
    let probes = [
        ("", "zzProbe: 1\n"),
        ("providerConfig.", "providerConfig: {zzProbe: 1}\n"),
        ("resources[].", "resources: [{zzProbe: 1}]\n"),
        (
            "resources[].celRules[].",
            "resources: [{apiGroups: [a], kinds: [b], celRules: [{zzProbe: 1}]}]\n",
        ),
        ("exceptions[].", "exceptions: [{zzProbe: 1}]\n"),
        (
            "exceptions[].match.",
            "exceptions: [{name: a, match: {zzProbe: 1}}]\n",
        ),
    ];
    let doc = std::fs::read_to_string(root().join("docs/configuration.md")).unwrap();
    let mut missing = Vec::new();
    let mut seen = 0;
    for (prefix, yaml) in probes {
        for key in accepted_keys(yaml) {
            seen += 1;
            let full = format!("`{prefix}{key}`");
            if !doc.contains(&full) {
                missing.push(full);
            }
        }
    }
    assert!(seen >= 18, "only {seen} keys found");
    assert!(
        missing.is_empty(),
        "docs/configuration.md does not document {}",
        missing.join(", ")
    );
}

// ---------------------------------------------------------------------------
// Files of the repository.

/// Every file of the repository, skipping build output, tools and VCS data.
fn repo_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        let mut entries: Vec<_> = entries.filter_map(Result::ok).collect();
        entries.sort_by_key(|e| e.path());
        for e in entries {
            let path = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            let Ok(kind) = e.file_type() else { continue };
            if kind.is_dir() {
                let rel = path.strip_prefix(root()).unwrap_or(&path);
                let skip = matches!(name.as_str(), ".git" | "target" | ".tools" | "node_modules")
                    || rel.starts_with("fuzz/corpus")
                    || rel.starts_with("fuzz/artifacts")
                    || rel.starts_with("fuzz/coverage");
                if !skip {
                    walk(&path, out);
                }
            } else if kind.is_file() {
                out.push(path);
            }
        }
    }
    let mut out = Vec::new();
    walk(&root(), &mut out);
    out
}

fn rel(p: &Path) -> String {
    p.strip_prefix(root()).unwrap_or(p).display().to_string()
}

/// GitHub's heading anchor: lower case, punctuation other than `-` and `_`
/// dropped, spaces to `-`; repeats get `-1`, `-2`, ...
fn slug(text: &str) -> String {
    text.to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

struct Markdown {
    anchors: BTreeSet<String>,
    /// (destination, line)
    links: Vec<(String, usize)>,
    /// Inline code spans, for repository paths.
    code: Vec<(String, usize)>,
    broken_references: Vec<(String, usize)>,
}

fn parse_markdown(text: &str) -> Markdown {
    let line_of = |offset: usize| text[..offset.min(text.len())].matches('\n').count() + 1;
    let mut broken = Vec::new();
    let callback = |link: BrokenLink<'_>| -> Option<(CowStr<'_>, CowStr<'_>)> {
        // `[text][ref]` with no definition; a bare `[x]` is just text.
        if matches!(link.link_type, LinkType::Reference | LinkType::Collapsed) {
            broken.push((link.reference.to_string(), link.span.start));
        }
        None
    };
    let parser = Parser::new_with_broken_link_callback(
        text,
        Options::ENABLE_TABLES | Options::ENABLE_HEADING_ATTRIBUTES,
        Some(callback),
    );
    let mut md = Markdown {
        anchors: BTreeSet::new(),
        links: Vec::new(),
        code: Vec::new(),
        broken_references: Vec::new(),
    };
    // HTML anchors: <a id="x"> and <a name="x">.
    let html_id = regex::Regex::new(r#"(?:id|name)="([^"]+)""#).unwrap();
    let mut heading: Option<(String, Option<String>)> = None;
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for (event, range) in parser.into_offset_iter() {
        match event {
            Event::Start(Tag::Heading { id, .. }) => {
                heading = Some((String::new(), id.map(|i| i.to_string())))
            }
            Event::End(TagEnd::Heading(_)) => {
                if let Some((text, id)) = heading.take() {
                    let base = id.unwrap_or_else(|| slug(&text));
                    let n = counts.entry(base.clone()).or_insert(0);
                    let anchor = if *n == 0 {
                        base.clone()
                    } else {
                        format!("{base}-{n}")
                    };
                    *n += 1;
                    md.anchors.insert(anchor);
                }
            }
            Event::Text(t) => {
                if let Some((h, _)) = heading.as_mut() {
                    h.push_str(&t);
                }
            }
            Event::Code(c) => {
                if let Some((h, _)) = heading.as_mut() {
                    h.push_str(&c);
                }
                md.code.push((c.to_string(), line_of(range.start)));
            }
            Event::Start(Tag::Link { dest_url, .. })
            | Event::Start(Tag::Image { dest_url, .. }) => {
                md.links.push((dest_url.to_string(), line_of(range.start)))
            }
            Event::Html(h) | Event::InlineHtml(h) => {
                for cap in html_id.captures_iter(&h) {
                    md.anchors.insert(cap[1].to_string());
                }
            }
            _ => {}
        }
    }
    md.broken_references = broken.into_iter().map(|(r, at)| (r, line_of(at))).collect();
    md
}

/// `base/rel`, normalised; `None` when it leaves the repository.
fn resolve(base: &Path, rel: &str) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for c in base.join(rel).components() {
        match c {
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out.starts_with(root()).then_some(out)
}

#[test]
fn the_slug_rules_are_githubs() {
    assert_eq!(
        slug("`mrguard check --crd`: the API server, offline"),
        "mrguard-check---crd-the-api-server-offline"
    );
    assert_eq!(slug("What an MR is (and isn't)"), "what-an-mr-is-and-isnt");
    assert_eq!(slug("tagsField_opt-in"), "tagsfield_opt-in");
    let md = parse_markdown("# A\n## A\n## `b.c` d\n<a id=\"x\"></a>\n[l](#a-1)\n[r][nope]\n");
    assert_eq!(
        md.anchors.iter().map(String::as_str).collect::<Vec<_>>(),
        ["a", "a-1", "bc-d", "x"]
    );
    assert_eq!(md.links, [("#a-1".to_string(), 5)]);
    assert_eq!(md.broken_references.len(), 1);
}

#[test]
fn every_relative_link_and_anchor_in_markdown_resolves() {
    let files: Vec<PathBuf> = repo_files()
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    assert!(files.len() >= 10, "only {} Markdown files", files.len());
    let parsed: BTreeMap<PathBuf, Markdown> = files
        .iter()
        .map(|p| {
            (
                p.clone(),
                parse_markdown(&std::fs::read_to_string(p).unwrap()),
            )
        })
        .collect();
    let mut problems = Vec::new();
    let mut checked = 0;
    for (file, md) in &parsed {
        for (r, line) in &md.broken_references {
            problems.push(format!(
                "{}:{line}: reference [{r}] has no definition",
                rel(file)
            ));
        }
        for (dest, line) in &md.links {
            if dest.contains("://") || dest.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (path, anchor) = match dest.split_once('#') {
                Some((p, a)) => (p, Some(a)),
                None => (dest.as_str(), None),
            };
            let target = if path.is_empty() {
                Some(file.clone())
            } else {
                resolve(file.parent().unwrap(), path)
            };
            let Some(target) = target.filter(|t| t.exists()) else {
                problems.push(format!("{}:{line}: {dest}: no such file", rel(file)));
                continue;
            };
            let Some(anchor) = anchor else { continue };
            match parsed.get(&target) {
                Some(t) if !t.anchors.contains(anchor) => problems.push(format!(
                    "{}:{line}: {dest}: no heading with anchor #{anchor} in {}",
                    rel(file),
                    rel(&target)
                )),
                _ => {}
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(checked >= 20, "only {checked} relative links");
}

/// Repository paths in a text: `docs/x.md`, `charts/mrguard/...`, with an
/// optional `#anchor`. Placeholders (`<target>`, `*`, `$X`) are skipped.
fn repo_paths(text: &str, prefixes: &str) -> Vec<(String, Option<String>)> {
    static CACHE: std::sync::Mutex<BTreeMap<String, regex::Regex>> =
        std::sync::Mutex::new(BTreeMap::new());
    let re = CACHE
        .lock()
        .unwrap()
        .entry(prefixes.to_string())
        .or_insert_with(|| {
            regex::Regex::new(&format!(
                r"(?:^|[\s`'(\[=:])(({prefixes})/[A-Za-z0-9_.\-/]*[A-Za-z0-9_\-/])(#[a-z0-9_\-]+)?"
            ))
            .unwrap()
        })
        .clone();
    re.captures_iter(text)
        .filter(|c| {
            let end = c.get(0).unwrap().end();
            !text[end..].starts_with(['<', '*', '$', '{'])
        })
        .map(|c| {
            (
                c[1].to_string(),
                c.get(3).map(|a| a.as_str()[1..].to_string()),
            )
        })
        .collect()
}

fn check_path(path: &str, anchor: Option<&str>, at: &str, problems: &mut Vec<String>) {
    let full = root().join(path);
    if !full.exists() {
        problems.push(format!("{at}: {path} does not exist"));
        return;
    }
    if let Some(a) = anchor {
        if path.ends_with(".md") {
            let md = parse_markdown(&std::fs::read_to_string(&full).unwrap());
            if !md.anchors.contains(a) {
                problems.push(format!("{at}: {path}#{a}: no such heading"));
            }
        }
    }
}

/// What the repository's files and folders could be named by: each path
/// relative to the root and every tail of it (`a/b/c.rs`, `b/c.rs`,
/// `c.rs`).
fn repo_names() -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for f in repo_files() {
        let r = rel(&f);
        let mut path = r.as_str();
        loop {
            let mut tail = path;
            loop {
                names.insert(tail.to_string());
                match tail.split_once('/') {
                    Some((_, rest)) => tail = rest,
                    None => break,
                }
            }
            match path.rsplit_once('/') {
                Some((parent, _)) => path = parent,
                None => break,
            }
        }
    }
    names
}

/// Endings of the file names the docs name in code spans.
const FILE_ENDINGS: [&str; 10] = [
    ".rs", ".md", ".yaml", ".yml", ".toml", ".sh", ".py", ".json", ".txt", ".tpl",
];

/// Whether a code span is the name of a repository file or folder: a path
/// (`a/b.rs`, `dir/`, `b.rs`) that some file or folder of the repository
/// is, or ends with. Other names with a dot (a field path, a user's
/// `config.yaml`, the third-party fixtures' folders) are not.
fn names_repo_path(span: &str, names: &BTreeSet<String>) -> bool {
    let shape = span.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
        && span
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-' | '/'));
    shape
        && (span.ends_with('/') || FILE_ENDINGS.iter().any(|e| span.ends_with(e)))
        && names.contains(span.trim_end_matches('/'))
}

/// The repository paths named in code spans of one Markdown file that do
/// not exist at the path they are named by, and how many were checked. A
/// path is read relative to the repository root, to the file's folder, to
/// a folder its section's heading names (`## \`it/\` modules`), or to a
/// folder named before it in the same paragraph, table row or list item
/// (`\`crates/policy/src/commands/test.rs\`, \`sarif.rs\``); one with a `/` also
/// as a module path under a crate's `src/` (`\`controller/mod.rs\``). Code
/// spans in a link's text are the link's business.
fn misplaced_doc_paths(file: &Path, text: &str, names: &BTreeSet<String>) -> (usize, Vec<String>) {
    let root = root();
    let dir = file.parent().unwrap().to_path_buf();
    let crate_srcs: Vec<PathBuf> = std::iter::once(root.join("src"))
        .chain(
            std::fs::read_dir(root.join("crates"))
                .unwrap()
                .filter_map(Result::ok)
                .map(|e| e.path().join("src")),
        )
        .filter(|p| p.is_dir())
        .collect();
    let line_of = |offset: usize| text[..offset].matches('\n').count() + 1;
    let resolve_in = |bases: &[PathBuf], span: &str| -> Option<PathBuf> {
        bases
            .iter()
            .filter_map(|b| resolve(b, span))
            .find(|p| p.exists())
    };
    let folder = |p: PathBuf| {
        if p.is_dir() {
            p
        } else {
            p.parent().unwrap().to_path_buf()
        }
    };
    let (mut section, mut block, mut heading): (Vec<PathBuf>, Vec<PathBuf>, Option<Vec<PathBuf>>) =
        (Vec::new(), Vec::new(), None);
    let (mut in_link, mut checked, mut problems) = (0usize, 0, Vec::new());
    let parser = Parser::new_ext(
        text,
        Options::ENABLE_TABLES | Options::ENABLE_HEADING_ATTRIBUTES,
    );
    for (event, range) in parser.into_offset_iter() {
        match event {
            Event::Start(Tag::Heading { .. }) => {
                heading = Some(Vec::new());
                block.clear();
            }
            Event::End(TagEnd::Heading(_)) => section = heading.take().unwrap_or_default(),
            Event::Start(Tag::Paragraph | Tag::TableRow | Tag::TableHead | Tag::Item) => {
                block.clear()
            }
            Event::Start(Tag::Link { dest_url, .. }) => {
                in_link += 1;
                let dest = dest_url.split('#').next().unwrap_or("");
                if !dest.is_empty() && !dest.contains("://") {
                    if let Some(p) = resolve(&dir, dest).filter(|p| p.exists()) {
                        block.push(folder(p));
                    }
                }
            }
            Event::End(TagEnd::Link) => in_link = in_link.saturating_sub(1),
            Event::Code(c) if in_link == 0 && names_repo_path(&c, names) => {
                checked += 1;
                let mut bases = vec![root.clone(), dir.clone()];
                bases.extend(section.iter().cloned());
                bases.extend(block.iter().cloned());
                if c.trim_end_matches('/').contains('/') {
                    bases.extend(crate_srcs.iter().cloned());
                }
                match resolve_in(&bases, &c) {
                    Some(p) => {
                        let p = folder(p);
                        match heading.as_mut() {
                            Some(h) => h.push(p),
                            None => block.push(p),
                        }
                    }
                    None => problems.push(format!(
                        "{}:{}: `{c}` is no file or folder at that path (relative to the repository, the file, its section's or its paragraph's folders)",
                        rel(file),
                        line_of(range.start)
                    )),
                }
            }
            _ => {}
        }
    }
    (checked, problems)
}

#[test]
fn a_doc_path_must_exist_where_it_is_named() {
    let names = repo_names();
    let doc = root().join("docs/x.md");
    let check = |text: &str| misplaced_doc_paths(&doc, text, &names).1.len();
    // Where it is: from the root, the doc's folder, a folder named before
    // it in the row, a module path.
    assert_eq!(
        check("`crates/policy/src/commands/sarif.rs`, `README.md`\n"),
        0
    );
    assert_eq!(
        check("| `crates/policy/src/commands/test.rs`, `sarif.rs` | x |\n|-|-|\n"),
        0
    );
    assert_eq!(check("`admission/review/prune.rs`\n"), 0);
    assert_eq!(
        check("## `crates/policy/src/commands/`\n\n`sarif.rs` and `manifest/`\n"),
        0
    );
    // A file of that name elsewhere is not enough.
    assert_eq!(check("| `src/app/` | `plan.rs`, `sarif.rs` |\n|-|-|\n"), 1);
    assert_eq!(check("`sarif.rs`\n"), 1);
    assert_eq!(check("`check/live.rs`\n"), 1);
    // The folder named in one paragraph does not carry to the next.
    assert_eq!(check("`crates/policy/src/commands/`\n\n`sarif.rs`\n"), 1);
    // Not a repository path: no file of the repository has that name.
    assert_eq!(check("`my-config.yaml` and `spec.forProvider.json`\n"), 0);
}

#[test]
fn every_repository_path_in_messages_and_docs_exists() {
    let names = repo_names();
    let mut problems = Vec::new();
    let mut checked = 0;
    let literal = regex::Regex::new(r#""((?:[^"\\\n]|\\.)*)""#).unwrap();
    // Heredoc bodies in scripts (embedded Python, YAML) are not commands.
    let heredoc = regex::Regex::new(r#"<<-?\s*['"]?([A-Za-z_]+)"#).unwrap();
    for file in repo_files() {
        let r = rel(&file);
        let is_source = (r.starts_with("src/") || r.starts_with("crates/"))
            && file.extension().is_some_and(|e| e == "rs");
        if is_source {
            let text = std::fs::read_to_string(&file).unwrap();
            for (n, line) in text.lines().enumerate() {
                if line.trim_start().starts_with("//") {
                    continue;
                }
                for lit in literal.captures_iter(line) {
                    for (path, anchor) in repo_paths(&lit[1], "docs|charts|examples|scripts|tests")
                    {
                        checked += 1;
                        check_path(
                            &path,
                            anchor.as_deref(),
                            &format!("{r}:{}", n + 1),
                            &mut problems,
                        );
                    }
                }
            }
        } else if r.starts_with("scripts/") || r.starts_with(".ci/") {
            // Shell: every path a command uses (comments aside) must exist;
            // a moved file once broke the fuzz seeding in CI only.
            let text = std::fs::read_to_string(&file).unwrap();
            let mut until: Option<String> = None;
            for (n, line) in text.lines().enumerate() {
                if let Some(end) = &until {
                    if line.trim() == end {
                        until = None;
                    }
                    continue;
                }
                until = heredoc.captures(line).map(|c| c[1].to_string());
                if line.trim_start().starts_with('#') {
                    continue;
                }
                let line = line.replace('"', " ");
                for (path, anchor) in repo_paths(
                    &line,
                    "docs|charts|examples|scripts|tests|src|crates|fuzz|benches",
                ) {
                    checked += 1;
                    check_path(
                        &path,
                        anchor.as_deref(),
                        &format!("{r}:{}", n + 1),
                        &mut problems,
                    );
                }
            }
        } else if file.extension().is_some_and(|e| e == "md") {
            let text = std::fs::read_to_string(&file).unwrap();
            let (n, misplaced) = misplaced_doc_paths(&file, &text, &names);
            checked += n;
            problems.extend(misplaced);
            let md = parse_markdown(&text);
            for (code, line) in &md.code {
                if code.contains(' ') {
                    continue;
                }
                for (path, anchor) in repo_paths(
                    code,
                    "docs|charts|examples|scripts|tests|src|crates|fuzz|benches",
                ) {
                    checked += 1;
                    check_path(
                        &path,
                        anchor.as_deref(),
                        &format!("{r}:{line}"),
                        &mut problems,
                    );
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(checked >= 20, "only {checked} paths");
}

#[test]
fn nothing_outside_ci_reads_the_folder_beside_the_repository() {
    // Spelled in two parts so that this file does not match itself.
    let needle = format!("..{}", "/shared");
    let mut found = Vec::new();
    for file in repo_files() {
        let r = rel(&file);
        // CI, and scripts/test.sh, which names the fixtures folder there
        // (MRGUARD_FIXTURES) when it exists; documentation says where the
        // third-party data is, and reads nothing.
        if r.starts_with(".ci/") || r == "scripts/test.sh" || r.ends_with(".md") {
            continue;
        }
        let Ok(bytes) = std::fs::read(&file) else {
            continue;
        };
        let text = String::from_utf8_lossy(&bytes);
        for (n, line) in text.lines().enumerate() {
            if line.contains(&needle) {
                found.push(format!("{r}:{}: {}", n + 1, line.trim()));
            }
        }
    }
    assert!(found.is_empty(), "{}", found.join("\n"));
}

// ---------------------------------------------------------------------------
// The README's examples.

/// The example manifests do what the README's transcript shows: checked
/// offline with the CRDs they were applied with, the warning and the
/// denial are the ones the README quotes.
#[test]
fn the_example_manifests_do_what_the_readme_shows() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let crds = root().join("tests/fixtures/crds");
    let run = |name: &str| {
        let out = crate::support::bin::mrguard()
            .args([
                "check",
                "--crd",
                crds.to_str().unwrap(),
                "--require-crd",
                "-f",
            ])
            .arg(root().join("examples/manifests").join(name))
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    for clean in ["bucket.yaml", "network.yaml"] {
        assert_eq!(run(clean), (Some(0), String::new()), "{clean}");
    }
    let (code, err) = run("logs-archive.yaml");
    assert_eq!(code, Some(0), "{err}");
    let warning = err
        .trim()
        .strip_prefix("Bucket/team-a-logs-archive: warning: ")
        .unwrap_or_else(|| panic!("{err}"));
    assert!(
        warning.starts_with("deletion-policy-conflict:"),
        "{warning}"
    );
    assert!(
        readme.contains(&format!("Warning: {warning}")),
        "README lacks: {warning}"
    );
    let (code, err) = run("import-vpc.yaml");
    assert_eq!(code, Some(1), "{err}");
    let denial = err
        .trim()
        .strip_prefix("VPC/legacy-network: denied: ")
        .unwrap_or_else(|| panic!("{err}"));
    assert!(denial.contains("[observe-only-external-name]"), "{denial}");
    assert!(readme.contains(denial), "README lacks: {denial}");
}

/// tests/README.md is the map of the test code: every module of `it/` and
/// `e2e/` and every file of the harness has a row there, so a new one
/// cannot be added without saying what it covers.
#[test]
fn every_test_module_and_harness_file_has_a_row_in_the_tests_readme() {
    let readme = std::fs::read_to_string(root().join("tests/README.md")).unwrap();
    let rows: Vec<&str> = readme.lines().filter(|l| l.starts_with("| `")).collect();
    let listed = |name: &str| rows.iter().any(|r| r.contains(&format!("`{name}`")));
    let mut missing = Vec::new();
    for (dir, shown) in [
        ("tests/it", false),
        ("tests/e2e", false),
        ("crates/envtest/src", true),
    ] {
        for e in std::fs::read_dir(root().join(dir)).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_none_or(|x| x != "rs") {
                continue;
            }
            let file = p.file_name().unwrap().to_string_lossy().to_string();
            let name = if shown { format!("{dir}/{file}") } else { file };
            if !listed(&name) {
                missing.push(format!(
                    "{dir}/{}",
                    p.file_name().unwrap().to_string_lossy()
                ));
            }
        }
    }
    // An area split into a folder (`it/chart/`) has a row per file, named
    // with its folder. The harness's table names its files bare.
    for e in std::fs::read_dir(root().join("tests/it")).unwrap() {
        let dir = e.unwrap().path();
        let area = dir.file_name().unwrap().to_string_lossy().to_string();
        if !dir.is_dir() || area == "support" {
            continue;
        }
        for f in std::fs::read_dir(&dir).unwrap() {
            let p = f.unwrap().path();
            if p.extension().is_some_and(|x| x == "rs") {
                let name = format!("{area}/{}", p.file_name().unwrap().to_string_lossy());
                if !listed(&name) {
                    missing.push(format!("tests/it/{name}"));
                }
            }
        }
    }
    missing.sort();
    assert!(
        missing.is_empty(),
        "tests/README.md has no row for: {missing:#?}"
    );
}

/// BENCHMARKS.md holds the current numbers, each with its command, not
/// their history: it stays short enough to read.
#[test]
fn the_benchmarks_page_stays_under_400_lines() {
    let text = std::fs::read_to_string(root().join("BENCHMARKS.md")).unwrap();
    let lines = text.lines().count();
    assert!(
        lines <= 400,
        "BENCHMARKS.md has {lines} lines (at most 400)"
    );
}

/// The paths docs/architecture.md's "Source layout" tables name: in each
/// row, the first cell's folder, and every code span after it, read
/// relative to that folder or to a folder named before it in the row.
fn source_layout_paths(text: &str) -> BTreeSet<PathBuf> {
    let root = root();
    let text = format!("\n{text}");
    let start = text
        .find("\n## Source layout")
        .expect("docs/architecture.md has a \"Source layout\" section");
    let section = &text[start + 1..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |i| i + 3)];
    let mut covered = BTreeSet::new();
    let mut row: Vec<PathBuf> = Vec::new();
    for (event, _) in Parser::new_ext(section, Options::ENABLE_TABLES).into_offset_iter() {
        match event {
            Event::Start(Tag::TableRow | Tag::TableHead) => row.clear(),
            Event::Code(c) => {
                let c = c.trim_end_matches('/');
                let found = std::iter::once(root.clone())
                    .chain(row.iter().cloned())
                    .filter_map(|b| resolve(&b, c))
                    .find(|p| p.exists());
                if let Some(p) = found {
                    if p.is_dir() {
                        row.push(p.clone());
                    }
                    covered.insert(p);
                }
            }
            _ => {}
        }
    }
    covered
}

/// The modules the map must name: every file and folder under `src/`,
/// the policy crate's tiers and what each holds, and every test module
/// and harness file of `tests/it` and `tests/e2e` (a crate root and a
/// `mod.rs` are their folder's).
fn modules_to_map() -> Vec<PathBuf> {
    let root = root();
    let mut out = Vec::new();
    let add_entries = |dir: &Path, recurse: bool, out: &mut Vec<PathBuf>| {
        fn walk(dir: &Path, recurse: bool, out: &mut Vec<PathBuf>) {
            let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
                .unwrap()
                .map(|e| e.unwrap().path())
                .collect();
            entries.sort();
            for p in entries {
                let name = p.file_name().unwrap().to_string_lossy().to_string();
                if p.is_dir() {
                    out.push(p.clone());
                    if recurse {
                        walk(&p, recurse, out);
                    }
                } else if name.ends_with(".rs")
                    && !matches!(name.as_str(), "mod.rs" | "lib.rs" | "main.rs")
                {
                    out.push(p);
                }
            }
        }
        walk(dir, recurse, out);
    };
    add_entries(&root.join("src"), true, &mut out);
    for tier in ["admission", "cluster", "commands"] {
        let dir = root.join("crates/policy/src").join(tier);
        out.push(dir.clone());
        add_entries(&dir, false, &mut out);
    }
    add_entries(&root.join("tests/it"), false, &mut out);
    add_entries(&root.join("tests/e2e"), false, &mut out);
    out
}

#[test]
fn the_architecture_page_maps_every_module() {
    let text = std::fs::read_to_string(root().join("docs/architecture.md")).unwrap();
    let covered = source_layout_paths(&text);
    let missing: Vec<String> = modules_to_map()
        .iter()
        .filter(|m| !covered.contains(*m))
        .map(|m| rel(m))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/architecture.md's source layout does not name these modules (add each to the row of its folder): {missing:#?}"
    );
}

#[test]
fn the_layout_reader_reads_a_row_relative_to_its_folders() {
    let text = "# x\n\n## Source layout\n\n| folder | modules |\n|---|---|\n| `src/app/` | `check/` (`live.rs`), `plan.rs` |\n\n## Next\n\n| `src/tls.rs` |\n|---|\n";
    let covered = source_layout_paths(text);
    let root = root();
    for p in [
        "src/app",
        "src/app/check",
        "src/app/check/live.rs",
        "src/app/plan.rs",
    ] {
        assert!(covered.contains(&root.join(p)), "{p}: {covered:?}");
    }
    // Outside the section, nothing counts; nor does a name elsewhere.
    assert!(!covered.contains(&root.join("src/tls.rs")));
    assert!(
        !source_layout_paths("## Source layout\n\n| `src/` | `live.rs` |\n|-|-|\n")
            .contains(&root.join("src/app/check/live.rs"))
    );
}

/// The one map: no other page keeps a table of the source.
#[test]
fn only_the_architecture_page_maps_the_source() {
    let readme = std::fs::read_to_string(root().join("docs/README.md")).unwrap();
    assert!(
        !readme.contains("| `src/app/` |") && !readme.contains("| `crates/policy/"),
        "docs/README.md keeps a source table; the map is docs/architecture.md"
    );
}
