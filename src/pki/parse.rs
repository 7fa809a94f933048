//! Reading certificates and keys, and the one key–certificate match.
//!
//! [`key_for`] is the one answer to "is this the key of that certificate"
//! for `serve`, the controller and `certs generate`: three comparisons
//! (rustls' SPKI after loading any PEM key form, SPKI bytes after rcgen
//! loaded a PKCS#8 key, raw key bits) disagreed, and a PKCS#1 or SEC1 key
//! that served fine was "no key" to two of them. [`check_ca`] says whether
//! a CA can issue.

use std::sync::Arc;
use std::time::Duration;

use rustls::client::danger::ServerCertVerifier;
use rustls::client::WebPkiServerVerifier;
use rustls::sign::{CertifiedKey, SigningKey};
use rustls::RootCertStore;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use x509_parser::prelude::FromDer;

use super::error::{CaProblem, PkiError};
use super::names::verifiable;

/// The crypto provider of serving, verifying and key loading (ring).
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A PEM certificate chain and key, as files or Secret keys hold them.
#[derive(Clone, PartialEq, Eq)]
pub struct PemPair {
    /// The chain, leaf first.
    pub cert: Vec<u8>,
    /// The leaf's private key.
    pub key: Vec<u8>,
}

impl std::fmt::Debug for PemPair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PemPair")
            .field("cert_bytes", &self.cert.len())
            .finish_non_exhaustive()
    }
}

impl PemPair {
    /// Reads the pair from two files.
    pub fn read(cert: &std::path::Path, key: &std::path::Path) -> Result<Self, PkiError> {
        let read = |p: &std::path::Path| {
            std::fs::read(p).map_err(|source| PkiError::Read {
                path: p.display().to_string(),
                source,
            })
        };
        Ok(Self {
            cert: read(cert)?,
            key: read(key)?,
        })
    }

    /// Parses the pair and checks with [`key_for`] that the key belongs to
    /// the first certificate.
    pub fn certified_key(&self) -> Result<CertifiedKey, PkiError> {
        let chain = parse_certs(&self.cert, "the certificate")?;
        let signing = key_for(&chain[0], &self.key).map_err(|e| match e {
            KeyError::NoKey(reason) => PkiError::Pem {
                what: "the private key".into(),
                reason,
            },
            other => PkiError::Pair(other.to_string()),
        })?;
        Ok(CertifiedKey::new(chain, signing))
    }
}

/// A CA and its key, as PEM.
#[derive(Clone)]
pub struct CaPem {
    /// The CA certificate.
    pub cert: String,
    /// Its private key (PKCS#8).
    pub key: String,
}

impl std::fmt::Debug for CaPem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CaPem")
    }
}

/// Every certificate in `pem`; an error when there is none.
pub fn parse_certs(pem: &[u8], what: &str) -> Result<Vec<CertificateDer<'static>>, PkiError> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<_, _>>()
        .map_err(|e| PkiError::Pem {
            what: what.into(),
            reason: e.to_string(),
        })?;
    if chain.is_empty() {
        return Err(PkiError::Pem {
            what: what.into(),
            reason: "no CERTIFICATE block found".into(),
        });
    }
    Ok(chain)
}

/// PEM-encodes one DER certificate, 64 characters a line.
pub(crate) fn pem_encode(der: &[u8]) -> String {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = String::from("-----BEGIN CERTIFICATE-----\n");
    for chunk in b64.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(chunk));
        out.push('\n');
    }
    out.push_str("-----END CERTIFICATE-----\n");
    out
}

/// Seconds since the epoch at which the certificate stops being valid.
pub(crate) fn not_after(cert: &CertificateDer<'_>) -> Option<i64> {
    validity(cert).map(|(_, na)| na)
}

/// `(not_before, not_after)` in seconds since the epoch.
pub(crate) fn validity(cert: &CertificateDer<'_>) -> Option<(i64, i64)> {
    let (_, c) = x509_parser::parse_x509_certificate(cert).ok()?;
    Some((
        c.validity().not_before.timestamp(),
        c.validity().not_after.timestamp(),
    ))
}

