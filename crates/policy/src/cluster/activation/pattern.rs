//! Go's `path/filepath.Match`, as Crossplane matches an MRAP's `activate`
//! entries against MRD names: `*` (any run of characters except `/`),
//! `?` (one character except `/`), `[...]` classes (`^` negates, `a-z`
//! ranges, `\` escapes) and `\` escapes outside them.
//!
//! Crossplane ignores the error `filepath.Match` returns, so a malformed
//! pattern activates nothing; [`validate`] names what Go would answer
//! `ErrBadPattern` for, where Go reports it for the whole pattern whether
//! or not the name matched a prefix first. MRD names are DNS names
//! (ASCII), so matching walks characters where Go walks bytes; the two
//! agree on every ASCII name.

/// Why a pattern is malformed (Go's `ErrBadPattern`), with where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("syntax error in pattern {pattern:?}: {reason}")]
pub struct BadPattern {
    /// The pattern.
    pub pattern: String,
    /// What is wrong, for a person.
    pub reason: String,
}

const SEPARATOR: char = '/';

/// Whether `name` matches `pattern`, or why the pattern is malformed.
pub fn matches(pattern: &str, name: &str) -> Result<bool, BadPattern> {
    validate(pattern)?;
    Ok(match_valid(
        &pattern.chars().collect::<Vec<_>>(),
        &name.chars().collect::<Vec<_>>(),
    ))
}

/// Fails as Go's `filepath.Match` would on a malformed pattern.
pub fn validate(pattern: &str) -> Result<(), BadPattern> {
    let bad = |reason: &str| BadPattern {
        pattern: pattern.to_string(),
        reason: reason.to_string(),
    };
    let p: Vec<char> = pattern.chars().collect();
    let mut i = 0;
    while i < p.len() {
        match p[i] {
            '\\' => {
                if i + 1 >= p.len() {
                    return Err(bad("it ends with a lone \\"));
                }
                i += 2;
            }
            '[' => {
                i += 1;
                if p.get(i) == Some(&'^') {
                    i += 1;
                }
                let mut ranges = 0;
                loop {
                    if p.get(i) == Some(&']') && ranges > 0 {
                        i += 1;
                        break;
                    }
                    i = class_char(&p, i).map_err(&bad)?.1;
                    if p.get(i) == Some(&'-') {
                        i = class_char(&p, i + 1).map_err(&bad)?.1;
                    }
                    ranges += 1;
                }
            }
            _ => i += 1,
        }
    }
    Ok(())
}

/// One character of a class at `i` (Go's `getEsc`): the character and
/// where the class goes on.
fn class_char(p: &[char], i: usize) -> Result<(char, usize), &'static str> {
    let (c, next) =
        match p.get(i) {
            None => return Err("a character class is not closed with ]"),
            Some('-') => {
                return Err("a character class has - where a character belongs (escape it as \\-)")
            }
            Some(']') => return Err(
                "a character class is empty, or has ] where a character belongs (escape it as \\])",
            ),
            Some('\\') => match p.get(i + 1) {
                Some(c) => (*c, i + 2),
                None => return Err("a character class ends with a lone \\"),
            },
            Some(c) => (*c, i + 1),
        };
    if next >= p.len() {
        return Err("a character class is not closed with ]");
    }
    Ok((c, next))
}

/// Matching, once the pattern is known to be well formed.
fn match_valid(p: &[char], s: &[char]) -> bool {
    let mut p = p;
    let mut s = s;
    'pattern: while !p.is_empty() {
        let (star, chunk, rest) = scan_chunk(p);
        p = rest;
        if star && chunk.is_empty() {
            // A trailing star matches what is left, up to a separator.
            return !s.contains(&SEPARATOR);
        }
        if let Some(t) = match_chunk(chunk, s) {
            // The last chunk must consume the whole name, unless a star
            // before it can still move it.
            if t.is_empty() || !p.is_empty() {
                s = t;
                continue;
            }
        }
        if star {
            let mut i = 0;
            while i < s.len() && s[i] != SEPARATOR {
                if let Some(t) = match_chunk(chunk, &s[i + 1..]) {
                    if p.is_empty() && !t.is_empty() {
                        i += 1;
                        continue;
                    }
                    s = t;
                    continue 'pattern;
                }
                i += 1;
            }
        }
        return false;
    }
    s.is_empty()
}

/// The leading stars, the chunk up to the next unescaped star outside a
/// class, and the rest (Go's `scanChunk`).
fn scan_chunk(p: &[char]) -> (bool, &[char], &[char]) {
    let mut p = p;
    let mut star = false;
    while p.first() == Some(&'*') {
        p = &p[1..];
        star = true;
    }
    let mut in_class = false;
    let mut i = 0;
    while i < p.len() {
        match p[i] {
            '\\' if i + 1 < p.len() => i += 1,
            '[' => in_class = true,
            ']' => in_class = false,
            '*' if !in_class => break,
            _ => {}
        }
        i += 1;
    }
    (star, &p[..i], &p[i..])
}

