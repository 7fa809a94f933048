//! `mrguard test DIR` through the binary: the shipped suites in
//! examples/tests pass and cover every built-in rule, a CEL rule, an
//! exception and a staged rule; a wrong expectation fails with exit 1 and
//! a JUnit failure; a broken suite is exit 2, naming what is wrong.

use serde_json::Value;

use crate::support::bin::mrguard;
use crate::support::root;

fn run(args: &[&str]) -> (Option<i32>, String, String) {
    let out = mrguard().args(args).output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_shipped_suites_pass_with_junit_output() {
    let dir = tempfile::tempdir().unwrap();
    let junit = dir.path().join("junit.xml");
    let suites = root().join("examples/tests");
    let (code, out, err) = run(&[
        "test",
        suites.to_str().unwrap(),
        "--junit",
        junit.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains(" passed, 0 failed (3 suites)"), "{out}");
    let xml = std::fs::read_to_string(&junit).unwrap();
    let cases = xml.matches("<testcase ").count();
    assert!(cases >= 5, "{cases} test cases:\n{xml}");
    assert!(!xml.contains("<failure"), "{xml}");
    assert!(
        xml.contains(&format!("tests=\"{cases}\" failures=\"0\"")),
        "{xml}"
    );
}

#[test]
fn the_shipped_suites_cover_every_rule_a_cel_rule_an_exception_and_a_staged_rule() {
    let dir = root().join("examples/tests");
    let mut rules = std::collections::BTreeSet::new();
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        if !p.to_string_lossy().ends_with(".test.yaml") {
            continue;
        }
        let suite: Value = serde_saphyr::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
        for c in suite["cases"].as_array().unwrap() {
            for r in c["expect"]["rules"].as_array().into_iter().flatten() {
                rules.insert(r.as_str().unwrap().to_string());
            }
        }
    }
    // These judge what other live objects exist (the identity index,
    // provider configs), which a suite has no cluster for; the end-to-end
    // tests prove them against the real API server (tests/e2e/identity.rs).
    const NEED_A_CLUSTER: [&str; 3] = [
        "external-identity",
        "provider-config-exists",
        "provider-config-kind",
    ];
    for r in mrguard_policy::admission::model::RULE_NAMES {
        if NEED_A_CLUSTER.contains(&r) {
            continue;
        }
        assert!(rules.contains(r), "no case expects {r} to fire");
    }
    assert!(rules.iter().any(|r| r.starts_with("cel:")), "{rules:?}");
    let config = std::fs::read_to_string(dir.join("operations-config.yaml")).unwrap();
    let c = mrguard_policy::admission::config::Config::from_yaml(&config).unwrap();
    assert!(!c.exceptions.is_empty());
    assert!(c.rules.values().any(|a| a.warn_until.is_some()));
    let ops = std::fs::read_to_string(dir.join("operations.test.yaml")).unwrap();
    assert!(ops.contains("waived by exception vpc-migration"));
    assert!(ops.contains("this will be denied from"));
}

const BUCKET: &str = "apiVersion: s3.aws.upbound.io/v1beta1\n      kind: Bucket\n      metadata: {name: logs}\n      spec:\n        deletionPolicy: Keep\n        forProvider: {region: us-east-1}\n";

#[test]
fn a_wrong_expectation_fails_with_exit_1_and_a_junit_failure() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("wrong.test.yaml"),
        format!(
            "name: wrong\ncases:\n  - name: expects the wrong verdict\n    object:\n      {BUCKET}    expect:\n      allowed: true\n      rules: [paused-value]\n      warnings: [nothing like this]\n  - name: right\n    object:\n      {BUCKET}    expect: {{allowed: false}}\n"
        ),
    )
    .unwrap();
    let junit = dir.path().join("j.xml");
    let (code, out, err) = run(&[
        "test",
        dir.path().to_str().unwrap(),
        "--junit",
        junit.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(out.contains("  FAIL  expects the wrong verdict"), "{out}");
    assert!(
        out.contains("expected allowed, got denied: mrguard denied CREATE of Bucket \"logs\""),
        "{out}"
    );
    assert!(
        out.contains("expected rules [paused-value] to fire, got [deletion-policy]"),
        "{out}"
    );
    assert!(
        out.contains("expected a warning containing \"nothing like this\""),
        "{out}"
    );
    assert!(out.contains("  ok    right"), "{out}");
    assert!(out.contains("1 passed, 1 failed (1 suite)"), "{out}");
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(xml.contains("tests=\"2\" failures=\"1\""), "{xml}");
    assert!(
        xml.contains("<failure message=\"expected allowed, got denied: "),
        "{xml}"
    );
}

#[test]
fn a_broken_suite_is_exit_2_naming_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "typo.test.yaml",
            "cases:\n  - name: x\n    objekt: {}\n    expect: {}\n",
            "objekt",
        ),
        (
            "noobj.test.yaml",
            "cases:\n  - name: x\n    expect: {}\n",
            "cases[0] (x): no object or objectFile",
        ),
        (
            "badcfg.test.yaml",
            "config: {rules: {no-such-rule: Deny}}\ncases: []\n",
            "rules[no-such-rule]",
        ),
        (
            "nofile.test.yaml",
            "cases:\n  - name: x\n    objectFile: missing.yaml\n    expect: {}\n",
            "missing.yaml",
        ),
    ];
    for (name, text, needle) in cases {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        let (code, out, err) = run(&["test", p.to_str().unwrap()]);
        assert_eq!(code, Some(2), "{name}: {out}{err}");
        assert!(err.contains(needle) && err.contains(name), "{name}: {err}");
    }
    let empty = tempfile::tempdir().unwrap();
    let (code, _, err) = run(&["test", empty.path().to_str().unwrap()]);
    assert_eq!(code, Some(2));
    assert!(err.contains("no *.test.yaml suite in"), "{err}");
}
