//! Live configuration: readers take a cheap snapshot per request; a watcher
//! polls the file and swaps in a new validated config. An invalid file is
//! logged once, counted, and the last good config stays.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use prometheus::{Gauge, IntCounterVec, Opts, Registry};

use super::Config;

pub struct ConfigMetrics {
    reloads: IntCounterVec,
    last_success: Gauge,
}

impl ConfigMetrics {
    pub fn register(registry: &Registry) -> prometheus::Result<Self> {
        let reloads = IntCounterVec::new(
            Opts::new(
                "mrguard_config_reloads_total",
                "Configuration reloads by result.",
            ),
            &["result"],
        )?;
        let last_success = Gauge::new(
            "mrguard_config_last_reload_success_timestamp_seconds",
            "When the configuration was last loaded successfully, in seconds since the epoch.",
        )?;
        registry.register(Box::new(reloads.clone()))?;
        registry.register(Box::new(last_success.clone()))?;
        for r in ["success", "failure"] {
            reloads.with_label_values(&[r]);
        }
        Ok(Self {
            reloads,
            last_success,
        })
    }

    fn success(&self) {
        self.reloads.with_label_values(&["success"]).inc();
        self.mark_loaded();
    }

    fn mark_loaded(&self) {
        self.last_success
            .set(jiff::Timestamp::now().as_millisecond() as f64 / 1000.0);
    }

    fn failure(&self) {
        self.reloads.with_label_values(&["failure"]).inc();
    }
}

/// The configuration in force.
pub struct ConfigStore {
    current: ArcSwap<Config>,
    metrics: Option<ConfigMetrics>,
}

impl ConfigStore {
    pub fn new(initial: Config, metrics: Option<ConfigMetrics>) -> Arc<Self> {
        if let Some(m) = &metrics {
            m.mark_loaded();
        }
        Arc::new(Self {
            current: ArcSwap::from_pointee(initial),
            metrics,
        })
    }

    pub fn load(&self) -> Arc<Config> {
        self.current.load_full()
    }

    pub fn replace(&self, config: Config) {
        self.current.store(Arc::new(config));
        if let Some(m) = &self.metrics {
            m.success();
        }
    }

    fn failed(&self) {
        if let Some(m) = &self.metrics {
            m.failure();
        }
    }
}

/// Polls the config file and compares contents, which also catches the
/// `..data` symlink swap of ConfigMap volumes.
pub struct ConfigWatcher {
    pub path: PathBuf,
    pub interval: Duration,
}

impl ConfigWatcher {
    pub async fn run(
        self,
        store: Arc<ConfigStore>,
        mut last: Vec<u8>,
        shutdown: crate::shutdown::Signal,
    ) {
        let mut tick = tokio::time::interval(self.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = shutdown.wait() => return,
            }
            let bytes = match tokio::fs::read(&self.path).await {
                Ok(b) => b,
                Err(e) => {
                    if !last.is_empty() {
                        tracing::warn!(path = %self.path.display(), error = %e, "failed to read the config file, keeping the last good config");
                        store.failed();
                        last.clear();
                    }
                    continue;
                }
            };
            if bytes == last {
                continue;
            }
            last = bytes;
            let parsed = std::str::from_utf8(&last)
                .map_err(|e| super::ConfigError::Parse(format!("the file is not UTF-8: {e}")))
                .and_then(Config::from_yaml);
            match parsed {
                Ok(config) => {
                    store.replace(config);
                    tracing::info!(path = %self.path.display(), "reloaded the configuration");
                }
                Err(e) => {
                    tracing::error!(path = %self.path.display(), error = %e, "invalid configuration, keeping the last good one");
                    store.failed();
                }
            }
        }
    }
}
