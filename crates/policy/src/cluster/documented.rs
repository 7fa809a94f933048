//! Immutable fields as the providers document them (docs/documented-immutables.md).
//!
//! Upjet copies the Terraform documentation into each CRD's field
//! descriptions, and that documentation says which arguments force a new
//! resource: "Changing this forces a new resource to be created." [`derive`]
//! reads one CRD (as JSON) and returns every field under `spec.forProvider`
//! whose description matches one of [`PATTERNS`], with the sentence that
//! matched and its condition when the sentence has one. [`Documented`] keeps
//! the result per kind for admission, behind its own lock, so a CRD watch can
//! update one kind while requests read the others.
//!
//! Pure: no I/O. The controller feeds it the CRDs it watches, `mrguard check
//! --crd` and `mrguard crd immutables` the files they are given.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, OnceLock, RwLock};

use regex::Regex;
use serde::Serialize;
use serde_json::Value;

use crate::admission::fieldpath::FieldPath;

/// One documented wording that says a change replaces the resource.
#[derive(Debug)]
pub struct Pattern {
    /// A short stable name, shown with each derived field.
    pub name: &'static str,
    /// The regular expression (case-insensitive) matched against one sentence.
    pub regex: &'static str,
    /// A real sentence it matches, from the family named (tested).
    pub example: &'static str,
}

/// The wordings, collected from provider-upjet-azure, -aws and -gcp
/// (docs/documented-immutables.md lists where each comes from and the
/// measured precision). Order matters only for which name a sentence gets.
pub const PATTERNS: &[Pattern] = &[
    Pattern {
        name: "forces-new",
        regex: r"\bforces? (?:a |the )?new\b",
        example: "Changing this forces a new Storage Account to be created.",
    },
    Pattern {
        name: "recreation",
        regex: r"\b(?:forces?|triggers?|causes?|cause|will show as) (?:a |the )?(?:resource |vm |instance )?recreation\b",
        example: "Disabling enable_primary_ipv6 after it has been enabled forces recreation of the instance.",
    },
    Pattern {
        name: "replacement",
        regex: r"\b(?:forces?|causes?|requires?|triggers?) (?:a |the )?(?:resource )?replacement\b",
        example: "Changing to a lower version forces resource replacement (destroy and recreate).",
    },
    Pattern {
        name: "recreates",
        regex: r"\b(?:will recreate|recreates) the\b|\bto recreate\.?$|\bto be recreated\b|\bdestroy(?:/| and )recreate\b",
        example: "If the VPC attachment is pending acceptance, changing this value will recreate the resource.",
    },
    Pattern {
        name: "immutable",
        regex: r"^\(?immutable[.)]?$|\b(?:field|value|property|argument) is immutable\b",
        example: "Immutable.",
    },
    Pattern {
        name: "cannot-change",
        regex: r"\bcannot be (?:changed|updated|modified) (?:after|once)\b|^cannot be (?:changed|updated)\.?$|\bonce set, (?:this|it) cannot be (?:changed|updated)\b",
        example: "This field cannot be changed after creation.",
    },
];

/// Words that make a matched sentence conditional: the change replaces the
/// resource only in some cases. The condition is quoted from here on.
const CONDITION: &str = r"\b(?:when|if|unless|except|only for|for|from|between|while|decreas\w*|increas\w*|lower\w*|downgrad\w*|upgrad\w*|disabl\w*|enabl\w*|unsett\w*|remov\w*|adding|add|other)\b|\bwith an? [\w.]+ ?[<>]";

/// Phrases with a condition word that are not a condition.
const NOT_A_CONDITION: &str = r"\bwhen (?:mutated|changed|modified|updated)\b|\bfor this\b|\bfor (?:the|a) new\b|\bif (?:it is|it's|this is) (?:changed|modified|updated)\b|\bexcept this one\b";

/// Wordings that say a change does NOT replace the resource; a sentence
/// with one of these is conditional as a whole.
const NEGATED: &str = r"\b(?:does not|do not|doesn't|will not|without) (?:\w+ ){0,2}(?:force|forces|replace|recreat\w*)\b";

/// Sentences that match a pattern but do not say that changing the field
/// replaces the resource: a flag that makes OTHER changes replace it, a
/// "new deployment" that is not a new resource, a hint about tainting.
const NOT_REPLACEMENT: &str = r"\bwhen used in combination with\b|\bnew (?:task )?deployment of\b|\bto force (?:a |the )?(?:resource )?recreation\b";

