//! CEL rule compilation, as the configuration loader does it.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = mrguard_policy::admission::cel::CelProgram::compile(text);
    }
});
