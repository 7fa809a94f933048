//! The compiled CEL path against the interpreter: an expression from the
//! grammar the compiled path covers, objects and a request, all generated
//! from the input (`mrguard_policy::admission::cel::gen`). Any disagreement in verdict
//! or error-ness, before or after the hand-over to the interpreter, is a
//! crash; each one found becomes a unit test in crates/policy/src/admission/cel/tests.rs.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Err(e) = mrguard_policy::admission::cel::gen::run(data) {
        panic!("the compiled path and the interpreter disagree: {e}");
    }
});
