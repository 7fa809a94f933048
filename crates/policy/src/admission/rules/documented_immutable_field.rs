use std::collections::HashMap;

use super::{show, Rule, RuleContext, U};
use crate::admission::fieldpath::Segment;
use crate::admission::model::{Action, Violation};
use crate::cluster::documented::DocumentedField;

/// Fields that the kind's CRD documents as replacing the resource when
/// changed (docs/documented-immutables.md), on a created MR. The configured
/// `immutableFields` win where both speak, so a field is judged once.
pub(super) struct DocumentedImmutableField;

impl Rule for DocumentedImmutableField {
    fn name(&self) -> &'static str {
        "documented-immutable-field"
    }
    fn operations(&self) -> &'static [crate::admission::model::Operation] {
        U
    }
    fn default_action(&self) -> Action {
        Action::Warn
    }
    fn summary(&self) -> &'static str {
        "A field that the kind's CRD documents as forcing a new resource changed or was removed on a created MR (conditional sentences never deny)"
    }
    fn fix(&self) -> &'static str {
        "Restore the old value or create a new MR; list the field in immutableFields to deny such changes"
    }
    fn honours_exemptions(&self) -> bool {
        true
    }
    fn check(&self, ctx: &RuleContext<'_>) -> Vec<Violation> {
        let Some(old) = ctx.old_object else {
            return vec![];
        };
        let Some(kind) = ctx
            .cluster
            .documented()
            .get(&ctx.request.kind.group, ctx.kind)
        else {
            return vec![];
        };
        let version = ctx.request.kind.version.as_str();
        // The top-level keys of forProvider whose values differ: a field
        // under any other key is unchanged, and is skipped without a walk.
        let Some(old_fp) = for_provider(old) else {
            return vec![];
        };
        let new_fp = for_provider(ctx.object);
        let changed: Vec<&str> = old_fp
            .iter()
            .filter(|(k, v)| new_fp.and_then(|n| n.get(k.as_str())) != Some(*v))
            .map(|(k, _)| k.as_str())
            .collect();
        if changed.is_empty() {
            return vec![];
        }
        let candidates: Vec<&DocumentedField> = kind
            .in_version(version)
            .filter(|f| match f.path.segments().get(2) {
                Some(Segment::Field(k) | Segment::Key(k)) => changed.contains(&k.as_str()),
                _ => false,
            })
            .collect();
        // Last, as it reads annotations and conditions: most updates change
        // no documented field at all.
        if candidates.is_empty() || !ctx.state().is_created() {
            return vec![];
        }
        let mut out = Vec::new();
        for field in candidates {
            let path = field.path.as_str();
            if ctx
                .resource
                .immutable_fields
                .iter()
                .any(|c| covers(c.as_str(), path))
            {
                continue;
            }
            if field.path.is_concrete() {
                // The common case, without allocating: one value each side.
                let Some(before) = field.path.get(old) else {
                    continue;
                };
                let after = field.path.get(ctx.object);
                if after != Some(before) {
                    out.push(violation(field, path, before, after));
                }
                continue;
            }
            let new: HashMap<String, &serde_json::Value> =
                field.path.select(ctx.object).into_iter().collect();
            for (at, before) in field.path.select(old) {
                match new.get(&at) {
                    Some(after) if *after == before => {}
                    after => out.push(violation(field, &at, before, after.copied())),
                }
            }
        }
        out
    }
}

fn for_provider(o: &serde_json::Value) -> Option<&serde_json::Map<String, serde_json::Value>> {
    o.pointer("/spec/forProvider")?.as_object()
}

/// The finding for `at` (a concrete location of `field`): changed, or
/// removed when `after` is `None`.
fn violation(
    field: &DocumentedField,
    at: &str,
    before: &serde_json::Value,
    after: Option<&serde_json::Value>,
) -> Violation {
    let what = match after {
        Some(after) => format!("changed from {} to {}", show(before), show(after)),
        None => format!("was removed (it was {})", show(before)),
    };
    let src = &field.source;
    let mut message = format!("{at} {what}; the CRD documents: \"{}\"", src.sentence);
    let fix = format!(
        "restore {at} to {}, or create a new resource for the new value; \
         to deny such changes, add {} to immutableFields",
        show(before),
        field.path.as_str()
    );
    match &src.condition {
        Some(cond) => {
            message.push_str(&format!(
                " (a warning only: the documentation replaces the resource only in a case \
                 mrguard cannot check: \"{cond}\")"
            ));
            Violation::new(message).fix(fix).warn_only()
        }
        None => Violation::new(message).fix(fix),
    }
}

