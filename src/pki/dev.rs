//! Development certificates (`mrguard certs generate`, certs/README.md):
//! a CA and a serving certificate in the file names a Kubernetes TLS
//! Secret uses (`tls.crt`, `tls.key`) plus `ca.crt`/`ca.key`.
//!
//! An existing CA in the folder is reused, so a caBundle already pasted
//! into a webhook configuration stays valid when the serving certificate is
//! renewed; `force` replaces the CA too.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::error::{CaProblem, PkiError};
use super::issue::{generate_ca, issue_serving_cert, write_file};
use super::names::{check_name, serving_names};
use super::parse::{check_ca, not_after, parse_certs, CaPem};

const DAY: u64 = 24 * 3600;

/// What to generate.
#[derive(Debug, Clone)]
pub struct DevRequest {
    /// Folder for ca.crt, ca.key, tls.crt and tls.key.
    pub out: PathBuf,
    /// The Service the API server calls.
    pub service: String,
    /// Its namespace.
    pub namespace: String,
    /// More names or addresses for the certificate.
    pub extra_names: Vec<String>,
    /// Lifetime of the serving certificate, in days.
    pub days: u64,
    /// Lifetime of a new CA, in days.
    pub ca_days: u64,
    /// Replace an existing CA instead of reusing it.
    pub force: bool,
}

/// What [`generate_dev`] wrote.
#[derive(Debug)]
pub struct Generated {
    /// The CA certificate file.
    pub ca_cert: PathBuf,
    /// The CA key file.
    pub ca_key: PathBuf,
    /// The serving certificate file.
    pub cert: PathBuf,
    /// The serving key file.
    pub key: PathBuf,
    /// The names the serving certificate covers.
    pub names: Vec<String>,
    /// Whether the CA in the folder was kept.
    pub reused_ca: bool,
    /// Expiry of the serving certificate, seconds since the epoch.
    pub not_after: Option<i64>,
}

impl std::fmt::Display for Generated {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ca = if self.reused_ca { "reused" } else { "new" };
        let (cert, key) = (self.cert.display(), self.key.display());
        writeln!(
            f,
            "CA ({ca}):      {}  (key {})",
            self.ca_cert.display(),
            self.ca_key.display()
        )?;
        writeln!(f, "serving cert: {cert}  (key {key})")?;
        writeln!(f, "names:        {}", self.names.join(", "))?;
        if let Some(t) = self
            .not_after
            .and_then(|t| jiff::Timestamp::from_second(t).ok())
        {
            writeln!(f, "expires:      {t}")?;
        }
        writeln!(f)?;
        writeln!(f, "serve with them:")?;
        writeln!(
            f,
            "  mrguard serve --tls-cert-file {cert} --tls-key-file {key}"
        )?;
        writeln!(f, "caBundle for a webhook configuration:")?;
        write!(f, "  base64 -w0 {}", self.ca_cert.display())
    }
}

fn read(path: &Path) -> Result<String, PkiError> {
    std::fs::read_to_string(path).map_err(|source| PkiError::Read {
        path: path.display().to_string(),
        source,
    })
}

/// Loads the CA in `dir` when both files are there, if it can issue.
fn existing_ca(dir: &Path, ca_cert: &Path, ca_key: &Path) -> Result<Option<CaPem>, PkiError> {
    let dir_s = dir.display().to_string();
    let present = match (ca_cert.exists(), ca_key.exists()) {
        (false, false) => return Ok(None),
        (true, false) => "ca.crt",
        (false, true) => "ca.key",
        (true, true) => "",
    };
    if !present.is_empty() {
        return Err(PkiError::HalfCa {
            dir: dir_s,
            present,
        });
    }
    let ca = CaPem {
        cert: read(ca_cert)?,
        key: read(ca_key)?,
    };
    let bad = |problem| PkiError::BadCa {
        dir: dir_s.clone(),
        problem,
    };
    let der = parse_certs(ca.cert.as_bytes(), "ca.crt")
        .map_err(|_| bad(CaProblem::NoCertificate))?
        .remove(0);
    check_ca(&der, &ca.key, jiff::Timestamp::now().as_second()).map_err(bad)?;
    Ok(Some(ca))
}

