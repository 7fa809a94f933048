//! Raw connection bytes (HTTP/1.1 or HTTP/2 frames) into the admission
//! router through hyper's server.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    mrguard_fuzz::http::serve_bytes(data);
});
