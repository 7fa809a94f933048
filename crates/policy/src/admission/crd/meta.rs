//! ObjectMeta, checked as the API server checks it on create and update
//! (apimachinery's `ValidateObjectMetaAccessor` and the CRD handler's
//! metadata decoding), with its wording, so that `check --crd` fails what
//! `kubectl apply` would.

use std::sync::LazyLock;

use regex::Regex;
use serde_json::{Map, Value};

use super::errors::{FieldError, FieldErrorKind, SchemaPath};

const DNS1123_LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const DNS1123_LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character";
const DNS1123_SUBDOMAIN_FMT: &str =
    "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const DNS1123_SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";
const QNAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const QNAME_MSG: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const LABEL_VALUE_FMT: &str = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?";
const LABEL_VALUE_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
/// The total size of keys and values of `metadata.annotations`.
pub const ANNOTATIONS_LIMIT: usize = 256 * 1024;
/// A generated name is the prefix (cut to this length) and 5 random characters.
const MAX_GENERATE_NAME_PREFIX: usize = 58;

fn anchored(fmt: &str) -> Regex {
    Regex::new(&format!("^(?:{fmt})$")).expect("a constant regex")
}

static LABEL: LazyLock<Regex> = LazyLock::new(|| anchored(DNS1123_LABEL_FMT));
static SUBDOMAIN: LazyLock<Regex> = LazyLock::new(|| anchored(DNS1123_SUBDOMAIN_FMT));
static QNAME: LazyLock<Regex> = LazyLock::new(|| anchored(QNAME_FMT));
static LABEL_VALUE: LazyLock<Regex> = LazyLock::new(|| anchored(LABEL_VALUE_FMT));

fn max_len(n: usize) -> String {
    format!("must be no more than {n} characters")
}

/// apimachinery's `RegexError`.
fn regex_error(msg: &str, fmt: &str, examples: &[&str]) -> String {
    let mut s = format!("{msg} (e.g. ");
    for (i, e) in examples.iter().enumerate() {
        if i > 0 {
            s.push_str(" or ");
        }
        s.push_str(&format!("'{e}', "));
    }
    s.push_str(&format!("regex used for validation is '{fmt}')"));
    s
}

/// `IsDNS1123Subdomain`.
pub fn dns1123_subdomain(v: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if v.len() > 253 {
        errs.push(max_len(253));
    }
    if !SUBDOMAIN.is_match(v) {
        errs.push(regex_error(
            DNS1123_SUBDOMAIN_MSG,
            DNS1123_SUBDOMAIN_FMT,
            &["example.com"],
        ));
    }
    errs
}

/// `IsDNS1123Label`.
pub fn dns1123_label(v: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if v.len() > 63 {
        errs.push(max_len(63));
    }
    if !LABEL.is_match(v) {
        if SUBDOMAIN.is_match(v) {
            errs.push("must not contain dots".into());
        } else {
            errs.push(regex_error(
                DNS1123_LABEL_MSG,
                DNS1123_LABEL_FMT,
                &["my-name", "123-abc"],
            ));
        }
    }
    errs
}

/// `IsQualifiedName`: a label key, an annotation key (lowercased), a finalizer.
pub fn qualified_name(v: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let parts: Vec<&str> = v.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".into());
            } else {
                errs.extend(
                    dns1123_subdomain(prefix)
                        .into_iter()
                        .map(|m| format!("prefix part {m}")),
                );
            }
            name
        }
        _ => {
            errs.push(format!(
                "a qualified name {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(QNAME_MSG, QNAME_FMT, &["MyName", "my.name", "123-abc"])
            ));
            return errs;
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".into());
    } else if name.len() > 63 {
        errs.push(format!("name part {}", max_len(63)));
    }
    if !QNAME.is_match(name) {
        errs.push(format!(
            "name part {}",
            regex_error(QNAME_MSG, QNAME_FMT, &["MyName", "my.name", "123-abc"])
        ));
    }
    errs
}

