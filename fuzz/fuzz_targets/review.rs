//! Raw request bodies through decode → mutate/validate → encode.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    mrguard_fuzz::review_bytes(data);
});
