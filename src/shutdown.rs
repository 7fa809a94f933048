//! A shutdown signal shared by background tasks: fired once on SIGTERM.
use tokio::sync::watch;

/// Waits for shutdown; clones share one trigger.
#[derive(Clone)]
pub struct Signal(watch::Receiver<bool>);

/// Fires the shutdown every [`Signal`] of its channel sees.
pub struct Trigger(watch::Sender<bool>);

/// A new, unfired shutdown channel.
pub fn channel() -> (Trigger, Signal) {
    let (tx, rx) = watch::channel(false);
    (Trigger(tx), Signal(rx))
}

impl Trigger {
    pub(crate) fn fire(&self) {
        let _ = self.0.send(true);
    }
}

impl Signal {
    pub(crate) async fn wait(&self) {
        let mut rx = self.0.clone();
        // An error means the trigger is gone, which also means stop.
        let _ = rx.wait_for(|v| *v).await;
    }

    pub(crate) fn is_fired(&self) -> bool {
        *self.0.borrow()
    }
}
