//! Compositions (JSON, as the webhook receives them; an array stands for
//! several documents, XRDs among them) through the analysis, with and
//! without the XRD, and through the webhook's decision: never a panic.
#![no_main]

use mrguard_policy::admission::decider::Decider;
use mrguard_policy::cluster::composition::{analyse, XrSchemas};
use mrguard_policy::admission::config::Config;
use mrguard_policy::admission::review::RequestBuilder;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    let docs = match v {
        serde_json::Value::Array(docs) => docs,
        one => vec![one],
    };
    let config = Config::builtin();
    let mut xrs = XrSchemas::default();
    for d in &docs {
        xrs.add(d);
    }
    let decider = Decider::offline(&config, jiff::Timestamp::now());
    for d in &docs {
        for x in [None, Some(&xrs)] {
            let a = analyse(d, &config, x);
            for f in &a.findings {
                let _ = (f.message(), f.fix());
            }
        }
        let _ = decider.composition(&RequestBuilder::create(d.clone()).build());
    }
});
