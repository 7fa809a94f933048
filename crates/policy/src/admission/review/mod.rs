//! The AdmissionReview wire format: decoding with kube's types, and encoding
//! with `response.patch` as a base64 string, as the Kubernetes API
//! serialises bytes (kube 5 writes a list of numbers, kube-rs#1781).
//!
//! [`decode`] and [`RequestBuilder`] are the two ways to a [`Request`], and a
//! request is the only way to a rule context, so every caller — the
//! webhooks, `mrguard check`, the audit and the tests — is judged the same
//! way.

mod builder;
mod cost;
mod prune;

pub use builder::RequestBuilder;
pub use cost::{check_budget, cost_bound, tree_cost, tree_limit, AMPLIFICATION, MIN_TREE_BYTES};

use std::borrow::Cow;
use std::sync::OnceLock;

use base64::Engine;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube_core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview};
use kube_core::{ApiResource, DynamicResourceScope, Resource};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// An object in an AdmissionReview kept as plain JSON: rules and mutators
/// read and edit the `Value` directly, so it is parsed exactly once.
///
/// Not kube-core's own object types, for what they cost per request:
/// `DynamicObject` and `Object<P, U>` parse `metadata` into a typed
/// `ObjectMeta` (managedFields included) apart from the JSON the rules
/// read, and `PartialObjectMeta` keeps the metadata only. On the 10 KB
/// VPC UPDATE (`benches/decode.rs`; callgrind and divan's allocation
/// counter, per decode) this type without managedFields takes 235 k
/// instructions, 168 allocations and 15.4 KB; `DynamicObject` takes 354 k,
/// 305 and 43.3 KB before the object is one value the rules can read, and
/// 608 k, 672 and 87.2 KB once it is. kube's `AdmissionReview` needs a
/// [`Resource`], so this type implements it, with metadata parsed only if
/// kube's generic code asks.
#[derive(Debug, Clone, Default)]
pub struct RawObject {
    /// The object, parsed once.
    pub value: Value,
    // Only built if kube's generic code asks for it; boxed because the
    // review is moved several times while it is decoded, and an inline
    // `ObjectMeta` made each of the two objects 400 bytes instead of 48.
    meta: OnceLock<Box<ObjectMeta>>,
}

impl RawObject {
    /// Wraps a parsed object.
    pub fn new(value: Value) -> Self {
        Self {
            value,
            meta: OnceLock::new(),
        }
    }

    fn parse_meta(value: &Value) -> ObjectMeta {
        value
            .get("metadata")
            .and_then(|m| ObjectMeta::deserialize(m).ok())
            .unwrap_or_default()
    }
}

impl<'de> Deserialize<'de> for RawObject {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::DeserializeSeed;
        // Everything kept, big arrays trimmed (see `prune`).
        prune::Pruned { skip: &[] }.deserialize(d).map(Self::new)
    }
}

/// A [`RawObject`] parsed without `metadata.managedFields` (see `prune`):
/// what [`decode_without_managed_fields`] decodes before it hands out
/// plain [`RawObject`]s.
#[derive(Debug, Clone, Default)]
struct LeanObject(RawObject);

impl<'de> Deserialize<'de> for LeanObject {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::DeserializeSeed;
        prune::Pruned {
            skip: prune::MANAGED_FIELDS,
        }
        .deserialize(d)
        .map(|v| Self(RawObject::new(v)))
    }
}

// kube's AdmissionReview needs a Resource; this is RawObject's (whose
// comment says why not kube-core's DynamicObject).
impl Resource for LeanObject {
    type DynamicType = ApiResource;
    type Scope = DynamicResourceScope;

    fn kind(dt: &ApiResource) -> Cow<'_, str> {
        RawObject::kind(dt)
    }
    fn group(dt: &ApiResource) -> Cow<'_, str> {
        RawObject::group(dt)
    }
    fn version(dt: &ApiResource) -> Cow<'_, str> {
        RawObject::version(dt)
    }
    fn api_version(dt: &ApiResource) -> Cow<'_, str> {
        RawObject::api_version(dt)
    }
    fn plural(dt: &ApiResource) -> Cow<'_, str> {
        RawObject::plural(dt)
    }
    fn meta(&self) -> &ObjectMeta {
        self.0.meta()
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        self.0.meta_mut()
    }
}

impl Serialize for RawObject {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.value.serialize(s)
    }
}

impl Resource for RawObject {
    type DynamicType = ApiResource;
    type Scope = DynamicResourceScope;

