//! `mrguard test DIR` (docs/policy-operations.md#mrguard-test): YAML test
//! suites of a configuration, each case a request with the verdict it
//! expects, judged offline by the same functions as the webhooks. Text
//! output, `--junit FILE` for CI, and an exit code.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use clap::Args;
use serde::Deserialize;
use serde_json::Value;

use mrguard_policy::config::{Config, ConfigError};
use mrguard_policy::model::Operation;
use mrguard_policy::offline;

#[derive(Debug, Clone, Args)]
pub struct TestArgs {
    /// A suite file, or a folder searched recursively for `*.test.yaml`
    /// suites (other YAML files there are objects and configurations the
    /// suites name).
    pub(crate) path: PathBuf,
    /// Also write the results as JUnit XML to FILE.
    #[arg(long, value_name = "FILE")]
    pub(crate) junit: Option<PathBuf>,
}

/// Why the suites could not be run (exit code 2).
#[derive(Debug, thiserror::Error)]
pub(crate) enum SuiteError {
    /// A file could not be read.
    #[error("failed to read {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A suite or object file is not what it should be.
    #[error("failed to parse {path}: {reason}")]
    Parse {
        /// The file.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// A suite's configuration is invalid.
    #[error("failed to load the configuration of {path}: {source}")]
    Config {
        /// The suite.
        path: String,
        /// Why.
        #[source]
        source: ConfigError,
    },
    /// The folder holds no suite.
    #[error("no *.test.yaml suite in {0}")]
    Empty(String),
    /// The JUnit file could not be written.
    #[error("failed to write {path}: {source}")]
    Write {
        /// The file.
        path: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawSuite {
    name: Option<String>,
    /// The configuration, inline.
    config: Option<Value>,
    /// Or a configuration file, relative to the suite.
    config_file: Option<String>,
    /// A CRD file or folder, relative to the suite: their schemas are
    /// applied as `check --crd` does, and the immutable fields their
    /// documentation names are known, as in a cluster with them.
    crds: Option<String>,
    cases: Vec<RawCase>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawCase {
    name: String,
    operation: Option<Operation>,
    user: Option<String>,
    object: Option<Value>,
    object_file: Option<String>,
    old_object: Option<Value>,
    old_object_file: Option<String>,
    expect: Expect,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Expect {
    allowed: Option<bool>,
    rules: Option<Vec<String>>,
    #[serde(default)]
    warnings: Vec<String>,
    patch: Option<Value>,
    object: Option<Value>,
}

/// One case's result.
#[derive(Debug)]
pub(crate) struct CaseResult {
    pub(crate) name: String,
    /// Why it failed; empty when it passed.
    pub(crate) failures: Vec<String>,
}

/// One suite's results.
#[derive(Debug)]
pub(crate) struct SuiteResult {
    pub(crate) file: String,
    pub(crate) name: String,
    pub(crate) cases: Vec<CaseResult>,
}

/// The suites under `path`: the file itself, or every `*.test.yaml` and
/// `*.test.yml` below the folder, sorted.
fn suites(path: &Path) -> Result<Vec<PathBuf>, SuiteError> {
    if path.is_file() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut out = Vec::new();
    let mut stack = vec![path.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let entries = std::fs::read_dir(&dir).map_err(|source| SuiteError::Read {
            path: dir.display().to_string(),
            source,
        })?;
        for e in entries {
            let p = e
                .map_err(|source| SuiteError::Read {
                    path: dir.display().to_string(),
                    source,
                })?
                .path();
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if p.is_dir() {
                stack.push(p);
            } else if name.ends_with(".test.yaml") || name.ends_with(".test.yml") {
                out.push(p);
            }
        }
    }
    out.sort();
    if out.is_empty() {
        return Err(SuiteError::Empty(path.display().to_string()));
    }
    Ok(out)
}

fn read(path: &Path) -> Result<String, SuiteError> {
    std::fs::read_to_string(path).map_err(|source| SuiteError::Read {
        path: path.display().to_string(),
        source,
    })
}

/// The first document of an object file.
fn object_file(base: &Path, rel: &str) -> Result<Value, SuiteError> {
    let path = base.join(rel);
    let text = read(&path)?;
    serde_saphyr::from_multiple::<Value>(&text)
        .map_err(|e| SuiteError::Parse {
            path: path.display().to_string(),
            reason: e.to_string(),
        })?
        .into_iter()
        .find(|v| !v.is_null())
        .ok_or_else(|| SuiteError::Parse {
            path: path.display().to_string(),
            reason: "holds no object".into(),
        })
}

fn one_of(
    file: &str,
    what: &str,
    inline: Option<Value>,
    from: Option<&str>,
    base: &Path,
) -> Result<Option<Value>, SuiteError> {
    match (inline, from) {
        (Some(_), Some(_)) => Err(SuiteError::Parse {
            path: file.to_string(),
            reason: format!("{what}: give {what} or {what}File, not both"),
        }),
        (Some(v), None) => Ok(Some(v)),
        (None, Some(f)) => object_file(base, f)
            .map(Some)
            .map_err(|e| SuiteError::Parse {
                path: file.to_string(),
                reason: format!("{what}File: {e}"),
            }),
        (None, None) => Ok(None),
    }
}

/// Runs one suite file.
pub(crate) fn run_suite(path: &Path) -> Result<SuiteResult, SuiteError> {
    let file = path.display().to_string();
    let base = path.parent().unwrap_or(Path::new("."));
    let raw: RawSuite = serde_saphyr::from_str(&read(path)?).map_err(|e| SuiteError::Parse {
        path: file.clone(),
        reason: e.to_string(),
    })?;
    let config = match (&raw.config, &raw.config_file) {
        (Some(_), Some(_)) => {
            return Err(SuiteError::Parse {
                path: file,
                reason: "give config or configFile, not both".into(),
            })
        }
        // JSON is YAML: the inline mapping goes through the same parser.
        (Some(v), None) => Config::from_yaml(&v.to_string()),
        (None, Some(f)) => Config::from_yaml(&read(&base.join(f))?),
        (None, None) => Ok(Config::builtin()),
    }
    .map_err(|source| SuiteError::Config {
        path: file.clone(),
        source,
    })?;
    let crds =
        match &raw.crds {
            Some(p) => Some(super::check::load_crds(&base.join(p), None).map_err(|e| {
                SuiteError::Parse {
                    path: file.clone(),
                    reason: format!("crds: {e}"),
                }
            })?),
            None => None,
        };
    let cluster = crds
        .as_ref()
        .map(mrguard_policy::crd::Crds::cluster)
        .unwrap_or_default();
    let mut cases = Vec::new();
    for (i, c) in raw.cases.into_iter().enumerate() {
        let at = format!("cases[{i}] ({})", c.name);
        let object = one_of(&file, "object", c.object, c.object_file.as_deref(), base)?;
        let old = one_of(
            &file,
            "oldObject",
            c.old_object,
            c.old_object_file.as_deref(),
            base,
        )?;
        let op = c.operation.unwrap_or(if old.is_some() {
            Operation::Update
        } else {
            Operation::Create
        });
        // A DELETE judges the object being deleted, given either way.
        let (object, old) = match (op, object, old) {
            (Operation::Delete, None, Some(o)) => (Some(o), None),
            (_, o, old) => (o, old),
        };
        let Some(object) = object else {
            return Err(SuiteError::Parse {
                path: file,
                reason: format!("{at}: no object or objectFile"),
            });
        };
        if op == Operation::Update && old.is_none() {
            return Err(SuiteError::Parse {
                path: file,
                reason: format!("{at}: UPDATE needs oldObject or oldObjectFile"),
            });
        }
        let user = c.user.as_deref().unwrap_or("mrguard-test");
        let s = |k: &str| object.get(k).and_then(Value::as_str).unwrap_or_default();
        let crd = match crds.as_ref().map(|c| c.lookup(s("apiVersion"), s("kind"))) {
            Some(mrguard_policy::crd::Lookup::Found(v)) => Some(v),
            _ => None,
        };
        let judged = offline::judge_in(op, &object, old.as_ref(), user, &config, crd, &cluster);
        let failures = match judged {
            Ok(j) => compare(&c.expect, &j),
            Err(e) => vec![format!("the request could not be judged: {e}")],
        };
        cases.push(CaseResult {
            name: c.name,
            failures,
        });
    }
    Ok(SuiteResult {
        name: raw.name.unwrap_or_else(|| file.clone()),
        file,
        cases,
    })
}

/// What differs between the expected verdict and `j`.
fn compare(expect: &Expect, j: &offline::Judged) -> Vec<String> {
    let mut out = Vec::new();
    let allowed = j.denial.is_none();
    if let Some(want) = expect.allowed {
        if want != allowed {
            out.push(match &j.denial {
                Some(d) => format!("expected allowed, got denied: {d}"),
                None => "expected denied, got allowed".to_string(),
            });
        }
    }
    if let Some(want) = &expect.rules {
        let mut want: Vec<&str> = want.iter().map(String::as_str).collect();
        want.sort_unstable();
        want.dedup();
        let mut got: Vec<&str> = j.findings.iter().map(|f| f.rule.as_ref()).collect();
        got.sort_unstable();
        got.dedup();
        if want != got {
            out.push(format!(
                "expected rules [{}] to fire, got [{}]",
                want.join(", "),
                got.join(", ")
            ));
        }
    }
    for w in &expect.warnings {
        if !j.warnings.iter().any(|g| g.contains(w.as_str())) {
            out.push(format!(
                "expected a warning containing {w:?}, got {:?}",
                j.warnings
            ));
        }
    }
    if let Some(want) = &expect.patch {
        let got = j.patch.clone().unwrap_or(Value::Array(vec![]));
        if &got != want {
            out.push(format!("expected the patch {want}, got {got}"));
        }
    }
    if let Some(want) = &expect.object {
        if let Some(diff) = subset(want, &j.object, "") {
            out.push(format!("the mutated object differs: {diff}"));
        }
    }
    out
}

/// Whether every field of `want` is in `got` with the same value (objects
/// compared key by key, everything else exactly); the first difference.
fn subset(want: &Value, got: &Value, at: &str) -> Option<String> {
    match (want, got) {
        (Value::Object(w), Value::Object(g)) => w.iter().find_map(|(k, wv)| {
            let here = format!("{at}.{k}");
            match g.get(k) {
                None => Some(format!("{here} is absent, expected {wv}")),
                Some(gv) => subset(wv, gv, &here),
            }
        }),
        _ if want == got => None,
        _ => Some(format!(
            "{} is {got}, expected {want}",
            if at.is_empty() { "." } else { at }
        )),
    }
}

fn text_report(results: &[SuiteResult]) -> (String, usize, usize) {
    let (mut passed, mut failed) = (0, 0);
    let mut out = String::new();
    for s in results {
        let _ = writeln!(out, "{} ({})", s.name, s.file);
        for c in &s.cases {
            if c.failures.is_empty() {
                passed += 1;
                let _ = writeln!(out, "  ok    {}", c.name);
            } else {
                failed += 1;
                let _ = writeln!(out, "  FAIL  {}", c.name);
                for f in &c.failures {
                    let _ = writeln!(out, "          {f}");
                }
            }
        }
    }
    let _ = writeln!(
        out,
        "{passed} passed, {failed} failed ({} suite{})",
        results.len(),
        if results.len() == 1 { "" } else { "s" }
    );
    (out, passed, failed)
}

fn xml(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            // XML 1.0 has no other control characters.
            c if c.is_control() && !matches!(c, '\n' | '\t' | '\r') => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// The results as JUnit XML: one testsuite per suite file.
pub(crate) fn junit(results: &[SuiteResult]) -> String {
    let total: usize = results.iter().map(|s| s.cases.len()).sum();
    let failures: usize = results
        .iter()
        .flat_map(|s| &s.cases)
        .filter(|c| !c.failures.is_empty())
        .count();
    let mut out = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"mrguard test\" tests=\"{total}\" failures=\"{failures}\">\n"
    );
    for s in results {
        let failed = s.cases.iter().filter(|c| !c.failures.is_empty()).count();
        let _ = writeln!(
            out,
            "  <testsuite name=\"{}\" file=\"{}\" tests=\"{}\" failures=\"{failed}\">",
            xml(&s.name),
            xml(&s.file),
            s.cases.len()
        );
        for c in &s.cases {
            let _ = write!(
                out,
                "    <testcase classname=\"{}\" name=\"{}\"",
                xml(&s.name),
                xml(&c.name)
            );
            if c.failures.is_empty() {
                out.push_str("/>\n");
            } else {
                let _ = writeln!(
                    out,
                    ">\n      <failure message=\"{}\">{}</failure>\n    </testcase>",
                    xml(&c.failures[0]),
                    xml(&c.failures.join("\n"))
                );
            }
        }
        out.push_str("  </testsuite>\n");
    }
    out.push_str("</testsuites>\n");
    out
}

fn execute(args: &TestArgs) -> Result<bool, SuiteError> {
    let mut results = Vec::new();
    for p in suites(&args.path)? {
        results.push(run_suite(&p)?);
    }
    let (text, _, failed) = text_report(&results);
    print!("{text}");
    if let Some(f) = &args.junit {
        std::fs::write(f, junit(&results)).map_err(|source| SuiteError::Write {
            path: f.display().to_string(),
            source,
        })?;
    }
    Ok(failed == 0)
}

/// Runs the suites; 0 when every case passes, 1 when one fails, 2 when a
/// suite cannot be run.
pub(crate) fn run(args: TestArgs) -> i32 {
    match execute(&args) {
        Ok(true) => 0,
        Ok(false) => 1,
        Err(e) => {
            eprintln!("{e}");
            2
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn subset_names_the_first_difference() {
        let got = json!({"a": {"b": 1, "c": [1, 2]}, "d": "x"});
        assert_eq!(subset(&json!({"a": {"b": 1}}), &got, ""), None);
        assert_eq!(
            subset(&json!({"a": {"b": 2}}), &got, "").as_deref(),
            Some(".a.b is 1, expected 2")
        );
        assert_eq!(
            subset(&json!({"e": 1}), &got, "").as_deref(),
            Some(".e is absent, expected 1")
        );
        assert!(subset(&json!({"a": {"c": [1]}}), &got, "").is_some());
    }

    #[test]
    fn junit_escapes_and_counts() {
        let r = vec![SuiteResult {
            file: "a&b.test.yaml".into(),
            name: "s<1>".into(),
            cases: vec![
                CaseResult {
                    name: "ok \"one\"".into(),
                    failures: vec![],
                },
                CaseResult {
                    name: "bad".into(),
                    failures: vec!["expected denied, got allowed".into()],
                },
            ],
        }];
        let x = junit(&r);
        assert!(x.contains("tests=\"2\" failures=\"1\""), "{x}");
        assert!(
            x.contains("name=\"s&lt;1&gt;\" file=\"a&amp;b.test.yaml\""),
            "{x}"
        );
        assert!(x.contains("name=\"ok &quot;one&quot;\"/>"), "{x}");
        assert!(
            x.contains("<failure message=\"expected denied, got allowed\">"),
            "{x}"
        );
    }
}
