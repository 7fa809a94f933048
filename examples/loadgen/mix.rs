//! The request mix: the AdmissionReviews a real kube-apiserver sent
//! (reviews/) plus reviews built from the provider examples (examples/) of
//! the third-party fixtures folder (`--fixtures`, MRGUARD_FIXTURES), padded
//! to realistic sizes with tags, the `last-applied-configuration`
//! annotation and managedFields, as objects look after a few `kubectl
//! apply`s and provider writes.

use std::path::Path;

use hyper::body::Bytes;
use serde_json::{json, Map, Value};

/// What the server is expected to answer (for the mix summary only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Expect {
    Allow,
    Deny,
    Any,
}

#[derive(Debug, Clone)]
pub(crate) struct Item {
    pub path: &'static str,
    pub body: Bytes,
    pub label: String,
    pub op: String,
    pub expect: Expect,
}

/// Whole review bodies (bytes) the synthesised reviews are grown to.
const SIZES: &[usize] = &[2_000, 4_000, 8_000, 12_000, 20_000, 36_000];

pub(crate) fn build(fixtures: &Path) -> anyhow::Result<Vec<Item>> {
    let mut items = Vec::new();
    let mut names: Vec<_> = std::fs::read_dir(fixtures.join("reviews"))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    names.sort();
    for p in names {
        let file = p
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .to_string();
        // The API server sends compact JSON; the files are pretty-printed.
        let body = serde_json::to_vec(&serde_json::from_slice::<Value>(&std::fs::read(&p)?)?)?;
        let path = if file.contains("_mutate_") {
            "/mutate"
        } else {
            "/validate"
        };
        // 017..022 change the region of a created VPC: immutable-field.
        let expect =
            if path == "/validate" && file.contains("UPDATE_VPC") && !file.contains("status") {
                Expect::Any
            } else {
                Expect::Allow
            };
        items.push(item(path, body, format!("fixture {file}"), expect));
    }

    let mut examples: Vec<_> = std::fs::read_dir(fixtures.join("examples"))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    examples.sort();
    let mut n = 0usize;
    for p in examples {
        let text = std::fs::read_to_string(&p)?;
        let docs: Vec<Value> = serde_saphyr::from_multiple(&text)?;
        for (d, doc) in docs.into_iter().enumerate() {
            if !doc["spec"]["forProvider"].is_object() {
                continue;
            }
            let stem = p
                .file_stem()
                .unwrap_or_default()
                .to_string_lossy()
                .to_string();
            for (s, &size) in SIZES.iter().enumerate() {
                n += 1;
                let name = format!("bench-{}-{d}-{s}", stem.replace('_', "-"));
                items.extend(synthesise(&doc, &name, size, n, &stem));
            }
        }
    }
    // Interleave deterministically so neighbours differ in size and kind.
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    for i in (1..items.len()).rev() {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        items.swap(i, (rng % (i as u64 + 1)) as usize);
    }
    Ok(items)
}

/// The reviews of one example object at one size: mutate and validate of a
/// CREATE and of an UPDATE, and one review that must be denied.
fn synthesise(example: &Value, name: &str, size: usize, n: usize, stem: &str) -> Vec<Item> {
    let namespaced = example["metadata"]["namespace"].is_string();
    let mut base = example.clone();
    base["metadata"]["name"] = json!(name);
    // What CRD defaulting fills in before any webhook runs.
    let spec = base["spec"].as_object_mut().expect("spec is an object");
    if !namespaced {
        spec.entry("deletionPolicy").or_insert(json!("Delete"));
    }
    spec.entry("managementPolicies").or_insert(json!(["*"]));
    spec.entry("providerConfigRef").or_insert(if namespaced {
        json!({"kind": "ClusterProviderConfig", "name": "default"})
    } else {
        json!({"name": "default"})
    });

    // Grow with tags until the UPDATE review (the largest) reaches the size.
    let mut tags = 0usize;
    let (mut create, mut created) = objects(&base, tags);
    while review("UPDATE", Some(&created), Some(&created), namespaced).len() < size {
        tags += 1 + tags / 10;
        (create, created) = objects(&base, tags);
    }
    let mut updated = created.clone();
    updated["spec"]["forProvider"]["tags"]["cost-center"] = json!(format!("cc-{n}"));
    let mut out = vec![
        item(
            "/mutate",
            review("CREATE", Some(&create), None, namespaced),
            format!("{stem} CREATE mutate {size}"),
            Expect::Allow,
        ),
        item(
            "/validate",
            review("CREATE", Some(&create), None, namespaced),
            format!("{stem} CREATE validate {size}"),
            Expect::Allow,
        ),
        item(
            "/mutate",
            review("UPDATE", Some(&updated), Some(&created), namespaced),
            format!("{stem} UPDATE mutate {size}"),
            Expect::Allow,
        ),
        item(
            "/validate",
            review("UPDATE", Some(&updated), Some(&created), namespaced),
            format!("{stem} UPDATE validate {size}"),
            Expect::Allow,
        ),
    ];
    // One denial in five synthesised reviews, of three kinds.
    let denied = match n % 3 {
        0 => {
            let mut o = created.clone();
            o["spec"]["forProvider"]["region"] = json!("eu-central-1");
            review("UPDATE", Some(&o), Some(&created), namespaced)
        }
        1 => {
            let mut o = created.clone();
            o["metadata"]["annotations"]["crossplane.io/external-name"] = json!("renamed");
            review("UPDATE", Some(&o), Some(&created), namespaced)
        }
        _ => {
            let mut o = create.clone();
            o["spec"]["managementPolicies"] = json!(["Observe", "Create", "Observe"]);
            review("CREATE", Some(&o), None, namespaced)
        }
    };
    out.push(item(
        "/validate",
        denied,
        format!("{stem} denied {size}"),
        Expect::Deny,
    ));
    out
}

