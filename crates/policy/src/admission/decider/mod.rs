//! Admission decisions as pure functions: a [`Request`] in, a [`Decision`]
//! out, from a [`Decider`] built from the configuration and what the runtime
//! knows of the cluster. The HTTP layer only decodes and encodes.
//!
//! The wire format and [`RequestBuilder`](crate::admission::review::RequestBuilder)
//! live in [`crate::admission::review`].
//!
//! - [`Decider::mutate`] runs the mutation steps on a copy of the object
//!   and builds one JSON Patch from the difference;
//! - [`Decider::validate`] runs every rule (the MR rules, the Composition
//!   patches, the teardown guard) and answers through one `respond`, so
//!   warnings, staged dates, waivers and denials read the same everywhere.

mod activation;
mod mutation;
pub mod patch;
mod respond;
mod teardown;
#[cfg(test)]
mod tests;

pub use teardown::{ALLOW_TEARDOWN, TEARDOWN};

use kube_core::admission::AdmissionResponse;
use serde_json::Value;

use crate::admission::cel::{CelTiming, RuleClock};
use crate::admission::config::{Config, Subject};
use crate::admission::fieldpath::{FieldPath, Segment};
use crate::admission::judging::Judging;
use crate::admission::model::{Finding, Operation};
use crate::admission::rules::{self, RuleContext};
use crate::cluster::Cluster;

use crate::admission::review::{self, DecodeError, Request};

pub(crate) use respond::allow;
use respond::{respond, Target};

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
    /// How long each configured CEL rule took, for
    /// `mrguard_cel_rule_duration_seconds`: filled when the decider was
    /// given a clock ([`Decider::timed`]), empty otherwise.
    pub cel_timings: Vec<CelTiming>,
}

/// Decides admission requests for one configuration and what the runtime
/// knows of the cluster, at one instant. Building one is two references
/// and a timestamp (and, to time CEL rules, the caller's clock), so the
/// server builds one per request from its configuration snapshot; every
/// webhook, `check`, `explain` and the audit answer through it.
#[derive(Clone, Copy)]
pub struct Decider<'a> {
    config: &'a Config,
    cluster: &'a Cluster,
    now: jiff::Timestamp,
    /// Times the configured CEL rules into [`Decision::cel_timings`].
    clock: Option<RuleClock<'a>>,
}

impl<'a> Decider<'a> {
    /// Decides with `config`, judging what `cluster` knows, at `now`: when
    /// staged rules start to deny and exceptions expire. The caller's
    /// clock: the crate is pure, and a what-if tool or a test judges at a
    /// chosen time.
    pub fn new(config: &'a Config, cluster: &'a Cluster, now: jiff::Timestamp) -> Self {
        Self {
            config,
            cluster,
            now,
            clock: None,
        }
    }

    /// As this decider, timing each configured CEL rule it evaluates with
    /// `clock` into [`Decision::cel_timings`]. The server passes the
    /// monotonic clock for its histogram; the other callers have no use
    /// for the timings and give none, so no clock is read.
    pub fn timed(self, clock: RuleClock<'a>) -> Self {
        Self {
            clock: Some(clock),
            ..self
        }
    }

    /// Decides with `config` at `now` and no knowledge of a cluster: the
    /// rules that need one judge nothing.
    pub fn offline(config: &'a Config, now: jiff::Timestamp) -> Self {
        Self::new(config, Cluster::empty(), now)
    }

