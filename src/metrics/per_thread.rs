//! Metric vectors written through one copy per thread and exported as
//! their sum.
//!
//! Every admission request writes a request counter, a duration histogram
//! and one histogram per configured CEL rule. With one shared series, both
//! server threads wrote the same atomics, and each write waited for the
//! cache line to cross between cores: on the 2-core bench VM, 80% of the
//! rules' histogram time sat on two `lock` instructions, about 2.5 µs of a
//! 107 µs request (BENCHMARKS.md, "Metrics written per thread"). A copy
//! per thread keeps each line on one core; a scrape adds the copies up.

use std::any::Any;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use prometheus::core::{Collector, Desc, MetricVec, MetricVecBuilder};
use prometheus::proto::{Metric, MetricFamily};

/// A counter or histogram vector (gauges do not add up) kept per thread.
pub(crate) struct PerThread<V> {
    shared: Arc<Shared<V>>,
}

struct Shared<V> {
    /// Tells this vector's copies from another's in a thread's list.
    id: usize,
    make: Box<dyn Fn() -> prometheus::Result<V> + Send + Sync>,
    /// The registering thread's copy, which also describes the vector.
    first: V,
    /// Every copy ever made, `first` first. A copy stays
    /// after its thread ends, so that counts never go down; the threads
    /// that write are the runtime's workers, so the list stays short.
    copies: Mutex<Vec<V>>,
}

impl<V> Clone for PerThread<V> {
    fn clone(&self) -> Self {
        Self {
            shared: self.shared.clone(),
        }
    }
}

thread_local! {
    /// This thread's copies: (vector id, its copy).
    static COPIES: RefCell<Vec<(usize, Box<dyn Any>)>> = const { RefCell::new(Vec::new()) };
}

impl<V: Collector + Clone + 'static> PerThread<V> {
    /// A vector whose copies `make` creates, all with the same options.
    pub(crate) fn new(
        make: impl Fn() -> prometheus::Result<V> + Send + Sync + 'static,
    ) -> prometheus::Result<Self> {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let first = make()?;
        Ok(Self {
            shared: Arc::new(Shared {
                id: NEXT.fetch_add(1, Ordering::Relaxed),
                make: Box::new(make),
                copies: Mutex::new(vec![first.clone()]),
                first,
            }),
        })
    }

    /// The registering thread's copy; a thread whose copy cannot be made
    /// writes this one.
    fn first(&self) -> &V {
        &self.shared.first
    }

    /// This thread's copy, made on the thread's first write.
    pub(crate) fn local(&self) -> V {
        let id = self.shared.id;
        let found = COPIES.with(|c| {
            c.borrow()
                .iter()
                .find(|(i, _)| *i == id)
                .and_then(|(_, v)| v.downcast_ref::<V>().cloned())
        });
        if let Some(v) = found {
            return v;
        }
        // Options that made the first copy make every other; should one
        // fail anyway, this thread writes the first copy.
        let Ok(copy) = (self.shared.make)() else {
            return self.first().clone();
        };
        self.copies().push(copy.clone());
        COPIES.with(|c| c.borrow_mut().push((id, Box::new(copy.clone()))));
        copy
    }

    /// Tells this vector's copies from another's in a thread's caches.
    pub(crate) fn id(&self) -> usize {
        self.shared.id
    }

    fn copies(&self) -> std::sync::MutexGuard<'_, Vec<V>> {
        // A panic while pushing leaves the list whole.
        self.shared
            .copies
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl<T: MetricVecBuilder + 'static> PerThread<MetricVec<T>> {
    /// `with_label_values` on this thread's copy.
    pub(crate) fn with_label_values(&self, labels: &[&str]) -> T::M {
        self.local().with_label_values(labels)
    }
}

impl<V: Collector + Clone + 'static> Collector for PerThread<V> {
    fn desc(&self) -> Vec<&Desc> {
        self.shared.first.desc()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let copies = self.copies().clone();
        sum(copies.iter().map(Collector::collect))
    }
}

/// Adds up the families each copy collected: a series' counts are the sum
/// of its counts in every copy; a series only some copies have is kept.
fn sum(collected: impl IntoIterator<Item = Vec<MetricFamily>>) -> Vec<MetricFamily> {
    let mut out: Vec<MetricFamily> = Vec::new();
    let mut series: Vec<BTreeMap<Vec<(String, String)>, Metric>> = Vec::new();
    for families in collected {
        for (i, mut family) in families.into_iter().enumerate() {
            if out.len() <= i {
                let mut empty = family.clone();
                empty.mut_metric().clear();
                out.push(empty);
                series.push(BTreeMap::new());
            }
            for m in family.take_metric() {
                let key = m
                    .get_label()
                    .iter()
                    .map(|l| (l.name().to_string(), l.value().to_string()))
                    .collect();
                match series[i].get_mut(&key) {
                    Some(into) => add(into, &m),
                    None => {
                        series[i].insert(key, m);
                    }
                }
            }
        }
    }
    for (family, metrics) in out.iter_mut().zip(series) {
        family.set_metric(metrics.into_values().collect());
    }
    out
}

