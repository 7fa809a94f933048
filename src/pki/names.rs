//! The one SAN builder: which names a serving certificate carries.
//!
//! `certs generate` and the controller share it, so that they cannot
//! disagree: built apart, only the dev certificate covered
//! `<service>.<ns>.svc.cluster.local`, only the controller trimmed extra
//! names and dropped empty ones, and the controller issued for a wildcard
//! it then could not verify, so it reissued every 30 seconds.

use std::net::IpAddr;

use rustls_pki_types::ServerName;

use super::error::PkiError;

/// The names and addresses of a certificate used on this machine.
pub fn local_names() -> Vec<String> {
    vec!["localhost".into(), "127.0.0.1".into(), "::1".into()]
}

/// The name the API server calls a webhook Service by.
pub(crate) fn service_host(service: &str, namespace: &str) -> String {
    format!("{service}.{namespace}.svc")
}

/// The names of a serving certificate, in order: the loopback names when
/// `local`, every form of the Service's in-cluster DNS name (short to fully
/// qualified) when given `(service, namespace)`, then `extra`; each trimmed,
/// without empty names or duplicates. The first is the subject's common
/// name.
pub fn serving_names(local: bool, service: Option<(&str, &str)>, extra: &[String]) -> Vec<String> {
    let mut all = if local { local_names() } else { Vec::new() };
    if let Some((service, namespace)) = service {
        let host = service_host(service, namespace);
        all.extend([
            service.to_string(),
            format!("{service}.{namespace}"),
            host.clone(),
            format!("{host}.cluster.local"),
        ]);
    }
    all.extend(extra.iter().map(|n| n.trim().to_string()));
    let mut seen = std::collections::HashSet::new();
    all.retain(|n| !n.is_empty() && seen.insert(n.clone()));
    all
}

/// A command-line parser for an extra certificate name: trimmed, and
/// refused at startup when no client could verify it (empty is allowed and
/// dropped by [`serving_names`]).
pub fn extra_name(raw: &str) -> Result<String, PkiError> {
    let name = raw.trim();
    if !name.is_empty() {
        check_name(name)?;
    }
    Ok(name.to_string())
}

/// Refuses a name a client could not verify the certificate for: an IP
/// address, a DNS name, or a DNS name whose first label is `*`.
pub(crate) fn check_name(name: &str) -> Result<(), PkiError> {
    if verifiable(name).is_some() {
        return Ok(());
    }
    Err(PkiError::Name {
        name: name.to_string(),
        reason: "neither an IP address nor a DNS name (a wildcard may only be the first label)",
    })
}

/// The name a verifier checks for `name`; a wildcard's `*` stands for one
/// label. `None` for a name no certificate can be verified for.
pub(crate) fn verifiable(name: &str) -> Option<ServerName<'static>> {
    if let Ok(ip) = name.parse::<IpAddr>() {
        return Some(ServerName::IpAddress(ip.into()));
    }
    let concrete = match name.strip_prefix("*.") {
        // The wildcard must cover a name below some domain, never a TLD.
        Some(rest) if rest.contains('.') => format!("wildcard-probe.{rest}"),
        Some(_) => return None,
        None => name.to_string(),
    };
    ServerName::try_from(concrete).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_cover_loopback_and_every_service_form_once() {
        let n = serving_names(
            true,
            Some(("guard", "ops")),
            &["localhost".into(), "x.test".into()],
        );
        assert_eq!(
            n,
            [
                "localhost",
                "127.0.0.1",
                "::1",
                "guard",
                "guard.ops",
                "guard.ops.svc",
                "guard.ops.svc.cluster.local",
                "x.test"
            ]
        );
    }

    /// Where the two old builders disagreed, one answer for both callers.
    #[test]
    fn the_dev_and_the_controller_certificates_name_the_service_alike() {
        let extra = vec![" 10.0.0.7 ".to_string(), String::new(), "mrguard".into()];
        let controller = serving_names(false, Some(("mrguard", "crossplane-system")), &extra);
        let dev = serving_names(true, Some(("mrguard", "crossplane-system")), &extra);
        // Both carry the fully qualified name, and neither keeps
        // " 10.0.0.7 " or "" as names.
        assert_eq!(
            controller,
            [
                "mrguard",
                "mrguard.crossplane-system",
                "mrguard.crossplane-system.svc",
                "mrguard.crossplane-system.svc.cluster.local",
                "10.0.0.7",
            ]
        );
        assert_eq!(dev[..3], local_names()[..]);
        assert_eq!(dev[3..], controller[..]);
        assert_eq!(serving_names(true, None, &[]), local_names());
    }

    /// `--cert-extra-names` values: trimmed, empty allowed (dropped
    /// later), unverifiable refused at startup rather than at issuance.
    #[test]
    fn extra_names_are_checked_when_parsed() {
        assert_eq!(extra_name(" 10.0.0.7 ").unwrap(), "10.0.0.7");
        assert_eq!(extra_name("").unwrap(), "");
        assert_eq!(
            extra_name("*.hooks.example.test").unwrap(),
            "*.hooks.example.test"
        );
        let e = extra_name("two words").unwrap_err().to_string();
        assert!(e.contains("\"two words\" is neither"), "{e}");
    }

    #[test]
    fn only_verifiable_names_are_accepted() {
        for ok in [
            "mrguard.ops.svc",
            "127.0.0.1",
            "::1",
            "*.example.test",
            "under_score.test",
        ] {
            check_name(ok).unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
        for bad in [
            "",
            "two words",
            "*",
            "*.test",
            "a.*.test",
            "x..y",
            "-lead.test",
        ] {
            let e = check_name(bad).unwrap_err().to_string();
            assert!(
                e.starts_with(&format!(
                    "failed to name the certificate: {bad:?} is neither"
                )),
                "{e}"
            );
        }
    }
}
