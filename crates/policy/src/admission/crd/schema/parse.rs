//! Reading a schema node from `openAPIV3Schema`, and what an API server
//! of one release keeps of its rules.

use serde_json::Value;

use crate::admission::cel::{CelProgram, CRD_VARS};
use crate::admission::kube_version::{since, KubeVersion};

use super::super::errors::SchemaPath;
use super::{formats, Limits, Schema, Unsupported, ValidationRule};

impl Schema {
    /// Parses a schema node; `at` names it in errors.
    pub(crate) fn parse(v: &Value, at: &str) -> Result<Schema, String> {
        let Some(o) = v.as_object() else {
            return Err(format!("{at}: a schema must be an object"));
        };
        let str_of = |k: &str| o.get(k).and_then(Value::as_str).map(str::to_string);
        let flag = |k: &str| o.get(k).and_then(Value::as_bool).unwrap_or(false);
        let mut s = Schema {
            ty: str_of("type"),
            nullable: flag("nullable"),
            preserve_unknown: flag("x-kubernetes-preserve-unknown-fields"),
            int_or_string: flag("x-kubernetes-int-or-string"),
            embedded: flag("x-kubernetes-embedded-resource"),
            default: o.get("default").cloned(),
            enumeration: o.get("enum").and_then(Value::as_array).cloned(),
            ..Schema::default()
        };
        let u = |k: &str| o.get(k).and_then(Value::as_u64);
        let f = |k: &str| o.get(k).and_then(Value::as_f64);
        s.limits = Limits {
            max_length: u("maxLength"),
            min_length: u("minLength"),
            pattern: str_of("pattern").map(|p| {
                let re = regex::Regex::new(&go_classes(&p)).map_err(|e| e.to_string());
                (p, re)
            }),
            maximum: f("maximum"),
            minimum: f("minimum"),
            exclusive_maximum: flag("exclusiveMaximum"),
            exclusive_minimum: flag("exclusiveMinimum"),
            multiple_of: f("multipleOf"),
            max_items: u("maxItems"),
            min_items: u("minItems"),
            max_properties: u("maxProperties"),
            min_properties: u("minProperties"),
            format: str_of("format"),
        };
        s.list_type = str_of("x-kubernetes-list-type");
        if let Some(req) = o.get("required").and_then(Value::as_array) {
            s.required = req
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect();
        }
        if let Some(keys) = o
            .get("x-kubernetes-list-map-keys")
            .and_then(Value::as_array)
        {
            s.list_map_keys = keys
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect();
        }
        if let Some(props) = o.get("properties").and_then(Value::as_object) {
            for (k, p) in props {
                s.properties.insert(
                    k.clone(),
                    Schema::parse(p, &format!("{at}.properties[{k}]"))?,
                );
            }
        }
        match o.get("additionalProperties") {
            Some(Value::Bool(b)) => s.additional_any = *b,
            Some(p @ Value::Object(_)) => {
                s.additional = Some(Box::new(Schema::parse(
                    p,
                    &format!("{at}.additionalProperties"),
                )?));
            }
            _ => {}
        }
        if let Some(items) = o.get("items") {
            s.items = Some(Box::new(Schema::parse(items, &format!("{at}.items"))?));
        }
        s.escapes = s.properties.iter().any(|(k, p)| {
            p.escapes || crate::admission::cel::escape_property(k).as_deref() != Some(k)
        }) || s.additional.as_ref().is_some_and(|a| a.escapes)
            || s.items.as_ref().is_some_and(|i| i.escapes);
        if let Some(rules) = o.get("x-kubernetes-validations").and_then(Value::as_array) {
            for (i, r) in rules.iter().enumerate() {
                let rule = r
                    .get("rule")
                    .and_then(Value::as_str)
                    .ok_or_else(|| format!("{at}.x-kubernetes-validations[{i}]: rule is missing"))?
                    .to_string();
                let compile =
                    |src: &str| CelProgram::compile_with(src, CRD_VARS).map_err(|e| e.to_string());
                s.rules.push(ValidationRule {
                    program: compile(&rule),
                    message_expression: r
                        .get("messageExpression")
                        .and_then(Value::as_str)
                        .map(compile),
                    message: r.get("message").and_then(Value::as_str).map(str::to_string),
                    reason: r.get("reason").and_then(Value::as_str).map(str::to_string),
                    field_path: r
                        .get("fieldPath")
                        .and_then(Value::as_str)
                        .map(str::to_string),
                    optional_old_self: r
                        .get("optionalOldSelf")
                        .and_then(Value::as_bool)
                        .unwrap_or(false),
                    error_shows_value: true,
                    rule,
                });
            }
        }
        Ok(s)
    }

