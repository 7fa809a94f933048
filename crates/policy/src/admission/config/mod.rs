//! The configuration file (docs/configuration.md): parsed once from YAML into raw serde
//! structs that reject unknown keys, then validated into the typed [`Config`]
//! the rules read. Nothing downstream ever sees an unvalidated value.

use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;
use wildmatch::WildMatch;

use crate::admission::cel::{CelProgram, CelRule, CelRules};
use crate::admission::fieldpath::FieldPath;
use crate::admission::model::{Action, Operation, RULE_NAMES};

mod exceptions;
mod go_duration;
mod rule_action;

pub use exceptions::{Exception, Subject};
pub use go_duration::{DurationError, GoDuration, GO_DURATION_FORMAT};
pub use rule_action::RuleAction;

/// The built-in configuration, used when `--config` is not given.
pub const BUILTIN_YAML: &str = include_str!("builtin.yaml");

/// Why a configuration is rejected; the message names the line or field.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The YAML does not parse, or has an unknown or mistyped key.
    #[error("failed to parse config: {0}")]
    Parse(String),
    /// A value is not valid: `field` names it, `reason` says why.
    #[error("failed to validate config: {field}: {reason}")]
    Invalid {
        /// The field, e.g. `resources[2].immutableFields[0]`.
        field: String,
        /// Why it is not valid.
        reason: String,
    },
}

/// A configuration as read, before it is parsed: what a command fetched
/// (a file's bytes, a ConfigMap's key), so that reading and judging stay
/// apart.
#[derive(Debug, Clone)]
pub enum ConfigSource {
    /// No configuration given: the built-in one.
    Builtin,
    /// A file's bytes.
    File {
        /// The file, for messages.
        path: String,
        /// What it holds.
        bytes: Vec<u8>,
    },
    /// The `config.yaml` key of the installed release's ConfigMap.
    ConfigMap {
        /// `namespace/name`.
        at: String,
        /// The key's text.
        text: String,
    },
}

/// Why a configuration that was read is not valid, naming where it came
/// from.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// A file that is not a valid configuration.
    #[error("failed to load config file {path}: {source}")]
    File {
        /// The file.
        path: String,
        /// What is wrong with it.
        #[source]
        source: ConfigError,
    },
    /// A ConfigMap whose key is not a valid configuration.
    #[error("failed to load the configuration from ConfigMap {at}: {source}")]
    ConfigMap {
        /// `namespace/name`.
        at: String,
        /// What is wrong with it.
        #[source]
        source: ConfigError,
    },
}

impl ConfigSource {
    /// The configuration it holds.
    pub fn load(&self) -> Result<Config, SourceError> {
        match self {
            ConfigSource::Builtin => Ok(Config::builtin()),
            ConfigSource::File { path, bytes } => {
                parse_file(path, bytes).map_err(|source| SourceError::File {
                    path: path.clone(),
                    source,
                })
            }
            ConfigSource::ConfigMap { at, text } => {
                Config::from_yaml(text).map_err(|source| SourceError::ConfigMap {
                    at: at.clone(),
                    source,
                })
            }
        }
    }
}

/// A configuration file's bytes, parsed; the parser's snippets name the
/// file instead of "<input>".
pub fn parse_file(path: &str, bytes: &[u8]) -> Result<Config, ConfigError> {
    std::str::from_utf8(bytes)
        .map_err(|e| ConfigError::Parse(format!("the file is not UTF-8: {e}")))
        .and_then(Config::from_yaml)
        .map_err(|e| match e {
            ConfigError::Parse(m) => {
                ConfigError::Parse(m.replace("--> <input>:", &format!("--> {path}:")))
            }
            other => other,
        })
}

fn invalid(field: impl Into<String>, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        field: field.into(),
        reason: reason.into(),
    }
}

// ---------------------------------------------------------------------------
// Raw, as written in YAML.

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawConfig {
    #[serde(default)]
    provider_config: RawProviderConfig,
    #[serde(default)]
    exempt_usernames: Vec<String>,
    #[serde(default)]
    rules: BTreeMap<String, RuleAction>,
    #[serde(default)]
    resources: Vec<RawResource>,
    #[serde(default)]
    exceptions: Vec<exceptions::RawException>,
    min_poll_interval: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawProviderConfig {
    default_name: Option<String>,
    #[serde(default)]
    namespace_provider_configs: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawResource {
    api_groups: Vec<String>,
    kinds: Vec<String>,
    #[serde(default)]
    external_name: ExternalNameStrategy,
    #[serde(default)]
    immutable_fields: Vec<String>,
    tags_field: Option<String>,
    #[serde(default)]
    identity_fields: Vec<String>,
    #[serde(default)]
    cloud_only_map_keys: CloudOnlyMapKeys,
    #[serde(default)]
    deletion_protection: bool,
    #[serde(default)]
    rules: BTreeMap<String, RuleAction>,
    #[serde(default)]
    cel_rules: Vec<RawCelRule>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawCelRule {
    name: String,
    expression: String,
    message: Option<String>,
    message_expression: Option<String>,
    #[serde(default = "default_cel_action")]
    action: CelAction,
    operations: Option<Vec<Operation>>,
}

fn default_cel_action() -> CelAction {
    CelAction::Deny
}

// ---------------------------------------------------------------------------
// Validated.

/// How a kind's external name is chosen (docs/rules.md).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub enum ExternalNameStrategy {
    /// The external name is `metadata.name` (the default); mutation sets it on CREATE.
    #[default]
    NameAsIdentifier,
    /// The provider assigns the identifier (for example an AWS VPC ID); mutation never sets it.
    IdentifierFromProvider,
}

/// What a kind's provider does, on update, with a key of a map the spec
/// sets (tags, labels, a manifest's data) that only the external resource
/// has; `mrguard plan` says it of such drift.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub enum CloudOnlyMapKeys {
    /// The provider makes the map the spec's and removes the key (the
    /// default: Terraform-based providers treat a map as a whole).
    #[default]
    Remove,
    /// The provider merges the spec's map into the external one and keeps
    /// the key (provider-kubernetes' Object, which applies its manifest as
    /// a merge patch).
    Keep,
}

/// The action a CEL rule takes when it fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum CelAction {
    /// Deny the request.
    Deny,
    /// Warn and allow.
    Warn,
    /// Allow with no warning; only counted.
    Audit,
}

impl From<CelAction> for Action {
    fn from(a: CelAction) -> Self {
        match a {
            CelAction::Deny => Action::Deny,
            CelAction::Warn => Action::Warn,
            CelAction::Audit => Action::Audit,
        }
    }
}

