//! Immutable fields derived from the providers' CRD documentation
//! (docs/documented-immutables.md): `mrguard check --crd` with the chart's
//! configuration (the built-in one) and `mrguard crd immutables`, run as the
//! built binary against the real `storage.azure.upbound.io` Account CRD.

use serde_json::{json, Value};

use crate::support::bin::{run as mrguard, stderr};
use crate::support::fixtures;
use crate::support::write;

/// The Azure CRDs (MRGUARD_FIXTURES), or None when `test` is skipped.
fn crds(test: &str) -> Option<String> {
    fixtures::third_party(test).map(|d| d.join("crds-documented").display().to_string())
}

/// A created Account, as the provider leaves it.
fn account(change: impl FnOnce(&mut Value)) -> String {
    let mut v = json!({
        "apiVersion": "storage.azure.upbound.io/v1beta1",
        "kind": "Account",
        "metadata": {"name": "example", "annotations": {
            "crossplane.io/external-create-succeeded": "2024-01-01T00:00:00Z"}},
        "spec": {"forProvider": {
            "accountReplicationType": "LRS",
            "accountTier": "Standard",
            "location": "West Europe",
            "resourceGroupName": "example",
            "tags": {"environment": "staging"},
        }},
    });
    change(&mut v);
    serde_saphyr::to_string(&v).unwrap()
}

fn check_update(
    crds: &str,
    new: impl FnOnce(&mut Value),
    config: Option<&str>,
) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().unwrap();
    let old = write(dir.path(), "old.yaml", &account(|_| {}));
    let new = write(dir.path(), "new.yaml", &account(new));
    let mut args = vec!["check", "--crd", crds, "--old", &old, "-f", &new];
    let cfg = config.map(|c| write(dir.path(), "config.yaml", c));
    if let Some(c) = &cfg {
        args.extend(["--config", c]);
    }
    let out = mrguard(&args);
    (out.status.code(), stderr(&out))
}

#[test]
fn changing_account_tier_of_a_created_account_warns_quoting_the_crd() {
    let Some(crds) = crds("changing_account_tier_of_a_created_account_warns_quoting_the_crd")
    else {
        return;
    };
    let (code, err) = check_update(
        &crds,
        |v| v["spec"]["forProvider"]["accountTier"] = json!("Premium"),
        None,
    );
    assert_eq!(code, Some(0), "{err}");
    assert!(
        err.contains(
            "Account/example: warning: documented-immutable-field: spec.forProvider.accountTier changed \
             from \"Standard\" to \"Premium\"; the CRD documents: \"Changing this forces a new resource to be created.\""
        ),
        "{err}"
    );
}

#[test]
fn changing_only_tags_says_nothing_about_immutability() {
    let Some(crds) = crds("changing_only_tags_says_nothing_about_immutability") else {
        return;
    };
    let (code, err) = check_update(
        &crds,
        |v| v["spec"]["forProvider"]["tags"]["environment"] = json!("prod"),
        None,
    );
    assert_eq!(code, Some(0), "{err}");
    assert!(!err.contains("immutable"), "{err}");
}

#[test]
fn the_curated_list_wins_and_deny_spares_conditional_sentences() {
    let Some(crds) = crds("the_curated_list_wins_and_deny_spares_conditional_sentences") else {
        return;
    };
    // location is in the chart's immutableFields for Azure: immutable-field
    // denies it, and the documented rule does not repeat it.
    let (code, err) = check_update(
        &crds,
        |v| v["spec"]["forProvider"]["location"] = json!("North Europe"),
        None,
    );
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("[immutable-field]"), "{err}");
    assert!(!err.contains("documented-immutable-field"), "{err}");

    let raised = format!(
        "{}\nrules: {{documented-immutable-field: Deny}}\n",
        mrguard_policy::admission::config::BUILTIN_YAML
    );
    let (code, err) = check_update(
        &crds,
        |v| v["spec"]["forProvider"]["accountTier"] = json!("Premium"),
        Some(&raised),
    );
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("denied:") && err.contains("[documented-immutable-field]"),
        "{err}"
    );
    // The replication sentence has a condition mrguard cannot check: a warning.
    let (code, err) = check_update(
        &crds,
        |v| v["spec"]["forProvider"]["accountReplicationType"] = json!("ZRS"),
        Some(&raised),
    );
    assert_eq!(code, Some(0), "{err}");
    assert!(
        err.contains(
            "warning: documented-immutable-field: spec.forProvider.accountReplicationType"
        ),
        "{err}"
    );
    assert!(err.contains("a warning only"), "{err}");
}

