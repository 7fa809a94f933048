//! Parsing manifests, the one way `check`, `check --live` and `explain -f`
//! do it: every YAML document of a file's text, with `List`s expanded as
//! `kubectl apply` expands them; each object checked for an `apiVersion`
//! and a `kind`; and the lines of its fields, for annotations. The runtime
//! reads the files; this module only parses their text.

use serde_json::Value;

pub mod lines;

use lines::DocLines;

/// The most documents read from one file unless a command says otherwise.
pub const MAX_DOCUMENTS: usize = 1024;

/// One object read from a manifest file.
#[derive(Debug, Clone)]
pub struct Manifest {
    /// The file it came from ("-" for standard input).
    pub file: String,
    /// 1-based document number in the file.
    pub doc: usize,
    /// "document 2", or "document 2, item 5" inside a List.
    pub at: String,
    /// The object.
    pub object: Value,
    /// Lines of its fields.
    pub lines: DocLines,
}

/// Why manifests could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// The file could not be read (the runtime reads; the error is shared).
    #[error("failed to read {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The text is not YAML.
    #[error("failed to parse {path}: {reason}")]
    Parse {
        /// The file.
        path: String,
        /// The parser's message, naming the file.
        reason: String,
    },
    /// A document is not an object the API server would take.
    #[error("failed to read {path}, {at}: {reason}")]
    Document {
        /// The file.
        path: String,
        /// "document 2", or "document 2, item 5".
        at: String,
        /// What is wrong.
        reason: String,
    },
    /// More documents than allowed.
    #[error("failed to read {path}: it has more than {max} YAML documents; raise --max-documents to read them all")]
    TooManyDocuments {
        /// The file.
        path: String,
        /// The limit.
        max: usize,
    },
    /// What `kubectl apply` says of such a file: "no objects passed to apply".
    #[error("failed to find an object in {path}: it is empty, or holds only comments or `---` separators")]
    NoObjects {
        /// The file.
        path: String,
    },
}

/// One file's text, as the runtime read it.
#[derive(Debug, Clone)]
pub struct FileText {
    /// The file ("-" for standard input).
    pub file: String,
    /// What it holds.
    pub text: String,
}

/// The objects of every source, in order.
pub fn parse_all(
    sources: &[FileText],
    max_documents: usize,
) -> Result<Vec<Manifest>, ManifestError> {
    let mut all = Vec::new();
    for s in sources {
        all.extend(parse(&s.file, &s.text, max_documents)?);
    }
    Ok(all)
}

/// `object` scoped as the API server and kubectl scope it: a namespaced
/// kind's object without a namespace gets `default_namespace` (the
/// context's, or `-n`), and a cluster-scoped kind's object loses any
/// namespace it names.
pub fn scope(object: &mut Value, namespaced: bool, default_namespace: &str) {
    if namespaced {
        let missing = object
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty);
        if missing {
            object["metadata"]["namespace"] = Value::String(default_namespace.to_string());
        }
    } else if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("namespace");
    }
}

/// The objects of one file's text. A file with none is an error, as for
/// `kubectl apply`.
pub fn parse(file: &str, text: &str, max_documents: usize) -> Result<Vec<Manifest>, ManifestError> {
    let docs = parse_documents(file, text, max_documents)?;
    // Lines are a help, never a reason to fail: without them findings
    // point at line 1.
    let mut lines = lines::index(text).unwrap_or_default();
    if lines.len() != docs.len() {
        lines = vec![DocLines::default(); docs.len()];
    }
    let mut out = Vec::new();
    for (i, (doc, lines)) in docs.into_iter().zip(lines).enumerate() {
        if doc.is_null() {
            continue;
        }
        let n = i + 1;
        let at = format!("document {n}");
        let objects: Vec<(String, Value, DocLines)> = match list_items(&doc) {
            Some(items) => items
                .iter()
                .enumerate()
                .map(|(j, o)| {
                    (
                        format!("{at}, item {}", j + 1),
                        o.clone(),
                        lines.subtree(&["items".into(), j.to_string()]),
                    )
                })
                .collect(),
            None => vec![(at, doc, lines)],
        };
        for (at, object, lines) in objects {
            check_object(file, &at, &object)?;
            out.push(Manifest {
                file: file.to_string(),
                doc: n,
                at,
                object,
                lines,
            });
        }
    }
    if out.is_empty() {
        return Err(ManifestError::NoObjects {
            path: file.to_string(),
        });
    }
    Ok(out)
}

