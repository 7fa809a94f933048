use super::*;

fn validate(req: &Request, config: &Config) -> Decision {
    Decider::offline(config, jiff::Timestamp::now()).validate(req)
}

fn validate_in(req: &Request, config: &Config, cluster: &Cluster) -> Decision {
    Decider::new(config, cluster, jiff::Timestamp::now()).validate(req)
}

fn mutate(req: &Request, config: &Config) -> Decision {
    Decider::offline(config, jiff::Timestamp::now()).mutate(req)
}

fn mutate_patch_only(req: &Request, config: &Config) -> Decision {
    Decider::offline(config, jiff::Timestamp::now()).mutate_patch_only(req)
}

fn decode(body: &[u8], config: &Config) -> Result<Request, DecodeError> {
    Decider::offline(config, jiff::Timestamp::now()).decode(body)
}

/// The working copy and the skipping diff give exactly what mutating a
/// full copy and diffing it whole gives, for every review a real API
/// server sent and with a tags field under `status` too.
#[test]
fn patch_only_path_matches_mutating_the_whole_object() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/reviews");
    let configs = [
        Config::builtin(),
        Config::from_yaml(
            "resources:\n  - apiGroups: ['*']\n    kinds: ['*']\n    tagsField: spec.forProvider.tags\n",
        )
        .unwrap(),
        Config::from_yaml("resources:\n  - apiGroups: ['*']\n    kinds: ['*']\n    tagsField: status.atProvider.tags\n")
            .unwrap(),
        Config::from_yaml("resources:\n  - apiGroups: ['*']\n    kinds: ['*']\n    tagsField: metadata.labels\n")
            .unwrap(),
    ];
    let mut checked = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let body = std::fs::read(entry.unwrap().path()).unwrap();
        let mut req = crate::admission::review::decode(&body).unwrap();
        if let Some(o) = req.object.as_mut() {
            // A status as providers write it, so leaving it out matters.
            o.value["status"] = serde_json::json!({"atProvider": {"id": "x"}, "conditions": []});
        }
        for config in &configs {
            let full = mutate(&req, config);
            let lean = mutate_patch_only(&req, config);
            assert_eq!(full.response.patch, lean.response.patch);
            assert!(lean.mutated.is_none());
            let Some(obj) = req.object.as_ref().map(|o| &o.value) else {
                continue;
            };
            let mut expected = obj.clone();
            let ctx = mutation::MutateContext::new(&req, config, Cluster::empty());
            if full.outcome == Outcome::Patched {
                mutation::apply(&mut expected, &ctx);
                assert_eq!(full.mutated.as_ref(), Some(&expected));
                let patch: json_patch::Patch =
                    serde_json::from_slice(full.response.patch.as_ref().unwrap()).unwrap();
                let mut applied = obj.clone();
                json_patch::patch(&mut applied, &patch).unwrap();
                assert_eq!(applied, expected);
                checked += 1;
            }
        }
    }
    assert!(checked >= 20, "only {checked} patched reviews");
}

/// The copy holds what the steps touch, the objects on the way, and a
/// non-object on the way whole; nothing else.
#[test]
fn the_touched_copy_holds_only_what_mutation_touches() {
    let obj = serde_json::json!({
        "apiVersion": "v1", "kind": "K",
        "metadata": {"name": "a", "labels": {"x": "1"}, "managedFields": [{}]},
        "spec": {"forProvider": {"region": "r", "tags": {"t": "1"}}, "deletionPolicy": "Orphan"},
        "status": {"atProvider": "not an object"},
    });
    let copy = |tags: &str| {
        let tags = FieldPath::parse(tags).unwrap();
        let tags = tags_path(Some(&tags));
        let paths: Vec<&[&str]> = TOUCHED.iter().copied().chain([&tags[..]]).collect();
        touched_copy(&obj, &paths)
    };
    assert_eq!(
        copy("spec.forProvider.tags"),
        serde_json::json!({
            "metadata": {"name": "a"},
            "spec": {"deletionPolicy": "Orphan", "forProvider": {"tags": {"t": "1"}}},
        })
    );
    assert_eq!(
        copy("status.atProvider.tags")["status"],
        serde_json::json!({"atProvider": "not an object"})
    );
}