/// `providerConfig`: the default ProviderConfig names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderConfigDefaults {
    /// `defaultName`: the name new MRs get (`default` unless configured).
    pub default_name: String,
    /// `namespaceProviderConfigs`: namespace to default name, for namespaced MRs.
    pub namespace_provider_configs: BTreeMap<String, String>,
}

impl ProviderConfigDefaults {
    /// The default name for an MR in `namespace` (empty for cluster scope).
    pub fn name_for(&self, namespace: &str) -> &str {
        self.namespace_provider_configs
            .get(namespace)
            .map(String::as_str)
            .unwrap_or(&self.default_name)
    }
}

/// One `resources` entry: which kinds it matches and what applies to them.
#[derive(Debug, Clone, Default)]
pub struct ResourceConfig {
    api_groups: Vec<WildMatch>,
    kinds: Vec<WildMatch>,
    /// `externalName`: how the kinds' external names are chosen.
    pub external_name: ExternalNameStrategy,
    /// `immutableFields`: fields that must not change once the MR is created.
    pub immutable_fields: Vec<FieldPath>,
    /// `tagsField`: the map the tag initializer fills, if any.
    pub tags_field: Option<FieldPath>,
    /// `identityFields`: the fields whose values name the external
    /// resource, for kinds whose external name does not (provider-kubernetes'
    /// Object names its target in `spec.forProvider.manifest`). Empty: the
    /// external name does.
    pub identity_fields: Vec<FieldPath>,
    /// `cloudOnlyMapKeys`: what the provider does with a key only the
    /// external resource has in a map the spec sets.
    pub cloud_only_map_keys: CloudOnlyMapKeys,
    /// `deletionProtection`: deleting these kinds with outcome Delete is denied.
    pub deletion_protection: bool,
    /// `rules`: per-kind action overrides, by rule name.
    pub rules: BTreeMap<String, RuleAction>,
    /// `celRules`: the compiled CEL rules for these kinds, with what
    /// they read together.
    pub cel_rules: CelRules,
}

impl ResourceConfig {
    /// `apiGroups` and `kinds` as written (globs).
    pub fn globs(&self) -> (Vec<String>, Vec<String>) {
        (
            self.api_groups.iter().map(|g| g.to_string()).collect(),
            self.kinds.iter().map(|k| k.to_string()).collect(),
        )
    }

    /// Whether this entry's `apiGroups` and `kinds` globs match.
    pub fn matches(&self, group: &str, kind: &str) -> bool {
        self.api_groups.iter().any(|g| g.matches(group))
            && self.kinds.iter().any(|k| k.matches(kind))
    }
}

/// A validated configuration (docs/configuration.md): what every decision reads.
#[derive(Debug, Clone)]
pub struct Config {
    /// `providerConfig`.
    pub provider_config: ProviderConfigDefaults,
    exempt_usernames: Vec<WildMatch>,
    /// `rules`: global action overrides, by rule name.
    pub rules: BTreeMap<String, RuleAction>,
    /// `resources`: the entries, first match wins.
    pub resources: Vec<ResourceConfig>,
    /// `exceptions`: waivers of named rules, in order.
    pub exceptions: Vec<Exception>,
    /// `minPollInterval`: the provider's minimum poll interval, as its
    /// crossplane-runtime reconciler is given it with `WithMinPollInterval`
    /// (0 unless the provider opts in). A positive
    /// `crossplane.io/poll-interval` below it is raised to it, which
    /// `reconcile-annotations` warns about. Not Crossplane core's
    /// `--min-poll-interval`, which applies to composite resources only.
    pub min_poll_interval: GoDuration,
    /// What applies to kinds that no entry matches.
    fallback: ResourceConfig,
    /// Whether a CEL rule reads `metadata.managedFields`; found once when
    /// the configuration loads, since every request asks.
    reads_managed_fields: bool,
    /// Whether a CEL rule reads `status` ([`Config::reads_status`]).
    reads_status: bool,
    /// Group → kinds that entries name without wildcards ([`Config::names_kind`]).
    named_kinds: BTreeMap<String, BTreeSet<String>>,
}

impl Config {
    /// Whether a CEL rule reads `metadata.managedFields` of `self` or
    /// `oldSelf`: only then must a review's objects keep them.
    pub fn reads_managed_fields(&self) -> bool {
        self.reads_managed_fields
    }

    /// Whether an update that changes only status, managedFields or the
    /// resourceVersion may change a finding: when a CEL rule reads
    /// `status` or `managedFields`. Otherwise the audit need not judge
    /// such an update again.
    pub fn judges_every_update(&self) -> bool {
        self.reads_status || self.reads_managed_fields
    }

    /// Whether the identity index's entry of every MR of `group`/`kind` is
    /// the same under `other`: its claim (the default provider configs and
    /// the external-name strategy the kind resolves to) and what the audit
    /// judges of an update ([`Config::judges_every_update`]). A change of
    /// rules, actions, exceptions or other kinds' entries keeps them, so
    /// the replicas' watches of this kind need not list it again.
    pub fn same_claims_for(&self, other: &Config, group: &str, kind: &str) -> bool {
        let (a, b) = (self.resource(group, kind), other.resource(group, kind));
        self.provider_config == other.provider_config
            && self.judges_every_update() == other.judges_every_update()
            && a.external_name == b.external_name
            && a.identity_fields == b.identity_fields
    }

    /// Whether a CEL rule reads `status` of `self` or `oldSelf`, its
    /// presence included. Otherwise no verdict depends on what a provider
    /// writes through the status subresource, and an update that changes
    /// only status (and managedFields, and the resourceVersion) changes
    /// no finding.
    pub fn reads_status(&self) -> bool {
        self.reads_status
    }

    /// Whether a `resources` entry names this group and kind literally, with
    /// no wildcard in either: the kinds metrics may label by name, since a
    /// glob matches kinds a client invents.
    pub fn names_kind(&self, group: &str, kind: &str) -> bool {
        self.named_kinds
            .get(group)
            .is_some_and(|kinds| kinds.contains(kind))
    }

    /// The built-in configuration ([`BUILTIN_YAML`]).
    pub fn builtin() -> Self {
        // The built-in YAML is part of the binary and covered by a unit test.
        match Self::from_yaml(BUILTIN_YAML) {
            Ok(c) => c,
            Err(e) => panic!("the built-in configuration is invalid: {e}"),
        }
    }

    /// Parses and validates a configuration; an empty text is the empty configuration.
    pub fn from_yaml(text: &str) -> Result<Self, ConfigError> {
        let raw: RawConfig = if text.trim().is_empty() {
            RawConfig::default()
        } else {
            serde_saphyr::from_str(text).map_err(|e| ConfigError::Parse(e.to_string()))?
        };
        Self::validate(raw)
    }

