//! A CRD version's structural schema: parsed from `openAPIV3Schema`, it
//! applies `default`s and checks an object the way the API server does
//! (types, `enum`, `required`, unknown fields, `x-kubernetes-validations`).

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::cel::{CelProgram, Scope, CRD_VARS};
use crate::kube_version::{since, KubeVersion};

use super::errors::{FieldError, SchemaPath};

/// One `x-kubernetes-validations` entry.
#[derive(Debug, Clone)]
pub(crate) struct ValidationRule {
    pub rule: String,
    pub program: Result<CelProgram, String>,
    pub message: Option<String>,
    pub message_expression: Option<Result<CelProgram, String>>,
    pub reason: Option<String>,
    pub field_path: Option<String>,
    pub optional_old_self: bool,
}

/// A schema node.
#[derive(Debug, Clone, Default)]
pub(crate) struct Schema {
    pub ty: Option<String>,
    pub nullable: bool,
    pub properties: BTreeMap<String, Schema>,
    pub additional: Option<Box<Schema>>,
    /// `additionalProperties: true`, or `false`.
    pub additional_any: bool,
    pub items: Option<Box<Schema>>,
    pub required: Vec<String>,
    pub enumeration: Option<Vec<Value>>,
    pub default: Option<Value>,
    pub preserve_unknown: bool,
    pub int_or_string: bool,
    pub embedded: bool,
    pub list_map_keys: Vec<String>,
    /// `x-kubernetes-list-type`: `set` and `map` lists have no duplicates.
    pub list_type: Option<String>,
    pub limits: Limits,
    pub rules: Vec<ValidationRule>,
    /// Some property at or below this node has a name CEL sees escaped.
    pub escapes: bool,
}

/// The value limits of a schema node (OpenAPI v3 validation keywords).
#[derive(Debug, Clone, Default)]
pub(crate) struct Limits {
    pub max_length: Option<u64>,
    pub min_length: Option<u64>,
    /// The source, and the compiled regex (an error when Rust's regex
    /// syntax cannot read it: the CRD is then unsupported).
    pub pattern: Option<(String, Result<regex::Regex, String>)>,
    pub maximum: Option<f64>,
    pub minimum: Option<f64>,
    pub exclusive_maximum: bool,
    pub exclusive_minimum: bool,
    pub multiple_of: Option<f64>,
    pub max_items: Option<u64>,
    pub min_items: Option<u64>,
    pub max_properties: Option<u64>,
    pub min_properties: Option<u64>,
    pub format: Option<String>,
}

