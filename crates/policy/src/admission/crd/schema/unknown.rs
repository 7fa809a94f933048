//! The fields the API server's pruning drops, as strict field validation
//! reports them.

use serde_json::Value;

use super::{join_path, Schema};

impl Schema {
    /// Fields the API server's pruning drops from what a client sent, as
    /// strict field validation reports them: dotted paths, wherever they
    /// are, also inside a value of the wrong type (the keys of an object
    /// given where a list or a string belongs are all unknown).
    pub(crate) fn unknown_fields(
        schema: Option<&Schema>,
        v: &Value,
        path: &str,
        root: bool,
        out: &mut Vec<String>,
    ) {
        if let Some(s) = schema.filter(|s| s.preserve_unknown) {
            s.unknown_under_preserved(v, path, root, out);
            return;
        }
        let join = |k: &str| join_path(path, k);
        match v {
            Value::Object(map) => {
                let Some(s) = schema else {
                    out.extend(map.keys().map(|k| join(k)));
                    return;
                };
                for (k, x) in map {
                    if (root || s.embedded)
                        && matches!(k.as_str(), "apiVersion" | "kind" | "metadata")
                    {
                        if root && k == "metadata" {
                            crate::admission::crd::meta::unknown_fields(x, out);
                        }
                        continue;
                    }
                    match (s.properties.get(k), &s.additional) {
                        (Some(p), _) => Self::unknown_fields(Some(p), x, &join(k), false, out),
                        (None, Some(a)) => Self::unknown_fields(Some(a), x, &join(k), false, out),
                        (None, None) if s.additional_any => {}
                        (None, None) => out.push(join(k)),
                    }
                }
            }
            Value::Array(items) => {
                let item = schema.and_then(|s| s.items.as_deref());
                for (i, x) in items.iter().enumerate() {
                    Self::unknown_fields(item, x, &format!("{path}[{i}]"), false, out);
                }
            }
            _ => {}
        }
    }

    /// Under `x-kubernetes-preserve-unknown-fields`, only the declared
    /// properties are pruned (the API server's `skipPrune`).
    pub(super) fn unknown_under_preserved(
        &self,
        v: &Value,
        path: &str,
        root: bool,
        out: &mut Vec<String>,
    ) {
        match v {
            Value::Object(map) => {
                for (k, x) in map {
                    if (root || self.embedded)
                        && matches!(k.as_str(), "apiVersion" | "kind" | "metadata")
                    {
                        if root && k == "metadata" {
                            crate::admission::crd::meta::unknown_fields(x, out);
                        }
                        continue;
                    }
                    let at = join_path(path, k);
                    if let Some(p) = self.properties.get(k) {
                        Self::unknown_fields(Some(p), x, &at, false, out);
                    } else if let Some(a) = &self.additional {
                        Self::unknown_fields(Some(a), x, &at, false, out);
                    }
                }
            }
            Value::Array(items) => {
                if let Some(s) = &self.items {
                    for (i, x) in items.iter().enumerate() {
                        s.unknown_under_preserved(x, &format!("{path}[{i}]"), false, out);
                    }
                }
            }
            _ => {}
        }
    }
}
