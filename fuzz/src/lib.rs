//! What the fuzz targets share: the full review path with its invariants.

pub mod http;

use base64::Engine;
use mrguard_policy::admission::decider;
use mrguard_policy::admission::config::Config;
use mrguard_policy::admission::review::{self, Request};
use serde_json::Value;

/// A configuration that switches on every mutation step and rule kind, so
/// the fuzzers reach them: tags, deletion protection, namespace defaults,
/// immutable paths with wildcards and keys, and CEL rules.
pub const CONFIG: &str = r#"
providerConfig:
  defaultName: fallback
  namespaceProviderConfigs: {team-a: aws-team-a}
exemptUsernames: ["system:serviceaccount:crossplane-system:*"]
rules:
  paused-delete: Warn
  deletion-policy-conflict: Deny
resources:
  - apiGroups: ["ec2.aws.upbound.io", "ec2.aws.m.upbound.io"]
    kinds: ["VPC", "Subnet"]
    externalName: IdentifierFromProvider
    immutableFields: ["spec.forProvider.region", "spec.forProvider.subnets[*].availabilityZone", "metadata.labels[team]"]
    tagsField: spec.forProvider.tags
    deletionProtection: true
    celRules:
      - name: team-label
        expression: "has(self.metadata.labels) && 'team' in self.metadata.labels"
        message: "needs a team label"
        action: Warn
      - name: region
        expression: "!has(self.spec.forProvider.region) || self.spec.forProvider.region.startsWith('us-')"
        messageExpression: "'region ' + string(self.spec.forProvider.region) + ' is not allowed'"
        action: Deny
        operations: [CREATE, UPDATE, DELETE]
  - apiGroups: ["*"]
    kinds: ["*"]
    immutableFields: ["spec.forProvider.location"]
    tagsField: spec.forProvider.labels
"#;

pub fn configs() -> &'static [Config] {
    static CONFIGS: std::sync::OnceLock<Vec<Config>> = std::sync::OnceLock::new();
    CONFIGS.get_or_init(|| {
        vec![
            Config::builtin(),
            Config::from_yaml(CONFIG).expect("the fuzz config is valid"),
        ]
    })
}

/// Decodes a body and runs both webhooks over it, checking what must hold
/// for every input: answers are AdmissionReviews echoing the uid, a patch
/// applies to the object it was computed for, and mutation is idempotent.
pub fn review_bytes(body: &[u8]) {
    // The counted bound stands in for the exact scan only if it is never
    // below it.
    assert!(review::cost_bound(body) >= review::tree_cost(body));
    let full = review::decode(body);
    // Leaving managedFields out accepts whatever decode does (and more:
    // serde_json skips a subtree without checking its numbers' range or
    // its nesting depth), and changes nothing else of the objects.
    let lean = review::decode_without_managed_fields(body);
    assert!(full.is_err() || lean.is_ok(), "{full:?} / {lean:?}");
    let (Ok(request), Ok(lean)) = (full, lean) else {
        return;
    };
    for (f, l) in [
        (&request.object, &lean.object),
        (&request.old_object, &lean.old_object),
    ] {
        let mut expected = f.as_ref().map(|o| o.value.clone());
        if let Some(m) = expected
            .as_mut()
            .and_then(|v| v.get_mut("metadata"))
            .and_then(|m| m.as_object_mut())
        {
            m.remove("managedFields");
        }
        assert_eq!(expected.as_ref(), l.as_ref().map(|o| &o.value));
    }
    review_request(&request);
}

pub fn review_request(request: &Request) {
    for config in configs() {
        let decider = decider::Decider::offline(config, jiff::Timestamp::now());
        let decision = decider.validate(request);
        check_encoded(&review::encode(decision.response), &request.uid);

        let decision = decider.mutate(request);
        let encoded = review::encode(decision.response);
        let response = check_encoded(&encoded, &request.uid);
        if let Some(patch) = response.get("patch") {
            assert_eq!(response["patchType"], "JSONPatch");
            let raw = base64::engine::general_purpose::STANDARD
                .decode(patch.as_str().expect("patch is a string"))
                .expect("patch is base64");
            let patch: json_patch::Patch =
                serde_json::from_slice(&raw).expect("patch is a JSON Patch");
            let mut object = request
                .object
                .as_ref()
                .expect("a patch needs an object")
                .value
                .clone();
            json_patch::patch(&mut object, &patch).expect("the patch applies to the object");
            assert_eq!(
                Some(&object),
                decision.mutated.as_ref(),
                "the patch yields the mutated object"
            );
            // Idempotence: mutating the result again changes nothing.
            let mut again = request.clone();
            again.object = Some(review::RawObject::new(object));
            let second = decider.mutate(&again);
            assert!(
                second.response.patch.is_none(),
                "mutation is not idempotent: first patch {}, second patch {}, request {}",
                String::from_utf8_lossy(&raw),
                String::from_utf8_lossy(second.response.patch.as_deref().unwrap_or_default()),
                serde_json::to_string(request).unwrap_or_default()
            );
        } else {
            assert!(
                response.get("patchType").is_none(),
                "patchType without patch"
            );
        }
    }
}

fn check_encoded(encoded: &[u8], uid: &str) -> Value {
    let v: Value = serde_json::from_slice(encoded).expect("the answer is JSON");
    assert_eq!(v["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(v["kind"], "AdmissionReview");
    assert_eq!(v["response"]["uid"], uid);
    v["response"].clone()
}

/// What the server runs for `/mutate` (`mutate_patch_only`, which copies
/// only the touched paths) against mutating a whole copy: the same patch,
/// warnings, outcome and findings, for every input.
pub fn patch_only_bytes(body: &[u8]) {
    let Ok(request) = review::decode_without_managed_fields(body) else {
        return;
    };
    for config in configs() {
        let decider = decider::Decider::offline(config, jiff::Timestamp::now());
        let whole = decider.mutate(&request);
        let lean = decider.mutate_patch_only(&request);
        assert!(lean.mutated.is_none(), "patch-only built the whole object");
        let patch = |d: &decider::Decision| {
            d.response
                .patch
                .as_deref()
                .map(|p| serde_json::from_slice::<Value>(p).expect("the patch is JSON"))
        };
        assert_eq!(patch(&whole), patch(&lean), "the patches differ");
        assert_eq!(whole.response.allowed, lean.response.allowed);
        assert_eq!(whole.response.warnings, lean.response.warnings);
        assert_eq!(whole.outcome, lean.outcome);
        assert_eq!(whole.findings, lean.findings);
    }
}
