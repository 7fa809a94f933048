//! A CRD version's structural schema: parsed from `openAPIV3Schema`, it
//! applies `default`s and checks an object the way the API server does
//! (types, `enum`, `required`, unknown fields, `x-kubernetes-validations`).
//!
//! One file per job: `parse` reads a schema, `defaults` applies its
//! `default`s, `check` checks types and limits, `unknown` finds fields it
//! does not declare, `rules` runs its CEL rules, `formats` checks string
//! formats.

mod check;
mod defaults;
mod formats;
mod parse;
mod rules;
mod unknown;

use std::collections::BTreeMap;

use serde_json::Value;

use crate::admission::cel::CelProgram;

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
    /// The rule's error shows the value judged, not its type's name
    /// ([`crate::admission::kube_version::since::RULE_ERROR_VALUE`]).
    pub error_shows_value: bool,
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
    fn type_name(&self) -> &str {
        self.ty.as_deref().unwrap_or("")
    }

    /// The schema of a map value or list item under `self`, if any.
    pub(super) fn child(&self, key: &str) -> Option<&Schema> {
        self.properties.get(key).or(self.additional.as_deref())
    }
}

fn join_path(path: &str, k: &str) -> String {
    if path.is_empty() {
        k.to_string()
    } else {
        format!("{path}.{k}")
    }
}

pub(super) fn is_integer(v: &Value) -> bool {
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
