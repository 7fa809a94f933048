//! `check --crd` against a real API server, document by document: the
//! upstream provider-upjet-aws CRDs and example manifests of the
//! third-party fixtures (`MRGUARD_FIXTURES`, `differential/`), plus the
//! hostile documents written here (tests/fixtures/differential/hostile),
//! each judged by mrguard's CRD code (what `check --crd` runs) and by a
//! server-side dry-run create.
//!
//! Like is compared with like: mrguard judges as the test server's own
//! release (`check --crd --kube-version`, from `/version`), and the dry
//! run asks for strict field validation only where that release has it.
//! Where it does not (before 1.25), unknown fields are pruned silently:
//! the test then also compares the fields the server pruned (what the dry
//! run returns lacks them) with those mrguard's note names.
//!
//! The vendored run asserts 0 false greens, 0 false reds, and the same
//! fields on both sides, on any release mrguard models (1.20 on; CI's
//! server is 1.36).
//!
//! `scripts/differential.sh` runs the same comparison over a whole
//! checkout of provider-upjet-aws (`MRGUARD_DIFFERENTIAL_DIR`) and writes
//! the table docs/check.md quotes.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::{json, Value};

use mrguard_policy::admission::crd::{Crds, FieldError, Lookup};
use mrguard_policy::admission::kube_version::KubeVersion;

use crate::support::{self, api, cluster::ClusterOptions, needs, Cluster};

/// How one document came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Outcome {
    /// Both accept (and, where unknown fields are pruned, prune the same).
    BothAccept,
    /// Both reject, for the same fields.
    BothReject,
    /// Same verdict, different fields: rejected for others, or other
    /// fields pruned.
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

/// The documents of `files`, each named by its path under `root`.
fn docs_of(root: &Path, files: &[PathBuf], out: &mut Vec<Doc>) {
    for f in files {
        let text = std::fs::read_to_string(f).unwrap();
        let Ok(docs) = serde_saphyr::from_multiple::<Value>(&text) else {
            eprintln!("differential: {} does not parse; skipped", f.display());
            continue;
        };
        let rel = f.strip_prefix(root).unwrap_or(f).display().to_string();
        for (i, obj) in docs.into_iter().enumerate() {
            if obj.is_object() {
                out.push(Doc {
                    at: format!("{rel}#{}", i + 1),
                    obj,
                });
            }
        }
    }
}

/// One side's answer: the fields it rejects the object for (`None`:
/// accepted), and the unknown fields it prunes from an accepted object
/// where the release has no server-side field validation.
#[derive(Debug, PartialEq)]
struct Verdict {
    rejected: Option<BTreeSet<String>>,
    pruned: BTreeSet<String>,
}