/// `IsValidLabelValue`.
pub fn label_value(v: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if v.len() > 63 {
        errs.push(max_len(63));
    }
    if !LABEL_VALUE.is_match(v) {
        errs.push(regex_error(
            LABEL_VALUE_MSG,
            LABEL_VALUE_FMT,
            &["MyValue", "my_value", "12345"],
        ));
    }
    errs
}

/// The fields of ObjectMeta a client may send, with the JSON type each decodes from.
const FIELDS: &[(&str, &str)] = &[
    ("name", "string"),
    ("generateName", "string"),
    ("namespace", "string"),
    ("selfLink", "string"),
    ("uid", "string"),
    ("resourceVersion", "string"),
    ("generation", "integer"),
    ("creationTimestamp", "string"),
    ("deletionTimestamp", "string"),
    ("deletionGracePeriodSeconds", "integer"),
    ("labels", "object"),
    ("annotations", "object"),
    ("ownerReferences", "array"),
    ("finalizers", "array"),
    ("managedFields", "array"),
];

const OWNER_FIELDS: &[&str] = &[
    "apiVersion",
    "kind",
    "name",
    "uid",
    "controller",
    "blockOwnerDeletion",
];

/// Fields of `metadata` that ObjectMeta does not have, as strict decoding
/// reports them (`metadata.foo`, `metadata.ownerReferences[0].foo`).
pub(crate) fn unknown_fields(meta: &Value, out: &mut Vec<String>) {
    let Some(m) = meta.as_object() else { return };
    for k in m.keys() {
        if !FIELDS.iter().any(|(f, _)| f == k) {
            out.push(format!("metadata.{k}"));
        }
    }
    if let Some(refs) = m.get("ownerReferences").and_then(Value::as_array) {
        for (i, r) in refs.iter().enumerate() {
            for k in r.as_object().into_iter().flat_map(Map::keys) {
                if !OWNER_FIELDS.contains(&k.as_str()) {
                    out.push(format!("metadata.ownerReferences[{i}].{k}"));
                }
            }
        }
    }
}

fn invalid(path: &SchemaPath, value: &str, detail: String) -> FieldError {
    FieldError::invalid(path, value, detail)
}

fn str_map<'a>(
    m: &'a Map<String, Value>,
    field: &str,
    path: &SchemaPath,
    errors: &mut Vec<FieldError>,
) -> Vec<(&'a str, &'a str)> {
    let Some(v) = m.get(field).filter(|v| !v.is_null()) else {
        return vec![];
    };
    // A value of the wrong type is reported with the other fields' types.
    let Some(o) = v.as_object() else {
        return vec![];
    };
    let mut out = Vec::new();
    for (k, x) in o {
        match x.as_str() {
            Some(s) => out.push((k.as_str(), s)),
            None if x.is_null() => out.push((k.as_str(), "")),
            None => errors.push(FieldError::type_error(
                &path.child(field).key(k),
                super::schema::json_type(x),
                "string",
            )),
        }
    }
    out
}