    /// The configuration it decides with.
    pub fn config(&self) -> &'a Config {
        self.config
    }

    /// What it knows of the cluster.
    pub fn cluster(&self) -> &'a Cluster {
        self.cluster
    }

    /// The instant it judges at.
    pub fn now(&self) -> jiff::Timestamp {
        self.now
    }

    /// Decodes a review body: without the objects'
    /// `metadata.managedFields` unless one of the configuration's CEL rules
    /// reads them, since nothing else in a decision does.
    pub fn decode(&self, body: &[u8]) -> Result<Request, DecodeError> {
        if self.config.reads_managed_fields() {
            review::decode(body)
        } else {
            review::decode_without_managed_fields(body)
        }
    }

    /// What `webhook` answers: the patch-only mutation for `/mutate`, as
    /// the server sends only the patch, and [`Decider::validate`] for
    /// `/validate`.
    pub fn decide(&self, webhook: Webhook, req: &Request) -> Decision {
        match webhook {
            Webhook::Mutate => self.mutate_patch_only(req),
            Webhook::Validate => self.validate(req),
        }
    }

    /// The mutating webhook (docs/rules.md), with the mutated object in
    /// [`Decision::mutated`].
    pub fn mutate(&self, req: &Request) -> Decision {
        mutate_with(req, self.config, self.cluster, true)
    }

    /// As [`Decider::mutate`], but `Decision::mutated` stays `None`: the
    /// server only sends the patch, and building the whole mutated object
    /// costs a copy of the parts mutation never touches.
    pub fn mutate_patch_only(&self, req: &Request) -> Decision {
        mutate_with(req, self.config, self.cluster, false)
    }

    /// The validating webhook (docs/rules.md): Compositions
    /// ([`Decider::composition`]), ManagedResourceActivationPolicies
    /// (their patterns, docs/activation.md), teardown deletions
    /// ([`Decider::teardown`]), else the MR rules, judging only what the
    /// cluster view knows.
    pub fn validate(&self, req: &Request) -> Decision {
        if crate::cluster::composition::is_composition(&req.kind.group, &req.kind.kind) {
            return self.composition(req);
        }
        if activation::is_mrap(req) {
            return activation::decide(req, self.cluster);
        }
        if let Some(d) = self.teardown(req) {
            return d;
        }
        let Some(ctx) = RuleContext::new(req, self.config, self.cluster, self.now) else {
            return allow(req);
        };
        self.mr(&ctx)
    }

    /// The MR rules on one request.
    fn mr(&self, ctx: &RuleContext<'_>) -> Decision {
        let evaluated = rules::evaluate(ctx, self.clock);
        let target = Target {
            name: crate::admission::mr::Mr(ctx.object).name(),
            composed: Some(ctx.object),
            fix_in_warnings: false,
        };
        Decision {
            cel_timings: evaluated.cel_timings,
            ..respond(ctx.request, &target, evaluated.findings)
        }
    }

    /// A Composition CREATE or UPDATE: its patches into immutable fields
    /// of the composed kinds (docs/compositions.md), as warnings by
    /// default, staged and waived as every rule's findings are; any other
    /// request is allowed.
    pub fn composition(&self, req: &Request) -> Decision {
        let Some(object) = written_object(req) else {
            return allow(req);
        };
        let xrs = self.cluster.composites().snapshot();
        let analysis = crate::cluster::composition::analyse(
            object,
            self.config,
            Some(&*xrs).filter(|x| !x.is_empty()),
        );
        let name = if req.name.is_empty() {
            crate::admission::mr::Mr(object).name()
        } else {
            &req.name
        };
        let judging = self.judging(req, name);
        let findings = crate::cluster::composition::judge(&analysis, &judging);
        let target = Target {
            name,
            composed: None,
            fix_in_warnings: true,
        };
        respond(req, &target, findings)
    }

    /// The teardown guard (docs/rules.md, `teardown`): the decision on
    /// deleting a namespace, a credentials Secret or a Provider, or `None`
    /// for every other request (which the MR rules judge).
    pub fn teardown(&self, req: &Request) -> Option<Decision> {
        let violation = teardown::judge(req, self.cluster)?;
        let Some(violation) = violation else {
            return Some(allow(req));
        };
        let judging = self.judging(req, &req.name);
        let finding = judging.decide(
            teardown::TEARDOWN.into(),
            crate::admission::model::Action::Deny.into(),
            violation,
        );
        let target = Target {
            name: &req.name,
            composed: None,
            fix_in_warnings: false,
        };
        Some(respond(req, &target, finding.into_iter().collect()))
    }

    /// The request's object as exceptions match it, judged at the
    /// decider's instant.
    fn judging<'r>(&self, req: &'r Request, name: &'r str) -> Judging<'r>
    where
        'a: 'r,
    {
        Judging {
            config: self.config,
            subject: Subject {
                group: &req.kind.group,
                kind: &req.kind.kind,
                name,
                namespace: req.namespace.as_deref().unwrap_or(""),
                user: req.user_info.username.as_deref().unwrap_or(""),
            },
            now: self.now,
        }
    }
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
    if !crate::admission::mr::is_managed(obj) {
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
            cel_timings: Vec::new(),
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
                    cel_timings: Vec::new(),
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
        cel_timings: Vec::new(),
    }
}

/// The object a CREATE or UPDATE of the resource itself (not a subresource)
/// writes, which the Composition and MRAP webhooks judge; `None` for any
/// other request, which they allow.
pub(crate) fn written_object(req: &Request) -> Option<&serde_json::Value> {
    let op = Operation::from(&req.operation);
    let whole = matches!(op, Operation::Create | Operation::Update)
        && req.sub_resource.as_deref().is_none_or(str::is_empty);
    whole
        .then(|| req.object.as_ref().map(|o| &o.value))
        .flatten()
}
