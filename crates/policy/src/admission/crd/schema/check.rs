//! Schema validation: types, `enum`, `required`, value limits, list types
//! and embedded resources, pruning unknown fields as it goes.

use serde_json::{Map, Value};

use super::super::errors::{FieldError, SchemaPath};
use super::{formats, is_integer, json_type, Schema};

impl Schema {
    /// Checks types, enums and required fields, and prunes unknown fields:
    /// `strict` reports them too, as strict field validation does for what
    /// a client sends (fields a webhook adds are pruned silently).
    pub(crate) fn check(
        &self,
        v: &mut Value,
        path: &SchemaPath,
        root: bool,
        strict: bool,
        errors: &mut Vec<FieldError>,
    ) {
        if v.is_null() {
            let untyped_any = self.ty.is_none() && self.preserve_unknown;
            if !(self.nullable || untyped_any) {
                errors.push(FieldError::type_error(path, "null", self.type_name()));
            }
            return;
        }
        if !self.type_matches(v) {
            errors.push(FieldError::type_error(path, json_type(v), self.type_name()));
            return;
        }
        self.check_limits(v, path, errors);
        if let Some(allowed) = &self.enumeration {
            if !allowed.iter().any(|a| a == v) {
                errors.push(FieldError::not_supported(path, v, allowed));
            }
        }
        match v {
            Value::Object(map) => self.check_object(map, path, root, strict, errors),
            Value::Array(items) => {
                if let Some(s) = &self.items {
                    for (i, x) in items.iter_mut().enumerate() {
                        s.check(x, &path.index(i), false, strict, errors);
                    }
                }
                self.check_list_type(items, path, errors);
            }
            _ => {}
        }
    }

    /// Lengths, bounds, sizes, `pattern` and `format`, worded as
    /// kube-openapi's validator and the API server's conversion of it.
    pub(super) fn check_limits(&self, v: &Value, path: &SchemaPath, errors: &mut Vec<FieldError>) {
        let l = &self.limits;
        let body = path.in_body();
        let inv = |detail: String| FieldError::invalid_value(path, v, detail);
        match v {
            Value::String(s) => {
                // Lengths count characters, as Go's utf8.RuneCountInString.
                let n = s.chars().count() as u64;
                if let Some(max) = l.max_length.filter(|m| n > *m) {
                    errors.push(FieldError::too_long(path, max));
                    return;
                }
                if let Some(min) = l.min_length.filter(|m| n < *m) {
                    errors.push(inv(format!("{body} should be at least {min} chars long")));
                }
                if let Some((src, Ok(re))) = &l.pattern {
                    if !re.is_match(s) {
                        errors.push(inv(format!("{body} should match '{src}'")));
                    }
                }
                if let Some(fmt) = &l.format {
                    if formats::known(fmt) == Some(true) && !formats::valid(fmt, s) {
                        errors.push(inv(format!("{body} must be of type {fmt}: {s:?}")));
                    }
                }
            }
            Value::Number(n) => {
                let x = n.as_f64().unwrap_or(0.0);
                if let Some(max) = l.maximum {
                    if x > max || (l.exclusive_maximum && x == max) {
                        let how = if l.exclusive_maximum {
                            ""
                        } else {
                            " or equal to"
                        };
                        errors.push(inv(format!("{body} should be less than{how} {max}")));
                    }
                }
                if let Some(min) = l.minimum {
                    if x < min || (l.exclusive_minimum && x == min) {
                        let how = if l.exclusive_minimum {
                            ""
                        } else {
                            " or equal to"
                        };
                        errors.push(inv(format!("{body} should be greater than{how} {min}")));
                    }
                }
                if let Some(m) = l.multiple_of.filter(|m| *m > 0.0) {
                    if (x / m).fract() != 0.0 {
                        errors.push(inv(format!("{body} should be a multiple of {m}")));
                    }
                }
            }
            Value::Array(items) => {
                let n = items.len() as u64;
                if let Some(max) = l.max_items.filter(|m| n > *m) {
                    errors.push(FieldError::too_many(path, n, max, "items"));
                    return;
                }
                if let Some(min) = l.min_items.filter(|m| n < *m) {
                    errors.push(inv(format!("{body} should have at least {min} items")));
                }
            }
            Value::Object(map) => {
                let n = map.len() as u64;
                if let Some(max) = l.max_properties.filter(|m| n > *m) {
                    errors.push(FieldError::too_many(path, n, max, "properties"));
                    return;
                }
                if let Some(min) = l.min_properties.filter(|m| n < *m) {
                    errors.push(inv(format!("{body} should have at least {min} properties")));
                }
            }
            _ => {}
        }
    }

