//! `x-kubernetes-validations`: every rule at and below a node, with `self`
//! bound there and `oldSelf` for transition rules.

use serde_json::{Map, Value};

use crate::admission::cel::Scope;

use super::super::errors::{go_value, FieldError, SchemaPath};
use super::{Schema, ValidationRule};

impl Schema {
    /// Evaluates every rule at and below this node. `old` is the
    /// correlated old value, for transition rules.
    pub(crate) fn validate_rules(
        &self,
        v: &Value,
        old: Option<&Value>,
        path: &SchemaPath,
        root: bool,
        errors: &mut Vec<FieldError>,
    ) {
        if v.is_null() {
            return;
        }
        if !self.rules.is_empty() {
            // At the root, `self.metadata` holds only name and generateName.
            let (this, previous);
            let (v_ref, old_ref) = if root {
                this = root_view(v);
                previous = old.map(root_view);
                (&this, previous.as_ref())
            } else {
                (v, old)
            };
            // CEL reads escaped property names (`__namespace__`).
            let (escaped, escaped_old);
            let (v_ref, old_ref) = if self.escapes {
                escaped = self.escaped(v_ref);
                escaped_old = old_ref.map(|o| self.escaped(o));
                (&escaped, escaped_old.as_ref())
            } else {
                (v_ref, old_ref)
            };
            for r in &self.rules {
                self.run_rule(r, v_ref, old_ref, path, errors);
            }
        }
        match v {
            Value::Object(map) => {
                for (k, x) in map {
                    if root && k == "metadata" {
                        continue;
                    }
                    // Kubernetes names map entries by key, fields by name.
                    let (s, at) = match self.properties.get(k) {
                        Some(s) => (Some(s), path.child(k)),
                        None => (self.additional.as_deref(), path.key(k)),
                    };
                    if let Some(s) = s {
                        s.validate_rules(x, old.and_then(|o| o.get(k)), &at, false, errors);
                    }
                }
            }
            Value::Array(items) => {
                if let Some(s) = &self.items {
                    for (i, x) in items.iter().enumerate() {
                        let o = old.and_then(|o| self.correlate(x, o));
                        s.validate_rules(x, o, &path.index(i), false, errors);
                    }
                }
            }
            _ => {}
        }
    }

    /// `v` with every schema property renamed as CEL reads it; properties
    /// whose names cannot be escaped are left out, as Kubernetes hides them.
    pub(super) fn escaped(&self, v: &Value) -> Value {
        match v {
            Value::Object(map) if !self.escapes => Value::Object(map.clone()),
            Value::Object(map) => {
                let mut out = Map::new();
                for (k, x) in map {
                    if let Some(p) = self.properties.get(k) {
                        if let Some(name) = crate::admission::cel::escape_property(k) {
                            out.insert(name, p.escaped(x));
                        }
                    } else if let Some(a) = &self.additional {
                        // Map keys are data, not property names.
                        out.insert(k.clone(), a.escaped(x));
                    } else {
                        out.insert(k.clone(), x.clone());
                    }
                }
                Value::Object(out)
            }
            Value::Array(items) => match &self.items {
                Some(s) if s.escapes => Value::Array(items.iter().map(|x| s.escaped(x)).collect()),
                _ => v.clone(),
            },
            _ => v.clone(),
        }
    }

    /// keys) correlate, as in Kubernetes.
    pub(super) fn correlate<'a>(&self, item: &Value, old: &'a Value) -> Option<&'a Value> {
        if self.list_map_keys.is_empty() {
            return None;
        }
        old.as_array()?
            .iter()
            .find(|o| self.list_map_keys.iter().all(|k| o.get(k) == item.get(k)))
    }

    pub(super) fn run_rule(
        &self,
        r: &ValidationRule,
        v: &Value,
        old: Option<&Value>,
        path: &SchemaPath,
        errors: &mut Vec<FieldError>,
    ) {
        // Compile errors are reported when the CRD is looked up.
        let Ok(program) = &r.program else {
            return;
        };
        // A transition rule is not evaluated without an old value.
        if program.uses_old_self() && old.is_none() && !r.optional_old_self {
            return;
        }
        // `self` is bound at this node; only what the program reads of it
        // is converted.
        let bind = |reads| {
            let mut scope = Scope::reading(reads);
            scope.bind("self", Some(v));
            if program.uses_old_self() {
                if r.optional_old_self {
                    scope.bind_optional("oldSelf", old);
                } else {
                    scope.bind("oldSelf", old);
                }
            }
            scope
        };
        let scope = bind(program.reads());
        let at = match &r.field_path {
            Some(fp) => path.join_field_path(fp),
            None => path.clone(),
        };
        match program.eval_bool(&scope) {
            Ok(true) => {}
            Ok(false) => {
                let mp = r.message_expression.as_ref().and_then(|m| m.as_ref().ok());
                // The message expression reads fields of its own: a scope
                // for it, built only when the rule fails.
                let message_scope = mp.map(|m| bind(m.reads()));
                let msg = crate::admission::cel::failure_message(
                    &r.rule,
                    r.message.as_deref(),
                    mp,
                    message_scope.as_ref().unwrap_or(&scope),
                );
                // What the error shows of the value judged.
                let shown = if !r.error_shows_value {
                    Some(format!("{:?}", self.type_name()))
                } else if matches!(self.type_name(), "object" | "array") {
                    None
                } else {
                    Some(go_value(v))
                };
                errors.push(FieldError::rule(&at, shown, r.reason.as_deref(), msg));
            }
            Err(e) => errors.push(FieldError::invalid(
                &at,
                self.type_name(),
                format!("{e} evaluating rule: {}", r.rule.trim()),
            )),
        }
    }
}

/// The root object as root-level rules see it.
fn root_view(v: &Value) -> Value {
    let mut out = v.clone();
    if let Some(meta) = out.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.retain(|k, _| k == "name" || k == "generateName");
    }
    out
}
