//! The rotation planner: from what the TLS Secret holds and the time,
//! the next step, and the Secret's new contents for a step that writes.
//! Pure; the controller (`controller::certs`) reads and writes the Secret,
//! waits for the webhooks and the replicas, and schedules the next look.
//!
//! The Secret holds `ca.crt` (the CA bundle: the current CA first, then any
//! CA still trusted during a rotation), `ca.key` (the current CA's key, so
//! serving certificates can be renewed without touching the bundle),
//! `tls.crt` and `tls.key`.
//!
//! A CA rotation never breaks admission:
//! 1. a new CA is added in front of the bundle; the old serving certificate
//!    stays, and the webhooks' caBundle gets both CAs;
//! 2. once both webhook configurations carry the bundle and it had
//!    [`BUNDLE_SETTLE`] to reach the API servers, a serving certificate from
//!    the new CA replaces the old one; every replica loads it from the
//!    Secret;
//! 3. once every replica (this one and every ready endpoint of the Service)
//!    answers a TLS handshake that only the new CA verifies, the old CA
//!    leaves the bundle.

use std::time::Duration;

use jiff::Timestamp;

use super::error::PkiError;
use super::issue::{generate_ca_at, issue_serving_cert_at};
use super::parse::{
    chain_verifies, check_ca, parse_bundle, parse_certs, validity, CaCert, CaPem, PemPair,
};

/// How long a new caBundle is published before a certificate from the new
/// CA is served, so every API server has seen it.
pub(crate) const BUNDLE_SETTLE: Duration = Duration::from_secs(15);
/// Most CAs kept in the bundle at once.
const MAX_BUNDLE: usize = 3;
/// Longest wait between two checks of a healthy Secret.
const MAX_REQUEUE: Duration = Duration::from_secs(3600);

/// What the planner needs to know beyond the Secret.
#[derive(Debug, Clone)]
pub(crate) struct CertSettings {
    /// Names the serving certificate must be valid for.
    pub(crate) names: Vec<String>,
    /// Lifetime of a new CA.
    pub(crate) ca_lifetime: Duration,
    /// Lifetime of a new serving certificate (never beyond its CA's).
    pub(crate) cert_lifetime: Duration,
    /// Renew when less than this part of the lifetime is left.
    pub(crate) renew_fraction: f64,
    /// How long a new bundle is published before a leaf from its CA serves.
    pub(crate) settle: Duration,
}

/// What the Secret holds, parsed.
#[derive(Debug, Clone, Default)]
pub(crate) struct SecretContents {
    pub(crate) bundle: Vec<CaCert>,
    pub(crate) ca_key: Option<String>,
    pub(crate) leaf: Option<PemPair>,
    pub(crate) rotation_started: Option<Timestamp>,
}

/// Less than `fraction` of the lifetime `[not_before, not_after]` is left.
fn in_renewal_window(not_before: i64, not_after: i64, now: Timestamp, fraction: f64) -> bool {
    let lifetime = (not_after - not_before).max(1) as f64;
    let remaining = (not_after - now.as_second()) as f64;
    remaining < lifetime * fraction
}

/// Seconds from `now` until the renewal window opens.
fn until_window(not_before: i64, not_after: i64, now: Timestamp, fraction: f64) -> i64 {
    let lifetime = (not_after - not_before).max(1) as f64;
    let opens = not_after as f64 - lifetime * fraction;
    opens as i64 - now.as_second()
}

/// The next step for the Secret.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum CertPlan {
    /// In order; check again after this long.
    Keep { requeue: Duration },
    /// Nothing worth keeping: a new CA and serving certificate.
    Create,
    /// The CA is expiring or unusable while the serving certificate still
    /// works: put a new CA in front of the bundle, keep serving the old one.
    StartRotation,
    /// A serving certificate from the current CA (the bundle stays).
    IssueLeaf,
    /// The leaf still comes from an older CA and the settle time is over:
    /// issue from the new CA once the webhooks carry the whole bundle.
    AwaitBundle,
    /// The leaf comes from the current CA: the older CAs can go, once every
    /// replica serves it (`needs_probe`), or right away when they expired.
    DropOldCas { needs_probe: bool },
}

