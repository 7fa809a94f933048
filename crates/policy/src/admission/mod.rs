//! Admission decisions as pure functions: a [`Request`] and a [`Config`]
//! in, a [`Decision`] out. The HTTP layer only decodes and encodes.
//!
//! The wire format and [`RequestBuilder`](crate::review::RequestBuilder)
//! live in [`crate::review`].
//!
//! - [`mutate`] runs the mutation steps on a copy of the object and builds
//!   one JSON Patch from the difference;
//! - [`validate`] runs every rule and merges the findings into one response.

mod mutation;
pub mod patch;
mod teardown;

pub use teardown::{ALLOW_TEARDOWN, TEARDOWN};

use kube_core::admission::AdmissionResponse;
use kube_core::Status;
use serde_json::Value;

use crate::cluster::Cluster;
use crate::config::Config;
use crate::fieldpath::{FieldPath, Segment};
use crate::model::{Action, Finding, Operation};
use crate::rules::{self, RuleContext};

use crate::review::{self, DecodeError, Request};

/// Which webhook endpoint a request came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Webhook {
    /// `POST /mutate`: defaults, as a JSON Patch.
    Mutate,
    /// `POST /validate`: allow, warn or deny.
    Validate,
}

impl Webhook {
    /// The `webhook` metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Webhook::Mutate => "mutate",
            Webhook::Validate => "validate",
        }
    }
}

/// The `result` label of `mrguard_admission_requests_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Allowed with no change.
    Allowed,
    /// Denied by at least one Deny finding.
    Denied,
    /// Allowed with a patch.
    Patched,
    /// The request could not be judged normally (for example a patch that failed to serialise).
    Error,
}

impl Outcome {
    /// The `result` metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Allowed => "allowed",
            Outcome::Denied => "denied",
            Outcome::Patched => "patched",
            Outcome::Error => "error",
        }
    }
}

/// What a webhook answers, and what the metrics and logs need to know of it.
pub struct Decision {
    /// The AdmissionResponse to encode.
    pub response: AdmissionResponse,
    /// How the request ended, for `mrguard_admission_requests_total`.
    pub outcome: Outcome,
    /// Every Warn and Deny finding, for `mrguard_rule_findings_total`.
    pub findings: Vec<Finding>,
    /// The mutated object, when the mutating webhook changed it.
    pub mutated: Option<Value>,
}

fn allow(req: &Request) -> Decision {
    Decision {
        response: AdmissionResponse::from(req),
        outcome: Outcome::Allowed,
        findings: vec![],
        mutated: None,
    }
}

/// Decodes a review body for `config`: without the objects'
/// `metadata.managedFields` unless one of its CEL rules reads them, since
/// nothing else in a decision does.
pub fn decode(body: &[u8], config: &Config) -> Result<Request, DecodeError> {
    if config.reads_managed_fields() {
        review::decode(body)
    } else {
        review::decode_without_managed_fields(body)
    }
}

/// The mutating webhook (docs/rules.md).
pub fn mutate(req: &Request, config: &Config) -> Decision {
    mutate_with(req, config, Cluster::empty(), true)
}

/// As [`mutate`], with what the runtime knows of the cluster.
pub fn mutate_in(req: &Request, config: &Config, cluster: &Cluster) -> Decision {
    mutate_with(req, config, cluster, true)
}

/// As [`mutate`], but `Decision::mutated` stays `None`: the server only
/// sends the patch, and building the whole mutated object costs a copy of
/// the parts mutation never touches.
pub fn mutate_patch_only(req: &Request, config: &Config) -> Decision {
    mutate_with(req, config, Cluster::empty(), false)
}

/// As [`mutate_patch_only`], with what the runtime knows of the cluster.
pub fn mutate_patch_only_in(req: &Request, config: &Config, cluster: &Cluster) -> Decision {
    mutate_with(req, config, cluster, false)
}

/// What the mutation steps read and write, as paths from the object's
/// root; the configured tags field comes on top. Keep in step with
/// `mutation.rs`: the tests compare against mutating a whole copy.
const TOUCHED: [&[&str]; 5] = [
    &["metadata", "name"],
    &["metadata", "annotations"],
    &["spec", "providerConfigRef"],
    &["spec", "deletionPolicy"],
    &["spec", "managementPolicies"],
];

