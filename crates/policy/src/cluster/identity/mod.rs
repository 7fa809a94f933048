//! External identities: which external resource an MR points at
//! (docs/rules.md, `external-identity`), and an index of the identities
//! live MRs claim.
//!
//! An identity is the group with `.m.` folded (so a legacy
//! `s3.aws.upbound.io` Bucket and a namespaced `s3.aws.m.upbound.io` Bucket
//! meet), the kind, the effective external name, `spec.forProvider.region`
//! when present and the resolved provider config. Two MRs with one identity
//! manage one external resource.
//!
//! The index keeps no objects: per MR its key (`group/Kind/namespace/name`)
//! and two 64-bit digests, one of the whole identity and one without the
//! provider config. Two different identities among 20,000 MRs share a
//! digest with a probability around 10^-11 (a false finding naming an
//! unrelated MR), which is accepted for half the memory of 128 bits.

mod index;
mod model;
pub mod report;

pub use index::{
    Claimant, IdentityIndex, IndexedMr, MrKey, ProviderConfigFacts, ProviderConfigStatus,
};
pub use model::{fold_group, Claim, Identity, ProviderConfigRef};

/// What the model's and the index's tests both build: an MR's identity
/// under the built-in configuration, and a Bucket.
#[cfg(test)]
mod testing {
    use serde_json::{json, Value};

    use super::Identity;
    use crate::admission::config::Config;

    pub(super) fn identity(obj: &Value, group: &str, kind: &str, ns: &str) -> Option<Identity> {
        let c = Config::builtin();
        Identity::of(
            obj,
            group,
            kind,
            ns,
            c.resource(group, kind),
            &c.provider_config,
        )
    }

    pub(super) fn bucket(name: &str, annotations: Value, spec: Value) -> Value {
        json!({"metadata": {"name": name, "annotations": annotations}, "spec": spec})
    }
}