fn item(path: &'static str, body: Vec<u8>, label: String, expect: Expect) -> Item {
    let op = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|v| v["request"]["operation"].as_str().map(str::to_string))
        .unwrap_or_default();
    Item {
        path,
        body: Bytes::from(body),
        label,
        op,
        expect,
    }
}

/// The object as first applied (CREATE) and as stored after the provider
/// created it (the old object of an UPDATE), with `tags` extra tags.
fn objects(base: &Value, tags: usize) -> (Value, Value) {
    let mut applied = base.clone();
    let fp = applied["spec"]["forProvider"]
        .as_object_mut()
        .expect("forProvider");
    let t = fp.entry("tags").or_insert_with(|| json!({}));
    if let Some(t) = t.as_object_mut() {
        for i in 0..tags {
            t.insert(
                format!("team.example.com/label-{i:03}"),
                json!(format!("value-{i:03}-platform-engineering")),
            );
        }
        t.insert("cost-center".into(), json!("cc-0"));
    }
    let last_applied = serde_json::to_string(&applied).unwrap_or_default();
    let mut create = applied.clone();
    let meta = create["metadata"].as_object_mut().expect("metadata");
    meta.insert("uid".into(), json!("0b3a8f2e-6a41-4d3e-9a9e-2f7f5b1c9d10"));
    meta.insert("creationTimestamp".into(), json!("2026-11-22T03:52:30Z"));
    meta.insert("generation".into(), json!(1));
    let annotations = meta.entry("annotations").or_insert_with(|| json!({}));
    annotations["kubectl.kubernetes.io/last-applied-configuration"] = json!(last_applied + "\n");
    meta.insert(
        "managedFields".into(),
        json!([{
            "apiVersion": base["apiVersion"],
            "fieldsType": "FieldsV1",
            "fieldsV1": fields_v1(&applied, true),
            "manager": "kubectl-client-side-apply",
            "operation": "Update",
            "time": "2026-11-22T03:52:30Z"
        }]),
    );

    let mut created = create.clone();
    let meta = created["metadata"].as_object_mut().expect("metadata");
    meta.insert("resourceVersion".into(), json!("48213"));
    meta.insert(
        "finalizers".into(),
        json!(["finalizer.managedresource.crossplane.io"]),
    );
    let annotations = meta.entry("annotations").or_insert_with(|| json!({}));
    annotations["crossplane.io/external-create-pending"] = json!("2026-11-22T03:52:31Z");
    annotations["crossplane.io/external-create-succeeded"] = json!("2026-11-22T03:52:33Z");
    annotations["crossplane.io/external-name"] = json!("ext-0a1b2c3d4e5f");
    let mut at_provider = applied["spec"]["forProvider"].clone();
    if let Some(a) = at_provider.as_object_mut() {
        a.insert(
            "arn".into(),
            json!("arn:aws:service:us-west-1:123456789012:resource/ext-0a1b2c3d4e5f"),
        );
        a.insert("id".into(), json!("ext-0a1b2c3d4e5f"));
        if let Some(t) = a.get("tags").cloned() {
            a.insert("tagsAll".into(), t);
        }
    }
    let status = json!({
        "atProvider": at_provider,
        "conditions": [
            {"lastTransitionTime": "2026-11-22T03:52:40Z", "reason": "Available", "status": "True", "type": "Ready"},
            {"lastTransitionTime": "2026-11-22T03:52:33Z", "reason": "ReconcileSuccess", "status": "True", "type": "Synced"},
            {"lastTransitionTime": "2026-11-22T03:52:40Z", "reason": "Success", "status": "True", "type": "LastAsyncOperation"}
        ]
    });
    let provider_fields = json!({
        "f:metadata": {"f:annotations": {
            "f:crossplane.io/external-create-pending": {},
            "f:crossplane.io/external-create-succeeded": {},
            "f:crossplane.io/external-name": {}
        }, "f:finalizers": {".": {}, "v:\"finalizer.managedresource.crossplane.io\"": {}}}
    });
    let status_fields = json!({"f:status": fields_v1(&status, false)});
    if let Some(mf) = created["metadata"]["managedFields"].as_array_mut() {
        mf.push(json!({"apiVersion": base["apiVersion"], "fieldsType": "FieldsV1", "fieldsV1": provider_fields,
            "manager": "provider-upjet", "operation": "Update", "time": "2026-11-22T03:52:33Z"}));
        mf.push(json!({"apiVersion": base["apiVersion"], "fieldsType": "FieldsV1", "fieldsV1": status_fields,
            "manager": "provider-upjet", "operation": "Update", "subresource": "status", "time": "2026-11-22T03:52:40Z"}));
    }
    created["status"] = status;
    (create, created)
}

