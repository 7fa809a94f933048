//! `mrguard check` as CI pipelines run it: exit codes, stdout, stderr.

use serde_json::Value;

use crate::support::bin::run as mrguard;
use crate::support::fixtures;
use crate::support::write;

fn examples(name: &str) -> String {
    fixtures::path(&format!("examples/{name}"))
}

#[test]
fn a_clean_multi_document_file_prints_defaulted_objects_and_exits_0() {
    let out = mrguard(&[
        "check",
        "-f",
        &examples("aws_ec2_cluster_v1beta1_subnet.yaml"),
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(std::str::from_utf8(&out.stdout).unwrap()).unwrap();
    let docs: Vec<Value> = docs.into_iter().filter(|d| !d.is_null()).collect();
    assert_eq!(docs.len(), 2, "the example holds a Subnet and a VPC");
    for d in &docs {
        assert_eq!(d["spec"]["deletionPolicy"], "Delete");
        assert_eq!(d["spec"]["providerConfigRef"]["name"], "default");
    }
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn patch_mode_prints_json_patches() {
    let out = mrguard(&[
        "check",
        "--patch",
        "-f",
        &examples("aws_s3_cluster_v1beta1_bucket.yaml"),
    ]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("# Bucket/"), "{text}");
    // One "# Kind/name" header and one JSON array per object.
    let patches: Vec<Value> = text
        .split("# ")
        .filter(|s| !s.is_empty())
        .map(|chunk| serde_json::from_str(chunk.split_once('\n').unwrap().1).unwrap())
        .collect();
    assert!(!patches.is_empty());
    for p in &patches {
        assert!(
            p.as_array()
                .unwrap()
                .iter()
                .any(|op| op["path"] == "/metadata/annotations"),
            "{p}"
        );
    }
}

#[test]
fn denials_go_to_stderr_and_exit_1_with_each_object_judged() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(
        dir.path(),
        "m.yaml",
        "apiVersion: s3.aws.upbound.io/v1beta1\nkind: Bucket\nmetadata: {name: ok}\nspec:\n  forProvider: {region: us-east-1}\n---\n\
         apiVersion: s3.aws.upbound.io/v1beta1\nkind: Bucket\nmetadata: {name: bad}\nspec:\n  deletionPolicy: orphan\n  managementPolicies: ['*', Observe]\n  forProvider: {region: us-east-1}\n---\n\
         apiVersion: s3.aws.upbound.io/v1beta1\nkind: Bucket\nmetadata: {name: warned, annotations: {crossplane.io/paused: 'True'}}\nspec:\n  forProvider: {region: us-east-1}\n",
    );
    let out = mrguard(&["check", "-f", &f]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("Bucket/bad: denied:"), "{err}");
    assert!(
        err.contains("[deletion-policy]") && err.contains("[management-policies]"),
        "{err}"
    );
    assert!(
        err.contains("Bucket/warned: warning: paused-value: "),
        "{err}"
    );
    assert!(!err.contains("Bucket/ok"), "{err}");
    // All three objects are still printed.
    assert_eq!(
        String::from_utf8(out.stdout)
            .unwrap()
            .matches("kind: Bucket")
            .count(),
        3
    );
}

/// Offline, `-o json` and `-o sarif` replace the objects on stdout with
/// the results, each finding at the line of the field it names.
#[test]
fn offline_json_and_sarif_point_findings_at_their_lines() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(
        dir.path(),
        "m.yaml",
        "apiVersion: s3.aws.upbound.io/v1beta1\nkind: Bucket\nmetadata: {name: bad}\nspec:\n  forProvider: {region: us-east-1}\n  deletionPolicy: orphan\n",
    );
    let out = mrguard(&["check", "-f", &f, "-o", "json"]);
    assert_eq!(out.status.code(), Some(1));
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r[0]["object"], "Bucket/bad");
    assert_eq!(r[0]["verdict"], "denied");
    assert_eq!(r[0]["findings"][0]["rule"], "deletion-policy");
    assert_eq!(r[0]["findings"][0]["line"], 6);
    let out = mrguard(&["check", "-f", &f, "-o", "sarif"]);
    assert_eq!(out.status.code(), Some(1));
    let log: Value = serde_json::from_slice(&out.stdout).unwrap();
    let res = &log["runs"][0]["results"][0];
    assert_eq!(res["level"], "error");
    assert_eq!(
        res["locations"][0]["physicalLocation"]["region"]["startLine"],
        6
    );
}

