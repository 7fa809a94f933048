use super::{Rule, RuleContext, CU};
use crate::config::{GoDuration, GO_DURATION_FORMAT};
use crate::model::{Action, Operation, Violation};

/// `crossplane.io/poll-interval`: how often the provider polls this MR.
pub const POLL_INTERVAL: &str = "crossplane.io/poll-interval";
/// `crossplane.io/reconcile-requested-at`: a token that asks for a reconcile.
pub const RECONCILE_REQUESTED_AT: &str = "crossplane.io/reconcile-requested-at";

/// The annotations crossplane-runtime (v2.3 and later) reads to time an
/// MR's reconciles. A value it cannot use is ignored without a trace: a
/// poll interval that is not a Go duration, or is below Crossplane's
/// `--min-poll-interval`, leaves the provider's default in force, and an
/// empty reconcile request asks for nothing.
///
/// An UPDATE is judged only where it changes an annotation: a provider's
/// own writes to an MR that already carries a bad value must go through
/// (the audit reports that value).
pub(super) struct ReconcileAnnotations;

impl Rule for ReconcileAnnotations {
    fn name(&self) -> &'static str {
        "reconcile-annotations"
    }
    fn operations(&self) -> &'static [Operation] {
        CU
    }
    fn default_action(&self) -> Action {
        Action::Deny
    }
    fn summary(&self) -> &'static str {
        "`crossplane.io/poll-interval` is not a Go duration (`90s`, `1h30m`) or is below `minPollInterval` (default `1s`, Crossplane's `--min-poll-interval`), or `crossplane.io/reconcile-requested-at` is empty: the provider silently ignores them"
    }
    fn fix(&self) -> &'static str {
        "Write the poll interval as a Go duration of at least `minPollInterval` (e.g. `90s`), and give `crossplane.io/reconcile-requested-at` a non-empty token such as the current time"
    }
    fn honours_exemptions(&self) -> bool {
        true
    }
    fn check(&self, ctx: &RuleContext<'_>) -> Vec<Violation> {
        let mr = ctx.mr();
        let old = ctx.old_object.map(crate::mr::Mr);
        let changed = |key: &str| {
            ctx.operation != Operation::Update
                || old.is_none_or(|o| o.annotation(key) != mr.annotation(key))
        };
        let mut found = Vec::new();
        if let Some(v) = mr
            .annotation(POLL_INTERVAL)
            .filter(|_| changed(POLL_INTERVAL))
        {
            found.extend(poll_interval(v, ctx.config.min_poll_interval));
        }
        if mr.annotation(RECONCILE_REQUESTED_AT) == Some("") && changed(RECONCILE_REQUESTED_AT) {
            found.push(
                Violation::new(format!(
                    "{RECONCILE_REQUESTED_AT} is empty; the provider reconciles only when its value changes to a non-empty token"
                ))
                .fix(format!(
                    "set {RECONCILE_REQUESTED_AT} to a new token each time a reconcile is wanted, e.g. the current RFC 3339 time, or remove it"
                )),
            );
        }
        found
    }
}

