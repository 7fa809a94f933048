//! Field paths and field errors, printed the way the API server words them
//! and kubectl shows them.

use std::fmt;

use serde_json::Value;

/// A field path: `spec.forProvider.tags[team]`, `spec.items[0]`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SchemaPath(Vec<Segment>);

#[derive(Debug, Clone, PartialEq)]
enum Segment {
    Field(String),
    Index(usize),
    IndexAny,
    Key(String),
}

impl SchemaPath {
    /// The object itself.
    pub fn root() -> Self {
        SchemaPath(Vec::new())
    }

    fn with(&self, s: Segment) -> Self {
        let mut p = self.clone();
        p.0.push(s);
        p
    }

    /// A field of this node.
    pub fn child(&self, name: &str) -> Self {
        self.with(Segment::Field(name.to_string()))
    }

    /// An item of this list.
    pub fn index(&self, i: usize) -> Self {
        self.with(Segment::Index(i))
    }

    /// Every item of this list (`[*]`).
    pub fn index_any(&self) -> Self {
        self.with(Segment::IndexAny)
    }

    /// A key of this map.
    pub fn key(&self, k: &str) -> Self {
        self.with(Segment::Key(k.to_string()))
    }

    /// `<path> in body`, or `body` at the root, as kube-openapi words it.
    pub fn in_body(&self) -> String {
        if self.0.is_empty() {
            "body".to_string()
        } else {
            format!("{self} in body")
        }
    }

    /// Appends a rule's `fieldPath` (`.a.b`, `.a['b.c']`, `.a[0]`); a path
    /// it cannot read is appended as one field, so the error still shows it.
    pub fn join_field_path(&self, fp: &str) -> Self {
        let mut out = self.clone();
        let mut rest = fp.trim();
        while !rest.is_empty() {
            if let Some(r) = rest.strip_prefix('.') {
                let end = r.find(['.', '[']).unwrap_or(r.len());
                out.0.push(Segment::Field(r[..end].to_string()));
                rest = &r[end..];
            } else if let Some(r) = rest.strip_prefix("['") {
                let Some(end) = r.find("']") else { break };
                out.0.push(Segment::Field(r[..end].to_string()));
                rest = &r[end + 2..];
            } else if let Some(r) = rest.strip_prefix('[') {
                let Some(end) = r.find(']') else { break };
                match r[..end].parse() {
                    Ok(i) => out.0.push(Segment::Index(i)),
                    Err(_) => out.0.push(Segment::Key(r[..end].to_string())),
                }
                rest = &r[end + 1..];
            } else {
                out.0.push(Segment::Field(rest.to_string()));
                break;
            }
        }
        out
    }
}

impl fmt::Display for SchemaPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("<nil>");
        }
        for (i, s) in self.0.iter().enumerate() {
            match s {
                Segment::Field(n) if i == 0 => f.write_str(n)?,
                Segment::Field(n) => write!(f, ".{n}")?,
                Segment::Index(n) => write!(f, "[{n}]")?,
                Segment::IndexAny => f.write_str("[*]")?,
                Segment::Key(k) => write!(f, "[{k}]")?,
            }
        }
        Ok(())
    }
}

/// One failure, as a `field.Error` of the API server.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldError {
    /// Where, as kubectl prints it (`spec.forProvider.region`).
    pub path: String,
    /// What went wrong.
    pub kind: FieldErrorKind,
}

/// The kinds of `field.Error` the API server reports.
#[derive(Debug, Clone, PartialEq)]
pub enum FieldErrorKind {
    /// A required field is missing (with the rule's message, if a rule said so).
    Required(Option<String>),
    /// A value of the wrong type; it stops the CEL rules from running.
    Type {
        /// The value as given.
        value: String,
        /// `<path> in body must be of type <type>`.
        detail: String,
    },
    /// A value breaks a rule or a format.
    Invalid {
        /// The value as given.
        value: String,
        /// The rule's message.
        detail: String,
    },
    /// A value outside an `enum`.
    NotSupported {
        /// The value as given.
        value: String,
        /// The values the `enum` allows.
        supported: Vec<String>,
    },
    /// A value the schema forbids.
    Forbidden(String),
    /// A duplicate item in a set or map list (the value, as Go prints it).
    Duplicate(String),
    /// A string longer than `maxLength`, or annotations over their limit.
    TooLong(String),
    /// More items or properties than allowed.
    TooMany(String),
    /// Strict field validation: the field is not in the schema.
    Unknown,
}

