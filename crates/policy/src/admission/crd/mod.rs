//! CustomResourceDefinitions, offline: what the API server does with a
//! provider's CRDs before and after the admission webhooks, so that
//! `mrguard check --crd` can reject what a real cluster would reject.
//!
//! - [`Crds::add_yaml`] parses CRD documents (the caller reads the files)
//!   and compiles every `x-kubernetes-validations` rule once.
//! - [`CrdVersion::apply_defaults`] applies the structural schema's
//!   `default`s at every level (before mutation, as the API server does).
//! - [`CrdVersion::validate`] checks types, `enum`, `required` and unknown
//!   fields, then evaluates the rules with `self` bound at the node that
//!   declares them and `oldSelf` for transition rules.
//!
//! All of it as an API server of one Kubernetes release does
//! ([`Crds::judged_as`]; the newest known by default): an older one drops
//! the validation rules, or fields of them, from the CRD it stores, and
//! prunes unknown fields instead of refusing them ([`CrdVersion::notes`]
//! says what was not enforced).

mod errors;
pub mod meta;
mod schema;
mod schema_for;

use serde_json::Value;

use crate::admission::kube_version::{since, KubeVersion};

pub use errors::{render, FieldError, FieldErrorKind, SchemaPath};
pub(crate) use schema::Schema;
pub use schema::Unsupported;
pub use schema_for::{builtin_group, schema_for, SchemaFor};

/// Why a CRD cannot judge objects.
#[derive(Debug, thiserror::Error)]
pub enum CrdError {
    /// The text does not parse as YAML.
    #[error("failed to parse {path}: {reason}")]
    Parse {
        /// Where the text came from.
        path: String,
        /// The parser's message.
        reason: String,
    },
    /// The CRD is not one mrguard can read: a wrong apiVersion, no group or kind, a schema it cannot parse, or a kind defined twice.
    #[error("failed to load CRD {name} from {path}: {reason}")]
    Invalid {
        /// The CRD's name.
        name: String,
        /// Where it came from.
        path: String,
        /// What is wrong.
        reason: String,
    },
    #[error(
        "failed to evaluate the x-kubernetes-validations of {crd} {version}: {}; \
         mrguard's CEL environment does not support this (see docs/cel.md), so it cannot judge these objects",
        describe(.rules)
    )]
    /// A validation rule uses CEL that mrguard does not support.
    Unsupported {
        /// The CRD's name.
        crd: String,
        /// The version whose rules cannot run.
        version: String,
        /// Each rule that cannot run, and why.
        rules: Vec<Unsupported>,
    },
}

fn describe(rules: &[Unsupported]) -> String {
    rules
        .iter()
        .map(|u| format!("rule {:?} at {}: {}", u.rule, u.path, u.reason))
        .collect::<Vec<_>>()
        .join("; ")
}

/// One CRD.
#[derive(Debug, Clone)]
pub struct Crd {
    /// `metadata.name`, e.g. `alternatecontacts.account.aws.upbound.io`.
    pub name: String,
    /// `spec.group`.
    pub group: String,
    /// `spec.names.kind`.
    pub kind: String,
    /// Where it was read from, for messages.
    pub source: String,
    /// `spec.scope: Namespaced`.
    pub namespaced: bool,
    /// A ProviderConfig or ClusterProviderConfig kind: Crossplane's
    /// `providerconfig` category, not a `…Usage` kind.
    pub provider_config: bool,
    /// Its versions, in the order listed.
    pub versions: Vec<CrdVersion>,
}

/// One version of a CRD, with its schema.
#[derive(Debug, Clone)]
pub struct CrdVersion {
    /// The CRD's name.
    pub crd: String,
    /// The version, e.g. `v1beta1`.
    pub name: String,
    /// `spec.scope: Namespaced`.
    pub namespaced: bool,
    pub(crate) schema: Schema,
    unsupported: Vec<Unsupported>,
    /// The release whose API server this version judges as.
    kube: KubeVersion,
    /// The `x-kubernetes-validations` rules that release drops.
    dropped_rules: usize,
}

