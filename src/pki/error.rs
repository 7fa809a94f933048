//! The one error type of certificate work.

/// What went wrong reading, checking, issuing or writing a certificate.
#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    /// A file could not be read.
    #[error("failed to read {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// PEM input held no usable block.
    #[error("failed to parse PEM in {what}: {reason}")]
    Pem {
        /// Which input.
        what: String,
        /// Why.
        reason: String,
    },
    /// A certificate and key that do not make a serving pair.
    #[error("failed to load the certificate pair: {0}")]
    Pair(String),
    /// Only one of `ca.crt` and `ca.key` exists in a folder.
    #[error("failed to reuse the CA in {dir}: only {present} exists; add the other file or pass --force")]
    HalfCa {
        /// The folder.
        dir: String,
        /// The file that exists.
        present: &'static str,
    },
    /// A CA in a folder that cannot issue.
    #[error("failed to reuse the CA in {dir}: {problem}; pass --force to replace it")]
    BadCa {
        /// The folder.
        dir: String,
        /// What is wrong with it.
        problem: CaProblem,
    },
    /// A name a serving certificate cannot carry.
    #[error("failed to name the certificate: {name:?} is {reason}")]
    Name {
        /// The name as given.
        name: String,
        /// Why it cannot be used.
        reason: &'static str,
    },
    /// rcgen could not generate or sign.
    #[error("failed to generate a certificate: {0}")]
    Generate(#[from] rcgen::Error),
    /// A file could not be written.
    #[error("failed to write {path}: {source}")]
    Write {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// Why a CA certificate and key cannot issue serving certificates. The
/// CLI and the controller judge a CA with the same checks (they differed:
/// the controller took a non-CA certificate as its CA).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CaProblem {
    /// `ca.crt` has no certificate.
    #[error("ca.crt holds no certificate")]
    NoCertificate,
    /// `ca.crt` does not parse as X.509.
    #[error("ca.crt is not an X.509 certificate: {0}")]
    NotX509(String),
    /// `ca.crt` lacks the CA basic constraint.
    #[error("ca.crt is not a CA certificate")]
    NotCa,
    /// `ca.key` is not a key this build can sign with.
    #[error("ca.key is not a private key: {0}")]
    NotAKey(String),
    /// `ca.key` is a key, for another certificate.
    #[error("ca.key does not belong to ca.crt")]
    KeyMismatch,
    /// `ca.crt` is past its end of validity.
    #[error("ca.crt has expired")]
    Expired,
}
