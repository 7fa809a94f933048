//! `check --live`, judged: each MR manifest with what the cluster said of
//! it (its kind served or not, its live object, the server-side-apply dry
//! run's answer, the CRD, the other claimants of its identity, the MRDs
//! and MRAPs), as the UPDATE or CREATE applying it would send.

use crate::admission::crd::Crds;
use crate::admission::model::Operation;
use crate::cluster::activation::Activations;
use crate::cluster::identity::report::entry_of;
use crate::cluster::identity::IdentityIndex;

use super::judge::{CheckReport, DocumentResult, Listed, Live, Merged, Served};
use super::request::CheckRequest;
use super::{inactive_composed, is_composition, judge_manifest, rejected, skipped, Applier};

/// Judges every manifest of `request` with what the cluster answered.
pub(super) fn judge(request: &CheckRequest, live: Live, now: jiff::Timestamp) -> CheckReport {
    let mut judgement = CheckReport::default();
    let config = match live.config.load() {
        Ok(c) => c,
        Err(e) => {
            judgement.error = Some(e.into());
            return judgement;
        }
    };
    let activations = live.activations.map(|r| {
        r.map(|objects| {
            let mut known = Activations::default();
            for o in &objects {
                known.add(o);
            }
            known
        })
    });
    let activations = activations.as_ref().map(|r| r.as_ref());
    // The CRDs the credentials could read, and why each other could not
    // be used.
    let mut crds = Crds::default();
    let mut crd_problems = std::collections::BTreeMap::new();
    for (name, crd) in &live.crds {
        let problem = match crd {
            Ok(v) => crds.add(name, v).err().map(|e| e.to_string()),
            Err(why) => Some(why.clone()),
        };
        if let Some(p) = problem {
            crd_problems.insert(name.clone(), p);
        }
    }
    // Every manifest is judged as applied by the user, at one instant.
    let by = Applier {
        username: &request.options.username,
        now,
    };
    let wanted = &request.needs.objects;
    for (i, m) in request.manifests.iter().enumerate() {
        let served = live.objects.get(i).and_then(Option::as_ref);
        let (Some(Some(w)), Some(served)) = (wanted.get(i), served) else {
            let result = if is_composition(&m.object) {
                let mut r = skipped(
                    m,
                    "a Composition: its patches are checked offline (mrguard check without --live)",
                );
                match activations {
                    Some(Ok(a)) => r.warnings = inactive_composed(m, a),
                    Some(Err(e)) => r
                        .notes
                        .push(format!("composed kinds not checked for activation: {e}")),
                    None => {}
                }
                r
            } else {
                skipped(
                    m,
                    "not a managed resource (spec.forProvider is not an object): mrguard does not judge it",
                )
            };
            judgement.outcomes.push(outcome(result));
            continue;
        };
        let (namespaced, resource, live_obj, merged) = match served {
            Served::NotServed { reason } => {
                // Crossplane v2 serves a kind only once an MRAP activates
                // its MRD: say which MRD, rather than only "not served".
                let reason = match activations {
                    Some(Ok(a)) => a
                        .state_of(&w.api_version, &w.kind)
                        .problem()
                        .unwrap_or(reason.clone()),
                    _ => reason.clone(),
                };
                let r = rejected(
                    m,
                    Operation::Create,
                    format!(
                        "no matches for kind {:?} in version {:?}: {reason}",
                        w.kind, w.api_version
                    ),
                );
                judgement.outcomes.push(outcome(r));
                continue;
            }
            Served::Found {
                namespaced,
                resource,
                live,
                merged,
            } => (*namespaced, resource, live.as_ref(), merged),
        };
        let merged = match merged {
            Some(Merged::Refused { code, message }) => {
                let op = if live_obj.is_some() {
                    Operation::Update
                } else {
                    Operation::Create
                };
                let r = rejected(m, op, format!("{message} ({code})"));
                judgement.outcomes.push(outcome(r));
                continue;
            }
            Some(Merged::Object(o)) => Some(o.clone()),
            None => None,
        };
        // Scoped as the API server and kubectl see it.
        let mut m = m.clone();
        m.object = if namespaced {
            w.namespaced.clone()
        } else {
            w.cluster_scoped.clone()
        };
        // The live MRs of the kinds its identity can meet (the legacy and
        // the `.m.` kind of its family).
        let family = live.families.get(w.family);
        let fill = |index: &IdentityIndex| {
            if let Some(Ok(kinds)) = family {
                fill_claimants(index, kinds, &config);
            }
        };
        let listed = matches!(family, Some(Ok(_)));
        let result = judge_manifest(
            &m,
            live_obj,
            merged,
            by,
            &config,
            (!crds.is_empty()).then_some(&crds),
            listed.then_some(&fill as &dyn Fn(&IdentityIndex)),
        );
        let mut result = match result {
            Ok(r) => r,
            Err(e) => {
                judgement.error = Some(e);
                break;
            }
        };
        if let Some(Err(e)) = family {
            result
                .notes
                .push(format!("other claimants of its identity unknown: {e}"));
        }
        if let Some(why) = crd_problems.get(resource) {
            result.notes.push(format!(
                "judged without the CRD's defaults and schema: failed to read customresourcedefinitions.apiextensions.k8s.io {resource:?}: {why}"
            ));
        }
        judgement.outcomes.push(outcome(result));
    }
    judgement
}

