//! Go's `time.ParseDuration`, which is what crossplane-runtime reads
//! `crossplane.io/poll-interval` with (and what `minPollInterval`, the
//! provider's `WithMinPollInterval`, is written in): a value
//! Rust or humans read as a duration ("5 minutes", "1d", "3") is not one
//! to the provider, which then ignores it silently. The grammar and every
//! edge case (overflow, fractions beyond nine digits, `-0`) follow Go's
//! implementation, not a general duration syntax.

use std::fmt;

/// The grammar in one line, for messages.
pub const GO_DURATION_FORMAT: &str =
    "a Go duration (time.ParseDuration): decimal numbers, each with a unit ns, us, µs, ms, s, m or h, e.g. \"90s\", \"1h30m\" or \"1.5m\"";

/// A Go `time.Duration`: signed nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GoDuration(pub i64);

/// Why a string is not a Go duration; the texts are Go's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// Not of the form `[-+]?([0-9]*(\.[0-9]*)?[a-z]+)+`, or out of range.
    #[error("invalid duration {0:?}")]
    Invalid(String),
    /// A number without a unit (only `0` may stand alone).
    #[error("missing unit in duration {0:?}")]
    MissingUnit(String),
    /// A unit other than ns, us, µs, μs, ms, s, m, h.
    #[error("unknown unit {unit:?} in duration {input:?}")]
    UnknownUnit {
        /// The unit as written.
        unit: String,
        /// The whole input.
        input: String,
    },
}

const NS: u64 = 1;
const US: u64 = 1_000;
const MS: u64 = 1_000_000;
const S: u64 = 1_000_000_000;
const M: u64 = 60 * S;
const H: u64 = 60 * M;
const LIMIT: u64 = 1 << 63;

fn unit(u: &[u8]) -> Option<u64> {
    Some(match u {
        b"ns" => NS,
        // "µs" with U+00B5 (micro sign) and U+03BC (Greek mu), as Go accepts both.
        b"us" | b"\xc2\xb5s" | b"\xce\xbcs" => US,
        b"ms" => MS,
        b"s" => S,
        b"m" => M,
        b"h" => H,
        _ => return None,
    })
}

/// The leading `[0-9]*` of `s`; `None` on overflow past 2^63.
fn leading_int(s: &[u8]) -> Option<(u64, &[u8])> {
    let mut x: u64 = 0;
    let mut i = 0;
    while i < s.len() && s[i].is_ascii_digit() {
        if x > LIMIT / 10 {
            return None;
        }
        x = x * 10 + u64::from(s[i] - b'0');
        if x > LIMIT {
            return None;
        }
        i += 1;
    }
    Some((x, &s[i..]))
}

/// The leading `[0-9]*` of a fraction: stops gaining precision instead of
/// failing, so `0.100000000000000000000h` is six minutes.
fn leading_fraction(s: &[u8]) -> (u64, f64, &[u8]) {
    let (mut x, mut scale, mut overflow) = (0u64, 1f64, false);
    let mut i = 0;
    while i < s.len() && s[i].is_ascii_digit() {
        if !overflow {
            if x > (LIMIT - 1) / 10 {
                overflow = true;
            } else {
                let y = x * 10 + u64::from(s[i] - b'0');
                if y > LIMIT {
                    overflow = true;
                } else {
                    x = y;
                    scale *= 10.0;
                }
            }
        }
        i += 1;
    }
    (x, scale, &s[i..])
}

impl GoDuration {
    /// Zero.
    pub const ZERO: GoDuration = GoDuration(0);
    /// One second.
    pub const SECOND: GoDuration = GoDuration(S as i64);

