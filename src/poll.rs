//! One file poller for every hot-reloaded file: the configuration and the
//! certificate pair. It compares contents rather than watching events,
//! because Kubernetes Secret and ConfigMap volumes swap a `..data` symlink
//! instead of writing the files in place.

use std::path::PathBuf;
use std::time::Duration;

use prometheus::{IntCounterVec, IntGauge, Opts};

use crate::shutdown::Signal;

/// What every hot-reloaded file exports: `<prefix>_reloads_total{result}`,
/// counted once per change of the file, and `<prefix>_last_reload_successful`,
/// which (like Prometheus's own `prometheus_config_last_reload_successful`)
/// stays 0 for as long as the newest content could not be loaded, so an
/// alert on it lasts exactly as long as the bad file does.
pub(crate) struct ReloadMetrics {
    reloads: IntCounterVec,
    last_successful: IntGauge,
}

impl ReloadMetrics {
    /// The two metrics of `prefix` (`mrguard_config`, `mrguard_tls`);
    /// `what` names the file in their help text. Both results start at 0
    /// and the gauge at 1: nothing starts without a good first load.
    pub(crate) fn new(prefix: &str, what: &str) -> prometheus::Result<Self> {
        let reloads = IntCounterVec::new(
            Opts::new(
                format!("{prefix}_reloads_total"),
                format!("{what} reloads by result."),
            ),
            &["result"],
        )?;
        for r in ["success", "failure"] {
            reloads.with_label_values(&[r]);
        }
        let last_successful = IntGauge::new(
            format!("{prefix}_last_reload_successful"),
            format!(
                "1 when the newest {} content was loaded, 0 while it could not be (the last good one stays in use).",
                what.to_lowercase()
            ),
        )?;
        last_successful.set(1);
        Ok(Self {
            reloads,
            last_successful,
        })
    }

    /// Both collectors, to register.
    pub(crate) fn collectors(&self) -> Vec<Box<dyn prometheus::core::Collector>> {
        vec![
            Box::new(self.reloads.clone()),
            Box::new(self.last_successful.clone()),
        ]
    }

    pub(crate) fn success(&self) {
        self.reloads.with_label_values(&["success"]).inc();
        self.last_successful.set(1);
    }

    pub(crate) fn failure(&self) {
        self.reloads.with_label_values(&["failure"]).inc();
        self.last_successful.set(0);
    }
}

/// What one poll saw, handed to the caller's reload function.
pub(crate) enum Polled<'a> {
    /// The files' contents differ from what was last handed over.
    Changed(&'a [Vec<u8>]),
    /// A file could not be read; reported once until the files read again.
    Unreadable(&'a PathBuf, &'a std::io::Error),
}

/// Polls `paths` every `interval` until shutdown.
pub(crate) struct FilePoller {
    pub(crate) paths: Vec<PathBuf>,
    pub(crate) interval: Duration,
}

impl FilePoller {
    /// `initial` is what the caller already loaded, so that an unchanged
    /// file is never reloaded.
    pub(crate) async fn run(
        self,
        initial: Vec<Vec<u8>>,
        shutdown: Signal,
        mut reload: impl FnMut(Polled<'_>) + Send,
    ) {
        let mut last = Some(initial);
        let mut tick = tokio::time::interval(self.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = shutdown.wait() => return,
            }
            let mut contents = Vec::with_capacity(self.paths.len());
            let mut failed = None;
            for p in &self.paths {
                match tokio::fs::read(p).await {
                    Ok(b) => contents.push(b),
                    Err(e) => {
                        failed = Some((p, e));
                        break;
                    }
                }
            }
            if let Some((p, e)) = failed {
                // Once per streak: forgetting `last` also makes the same
                // contents count as a change when the file comes back.
                if last.take().is_some() {
                    reload(Polled::Unreadable(p, &e));
                }
                continue;
            }
            if last.as_ref() == Some(&contents) {
                continue;
            }
            reload(Polled::Changed(&contents));
            last = Some(contents);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[tokio::test(start_paused = true)]
    async fn reports_changes_and_one_read_failure_per_streak() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, "a").unwrap();
        let seen = Arc::new(Mutex::new(Vec::<String>::new()));
        let (trigger, signal) = crate::shutdown::channel();
        let poller = FilePoller {
            paths: vec![file.clone()],
            interval: Duration::from_millis(10),
        };
        let log = seen.clone();
        let task = tokio::spawn(poller.run(vec![b"a".to_vec()], signal, move |p| {
            log.lock().unwrap().push(match p {
                Polled::Changed(c) => String::from_utf8_lossy(&c[0]).into_owned(),
                Polled::Unreadable(..) => "unreadable".into(),
            })
        }));
        let step = || tokio::time::sleep(Duration::from_millis(25));
        step().await;
        std::fs::write(&file, "b").unwrap();
        step().await;
        std::fs::remove_file(&file).unwrap();
        step().await;
        step().await;
        std::fs::write(&file, "b").unwrap();
        step().await;
        trigger.fire();
        task.await.unwrap();
        assert_eq!(*seen.lock().unwrap(), ["b", "unreadable", "b"]);
    }
}
