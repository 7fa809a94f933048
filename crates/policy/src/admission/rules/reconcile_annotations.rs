use super::{Rule, RuleContext, CU};
use crate::admission::config::{GoDuration, GO_DURATION_FORMAT};
use crate::admission::model::{Action, Operation, Violation};

/// `crossplane.io/poll-interval`: how often the provider polls this MR.
pub const POLL_INTERVAL: &str = "crossplane.io/poll-interval";
/// `crossplane.io/reconcile-requested-at`: a token that asks for a reconcile.
pub const RECONCILE_REQUESTED_AT: &str = "crossplane.io/reconcile-requested-at";

/// The annotations crossplane-runtime (v2.3 and later) reads to time an
/// MR's reconciles, judged as its managed reconciler reads them
/// (crossplane-runtime v2.3.3, `pkg/meta/meta.go` and
/// `pkg/reconciler/managed/reconciler.go`):
///
/// - `GetPollInterval` drops a poll interval that `time.ParseDuration`
///   rejects, or that is zero or negative, without a log line or an event,
///   and `effectivePollInterval` then uses the controller's default poll
///   interval. mrguard denies those values: the user asked for something
///   the provider silently does not do.
/// - `effectivePollInterval` raises a positive interval below the
///   reconciler's minimum (`WithMinPollInterval`) to that minimum. The
///   value still takes effect, only slower than written, so it is a
///   warning, never a denial. The minimum is 0 unless the provider opts in,
///   so `minPollInterval` defaults to 0. Crossplane core's
///   `--min-poll-interval` does not apply here: core passes it to its
///   composite reconciler only, not to providers.
/// - `GetReconcileRequest` treats an empty `reconcile-requested-at` as
///   absent: no reconcile request is handled or recorded. Denied, as above.
///
/// An UPDATE is judged only where it changes an annotation: a provider's
/// own writes to an MR that already carries a bad value must go through
/// (the audit reports that value).
pub(super) struct ReconcileAnnotations;

