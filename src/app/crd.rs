//! `mrguard crd immutables DIR|-`: what mrguard derives from CRD files
//! (docs/documented-immutables.md), for a platform team to review and copy
//! into `immutableFields`. The derivation is `mrguard_policy::cluster::documented`.

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::{Subcommand, ValueEnum};
use serde_json::Value;

use super::manifests::{self, ManifestError};
use mrguard_policy::cluster::documented::{derive, KindFields};

/// `mrguard crd …`.
#[derive(Debug, Subcommand)]
pub enum CrdCommand {
    /// List the fields that each CRD's documentation says force a new
    /// resource when changed (the documented-immutable-field rule's input).
    Immutables {
        /// A CRD file, a folder of them (.yaml, .yml, .json; searched
        /// recursively), or "-" for standard input. Crossplane's
        /// ManagedResourceDefinitions are read like the CRDs they become.
        path: PathBuf,
        /// Output format.
        #[arg(short, long, value_enum, default_value = "text")]
        output: CrdOutput,
    },
}

/// Output formats of `crd immutables`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CrdOutput {
    /// For people: per kind, each field with its sentence and condition.
    Text,
    /// A JSON array: per CRD, its group, kind and fields.
    Json,
}

#[derive(Debug, thiserror::Error)]
enum CrdCliError {
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    #[error("failed to parse {path}: {reason}")]
    Parse { path: String, reason: String },
    #[error("failed to find a CustomResourceDefinition or ManagedResourceDefinition in {0}")]
    NoCrd(String),
}

/// Runs `mrguard crd`; returns the exit code.
pub(crate) fn run(cmd: CrdCommand) -> i32 {
    let CrdCommand::Immutables { path, output } = cmd;
    let stdout = std::io::stdout();
    match immutables(&path, output, &mut stdout.lock()) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("{e}");
            1
        }
    }
}

/// Every CRD in `path`, derived, in file order.
fn derive_all(path: &Path) -> Result<Vec<KindFields>, CrdCliError> {
    let mut out = Vec::new();
    for f in manifests::files(path)? {
        let text = manifests::read_text(&f)?;
        let docs: Vec<Value> =
            serde_saphyr::from_multiple(&text).map_err(|e| CrdCliError::Parse {
                path: f.display().to_string(),
                reason: e.to_string(),
            })?;
        for doc in docs {
            // `kubectl get crd -o yaml` prints a List.
            match doc.get("items").and_then(Value::as_array) {
                Some(items) if doc.get("kind").and_then(Value::as_str) == Some("List") => {
                    out.extend(items.iter().filter_map(derive))
                }
                _ => out.extend(derive(&doc)),
            }
        }
    }
    if out.is_empty() {
        return Err(CrdCliError::NoCrd(path.display().to_string()));
    }
    Ok(out)
}

fn immutables(path: &Path, output: CrdOutput, out: &mut dyn Write) -> Result<(), CrdCliError> {
    let kinds = derive_all(path)?;
    let _ = match output {
        CrdOutput::Json => writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(&kinds).unwrap_or_default()
        ),
        CrdOutput::Text => write!(out, "{}", text(&kinds)),
    };
    Ok(())
}

fn text(kinds: &[KindFields]) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let mut fields = 0;
    for k in kinds {
        fields += k.fields.len();
        let _ = writeln!(
            s,
            "{}/{} ({}): {} documented-immutable field{}",
            k.group,
            k.kind,
            k.crd,
            k.fields.len(),
            if k.fields.len() == 1 { "" } else { "s" }
        );
        for f in &k.fields {
            let _ = writeln!(s, "  {} [{}]", f.path.as_str(), f.versions.join(", "));
            let _ = writeln!(s, "    source: {:?}", f.source.sentence);
            if let Some(c) = &f.source.condition {
                let _ = writeln!(
                    s,
                    "    condition: {c:?} (a warning only, even when raised to Deny)"
                );
            }
        }
    }
    let with = kinds.iter().filter(|k| !k.fields.is_empty()).count();
    let _ = writeln!(
        s,
        "{} CRDs, {with} with documented-immutable fields, {fields} fields",
        kinds.len()
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_azure_account_lists_account_tier_and_not_tags() {
        // The provider's own CRD (MRGUARD_FIXTURES): its descriptions are
        // what the derivation reads.
        let Some(dir) = mrguard_envtest::third_party_fixtures(
            "the_azure_account_lists_account_tier_and_not_tags",
        ) else {
            return;
        };
        let fixture = || dir.join("crds-documented");
        let mut out = Vec::new();
        immutables(&fixture(), CrdOutput::Text, &mut out).unwrap();
        let s = String::from_utf8(out).unwrap();
        assert!(s.contains("  spec.forProvider.accountTier ["), "{s}");
        assert!(!s.contains("spec.forProvider.tags "), "{s}");
        let mut out = Vec::new();
        immutables(&fixture(), CrdOutput::Json, &mut out).unwrap();
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v[0]["kind"], "Account");
        let f = v[0]["fields"].as_array().unwrap();
        let tier = f
            .iter()
            .find(|f| f["path"] == "spec.forProvider.accountTier")
            .unwrap();
        assert!(tier["sentence"]
            .as_str()
            .unwrap()
            .contains("Changing this forces a new resource to be created"));
        assert!(tier["condition"].is_null());
        let repl = f
            .iter()
            .find(|f| f["path"] == "spec.forProvider.accountReplicationType")
            .unwrap();
        assert!(repl["condition"]
            .as_str()
            .unwrap()
            .starts_with("when types LRS, GRS and RAGRS are changed to ZRS"));
        assert!(!f.iter().any(|f| f["path"] == "spec.forProvider.tags"));
    }

    #[test]
    fn a_folder_without_crds_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.yaml"), "kind: ConfigMap\n").unwrap();
        let e = immutables(dir.path(), CrdOutput::Text, &mut Vec::new()).unwrap_err();
        assert!(e
            .to_string()
            .contains("failed to find a CustomResourceDefinition"));
    }
}
