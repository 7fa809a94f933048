//! The API server's admission chain, offline: what `mrguard check` runs on
//! each manifest. With a CRD it does what the API server does around the
//! webhooks: schema defaults before mutation (and again after it, as the API
//! server re-defaults a patched object), then pruning, the schema and the
//! `x-kubernetes-validations` rules after it.

use serde_json::Value;

use crate::admission::crd::{CrdError, CrdVersion};
use crate::admission::decider::{self, Decider};
use crate::admission::model::Operation;
use crate::admission::review::{self, RequestBuilder};

/// Why a manifest could not be judged.
#[derive(Debug, thiserror::Error)]
pub enum ChainError {
    /// The mutating webhook's patch did not encode as JSON.
    #[error("failed to encode the mutating webhook's patch: {0}")]
    Patch(#[source] serde_json::Error),
    /// The CRD given cannot judge the object (a schema mrguard does not
    /// support).
    #[error(transparent)]
    Crd(#[from] CrdError),
}

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
    pub findings: Vec<crate::admission::model::Finding>,
    /// What the API server would reject, given a CRD (kubectl's wording).
    pub invalid: Option<String>,
    /// Why something that a live MR would be refused was allowed here, so
    /// that an allowed check is not read as a promise.
    pub notes: Vec<String>,
}

/// Rules that judge only MRs that exist: on an old object that was never
/// created they allow what they would deny on a live MR.
const ONCE_CREATED: [&str; 4] = [
    "immutable-field",
    "documented-immutable-field",
    "external-name-change",
    "init-provider-change",
];

/// On UPDATE from an old object that is not created yet, what the rules of
/// [`ONCE_CREATED`] would say once it is: the same request judged again
/// with the old object marked created.
fn not_created_notes(
    decider: &Decider<'_>,
    new: &Value,
    old: Option<&Value>,
    username: &str,
    found: &[crate::admission::model::Finding],
) -> Vec<String> {
    let Some(old) = old else { return vec![] };
    if !crate::admission::mr::is_managed(old) || crate::admission::mr::Mr(old).is_created() {
        return vec![];
    }
    let mut created = old.clone();
    let Some(meta) = created.get_mut("metadata").and_then(Value::as_object_mut) else {
        return vec![];
    };
    let annotations = meta
        .entry("annotations")
        .or_insert_with(|| Value::Object(Default::default()));
    let Some(annotations) = annotations.as_object_mut() else {
        return vec![];
    };
    annotations.insert(
        crate::admission::mr::CREATE_SUCCEEDED.into(),
        Value::from("1970-01-01T00:00:00Z"),
    );
    let d = decider.validate(&request(
        Operation::Update,
        Some(new),
        Some(&created),
        username,
    ));
    d.findings
        .iter()
        .filter(|f| ONCE_CREATED.contains(&f.rule.as_ref()))
        .filter(|f| !found.iter().any(|g| g.rule == f.rule && g.message == f.message))
        .map(|f| {
            format!(
                "allowed only because the old object is not created yet (no {} annotation, no Ready condition); \
                 on an MR that exists, {} would {}: {}",
                crate::admission::mr::CREATE_SUCCEEDED,
                f.rule,
                if f.action == crate::admission::model::Action::Deny { "deny this" } else { "warn" },
                f.message
            )
        })
        .collect()
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

impl Decider<'_> {
    /// `mrguard check` on one manifest: mutates then validates it, as the
    /// API server chains the webhooks; with `crd`, also what the API server
    /// does with the object's CRD. On DELETE only validation runs, on the
    /// object as the old one.
    pub fn judge(
        &self,
        op: Operation,
        object: &Value,
        old: Option<&Value>,
        username: &str,
        crd: Option<&CrdVersion>,
    ) -> Result<Judged, ChainError> {
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
            let d = self.mutate(&request(op, Some(object), old, username));
            warnings.extend(d.response.warnings.clone().unwrap_or_default());
            if let Some(m) = d.mutated {
                patch = Some(
                    serde_json::to_value(decider::patch::build(object, &m))
                        .map_err(ChainError::Patch)?,
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
        let d = self.validate(&req);
        warnings.extend(d.response.warnings.clone().unwrap_or_default());
        let denial = (!d.response.allowed).then(|| d.response.result.message.clone());
        let mut notes = match op {
            Operation::Update => not_created_notes(self, &current, old, username, &d.findings),
            _ => vec![],
        };
        // What an older API server would not enforce, judged on what was sent.
        if let Some(c) = crd {
            notes.extend(c.notes(object));
        }
        let findings = d.findings;
        let invalid = match crd {
            None => None,
            Some(c) => {
                // Strict field validation judges what the client sent.
                let errors = c.admit(object, &current, old)?;
                let (_, kind, _, name) = identity(&current);
                (!errors.is_empty()).then(|| crate::admission::crd::render(&kind, &name, &errors))
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
            notes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::config::Config;
    use serde_json::json;

    fn judge(
        op: Operation,
        object: &Value,
        old: Option<&Value>,
        username: &str,
        config: &Config,
        crd: Option<&CrdVersion>,
    ) -> Result<Judged, ChainError> {
        Decider::offline(config, jiff::Timestamp::now()).judge(op, object, old, username, crd)
    }

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
    fn an_immutable_change_before_creation_is_allowed_with_a_note() {
        let cfg = Config::builtin();
        let old = json!({"apiVersion": "s3.aws.upbound.io/v1beta1", "kind": "Bucket", "metadata": {"name": "b"}, "spec": {"forProvider": {"region": "us-east-1"}}});
        let mut new = old.clone();
        new["spec"]["forProvider"]["region"] = json!("eu-west-1");
        let j = judge(Operation::Update, &new, Some(&old), "", &cfg, None).unwrap();
        assert!(j.denial.is_none());
        assert_eq!(j.notes.len(), 1, "{:?}", j.notes);
        assert!(j.notes[0].contains("not created yet"), "{}", j.notes[0]);
        assert!(
            j.notes[0].contains("immutable-field would deny this"),
            "{}",
            j.notes[0]
        );
        // Once created, the rule denies and there is nothing to explain.
        let mut created = old.clone();
        created["metadata"]["annotations"] =
            json!({"crossplane.io/external-create-succeeded": "2024-01-01T00:00:00Z"});
        let j = judge(Operation::Update, &new, Some(&created), "", &cfg, None).unwrap();
        assert!(j.denial.unwrap().contains("[immutable-field]"));
        assert!(j.notes.is_empty());
        // An unchanged field needs no note.
        let j = judge(Operation::Update, &old, Some(&old), "", &cfg, None).unwrap();
        assert!(j.notes.is_empty());
    }

    #[test]
    fn labels_name_scope() {
        let obj = json!({"apiVersion": "s3.aws.m.upbound.io/v1beta1", "kind": "Bucket", "metadata": {"name": "b", "namespace": "t"}});
        assert_eq!(label(&obj), "Bucket/t/b");
    }
}