#[test]
fn crd_immutables_lists_account_tier_and_not_tags() {
    let Some(crds) = crds("crd_immutables_lists_account_tier_and_not_tags") else {
        return;
    };
    let out = mrguard(&["crd", "immutables", &crds]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        text.contains("storage.azure.upbound.io/Account (accounts.storage.azure.upbound.io)"),
        "{text}"
    );
    assert!(text.contains("\n  spec.forProvider.accountTier [v1beta1, v1beta2]\n    source: \"Changing this forces a new resource to be created.\""), "{text}");
    assert!(!text.contains("spec.forProvider.tags"), "{text}");
    let out = mrguard(&["crd", "immutables", &crds, "-o", "json"]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let paths: Vec<&str> = v[0]["fields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert!(paths.contains(&"spec.forProvider.accountTier"), "{paths:?}");
    assert!(!paths.contains(&"spec.forProvider.tags"), "{paths:?}");
    // Anything else is an error naming the path.
    let out = mrguard(&["crd", "immutables", "/nonexistent"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("/nonexistent"), "{}", stderr(&out));
}

#[test]
fn explain_marks_documented_fields_with_their_source() {
    let Some(crds) = crds("explain_marks_documented_fields_with_their_source") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let f = write(dir.path(), "a.yaml", &account(|_| {}));
    let out = mrguard(&["explain", "-f", &f, "--crd", &crds]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let row = |field: &str| {
        text.lines()
            .find(|l| l.trim_start().starts_with(&format!("{field} ")))
            .unwrap_or_else(|| panic!("{field} in {text}"))
            .to_string()
    };
    assert!(
        row("spec.forProvider.accountTier").contains(" documented "),
        "{text}"
    );
    assert!(
        row("spec.forProvider.accountReplicationType").contains(" documented, if "),
        "{text}"
    );
    // The curated list wins: location is immutable by configuration.
    assert!(row("spec.forProvider.location").contains(" yes "), "{text}");
    assert!(
        row("spec.forProvider.tags.environment").contains(" no "),
        "{text}"
    );
    assert!(text.contains(
        "  spec.forProvider.accountTier: \"Changing this forces a new resource to be created.\" (accounts.storage.azure.upbound.io)"
    ), "{text}");
    let out = mrguard(&["explain", "-f", &f, "--crd", &crds, "-o", "json"]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let tier = v["fields"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["path"] == "spec.forProvider.accountTier")
        .unwrap();
    assert_eq!(
        tier["documented"]["crd"],
        "accounts.storage.azure.upbound.io"
    );
    // Without CRDs, nothing is marked.
    let out = mrguard(&["explain", "-f", &f]);
    assert!(!String::from_utf8_lossy(&out.stdout).contains("documented"));
}

/// docs/documented-immutables.md shows every pattern as the code has it.
#[test]
fn the_documented_patterns_are_the_codes() {
    let doc = std::fs::read_to_string(crate::support::root().join("docs/documented-immutables.md"))
        .unwrap();
    for p in mrguard_policy::cluster::documented::PATTERNS {
        let row = format!(
            "| `{}` | `{}` | {} |",
            p.name,
            p.regex.replace('|', "\\|"),
            p.example
        );
        assert!(
            doc.contains(&row),
            "docs/documented-immutables.md lacks the row {row}"
        );
    }
}
