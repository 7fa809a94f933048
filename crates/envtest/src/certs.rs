//! Throwaway certificates for loopback servers: the API server's own, and
//! a benchmark's no-op webhook. (mrguard's certificates come from its
//! controller, as in a cluster.)

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};

/// A CA that signs serving certificates, valid for a day.
pub struct Ca {
    /// The CA certificate, PEM.
    pub cert: String,
    params: CertificateParams,
    key: KeyPair,
}

/// A serving certificate and its key, PEM.
pub struct Serving {
    pub cert: String,
    pub key: String,
}

fn err(what: &str) -> impl Fn(rcgen::Error) -> String + '_ {
    move |e| format!("failed to {what}: {e}")
}

fn day(params: &mut CertificateParams) {
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::minutes(5);
    params.not_after = now + time::Duration::days(1);
}

impl Ca {
    pub fn generate(common_name: &str) -> Result<Self, String> {
        let key = KeyPair::generate().map_err(err("generate a CA key"))?;
        let mut params =
            CertificateParams::new(Vec::<String>::new()).map_err(err("describe a CA"))?;
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, common_name);
        params.distinguished_name = dn;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        day(&mut params);
        let cert = params.self_signed(&key).map_err(err("sign a CA"))?;
        Ok(Self {
            cert: cert.pem(),
            params,
            key,
        })
    }

    /// A serving certificate for `names` (DNS names or IP addresses).
    pub fn issue(&self, names: &[&str]) -> Result<Serving, String> {
        let issuer = Issuer::from_params(&self.params, &self.key);
        let key = KeyPair::generate().map_err(err("generate a serving key"))?;
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut params = CertificateParams::new(names).map_err(err("describe a certificate"))?;
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        day(&mut params);
        let cert = params
            .signed_by(&key, &issuer)
            .map_err(err("sign a serving certificate"))?;
        Ok(Serving {
            cert: cert.pem(),
            key: key.serialize_pem(),
        })
    }
}
