//! A watch kept in a kube-runtime reflector store, plus what the store
//! does not say: whether a first list is complete (or was found missing),
//! and one log line per failure streak.
//!
//! The store's writer buffers a relist itself (`Init` … `InitDone`) and
//! swaps it in whole, so readers see the previous list until the new one
//! is complete.

use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::{Lookup, Store};
use kube::runtime::watcher;

use super::api::KubeError;
use super::retry::{watcher_progress, ErrorOnce};
use crate::metrics::controller::ControllerMetrics;

/// What a reflected collection does when its list is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Missing {
    /// Keep failing (and stay unsynced) until the list succeeds.
    Wait,
    /// A 404 (not installed) or a first 403 (not readable) counts as an
    /// empty first list; the watch keeps retrying.
    Empty,
}

/// One watched collection in a reflector store.
pub(crate) struct Reflected<K>
where
    K: Lookup + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    writer: Writer<K>,
    /// What readers read.
    pub(crate) store: Store<K>,
    /// The resource, for logs and the API-error metric.
    resource: &'static str,
    /// Why it is watched, for the log lines.
    purpose: &'static str,
    missing: Missing,
    synced: bool,
    errors: ErrorOnce,
    absent_logged: bool,
}

impl<K> Reflected<K>
where
    K: Lookup + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    pub(crate) fn new(
        dyntype: K::DynamicType,
        resource: &'static str,
        purpose: &'static str,
        missing: Missing,
    ) -> Self {
        let writer = Writer::new(dyntype);
        let store = writer.as_reader();
        Self {
            writer,
            store,
            resource,
            purpose,
            missing,
            synced: false,
            errors: ErrorOnce::default(),
            absent_logged: false,
        }
    }

    /// Whether a first list is complete (or counted as empty).
    pub(crate) fn synced(&self) -> bool {
        self.synced
    }

    /// Applies one watcher item. Returns whether what readers see may have
    /// changed (including the first sync).
    pub(crate) fn apply(
        &mut self,
        item: Result<watcher::Event<K>, watcher::Error>,
        metrics: Option<&ControllerMetrics>,
    ) -> bool {
        if watcher_progress(&item) {
            self.errors.ok(self.purpose);
        }
        match item {
            Ok(event) => {
                self.writer.apply_watcher_event(&event);
                match event {
                    watcher::Event::Init | watcher::Event::InitApply(_) => false,
                    watcher::Event::InitDone => {
                        self.synced = true;
                        true
                    }
                    watcher::Event::Apply(_) | watcher::Event::Delete(_) => true,
                }
            }
            Err(e) => {
                let e = KubeError::watch(self.resource, String::new(), e);
                if self.missing == Missing::Empty && e.is_not_found() {
                    // Not installed: expected, so said once at INFO.
                    if !std::mem::replace(&mut self.absent_logged, true) {
                        tracing::info!(
                            resource = self.resource,
                            "{}: not installed; empty until it is",
                            self.purpose
                        );
                    }
                    return !std::mem::replace(&mut self.synced, true);
                }
                if self.missing == Missing::Empty && e.status_code() == Some(403) && !self.synced {
                    // Not readable: as above, but RBAC is wrong, so an error.
                    self.synced = true;
                    self.errors.failed(
                        &e,
                        metrics,
                        &format!(
                            "{}: cannot list it; going on without it and retrying",
                            self.purpose
                        ),
                    );
                    return true;
                }
                self.errors.failed(
                    &e,
                    metrics,
                    &format!(
                        "{}: failed to watch it; retrying with backoff",
                        self.purpose
                    ),
                );
                false
            }
        }
    }
}