/// One CA certificate of a bundle.
#[derive(Clone)]
pub(crate) struct CaCert {
    /// Canonical PEM (one block, 64-column lines).
    pub(crate) pem: String,
    pub(crate) der: CertificateDer<'static>,
    pub(crate) not_before: i64,
    pub(crate) not_after: i64,
}

impl std::fmt::Debug for CaCert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CaCert")
            .field("not_after", &self.not_after)
            .finish_non_exhaustive()
    }
}

/// Parses a PEM bundle into its certificates; unreadable input is empty.
pub(crate) fn parse_bundle(pem: &[u8]) -> Vec<CaCert> {
    let Ok(ders) = parse_certs(pem, "ca.crt") else {
        return Vec::new();
    };
    ders.into_iter()
        .filter_map(|der| {
            let (not_before, not_after) = validity(&der)?;
            Some(CaCert {
                pem: pem_encode(&der),
                der,
                not_before,
                not_after,
            })
        })
        .collect()
}

/// Why a key is not usable with a certificate.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// No private key block in the PEM.
    #[error("no private key: {0}")]
    NoKey(String),
    /// A key the crypto provider cannot sign with.
    #[error("unsupported private key: {0}")]
    Unsupported(String),
    /// The certificate does not parse.
    #[error("the certificate is not X.509: {0}")]
    BadCert(String),
    /// A good key, of another certificate.
    #[error("the key does not match the certificate")]
    Mismatch,
}

/// The signing key in `key_pem` (PKCS#8, PKCS#1 or SEC1, the first key
/// block) when it is the private key of `cert`: the key's public half has
/// the certificate's public key bits. The bits, not the whole SPKI: two
/// encodings of one key's algorithm parameters are still one key.
pub fn key_for(cert: &CertificateDer<'_>, key_pem: &[u8]) -> Result<Arc<dyn SigningKey>, KeyError> {
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| KeyError::NoKey(e.to_string()))?;
    let signing = provider()
        .key_provider
        .load_private_key(key)
        .map_err(|e| KeyError::Unsupported(e.to_string()))?;
    let (_, parsed) =
        x509_parser::parse_x509_certificate(cert).map_err(|e| KeyError::BadCert(e.to_string()))?;
    let spki = signing
        .public_key()
        .ok_or_else(|| KeyError::Unsupported("its public key is unknown".into()))?;
    let (_, key_spki) = x509_parser::x509::SubjectPublicKeyInfo::from_der(spki.as_ref())
        .map_err(|e| KeyError::Unsupported(e.to_string()))?;
    if key_spki.subject_public_key.data != parsed.public_key().subject_public_key.data {
        return Err(KeyError::Mismatch);
    }
    Ok(signing)
}

/// Whether `cert` and `key_pem` make a CA that can issue at `now`
/// (seconds since the epoch): a CA certificate, still valid, with its own
/// key in a form rcgen signs with (PKCS#8).
pub(crate) fn check_ca(
    cert: &CertificateDer<'_>,
    key_pem: &str,
    now: i64,
) -> Result<(), CaProblem> {
    let (_, parsed) =
        x509_parser::parse_x509_certificate(cert).map_err(|e| CaProblem::NotX509(e.to_string()))?;
    if !parsed.is_ca() {
        return Err(CaProblem::NotCa);
    }
    match key_for(cert, key_pem.as_bytes()) {
        Ok(_) => {}
        Err(KeyError::Mismatch) => return Err(CaProblem::KeyMismatch),
        Err(e) => return Err(CaProblem::NotAKey(e.to_string())),
    }
    rcgen::KeyPair::from_pem(key_pem)
        .map_err(|e| CaProblem::NotAKey(format!("{e} (a CA key must be PKCS#8)")))?;
    if parsed.validity().not_after.timestamp() <= now {
        return Err(CaProblem::Expired);
    }
    Ok(())
}