/// Everything the API server rejects in `metadata` on create or update.
/// The namespace is checked only when set: kubectl fills in the context's
/// namespace, and a cluster-scoped object's namespace is dropped.
pub(crate) fn validate(meta: Option<&Value>, namespaced: bool) -> Vec<FieldError> {
    let path = SchemaPath::root().child("metadata");
    let mut errors = Vec::new();
    let empty = Map::new();
    let m = match meta {
        None | Some(Value::Null) => &empty,
        Some(Value::Object(m)) => m,
        Some(other) => {
            errors.push(FieldError::type_error(
                &path,
                super::schema::json_type(other),
                "object",
            ));
            return errors;
        }
    };
    for (f, ty) in FIELDS {
        if let Some(v) = m.get(*f).filter(|v| !v.is_null()) {
            let ok = match *ty {
                "string" => v.is_string(),
                "integer" => v.is_i64() || v.is_u64(),
                "object" => v.is_object(),
                _ => v.is_array(),
            };
            if !ok {
                errors.push(FieldError::type_error(
                    &path.child(f),
                    super::schema::json_type(v),
                    ty,
                ));
            }
        }
    }
    let s = |f: &str| m.get(f).and_then(Value::as_str).unwrap_or("");
    let (name, generate_name) = (s("name"), s("generateName"));
    if !generate_name.is_empty() {
        // A prefix may end in '-'.
        let masked = generate_name
            .strip_suffix('-')
            .map_or_else(|| generate_name.to_string(), |p| format!("{p}a"));
        for msg in dns1123_subdomain(&masked) {
            errors.push(invalid(&path.child("generateName"), generate_name, msg));
        }
    }
    if name.is_empty() && generate_name.is_empty() {
        errors.push(FieldError {
            path: path.child("name").to_string(),
            kind: FieldErrorKind::Required(Some("name or generateName is required".into())),
        });
    } else if name.is_empty() {
        // The API server validates the generated name; its random suffix
        // is always valid, so the prefix decides.
        let cut = &generate_name[..generate_name
            .char_indices()
            .map(|(i, c)| i + c.len_utf8())
            .take_while(|&end| end <= MAX_GENERATE_NAME_PREFIX)
            .last()
            .unwrap_or(0)];
        let generated = format!("{cut}abcde");
        for msg in dns1123_subdomain(&generated) {
            errors.push(invalid(&path.child("name"), &generated, msg));
        }
    } else {
        for msg in dns1123_subdomain(name) {
            errors.push(invalid(&path.child("name"), name, msg));
        }
    }
    let namespace = s("namespace");
    if namespaced && !namespace.is_empty() {
        for msg in dns1123_label(namespace) {
            errors.push(invalid(&path.child("namespace"), namespace, msg));
        }
    }
    if let Some(g) = m.get("generation").and_then(Value::as_i64) {
        if g < 0 {
            errors.push(invalid(
                &path.child("generation"),
                &g.to_string(),
                "must be greater than or equal to 0".into(),
            ));
        }
    }
    labels_and_annotations(m, &path, &mut errors);
    owner_references(m, &path.child("ownerReferences"), &mut errors);
    finalizers(m, &path.child("finalizers"), &mut errors);
    errors
}

/// Label keys and values, annotation keys and their total size.
fn labels_and_annotations(m: &Map<String, Value>, path: &SchemaPath, errors: &mut Vec<FieldError>) {
    let labels_path = path.child("labels");
    for (k, v) in str_map(m, "labels", path, errors) {
        for msg in qualified_name(k) {
            errors.push(invalid(&labels_path, k, msg));
        }
        for msg in label_value(v) {
            errors.push(invalid(&labels_path, v, msg));
        }
    }
    let annotations_path = path.child("annotations");
    let mut size = 0;
    for (k, v) in str_map(m, "annotations", path, errors) {
        for msg in qualified_name(&k.to_lowercase()) {
            errors.push(invalid(&annotations_path, k, msg));
        }
        size += k.len() + v.len();
    }
    if size > ANNOTATIONS_LIMIT {
        errors.push(FieldError {
            path: annotations_path.to_string(),
            kind: FieldErrorKind::TooLong(format!(
                "may not be more than {ANNOTATIONS_LIMIT} bytes"
            )),
        });
    }
}

/// The `metadata` of an object embedded with `x-kubernetes-embedded-resource`
/// (a template, a manifest): its labels and annotations as at the root, and
/// a name or generateName checked when given but not required, since a
/// template's object is named when it is made.
pub(crate) fn validate_embedded(meta: &Value, path: &SchemaPath) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let Some(m) = meta.as_object() else {
        if !meta.is_null() {
            errors.push(FieldError::type_error(
                path,
                super::schema::json_type(meta),
                "object",
            ));
        }
        return errors;
    };
    for f in ["name", "generateName"] {
        if let Some(v) = m.get(f).and_then(Value::as_str).filter(|v| !v.is_empty()) {
            let v = if f == "generateName" {
                v.strip_suffix('-')
                    .map_or_else(|| v.to_string(), |p| format!("{p}a"))
            } else {
                v.to_string()
            };
            for msg in dns1123_subdomain(&v) {
                errors.push(invalid(&path.child(f), &v, msg));
            }
        }
    }
    labels_and_annotations(m, path, &mut errors);
    errors
}

