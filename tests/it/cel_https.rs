//! Configured CEL rules judged by the real server over verified TLS.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::fixtures::example_object;
use crate::support::{create, delete, update, warnings, IntoReview, TestServer};

const CONFIG: &str = r#"
resources:
  - apiGroups: ["account.aws.upbound.io", "account.aws.m.upbound.io"]
    kinds: ["AlternateContact"]
    celRules:
      - name: team
        expression: "has(self.metadata.labels) && 'team' in self.metadata.labels"
        message: "every MR needs a team label"
      - name: billing-review
        expression: "self.spec.forProvider.alternateContactType != 'BILLING'"
        messageExpression: "'contact ' + self.metadata.name + ' of type ' + self.spec.forProvider.alternateContactType + ' needs finance review'"
        action: Warn
      - name: type-frozen
        expression: "self.spec.forProvider.alternateContactType == oldSelf.spec.forProvider.alternateContactType"
        message: "alternateContactType cannot change"
        operations: [UPDATE]
      - name: broken
        expression: "self.spec.forProvider.noSuchField == 'x'"
        action: Warn
      - name: quadratic
        expression: "!has(self.spec.forProvider.items) || self.spec.forProvider.items.all(x, self.spec.forProvider.items.all(y, x == y || x != y))"
      - name: robots
        expression: "!request.userInfo.username.startsWith('robot-') || request.dryRun"
        message: "robots may only dry-run"
        operations: [CREATE, UPDATE, DELETE]
"#;

fn contact() -> Value {
    let mut c = example_object("aws_account_cluster_v1beta1_alternatecontact.yaml");
    c["metadata"]["labels"]["team"] = json!("platform");
    c
}

#[tokio::test]
async fn configured_rules_deny_warn_and_report_evaluation_errors() {
    let h = TestServer::with_config(CONFIG).await;

    // A clean object: allowed; the broken rule warns with an evaluation error.
    let r = h.review("/validate", &create(&contact()).review()).await;
    assert_eq!(r["allowed"], true, "{r}");
    let w = warnings(&r);
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(w[0].starts_with("cel:broken: evaluation error: "), "{w:?}");

    // No team label: denied with 403, the rule named.
    let mut bare = contact();
    bare["metadata"].as_object_mut().unwrap().remove("labels");
    let r = h.review("/validate", &create(&bare).review()).await;
    assert_eq!(r["allowed"], false, "{r}");
    assert_eq!(r["status"]["code"], 403);
    let msg = r["status"]["message"].as_str().unwrap();
    assert!(
        msg.contains("[cel:team] every MR needs a team label"),
        "{msg}"
    );

    // messageExpression on a Warn rule.
    let mut billing = contact();
    billing["spec"]["forProvider"]["alternateContactType"] = json!("BILLING");
    let r = h.review("/validate", &create(&billing).review()).await;
    assert_eq!(r["allowed"], true, "{r}");
    assert!(
        warnings(&r).contains(
            &"cel:billing-review: contact operations of type BILLING needs finance review"
                .to_string()
        ),
        "{r}"
    );

    let metrics = h.metrics().await;
    assert!(
        metrics.contains("mrguard_rule_findings_total{action=\"Deny\",rule=\"cel:team\"} 1"),
        "{metrics}"
    );
    // Each rule evaluated is timed, compiled (team) or erroring and handed
    // to the interpreter (broken): three CREATEs, three observations each;
    // the UPDATE-only rule was never evaluated.
    for rule in ["cel:team", "cel:broken", "cel:robots"] {
        let count = format!("mrguard_cel_rule_duration_seconds_count{{rule=\"{rule}\"}} 3");
        assert!(metrics.contains(&count), "{count}\n{metrics}");
        let sum = metric_value(
            &metrics,
            &format!("mrguard_cel_rule_duration_seconds_sum{{rule=\"{rule}\"}}"),
        );
        assert!(sum > 0.0 && sum < 1.0, "{rule}: {sum}");
    }
    assert!(!metrics.contains("rule=\"cel:type-frozen\""), "{metrics}");
    h.stop().await;
}

/// The value of the series named exactly `series` in an exposition.
fn metric_value(metrics: &str, series: &str) -> f64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {series} in\n{metrics}"))
}

#[tokio::test]
async fn update_only_rules_compare_with_old_self() {
    let h = TestServer::with_config(CONFIG).await;
    let old = contact();
    let mut new = contact();
    new["spec"]["forProvider"]["alternateContactType"] = json!("SECURITY");
    // On CREATE the UPDATE-only rule does not run.
    let r = h.review("/validate", &create(&new).review()).await;
    assert_eq!(r["allowed"], true, "{r}");
    let r = h.review("/validate", &update(&old, &new).review()).await;
    assert_eq!(r["allowed"], false, "{r}");
    let msg = r["status"]["message"].as_str().unwrap();
    assert!(
        msg.contains("[cel:type-frozen] alternateContactType cannot change"),
        "{msg}"
    );
    let r = h.review("/validate", &update(&old, &old).review()).await;
    assert_eq!(r["allowed"], true, "{r}");
    h.stop().await;
}

