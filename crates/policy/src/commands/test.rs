//! `mrguard test`, the verdicts: what a case expects compared with what
//! the offline pipeline judged, and the results as text or JUnit XML. The
//! runtime reads the suites and the files they name.

use std::fmt::Write as _;

use serde::Deserialize;
use serde_json::Value;

use crate::admission::api_server;

/// What a case expects of its verdict; absent fields are not checked.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Expect {
    /// Whether the request is allowed.
    pub allowed: Option<bool>,
    /// The rules that fire, exactly (order and repeats aside).
    pub rules: Option<Vec<String>>,
    /// Texts some warning contains, each.
    #[serde(default)]
    pub warnings: Vec<String>,
    /// The JSON Patch, exactly (`[]` for none).
    pub patch: Option<Value>,
    /// Fields the mutated object has, with these values.
    pub object: Option<Value>,
}

/// One case's result.
#[derive(Debug)]
pub struct CaseResult {
    /// The case.
    pub name: String,
    /// Why it failed; empty when it passed.
    pub failures: Vec<String>,
}

/// One suite's results.
#[derive(Debug)]
pub struct SuiteResult {
    /// The suite file.
    pub file: String,
    /// The suite's name.
    pub name: String,
    /// Its cases, in order.
    pub cases: Vec<CaseResult>,
}

/// What differs between the expected verdict and `j`.
pub fn compare(expect: &Expect, j: &api_server::Judged) -> Vec<String> {
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

/// The text report, and how many cases passed and failed.
pub fn text_report(results: &[SuiteResult]) -> (String, usize, usize) {
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

/// `s` escaped for XML text and attributes.
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
pub fn junit(results: &[SuiteResult]) -> String {
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