#[test]
fn update_with_old_file_and_exempt_username() {
    let dir = tempfile::tempdir().unwrap();
    let old = write(dir.path(), "old.yaml", "apiVersion: ec2.aws.upbound.io/v1beta1\nkind: VPC\nmetadata:\n  name: v\n  annotations: {crossplane.io/external-create-succeeded: '2024-01-01T00:00:00Z', crossplane.io/external-name: vpc-1}\nspec:\n  forProvider: {region: us-west-1}\n");
    let new = write(dir.path(), "new.yaml", "apiVersion: ec2.aws.upbound.io/v1beta1\nkind: VPC\nmetadata:\n  name: v\n  annotations: {crossplane.io/external-create-succeeded: '2024-01-01T00:00:00Z', crossplane.io/external-name: vpc-1}\nspec:\n  forProvider: {region: us-east-1}\n");
    let out = mrguard(&["check", "-f", &new, "--old", &old]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("[immutable-field]"));
    // The built-in configuration exempts no one by name (providers are
    // derived in a cluster); a configured glob does.
    let out = mrguard(&[
        "check",
        "-f",
        &new,
        "--old",
        &old,
        "--username",
        "system:serviceaccount:crossplane-system:provider-aws-ec2",
    ]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let config = write(
        dir.path(),
        "config.yaml",
        "exemptUsernames: ['system:serviceaccount:crossplane-system:provider-aws-*']\nresources:\n  - apiGroups: ['*']\n    kinds: ['*']\n    immutableFields: [spec.forProvider.region]\n",
    );
    let out = mrguard(&[
        "check",
        "-f",
        &new,
        "--old",
        &old,
        "--config",
        &config,
        "--username",
        "system:serviceaccount:crossplane-system:provider-aws-ec2",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Explicit CREATE ignores the old file's transition rules.
    let out = mrguard(&["check", "-f", &new, "--old", &old, "--operation", "CREATE"]);
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn delete_operation_judges_the_object_as_old() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(dir.path(), "p.yaml", "apiVersion: s3.aws.upbound.io/v1beta1\nkind: Bucket\nmetadata:\n  name: b\n  finalizers: [finalizer.managedresource.crossplane.io]\n  annotations: {crossplane.io/paused: 'true'}\nspec:\n  forProvider: {}\n");
    let out = mrguard(&["check", "-f", &f, "--operation", "DELETE"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("[paused-delete]"));
    assert!(out.stdout.is_empty());
}

#[test]
fn config_overrides_apply() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write(dir.path(), "c.yaml", "rules: {deletion-policy: Warn}\n");
    let f = write(dir.path(), "m.yaml", "apiVersion: s3.aws.upbound.io/v1beta1\nkind: Bucket\nmetadata: {name: b}\nspec:\n  deletionPolicy: nope\n  forProvider: {}\n");
    assert_eq!(mrguard(&["check", "-f", &f]).status.code(), Some(1));
    let out = mrguard(&["check", "-f", &f, "--config", &cfg]);
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stderr).contains("warning: deletion-policy: "));
}

#[test]
fn unreadable_input_exits_2_naming_file_and_document() {
    let dir = tempfile::tempdir().unwrap();
    let out = mrguard(&["check", "-f", "/no/such/file.yaml"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/no/such/file.yaml"));

    let f = write(
        dir.path(),
        "bad.yaml",
        "apiVersion: v1\nkind: X\nmetadata: {name: a}\n---\n[1, 2]\n",
    );
    let out = mrguard(&["check", "-f", &f]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("bad.yaml") && err.contains("document 2"),
        "{err}"
    );

    let f = write(dir.path(), "broken.yaml", "kind: [unclosed\n");
    let out = mrguard(&["check", "-f", &f]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("line 1"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let f = write(
        dir.path(),
        "nokind.yaml",
        "apiVersion: v1\nmetadata: {name: a}\n",
    );
    let out = mrguard(&["check", "-f", &f]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("kind is missing"));

    let ok = examples("aws_s3_cluster_v1beta1_bucket.yaml");
    let out = mrguard(&["check", "-f", &ok, "--old", &f]);
    assert_eq!(out.status.code(), Some(2), "old file without the object");
    let out = mrguard(&["check", "-f", &ok, "--operation", "PATCH"]);
    assert_eq!(out.status.code(), Some(2), "bad flag");
    let cfg = write(dir.path(), "c.yaml", "nope: 1\n");
    let out = mrguard(&["check", "-f", &ok, "--config", &cfg]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn config_check_validates_files() {
    let dir = tempfile::tempdir().unwrap();
    let good = write(dir.path(), "good.yaml", "rules: {paused-delete: Warn}\n");
    let out = mrguard(&["config", "check", &good]);
    assert_eq!(out.status.code(), Some(0));
    let bad = write(
        dir.path(),
        "bad.yaml",
        "rules: {paused-delete: Sometimes}\n",
    );
    let out = mrguard(&["config", "check", &bad]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("Sometimes"));
    // The built-in default, printed, is itself a valid file.
    let out = mrguard(&["config", "default"]);
    let builtin = write(
        dir.path(),
        "builtin.yaml",
        std::str::from_utf8(&out.stdout).unwrap(),
    );
    assert_eq!(
        mrguard(&["config", "check", &builtin]).status.code(),
        Some(0)
    );
}

/// `--log-level` and `--log-format` are global flags, and every subcommand
/// logs by them, not only `serve`: a debug line on stderr, as JSON when
/// asked, while stdout keeps the checked documents.
#[test]
fn the_log_flags_work_for_check_too() {
    let example = examples("aws_ec2_cluster_v1beta1_subnet.yaml");
    let run = |args: &[&str]| {
        crate::support::bin::mrguard()
            .args(args)
            .env_remove("MRGUARD_LOG")
            .env_remove("MRGUARD_LOG_FORMAT")
            .output()
            .unwrap()
    };
    let out = run(&[
        "--log-level",
        "debug",
        "--log-format",
        "json",
        "check",
        "-f",
        &example,
    ]);
    assert_eq!(out.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<Value> = stderr
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert!(
        lines
            .iter()
            .any(|l| l["level"] == "DEBUG" && l["fields"]["command"] == "check"),
        "{stderr}"
    );
    assert!(std::str::from_utf8(&out.stdout)
        .unwrap()
        .contains("providerConfigRef"));
    // After the subcommand too, in text.
    let out = run(&["check", "--log-level", "debug", "-f", &example]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("DEBUG") && stderr.contains("mrguard starting"),
        "{stderr}"
    );
    // At the default level, nothing.
    assert!(run(&["check", "-f", &example]).stderr.is_empty());
}