/// `kubectl get -o yaml` prints several objects as a `List` (or a typed
/// `<Kind>List`); `kubectl apply` applies its items.
fn list_items(v: &Value) -> Option<&Vec<Value>> {
    let kind = v.get("kind").and_then(Value::as_str)?;
    if !kind.ends_with("List") {
        return None;
    }
    v.get("items").and_then(Value::as_array)
}

/// Parses YAML documents, at most `max`; parse errors name `path` instead
/// of the parser's placeholder.
fn parse_documents(path: &str, text: &str, max: usize) -> Result<Vec<Value>, ManifestError> {
    let options = serde_saphyr::options! {
        budget: serde_saphyr::budget! {
            max_documents: max,
        },
    };
    serde_saphyr::from_multiple_with_options(text, options).map_err(|e| {
        if let serde_saphyr::Error::Budget {
            breach: serde_saphyr::budget::BudgetBreach::Documents { .. },
            ..
        } = e.without_snippet()
        {
            return ManifestError::TooManyDocuments {
                path: path.to_string(),
                max,
            };
        }
        ManifestError::Parse {
            path: path.to_string(),
            reason: e
                .to_string()
                .replace("--> <input>:", &format!("--> {path}:")),
        }
    })
}

/// Every object needs a kind and an apiVersion, as for the API server.
fn check_object(path: &str, at: &str, d: &Value) -> Result<(), ManifestError> {
    let bad = |reason: String| ManifestError::Document {
        path: path.to_string(),
        at: at.to_string(),
        reason,
    };
    if !d.is_object() {
        return Err(bad(format!("expected a mapping, found {}", json_type(d))));
    }
    for field in ["apiVersion", "kind"] {
        if d.get(field)
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            return Err(bad(format!("{field} is missing")));
        }
    }
    Ok(())
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_are_expanded_with_their_lines() {
        let text = "apiVersion: v1\nkind: List\nitems:\n- apiVersion: s3.aws.upbound.io/v1beta1\n  kind: Bucket\n  metadata:\n    name: a\n  spec:\n    forProvider:\n      region: x\n";
        let ms = parse("l.yaml", text, MAX_DOCUMENTS).unwrap();
        assert_eq!(ms.len(), 1);
        assert_eq!(ms[0].at, "document 1, item 1");
        assert_eq!(ms[0].lines.start, 4);
        assert_eq!(
            ms[0]
                .lines
                .line_of(&["spec".into(), "forProvider".into(), "region".into()]),
            10
        );
    }

    #[test]
    fn bad_documents_name_the_file_and_the_document() {
        let e = parse("x.yaml", "---\nkind: A\n", MAX_DOCUMENTS)
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "failed to read x.yaml, document 1: apiVersion is missing"
        );
        let e = parse("x.yaml", "a: [", MAX_DOCUMENTS)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("failed to parse x.yaml: "), "{e}");
        let e = parse("x.yaml", "---\n- 1\n", MAX_DOCUMENTS)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("document 1: expected a mapping, found a list"),
            "{e}"
        );
        let e = parse("x.yaml", "# nothing\n---\n", MAX_DOCUMENTS)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("failed to find an object in x.yaml"), "{e}");
        let many = "---\napiVersion: v1\nkind: A\n".repeat(3);
        let e = parse("x.yaml", &many, 2).unwrap_err().to_string();
        assert!(e.contains("more than 2 YAML documents"), "{e}");
    }

    #[test]
    fn scope_defaults_a_namespaced_object_and_clears_a_cluster_scoped_one() {
        let mut o = serde_json::json!({"metadata": {"name": "b"}});
        scope(&mut o, true, "team-a");
        assert_eq!(o["metadata"]["namespace"], "team-a");
        let mut o = serde_json::json!({"metadata": {"name": "b", "namespace": "mine"}});
        scope(&mut o, true, "team-a");
        assert_eq!(o["metadata"]["namespace"], "mine");
        let mut o = serde_json::json!({"metadata": {"name": "b", "namespace": ""}});
        scope(&mut o, true, "team-a");
        assert_eq!(o["metadata"]["namespace"], "team-a");
        scope(&mut o, false, "team-a");
        assert!(o["metadata"].get("namespace").is_none(), "{o}");
    }
}
