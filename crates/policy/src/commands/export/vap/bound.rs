//! What the validating and the mutating evaluator share, because the API
//! server runs both kinds of policy alike until one matches: the binding
//! that names a policy, the variables its expressions see, and its
//! matchConstraints' operations and matchConditions.

use serde_json::{json, Value};

use crate::admission::cel::{self, CelProgram, Scope};
use crate::admission::model::Operation;
use crate::admission::review::Request;

/// The admission-time variables of a policy expression.
const VARS: &[&str] = &[
    "object",
    "oldObject",
    "request",
    "params",
    "namespaceObject",
];

/// An expression of a policy does not compile.
#[derive(Debug, thiserror::Error)]
#[error("failed to compile {policy} {what}: {reason}")]
pub struct PolicyCompileError {
    /// The policy.
    pub policy: String,
    /// Which expression.
    pub what: String,
    /// The compiler's message.
    pub reason: String,
}

/// How an evaluator compiles its policies' expressions.
type Compiler = fn(&str, &[&str]) -> Result<CelProgram, cel::CompileError>;

/// A kind of admission policy: the kind of its binding, and how its
/// expressions compile.
pub(crate) struct Kind {
    policy: &'static str,
    binding: &'static str,
    compiler: Compiler,
}

/// ValidatingAdmissionPolicy: the Kubernetes CEL environment.
pub(crate) const VALIDATING: Kind = Kind {
    policy: "ValidatingAdmissionPolicy",
    binding: "ValidatingAdmissionPolicyBinding",
    compiler: CelProgram::compile_with,
};

/// MutatingAdmissionPolicy: that environment with JSONPatch and Object
/// construction.
pub(crate) const MUTATING: Kind = Kind {
    policy: "MutatingAdmissionPolicy",
    binding: "MutatingAdmissionPolicyBinding",
    compiler: CelProgram::compile_mutation,
};

/// When a bound policy applies to a request.
pub(crate) struct Match {
    operations: Vec<String>,
    conditions: Vec<(String, CelProgram)>,
}

impl Match {
    /// `op` is one of the operations of the first resource rule.
    pub(crate) fn operation(&self, op: Operation) -> bool {
        self.operations.iter().any(|o| o == op.as_str() || o == "*")
    }

    /// Every matchCondition holds; Err names the first that failed.
    pub(crate) fn conditions(&self, scope: &Scope<'_>) -> Result<bool, String> {
        for (name, program) in &self.conditions {
            match program.eval_bool(scope) {
                Ok(true) => {}
                Ok(false) => return Ok(false),
                Err(e) => return Err(format!("matchCondition {name} failed: {e}")),
            }
        }
        Ok(true)
    }
}

/// A policy with the first binding that names it, its matchConditions
/// compiled.
pub(crate) struct Bound<'a> {
    pub(crate) name: String,
    pub(crate) policy: &'a Value,
    pub(crate) spec: &'a Value,
    pub(crate) binding: &'a Value,
    pub(crate) matching: Match,
    compiler: Compiler,
}

impl Bound<'_> {
    /// Compiles `src`, one of this policy's expressions, named `what` in
    /// the error.
    pub(crate) fn compile(&self, what: &str, src: &str) -> Result<CelProgram, PolicyCompileError> {
        (self.compiler)(src, VARS).map_err(|e| PolicyCompileError {
            policy: self.name.clone(),
            what: what.to_string(),
            reason: e.to_string(),
        })
    }
}

/// The policies of `kind` in `objects` that a binding names, in order,
/// their matchConditions compiled; one that uses what the evaluators do not
/// model (`variables`, `paramKind`) is an error from `unsupported` (its
/// name, the field), bound or not.
pub(crate) fn policies<'a, E: From<PolicyCompileError>>(
    objects: &'a [Value],
    kind: &'static Kind,
    unsupported: impl Fn(String, &str) -> E + 'a,
) -> impl Iterator<Item = Result<Bound<'a>, E>> + 'a {
    objects
        .iter()
        .filter(move |o| o["kind"] == kind.policy)
        .filter_map(move |policy| {
            let name = policy["metadata"]["name"]
                .as_str()
                .unwrap_or("")
                .to_string();
            let spec = &policy["spec"];
            if let Some(field) = ["variables", "paramKind"]
                .into_iter()
                .find(|f| spec.get(f).is_some())
            {
                return Some(Err(unsupported(name, field)));
            }
            let binding = objects
                .iter()
                .find(|b| b["kind"] == kind.binding && b["spec"]["policyName"] == name.as_str())?;
            let mut bound = Bound {
                name,
                policy,
                spec,
                binding,
                matching: Match {
                    operations: spec["matchConstraints"]["resourceRules"][0]["operations"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|o| o.as_str().map(str::to_string))
                        .collect(),
                    conditions: Vec::new(),
                },
                compiler: kind.compiler,
            };
            for c in spec["matchConditions"].as_array().into_iter().flatten() {
                let cname = c["name"].as_str().unwrap_or("").to_string();
                match bound.compile(
                    &format!("matchCondition {cname}"),
                    c["expression"].as_str().unwrap_or(""),
                ) {
                    Ok(program) => bound.matching.conditions.push((cname, program)),
                    Err(e) => return Some(Err(e.into())),
                }
            }
            Some(Ok(bound))
        })
}

