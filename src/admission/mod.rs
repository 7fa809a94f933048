//! Admission decisions as pure functions: an [`review::Request`] and a
//! [`Config`] in, a [`Decision`] out. The HTTP layer only decodes and encodes.

pub mod mutate;
pub mod patch;
pub mod review;

use kube::core::admission::{AdmissionResponse, Operation as KubeOperation};
use kube::core::Status;
use serde_json::Value;

use crate::config::{Config, Operation};
use crate::rules::{self, Action, Finding, RuleContext};

pub use review::{decode, encode, DecodeError, RawObject, Request};

/// Which webhook endpoint a request came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Webhook {
    Mutate,
    Validate,
}

impl Webhook {
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
    Allowed,
    Denied,
    Patched,
    Error,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Allowed => "allowed",
            Outcome::Denied => "denied",
            Outcome::Patched => "patched",
            Outcome::Error => "error",
        }
    }
}

pub struct Decision {
    pub response: AdmissionResponse,
    pub outcome: Outcome,
    pub findings: Vec<Finding>,
    /// The mutated object, when the mutating webhook changed it.
    pub mutated: Option<Value>,
}

pub fn operation(op: &KubeOperation) -> Operation {
    match op {
        KubeOperation::Create => Operation::Create,
        KubeOperation::Update => Operation::Update,
        KubeOperation::Delete => Operation::Delete,
        KubeOperation::Connect => Operation::Connect,
    }
}

/// Scope comes from the request; a namespaced object always carries one.
fn namespace(req: &Request) -> &str {
    req.namespace.as_deref().unwrap_or("")
}

fn allow(req: &Request) -> Decision {
    Decision {
        response: AdmissionResponse::from(req),
        outcome: Outcome::Allowed,
        findings: vec![],
        mutated: None,
    }
}

/// The mutating webhook (SPEC §3).
pub fn mutate(req: &Request, config: &Config) -> Decision {
    let op = operation(&req.operation);
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
    let resource = config.resource(&req.kind.group, &req.kind.kind);
    let ctx = mutate::MutateContext {
        operation: op,
        group: &req.kind.group,
        kind: &req.kind.kind,
        namespace: namespace(req),
        config,
        resource,
    };
    let mut mutated = obj.clone();
    let warnings = mutate::mutate(&mut mutated, &ctx);
    let mut response = AdmissionResponse::from(req);
    if !warnings.is_empty() {
        response.warnings = Some(warnings);
    }
    match patch::build(obj, &mutated) {
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
                mutated: Some(mutated),
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

/// The validating webhook (SPEC §4).
pub fn validate(req: &Request, config: &Config) -> Decision {
    let op = operation(&req.operation);
    if op == Operation::Connect || req.sub_resource.as_deref().is_some_and(|s| !s.is_empty()) {
        return allow(req);
    }
    let object = req
        .object
        .as_ref()
        .map(|o| &o.value)
        .filter(|v| !v.is_null());
    let old = req
        .old_object
        .as_ref()
        .map(|o| &o.value)
        .filter(|v| !v.is_null());
    // On DELETE only the old object is sent.
    let Some(subject) = (if op == Operation::Delete {
        old.or(object)
    } else {
        object
    }) else {
        return allow(req);
    };
    if !crate::mr::is_managed(subject) {
        return allow(req);
    }
    let ctx = RuleContext {
        operation: op,
        group: &req.kind.group,
        kind: &req.kind.kind,
        name: &req.name,
        namespace: namespace(req),
        username: req.user_info.username.as_deref().unwrap_or(""),
        groups: req.user_info.groups.as_deref().unwrap_or(&[]),
        dry_run: req.dry_run,
        object: subject,
        old_object: old,
        config,
        resource: config.resource(&req.kind.group, &req.kind.kind),
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
    ctx: &RuleContext,
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

pub fn denial_message(ctx: &RuleContext, denials: &[&Finding]) -> String {
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
