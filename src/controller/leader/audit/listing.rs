//! Listing a kind and judging its MRs: the one copy, shared by the
//! controller's audit passes (`super`) and `mrguard audit`
//! (`app::audit`). Each object is judged as a CREATE, so rules about
//! transitions (immutable fields, external-name changes) are skipped; with
//! an identity index (the replica's, or one [`index_identities`] builds
//! from a listing) an MR claiming what another holds is a finding.

use std::collections::BTreeSet;

use futures::{StreamExt, TryStreamExt};
use kube::api::{DynamicObject, ListParams};
use kube::Api;
use serde::Serialize;
use serde_json::Value;

use crate::controller::replica::coverage::{Coverage, MrKind, CRD_PAGE_SIZE};
use crate::controller::replica::crds::ServedCrd;
use crate::controller::replica::identity::{watched_whole, IdentityView, MrView};
use crate::kube::api::{api_err, list_pages, list_values, KubeError};
use mrguard_policy::admission::config::Config;
use mrguard_policy::admission::review::RequestBuilder;
use mrguard_policy::cluster::Cluster;
use mrguard_policy::commands::audit_pass::FindingRef;

/// Objects per list page.
const PAGE_SIZE: u32 = 250;

/// How a kind is listed: a kind the replica's identity index follows and
/// knows to fit in one page is read from the API server's watch cache
/// (`resourceVersion=0`, whole, as the cache ignores `limit`); any other
/// is paged from etcd. kube-apiserver 1.24 spent 40 ms of CPU on a
/// 100-object list from etcd and 6.7 ms from its cache, and at 100,000
/// MRs over 1,000 kinds a pass was bound by it (BENCHMARKS.md). The cache
/// may be a moment behind etcd; an audit tolerates that, and a kind whose
/// size is unknown is never read whole.
fn list_params(kind: &MrKind, cluster: &Cluster) -> ListParams {
    match cluster.identities().listed_len(&kind.group, &kind.kind) {
        // `resourceVersion=0` alone means any version, as `match_any` does;
        // without its `resourceVersionMatch`, the controller_scale bench
        // tells the audit's lists from the watchers' in the audit log.
        Some(n) if n <= PAGE_SIZE as usize => ListParams::default().at("0"),
        _ => ListParams::default().limit(PAGE_SIZE),
    }
}

/// One rule finding on one existing MR.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct AuditFinding {
    pub(crate) group: String,
    pub(crate) kind: String,
    pub(crate) namespace: String,
    pub(crate) name: String,
    #[serde(skip)]
    pub(crate) uid: String,
    pub(crate) rule: String,
    pub(crate) action: String,
    pub(crate) message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) fix: Option<String>,
    /// The exception that waived it, if one did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) exception: Option<String>,
}

impl AuditFinding {
    /// Identifies the finding across passes, for logging it once.
    pub(crate) fn key(&self) -> String {
        format!("{}|{}|{}", self.uid, self.rule, self.message)
    }

    /// Where it is and which rule made it, for a pass's summary.
    pub(crate) fn at(&self) -> FindingRef<'_> {
        FindingRef {
            group: &self.group,
            kind: &self.kind,
            namespace: &self.namespace,
            name: &self.name,
            rule: &self.rule,
        }
    }
}