impl FieldError {
    /// `Required value` at `path`.
    pub fn required(path: &SchemaPath) -> Self {
        FieldError {
            path: path.to_string(),
            kind: FieldErrorKind::Required(None),
        }
    }

    /// `field not declared in schema` at `path`.
    pub fn unknown(path: &SchemaPath) -> Self {
        FieldError {
            path: path.to_string(),
            kind: FieldErrorKind::Unknown,
        }
    }

    /// `Invalid value: "<got>": <path> in body must be of type <want>`.
    pub fn type_error(path: &SchemaPath, got: &str, want: &str) -> Self {
        let body = if path.0.is_empty() {
            "body".to_string()
        } else {
            format!("{path} in body")
        };
        FieldError {
            path: path.to_string(),
            kind: FieldErrorKind::Type {
                value: format!("{got:?}"),
                detail: format!("{body} must be of type {want}: {got:?}"),
            },
        }
    }

    /// `Invalid value` for `v`, printed as Go prints a field error's value.
    pub fn invalid_value(path: &SchemaPath, v: &Value, detail: String) -> Self {
        FieldError {
            path: path.to_string(),
            kind: FieldErrorKind::Invalid {
                value: go_value(v),
                detail,
            },
        }
    }

    /// `Too long: may not be more than <max> bytes`.
    pub fn too_long(path: &SchemaPath, max: u64) -> Self {
        FieldError {
            path: path.to_string(),
            kind: FieldErrorKind::TooLong(format!("may not be more than {max} bytes")),
        }
    }

    /// `Too many: <n>: must have at most <max> items`.
    pub fn too_many(path: &SchemaPath, n: u64, max: u64, what: &str) -> Self {
        FieldError {
            path: path.to_string(),
            kind: FieldErrorKind::TooMany(format!("{n}: must have at most {max} {what}")),
        }
    }

    /// `Duplicate value: <v>`.
    pub fn duplicate(path: &SchemaPath, v: &Value) -> Self {
        FieldError {
            path: path.to_string(),
            kind: FieldErrorKind::Duplicate(go_value(v)),
        }
    }

    /// Errors after which current API servers do not run the CEL rules
    /// (`hasBlockingErr`): type, required, enum and size limits.
    pub fn is_blocking(&self) -> bool {
        matches!(
            self.kind,
            FieldErrorKind::Required(_)
                | FieldErrorKind::Type { .. }
                | FieldErrorKind::NotSupported { .. }
                | FieldErrorKind::TooLong(_)
                | FieldErrorKind::TooMany(_)
        )
    }

    /// An `enum` error of a list item (`a.b[0]`) named at its list
    /// (`a.b`), as older API servers name it.
    pub(crate) fn name_enum_error_at_its_list(&mut self) {
        if !matches!(self.kind, FieldErrorKind::NotSupported { .. }) {
            return;
        }
        let Some((list, index)) = self.path.rsplit_once('[') else {
            return;
        };
        let index = index.strip_suffix(']').unwrap_or("");
        if !index.is_empty() && index.bytes().all(|b| b.is_ascii_digit()) {
            self.path = list.to_string();
        }
    }

    /// `Unsupported value` with the supported values.
    pub fn not_supported(path: &SchemaPath, v: &Value, allowed: &[Value]) -> Self {
        FieldError {
            path: path.to_string(),
            kind: FieldErrorKind::NotSupported {
                value: v.to_string(),
                supported: allowed.iter().map(Value::to_string).collect(),
            },
        }
    }

    /// `Invalid value` of type `ty` with `detail`.
    pub fn invalid(path: &SchemaPath, ty: &str, detail: String) -> Self {
        FieldError {
            path: path.to_string(),
            kind: FieldErrorKind::Invalid {
                value: format!("{ty:?}"),
                detail,
            },
        }
    }

