//! Configuration parsing and validation, including CEL compilation.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = mrguard_policy::admission::config::Config::from_yaml(text);
    }
});