/// A FieldsV1 set (`f:` keys) describing every field of `v`.
fn fields_v1(v: &Value, top: bool) -> Value {
    match v {
        Value::Object(m) => {
            let mut out = Map::new();
            if !top {
                out.insert(".".into(), json!({}));
            }
            for (k, v) in m {
                if top && !matches!(k.as_str(), "metadata" | "spec") {
                    continue;
                }
                out.insert(format!("f:{k}"), fields_v1(v, false));
            }
            Value::Object(out)
        }
        _ => json!({}),
    }
}

fn review(op: &str, object: Option<&Value>, old: Option<&Value>, namespaced: bool) -> Vec<u8> {
    let subject = object.or(old).expect("an object");
    let api_version = subject["apiVersion"].as_str().unwrap_or("");
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let kind = subject["kind"].as_str().unwrap_or("");
    let resource = json!({"group": group, "version": version, "resource": format!("{}s", kind.to_lowercase())});
    let mut req = json!({
        "uid": "5d0e8f4c-2b1a-4f6e-8d3c-1a2b3c4d5e6f",
        "kind": {"group": group, "version": version, "kind": kind},
        "resource": resource,
        "requestKind": {"group": group, "version": version, "kind": kind},
        "requestResource": resource,
        "name": subject["metadata"]["name"],
        "operation": op,
        "userInfo": {"username": "kubernetes-admin", "groups": ["system:masters", "system:authenticated"]},
        "object": object,
        "oldObject": old,
        "dryRun": false,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": if op == "CREATE" {"CreateOptions"} else {"UpdateOptions"},
            "fieldManager": "kubectl-client-side-apply", "fieldValidation": "Strict"},
    });
    if namespaced {
        req["namespace"] = subject["metadata"]["namespace"].clone();
    }
    serde_json::to_vec(
        &json!({"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1", "request": req}),
    )
    .unwrap_or_default()
}

/// A short description of the mix for the report.
pub(crate) fn summary(items: &[Item]) -> String {
    let mut sizes: Vec<usize> = items.iter().map(|i| i.body.len()).collect();
    sizes.sort_unstable();
    let count = |f: &dyn Fn(&Item) -> bool| items.iter().filter(|i| f(i)).count();
    format!(
        "{} reviews ({} from fixtures/reviews, {} synthesised): {} mutate / {} validate; {} CREATE, {} UPDATE, {} DELETE; \
         {} built to be denied; body size min {} B, median {} B, max {} B, mean {} B",
        items.len(),
        count(&|i| i.label.starts_with("fixture")),
        count(&|i| !i.label.starts_with("fixture")),
        count(&|i| i.path == "/mutate"),
        count(&|i| i.path == "/validate"),
        count(&|i| i.op == "CREATE"),
        count(&|i| i.op == "UPDATE"),
        count(&|i| i.op == "DELETE"),
        count(&|i| i.expect == Expect::Deny),
        sizes.first().copied().unwrap_or(0),
        sizes.get(sizes.len() / 2).copied().unwrap_or(0),
        sizes.last().copied().unwrap_or(0),
        sizes.iter().sum::<usize>() / sizes.len().max(1),
    )
}
