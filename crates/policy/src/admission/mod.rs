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

/// Turns findings into the response: one denial listing every Deny finding,
/// and every Warn finding as a `rule: text` warning.
pub fn respond(
    mut response: AdmissionResponse,
    ctx: &RuleContext<'_>,
    findings: &[Finding],
) -> AdmissionResponse {
    let warnings: Vec<String> = findings
        .iter()
        .filter(|f| f.action == Action::Warn)
        .map(|f| format!("{}: {}", f.rule, f.message))
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
    for (i, f) in denials.iter().enumerate() {
        msg.push_str(&format!(" ({}) [{}] {}", i + 1, f.rule, f.message));
        if let Some(fix) = &f.fix {
            msg.push_str(&format!(". Fix: {fix}"));
        }
        msg.push(if i + 1 == denials.len() { '.' } else { ';' });
    }
    msg
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
}
