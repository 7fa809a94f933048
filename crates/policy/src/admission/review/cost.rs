//! What a body will cost once parsed, found from its bytes before anything
//! is built, so that no input can make a tree much larger than its body
//! (docs/security.md, "Memory budget"): a bound from byte counts first,
//! the exact scan only when the bound does not clear the body.
//!
//! A `serde_json::Value` is 32 bytes; an array element costs that plus the
//! `Vec`'s spare capacity, and a non-empty object allocates B-tree nodes of
//! about 632 bytes for up to 11 entries. So `[1,1,…]` costs about 20 times
//! its bytes and `[{"a":1},…]` about 80 times: the second is refused.

/// Bytes a parsed tree may cost per byte of its body: above the about 20
/// of the worst shape a real object has (arrays of small numbers, measured
/// in BENCHMARKS.md) and below that of arrays of one-entry objects.
pub const AMPLIFICATION: usize = 24;

/// Trees up to this size are always allowed, however small their body:
/// a few nested objects cost more than 24 times their few bytes.
pub const MIN_TREE_BYTES: usize = 1024 * 1024;

/// An array element: a `Value` and, on average, a quarter of one spare.
const ELEMENT: usize = 40;
/// A B-tree leaf of `(String, Value)`.
const NODE: usize = 632;
/// Entries per node counted: nodes are between half full and full.
const PER_NODE: usize = 6;
/// A string's heap block beyond its bytes.
const STRING: usize = 16;
/// Deeper than serde_json parses (128): the parse fails there anyway.
const MAX_DEPTH: usize = 256;

/// The most heap bytes a body of `body_len` bytes may cost once parsed.
pub fn tree_limit(body_len: usize) -> usize {
    body_len.saturating_mul(AMPLIFICATION).max(MIN_TREE_BYTES)
}

/// Whether a body of this shape may be parsed: `Err((cost, limit))`
/// when its tree would cost more than [`tree_limit`] allows.
///
/// [`cost_bound`] answers for nearly every real review (about 79 k against
/// the limit of 1 MiB for the 6 KB VPC UPDATE); only a body it cannot
/// clear pays for the exact [`tree_cost`].
pub fn check_budget(json: &[u8]) -> Result<(), (usize, usize)> {
    let limit = tree_limit(json.len());
    if cost_bound(json) <= limit {
        return Ok(());
    }
    match tree_cost(json) {
        cost if cost > limit => Err((cost, limit)),
        _ => Ok(()),
    }
}

/// An upper bound on [`tree_cost`] from four byte counts, which the
/// compiler turns into vector instructions (about 0.5 instructions a byte
/// against the exact scan's 5; callgrind, BENCHMARKS.md).
///
/// Why it is a bound: a string costs its bytes plus [`STRING`], and starts
/// at a quote; a container with `c` commas directly inside has at most
/// `c + 1` members, so an object costs at most `NODE + NODE / 6 * c` and
/// an array `ELEMENT * (c + 1)`. A comma inside a string, or any other
/// byte the scan would not count, only makes the bound larger.
pub fn cost_bound(json: &[u8]) -> usize {
    // The per-lane counters are bytes: a block of 255 chunks cannot
    // overflow them.
    const LANES: usize = 32;
    let (mut quotes, mut objects, mut arrays, mut commas) = (0usize, 0usize, 0usize, 0usize);
    for block in json.chunks(255 * LANES) {
        let mut count = [[0u8; LANES]; 4];
        let mut chunks = block.chunks_exact(LANES);
        for chunk in &mut chunks {
            for (j, &b) in chunk.iter().enumerate() {
                count[0][j] += u8::from(b == b'"');
                count[1][j] += u8::from(b == b'{');
                count[2][j] += u8::from(b == b'[');
                count[3][j] += u8::from(b == b',');
            }
        }
        let sum = |lanes: &[u8; LANES]| lanes.iter().map(|&n| usize::from(n)).sum::<usize>();
        let rest = chunks.remainder();
        let tail = |c: u8| rest.iter().filter(|&&b| b == c).count();
        quotes += sum(&count[0]) + tail(b'"');
        objects += sum(&count[1]) + tail(b'{');
        arrays += sum(&count[2]) + tail(b'[');
        commas += sum(&count[3]) + tail(b',');
    }
    let per_comma = (NODE / PER_NODE + 1).max(ELEMENT);
    32usize
        .saturating_add(json.len())
        .saturating_add(quotes.saturating_mul(STRING))
        .saturating_add(objects.saturating_mul(NODE))
        .saturating_add(arrays.saturating_mul(ELEMENT))
        .saturating_add(commas.saturating_mul(per_comma))
}

