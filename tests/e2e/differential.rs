//! `check --crd` against a real API server, document by document: the
//! upstream provider-upjet-aws CRDs and example manifests in
//! `differential/` of MRGUARD_FIXTURES, plus hand-written hostile
//! documents (tests/fixtures/differential/hostile), each judged by mrguard's CRD code (what `check --crd` runs)
//! and by a server-side dry-run create with strict field validation.
//!
//! The vendored run asserts 0 false greens and 0 false reds, and the same
//! fields on both sides except where the test server's version (1.24)
//! differs from current Kubernetes in a way listed in [`skew`]: each such
//! document is recomputed to prove that the difference is exactly that.
//!
//! `scripts/differential.sh` runs the same comparison over a whole
//! checkout of provider-upjet-aws (`MRGUARD_DIFFERENTIAL_DIR`) and writes
//! the table docs/check.md quotes.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::{json, Value};

use mrguard_policy::crd::{CrdVersion, Crds, FieldError, FieldErrorKind, Lookup};

use crate::support::{self, api, cluster::ClusterOptions, Cluster};

/// The fields of ObjectMeta a client may send.
const OBJECT_META: &[&str] = &[
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];

/// Skew step 2: `metadata.<an ObjectMeta field>` is never unknown; this
/// 1.24 pre-release says it is (fixed before 1.24.0). A field that really
/// is unknown (`metadata.lables`) still counts.
fn is_object_meta_field(f: &str) -> bool {
    f.strip_prefix("metadata.")
        .is_some_and(|rest| OBJECT_META.contains(&rest))
}

/// The documents of the vendored run whose answers differ only by the 1.24
/// skew, each reviewed: the document, and the skew of [`as_on_1_24`].
const REVIEWED: &[(&str, &str)] = &[
    (
        "hostile/hostile.yaml#16",
        "2: an unknown field inside metadata.ownerReferences[0]",
    ),
    (
        "hostile/hostile.yaml#21",
        "1: an enum error, then a failing rule",
    ),
    (
        "hostile/hostile.yaml#22",
        "1: a type error, then a failing rule",
    ),
    (
        "hostile/hostile.yaml#27",
        "1: spec.forProvider required, then a rule that reads it",
    ),
    (
        "hostile/hostile.yaml#31",
        "3: an enum error in spec.managementPolicies[0]",
    ),
];

/// How one document came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Outcome {
    /// Both accept.
    BothAccept,
    /// Both reject, for the same fields.
    BothReject,
    /// Same verdict; the fields differ only as the 1.24 skew explains.
    AgreeSkew,
    /// Both reject, for different fields.
    FieldsDiffer,
    /// The API server rejects, `check` passes.
    FalseGreen,
    /// The API server accepts, `check` rejects.
    FalseRed,
    /// `check` cannot judge it (exit 2): never a pass.
    Unsupported,
}

struct Doc {
    at: String,
    obj: Value,
}

fn yaml_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<PathBuf> = rd.filter_map(|e| e.ok().map(|e| e.path())).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            yaml_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "yaml" || e == "yml") {
            out.push(p);
        }
    }
}

/// The project's own part of the vendored set: `hostile/`.
fn hostile_root() -> PathBuf {
    support::fixtures_dir().join("differential")
}

fn docs_of(root: &Path, files: &[PathBuf]) -> Vec<Doc> {
    let mut out = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(f).unwrap();
        let Ok(docs) = serde_saphyr::from_multiple::<Value>(&text) else {
            eprintln!("differential: {} does not parse; skipped", f.display());
            continue;
        };
        let rel = f
            .strip_prefix(root)
            .or_else(|_| f.strip_prefix(hostile_root()));
        let rel = rel.unwrap_or(f).display().to_string();
        for (i, obj) in docs.into_iter().enumerate() {
            if obj.is_object() {
                out.push(Doc {
                    at: format!("{rel}#{}", i + 1),
                    obj,
                });
            }
        }
    }
    out
}

