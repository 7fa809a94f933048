use serde_json::{json, Value};

use super::*;

fn mrd(plural: &str, group: &str, kind: &str, state: Option<&str>) -> Value {
    let mut m = json!({
        "apiVersion": "apiextensions.crossplane.io/v1alpha1", "kind": "ManagedResourceDefinition",
        "metadata": {"name": format!("{plural}.{group}")},
        "spec": {"group": group, "scope": "Cluster",
                 "names": {"kind": kind, "plural": plural, "categories": ["crossplane", "managed"]},
                 "versions": [{"name": "v1beta1", "served": true, "storage": true,
                   "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                     "spec": {"type": "object", "properties": {"forProvider": {"type": "object", "properties": {
                       "region": {"type": "string",
                         "description": "Region. Changing this forces a new resource to be created."}}}}}}}}}]}
    });
    if let Some(s) = state {
        m["spec"]["state"] = json!(s);
    }
    m
}

fn mrap(name: &str, patterns: &[&str]) -> Value {
    json!({"apiVersion": "apiextensions.crossplane.io/v1alpha1", "kind": "ManagedResourceActivationPolicy",
           "metadata": {"name": name}, "spec": {"activate": patterns}})
}

fn known(objects: &[Value]) -> Activations {
    let mut a = Activations::default();
    for o in objects {
        assert!(a.add(o), "{o}");
    }
    a
}

#[test]
fn an_mrd_reads_like_its_crd() {
    let m = Mrd::from_object(&mrd("buckets", "s3.aws.upbound.io", "Bucket", None)).unwrap();
    assert_eq!(m.name, "buckets.s3.aws.upbound.io");
    assert!(!m.active, "state defaults to Inactive");
    let d = m.documented.unwrap();
    assert_eq!(d.fields[0].path.as_str(), "spec.forProvider.region");
    assert!(
        Mrd::from_object(&json!({"kind": "ManagedResourceDefinition", "apiVersion": "v1"}))
            .is_none()
    );
    assert!(!Activations::default().add(&json!({"kind": "ConfigMap"})));
}

#[test]
fn the_state_of_a_kind() {
    let a = known(&[
        mrd("buckets", "s3.aws.upbound.io", "Bucket", None),
        mrd("vpcs", "ec2.aws.upbound.io", "VPC", Some("Active")),
        mrd("instances", "ec2.aws.upbound.io", "Instance", None),
        mrd("subnets", "ec2.aws.upbound.io", "Subnet", Some("Active")),
        mrap("default", &["*.ec2.aws.upbound.io", "[bad"]),
    ]);
    let bucket = a.state("s3.aws.upbound.io", "Bucket");
    assert!(matches!(bucket, KindState::Inactive(m) if m.name == "buckets.s3.aws.upbound.io"));
    assert_eq!(
        bucket.problem().unwrap(),
        "kind Bucket.s3.aws.upbound.io is served by MRD buckets.s3.aws.upbound.io, which no MRAP \
         activates (state Inactive); add \"buckets.s3.aws.upbound.io\" (or a pattern that matches \
         it) to an MRAP's spec.activate"
    );
    assert!(matches!(
        a.state("ec2.aws.upbound.io", "VPC"),
        KindState::Active {
            by: Some(("default", "*.ec2.aws.upbound.io")),
            ..
        }
    ));
    let pending = a.state_of("ec2.aws.upbound.io/v1beta1", "Instance");
    assert!(matches!(
        pending,
        KindState::Pending {
            by: ("default", _),
            ..
        }
    ));
    assert!(pending
        .problem()
        .unwrap()
        .contains("MRAP default activates"));
    assert_eq!(a.state("s3.aws.upbound.io", "Object"), KindState::NoMrd);
    assert_eq!(a.find("bucket", None)[0].name, "buckets.s3.aws.upbound.io");
    assert_eq!(a.find("buckets", Some("s3.aws.upbound.io")).len(), 1);
    assert!(a.find("bucket", Some("ec2.aws.upbound.io")).is_empty());
    assert_eq!(
        a.inactive_summary(5).unwrap(),
        "1 kind(s) are served by MRDs which no MRAP activates (state Inactive), so no MR of them \
         exists and none is audited: buckets.s3.aws.upbound.io"
    );
    assert!(alone_active().inactive_summary(5).is_none());
    // Active stays active without a matching MRAP (Crossplane refuses the
    // change back).
    let alone = known(&[mrd("vpcs", "ec2.aws.upbound.io", "VPC", Some("Active"))]);
    assert!(matches!(
        alone.state("ec2.aws.upbound.io", "VPC"),
        KindState::Active { by: None, .. }
    ));
    assert!(alone.state("ec2.aws.upbound.io", "VPC").problem().is_none());
}

