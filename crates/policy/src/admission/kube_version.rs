//! Which Kubernetes an offline judgement stands for: `mrguard check --crd
//! --kube-version MAJOR.MINOR` answers what an API server of that version
//! would, since what it enforces on a custom resource changed between
//! releases (CRD validation rules and server-side field validation came in
//! 1.25). Every version-dependent behaviour is one `since::*` constant, so
//! the documentation and the tests name the same release.
//!
//! What the text may be: `1.20`, with an optional leading `v` and an
//! optional patch number (`v1.20.2`, as `kubectl version` prints a
//! server's), which is ignored: the behaviour modelled here does not change
//! within a minor release. Anything else (`1.2x`, `1`, `1.20.2-rc.0`) is
//! refused, naming what was expected; a pre-release does not behave as
//! its release yet.
//!
//! The range: 1.20 ([`KubeVersion::OLDEST`]) is the oldest version the
//! model was measured against, so older versions are refused rather than
//! guessed. A version newer than [`KubeVersion::NEWEST`] is judged as
//! [`KubeVersion::NEWEST`] with a note ([`KubeVersion::judged_as`]): a
//! cluster upgraded before mrguard is must not break a pipeline, and every
//! change modelled here is a feature arriving, never one leaving.

use std::fmt;

/// A Kubernetes release, MAJOR.MINOR.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KubeVersion {
    /// Always 1 today.
    pub major: u32,
    /// The minor release, e.g. 20 for 1.20.
    pub minor: u32,
}

/// The first release where each modelled behaviour is on by default. An
/// alpha feature behind a gate that is off by default counts as absent:
/// mrguard judges a cluster as its version's defaults make it.
pub mod since {
    use super::KubeVersion;

    /// CRD validation rules (`x-kubernetes-validations`, transition rules
    /// with `oldSelf` included) are enforced: beta and on by default in
    /// 1.25. In 1.23 and 1.24 they are alpha behind the
    /// `CustomResourceValidationExpressions` gate, off by default, and
    /// before 1.23 the API server does not know the field: both drop it
    /// from the CRD when it is created.
    pub const VALIDATION_RULES: KubeVersion = KubeVersion::new(1, 25);
    /// Server-side field validation: beta and on by default in 1.25, when
    /// kubectl also began to send `fieldValidation=Strict`. Before it, the
    /// API server prunes unknown fields silently and accepts the object.
    pub const FIELD_VALIDATION: KubeVersion = KubeVersion::new(1, 25);
    /// A rule's `messageExpression`; older servers drop it and use
    /// `message` (or the default message).
    pub const MESSAGE_EXPRESSION: KubeVersion = KubeVersion::new(1, 27);
    /// A rule's `reason` and `fieldPath`; older servers drop them and
    /// report an `Invalid value` at the node that declares the rule.
    pub const REASON_AND_FIELD_PATH: KubeVersion = KubeVersion::new(1, 28);
    /// A rule's `optionalOldSelf`; older servers drop it, and the rule is
    /// then a plain transition rule, not evaluated on create.
    pub const OPTIONAL_OLD_SELF: KubeVersion = KubeVersion::new(1, 30);
    /// A failed rule's error shows the value the rule judged: a scalar as
    /// it is (`spec.size: Invalid value: 11: ...`), an object or a list
    /// left out (`spec: Invalid value: ...`). Before, it showed the name
    /// of the schema's type (`Invalid value: "integer"`). Read in
    /// k8s.io/apiextensions-apiserver's CEL validator (v0.34.2 has the type
    /// name, v0.35.0 the value) and measured on v1.30.14 and v1.36.3
    /// (tests/e2e/differential.rs).
    pub const RULE_ERROR_VALUE: KubeVersion = KubeVersion::new(1, 35);
    /// A field error prints a value that is neither a string nor a number
    /// as JSON (`Duplicate value: {"name":"x"}`, `Invalid value: null`);
    /// before, as Go's `%#v` (`map[string]interface {}{"name":"x"}`) and a
    /// nil as the string `"null"`. Read in k8s.io/apimachinery's
    /// `field.Error` (v0.33.6 and v0.34.2), measured on v1.30.14 and
    /// v1.36.3 (tests/e2e/differential.rs).
    pub const FIELD_ERROR_JSON_VALUES: KubeVersion = KubeVersion::new(1, 34);
    /// An `enum` error of a list item is reported at the item
    /// (`spec.managementPolicies[0]`). kube-apiserver v1.20.2 and
    /// v1.24.0-alpha.1 report it at the list (`spec.managementPolicies`),
    /// measured (tests/e2e/differential.rs); the release in between that
    /// changed it is not measured, so this is the first one after both.
    /// Only the path differs: the verdict is the same.
    pub const ENUM_ERROR_AT_ITEM: KubeVersion = KubeVersion::new(1, 25);
}