/// An estimate, from above, of the heap bytes `json` takes as a
/// `serde_json::Value`. Malformed input gets some number; the parser
/// rejects it afterwards.
///
/// Strings are most of a review's bytes: their ends are found eight bytes
/// at a time (the byte-at-a-time loop this replaced was 47 k of the 212 k
/// instructions of the VPC UPDATE review with ten CEL rules, more than the
/// rules cost).
pub fn tree_cost(json: &[u8]) -> usize {
    struct Open {
        object: bool,
        members: usize,
    }
    let mut stack: Vec<Open> = Vec::new();
    // Whether the innermost container has seen nothing but whitespace.
    let mut fresh = false;
    let mut cost: usize = 32;
    let mut i = 0;
    while i < json.len() {
        let b = json[i];
        if fresh && !matches!(b, b' ' | b'\t' | b'\n' | b'\r' | b']' | b'}') {
            fresh = false;
            if let Some(top) = stack.last_mut() {
                top.members = 1;
            }
        }
        match b {
            b'"' => {
                let start = i + 1;
                i = string_end(json, start);
                cost = cost.saturating_add(i.min(json.len()).saturating_sub(start) + STRING);
            }
            b'{' | b'[' => {
                if stack.len() >= MAX_DEPTH {
                    return cost;
                }
                stack.push(Open {
                    object: b == b'{',
                    members: 0,
                });
                fresh = true;
            }
            b',' => {
                if let Some(top) = stack.last_mut() {
                    top.members += 1;
                }
            }
            b'}' | b']' => {
                fresh = false;
                if let Some(open) = stack.pop() {
                    let c = match (open.object, open.members) {
                        (_, 0) => 0,
                        (true, n) => NODE.saturating_mul(n.div_ceil(PER_NODE)),
                        (false, n) => ELEMENT.saturating_mul(n),
                    };
                    cost = cost.saturating_add(c);
                }
            }
            _ => {}
        }
        i += 1;
    }
    cost
}

/// The index of the quote that ends the string whose bytes start at
/// `start` (an escape skips the byte after it), or past the end.
fn string_end(json: &[u8], start: usize) -> usize {
    let mut i = start;
    while let Some(at) = next_quote_or_escape(json, i) {
        if json[at] == b'"' {
            return at;
        }
        i = at + 2;
    }
    i.max(json.len())
}