/// The paths of `sent` that `stored` lacks, as strict field validation
/// names fields (`spec.a`, `metadata.ownerReferences[0].b`). A `null` the
/// schema does not allow is dropped before defaulting, not pruned, and is
/// left out, as mrguard's defaulting drops it too.
fn removed(sent: &Value, stored: &Value, path: &str, out: &mut BTreeSet<String>) {
    let at = |k: &str| {
        if path.is_empty() {
            k.to_string()
        } else {
            format!("{path}.{k}")
        }
    };
    match (sent, stored) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, x) in a.iter().filter(|(_, x)| !x.is_null()) {
                match b.get(k) {
                    None => {
                        out.insert(at(k));
                    }
                    Some(y) => removed(x, y, &at(k), out),
                }
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                removed(x, y, &format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}

/// The API server's verdict on a dry-run create of `obj`.
async fn server(
    client: &kube::Client,
    plurals: &BTreeMap<(String, String), (String, bool)>,
    obj: &Value,
    field_validation: bool,
) -> Verdict {
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
    // Where the release validates fields, Warn names every unknown field
    // as Strict (kubectl's default) refuses them, and the request goes on;
    // strict decoding is applied here: unknown fields fail it alone.
    // An older release has no such parameter and prunes unknown fields.
    let path = if field_validation {
        format!("{path}?dryRun=All&fieldValidation=Warn")
    } else {
        format!("{path}?dryRun=All")
    };
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
        .map(str::to_string)
        .collect();
    if !unknown.is_empty() {
        return Verdict {
            rejected: Some(unknown),
            pruned: BTreeSet::new(),
        };
    }
    if r.status < 300 {
        let mut pruned = BTreeSet::new();
        if !field_validation {
            removed(obj, &r.body, "", &mut pruned);
        }
        return Verdict {
            rejected: None,
            pruned,
        };
    }
    // The fields the causes name; a cause without one is at the root, which
    // field errors print as `<nil>`: where CEL rules are enforced, the
    // notice that "some validation rules were not checked because the
    // object was invalid" comes beside the blocking errors there.
    let mut fields = BTreeSet::new();
    for c in r.body["details"]["causes"].as_array().into_iter().flatten() {
        let f = c["field"].as_str().filter(|f| !f.is_empty());
        fields.insert(f.unwrap_or("<nil>").to_string());
    }
    if fields.is_empty() {
        fields.insert(format!("<status {}: {msg}>", r.status));
    }
    Verdict {
        rejected: Some(fields),
        pruned: BTreeSet::new(),
    }
}

/// The fields `check` rejects for, as the API server's causes name them
/// (the root, where the unchecked-rules notice is, as `<nil>`).
fn fields_of(errors: &[FieldError]) -> BTreeSet<String> {
    errors.iter().map(|e| e.path.clone()).collect()
}

#[derive(Default)]
struct Tally {
    by: BTreeMap<Outcome, Vec<String>>,
    skipped: usize,
    groups: BTreeSet<String>,
    cluster_scoped: usize,
    namespaced: usize,
    /// The release both sides judged as.
    server: String,
    /// Documents with unknown fields that both sides pruned.
    pruned: usize,
    /// Documents that also lose fields to the storage version's schema.
    storage_pruned: usize,
}

/// The documents under `root` (`examples/` of `groups`, all without), and
/// `hostile`'s, judged both ways.
async fn run(
    root: &Path,
    hostile: Option<&Path>,
    groups: Option<&BTreeSet<String>>,
    test: &str,
) -> Option<Tally> {
    if !support::require_assets(test) {
        return None;
    }
    let mut files = Vec::new();
    yaml_files(&root.join("examples"), &mut files);
    let in_groups = |f: &PathBuf| {
        let rel = f.strip_prefix(root.join("examples")).ok();
        let g = rel.and_then(|r| r.iter().next()).and_then(|g| g.to_str());
        match (groups, g) {
            (Some(gs), Some(g)) => gs.contains(g),
            _ => true,
        }
    };
    files.retain(in_groups);
    let mut docs = Vec::new();
    docs_of(root, &files, &mut docs);
    if let Some(h) = hostile {
        let mut files = Vec::new();
        yaml_files(h, &mut files);
        assert!(
            !files.is_empty(),
            "{test}: no hostile documents in {}",
            h.display()
        );
        docs_of(h.parent().unwrap_or(h), &files, &mut docs);
    }

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

    // The harness passes only the flags and gates this release knows.
    let cluster = Cluster::start(&ClusterOptions {
        fixture_crds: false,
        ..ClusterOptions::default()
    })
    .await
    .unwrap_or_else(|e| panic!("{test}: the API server did not start: {e}"));
    let release = &cluster.version;
    let field_validation = release.at_least(needs::FIELD_VALIDATION);
    // What `check --crd --kube-version <the server's MAJOR.MINOR>` judges as.
    let kube = KubeVersion::parse(&release.major_minor())
        .unwrap_or_else(|e| panic!("{test}: the test server is {release}: {e}"));
    let (kube, newer) = kube.judged_as();
    if let Some(n) = newer {
        eprintln!("differential: note: {n}");
    }
    assert_eq!(
        kube.validates_fields(),
        field_validation,
        "{test}: mrguard and the harness disagree on when field validation came"
    );

    let mut crds = Crds::judged_as(kube);
    let mut plurals = BTreeMap::new();
    let mut storage = BTreeMap::new();
    let mut typed = Vec::new();
    for f in &crd_files {
        let text = std::fs::read_to_string(f).unwrap();
        crds.add_yaml(&f.display().to_string(), &text).unwrap();
        let v: Value = serde_saphyr::from_str(&text).unwrap();
        let g = v["spec"]["group"].as_str().unwrap().to_string();
        let k = v["spec"]["names"]["kind"].as_str().unwrap().to_string();
        let plural = v["spec"]["names"]["plural"].as_str().unwrap().to_string();
        let stored = v["spec"]["versions"].as_array().into_iter().flatten();
        let stored = stored.filter(|x| x["storage"] == true);
        if let Some(name) = stored.filter_map(|x| x["name"].as_str()).next() {
            storage.insert((g.clone(), k.clone()), format!("{g}/{name}"));
        }
        plurals.insert((g, k), (plural, v["spec"]["scope"] == "Namespaced"));
        let crd: CustomResourceDefinition = serde_json::from_value(v).unwrap();
        typed.push(crd);
    }
    let client = cluster.admin().await.unwrap();
    for crd in &typed {
        support::cluster::create_crd(&client, crd)
            .await
            .unwrap_or_else(|e| panic!("{test}: {e}"));
    }
    let mut namespaces = BTreeSet::from(["default".to_string()]);

    let mut tally = Tally {
        server: format!("kube-apiserver {release}, judged as Kubernetes {kube}"),
        ..Tally::default()
    };
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
        let theirs = server(&client, &plurals, &d.obj, field_validation).await;
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
        let rejected = (!errors.is_empty()).then(|| fields_of(&errors));
        // The fields `check`'s note says would be pruned.
        let pruned = if rejected.is_none() && !kube.validates_fields() {
            v.unknown_fields(&current)
                .into_iter()
                .map(|e| e.path)
                .collect()
        } else {
            BTreeSet::new()
        };
        let mut ours = Verdict { rejected, pruned };
        // The API server also prunes what the storage version's schema does
        // not declare, on any release: with `conversion: None` a multi-version
        // CRD stores the object as it is, under the storage version. Where
        // that version's schema lacks a field (provider-upjet-aws' v1beta2
        // made some one-item lists objects), the field is dropped without
        // a word, and the dry run's answer lacks it. `check --crd` judges
        // the version the object names and does not say so; the test
        // computes it with the same schema code and shows the count.
        let storage_pruned = match &storage[&(group.to_string(), kind.to_string())] {
            s if ours.rejected.is_none() && !kube.validates_fields() && s != api_version => {
                let mut stored = current.clone();
                v.prune(&mut stored);
                stored["apiVersion"] = json!(s);
                match crds.lookup(s, kind) {
                    Lookup::Found(sv) => sv.unknown_fields(&stored),
                    _ => Vec::new(),
                }
            }
            _ => Vec::new(),
        };
        if !storage_pruned.is_empty() {
            tally.storage_pruned += 1;
            ours.pruned
                .extend(storage_pruned.into_iter().map(|e| e.path));
        }
        let outcome = match (&ours.rejected, &theirs.rejected) {
            _ if ours == theirs && ours.rejected.is_none() => Outcome::BothAccept,
            _ if ours == theirs => Outcome::BothReject,
            (None, Some(_)) => Outcome::FalseGreen,
            (Some(_), None) => Outcome::FalseRed,
            _ => Outcome::FieldsDiffer,
        };
        if outcome == Outcome::BothAccept && !ours.pruned.is_empty() {
            tally.pruned += 1;
        }
        if !matches!(outcome, Outcome::BothAccept | Outcome::BothReject) {
            eprintln!(
                "differential: {outcome:?} {}: check {ours:?}, API server {theirs:?}",
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
        "{}: {judged} documents ({} cluster-scoped, {} namespaced) from {} service groups; \
         {} skipped (no CRD of their group in the set); {} accepted with the same fields \
         pruned ({} of them by the storage version's schema)\n\n\
         | outcome | documents |\n|---|---|\n",
        t.server,
        t.cluster_scoped,
        t.namespaced,
        t.groups.len(),
        t.skipped,
        t.pruned,
        t.storage_pruned
    );
    for (o, docs) in &t.by {
        s.push_str(&format!("| {o:?} | {} |\n", docs.len()));
    }
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_crd_agrees_with_the_api_server_on_upstream_manifests() {
    let test = "check_crd_agrees_with_the_api_server_on_upstream_manifests";
    let vendored = std::env::var("MRGUARD_DIFFERENTIAL_DIR").is_err();
    let hostile = support::fixtures_dir().join("differential/hostile");
    let (root, groups, hostile) = match std::env::var("MRGUARD_DIFFERENTIAL_DIR") {
        Ok(dir) => {
            let groups = std::env::var("MRGUARD_DIFFERENTIAL_GROUPS")
                .ok()
                .map(|g| g.split(',').map(str::to_string).collect::<BTreeSet<_>>());
            (PathBuf::from(dir), groups, None)
        }
        Err(_) => {
            let Some(fixtures) = support::third_party_fixtures(test) else {
                return;
            };
            (fixtures.join("differential"), None, Some(hostile.as_path()))
        }
    };
    let Some(t) = run(&root, hostile, groups.as_ref(), test).await else {
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
    assert!(
        count(Outcome::BothReject) > 0 && count(Outcome::BothAccept) > 0,
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
}

/// A CRD of the project's own with each CRD feature `check --crd
/// --kube-version` models by release (`mrguard_policy::admission::kube_version::since`):
/// a rule with `messageExpression`, `reason` and `fieldPath`, a transition
/// rule with `optionalOldSelf`, a rule on a scalar (whose error shows the
/// value from 1.35), an `enum` on list items, a list map (whose duplicate
/// key prints as JSON from 1.34), and a schema that strict field
/// validation holds unknown fields against.
const GADGET_CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: gadgets.e2e.mrguard.io}
spec:
  group: e2e.mrguard.io
  names: {kind: Gadget, plural: gadgets}
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
                - rule: "self.size * 2 <= 20"
                  # No string(self.size): the API server estimates a
                  # conversion's length as unbounded and refuses the CRD.
                  messageExpression: "self.size > 100 ? 'size is far over 10' : 'size is over 10'"
                  reason: FieldValueForbidden
                  fieldPath: ".size"
                - rule: "oldSelf.hasValue() ? self.size >= oldSelf.value().size : self.size != 13"
                  optionalOldSelf: true
                  message: size only grows, and is never created as 13
              properties:
                size:
                  type: integer
                  minimum: 0
                  maximum: 1000
                  x-kubernetes-validations: [{rule: "self != 7"}]
                modes: {type: array, maxItems: 4, items: {type: string, enum: [a, b]}}
                ports:
                  type: array
                  maxItems: 4
                  x-kubernetes-list-type: map
                  x-kubernetes-list-map-keys: [name]
                  items:
                    type: object
                    required: [name]
                    properties: {name: {type: string, maxLength: 8}, port: {type: integer}}
"#;

/// What a server answered, as `check` prints its errors: `field: message`
/// per cause, and an unknown field as strict field validation names it.
fn answer(r: &api::Response) -> BTreeSet<String> {
    let mut out: BTreeSet<String> = r
        .warnings
        .iter()
        .filter(|w| w.starts_with("unknown field \""))
        .cloned()
        .collect();
    if r.status >= 300 {
        for c in r.body["details"]["causes"].as_array().into_iter().flatten() {
            let field = c["field"].as_str().unwrap_or("");
            let message = c["message"].as_str().unwrap_or("");
            out.insert(if field.is_empty() {
                message.to_string()
            } else {
                format!("{field}: {message}")
            });
        }
    }
    out
}

/// The release-dependent behaviours `check --crd --kube-version` models,
/// each shown on this API server: an object that exercises one feature,
/// judged by mrguard as this server's release and by a server-side dry run,
/// must get the same errors word for word. On 1.30 and 1.36 every modelled
/// feature (`since::*`, the newest from 1.30) is on, so the suite's two
/// servers check each one from above.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_kube_version_agrees_with_the_api_server_feature_by_feature() {
    let test = "check_kube_version_agrees_with_the_api_server_feature_by_feature";
    let Some(cluster) = support::require_cluster(test).await else {
        return;
    };
    let client = cluster.admin().await.unwrap();
    let v: Value = serde_saphyr::from_str(GADGET_CRD).unwrap();
    let crd: CustomResourceDefinition = serde_json::from_value(v).unwrap();
    match support::cluster::create_crd(&client, &crd).await {
        Err(e) if !e.contains("already exists") => panic!("{test}: {e}"),
        _ => {}
    }
    let release = &cluster.version;
    let (kube, _) = KubeVersion::parse(&release.major_minor())
        .unwrap()
        .judged_as();
    let mut crds = Crds::judged_as(kube);
    crds.add_yaml("gadget.yaml", GADGET_CRD).unwrap();
    let Lookup::Found(model) = crds.lookup("e2e.mrguard.io/v1", "Gadget") else {
        panic!("{test}: the model has no Gadget");
    };
    let gadget = |name: &str, spec: Value| {
        json!({"apiVersion": "e2e.mrguard.io/v1", "kind": "Gadget",
               "metadata": {"name": name}, "spec": spec})
    };
    let ours = |sent: &Value, old: Option<&Value>| -> BTreeSet<String> {
        let mut current = sent.clone();
        model.apply_defaults(&mut current);
        model
            .admit(sent, &current, old)
            .unwrap()
            .iter()
            .map(ToString::to_string)
            .collect()
    };
    let collection = "/apis/e2e.mrguard.io/v1/gadgets";
    let strict = format!("{collection}?dryRun=All&fieldValidation=Warn");
    let mut compared = Vec::new();
    for (feature, obj) in [
        (
            "accepted",
            gadget("fine", json!({"size": 3, "modes": ["a"]})),
        ),
        (
            "messageExpression, reason and fieldPath",
            gadget("big", json!({"size": 11})),
        ),
        (
            "optionalOldSelf on create",
            gadget("thirteen", json!({"size": 13})),
        ),
        ("a rule on a scalar", gadget("seven", json!({"size": 7}))),
        (
            "a duplicate list-map key",
            gadget(
                "ports",
                json!({"size": 1, "ports": [{"name": "x", "port": 1}, {"name": "x", "port": 2}]}),
            ),
        ),
        (
            "enum error at the item",
            gadget("modes", json!({"size": 1, "modes": ["a", "c"]})),
        ),
        (
            "strict field validation",
            gadget("colour", json!({"size": 1, "colour": "blue"})),
        ),
    ] {
        let r = api::request(&client, "POST", &strict, "application/json", Some(&obj))
            .await
            .unwrap();
        let (theirs, mine) = (answer(&r), ours(&obj, None));
        assert_eq!(mine, theirs, "{test}: {feature} on {release}: {}", r.body);
        compared.push((feature, theirs.len()));
    }
    // A transition rule with optionalOldSelf on an update: shrinking.
    let old = gadget("grows", json!({"size": 5}));
    let r = api::create(&client, collection, &old, false).await.unwrap();
    assert!(r.status < 300, "{test}: {}", r.body);
    let mut new = r.body.clone();
    new["spec"]["size"] = json!(4);
    let r = api::request(
        &client,
        "PUT",
        &format!("{collection}/grows?dryRun=All&fieldValidation=Warn"),
        "application/json",
        Some(&new),
    )
    .await
    .unwrap();
    let (theirs, mine) = (answer(&r), ours(&new, Some(&old)));
    assert_eq!(
        mine, theirs,
        "{test}: optionalOldSelf on update on {release}"
    );
    compared.push(("optionalOldSelf on update", theirs.len()));
    // Every feature was exercised: each object but the first is refused.
    assert!(
        compared.iter().skip(1).all(|(_, n)| *n > 0),
        "{test}: {compared:?}"
    );
    eprintln!("{test}: {release}, judged as {kube}: the same errors for {compared:?}");
}