    /// Parses `input` exactly as Go's `time.ParseDuration` does.
    pub fn parse(input: &str) -> Result<Self, DurationError> {
        let invalid = || DurationError::Invalid(input.to_string());
        let mut s = input.as_bytes();
        let mut neg = false;
        if let Some(&c @ (b'-' | b'+')) = s.first() {
            neg = c == b'-';
            s = &s[1..];
        }
        if s == b"0" {
            return Ok(GoDuration(0));
        }
        if s.is_empty() {
            return Err(invalid());
        }
        let mut d: u64 = 0;
        while !s.is_empty() {
            if !(s[0] == b'.' || s[0].is_ascii_digit()) {
                return Err(invalid());
            }
            let before = s.len();
            let (mut v, rest) = leading_int(s).ok_or_else(invalid)?;
            s = rest;
            let pre = before != s.len();
            let (mut f, mut scale, mut post) = (0u64, 1f64, false);
            if s.first() == Some(&b'.') {
                s = &s[1..];
                let before = s.len();
                (f, scale, s) = leading_fraction(s);
                post = before != s.len();
            }
            if !pre && !post {
                return Err(invalid());
            }
            let end = s
                .iter()
                .position(|c| *c == b'.' || c.is_ascii_digit())
                .unwrap_or(s.len());
            if end == 0 {
                return Err(DurationError::MissingUnit(input.to_string()));
            }
            let (u, rest) = s.split_at(end);
            s = rest;
            let Some(unit) = unit(u) else {
                return Err(DurationError::UnknownUnit {
                    unit: String::from_utf8_lossy(u).into_owned(),
                    input: input.to_string(),
                });
            };
            if v > LIMIT / unit {
                return Err(invalid());
            }
            v *= unit;
            if f > 0 {
                // Go computes the fraction in float64, truncating toward zero;
                // the same arithmetic keeps every result bit-identical.
                v += (f as f64 * (unit as f64 / scale)) as u64;
                if v > LIMIT {
                    return Err(invalid());
                }
            }
            d += v;
            if d > LIMIT {
                return Err(invalid());
            }
        }
        if neg {
            // 2^63 negated is i64::MIN, the one value only a negative reaches.
            return Ok(GoDuration((d as i64).wrapping_neg()));
        }
        if d > LIMIT - 1 {
            return Err(invalid());
        }
        Ok(GoDuration(d as i64))
    }
}

impl fmt::Display for GoDuration {
    /// As Go prints it (`1h30m0s`, `500ms`, `0s`), for messages.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let neg = self.0 < 0;
        let mut u = self.0.unsigned_abs();
        let sign = if neg { "-" } else { "" };
        if u < S {
            let (unit, div) = match u {
                0 => return f.write_str("0s"),
                _ if u < US => ("ns", NS),
                _ if u < MS => ("µs", US),
                _ => ("ms", MS),
            };
            return write!(f, "{sign}{}{unit}", frac(u, div));
        }
        let h = u / H;
        u -= h * H;
        let m = u / M;
        u -= m * M;
        let secs = frac(u, S);
        write!(f, "{sign}")?;
        if h > 0 {
            write!(f, "{h}h")?;
        }
        if h > 0 || m > 0 {
            write!(f, "{m}m")?;
        }
        write!(f, "{secs}s")
    }
}

