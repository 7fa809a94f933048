//! Policy operations over real HTTPS: exceptions, the Audit action and staged
//! enforcement on the chart's own configuration, a region change of a
//! created VPC named sample-vpc; and what `config check` and `explain`
//! say about them.

use std::time::Duration;

use serde_json::{json, Value};

use crate::support::bin::mrguard;
use crate::support::{fixtures, helm, update, warnings, IntoReview, TestServer};

/// The configuration the chart renders into its ConfigMap.
fn chart_config() -> Value {
    let docs = helm::template("mrguard", "crossplane-system", &[]);
    let cm = docs
        .iter()
        .find(|d| d["kind"] == "ConfigMap" && d["data"]["config.yaml"].is_string())
        .expect("the chart renders a ConfigMap with config.yaml");
    serde_saphyr::from_str(cm["data"]["config.yaml"].as_str().unwrap()).unwrap()
}

/// The chart's configuration plus `extra` top-level keys, as YAML (JSON is YAML).
fn chart_config_with(extra: Value) -> String {
    let mut c = chart_config();
    for (k, v) in extra.as_object().unwrap() {
        c[k] = v.clone();
    }
    serde_json::to_string_pretty(&c).unwrap()
}

/// A created VPC named sample-vpc, before and after a region change.
fn region_change() -> (Value, Value) {
    let mut old = fixtures::example_object("aws_ec2_cluster_v1beta1_vpc.yaml");
    old["metadata"]["annotations"]["crossplane.io/external-create-succeeded"] =
        json!("2026-01-01T00:00:00Z");
    old["metadata"]["annotations"]["crossplane.io/external-name"] = json!("vpc-0abc");
    let mut new = old.clone();
    new["spec"]["forProvider"]["region"] = json!("eu-central-1");
    (old, new)
}

async fn validate(h: &TestServer, old: &Value, new: &Value) -> Value {
    h.review("/validate", &update(old, new).review()).await
}

fn exception(expires: &str) -> Value {
    json!({"exceptions": [{
        "name": "vpc-migration",
        "rules": ["immutable-field"],
        "match": {"names": ["sample-*"]},
        "reason": "VPC moves regions during the 2027 migration (ticket NET-42)",
        "expires": expires,
    }]})
}

