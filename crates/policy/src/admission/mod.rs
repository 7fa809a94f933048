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

use kube_core::admission::AdmissionResponse;
use kube_core::Status;
use serde_json::Value;

use crate::config::Config;
use crate::fieldpath::{FieldPath, Segment};
use crate::model::{Action, Finding, Operation};
use crate::rules::{self, RuleContext};

use crate::review::Request;

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

/// The mutating webhook (docs/rules.md).
pub fn mutate(req: &Request, config: &Config) -> Decision {
    mutate_with(req, config, true)
}

/// As [`mutate`], but `Decision::mutated` stays `None`: the server only
/// sends the patch, and building the whole mutated object costs a copy of
/// the parts mutation never touches.
pub fn mutate_patch_only(req: &Request, config: &Config) -> Decision {
    mutate_with(req, config, false)
}

/// Subtrees no mutation step reads or writes, and often most of an object:
/// they are left out of the working copy and of the diff.
const UNTOUCHED: [&str; 2] = ["/metadata/managedFields", "/status"];

/// `obj` without the [`UNTOUCHED`] subtrees, unless a configured tags
/// field lies under one; returns the pointers it left out.
fn working_copy(obj: &Value, tags_field: Option<&FieldPath>) -> (Value, Vec<&'static str>) {
    let tag_root: Vec<&str> = tags_field
        .map(|f| {
            f.segments()
                .iter()
                .take(2)
                .map(|s| match s {
                    Segment::Field(k) | Segment::Key(k) => k.as_str(),
                    Segment::Wildcard => "*",
                })
                .collect()
        })
        .unwrap_or_default();
    let left_out: Vec<&'static str> = UNTOUCHED
        .into_iter()
        .filter(|p| {
            let under = p[1..]
                .split('/')
                .zip(&tag_root)
                .all(|(a, b)| a == *b || *b == "*");
            tag_root.is_empty() || !under
        })
        .collect();
    let Value::Object(top) = obj else {
        return (obj.clone(), vec![]);
    };
    let mut copy = serde_json::Map::new();
    for (k, v) in top {
        if k == "status" && left_out.contains(&"/status") {
            continue;
        }
        if k == "metadata" && left_out.contains(&"/metadata/managedFields") {
            if let Value::Object(meta) = v {
                let meta = meta
                    .iter()
                    .filter(|(k, _)| *k != "managedFields")
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                copy.insert(k.clone(), Value::Object(meta));
                continue;
            }
        }
        copy.insert(k.clone(), v.clone());
    }
    (Value::Object(copy), left_out)
}

/// Puts the left-out subtrees of `obj` back into `mutated`.
fn restore(obj: &Value, mutated: &mut Value, left_out: &[&str]) {
    for p in left_out {
        if let (Some(v), Some((parent, key))) = (obj.pointer(p), p.rsplit_once('/')) {
            if let Some(m) = mutated.pointer_mut(parent).and_then(Value::as_object_mut) {
                m.insert(key.to_string(), v.clone());
            }
        }
    }
}

fn mutate_with(req: &Request, config: &Config, want_object: bool) -> Decision {
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
    let ctx = mutation::MutateContext::new(req, config);
    if ctx.exempt() {
        return allow(req);
    }
    let (mut mutated, left_out) = working_copy(obj, ctx.resource.tags_field.as_ref());
    let warnings = mutation::apply(&mut mutated, &ctx);
    let mut response = AdmissionResponse::from(req);
    if !warnings.is_empty() {
        response.warnings = Some(warnings);
    }
    match patch::build_except(obj, &mutated, &left_out) {
        None => Decision {
            response,
            outcome: Outcome::Allowed,
            findings: vec![],
            mutated: None,
        },
        Some(p) => match response.clone().with_patch(p) {
            Ok(response) => Decision {
                response,
                outcome: Outcome::Patched,
                findings: vec![],
                mutated: want_object.then(|| {
                    restore(obj, &mut mutated, &left_out);
                    mutated
                }),
            },
            // Mutation is best-effort: never block a write over it.
            Err(e) => {
                let mut response = response;
                response.warnings.get_or_insert_with(Vec::new).push(format!(
                    "mrguard: failed to serialise the patch, nothing changed: {e}"
                ));
                Decision {
                    response,
                    outcome: Outcome::Error,
                    findings: vec![],
                    mutated: None,
                }
            }
        },
    }
}

/// The validating webhook (docs/rules.md).
pub fn validate(req: &Request, config: &Config) -> Decision {
    let Some(ctx) = RuleContext::new(req, config) else {
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
                let ctx = mutation::MutateContext::new(&req, config);
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
}
