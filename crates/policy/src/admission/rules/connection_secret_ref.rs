use serde_json::Value;

use super::{Rule, RuleContext, CU};
use crate::admission::model::{Action, Violation};

/// writeConnectionSecretToRef needs a name, and a namespace exactly when
/// the MR is cluster-scoped.
pub(super) struct ConnectionSecretRef;

fn non_empty(v: Option<&Value>) -> bool {
    v.and_then(Value::as_str).is_some_and(|s| !s.is_empty())
}

impl Rule for ConnectionSecretRef {
    fn name(&self) -> &'static str {
        "connection-secret-ref"
    }
    fn operations(&self) -> &'static [crate::admission::model::Operation] {
        CU
    }
    fn default_action(&self) -> Action {
        Action::Deny
    }
    fn summary(&self) -> &'static str {
        "`spec.writeConnectionSecretToRef` needs a non-empty name, and a namespace exactly when the MR is cluster-scoped, or the provider cannot write the Secret"
    }
    fn fix(&self) -> &'static str {
        "Set `name`, plus `namespace` on a cluster-scoped MR only"
    }
    fn check(&self, ctx: &RuleContext<'_>) -> Vec<Violation> {
        let Some(r) = ctx.mr().spec("writeConnectionSecretToRef") else {
            return vec![];
        };
        let Some(obj) = r.as_object() else {
            return vec![Violation::new(
                "spec.writeConnectionSecretToRef must be an object with a name",
            )
            .fix("write it as {name: my-secret}")];
        };
        let mut out = Vec::new();
        if !non_empty(obj.get("name")) {
            out.push(
                Violation::new("spec.writeConnectionSecretToRef.name is missing or empty")
                    .fix("set spec.writeConnectionSecretToRef.name"),
            );
        }
        let ns = obj.get("namespace").filter(|v| !v.is_null());
        if ctx.namespaced() {
            if ns.is_some() {
                out.push(Violation::new("spec.writeConnectionSecretToRef.namespace is set on a namespaced MR; its secret always goes to the MR's namespace")
                    .fix("remove spec.writeConnectionSecretToRef.namespace"));
            }
        } else if !non_empty(ns) {
            out.push(
                Violation::new(
                    "spec.writeConnectionSecretToRef.namespace is missing on a cluster-scoped MR",
                )
                .fix("set spec.writeConnectionSecretToRef.namespace, e.g. crossplane-system"),
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::rules::testing::*;
    use serde_json::json;

    fn r(v: Value) -> Value {
        mr(json!({"writeConnectionSecretToRef": v}))
    }

    #[test]
    fn cluster_scoped_needs_name_and_namespace() {
        assert!(Case::create(r(json!({"name": "s", "namespace": "n"})))
            .check(&ConnectionSecretRef)
            .is_empty());
        assert_eq!(
            Case::create(r(json!({"name": "s"})))
                .check(&ConnectionSecretRef)
                .len(),
            1
        );
        assert_eq!(
            Case::create(r(json!({"namespace": "n"})))
                .check(&ConnectionSecretRef)
                .len(),
            1
        );
        assert_eq!(
            Case::create(r(json!({"name": "", "namespace": ""})))
                .check(&ConnectionSecretRef)
                .len(),
            2
        );
        assert_eq!(
            Case::create(r(json!("s")))
                .check(&ConnectionSecretRef)
                .len(),
            1
        );
    }

    #[test]
    fn namespaced_needs_name_and_no_namespace() {
        assert!(Case::create(r(json!({"name": "s"})))
            .namespaced("a")
            .check(&ConnectionSecretRef)
            .is_empty());
        let v = Case::create(r(json!({"name": "s", "namespace": "b"})))
            .namespaced("a")
            .check(&ConnectionSecretRef);
        assert!(v[0].message.contains("namespaced MR"));
    }

    #[test]
    fn absent_is_fine() {
        assert!(Case::create(mr(json!({})))
            .check(&ConnectionSecretRef)
            .is_empty());
    }
}