    fn validate(raw: RawConfig) -> Result<Self, ConfigError> {
        let default_name = raw
            .provider_config
            .default_name
            .unwrap_or_else(|| "default".to_string());
        check_object_name("providerConfig.defaultName", &default_name)?;
        for (ns, name) in &raw.provider_config.namespace_provider_configs {
            if ns.is_empty() {
                return Err(invalid(
                    "providerConfig.namespaceProviderConfigs",
                    "a namespace key is empty",
                ));
            }
            check_object_name(
                &format!("providerConfig.namespaceProviderConfigs[{ns}]"),
                name,
            )?;
        }

        let mut exempt_usernames = Vec::new();
        for (i, u) in raw.exempt_usernames.iter().enumerate() {
            if u.is_empty() {
                return Err(invalid(format!("exemptUsernames[{i}]"), "is empty"));
            }
            exempt_usernames.push(WildMatch::new(u));
        }

        let literal = |p: &String| !p.contains(['*', '?']);
        let mut named_kinds: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for r in &raw.resources {
            for g in r.api_groups.iter().filter(|g| literal(g)) {
                let kinds = r.kinds.iter().filter(|k| literal(k)).cloned();
                named_kinds.entry(g.clone()).or_default().extend(kinds);
            }
        }
        let mut resources = Vec::new();
        let mut cel_names = BTreeSet::new();
        for (i, r) in raw.resources.into_iter().enumerate() {
            let entry = validate_resource(&format!("resources[{i}]"), r)?;
            cel_names.extend(entry.cel_rules.iter().map(|c| c.name.clone()));
            resources.push(entry);
        }
        for name in raw.rules.keys() {
            check_rule_key("rules", name, &cel_names)?;
        }
        // An exception may also waive the teardown guard, which has no
        // configurable action.
        let known_rule = |r: &str| {
            r == crate::admission::model::TEARDOWN || check_rule_key("", r, &cel_names).is_ok()
        };
        let exceptions = exceptions::validate(raw.exceptions, &known_rule, &resources)?;
        const MANAGED_FIELDS: &[&str] = &["metadata", "managedFields"];
        let reaches = |path: &[&str]| {
            resources.iter().any(|r| {
                let reads = r.cel_rules.reads();
                reads.reaches("self", path) || reads.reaches("oldSelf", path)
            })
        };
        let reads_managed_fields = reaches(MANAGED_FIELDS);
        let reads_status = reaches(&["status"]);
        let min_poll_interval = match &raw.min_poll_interval {
            None => GoDuration::ZERO,
            Some(s) => {
                let d = GoDuration::parse(s).map_err(|e| {
                    invalid(
                        "minPollInterval",
                        format!("{s:?} is not {GO_DURATION_FORMAT}: {e}"),
                    )
                })?;
                if d.0 < 0 {
                    return Err(invalid(
                        "minPollInterval",
                        format!("{s:?} is negative; use 0 for a provider without a minimum poll interval"),
                    ));
                }
                d
            }
        };

        Ok(Self {
            provider_config: ProviderConfigDefaults {
                default_name,
                namespace_provider_configs: raw.provider_config.namespace_provider_configs,
            },
            exempt_usernames,
            rules: raw.rules,
            resources,
            exceptions,
            min_poll_interval,
            fallback: ResourceConfig::default(),
            reads_managed_fields,
            reads_status,
            named_kinds,
        })
    }

    /// The first entry that matches, or the empty fallback.
    pub fn resource(&self, group: &str, kind: &str) -> &ResourceConfig {
        self.resources
            .iter()
            .find(|r| r.matches(group, kind))
            .unwrap_or(&self.fallback)
    }

    /// The built-in protections this configuration drops, one line each:
    /// immutable fields and
    /// `IdentifierFromProvider` kinds. `--config` replaces the built-in
    /// configuration whole, so a short file silently loses them.
    pub fn lost_protections(&self) -> Vec<String> {
        let builtin = Self::builtin();
        let mut lost = Vec::new();
        // A name each glob matches: '*' and '?' become 'x'.
        let probe = |pattern: &WildMatch| pattern.to_string().replace(['*', '?'], "x");
        for entry in &builtin.resources {
            let mut fields: Vec<&str> = Vec::new();
            let mut kinds: Vec<String> = Vec::new();
            for g in &entry.api_groups {
                for k in &entry.kinds {
                    let (group, kind) = (probe(g), probe(k));
                    // Skip probes an earlier built-in entry answers.
                    if !std::ptr::eq(builtin.resource(&group, &kind), entry) {
                        continue;
                    }
                    let mine = self.resource(&group, &kind);
                    for f in &entry.immutable_fields {
                        if !mine
                            .immutable_fields
                            .iter()
                            .any(|m| m.as_str() == f.as_str())
                            && !fields.contains(&f.as_str())
                        {
                            fields.push(f.as_str());
                        }
                    }
                    if entry.external_name == ExternalNameStrategy::IdentifierFromProvider
                        && mine.external_name != entry.external_name
                        && !kinds.contains(&k.to_string())
                    {
                        kinds.push(k.to_string());
                    }
                }
            }
            let groups = entry
                .api_groups
                .iter()
                .map(|g| g.to_string())
                .collect::<Vec<_>>()
                .join(", ");
            let entry_kinds: Vec<String> = entry.kinds.iter().map(|k| k.to_string()).collect();
            let of = if entry_kinds == ["*"] {
                String::new()
            } else {
                format!(" {} of", few(&entry_kinds))
            };
            if !fields.is_empty() {
                lost.push(format!(
                    "resources: {} immutable for{of} {groups} in the built-in configuration, but not in this one",
                    if fields.len() == 1 {
                        format!("{} is", fields[0])
                    } else {
                        format!("{} are", fields.join(", "))
                    },
                ));
            }
            if !kinds.is_empty() {
                lost.push(format!(
                    "resources: {} of {groups} are IdentifierFromProvider in the built-in configuration, but not in \
                     this one: on create mrguard will set their crossplane.io/external-name to metadata.name, which is not an ID the provider can look up",
                    few(&kinds)
                ));
            }
        }
        lost
    }