/// A copy of only what the mutation steps touch: no step reads
/// managedFields or status, so copying and diffing them was wasted work.
/// The saving measured small on the benchmark mix (callgrind: 429.8 k to
/// 426.9 k instructions per /mutate request) because the tags map, which
/// most patched reviews there touch, is still copied and diffed whole.
fn touched_copy(obj: &Value, paths: &[&[&str]]) -> Value {
    let mut copy = Value::Object(serde_json::Map::new());
    for path in paths {
        copy_path(obj, &mut copy, path);
    }
    copy
}

/// The configured tags field as the steps of a path.
fn tags_path(tags_field: Option<&FieldPath>) -> Vec<&str> {
    tags_field
        .map(|f| {
            f.segments()
                .iter()
                .filter_map(|s| match s {
                    Segment::Field(k) | Segment::Key(k) => Some(k.as_str()),
                    // A tags field is concrete (the configuration checks it).
                    Segment::Wildcard => None,
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Copies the value at `path` of `from` into `to`, with the objects on the
/// way; a value on the way that is not an object is copied whole, so a step
/// sees it exactly as in the full object.
fn copy_path(from: &Value, to: &mut Value, path: &[&str]) {
    let (Some((first, rest)), Value::Object(src), Value::Object(dst)) =
        (path.split_first(), from, &mut *to)
    else {
        return;
    };
    let Some(child) = src.get(*first) else { return };
    if rest.is_empty() || !child.is_object() {
        dst.insert(first.to_string(), child.clone());
        return;
    }
    let slot = dst
        .entry(first.to_string())
        .or_insert_with(|| Value::Object(serde_json::Map::new()));
    copy_path(child, slot, rest);
}

fn mutate_with(req: &Request, config: &Config, cluster: &Cluster, want_object: bool) -> Decision {
    let op = Operation::from(&req.operation);
    if !matches!(op, Operation::Create | Operation::Update)
        || req.sub_resource.as_deref().is_some_and(|s| !s.is_empty())
    {
        return allow(req);
    }
    let Some(obj) = req.object.as_ref().map(|o| &o.value) else {
        return allow(req);
    };
    if !crate::mr::is_managed(obj) {
        return allow(req);
    }
    let ctx = mutation::MutateContext::new(req, config, cluster);
    if ctx.exempt() {
        return allow(req);
    }
    let tags = tags_path(ctx.resource.tags_field.as_ref());
    let paths: Vec<&[&str]> = TOUCHED
        .iter()
        .copied()
        .chain((!tags.is_empty()).then_some(&tags[..]))
        .collect();
    let mut after = touched_copy(obj, &paths);
    let warnings = mutation::apply(&mut after, &ctx);
    let mut response = AdmissionResponse::from(req);
    if !warnings.is_empty() {
        response.warnings = Some(warnings);
    }
    match patch::build_along(obj, &after, &paths) {
        None => Decision {
            response,
            outcome: Outcome::Allowed,
            findings: vec![],
            mutated: None,
        },
        Some(p) => {
            // The patch was built against copies of these very values, so
            // it applies to the whole object.
            let mutated = match want_object.then(|| {
                let mut full = obj.clone();
                json_patch::patch(&mut full, &p).map(|()| full)
            }) {
                Some(Err(e)) => {
                    return patch_failed(response, format!("failed to apply the patch: {e}"))
                }
                Some(Ok(full)) => Some(full),
                None => None,
            };
            match response.clone().with_patch(p) {
                Ok(response) => Decision {
                    response,
                    outcome: Outcome::Patched,
                    findings: vec![],
                    mutated,
                },
                Err(e) => patch_failed(response, format!("failed to serialise the patch: {e}")),
            }
        }
    }
}

/// Mutation is best-effort: a patch that cannot be sent never blocks a
/// write; the request is allowed unchanged, with a warning.
fn patch_failed(mut response: AdmissionResponse, why: String) -> Decision {
    response
        .warnings
        .get_or_insert_with(Vec::new)
        .push(format!("mrguard: {why}, nothing changed"));
    Decision {
        response,
        outcome: Outcome::Error,
        findings: vec![],
        mutated: None,
    }
}

/// The validating webhook (docs/rules.md).
pub fn validate(req: &Request, config: &Config) -> Decision {
    validate_in(req, config, Cluster::empty())
}

/// As [`validate`], with what the runtime knows of the cluster
/// ([`Cluster`]): the rules that need it judge only what it knows.
pub fn validate_in(req: &Request, config: &Config, cluster: &Cluster) -> Decision {
    if crate::composition::is_composition(&req.kind.group, &req.kind.kind) {
        return validate_composition(req, config, cluster);
    }
    if let Some(d) = teardown::judge(req, cluster) {
        return d;
    }
    let Some(ctx) = RuleContext::new(req, config, cluster) else {
        return allow(req);
    };
    let findings = rules::evaluate(&ctx);
    let response = respond(AdmissionResponse::from(req), &ctx, &findings);
    let outcome = if response.allowed {
        Outcome::Allowed
    } else {
        Outcome::Denied
    };
    Decision {
        response,
        outcome,
        findings,
        mutated: None,
    }
}

/// A Composition CREATE or UPDATE: its patches into immutable fields of
/// the composed kinds (docs/compositions.md), as warnings by default.
fn validate_composition(req: &Request, config: &Config, cluster: &Cluster) -> Decision {
    let op = Operation::from(&req.operation);
    let object = req.object.as_ref().map(|o| &o.value);
    let (true, Some(object)) = (
        matches!(op, Operation::Create | Operation::Update)
            && req.sub_resource.as_deref().is_none_or(str::is_empty),
        object,
    ) else {
        return allow(req);
    };
    let xrs = cluster.composites().snapshot();
    let analysis =
        crate::composition::analyse(object, config, Some(&*xrs).filter(|x| !x.is_empty()));
    let findings = crate::composition::judge(&analysis, config);
    let mut response = AdmissionResponse::from(req);
    let warnings: Vec<String> = findings
        .iter()
        .filter(|f| f.action == Action::Warn)
        .map(|f| match &f.fix {
            Some(fix) => format!("{}: {}. Fix: {fix}", f.rule, f.message),
            None => format!("{}: {}", f.rule, f.message),
        })
        .collect();
    if !warnings.is_empty() {
        response.warnings = Some(warnings);
    }
    let denials: Vec<&Finding> = findings
        .iter()
        .filter(|f| f.action == Action::Deny)
        .collect();
    let outcome = if denials.is_empty() {
        Outcome::Allowed
    } else {
        let name = if req.name.is_empty() {
            crate::mr::Mr(object).name()
        } else {
            &req.name
        };
        let mut msg = format!(
            "mrguard denied {} of Composition {name:?} ({} problem{}):",
            op.as_str(),
            denials.len(),
            if denials.len() == 1 { "" } else { "s" }
        );
        push_findings(&mut msg, &denials);
        response.allowed = false;
        response.result = Status::failure(&msg, "Forbidden").with_code(403);
        Outcome::Denied
    };
    Decision {
        response,
        outcome,
        findings,
        mutated: None,
    }
}

/// Turns findings into the response: one denial listing every Deny finding,
/// and every Warn finding as a `rule: text` warning ([`Finding::warning`]);
/// Audit findings are left to the metrics, the audit and the reports.
pub fn respond(
    mut response: AdmissionResponse,
    ctx: &RuleContext<'_>,
    findings: &[Finding],
) -> AdmissionResponse {
    let warnings: Vec<String> = findings
        .iter()
        .filter(|f| f.action == Action::Warn)
        .map(Finding::warning)
        .collect();
    if !warnings.is_empty() {
        response.warnings = Some(warnings);
    }
    let denials: Vec<&Finding> = findings
        .iter()
        .filter(|f| f.action == Action::Deny)
        .collect();
    if denials.is_empty() {
        return response;
    }
    let message = denial_message(ctx, &denials);
    response.allowed = false;
    response.result = Status::failure(&message, "Forbidden").with_code(403);
    response
}

/// The denial message: the object, then every Deny finding with its fix.
pub fn denial_message(ctx: &RuleContext<'_>, denials: &[&Finding]) -> String {
    let name = if ctx.name.is_empty() {
        crate::mr::Mr(ctx.object).name()
    } else {
        ctx.name
    };
    let mut what = format!("{} {:?}", ctx.kind, name);
    if ctx.namespaced() {
        what.push_str(&format!(" in namespace {:?}", ctx.namespace));
    }
    let mut msg = format!(
        "mrguard denied {} of {what} ({} problem{}):",
        ctx.operation.as_str(),
        denials.len(),
        if denials.len() == 1 { "" } else { "s" }
    );
    push_findings(&mut msg, denials);
    if let Some(xr) = composed_by(ctx.object) {
        msg.push_str(&xr);
    }
    msg
}

fn push_findings(msg: &mut String, denials: &[&Finding]) {
    for (i, f) in denials.iter().enumerate() {
        msg.push_str(&format!(" ({}) [{}] {}", i + 1, f.rule, f.message));
        if let Some(fix) = &f.fix {
            msg.push_str(&format!(". Fix: {fix}"));
        }
        msg.push(if i + 1 == denials.len() { '.' } else { ';' });
    }
}

/// For a composed MR, who to tell: Crossplane copies the denial into the
/// XR's `Synced` condition, read by people who never saw this MR. Names
/// the XR (the controller owner reference, else the
/// `crossplane.io/composite` label) and the claim when there is one.
fn composed_by(obj: &Value) -> Option<String> {
    let meta = obj.get("metadata")?;
    let label = |k: &str| {
        meta.get("labels")
            .and_then(|l| l.get(k))
            .and_then(Value::as_str)
            .filter(|v| !v.is_empty())
    };
    let owner = meta
        .get("ownerReferences")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|o| o.get("controller").and_then(Value::as_bool) == Some(true));
    let owner_field = |k: &str| owner.and_then(|o| o.get(k)).and_then(Value::as_str);
    let composite = label(crate::mr::COMPOSITE_LABEL);
    let (kind, name) = match (owner_field("kind"), owner_field("name"), composite) {
        (Some(k), Some(n), Some(c)) if n == c => (Some(k), n),
        (_, _, Some(c)) => (None, c),
        (Some(k), Some(n), None) => (Some(k), n),
        _ => return None,
    };
    let xr = match kind {
        Some(k) => format!("{k} {name:?}"),
        None => format!("the composite resource {name:?}"),
    };
    let claim = match (
        label(crate::mr::CLAIM_NAMESPACE_LABEL),
        label(crate::mr::CLAIM_NAME_LABEL),
    ) {
        (Some(ns), Some(n)) => format!(" (claim {n:?} in namespace {ns:?})"),
        _ => String::new(),
    };
    let on = if claim.is_empty() {
        "that XR"
    } else {
        "the claim"
    };
    Some(format!(
        " This MR is composed by {xr}{claim}: undo the change on {on}; its Composition patches it into the field(s) above, and Crossplane retries this update until then."
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The working copy and the skipping diff give exactly what mutating a
    /// full copy and diffing it whole gives, for every review a real API
    /// server sent and with a tags field under `status` too.
    #[test]
    fn patch_only_path_matches_mutating_the_whole_object() {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/reviews");
        let configs = [
            Config::builtin(),
            Config::from_yaml(
                "resources:\n  - apiGroups: ['*']\n    kinds: ['*']\n    tagsField: spec.forProvider.tags\n",
            )
            .unwrap(),
            Config::from_yaml("resources:\n  - apiGroups: ['*']\n    kinds: ['*']\n    tagsField: status.atProvider.tags\n")
                .unwrap(),
            Config::from_yaml("resources:\n  - apiGroups: ['*']\n    kinds: ['*']\n    tagsField: metadata.labels\n")
                .unwrap(),
        ];
        let mut checked = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let body = std::fs::read(entry.unwrap().path()).unwrap();
            let mut req = crate::review::decode(&body).unwrap();
            if let Some(o) = req.object.as_mut() {
                // A status as providers write it, so leaving it out matters.
                o.value["status"] =
                    serde_json::json!({"atProvider": {"id": "x"}, "conditions": []});
            }
            for config in &configs {
                let full = mutate(&req, config);
                let lean = mutate_patch_only(&req, config);
                assert_eq!(full.response.patch, lean.response.patch);
                assert!(lean.mutated.is_none());
                let Some(obj) = req.object.as_ref().map(|o| &o.value) else {
                    continue;
                };
                let mut expected = obj.clone();
                let ctx = mutation::MutateContext::new(&req, config, Cluster::empty());
                if full.outcome == Outcome::Patched {
                    mutation::apply(&mut expected, &ctx);
                    assert_eq!(full.mutated.as_ref(), Some(&expected));
                    let patch: json_patch::Patch =
                        serde_json::from_slice(full.response.patch.as_ref().unwrap()).unwrap();
                    let mut applied = obj.clone();
                    json_patch::patch(&mut applied, &patch).unwrap();
                    assert_eq!(applied, expected);
                    checked += 1;
                }
            }
        }
        assert!(checked >= 20, "only {checked} patched reviews");
    }

    /// The copy holds what the steps touch, the objects on the way, and a
    /// non-object on the way whole; nothing else.
    #[test]
    fn the_touched_copy_holds_only_what_mutation_touches() {
        let obj = serde_json::json!({
            "apiVersion": "v1", "kind": "K",
            "metadata": {"name": "a", "labels": {"x": "1"}, "managedFields": [{}]},
            "spec": {"forProvider": {"region": "r", "tags": {"t": "1"}}, "deletionPolicy": "Orphan"},
            "status": {"atProvider": "not an object"},
        });
        let copy = |tags: &str| {
            let tags = FieldPath::parse(tags).unwrap();
            let tags = tags_path(Some(&tags));
            let paths: Vec<&[&str]> = TOUCHED.iter().copied().chain([&tags[..]]).collect();
            touched_copy(&obj, &paths)
        };
        assert_eq!(
            copy("spec.forProvider.tags"),
            serde_json::json!({
                "metadata": {"name": "a"},
                "spec": {"deletionPolicy": "Orphan", "forProvider": {"tags": {"t": "1"}}},
            })
        );
        assert_eq!(
            copy("status.atProvider.tags")["status"],
            serde_json::json!({"atProvider": "not an object"})
        );
    }

    /// Decoding without managedFields changes no answer: every review a
    /// real API server sent gets the same validate and mutate response from
    /// the built-in configuration either way, and the objects differ only
    /// by managedFields.
    #[test]
    fn leaving_out_managed_fields_changes_no_answer() {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/reviews");
        let config = Config::builtin();
        assert!(!config.reads_managed_fields());
        let mut with_managed_fields = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let body = std::fs::read(entry.unwrap().path()).unwrap();
            let full = review::decode(&body).unwrap();
            let lean = decode(&body, &config).unwrap();
            for (f, l) in [
                (&full.object, &lean.object),
                (&full.old_object, &lean.old_object),
            ] {
                let (Some(f), Some(l)) = (f, l) else {
                    assert_eq!(f.is_some(), l.is_some());
                    continue;
                };
                let mut expected = f.value.clone();
                if let Some(m) = expected["metadata"].as_object_mut() {
                    with_managed_fields += usize::from(m.remove("managedFields").is_some());
                }
                assert_eq!(l.value, expected);
            }
            let encode = |d: Decision| serde_json::to_value(&d.response).unwrap();
            assert_eq!(
                encode(validate(&full, &config)),
                encode(validate(&lean, &config))
            );
            assert_eq!(
                encode(mutate(&full, &config)),
                encode(mutate(&lean, &config))
            );
        }
        assert!(
            with_managed_fields >= 10,
            "only {with_managed_fields} objects had managedFields"
        );
    }

    /// A CEL rule that reads managedFields (whole, in part, or whether they
    /// are there) keeps them; one that reads other metadata does not.
    #[test]
    fn a_cel_rule_that_reads_managed_fields_keeps_them() {
        let config = |expression: &str| {
            Config::from_yaml(&format!(
                "resources:\n  - apiGroups: ['*']\n    kinds: ['*']\n    celRules:\n      - name: r\n        expression: {expression:?}\n        message: m\n"
            ))
            .unwrap()
        };
        let body = serde_json::to_vec(&serde_json::json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {
                "uid": "u", "operation": "CREATE", "userInfo": {"username": "a"},
                "kind": {"group": "s3.aws.upbound.io", "version": "v1beta1", "kind": "Bucket"},
                "resource": {"group": "s3.aws.upbound.io", "version": "v1beta1", "resource": "buckets"},
                "name": "b",
                "object": {"metadata": {"name": "b", "managedFields": [{"manager": "kubectl"}]},
                           "spec": {"forProvider": {}}},
            },
        }))
        .unwrap();
        for (expression, kept) in [
            (
                "self.metadata.managedFields.exists(m, m.manager == 'kubectl')",
                true,
            ),
            ("has(self.metadata.managedFields)", true),
            ("size(self.metadata) > 0", true),
            (
                "oldSelf == null || oldSelf.metadata.managedFields == self.metadata.managedFields",
                true,
            ),
            ("self.metadata.name != ''", false),
            ("has(self.metadata)", false),
        ] {
            let config = config(expression);
            assert_eq!(config.reads_managed_fields(), kept, "{expression}");
            let req = decode(&body, &config).unwrap();
            let object = &req.object.as_ref().unwrap().value;
            assert_eq!(
                object["metadata"].get("managedFields").is_some(),
                kept,
                "{expression}"
            );
            // The rule sees what it reads: a kept list lets it allow.
            if kept && expression.contains("exists") {
                assert!(validate(&req, &config).response.allowed);
            }
        }
    }

    fn composition() -> Value {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../examples/compositions/network-pipeline.yaml");
        serde_saphyr::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    }

    fn composition_request(op: Operation, obj: Value) -> Request {
        let mut b = crate::review::RequestBuilder::new(op);
        b = b.object(obj.clone());
        if op == Operation::Update {
            b = b.old_object(obj);
        }
        b.username("platform-team").build()
    }

    /// A Composition CREATE or UPDATE is allowed with one warning per
    /// patch into an immutable field, each naming the patch and the fix.
    #[test]
    fn a_composition_is_allowed_with_warnings() {
        for op in [Operation::Create, Operation::Update] {
            let d = validate(&composition_request(op, composition()), &Config::builtin());
            assert!(d.response.allowed);
            assert_eq!(d.outcome, Outcome::Allowed);
            let w = d.response.warnings.unwrap();
            assert_eq!(w.len(), 5, "{w:#?}");
            assert!(w[0].starts_with("composition-immutable-patch: step \"patch-and-transform\", resource \"vpc\", patches[0]: FromCompositeFieldPath spec.parameters.region -> spec.forProvider.region"), "{}", w[0]);
            assert!(w[0].contains("Fix: make spec.parameters.region immutable in the XRD"));
            assert!(
                w[1].contains("resource \"subnet-a\", patch set \"subnet-location\" patches[0]")
            );
            assert!(w[1].contains("CombineFromComposite spec.parameters.geo, spec.parameters.area -> spec.forProvider.region"));
            assert!(!w.iter().any(|w| w.contains("-> spec.forProvider.tags")));
        }
        // Configured Deny denies, naming the Composition; Off is silent.
        let cfg = Config::from_yaml(&format!(
            "rules: {{composition-immutable-patch: Deny}}\n{}",
            crate::config::BUILTIN_YAML
        ))
        .unwrap();
        let d = validate(&composition_request(Operation::Create, composition()), &cfg);
        assert!(!d.response.allowed);
        assert!(d.response.result.message.starts_with(
            "mrguard denied CREATE of Composition \"xnetworks.aws.example.org\" (5 problems): (1) [composition-immutable-patch] step"
        ), "{}", d.response.result.message);
        let cfg = Config::from_yaml("rules: {composition-immutable-patch: Off}\nresources:\n  - apiGroups: ['*']\n    kinds: ['*']\n    immutableFields: [spec.forProvider.region]\n").unwrap();
        let d = validate(&composition_request(Operation::Create, composition()), &cfg);
        assert!(d.response.allowed && d.response.warnings.is_none());
        // Deletes and other kinds are not read.
        let d = validate(
            &composition_request(Operation::Delete, composition()),
            &Config::builtin(),
        );
        assert!(d.response.allowed && d.response.warnings.is_none());
    }

    fn composed_vpc(region: &str, owner: bool, claim: bool) -> Value {
        let mut v = serde_json::json!({
            "apiVersion": "ec2.aws.upbound.io/v1beta1", "kind": "VPC",
            "metadata": {"name": "net-x7k2p-vpc", "annotations": {"crossplane.io/external-create-succeeded": "2024-01-01T00:00:00Z"},
                "labels": {"crossplane.io/composite": "net-x7k2p"}},
            "spec": {"forProvider": {"region": region, "cidrBlock": "10.0.0.0/16"}},
        });
        if owner {
            v["metadata"]["ownerReferences"] = serde_json::json!([
                {"apiVersion": "aws.example.org/v1alpha1", "kind": "XNetwork", "name": "net-x7k2p", "uid": "u", "controller": true}]);
        }
        if claim {
            v["metadata"]["labels"]["crossplane.io/claim-name"] = "net".into();
            v["metadata"]["labels"]["crossplane.io/claim-namespace"] = "team-a".into();
        }
        v
    }

    /// A denied update of a composed MR names its XR and claim, and says
    /// to undo the change there.
    #[test]
    fn a_denied_composed_mr_names_its_xr_and_claim() {
        let deny = |owner: bool, claim: bool| {
            let req = crate::review::RequestBuilder::new(Operation::Update)
                .object(composed_vpc("eu-west-1", owner, claim))
                .old_object(composed_vpc("us-east-1", owner, claim))
                .username("system:serviceaccount:crossplane-system:crossplane")
                .build();
            let cfg = Config::from_yaml("resources:\n  - apiGroups: ['*']\n    kinds: ['*']\n    immutableFields: [spec.forProvider.region]\n").unwrap();
            let d = validate(&req, &cfg);
            assert!(!d.response.allowed);
            d.response.result.message
        };
        let m = deny(true, true);
        assert!(m.starts_with("mrguard denied UPDATE of VPC \"net-x7k2p-vpc\" (1 problem): (1) [immutable-field] spec.forProvider.region is immutable"), "{m}");
        assert!(m.ends_with(" This MR is composed by XNetwork \"net-x7k2p\" (claim \"net\" in namespace \"team-a\"): undo the change on the claim; its Composition patches it into the field(s) above, and Crossplane retries this update until then."), "{m}");
        let m = deny(true, false);
        assert!(
            m.contains("composed by XNetwork \"net-x7k2p\": undo the change on that XR;"),
            "{m}"
        );
        let m = deny(false, false);
        assert!(
            m.contains("composed by the composite resource \"net-x7k2p\": undo"),
            "{m}"
        );
        // An MR nobody composed says nothing of it.
        let mut plain = composed_vpc("eu-west-1", false, false);
        plain["metadata"]["labels"] = serde_json::json!({});
        let mut old = plain.clone();
        old["spec"]["forProvider"]["region"] = "us-east-1".into();
        let req = crate::review::RequestBuilder::new(Operation::Update)
            .object(plain)
            .old_object(old)
            .build();
        let m = validate(&req, &Config::builtin()).response.result.message;
        assert!(
            m.contains("[immutable-field]") && !m.contains("composed"),
            "{m}"
        );
    }

    /// The XRDs the runtime watches make findings whose sources they
    /// freeze informational: no warning.
    #[test]
    fn the_clusters_xrds_silence_findings_they_make_harmless() {
        let cluster = Cluster::default();
        let req = composition_request(Operation::Create, composition());
        let before = validate_in(&req, &Config::builtin(), &cluster);
        assert_eq!(before.response.warnings.unwrap().len(), 5);
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../examples/compositions/xrd-network-immutable-region.yaml");
        let xrd: Value = serde_saphyr::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let mut xrs = crate::composition::XrSchemas::default();
        xrs.add(&xrd);
        cluster.composites().replace(xrs);
        let after = validate_in(&req, &Config::builtin(), &cluster);
        assert!(after.response.allowed);
        assert!(
            after.response.warnings.is_none(),
            "{:?}",
            after.response.warnings
        );
    }
}