/// Decides the next step from the Secret's contents alone.
pub(crate) fn plan(
    contents: Option<&SecretContents>,
    now: Timestamp,
    s: &CertSettings,
) -> CertPlan {
    let Some(c) = contents else {
        return CertPlan::Create;
    };
    let ca = c.bundle.first();
    let ca_usable = ca.is_some_and(|ca| {
        c.ca_key
            .as_deref()
            .is_some_and(|k| check_ca(&ca.der, k, now.as_second()).is_ok())
    });
    let ca_fresh = ca_usable
        && ca.is_some_and(|ca| {
            !in_renewal_window(ca.not_before, ca.not_after, now, s.renew_fraction)
        });

    let chain = c
        .leaf
        .as_ref()
        .filter(|p| p.certified_key().is_ok())
        .and_then(|p| parse_certs(&p.cert, "tls.crt").ok());
    let leaf_from = |ca: &CaCert| {
        chain
            .as_deref()
            .is_some_and(|chain| chain_verifies(chain, &ca.der, &s.names, now))
    };
    let leaf_serving = c.bundle.iter().any(leaf_from);

    let Some(ca) = ca.filter(|_| ca_fresh) else {
        return if leaf_serving {
            CertPlan::StartRotation
        } else {
            CertPlan::Create
        };
    };
    if !leaf_from(ca) {
        if !leaf_serving {
            // Nothing that works today would break.
            return CertPlan::IssueLeaf;
        }
        let settle_end = c
            .rotation_started
            .map(|t| t.as_second() + s.settle.as_secs() as i64)
            .unwrap_or(0);
        if now.as_second() < settle_end {
            let left = (settle_end - now.as_second()).max(1) as u64;
            return CertPlan::Keep {
                requeue: Duration::from_secs(left),
            };
        }
        return CertPlan::AwaitBundle;
    }
    let leaf_window = chain.as_deref().and_then(|c| c.first()).and_then(|leaf| {
        let (nb, na) = validity(leaf)?;
        Some((nb, na))
    });
    let Some((leaf_nb, leaf_na)) = leaf_window else {
        return CertPlan::IssueLeaf;
    };
    if in_renewal_window(leaf_nb, leaf_na, now, s.renew_fraction) {
        return CertPlan::IssueLeaf;
    }
    if c.bundle.len() > 1 {
        let all_expired = c.bundle[1..]
            .iter()
            .all(|old| old.not_after <= now.as_second());
        return CertPlan::DropOldCas {
            needs_probe: !all_expired,
        };
    }
    let next = until_window(leaf_nb, leaf_na, now, s.renew_fraction).min(until_window(
        ca.not_before,
        ca.not_after,
        now,
        s.renew_fraction,
    ));
    CertPlan::Keep {
        requeue: Duration::from_secs(next.max(5) as u64).min(MAX_REQUEUE),
    }
}

/// The Secret's new contents.
#[derive(Debug, Clone)]
pub(crate) struct NewContents {
    pub(crate) bundle: Vec<String>,
    pub(crate) ca_key: String,
    pub(crate) leaf: PemPair,
    pub(crate) rotation_started: Option<Timestamp>,
}

fn new_ca(s: &CertSettings, now: Timestamp) -> Result<CaPem, PkiError> {
    generate_ca_at(
        &format!("mrguard-ca-{}", now.as_second()),
        std::time::SystemTime::from(now),
        s.ca_lifetime,
    )
}

/// A serving certificate that does not outlive its CA.
fn new_leaf(
    ca: &CaPem,
    ca_not_after: i64,
    s: &CertSettings,
    now: Timestamp,
) -> Result<PemPair, PkiError> {
    let ca_left = Duration::from_secs((ca_not_after - now.as_second()).max(60) as u64);
    issue_serving_cert_at(
        ca,
        &s.names,
        std::time::SystemTime::from(now),
        s.cert_lifetime.min(ca_left),
    )
}

fn canonical(pem: &str) -> String {
    parse_bundle(pem.as_bytes())
        .into_iter()
        .map(|c| c.pem)
        .collect()
}

