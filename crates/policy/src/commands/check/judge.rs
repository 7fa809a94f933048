//! The one judgement of `check`: a [`CheckRequest`] and what the runtime read
//! for it ([`Fetched`]) in, every manifest's result out. Offline the reads
//! are the configuration and the `--crd` files; against a cluster they are
//! the configuration and what the request's [`Needs`](super::request::Needs)
//! named, as the cluster answered.

use std::collections::BTreeMap;

use serde_json::Value;

use super::request::CheckRequest;
use super::{CheckError, CheckResult};
use crate::admission::config::ConfigSource;
use crate::commands::manifest::{FileText, ManifestError};

/// What the runtime read for a request.
#[derive(Debug)]
pub enum Fetched {
    /// Offline: the configuration and the `--crd` files.
    Offline {
        /// The configuration as read.
        config: ConfigSource,
        /// `--crd`: the files under it, read one at a time.
        crds: Option<CrdFiles>,
    },
    /// Against a cluster.
    Live(Live),
}

/// The files of `--crd`, read as they are consumed: a provider family's
/// CRDs are a hundred megabytes of text, of which a check keeps only the
/// files that name its manifests' groups.
pub struct CrdFiles {
    /// `--crd` as given, for messages.
    pub path: String,
    /// Each file's text, or why it could not be read.
    pub files: Box<dyn Iterator<Item = Result<FileText, ManifestError>>>,
}

impl std::fmt::Debug for CrdFiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CrdFiles")
            .field("path", &self.path)
            .finish()
    }
}

/// What the cluster answered for a live check.
#[derive(Debug)]
pub struct Live {
    /// The configuration as read (a file, or the release's ConfigMap).
    pub config: ConfigSource,
    /// One entry per [`Needs::objects`](super::request::Needs::objects)
    /// entry: `None` where nothing was wanted.
    pub objects: Vec<Option<Served>>,
    /// The kinds' CRDs (client merge mode), by `plural.group`: the object,
    /// or why it could not be read.
    pub crds: BTreeMap<String, Result<Value, String>>,
    /// One entry per [`Needs::families`](super::request::Needs::families):
    /// the listed MRs of each kind of the family, or why they are unknown.
    pub families: Vec<Result<Vec<Listed>, String>>,
    /// The cluster's MRDs and MRAPs, if they were read, or why they could
    /// not be.
    pub activations: Option<Result<Vec<Value>, String>>,
}

/// How the cluster serves one wanted object's kind.
#[derive(Debug)]
pub enum Served {
    /// The cluster does not serve the kind.
    NotServed {
        /// Discovery's answer.
        reason: String,
    },
    /// It does.
    Found {
        /// Whether its objects live in namespaces.
        namespaced: bool,
        /// `plural.group`, the CRD's name.
        resource: String,
        /// The live object, if there is one.
        live: Option<Value>,
        /// Server merge mode: the server-side-apply dry run's answer.
        merged: Option<Merged>,
    },
}

/// A server-side-apply dry run's answer.
#[derive(Debug)]
pub enum Merged {
    /// The object as it would be stored.
    Object(Value),
    /// The API server refused the apply (its admission, its schema).
    Refused {
        /// The HTTP status.
        code: u16,
        /// Its message.
        message: String,
    },
}

/// The MRs of one kind, listed in every namespace.
#[derive(Debug, Clone)]
pub struct Listed {
    /// The kind's group.
    pub group: String,
    /// The kind.
    pub kind: String,
    /// Every object.
    pub objects: Vec<Value>,
}

/// What `check` came to.
#[derive(Debug, Default)]
pub struct CheckReport {
    /// Lines said before any result (a release newer than mrguard knows).
    pub notes: Vec<String>,
    /// One per manifest judged, in order.
    pub outcomes: Vec<DocumentResult>,
    /// Why judging stopped before the end, if it did.
    pub error: Option<CheckError>,
}

/// One manifest's result, and its text output.
#[derive(Debug)]
pub struct DocumentResult {
    /// The result (JSON, SARIF, exit code).
    pub result: CheckResult,
    /// Text output, offline: the object (or its patch) for stdout.
    pub object_text: String,
    /// Text output, offline: the verdict's lines for stderr.
    pub verdict_text: String,
}

/// Judges every manifest of `request` with what was read for it, at
/// `now`.
pub fn judge(request: &CheckRequest, fetched: Fetched, now: jiff::Timestamp) -> CheckReport {
    match fetched {
        Fetched::Offline { config, crds } => super::offline::judge(request, &config, crds, now),
        Fetched::Live(live) => super::live::judge(request, live, now),
    }
}
