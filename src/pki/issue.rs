//! Issuing: self-signed CAs and serving certificates (rcgen), and writing
//! them to files.

use std::path::Path;
use std::time::{Duration, SystemTime};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};

use super::error::PkiError;
use super::names::check_name;
use super::parse::{CaPem, PemPair};

fn validity_window(params: &mut CertificateParams, now: SystemTime, lifetime: Duration) {
    let now = time::OffsetDateTime::from(now);
    // Allow for clock skew between the issuer and the API server.
    params.not_before = now - time::Duration::minutes(5);
    params.not_after = now + time::Duration::seconds(lifetime.as_secs() as i64);
}

/// Generates a self-signed CA.
pub fn generate_ca(common_name: &str, lifetime: Duration) -> Result<CaPem, PkiError> {
    generate_ca_at(common_name, SystemTime::now(), lifetime)
}

/// Generates a self-signed CA valid from `now` (minus the skew allowance).
pub(crate) fn generate_ca_at(
    common_name: &str,
    now: SystemTime,
    lifetime: Duration,
) -> Result<CaPem, PkiError> {
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    validity_window(&mut params, now, lifetime);
    let cert = params.self_signed(&key)?;
    Ok(CaPem {
        cert: cert.pem(),
        key: key.serialize_pem(),
    })
}

/// Issues a serving certificate for `names` (see
/// [`serving_names`](super::serving_names)), signed by `ca`.
pub fn issue_serving_cert(
    ca: &CaPem,
    names: &[String],
    lifetime: Duration,
) -> Result<PemPair, PkiError> {
    issue_serving_cert_at(ca, names, SystemTime::now(), lifetime)
}

/// Like [`issue_serving_cert`], valid from `now` (minus the skew
/// allowance). Refuses a name no client could verify.
pub(crate) fn issue_serving_cert_at(
    ca: &CaPem,
    names: &[String],
    now: SystemTime,
    lifetime: Duration,
) -> Result<PemPair, PkiError> {
    names.iter().try_for_each(|n| check_name(n))?;
    let ca_key = KeyPair::from_pem(&ca.key)?;
    let issuer = Issuer::from_ca_cert_pem(&ca.cert, ca_key)?;
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(names.to_vec())?;
    let mut dn = DistinguishedName::new();
    dn.push(
        DnType::CommonName,
        names.first().map(String::as_str).unwrap_or("mrguard"),
    );
    params.distinguished_name = dn;
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    validity_window(&mut params, now, lifetime);
    let cert = params.signed_by(&key, &issuer)?;
    Ok(PemPair {
        cert: cert.pem().into_bytes(),
        key: key.serialize_pem().into_bytes(),
    })
}

/// A CA plus a serving certificate for local use. Returns the pair and the CA.
pub fn self_signed(names: &[String]) -> Result<(PemPair, CaPem), PkiError> {
    let ca = generate_ca("mrguard local CA", Duration::from_secs(365 * 24 * 3600))?;
    let pair = issue_serving_cert(&ca, names, Duration::from_secs(90 * 24 * 3600))?;
    Ok((pair, ca))
}

/// Writes `contents` to `path`, creating parent folders; private keys get
/// mode 0600.
pub(crate) fn write_file(path: &Path, contents: &[u8], private: bool) -> Result<(), PkiError> {
    let err = |source| PkiError::Write {
        path: path.display().to_string(),
        source,
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(err)?;
    }
    std::fs::write(path, contents).map_err(err)?;
    #[cfg(unix)]
    if private {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(err)?;
    }
    #[cfg(not(unix))]
    let _ = private;
    Ok(())
}
