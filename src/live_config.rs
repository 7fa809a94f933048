//! Live configuration: readers take a cheap snapshot per request; a watcher
//! polls the file and swaps in a new validated config. An invalid file is
//! logged once, counted, and the last good config stays.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::{ArcSwap, ArcSwapOption};
use prometheus::{Gauge, Registry};

use mrguard_policy::admission::config::{Config, ConfigError};

use crate::poll::{FilePoller, Polled, ReloadMetrics};

/// The configuration's reload metrics and its expired-exception gauge.
pub struct ConfigMetrics {
    reloads: ReloadMetrics,
    last_success: Gauge,
    expired: ExpiredExceptions,
}

/// `mrguard_exception_expired{exception}`: 1 for each configured exception
/// past its `expires`, 0 for the others. Judged when scraped, since an
/// exception expires with no reload.
#[derive(Clone)]
struct ExpiredExceptions {
    desc: prometheus::core::Desc,
    exceptions: Arc<std::sync::RwLock<Vec<NamedExpiry>>>,
}

/// An exception's name and expiry.
type NamedExpiry = (String, Option<jiff::Timestamp>);

const EXPIRED_NAME: &str = "mrguard_exception_expired";
const EXPIRED_HELP: &str =
    "1 for each configured exception past its expiry (it no longer applies), 0 for the others.";

impl ExpiredExceptions {
    fn new() -> prometheus::Result<Self> {
        Ok(Self {
            desc: prometheus::core::Desc::new(
                EXPIRED_NAME.into(),
                EXPIRED_HELP.into(),
                vec!["exception".into()],
                Default::default(),
            )?,
            exceptions: Default::default(),
        })
    }

    fn set(&self, config: &Config) {
        if let Ok(mut e) = self.exceptions.write() {
            *e = config
                .exceptions
                .iter()
                .map(|x| (x.name.clone(), x.expires))
                .collect();
        }
    }
}

impl prometheus::core::Collector for ExpiredExceptions {
    fn desc(&self) -> Vec<&prometheus::core::Desc> {
        vec![&self.desc]
    }

    fn collect(&self) -> Vec<prometheus::proto::MetricFamily> {
        let Ok(vec) = prometheus::IntGaugeVec::new(
            prometheus::Opts::new(EXPIRED_NAME, EXPIRED_HELP),
            &["exception"],
        ) else {
            return Vec::new();
        };
        let now = jiff::Timestamp::now();
        if let Ok(e) = self.exceptions.read() {
            for (name, expires) in e.iter() {
                vec.with_label_values(&[name])
                    .set(i64::from(expires.is_some_and(|t| now >= t)));
            }
        }
        prometheus::core::Collector::collect(&vec)
    }
}

impl ConfigMetrics {
    /// Creates the metrics and registers them in `registry`.
    pub fn register(registry: &Registry) -> prometheus::Result<Self> {
        let m = Self {
            reloads: ReloadMetrics::new("mrguard_config", "Configuration")?,
            last_success: Gauge::new(
                "mrguard_config_last_reload_success_timestamp_seconds",
                "When the configuration was last loaded successfully, in seconds since the epoch.",
            )?,
            expired: ExpiredExceptions::new()?,
        };
        m.collectors()
            .into_iter()
            .try_for_each(|c| registry.register(c))?;
        Ok(m)
    }

    /// Every collector, as registered (and listed in docs/metrics.md).
    pub(crate) fn collectors(&self) -> Vec<Box<dyn prometheus::core::Collector>> {
        let mut all = self.reloads.collectors();
        all.push(Box::new(self.last_success.clone()));
        all.push(Box::new(self.expired.clone()));
        all
    }

    fn success(&self) {
        self.reloads.success();
        self.mark_loaded();
    }

    fn mark_loaded(&self) {
        self.last_success
            .set(jiff::Timestamp::now().as_millisecond() as f64 / 1000.0);
    }

    fn failure(&self) {
        self.reloads.failure();
    }
}

