//! `mrguard plan`'s pure part on hostile input: a manifest file (any text)
//! planned over a live object (any JSON), as an apply and as a deletion,
//! then rendered in every format. The live object comes from the cluster
//! and the manifest from a pull request, so neither may panic the planner.
#![no_main]

use mrguard_policy::admission::config::Config;
use mrguard_policy::commands::plan::{render_markdown, render_text, Plan, Planner};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    // The first line, when it is JSON, is the live object.
    let (live, manifest) = match text.split_once('\n') {
        Some((first, rest)) => match serde_json::from_str::<serde_json::Value>(first) {
            Ok(v) => (Some(v), rest),
            Err(_) => (None, text),
        },
        None => (None, text),
    };
    let Ok(docs) = mrguard_policy::commands::manifest::parse("fuzz.yaml", manifest, 8) else {
        return;
    };
    let config = Config::builtin();
    let planner = Planner::new(&config, jiff::Timestamp::now());
    let mut entries = Vec::new();
    for m in &docs {
        if let Ok(e) = planner.apply(m, live.as_ref()) {
            entries.push(e);
        }
    }
    if let Some(live) = &live {
        if let Ok(e) = planner.delete(live, "fuzz") {
            entries.push(e);
        }
    }
    let plan = Plan::new(entries);
    let _ = render_text(&plan, true);
    let _ = render_markdown(&plan);
    serde_json::to_string(&plan).expect("a plan always serializes");
});
