//! The API server's admission chain, offline: what `mrguard check` runs on
//! each manifest. With a CRD it does what the API server does around the
//! webhooks: schema defaults before mutation (and again after it, as the API
//! server re-defaults a patched object), then pruning, the schema and the
//! `x-kubernetes-validations` rules after it.

use serde_json::Value;

use crate::admission;
use crate::config::Config;
use crate::crd::CrdVersion;
use crate::model::Operation;
use crate::review::{self, RequestBuilder};

/// What one manifest came to.
#[derive(Debug)]
pub struct Judged {
    /// `Kind/name`, or `Kind/namespace/name`.
    pub label: String,
    /// The object after mutation (and CRD defaulting).
    pub object: Value,
    /// The JSON Patch the mutating webhook returned, if it changed anything.
    pub patch: Option<Value>,
    /// Every warning, from mutation then validation.
    pub warnings: Vec<String>,
    /// The validating webhook's denial message.
    pub denial: Option<String>,
    /// The validation findings behind the warnings and the denial.
    pub findings: Vec<crate::model::Finding>,
    /// What the API server would reject, given a CRD (kubectl's wording).
    pub invalid: Option<String>,
}

/// The apiVersion, kind, namespace and name of an object; empty when absent.
pub fn identity(v: &Value) -> (String, String, String, String) {
    let s = |p: &str| {
        v.pointer(p)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    (
        s("/apiVersion"),
        s("/kind"),
        s("/metadata/namespace"),
        s("/metadata/name"),
    )
}

/// `Kind/name`, or `Kind/namespace/name` for a namespaced object.
pub fn label(v: &Value) -> String {
    let (_, kind, ns, name) = identity(v);
    if ns.is_empty() {
        format!("{kind}/{name}")
    } else {
        format!("{kind}/{ns}/{name}")
    }
}

/// The request for one step of the chain; offline checks are dry runs.
fn request(
    op: Operation,
    object: Option<&Value>,
    old: Option<&Value>,
    username: &str,
) -> review::Request {
    let mut b = RequestBuilder::new(op)
        .username(username)
        .uid("mrguard-check")
        .dry_run(true);
    if let Some(o) = object {
        b = b.object(o.clone());
    }
    if let Some(o) = old {
        b = b.old_object(o.clone());
    }
    b.build()
}

/// Mutates then validates one object, as the API server chains the
/// webhooks; with `crd`, also what the API server does with the object's
/// CRD. On DELETE only validation runs, on the object as the old one.
pub fn judge(
    op: Operation,
    object: &Value,
    old: Option<&Value>,
    username: &str,
    config: &Config,
    crd: Option<&CrdVersion>,
) -> Result<Judged, String> {
    let label = label(object);
    // The API server does not validate objects being deleted.
    let crd = crd.filter(|_| op != Operation::Delete);
    let defaulted = |v: &Value| {
        let mut v = v.clone();
        if let Some(c) = crd {
            c.apply_defaults(&mut v);
        }
        v
    };
    let (object, old) = (&defaulted(object), old.map(defaulted));
    let old = old.as_ref();
    let (mut current, mut patch, mut warnings) = (object.clone(), None, Vec::new());
    if op != Operation::Delete {
        let d = admission::mutate(&request(op, Some(object), old, username), config);
        warnings.extend(d.response.warnings.clone().unwrap_or_default());
        if let Some(m) = d.mutated {
            patch = Some(
                serde_json::to_value(admission::patch::build(object, &m))
                    .map_err(|e| e.to_string())?,
            );
            current = defaulted(&m);
        }
    }
    if let Some(c) = crd {
        c.prune(&mut current);
    }
    let req = match op {
        Operation::Delete => request(op, None, Some(object), username),
        _ => request(op, Some(&current), old, username),
    };
    let d = admission::validate(&req, config);
    warnings.extend(d.response.warnings.clone().unwrap_or_default());
    let denial = (!d.response.allowed).then(|| d.response.result.message.clone());
    let findings = d.findings;
    let invalid = match crd {
        None => None,
        Some(c) => {
            // Strict field validation judges what the client sent.
            let mut errors = c.unknown_fields(object);
            errors.extend(c.validate(&current, old).map_err(|e| e.to_string())?);
            let (_, kind, _, name) = identity(&current);
            (!errors.is_empty()).then(|| crate::crd::render(&kind, &name, &errors))
        }
    };
    Ok(Judged {
        label,
        object: current,
        patch,
        warnings,
        denial,
        findings,
        invalid,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn judge_defaults_and_denies() {
        let cfg = Config::builtin();
        let obj = json!({"apiVersion": "s3.aws.upbound.io/v1beta1", "kind": "Bucket", "metadata": {"name": "b"}, "spec": {"forProvider": {"region": "us-east-1"}}});
        let j = judge(Operation::Create, &obj, None, "", &cfg, None).unwrap();
        assert_eq!(j.object["spec"]["deletionPolicy"], "Delete");
        assert!(j.denial.is_none());
        let mut bad = obj.clone();
        bad["spec"]["deletionPolicy"] = json!("delete");
        let j = judge(Operation::Create, &bad, None, "", &cfg, None).unwrap();
        assert!(j.denial.unwrap().contains("[deletion-policy]"));
    }

    #[test]
    fn labels_name_scope() {
        let obj = json!({"apiVersion": "s3.aws.m.upbound.io/v1beta1", "kind": "Bucket", "metadata": {"name": "b", "namespace": "t"}});
        assert_eq!(label(&obj), "Bucket/t/b");
    }
}