    /// `x-kubernetes-list-type: set` items and `map` keys are unique; each
    /// repeat is a `Duplicate value`, as `ValidateListSetsAndMaps` says.
    pub(super) fn check_list_type(
        &self,
        items: &[Value],
        path: &SchemaPath,
        errors: &mut Vec<FieldError>,
    ) {
        match self.list_type.as_deref() {
            Some("set") => {
                for (i, x) in items.iter().enumerate() {
                    if items[..i].contains(x) {
                        errors.push(FieldError::duplicate(&path.index(i), x));
                    }
                }
            }
            Some("map") if !self.list_map_keys.is_empty() => {
                let key = |x: &Value| -> Value {
                    let mut m = Map::new();
                    for k in &self.list_map_keys {
                        // A missing key was defaulted or is reported as required.
                        m.insert(k.clone(), x.get(k).cloned().unwrap_or(Value::Null));
                    }
                    Value::Object(m)
                };
                let keys: Vec<Value> = items.iter().map(key).collect();
                for (i, k) in keys.iter().enumerate() {
                    if keys[..i].contains(k) {
                        errors.push(FieldError::duplicate(&path.index(i), k));
                    }
                }
            }
            _ => {}
        }
    }

    pub(super) fn check_object(
        &self,
        map: &mut Map<String, Value>,
        path: &SchemaPath,
        root: bool,
        strict: bool,
        errors: &mut Vec<FieldError>,
    ) {
        for r in &self.required {
            if !map.contains_key(r) {
                errors.push(FieldError::required(&path.child(r)));
            }
        }
        if self.embedded && !root {
            embedded_type(map, path, errors);
        }
        let mut unknown = Vec::new();
        for (k, x) in map.iter_mut() {
            let meta =
                (root || self.embedded) && matches!(k.as_str(), "apiVersion" | "kind" | "metadata");
            // The root's ObjectMeta is validated apart (crd::meta).
            if meta && k == "metadata" {
                if !root {
                    errors.extend(crate::admission::crd::meta::validate_embedded(
                        x,
                        &path.child("metadata"),
                    ));
                }
                continue;
            }
            match self.child(k) {
                Some(s) => s.check(x, &path.child(k), false, strict, errors),
                None if meta || self.preserve_unknown || self.additional_any => {}
                None => unknown.push(k.clone()),
            }
        }
        for k in unknown {
            if strict {
                errors.push(FieldError::unknown(&path.child(&k)));
            }
            map.remove(&k);
        }
    }

    pub(super) fn type_matches(&self, v: &Value) -> bool {
        if self.int_or_string {
            return v.is_string() || is_integer(v);
        }
        match self.ty.as_deref() {
            None | Some("") => true,
            Some("object") => v.is_object(),
            Some("array") => v.is_array(),
            Some("string") => v.is_string(),
            Some("integer") => is_integer(v),
            Some("number") => v.is_number(),
            Some("boolean") => v.is_boolean(),
            Some(_) => true,
        }
    }
}

/// What the API server requires of an object embedded with
/// `x-kubernetes-embedded-resource`: an apiVersion that parses as
/// `[group/]version` and a kind that is a DNS-1035 label in any case.
fn embedded_type(map: &Map<String, Value>, path: &SchemaPath, errors: &mut Vec<FieldError>) {
    for f in ["apiVersion", "kind"] {
        let at = path.child(f);
        match map.get(f) {
            None => errors.push(FieldError {
                path: at.to_string(),
                kind: crate::admission::crd::FieldErrorKind::Required(Some(
                    "must not be empty".into(),
                )),
            }),
            Some(Value::String(v)) if v.is_empty() => errors.push(FieldError::invalid_value(
                &at,
                &Value::String(v.clone()),
                "must not be empty".into(),
            )),
            Some(Value::String(v)) if f == "apiVersion" => {
                if v.matches('/').count() > 1 {
                    errors.push(FieldError::invalid_value(
                        &at,
                        &Value::String(v.clone()),
                        format!("unexpected GroupVersion string: {v}"),
                    ));
                }
            }
            Some(Value::String(v)) => {
                let errs = crate::admission::crd::meta::dns1035_label(&v.to_lowercase());
                if !errs.is_empty() {
                    errors.push(FieldError::invalid_value(
                        &at,
                        &Value::String(v.clone()),
                        format!(
                            "may have mixed case, but should otherwise match: {}",
                            errs.join(",")
                        ),
                    ));
                }
            }
            Some(other) => errors.push(FieldError::invalid_value(
                &at,
                other,
                "must be a string".into(),
            )),
        }
    }
}