/// What is left of `s` after `chunk` matches its start, if it does.
fn match_chunk<'a>(chunk: &[char], s: &'a [char]) -> Option<&'a [char]> {
    let mut c = chunk;
    let mut s = s;
    while let Some(&first) = c.first() {
        let (&r, rest) = s.split_first()?;
        match first {
            '[' => {
                c = &c[1..];
                let negated = c.first() == Some(&'^');
                if negated {
                    c = &c[1..];
                }
                let mut matched = false;
                let mut ranges = 0;
                loop {
                    if c.first() == Some(&']') && ranges > 0 {
                        c = &c[1..];
                        break;
                    }
                    // Well formed: validate has seen every class.
                    let (lo, next) = class_char(c, 0).ok()?;
                    c = &c[next..];
                    let mut hi = lo;
                    if c.first() == Some(&'-') {
                        let (h, next) = class_char(c, 1).ok()?;
                        hi = h;
                        c = &c[next..];
                    }
                    matched |= lo <= r && r <= hi;
                    ranges += 1;
                }
                if matched == negated {
                    return None;
                }
            }
            '?' => {
                if r == SEPARATOR {
                    return None;
                }
                c = &c[1..];
            }
            '\\' => {
                if c.get(1) != Some(&r) {
                    return None;
                }
                c = &c[2..];
            }
            other => {
                if other != r {
                    return None;
                }
                c = &c[1..];
            }
        }
        s = rest;
    }
    Some(s)
}

/// Whether `pattern` has no wildcard: it names one MRD, or none.
pub fn is_literal(pattern: &str) -> bool {
    !pattern.contains(['*', '?', '[', '\\'])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Go's own table for `path/filepath.Match` (match_test.go), pattern,
    /// name, match, and whether the pattern is malformed.
    const GO_CASES: &[(&str, &str, bool, bool)] = &[
        ("abc", "abc", true, false),
        ("*", "abc", true, false),
        ("*c", "abc", true, false),
        ("a*", "a", true, false),
        ("a*", "abc", true, false),
        ("a*", "ab/c", false, false),
        ("a*/b", "abc/b", true, false),
        ("a*/b", "a/c/b", false, false),
        ("a*b*c*d*e*/f", "axbxcxdxe/f", true, false),
        ("a*b*c*d*e*/f", "axbxcxdxexxx/f", true, false),
        ("a*b*c*d*e*/f", "axbxcxdxe/xxx/f", false, false),
        ("a*b*c*d*e*/f", "axbxcxdxexxx/fff", false, false),
        ("a*b?c*x", "abxbbxdbxebxczzx", true, false),
        ("a*b?c*x", "abxbbxdbxebxczzy", false, false),
        ("ab[c]", "abc", true, false),
        ("ab[b-d]", "abc", true, false),
        ("ab[e-g]", "abc", false, false),
        ("ab[^c]", "abc", false, false),
        ("ab[^b-d]", "abc", false, false),
        ("ab[^e-g]", "abc", true, false),
        ("a\\*b", "a*b", true, false),
        ("a\\*b", "ab", false, false),
        ("a?b", "a☺b", true, false),
        ("a[^a]b", "a☺b", true, false),
        ("a???b", "a☺b", false, false),
        ("a[^a][^a][^a]b", "a☺b", false, false),
        ("[a-ζ]*", "α", true, false),
        ("*[a-ζ]", "A", false, false),
        ("a?b", "a/b", false, false),
        ("a*b", "a/b", false, false),
        ("[\\]a]", "]", true, false),
        ("[\\-]", "-", true, false),
        ("[x\\-]", "x", true, false),
        ("[x\\-]", "-", true, false),
        ("[x\\-]", "z", false, false),
        ("[\\-x]", "x", true, false),
        ("[\\-x]", "-", true, false),
        ("[\\-x]", "a", false, false),
        ("[]a]", "]", false, true),
        ("[-]", "-", false, true),
        ("[x-]", "x", false, true),
        ("[x-]", "-", false, true),
        ("[x-]", "z", false, true),
        ("[-x]", "x", false, true),
        ("[-x]", "-", false, true),
        ("[-x]", "a", false, true),
        ("\\", "a", false, true),
        ("[a-b-c]", "a", false, true),
        ("[", "a", false, true),
        ("[^", "a", false, true),
        ("[^bc", "a", false, true),
        ("a[", "a", false, true),
        ("a[", "ab", false, true),
        ("a[", "x", false, true),
        ("a/b[", "x", false, true),
        ("*x", "xxx", true, false),
    ];

    #[test]
    fn go_s_table() {
        for &(pattern, name, want, bad) in GO_CASES {
            match matches(pattern, name) {
                Ok(got) => {
                    assert!(!bad, "{pattern:?} is malformed in Go");
                    assert_eq!(got, want, "{pattern:?} against {name:?}");
                }
                Err(e) => {
                    assert!(bad, "{pattern:?} is well formed in Go: {e}");
                    assert_eq!(e.pattern, pattern);
                }
            }
        }
    }

    #[test]
    fn mrd_names() {
        let name = "buckets.s3.aws.upbound.io";
        for p in [
            "*.aws.upbound.io",
            "*.s3.aws.upbound.io",
            "buckets.s3.*",
            "*",
            name,
        ] {
            assert_eq!(matches(p, name), Ok(true), "{p}");
        }
        for p in [
            "bucket.s3.aws.upbound.io",
            "*.aws.upbound.com",
            "s3.aws.upbound.io",
        ] {
            assert_eq!(matches(p, name), Ok(false), "{p}");
        }
        assert!(is_literal(name));
        assert!(!is_literal("*.aws.upbound.io"));
        let e = matches("[s3.aws.upbound.io", name).unwrap_err();
        assert!(e.to_string().contains("not closed with ]"), "{e}");
    }
}