/// The standard `apiVersion`/`kind` boilerplate says "Cannot be updated." of
/// the object's own kind; it is never a field rule.
const BOILERPLATE: &str = r"^\s*(?:kind is a string value representing the rest resource|apiversion defines the versioned schema)|servers may infer this from the endpoint the client submits requests to";

struct Compiled {
    patterns: Vec<(&'static str, Regex)>,
    condition: Regex,
    not_a_condition: Regex,
    negated: Regex,
    not_replacement: Regex,
    boilerplate: Regex,
}

fn compiled() -> &'static Compiled {
    static C: OnceLock<Compiled> = OnceLock::new();
    C.get_or_init(|| {
        let re = |s: &str| {
            regex::RegexBuilder::new(s)
                .case_insensitive(true)
                .build()
                .expect("the built-in patterns compile (tested)")
        };
        Compiled {
            patterns: PATTERNS.iter().map(|p| (p.name, re(p.regex))).collect(),
            condition: re(CONDITION),
            not_a_condition: re(NOT_A_CONDITION),
            negated: re(NEGATED),
            not_replacement: re(NOT_REPLACEMENT),
            boilerplate: re(BOILERPLATE),
        }
    })
}

/// What one description says about replacement, when it says it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Source {
    /// The sentence that matched, whitespace normalised.
    pub sentence: String,
    /// The case in which a change replaces the resource, quoted from the
    /// sentence; `None` when every change does.
    pub condition: Option<String>,
    /// The name of the [`Pattern`] that matched.
    pub pattern: &'static str,
}

/// The sentences of a description, with whitespace normalised. A leading
/// parenthetical such as "(Forces new resource)" is a sentence of its own.
pub fn sentences(description: &str) -> Vec<String> {
    let text = description.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut out = Vec::new();
    let mut start = 0;
    let bytes = text.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        let ends = matches!(b, b'.' | b'!' | b'?')
            && bytes.get(i + 1) == Some(&b' ')
            && bytes
                .get(i + 2)
                .is_some_and(|c| c.is_ascii_uppercase() || matches!(c, b'(' | b'~' | b'*'));
        if ends {
            out.push(text[start..=i].trim().to_string());
            start = i + 2;
        }
    }
    if start < text.len() {
        out.push(text[start..].trim().to_string());
    }
    let mut split = Vec::with_capacity(out.len());
    for s in out {
        match s.strip_prefix('(').and_then(|rest| rest.find(')')) {
            Some(close) if close + 2 < s.len() => {
                split.push(s[..close + 2].to_string());
                split.push(s[close + 2..].trim().to_string());
            }
            _ => split.push(s),
        }
    }
    split.retain(|s| !s.is_empty());
    split
}

/// The first sentence of `description` that says a change replaces the
/// resource, with its condition.
pub fn match_description(description: &str) -> Option<Source> {
    let c = compiled();
    if c.boilerplate.is_match(description) {
        return None;
    }
    for sentence in sentences(description) {
        if c.not_replacement.is_match(&sentence) {
            continue;
        }
        let Some((name, m)) = c
            .patterns
            .iter()
            .find_map(|(n, re)| re.find(&sentence).map(|m| (*n, m)))
        else {
            continue;
        };
        let condition = condition_of(&sentence, m.start());
        return Some(Source {
            sentence,
            condition,
            pattern: name,
        });
    }
    None
}

fn condition_of(sentence: &str, match_start: usize) -> Option<String> {
    let c = compiled();
    let trim = |s: &str| {
        let s = s.trim().trim_end_matches(['.', ')', ',']).trim();
        let s = s
            .strip_suffix(" will")
            .or_else(|| s.strip_suffix(" would"))
            .unwrap_or(s);
        s.trim_start_matches('(').trim().to_string()
    };
    if c.negated.is_match(sentence) {
        return Some(trim(sentence));
    }
    let real = |m: &regex::Match<'_>| {
        !c.not_a_condition
            .find_iter(sentence)
            .any(|n| n.start() <= m.start() && m.end() <= n.end())
    };
    let words: Vec<regex::Match<'_>> = c.condition.find_iter(sentence).filter(real).collect();
    let prefix = &sentence[..match_start];
    // "If …, changing this forces …", "Disabling … forces …": a sentence
    // that opens with the condition; it runs to the first comma.
    if words
        .first()
        .is_some_and(|w| w.start() == 0 && w.start() < match_start)
    {
        let end = prefix.find(',').unwrap_or(prefix.len());
        return Some(trim(&prefix[..end]));
    }
    // "Changing to a lower version forces …": a condition in the clause of
    // the match (earlier clauses say other things).
    let clause_start = prefix.rfind([',', ';']).map_or(0, |i| i + 1);
    if words
        .iter()
        .any(|w| w.start() >= clause_start && w.start() < match_start)
    {
        return Some(trim(&prefix[clause_start..]));
    }
    // "… forces a new resource to be created when types … change".
    words
        .iter()
        .find(|w| w.start() >= match_start)
        .map(|w| trim(&sentence[w.start()..]))
}