    /// One line per `exemptUsernames` glob that matches Crossplane core's or
    /// the RBAC manager's service account (in `crossplane-system`, or in the
    /// namespace the glob names). Core writes every composed MR, so such a
    /// glob switches the exempt rules off for all of them.
    pub fn privileged_exemptions(&self) -> Vec<String> {
        let mut out = Vec::new();
        for glob in &self.exempt_usernames {
            let text = glob.to_string();
            let mut namespaces = vec!["crossplane-system".to_string()];
            if let Some(ns) = text
                .strip_prefix("system:serviceaccount:")
                .and_then(|rest| rest.split(':').next())
            {
                // A name the glob's namespace part matches: '*' and '?' become 'x'.
                let ns = ns.replace(['*', '?'], "x");
                if !ns.is_empty() && !namespaces.contains(&ns) {
                    namespaces.push(ns);
                }
            }
            let matched: Vec<String> = namespaces
                .iter()
                .flat_map(|ns| {
                    crate::cluster::providers::CROSSPLANE_ACCOUNTS
                        .iter()
                        .map(move |sa| format!("system:serviceaccount:{ns}:{sa}"))
                })
                .filter(|u| glob.matches(u))
                .collect();
            if let Some(first) = matched.first() {
                out.push(format!(
                    "exemptUsernames: {text:?} matches Crossplane's own service account {first}:                      Crossplane core writes every composed MR, so immutable-field, external-name-change,                      init-provider-change and mutation would be skipped for them; name the providers'                      accounts instead (e.g. system:serviceaccount:crossplane-system:provider-aws-*), or                      rely on the derived provider accounts"
                ));
            }
        }
        out
    }

    /// `exemptUsernames` as written (globs).
    pub fn exempt_username_globs(&self) -> Vec<String> {
        self.exempt_usernames
            .iter()
            .map(|g| g.to_string())
            .collect()
    }

    /// Whether `username` matches an `exemptUsernames` glob.
    pub fn is_exempt(&self, username: &str) -> bool {
        !username.is_empty() && self.exempt_usernames.iter().any(|g| g.matches(username))
    }

    /// A rule's configured action: the kind's override, else the global
    /// one, else the rule's default.
    pub fn rule_action(&self, entry: &ResourceConfig, rule: &str, default: Action) -> RuleAction {
        entry
            .rules
            .get(rule)
            .or_else(|| self.rules.get(rule))
            .copied()
            .unwrap_or(default.into())
    }

    /// How each configured CEL rule runs, one line per rule for `mrguard
    /// config check`: `resources[0].celRules[team]: compiled`, or
    /// `interpreted` and why.
    pub fn cel_mode_notes(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (i, r) in self.resources.iter().enumerate() {
            for rule in &r.cel_rules {
                let how = match rule.program.mode() {
                    Ok(()) => "compiled".to_string(),
                    Err(why) => format!("interpreted ({why})"),
                };
                out.push(format!("resources[{i}].celRules[{}]: {how}", rule.name));
            }
        }
        out
    }

    /// The first moment after `now` at which a verdict of this
    /// configuration can change while the object stays the same: a staged
    /// `Deny` starting to deny, or an exception expiring. The audit keeps
    /// findings of unchanged MRs until then.
    pub fn next_change_after(&self, now: jiff::Timestamp) -> Option<jiff::Timestamp> {
        let staged = self
            .resources
            .iter()
            .chain(std::iter::once(&self.fallback))
            .flat_map(|r| r.rules.values())
            .chain(self.rules.values())
            .filter_map(|a| a.warn_until);
        let expiring = self.exceptions.iter().filter_map(|e| e.expires);
        staged.chain(expiring).filter(|t| *t > now).min()
    }

    /// A rule's action in force at `now` (a staged `Deny` is `Warn` until
    /// its date). The caller's clock: the crate is pure, and a what-if tool
    /// or a test judges at a chosen time.
    pub fn action(
        &self,
        entry: &ResourceConfig,
        rule: &str,
        default: Action,
        now: jiff::Timestamp,
    ) -> Action {
        self.rule_action(entry, rule, default).at(now).0
    }

    /// The first exception that waives `rule` for `subject` at `now`.
    pub fn exception_for(
        &self,
        rule: &str,
        subject: &Subject<'_>,
        now: jiff::Timestamp,
    ) -> Option<&Exception> {
        self.exceptions
            .iter()
            .find(|e| e.waives(rule, subject, now))
    }

    /// The exceptions that have expired at `now`.
    pub fn expired_exceptions(&self, now: jiff::Timestamp) -> Vec<&Exception> {
        self.exceptions.iter().filter(|e| e.expired(now)).collect()
    }
}

/// A readable list: at most four names, then how many more.
fn few(names: &[String]) -> String {
    if names.len() <= 4 {
        names.join(", ")
    } else {
        format!("{} and {} more", names[..3].join(", "), names.len() - 3)
    }
}

fn validate_resource(at: &str, r: RawResource) -> Result<ResourceConfig, ConfigError> {
    if r.api_groups.is_empty() {
        return Err(invalid(
            format!("{at}.apiGroups"),
            "must list at least one group (use \"*\" for all)",
        ));
    }
    if r.kinds.is_empty() {
        return Err(invalid(
            format!("{at}.kinds"),
            "must list at least one kind (use \"*\" for all)",
        ));
    }
    for (field, list) in [("apiGroups", &r.api_groups), ("kinds", &r.kinds)] {
        if let Some(i) = list.iter().position(|g| g.is_empty()) {
            return Err(invalid(format!("{at}.{field}[{i}]"), "is empty"));
        }
    }
    let mut immutable_fields = Vec::new();
    for (i, f) in r.immutable_fields.iter().enumerate() {
        let p = FieldPath::parse(f)
            .map_err(|e| invalid(format!("{at}.immutableFields[{i}]"), e.to_string()))?;
        immutable_fields.push(p);
    }
    let mut identity_fields = Vec::new();
    for (i, f) in r.identity_fields.iter().enumerate() {
        let at = format!("{at}.identityFields[{i}]");
        let p = FieldPath::parse(f).map_err(|e| invalid(at.clone(), e.to_string()))?;
        if !p.is_concrete() {
            return Err(invalid(at, "must name one field; [*] is not allowed"));
        }
        identity_fields.push(p);
    }
    let tags_field = match &r.tags_field {
        None => None,
        Some(t) => {
            let p = FieldPath::parse(t)
                .map_err(|e| invalid(format!("{at}.tagsField"), e.to_string()))?;
            if !p.is_concrete() {
                return Err(invalid(
                    format!("{at}.tagsField"),
                    "must name one map field; [*] is not allowed",
                ));
            }
            Some(p)
        }
    };
    let mut cel_rules: Vec<CelRule> = Vec::new();
    for (i, c) in r.cel_rules.into_iter().enumerate() {
        let field = format!("{at}.celRules[{i}]");
        if !is_rule_name(&c.name) {
            return Err(invalid(
                format!("{field}.name"),
                format!(
                    "{:?} must be lower-case letters, digits and '-', starting with a letter",
                    c.name
                ),
            ));
        }
        if cel_rules.iter().any(|o| o.name == c.name) {
            return Err(invalid(
                format!("{field}.name"),
                format!("{:?} is defined twice in this entry", c.name),
            ));
        }
        let operations = match c.operations {
            None => vec![Operation::Create, Operation::Update],
            Some(ops) if ops.is_empty() => {
                return Err(invalid(
                    format!("{field}.operations"),
                    "is empty; omit it for CREATE and UPDATE",
                ))
            }
            Some(ops) => ops,
        };
        let program = CelProgram::compile(&c.expression).map_err(|e| {
            invalid(
                format!("{field}.expression"),
                format!("failed to compile CEL rule {:?}: {e}", c.name),
            )
        })?;
        let message_program = match &c.message_expression {
            None => None,
            Some(m) => Some(CelProgram::compile(m).map_err(|e| {
                invalid(
                    format!("{field}.messageExpression"),
                    format!("failed to compile CEL rule {:?}: {e}", c.name),
                )
            })?),
        };
        cel_rules.push(CelRule {
            name: c.name,
            expression: c.expression,
            program,
            message: c.message,
            message_program,
            action: c.action.into(),
            operations,
        });
    }
    let names: BTreeSet<String> = cel_rules.iter().map(|c| c.name.clone()).collect();
    for name in r.rules.keys() {
        check_rule_key(&format!("{at}.rules"), name, &names)?;
    }
    Ok(ResourceConfig {
        api_groups: r.api_groups.iter().map(|g| WildMatch::new(g)).collect(),
        kinds: r.kinds.iter().map(|k| WildMatch::new(k)).collect(),
        external_name: r.external_name,
        immutable_fields,
        tags_field,
        identity_fields,
        cloud_only_map_keys: r.cloud_only_map_keys,
        deletion_protection: r.deletion_protection,
        rules: r.rules,
        cel_rules: CelRules::new(cel_rules),
    })
}

