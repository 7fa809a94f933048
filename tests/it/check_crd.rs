//! `mrguard check --crd` and configured CEL rules, run as CI would run the
//! built binary: exit codes, stdout and stderr.

use std::process::Output;

use serde_json::Value;

use crate::support::bin::{run as mrguard, stderr};
use crate::support::fixtures::{self, path as fixture};
use crate::support::write;

fn crds() -> String {
    fixture("crds")
}

const CONTACT: &str = "examples/aws_account_cluster_v1beta1_alternatecontact.yaml";

fn stdout_docs(o: &Output) -> Vec<Value> {
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(std::str::from_utf8(&o.stdout).unwrap()).unwrap();
    docs.into_iter().filter(|d| !d.is_null()).collect()
}

/// The AlternateContact example without some forProvider fields.
/// The example without some of `spec.forProvider`'s fields (indented by 4).
fn contact_without(fields: &[&str]) -> String {
    let text = fixtures::read(CONTACT);
    text.lines()
        .filter(|l| !fields.iter().any(|f| l.starts_with(&format!("    {f}:"))))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn the_full_example_passes_with_crd_defaults_applied() {
    for example in [
        CONTACT,
        "examples/aws_account_namespaced_v1beta1_alternatecontact.yaml",
    ] {
        let out = mrguard(&["check", "-f", &fixture(example), "--crd", &crds()]);
        assert_eq!(out.status.code(), Some(0), "{example}: {}", stderr(&out));
        let docs = stdout_docs(&out);
        assert_eq!(docs.len(), 1);
        assert_eq!(
            docs[0]["spec"]["managementPolicies"],
            serde_json::json!(["*"])
        );
        assert!(out.stderr.is_empty(), "{}", stderr(&out));
    }
}

/// The provider's own AlternateContact CRDs (MRGUARD_FIXTURES): upjet's
/// generated rules judge as the project's stand-ins do, and those carry
/// the same rules, word for word.
#[test]
fn upjets_generated_rules_judge_the_real_crds() {
    let Some(third_party) = fixtures::third_party("upjets_generated_rules_judge_the_real_crds")
    else {
        return;
    };
    let real = third_party.join("crds");
    let real_crds = real.display().to_string();
    let rules = |path: &std::path::Path| -> Value {
        let crd: Value = serde_saphyr::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
            ["x-kubernetes-validations"]
            .clone()
    };
    for name in [
        "account.aws.upbound.io_alternatecontacts.yaml",
        "account.aws.m.upbound.io_alternatecontacts.yaml",
    ] {
        let theirs = rules(&real.join(name));
        assert_eq!(theirs.as_array().map(Vec::len), Some(4), "{name}");
        assert_eq!(
            rules(&fixtures::dir().join("crds").join(name)),
            theirs,
            "{name}"
        );
    }
    let out = mrguard(&["check", "-f", &fixture(CONTACT), "--crd", &real_crds]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let dir = tempfile::tempdir().unwrap();
    for field in ["emailAddress", "name", "phoneNumber", "title"] {
        let f = write(dir.path(), "c.yaml", &contact_without(&[field]));
        let out = mrguard(&["check", "-f", &f, "--crd", &real_crds]);
        assert_eq!(out.status.code(), Some(1), "{field}: {}", stderr(&out));
        assert!(
            stderr(&out).contains(&format!(
                "spec: Invalid value: spec.forProvider.{field} is a required parameter"
            )),
            "{}",
            stderr(&out)
        );
    }
}

#[test]
fn a_missing_parameter_is_rejected_with_upjets_message() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(dir.path(), "c.yaml", &contact_without(&["emailAddress"]));
    let out = mrguard(&["check", "-f", &f, "--crd", &crds()]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(
        stderr(&out),
        "AlternateContact/operations: invalid: The AlternateContact \"operations\" is invalid: \
         spec: Invalid value: spec.forProvider.emailAddress is a required parameter\n"
    );
    // Without --crd nothing checks it: mrguard's own rules pass it.
    let out = mrguard(&["check", "-f", &f]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

#[test]
fn every_missing_parameter_is_listed_as_kubectl_lists_them() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(
        dir.path(),
        "c.yaml",
        &contact_without(&["phoneNumber", "title"]),
    );
    let out = mrguard(&["check", "-f", &f, "--crd", &crds()]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.contains("is invalid: \n* spec: Invalid value: spec.forProvider.phoneNumber is a required parameter\n* spec: Invalid value: spec.forProvider.title is a required parameter\n"), "{err}");
}

#[test]
fn init_provider_and_observe_only_satisfy_the_rules() {
    let dir = tempfile::tempdir().unwrap();
    let base = contact_without(&["emailAddress"]);
    let init = format!("{base}\n  initProvider:\n    emailAddress: a@example.com\n");
    let f = write(dir.path(), "init.yaml", &init);
    let out = mrguard(&["check", "-f", &f, "--crd", &crds()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));

    let observe = contact_without(&["emailAddress", "name", "phoneNumber", "title"])
        + "\n  managementPolicies: [Observe]\n";
    let f = write(dir.path(), "observe.yaml", &observe);
    let out = mrguard(&["check", "-f", &f, "--crd", &crds()]);
    // mrguard itself warns or not, but the CRD rules pass.
    assert!(!stderr(&out).contains("invalid"), "{}", stderr(&out));
}

#[test]
fn type_enum_required_and_unknown_field_errors_carry_their_paths() {
    let dir = tempfile::tempdir().unwrap();
    let text = contact_without(&["alternateContactType"]).replace("name: Example", "name: 12")
        + "\n  managementPolicies: [Observe, Delete, Destroy]\n  deletionPolicy: delete\n";
    let f = write(dir.path(), "bad.yaml", &text);
    let out = mrguard(&["check", "-f", &f, "--crd", &crds()]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    for line in [
        "* spec.deletionPolicy: Unsupported value: \"delete\": supported values: \"Orphan\", \"Delete\"",
        "* spec.forProvider.alternateContactType: Required value",
        "* spec.forProvider.name: Invalid value: \"integer\": spec.forProvider.name in body must be of type string: \"integer\"",
        "* spec.managementPolicies[2]: Unsupported value: \"Destroy\"",
    ] {
        assert!(err.contains(line), "{line}\n---\n{err}");
    }
    // mrguard's own rules still run: the deletionPolicy case is theirs too.
    assert!(
        err.contains("denied: ") && err.contains("[deletion-policy]"),
        "{err}"
    );

    let unknown =
        contact_without(&[]).replace("title: Example", "title: Example\n    colour: blue");
    let f = write(dir.path(), "unknown.yaml", &unknown);
    let out = mrguard(&["check", "-f", &f, "--crd", &crds()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out)
            .contains("invalid: strict decoding error: unknown field \"spec.forProvider.colour\""),
        "{}",
        stderr(&out)
    );
}

#[test]
fn kinds_without_a_crd_still_get_mrguards_rules() {
    let only_contacts = fixture("crds/account.aws.upbound.io_alternatecontacts.yaml");
    let out = mrguard(&[
        "check",
        "-f",
        &fixture("examples/aws_ec2_cluster_v1beta1_vpc.yaml"),
        "--crd",
        &only_contacts,
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let dir = tempfile::tempdir().unwrap();
    let text = fixtures::read("examples/aws_ec2_cluster_v1beta1_vpc.yaml")
        .replace("spec:\n", "spec:\n  deletionPolicy: Keep\n");
    let f = write(dir.path(), "vpc.yaml", &text);
    let out = mrguard(&["check", "-f", &f, "--crd", &only_contacts]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains("[deletion-policy]") && !err.contains("invalid:"),
        "{err}"
    );
}

#[test]
fn crd_defaults_come_before_mutation() {
    // The CRD defaults providerConfigRef to {name: default}; mrguard treats
    // that name as unset and applies the configured one, as in a cluster.
    let dir = tempfile::tempdir().unwrap();
    let config = write(
        dir.path(),
        "config.yaml",
        "providerConfig: {defaultName: aws-prod}\n",
    );
    let out = mrguard(&[
        "check",
        "-f",
        &fixture(CONTACT),
        "--crd",
        &crds(),
        "--config",
        &config,
        "--patch",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    let patch: Value = serde_json::from_str(text.split_once('\n').unwrap().1).unwrap();
    let ops: Vec<&str> = patch
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["path"].as_str().unwrap())
        .collect();
    // The webhook's patch is relative to the defaulted object: the CRD
    // already set managementPolicies and deletionPolicy.
    assert!(ops.contains(&"/spec/providerConfigRef/name"), "{ops:?}");
    assert!(!ops.contains(&"/spec/managementPolicies"), "{ops:?}");
    assert!(!ops.contains(&"/spec/deletionPolicy"), "{ops:?}");
}

const WIDGET_CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.org}
spec:
  group: example.org
  names: {kind: Widget, plural: widgets, categories: [managed]}
  scope: Cluster
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec:
              type: object
              x-kubernetes-validations:
                - rule: "self.size == oldSelf.size"
                  message: size is immutable
                - rule: "self.size * 2 <= 20"
                  messageExpression: "'size ' + string(self.size) + ' is over 10'"
              properties:
                size: {type: integer, default: 3}
                forProvider: {type: object, x-kubernetes-preserve-unknown-fields: true}
"#;

fn widget(size: i64) -> String {
    format!(
        "apiVersion: example.org/v1\nkind: Widget\nmetadata: {{name: w}}\nspec:\n  size: {size}\n  forProvider: {{}}\n"
    )
}

#[test]
fn transition_rules_use_old_and_message_expressions_render() {
    let dir = tempfile::tempdir().unwrap();
    let crd = write(dir.path(), "crd.yaml", WIDGET_CRD);
    let new = write(dir.path(), "new.yaml", &widget(4));
    let old = write(dir.path(), "old.yaml", &widget(3));
    let out = mrguard(&["check", "-f", &new, "--crd", &crd]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = mrguard(&["check", "-f", &new, "--old", &old, "--crd", &crd]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out)
            .contains("The Widget \"w\" is invalid: spec: Invalid value: size is immutable"),
        "{}",
        stderr(&out)
    );
    let big = write(dir.path(), "big.yaml", &widget(11));
    let out = mrguard(&["check", "-f", &big, "--crd", &crd]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("spec: Invalid value: size 11 is over 10"),
        "{}",
        stderr(&out)
    );
    // An unserved version is what kubectl would call "no matches".
    let v2 = write(
        dir.path(),
        "v2.yaml",
        &widget(1).replace("example.org/v1", "example.org/v2"),
    );
    let out = mrguard(&["check", "-f", &v2, "--crd", &crd]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("no matches for kind \"Widget\" in version \"example.org/v2\""),
        "{}",
        stderr(&out)
    );
}

#[test]
fn unsupported_cel_fails_loudly_and_only_for_its_kind() {
    let dir = tempfile::tempdir().unwrap();
    let crd = WIDGET_CRD.replace("self.size * 2 <= 20", "isURL(self.endpoint)");
    let crds = dir.path().join("crds");
    std::fs::create_dir(&crds).unwrap();
    std::fs::write(crds.join("widget.yaml"), crd).unwrap();
    std::fs::copy(
        fixture("crds/account.aws.upbound.io_alternatecontacts.yaml"),
        crds.join("contacts.yaml"),
    )
    .unwrap();
    let crds = crds.display().to_string();
    let w = write(dir.path(), "w.yaml", &widget(1));
    let out = mrguard(&["check", "-f", &w, "--crd", &crds]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("widgets.example.org v1")
            && err.contains("isURL(self.endpoint)")
            && err.contains("function 'isURL' is not supported")
            && err.contains("docs/cel.md"),
        "{err}"
    );
    let out = mrguard(&["check", "-f", &fixture(CONTACT), "--crd", &crds]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

#[test]
fn unreadable_crd_paths_exit_2() {
    let out = mrguard(&[
        "check",
        "-f",
        &fixture(CONTACT),
        "--crd",
        "/nonexistent/crds",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("failed to read /nonexistent/crds"),
        "{}",
        stderr(&out)
    );
    let dir = tempfile::tempdir().unwrap();
    let empty = write(
        dir.path(),
        "none.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n",
    );
    let out = mrguard(&["check", "-f", &fixture(CONTACT), "--crd", &empty]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("failed to find a CustomResourceDefinition"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn configured_cel_rules_deny_and_warn_offline() {
    let dir = tempfile::tempdir().unwrap();
    let config = write(
        dir.path(),
        "config.yaml",
        r#"
resources:
  - apiGroups: ["account.aws.upbound.io"]
    kinds: ["AlternateContact"]
    celRules:
      - name: team
        expression: "has(self.metadata.labels) && 'team' in self.metadata.labels"
        message: every MR needs a team label
      - name: ops-type
        expression: "self.spec.forProvider.alternateContactType != 'OPERATIONS'"
        messageExpression: "'type ' + self.spec.forProvider.alternateContactType + ' needs review'"
        action: Warn
"#,
    );
    let out = mrguard(&["check", "-f", &fixture(CONTACT), "--config", &config]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains("warning: cel:ops-type: type OPERATIONS needs review"),
        "{err}"
    );
    assert!(
        err.contains("[cel:team] every MR needs a team label"),
        "{err}"
    );
    // `config check` rejects a rule that does not compile, naming it.
    let bad = write(
        dir.path(),
        "bad.yaml",
        "resources:\n  - apiGroups: ['*']\n    kinds: ['*']\n    celRules:\n      - {name: oops, expression: 'self.a +'}\n",
    );
    let out = mrguard(&["config", "check", &bad]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("\"oops\""), "{}", stderr(&out));
}

#[test]
fn only_the_crds_of_the_manifests_groups_are_parsed() {
    // A family folder: the contact's CRD, and a file of another group that
    // does not even parse. Only files naming a manifest's group are read.
    let dir = tempfile::tempdir().unwrap();
    let crd_dir = dir.path().join("crds");
    std::fs::create_dir(&crd_dir).unwrap();
    std::fs::copy(
        fixture("crds/account.aws.upbound.io_alternatecontacts.yaml"),
        crd_dir.join("account.yaml"),
    )
    .unwrap();
    std::fs::write(
        crd_dir.join("other.yaml"),
        "kind: CustomResourceDefinition\nspec:\n  group: other.example.org\n  versions: [",
    )
    .unwrap();
    let f = write(dir.path(), "contact.yaml", &fixtures::read(CONTACT));
    let crds = crd_dir.display().to_string();
    let out = mrguard(&["check", "-f", &f, "--crd", &crds]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // A manifest of the broken file's group makes it read, and fail.
    let other = "apiVersion: other.example.org/v1\nkind: Thing\nmetadata: {name: t}\n";
    let f = write(dir.path(), "other-thing.yaml", other);
    let out = mrguard(&["check", "-f", &f, "--crd", &crds]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("other.yaml"), "{}", stderr(&out));
}

/// Where `check --crd` and the API server could disagree, through the
/// binary: a name the API server
/// refuses, a rule on an escaped property name, and unknown fields inside a
/// value of the wrong type.
#[test]
fn metadata_escaping_and_strict_decoding_as_the_api_server() {
    let Some(third_party) =
        fixtures::third_party("metadata_escaping_and_strict_decoding_as_the_api_server")
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let crds = third_party
        .join("differential/package/crds")
        .display()
        .to_string();
    let pia = |name: &str, namespace: &str| {
        format!(
            "apiVersion: eks.aws.upbound.io/v1beta1\nkind: PodIdentityAssociation\nmetadata:\n  name: {name}\nspec:\n  forProvider:\n    clusterName: c\n    region: us-west-1\n    roleArn: arn:aws:iam::1:role/r\n    serviceAccount: default\n{namespace}"
        )
    };
    // `has(self.forProvider.__namespace__)` reads the field `namespace`.
    let f = write(
        dir.path(),
        "pia.yaml",
        &pia("pia", "    namespace: default\n"),
    );
    let out = mrguard(&["check", "-f", &f, "--crd", &crds]);
    assert!(!stderr(&out).contains("invalid"), "{}", stderr(&out));
    let f = write(dir.path(), "pia-missing.yaml", &pia("pia", ""));
    let out = mrguard(&["check", "-f", &f, "--crd", &crds]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("spec.forProvider.namespace is a required parameter"),
        "{}",
        stderr(&out)
    );
    // Upstream's placeholder name.
    let f = write(
        dir.path(),
        "name.yaml",
        &pia("${Rand.RFC1123Subdomain}", "    namespace: default\n"),
    );
    let out = mrguard(&["check", "-f", &f, "--crd", &crds]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("metadata.name: Invalid value: \"${Rand.RFC1123Subdomain}\": a lowercase RFC 1123 subdomain"),
        "{}",
        stderr(&out)
    );
    // A one-item list given for an object: its fields are unknown.
    let role = "apiVersion: iam.aws.upbound.io/v1beta1\nkind: Role\nmetadata:\n  name: r\nspec:\n  forProvider:\n    assumeRolePolicy: '{}'\n    managedPolicyArnsSelector:\n      - matchLabels: {a: b}\n";
    let f = write(dir.path(), "role.yaml", role);
    let out = mrguard(&["check", "-f", &f, "--crd", &crds]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("invalid: strict decoding error: unknown field \"spec.forProvider.managedPolicyArnsSelector[0].matchLabels\""),
        "{}",
        stderr(&out)
    );
}

#[test]
fn kube_version_judges_as_that_releases_api_server() {
    let dir = tempfile::tempdir().unwrap();
    let crd = write(dir.path(), "crd.yaml", WIDGET_CRD);
    // size 11 fails `self.size * 2 <= 20`; spec.colour is not in the schema.
    let bad = write(
        dir.path(),
        "bad.yaml",
        &format!("{}  colour: blue\n", widget(11)),
    );
    // Today, as without the flag: strict field validation refuses it.
    for flags in [&[][..], &["--kube-version", "1.36"][..]] {
        let mut args = vec!["check", "-f", &bad, "--crd", &crd];
        args.extend_from_slice(flags);
        let out = mrguard(&args);
        assert_eq!(out.status.code(), Some(1), "{flags:?}: {}", stderr(&out));
        assert_eq!(
            stderr(&out),
            "Widget/w: invalid: strict decoding error: unknown field \"spec.colour\"\n",
            "{flags:?}"
        );
    }
    // 1.20 enforces no CEL rule and prunes the unknown field: accepted,
    // and the notes say what a current API server would have refused.
    let out = mrguard(&["check", "-f", &bad, "--crd", &crd, "--kube-version", "1.20"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        stderr(&out),
        "Widget/w: note: 2 x-kubernetes-validations rules of CRD widgets.example.org not \
         evaluated: Kubernetes 1.20 does not enforce CRD validation rules (from 1.25)\n\
         Widget/w: note: unknown field \"spec.colour\" pruned: Kubernetes 1.20 drops fields \
         the schema does not know and accepts the object (server-side field validation \
         refuses them from 1.25)\n"
    );
    let docs = stdout_docs(&out);
    assert_eq!(
        docs[0]["spec"],
        serde_json::json!({"size": 11, "forProvider": {}})
    );
    // 1.26 enforces the rule, without messageExpression (from 1.27).
    let big = write(dir.path(), "big.yaml", &widget(11));
    let out = mrguard(&[
        "check",
        "-f",
        &big,
        "--crd",
        &crd,
        "--kube-version",
        "v1.26.3",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("spec: Invalid value: \"object\": failed rule: self.size * 2 <= 20"),
        "{}",
        stderr(&out)
    );
    let out = mrguard(&["check", "-f", &big, "--crd", &crd, "--kube-version", "1.27"]);
    assert!(
        stderr(&out).contains("spec: Invalid value: \"object\": size 11 is over 10"),
        "{}",
        stderr(&out)
    );
    // A release newer than mrguard knows is judged as the newest, with a note.
    let out = mrguard(&["check", "-f", &bad, "--crd", &crd, "--kube-version", "1.99"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).starts_with(
            "mrguard check: note: Kubernetes 1.99 is newer than the newest version this \
             mrguard knows (1.36): judged as 1.36 would judge"
        ),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_bad_kube_version_is_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    let crd = write(dir.path(), "crd.yaml", WIDGET_CRD);
    let w = write(dir.path(), "w.yaml", &widget(1));
    for (given, says) in [
        (
            "1.x",
            "\"1.x\" is not a Kubernetes version: expected MAJOR.MINOR, such as 1.36",
        ),
        (
            "1.2x",
            "\"1.2x\" is not a Kubernetes version: expected MAJOR.MINOR",
        ),
        (
            "1.19",
            "Kubernetes 1.19 is not a version mrguard can judge as: it models 1.20 to 1.36",
        ),
    ] {
        let out = mrguard(&["check", "-f", &w, "--crd", &crd, "--kube-version", given]);
        assert_eq!(out.status.code(), Some(2), "{given}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(
            err.contains(&format!(
                "invalid value '{given}' for '--kube-version <MAJOR.MINOR>'"
            )) && err.contains(says),
            "{given}: {err}"
        );
    }
    // It only means something with --crd.
    let out = mrguard(&["check", "-f", &w, "--kube-version", "1.20"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--crd"), "{}", stderr(&out));
}

/// Crossplane v2 (docs/activation.md): MRD files in `--crd` judge like the
/// CRDs they become, and an MR or composed kind that no MRAP activates is
/// a warning naming its MRD. The MRAP in the singular activates nothing.
#[test]
fn mrds_in_crd_judge_like_crds_and_inactive_kinds_are_named() {
    let dir = fixture("activation");
    let bucket = fixture("activation/bucket.yaml");
    let out = mrguard(&["check", "-f", &bucket, "--crd", &dir]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains(
            "Bucket/logs: warning: kind Bucket.s3.aws.upbound.io is served by MRD \
             buckets.s3.aws.upbound.io, which no MRAP activates (state Inactive); add \
             \"buckets.s3.aws.upbound.io\" (or a pattern that matches it) to an MRAP's spec.activate"
        ),
        "{err}"
    );
    // The MRD's schema judges: a wrong type is invalid, as with its CRD.
    let tmp = tempfile::tempdir().unwrap();
    let wrong = write(
        tmp.path(),
        "bucket.yaml",
        "apiVersion: s3.aws.upbound.io/v1beta1\nkind: Bucket\nmetadata:\n  name: logs\n\
         spec:\n  forProvider:\n    region: us-east-1\n    objectLockEnabled: maybe\n",
    );
    let out = mrguard(&["check", "-f", &wrong, "--crd", &dir]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("spec.forProvider.objectLockEnabled"), "{err}");

    // The Composition: one warning for the inactive Bucket, none for the
    // active VPC, at the line of the resource's base.
    let composition = fixture("activation/composition.yaml");
    let out = mrguard(&["check", "-f", &composition, "--crd", &dir]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let inactive: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("no MRAP activates"))
        .collect();
    assert_eq!(inactive.len(), 1, "{err}");
    assert!(
        inactive[0].starts_with(&format!(
            "Composition/xstorage.example.org: warning: {composition}:27: composed resource \"bucket\": \
             kind Bucket.s3.aws.upbound.io is served by MRD buckets.s3.aws.upbound.io"
        )),
        "{err}"
    );
    assert!(
        inactive[0].ends_with("Crossplane fails to compose it with \"no matches for kind\""),
        "{err}"
    );

    // An MRAP is judged as the webhook judges it.
    let out = mrguard(&[
        "check",
        "-f",
        &fixture("activation/mrap.yaml"),
        "--crd",
        &dir,
    ]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains(
            "ManagedResourceActivationPolicy/storage: warning: spec.activate[0]: \"bucket.s3.aws.upbound.io\" \
             matches no ManagedResourceDefinition; did you mean \"buckets.s3.aws.upbound.io\"?"
        ),
        "{err}"
    );

    // crd immutables reads the MRDs.
    let out = mrguard(&["crd", "immutables", &fixture("activation/mrds.yaml")]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        text.contains(
            "s3.aws.upbound.io/Bucket (buckets.s3.aws.upbound.io): 1 documented-immutable field"
        ),
        "{text}"
    );
}

/// A ProviderConfig CRD of the family among the `--crd` files tells
/// `provider-config-kind` which kinds the family serves, as the replica's
/// watch of CRDs does: a `.m.` MR naming `kind: ProviderConfigs` is denied
/// offline as the cluster denies it, and `ClusterProviderConfig` passes.
/// Without those CRDs nothing is known, and nothing is found.
#[test]
fn provider_config_crds_among_the_files_judge_the_kind_an_mr_names() {
    let dir = tempfile::tempdir().unwrap();
    let crds = dir.path().join("crds");
    std::fs::create_dir(&crds).unwrap();
    std::fs::copy(
        fixture("crds/ec2.aws.m.upbound.io_vpcs.yaml"),
        crds.join("vpcs.yaml"),
    )
    .unwrap();
    let pc = |kind: &str, scope: &str| {
        let plural = format!("{}s", kind.to_lowercase());
        format!(
            "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: {plural}.aws.m.upbound.io\nspec:\n  group: aws.m.upbound.io\n  scope: {scope}\n  names: {{kind: {kind}, listKind: {kind}List, plural: {plural}, singular: {}, categories: [crossplane, providerconfig, aws]}}\n  versions:\n    - name: v1beta1\n      served: true\n      storage: true\n      schema: {{openAPIV3Schema: {{type: object, x-kubernetes-preserve-unknown-fields: true}}}}\n",
            kind.to_lowercase()
        )
    };
    let vpc = |kind: &str| {
        format!(
            "apiVersion: ec2.aws.m.upbound.io/v1beta1\nkind: VPC\nmetadata: {{name: net, namespace: team-a}}\nspec:\n  forProvider: {{region: us-east-1, cidrBlock: 10.0.0.0/16}}\n  providerConfigRef: {{kind: {kind}, name: default}}\n"
        )
    };
    let bad = write(dir.path(), "bad.yaml", &vpc("ProviderConfigs"));
    let good = write(dir.path(), "good.yaml", &vpc("ClusterProviderConfig"));
    let crd_dir = crds.display().to_string();

    // Without the family's ProviderConfig CRDs: unknown, so nothing found.
    let out = mrguard(&["check", "-f", &bad, "--crd", &crd_dir]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));

    write(&crds, "pc.yaml", &pc("ProviderConfig", "Namespaced"));
    write(&crds, "cpc.yaml", &pc("ClusterProviderConfig", "Cluster"));
    write(
        &crds,
        "usage.yaml",
        &pc("ProviderConfigUsage", "Namespaced"),
    );
    let out = mrguard(&["check", "-f", &bad, "--crd", &crd_dir]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(
            "[provider-config-kind] spec.providerConfigRef.kind \"ProviderConfigs\" is not a kind aws.m.upbound.io serves; it serves ClusterProviderConfig and ProviderConfig"
        ),
        "{}",
        stderr(&out)
    );
    let out = mrguard(&["check", "-f", &good, "--crd", &crd_dir]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        !stderr(&out).contains("provider-config"),
        "no provider-config-exists finding offline: {}",
        stderr(&out)
    );
}
