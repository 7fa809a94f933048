//! Value parsers for flags.

use std::time::Duration;

/// Parses "250ms", "5s", "2m", "1h" or a bare number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = match s.find(|c: char| !(c.is_ascii_digit() || c == '.')) {
        Some(i) => s.split_at(i),
        None => (s, "s"),
    };
    let n: f64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a duration like 500ms, 5s or 2m"))?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => {
            return Err(format!(
                "{s:?} has an unknown unit {unit:?}; use ms, s, m or h"
            ))
        }
    };
    if !secs.is_finite() || secs < 0.0 {
        return Err(format!("{s:?} is not a valid duration"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Parses "1/3" or "0.25" into a fraction strictly between 0 and 1.
pub(crate) fn parse_fraction(s: &str) -> Result<f64, String> {
    let s = s.trim();
    let value = match s.split_once('/') {
        Some((n, d)) => {
            let n: f64 = n
                .trim()
                .parse()
                .map_err(|_| format!("{s:?} is not a fraction like 1/3"))?;
            let d: f64 = d
                .trim()
                .parse()
                .map_err(|_| format!("{s:?} is not a fraction like 1/3"))?;
            n / d
        }
        None => s
            .parse()
            .map_err(|_| format!("{s:?} is not a fraction like 1/3 or 0.25"))?,
    };
    if value.is_finite() && value > 0.0 && value < 1.0 {
        Ok(value)
    } else {
        Err(format!("{s:?} must be between 0 and 1"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("5s").unwrap(), Duration::from_secs(5));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("3").unwrap(), Duration::from_secs(3));
        assert!(parse_duration("5 parsecs").is_err());
        assert!(parse_duration("").is_err());
    }

    #[test]
    fn fractions() {
        assert!((parse_fraction("1/3").unwrap() - 1.0 / 3.0).abs() < 1e-9);
        assert_eq!(parse_fraction("0.25").unwrap(), 0.25);
        assert!(parse_fraction("1").is_err());
        assert!(parse_fraction("0").is_err());
        assert!(parse_fraction("3/2").is_err());
        assert!(parse_fraction("a/b").is_err());
    }
}
