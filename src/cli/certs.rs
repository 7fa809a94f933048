//! `mrguard certs generate`: a development CA and a serving certificate
//! for local TLS, in the file names a Kubernetes TLS Secret uses
//! (`tls.crt`, `tls.key`) plus `ca.crt`/`ca.key`. See certs/README.md.
//!
//! An existing CA in the folder is reused, so a caBundle already pasted
//! into a webhook configuration stays valid when the serving certificate is
//! renewed; `--force` replaces the CA too.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Args, Subcommand};

use crate::tls::{self, CaPem, TlsError};

const DAY: u64 = 24 * 3600;

#[derive(Debug, Subcommand)]
pub enum CertsCommand {
    /// Write a dev CA and a serving certificate for localhost and the
    /// in-cluster Service name.
    Generate(GenerateArgs),
}

#[derive(Debug, Clone, Args)]
pub struct GenerateArgs {
    /// Folder for ca.crt, ca.key, tls.crt and tls.key.
    #[arg(long, default_value = "certs")]
    pub(crate) out: PathBuf,
    /// Name of the Service the API server calls (the chart's full name).
    #[arg(long, default_value = "mrguard")]
    pub(crate) service_name: String,
    /// Namespace of that Service.
    #[arg(long, default_value = "crossplane-system")]
    pub(crate) namespace: String,
    /// Another DNS name or IP address for the certificate (repeatable).
    #[arg(long = "name", value_name = "NAME")]
    pub(crate) extra_names: Vec<String>,
    /// Lifetime of the serving certificate, in days.
    #[arg(long, default_value_t = 365, value_parser = clap::value_parser!(u64).range(1..=3650))]
    pub(crate) days: u64,
    /// Lifetime of a newly generated CA, in days.
    #[arg(long, default_value_t = 1825, value_parser = clap::value_parser!(u64).range(1..=7300))]
    pub(crate) ca_days: u64,
    /// Replace an existing CA instead of reusing it.
    #[arg(long)]
    pub(crate) force: bool,
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum CertsError {
    #[error(transparent)]
    Tls(#[from] TlsError),
    #[error("failed to reuse the CA in {dir}: only {present} exists; add the other file or pass --force")]
    HalfCa { dir: String, present: &'static str },
    #[error("failed to reuse the CA in {dir}: {reason}; pass --force to replace it")]
    BadCa { dir: String, reason: String },
    #[error("failed to read {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// What `generate` wrote.
#[derive(Debug)]
pub(crate) struct Generated {
    pub(crate) ca_cert: PathBuf,
    pub(crate) ca_key: PathBuf,
    pub(crate) cert: PathBuf,
    pub(crate) key: PathBuf,
    pub(crate) names: Vec<String>,
    pub(crate) reused_ca: bool,
    /// Expiry of the serving certificate, seconds since the epoch.
    pub(crate) not_after: Option<i64>,
}

/// The names a dev certificate covers: loopback plus every form of the
/// Service's in-cluster DNS name, then the extras, without duplicates.
pub(crate) fn names(service: &str, namespace: &str, extra: &[String]) -> Vec<String> {
    let mut out: Vec<String> = tls::local_names();
    out.extend([
        service.to_string(),
        format!("{service}.{namespace}"),
        format!("{service}.{namespace}.svc"),
        format!("{service}.{namespace}.svc.cluster.local"),
    ]);
    out.extend(extra.iter().cloned());
    let mut seen = std::collections::HashSet::new();
    out.retain(|n| seen.insert(n.clone()));
    out
}

fn read(path: &Path) -> Result<String, CertsError> {
    std::fs::read_to_string(path).map_err(|source| CertsError::Read {
        path: path.display().to_string(),
        source,
    })
}

/// Loads the CA in `dir` when both files are there; checks that the key
/// belongs to the certificate, which is a CA and still valid.
fn existing_ca(dir: &Path, ca_cert: &Path, ca_key: &Path) -> Result<Option<CaPem>, CertsError> {
    let dir_s = dir.display().to_string();
    match (ca_cert.exists(), ca_key.exists()) {
        (false, false) => return Ok(None),
        (true, false) => {
            return Err(CertsError::HalfCa {
                dir: dir_s,
                present: "ca.crt",
            })
        }
        (false, true) => {
            return Err(CertsError::HalfCa {
                dir: dir_s,
                present: "ca.key",
            })
        }
        (true, true) => {}
    }
    let ca = CaPem {
        cert: read(ca_cert)?,
        key: read(ca_key)?,
    };
    let bad = |reason: String| CertsError::BadCa {
        dir: dir_s.clone(),
        reason,
    };
    let der = tls::parse_certs(ca.cert.as_bytes(), "ca.crt")?
        .into_iter()
        .next()
        .ok_or_else(|| bad("ca.crt holds no certificate".into()))?;
    let (_, cert) = x509_parser::parse_x509_certificate(&der)
        .map_err(|e| bad(format!("ca.crt is not an X.509 certificate: {e}")))?;
    if !cert.is_ca() {
        return Err(bad("ca.crt is not a CA certificate".into()));
    }
    let key = rcgen::KeyPair::from_pem(&ca.key)
        .map_err(|e| bad(format!("ca.key is not a private key: {e}")))?;
    // Compare the raw public key bits: SPKI encodings of the same key may differ.
    if cert.public_key().subject_public_key.data.as_ref() != rcgen::PublicKeyData::der_bytes(&key) {
        return Err(bad("ca.key does not belong to ca.crt".into()));
    }
    let now = jiff::Timestamp::now().as_second();
    if cert.validity().not_after.timestamp() <= now {
        return Err(bad("ca.crt has expired".into()));
    }
    Ok(Some(ca))
}

/// Writes (or renews) the dev certificates into `args.out`.
pub(crate) fn generate(args: &GenerateArgs) -> Result<Generated, CertsError> {
    let dir = args.out.as_path();
    let ca_cert = dir.join("ca.crt");
    let ca_key = dir.join("ca.key");
    let cert = dir.join("tls.crt");
    let key = dir.join("tls.key");

    let existing = if args.force {
        None
    } else {
        existing_ca(dir, &ca_cert, &ca_key)?
    };
    let reused_ca = existing.is_some();
    let ca = match existing {
        Some(ca) => ca,
        None => {
            let ca = tls::generate_ca("mrguard dev CA", Duration::from_secs(args.ca_days * DAY))?;
            tls::write_file(&ca_key, ca.key.as_bytes(), true)?;
            tls::write_file(&ca_cert, ca.cert.as_bytes(), false)?;
            ca
        }
    };
    let names = names(&args.service_name, &args.namespace, &args.extra_names);
    let pair = tls::issue_serving_cert(&ca, &names, Duration::from_secs(args.days * DAY))?;
    // The pair must load the way `serve` will load it.
    let ck = pair.certified_key()?;
    tls::write_file(&key, &pair.key, true)?;
    tls::write_file(&cert, &pair.cert, false)?;
    Ok(Generated {
        ca_cert,
        ca_key,
        cert,
        key,
        names,
        reused_ca,
        not_after: ck.cert.first().and_then(|c| tls::not_after(c)),
    })
}

pub(crate) fn run(cmd: CertsCommand) -> i32 {
    match cmd {
        CertsCommand::Generate(args) => match generate(&args) {
            Ok(g) => {
                let ca = if g.reused_ca { "reused" } else { "new" };
                println!(
                    "CA ({ca}):      {}  (key {})",
                    g.ca_cert.display(),
                    g.ca_key.display()
                );
                println!(
                    "serving cert: {}  (key {})",
                    g.cert.display(),
                    g.key.display()
                );
                println!("names:        {}", g.names.join(", "));
                if let Some(t) = g
                    .not_after
                    .and_then(|t| jiff::Timestamp::from_second(t).ok())
                {
                    println!("expires:      {t}");
                }
                println!();
                println!("serve with them:");
                println!(
                    "  mrguard serve --tls-cert-file {} --tls-key-file {}",
                    g.cert.display(),
                    g.key.display()
                );
                println!("caBundle for a webhook configuration:");
                println!("  base64 -w0 {}", g.ca_cert.display());
                0
            }
            Err(e) => {
                eprintln!("mrguard certs generate: {e}");
                1
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(dir: &Path) -> GenerateArgs {
        GenerateArgs {
            out: dir.to_path_buf(),
            service_name: "mrguard".into(),
            namespace: "crossplane-system".into(),
            extra_names: vec!["webhook.example.test".into(), "localhost".into()],
            days: 30,
            ca_days: 60,
            force: false,
        }
    }

    fn sans(pem: &[u8]) -> Vec<String> {
        let der = tls::parse_certs(pem, "cert").unwrap().remove(0);
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
    fn names_cover_loopback_and_every_service_form_once() {
        let n = names("guard", "ops", &["localhost".into(), "x.test".into()]);
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

    #[test]
    fn generates_a_loadable_pair_signed_for_the_names() {
        let dir = tempfile::tempdir().unwrap();
        let g = generate(&args(dir.path())).unwrap();
        assert!(!g.reused_ca);
        let cert = std::fs::read(&g.cert).unwrap();
        let key = std::fs::read(&g.key).unwrap();
        tls::PemPair {
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
    }

    #[test]
    fn reuses_the_ca_unless_forced() {
        let dir = tempfile::tempdir().unwrap();
        let first = generate(&args(dir.path())).unwrap();
        let ca1 = std::fs::read(&first.ca_cert).unwrap();
        let leaf1 = std::fs::read(&first.cert).unwrap();

        let second = generate(&args(dir.path())).unwrap();
        assert!(second.reused_ca);
        assert_eq!(std::fs::read(&second.ca_cert).unwrap(), ca1, "CA kept");
        assert_ne!(std::fs::read(&second.cert).unwrap(), leaf1, "leaf renewed");

        let forced = generate(&GenerateArgs {
            force: true,
            ..args(dir.path())
        })
        .unwrap();
        assert!(!forced.reused_ca);
        assert_ne!(std::fs::read(&forced.ca_cert).unwrap(), ca1, "CA replaced");
    }

    #[test]
    fn a_broken_ca_is_refused_not_overwritten() {
        let dir = tempfile::tempdir().unwrap();
        let first = generate(&args(dir.path())).unwrap();
        let other = tempfile::tempdir().unwrap();
        let second = generate(&args(other.path())).unwrap();
        // A key that belongs to another CA.
        std::fs::copy(&second.ca_key, &first.ca_key).unwrap();
        let e = generate(&args(dir.path())).unwrap_err().to_string();
        assert!(e.contains("ca.key does not belong to ca.crt"), "{e}");

        std::fs::remove_file(&first.ca_key).unwrap();
        let e = generate(&args(dir.path())).unwrap_err().to_string();
        assert!(e.contains("only ca.crt exists"), "{e}");

        // A serving certificate is not a CA.
        std::fs::copy(&second.cert, &first.ca_cert).unwrap();
        std::fs::copy(&second.key, &first.ca_key).unwrap();
        let e = generate(&args(dir.path())).unwrap_err().to_string();
        assert!(e.contains("not a CA certificate"), "{e}");
    }
}