/// The API server's verdict: `None` accepted, else the fields it names.
async fn server(
    client: &kube::Client,
    plurals: &BTreeMap<(String, String), (String, bool)>,
    obj: &Value,
) -> Option<BTreeSet<String>> {
    let api_version = obj["apiVersion"].as_str().unwrap_or("");
    let kind = obj["kind"].as_str().unwrap_or("");
    let (group, _) = api_version.rsplit_once('/').unwrap_or(("", ""));
    let (plural, namespaced) = &plurals[&(group.to_string(), kind.to_string())];
    let path = if *namespaced {
        let ns = obj["metadata"]["namespace"].as_str().unwrap_or("default");
        format!("/apis/{api_version}/namespaces/{ns}/{plural}")
    } else {
        format!("/apis/{api_version}/{plural}")
    };
    // Strict would be the real test, but this 1.24 pre-release reports
    // every metadata field of a custom resource as unknown, so Strict fails
    // every request. Warn gives the same unknown fields as warnings and
    // goes on; strict decoding is applied here, after [`skew`] step 2.
    let path = format!("{path}?dryRun=All&fieldValidation=Warn");
    let r = api::request(client, "POST", &path, "application/json", Some(obj))
        .await
        .unwrap();
    let msg = r.message();
    if std::env::var("MRGUARD_DIFFERENTIAL_VERBOSE").is_ok() {
        eprintln!(
            "differential: API server: {} {msg} {:?}",
            r.status, r.warnings
        );
    }
    let unknown: BTreeSet<String> = r
        .warnings
        .iter()
        .filter_map(|w| w.strip_prefix("unknown field \"")?.strip_suffix('"'))
        .filter(|f| !is_object_meta_field(f))
        .map(str::to_string)
        .collect();
    if !unknown.is_empty() {
        return Some(unknown);
    }
    if r.status < 300 {
        return None;
    }
    let mut fields = BTreeSet::new();
    for c in r.body["details"]["causes"].as_array().into_iter().flatten() {
        let f = c["field"].as_str().unwrap_or("<nil>");
        fields.insert(if f.is_empty() {
            "<nil>".into()
        } else {
            f.into()
        });
    }
    if fields.is_empty() {
        fields.insert(format!("<status {}: {msg}>", r.status));
    }
    Some(fields)
}

fn fields_of(errors: &[FieldError]) -> BTreeSet<String> {
    errors
        .iter()
        .filter(|e| {
            !e.to_string()
                .contains("some validation rules were not checked")
        })
        .map(|e| e.path.clone())
        .collect()
}

/// The test server is kube-apiserver 1.24 (v1.24.0-alpha.1). Where it
/// differs from the API servers `check` follows, reviewed here; each is
/// applied to `check`'s own answer, never to the server's, and a document
/// counts as agreeing only when the result is exactly the server's answer:
/// 1. it runs the CEL rules after blocking errors (type, required, enum,
///    too long, too many), where current servers stop: it also names the
///    fields of the rules that fail. The test evaluates those rules.
/// 2. its strict field validation of `metadata` is broken: it calls
///    ObjectMeta's own fields unknown (dropped by [`is_object_meta_field`])
///    and misses unknown fields nested in them
///    (`metadata.ownerReferences[0].colour`), which current servers report.
/// 3. it names an `enum` error inside a list at the list
///    (`spec.managementPolicies`), current servers at the item
///    (`spec.managementPolicies[0]`).
fn as_on_1_24(
    v: &CrdVersion,
    current: &Value,
    errors: &[FieldError],
    applied: &mut Vec<&'static str>,
) -> Option<BTreeSet<String>> {
    let nested_meta = |e: &FieldError| {
        e.kind == FieldErrorKind::Unknown
            && e.path.strip_prefix("metadata.").is_some_and(|rest| {
                OBJECT_META.iter().any(|f| {
                    rest.starts_with(&format!("{f}.")) || rest.starts_with(&format!("{f}["))
                })
            })
    };
    let mut errors: Vec<FieldError> = errors.to_vec();
    if errors.iter().any(nested_meta) {
        applied.push("2: nested metadata unknown fields");
        errors.retain(|e| !nested_meta(e));
        if errors.is_empty() {
            // Strict decoding passes there: validation runs.
            errors = v.validate(current, None).unwrap();
        }
    }
    if errors.is_empty() {
        return None;
    }
    let mut fields = BTreeSet::new();
    for e in &errors {
        if e.to_string()
            .contains("some validation rules were not checked")
        {
            continue;
        }
        let item = e.path.ends_with(']') && matches!(e.kind, FieldErrorKind::NotSupported { .. });
        match e.path.rsplit_once('[') {
            Some((list, _)) if item => {
                applied.push("3: enum errors in lists");
                fields.insert(list.to_string());
            }
            _ => {
                fields.insert(e.path.clone());
            }
        }
    }
    if errors.iter().any(FieldError::is_blocking) {
        let rules = fields_of(&v.rule_errors(current, None));
        if !rules.is_empty() {
            applied.push("1: CEL after blocking errors");
            fields.extend(rules);
        }
    }
    Some(fields)
}

