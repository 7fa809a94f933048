//! Request bodies through the server's `/mutate` path, which copies only
//! what mutation touches, checked against mutating a whole copy.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    mrguard_fuzz::patch_only_bytes(data);
});