/// Why a `--kube-version` text is not a version mrguard can judge as.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KubeVersionError {
    /// Not MAJOR.MINOR.
    #[error(
        "{given:?} is not a Kubernetes version: expected MAJOR.MINOR, such as {} \
         (a leading \"v\" and a patch number are accepted)",
        KubeVersion::NEWEST
    )]
    Syntax {
        /// The text as given.
        given: String,
    },
    /// Older than [`KubeVersion::OLDEST`], or a major version Kubernetes
    /// does not have.
    #[error(
        "Kubernetes {given} is not a version mrguard can judge as: it models {} to {} \
         (a newer version is judged as {})",
        KubeVersion::OLDEST,
        KubeVersion::NEWEST,
        KubeVersion::NEWEST
    )]
    OutOfRange {
        /// The version as parsed.
        given: KubeVersion,
    },
}

impl KubeVersion {
    /// The oldest release mrguard models: its behaviour was measured
    /// against a real kube-apiserver v1.20.2 (tests/e2e/differential.rs).
    pub const OLDEST: KubeVersion = KubeVersion::new(1, 20);
    /// The newest release mrguard knows: the default of `--kube-version`,
    /// and what `check --crd` judges as without it.
    pub const NEWEST: KubeVersion = KubeVersion::new(1, 36);

    /// `major.minor`.
    pub const fn new(major: u32, minor: u32) -> KubeVersion {
        KubeVersion { major, minor }
    }

    /// Parses `1.20`, `v1.20` or `v1.20.2` (the patch is ignored), and
    /// refuses versions older than [`KubeVersion::OLDEST`]. A newer version
    /// than [`KubeVersion::NEWEST`] parses; see [`KubeVersion::judged_as`].
    pub fn parse(text: &str) -> Result<KubeVersion, KubeVersionError> {
        let syntax = || KubeVersionError::Syntax {
            given: text.to_string(),
        };
        let s = text.trim();
        let s = s.strip_prefix('v').unwrap_or(s);
        let mut parts = s.split('.');
        // Digits only: `+1`, ` 1` and `01x` are not versions.
        let number = |p: Option<&str>| -> Result<u32, KubeVersionError> {
            match p {
                Some(p) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => {
                    p.parse().map_err(|_| syntax())
                }
                _ => Err(syntax()),
            }
        };
        let major = number(parts.next())?;
        let minor = number(parts.next())?;
        if let Some(patch) = parts.next() {
            number(Some(patch))?;
        }
        if parts.next().is_some() {
            return Err(syntax());
        }
        let v = KubeVersion::new(major, minor);
        if major != 1 || v < KubeVersion::OLDEST {
            return Err(KubeVersionError::OutOfRange { given: v });
        }
        Ok(v)
    }

    /// The version an API server reports at `/version`: its `major` and
    /// `minor` fields, where some distributions end the minor with `+`
    /// (GKE's `"30+"`).
    pub fn of_server(major: &str, minor: &str) -> Result<KubeVersion, KubeVersionError> {
        KubeVersion::parse(&format!("{major}.{}", minor.trim_end_matches('+')))
    }

    /// Whether this release has what `since` introduced.
    pub fn at_least(self, since: KubeVersion) -> bool {
        self >= since
    }

    /// The version judged as, and a note when that is not this one: a
    /// release newer than mrguard knows is judged as the newest it knows.
    pub fn judged_as(self) -> (KubeVersion, Option<String>) {
        if self > KubeVersion::NEWEST {
            let note = format!(
                "Kubernetes {self} is newer than the newest version this mrguard knows ({}): \
                 judged as {} would judge; a newer mrguard may know more",
                KubeVersion::NEWEST,
                KubeVersion::NEWEST
            );
            (KubeVersion::NEWEST, Some(note))
        } else {
            (self, None)
        }
    }

