//! What decoding one AdmissionReview costs with the object type the
//! webhooks use (`review::RawObject`, parsed without managedFields), with
//! all fields kept, and with kube-core's own `DynamicObject`, alone and
//! with the object rebuilt as the one JSON value rules read. The numbers
//! are why `review` keeps its own type (see the comment on `RawObject`).
//!
//! Allocations are counted per call (divan's `AllocProfiler`).
//!
//! `cargo bench -p mrguard-policy --bench decode`

use divan::{black_box, Bencher};
use kube_core::admission::{AdmissionRequest, AdmissionReview};
use kube_core::DynamicObject;
use mrguard_policy::admission::review::{decode, decode_without_managed_fields};
use serde_json::Value;

#[global_allocator]
static ALLOC: divan::AllocProfiler = divan::AllocProfiler::system();

fn main() {
    divan::main();
}

/// The ~10 KB VPC UPDATE a kube-apiserver sent, both objects with
/// managedFields.
fn body() -> Vec<u8> {
    let path = format!(
        "{}/../../tests/fixtures/reviews/026_validate_UPDATE_VPC_sample-vpc.json",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read(path).expect("fixture")
}

/// What the webhooks decode.
#[divan::bench]
fn lean_raw_object(b: Bencher<'_, '_>) {
    let body = body();
    b.bench_local(|| black_box(decode_without_managed_fields(black_box(&body)).unwrap()));
}

/// The same with managedFields kept.
#[divan::bench]
fn raw_object_all_fields(b: Bencher<'_, '_>) {
    let body = body();
    b.bench_local(|| black_box(decode(black_box(&body)).unwrap()));
}

/// kube-core's DynamicObject: typed metadata, the rest as `data`; rules read
/// the whole object as one `Value`, so it is put back together.
#[divan::bench]
fn dynamic_object_and_value(b: Bencher<'_, '_>) {
    let body = body();
    b.bench_local(|| {
        let text = std::str::from_utf8(black_box(&body)).unwrap();
        let review: AdmissionReview<DynamicObject> = serde_json::from_str(text).unwrap();
        let req: AdmissionRequest<DynamicObject> = review.try_into().unwrap();
        let obj: Option<Value> = req
            .object
            .as_ref()
            .map(|o| serde_json::to_value(o).unwrap());
        let old: Option<Value> = req
            .old_object
            .as_ref()
            .map(|o| serde_json::to_value(o).unwrap());
        black_box((req, obj, old))
    });
}

/// DynamicObject alone, without rebuilding one `Value`.
#[divan::bench]
fn dynamic_object_only(b: Bencher<'_, '_>) {
    let body = body();
    b.bench_local(|| {
        let text = std::str::from_utf8(black_box(&body)).unwrap();
        let review: AdmissionReview<DynamicObject> = serde_json::from_str(text).unwrap();
        let req: AdmissionRequest<DynamicObject> = review.try_into().unwrap();
        black_box(req)
    });
}
