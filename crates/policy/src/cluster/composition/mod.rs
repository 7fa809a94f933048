//! Compositions, read for patches that will be denied (docs/compositions.md).
//!
//! A Composition patches fields of a composite resource (XR) into the
//! managed resources (MRs) it composes. A patch whose target is an
//! immutable field of the composed kind (the configuration's
//! `immutableFields`) turns every later change of the XR's source field into
//! an update that `immutable-field` denies, and that Crossplane retries
//! forever. [`analyse`] finds such patches in Pipeline-mode Compositions
//! whose steps use function-patch-and-transform's `Resources` input, and in
//! the legacy `mode: Resources` (`spec.resources`).
//!
//! What it cannot read (other functions, unknown patch types, a missing
//! patch set) becomes a note, never an error: a Composition is still valid
//! for Crossplane when mrguard does not understand all of it.

mod composed;
mod explain;
mod paths;
mod xr;

use serde_json::Value;

pub use composed::{composed, inactive, Composed};
pub use explain::{patches, Patches};

use crate::admission::config::Config;
use crate::admission::judging::Judging;
use crate::admission::model::{Action, Finding, Violation};

pub use xr::{XrIndex, XrSchemas};

/// The API group of Compositions.
pub const GROUP: &str = "apiextensions.crossplane.io";
/// The kind this module reads.
pub const KIND: &str = "Composition";
/// The rule name of its findings (docs/rules.md).
pub const RULE: &str = "composition-immutable-patch";

/// function-patch-and-transform's input group.
const PT_GROUP: &str = "pt.fn.crossplane.io";

/// Whether `group`/`kind` names a Composition.
pub fn is_composition(group: &str, kind: &str) -> bool {
    group == GROUP && kind == KIND
}

/// Which patch of a resource a finding is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PatchRef {
    /// `patches[index]` of the resource.
    Direct {
        /// Its index in the resource's patches.
        index: usize,
    },
    /// `patches[index]` of a patch set that the resource's `patches[via]` references.
    PatchSet {
        /// The patch set's name.
        name: String,
        /// The patch's index in the patch set.
        index: usize,
        /// The index of the `PatchSet` patch in the resource's patches.
        via: usize,
    },
}

impl std::fmt::Display for PatchRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PatchRef::Direct { index } => write!(f, "patches[{index}]"),
            PatchRef::PatchSet { name, index, via } => {
                write!(
                    f,
                    "patch set {name:?} patches[{index}] (via patches[{via}])"
                )
            }
        }
    }
}

/// One patch into an immutable field of a composed resource.
#[derive(Debug, Clone, PartialEq)]
pub struct PatchFinding {
    /// The pipeline step, or `None` in `mode: Resources`.
    pub step: Option<String>,
    /// The composed resource's name in the Composition.
    pub resource: String,
    /// The composed resource's API group.
    pub group: String,
    /// The composed resource's kind.
    pub kind: String,
    /// Which patch.
    pub patch: PatchRef,
    /// The patch type, e.g. `FromCompositeFieldPath`.
    pub patch_type: String,
    /// The fields the value comes from: XR field paths, or
    /// `environment.<path>` for environment patches.
    pub sources: Vec<String>,
    /// The `toFieldPath` on the composed resource.
    pub target: String,
    /// The configured immutable field the target reaches.
    pub immutable: String,
    /// The XRD already makes every source immutable: the claim itself
    /// refuses the change, so this is for information only.
    pub informational: bool,
    /// Keys from the Composition's root to the patch, to find its line.
    pub location: Vec<String>,
}

impl PatchFinding {
    /// Where it is: step, resource and patch.
    pub fn place(&self) -> String {
        match &self.step {
            Some(s) => format!("step {s:?}, resource {:?}, {}", self.resource, self.patch),
            None => format!("resource {:?}, {}", self.resource, self.patch),
        }
    }

    /// What is wrong and why, in one line.
    pub fn message(&self) -> String {
        let why = if self.target == self.immutable {
            format!("{} is immutable", self.target)
        } else {
            format!("it writes immutable {}", self.immutable)
        };
        let then = if self.informational {
            "; the XRD makes the source immutable, so the claim refuses a change first".to_string()
        } else {
            format!(
                "; after creation a change of {} is denied on every {}",
                self.sources.join(", "),
                self.kind
            )
        };
        format!(
            "{}: {} {} -> {}: {why} for {}.{} (immutableFields){then}",
            self.place(),
            self.patch_type,
            self.sources.join(", "),
            self.target,
            self.kind,
            self.group,
        )
    }