/// Whether the configured path `curated` speaks for the documented `path`:
/// the same field or one of its ancestors.
fn covers(curated: &str, path: &str) -> bool {
    path == curated
        || path
            .strip_prefix(curated)
            .is_some_and(|rest| rest.starts_with('.') || rest.starts_with('['))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::model::Finding;
    use crate::admission::rules::testing::*;
    use crate::cluster::Cluster;
    use serde_json::{json, Value};

    fn cluster() -> Cluster {
        let c = Cluster::default();
        let field = |d: &str| json!({"type": "string", "description": d});
        c.documented().apply(&json!({
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "buckets.s3.aws.upbound.io"},
            "spec": {"group": "s3.aws.upbound.io", "names": {"kind": "Bucket"},
                "versions": [{"name": "v1beta1", "served": true, "schema": {"openAPIV3Schema": {
                    "properties": {"spec": {"properties": {"forProvider": {"properties": {
                        "tier": field("Changing this forces a new resource to be created."),
                        "replication": field("Changing this forces a new resource to be created when types LRS are changed to ZRS."),
                        "region": field("Changing this forces a new resource to be created."),
                        "tags": {"type": "object", "description": "Tags."},
                    }}}}}}}}]},
        }));
        c
    }

    fn created(fp: Value) -> Value {
        with_annotations(
            mr(json!({"forProvider": fp})),
            json!({"crossplane.io/external-create-succeeded": "2024-01-01T00:00:00Z"}),
        )
    }

    fn evaluate(case: Case) -> Vec<Finding> {
        let c = cluster();
        let req = case.request();
        let ctx = RuleContext::new(&req, &case.config, &c, jiff::Timestamp::now()).unwrap();
        crate::admission::rules::evaluate(&ctx, None)
            .findings
            .into_iter()
            .filter(|f| f.rule == "documented-immutable-field")
            .collect()
    }

    #[test]
    fn a_documented_change_after_creation_warns_quoting_the_sentence() {
        let f = evaluate(Case::update(
            created(json!({"tier": "Standard"})),
            created(json!({"tier": "Premium"})),
        ));
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].action, Action::Warn);
        assert!(f[0].message.starts_with(
            "spec.forProvider.tier changed from \"Standard\" to \"Premium\"; the CRD documents: \"Changing this forces a new resource to be created.\""
        ), "{}", f[0].message);
        assert!(f[0]
            .fix
            .as_deref()
            .unwrap()
            .contains("add spec.forProvider.tier to immutableFields"));
        // Removal is a change too.
        let f = evaluate(Case::update(
            created(json!({"tier": "Standard"})),
            created(json!({})),
        ));
        assert!(f[0].message.contains("was removed"), "{f:?}");
    }

    #[test]
    fn late_initialisation_undocumented_fields_and_uncreated_mrs_pass() {
        assert!(evaluate(Case::update(
            created(json!({})),
            created(json!({"tier": "a"}))
        ))
        .is_empty());
        assert!(evaluate(Case::update(
            created(json!({"tags": {"a": "1"}})),
            created(json!({"tags": {"a": "2"}}))
        ))
        .is_empty());
        assert!(evaluate(Case::update(
            mr(json!({"forProvider": {"tier": "a"}})),
            mr(json!({"forProvider": {"tier": "b"}}))
        ))
        .is_empty());
        // Another version of the kind is judged by its own schema.
        let mut old = created(json!({"tier": "a"}));
        let mut new = created(json!({"tier": "b"}));
        old["apiVersion"] = json!("s3.aws.upbound.io/v1beta2");
        new["apiVersion"] = json!("s3.aws.upbound.io/v1beta2");
        let c = cluster();
        let case = Case::update(old, new);
        let mut req = case.request();
        req.kind.version = "v1beta2".into();
        let ctx = RuleContext::new(&req, &case.config, &c, jiff::Timestamp::now()).unwrap();
        assert!(DocumentedImmutableField.check(&ctx).is_empty());
    }

    #[test]
    fn the_curated_list_wins_where_both_speak() {
        // The built-in configuration lists spec.forProvider.region.
        let f = evaluate(Case::update(
            created(json!({"region": "a"})),
            created(json!({"region": "b"})),
        ));
        assert!(f.is_empty(), "{f:?}");
        assert!(covers("spec.forProvider", "spec.forProvider.tier"));
        assert!(!covers("spec.forProvider.ti", "spec.forProvider.tier"));
    }

    #[test]
    fn raised_to_deny_except_conditional_sentences() {
        let cfg = "resources:\n  - apiGroups: ['s3.aws.upbound.io']\n    kinds: [Bucket]\n    rules: {documented-immutable-field: Deny}\n";
        let f = evaluate(
            Case::update(
                created(json!({"tier": "a", "replication": "LRS"})),
                created(json!({"tier": "b", "replication": "ZRS"})),
            )
            .config(cfg),
        );
        assert_eq!(f.len(), 2, "{f:?}");
        let tier = f
            .iter()
            .find(|f| f.message.starts_with("spec.forProvider.tier"))
            .unwrap();
        assert_eq!(tier.action, Action::Deny);
        let repl = f
            .iter()
            .find(|f| f.message.starts_with("spec.forProvider.replication"))
            .unwrap();
        assert_eq!(repl.action, Action::Warn);
        assert!(repl.message.contains("a warning only"), "{}", repl.message);
        assert!(
            repl.message
                .contains("\"when types LRS are changed to ZRS\""),
            "{}",
            repl.message
        );
        // And Off silences it.
        let off = "rules: {documented-immutable-field: 'Off'}\n";
        assert!(evaluate(
            Case::update(created(json!({"tier": "a"})), created(json!({"tier": "b"}))).config(off)
        )
        .is_empty());
    }

    #[test]
    fn an_empty_cluster_knows_nothing() {
        let case = Case::update(created(json!({"tier": "a"})), created(json!({"tier": "b"})));
        assert!(case.check(&DocumentedImmutableField).is_empty());
    }
}
