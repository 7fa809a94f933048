//! Builds the admission request the API server would send for objects that
//! did not come in an AdmissionReview: manifests judged offline, live
//! objects judged by the audit, and tests.

use k8s_openapi::api::authentication::v1::UserInfo;
use kube_core::admission::Operation as KubeOperation;
use kube_core::gvk::{GroupVersionKind, GroupVersionResource};
use kube_core::TypeMeta;
use serde_json::Value;

use super::{RawObject, Request};
use crate::admission::model::Operation;

/// A builder for a [`Request`]; group, version, kind, name and namespace
/// come from the subject object (the new one, or the old one on DELETE).
#[derive(Debug, Clone)]
pub struct RequestBuilder {
    operation: Operation,
    object: Option<Value>,
    old_object: Option<Value>,
    username: String,
    groups: Vec<String>,
    dry_run: bool,
    uid: String,
    sub_resource: Option<String>,
}

impl RequestBuilder {
    /// A request for `operation` with no objects yet, by an empty username.
    pub fn new(operation: Operation) -> Self {
        Self {
            operation,
            object: None,
            old_object: None,
            username: String::new(),
            groups: Vec::new(),
            dry_run: false,
            uid: "mrguard".to_string(),
            sub_resource: None,
        }
    }

    /// A CREATE of `object`.
    pub fn create(object: Value) -> Self {
        Self::new(Operation::Create).object(object)
    }

    /// An UPDATE from `old` to `object`.
    pub fn update(old: Value, object: Value) -> Self {
        Self::new(Operation::Update).old_object(old).object(object)
    }

    /// A DELETE of `old`: the API server sends only the old object.
    pub fn delete(old: Value) -> Self {
        Self::new(Operation::Delete).old_object(old)
    }

    /// The new object.
    pub fn object(mut self, object: Value) -> Self {
        self.object = Some(object);
        self
    }

    /// The old object (UPDATE and DELETE).
    pub fn old_object(mut self, old: Value) -> Self {
        self.old_object = Some(old);
        self
    }

    /// The requesting user's name, matched against `exemptUsernames`.
    pub fn username(mut self, username: impl Into<String>) -> Self {
        self.username = username.into();
        self
    }

    /// The requesting user's groups.
    pub fn groups(mut self, groups: Vec<String>) -> Self {
        self.groups = groups;
        self
    }

    /// Marks the request as a dry run.
    pub fn dry_run(mut self, dry_run: bool) -> Self {
        self.dry_run = dry_run;
        self
    }

    /// The request's uid, echoed in the response.
    pub fn uid(mut self, uid: impl Into<String>) -> Self {
        self.uid = uid.into();
        self
    }

    /// A subresource such as `status`: both webhooks allow those untouched.
    pub fn sub_resource(mut self, sub_resource: impl Into<String>) -> Self {
        self.sub_resource = Some(sub_resource.into());
        self
    }

    /// The request, as the API server would have sent it.
    pub fn build(self) -> Request {
        let subject = match self.operation {
            Operation::Delete => self.old_object.as_ref().or(self.object.as_ref()),
            _ => self.object.as_ref().or(self.old_object.as_ref()),
        };
        let text = |p: &str| {
            subject
                .and_then(|s| s.pointer(p))
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        let api_version = text("/apiVersion");
        let (group, version) = match api_version.rsplit_once('/') {
            Some((g, v)) => (g.to_string(), v.to_string()),
            None => (String::new(), api_version.clone()),
        };
        let kind = text("/kind");
        let namespace = text("/metadata/namespace");
        let operation = match self.operation {
            Operation::Create => KubeOperation::Create,
            Operation::Update => KubeOperation::Update,
            Operation::Delete => KubeOperation::Delete,
            Operation::Connect => KubeOperation::Connect,
        };
        Request {
            types: TypeMeta {
                api_version: "admission.k8s.io/v1".to_string(),
                kind: "AdmissionReview".to_string(),
            },
            uid: self.uid,
            // The plural is a guess; no rule reads it.
            resource: GroupVersionResource::gvr(
                &group,
                &version,
                &format!("{}s", kind.to_lowercase()),
            ),
            kind: GroupVersionKind::gvk(&group, &version, &kind),
            sub_resource: self.sub_resource,
            request_kind: None,
            request_resource: None,
            request_sub_resource: None,
            name: text("/metadata/name"),
            namespace: (!namespace.is_empty()).then_some(namespace),
            operation,
            user_info: UserInfo {
                username: Some(self.username),
                groups: Some(self.groups),
                ..UserInfo::default()
            },
            object: self.object.map(RawObject::new),
            old_object: self.old_object.map(RawObject::new),
            dry_run: self.dry_run,
            options: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn identity_and_scope_come_from_the_subject() {
        let obj = json!({"apiVersion": "s3.aws.m.upbound.io/v1beta1", "kind": "Bucket",
                         "metadata": {"name": "b", "namespace": "t"}, "spec": {"forProvider": {}}});
        let req = RequestBuilder::create(obj.clone()).username("u").build();
        assert_eq!(req.namespace.as_deref(), Some("t"));
        assert_eq!(req.kind.group, "s3.aws.m.upbound.io");
        assert_eq!(req.kind.version, "v1beta1");
        assert_eq!(req.kind.kind, "Bucket");
        assert_eq!(req.name, "b");
        assert_eq!(req.user_info.username.as_deref(), Some("u"));
        // On DELETE only the old object is sent, and it names the request.
        let req = RequestBuilder::delete(obj).build();
        assert!(req.object.is_none());
        assert_eq!(req.name, "b");
        assert_eq!(req.operation, KubeOperation::Delete);
    }

    #[test]
    fn a_built_request_survives_the_wire() {
        let obj = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}});
        let req = RequestBuilder::create(obj).dry_run(true).build();
        let review = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                            "request": serde_json::to_value(&req).unwrap()});
        let back = super::super::decode(review.to_string().as_bytes()).unwrap();
        assert_eq!(back.kind.group, "");
        assert_eq!(back.kind.version, "v1");
        assert!(back.dry_run);
    }
}
