//! SARIF 2.1.0 output of `mrguard check --live`, the format CI systems
//! (GitHub code scanning, GitLab, Azure DevOps) read to annotate a pull
//! request at a file and line, and where in a manifest a finding points.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::admission::fieldpath::{FieldPath, Segment};
use crate::admission::mr;

/// The JSON schema SARIF consumers validate against.
const SCHEMA: &str = "https://json.schemastore.org/sarif-2.1.0.json";

/// One annotation: a rule finding (or an API-server rejection) at a place.
#[derive(Debug, Clone, PartialEq)]
pub struct Annotation {
    /// The rule, e.g. `immutable-field`, `cel:team-label`, `crd-schema`.
    pub rule: String,
    /// `error` (denied) or `warning`.
    pub level: &'static str,
    /// The message shown on the pull request.
    pub message: String,
    /// The file as given on the command line.
    pub file: String,
    /// 1-based line.
    pub line: usize,
    /// `Kind/name` and the field, e.g. `Bucket/b spec.forProvider.region`.
    pub logical: String,
}

/// The field a finding is about, as keys from the object's root: the first
/// field path its message names (rules name the field they judge), else the
/// field the rule is about.
pub fn finding_path(rule: &str, message: &str) -> Option<Vec<String>> {
    if let Some(p) = path_in(message) {
        return Some(p);
    }
    let keys = |v: &[&str]| Some(v.iter().map(|s| s.to_string()).collect());
    match rule {
        "deletion-policy" | "deletion-policy-conflict" => keys(&["spec", "deletionPolicy"]),
        "management-policies" | "observe-only-external-name" => {
            keys(&["spec", "managementPolicies"])
        }
        "external-name-change" => keys(&["metadata", "annotations", mr::EXTERNAL_NAME]),
        "paused-value" => keys(&["metadata", "annotations", mr::PAUSED]),
        "creation-incomplete" => keys(&["metadata", "annotations", mr::CREATE_PENDING]),
        "init-provider-late-init" | "init-provider-change" => keys(&["spec", "initProvider"]),
        "connection-secret-ref" => keys(&["spec", "writeConnectionSecretToRef"]),
        _ => None,
    }
}

/// The first `spec.…` or `metadata.…` field path in `text`.
fn path_in(text: &str) -> Option<Vec<String>> {
    let mut from = 0;
    while from < text.len() {
        let rest = &text[from..];
        let i = ["spec.", "metadata."]
            .iter()
            .filter_map(|p| rest.find(p))
            .min()?;
        let start = from + i;
        let boundary = text[..start]
            .chars()
            .next_back()
            .is_none_or(|c| !(c.is_alphanumeric() || c == '_' || c == '.'));
        let len = text[start..]
            .find(|c: char| {
                !(c.is_alphanumeric() || matches!(c, '.' | '_' | '-' | '[' | ']' | '/' | '*'))
            })
            .unwrap_or(text.len() - start);
        let token = text[start..start + len].trim_end_matches(['.', '-', '/']);
        if boundary {
            if let Ok(p) = FieldPath::parse(token) {
                let keys: Vec<String> = p
                    .segments()
                    .iter()
                    .take_while(|s| !matches!(s, Segment::Wildcard))
                    .map(|s| match s {
                        Segment::Field(k) | Segment::Key(k) => k.clone(),
                        Segment::Wildcard => String::new(),
                    })
                    .collect();
                if keys.len() > 1 {
                    return Some(keys);
                }
            }
        }
        from = start + len.max(1);
    }
    None
}

/// `path` as a URI reference relative to the working directory, with
/// forward slashes, as code-scanning tools match it against the repository.
fn uri(path: &str) -> String {
    let p = path.replace('\\', "/");
    p.strip_prefix("./").unwrap_or(&p).to_string()
}