#[derive(Default)]
struct Tally {
    by: BTreeMap<Outcome, Vec<String>>,
    skipped: usize,
    groups: BTreeSet<String>,
    cluster_scoped: usize,
    namespaced: usize,
}

async fn run(root: &Path, groups: Option<&BTreeSet<String>>, test: &str) -> Option<Tally> {
    if let Err(why) = support::cluster::assets() {
        if std::env::var("CI").is_ok_and(|v| v == "true" || v == "1") {
            panic!("{test} needs a real API server and CI=true: {why}");
        }
        // Past the harness's capture, as scripts/test.sh counts it.
        use std::io::Write;
        let line = format!("{} {test}: {why}\n", support::SKIP_MARKER);
        let _ = std::io::stderr().write_all(line.as_bytes());
        return None;
    }
    let mut files = Vec::new();
    yaml_files(&root.join("examples"), &mut files);
    if std::env::var_os("MRGUARD_DIFFERENTIAL_DIR").is_none() {
        yaml_files(&hostile_root().join("hostile"), &mut files);
    }
    let in_groups = |f: &PathBuf| {
        let rel = f.strip_prefix(root.join("examples")).ok();
        let g = rel.and_then(|r| r.iter().next()).and_then(|g| g.to_str());
        match (groups, g) {
            (Some(gs), Some(g)) => gs.contains(g),
            _ => true,
        }
    };
    files.retain(in_groups);
    let docs = docs_of(root, &files);

    // The CRDs of every service group the documents come from.
    let services: BTreeSet<String> = docs
        .iter()
        .filter_map(|d| d.obj["apiVersion"].as_str())
        .filter_map(|a| a.split_once('.').map(|(s, _)| s.to_string()))
        .collect();
    let mut crd_files = Vec::new();
    yaml_files(&root.join("package/crds"), &mut crd_files);
    crd_files.retain(|f| {
        let name = f.file_name().unwrap().to_string_lossy();
        services.contains(name.split('.').next().unwrap_or("")) && !name.contains("providerconfig")
    });
    let mut crds = Crds::default();
    let mut plurals = BTreeMap::new();
    let mut typed = Vec::new();
    for f in &crd_files {
        let text = std::fs::read_to_string(f).unwrap();
        crds.add_yaml(&f.display().to_string(), &text).unwrap();
        let v: Value = serde_saphyr::from_str(&text).unwrap();
        let g = v["spec"]["group"].as_str().unwrap().to_string();
        let k = v["spec"]["names"]["kind"].as_str().unwrap().to_string();
        let plural = v["spec"]["names"]["plural"].as_str().unwrap().to_string();
        plurals.insert((g, k), (plural, v["spec"]["scope"] == "Namespaced"));
        let crd: CustomResourceDefinition = serde_json::from_value(v).unwrap();
        typed.push(crd);
    }

    let cluster = Cluster::start(&ClusterOptions {
        fixture_crds: false,
        // Strict field validation is beta (on) from 1.25; 1.24 needs the gate.
        extra_args: vec!["--feature-gates=ServerSideFieldValidation=true".into()],
        ..ClusterOptions::default()
    })
    .await
    .unwrap_or_else(|e| panic!("{test}: the API server did not start: {e}"));
    let client = cluster.admin().await.unwrap();
    for crd in &typed {
        support::cluster::create_crd(&client, crd)
            .await
            .unwrap_or_else(|e| panic!("{test}: {e}"));
    }
    let mut namespaces = BTreeSet::from(["default".to_string()]);

    let mut tally = Tally::default();
    for d in &docs {
        let api_version = d.obj["apiVersion"].as_str().unwrap_or("");
        let kind = d.obj["kind"].as_str().unwrap_or("");
        let v = match crds.lookup(api_version, kind) {
            Lookup::Found(v) => v,
            _ => {
                tally.skipped += 1;
                continue;
            }
        };
        let (group, _) = api_version.rsplit_once('/').unwrap();
        tally
            .groups
            .insert(group.split('.').next().unwrap().to_string());
        if v.namespaced {
            tally.namespaced += 1;
            let ns = d.obj["metadata"]["namespace"].as_str().unwrap_or("default");
            if namespaces.insert(ns.to_string()) {
                let body =
                    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
                let _ = api::create(&client, "/api/v1/namespaces", &body, false).await;
            }
        } else {
            tally.cluster_scoped += 1;
        }
        let theirs = server(&client, &plurals, &d.obj).await;
        if v.ensure_supported().is_err() {
            tally
                .by
                .entry(Outcome::Unsupported)
                .or_default()
                .push(d.at.clone());
            continue;
        }
        let mut current = d.obj.clone();
        v.apply_defaults(&mut current);
        let errors = v.admit(&current, &current, None).unwrap();
        let ours = (!errors.is_empty()).then(|| fields_of(&errors));
        let mut applied = Vec::new();
        let outcome = if ours == theirs && ours.is_none() {
            Outcome::BothAccept
        } else if ours == theirs {
            Outcome::BothReject
        } else if as_on_1_24(v, &current, &errors, &mut applied) == theirs {
            Outcome::AgreeSkew
        } else {
            match (&ours, &theirs) {
                (None, Some(_)) => Outcome::FalseGreen,
                (Some(_), None) => Outcome::FalseRed,
                _ => Outcome::FieldsDiffer,
            }
        };
        if !matches!(outcome, Outcome::BothAccept | Outcome::BothReject) {
            applied.dedup();
            eprintln!(
                "differential: {outcome:?} {} (skew {applied:?}): check {ours:?}, API server {theirs:?}",
                d.at
            );
        }
        tally.by.entry(outcome).or_default().push(d.at.clone());
    }
    Some(tally)
}

