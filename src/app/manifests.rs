//! Reading manifests, the one way `check`, `check --live` and `explain -f`
//! do it: files, folders (every `.yaml`, `.yml` and `.json`, sorted) or `-`
//! for standard input; every YAML document, with `List`s expanded as
//! `kubectl apply` expands them; each object checked for an `apiVersion`
//! and a `kind`; and the lines of its fields, for annotations.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::lines::{self, DocLines};

/// The most documents read from one file unless a command says otherwise.
pub(crate) const MAX_DOCUMENTS: usize = 1024;

/// One object read from a manifest file.
#[derive(Debug, Clone)]
pub(crate) struct Manifest {
    /// The file it came from ("-" for standard input).
    pub(crate) file: String,
    /// 1-based document number in the file.
    pub(crate) doc: usize,
    /// "document 2", or "document 2, item 5" inside a List.
    pub(crate) at: String,
    /// The object.
    pub(crate) object: Value,
    /// Lines of its fields.
    pub(crate) lines: DocLines,
}

/// Why manifests could not be read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ManifestError {
    #[error("failed to read {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to parse {path}: {reason}")]
    Parse { path: String, reason: String },
    #[error("failed to read {path}, {at}: {reason}")]
    Document {
        path: String,
        at: String,
        reason: String,
    },
    #[error("failed to read {path}: it has more than {max} YAML documents; raise --max-documents to read them all")]
    TooManyDocuments { path: String, max: usize },
    /// What `kubectl apply` says of such a file: "no objects passed to apply".
    #[error("failed to find an object in {path}: it is empty, or holds only comments or `---` separators")]
    NoObjects { path: String },
}

/// `path` itself, or every `.yaml`, `.yml` and `.json` file under the folder
/// `path`, sorted; `-` stands for standard input.
pub(crate) fn files(path: &Path) -> Result<Vec<PathBuf>, ManifestError> {
    let mut out = Vec::new();
    collect(path, &mut out)?;
    Ok(out)
}

fn collect(path: &Path, out: &mut Vec<PathBuf>) -> Result<(), ManifestError> {
    let read_err = |source| ManifestError::Read {
        path: path.display().to_string(),
        source,
    };
    if path == Path::new("-") || !std::fs::metadata(path).map_err(read_err)?.is_dir() {
        out.push(path.to_path_buf());
        return Ok(());
    }
    let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
        .map_err(read_err)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    for e in entries {
        if e.is_dir() {
            collect(&e, out)?;
        } else if e
            .extension()
            .and_then(|x| x.to_str())
            .is_some_and(|x| matches!(x, "yaml" | "yml" | "json"))
        {
            out.push(e);
        }
    }
    Ok(())
}

/// The text of a file, or of standard input for `-`.
pub(crate) fn read_text(path: &Path) -> Result<String, ManifestError> {
    let result = if path == Path::new("-") {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut s).map(|_| s)
    } else {
        std::fs::read_to_string(path)
    };
    result.map_err(|source| ManifestError::Read {
        path: path.display().to_string(),
        source,
    })
}

/// Every object of every file under `paths`, in order.
pub(crate) fn read(
    paths: &[PathBuf],
    max_documents: usize,
) -> Result<Vec<Manifest>, ManifestError> {
    let mut all = Vec::new();
    for p in paths {
        for f in files(p)? {
            let text = read_text(&f)?;
            all.extend(parse(&f.display().to_string(), &text, max_documents)?);
        }
    }
    Ok(all)
}

/// The objects of one file's text. A file with none is an error, as for
/// `kubectl apply`.
pub(crate) fn parse(
    file: &str,
    text: &str,
    max_documents: usize,
) -> Result<Vec<Manifest>, ManifestError> {
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
    fn folders_give_their_manifest_files_sorted() {
        let dir = tempfile::tempdir().unwrap();
        for f in ["b.yaml", "a.json", "c.txt", "sub/d.yml"] {
            let p = dir.path().join(f);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, "").unwrap();
        }
        let names: Vec<String> = files(dir.path())
            .unwrap()
            .iter()
            .map(|p| p.strip_prefix(dir.path()).unwrap().display().to_string())
            .collect();
        assert_eq!(names, ["a.json", "b.yaml", "sub/d.yml"]);
        assert!(matches!(
            files(&dir.path().join("nope")),
            Err(ManifestError::Read { .. })
        ));
    }
}