/// The value of the series whose name and labels start `series`.
fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(series))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// Polls until the server's answer to the region change is `allowed`.
async fn wait_allowed(h: &TestServer, old: &Value, new: &Value, allowed: bool) -> Value {
    for _ in 0..100 {
        let r = validate(h, old, new).await;
        if r["allowed"] == allowed {
            return r;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the region change never became allowed={allowed}");
}

#[tokio::test]
async fn an_exception_allows_the_region_change_with_a_warning_until_it_expires() {
    let (old, new) = region_change();
    // Without the exception the chart's configuration denies it.
    let h = TestServer::with_config(&chart_config_with(json!({}))).await;
    let r = validate(&h, &old, &new).await;
    assert_eq!(r["allowed"], false, "{r}");
    h.stop().await;

    let h = TestServer::with_config(&chart_config_with(exception("2099-01-31T00:00:00Z"))).await;
    let r = validate(&h, &old, &new).await;
    assert_eq!(r["allowed"], true, "{r}");
    let w = warnings(&r);
    assert!(
        w.iter().any(|w| w.starts_with(
            "immutable-field: waived by exception vpc-migration (expires 2099-01-31T00:00:00Z): "
        )),
        "{w:?}"
    );
    let m = h.metrics().await;
    assert_eq!(
        metric(
            &m,
            "mrguard_exceptions_applied_total{exception=\"vpc-migration\",rule=\"immutable-field\"}"
        ),
        Some(1.0),
        "{m}"
    );
    assert_eq!(
        metric(&m, "mrguard_exception_expired{exception=\"vpc-migration\"}"),
        Some(0.0),
        "{m}"
    );
    assert!(!m.contains("mrguard_rule_findings_total{action=\"Deny\",rule=\"immutable-field\"}"));

    // Expired (a live reload): denied again, and the metric says so.
    std::fs::write(
        &h.config_file,
        chart_config_with(exception("2020-01-31T00:00:00Z")),
    )
    .unwrap();
    let r = wait_allowed(&h, &old, &new, false).await;
    assert!(
        r["status"]["message"]
            .as_str()
            .unwrap()
            .contains("[immutable-field]"),
        "{r}"
    );
    assert!(warnings(&r).iter().all(|w| !w.contains("vpc-migration")));
    let m = h.metrics().await;
    assert_eq!(
        metric(&m, "mrguard_exception_expired{exception=\"vpc-migration\"}"),
        Some(1.0),
        "{m}"
    );
    h.stop().await;
}

#[tokio::test]
async fn audit_allows_the_region_change_silently_and_counts_it() {
    let (old, new) = region_change();
    let h = TestServer::with_config(&chart_config_with(
        json!({"rules": {"immutable-field": "Audit"}}),
    ))
    .await;
    let r = validate(&h, &old, &new).await;
    assert_eq!(r["allowed"], true, "{r}");
    assert!(warnings(&r).is_empty(), "{r}");
    let m = h.metrics().await;
    assert_eq!(
        metric(
            &m,
            "mrguard_rule_findings_total{action=\"Audit\",rule=\"immutable-field\"}"
        ),
        Some(1.0),
        "{m}"
    );
    h.stop().await;
}

#[tokio::test]
async fn a_staged_deny_warns_with_its_date_then_denies_once_it_passed() {
    let (old, new) = region_change();
    let staged = |t: &str| {
        chart_config_with(json!({"rules": {"immutable-field": {"action": "Deny", "warnUntil": t}}}))
    };
    let h = TestServer::with_config(&staged("2099-06-01T00:00:00Z")).await;
    let r = validate(&h, &old, &new).await;
    assert_eq!(r["allowed"], true, "{r}");
    let w = warnings(&r);
    assert!(
        w.iter().any(|w| w.starts_with("immutable-field: ")
            && w.ends_with("(staged: this will be denied from 2099-06-01T00:00:00Z)")),
        "{w:?}"
    );
    let m = h.metrics().await;
    assert_eq!(
        metric(
            &m,
            "mrguard_rule_findings_total{action=\"Warn\",rule=\"immutable-field\"}"
        ),
        Some(1.0),
        "{m}"
    );
    // The date passes (a reload to a past date stands in for waiting).
    std::fs::write(&h.config_file, staged("2020-06-01T00:00:00Z")).unwrap();
    let r = wait_allowed(&h, &old, &new, false).await;
    assert!(
        r["status"]["message"]
            .as_str()
            .unwrap()
            .contains("[immutable-field]"),
        "{r}"
    );
    h.stop().await;
}

fn config_check(text: &str) -> (bool, String) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.yaml");
    std::fs::write(&file, text).unwrap();
    let out = mrguard()
        .args(["config", "check"])
        .arg(&file)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn config_check_refuses_bad_exceptions_and_reports_expired_and_staged_ones() {
    let one = |e: Value| chart_config_with(json!({"exceptions": [e]}));
    let base = json!({"name": "x", "rules": ["immutable-field"], "reason": "NET-42"});
    let refused = [
        (
            json!({"name": "x", "rules": ["immutable-field"]}),
            "exceptions[0].reason",
        ),
        (
            json!({"name": "x", "rules": ["immutable-feld"], "reason": "r"}),
            "unknown rule \"immutable-feld\"",
        ),
        (
            json!({"name": "x", "rules": ["immutable-field"], "reason": "r",
                   "match": {"kinds": ["example.org/Widget"]}}),
            "matches nothing the configuration covers",
        ),
    ];
    for (e, needle) in refused {
        let (ok, err) = config_check(&one(e.clone()));
        assert!(!ok, "{e} accepted");
        assert!(err.contains(needle), "{e}: {err}");
    }
    let (ok, err) = config_check(&one(base.clone()));
    assert!(ok, "{err}");
    assert!(!err.contains("exception"), "{err}");

    let mut expired = base;
    expired["expires"] = json!("2020-01-01T00:00:00Z");
    let (ok, err) = config_check(&one(expired));
    assert!(ok, "{err}");
    assert!(
        err.contains("warning: exception x expired at 2020-01-01T00:00:00Z: it no longer applies"),
        "{err}"
    );

    let (ok, err) = config_check(&chart_config_with(json!({"rules": {
        "immutable-field": {"action": "Deny", "warnUntil": "2099-06-01T00:00:00Z"},
        "reference": {"action": "Deny", "warnUntil": "2020-06-01T00:00:00Z"},
    }})));
    assert!(ok, "{err}");
    assert!(
        err.contains("note: rules[immutable-field]: Warn (Deny from 2099-06-01T00:00:00Z) now"),
        "{err}"
    );
    assert!(
        err.contains(
            "note: rules[reference]: Deny (staged: warned until 2020-06-01T00:00:00Z) now"
        ),
        "{err}"
    );
}

#[test]
fn explain_shows_the_exceptions_that_match_an_mr() {
    let dir = tempfile::tempdir().unwrap();
    let (old, _) = region_change();
    let mr = dir.path().join("vpc.json");
    std::fs::write(&mr, old.to_string()).unwrap();
    let cfg = dir.path().join("config.yaml");
    let mut e = exception("2099-01-31T00:00:00Z");
    e["exceptions"].as_array_mut().unwrap().push(
        json!({"name": "prod-only", "rules": ["reference"], "reason": "r",
                     "match": {"names": ["prod-*"]}}),
    );
    std::fs::write(&cfg, chart_config_with(e)).unwrap();
    let out = mrguard()
        .arg("explain")
        .arg("-f")
        .arg(&mr)
        .arg("--config")
        .arg(&cfg)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("exceptions  vpc-migration waives immutable-field until 2099-01-31T00:00:00Z: VPC moves regions"),
        "{text}"
    );
    assert!(!text.contains("prod-only"), "{text}");
    // The field row: changing the region is no longer denied.
    let region = text
        .lines()
        .find(|l| l.trim_start().starts_with("spec.forProvider.region"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        region.trim_end().ends_with("yes         allowed"),
        "{region}"
    );
}

#[test]
fn check_shows_audit_findings_without_failing() {
    let dir = tempfile::tempdir().unwrap();
    let (old, new) = region_change();
    let w = |name: &str, v: &Value| {
        let p = dir.path().join(name);
        std::fs::write(&p, v.to_string()).unwrap();
        p
    };
    let (old_f, new_f) = (w("old.json", &old), w("new.json", &new));
    let cfg = dir.path().join("config.yaml");
    std::fs::write(
        &cfg,
        chart_config_with(json!({"rules": {"immutable-field": "Audit"}})),
    )
    .unwrap();
    let out = mrguard()
        .arg("check")
        .arg("-f")
        .arg(&new_f)
        .arg("--old")
        .arg(&old_f)
        .arg("--config")
        .arg(&cfg)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains(
            "VPC/sample-vpc: audit: immutable-field: spec.forProvider.region is immutable"
        ),
        "{err}"
    );
    assert!(!err.contains("warning: immutable-field"), "{err}");
}

/// An exception reaches a Composition's findings over real HTTPS: with
/// `composition-immutable-patch: Deny`, the Composition it names by
/// `match.names` is admitted with warnings naming it, and each waived
/// finding is counted by the exception instead of as a finding.
#[tokio::test]
async fn an_exception_waives_a_compositions_denial_and_is_counted() {
    let text = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("examples/compositions/network-pipeline.yaml"),
    )
    .unwrap();
    let composition: Value = serde_saphyr::from_str(&text).unwrap();
    let h = TestServer::with_config(&chart_config_with(json!({
        "rules": {"composition-immutable-patch": "Deny"},
        "exceptions": [{
            "name": "net-legacy",
            "rules": ["composition-immutable-patch"],
            "match": {"names": ["xnetworks.aws.example.org"]},
            "reason": "the legacy network is retired in 2099 (ticket NET-7)",
            "expires": "2099-01-31T00:00:00Z",
        }],
    })))
    .await;
    let r = h
        .review("/validate", &crate::support::create(&composition).review())
        .await;
    assert_eq!(r["allowed"], true, "{r}");
    let w = warnings(&r);
    assert_eq!(w.len(), 5, "{w:?}");
    assert!(
        w.iter().all(|w| w.starts_with(
            "composition-immutable-patch: waived by exception net-legacy (expires 2099-01-31T00:00:00Z): step "
        )),
        "{w:?}"
    );
    // Another name is denied.
    let mut other = composition.clone();
    other["metadata"]["name"] = json!("xnetworks-2.aws.example.org");
    let r = h
        .review("/validate", &crate::support::create(&other).review())
        .await;
    assert_eq!(r["allowed"], false, "{r}");
    let m = h.metrics().await;
    assert_eq!(
        metric(
            &m,
            "mrguard_exceptions_applied_total{exception=\"net-legacy\",rule=\"composition-immutable-patch\"}"
        ),
        Some(5.0),
        "{m}"
    );
    assert_eq!(
        metric(
            &m,
            "mrguard_rule_findings_total{action=\"Deny\",rule=\"composition-immutable-patch\"}"
        ),
        Some(5.0),
        "{m}"
    );
    h.stop().await;
}
