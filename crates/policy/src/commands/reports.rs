//! Policy reports from the audit, as pure functions: which report objects
//! should exist after an audit pass, and which of them need a write.
//!
//! Two report APIs are supported, with the same result shape:
//! - `wgpolicyk8s.io/v1alpha2` PolicyReport (per namespace) and
//!   ClusterPolicyReport (cluster-scoped MRs), as read by Policy Reporter,
//!   Kyverno's tooling and most dashboards;
//! - `openreports.io/v1alpha1` Report and ClusterReport, their successor.
//!
//! One report per namespace that holds MRs (and one cluster report when
//! cluster-scoped MRs exist), one result per MR per rule finding. A report
//! is written only when its results change: a result that was already
//! there keeps its timestamp, so an unchanged pass produces equal objects
//! and nothing to write. Reports stay below the API server's object size
//! limit by splitting into `mrguard`, `mrguard-2`, … .

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde_json::{json, Map, Value};

use crate::admission::model::Action;

/// `policy` of every result, and the name of the first report per scope.
pub const POLICY: &str = "mrguard";
/// The label every report mrguard writes carries, to find them again.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
/// The value of [`MANAGED_BY_LABEL`].
pub const MANAGED_BY: &str = "mrguard";
/// Results per report are cut to stay below this many bytes of JSON. The
/// API server refuses objects over ~1.5 MiB (etcd's request limit); this
/// leaves room for metadata and managedFields.
pub const MAX_REPORT_BYTES: usize = 1_000_000;
/// What a report costs besides its results (metadata, summary), with margin.
const REPORT_OVERHEAD: usize = 2_048;

/// Which report API to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    /// `wgpolicyk8s.io/v1alpha2` PolicyReport / ClusterPolicyReport.
    WgPolicyK8s,
    /// `openreports.io/v1alpha1` Report / ClusterReport.
    OpenReports,
}

impl Flavor {
    /// The API group.
    pub fn group(self) -> &'static str {
        match self {
            Flavor::WgPolicyK8s => "wgpolicyk8s.io",
            Flavor::OpenReports => "openreports.io",
        }
    }

    /// The version written.
    pub fn version(self) -> &'static str {
        match self {
            Flavor::WgPolicyK8s => "v1alpha2",
            Flavor::OpenReports => "v1alpha1",
        }
    }

    /// `group/version`.
    pub fn api_version(self) -> String {
        format!("{}/{}", self.group(), self.version())
    }

    /// The kind of the namespaced (`namespaced`) or cluster-scoped report.
    pub fn kind(self, namespaced: bool) -> &'static str {
        match (self, namespaced) {
            (Flavor::WgPolicyK8s, true) => "PolicyReport",
            (Flavor::WgPolicyK8s, false) => "ClusterPolicyReport",
            (Flavor::OpenReports, true) => "Report",
            (Flavor::OpenReports, false) => "ClusterReport",
        }
    }

    /// The resource (plural) of the namespaced or cluster-scoped report.
    pub fn plural(self, namespaced: bool) -> &'static str {
        match (self, namespaced) {
            (Flavor::WgPolicyK8s, true) => "policyreports",
            (Flavor::WgPolicyK8s, false) => "clusterpolicyreports",
            (Flavor::OpenReports, true) => "reports",
            (Flavor::OpenReports, false) => "clusterreports",
        }
    }
}

/// The MR a finding is about.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ReportedMr {
    /// `group/version`.
    pub api_version: String,
    /// The kind.
    pub kind: String,
    /// The namespace; empty for a cluster-scoped MR.
    pub namespace: String,
    /// The name.
    pub name: String,
    /// The UID.
    pub uid: String,
}

/// One audit finding on one MR.
#[derive(Debug, Clone, PartialEq)]
pub struct ReportFinding {
    /// The MR.
    pub subject: ReportedMr,
    /// The rule's name.
    pub rule: String,
    /// Audit, Warn or Deny.
    pub action: Action,
    /// What is wrong.
    pub message: String,
    /// How to fix it.
    pub fix: Option<String>,
    /// The exception that waived the finding: the result is `skip`.
    pub exception: Option<String>,
}