/// The first `"` or `\\` at or after `i`, eight bytes at a time. Most
/// strings of a review are keys and short values: a byte loop costs about
/// 5 instructions a byte and `memchr` about 60 a call on them (measured
/// with callgrind on the VPC UPDATE review); this costs about 2 a byte.
fn next_quote_or_escape(json: &[u8], mut i: usize) -> Option<usize> {
    const ONES: u64 = u64::from_le_bytes([1; 8]);
    const HIGH: u64 = ONES << 7;
    // The high bit of each byte of `w` equal to `b`; a false bit can only
    // follow a true one, so the lowest bit set is exact.
    let equal = |w: u64, b: u8| {
        let x = w ^ (ONES * u64::from(b));
        x.wrapping_sub(ONES) & !x & HIGH
    };
    while let Some(chunk) = json.get(i..i.saturating_add(8)) {
        let w = u64::from_le_bytes(chunk.try_into().ok()?);
        let hits = equal(w, b'"') | equal(w, b'\\');
        if hits != 0 {
            return Some(i + (hits.trailing_zeros() / 8) as usize);
        }
        i += 8;
    }
    let rest = json.get(i..)?;
    rest.iter()
        .position(|c| matches!(c, b'"' | b'\\'))
        .map(|at| i + at)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The byte-at-a-time scan `tree_cost` replaced: the two must agree.
    fn reference(json: &[u8]) -> usize {
        struct Open {
            object: bool,
            members: usize,
            empty: bool,
        }
        let mut stack: Vec<Open> = Vec::new();
        let mut cost: usize = 32;
        let mut i = 0;
        while i < json.len() {
            let b = json[i];
            if let Some(top) = stack.last_mut() {
                if top.empty && !matches!(b, b' ' | b'\t' | b'\n' | b'\r' | b']' | b'}') {
                    top.empty = false;
                    top.members = 1;
                }
            }
            match b {
                b'"' => {
                    let start = i + 1;
                    i += 1;
                    while i < json.len() {
                        match json[i] {
                            b'\\' => i += 2,
                            b'"' => break,
                            _ => i += 1,
                        }
                    }
                    cost = cost.saturating_add(i.min(json.len()).saturating_sub(start) + STRING);
                }
                b'{' | b'[' => {
                    if stack.len() >= MAX_DEPTH {
                        return cost;
                    }
                    stack.push(Open {
                        object: b == b'{',
                        members: 0,
                        empty: true,
                    });
                }
                b',' => {
                    if let Some(top) = stack.last_mut() {
                        top.members += 1;
                    }
                }
                b'}' | b']' => {
                    if let Some(open) = stack.pop() {
                        let c = match (open.object, open.members) {
                            (_, 0) => 0,
                            (true, n) => NODE.saturating_mul(n.div_ceil(PER_NODE)),
                            (false, n) => ELEMENT.saturating_mul(n),
                        };
                        cost = cost.saturating_add(c);
                    }
                }
                _ => {}
            }
            i += 1;
        }
        cost
    }

    /// The bodies of the reviews a real API server sent.
    fn recorded_reviews() -> Vec<Vec<u8>> {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/reviews");
        let reviews: Vec<Vec<u8>> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| std::fs::read(e.unwrap().path()).unwrap())
            .collect();
        assert!(!reviews.is_empty());
        reviews
    }

    /// Any sequence of the bytes the scans look at, well-formed or not.
    fn scanned_bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
        proptest::collection::vec(prop::sample::select(b"{}[],:\"\\ \na1".to_vec()), 0..max)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4096))]
        #[test]
        fn the_fast_scan_agrees_with_the_byte_loop(bytes in scanned_bytes(300)) {
            prop_assert_eq!(tree_cost(&bytes), reference(&bytes));
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]
        /// The counted bound is never below the exact scan, whatever the
        /// bytes (long enough to cross the counters' blocks).
        #[test]
        fn the_counted_bound_is_never_below_the_scan(bytes in scanned_bytes(20_000)) {
            prop_assert!(cost_bound(&bytes) >= tree_cost(&bytes));
        }
    }

    /// The shape that each term of the bound is there for: without the
    /// term, the bound falls below the exact cost.
    #[test]
    fn the_bound_holds_on_the_shape_each_of_its_terms_is_for() {
        let n = 10_000;
        for shape in [
            format!("{{{}1}}", "1,".repeat(n)),
            format!("{}0{}", "{\"\":".repeat(n), "}".repeat(n)),
            format!("{}1{}", "[".repeat(200), "]".repeat(200)),
            format!("{{{}\"\":\"\"}}", "\"\":\"\",".repeat(n)),
        ] {
            let json = shape.as_bytes();
            assert!(cost_bound(json) >= tree_cost(json), "{}", &shape[..40]);
        }
        // Every byte counted, across the byte-wide counters' blocks.
        let commas = vec![b','; 20_000];
        assert_eq!(cost_bound(&commas), 32 + 20_000 + 20_000 * 106);
    }

    #[test]
    fn the_bound_decides_alone_for_the_recorded_reviews_and_the_scan_refuses_the_rest() {
        for body in recorded_reviews() {
            assert!(cost_bound(&body) >= tree_cost(&body));
            assert!(cost_bound(&body) <= tree_limit(body.len()));
        }
        // Objects of one entry: over the bound and over the exact limit.
        let objects = format!("[{}{{\"a\":1}}]", "{\"a\":1},".repeat(100_000));
        let (cost, limit) = check_budget(objects.as_bytes()).unwrap_err();
        assert_eq!(
            (cost, limit),
            (tree_cost(objects.as_bytes()), tree_limit(objects.len()))
        );
        // Commas inside strings: over the bound, but the exact scan clears them.
        let quoted = format!("[\"{}\"]", ",".repeat(2_000_000));
        assert!(cost_bound(quoted.as_bytes()) > tree_limit(quoted.len()));
        assert_eq!(check_budget(quoted.as_bytes()), Ok(()));
    }

    #[test]
    fn the_fast_scan_agrees_on_the_recorded_reviews_and_deep_input() {
        for body in recorded_reviews() {
            assert_eq!(tree_cost(&body), reference(&body));
        }
        let deep = b"[".repeat(MAX_DEPTH + 10);
        assert_eq!(tree_cost(&deep), reference(&deep));
    }

    fn ratio(json: &str) -> f64 {
        tree_cost(json.as_bytes()) as f64 / json.len() as f64
    }

    #[test]
    fn arrays_of_small_numbers_fit_and_arrays_of_small_objects_do_not() {
        let numbers = format!("[{}1]", "1,".repeat(100_000));
        assert!(ratio(&numbers) > 15.0 && ratio(&numbers) < AMPLIFICATION as f64);
        let objects = format!("[{}{{\"a\":1}}]", "{\"a\":1},".repeat(100_000));
        assert!(
            ratio(&objects) > AMPLIFICATION as f64 * 2.0,
            "{}",
            ratio(&objects)
        );
        let empties = format!("[{}{{}}]", "{},".repeat(100_000));
        assert!(ratio(&empties) < AMPLIFICATION as f64);
    }

    #[test]
    fn the_recorded_reviews_are_far_below_the_limit() {
        let mut worst = 0.0f64;
        for body in recorded_reviews() {
            let r = tree_cost(&body) as f64 / body.len() as f64;
            worst = worst.max(r);
            assert!(tree_cost(&body) <= tree_limit(body.len()));
        }
        assert!(worst > 0.0);
        eprintln!("worst recorded review: {worst:.1} bytes of tree per byte of body");
    }

    #[test]
    fn strings_escapes_and_malformed_input_are_scanned_without_panicking() {
        for text in [
            "",
            "\"",
            "\"\\",
            "[",
            "]",
            "}}}",
            "{\"a\\\"}\":[1,2]}",
            "[[[[[[[[",
            "\"\\\"",
        ] {
            let _ = tree_cost(text.as_bytes());
        }
        assert!(tree_cost(&b"[".repeat(10_000)) < 1024);
        // A string's bytes count; its brackets do not.
        let s = format!("\"{}\"", "[{,".repeat(1000));
        assert_eq!(tree_cost(s.as_bytes()), 32 + 3000 + STRING);
    }
}