/// The SARIF 2.1.0 log for `annotations`.
pub fn log(annotations: &[Annotation]) -> Value {
    let mut rules: BTreeMap<&str, usize> = BTreeMap::new();
    for a in annotations {
        let n = rules.len();
        rules.entry(a.rule.as_str()).or_insert(n);
    }
    // Stable rule order: by name; results refer to rules by index.
    let names: Vec<&str> = rules.keys().copied().collect();
    let index = |r: &str| names.iter().position(|n| *n == r).unwrap_or(0);
    let results: Vec<Value> = annotations
        .iter()
        .map(|a| {
            json!({
                "ruleId": a.rule,
                "ruleIndex": index(&a.rule),
                "level": a.level,
                "message": {"text": a.message},
                "locations": [{
                    "physicalLocation": {
                        "artifactLocation": {"uri": uri(&a.file)},
                        "region": {"startLine": a.line},
                    },
                    "logicalLocations": [{"fullyQualifiedName": a.logical}],
                }],
            })
        })
        .collect();
    let rules: Vec<Value> = names
        .iter()
        .map(|r| {
            json!({
                "id": r,
                "name": r,
                "shortDescription": {"text": format!("mrguard rule {r}")},
                "defaultConfiguration": {"level": "error"},
            })
        })
        .collect();
    json!({
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {
                "name": "mrguard",
                "version": env!("CARGO_PKG_VERSION"),
                "rules": rules,
            }},
            "results": results,
        }],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(v: &[&str]) -> Option<Vec<String>> {
        Some(v.iter().map(|s| s.to_string()).collect())
    }

    #[test]
    fn paths_from_messages_and_rules() {
        assert_eq!(
            finding_path(
                "immutable-field",
                "spec.forProvider.region is immutable and changed from \"us-east-1\" to \"eu-west-1\""
            ),
            keys(&["spec", "forProvider", "region"])
        );
        assert_eq!(
            finding_path(
                "immutable-field",
                "spec.forProvider.subnets[0].zone is immutable and was removed (it was \"a\")"
            ),
            keys(&["spec", "forProvider", "subnets", "0", "zone"])
        );
        assert_eq!(
            finding_path(
                "reference",
                "spec.forProvider.vpcIdRef.name is missing or empty."
            ),
            keys(&["spec", "forProvider", "vpcIdRef", "name"])
        );
        assert_eq!(
            finding_path("cel:x", "needs metadata.labels[team] set"),
            keys(&["metadata", "labels", "team"])
        );
        assert_eq!(
            finding_path(
                "deletion-policy",
                "deletionPolicy \"delete\" is not Delete or Orphan"
            ),
            keys(&["spec", "deletionPolicy"])
        );
        assert_eq!(
            finding_path("paused-value", "the value \"True\" does not pause"),
            keys(&["metadata", "annotations", "crossplane.io/paused"])
        );
        // Not a path: a word that merely contains "spec.".
        assert_eq!(finding_path("cel:y", "see the inspec.tion"), None);
        assert_eq!(finding_path("cel:y", "nothing here"), None);
    }

    #[test]
    fn a_log_with_rules_results_and_locations() {
        let a = vec![
            Annotation {
                rule: "immutable-field".into(),
                level: "error",
                message: "m1".into(),
                file: "./gitops/db.yaml".into(),
                line: 12,
                logical: "Instance/db spec.forProvider.region".into(),
            },
            Annotation {
                rule: "deletion-policy-conflict".into(),
                level: "warning",
                message: "m2".into(),
                file: "gitops\\b.yaml".into(),
                line: 3,
                logical: "Bucket/b spec.deletionPolicy".into(),
            },
        ];
        let l = log(&a);
        assert_eq!(l["version"], "2.1.0");
        let run = &l["runs"][0];
        assert_eq!(run["tool"]["driver"]["name"], "mrguard");
        assert_eq!(
            run["tool"]["driver"]["rules"][0]["id"],
            "deletion-policy-conflict"
        );
        let r0 = &run["results"][0];
        assert_eq!(r0["ruleId"], "immutable-field");
        assert_eq!(r0["ruleIndex"], 1);
        assert_eq!(r0["level"], "error");
        let loc = &r0["locations"][0]["physicalLocation"];
        assert_eq!(loc["artifactLocation"]["uri"], "gitops/db.yaml");
        assert_eq!(loc["region"]["startLine"], 12);
        assert_eq!(
            run["results"][1]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"],
            "gitops/b.yaml"
        );
        assert_eq!(log(&[])["runs"][0]["results"], json!([]));
    }
}