    /// The fix for this case.
    pub fn fix(&self) -> String {
        let mut fixes = Vec::new();
        let xr: Vec<&String> = self
            .sources
            .iter()
            .filter(|s| !s.starts_with("environment."))
            .collect();
        if !xr.is_empty() && !self.informational {
            fixes.push(format!(
                "make {} immutable in the XRD (x-kubernetes-validations: [{{rule: \"self == oldSelf\"}}])",
                xr.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
            ));
        }
        if let Some(init) = paths::keys(&self.target)
            .as_deref()
            .and_then(paths::init_provider_equivalent)
        {
            fixes.push(format!(
                "patch into {init} instead if the kind has it (read only at creation)"
            ));
        }
        fixes.push(format!("keep {} out of patches", self.target));
        let last = fixes.pop().unwrap_or_default();
        if fixes.is_empty() {
            last
        } else {
            format!("{}, or {last}", fixes.join(", "))
        }
    }
}

/// What [`analyse`] found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Analysis {
    /// Patches into immutable fields, in Composition order.
    pub findings: Vec<PatchFinding>,
    /// What was skipped and why.
    pub notes: Vec<String>,
}

/// Finds the patches of `composition` that write fields the configuration
/// makes immutable for the composed kind. With `xrs`, a patch whose every
/// source the XR's schema makes immutable is marked informational.
pub fn analyse(composition: &Value, config: &Config, xrs: Option<&XrSchemas>) -> Analysis {
    let mut a = Analysis::default();
    let spec = &composition["spec"];
    let xr_api = spec["compositeTypeRef"]["apiVersion"]
        .as_str()
        .unwrap_or("");
    let xr_kind = spec["compositeTypeRef"]["kind"].as_str().unwrap_or("");
    let frozen = |sources: &[String]| match xrs {
        Some(x) if !sources.is_empty() => sources
            .iter()
            .all(|s| paths::keys(s).is_some_and(|k| x.is_immutable(xr_api, xr_kind, &k))),
        _ => false,
    };
    if let Some(x) = xrs.filter(|x| !x.knows(xr_api, xr_kind)) {
        if !x.is_empty() {
            a.notes.push(format!(
                "no XRD or CRD given for {xr_kind} {xr_api}: every finding assumes its fields can change"
            ));
        }
    }
    let mode = spec["mode"].as_str();
    let legacy = mode == Some("Resources") || (mode.is_none() && spec.get("resources").is_some());
    if legacy {
        let input = Input {
            step: None,
            body: spec,
            at: vec!["spec".into()],
            config,
            frozen: &frozen,
        };
        input.analyse(&mut a);
        return a;
    }
    for (i, s) in spec["pipeline"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let step = s["step"].as_str().unwrap_or("").to_string();
        let function = s["functionRef"]["name"].as_str().unwrap_or("");
        let api = s["input"]["apiVersion"].as_str().unwrap_or("");
        let kind = s["input"]["kind"].as_str().unwrap_or("");
        let group = api.split('/').next().unwrap_or("");
        if group != PT_GROUP || kind != "Resources" {
            a.notes.push(format!(
                "step {step:?} (function {function:?}) skipped: mrguard reads only function-patch-and-transform's Resources input, and {}",
                if kind.is_empty() { "this step has none".to_string() } else { format!("this one is {kind} {api}") }
            ));
            continue;
        }
        let input = Input {
            step: Some(step),
            body: &s["input"],
            at: vec![
                "spec".into(),
                "pipeline".into(),
                i.to_string(),
                "input".into(),
            ],
            config,
            frozen: &frozen,
        };
        input.analyse(&mut a);
    }
    a
}

/// One set of `resources` and `patchSets`: a step's input, or the legacy
/// spec, with what its patches are read against.
struct Input<'a> {
    step: Option<String>,
    body: &'a Value,
    at: Vec<String>,
    config: &'a Config,
    /// Whether the XR's schema makes every one of these sources immutable.
    frozen: &'a dyn Fn(&[String]) -> bool,
}