/// Judges one object as a CREATE by nobody in particular, at `now`.
pub(crate) fn audit_object(
    kind: &MrKind,
    object: Value,
    config: &Config,
    cluster: &Cluster,
    now: jiff::Timestamp,
) -> Vec<AuditFinding> {
    if !mrguard_policy::admission::mr::is_managed(&object) {
        return Vec::new();
    }
    let meta = |k: &str| {
        object
            .pointer(&format!("/metadata/{k}"))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let (name, namespace, uid) = (meta("name"), meta("namespace"), meta("uid"));
    // Judged as a CREATE by nobody in particular: what a new object of
    // this shape would meet today.
    // With the replica's identity index, an MR claiming what another
    // holds (both created while mrguard was down) is a finding.
    let req = RequestBuilder::create(object).build();
    mrguard_policy::admission::decider::Decider::new(config, cluster, now)
        .validate(&req)
        .findings
        .into_iter()
        .map(|f| AuditFinding {
            group: kind.group.clone(),
            kind: kind.kind.clone(),
            namespace: namespace.clone(),
            name: name.clone(),
            uid: uid.clone(),
            exception: f.exception().map(str::to_string),
            rule: f.rule.into_owned(),
            action: f.action.as_str().to_string(),
            message: f.message,
            fix: f.fix,
        })
        .collect()
}

/// What one kind's pass found.
#[derive(Debug, Default)]
pub(crate) struct KindReport {
    pub(crate) objects: usize,
    pub(crate) findings: Vec<AuditFinding>,
    /// Namespaces holding MRs of the kind (`""` for cluster scope), for
    /// one policy report per namespace.
    pub(crate) namespaces: BTreeSet<String>,
    /// Per namespace: MRs with no finding at all (`summary.pass`).
    pub(crate) passed: std::collections::BTreeMap<String, usize>,
}

/// Lists every object of `kind` page by page and judges each, knowing
/// nothing of the cluster beyond.
#[cfg(test)]
pub(crate) async fn audit_kind(
    client: &kube::Client,
    kind: &MrKind,
    config: &Config,
) -> Result<KindReport, KubeError> {
    audit_kind_in(
        client,
        kind,
        config,
        Cluster::empty(),
        jiff::Timestamp::now(),
    )
    .await
}

/// As [`audit_kind`], with what the replica knows of the cluster, judged
/// at `now`.
pub(crate) async fn audit_kind_in(
    client: &kube::Client,
    kind: &MrKind,
    config: &Config,
    cluster: &Cluster,
    now: jiff::Timestamp,
) -> Result<KindReport, KubeError> {
    let mut report = KindReport::default();
    let pages = list_values(
        client.clone(),
        &kind.api_resource(),
        list_params(kind, cluster),
    );
    let mut pages = std::pin::pin!(pages);
    while let Some(items) =
        pages
            .try_next()
            .await
            .map_err(api_err("list", "managed resources", kind.key()))?
    {
        for value in items {
            report.objects += 1;
            if !mrguard_policy::admission::mr::is_managed(&value) {
                continue;
            }
            let namespace = value
                .pointer("/metadata/namespace")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            let found = audit_object(kind, value, config, cluster, now);
            if found.is_empty() {
                *report.passed.entry(namespace.clone()).or_default() += 1;
            }
            report.namespaces.insert(namespace);
            report.findings.extend(found);
        }
    }
    Ok(report)
}

/// What the audit loop reports, kind by kind.
pub(crate) enum PassEvent<'a> {
    /// `kind`'s turn: its report follows.
    Listing(&'a MrKind),
    /// `kind`'s report, or why its MRs could not be listed.
    Done(&'a MrKind, Result<KindReport, KubeError>),
}

/// Kinds an audit pass lists at once: the process's collection-read
/// places (`list_limit`), which the audit takes only while no other read
/// waits. One at a time, a pass over 1,008 kinds took 30 s, nearly all of
/// it waiting for one small list after another; each kind's pages still
/// come one at a time, so at most this many pages are in memory.
const KINDS_IN_FLIGHT: usize = crate::kube::list_limit::COLLECTION_READS;

/// The one audit loop, shared by the controller's passes and `mrguard
/// audit`: each of `kinds`, listed page by page and judged against
/// `cluster` at `now` (one instant for the whole pass),
/// [`KINDS_IN_FLIGHT`] at a time; `each` hears of each kind as its listing
/// ends. A kind whose list is slow holds its own place only: the next kind
/// starts whenever any listing ends.
pub(crate) async fn pass<'k>(
    client: &kube::Client,
    kinds: impl IntoIterator<Item = &'k MrKind>,
    config: &Config,
    cluster: &Cluster,
    now: jiff::Timestamp,
    mut each: impl FnMut(PassEvent<'_>),
) {
    async fn one<'a>(
        client: &'a kube::Client,
        kind: &'a MrKind,
        config: &'a Config,
        cluster: &'a Cluster,
        now: jiff::Timestamp,
    ) -> (&'a MrKind, Result<KindReport, KubeError>) {
        (
            kind,
            audit_kind_in(client, kind, config, cluster, now).await,
        )
    }
    let mut kinds = kinds.into_iter();
    let mut in_flight = futures::stream::FuturesUnordered::new();
    loop {
        while in_flight.len() < KINDS_IN_FLIGHT {
            let Some(kind) = kinds.next() else { break };
            in_flight.push(one(client, kind, config, cluster, now));
        }
        let Some((kind, result)) = in_flight.next().await else {
            return;
        };
        each(PassEvent::Listing(kind));
        each(PassEvent::Done(kind, result));
    }
}

/// For a command without the replica's identity watches (`mrguard audit`):
/// the claims of every MR of `coverage`, from one listing, into `cluster`'s
/// identity index, so that the pass finds duplicate claimants as the
/// controller's does. A kind that cannot be listed is left out; the pass
/// reports it.
pub(crate) async fn index_identities(
    client: &kube::Client,
    coverage: &Coverage,
    config: &Config,
    cluster: &Cluster,
) {
    for kind in coverage.kinds() {
        let mrs = if watched_whole(kind, config) {
            claims::<DynamicObject>(client, kind, config).await
        } else {
            claims::<IdentityView>(client, kind, config).await
        };
        if let Some(mrs) = mrs {
            cluster
                .identities()
                .replace_kind(&kind.group, &kind.kind, mrs);
        }
    }
}

/// The claims of every MR of `kind`, listed as `V`; `None` when the kind
/// cannot be listed.
async fn claims<V: MrView>(
    client: &kube::Client,
    kind: &MrKind,
    config: &Config,
) -> Option<Vec<mrguard_policy::cluster::identity::IndexedMr>> {
    let api: Api<V> = Api::all_with(client.clone(), &kind.api_resource());
    let listed: Vec<V> = list_pages(api, ListParams::default().limit(PAGE_SIZE))
        .try_concat()
        .await
        .ok()?;
    Some(
        listed
            .iter()
            .filter_map(|v| v.claim(kind, config))
            .collect(),
    )
}

/// The MR kinds the cluster serves now: those whose CRDs are
/// `Established`. Another CRD's kind answers 404 (a name conflict keeps it
/// so for good), which would fail the command.
pub(crate) async fn discover(client: &kube::Client) -> Result<Coverage, KubeError> {
    let crds: Vec<ServedCrd> = list_pages(
        Api::all(client.clone()),
        ListParams::default().limit(CRD_PAGE_SIZE),
    )
    .try_concat()
    .await
    .map_err(api_err(
        "list",
        "customresourcedefinitions.apiextensions.k8s.io",
        "",
    ))?;
    Ok(Coverage::from_crds(
        crds.iter().filter(|c| c.established).map(|c| &c.summary),
    ))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::controller::replica::coverage::tests::{fixture_crds, summaries};
    use crate::kube::mock::{self, list, status, Reply};
    use serde_json::json;
    use std::time::Duration;

    pub(crate) fn bucket_kind() -> MrKind {
        Coverage::from_crds(&summaries(&fixture_crds()))
            .kinds()
            .find(|k| k.kind == "Bucket")
            .unwrap()
            .clone()
    }

    /// A kind the identity index follows and knows to fit in a page is
    /// read whole from the API server's watch cache; a bigger one, or one
    /// it does not follow, is paged from etcd.
    #[tokio::test]
    async fn only_a_small_kind_the_index_follows_is_read_from_the_cache() {
        use mrguard_policy::cluster::identity::{IndexedMr, MrKey};
        let kind = bucket_kind();
        let keys = |n: usize| -> Vec<_> {
            (0..n)
                .map(|i| {
                    IndexedMr::new(
                        MrKey::new(&kind.group, &kind.kind, "", &format!("b{i}")),
                        None,
                        true,
                    )
                })
                .collect()
        };
        for (listed, cache) in [
            (None, false),
            (Some(0), true),
            (Some(250), true),
            (Some(251), false),
        ] {
            let cluster = Cluster::default();
            if let Some(n) = listed {
                cluster
                    .identities()
                    .replace_kind(&kind.group, &kind.kind, keys(n));
            }
            let (client, api) = mock::client(|_| {
                Reply::Json(
                    200,
                    page(vec![bucket("b", "u1", json!({"forProvider": {}}))], ""),
                )
            });
            let r = audit_kind_in(
                &client,
                &kind,
                &Config::builtin(),
                &cluster,
                jiff::Timestamp::now(),
            )
            .await
            .unwrap();
            assert_eq!(r.objects, 1);
            let q = &api.requests()[0].query;
            assert_eq!(q.contains("resourceVersion=0"), cache, "{listed:?}: {q}");
            assert_eq!(q.contains("limit=250"), !cache, "{listed:?}: {q}");
        }
    }

    pub(crate) fn bucket(name: &str, uid: &str, spec: Value) -> Value {
        json!({"metadata": {"name": name, "uid": uid, "resourceVersion": "1",
                            "annotations": {"crossplane.io/external-create-succeeded": "2024-01-01T00:00:00Z"}},
               "spec": spec})
    }

    pub(crate) fn page(items: Vec<Value>, cont: &str) -> Value {
        let mut l = list("BucketList", "s3.aws.upbound.io/v1beta2", items);
        l["metadata"]["continue"] = json!(cont);
        l
    }

    #[tokio::test]
    async fn audits_every_page_as_a_create() {
        let (client, api) = mock::client(|r| {
            if r.query.contains("continue=next") {
                return Reply::Json(
                    200,
                    page(
                        vec![bucket(
                            "paused",
                            "u3",
                            json!({"forProvider": {}, "managementPolicies": []}),
                        )],
                        "",
                    ),
                );
            }
            Reply::Json(
                200,
                page(
                    vec![
                        // An unsupported policy set and a bad deletion policy.
                        bucket(
                            "bad",
                            "u1",
                            json!({"forProvider": {"region": "us-east-1"},
                            "managementPolicies": ["Observe", "Create", "Observe"], "deletionPolicy": "delete"}),
                        ),
                        bucket(
                            "good",
                            "u2",
                            json!({"forProvider": {"region": "us-east-1"},
                            "deletionPolicy": "Delete", "managementPolicies": ["*"]}),
                        ),
                        // Not an MR at all.
                        json!({"metadata": {"name": "odd", "uid": "u4"}, "spec": {}}),
                        // Not even an object: skipped, not a panic.
                        json!("not an object"),
                        json!(null),
                    ],
                    "next",
                ),
            )
        });
        let r = audit_kind(&client, &bucket_kind(), &Config::builtin())
            .await
            .unwrap();
        assert_eq!(r.objects, 4);
        let rules: Vec<(&str, &str)> = r
            .findings
            .iter()
            .map(|f| (f.name.as_str(), f.rule.as_str()))
            .collect();
        assert_eq!(
            rules,
            vec![("bad", "deletion-policy"), ("bad", "management-policies")]
        );
        assert!(r
            .findings
            .iter()
            .all(|f| f.action == "Deny" && f.group == "s3.aws.upbound.io"));
        let reqs = api.requests();
        assert_eq!(reqs.len(), 2);
        assert_eq!(reqs[0].path, "/apis/s3.aws.upbound.io/v1beta2/buckets");
        assert!(reqs[0].query.contains("limit=250"));
    }

    /// Two MRs claiming one external resource, created while no webhook
    /// ran: with the replica's identity index each is a finding naming the
    /// other.
    #[test]
    fn duplicate_claimants_are_findings() {
        let kind = MrKind {
            group: "ec2.aws.upbound.io".into(),
            kind: "VPC".into(),
            plural: "vpcs".into(),
            versions: vec!["v1beta1".into()],
            read_version: "v1beta1".into(),
            namespaced: false,
        };
        let vpc = |name: &str| {
            json!({"apiVersion": "ec2.aws.upbound.io/v1beta1", "kind": "VPC",
                   "metadata": {"name": name, "uid": name,
                                "annotations": {"crossplane.io/external-name": "vpc-1"}},
                   "spec": {"forProvider": {"region": "us-east-1"}}})
        };
        let config = Config::builtin();
        let cluster = Cluster::default();
        for name in ["a", "b"] {
            let view: crate::controller::replica::identity::IdentityView =
                serde_json::from_value(vpc(name)).unwrap();
            cluster
                .identities()
                .upsert(view.claim(&kind, &config).unwrap());
        }
        let rules = |name: &str, cluster: &Cluster| {
            audit_object(&kind, vpc(name), &config, cluster, jiff::Timestamp::now())
                .into_iter()
                .filter(|f| f.rule == "external-identity")
                .map(|f| f.message)
                .collect::<Vec<_>>()
        };
        let a = rules("a", &cluster);
        assert_eq!(a.len(), 1);
        assert!(a[0].contains("VPC.ec2.aws.upbound.io b"), "{a:?}");
        assert!(rules("b", &cluster)[0].contains("VPC.ec2.aws.upbound.io a"));
        assert!(rules("a", Cluster::empty()).is_empty());
    }

    /// `mrguard audit` has no identity watches: the pass over an index
    /// built from one listing finds both claimants, as the controller's
    /// audit does, and each kind is announced before it is listed.
    #[tokio::test]
    async fn a_command_indexes_identities_from_the_listing_and_finds_duplicates() {
        let dup = |name: &str| {
            let mut b = bucket(name, name, json!({"forProvider": {"region": "us-east-1"}}));
            b["metadata"]["annotations"]["crossplane.io/external-name"] = json!("shared");
            b
        };
        let (client, api) =
            mock::client(move |_| Reply::Json(200, page(vec![dup("a"), dup("b")], "")));
        let kind = bucket_kind();
        let coverage = Coverage::from_crds(&summaries(&fixture_crds()));
        let config = Config::builtin();
        let cluster = Cluster::default();
        index_identities(&client, &coverage, &config, &cluster).await;
        let mut events = Vec::new();
        let mut claimants = Vec::new();
        pass(
            &client,
            coverage.kinds(),
            &config,
            &cluster,
            jiff::Timestamp::now(),
            |e| match e {
                PassEvent::Listing(k) => events.push(format!("listing {}", k.kind)),
                PassEvent::Done(k, r) if k.key() == kind.key() => {
                    events.push(format!("done {}", k.kind));
                    for f in r.unwrap().findings {
                        if f.rule == "external-identity" {
                            claimants.push((f.name, f.message));
                        }
                    }
                }
                PassEvent::Done(k, _) => events.push(format!("done {}", k.kind)),
            },
        )
        .await;
        assert_eq!(claimants.len(), 2, "{claimants:?}");
        assert_eq!(claimants[0].0, "a");
        assert!(
            claimants[0].1.contains("Bucket.s3.aws.upbound.io b"),
            "{claimants:?}"
        );
        assert!(
            claimants[1].1.contains("Bucket.s3.aws.upbound.io a"),
            "{claimants:?}"
        );
        assert_eq!(events.len(), 2 * coverage.len(), "{events:?}");
        assert!(events[0].starts_with("listing ") && events[1].starts_with("done "));
        // Without the index, the same pass finds no claimant.
        let mut without = 0;
        pass(
            &client,
            coverage.kinds(),
            &config,
            Cluster::empty(),
            jiff::Timestamp::now(),
            |e| {
                if let PassEvent::Done(_, Ok(r)) = e {
                    without += r
                        .findings
                        .iter()
                        .filter(|f| f.rule == "external-identity")
                        .count();
                }
            },
        )
        .await;
        assert_eq!(without, 0);
        assert!(api.requests().len() >= 3 * coverage.len());
    }

    #[test]
    fn transition_rules_are_skipped() {
        // A region change can only be seen on UPDATE; the audit judges a
        // CREATE, so even a created MR with configured immutable fields
        // yields nothing from immutable-field or external-name-change.
        let obj = bucket("b", "u", json!({"forProvider": {"region": "eu-west-1"}}));
        let f = audit_object(
            &bucket_kind(),
            obj,
            &Config::builtin(),
            Cluster::empty(),
            jiff::Timestamp::now(),
        );
        assert!(
            f.iter()
                .all(|f| f.rule != "immutable-field" && f.rule != "external-name-change"),
            "{f:?}"
        );
        assert!(f.is_empty(), "{f:?}");
    }

    pub(crate) fn kind_n(i: usize) -> MrKind {
        MrKind {
            group: format!("g{i}.example.org"),
            kind: "Thing".into(),
            plural: "things".into(),
            versions: vec!["v1".into()],
            read_version: "v1".into(),
            namespaced: false,
        }
    }

    /// A kind whose list does not answer holds its own place in the pass,
    /// not the others': every other kind is listed and heard of. In
    /// coverage order, the first kind's hang held back every result and
    /// every kind after the first few.
    #[tokio::test]
    async fn a_slow_kind_does_not_hold_up_the_others() {
        let kinds: Vec<MrKind> = (0..KINDS_IN_FLIGHT * 2).map(kind_n).collect();
        let slow = kinds[0].clone();
        let group = format!("/apis/{}/", slow.group);
        let (client, api) = mock::client(move |r| {
            if r.path.starts_with(&group) {
                return Reply::Hang;
            }
            Reply::Json(200, page(vec![], ""))
        });
        let config = Config::builtin();
        let mut done = Vec::new();
        let run = pass(
            &client,
            &kinds,
            &config,
            Cluster::empty(),
            jiff::Timestamp::now(),
            |e| {
                if let PassEvent::Done(kind, result) = e {
                    assert!(result.is_ok(), "{result:?}");
                    done.push(kind.key());
                }
            },
        );
        assert!(
            tokio::time::timeout(Duration::from_secs(2), run)
                .await
                .is_err(),
            "the pass ended without the slow kind"
        );
        assert_eq!(api.requests().len(), kinds.len());
        assert_eq!(done.len(), kinds.len() - 1, "{done:?}");
        assert!(!done.contains(&slow.key()));
    }

    #[tokio::test]
    async fn rbac_denial_is_reported_with_verb_and_resource() {
        let (client, _api) = mock::client(|_| {
            Reply::Json(
                403,
                status(403, "Forbidden", "buckets.s3.aws.upbound.io is forbidden"),
            )
        });
        let e = audit_kind(&client, &bucket_kind(), &Config::builtin())
            .await
            .unwrap_err();
        assert_eq!(e.status_code(), Some(403));
        assert!(
            e.to_string()
                .starts_with("failed to list managed resources buckets.s3.aws.upbound.io"),
            "{e}"
        );
    }
}