/// Writes (or renews) the dev certificates into `req.out`.
pub fn generate_dev(req: &DevRequest) -> Result<Generated, PkiError> {
    let dir = req.out.as_path();
    let ca_cert = dir.join("ca.crt");
    let ca_key = dir.join("ca.key");
    let cert = dir.join("tls.crt");
    let key = dir.join("tls.key");

    let names = serving_names(true, Some((&req.service, &req.namespace)), &req.extra_names);
    // Refused before anything is written.
    names.iter().try_for_each(|n| check_name(n))?;
    let existing = if req.force {
        None
    } else {
        existing_ca(dir, &ca_cert, &ca_key)?
    };
    let reused_ca = existing.is_some();
    let ca = match existing {
        Some(ca) => ca,
        None => {
            let ca = generate_ca("mrguard dev CA", Duration::from_secs(req.ca_days * DAY))?;
            write_file(&ca_key, ca.key.as_bytes(), true)?;
            write_file(&ca_cert, ca.cert.as_bytes(), false)?;
            ca
        }
    };
    let pair = issue_serving_cert(&ca, &names, Duration::from_secs(req.days * DAY))?;
    // The pair must load the way `serve` will load it.
    let ck = pair.certified_key()?;
    write_file(&key, &pair.key, true)?;
    write_file(&cert, &pair.cert, false)?;
    Ok(Generated {
        ca_cert,
        ca_key,
        cert,
        key,
        names,
        reused_ca,
        not_after: ck.cert.first().and_then(|c| not_after(c)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pki::parse::PemPair;

    fn req(dir: &Path) -> DevRequest {
        DevRequest {
            out: dir.to_path_buf(),
            service: "mrguard".into(),
            namespace: "crossplane-system".into(),
            extra_names: vec!["webhook.example.test".into(), "localhost".into()],
            days: 30,
            ca_days: 60,
            force: false,
        }
    }

    fn sans(pem: &[u8]) -> Vec<String> {
        let der = parse_certs(pem, "cert").unwrap().remove(0);
        let (_, c) = x509_parser::parse_x509_certificate(&der).unwrap();
        let ext = c.subject_alternative_name().unwrap().unwrap();
        ext.value
            .general_names
            .iter()
            .map(|n| match n {
                x509_parser::extensions::GeneralName::DNSName(d) => d.to_string(),
                x509_parser::extensions::GeneralName::IPAddress(ip) => match ip.len() {
                    4 => std::net::Ipv4Addr::from(<[u8; 4]>::try_from(*ip).unwrap()).to_string(),
                    _ => std::net::Ipv6Addr::from(<[u8; 16]>::try_from(*ip).unwrap()).to_string(),
                },
                other => format!("{other:?}"),
            })
            .collect()
    }

    #[test]
    fn generates_a_loadable_pair_signed_for_the_names() {
        let dir = tempfile::tempdir().unwrap();
        let g = generate_dev(&req(dir.path())).unwrap();
        assert!(!g.reused_ca);
        let cert = std::fs::read(&g.cert).unwrap();
        let key = std::fs::read(&g.key).unwrap();
        PemPair {
            cert: cert.clone(),
            key,
        }
        .certified_key()
        .unwrap();
        let got = sans(&cert);
        for want in [
            "localhost",
            "127.0.0.1",
            "::1",
            "mrguard.crossplane-system.svc",
            "mrguard.crossplane-system.svc.cluster.local",
            "webhook.example.test",
        ] {
            assert!(got.iter().any(|g| g == want), "{want} missing from {got:?}");
        }
        let now = jiff::Timestamp::now().as_second();
        let exp = g.not_after.unwrap();
        assert!(
            exp > now + 29 * DAY as i64 && exp <= now + 30 * DAY as i64,
            "{exp}"
        );
        #[cfg(unix)]
        for k in [&g.key, &g.ca_key] {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(k).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{}", k.display());
        }
        let shown = g.to_string();
        assert!(shown.starts_with("CA (new)"), "{shown}");
        assert!(shown.contains("--tls-cert-file"), "{shown}");
    }

    #[test]
    fn reuses_the_ca_unless_forced() {
        let dir = tempfile::tempdir().unwrap();
        let first = generate_dev(&req(dir.path())).unwrap();
        let ca1 = std::fs::read(&first.ca_cert).unwrap();
        let leaf1 = std::fs::read(&first.cert).unwrap();

        let second = generate_dev(&req(dir.path())).unwrap();
        assert!(second.reused_ca);
        assert_eq!(std::fs::read(&second.ca_cert).unwrap(), ca1, "CA kept");
        assert_ne!(std::fs::read(&second.cert).unwrap(), leaf1, "leaf renewed");

        let forced = generate_dev(&DevRequest {
            force: true,
            ..req(dir.path())
        })
        .unwrap();
        assert!(!forced.reused_ca);
        assert_ne!(std::fs::read(&forced.ca_cert).unwrap(), ca1, "CA replaced");
    }

    #[test]
    fn a_broken_ca_is_refused_not_overwritten() {
        let dir = tempfile::tempdir().unwrap();
        let first = generate_dev(&req(dir.path())).unwrap();
        let other = tempfile::tempdir().unwrap();
        let second = generate_dev(&req(other.path())).unwrap();
        // A key that belongs to another CA.
        std::fs::copy(&second.ca_key, &first.ca_key).unwrap();
        let e = generate_dev(&req(dir.path())).unwrap_err().to_string();
        assert!(e.contains("ca.key does not belong to ca.crt"), "{e}");

        std::fs::remove_file(&first.ca_key).unwrap();
        let e = generate_dev(&req(dir.path())).unwrap_err().to_string();
        assert!(e.contains("only ca.crt exists"), "{e}");

        // A serving certificate is not a CA.
        std::fs::copy(&second.cert, &first.ca_cert).unwrap();
        std::fs::copy(&second.key, &first.ca_key).unwrap();
        let e = generate_dev(&req(dir.path())).unwrap_err().to_string();
        assert!(e.contains("not a CA certificate"), "{e}");

        // Not a certificate at all.
        std::fs::write(&first.ca_cert, "garbage").unwrap();
        let e = generate_dev(&req(dir.path())).unwrap_err().to_string();
        assert!(e.contains("ca.crt holds no certificate"), "{e}");
    }

    #[test]
    fn a_name_no_client_could_verify_is_refused_before_writing() {
        let dir = tempfile::tempdir().unwrap();
        let e = generate_dev(&DevRequest {
            extra_names: vec!["not a name".into()],
            ..req(dir.path())
        })
        .unwrap_err()
        .to_string();
        assert!(e.contains("\"not a name\" is neither"), "{e}");
        assert!(!dir.path().join("ca.crt").exists());
    }
}
