//! What the replica's watches saw change, for the audit to know which
//! kinds it must list again and which findings it may keep.
//!
//! A kind's stamp moves on every relist of its MRs, on every event that
//! adds or deletes one or changes what the audit judges of it (not a
//! provider's status update: `IdentityView::judged`), and on every change
//! to a provider config (which decides whether two claims reach the same
//! account). Kinds whose groups fold to one (`s3.aws.upbound.io` and
//! `s3.aws.m.upbound.io`) share a stamp: their MRs may claim the same
//! external resource, so a change in one may add a finding to the other.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use mrguard_policy::cluster::identity::fold_group;

/// A kind's stamp: equal stamps mean nothing its findings depend on was
/// seen to change in between.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Stamp {
    /// Changes to provider configs, for every kind.
    shared: u64,
    /// Events and relists of the kind (and of the kinds sharing its folded group).
    own: u64,
}

#[cfg(test)]
impl Stamp {
    /// The kind's own count.
    pub(crate) fn own(&self) -> u64 {
        self.own
    }
}

#[derive(Default)]
struct Counters {
    shared: u64,
    /// By `fold_group(group)/Kind`. Never reset: a kind dropped and served
    /// again keeps counting up, so an old stamp cannot match by chance.
    own: HashMap<String, u64>,
}

/// The counters, shared by the watches (writers) and the audit (reader).
#[derive(Clone, Default)]
pub(crate) struct Changes(Arc<Mutex<Counters>>);

fn key(group: &str, kind: &str) -> String {
    format!("{}/{kind}", fold_group(group))
}

impl Changes {
    fn lock(&self) -> std::sync::MutexGuard<'_, Counters> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// An MR of `group`/`kind` was added, changed or deleted, or the kind
    /// was listed again.
    pub(crate) fn kind(&self, group: &str, kind: &str) {
        *self.lock().own.entry(key(group, kind)).or_default() += 1;
    }

    /// A change any kind's findings may depend on.
    pub(crate) fn everything(&self) {
        self.lock().shared += 1;
    }

    /// `group`/`kind`'s stamp now.
    pub(crate) fn stamp(&self, group: &str, kind: &str) -> Stamp {
        let c = self.lock();
        Stamp {
            shared: c.shared,
            own: c.own.get(&key(group, kind)).copied().unwrap_or(0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stamp_moves_with_its_kind_its_folded_twin_and_provider_configs() {
        let c = Changes::default();
        let legacy = || c.stamp("s3.aws.upbound.io", "Bucket");
        let before = legacy();
        let vpc = c.stamp("ec2.aws.upbound.io", "VPC");
        // Another kind's event leaves it.
        c.kind("ec2.aws.upbound.io", "VPC");
        assert_eq!(legacy(), before);
        assert_ne!(c.stamp("ec2.aws.upbound.io", "VPC"), vpc);
        // The namespaced twin's event moves it: their MRs share identities.
        c.kind("s3.aws.m.upbound.io", "Bucket");
        let after_twin = legacy();
        assert_ne!(after_twin, before);
        // As does its own, and a provider config change.
        c.kind("s3.aws.upbound.io", "Bucket");
        assert_ne!(legacy(), after_twin);
        let before = legacy();
        c.everything();
        assert_ne!(legacy(), before);
        // A kind of the same name in another group is another kind.
        let before = legacy();
        c.kind("s3.gcp.upbound.io", "Bucket");
        assert_eq!(legacy(), before);
    }
}