/// The variables of a policy expression: `params` and `namespaceObject`
/// are never set, as the exported policies use neither.
pub(crate) fn scope<'v>(
    object: Option<&'v Value>,
    old: Option<&'v Value>,
    request: &'v Value,
) -> Scope<'v> {
    let mut scope = Scope::new();
    scope.bind("object", object);
    scope.bind("oldObject", old);
    scope.bind("request", Some(request));
    scope.bind("params", None);
    scope.bind("namespaceObject", None);
    scope
}

/// The `request` variable of an admission policy, as the API server binds
/// it: the AdmissionRequest converted to unstructured, where `name`,
/// `namespace`, `subResource`, `userInfo.username` and `userInfo.groups`
/// are `omitempty`. An empty one is absent, and reading it is an error in
/// the API server as here.
pub(crate) fn request_json(req: &Request) -> Value {
    let mut request = json!({
        "kind": {"group": req.kind.group, "version": req.kind.version, "kind": req.kind.kind},
        "resource": {"group": req.resource.group, "version": req.resource.version, "resource": req.resource.resource},
        "operation": Operation::from(&req.operation).as_str(),
        "userInfo": {},
        "dryRun": req.dry_run,
    });
    let text = |s: Option<&str>| s.filter(|s| !s.is_empty()).map(|s| json!(s));
    let groups = req.user_info.groups.as_ref().filter(|g| !g.is_empty());
    for (at, value) in [
        ("/name", text(Some(&req.name))),
        ("/namespace", text(req.namespace.as_deref())),
        ("/subResource", text(req.sub_resource.as_deref())),
        (
            "/userInfo/username",
            text(req.user_info.username.as_deref()),
        ),
        ("/userInfo/groups", groups.map(|g| json!(g))),
    ] {
        if let Some(v) = value {
            let (parent, key) = at.rsplit_once('/').unwrap_or_default();
            if let Some(o) = request.pointer_mut(parent).and_then(Value::as_object_mut) {
                o.insert(key.to_string(), v);
            }
        }
    }
    request
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::review::RequestBuilder;

    #[derive(Debug)]
    enum Error {
        Compile(PolicyCompileError),
        Unsupported(String, String),
    }

    impl From<PolicyCompileError> for Error {
        fn from(e: PolicyCompileError) -> Self {
            Self::Compile(e)
        }
    }

    fn load(objects: &[Value]) -> Vec<Result<Bound<'_>, Error>> {
        policies(objects, &VALIDATING, |p, f| {
            Error::Unsupported(p, f.to_string())
        })
        .collect()
    }

    fn policy(name: &str, spec: Value) -> Value {
        json!({"kind": "ValidatingAdmissionPolicy", "metadata": {"name": name}, "spec": spec})
    }

    fn binding(name: &str) -> Value {
        json!({"kind": "ValidatingAdmissionPolicyBinding", "spec": {"policyName": name}})
    }

    #[test]
    fn only_bound_policies_load_and_an_unsupported_one_fails_bound_or_not() {
        let objects = [
            policy("a", json!({})),
            policy(
                "b",
                json!({"matchConstraints": {"resourceRules": [{"operations": ["UPDATE"]}]}}),
            ),
            binding("b"),
            policy("c", json!({"paramKind": {}})),
        ];
        let loaded = load(&objects);
        assert_eq!(loaded.len(), 2);
        let b = loaded[0].as_ref().unwrap();
        assert_eq!(b.name, "b");
        assert!(b.matching.operation(Operation::Update));
        assert!(!b.matching.operation(Operation::Create));
        assert!(
            matches!(&loaded[1], Err(Error::Unsupported(p, f)) if p == "c" && f == "paramKind"),
            "{:?}",
            loaded[1].as_ref().err()
        );
    }

    #[test]
    fn a_condition_that_does_not_compile_names_the_policy_and_the_condition() {
        let objects = [
            policy(
                "p",
                json!({"matchConditions": [{"name": "c", "expression": "object.("}]}),
            ),
            binding("p"),
        ];
        let Err(Error::Compile(e)) = load(&objects).remove(0) else {
            panic!("the condition compiled");
        };
        assert!(
            e.to_string()
                .starts_with("failed to compile p matchCondition c: "),
            "{e}"
        );
    }

    #[test]
    fn a_false_condition_skips_and_an_error_names_the_condition() {
        let objects = [
            policy(
                "p",
                json!({"matchConditions": [
                    {"name": "named", "expression": "object.metadata.name == 'w'"},
                    {"name": "broken", "expression": "object.spec.missing == 1"},
                ]}),
            ),
            binding("p"),
        ];
        let loaded = load(&objects);
        let b = loaded[0].as_ref().unwrap();
        let run = |name: &str| {
            let req =
                RequestBuilder::create(json!({"metadata": {"name": name}, "spec": {}})).build();
            let request = request_json(&req);
            let (object, old) = crate::admission::review::objects(&req);
            let held = b.matching.conditions(&scope(object, old, &request));
            held
        };
        assert_eq!(run("other"), Ok(false));
        let e = run("w").unwrap_err();
        assert!(e.starts_with("matchCondition broken failed: "), "{e}");
    }
}