fn table(t: &Tally) -> String {
    let judged: usize = t.by.values().map(Vec::len).sum();
    let mut s = format!(
        "{judged} documents ({} cluster-scoped, {} namespaced) from {} service groups; {} skipped (no CRD of their group in the set)\n\n| outcome | documents |\n|---|---|\n",
        t.cluster_scoped,
        t.namespaced,
        t.groups.len(),
        t.skipped
    );
    for (o, docs) in &t.by {
        s.push_str(&format!("| {o:?} | {} |\n", docs.len()));
    }
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_crd_agrees_with_the_api_server_on_upstream_manifests() {
    let test = "check_crd_agrees_with_the_api_server_on_upstream_manifests";
    let (root, groups) = match std::env::var("MRGUARD_DIFFERENTIAL_DIR") {
        Ok(dir) => {
            let groups = std::env::var("MRGUARD_DIFFERENTIAL_GROUPS")
                .ok()
                .map(|g| g.split(',').map(str::to_string).collect::<BTreeSet<_>>());
            (PathBuf::from(dir), groups)
        }
        Err(_) => {
            let Some(fixtures) = support::third_party_fixtures(test) else {
                return;
            };
            (fixtures.join("differential"), None)
        }
    };
    let vendored = std::env::var("MRGUARD_DIFFERENTIAL_DIR").is_err();
    let Some(t) = run(&root, groups.as_ref(), test).await else {
        return;
    };
    let report = table(&t);
    eprintln!("{report}");
    if let Ok(path) = std::env::var("MRGUARD_DIFFERENTIAL_REPORT") {
        let mut full = report.clone();
        for (o, docs) in &t.by {
            if !matches!(o, Outcome::BothAccept | Outcome::BothReject) {
                full.push_str(&format!("\n{o:?}:\n"));
                for d in docs {
                    full.push_str(&format!("- {d}\n"));
                }
            }
        }
        std::fs::write(path, full).unwrap();
    }
    if !vendored {
        return;
    }
    let count = |o| t.by.get(&o).map_or(0, Vec::len);
    let judged: usize = t.by.values().map(Vec::len).sum();
    assert!(judged >= 300, "{judged} documents judged\n{report}");
    assert!(
        t.groups.len() >= 5 && t.cluster_scoped > 0 && t.namespaced > 0,
        "{report}"
    );
    for o in [
        Outcome::FalseGreen,
        Outcome::FalseRed,
        Outcome::FieldsDiffer,
        Outcome::Unsupported,
    ] {
        assert_eq!(count(o), 0, "{o:?}: {:?}\n{report}", t.by.get(&o));
    }
    // Exactly the reviewed documents differ by the skew, no others.
    let skewed = t.by.get(&Outcome::AgreeSkew).cloned().unwrap_or_default();
    let reviewed: Vec<String> = REVIEWED.iter().map(|(d, _)| d.to_string()).collect();
    assert_eq!(skewed, reviewed, "{report}");
}