/// One field that the documentation says cannot change in place.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DocumentedField {
    /// The field, in mrguard's field-path syntax, e.g.
    /// `spec.forProvider.network[*].subnetId`.
    #[serde(serialize_with = "as_str")]
    pub path: FieldPath,
    /// The sentence and its condition.
    #[serde(flatten)]
    pub source: Source,
    /// The served versions whose schema documents it so.
    pub versions: Vec<String>,
}

fn as_str<S: serde::Serializer>(p: &FieldPath, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(p.as_str())
}

/// Everything derived from one CRD.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KindFields {
    /// The CRD's name.
    pub crd: String,
    /// `spec.group`.
    pub group: String,
    /// `spec.names.kind`.
    pub kind: String,
    /// The fields, in path order.
    pub fields: Vec<DocumentedField>,
}

impl KindFields {
    /// The fields documented in served version `version`.
    pub fn in_version<'a>(&'a self, version: &'a str) -> impl Iterator<Item = &'a DocumentedField> {
        self.fields
            .iter()
            .filter(move |f| f.versions.iter().any(|v| v == version))
    }
}

/// Derives the documented-immutable fields of one CRD (a
/// `CustomResourceDefinition` as JSON, or a Crossplane
/// ManagedResourceDefinition, whose spec is the CRD's). `None` when `crd` is not a CRD with
/// a group and kind; an MR CRD without such sentences gives no fields.
pub fn derive(crd: &Value) -> Option<KindFields> {
    // An MRD's spec is its CRD's, before activation creates the CRD.
    let mrd = crd.get("kind").and_then(Value::as_str) == Some("ManagedResourceDefinition")
        && crd
            .get("apiVersion")
            .and_then(Value::as_str)
            .is_some_and(|a| a.starts_with("apiextensions.crossplane.io/"));
    if crd.get("kind").and_then(Value::as_str) != Some("CustomResourceDefinition") && !mrd {
        return None;
    }
    let s = |p: &str| crd.pointer(p).and_then(Value::as_str).unwrap_or("");
    let (group, kind) = (s("/spec/group"), s("/spec/names/kind"));
    if group.is_empty() || kind.is_empty() {
        return None;
    }
    let mut by_path: BTreeMap<String, DocumentedField> = BTreeMap::new();
    for v in crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if v.get("served").and_then(Value::as_bool) == Some(false) {
            continue;
        }
        let version = v.get("name").and_then(Value::as_str).unwrap_or("");
        let Some(fp) = v.pointer("/schema/openAPIV3Schema/properties/spec/properties/forProvider")
        else {
            continue;
        };
        let mut found = Vec::new();
        walk(fp, "spec.forProvider".to_string(), &mut found, 0);
        for (path, source) in found {
            match by_path.get_mut(&path) {
                Some(f) => f.versions.push(version.to_string()),
                None => {
                    let Ok(parsed) = FieldPath::parse(&path) else {
                        continue;
                    };
                    by_path.insert(
                        path,
                        DocumentedField {
                            path: parsed,
                            source,
                            versions: vec![version.to_string()],
                        },
                    );
                }
            }
        }
    }
    Some(KindFields {
        crd: s("/metadata/name").to_string(),
        group: group.to_string(),
        kind: kind.to_string(),
        fields: by_path.into_values().collect(),
    })
}

/// Schemas nest at most this deep here (the API server's own limit is
/// higher; real MR schemas stay far below it).
const MAX_DEPTH: usize = 64;