/// Computes the new contents for a plan that writes; `None` for the others.
pub(crate) fn execute(
    plan: &CertPlan,
    contents: Option<&SecretContents>,
    now: Timestamp,
    s: &CertSettings,
) -> Result<Option<NewContents>, PkiError> {
    let empty = SecretContents::default();
    let c = contents.unwrap_or(&empty);
    // Expired CAs verify nothing; keep them out of every new bundle.
    let live_old = |skip_first: bool| -> Vec<String> {
        c.bundle
            .iter()
            .skip(usize::from(skip_first))
            .filter(|ca| ca.not_after > now.as_second())
            .map(|ca| ca.pem.clone())
            .collect()
    };
    match plan {
        CertPlan::Create => {
            let ca = new_ca(s, now)?;
            let ca_der = parse_bundle(ca.cert.as_bytes());
            let ca_na = ca_der.first().map(|c| c.not_after).unwrap_or(i64::MAX);
            let leaf = new_leaf(&ca, ca_na, s, now)?;
            Ok(Some(NewContents {
                bundle: vec![canonical(&ca.cert)],
                ca_key: ca.key,
                leaf,
                rotation_started: None,
            }))
        }
        CertPlan::StartRotation => {
            let ca = new_ca(s, now)?;
            let mut bundle = vec![canonical(&ca.cert)];
            for old in live_old(false) {
                if bundle.len() < MAX_BUNDLE && !bundle.contains(&old) {
                    bundle.push(old);
                }
            }
            let Some(leaf) = c.leaf.clone() else {
                return execute(&CertPlan::Create, contents, now, s);
            };
            Ok(Some(NewContents {
                bundle,
                ca_key: ca.key,
                leaf,
                rotation_started: Some(now),
            }))
        }
        CertPlan::IssueLeaf | CertPlan::AwaitBundle => {
            let (Some(ca), Some(key)) = (c.bundle.first(), c.ca_key.clone()) else {
                return execute(&CertPlan::Create, contents, now, s);
            };
            let issuer = CaPem {
                cert: ca.pem.clone(),
                key,
            };
            let leaf = new_leaf(&issuer, ca.not_after, s, now)?;
            let mut bundle = vec![ca.pem.clone()];
            bundle.extend(live_old(true));
            Ok(Some(NewContents {
                bundle,
                ca_key: issuer.key,
                leaf,
                rotation_started: c.rotation_started,
            }))
        }
        CertPlan::DropOldCas { .. } => {
            let (Some(ca), Some(key), Some(leaf)) =
                (c.bundle.first(), c.ca_key.clone(), c.leaf.clone())
            else {
                return execute(&CertPlan::Create, contents, now, s);
            };
            Ok(Some(NewContents {
                bundle: vec![ca.pem.clone()],
                ca_key: key,
                leaf,
                rotation_started: None,
            }))
        }
        CertPlan::Keep { .. } => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pki::names::serving_names;

    fn service_names(service: &str, namespace: &str) -> Vec<String> {
        serving_names(false, Some((service, namespace)), &[])
    }

    /// What the Secret holds after a write of `new`.
    fn contents(new: &NewContents) -> SecretContents {
        SecretContents {
            bundle: parse_bundle(new.bundle.concat().as_bytes()),
            ca_key: Some(new.ca_key.clone()),
            leaf: Some(new.leaf.clone()),
            rotation_started: new.rotation_started,
        }
    }

    fn settings() -> CertSettings {
        CertSettings {
            names: service_names("mrguard", "crossplane-system"),
            ca_lifetime: Duration::from_secs(300 * 86400),
            cert_lifetime: Duration::from_secs(90 * 86400),
            renew_fraction: 1.0 / 3.0,
            settle: Duration::from_secs(15),
        }
    }

    fn day(n: i64) -> Timestamp {
        Timestamp::now() + jiff::SignedDuration::from_hours(24 * n)
    }

    fn create(s: &CertSettings) -> NewContents {
        execute(&CertPlan::Create, None, Timestamp::now(), s)
            .unwrap()
            .unwrap()
    }

    /// A leaf as long-lived as the CA, so it still serves when the CA's
    /// renewal window opens.
    fn rotation_settings() -> CertSettings {
        CertSettings {
            cert_lifetime: Duration::from_secs(300 * 86400),
            ..settings()
        }
    }

    #[test]
    fn a_missing_secret_is_created_and_the_result_verifies_for_every_name() {
        let s = settings();
        assert_eq!(plan(None, Timestamp::now(), &s), CertPlan::Create);
        let new = create(&s);
        let c = contents(&new);
        assert_eq!(c.bundle.len(), 1);
        let chain = parse_certs(&new.leaf.cert, "leaf").unwrap();
        assert!(chain_verifies(
            &chain,
            &c.bundle[0].der,
            &s.names,
            Timestamp::now()
        ));
        assert!(!chain_verifies(
            &chain,
            &c.bundle[0].der,
            &["other.svc".to_string()],
            Timestamp::now()
        ));
        assert!(matches!(
            plan(Some(&c), Timestamp::now(), &s),
            CertPlan::Keep { .. }
        ));
    }

    /// The old controller issued for a wildcard it could not verify, so
    /// every pass planned a new leaf (a Secret write every 30 s). One
    /// name check now serves issuance and verification alike.
    #[test]
    fn a_wildcard_name_is_kept_not_reissued_forever() {
        let s = CertSettings {
            names: serving_names(
                false,
                Some(("mrguard", "ops")),
                &["*.webhooks.example.test".into()],
            ),
            ..settings()
        };
        let c = contents(&create(&s));
        assert!(matches!(
            plan(Some(&c), Timestamp::now(), &s),
            CertPlan::Keep { .. }
        ));
        // A name no certificate can carry is an error naming it.
        let bad = CertSettings {
            names: vec!["mrguard.ops.svc".into(), "two words".into()],
            ..settings()
        };
        let e = execute(&CertPlan::Create, None, Timestamp::now(), &bad)
            .unwrap_err()
            .to_string();
        assert!(e.contains("\"two words\" is neither"), "{e}");
    }

    /// A CA entry that is a serving certificate with its key: the old
    /// controller issued leaves from it (the API server would refuse the
    /// chain); it is now unusable, so a real CA rotates in.
    #[test]
    fn a_non_ca_in_the_bundle_is_rotated_out() {
        let s = settings();
        let good = create(&s);
        let mut fake = good.clone();
        fake.bundle = vec![String::from_utf8(good.leaf.cert.clone()).unwrap()];
        fake.ca_key = String::from_utf8(good.leaf.key.clone()).unwrap();
        let c = contents(&fake);
        assert_eq!(plan(Some(&c), Timestamp::now(), &s), CertPlan::Create);
    }

    #[test]
    fn extra_names_may_be_addresses() {
        let s = CertSettings {
            names: vec![
                "mrguard.default.svc".into(),
                "127.0.0.1".into(),
                "::1".into(),
            ],
            ..settings()
        };
        let new = create(&s);
        let c = contents(&new);
        let chain = parse_certs(&new.leaf.cert, "leaf").unwrap();
        for name in &s.names {
            assert!(
                chain_verifies(
                    &chain,
                    &c.bundle[0].der,
                    std::slice::from_ref(name),
                    Timestamp::now()
                ),
                "{name}"
            );
        }
        assert!(!chain_verifies(
            &chain,
            &c.bundle[0].der,
            &["10.0.0.1".into()],
            Timestamp::now()
        ));
    }

    #[test]
    fn renewal_follows_the_injected_clock() {
        let s = settings();
        let c = contents(&create(&s));
        // The 90-day leaf renews when less than 30 days are left.
        assert!(matches!(plan(Some(&c), day(59), &s), CertPlan::Keep { .. }));
        assert_eq!(plan(Some(&c), day(61), &s), CertPlan::IssueLeaf);
        // Keep's requeue points at the opening of the window, at most an
        // hour ahead.
        let requeue = |t| match plan(Some(&c), t, &s) {
            CertPlan::Keep { requeue } => requeue.as_secs(),
            other => panic!("{other:?}"),
        };
        assert_eq!(requeue(day(50)), 3600);
        let secs = requeue(day(60) - jiff::SignedDuration::from_mins(10));
        assert!((300..=700).contains(&secs), "{secs}");

        // A renewed leaf from the same CA keeps the bundle as it is.
        let renewed = execute(&CertPlan::IssueLeaf, Some(&c), day(61), &s)
            .unwrap()
            .unwrap();
        assert_eq!(renewed.bundle, vec![c.bundle[0].pem.clone()]);
        assert_ne!(renewed.leaf, c.leaf.clone().unwrap());

        // The 300-day CA rotates when less than 100 days are left, keeping
        // the leaf renewed on day 180 serving meanwhile.
        let on_180 = contents(
            &execute(&CertPlan::IssueLeaf, Some(&c), day(180), &s)
                .unwrap()
                .unwrap(),
        );
        assert!(matches!(
            plan(Some(&on_180), day(199), &s),
            CertPlan::Keep { .. }
        ));
        assert_eq!(plan(Some(&on_180), day(201), &s), CertPlan::StartRotation);
        // Nothing serves any more (the day-0 leaf expired): start over.
        assert_eq!(plan(Some(&c), day(201), &s), CertPlan::Create);
        assert_eq!(plan(Some(&on_180), day(301), &s), CertPlan::Create);
    }

    #[test]
    fn invalid_contents_are_replaced() {
        let s = settings();
        let good = create(&s);
        // Wrong names: issue a new leaf from the same CA right away.
        let other = CertSettings {
            names: service_names("renamed", "crossplane-system"),
            ..settings()
        };
        assert_eq!(
            plan(Some(&contents(&good)), Timestamp::now(), &other),
            CertPlan::IssueLeaf
        );
        // A key that does not match the certificate.
        let mut broken = good.clone();
        broken.leaf.key = create(&s).leaf.key;
        assert_eq!(
            plan(Some(&contents(&broken)), Timestamp::now(), &s),
            CertPlan::IssueLeaf
        );
        // A lost CA key while the leaf still serves: rotate with overlap.
        let mut lost = good.clone();
        lost.ca_key = create(&s).ca_key;
        assert_eq!(
            plan(Some(&contents(&lost)), Timestamp::now(), &s),
            CertPlan::StartRotation
        );
        // Garbage everywhere.
        let garbage = SecretContents {
            bundle: parse_bundle(b"nope"),
            ca_key: Some("nope".into()),
            leaf: Some(PemPair {
                cert: b"x".to_vec(),
                key: b"y".to_vec(),
            }),
            rotation_started: None,
        };
        assert_eq!(plan(Some(&garbage), Timestamp::now(), &s), CertPlan::Create);
    }

    #[test]
    fn ca_rotation_keeps_both_cas_until_the_new_leaf_is_served() {
        let s = rotation_settings();
        let first = create(&s);
        let old_ca = contents(&first).bundle[0].clone();
        let t = day(201);
        // Phase 1: new CA in front, old CA kept, old leaf kept.
        let p1 = execute(&CertPlan::StartRotation, Some(&contents(&first)), t, &s)
            .unwrap()
            .unwrap();
        assert_eq!(p1.bundle.len(), 2);
        assert_eq!(p1.bundle[1], old_ca.pem);
        assert_eq!(p1.leaf, first.leaf);
        assert_eq!(p1.rotation_started, Some(t));
        let c1 = contents(&p1);
        // The old leaf still verifies against the bundle's old CA.
        let old_chain = parse_certs(&first.leaf.cert, "leaf").unwrap();
        assert!(chain_verifies(&old_chain, &c1.bundle[1].der, &s.names, t));
        assert!(!chain_verifies(&old_chain, &c1.bundle[0].der, &s.names, t));

        // Phase 2 waits for the settle time, then for the webhooks.
        assert!(matches!(plan(Some(&c1), t, &s), CertPlan::Keep { .. }));
        let after_settle = t + jiff::SignedDuration::from_secs(16);
        assert_eq!(plan(Some(&c1), after_settle, &s), CertPlan::AwaitBundle);
        let p2 = execute(&CertPlan::AwaitBundle, Some(&c1), after_settle, &s)
            .unwrap()
            .unwrap();
        assert_eq!(p2.bundle, p1.bundle, "both CAs stay while replicas switch");
        let c2 = contents(&p2);
        let new_chain = parse_certs(&p2.leaf.cert, "leaf").unwrap();
        assert!(chain_verifies(
            &new_chain,
            &c2.bundle[0].der,
            &s.names,
            after_settle
        ));

        // Phase 3 needs the probe; then the old CA goes.
        assert_eq!(
            plan(Some(&c2), after_settle, &s),
            CertPlan::DropOldCas { needs_probe: true }
        );
        let p3 = execute(
            &CertPlan::DropOldCas { needs_probe: true },
            Some(&c2),
            after_settle,
            &s,
        )
        .unwrap()
        .unwrap();
        assert_eq!(p3.bundle, vec![c2.bundle[0].pem.clone()]);
        assert_eq!(p3.rotation_started, None);
        assert!(matches!(
            plan(Some(&contents(&p3)), after_settle, &s),
            CertPlan::Keep { .. }
        ));
    }
}