/// What an object's apiVersion and kind find.
pub enum Lookup<'a> {
    /// No CRD of the object's API group was read: its schema is unknown.
    NoCrd,
    /// The CRD version that judges the object.
    Found(&'a CrdVersion),
    /// A CRD defines the kind, but not in this version.
    NoVersion(&'a Crd),
    /// CRDs of the object's group were read, but none defines its kind:
    /// the API server answers "no matches for kind". Holds the group's CRDs.
    NoKind(Vec<&'a Crd>),
}

/// Every CRD read from `--crd`.
#[derive(Debug, Clone, Default)]
pub struct Crds {
    /// The CRDs, in the order read.
    pub crds: Vec<Crd>,
    /// What their descriptions document as immutable (docs/documented-immutables.md).
    documented: Vec<crate::cluster::documented::KindFields>,
    /// The ManagedResourceDefinitions and activation policies read.
    activations: crate::cluster::activation::Activations,
    /// The kinds (group, kind) read from an MRD, not a CRD.
    from_mrds: std::collections::BTreeSet<(String, String)>,
    /// The release whose API server judges (the newest known by default).
    kube: KubeVersion,
}

impl Crds {
    /// No CRDs yet, judged as an API server of `kube` would: call this
    /// before adding any, as that server stores each CRD it is given.
    pub fn judged_as(kube: KubeVersion) -> Crds {
        Crds {
            kube,
            ..Crds::default()
        }
    }

    /// The release these CRDs are judged as.
    pub fn kube(&self) -> KubeVersion {
        self.kube
    }

    /// Adds every CRD in `text` (multi-document YAML or JSON) read from
    /// `source`, which errors name. Documents that are not CRDs are ignored.
    pub fn add_yaml(&mut self, source: &str, text: &str) -> Result<(), CrdError> {
        let docs: Vec<Value> = serde_saphyr::from_multiple(text).map_err(|e| CrdError::Parse {
            path: source.to_string(),
            // The parser's snippets say "<input>"; name the file instead.
            reason: e
                .to_string()
                .replace("--> <input>:", &format!("--> {source}:")),
        })?;
        for doc in docs {
            self.add(source, &doc)?;
        }
        Ok(())
    }

    /// Adds `doc` when it is a CRD (or a `List` of them); ignores anything else.
    pub fn add(&mut self, source: &str, doc: &Value) -> Result<(), CrdError> {
        let p = source.to_string();
        // `kubectl get crd -o yaml` prints a List.
        if doc.get("kind").and_then(Value::as_str) == Some("List") {
            for item in doc
                .get("items")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                self.add(source, item)?;
            }
            return Ok(());
        }
        {
            // An MRD defines its kind as the CRD it becomes on activation.
            let mrd = crate::cluster::activation::is_mrd(doc);
            if crate::cluster::activation::is_mrap(doc) || mrd {
                self.activations.add(doc);
            }
            if doc.get("kind").and_then(Value::as_str) != Some("CustomResourceDefinition") && !mrd {
                return Ok(());
            }
            let crd = Self::parse_crd(doc, source, self.kube)?;
            let key = (crd.group.clone(), crd.kind.clone());
            if let Some(i) = self
                .crds
                .iter()
                .position(|c| c.group == crd.group && c.kind == crd.kind)
            {
                // An active MRD and the CRD made from it define one kind:
                // the CRD is what the API server serves.
                if mrd && !self.from_mrds.contains(&key) {
                    return Ok(());
                }
                if !mrd && self.from_mrds.remove(&key) {
                    self.crds[i] = crd;
                    self.documented
                        .extend(crate::cluster::documented::derive(doc));
                    return Ok(());
                }
                let other = &self.crds[i];
                return Err(CrdError::Invalid {
                    name: crd.name,
                    path: p,
                    reason: format!(
                        "{}.{} is also defined in {}",
                        crd.kind, crd.group, other.source
                    ),
                });
            }
            self.crds.push(crd);
            if mrd {
                self.from_mrds.insert(key);
            }
            self.documented
                .extend(crate::cluster::documented::derive(doc));
        }
        Ok(())
    }

    /// The documented-immutable fields of every CRD read, per kind.
    pub fn documented(&self) -> &[crate::cluster::documented::KindFields] {
        &self.documented
    }

    /// The MRDs and MRAPs read (`check` names the kinds no MRAP activates).
    pub fn activations(&self) -> &crate::cluster::activation::Activations {
        &self.activations
    }

    /// What admission would know of a cluster with these CRDs (and MRDs
    /// and MRAPs) installed.
    pub fn cluster(&self) -> crate::cluster::Cluster {
        let c = crate::cluster::Cluster::default();
        for k in &self.documented {
            c.documented().set(k.clone());
        }
        if !self.activations.is_empty() {
            c.activations().replace(self.activations.clone());
        }
        self.provider_config_kinds_into(&c);
        c
    }

    /// The provider config kinds among the CRDs, as the replica learns them
    /// from the ones it watches: `provider-config-kind` then knows which
    /// kinds each family serves. Their objects stay unknown, so
    /// `provider-config-exists` finds nothing.
    fn provider_config_kinds_into(&self, c: &crate::cluster::Cluster) {
        let kinds: Vec<(String, String)> = self
            .crds
            .iter()
            .filter(|c| c.provider_config)
            .map(|c| (c.group.clone(), c.kind.clone()))
            .collect();
        if kinds.is_empty() {
            return;
        }
        c.identities().set_provider_config_kinds_only(kinds);
    }

    /// [`Crds::cluster`] for one kind only: cheap enough per object.
    pub fn cluster_for(&self, group: &str, kind: &str) -> crate::cluster::Cluster {
        let c = crate::cluster::Cluster::default();
        for k in self
            .documented
            .iter()
            .filter(|k| k.group == group && k.kind == kind)
        {
            c.documented().set(k.clone());
        }
        self.provider_config_kinds_into(&c);
        c
    }

    /// True when no CRD was added.
    pub fn is_empty(&self) -> bool {
        self.crds.is_empty()
    }

    fn parse_crd(doc: &Value, source: &str, kube: KubeVersion) -> Result<Crd, CrdError> {
        let s = |p: &str| {
            doc.pointer(p)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        let name = s("/metadata/name");
        let invalid = |reason: String| CrdError::Invalid {
            name: name.clone(),
            path: source.to_string(),
            reason,
        };
        let api_version = s("/apiVersion");
        if api_version != "apiextensions.k8s.io/v1" && !crate::cluster::activation::is_mrd(doc) {
            return Err(invalid(format!(
                "apiVersion {api_version:?} is not supported; use apiextensions.k8s.io/v1"
            )));
        }
        let (group, kind) = (s("/spec/group"), s("/spec/names/kind"));
        if group.is_empty() || kind.is_empty() {
            return Err(invalid(
                "spec.group and spec.names.kind are required".into(),
            ));
        }
        let namespaced = s("/spec/scope") != "Cluster";
        let mut versions = Vec::new();
        let listed = doc.pointer("/spec/versions").and_then(Value::as_array);
        for (i, v) in listed.into_iter().flatten().enumerate() {
            let vname = v
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            let at = format!("spec.versions[{i}].schema.openAPIV3Schema");
            let mut schema = match v.pointer("/schema/openAPIV3Schema") {
                Some(s) => Schema::parse(s, &at).map_err(invalid)?,
                // No schema: anything goes (apiextensions v1 requires one).
                None => Schema {
                    preserve_unknown: true,
                    ..Schema::default()
                },
            };
            // What that release does not store cannot make the CRD unusable.
            let dropped_rules = schema.as_served_by(kube);
            let mut unsupported = Vec::new();
            schema.unsupported(&SchemaPath::root(), &mut unsupported);
            versions.push(CrdVersion {
                crd: name.clone(),
                name: vname,
                namespaced,
                schema,
                unsupported,
                kube,
                dropped_rules,
            });
        }
        let provider_config = doc
            .pointer("/spec/names/categories")
            .and_then(Value::as_array)
            .is_some_and(|c| c.iter().any(|c| c == "providerconfig"))
            && !kind.ends_with("Usage");
        Ok(Crd {
            provider_config,
            name: name.clone(),
            group,
            kind,
            source: source.to_string(),
            namespaced,
            versions,
        })
    }

    /// The CRD version an object of `apiVersion` and `kind` is judged by.
    pub fn lookup(&self, api_version: &str, kind: &str) -> Lookup<'_> {
        let Some((group, version)) = api_version.rsplit_once('/') else {
            return Lookup::NoCrd;
        };
        let Some(crd) = self
            .crds
            .iter()
            .find(|c| c.group == group && c.kind == kind)
        else {
            let same_group: Vec<&Crd> = self.crds.iter().filter(|c| c.group == group).collect();
            if same_group.is_empty() {
                return Lookup::NoCrd;
            }
            return Lookup::NoKind(same_group);
        };
        match crd.versions.iter().find(|v| v.name == version) {
            Some(v) => Lookup::Found(v),
            None => Lookup::NoVersion(crd),
        }
    }
}

/// What a CRD version's schema says of an object node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeShape {
    /// A map (`additionalProperties`): its keys are data, any of them may
    /// be set or removed.
    Map,
    /// A struct (`properties`): its fields are declared.
    Struct,
    /// Not said: no schema, or inside `x-kubernetes-preserve-unknown-fields`
    /// or an embedded resource.
    Unknown,
}