/// Whether `chain` verifies against `ca` alone for every name at `now`;
/// a wildcard name checks one name below it.
pub(crate) fn chain_verifies(
    chain: &[CertificateDer<'static>],
    ca: &CertificateDer<'static>,
    names: &[String],
    now: jiff::Timestamp,
) -> bool {
    let Some((leaf, intermediates)) = chain.split_first() else {
        return false;
    };
    let mut roots = RootCertStore::empty();
    if roots.add(ca.clone()).is_err() {
        return false;
    }
    let Ok(verifier) =
        WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider()).build()
    else {
        return false;
    };
    let at = UnixTime::since_unix_epoch(Duration::from_secs(
        u64::try_from(now.as_second()).unwrap_or(0),
    ));
    !names.is_empty()
        && names.iter().all(|name| match verifiable(name) {
            Some(sn) => verifier
                .verify_server_cert(leaf, intermediates, &sn, &[], at)
                .is_ok(),
            None => false,
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pki::issue::self_signed;
    use crate::pki::names::local_names;

    /// The controller's copy: SPKI bytes, the key read by rcgen.
    fn old_controller_match(cert: &CertificateDer<'_>, key_pem: &str) -> bool {
        let Ok(key) = rcgen::KeyPair::from_pem(key_pem) else {
            return false;
        };
        let Ok((_, parsed)) = x509_parser::parse_x509_certificate(cert) else {
            return false;
        };
        parsed.tbs_certificate.subject_pki.raw
            == rcgen::PublicKeyData::subject_public_key_info(&key).as_slice()
    }

    /// `certs generate`'s copy: raw key bits, the key read by rcgen.
    fn old_cli_match(cert: &CertificateDer<'_>, key_pem: &str) -> bool {
        let Ok(key) = rcgen::KeyPair::from_pem(key_pem) else {
            return false;
        };
        let Ok((_, parsed)) = x509_parser::parse_x509_certificate(cert) else {
            return false;
        };
        parsed.public_key().subject_public_key.data.as_ref()
            == rcgen::PublicKeyData::der_bytes(&key)
    }

    /// `serve`'s copy: rustls' SPKI comparison, any PEM key form.
    fn old_serve_match(cert: &CertificateDer<'static>, key_pem: &str) -> bool {
        let Ok(key) = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()) else {
            return false;
        };
        let Ok(signing) = provider().key_provider.load_private_key(key) else {
            return false;
        };
        CertifiedKey::new(vec![cert.clone()], signing)
            .keys_match()
            .is_ok()
    }

    fn pem(label: &str, der: &[u8]) -> String {
        use base64::Engine;
        let b64 = base64::engine::general_purpose::STANDARD.encode(der);
        let lines: Vec<&str> = b64
            .as_bytes()
            .chunks(64)
            .map(|c| std::str::from_utf8(c).unwrap())
            .collect();
        format!(
            "-----BEGIN {label}-----\n{}\n-----END {label}-----\n",
            lines.join("\n")
        )
    }

    /// The same EC key as SEC1 ("EC PRIVATE KEY"), as openssl and
    /// cert-manager write it: the private key inside the PKCS#8 envelope.
    fn sec1(pkcs8_pem: &[u8]) -> String {
        let der = PrivateKeyDer::from_pem_slice(pkcs8_pem).unwrap();
        let (_, info) = x509_parser::der_parser::parse_der(der.secret_der()).unwrap();
        let inner = info.as_sequence().unwrap()[2].as_slice().unwrap();
        pem("EC PRIVATE KEY", inner)
    }

    #[test]
    fn generated_pair_loads_and_has_an_expiry() {
        let (pair, ca) = self_signed(&local_names()).unwrap();
        let ck = pair.certified_key().unwrap();
        let exp = not_after(&ck.cert[0]).unwrap();
        let now = jiff::Timestamp::now().as_second();
        assert!(exp > now + 80 * 24 * 3600 && exp < now + 100 * 24 * 3600);
        assert!(ca.cert.contains("BEGIN CERTIFICATE"));
    }

    #[test]
    fn mismatched_key_is_rejected_by_every_judge() {
        let (a, _) = self_signed(&local_names()).unwrap();
        let (b, _) = self_signed(&local_names()).unwrap();
        let cert = &parse_certs(&a.cert, "a").unwrap()[0];
        let key = String::from_utf8(b.key.clone()).unwrap();
        assert_eq!(
            key_for(cert, key.as_bytes()).err(),
            Some(KeyError::Mismatch)
        );
        assert!(!old_controller_match(cert, &key) && !old_cli_match(cert, &key));
        let mixed = PemPair {
            cert: a.cert,
            key: b.key,
        };
        let e = mixed.certified_key().err().unwrap().to_string();
        assert_eq!(
            e,
            "failed to load the certificate pair: the key does not match the certificate"
        );
    }

    /// Where the old copies disagreed: a key in another PEM form, or
    /// after the certificate in one file, served (rustls read it) while
    /// the controller and `certs generate` (rcgen, first block, PKCS#8
    /// only) said it was no key. `key_for` gives one answer.
    #[test]
    fn one_match_for_every_pem_form_of_the_key() {
        let (pair, ca) = self_signed(&local_names()).unwrap();
        let cert = parse_certs(&pair.cert, "leaf").unwrap().remove(0);
        let pkcs8 = String::from_utf8(pair.key.clone()).unwrap();
        let sec1_key = sec1(&pair.key);
        let combined = format!("{}{pkcs8}", String::from_utf8(pair.cert.clone()).unwrap());
        for (form, key) in [
            ("PKCS#8", &pkcs8),
            ("SEC1", &sec1_key),
            ("cert+key", &combined),
        ] {
            assert!(key_for(&cert, key.as_bytes()).is_ok(), "{form}");
            assert!(old_serve_match(&cert, key), "{form}");
            let old = (old_controller_match(&cert, key), old_cli_match(&cert, key));
            assert_eq!(old, (form == "PKCS#8", form == "PKCS#8"), "{form}");
            PemPair {
                cert: pair.cert.clone(),
                key: key.clone().into_bytes(),
            }
            .certified_key()
            .unwrap_or_else(|e| panic!("{form}: {e}"));
        }

        // A CA key in SEC1 form matches, and is refused for issuing with a
        // reason rather than taken for another CA's key.
        let ca_der = parse_certs(ca.cert.as_bytes(), "ca").unwrap().remove(0);
        let now = jiff::Timestamp::now().as_second();
        assert_eq!(check_ca(&ca_der, &ca.key, now), Ok(()));
        match check_ca(&ca_der, &sec1(ca.key.as_bytes()), now) {
            Err(CaProblem::NotAKey(why)) => assert!(why.contains("PKCS#8"), "{why}"),
            other => panic!("{other:?}"),
        }
    }

    /// The controller took any certificate with its key for a CA; the CLI
    /// refused a non-CA. Both now refuse it.
    #[test]
    fn a_serving_certificate_is_not_a_ca() {
        let (pair, ca) = self_signed(&local_names()).unwrap();
        let leaf = parse_certs(&pair.cert, "leaf").unwrap().remove(0);
        let key = String::from_utf8(pair.key).unwrap();
        assert!(
            old_controller_match(&leaf, &key),
            "the old controller's check"
        );
        let now = jiff::Timestamp::now().as_second();
        assert_eq!(check_ca(&leaf, &key, now), Err(CaProblem::NotCa));
        let ca_der = parse_certs(ca.cert.as_bytes(), "ca").unwrap().remove(0);
        assert_eq!(
            check_ca(&ca_der, &ca.key, now + 400 * 86400),
            Err(CaProblem::Expired)
        );
        assert_eq!(check_ca(&ca_der, &key, now), Err(CaProblem::KeyMismatch));
    }

    #[test]
    fn garbage_is_rejected_with_a_reason() {
        let p = PemPair {
            cert: b"nope".to_vec(),
            key: b"nope".to_vec(),
        };
        let e = p.certified_key().err().unwrap().to_string();
        assert!(
            e.starts_with("failed to parse PEM in the certificate"),
            "{e}"
        );
        let (pair, _) = self_signed(&local_names()).unwrap();
        let e = PemPair {
            cert: pair.cert,
            key: b"nope".to_vec(),
        }
        .certified_key()
        .err()
        .unwrap()
        .to_string();
        assert!(
            e.starts_with("failed to parse PEM in the private key"),
            "{e}"
        );
    }
}