fn walk(schema: &Value, path: String, out: &mut Vec<(String, Source)>, depth: usize) {
    if depth > MAX_DEPTH {
        return;
    }
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        for (name, sub) in props {
            let p = if name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            {
                format!("{path}.{name}")
            } else {
                format!("{path}[{name}]")
            };
            if let Some(src) = sub
                .get("description")
                .and_then(Value::as_str)
                .and_then(match_description)
            {
                out.push((p.clone(), src));
            }
            walk(sub, p, out, depth + 1);
        }
    }
    if let Some(items) = schema.get("items").filter(|i| i.is_object()) {
        walk(items, format!("{path}[*]"), out, depth + 1);
    }
}

/// The documented-immutable fields of every kind the cluster serves, kept
/// current by a CRD watch. A read takes the read lock, finds the kind
/// without allocating (group, then kind) and clones an `Arc`.
#[derive(Debug, Default)]
pub struct Documented {
    kinds: RwLock<Kinds>,
}

/// Group → kind → fields.
type Kinds = HashMap<String, HashMap<String, Arc<KindFields>>>;

impl Documented {
    /// The fields of `group`/`kind`, if any were derived.
    pub fn get(&self, group: &str, kind: &str) -> Option<Arc<KindFields>> {
        let kinds = self.kinds.read().unwrap_or_else(|e| e.into_inner());
        kinds.get(group)?.get(kind).cloned()
    }

    /// Derives from `crd` and stores the result (replacing the kind's
    /// previous fields); a CRD without documented fields removes the kind.
    /// Returns the number of fields stored.
    pub fn apply(&self, crd: &Value) -> usize {
        let Some(k) = derive(crd) else { return 0 };
        self.set(k)
    }

    /// Stores `k`, replacing its kind's previous fields.
    pub fn set(&self, k: KindFields) -> usize {
        let n = k.fields.len();
        let mut kinds = self.kinds.write().unwrap_or_else(|e| e.into_inner());
        if n == 0 {
            forget(&mut kinds, &k.group, &k.kind);
        } else {
            kinds
                .entry(k.group.clone())
                .or_default()
                .insert(k.kind.clone(), Arc::new(k));
        }
        n
    }

    /// Forgets the kind that `crd` defines (the CRD was deleted).
    pub fn remove(&self, crd: &Value) {
        let s = |p: &str| crd.pointer(p).and_then(Value::as_str).unwrap_or("");
        let mut kinds = self.kinds.write().unwrap_or_else(|e| e.into_inner());
        forget(&mut kinds, s("/spec/group"), s("/spec/names/kind"));
    }

    /// Replaces everything with what `crds` give (a full relist).
    pub fn replace_all<'a>(&self, crds: impl IntoIterator<Item = &'a Value>) {
        self.replace_with(crds.into_iter().filter_map(derive));
    }

    /// Replaces everything with `kinds`, derived already.
    pub fn replace_with(&self, kinds: impl IntoIterator<Item = KindFields>) {
        let mut fresh = Kinds::new();
        for k in kinds.into_iter().filter(|k| !k.fields.is_empty()) {
            fresh
                .entry(k.group.clone())
                .or_default()
                .insert(k.kind.clone(), Arc::new(k));
        }
        *self.kinds.write().unwrap_or_else(|e| e.into_inner()) = fresh;
    }

    /// Replaces everything with `kinds`, shared with whoever derived them
    /// (the runtime's CRD store keeps the same `Arc`s, not a copy).
    pub fn replace_with_shared(&self, kinds: impl IntoIterator<Item = Arc<KindFields>>) {
        let mut fresh = Kinds::new();
        for k in kinds.into_iter().filter(|k| !k.fields.is_empty()) {
            fresh
                .entry(k.group.clone())
                .or_default()
                .insert(k.kind.clone(), k);
        }
        *self.kinds.write().unwrap_or_else(|e| e.into_inner()) = fresh;
    }

    /// How many kinds and fields are known.
    pub fn counts(&self) -> (usize, usize) {
        let kinds = self.kinds.read().unwrap_or_else(|e| e.into_inner());
        let all = || kinds.values().flat_map(HashMap::values);
        (all().count(), all().map(|k| k.fields.len()).sum())
    }
}

fn forget(kinds: &mut Kinds, group: &str, kind: &str) {
    if let Some(g) = kinds.get_mut(group) {
        g.remove(kind);
        if g.is_empty() {
            kinds.remove(group);
        }
    }
}

#[cfg(test)]
mod tests;