fn add(into: &mut Metric, m: &Metric) {
    if let (Some(a), Some(b)) = (into.counter.as_mut(), m.counter.as_ref()) {
        a.set_value(a.value() + b.value());
    }
    if let (Some(a), Some(b)) = (into.histogram.as_mut(), m.histogram.as_ref()) {
        a.set_sample_count(a.sample_count() + b.sample_count());
        a.set_sample_sum(a.sample_sum() + b.sample_sum());
        for (x, y) in a.bucket.iter_mut().zip(&b.bucket) {
            x.set_cumulative_count(x.cumulative_count() + y.cumulative_count());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, Opts};

    fn counters() -> PerThread<IntCounterVec> {
        PerThread::new(|| IntCounterVec::new(Opts::new("c_total", "c"), &["k"])).unwrap()
    }

    fn value(families: &[MetricFamily], label: &str) -> Option<f64> {
        families[0]
            .get_metric()
            .iter()
            .find(|m| m.get_label()[0].value() == label)
            .map(|m| m.get_counter().value())
    }

    /// Writes on several threads land in their own copies and are exported
    /// as one series per label set, their sum; a series only one thread
    /// wrote, and one made before any thread wrote, are kept as they are.
    #[test]
    fn a_scrape_adds_up_every_threads_copy() {
        let c = counters();
        c.first().with_label_values(&["before"]);
        std::thread::scope(|s| {
            for t in 0..4u64 {
                let c = c.clone();
                s.spawn(move || {
                    for _ in 0..=t {
                        c.with_label_values(&["all"]).inc();
                    }
                    if t == 2 {
                        c.with_label_values(&["one"]).inc_by(7);
                    }
                });
            }
        });
        let got = c.collect();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].name(), "c_total");
        assert_eq!(value(&got, "all"), Some(1.0 + 2.0 + 3.0 + 4.0));
        assert_eq!(value(&got, "one"), Some(7.0));
        assert_eq!(value(&got, "before"), Some(0.0));
        assert_eq!(got[0].get_metric().len(), 3, "one series per label set");
        // The registering thread, then one copy per writing thread.
        assert_eq!(c.shared.copies.lock().unwrap().len(), 5);
    }

    /// A thread writes its own copy every time, not a new one per write.
    #[test]
    fn a_thread_keeps_its_copy() {
        let c = counters();
        std::thread::scope(|s| {
            s.spawn(|| {
                for _ in 0..10 {
                    c.with_label_values(&["x"]).inc();
                }
            });
        });
        assert_eq!(c.shared.copies.lock().unwrap().len(), 2);
        assert_eq!(value(&c.collect(), "x"), Some(10.0));
    }

    /// Histograms add up bucket by bucket, with their counts and sums.
    #[test]
    fn histograms_add_up_by_bucket() {
        let h = PerThread::new(|| {
            HistogramVec::new(
                HistogramOpts::new("h", "h").buckets(vec![1.0, 10.0]),
                &["k"],
            )
        })
        .unwrap();
        h.with_label_values(&["a"]).observe(0.5);
        std::thread::scope(|s| {
            s.spawn(|| {
                h.with_label_values(&["a"]).observe(5.0);
                h.with_label_values(&["a"]).observe(50.0);
            });
        });
        let got = h.collect();
        let m = got[0].get_metric();
        assert_eq!(m.len(), 1);
        let hist = m[0].get_histogram();
        assert_eq!(hist.get_sample_count(), 3);
        assert_eq!(hist.get_sample_sum(), 55.5);
        let buckets: Vec<u64> = hist
            .get_bucket()
            .iter()
            .map(|b| b.cumulative_count())
            .collect();
        assert_eq!(buckets, [1, 2]);
    }

    /// Registered, the copies' sum is what the registry gathers, and an
    /// empty vector still describes itself.
    #[test]
    fn a_registry_gathers_the_sum() {
        let r = prometheus::Registry::new();
        let c = counters();
        r.register(Box::new(c.clone())).unwrap();
        assert_eq!(c.desc()[0].fq_name, "c_total");
        assert_eq!(c.collect()[0].get_metric().len(), 0);
        std::thread::scope(|s| {
            s.spawn(|| c.with_label_values(&["x"]).inc());
            s.spawn(|| c.with_label_values(&["x"]).inc());
        });
        assert_eq!(value(&r.gather(), "x"), Some(2.0));
    }
}