impl CrdVersion {
    /// The shape of the object node at `path` (keys from the object's
    /// root).
    pub fn node_shape(&self, path: &[String]) -> NodeShape {
        let mut node = &self.schema;
        for key in path {
            if node.properties.is_empty() && (node.preserve_unknown || node.embedded) {
                return NodeShape::Unknown;
            }
            match node.child(key) {
                Some(child) => node = child,
                None => return NodeShape::Unknown,
            }
        }
        if !node.properties.is_empty() {
            NodeShape::Struct
        } else if node.additional.is_some() || node.additional_any {
            NodeShape::Map
        } else {
            NodeShape::Unknown
        }
    }

    /// Applies the schema's defaults, at every level.
    pub fn apply_defaults(&self, obj: &mut Value) {
        self.schema.apply_defaults(obj);
    }

    /// Fails when a rule of this version could not be compiled: such a CRD
    /// is never half-checked.
    pub fn ensure_supported(&self) -> Result<(), CrdError> {
        if self.unsupported.is_empty() {
            Ok(())
        } else {
            Err(CrdError::Unsupported {
                crd: self.crd.clone(),
                version: self.name.clone(),
                rules: self.unsupported.clone(),
            })
        }
    }

    /// Fields of `obj` that the schema does not know, as strict field
    /// validation (kubectl's default) reports them for what a client sends:
    /// anywhere, in `metadata` too, and inside values of the wrong type.
    /// Sorted, as the API server's message lists them.
    pub fn unknown_fields(&self, obj: &Value) -> Vec<FieldError> {
        let mut paths = Vec::new();
        Schema::unknown_fields(Some(&self.schema), obj, "", true, &mut paths);
        paths.sort();
        paths
            .into_iter()
            .map(|p| FieldError {
                path: p,
                kind: FieldErrorKind::Unknown,
            })
            .collect()
    }