fn poll_interval(value: &str, min: GoDuration) -> Option<Violation> {
    let d = match GoDuration::parse(value) {
        Ok(d) => d,
        Err(e) => {
            return Some(
                Violation::new(format!(
                    "{POLL_INTERVAL} {value:?} is not a Go duration ({e}); the provider ignores it and polls at its default interval"
                ))
                .fix(format!("write {GO_DURATION_FORMAT}")),
            )
        }
    };
    if d >= min && d.0 >= 0 {
        return None;
    }
    let why = if d.0 < 0 {
        "is negative".to_string()
    } else {
        format!("is shorter than the minimum poll interval {min} (minPollInterval, Crossplane's --min-poll-interval)")
    };
    Some(
        Violation::new(format!(
            "{POLL_INTERVAL} {value:?} ({d}) {why}; the provider does not poll that often"
        ))
        .fix(format!(
            "set {POLL_INTERVAL} to {min} or longer, or remove it to poll at the provider's default interval"
        )),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::testing::*;
    use serde_json::{json, Value};

    fn annotated(a: Value) -> Value {
        with_annotations(mr(json!({})), a)
    }

    fn poll(v: &str) -> Vec<Violation> {
        Case::create(annotated(json!({POLL_INTERVAL: v}))).check(&ReconcileAnnotations)
    }

    #[test]
    fn a_poll_interval_that_is_no_go_duration_is_denied_naming_the_format() {
        let v = poll("5 minutes");
        assert_eq!(v.len(), 1);
        assert!(
            v[0].message.starts_with(
                "crossplane.io/poll-interval \"5 minutes\" is not a Go duration (unknown unit \" minutes\""
            ),
            "{}",
            v[0].message
        );
        let fix = v[0].fix.as_deref().unwrap();
        assert!(
            fix.contains("Go duration (time.ParseDuration)") && fix.contains("\"90s\""),
            "{fix}"
        );
        for bad in ["1d", "30", "", "1 m", "PT1M", "1.5"] {
            assert_eq!(poll(bad).len(), 1, "{bad:?}");
        }
        let f = Case::create(annotated(json!({POLL_INTERVAL: "5 minutes"}))).evaluate();
        assert!(f
            .iter()
            .any(|f| f.rule == "reconcile-annotations" && f.action == Action::Deny));
    }

    #[test]
    fn a_poll_interval_below_the_minimum_is_denied_and_one_above_allowed() {
        let v = poll("500ms");
        assert_eq!(v.len(), 1);
        assert!(
            v[0].message
                .contains("is shorter than the minimum poll interval 1s"),
            "{}",
            v[0].message
        );
        assert!(poll("-1s")[0].message.contains("is negative"));
        assert!(poll("0").len() == 1);
        for ok in ["90s", "1s", "1m30s", "1.5h", "1000ms", "+2m"] {
            assert!(poll(ok).is_empty(), "{ok}");
        }
        // A configured minimum.
        let case = |v: &str| {
            Case::create(annotated(json!({POLL_INTERVAL: v})))
                .config("minPollInterval: 1m\n")
                .check(&ReconcileAnnotations)
        };
        assert!(case("30s")[0]
            .message
            .contains("minimum poll interval 1m0s"));
        assert!(case("1m").is_empty());
        let zero = |v: &str| {
            Case::create(annotated(json!({POLL_INTERVAL: v})))
                .config("minPollInterval: \"0\"\n")
                .check(&ReconcileAnnotations)
        };
        assert!(zero("1ns").is_empty() && zero("0").is_empty());
        assert!(zero("-1ns")[0].message.contains("negative"));
    }

    #[test]
    fn an_empty_reconcile_request_is_denied() {
        let v = Case::create(annotated(json!({RECONCILE_REQUESTED_AT: ""})))
            .check(&ReconcileAnnotations);
        assert_eq!(v.len(), 1);
        assert!(v[0].message.contains("is empty"), "{}", v[0].message);
        assert!(Case::create(annotated(
            json!({RECONCILE_REQUESTED_AT: "2026-11-28T07:00:00Z"})
        ))
        .check(&ReconcileAnnotations)
        .is_empty());
        // Both at once: two findings.
        let both = annotated(json!({RECONCILE_REQUESTED_AT: "", POLL_INTERVAL: "1d"}));
        assert_eq!(Case::create(both).check(&ReconcileAnnotations).len(), 2);
        assert!(Case::create(mr(json!({})))
            .check(&ReconcileAnnotations)
            .is_empty());
    }

    #[test]
    fn an_update_is_judged_only_where_it_changes_an_annotation() {
        let bad = annotated(json!({POLL_INTERVAL: "1d", RECONCILE_REQUESTED_AT: ""}));
        let mut relabelled = bad.clone();
        relabelled["metadata"]["labels"] = json!({"team": "a"});
        assert!(Case::update(bad.clone(), relabelled)
            .check(&ReconcileAnnotations)
            .is_empty());
        let fixed = annotated(json!({POLL_INTERVAL: "5m"}));
        assert!(Case::update(bad.clone(), fixed.clone())
            .check(&ReconcileAnnotations)
            .is_empty());
        let v = Case::update(fixed, bad).check(&ReconcileAnnotations);
        assert_eq!(v.len(), 2);
    }

    #[test]
    fn it_can_be_staged_and_exempts_providers() {
        let case = Case::create(annotated(json!({POLL_INTERVAL: "500ms"}))).config(
            "rules: {reconcile-annotations: {action: Deny, warnUntil: '2999-01-01T00:00:00Z'}}\n",
        );
        let f = case.evaluate();
        let f = f
            .iter()
            .find(|f| f.rule == "reconcile-annotations")
            .unwrap();
        assert_eq!(f.action, Action::Warn);
        assert!(
            f.warning().contains("denied from 2999-01-01T00:00:00Z"),
            "{}",
            f.warning()
        );
        let f = Case::create(annotated(json!({POLL_INTERVAL: "500ms"})))
            .provider(
                "s3.aws.upbound.io",
                "Bucket",
                "system:serviceaccount:crossplane-system:p",
            )
            .user("system:serviceaccount:crossplane-system:p")
            .evaluate();
        assert!(f.iter().all(|f| f.rule != "reconcile-annotations"));
    }
}