/// `IsDNS1035Label`: what an embedded object's kind must match, lowercased.
pub fn dns1035_label(v: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if v.len() > 63 {
        errs.push(max_len(63));
    }
    let ok = v.starts_with(|c: char| c.is_ascii_lowercase())
        && v.ends_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && v.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if !ok {
        errs.push(
            "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')".into(),
        );
    }
    errs
}

fn owner_references(m: &Map<String, Value>, path: &SchemaPath, errors: &mut Vec<FieldError>) {
    let Some(refs) = m.get("ownerReferences").and_then(Value::as_array) else {
        return;
    };
    let mut first_controller: Option<String> = None;
    for (i, r) in refs.iter().enumerate() {
        let Some(o) = r.as_object() else {
            errors.push(FieldError::type_error(
                &path.index(i),
                super::schema::json_type(r),
                "object",
            ));
            continue;
        };
        let s = |f: &str| o.get(f).and_then(Value::as_str).unwrap_or("");
        let api_version = s("apiVersion");
        let version = match api_version.split_once('/') {
            Some((_, v)) => v,
            None => api_version,
        };
        if version.is_empty() {
            errors.push(invalid(
                &path.child("apiVersion"),
                api_version,
                "version must not be empty".into(),
            ));
        }
        for (f, what) in [("kind", "kind"), ("name", "name"), ("uid", "uid")] {
            if s(f).is_empty() {
                errors.push(invalid(
                    &path.child(f),
                    "",
                    format!("{what} must not be empty"),
                ));
            }
        }
        if matches!(api_version, "v1" | "events.k8s.io/v1") && s("kind") == "Event" {
            errors.push(invalid(
                path,
                "",
                format!("{api_version}, Kind=Event is disallowed from being an owner"),
            ));
        }
        if o.get("controller").and_then(Value::as_bool) == Some(true) {
            let this = format!("{}/{}", s("kind"), s("name"));
            match &first_controller {
                Some(first) => errors.push(invalid(
                    path,
                    "",
                    format!(
                        "Only one reference can have Controller set to true. Found \"true\" in references for {first} and {this}"
                    ),
                )),
                None => first_controller = Some(this),
            }
        }
    }
}