/// What one audit pass saw.
#[derive(Debug, Clone, Default)]
pub struct PassInput {
    /// Every finding of the pass.
    pub findings: Vec<ReportFinding>,
    /// Namespaces that hold MRs; `""` when cluster-scoped MRs exist.
    pub scopes: BTreeSet<String>,
    /// `(group, kind)` of MR kinds that could not be listed this pass: their
    /// results stay as last reported (and so do the reports holding them).
    /// A kind that can never be listed (RBAC) has no results to keep, so it
    /// holds nothing else back.
    pub incomplete_kinds: BTreeSet<(String, String)>,
    /// Per scope: MRs judged with no finding at all. They are counted in
    /// the first report's `summary.pass` but not listed as results, which
    /// at tens of thousands of MRs would make the reports mostly passes.
    pub passed: BTreeMap<String, usize>,
}

/// A report by scope and name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ReportRef {
    /// The namespace; empty for a cluster report.
    pub namespace: String,
    /// The name.
    pub name: String,
}

/// What to write after a pass.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReportWrites {
    /// Reports to create or replace (server-side apply), whole.
    pub apply: Vec<Value>,
    /// Reports mrguard wrote before that should go.
    pub delete: Vec<ReportRef>,
    /// Reports that already say exactly this.
    pub unchanged: usize,
}

/// The severity a rule's action maps to.
pub fn severity(action: Action) -> &'static str {
    match action {
        Action::Deny => "high",
        _ => "medium",
    }
}

/// One report result, without its timestamp.
pub fn result(f: &ReportFinding) -> Value {
    // Audit findings fail like Deny ones (the MR breaks the rule), with
    // the action saying nothing was enforced; waived ones are skipped.
    let (outcome, action) = match (&f.exception, f.action) {
        (Some(_), _) => ("skip", "Skip"),
        (None, Action::Deny) => ("fail", "Deny"),
        (None, Action::Audit) => ("fail", "Audit"),
        (None, _) => ("warn", "Warn"),
    };
    let message = match &f.fix {
        Some(fix) => format!("{}. Fix: {fix}", f.message),
        None => f.message.clone(),
    };
    let s = &f.subject;
    let mut resource = Map::new();
    resource.insert("apiVersion".into(), json!(s.api_version));
    resource.insert("kind".into(), json!(s.kind));
    resource.insert("name".into(), json!(s.name));
    if !s.namespace.is_empty() {
        resource.insert("namespace".into(), json!(s.namespace));
    }
    if !s.uid.is_empty() {
        resource.insert("uid".into(), json!(s.uid));
    }
    json!({
        "source": POLICY,
        "policy": POLICY,
        "rule": f.rule,
        "category": "Crossplane managed resources",
        "result": outcome,
        "severity": severity(f.action),
        "scored": true,
        "message": message,
        "properties": match &f.exception {
            Some(e) => json!({"action": action, "exception": e}),
            None => json!({"action": action}),
        },
        "resources": [Value::Object(resource)],
    })
}

/// A result's identity across passes: everything but its timestamp.
fn result_key(r: &Value) -> String {
    let mut r = r.clone();
    if let Some(o) = r.as_object_mut() {
        o.remove("timestamp");
    }
    r.to_string()
}

/// The `(group, kind)` of a result's first resource.
fn result_kind(r: &Value) -> (String, String) {
    let res = &r["resources"][0];
    let group = res["apiVersion"]
        .as_str()
        .and_then(|a| a.rsplit_once('/'))
        .map(|(g, _)| g.to_string())
        .unwrap_or_default();
    (group, res["kind"].as_str().unwrap_or_default().to_string())
}

fn sort_key(r: &Value) -> (String, String, String, String, String) {
    let res = &r["resources"][0];
    let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
    (
        s(&res["apiVersion"]),
        s(&res["kind"]),
        s(&res["name"]),
        s(&r["rule"]),
        s(&r["message"]),
    )
}

/// The name of the `index`th (0-based) report of a scope.
pub fn report_name(index: usize) -> String {
    if index == 0 {
        POLICY.to_string()
    } else {
        format!("{POLICY}-{}", index + 1)
    }
}

/// The summary block of a report holding `results`.
pub fn summary(results: &[Value]) -> Value {
    let count = |what: &str| results.iter().filter(|r| r["result"] == what).count();
    json!({
        "pass": count("pass"),
        "fail": count("fail"),
        "warn": count("warn"),
        "error": count("error"),
        "skip": count("skip"),
    })
}

