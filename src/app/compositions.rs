//! `mrguard check` on Compositions: the patches `mrguard_policy::composition`
//! finds, each at the line of its `toFieldPath` (docs/compositions.md).

use std::path::Path;

use mrguard_policy::composition::{self, XrSchemas};
use mrguard_policy::config::Config;
use mrguard_policy::model::Action;
use mrguard_policy::offline::identity;

use super::live::LiveFinding;
use super::manifests::{self, Manifest, ManifestError};

/// `Info`: the action of a finding the XRD already makes harmless.
pub(crate) const INFO: &str = "Info";

/// What `check` reports for one Composition.
pub(crate) struct Report {
    /// Findings in Composition order, with their lines.
    pub(crate) findings: Vec<LiveFinding>,
    /// What was skipped.
    pub(crate) notes: Vec<String>,
}

/// Whether `object` is a Composition.
pub(crate) fn is_composition(object: &serde_json::Value) -> bool {
    let (api_version, kind, _, _) = identity(object);
    let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
    composition::is_composition(group, &kind)
}

/// The XR schemas in every file under `path`: XRDs, and the CRDs
/// Crossplane generates from them.
pub(crate) fn xr_schemas_in(path: &Path, max_documents: usize) -> Result<XrSchemas, ManifestError> {
    let mut xrs = XrSchemas::default();
    for f in manifests::files(path)? {
        let text = manifests::read_text(&f)?;
        // Files without objects are the CRD loader's to report.
        if let Ok(docs) = manifests::parse(&f.display().to_string(), &text, max_documents) {
            for d in docs {
                xrs.add(&d.object);
            }
        }
    }
    Ok(xrs)
}

/// The report for `m`, or `None` when it is not a Composition.
pub(crate) fn report(m: &Manifest, config: &Config, xrs: &XrSchemas) -> Option<Report> {
    if !is_composition(&m.object) {
        return None;
    }
    let xrs = (!xrs.is_empty()).then_some(xrs);
    let analysis = composition::analyse(&m.object, config, xrs);
    let findings = analysis
        .findings
        .iter()
        .filter_map(|f| {
            let action = if f.informational {
                INFO
            } else {
                match config.action(
                    config.resource(&f.group, &f.kind),
                    composition::RULE,
                    Action::Warn,
                ) {
                    Action::Off => return None,
                    a => a.as_str(),
                }
            };
            let mut at = f.location.clone();
            at.push("toFieldPath".into());
            Some(LiveFinding {
                rule: composition::RULE.into(),
                action: action.into(),
                message: format!("{}. Fix: {}", f.message(), f.fix()),
                field: Some(f.target.clone()),
                line: m.lines.line_of(&at),
            })
        })
        .collect();
    Some(Report {
        findings,
        notes: analysis.notes,
    })
}