fn alone_active() -> Activations {
    known(&[mrd("vpcs", "ec2.aws.upbound.io", "VPC", Some("Active"))])
}

#[test]
fn the_singular_names_its_plural() {
    let a = known(&[
        mrd("buckets", "s3.aws.upbound.io", "Bucket", None),
        mrd("bucketpolicies", "s3.aws.upbound.io", "BucketPolicy", None),
        mrd("addresses", "compute.gcp.upbound.io", "Address", None),
        mrd("vpcs", "ec2.aws.upbound.io", "VPC", None),
    ]);
    assert_eq!(
        a.nearest("bucket.s3.aws.upbound.io"),
        ["buckets.s3.aws.upbound.io"]
    );
    assert_eq!(
        a.nearest("bucketpolicy.s3.aws.upbound.io"),
        ["bucketpolicies.s3.aws.upbound.io"]
    );
    assert_eq!(
        a.nearest("address.compute.gcp.upbound.io"),
        ["addresses.compute.gcp.upbound.io"]
    );
    assert_eq!(a.nearest("vpc.*"), ["vpcs.ec2.aws.upbound.io"]);
    // A typo in the group.
    assert_eq!(
        a.nearest("buckets.s3.aws.upbond.io"),
        ["buckets.s3.aws.upbound.io"]
    );
    assert!(a.nearest("databases.rds.azure.upbound.io").is_empty());
}

#[test]
fn an_mrap_is_reviewed() {
    let a = known(&[mrd("buckets", "s3.aws.upbound.io", "Bucket", None)]);
    let r = a.review_mrap(
        &Mrap::from_object(&mrap(
            "p",
            &[
                "bucket.s3.aws.upbound.io",
                "*.s3.aws.upbound.io",
                "s3[",
                "*.nothing.io",
            ],
        ))
        .unwrap(),
    );
    assert_eq!(r.denials.len(), 1);
    assert!(
        r.denials[0].starts_with("spec.activate[2]: syntax error in pattern \"s3[\""),
        "{:?}",
        r.denials
    );
    assert_eq!(r.warnings.len(), 2, "{:?}", r.warnings);
    assert!(r.warnings[0].starts_with("spec.activate[0]: \"bucket.s3.aws.upbound.io\" matches no"));
    assert!(
        r.warnings[0].contains("did you mean \"buckets.s3.aws.upbound.io\"?"),
        "{}",
        r.warnings[0]
    );
    assert!(
        r.warnings[1].contains("e.g. \"buckets.s3.aws.upbound.io\""),
        "{}",
        r.warnings[1]
    );
    // Without any MRD known, nothing can be said of what a pattern matches.
    let none =
        Activations::default().review_mrap(&Mrap::from_object(&mrap("p", &["bucket.s3"])).unwrap());
    assert_eq!(none, MrapReview::default());
}

#[test]
fn a_list_and_the_index() {
    let mut a = Activations::default();
    assert!(a.add(
        &json!({"kind": "List", "items": [mrd("buckets", "s3.aws.upbound.io", "Bucket", None)]})
    ));
    assert!(!a.is_empty());
    let index = ActivationIndex::default();
    assert!(!index.is_watched());
    index.replace(a.clone());
    assert!(index.is_watched());
    assert_eq!(*index.snapshot(), a);
    assert_eq!(a.mrds().count(), 1);
    assert_eq!(a.mraps().count(), 0);
}