    fn kind(dt: &ApiResource) -> Cow<'_, str> {
        dt.kind.as_str().into()
    }
    fn group(dt: &ApiResource) -> Cow<'_, str> {
        dt.group.as_str().into()
    }
    fn version(dt: &ApiResource) -> Cow<'_, str> {
        dt.version.as_str().into()
    }
    fn api_version(dt: &ApiResource) -> Cow<'_, str> {
        dt.api_version.as_str().into()
    }
    fn plural(dt: &ApiResource) -> Cow<'_, str> {
        dt.plural.as_str().into()
    }
    fn meta(&self) -> &ObjectMeta {
        self.meta
            .get_or_init(|| Box::new(Self::parse_meta(&self.value)))
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        if self.meta.get().is_none() {
            let parsed = Self::parse_meta(&self.value);
            let _ = self.meta.set(Box::new(parsed));
        }
        match self.meta.get_mut() {
            Some(m) => m,
            None => unreachable!("metadata was initialised just above"),
        }
    }
}

/// An admission request whose objects stay plain JSON.
pub type Request = AdmissionRequest<RawObject>;

/// The request's object and old object, each only when it was sent as a
/// value (absent and `null` are the same to every rule).
pub fn objects(req: &Request) -> (Option<&Value>, Option<&Value>) {
    fn value(o: &Option<RawObject>) -> Option<&Value> {
        o.as_ref().map(|o| &o.value).filter(|v| !v.is_null())
    }
    (value(&req.object), value(&req.old_object))
}

/// Why a request body is not an AdmissionReview v1; answered with HTTP 400.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// The body is not the JSON of an AdmissionReview.
    #[error("failed to decode AdmissionReview: {0}")]
    Json(#[from] serde_json::Error),
    /// The body is not UTF-8, as JSON must be (RFC 8259, section 8.1).
    #[error("failed to decode AdmissionReview: the body is not UTF-8 (an invalid byte at offset {offset})")]
    NotUtf8 {
        /// Where the first invalid byte is.
        offset: usize,
    },
    /// The envelope has another apiVersion.
    #[error(
        "failed to decode AdmissionReview: apiVersion is {0:?}, expected \"admission.k8s.io/v1\""
    )]
    ApiVersion(String),
    /// The envelope has another kind.
    #[error("failed to decode AdmissionReview: kind is {0:?}, expected \"AdmissionReview\"")]
    Kind(String),
    /// The review carries no request.
    #[error("failed to decode AdmissionReview: the request field is missing")]
    NoRequest,
    /// The request has no uid to answer to.
    #[error("failed to decode AdmissionReview: request.uid is empty")]
    NoUid,
    /// Parsed, the body would take more memory than any real object does
    /// (e.g. millions of one-entry objects); refused before parsing.
    #[error("failed to decode AdmissionReview: its JSON would take about {cost} bytes once parsed, more than the limit of {limit} for a {len}-byte body (arrays of tiny objects?)")]
    TooComplex {
        /// The estimate, [`tree_cost`].
        cost: usize,
        /// [`tree_limit`] of the body.
        limit: usize,
        /// The body's length.
        len: usize,
    },
}

/// Decodes a request body into an admission request.
pub fn decode(body: &[u8]) -> Result<Request, DecodeError> {
    decode_as::<RawObject>(body)
}

/// [`decode`] without the objects' `metadata.managedFields`: the API server
/// sends them in every review, and nothing reads them unless a CEL rule
/// names them. Skipping them cut a /validate request on the benchmark mix
/// from 428.5 k to 307.7 k instructions (callgrind, BENCHMARKS.md).
pub fn decode_without_managed_fields(body: &[u8]) -> Result<Request, DecodeError> {
    let r = decode_as::<LeanObject>(body)?;
    Ok(AdmissionRequest {
        types: r.types,
        uid: r.uid,
        kind: r.kind,
        resource: r.resource,
        sub_resource: r.sub_resource,
        request_kind: r.request_kind,
        request_resource: r.request_resource,
        request_sub_resource: r.request_sub_resource,
        name: r.name,
        namespace: r.namespace,
        operation: r.operation,
        user_info: r.user_info,
        object: r.object.map(|o| o.0),
        old_object: r.old_object.map(|o| o.0),
        dry_run: r.dry_run,
        options: r.options,
    })
}

fn decode_as<T>(body: &[u8]) -> Result<AdmissionRequest<T>, DecodeError>
where
    T: Resource + serde::de::DeserializeOwned,
{
    if let Err((cost, limit)) = check_budget(body) {
        return Err(DecodeError::TooComplex {
            cost,
            limit,
            len: body.len(),
        });
    }
    // One check of the whole body instead of one per string: serde_json
    // checks each string it reads from bytes, and a review has hundreds of
    // short ones (13.6 k of the VPC UPDATE's instructions, callgrind).
    let text = std::str::from_utf8(body).map_err(|e| DecodeError::NotUtf8 {
        offset: e.valid_up_to(),
    })?;
    let review: AdmissionReview<T> = match serde_json::from_str(text) {
        Ok(r) => r,
        // Name the envelope problem first when there is one: "wrong version"
        // says more than the missing field it leads to.
        Err(e) => {
            if let Ok(types) = serde_json::from_str::<kube_core::TypeMeta>(text) {
                check_types(&types)?;
            }
            return Err(e.into());
        }
    };
    check_types(&review.types)?;
    let request: AdmissionRequest<T> = review.try_into().map_err(|_| DecodeError::NoRequest)?;
    if request.uid.is_empty() {
        return Err(DecodeError::NoUid);
    }
    Ok(request)
}

