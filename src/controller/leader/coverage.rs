//! The leader's coverage: which kinds are MRs (`replica::coverage`), read
//! from the shared CRD store and published to the webhooks task, which
//! writes them into both configurations' `rules`, and to the coverage
//! gauges. Only the leader needs the set published: the followers write no
//! webhook configuration and export no leader gauge.

use std::sync::Arc;

use tokio::sync::watch;

use crate::controller::replica::coverage::Coverage;
use crate::controller::replica::crds::CrdStore;
use crate::metrics::controller::ControllerMetrics;

/// Reads the shared CRD store (`crds`) and publishes the coverage after
/// the first full list and after every change to the set of MR kinds.
pub(crate) async fn run(
    crds: CrdStore,
    tx: watch::Sender<Option<Arc<Coverage>>>,
    metrics: Arc<ControllerMetrics>,
) {
    let mut changes = crds.subscribe();
    while changes.next().await.is_some() {
        let snapshot = crds.snapshot();
        let current = Coverage::from_crds(snapshot.iter().map(|c| &c.summary));
        let changed = tx.borrow().as_deref() != Some(&current);
        if changed {
            // Debug: installing a provider family changes it once per CRD;
            // the webhooks task logs each update it writes.
            tracing::debug!(kinds = current.len(), "MR coverage changed");
            metrics.covered_kinds.set(current.len() as i64);
            metrics
                .known_kinds
                .replace(current.kinds().map(|k| (k.group.as_str(), k.kind.as_str())));
            let _ = tx.send(Some(Arc::new(current)));
        }
    }
}