/// Decoding without managedFields changes no answer: every review a
/// real API server sent gets the same validate and mutate response from
/// the built-in configuration either way, and the objects differ only
/// by managedFields.
#[test]
fn leaving_out_managed_fields_changes_no_answer() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/reviews");
    let config = Config::builtin();
    assert!(!config.reads_managed_fields());
    let mut with_managed_fields = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let body = std::fs::read(entry.unwrap().path()).unwrap();
        let full = review::decode(&body).unwrap();
        let lean = decode(&body, &config).unwrap();
        for (f, l) in [
            (&full.object, &lean.object),
            (&full.old_object, &lean.old_object),
        ] {
            let (Some(f), Some(l)) = (f, l) else {
                assert_eq!(f.is_some(), l.is_some());
                continue;
            };
            let mut expected = f.value.clone();
            if let Some(m) = expected["metadata"].as_object_mut() {
                with_managed_fields += usize::from(m.remove("managedFields").is_some());
            }
            assert_eq!(l.value, expected);
        }
        let encode = |d: Decision| serde_json::to_value(&d.response).unwrap();
        assert_eq!(
            encode(validate(&full, &config)),
            encode(validate(&lean, &config))
        );
        assert_eq!(
            encode(mutate(&full, &config)),
            encode(mutate(&lean, &config))
        );
    }
    assert!(
        with_managed_fields >= 10,
        "only {with_managed_fields} objects had managedFields"
    );
}

/// A CEL rule that reads managedFields (whole, in part, or whether they
/// are there) keeps them; one that reads other metadata does not.
#[test]
fn a_cel_rule_that_reads_managed_fields_keeps_them() {
    let config = |expression: &str| {
        Config::from_yaml(&format!(
            "resources:\n  - apiGroups: ['*']\n    kinds: ['*']\n    celRules:\n      - name: r\n        expression: {expression:?}\n        message: m\n"
        ))
        .unwrap()
    };
    let body = serde_json::to_vec(&serde_json::json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "u", "operation": "CREATE", "userInfo": {"username": "a"},
            "kind": {"group": "s3.aws.upbound.io", "version": "v1beta1", "kind": "Bucket"},
            "resource": {"group": "s3.aws.upbound.io", "version": "v1beta1", "resource": "buckets"},
            "name": "b",
            "object": {"metadata": {"name": "b", "managedFields": [{"manager": "kubectl"}]},
                       "spec": {"forProvider": {}}},
        },
    }))
    .unwrap();
    for (expression, kept) in [
        (
            "self.metadata.managedFields.exists(m, m.manager == 'kubectl')",
            true,
        ),
        ("has(self.metadata.managedFields)", true),
        ("size(self.metadata) > 0", true),
        (
            "oldSelf == null || oldSelf.metadata.managedFields == self.metadata.managedFields",
            true,
        ),
        ("self.metadata.name != ''", false),
        ("has(self.metadata)", false),
    ] {
        let config = config(expression);
        assert_eq!(config.reads_managed_fields(), kept, "{expression}");
        let req = decode(&body, &config).unwrap();
        let object = &req.object.as_ref().unwrap().value;
        assert_eq!(
            object["metadata"].get("managedFields").is_some(),
            kept,
            "{expression}"
        );
        // The rule sees what it reads: a kept list lets it allow.
        if kept && expression.contains("exists") {
            assert!(validate(&req, &config).response.allowed);
        }
    }
}

fn composition() -> Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/compositions/network-pipeline.yaml");
    serde_saphyr::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn composition_request(op: Operation, obj: Value) -> Request {
    let mut b = crate::admission::review::RequestBuilder::new(op);
    b = b.object(obj.clone());
    if op == Operation::Update {
        b = b.old_object(obj);
    }
    b.username("platform-team").build()
}

