//! Mutating a request with exported policies the way the API server does,
//! for the differential test against `/mutate`.

use serde_json::Value;

use crate::admission::cel::CelProgram;
use crate::admission::model::Operation;
use crate::admission::review::Request;
use crate::commands::export::vap::bound::{self, request_json, Bound, Match, PolicyCompileError};

/// Why a policy could not be compiled or applied.
#[derive(Debug, thiserror::Error)]
pub enum EvaluateError {
    /// An expression does not compile.
    #[error(transparent)]
    Compile(#[from] PolicyCompileError),
    /// The policy uses what this evaluator does not model.
    #[error("failed to compile {policy}: {what}, which the exported policies never use")]
    Unsupported {
        /// The policy.
        policy: String,
        /// What it uses.
        what: String,
    },
    /// A policy with `failurePolicy: Fail` failed: the API server would
    /// reject the request.
    #[error("failed to apply {policy}: {reason}")]
    Failed {
        /// The policy.
        policy: String,
        /// Why.
        reason: String,
    },
}

/// How a mutation patches.
enum Patch {
    Json(CelProgram),
    Apply(CelProgram),
}

/// One exported policy with a binding, compiled.
struct Compiled {
    name: String,
    fail: bool,
    matching: Match,
    mutations: Vec<Patch>,
}

/// What the policies did to one request.
#[derive(Debug, Clone, PartialEq)]
pub struct Mutated {
    /// The object after every policy, when one changed it.
    pub object: Option<Value>,
    /// The failures that `failurePolicy: Ignore` let through, one line each.
    pub ignored: Vec<String>,
}

/// Exported policies and bindings, compiled once, to mutate many requests.
pub struct Policies(Vec<Compiled>);

impl Policies {
    /// Compiles every MutatingAdmissionPolicy that has a binding, in order.
    pub fn compile(objects: &[Value]) -> Result<Self, EvaluateError> {
        let unsupported = |policy, what: &str| EvaluateError::Unsupported {
            policy,
            what: what.to_string(),
        };
        bound::policies(objects, &bound::MUTATING, unsupported)
            .map(|b| Compiled::new(b?))
            .collect::<Result<_, _>>()
            .map(Self)
    }

    /// Mutates `req` as the API server does: matchConstraints (operations;
    /// every exported policy matches all groups and resources, never
    /// subresources), matchConditions (all must be true; an error is a
    /// failure), then each mutation in order, each on the object the one
    /// before left. A failure skips the rest of that policy's mutation
    /// under `failurePolicy: Ignore` and rejects the request under `Fail`.
    pub fn mutate(&self, req: &Request) -> Result<Mutated, EvaluateError> {
        let mut out = Mutated {
            object: None,
            ignored: Vec::new(),
        };
        let op = Operation::from(&req.operation);
        if !matches!(op, Operation::Create | Operation::Update)
            || req.sub_resource.as_deref().is_some_and(|s| !s.is_empty())
        {
            return Ok(out);
        }
        let (Some(original), old) = crate::admission::review::objects(req) else {
            return Ok(out);
        };
        let request = request_json(req);
        let mut current = original.clone();
        for p in &self.0 {
            if !p.matching.operation(op) {
                continue;
            }
            if let Err(reason) = p.run(&mut current, old, &request) {
                if p.fail {
                    return Err(EvaluateError::Failed {
                        policy: p.name.clone(),
                        reason,
                    });
                }
                out.ignored.push(format!("{}: {reason}", p.name));
            }
        }
        if &current != original {
            out.object = Some(current);
        }
        Ok(out)
    }
}

impl Compiled {
    /// A bound policy's mutations, compiled.
    fn new(b: Bound<'_>) -> Result<Self, EvaluateError> {
        let mut mutations = Vec::new();
        for (i, m) in b.spec["mutations"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            let what = format!("mutations[{i}]");
            mutations.push(match m["patchType"].as_str() {
                Some("JSONPatch") => Patch::Json(
                    b.compile(&what, m["jsonPatch"]["expression"].as_str().unwrap_or(""))?,
                ),
                Some("ApplyConfiguration") => Patch::Apply(b.compile(
                    &what,
                    m["applyConfiguration"]["expression"].as_str().unwrap_or(""),
                )?),
                other => {
                    return Err(EvaluateError::Unsupported {
                        policy: b.name,
                        what: format!("{what} with patchType {other:?}"),
                    })
                }
            });
        }
        Ok(Self {
            fail: b.spec["failurePolicy"].as_str() != Some("Ignore"),
            name: b.name,
            matching: b.matching,
            mutations,
        })
    }