    /// Whether the API server enforces CRD validation rules.
    pub fn enforces_validation_rules(self) -> bool {
        self.at_least(since::VALIDATION_RULES)
    }

    /// Whether the API server refuses unknown fields (kubectl's default
    /// `fieldValidation=Strict`) rather than pruning them silently.
    pub fn validates_fields(self) -> bool {
        self.at_least(since::FIELD_VALIDATION)
    }
}

impl Default for KubeVersion {
    fn default() -> Self {
        KubeVersion::NEWEST
    }
}

impl fmt::Display for KubeVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

impl std::str::FromStr for KubeVersion {
    type Err = KubeVersionError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        KubeVersion::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_major_minor_with_an_optional_v_and_patch() {
        for text in ["1.20", "v1.20", "1.20.2", "v1.20.2", " 1.20 "] {
            assert_eq!(
                KubeVersion::parse(text),
                Ok(KubeVersion::new(1, 20)),
                "{text}"
            );
        }
        assert_eq!(KubeVersion::parse("1.36").unwrap().to_string(), "1.36");
    }

    #[test]
    fn reads_the_version_an_api_server_reports() {
        assert_eq!(
            KubeVersion::of_server("1", "36"),
            Ok(KubeVersion::new(1, 36))
        );
        assert_eq!(
            KubeVersion::of_server("1", "30+"),
            Ok(KubeVersion::new(1, 30))
        );
        assert_eq!(
            KubeVersion::of_server("1", "3x"),
            Err(KubeVersionError::Syntax {
                given: "1.3x".into()
            })
        );
    }

    #[test]
    fn refuses_what_is_not_major_minor_and_says_what_it_expects() {
        for text in [
            "1.2x",
            "1.x",
            "1",
            "",
            "v",
            "1.",
            ".20",
            "1.20.",
            "1.20.2.1",
            "1.20.2-rc.0",
            "+1.20",
            "1.-20",
            "V1.20",
            "latest",
        ] {
            let e = KubeVersion::parse(text).unwrap_err();
            assert_eq!(e, KubeVersionError::Syntax { given: text.into() }, "{text}");
            let msg = e.to_string();
            assert!(
                msg.contains("expected MAJOR.MINOR, such as 1.36"),
                "{text}: {msg}"
            );
        }
    }

    #[test]
    fn refuses_versions_older_than_it_models() {
        let e = KubeVersion::parse("1.19").unwrap_err();
        assert_eq!(
            e.to_string(),
            "Kubernetes 1.19 is not a version mrguard can judge as: it models 1.20 to 1.36 \
             (a newer version is judged as 1.36)"
        );
        assert!(matches!(
            KubeVersion::parse("2.0"),
            Err(KubeVersionError::OutOfRange { .. })
        ));
        assert!(KubeVersion::parse("0.20").is_err());
    }

    #[test]
    fn a_newer_version_is_judged_as_the_newest_with_a_note() {
        let v = KubeVersion::parse("1.40").unwrap();
        let (as_, note) = v.judged_as();
        assert_eq!(as_, KubeVersion::NEWEST);
        let note = note.unwrap();
        assert!(note.contains("Kubernetes 1.40 is newer"), "{note}");
        assert!(note.contains("judged as 1.36"), "{note}");
        assert_eq!(KubeVersion::NEWEST.judged_as(), (KubeVersion::NEWEST, None));
        assert_eq!(KubeVersion::default(), KubeVersion::NEWEST);
    }

    #[test]
    fn features_arrive_in_their_release() {
        let v = |minor| KubeVersion::new(1, minor);
        assert!(!v(20).enforces_validation_rules() && !v(20).validates_fields());
        assert!(!v(24).enforces_validation_rules() && !v(24).validates_fields());
        assert!(v(25).enforces_validation_rules() && v(25).validates_fields());
        assert!(!v(26).at_least(since::MESSAGE_EXPRESSION));
        assert!(v(27).at_least(since::MESSAGE_EXPRESSION));
        assert!(!v(27).at_least(since::REASON_AND_FIELD_PATH));
        assert!(v(28).at_least(since::REASON_AND_FIELD_PATH));
        assert!(!v(29).at_least(since::OPTIONAL_OLD_SELF));
        assert!(v(30).at_least(since::OPTIONAL_OLD_SELF));
        assert!(KubeVersion::NEWEST.enforces_validation_rules());
    }
}