impl Input<'_> {
    fn place(&self) -> String {
        match &self.step {
            Some(s) => format!("step {s:?}"),
            None => "spec.resources".into(),
        }
    }

    fn analyse(&self, a: &mut Analysis) {
        let config = self.config;
        let sets = self.body["patchSets"].as_array();
        for (ri, r) in self.body["resources"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            let name = r["name"]
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| format!("resources[{ri}]"));
            let api = r["base"]["apiVersion"].as_str().unwrap_or("");
            let kind = r["base"]["kind"].as_str().unwrap_or("");
            let group = api.rsplit_once('/').map_or("", |(g, _)| g);
            let immutable = &config.resource(group, kind).immutable_fields;
            if immutable.is_empty() {
                continue;
            }
            let mut at = self.at.clone();
            at.extend(["resources".into(), ri.to_string(), "patches".into()]);
            let patches = r["patches"].as_array().into_iter().flatten().enumerate();
            for (pi, p) in patches {
                let ty = p["type"].as_str().unwrap_or("FromCompositeFieldPath");
                if ty != "PatchSet" {
                    let mut loc = at.clone();
                    loc.push(pi.to_string());
                    let patch = PatchRef::Direct { index: pi };
                    self.patch(p, patch, loc, (&name, group, kind), a);
                    continue;
                }
                let set_name = p["patchSetName"].as_str().unwrap_or("");
                let set = sets
                    .into_iter()
                    .flatten()
                    .enumerate()
                    .find(|(_, s)| s["name"].as_str() == Some(set_name));
                let Some((si, set)) = set else {
                    a.notes.push(format!(
                        "{}, resource {name:?}, patches[{pi}]: patch set {set_name:?} is not defined",
                        self.place()
                    ));
                    continue;
                };
                for (j, sp) in set["patches"].as_array().into_iter().flatten().enumerate() {
                    let mut loc = self.at.clone();
                    loc.extend([
                        "patchSets".into(),
                        si.to_string(),
                        "patches".into(),
                        j.to_string(),
                    ]);
                    let patch = PatchRef::PatchSet {
                        name: set_name.to_string(),
                        index: j,
                        via: pi,
                    };
                    self.patch(sp, patch, loc, (&name, group, kind), a);
                }
            }
        }
    }

    fn patch(
        &self,
        p: &Value,
        patch: PatchRef,
        location: Vec<String>,
        (resource, group, kind): (&str, &str, &str),
        a: &mut Analysis,
    ) {
        let (config, frozen) = (self.config, self.frozen);
        let ty = p["type"].as_str().unwrap_or("FromCompositeFieldPath");
        let from = p["fromFieldPath"].as_str();
        let vars = || -> Vec<String> {
            p["combine"]["variables"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|v| v["fromFieldPath"].as_str().map(str::to_string))
                .collect()
        };
        let (sources, target): (Vec<String>, Option<&str>) = match ty {
            "FromCompositeFieldPath" => (
                from.map(str::to_string).into_iter().collect(),
                p["toFieldPath"].as_str().or(from),
            ),
            "FromEnvironmentFieldPath" => (
                from.map(|f| format!("environment.{f}"))
                    .into_iter()
                    .collect(),
                p["toFieldPath"].as_str().or(from),
            ),
            "CombineFromComposite" => (vars(), p["toFieldPath"].as_str()),
            "CombineFromEnvironment" => (
                vars()
                    .into_iter()
                    .map(|v| format!("environment.{v}"))
                    .collect(),
                p["toFieldPath"].as_str(),
            ),
            // They write the XR or the environment, not the composed resource.
            "ToCompositeFieldPath"
            | "CombineToComposite"
            | "ToEnvironmentFieldPath"
            | "CombineToEnvironment" => return,
            other => {
                a.notes.push(format!(
                    "{}, resource {resource:?}, {patch}: patch type {other:?} skipped: mrguard does not know it",
                    self.place()
                ));
                return;
            }
        };
        let Some(target) = target else { return };
        let Some(keys) = paths::keys(target) else {
            a.notes.push(format!(
                "{}, resource {resource:?}, {patch}: toFieldPath {target:?} skipped: not a field path",
                self.place()
            ));
            return;
        };
        let immutable = config
            .resource(group, kind)
            .immutable_fields
            .iter()
            .find(|f| paths::reaches(&keys, f));
        let Some(immutable) = immutable else { return };
        a.findings.push(PatchFinding {
            step: self.step.clone(),
            resource: resource.to_string(),
            group: group.to_string(),
            kind: kind.to_string(),
            patch,
            patch_type: ty.to_string(),
            informational: frozen(&sources),
            sources,
            target: target.to_string(),
            immutable: immutable.as_str().to_string(),
            location,
        });
    }
}

/// The findings as rule findings, each with its composed kind's action
/// (`rules` of the kind's `resources` entry, else the global one, else
/// Warn) staged and waived as every rule's ([`Judging::decide`]), against
/// the Composition in `judging`; informational and Off findings are left
/// out.
pub(crate) fn judge(analysis: &Analysis, judging: &Judging<'_>) -> Vec<Finding> {
    let config = judging.config;
    analysis
        .findings
        .iter()
        .filter(|f| !f.informational)
        .filter_map(|f| {
            let entry = config.resource(&f.group, &f.kind);
            let configured = config.rule_action(entry, RULE, Action::Warn);
            let violation = Violation {
                message: f.message(),
                fix: Some(f.fix()),
                warn_only: false,
            };
            judging.decide(RULE.into(), configured, violation)
        })
        .collect()
}

#[cfg(test)]
mod tests;