    /// What the API server answers to a create or update of `sent` (what
    /// the client sent) that became `current` (defaulted and mutated), in
    /// its order: strict decoding fails first and alone (where the release
    /// has server-side field validation; before, unknown fields are pruned
    /// and [`CrdVersion::notes`] names them); then metadata, the schema and
    /// list sets and maps; the CEL rules only when none of those is a
    /// blocking error.
    pub fn admit(
        &self,
        sent: &Value,
        current: &Value,
        old: Option<&Value>,
    ) -> Result<Vec<FieldError>, CrdError> {
        self.ensure_supported()?;
        if self.kube.validates_fields() {
            let unknown = self.unknown_fields(sent);
            if !unknown.is_empty() {
                return Ok(unknown);
            }
        }
        self.validate(current, old)
    }

    /// What the API server of this release does not enforce on `sent`
    /// that a current one would, for the reader: the validation rules it
    /// dropped from the CRD, and the unknown fields it prunes silently.
    pub fn notes(&self, sent: &Value) -> Vec<String> {
        let mut notes = Vec::new();
        let kube = self.kube;
        if self.dropped_rules > 0 {
            let n = self.dropped_rules;
            notes.push(format!(
                "{n} x-kubernetes-validations rule{} of CRD {} not evaluated: Kubernetes {kube} \
                 does not enforce CRD validation rules (from {})",
                if n == 1 { "" } else { "s" },
                self.crd,
                since::VALIDATION_RULES
            ));
        }
        if !kube.validates_fields() {
            let unknown: Vec<String> = self
                .unknown_fields(sent)
                .iter()
                .map(|e| format!("{:?}", e.path))
                .collect();
            if !unknown.is_empty() {
                notes.push(format!(
                    "unknown field{} {} pruned: Kubernetes {kube} drops fields the schema does not \
                     know and accepts the object (server-side field validation refuses them from {})",
                    if unknown.len() == 1 { "" } else { "s" },
                    unknown.join(", "),
                    since::FIELD_VALIDATION
                ));
            }
        }
        notes
    }