fn check_types(types: &kube_core::TypeMeta) -> Result<(), DecodeError> {
    if types.api_version != "admission.k8s.io/v1" {
        return Err(DecodeError::ApiVersion(types.api_version.clone()));
    }
    if types.kind != "AdmissionReview" {
        return Err(DecodeError::Kind(types.kind.clone()));
    }
    Ok(())
}

/// The wire form of an answer, serialised in one pass.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Envelope<'a> {
    api_version: &'static str,
    kind: &'static str,
    response: WireResponse<'a>,
}

#[derive(Serialize)]
struct WireResponse<'a> {
    #[serde(flatten)]
    response: &'a AdmissionResponse,
    #[serde(skip_serializing_if = "Option::is_none")]
    patch: Option<String>,
}

/// Encodes a response as an `admission.k8s.io/v1` AdmissionReview.
pub fn encode(mut response: AdmissionResponse) -> Vec<u8> {
    // The patch goes out as base64 text, not as kube's list of numbers.
    let patch = response
        .patch
        .take()
        .map(|p| base64::engine::general_purpose::STANDARD.encode(p));
    let envelope = Envelope {
        api_version: "admission.k8s.io/v1",
        kind: "AdmissionReview",
        response: WireResponse {
            response: &response,
            patch,
        },
    };
    // Serialising plain structs of strings cannot fail; answer safely anyway.
    serde_json::to_vec(&envelope).unwrap_or_else(|e| fallback(&e.to_string()))
}

fn fallback(reason: &str) -> Vec<u8> {
    format!(
        r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{{"uid":"","allowed":false,"status":{{"code":500,"message":{}}}}}}}"#,
        Value::from(reason)
    )
    .into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    const BODY: &str = r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u1","kind":{"group":"g","version":"v1","kind":"K"},"resource":{"group":"g","version":"v1","resource":"ks"},"operation":"CREATE","userInfo":{"username":"a"},"object":{"metadata":{"name":"n","labels":{"a":"b"}},"spec":{"forProvider":{}}}}}"#;

    #[test]
    fn decodes_and_keeps_the_object_as_json() {
        let r = decode(BODY.as_bytes()).unwrap();
        assert_eq!(r.uid, "u1");
        let obj = r.object.unwrap();
        assert_eq!(obj.value["spec"]["forProvider"], serde_json::json!({}));
        assert_eq!(obj.meta().name.as_deref(), Some("n"));
    }

    #[test]
    fn names_what_is_wrong() {
        let e = decode(b"{").unwrap_err().to_string();
        assert!(e.starts_with("failed to decode AdmissionReview"), "{e}");
        let e = decode(br#"{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview"}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("v1beta1"), "{e}");
        let e = decode(br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("request field is missing"), "{e}");
        let e = decode(BODY.replace("CREATE", "PATCH").as_bytes())
            .unwrap_err()
            .to_string();
        assert!(e.contains("PATCH"), "{e}");
        // A byte that is not UTF-8, in a string or outside one, is named
        // with its offset.
        let mut bytes = BODY.as_bytes().to_vec();
        let at = BODY.find("CREATE").unwrap();
        bytes[at] = 0xff;
        let e = decode(&bytes).unwrap_err().to_string();
        assert!(
            e.contains(&format!("not UTF-8 (an invalid byte at offset {at})")),
            "{e}"
        );
    }

    #[test]
    fn patch_goes_out_as_base64_string() {
        let r = decode(BODY.as_bytes()).unwrap();
        let patch: json_patch::Patch =
            serde_json::from_value(serde_json::json!([{"op": "add", "path": "/a", "value": 1}]))
                .unwrap();
        let resp = AdmissionResponse::from(&r).with_patch(patch).unwrap();
        let out: Value = serde_json::from_slice(&encode(resp)).unwrap();
        let b64 = out["response"]["patch"].as_str().expect("a string");
        let raw = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .unwrap();
        let ops: Value = serde_json::from_slice(&raw).unwrap();
        assert_eq!(ops[0]["path"], "/a");
        assert_eq!(out["response"]["patchType"], "JSONPatch");
        assert_eq!(out["response"]["uid"], "u1");
        assert_eq!(out["apiVersion"], "admission.k8s.io/v1");
    }
}