/// A rule the CEL engine cannot run, found when the CRD loads.
#[derive(Debug, Clone, PartialEq)]
pub struct Unsupported {
    /// Where the rule is declared.
    pub path: String,
    /// The rule's expression.
    pub rule: String,
    /// Why it cannot run.
    pub reason: String,
}

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
        s.escapes = s
            .properties
            .iter()
            .any(|(k, p)| p.escapes || crate::cel::escape_property(k).as_deref() != Some(k))
            || s.additional.as_ref().is_some_and(|a| a.escapes)
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

    fn type_name(&self) -> &str {
        self.ty.as_deref().unwrap_or("")
    }

    /// The schema of a map value or list item under `self`, if any.
    fn child(&self, key: &str) -> Option<&Schema> {
        self.properties.get(key).or(self.additional.as_deref())
    }

    // ---------------------------------------------------------------------
    // Defaulting, as the API server's structural defaulting does it.

    /// Fills in `default`s at every level, and drops `null`s the schema does
    /// not allow (they would be pruned before defaulting).
    pub(crate) fn apply_defaults(&self, v: &mut Value) {
        match v {
            Value::Object(map) => {
                for (k, prop) in &self.properties {
                    let is_bad_null = map.get(k).is_some_and(|x| x.is_null() && !prop.nullable);
                    match &prop.default {
                        Some(d) if !map.contains_key(k) || is_bad_null => {
                            map.insert(k.clone(), d.clone());
                        }
                        None if is_bad_null => {
                            map.remove(k);
                        }
                        _ => {}
                    }
                }
                for (k, x) in map.iter_mut() {
                    if let Some(s) = self.child(k) {
                        s.apply_defaults(x);
                    }
                }
            }
            Value::Array(items) => {
                if let Some(s) = &self.items {
                    for x in items {
                        s.apply_defaults(x);
                    }
                }
            }
            _ => {}
        }
    }

    // ---------------------------------------------------------------------
    // Schema validation.

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
    fn check_limits(&self, v: &Value, path: &SchemaPath, errors: &mut Vec<FieldError>) {
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
    fn check_list_type(&self, items: &[Value], path: &SchemaPath, errors: &mut Vec<FieldError>) {
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

    fn check_object(
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
                    errors.extend(super::meta::validate_embedded(x, &path.child("metadata")));
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

    fn type_matches(&self, v: &Value) -> bool {
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

    // ---------------------------------------------------------------------
    // x-kubernetes-validations.

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
    fn escaped(&self, v: &Value) -> Value {
        match v {
            Value::Object(map) if !self.escapes => Value::Object(map.clone()),
            Value::Object(map) => {
                let mut out = Map::new();
                for (k, x) in map {
                    if let Some(p) = self.properties.get(k) {
                        if let Some(name) = crate::cel::escape_property(k) {
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
                            super::meta::unknown_fields(x, out);
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
    fn unknown_under_preserved(&self, v: &Value, path: &str, root: bool, out: &mut Vec<String>) {
        match v {
            Value::Object(map) => {
                for (k, x) in map {
                    if (root || self.embedded)
                        && matches!(k.as_str(), "apiVersion" | "kind" | "metadata")
                    {
                        if root && k == "metadata" {
                            super::meta::unknown_fields(x, out);
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

    /// The old item a list item corresponds to: only map lists (by their
    /// keys) correlate, as in Kubernetes.
    fn correlate<'a>(&self, item: &Value, old: &'a Value) -> Option<&'a Value> {
        if self.list_map_keys.is_empty() {
            return None;
        }
        old.as_array()?
            .iter()
            .find(|o| self.list_map_keys.iter().all(|k| o.get(k) == item.get(k)))
    }

    fn run_rule(
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
                let msg = crate::cel::failure_message(
                    &r.rule,
                    r.message.as_deref(),
                    mp,
                    message_scope.as_ref().unwrap_or(&scope),
                );
                errors.push(FieldError::rule(
                    &at,
                    self.type_name(),
                    r.reason.as_deref(),
                    msg,
                ));
            }
            Err(e) => errors.push(FieldError::invalid(
                &at,
                self.type_name(),
                format!("{e} evaluating rule: {}", r.rule.trim()),
            )),
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

/// What the API server requires of an object embedded with
/// `x-kubernetes-embedded-resource`: an apiVersion that parses as
/// `[group/]version` and a kind that is a DNS-1035 label in any case.
fn embedded_type(map: &Map<String, Value>, path: &SchemaPath, errors: &mut Vec<FieldError>) {
    for f in ["apiVersion", "kind"] {
        let at = path.child(f);
        match map.get(f) {
            None => errors.push(FieldError {
                path: at.to_string(),
                kind: super::errors::FieldErrorKind::Required(Some("must not be empty".into())),
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
                let errs = super::meta::dns1035_label(&v.to_lowercase());
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

fn join_path(path: &str, k: &str) -> String {
    if path.is_empty() {
        k.to_string()
    } else {
        format!("{path}.{k}")
    }
}

fn is_integer(v: &Value) -> bool {
    match v {
        Value::Number(n) => {
            n.is_i64() || n.is_u64() || n.as_f64().is_some_and(|f| f.fract() == 0.0)
        }
        _ => false,
    }
}

pub(super) fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
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

/// String formats: which the API server checks in CRDs, and how.
mod formats {
    use std::sync::LazyLock;

    use regex::Regex;

    static DATE_TIME: LazyLock<Regex> = LazyLock::new(|| {
        // The layouts go-openapi's strfmt accepts: seconds, fractions and
        // the zone may be left out, the zone's colon too.
        Regex::new(r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?([Zz]|[+-]\d{2}:?\d{2})?$")
            .expect("a constant regex")
    });
    static DATE: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"^\d{4}-\d{2}-\d{2}$").expect("a constant regex"));
    static UUID: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"^(?i)[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$")
            .expect("a constant regex")
    });
    static BASE64: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$")
            .expect("a constant regex")
    });

    /// `None`: the API server ignores the format (`int64`, `double`, any
    /// unknown name). `Some(true)`: checked here too. `Some(false)`: the
    /// API server checks it and mrguard cannot, so the CRD is refused.
    pub(super) fn known(fmt: &str) -> Option<bool> {
        match fmt {
            "date-time" | "datetime" | "date" | "byte" | "uuid" | "ipv4" | "ipv6" | "cidr"
            | "password" => Some(true),
            "bsonobjectid" | "uri" | "email" | "hostname" | "mac" | "uuid3" | "uuid4" | "uuid5"
            | "isbn" | "isbn10" | "isbn13" | "creditcard" | "ssn" | "hexcolor" | "rgbcolor"
            | "duration" => Some(false),
            _ => None,
        }
    }

    pub(super) fn valid(fmt: &str, s: &str) -> bool {
        match fmt {
            "date-time" | "datetime" => DATE_TIME.is_match(s),
            "date" => DATE.is_match(s),
            "byte" => BASE64.is_match(s),
            "uuid" => UUID.is_match(s),
            "ipv4" => s.parse::<std::net::Ipv4Addr>().is_ok(),
            "ipv6" => s.parse::<std::net::Ipv6Addr>().is_ok(),
            "cidr" => s.split_once('/').is_some_and(|(ip, bits)| {
                let ip: Result<std::net::IpAddr, _> = ip.parse();
                match (ip, bits.parse::<u8>()) {
                    (Ok(std::net::IpAddr::V4(_)), Ok(b)) => b <= 32,
                    (Ok(std::net::IpAddr::V6(_)), Ok(b)) => b <= 128,
                    _ => false,
                }
            }),
            _ => true,
        }
    }
}
