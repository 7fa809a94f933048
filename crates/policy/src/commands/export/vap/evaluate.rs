//! Judging a request with exported policies the way the API server does,
//! for the differential test against mrguard's verdict.

use serde_json::Value;

use super::bound::{self, request_json, Bound, Match, PolicyCompileError};
use crate::admission::cel::CelProgram;
use crate::admission::model::Operation;
use crate::admission::review::Request;

/// How one policy judged a request.
#[derive(Debug, Clone, PartialEq)]
pub struct Judgement {
    /// The rule it exports (`mrguard.io/rule`).
    pub rule: String,
    /// The binding's action.
    pub action: String,
    /// Why it failed: a validation's message, or an evaluation error.
    pub failure: String,
}

/// Why a policy could not be evaluated.
#[derive(Debug, thiserror::Error)]
pub enum EvaluateError {
    /// An expression does not compile.
    #[error(transparent)]
    Compile(#[from] PolicyCompileError),
    /// The policy uses what this evaluator does not model.
    #[error(
        "failed to evaluate {0}: it has variables or params, which the exported policies never use"
    )]
    Unsupported(String),
}

/// One exported policy with its binding, compiled.
struct Compiled {
    rule: String,
    action: String,
    matching: Match,
    validations: Vec<(String, CelProgram)>,
}

/// Exported policies and bindings, compiled once, to judge many requests.
pub struct Policies(Vec<Compiled>);

impl Policies {
    /// Compiles every policy that has a binding.
    pub fn compile(objects: &[Value]) -> Result<Self, EvaluateError> {
        bound::policies(objects, &bound::VALIDATING, |name, _| {
            EvaluateError::Unsupported(name)
        })
        .map(|b| Compiled::new(b?))
        .collect::<Result<_, _>>()
        .map(Self)
    }

    /// Judges `req` as the API server does: matchConstraints (operations;
    /// every exported policy matches all groups and resources, never
    /// subresources), matchConditions (all must be true; an error is a
    /// failure under `failurePolicy: Fail`), then each validation. Returns
    /// the failures, one per failing policy.
    pub fn evaluate(&self, req: &Request) -> Vec<Judgement> {
        let op = Operation::from(&req.operation);
        let mut out = Vec::new();
        if op == Operation::Connect || req.sub_resource.as_deref().is_some_and(|s| !s.is_empty()) {
            return out;
        }
        let request = request_json(req);
        let (object, old) = crate::admission::review::objects(req);
        let scope = bound::scope(object, old, &request);
        for p in &self.0 {
            if !p.matching.operation(op) {
                continue;
            }
            let failure = match p.matching.conditions(&scope) {
                Err(failure) => Some(failure),
                Ok(false) => None,
                Ok(true) => p.failure(&scope),
            };
            if let Some(failure) = failure {
                out.push(Judgement {
                    rule: p.rule.clone(),
                    action: p.action.clone(),
                    failure,
                });
            }
        }
        out
    }
}

/// Compiles `objects` and judges `req` with them ([`Policies::evaluate`]).
pub fn evaluate(objects: &[Value], req: &Request) -> Result<Vec<Judgement>, EvaluateError> {
    Ok(Policies::compile(objects)?.evaluate(req))
}

impl Compiled {
    /// A bound policy's validations, compiled.
    fn new(b: Bound<'_>) -> Result<Self, EvaluateError> {
        let mut validations = Vec::new();
        for v in b.spec["validations"].as_array().into_iter().flatten() {
            let program = b.compile("validation", v["expression"].as_str().unwrap_or(""))?;
            validations.push((v["message"].as_str().unwrap_or("").to_string(), program));
        }
        Ok(Self {
            rule: b.policy["metadata"]["annotations"]["mrguard.io/rule"]
                .as_str()
                .unwrap_or("")
                .to_string(),
            action: b.binding["spec"]["validationActions"][0]
                .as_str()
                .unwrap_or("Deny")
                .to_string(),
            matching: b.matching,
            validations,
        })
    }

    /// The first validation that fails, with its message or the
    /// evaluation error.
    fn failure(&self, scope: &crate::admission::cel::Scope<'_>) -> Option<String> {
        for (message, program) in &self.validations {
            match program.eval_bool(scope) {
                Ok(true) => {}
                Ok(false) => return Some(message.clone()),
                Err(e) => return Some(format!("validation failed: {e}")),
            }
        }
        None
    }
}
