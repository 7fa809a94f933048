//! The one way findings become an answer: every webhook (MR rules,
//! Compositions, the teardown guard) and `explain`, `check` and the audit
//! read the same warnings and the same denial.

use kube_core::admission::AdmissionResponse;
use kube_core::Status;
use serde_json::Value;

use crate::admission::model::{Action, Finding, Operation};
use crate::admission::review::Request;

use super::{Decision, Outcome};

/// The answer that changes nothing and says nothing.
pub(crate) fn allow(req: &Request) -> Decision {
    Decision {
        response: AdmissionResponse::from(req),
        outcome: Outcome::Allowed,
        findings: vec![],
        mutated: None,
        cel_timings: Vec::new(),
    }
}

/// What an answer names: the object (`name` when the request has none, as
/// on a CREATE with `generateName`), and for a composed MR the object whose
/// labels and owner say which XR and claim to tell.
pub(crate) struct Target<'a> {
    pub(crate) name: &'a str,
    pub(crate) composed: Option<&'a Value>,
    /// Whether warnings carry the finding's fix: a Composition's author
    /// sees only the warning at apply time, and its fix (an XRD change) is
    /// not in the message; an MR rule's message already says what to change.
    pub(crate) fix_in_warnings: bool,
}

/// Turns findings into the decision: one denial listing every Deny
/// finding, and every Warn finding as a warning ([`Finding::warning`]:
/// `rule: text` with its waiver or staged date, and its fix where
/// [`Target::fix_in_warnings`]); Audit findings are left to the metrics,
/// the audit and the reports.
pub(crate) fn respond(req: &Request, target: &Target<'_>, findings: Vec<Finding>) -> Decision {
    let mut response = AdmissionResponse::from(req);
    let warnings: Vec<String> = findings
        .iter()
        .filter(|f| f.action == Action::Warn)
        .map(|f| {
            if target.fix_in_warnings {
                f.warning_with_fix()
            } else {
                f.warning()
            }
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
        let message = denial_message(req, target, &denials);
        response.allowed = false;
        response.result = Status::failure(&message, "Forbidden").with_code(403);
        Outcome::Denied
    };
    Decision {
        response,
        outcome,
        findings,
        mutated: None,
        cel_timings: Vec::new(),
    }
}

/// The denial message: the object, then every Deny finding with its fix.
fn denial_message(req: &Request, target: &Target<'_>, denials: &[&Finding]) -> String {
    let name = if req.name.is_empty() {
        target.name
    } else {
        &req.name
    };
    let mut what = format!("{} {:?}", req.kind.kind, name);
    if let Some(ns) = req.namespace.as_deref().filter(|n| !n.is_empty()) {
        what.push_str(&format!(" in namespace {ns:?}"));
    }
    let mut msg = format!(
        "mrguard denied {} of {what} ({} problem{}):",
        Operation::from(&req.operation).as_str(),
        denials.len(),
        if denials.len() == 1 { "" } else { "s" }
    );
    push_findings(&mut msg, denials);
    if let Some(xr) = target.composed.and_then(composed_by) {
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
    let composite = label(crate::admission::mr::COMPOSITE_LABEL);
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
        label(crate::admission::mr::CLAIM_NAMESPACE_LABEL),
        label(crate::admission::mr::CLAIM_NAME_LABEL),
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
