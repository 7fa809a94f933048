//! String formats: which the API server checks in CRDs, and how.

use std::sync::LazyLock;

use regex::Regex;

static DATE_TIME: LazyLock<Regex> = LazyLock::new(|| {
    // The layouts go-openapi's strfmt accepts: seconds, fractions and
    // the zone may be left out, the zone's colon too.
    Regex::new(r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?([Zz]|[+-]\d{2}:?\d{2})?$")
        .expect("a constant regex")
});
static DATE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^\d{4}-\d{2}-\d{2}$").expect("a constant regex"));
static UUID: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^(?i)[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$")
        .expect("a constant regex")
});
static BASE64: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$")
        .expect("a constant regex")
});

/// `None`: the API server ignores the format (`int64`, `double`, any
/// unknown name). `Some(true)`: checked here too. `Some(false)`: the
/// API server checks it and mrguard cannot, so the CRD is refused.
pub(super) fn known(fmt: &str) -> Option<bool> {
    match fmt {
        "date-time" | "datetime" | "date" | "byte" | "uuid" | "ipv4" | "ipv6" | "cidr"
        | "password" => Some(true),
        "bsonobjectid" | "uri" | "email" | "hostname" | "mac" | "uuid3" | "uuid4" | "uuid5"
        | "isbn" | "isbn10" | "isbn13" | "creditcard" | "ssn" | "hexcolor" | "rgbcolor"
        | "duration" => Some(false),
        _ => None,
    }
}

pub(super) fn valid(fmt: &str, s: &str) -> bool {
    match fmt {
        "date-time" | "datetime" => DATE_TIME.is_match(s),
        "date" => DATE.is_match(s),
        "byte" => BASE64.is_match(s),
        "uuid" => UUID.is_match(s),
        "ipv4" => s.parse::<std::net::Ipv4Addr>().is_ok(),
        "ipv6" => s.parse::<std::net::Ipv6Addr>().is_ok(),
        "cidr" => s.split_once('/').is_some_and(|(ip, bits)| {
            let ip: Result<std::net::IpAddr, _> = ip.parse();
            match (ip, bits.parse::<u8>()) {
                (Ok(std::net::IpAddr::V4(_)), Ok(b)) => b <= 32,
                (Ok(std::net::IpAddr::V6(_)), Ok(b)) => b <= 128,
                _ => false,
            }
        }),
        _ => true,
    }
}