/// What the provider does with a value it cannot use, for messages.
const IGNORED: &str =
    "crossplane-runtime v2.3 ignores it and the provider keeps its default poll interval";

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
        "`crossplane.io/poll-interval` is not a Go duration (`90s`, `1h30m`) or is zero or negative, or `crossplane.io/reconcile-requested-at` is empty: crossplane-runtime v2.3 silently ignores them and the provider keeps its default poll interval. A positive interval below `minPollInterval` (the provider's `WithMinPollInterval`, default `0`) is only a warning: the provider raises it to that minimum"
    }
    fn fix(&self) -> &'static str {
        "Write the poll interval as a positive Go duration (e.g. `90s`) of at least the provider's minimum, or remove it; give `crossplane.io/reconcile-requested-at` a non-empty token such as the current time"
    }
    fn honours_exemptions(&self) -> bool {
        true
    }
    fn check(&self, ctx: &RuleContext<'_>) -> Vec<Violation> {
        let mr = ctx.mr();
        let old = ctx.old_object.map(crate::admission::mr::Mr);
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
                    "{RECONCILE_REQUESTED_AT} is empty; crossplane-runtime v2.3 ignores an empty token, so no reconcile is requested and the provider keeps its default poll interval"
                ))
                .fix(format!(
                    "set {RECONCILE_REQUESTED_AT} to a new non-empty token each time a reconcile is wanted, e.g. the current RFC 3339 time, or remove it"
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
                    "{POLL_INTERVAL} {value:?} is not a Go duration ({e}); {IGNORED}"
                ))
                .fix(format!(
                "write {GO_DURATION_FORMAT}, greater than zero; or remove it to keep the default"
            )),
            )
        }
    };
    if d.0 <= 0 {
        let what = if d.0 == 0 { "zero" } else { "negative" };
        return Some(
            Violation::new(format!(
                "{POLL_INTERVAL} {value:?} ({d}) is {what}; {IGNORED}, as for any interval that is not positive"
            ))
            .fix(format!(
                "set {POLL_INTERVAL} to a positive Go duration such as \"90s\", or remove it to keep the default"
            )),
        );
    }
    if d >= min {
        return None;
    }
    Some(
        Violation::new(format!(
            "{POLL_INTERVAL} {value:?} ({d}) is shorter than minPollInterval {min}, the provider's minimum; crossplane-runtime v2.3 raises it to {min}, so the provider polls every {min}"
        ))
        .fix(format!(
            "set {POLL_INTERVAL} to {min} or longer, which is what the provider uses"
        ))
        .warn_only(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::rules::testing::*;
    use serde_json::{json, Value};

    fn annotated(a: Value) -> Value {
        with_annotations(mr(json!({})), a)
    }

    fn poll(v: &str) -> Vec<Violation> {
        Case::create(annotated(json!({POLL_INTERVAL: v}))).check(&ReconcileAnnotations)
    }

    /// The findings of the whole chain for a poll interval under `config`.
    fn judged(v: &str, config: &str) -> Vec<crate::admission::model::Finding> {
        Case::create(annotated(json!({POLL_INTERVAL: v})))
            .config(config)
            .evaluate()
            .into_iter()
            .filter(|f| f.rule == "reconcile-annotations")
            .collect()
    }

    #[test]
    fn a_poll_interval_that_is_no_go_duration_is_denied_saying_the_provider_ignores_it() {
        let v = poll("5 minutes");
        assert_eq!(v.len(), 1);
        assert_eq!(
            v[0].message,
            "crossplane.io/poll-interval \"5 minutes\" is not a Go duration (unknown unit \" minutes\" in duration \"5 minutes\"); crossplane-runtime v2.3 ignores it and the provider keeps its default poll interval"
        );
        assert!(!v[0].warn_only);
        let fix = v[0].fix.as_deref().unwrap();
        assert!(
            fix.contains("Go duration (time.ParseDuration)")
                && fix.contains("\"90s\"")
                && fix.contains("greater than zero"),
            "{fix}"
        );
        for bad in ["1d", "30", "", "1 m", "PT1M", "1.5"] {
            let v = poll(bad);
            assert_eq!(v.len(), 1, "{bad:?}");
            assert!(v[0].message.contains("is not a Go duration"), "{bad:?}");
        }
        let f = judged("5 minutes", "");
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].action, Action::Deny);
    }

    #[test]
    fn a_zero_or_negative_poll_interval_is_denied_saying_the_provider_ignores_it() {
        let v = poll("-1s");
        assert_eq!(v.len(), 1);
        assert_eq!(
            v[0].message,
            "crossplane.io/poll-interval \"-1s\" (-1s) is negative; crossplane-runtime v2.3 ignores it and the provider keeps its default poll interval, as for any interval that is not positive"
        );
        assert_eq!(
            v[0].fix.as_deref(),
            Some("set crossplane.io/poll-interval to a positive Go duration such as \"90s\", or remove it to keep the default")
        );
        for zero in ["0s", "0", "-0", "0ms", "0h0m"] {
            let v = poll(zero);
            assert_eq!(v.len(), 1, "{zero}");
            assert!(
                v[0].message
                    .contains(") is zero; crossplane-runtime v2.3 ignores it"),
                "{zero}: {}",
                v[0].message
            );
        }
        // Denied under any minimum, 0 included.
        for config in ["", "minPollInterval: 0s\n", "minPollInterval: 1s\n"] {
            for bad in ["-1s", "0s", "-1ns"] {
                let f = judged(bad, config);
                assert_eq!(f.len(), 1, "{bad} {config:?}");
                assert_eq!(f[0].action, Action::Deny, "{bad} {config:?}");
            }
        }
    }

    #[test]
    fn a_positive_poll_interval_below_the_minimum_is_a_warning_that_it_is_raised() {
        // The provider's minimum is 0 unless configured: nothing to say.
        assert!(poll("500ms").is_empty());
        assert!(poll("1ns").is_empty());
        assert!(judged("500ms", "").is_empty());
        let v = Case::create(annotated(json!({POLL_INTERVAL: "500ms"})))
            .config("minPollInterval: 1s\n")
            .check(&ReconcileAnnotations);
        assert_eq!(v.len(), 1);
        assert_eq!(
            v[0].message,
            "crossplane.io/poll-interval \"500ms\" (500ms) is shorter than minPollInterval 1s, the provider's minimum; crossplane-runtime v2.3 raises it to 1s, so the provider polls every 1s"
        );
        assert!(v[0].warn_only);
        let f = judged("500ms", "minPollInterval: 1s\n");
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].action, Action::Warn, "allowed, with a warning");
        assert!(
            f[0].warning()
                .starts_with("reconcile-annotations: crossplane.io/poll-interval \"500ms\""),
            "{}",
            f[0].warning()
        );
        // At or above the minimum: nothing.
        for ok in ["90s", "1s", "1m30s", "1.5h", "1000ms", "+2m"] {
            assert!(judged(ok, "minPollInterval: 1s\n").is_empty(), "{ok}");
        }
        let m = |v: &str| judged(v, "minPollInterval: 1m\n");
        assert!(m("30s")[0]
            .message
            .contains("shorter than minPollInterval 1m0s"));
        assert!(m("1m").is_empty());
    }

    #[test]
    fn an_empty_reconcile_request_is_denied_saying_the_provider_ignores_it() {
        let v = Case::create(annotated(json!({RECONCILE_REQUESTED_AT: ""})))
            .check(&ReconcileAnnotations);
        assert_eq!(v.len(), 1);
        assert_eq!(
            v[0].message,
            "crossplane.io/reconcile-requested-at is empty; crossplane-runtime v2.3 ignores an empty token, so no reconcile is requested and the provider keeps its default poll interval"
        );
        assert!(!v[0].warn_only);
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
        // The same holds for a value below the minimum.
        let fast = annotated(json!({POLL_INTERVAL: "500ms"}));
        let mut fast_relabelled = fast.clone();
        fast_relabelled["metadata"]["labels"] = json!({"team": "a"});
        let update = |old: &Value, new: &Value| {
            Case::update(old.clone(), new.clone())
                .config("minPollInterval: 1s\n")
                .check(&ReconcileAnnotations)
        };
        assert!(update(&fast, &fast_relabelled).is_empty());
        assert_eq!(update(&annotated(json!({})), &fast).len(), 1);
    }

    #[test]
    fn it_can_be_staged_and_exempts_providers() {
        let case = Case::create(annotated(json!({POLL_INTERVAL: "0s"}))).config(
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
        let f = Case::create(annotated(json!({POLL_INTERVAL: "0s"})))
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