/// Records every listed MR of a family in `index`, as the replicas'
/// watches would.
fn fill_claimants(
    index: &IdentityIndex,
    kinds: &[Listed],
    config: &crate::admission::config::Config,
) {
    for k in kinds {
        for o in &k.objects {
            if let Some(e) = entry_of(o, &k.group, &k.kind, config) {
                index.upsert(e);
            }
        }
    }
}

fn outcome(result: super::CheckResult) -> DocumentResult {
    DocumentResult {
        result,
        object_text: String::new(),
        verdict_text: String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::judge::{judge, Fetched};
    use super::super::request::CheckOptions;
    use super::*;
    use crate::admission::config::ConfigSource;
    use crate::admission::kube_version::KubeVersion;
    use crate::commands::manifest::FileText;

    const BUCKET: &str = "apiVersion: s3.aws.upbound.io/v1beta1\nkind: Bucket\nmetadata:\n  name: b\nspec:\n  forProvider:\n    region: us-east-1\n";

    fn request() -> CheckRequest {
        let options = CheckOptions {
            operation: None,
            username: String::new(),
            require_crd: false,
            kube_version: KubeVersion::NEWEST,
            max_documents: 16,
            text: false,
            patch: false,
            live: Some("default".into()),
        };
        let src = [FileText {
            file: "b.yaml".into(),
            text: BUCKET.into(),
        }];
        CheckRequest::parse(&src, None, options).unwrap()
    }

    fn live(served: Served) -> Live {
        Live {
            config: ConfigSource::Builtin,
            objects: vec![Some(served)],
            crds: Default::default(),
            families: vec![Ok(vec![])],
            activations: None,
        }
    }

    #[test]
    fn a_kind_the_cluster_does_not_serve_is_refused_as_a_create() {
        let j = judge(
            &request(),
            Fetched::Live(live(Served::NotServed {
                reason: "not served".into(),
            })),
            jiff::Timestamp::UNIX_EPOCH,
        );
        let r = &j.outcomes[0].result;
        assert_eq!(
            (r.verdict.as_str(), r.operation.as_str()),
            ("invalid", "CREATE"),
            "{r:?}"
        );
        assert!(
            r.invalid
                .as_deref()
                .unwrap()
                .contains("no matches for kind \"Bucket\""),
            "{r:?}"
        );
    }

    #[test]
    fn no_live_object_is_a_create_and_a_cluster_scoped_kind_loses_the_namespace() {
        let j = judge(
            &request(),
            Fetched::Live(live(Served::Found {
                namespaced: false,
                resource: "buckets.s3.aws.upbound.io".into(),
                live: None,
                merged: None,
            })),
            jiff::Timestamp::UNIX_EPOCH,
        );
        assert!(j.error.is_none(), "{:?}", j.error);
        let r = &j.outcomes[0].result;
        assert_eq!(
            (r.operation.as_str(), r.object.as_str()),
            ("CREATE", "Bucket/b"),
            "{r:?}"
        );
    }

    #[test]
    fn a_refused_dry_run_is_the_verdict_and_an_unread_crd_is_a_note() {
        let j = judge(
            &request(),
            Fetched::Live(live(Served::Found {
                namespaced: false,
                resource: "buckets.s3.aws.upbound.io".into(),
                live: None,
                merged: Some(Merged::Refused {
                    code: 422,
                    message: "spec.forProvider.region: Required value".into(),
                }),
            })),
            jiff::Timestamp::UNIX_EPOCH,
        );
        let r = &j.outcomes[0].result;
        assert_eq!(
            r.invalid.as_deref(),
            Some("spec.forProvider.region: Required value (422)")
        );
        let mut l = live(Served::Found {
            namespaced: false,
            resource: "buckets.s3.aws.upbound.io".into(),
            live: None,
            merged: None,
        });
        l.crds
            .insert("buckets.s3.aws.upbound.io".into(), Err("forbidden".into()));
        l.families = vec![Err("failed to list".into())];
        let j = judge(&request(), Fetched::Live(l), jiff::Timestamp::UNIX_EPOCH);
        let notes = &j.outcomes[0].result.notes;
        assert!(
            notes.iter().any(
                |n| n.contains("judged without the CRD's defaults and schema")
                    && n.ends_with(": forbidden")
            ),
            "{notes:?}"
        );
        assert!(
            notes
                .iter()
                .any(|n| n == "other claimants of its identity unknown: failed to list"),
            "{notes:?}"
        );
    }
}