/// Cuts `results` into chunks whose JSON stays within `max_bytes` (at least
/// one result per chunk, and one empty chunk when there are none).
fn split(results: Vec<Value>, max_bytes: usize) -> Vec<Vec<Value>> {
    let budget = max_bytes.saturating_sub(REPORT_OVERHEAD).max(1);
    let mut chunks: Vec<Vec<Value>> = vec![Vec::new()];
    let mut used = 0;
    for r in results {
        let size = r.to_string().len() + 1;
        let last = chunks.last_mut().expect("never empty");
        if !last.is_empty() && used + size > budget {
            chunks.push(vec![r]);
            used = size;
        } else {
            last.push(r);
            used += size;
        }
    }
    chunks
}

/// The report object for one chunk of one scope; `passed` MRs that are
/// not listed are added to `summary.pass`.
pub fn report(
    flavor: Flavor,
    namespace: &str,
    name: &str,
    results: Vec<Value>,
    passed: usize,
) -> Value {
    let namespaced = !namespace.is_empty();
    let mut metadata = json!({"name": name, "labels": {MANAGED_BY_LABEL: MANAGED_BY}});
    if namespaced {
        metadata["namespace"] = json!(namespace);
    }
    let mut r = json!({
        "apiVersion": flavor.api_version(),
        "kind": flavor.kind(namespaced),
        "metadata": metadata,
        "summary": summary(&results),
        "results": results,
    });
    if let Some(pass) = r["summary"]["pass"].as_u64() {
        r["summary"]["pass"] = json!(pass + passed as u64);
    }
    if flavor == Flavor::OpenReports {
        r["source"] = json!(POLICY);
    }
    r
}

fn meta(v: &Value, field: &str) -> String {
    v.pointer(&format!("/metadata/{field}"))
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string()
}

/// Whether `existing` already says what `desired` says.
fn same(existing: &Value, desired: &Value) -> bool {
    let results = |v: &Value| match v.get("results") {
        None | Some(Value::Null) => Value::Array(vec![]),
        Some(r) => r.clone(),
    };
    results(existing) == results(desired)
        && existing.get("summary") == desired.get("summary")
        && existing.pointer(&format!(
            "/metadata/labels/{}",
            MANAGED_BY_LABEL.replace('/', "~1")
        )) == desired.pointer(&format!(
            "/metadata/labels/{}",
            MANAGED_BY_LABEL.replace('/', "~1")
        ))
        && existing.get("source") == desired.get("source")
}