    /// A failed `x-kubernetes-validations` rule, by its `reason`. `shown`
    /// is the value as the error prints it, `None` where the API server
    /// leaves it out (Go's `field.OmitValueType`).
    pub fn rule(
        path: &SchemaPath,
        shown: Option<String>,
        reason: Option<&str>,
        message: String,
    ) -> Self {
        let shown = shown.unwrap_or_default();
        let kind = match reason {
            Some("FieldValueRequired") => FieldErrorKind::Required(Some(message)),
            Some("FieldValueForbidden") => FieldErrorKind::Forbidden(message),
            // A duplicate shows the value and no message.
            Some("FieldValueDuplicate") => FieldErrorKind::Duplicate(shown),
            _ => FieldErrorKind::Invalid {
                value: shown,
                detail: message,
            },
        };
        FieldError {
            path: path.to_string(),
            kind,
        }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = &self.path;
        match &self.kind {
            FieldErrorKind::Required(None) => write!(f, "{p}: Required value"),
            FieldErrorKind::Required(Some(m)) => write!(f, "{p}: Required value: {m}"),
            // An empty value is one the API server leaves out.
            FieldErrorKind::Invalid { value, detail } if value.is_empty() => {
                write!(f, "{p}: Invalid value: {detail}")
            }
            FieldErrorKind::Type { value, detail } | FieldErrorKind::Invalid { value, detail } => {
                write!(f, "{p}: Invalid value: {value}: {detail}")
            }
            FieldErrorKind::NotSupported { value, supported } => {
                write!(
                    f,
                    "{p}: Unsupported value: {value}: supported values: {}",
                    supported.join(", ")
                )
            }
            FieldErrorKind::Forbidden(m) => write!(f, "{p}: Forbidden: {m}"),
            FieldErrorKind::Duplicate(m) if m.is_empty() => write!(f, "{p}: Duplicate value"),
            FieldErrorKind::Duplicate(m) => write!(f, "{p}: Duplicate value: {m}"),
            FieldErrorKind::TooLong(m) => write!(f, "{p}: Too long: {m}"),
            FieldErrorKind::TooMany(m) => write!(f, "{p}: Too many: {m}"),
            FieldErrorKind::Unknown => write!(f, "unknown field {p:?}"),
        }
    }
}

/// A JSON value as Go's field errors print it from 1.34
/// ([`crate::admission::kube_version::since::FIELD_ERROR_JSON_VALUES`]): strings
/// quoted, numbers and booleans bare (a whole float64 as Go's `%v` prints
/// it, `3` not `3.0`), anything else as JSON (`{"name":"x"}`, `null`).
pub(crate) fn go_value(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        Value::Number(n) => match n.as_f64() {
            Some(f) if n.is_f64() && f.fract() == 0.0 && f.abs() < 1e21 => format!("{f:.0}"),
            _ => n.to_string(),
        },
        Value::Bool(_) | Value::Null | Value::Object(_) | Value::Array(_) => v.to_string(),
    }
}

/// A value [`go_value`] printed, as Go printed it before 1.34: a nil as
/// the quoted string `"null"`, a map as `map[string]interface {}{...}`;
/// strings and numbers as they are.
pub(crate) fn legacy_go_value(shown: &str) -> Option<String> {
    match serde_json::from_str::<Value>(shown).ok()? {
        Value::Null => Some("\"null\"".into()),
        Value::Object(m) => {
            let inner: Vec<String> = m.iter().map(|(k, x)| format!("{k:?}:{x}")).collect();
            Some(format!("map[string]interface {{}}{{{}}}", inner.join(", ")))
        }
        Value::Array(_) => Some(format!("[]interface {{}}{shown}")),
        _ => None,
    }
}

impl FieldError {
    /// This error as an API server before 1.34 printed it.
    pub(crate) fn in_legacy_printing(mut self) -> Self {
        match &mut self.kind {
            FieldErrorKind::Invalid { value, .. } | FieldErrorKind::Duplicate(value) => {
                if let Some(old) = legacy_go_value(value) {
                    *value = old;
                }
            }
            _ => {}
        }
        self
    }
}

/// The message kubectl prints for a rejected object.
pub fn render(kind: &str, name: &str, errors: &[FieldError]) -> String {
    // Strict decoding fails the request before validation, in its own words.
    if !errors.is_empty() && errors.iter().all(|e| e.kind == FieldErrorKind::Unknown) {
        let all: Vec<String> = errors.iter().map(ToString::to_string).collect();
        return format!("strict decoding error: {}", all.join(", "));
    }
    match errors {
        [one] => format!("The {kind} {name:?} is invalid: {one}"),
        many => {
            let mut s = format!("The {kind} {name:?} is invalid: ");
            for e in many {
                s.push_str(&format!("\n* {e}"));
            }
            s
        }
    }
}