fn check_rule_key(at: &str, name: &str, cel_names: &BTreeSet<String>) -> Result<(), ConfigError> {
    if let Some(cel) = name.strip_prefix("cel:") {
        if cel_names.contains(cel) {
            return Ok(());
        }
        return Err(invalid(
            format!("{at}[{name}]"),
            format!("no CEL rule named {cel:?} is defined here"),
        ));
    }
    if RULE_NAMES.contains(&name) {
        return Ok(());
    }
    Err(invalid(
        format!("{at}[{name}]"),
        format!(
            "unknown rule; known rules are {} and cel:<name>",
            RULE_NAMES.join(", ")
        ),
    ))
}

fn is_rule_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_lowercase())
        && s.len() <= 63
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !s.ends_with('-')
}

fn check_object_name(field: &str, name: &str) -> Result<(), ConfigError> {
    let ok = !name.is_empty()
        && name.len() <= 253
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric());
    if ok {
        Ok(())
    } else {
        Err(invalid(
            field,
            format!("{name:?} is not a valid Kubernetes object name"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rules, actions, CEL rules that read neither status nor managedFields,
    /// and entries that leave a kind's strategy keep that kind's claims;
    /// the default provider config, the strategy the kind resolves to, or
    /// a rule that reads status or managedFields, do not.
    #[test]
    fn only_what_claims_depend_on_changes_them() {
        let vpc = "resources:\n  - apiGroups: ['ec2.aws.upbound.io']\n    kinds: [VPC]\n    externalName: IdentifierFromProvider\n";
        let base = Config::from_yaml(vpc).unwrap();
        let with = |more: &str| Config::from_yaml(&format!("{vpc}{more}")).unwrap();
        let same =
            |a: &Config, b: &Config, kind: &str| a.same_claims_for(b, "ec2.aws.upbound.io", kind);
        for edit in [
            "    deletionProtection: true\n    celRules:\n      - {name: r, expression: 'has(self.spec)', message: m}\n",
            "rules:\n  reference: {action: Warn}\n",
            // Another kind's entry, and one after VPC's that VPC never reaches.
            "  - apiGroups: ['s3.aws.upbound.io']\n    kinds: ['*']\n    externalName: NameAsIdentifier\n",
            "  - apiGroups: ['ec2.aws.upbound.io']\n    kinds: ['*']\n    externalName: NameAsIdentifier\n",
        ] {
            assert!(same(&base, &with(edit), "VPC"), "{edit}");
        }
        for edit in [
            "providerConfig:\n  defaultName: other\n",
            "    celRules:\n      - {name: r, expression: 'has(self.status)', message: m}\n",
            "    celRules:\n      - {name: r, expression: 'has(self.metadata.managedFields)', message: m}\n",
        ] {
            assert!(!same(&base, &with(edit), "VPC"), "{edit}");
        }
        // A later entry changes what the kinds VPC's entry does not name
        // resolve to, and nothing of VPC's.
        let later = with(
            "  - apiGroups: ['ec2.aws.upbound.io']\n    kinds: ['*']\n    externalName: IdentifierFromProvider\n",
        );
        assert!(!same(&base, &later, "Subnet"));
        assert!(same(&base, &later, "VPC"));
        // An entry in front that names VPC with another strategy changes it.
        let front = Config::from_yaml(&vpc.replace(
            "resources:\n",
            "resources:\n  - apiGroups: ['ec2.aws.upbound.io']\n    kinds: ['V*']\n    externalName: NameAsIdentifier\n",
        ))
        .unwrap();
        assert!(!same(&base, &front, "VPC"));
        let named =
            Config::from_yaml(&vpc.replace("IdentifierFromProvider", "NameAsIdentifier")).unwrap();
        assert!(!same(&base, &named, "VPC"));
        assert!(same(&base, &base, "VPC"));
    }

    /// Only a CEL rule that reads `status` (its presence too) makes a
    /// status update matter; the built-in rules read none.
    #[test]
    fn reads_status_only_when_a_cel_rule_reads_it() {
        assert!(!Config::builtin().reads_status());
        let config = |expression: &str| {
            Config::from_yaml(&format!(
                "resources:\n  - apiGroups: ['*']\n    kinds: ['*']\n    celRules:\n      - name: r\n        expression: {expression:?}\n        message: m\n"
            ))
            .unwrap()
        };
        for (expression, reads) in [
            ("self.status.conditions.size() > 0", true),
            ("has(self.status)", true),
            ("size(self) > 0", true),
            ("self.spec.forProvider.region == 'x'", false),
            ("has(self.metadata.labels)", false),
        ] {
            assert_eq!(config(expression).reads_status(), reads, "{expression}");
        }
    }

    #[test]
    fn the_next_change_is_the_first_staged_date_or_expiry_ahead() {
        let now: jiff::Timestamp = "2026-06-01T00:00:00Z".parse().unwrap();
        assert_eq!(Config::builtin().next_change_after(now), None);
        let c = Config::from_yaml(
            "rules:\n  reference: {action: Deny, warnUntil: '2026-09-01T00:00:00Z'}\n  paused-value: {action: Deny, warnUntil: '2026-01-01T00:00:00Z'}\nexceptions:\n  - {name: x, rules: [immutable-field], reason: r, expires: '2026-07-01T00:00:00Z'}\n",
        )
        .unwrap();
        let at = |t: &str| Some(t.parse::<jiff::Timestamp>().unwrap());
        // The past date is behind; the expiry comes first, then the stage.
        assert_eq!(c.next_change_after(now), at("2026-07-01T00:00:00Z"));
        assert_eq!(
            c.next_change_after(at("2026-07-01T00:00:00Z").unwrap()),
            at("2026-09-01T00:00:00Z")
        );
        assert_eq!(
            c.next_change_after(at("2026-09-01T00:00:00Z").unwrap()),
            None
        );
        // A kind's own staged override counts too.
        let c = Config::from_yaml(
            "resources:\n  - apiGroups: [ec2.aws.upbound.io]\n    kinds: [VPC]\n    rules:\n      reference: {action: Deny, warnUntil: '2026-08-01T00:00:00Z'}\n",
        )
        .unwrap();
        assert_eq!(c.next_change_after(now), at("2026-08-01T00:00:00Z"));
    }

    #[test]
    fn only_kinds_named_without_wildcards_are_named() {
        let c = Config::from_yaml(
            r#"
resources:
  - apiGroups: ["ec2.aws.upbound.io", "*.aws.upbound.io"]
    kinds: ["VPC", "Sub*"]
  - apiGroups: ["s3.aws.upbound.io"]
    kinds: ["*"]
"#,
        )
        .unwrap();
        assert!(c.names_kind("ec2.aws.upbound.io", "VPC"));
        assert!(!c.names_kind("ec2.aws.upbound.io", "Subnet"), "a glob kind");
        assert!(!c.names_kind("rds.aws.upbound.io", "VPC"), "a glob group");
        assert!(!c.names_kind("s3.aws.upbound.io", "Bucket"));
        assert!(Config::builtin().names_kind("ec2.aws.upbound.io", "Subnet"));
    }

    const DOCUMENTED_EXAMPLE: &str = r#"
providerConfig:
  defaultName: default
  namespaceProviderConfigs: {team-a: aws-team-a}
exemptUsernames: ["system:serviceaccount:crossplane-system:provider-aws-*"]
rules:
  paused-delete: Warn
  deletion-policy-conflict: Deny
resources:
  - apiGroups: ["ec2.aws.upbound.io", "ec2.aws.m.upbound.io"]
    kinds: ["VPC", "Subnet"]
    externalName: IdentifierFromProvider
    immutableFields: ["spec.forProvider.region", "spec.forProvider.cidrBlock"]
    tagsField: spec.forProvider.tags
    deletionProtection: false
    rules: {immutable-field: Deny}
    celRules:
      - name: require-team-label
        expression: "has(self.metadata.labels) && 'team' in self.metadata.labels"
        message: "every MR needs a team label"
        action: Deny
        operations: [CREATE, UPDATE]
  - apiGroups: ["*.aws.upbound.io", "*.aws.m.upbound.io"]
    kinds: ["*"]
    immutableFields: ["spec.forProvider.region"]
"#;

    #[test]
    fn the_spec_example_parses() {
        let c = Config::from_yaml(DOCUMENTED_EXAMPLE).unwrap();
        assert_eq!(c.provider_config.name_for("team-a"), "aws-team-a");
        assert_eq!(c.provider_config.name_for("other"), "default");
        assert_eq!(c.provider_config.name_for(""), "default");
        assert!(c.is_exempt("system:serviceaccount:crossplane-system:provider-aws-abc"));
        assert!(!c.is_exempt("system:serviceaccount:default:x"));
        assert!(!c.is_exempt(""));
        let vpc = c.resource("ec2.aws.upbound.io", "VPC");
        assert_eq!(
            vpc.external_name,
            ExternalNameStrategy::IdentifierFromProvider
        );
        assert_eq!(vpc.immutable_fields.len(), 2);
        assert_eq!(vpc.cel_rules.len(), 1);
        // First matching entry wins, even though the second also matches.
        let bucket = c.resource("s3.aws.upbound.io", "Bucket");
        assert_eq!(bucket.external_name, ExternalNameStrategy::NameAsIdentifier);
        assert_eq!(bucket.immutable_fields.len(), 1);
        // Kinds are matched case-sensitively, like Kubernetes does.
        assert_eq!(
            c.resource("ec2.aws.upbound.io", "vpc")
                .immutable_fields
                .len(),
            1
        );
        let none = c.resource("example.org", "Thing");
        assert!(none.immutable_fields.is_empty());
    }

    #[test]
    fn actions_resolve_kind_then_global_then_default() {
        let c = Config::from_yaml(DOCUMENTED_EXAMPLE).unwrap();
        let vpc = c.resource("ec2.aws.upbound.io", "VPC");
        let now = jiff::Timestamp::now();
        let action = |rule, default| c.action(vpc, rule, default, now);
        assert_eq!(action("immutable-field", Action::Warn), Action::Deny);
        assert_eq!(action("paused-delete", Action::Deny), Action::Warn);
        assert_eq!(action("reference", Action::Deny), Action::Deny);
    }

    #[test]
    fn builtin_config_is_valid_and_covers_the_big_providers() {
        let c = Config::builtin();
        // No glob: only the derived provider accounts are exempt.
        assert!(!c.is_exempt("system:serviceaccount:crossplane-system:provider-aws-ec2-1"));
        assert!(!c.is_exempt("system:serviceaccount:crossplane-system:crossplane"));
        assert!(c.privileged_exemptions().is_empty());
        let has = |g: &str, k: &str, f: &str| {
            c.resource(g, k)
                .immutable_fields
                .iter()
                .any(|p| p.as_str() == f)
        };
        assert!(has(
            "s3.aws.upbound.io",
            "Bucket",
            "spec.forProvider.region"
        ));
        assert!(has(
            "s3.aws.m.upbound.io",
            "Bucket",
            "spec.forProvider.region"
        ));
        assert!(has("ec2.aws.upbound.io", "VPC", "spec.forProvider.region"));
        assert!(has(
            "network.azure.upbound.io",
            "VirtualNetwork",
            "spec.forProvider.location"
        ));
        assert!(has(
            "azure.upbound.io",
            "ResourceGroup",
            "spec.forProvider.location"
        ));
        assert!(has(
            "network.azure.upbound.io",
            "VirtualNetwork",
            "spec.forProvider.resourceGroupName"
        ));
        for f in ["project", "location", "region", "zone"] {
            assert!(has(
                "compute.gcp.upbound.io",
                "Instance",
                &format!("spec.forProvider.{f}")
            ));
        }
        for k in [
            "VPC",
            "Subnet",
            "SecurityGroup",
            "InternetGateway",
            "RouteTable",
        ] {
            for g in ["ec2.aws.upbound.io", "ec2.aws.m.upbound.io"] {
                assert_eq!(
                    c.resource(g, k).external_name,
                    ExternalNameStrategy::IdentifierFromProvider,
                    "{g}/{k}"
                );
            }
        }
        assert_eq!(
            c.resource("s3.aws.upbound.io", "Bucket").external_name,
            ExternalNameStrategy::NameAsIdentifier
        );
    }

    #[test]
    fn unknown_keys_are_errors_with_a_line() {
        let e = Config::from_yaml(
            "resources:\n  - apiGroups: [a]\n    kinds: [b]\n    immutableField: [x]\n",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("line 4"), "{e}");
        assert!(e.contains("immutableField"), "{e}");
        let e = Config::from_yaml("rulez: {}\n").unwrap_err().to_string();
        assert!(e.contains("rulez"), "{e}");
    }

    #[test]
    fn bad_values_name_their_field() {
        let cases = [
            ("rules: {no-such-rule: Deny}\n", "rules[no-such-rule]"),
            ("rules: {reference: Maybe}\n", "Maybe"),
            ("rules: {cel:missing: Warn}\n", "rules[cel:missing]"),
            (
                "resources:\n  - apiGroups: [a]\n    kinds: [b]\n    immutableFields: [\"spec..x\"]\n",
                "resources[0].immutableFields[0]",
            ),
            (
                "resources:\n  - apiGroups: [a]\n    kinds: [b]\n    tagsField: \"spec.x[*]\"\n",
                "resources[0].tagsField",
            ),
            (
                "resources:\n  - apiGroups: [a]\n    kinds: [b]\n    identityFields: [spec.a, \"spec.x[*]\"]\n",
                "resources[0].identityFields[1]",
            ),
            ("resources:\n  - apiGroups: []\n    kinds: [b]\n", "resources[0].apiGroups"),
            (
                "resources:\n  - apiGroups: [a]\n    kinds: [b]\n    externalName: ByMagic\n",
                "ByMagic",
            ),
            ("providerConfig: {defaultName: \"Not Valid\"}\n", "providerConfig.defaultName"),
            ("exemptUsernames: [\"\"]\n", "exemptUsernames[0]"),
            (
                "resources:\n  - apiGroups: [a]\n    kinds: [b]\n    celRules:\n      - {name: Bad_Name, expression: 'true'}\n",
                "resources[0].celRules[0].name",
            ),
            (
                "resources:\n  - apiGroups: [a]\n    kinds: [b]\n    celRules:\n      - {name: x, expression: 'true'}\n      - {name: x, expression: 'true'}\n",
                "defined twice",
            ),
        ];
        for (yaml, needle) in cases {
            let e = Config::from_yaml(yaml).unwrap_err().to_string();
            assert!(e.contains(needle), "{yaml}: {e}");
        }
    }

    #[test]
    fn cel_overrides_must_name_a_defined_rule() {
        let ok = "rules: {\"cel:team\": Warn}\nresources:\n  - apiGroups: [a]\n    kinds: [b]\n    rules: {\"cel:team\": Off}\n    celRules:\n      - {name: team, expression: 'true'}\n";
        let c = Config::from_yaml(ok).unwrap();
        assert_eq!(
            c.rules.get("cel:team"),
            Some(&RuleAction::from(Action::Warn))
        );
    }

    #[test]
    fn globs_matching_crossplane_core_or_the_rbac_manager_are_flagged() {
        for (glob, account) in [
            (
                "system:serviceaccount:crossplane-system:*",
                "crossplane-system:crossplane",
            ),
            ("system:serviceaccount:*", "crossplane-system:crossplane"),
            ("*", "crossplane-system:crossplane"),
            (
                "system:serviceaccount:upbound-system:*",
                "upbound-system:crossplane",
            ),
            (
                "system:serviceaccount:crossplane-system:*rbac*",
                "crossplane-system:rbac-manager",
            ),
            ("system:serviceaccount:xp-*:cross*", "xp-x:crossplane"),
        ] {
            let c = Config::from_yaml(&format!("exemptUsernames: [{glob:?}]\n")).unwrap();
            let w = c.privileged_exemptions();
            assert_eq!(w.len(), 1, "{glob}: {w:?}");
            assert!(
                w[0].contains(&format!("system:serviceaccount:{account}")),
                "{glob}: {w:?}"
            );
            assert!(w[0].contains(&format!("{glob:?}")), "{w:?}");
        }
        for glob in [
            "system:serviceaccount:crossplane-system:provider-aws-*",
            "system:serviceaccount:crossplane-system:provider-*",
            "system:serviceaccount:team-a:deployer",
        ] {
            let c = Config::from_yaml(&format!("exemptUsernames: [{glob:?}]\n")).unwrap();
            assert!(c.privileged_exemptions().is_empty(), "{glob}");
        }
    }

    #[test]
    fn lost_protections_name_what_a_replacement_drops() {
        assert!(Config::builtin().lost_protections().is_empty());
        let lost = Config::from_yaml("").unwrap().lost_protections();
        let all = lost.join("\n");
        // The built-in configuration has no exemptions to lose.
        assert!(!all.contains("exemptUsernames"), "{all}");
        assert!(
            all.contains("spec.forProvider.region, spec.forProvider.availabilityZone are immutable for VPC, Subnet, SecurityGroup and 17 more of ec2.aws.upbound.io"),
            "{all}"
        );
        assert!(
            all.contains("spec.forProvider.region is immutable for *.aws.upbound.io, *.aws.m.upbound.io in the built-in configuration, but not in this one"),
            "{all}"
        );
        assert!(
            all.contains("spec.forProvider.location, spec.forProvider.resourceGroupName are"),
            "{all}"
        );
        assert!(all.contains("spec.forProvider.project"), "{all}");
        assert!(all.contains("VPC, Subnet, SecurityGroup and 17 more of ec2.aws.upbound.io, ec2.aws.m.upbound.io are IdentifierFromProvider in the built-in configuration, but not in this one"), "{all}");
        // Keeping the exemption and AWS regions, dropping the rest.
        let partial = Config::from_yaml(
            "exemptUsernames: ['system:serviceaccount:crossplane-system:*']\nresources:\n  - apiGroups: ['*']\n    kinds: ['*']\n    immutableFields: [spec.forProvider.region]\n",
        )
        .unwrap()
        .lost_protections();
        let all = partial.join("\n");
        assert!(!all.contains("exemptUsernames"), "{all}");
        assert!(!all.contains("spec.forProvider.region is"), "{all}");
        assert!(
            all.contains("spec.forProvider.availabilityZone is immutable"),
            "{all}"
        );
        assert!(
            all.contains("are IdentifierFromProvider in the built-in"),
            "{all}"
        );
        assert!(all.contains("spec.forProvider.location"), "{all}");
    }

    #[test]
    fn empty_file_is_the_empty_config() {
        let c = Config::from_yaml("").unwrap();
        assert_eq!(c.provider_config.default_name, "default");
        assert!(c.resources.is_empty());
    }

    #[test]
    fn min_poll_interval_is_a_go_duration_defaulting_to_zero() {
        // A provider's minimum is 0 unless it opts in (WithMinPollInterval).
        assert_eq!(
            Config::from_yaml("").unwrap().min_poll_interval,
            GoDuration::ZERO
        );
        assert_eq!(Config::builtin().min_poll_interval, GoDuration::ZERO);
        let c = Config::from_yaml("minPollInterval: 1m30s\n").unwrap();
        assert_eq!(c.min_poll_interval, GoDuration(90 * 1_000_000_000));
        for zero in ["\"0\"", "0", "0s"] {
            assert_eq!(
                Config::from_yaml(&format!("minPollInterval: {zero}\n"))
                    .unwrap()
                    .min_poll_interval,
                GoDuration::ZERO,
                "{zero}"
            );
        }
        for (yaml, needle) in [
            ("minPollInterval: 5 minutes\n", "unknown unit \" minutes\""),
            ("minPollInterval: \"30\"\n", "missing unit"),
            ("minPollInterval: -1s\n", "negative"),
        ] {
            let e = Config::from_yaml(yaml).unwrap_err().to_string();
            assert!(
                e.starts_with("failed to validate config: minPollInterval: "),
                "{e}"
            );
            assert!(e.contains(needle), "{yaml}: {e}");
        }
        let e = Config::from_yaml("minPollInterval: 5 minutes\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("a Go duration"), "{e}");
    }
}

/// What `config check` refuses in `exceptions` and staged actions.
#[cfg(test)]
mod exception_tests {
    use super::*;

    const VPC: &str = "resources:\n  - apiGroups: ['ec2.aws.upbound.io']\n    kinds: [VPC]\n    immutableFields: [spec.forProvider.region]\n    celRules:\n      - {name: team, expression: 'true'}\n";

    fn with(exception: &str) -> Result<Config, ConfigError> {
        Config::from_yaml(&format!("{VPC}exceptions:\n  - {exception}\n"))
    }

    #[test]
    fn a_complete_exception_parses() {
        let c = with("{name: vpc-migration, rules: [immutable-field, 'cel:team'], match: {names: ['sample-*'], namespaces: [legacy], kinds: [ec2.aws.upbound.io/VPC], users: [alice@example.com]}, reason: NET-42, expires: '2027-01-31T00:00:00Z'}").unwrap();
        let e = &c.exceptions[0];
        assert_eq!(e.name, "vpc-migration");
        assert_eq!(e.expires.unwrap().to_string(), "2027-01-31T00:00:00Z");
        assert_eq!(
            c.expired_exceptions("2027-02-01T00:00:00Z".parse().unwrap())
                .len(),
            1
        );
        assert!(c
            .expired_exceptions("2027-01-01T00:00:00Z".parse().unwrap())
            .is_empty());
    }

    #[test]
    fn bad_exceptions_are_refused_naming_the_field() {
        let cases = [
            ("{name: x, rules: [immutable-field]}", "exceptions[0].reason"),
            ("{name: x, rules: [immutable-field], reason: '  '}", "has no reason"),
            ("{name: x, rules: [immutable-feld], reason: r}", "exceptions[0].rules[0]: unknown rule \"immutable-feld\""),
            ("{name: x, rules: ['cel:nope'], reason: r}", "unknown rule \"cel:nope\""),
            ("{name: x, rules: [], reason: r}", "exceptions[0].rules"),
            ("{name: x, rules: [reference], reason: r, match: {kinds: [s3.aws.upbound.io/Bucket]}}", "matches nothing the configuration covers"),
            ("{name: x, rules: ['cel:team'], reason: r, match: {kinds: ['ec2.aws.upbound.io/Sub*']}}", "no kind it matches has the CEL rule"),
            ("{name: x, rules: [reference], reason: r, match: {kinds: [VPC]}}", "must be group/Kind"),
            ("{name: x, rules: [reference], reason: r, expires: tomorrow}", "exceptions[0].expires"),
            ("{name: X_1, rules: [reference], reason: r}", "exceptions[0].name"),
            ("{name: x, rules: [reference], reason: r, match: {labels: [a]}}", "labels"),
        ];
        for (e, needle) in cases {
            let err = with(e).unwrap_err().to_string();
            assert!(err.contains(needle), "{e}: {err}");
        }
        let twice = Config::from_yaml("exceptions:\n  - {name: x, rules: [reference], reason: r}\n  - {name: x, rules: [reference], reason: r}\n")
            .unwrap_err()
            .to_string();
        assert!(twice.contains("defined twice"), "{twice}");
    }

    #[test]
    fn staged_actions_parse_and_bad_ones_are_refused() {
        let c = Config::from_yaml("rules:\n  immutable-field: {action: Deny, warnUntil: '2027-01-31T00:00:00Z'}\n  reference: Audit\n").unwrap();
        assert_eq!(
            c.rules["immutable-field"].warn_until.unwrap().to_string(),
            "2027-01-31T00:00:00Z"
        );
        assert_eq!(c.rules["reference"], RuleAction::from(Action::Audit));
        for (yaml, needle) in [
            (
                "rules: {immutable-field: {action: Warn, warnUntil: '2027-01-31T00:00:00Z'}}\n",
                "warnUntil stages a Deny",
            ),
            (
                "rules: {immutable-field: {action: Deny, warnUntil: soon}}\n",
                "not an RFC 3339 time",
            ),
            (
                "rules: {immutable-field: {action: Deny, until: '2027-01-31T00:00:00Z'}}\n",
                "until",
            ),
            (
                "rules: {immutable-field: {warnUntil: '2027-01-31T00:00:00Z'}}\n",
                "action",
            ),
            ("rules: {immutable-field: Enforce}\n", "Enforce"),
        ] {
            let err = Config::from_yaml(yaml).unwrap_err().to_string();
            assert!(err.contains(needle), "{yaml}: {err}");
        }
    }
}