    /// Drops unknown fields, as the API server prunes them before storing.
    pub fn prune(&self, obj: &mut Value) {
        self.schema
            .check(obj, &SchemaPath::root(), true, false, &mut Vec::new());
    }

    /// Everything the API server would reject in `obj` (already defaulted
    /// and mutated): metadata and schema errors first; a blocking one (type,
    /// required, enum, too long, too many) stops the CEL rules, as it does
    /// in Kubernetes. Unknown fields are pruned silently here; see
    /// [`CrdVersion::unknown_fields`] and [`CrdVersion::admit`].
    pub fn validate(&self, obj: &Value, old: Option<&Value>) -> Result<Vec<FieldError>, CrdError> {
        self.ensure_supported()?;
        let errors = self.errors_of(obj, old);
        Ok(if self.kube.at_least(since::FIELD_ERROR_JSON_VALUES) {
            errors
        } else {
            errors
                .into_iter()
                .map(FieldError::in_legacy_printing)
                .collect()
        })
    }

    /// [`CrdVersion::validate`]'s errors, values printed as 1.34 and later
    /// print them.
    fn errors_of(&self, obj: &Value, old: Option<&Value>) -> Vec<FieldError> {
        let mut errors = meta::validate(obj.get("metadata"), self.namespaced);
        let mut pruned = obj.clone();
        self.schema
            .check(&mut pruned, &SchemaPath::root(), true, false, &mut errors);
        if !self.kube.at_least(since::ENUM_ERROR_AT_ITEM) {
            for e in &mut errors {
                e.name_enum_error_at_its_list();
            }
        }
        if errors.iter().any(FieldError::is_blocking) {
            // A release that enforces no rule, or a schema without one, has
            // nothing left unchecked: the API server adds the notice only
            // where the CRD has a CEL validator (measured on v1.36.3: the
            // networkmanager Device of provider-upjet-aws, which declares
            // no rule, gets none).
            if !self.kube.enforces_validation_rules() || !self.schema.has_rules() {
                return errors;
            }
            // `field.Invalid(nil, nil, ...)`: a nil value, printed bare.
            errors.push(FieldError {
                path: SchemaPath::root().to_string(),
                kind: FieldErrorKind::Invalid {
                    value: "null".into(),
                    detail: "some validation rules were not checked because the object was \
                             invalid; correct the existing errors to complete validation"
                        .into(),
                },
            });
            return errors;
        }
        self.schema
            .validate_rules(&pruned, old, &SchemaPath::root(), true, &mut errors);
        errors
    }
}

#[cfg(test)]
mod tests;