/// A Composition CREATE or UPDATE is allowed with one warning per
/// patch into an immutable field, each naming the patch and the fix.
#[test]
fn a_composition_is_allowed_with_warnings() {
    for op in [Operation::Create, Operation::Update] {
        let d = validate(&composition_request(op, composition()), &Config::builtin());
        assert!(d.response.allowed);
        assert_eq!(d.outcome, Outcome::Allowed);
        let w = d.response.warnings.unwrap();
        assert_eq!(w.len(), 5, "{w:#?}");
        assert!(w[0].starts_with("composition-immutable-patch: step \"patch-and-transform\", resource \"vpc\", patches[0]: FromCompositeFieldPath spec.parameters.region -> spec.forProvider.region"), "{}", w[0]);
        assert!(w[0].contains("Fix: make spec.parameters.region immutable in the XRD"));
        assert!(w[1].contains("resource \"subnet-a\", patch set \"subnet-location\" patches[0]"));
        assert!(w[1].contains("CombineFromComposite spec.parameters.geo, spec.parameters.area -> spec.forProvider.region"));
        assert!(!w.iter().any(|w| w.contains("-> spec.forProvider.tags")));
    }
    // Configured Deny denies, naming the Composition; Off is silent.
    let cfg = Config::from_yaml(&format!(
        "rules: {{composition-immutable-patch: Deny}}\n{}",
        crate::admission::config::BUILTIN_YAML
    ))
    .unwrap();
    let d = validate(&composition_request(Operation::Create, composition()), &cfg);
    assert!(!d.response.allowed);
    assert!(d.response.result.message.starts_with(
        "mrguard denied CREATE of Composition \"xnetworks.aws.example.org\" (5 problems): (1) [composition-immutable-patch] step"
    ), "{}", d.response.result.message);
    let cfg = Config::from_yaml("rules: {composition-immutable-patch: Off}\nresources:\n  - apiGroups: ['*']\n    kinds: ['*']\n    immutableFields: [spec.forProvider.region]\n").unwrap();
    let d = validate(&composition_request(Operation::Create, composition()), &cfg);
    assert!(d.response.allowed && d.response.warnings.is_none());
    // Deletes and other kinds are not read.
    let d = validate(
        &composition_request(Operation::Delete, composition()),
        &Config::builtin(),
    );
    assert!(d.response.allowed && d.response.warnings.is_none());
}

fn composed_vpc(region: &str, owner: bool, claim: bool) -> Value {
    let mut v = serde_json::json!({
        "apiVersion": "ec2.aws.upbound.io/v1beta1", "kind": "VPC",
        "metadata": {"name": "net-x7k2p-vpc", "annotations": {"crossplane.io/external-create-succeeded": "2024-01-01T00:00:00Z"},
            "labels": {"crossplane.io/composite": "net-x7k2p"}},
        "spec": {"forProvider": {"region": region, "cidrBlock": "10.0.0.0/16"}},
    });
    if owner {
        v["metadata"]["ownerReferences"] = serde_json::json!([
            {"apiVersion": "aws.example.org/v1alpha1", "kind": "XNetwork", "name": "net-x7k2p", "uid": "u", "controller": true}]);
    }
    if claim {
        v["metadata"]["labels"]["crossplane.io/claim-name"] = "net".into();
        v["metadata"]["labels"]["crossplane.io/claim-namespace"] = "team-a".into();
    }
    v
}

/// A denied update of a composed MR names its XR and claim, and says
/// to undo the change there.
#[test]
fn a_denied_composed_mr_names_its_xr_and_claim() {
    let deny = |owner: bool, claim: bool| {
        let req = crate::admission::review::RequestBuilder::new(Operation::Update)
            .object(composed_vpc("eu-west-1", owner, claim))
            .old_object(composed_vpc("us-east-1", owner, claim))
            .username("system:serviceaccount:crossplane-system:crossplane")
            .build();
        let cfg = Config::from_yaml("resources:\n  - apiGroups: ['*']\n    kinds: ['*']\n    immutableFields: [spec.forProvider.region]\n").unwrap();
        let d = validate(&req, &cfg);
        assert!(!d.response.allowed);
        d.response.result.message
    };
    let m = deny(true, true);
    assert!(m.starts_with("mrguard denied UPDATE of VPC \"net-x7k2p-vpc\" (1 problem): (1) [immutable-field] spec.forProvider.region is immutable"), "{m}");
    assert!(m.ends_with(" This MR is composed by XNetwork \"net-x7k2p\" (claim \"net\" in namespace \"team-a\"): undo the change on the claim; its Composition patches it into the field(s) above, and Crossplane retries this update until then."), "{m}");
    let m = deny(true, false);
    assert!(
        m.contains("composed by XNetwork \"net-x7k2p\": undo the change on that XR;"),
        "{m}"
    );
    let m = deny(false, false);
    assert!(
        m.contains("composed by the composite resource \"net-x7k2p\": undo"),
        "{m}"
    );
    // An MR nobody composed says nothing of it.
    let mut plain = composed_vpc("eu-west-1", false, false);
    plain["metadata"]["labels"] = serde_json::json!({});
    let mut old = plain.clone();
    old["spec"]["forProvider"]["region"] = "us-east-1".into();
    let req = crate::admission::review::RequestBuilder::new(Operation::Update)
        .object(plain)
        .old_object(old)
        .build();
    let m = validate(&req, &Config::builtin()).response.result.message;
    assert!(
        m.contains("[immutable-field]") && !m.contains("composed"),
        "{m}"
    );
}

