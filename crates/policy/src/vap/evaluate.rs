//! Judging a request with exported policies the way the API server does,
//! for the differential test against mrguard's verdict.

use serde_json::{json, Value};

use crate::cel::{CelProgram, Scope};
use crate::model::Operation;
use crate::review::Request;

/// The admission-time variables of a policy expression.
const VAP_VARS: &[&str] = &[
    "object",
    "oldObject",
    "request",
    "params",
    "namespaceObject",
];

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
    #[error("failed to compile {policy} {what}: {reason}")]
    Compile {
        /// The policy.
        policy: String,
        /// Which expression.
        what: String,
        /// The compiler's message.
        reason: String,
    },
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
    operations: Vec<String>,
    conditions: Vec<(String, CelProgram)>,
    validations: Vec<(String, CelProgram)>,
}

/// Exported policies and bindings, compiled once, to judge many requests.
pub struct Policies(Vec<Compiled>);

impl Policies {
    /// Compiles every policy that has a binding.
    pub fn compile(objects: &[Value]) -> Result<Self, EvaluateError> {
        let mut out = Vec::new();
        for p in objects
            .iter()
            .filter(|o| o["kind"] == "ValidatingAdmissionPolicy")
        {
            let name = p["metadata"]["name"].as_str().unwrap_or("").to_string();
            let spec = &p["spec"];
            if spec.get("variables").is_some() || spec.get("paramKind").is_some() {
                return Err(EvaluateError::Unsupported(name));
            }
            let Some(binding) = objects.iter().find(|b| {
                b["kind"] == "ValidatingAdmissionPolicyBinding"
                    && b["spec"]["policyName"] == name.as_str()
            }) else {
                continue;
            };
            let compile = |what: &str, src: &str| {
                CelProgram::compile_with(src, VAP_VARS).map_err(|e| EvaluateError::Compile {
                    policy: name.clone(),
                    what: what.to_string(),
                    reason: e.to_string(),
                })
            };
            let mut conditions = Vec::new();
            for c in spec["matchConditions"].as_array().into_iter().flatten() {
                let cname = c["name"].as_str().unwrap_or("").to_string();
                let program = compile(
                    &format!("matchCondition {cname}"),
                    c["expression"].as_str().unwrap_or(""),
                )?;
                conditions.push((cname, program));
            }
            let mut validations = Vec::new();
            for v in spec["validations"].as_array().into_iter().flatten() {
                let program = compile("validation", v["expression"].as_str().unwrap_or(""))?;
                validations.push((v["message"].as_str().unwrap_or("").to_string(), program));
            }
            out.push(Compiled {
                rule: p["metadata"]["annotations"]["mrguard.io/rule"]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
                action: binding["spec"]["validationActions"][0]
                    .as_str()
                    .unwrap_or("Deny")
                    .to_string(),
                operations: spec["matchConstraints"]["resourceRules"][0]["operations"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|o| o.as_str().map(str::to_string))
                    .collect(),
                conditions,
                validations,
            });
        }
        Ok(Self(out))
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
        let (object, old) = crate::review::objects(req);
        let mut scope = Scope::new();
        scope.bind("object", object);
        scope.bind("oldObject", old);
        scope.bind("request", Some(&request));
        scope.bind("params", None);
        scope.bind("namespaceObject", None);
        for p in &self.0 {
            if !p.operations.iter().any(|o| o == op.as_str() || o == "*") {
                continue;
            }
            let mut failure = None;
            let mut applies = true;
            for (cname, program) in &p.conditions {
                match program.eval_bool(&scope) {
                    Ok(true) => {}
                    Ok(false) => {
                        applies = false;
                        break;
                    }
                    Err(e) => {
                        failure = Some(format!("matchCondition {cname} failed: {e}"));
                        break;
                    }
                }
            }
            if failure.is_none() && applies {
                for (message, program) in &p.validations {
                    match program.eval_bool(&scope) {
                        Ok(true) => {}
                        Ok(false) => {
                            failure = Some(message.clone());
                            break;
                        }
                        Err(e) => {
                            failure = Some(format!("validation failed: {e}"));
                            break;
                        }
                    }
                }
            }
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

/// The `request` variable of an admission policy.
pub(crate) fn request_json(req: &Request) -> Value {
    json!({
        "kind": {"group": req.kind.group, "version": req.kind.version, "kind": req.kind.kind},
        "resource": {"group": req.resource.group, "version": req.resource.version, "resource": req.resource.resource},
        "name": req.name,
        "namespace": req.namespace.clone().unwrap_or_default(),
        "operation": Operation::from(&req.operation).as_str(),
        "userInfo": {
            "username": req.user_info.username.clone().unwrap_or_default(),
            "groups": req.user_info.groups.clone().unwrap_or_default(),
        },
        "dryRun": req.dry_run,
    })
}