fn finalizers(m: &Map<String, Value>, path: &SchemaPath, errors: &mut Vec<FieldError>) {
    let Some(list) = m.get("finalizers").and_then(Value::as_array) else {
        return;
    };
    for (i, f) in list.iter().enumerate() {
        let Some(f) = f.as_str() else {
            errors.push(FieldError::type_error(
                &path.index(i),
                super::schema::json_type(f),
                "string",
            ));
            continue;
        };
        for msg in qualified_name(f) {
            errors.push(invalid(path, f, msg));
        }
    }
    let has = |n: &str| list.iter().any(|f| f.as_str() == Some(n));
    if has("orphan") && has("foregroundDeletion") {
        errors.push(invalid(
            path,
            "",
            "finalizer orphan and foregroundDeletion cannot be both set".into(),
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn errs(meta: Value) -> Vec<String> {
        validate(Some(&meta), true)
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn names_are_dns_subdomains() {
        assert!(errs(json!({"name": "a.b-c"})).is_empty());
        assert_eq!(
            errs(json!({"name": "${Rand.RFC1123Subdomain}"})),
            vec!["metadata.name: Invalid value: \"${Rand.RFC1123Subdomain}\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"]
        );
        let long = "a".repeat(254);
        assert_eq!(errs(json!({ "name": long })).len(), 1);
        assert_eq!(
            errs(json!({})),
            vec!["metadata.name: Required value: name or generateName is required"]
        );
        // A prefix may end in '-'; an upper-case one makes the name invalid too.
        assert!(errs(json!({"generateName": "web-"})).is_empty());
        let e = errs(json!({"generateName": "Web-"}));
        assert_eq!(e.len(), 2, "{e:?}");
        assert!(e[0].starts_with("metadata.generateName: Invalid value: \"Web-\""));
        assert!(e[1].starts_with("metadata.name: Invalid value: \"Web-abcde\""));
    }

    #[test]
    fn namespaces_are_dns_labels() {
        assert!(errs(json!({"name": "a", "namespace": "team-a"})).is_empty());
        assert_eq!(
            errs(json!({"name": "a", "namespace": "team.a"})),
            vec!["metadata.namespace: Invalid value: \"team.a\": must not contain dots"]
        );
        // A cluster-scoped object's namespace is dropped, not judged.
        assert!(validate(Some(&json!({"name": "a", "namespace": "X"})), false).is_empty());
    }

    #[test]
    fn labels_annotations_and_finalizers() {
        let v64 = "v".repeat(64);
        let e = errs(json!({"name": "a", "labels": {"team": v64, "a/b/c": "x", "ok": "-bad"}}));
        assert_eq!(e.len(), 3, "{e:?}");
        assert!(e
            .iter()
            .all(|m| m.starts_with("metadata.labels: Invalid value: ")));
        assert!(e
            .iter()
            .any(|m| m.contains("must be no more than 63 characters")));
        assert!(e
            .iter()
            .any(|m| m.contains("a qualified name must consist of")));
        assert!(e
            .iter()
            .any(|m| m.contains("a valid label must be an empty string")));
        // Annotation keys ignore case; values are free, up to 256 KiB in all.
        assert!(
            errs(json!({"name": "a", "annotations": {"Example.com/X": "any thing"}})).is_empty()
        );
        let e = errs(json!({"name": "a", "annotations": {"a//b": "x"}}));
        assert_eq!(e.len(), 1, "{e:?}");
        let big = "x".repeat(ANNOTATIONS_LIMIT);
        assert_eq!(
            errs(json!({"name": "a", "annotations": {"k": big}})),
            vec!["metadata.annotations: Too long: may not be more than 262144 bytes"]
        );
        let e = errs(json!({"name": "a", "finalizers": ["ok.io/f", "bad finalizer"]}));
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(e[0].starts_with("metadata.finalizers: Invalid value: \"bad finalizer\""));
    }

    #[test]
    fn owner_references_and_types() {
        let e = errs(json!({"name": "a", "ownerReferences": [
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "c", "uid": "1", "controller": true},
            {"apiVersion": "example.org/", "kind": "", "name": "", "uid": "", "controller": true},
        ]}));
        assert_eq!(
            e,
            vec![
                "metadata.ownerReferences.apiVersion: Invalid value: \"example.org/\": version must not be empty",
                "metadata.ownerReferences.kind: Invalid value: \"\": kind must not be empty",
                "metadata.ownerReferences.name: Invalid value: \"\": name must not be empty",
                "metadata.ownerReferences.uid: Invalid value: \"\": uid must not be empty",
                "metadata.ownerReferences: Invalid value: \"\": Only one reference can have Controller set to true. Found \"true\" in references for ConfigMap/c and /",
            ]
        );
        let e = errs(json!({"name": "a", "labels": ["x"]}));
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(
            e[0].contains("metadata.labels in body must be of type object"),
            "{e:?}"
        );
        let mut unknown = Vec::new();
        unknown_fields(
            &json!({"name": "a", "lables": {}, "ownerReferences": [{"uid": "1", "extra": 1}]}),
            &mut unknown,
        );
        assert_eq!(
            unknown,
            vec!["metadata.lables", "metadata.ownerReferences[0].extra"]
        );
    }
}