/// The XRDs the runtime watches make findings whose sources they
/// freeze informational: no warning.
#[test]
fn the_clusters_xrds_silence_findings_they_make_harmless() {
    let cluster = Cluster::default();
    let req = composition_request(Operation::Create, composition());
    let before = validate_in(&req, &Config::builtin(), &cluster);
    assert_eq!(before.response.warnings.unwrap().len(), 5);
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/compositions/xrd-network-immutable-region.yaml");
    let xrd: Value = serde_saphyr::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut xrs = crate::cluster::composition::XrSchemas::default();
    xrs.add(&xrd);
    cluster.composites().replace(xrs);
    let after = validate_in(&req, &Config::builtin(), &cluster);
    assert!(after.response.allowed);
    assert!(
        after.response.warnings.is_none(),
        "{:?}",
        after.response.warnings
    );
}

/// A staged rule on a Composition warns through the webhook with the date
/// it starts denying, worded as every rule's staged warning.
#[test]
fn a_staged_composition_rule_warns_with_its_date() {
    let cfg = Config::from_yaml(&format!(
        "rules:\n  composition-immutable-patch: {{action: Deny, warnUntil: '2099-01-01T00:00:00Z'}}\n{}",
        crate::admission::config::BUILTIN_YAML
    ))
    .unwrap();
    let d = validate(&composition_request(Operation::Create, composition()), &cfg);
    assert!(d.response.allowed);
    let w = d.response.warnings.unwrap();
    assert_eq!(w.len(), 5, "{w:#?}");
    for w in &w {
        assert!(w.starts_with("composition-immutable-patch: step"), "{w}");
        assert!(
            w.contains("(staged: this will be denied from 2099-01-01T00:00:00Z). Fix: "),
            "{w}"
        );
    }
}

/// An exception matching a Composition's name turns its denial into
/// warnings naming the exception, counted by it; an expired one does not.
#[test]
fn an_exception_waives_a_composition_denial() {
    let cfg = |expires: &str| {
        Config::from_yaml(&format!(
            "rules: {{composition-immutable-patch: Deny}}\nexceptions:\n  - name: net-legacy\n    rules: [composition-immutable-patch]\n    match: {{names: [xnetworks.aws.example.org]}}\n    reason: migrating (NET-7)\n    expires: '{expires}'\n{}",
            crate::admission::config::BUILTIN_YAML
        ))
        .unwrap()
    };
    let req = composition_request(Operation::Update, composition());
    let d = validate(&req, &cfg("2099-01-01T00:00:00Z"));
    assert!(d.response.allowed);
    assert_eq!(d.outcome, Outcome::Allowed);
    let w = d.response.warnings.unwrap();
    assert_eq!(w.len(), 5);
    assert!(w[0].starts_with("composition-immutable-patch: waived by exception net-legacy (expires 2099-01-01T00:00:00Z): step"), "{}", w[0]);
    assert!(d
        .findings
        .iter()
        .all(|f| f.exception() == Some("net-legacy")));
    let d = validate(&req, &cfg("2020-01-01T00:00:00Z"));
    assert!(!d.response.allowed);
    assert_eq!(d.outcome, Outcome::Denied);
    assert!(d.findings.iter().all(|f| f.exception().is_none()));
}