#[tokio::test]
async fn request_variables_reach_the_rules() {
    let h = TestServer::with_config(CONFIG).await;
    let rv = create(&contact()).username("robot-7").review();
    let r = h.review("/validate", &rv).await;
    assert_eq!(r["allowed"], false, "{r}");
    assert!(r["status"]["message"]
        .as_str()
        .unwrap()
        .contains("robots may only dry-run"));
    let rv = create(&contact())
        .username("robot-7")
        .dry_run(true)
        .review();
    let r = h.review("/validate", &rv).await;
    assert_eq!(r["allowed"], true, "{r}");
    // DELETE: `self` is the old object.
    let rv = delete(&contact()).username("robot-7").review();
    let r = h.review("/validate", &rv).await;
    assert_eq!(r["allowed"], false, "{r}");
    h.stop().await;
}

#[tokio::test]
async fn a_pathological_rule_is_stopped_not_a_500() {
    let h = TestServer::with_config(CONFIG).await;
    let mut big = contact();
    big["spec"]["forProvider"]["items"] = json!((0..20_000).collect::<Vec<i64>>());
    let started = Instant::now();
    let r = h.review("/validate", &create(&big).review()).await;
    let took = started.elapsed();
    assert_eq!(r["allowed"], false, "{r}");
    let msg = r["status"]["message"].as_str().unwrap();
    assert!(
        msg.contains("[cel:quadratic] evaluation error: ") && msg.contains("limit"),
        "{msg}"
    );
    // 400 million comparisons unbounded; the budget stops it. (Not a timing
    // assertion on the rule's speed: only that it was cut off at all.)
    assert!(took < Duration::from_secs(30), "{took:?}");
    // The server still answers.
    let r = h.review("/validate", &create(&contact()).review()).await;
    assert_eq!(r["allowed"], true, "{r}");
    h.stop().await;
}

#[tokio::test]
async fn a_config_with_a_broken_rule_is_refused_and_the_last_good_one_kept() {
    let h = TestServer::with_config(CONFIG).await;
    std::fs::write(
        &h.config_file,
        "resources:\n  - apiGroups: ['*']\n    kinds: ['*']\n    celRules:\n      - {name: bad, expression: 'self.a +'}\n",
    )
    .unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    let mut bare = contact();
    bare["metadata"].as_object_mut().unwrap().remove("labels");
    let r = h.review("/validate", &create(&bare).review()).await;
    assert_eq!(r["allowed"], false, "the old config still applies: {r}");
    let metrics = h.metrics().await;
    assert!(
        metrics.lines().any(
            |l| l.starts_with("mrguard_config_reloads_total{result=\"failure\"}")
                && !l.ends_with(" 0")
        ),
        "{metrics}"
    );
    h.stop().await;
}

/// The server leaves `metadata.managedFields` out of what it parses unless
/// a rule reads them: a rule on the field manager still sees them, while
/// the same review under a config that never names them is judged the same
/// with or without them.
#[tokio::test]
async fn a_rule_on_managed_fields_sees_them() {
    let config = r#"
resources:
  - apiGroups: ["*"]
    kinds: ["*"]
    celRules:
      - name: kubectl-only
        expression: "has(self.metadata.managedFields) && self.metadata.managedFields.all(m, m.manager == 'kubectl-client-side-apply')"
        message: "only kubectl may manage this object"
"#;
    let managed = |manager: &str| {
        let mut c = contact();
        c["metadata"]["managedFields"] = json!([{
            "manager": manager, "operation": "Update", "apiVersion": "account.aws.upbound.io/v1beta1",
            "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:forProvider": {}}},
        }]);
        c
    };
    let h = TestServer::with_config(config).await;
    let r = h
        .review(
            "/validate",
            &create(&managed("kubectl-client-side-apply")).review(),
        )
        .await;
    assert_eq!(r["allowed"], true, "{r}");
    let r = h
        .review("/validate", &create(&managed("helm")).review())
        .await;
    assert_eq!(r["allowed"], false, "{r}");
    let r = h.review("/validate", &create(&contact()).review()).await;
    assert_eq!(r["allowed"], false, "no managedFields at all: {r}");
    h.stop().await;

    // Rules that do not name managedFields: the same answers either way.
    let h = TestServer::with_config(CONFIG).await;
    for c in [contact(), managed("helm")] {
        let r = h.review("/validate", &create(&c).review()).await;
        assert_eq!(r["allowed"], true, "{r}");
        assert_eq!(warnings(&r).len(), 1, "{r}");
    }
    h.stop().await;
}
