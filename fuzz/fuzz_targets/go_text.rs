//! The two Go grammars mrguard reads from users' objects: durations
//! (`crossplane.io/poll-interval`, `minPollInterval`, Go's
//! `time.ParseDuration`) and MRAP `spec.activate` patterns (Go's
//! `filepath.Match`), with the properties a wrong port would break.
#![no_main]

use mrguard_policy::cluster::activation::pattern;
use mrguard_policy::admission::config::GoDuration;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(d) = GoDuration::parse(text) {
        // What Go prints, Go parses back to the same duration.
        let printed = d.to_string();
        assert_eq!(
            GoDuration::parse(&printed).ok(),
            Some(d),
            "{text:?} printed as {printed:?}"
        );
    }
    let (pat, name) = text.split_once('\n').unwrap_or((text, text));
    let Ok(matched) = pattern::matches(pat, name) else {
        return;
    };
    // A pattern without metacharacters matches exactly itself.
    if !pat.contains(['*', '?', '[', '\\']) {
        assert_eq!(matched, pat == name, "{pat:?} against {name:?}");
    }
    // `*` alone matches any name without a separator.
    if pat == "*" {
        assert_eq!(matched, !name.contains('/'), "* against {name:?}");
    }
});