    /// Drops what an API server of `kube` drops from a CRD when it is
    /// created: the fields of `x-kubernetes-validations` it does not know
    /// yet, and the whole list where it does not enforce the rules. Returns
    /// how many rules were dropped.
    pub(crate) fn as_served_by(&mut self, kube: KubeVersion) -> usize {
        let mut dropped = 0;
        if kube.enforces_validation_rules() {
            for r in &mut self.rules {
                if !kube.at_least(since::MESSAGE_EXPRESSION) {
                    r.message_expression = None;
                }
                if !kube.at_least(since::REASON_AND_FIELD_PATH) {
                    r.reason = None;
                    r.field_path = None;
                }
                if !kube.at_least(since::OPTIONAL_OLD_SELF) {
                    r.optional_old_self = false;
                }
                r.error_shows_value = kube.at_least(since::RULE_ERROR_VALUE);
            }
        } else {
            dropped += self.rules.len();
            self.rules.clear();
        }
        for p in self.properties.values_mut() {
            dropped += p.as_served_by(kube);
        }
        for s in [self.additional.as_deref_mut(), self.items.as_deref_mut()]
            .into_iter()
            .flatten()
        {
            dropped += s.as_served_by(kube);
        }
        dropped
    }

    /// Whether the schema declares a rule anywhere: without one the API
    /// server has no CEL validator for the CRD (`cel.NewValidator` returns
    /// nil), and says nothing of rules left unchecked.
    pub(crate) fn has_rules(&self) -> bool {
        !self.rules.is_empty()
            || self.properties.values().any(Schema::has_rules)
            || [self.additional.as_deref(), self.items.as_deref()]
                .into_iter()
                .flatten()
                .any(Schema::has_rules)
    }

    /// Every rule that did not compile, with where it is declared.
    pub(crate) fn unsupported(&self, path: &SchemaPath, out: &mut Vec<Unsupported>) {
        for r in &self.rules {
            let failed = [Some(&r.program), r.message_expression.as_ref()];
            for e in failed
                .into_iter()
                .flatten()
                .filter_map(|p| p.as_ref().err())
            {
                out.push(Unsupported {
                    path: path.to_string(),
                    rule: r.rule.clone(),
                    reason: e.clone(),
                });
            }
        }
        if let Some((src, Err(e))) = &self.limits.pattern {
            out.push(Unsupported {
                path: path.to_string(),
                rule: format!("pattern: {src}"),
                reason: format!("mrguard's regex engine cannot compile it: {e}"),
            });
        }
        if let Some(fmt) = &self.limits.format {
            if formats::known(fmt) == Some(false) {
                out.push(Unsupported {
                    path: path.to_string(),
                    rule: format!("format: {fmt}"),
                    reason: "the API server checks this format and mrguard does not".into(),
                });
            }
        }
        for (k, p) in &self.properties {
            p.unsupported(&path.child(k), out);
        }
        if let Some(a) = &self.additional {
            a.unsupported(&path.key("*"), out);
        }
        if let Some(i) = &self.items {
            i.unsupported(&path.index_any(), out);
        }
    }
}

/// A Go (RE2) pattern for Rust's regex: Perl classes and word boundaries
/// are ASCII in Go and Unicode in Rust, so they are spelt out as ASCII.
fn go_classes(pattern: &str) -> String {
    let mut out = String::with_capacity(pattern.len());
    let mut chars = pattern.chars().peekable();
    // Inside `[...]`, `\b` is a backspace in Go: left for Rust to refuse.
    let mut in_class = false;
    while let Some(c) = chars.next() {
        if c == '[' && !in_class {
            in_class = true;
            out.push(c);
            // A `]` first (after an optional `^`) is a literal.
            if chars.peek() == Some(&'^') {
                out.push('^');
                chars.next();
            }
            if chars.peek() == Some(&']') {
                out.push(']');
                chars.next();
            }
            continue;
        }
        if c == ']' && in_class {
            in_class = false;
        }
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some(b @ ('b' | 'B')) if in_class => {
                out.push('\\');
                out.push(b);
            }
            Some('d') => out.push_str("[0-9]"),
            Some('D') => out.push_str("[^0-9]"),
            Some('w') => out.push_str("[0-9A-Za-z_]"),
            Some('W') => out.push_str("[^0-9A-Za-z_]"),
            Some('s') => out.push_str("[\\t\\n\\f\\r ]"),
            Some('S') => out.push_str("[^\\t\\n\\f\\r ]"),
            Some('b') => out.push_str("(?-u:\\b)"),
            Some('B') => out.push_str("(?-u:\\B)"),
            Some(other) => {
                out.push('\\');
                out.push(other);
            }
            None => out.push('\\'),
        }
    }
    out
}
