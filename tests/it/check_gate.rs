//! `mrguard check` as a CI gate: it must never pass falsely. Each case runs
//! the built binary as a pipeline would and asserts the exit code and what
//! it prints.

use std::process::Output;

use serde_json::{json, Value};

use crate::support::{bin, fixtures};

fn mrguard(args: &[&str]) -> Output {
    bin::run(args)
}

fn crds() -> String {
    fixtures::path("crds")
}

fn write(dir: &tempfile::TempDir, name: &str, text: &str) -> String {
    let p = dir.path().join(name);
    std::fs::write(&p, text).unwrap();
    p.display().to_string()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn yaml(v: &Value) -> String {
    serde_saphyr::to_string(v).unwrap()
}

fn bucket(name: &str, deletion_policy: &str) -> Value {
    json!({
        "apiVersion": "s3.aws.upbound.io/v1beta1",
        "kind": "Bucket",
        "metadata": {"name": name},
        "spec": {"deletionPolicy": deletion_policy, "forProvider": {"region": "us-east-1"}},
    })
}

/// What `kubectl get buckets -o yaml` prints for these objects.
fn kubectl_list(items: Vec<Value>) -> Value {
    json!({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": items})
}

#[test]
fn a_list_is_looked_into_like_kubectl_apply_does() {
    let dir = tempfile::tempdir().unwrap();
    let alone = write(&dir, "alone.yaml", &yaml(&bucket("b", "delete")));
    let listed = write(
        &dir,
        "list.yaml",
        &yaml(&kubectl_list(vec![
            bucket("a", "Delete"),
            bucket("b", "delete"),
        ])),
    );
    let a = mrguard(&["check", "-f", &alone]);
    assert_eq!(a.status.code(), Some(1), "{}", stderr(&a));
    let l = mrguard(&["check", "-f", &listed]);
    assert_eq!(l.status.code(), Some(1), "{}", stderr(&l));
    let denial = |o: &Output| {
        stderr(o)
            .lines()
            .find(|l| l.starts_with("Bucket/b: denied:"))
            .map(str::to_string)
    };
    assert!(denial(&a).is_some(), "{}", stderr(&a));
    assert_eq!(denial(&a), denial(&l));
    assert!(denial(&l).unwrap().contains("[deletion-policy]"));
    // Each item is printed defaulted, not the List.
    let docs: Vec<Value> = serde_saphyr::from_multiple(&stdout(&l)).unwrap();
    let kinds: Vec<&str> = docs.iter().filter_map(|d| d["kind"].as_str()).collect();
    assert_eq!(kinds, ["Bucket", "Bucket"], "{}", stdout(&l));
    assert_eq!(docs[0]["spec"]["managementPolicies"], json!(["*"]));

    // A typed list (BucketList, as the API returns it) too.
    let mut typed = kubectl_list(vec![bucket("b", "delete")]);
    typed["apiVersion"] = json!("s3.aws.upbound.io/v1beta1");
    typed["kind"] = json!("BucketList");
    let t = mrguard(&["check", "-f", &write(&dir, "typed.yaml", &yaml(&typed))]);
    assert_eq!(t.status.code(), Some(1), "{}", stderr(&t));
    assert_eq!(denial(&t), denial(&a));

    // A bad item is named by document and item.
    let bad = kubectl_list(vec![bucket("a", "Delete"), json!({"kind": "Bucket"})]);
    let o = mrguard(&["check", "-f", &write(&dir, "bad.yaml", &yaml(&bad))]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("document 1, item 2: apiVersion is missing"),
        "{}",
        stderr(&o)
    );
}

/// The README's flow: `kubectl get crd -o yaml > crds.yaml`, then
/// `--crd crds.yaml`, must judge as the folder of CRD files does.
#[test]
fn a_list_of_crds_from_kubectl_get_crd_judges_like_the_folder() {
    let dir = tempfile::tempdir().unwrap();
    let mut items = Vec::new();
    for entry in std::fs::read_dir(fixtures::dir().join("crds")).unwrap() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        let docs: Vec<Value> = serde_saphyr::from_multiple(&text).unwrap();
        items.extend(docs.into_iter().filter(|d| !d.is_null()));
    }
    assert!(items.len() >= 5);
    let list = write(&dir, "crds.yaml", &yaml(&kubectl_list(items)));
    let example = fixtures::dir()
        .join("examples/aws_account_cluster_v1beta1_alternatecontact.yaml")
        .display()
        .to_string();
    let text = std::fs::read_to_string(&example).unwrap();
    let missing = write(
        &dir,
        "missing.yaml",
        &text
            .lines()
            .filter(|l| !l.trim_start().starts_with("emailAddress:"))
            .collect::<Vec<_>>()
            .join("\n"),
    );
    for (manifest, code) in [(&example, 0), (&missing, 1)] {
        let folder = mrguard(&["check", "-f", manifest, "--crd", &crds()]);
        let listed = mrguard(&["check", "-f", manifest, "--crd", &list]);
        assert_eq!(folder.status.code(), Some(code), "{}", stderr(&folder));
        assert_eq!(listed.status.code(), Some(code), "{}", stderr(&listed));
        assert_eq!(stderr(&folder), stderr(&listed));
        assert_eq!(stdout(&folder), stdout(&listed));
    }
    let o = mrguard(&["check", "-f", &missing, "--crd", &list]);
    assert!(
        stderr(&o).contains("emailAddress is a required parameter"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn a_file_without_objects_fails_like_kubectl_apply() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("empty.yaml", ""),
        (
            "comment.yaml",
            "# generated by a template that rendered nothing\n",
        ),
        ("dashes.yaml", "---\n---\n"),
        ("empty-list.yaml", "apiVersion: v1\nkind: List\nitems: []\n"),
    ];
    for (name, text) in cases {
        let path = write(&dir, name, text);
        let o = mrguard(&["check", "-f", &path]);
        assert_eq!(o.status.code(), Some(2), "{name}: {}", stderr(&o));
        assert!(o.stdout.is_empty(), "{name}");
        assert!(
            stderr(&o).contains(&format!("failed to find an object in {path}")),
            "{name}: {}",
            stderr(&o)
        );
    }
    // The same for --old.
    let new = write(&dir, "new.yaml", &yaml(&bucket("b", "Delete")));
    let old = write(&dir, "old.yaml", "# nothing\n");
    let o = mrguard(&["check", "-f", &new, "--old", &old]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("failed to find an object in"));
}

#[test]
fn a_kind_its_group_does_not_define_fails_as_the_api_server_would() {
    let dir = tempfile::tempdir().unwrap();
    let mut typo = bucket("b", "Delete");
    typo["kind"] = json!("Buckett");
    let path = write(&dir, "typo.yaml", &yaml(&typo));
    let o = mrguard(&["check", "-f", &path, "--crd", &crds()]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(
            "Buckett/b: invalid: no matches for kind \"Buckett\" in version \"s3.aws.upbound.io/v1beta1\""
        ),
        "{}",
        stderr(&o)
    );
    assert!(stderr(&o).contains("define Bucket"), "{}", stderr(&o));
    // Without --crd nothing knows the schema: mrguard's rules only.
    let o = mrguard(&["check", "-f", &path]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

#[test]
fn a_group_without_crds_is_noted_and_require_crd_fails_it() {
    let dir = tempfile::tempdir().unwrap();
    let rds = json!({
        "apiVersion": "rds.aws.upbound.io/v1beta1",
        "kind": "Instance",
        "metadata": {"name": "db"},
        "spec": {"forProvider": {"region": "us-east-1"}},
    });
    let config_map = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}});
    let deployment =
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}});
    let path = write(
        &dir,
        "mixed.yaml",
        &[&rds, &config_map, &deployment].map(yaml).join("---\n"),
    );
    let o = mrguard(&["check", "-f", &path, "--crd", &crds()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let notes: Vec<String> = stderr(&o)
        .lines()
        .filter(|l| l.contains(": note: "))
        .map(str::to_string)
        .collect();
    assert_eq!(notes.len(), 1, "built-in groups need no CRD: {notes:?}");
    assert!(notes[0].starts_with("Instance/db: note: schema not checked: no CRD in"));
    assert!(notes[0].contains("\"rds.aws.upbound.io\""), "{}", notes[0]);

    let o = mrguard(&["check", "-f", &path, "--crd", &crds(), "--require-crd"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("Instance/db: invalid: no matches for kind \"Instance\" in version \"rds.aws.upbound.io/v1beta1\""),
        "{}",
        stderr(&o)
    );
    assert!(!stderr(&o).contains("ConfigMap/c"), "{}", stderr(&o));

    // The strict flag means nothing without CRDs: a usage error.
    let o = mrguard(&["check", "-f", &path, "--require-crd"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--crd"), "{}", stderr(&o));
}

#[test]
fn too_many_documents_is_a_plain_error_and_the_limit_a_flag() {
    let dir = tempfile::tempdir().unwrap();
    let docs: Vec<String> = (0..1025)
        .map(|i| format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: c{i}}}\n"))
        .collect();
    let path = write(&dir, "many.yaml", &docs.join("---\n"));
    let o = mrguard(&["check", "-f", &path]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert_eq!(
        stderr(&o).trim(),
        format!("mrguard check: failed to read {path}: it has more than 1024 YAML documents; raise --max-documents to read them all")
    );
    let o = mrguard(&["check", "-f", &path, "--max-documents", "2000"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = mrguard(&["check", "-f", &path, "--max-documents", "10"]);
    assert!(
        stderr(&o).contains("more than 10 YAML documents"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn config_check_warns_about_empty_files_and_lost_protections() {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in [("empty.yaml", ""), ("comments.yaml", "# TODO\n")] {
        let path = write(&dir, name, text);
        let o = mrguard(&["config", "check", &path]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        assert_eq!(stdout(&o).trim(), format!("{path}: valid"));
        let err = stderr(&o);
        assert!(
            err.contains(&format!("{path}: warning: the file is empty")),
            "{err}"
        );
        // The built-in configuration exempts no one by name: nothing lost.
        assert!(!err.contains("exemptUsernames"), "{err}");
        assert!(
            err.contains("spec.forProvider.region is immutable for *.aws.upbound.io"),
            "{err}"
        );
    }

    // The built-in configuration, copied as docs/configuration.md says: no warning.
    let builtin = mrguard(&["config", "default"]);
    let path = write(&dir, "builtin.yaml", &stdout(&builtin));
    let o = mrguard(&["config", "check", &path]);
    assert_eq!(o.status.code(), Some(0));
    assert!(o.stderr.is_empty(), "{}", stderr(&o));

    // A short file that keeps only a CEL rule loses everything else.
    let path = write(
        &dir,
        "short.yaml",
        "resources:\n  - apiGroups: ['*']\n    kinds: ['*']\n    celRules:\n      - {name: team, expression: 'has(self.metadata.labels)'}\n",
    );
    let o = mrguard(&["config", "check", &path]);
    assert_eq!(o.status.code(), Some(0));
    let err = stderr(&o);
    // The rule runs on the compiled path, and says so.
    assert!(
        err.contains(&format!(
            "{path}: note: resources[0].celRules[team]: compiled"
        )),
        "{err}"
    );
    assert!(!err.contains("the file is empty"), "{err}");
    assert!(!err.contains("exemptUsernames"), "{err}");
    assert!(
        err.contains(
            "are IdentifierFromProvider in the built-in configuration, but not in this one"
        ),
        "{err}"
    );
}

/// A glob that matches Crossplane core, which writes every composed MR,
/// exempts too much. `config check` flags such a glob (exit 0: it
/// is valid) and names the account it matches; a provider glob passes.
#[test]
fn config_check_flags_a_glob_that_exempts_crossplane_core() {
    let dir = tempfile::tempdir().unwrap();
    let builtin = stdout(&mrguard(&["config", "default"]));
    let old =
        format!("{builtin}exemptUsernames: [\"system:serviceaccount:crossplane-system:*\"]\n");
    let path = write(&dir, "old-default.yaml", &old);
    let o = mrguard(&["config", "check", &path]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains(&format!("{path}: warning: exemptUsernames: \"system:serviceaccount:crossplane-system:*\" matches Crossplane's own service account system:serviceaccount:crossplane-system:crossplane")),
        "{err}"
    );
    let providers = format!(
        "{builtin}exemptUsernames: [\"system:serviceaccount:crossplane-system:provider-aws-*\"]\n"
    );
    let path = write(&dir, "providers.yaml", &providers);
    let o = mrguard(&["config", "check", &path]);
    assert_eq!(o.status.code(), Some(0));
    assert!(o.stderr.is_empty(), "{}", stderr(&o));
}

#[test]
fn check_names_the_config_file_in_its_errors() {
    let dir = tempfile::tempdir().unwrap();
    let manifest = write(&dir, "b.yaml", &yaml(&bucket("b", "Delete")));
    let config = write(&dir, "mrguard.yaml", "rules:\n  no-such-rule: Deny\n");
    let o = mrguard(&["check", "-f", &manifest, "--config", &config]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains(&format!("failed to load config file {config}")),
        "{}",
        stderr(&o)
    );
    let config = write(&dir, "typo.yaml", "rulez: {}\n");
    let o = mrguard(&["check", "-f", &manifest, "--config", &config]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains(&format!("--> {config}:1:1")),
        "{}",
        stderr(&o)
    );
    assert!(!stderr(&o).contains("<input>"), "{}", stderr(&o));
}

#[test]
fn an_allowed_immutable_change_says_why_it_was_allowed() {
    let dir = tempfile::tempdir().unwrap();
    let old = bucket("b", "Delete");
    let mut new = old.clone();
    new["spec"]["forProvider"]["region"] = json!("eu-west-1");
    let old_path = write(&dir, "old.yaml", &yaml(&old));
    let new_path = write(&dir, "new.yaml", &yaml(&new));
    let o = mrguard(&["check", "-f", &new_path, "--old", &old_path]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("Bucket/b: note: allowed only because the old object is not created yet"),
        "{err}"
    );
    assert!(
        err.contains("immutable-field would deny this: spec.forProvider.region is immutable"),
        "{err}"
    );

    // The same change on a created MR is denied, with no note.
    let mut created = old.clone();
    created["metadata"]["annotations"] =
        json!({"crossplane.io/external-create-succeeded": "2024-01-01T00:00:00Z"});
    let created_path = write(&dir, "created.yaml", &yaml(&created));
    let o = mrguard(&["check", "-f", &new_path, "--old", &created_path]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("[immutable-field]"));
    assert!(!stderr(&o).contains("note:"), "{}", stderr(&o));
}

/// `config check` says which CEL rules run compiled and why the
/// others run in the interpreter, one note per rule.
#[test]
fn config_check_says_which_cel_rules_are_compiled() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        &dir,
        "cel.yaml",
        r#"resources:
  - apiGroups: ['*']
    kinds: ['*']
    celRules:
      - {name: region, expression: "self.spec.forProvider.region.startsWith('eu-')"}
      - {name: renamed, expression: "self.metadata.name.replace('-', '') != ''"}
  - apiGroups: ['ec2.aws.upbound.io']
    kinds: ['VPC']
    celRules:
      - {name: whole, expression: "request != null"}
"#,
    );
    let o = mrguard(&["config", "check", &path]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o).trim(), format!("{path}: valid"));
    let notes: Vec<String> = stderr(&o)
        .lines()
        .filter(|l| l.contains("celRules"))
        .map(|l| l.trim_start_matches(&format!("{path}: note: ")).to_string())
        .collect();
    assert_eq!(
        notes,
        [
            "resources[0].celRules[region]: compiled",
            "resources[0].celRules[renamed]: interpreted (calls `replace`)",
            "resources[1].celRules[whole]: interpreted (uses `request` whole; only its fields are compiled)",
        ]
    );
}