/// The configuration in force.
pub struct ConfigStore {
    current: ArcSwap<Config>,
    /// What the webhooks judge with instead, while admission policies in
    /// the API server enforce some rules (`--in-process auto`): derived
    /// from `current`, and dropped whenever it is replaced, so that a
    /// reload is never judged with rules turned off for the configuration
    /// before it.
    admission: ArcSwapOption<Config>,
    /// Counts replacements, for the tasks that follow the configuration.
    changes: tokio::sync::watch::Sender<u64>,
    metrics: Option<ConfigMetrics>,
}

impl ConfigStore {
    /// A store holding `initial`, counted as a successful load.
    pub fn new(initial: Config, metrics: Option<ConfigMetrics>) -> Arc<Self> {
        if let Some(m) = &metrics {
            m.mark_loaded();
            m.expired.set(&initial);
        }
        Arc::new(Self {
            current: ArcSwap::from_pointee(initial),
            admission: ArcSwapOption::empty(),
            changes: tokio::sync::watch::Sender::new(0),
            metrics,
        })
    }

    pub(crate) fn load(&self) -> Arc<Config> {
        self.current.load_full()
    }

    /// The configuration the webhooks judge with: [`Self::load`]'s, less
    /// the rules the API server enforces in-process.
    pub(crate) fn load_for_admission(&self) -> Arc<Config> {
        self.admission
            .load_full()
            .unwrap_or_else(|| self.current.load_full())
    }

    /// Sets what the webhooks judge with, if `base` is still the
    /// configuration in force (a reload in between makes it stale).
    pub(crate) fn set_admission(&self, base: &Arc<Config>, admission: Option<Config>) -> bool {
        let admission = admission.map(Arc::new);
        let mut stored = false;
        self.admission.rcu(|_| {
            stored = Arc::ptr_eq(&self.current.load(), base);
            if stored {
                admission.clone()
            } else {
                None
            }
        });
        stored
    }

    /// Wakes on every replacement.
    pub(crate) fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changes.subscribe()
    }

    pub(crate) fn replace(&self, config: Config) {
        if let Some(m) = &self.metrics {
            m.expired.set(&config);
        }
        self.current.store(Arc::new(config));
        self.admission.store(None);
        self.changes.send_modify(|n| *n += 1);
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

/// Why a configuration file could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigFileError {
    /// The file could not be read.
    #[error("failed to read config file {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a valid configuration.
    #[error("failed to load config file {path}: {source}")]
    Invalid {
        /// The file.
        path: String,
        /// What is wrong with it.
        #[source]
        source: ConfigError,
    },
}

/// Reads and validates a configuration file; returns it with the bytes read.
pub fn load_file(path: &Path) -> Result<(Config, Vec<u8>), ConfigFileError> {
    let bytes = std::fs::read(path).map_err(|source| ConfigFileError::Read {
        path: path.display().to_string(),
        source,
    })?;
    let shown = path.display().to_string();
    let config =
        mrguard_policy::admission::config::parse_file(&shown, &bytes).map_err(|source| {
            ConfigFileError::Invalid {
                path: shown.clone(),
                source,
            }
        })?;
    Ok((config, bytes))
}

/// Reloads `store` from `path` whenever its contents change, until
/// shutdown. An invalid file is logged and counted; the last good
/// configuration stays.
pub(crate) async fn watch(
    path: PathBuf,
    interval: Duration,
    store: Arc<ConfigStore>,
    loaded: Vec<u8>,
    shutdown: crate::shutdown::Signal,
) {
    let poller = FilePoller {
        paths: vec![path.clone()],
        interval,
    };
    poller
        .run(vec![loaded], shutdown, |polled| match polled {
            Polled::Unreadable(_, e) => {
                tracing::warn!(path = %path.display(), error = %e, "failed to read the config file, keeping the last good config");
                store.failed();
            }
            Polled::Changed(contents) => match mrguard_policy::admission::config::parse_file(
                &path.display().to_string(),
                &contents[0],
            ) {
                Ok(config) => {
                    for w in config.privileged_exemptions() {
                        tracing::warn!(path = %path.display(), "{w}");
                    }
                    store.replace(config);
                    tracing::info!(path = %path.display(), "reloaded the configuration");
                }
                Err(e) => {
                    tracing::error!(path = %path.display(), error = %e, "invalid configuration, keeping the last good one");
                    store.failed();
                }
            },
        })
        .await;
}