/// The decider judges at the instant its caller gives: a staged Deny
/// warns with its date before it and denies from it on, whatever the
/// wall clock says.
#[test]
fn a_staged_deny_is_judged_at_the_callers_instant() {
    let cfg = Config::from_yaml(
        "rules: {immutable-field: {action: Deny, warnUntil: '2027-01-31T00:00:00Z'}}\nresources:\n  - {apiGroups: ['*'], kinds: ['*'], immutableFields: [spec.forProvider.region]}\n",
    )
    .unwrap();
    let bucket = |region: &str| {
        serde_json::json!({
            "apiVersion": "s3.aws.upbound.io/v1beta1",
            "kind": "Bucket",
            "metadata": {
                "name": "logs",
                "annotations": {"crossplane.io/external-create-succeeded": "2024-01-01T00:00:00Z"},
            },
            "spec": {"forProvider": {"region": region}},
        })
    };
    let req = crate::admission::review::RequestBuilder::new(Operation::Update)
        .object(bucket("eu-west-1"))
        .old_object(bucket("us-east-1"))
        .build();
    let at = |t: &str| Decider::new(&cfg, Cluster::empty(), t.parse().unwrap()).validate(&req);

    let before = at("2027-01-30T23:59:59Z");
    assert!(before.response.allowed);
    assert_eq!(before.outcome, Outcome::Allowed);
    let w = before.response.warnings.unwrap_or_default();
    assert!(
        w.iter().any(|w| w.starts_with("immutable-field: ")
            && w.contains("(staged: this will be denied from 2027-01-31T00:00:00Z)")),
        "{w:#?}"
    );

    let after = at("2027-01-31T00:00:00Z");
    assert!(!after.response.allowed);
    assert_eq!(after.outcome, Outcome::Denied);
    assert!(
        after.response.result.message.contains("[immutable-field]"),
        "{}",
        after.response.result.message
    );
}

/// With the caller's clock, each configured CEL rule evaluated is timed,
/// in order, by the clock's readings alone; a rule of another operation is
/// not. Without a clock nothing is timed.
#[test]
fn configured_cel_rules_are_timed_by_the_callers_clock() {
    let cfg = Config::from_yaml(
        "resources:\n  - apiGroups: ['*']\n    kinds: ['*']\n    celRules:\n      - {name: a, expression: 'true'}\n      - {name: on-update, expression: 'true', operations: [UPDATE]}\n      - {name: b, expression: \"self.spec.forProvider.region == 'x'\", action: Warn}\n",
    )
    .unwrap();
    let req = crate::admission::review::RequestBuilder::create(serde_json::json!({
        "apiVersion": "s3.aws.upbound.io/v1beta1",
        "kind": "Bucket",
        "metadata": {"name": "logs"},
        "spec": {"forProvider": {"region": "eu-west-1"}},
    }))
    .build();
    // The k-th reading is k² ms after the first: 0, 1, 4.
    let start = std::time::Instant::now();
    let readings = std::sync::atomic::AtomicU64::new(0);
    let clock = || {
        let k = readings.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        start + std::time::Duration::from_millis(k * k)
    };
    let decider = Decider::offline(&cfg, jiff::Timestamp::now());
    let timed = decider.timed(&clock).validate(&req);
    let ms = std::time::Duration::from_millis;
    assert_eq!(
        timed.cel_timings,
        [
            crate::admission::cel::CelTiming {
                rule: "cel:a".into(),
                took: ms(1)
            },
            crate::admission::cel::CelTiming {
                rule: "cel:b".into(),
                took: ms(3)
            },
        ]
    );
    assert_eq!(readings.load(std::sync::atomic::Ordering::Relaxed), 3);
    let w = timed.response.warnings.clone().unwrap_or_default();
    assert!(w.iter().any(|w| w.starts_with("cel:b: ")), "{w:?}");

    let untimed = decider.validate(&req);
    assert!(untimed.cel_timings.is_empty());
    assert_eq!(untimed.response.warnings, timed.response.warnings);
}