/// Plans the writes after a pass: `existing` are the reports mrguard wrote
/// before (found by [`MANAGED_BY_LABEL`]), `now` stamps new results.
pub fn plan(
    flavor: Flavor,
    input: &PassInput,
    existing: &[Value],
    now: jiff::Timestamp,
    max_bytes: usize,
) -> ReportWrites {
    // Timestamps of results already reported, and results to carry over
    // for kinds this pass could not list.
    let mut stamps: HashMap<String, Value> = HashMap::new();
    let mut results: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    let mut existing_by_ref: BTreeMap<ReportRef, &Value> = BTreeMap::new();
    for e in existing {
        let at = ReportRef {
            namespace: meta(e, "namespace"),
            name: meta(e, "name"),
        };
        for r in e["results"].as_array().into_iter().flatten() {
            if let Some(t) = r.get("timestamp") {
                stamps.insert(result_key(r), t.clone());
            }
            if input.incomplete_kinds.contains(&result_kind(r)) {
                results
                    .entry(at.namespace.clone())
                    .or_default()
                    .push(r.clone());
            }
        }
        existing_by_ref.insert(at, e);
    }
    let stamp = json!({"seconds": now.as_second(), "nanos": 0});
    for f in &input.findings {
        let mut r = result(f);
        r["timestamp"] = stamps
            .get(&result_key(&r))
            .cloned()
            .unwrap_or_else(|| stamp.clone());
        results
            .entry(f.subject.namespace.clone())
            .or_default()
            .push(r);
    }
    // Scopes: namespaces with MRs now, and those whose carried results
    // (kinds not listed this pass) must stay.
    let mut scopes = input.scopes.clone();
    scopes.extend(results.keys().cloned());
    let mut plan = ReportWrites::default();
    let mut wanted = BTreeSet::new();
    for ns in &scopes {
        let mut rs = results.remove(ns).unwrap_or_default();
        rs.sort_by_key(sort_key);
        rs.dedup_by(|a, b| result_key(a) == result_key(b));
        for (i, chunk) in split(rs, max_bytes).into_iter().enumerate() {
            let at = ReportRef {
                namespace: ns.clone(),
                name: report_name(i),
            };
            // The unlisted passes count once per scope, in its first report.
            let passed = if i == 0 {
                input.passed.get(ns).copied().unwrap_or(0)
            } else {
                0
            };
            let desired = report(flavor, ns, &at.name, chunk, passed);
            match existing_by_ref.get(&at) {
                Some(e) if same(e, &desired) => plan.unchanged += 1,
                _ => plan.apply.push(desired),
            }
            wanted.insert(at);
        }
    }
    plan.delete = existing_by_ref
        .into_keys()
        .filter(|r| !wanted.contains(r))
        .collect();
    plan
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finding(ns: &str, name: &str, rule: &str, action: Action) -> ReportFinding {
        ReportFinding {
            subject: ReportedMr {
                api_version: if ns.is_empty() {
                    "s3.aws.upbound.io/v1beta2".into()
                } else {
                    "s3.aws.m.upbound.io/v1beta1".into()
                },
                kind: "Bucket".into(),
                namespace: ns.into(),
                name: name.into(),
                uid: format!("uid-{name}"),
            },
            rule: rule.into(),
            action,
            message: format!("{rule} is unhappy"),
            fix: Some("do the thing".into()),
            exception: None,
        }
    }

    fn input(findings: Vec<ReportFinding>, scopes: &[&str]) -> PassInput {
        PassInput {
            findings,
            scopes: scopes.iter().map(|s| s.to_string()).collect(),
            incomplete_kinds: BTreeSet::new(),
            passed: BTreeMap::new(),
        }
    }

    /// The MRs that passed are counted in the first report of their scope
    /// (they were always 0 before), not listed, and a change of the count
    /// alone is a write.
    #[test]
    fn passing_mrs_are_counted_in_the_first_report_of_their_scope() {
        let mut i = input(
            vec![finding("team-a", "b1", "deletion-policy", Action::Deny)],
            &["team-a", "team-b"],
        );
        i.passed = BTreeMap::from([("team-a".to_string(), 4), ("team-b".to_string(), 2)]);
        // Small reports: team-a's two results split over two reports.
        i.findings
            .push(finding("team-a", "b2", "paused-value", Action::Warn));
        let p = plan(Flavor::WgPolicyK8s, &i, &[], t(100), REPORT_OVERHEAD + 10);
        let by_name = |ns: &str, name: &str| {
            p.apply
                .iter()
                .find(|r| r["metadata"]["namespace"] == ns && r["metadata"]["name"] == name)
                .unwrap_or_else(|| panic!("no report {ns}/{name}"))
        };
        assert_eq!(by_name("team-a", "mrguard")["summary"]["pass"], 4);
        assert_eq!(by_name("team-a", "mrguard-2")["summary"]["pass"], 0);
        let b = by_name("team-b", "mrguard");
        assert_eq!(b["summary"]["pass"], 2);
        assert_eq!(b["results"], json!([]), "passes are not listed");
        // The same pass again writes nothing; one more passing MR does.
        let again = plan(
            Flavor::WgPolicyK8s,
            &i,
            &p.apply,
            t(200),
            REPORT_OVERHEAD + 10,
        );
        assert!(again.apply.is_empty(), "{:?}", again.apply);
        i.passed.insert("team-b".to_string(), 3);
        let more = plan(
            Flavor::WgPolicyK8s,
            &i,
            &p.apply,
            t(300),
            REPORT_OVERHEAD + 10,
        );
        assert_eq!(more.apply.len(), 1);
        assert_eq!(more.apply[0]["summary"]["pass"], 3);
    }

    fn t(s: i64) -> jiff::Timestamp {
        jiff::Timestamp::from_second(s).unwrap()
    }

    #[test]
    fn results_name_the_mr_and_follow_the_action() {
        let r = result(&finding("team-a", "b", "deletion-policy", Action::Deny));
        assert_eq!(r["result"], "fail");
        assert_eq!(r["severity"], "high");
        assert_eq!(r["policy"], "mrguard");
        assert_eq!(r["rule"], "deletion-policy");
        assert_eq!(
            r["message"],
            "deletion-policy is unhappy. Fix: do the thing"
        );
        assert_eq!(
            r["resources"],
            json!([{"apiVersion": "s3.aws.m.upbound.io/v1beta1", "kind": "Bucket",
                    "name": "b", "namespace": "team-a", "uid": "uid-b"}])
        );
        let w = result(&finding("", "c", "paused-value", Action::Warn));
        assert_eq!(w["result"], "warn");
        assert_eq!(w["severity"], "medium");
        assert!(w["resources"][0].get("namespace").is_none());
    }

    /// Audit findings fail without enforcing; waived ones are `skip`
    /// results naming the exception.
    #[test]
    fn audit_findings_fail_and_waived_ones_skip_with_the_exception() {
        let a = result(&finding("team-a", "b", "immutable-field", Action::Audit));
        assert_eq!(a["result"], "fail");
        assert_eq!(a["severity"], "medium");
        assert_eq!(a["properties"], json!({"action": "Audit"}));
        let mut f = finding("team-a", "b", "immutable-field", Action::Warn);
        f.exception = Some("vpc-migration".into());
        let s = result(&f);
        assert_eq!(s["result"], "skip");
        assert_eq!(
            s["properties"],
            json!({"action": "Skip", "exception": "vpc-migration"})
        );
        assert_eq!(summary(&[s, a])["skip"], 1);
    }

    #[test]
    fn one_report_per_scope_with_summaries() {
        let i = input(
            vec![
                finding("team-a", "b1", "deletion-policy", Action::Deny),
                finding("team-a", "b1", "paused-value", Action::Warn),
                finding("", "c1", "management-policies", Action::Deny),
            ],
            &["", "team-a", "team-b"],
        );
        let p = plan(Flavor::WgPolicyK8s, &i, &[], t(100), MAX_REPORT_BYTES);
        assert_eq!(p.apply.len(), 3);
        assert!(p.delete.is_empty());
        let cluster = &p.apply[0];
        assert_eq!(cluster["kind"], "ClusterPolicyReport");
        assert!(cluster["metadata"].get("namespace").is_none());
        assert_eq!(cluster["summary"]["fail"], 1);
        let a = &p.apply[1];
        assert_eq!(a["kind"], "PolicyReport");
        assert_eq!(a["apiVersion"], "wgpolicyk8s.io/v1alpha2");
        assert_eq!(a["metadata"]["namespace"], "team-a");
        assert_eq!(a["metadata"]["name"], "mrguard");
        assert_eq!(a["metadata"]["labels"][MANAGED_BY_LABEL], "mrguard");
        assert_eq!(
            a["summary"],
            json!({"pass": 0, "fail": 1, "warn": 1, "error": 0, "skip": 0})
        );
        assert_eq!(
            a["results"][0]["timestamp"],
            json!({"seconds": 100, "nanos": 0})
        );
        // A namespace with MRs and no findings gets an empty report.
        assert_eq!(p.apply[2]["results"], json!([]));
        assert!(a.get("source").is_none());

        let o = plan(Flavor::OpenReports, &i, &[], t(100), MAX_REPORT_BYTES);
        assert_eq!(o.apply[0]["kind"], "ClusterReport");
        assert_eq!(o.apply[1]["kind"], "Report");
        assert_eq!(o.apply[1]["apiVersion"], "openreports.io/v1alpha1");
        assert_eq!(o.apply[1]["source"], "mrguard");
    }

    #[test]
    fn an_unchanged_pass_writes_nothing_and_keeps_timestamps() {
        let i = input(
            vec![finding("team-a", "b1", "deletion-policy", Action::Deny)],
            &["team-a"],
        );
        let first = plan(Flavor::WgPolicyK8s, &i, &[], t(100), MAX_REPORT_BYTES);
        let second = plan(
            Flavor::WgPolicyK8s,
            &i,
            &first.apply,
            t(200),
            MAX_REPORT_BYTES,
        );
        assert!(second.apply.is_empty() && second.delete.is_empty());
        assert_eq!(second.unchanged, 1);

        // A new finding: the report is rewritten, the old result keeps its time.
        let mut i2 = i.clone();
        i2.findings
            .push(finding("team-a", "b2", "paused-value", Action::Warn));
        let third = plan(
            Flavor::WgPolicyK8s,
            &i2,
            &first.apply,
            t(300),
            MAX_REPORT_BYTES,
        );
        assert_eq!(third.apply.len(), 1);
        let rs = third.apply[0]["results"].as_array().unwrap();
        let time = |name: &str| {
            rs.iter()
                .find(|r| r["resources"][0]["name"] == name)
                .unwrap()["timestamp"]["seconds"]
                .clone()
        };
        assert_eq!(time("b1"), 100);
        assert_eq!(time("b2"), 300);
    }

    #[test]
    fn fixed_findings_and_deleted_mrs_leave() {
        let i = input(
            vec![
                finding("team-a", "b1", "deletion-policy", Action::Deny),
                finding("team-b", "b2", "deletion-policy", Action::Deny),
            ],
            &["team-a", "team-b"],
        );
        let first = plan(Flavor::WgPolicyK8s, &i, &[], t(1), MAX_REPORT_BYTES);
        // b1 fixed; every MR in team-b deleted.
        let next = plan(
            Flavor::WgPolicyK8s,
            &input(vec![], &["team-a"]),
            &first.apply,
            t(2),
            MAX_REPORT_BYTES,
        );
        assert_eq!(next.apply.len(), 1);
        assert_eq!(next.apply[0]["results"], json!([]));
        assert_eq!(next.apply[0]["summary"]["fail"], 0);
        assert_eq!(
            next.delete,
            vec![ReportRef {
                namespace: "team-b".into(),
                name: "mrguard".into()
            }]
        );
    }

    #[test]
    fn a_kind_that_could_not_be_listed_keeps_its_results() {
        let i = input(
            vec![
                finding("team-a", "b1", "deletion-policy", Action::Deny),
                finding("team-b", "b2", "deletion-policy", Action::Deny),
            ],
            &["team-a", "team-b"],
        );
        let first = plan(Flavor::WgPolicyK8s, &i, &[], t(1), MAX_REPORT_BYTES);
        let mut broken = input(vec![], &[]);
        broken
            .incomplete_kinds
            .insert(("s3.aws.m.upbound.io".into(), "Bucket".into()));
        let next = plan(
            Flavor::WgPolicyK8s,
            &broken,
            &first.apply,
            t(2),
            MAX_REPORT_BYTES,
        );
        assert!(next.apply.is_empty(), "{:?}", next.apply);
        assert!(next.delete.is_empty());
        assert_eq!(next.unchanged, 2);
    }

    #[test]
    fn a_kind_never_listed_does_not_hold_deletions_back() {
        let i = input(
            vec![finding("team-b", "b2", "deletion-policy", Action::Deny)],
            &["team-b"],
        );
        let first = plan(Flavor::WgPolicyK8s, &i, &[], t(1), MAX_REPORT_BYTES);
        let mut next = input(vec![], &[]);
        next.incomplete_kinds
            .insert(("nop.crossplane.io".into(), "NopResource".into()));
        let p = plan(
            Flavor::WgPolicyK8s,
            &next,
            &first.apply,
            t(2),
            MAX_REPORT_BYTES,
        );
        assert_eq!(p.delete.len(), 1);
        assert!(p.apply.is_empty());
    }

    #[test]
    fn big_scopes_split_into_numbered_reports_within_the_limit() {
        let findings: Vec<ReportFinding> = (0..500)
            .map(|i| {
                finding(
                    "team-a",
                    &format!("bucket-{i:04}"),
                    "deletion-policy",
                    Action::Deny,
                )
            })
            .collect();
        let max = 40_000;
        let p = plan(
            Flavor::WgPolicyK8s,
            &input(findings, &["team-a"]),
            &[],
            t(1),
            max,
        );
        assert!(p.apply.len() > 2, "{}", p.apply.len());
        let mut total = 0;
        for (i, r) in p.apply.iter().enumerate() {
            assert_eq!(r["metadata"]["name"], report_name(i));
            assert!(
                r.to_string().len() <= max,
                "report {i} is {} bytes",
                r.to_string().len()
            );
            total += r["results"].as_array().unwrap().len();
            assert_eq!(r["summary"]["fail"], r["results"].as_array().unwrap().len());
        }
        assert_eq!(total, 500);
        assert_eq!(report_name(1), "mrguard-2");
        // Fewer findings later: the extra reports go.
        let fewer: Vec<ReportFinding> = (0..10)
            .map(|i| {
                finding(
                    "team-a",
                    &format!("bucket-{i:04}"),
                    "deletion-policy",
                    Action::Deny,
                )
            })
            .collect();
        let next = plan(
            Flavor::WgPolicyK8s,
            &input(fewer, &["team-a"]),
            &p.apply,
            t(2),
            max,
        );
        assert_eq!(next.apply.len(), 1);
        assert_eq!(next.delete.len(), p.apply.len() - 1);
    }

    #[test]
    fn the_default_limit_fits_the_api_server() {
        // 1.5 MiB is etcd's request limit; reports stay well below it.
        const _: () = assert!(MAX_REPORT_BYTES + REPORT_OVERHEAD < 3 * 1024 * 1024 / 2);
        assert_eq!(Flavor::OpenReports.plural(false), "clusterreports");
        assert_eq!(Flavor::WgPolicyK8s.plural(true), "policyreports");
    }
}