/// `v / div` with its fraction, trailing zeros dropped.
fn frac(v: u64, div: u64) -> String {
    let (whole, rest) = (v / div, v % div);
    if rest == 0 {
        return whole.to_string();
    }
    let width = div.ilog10() as usize;
    let digits = format!("{rest:0width$}");
    format!("{whole}.{}", digits.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: i64 = S as i64;
    const MSEC: i64 = MS as i64;
    const MIN: i64 = M as i64;
    const HOUR: i64 = H as i64;

    /// Go's own table (src/time/time_test.go, parseDurationTests).
    #[test]
    fn parses_what_go_parses() {
        let cases: &[(&str, i64)] = &[
            ("0", 0),
            ("5s", 5 * SEC),
            ("30s", 30 * SEC),
            ("1478s", 1478 * SEC),
            ("-5s", -5 * SEC),
            ("+5s", 5 * SEC),
            ("-0", 0),
            ("+0", 0),
            ("5.0s", 5 * SEC),
            ("5.6s", 5 * SEC + 600 * MSEC),
            ("5.s", 5 * SEC),
            (".5s", 500 * MSEC),
            ("1.0s", SEC),
            ("1.00s", SEC),
            ("1.004s", SEC + 4 * MSEC),
            ("1.0040s", SEC + 4 * MSEC),
            ("100.00100s", 100 * SEC + MSEC),
            ("10ns", 10),
            ("11us", 11_000),
            ("12µs", 12_000),
            ("12μs", 12_000),
            ("13ms", 13 * MSEC),
            ("14s", 14 * SEC),
            ("15m", 15 * MIN),
            ("16h", 16 * HOUR),
            ("3h30m", 3 * HOUR + 30 * MIN),
            ("10.5s4m", 4 * MIN + 10 * SEC + 500 * MSEC),
            ("-2m3.4s", -(2 * MIN + 3 * SEC + 400 * MSEC)),
            (
                "1h2m3s4ms5us6ns",
                HOUR + 2 * MIN + 3 * SEC + 4 * MSEC + 5_000 + 6,
            ),
            ("39h9m14.425s", 39 * HOUR + 9 * MIN + 14 * SEC + 425 * MSEC),
            ("52763797000ns", 52_763_797_000),
            ("0.3333333333333333333h", 20 * MIN),
            ("9007199254740993ns", (1 << 53) + 1),
            ("9223372036854775807ns", i64::MAX),
            ("9223372036854775.807us", i64::MAX),
            ("9223372036s854ms775us807ns", i64::MAX),
            ("-9223372036854775808ns", i64::MIN),
            ("-9223372036854775.808us", i64::MIN),
            ("-9223372036s854ms775us808ns", i64::MIN),
            ("-2562047h47m16.854775808s", i64::MIN),
            ("0.100000000000000000000h", 6 * MIN),
            (
                "0.830103483285477580700h",
                49 * MIN + 48 * SEC + 372_539_827,
            ),
        ];
        for (input, want) in cases {
            assert_eq!(GoDuration::parse(input), Ok(GoDuration(*want)), "{input}");
        }
    }

    /// Go's error table (parseDurationErrorTests) and what people write.
    #[test]
    fn rejects_what_go_rejects() {
        for input in [
            "",
            "3",
            "-",
            "s",
            ".",
            "-.",
            ".s",
            "+.s",
            "1d",
            "\u{FFFD}",
            "9223372036854775810ns",
            "9223372036854775808ns",
            "-9223372036854775809ns",
            "9223372036854776us",
            "3000000h",
            "9223372036854775.808us",
            "9223372036854ms775us808ns",
            "5 minutes",
            "1 s",
            " 1s",
            "1s ",
            "1S",
            "1H",
            "1sec",
            "1h-30m",
            "1e3s",
            "PT5M",
        ] {
            assert!(GoDuration::parse(input).is_err(), "{input:?} parsed");
        }
    }

    #[test]
    fn errors_name_the_problem_as_go_does() {
        assert_eq!(
            GoDuration::parse("5 minutes").unwrap_err().to_string(),
            "unknown unit \" minutes\" in duration \"5 minutes\""
        );
        assert_eq!(
            GoDuration::parse("3").unwrap_err().to_string(),
            "missing unit in duration \"3\""
        );
        assert_eq!(
            GoDuration::parse("").unwrap_err().to_string(),
            "invalid duration \"\""
        );
        assert_eq!(
            GoDuration::parse("1d").unwrap_err(),
            DurationError::UnknownUnit {
                unit: "d".into(),
                input: "1d".into()
            }
        );
    }

    #[test]
    fn displays_as_go_prints() {
        for (d, want) in [
            (0, "0s"),
            (1, "1ns"),
            (1_100, "1.1µs"),
            (500 * MSEC, "500ms"),
            (SEC, "1s"),
            (90 * SEC, "1m30s"),
            (HOUR + 30 * MIN, "1h30m0s"),
            (-(SEC + 500 * MSEC), "-1.5s"),
        ] {
            assert_eq!(GoDuration(d).to_string(), want);
        }
    }
}