    /// Runs this policy on `current`; a failure leaves what the mutations
    /// before it did.
    fn run(&self, current: &mut Value, old: Option<&Value>, request: &Value) -> Result<(), String> {
        if !self
            .matching
            .conditions(&bound::scope(Some(current), old, request))?
        {
            return Ok(());
        }
        for (i, m) in self.mutations.iter().enumerate() {
            let next = {
                let scope = bound::scope(Some(current), old, request);
                match m {
                    Patch::Json(program) => {
                        let ops = program
                            .eval_json(&scope)
                            .map_err(|e| format!("mutations[{i}] failed: {e}"))?;
                        let patch: json_patch::Patch = serde_json::from_value(ops)
                            .map_err(|e| format!("mutations[{i}] is not a JSON Patch: {e}"))?;
                        let mut next = current.clone();
                        match json_patch::patch(&mut next, &patch) {
                            Ok(()) => next,
                            // A failed test operation leaves the object as it was.
                            Err(e) if matches!(e.kind, json_patch::PatchErrorKind::TestFailed) => {
                                current.clone()
                            }
                            Err(e) => return Err(format!("mutations[{i}]: {e}")),
                        }
                    }
                    Patch::Apply(program) => {
                        let config = program
                            .eval_json(&scope)
                            .map_err(|e| format!("mutations[{i}] failed: {e}"))?;
                        let mut next = current.clone();
                        crate::admission::cel::apply_configuration(&mut next, &config);
                        next
                    }
                }
            };
            *current = next;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::review::RequestBuilder;
    use serde_json::json;

    fn policy(failure: &str, mutations: Value) -> Vec<Value> {
        vec![
            json!({"kind": "MutatingAdmissionPolicy", "metadata": {"name": "p"},
                   "spec": {"failurePolicy": failure,
                            "matchConstraints": {"resourceRules": [{"operations": ["CREATE"]}]},
                            "mutations": mutations}}),
            json!({"kind": "MutatingAdmissionPolicyBinding", "metadata": {"name": "p"},
                   "spec": {"policyName": "p"}}),
        ]
    }

    fn req() -> Request {
        RequestBuilder::create(json!({"apiVersion": "example.org/v1", "kind": "Widget",
                                      "metadata": {"name": "w"}, "spec": {"a": 1}}))
        .build()
    }

    #[test]
    fn mutations_run_in_order_each_on_the_last_ones_object() {
        let p = policy(
            "Fail",
            json!([
                {"patchType": "ApplyConfiguration",
                 "applyConfiguration": {"expression": "Object{spec: Object.spec{b: 2}}"}},
                {"patchType": "JSONPatch",
                 "jsonPatch": {"expression": "[JSONPatch{op: 'add', path: '/spec/c', value: object.spec.b + 1}]"}},
                {"patchType": "JSONPatch",
                 "jsonPatch": {"expression": "[JSONPatch{op: 'test', path: '/spec/a', value: 9}, JSONPatch{op: 'remove', path: '/spec/a'}]"}},
            ]),
        );
        let out = Policies::compile(&p).unwrap().mutate(&req()).unwrap();
        assert_eq!(out.object.unwrap()["spec"], json!({"a": 1, "b": 2, "c": 3}));
    }

    #[test]
    fn a_failure_rejects_under_fail_and_is_reported_under_ignore() {
        let broken = json!([{"patchType": "JSONPatch",
                             "jsonPatch": {"expression": "[JSONPatch{op: 'add', path: '/spec/x/y', value: 1}]"}}]);
        let e = Policies::compile(&policy("Fail", broken.clone()))
            .unwrap()
            .mutate(&req())
            .unwrap_err();
        assert!(
            e.to_string().starts_with("failed to apply p: mutations[0]"),
            "{e}"
        );
        let out = Policies::compile(&policy("Ignore", broken))
            .unwrap()
            .mutate(&req())
            .unwrap();
        assert_eq!(out.object, None);
        assert_eq!(out.ignored.len(), 1, "{:?}", out.ignored);
    }

    #[test]
    fn unbound_policies_do_nothing_and_unknown_patch_types_are_refused() {
        let mut p = policy(
            "Fail",
            json!([{"patchType": "JSONPatch", "jsonPatch": {"expression": "[JSONPatch{op: 'add', path: '/spec/b', value: 1}]"}}]),
        );
        p.pop();
        assert_eq!(
            Policies::compile(&p)
                .unwrap()
                .mutate(&req())
                .unwrap()
                .object,
            None
        );
        let p = policy("Fail", json!([{"patchType": "StrategicMerge"}]));
        assert!(matches!(
            Policies::compile(&p),
            Err(EvaluateError::Unsupported { .. })
        ));
    }
}
