//! What admission knows of the cluster beyond the request itself.
//!
//! Some decisions need facts that no single AdmissionReview carries: which
//! provider serves a kind (and so whose writes are exempt), what a CRD's
//! documentation says about its fields, which external resources other MRs
//! already claim. The runtime's watches keep these facts in every replica
//! (every replica answers admission); offline, `check` builds them from the
//! files it is given, or leaves them empty.
//!
//! Each kind of fact is one field with its own interior synchronisation, so
//! that a watch updates its part without copying the others, and a decision
//! reads a consistent view of each part.
//!
//! Each kind of fact is a module: [`providers`] (which provider serves a
//! kind), [`documented`] (immutables the CRDs document), [`identity`]
//! (which external resource each MR claims), [`activation`] (Crossplane
//! v2's MRDs and MRAPs) and [`composition`] (XR schemas and Composition
//! patches).

pub mod activation;
pub mod composition;
pub mod documented;
pub mod identity;
pub mod providers;

/// Facts about the cluster that rules may read. [`Cluster::default`] knows
/// nothing, which every rule must treat as "no extra finding": an empty view
/// never denies more than the configuration alone would.
#[derive(Debug, Default)]
pub struct Cluster {
    /// Which provider's service account serves which kind.
    providers: crate::cluster::providers::ProviderIndex,
    /// XR schemas from the CompositeResourceDefinitions (docs/compositions.md).
    composites: crate::cluster::composition::XrIndex,
    /// Immutable fields the installed CRDs document.
    documented: crate::cluster::documented::Documented,
    /// Which external resources live MRs claim (docs/rules.md, external-identity).
    identities: crate::cluster::identity::IdentityIndex,
    /// The MRDs and MRAPs: which MR kinds Crossplane v2 activated
    /// (docs/activation.md).
    activations: crate::cluster::activation::ActivationIndex,
}

impl Cluster {
    /// A view that knows nothing, for callers without a cluster.
    pub fn empty() -> &'static Cluster {
        static EMPTY: std::sync::OnceLock<Cluster> = std::sync::OnceLock::new();
        EMPTY.get_or_init(Cluster::default)
    }

    /// The external identities live MRs claim (`external-identity`).
    pub fn identities(&self) -> &crate::cluster::identity::IdentityIndex {
        &self.identities
    }

    /// Whether `username` is the service account of the provider that
    /// serves `group`/`kind` in this cluster (docs/rules.md, exempt users).
    /// Knows no provider until the runtime's watches fill [`Cluster::providers`].
    pub fn is_provider_of(&self, group: &str, kind: &str, username: &str) -> bool {
        self.providers.is_provider_of(group, kind, username)
    }

    /// The provider accounts per kind, which the runtime replaces.
    pub fn providers(&self) -> &crate::cluster::providers::ProviderIndex {
        &self.providers
    }

    /// The XR schemas of the cluster's XRDs, which make a Composition
    /// finding informational when they freeze its source.
    pub fn composites(&self) -> &crate::cluster::composition::XrIndex {
        &self.composites
    }

    /// The immutable fields the installed CRDs document, per kind
    /// (docs/documented-immutables.md); the CRD watch or `check --crd` fills it.
    pub fn documented(&self) -> &crate::cluster::documented::Documented {
        &self.documented
    }

    /// The MRDs and MRAPs the MRD watch (or `check --crd`) knows: which
    /// kinds are inactive, and what an MRAP's patterns match.
    pub fn activations(&self) -> &crate::cluster::activation::ActivationIndex {
        &self.activations
    }
}
