//! `mrguard explain` on composed MRs and XRs: which patches of the
//! Composition would be denied once the composed resources exist
//! (docs/compositions.md).

use serde_json::{json, Value};

use super::PatchFinding;
use crate::admission::config::Config;
use crate::admission::mr;

/// Annotation Crossplane sets on composed resources: the template's name.
const RESOURCE_NAME: &str = "crossplane.io/composition-resource-name";

/// The Composition's patches that concern one object.
pub struct Patches {
    composition: String,
    /// The composed resource's name in the Composition, for an MR.
    resource: Option<String>,
    findings: Vec<PatchFinding>,
    notes: Vec<String>,
}

/// The patches of `composition` into immutable fields that concern `obj`:
/// for an MR, those of its template (by the composition-resource-name
/// annotation, else by kind); for an XR, all.
pub fn patches(obj: &Value, composition: &Value, config: &Config) -> Patches {
    let a = super::analyse(composition, config, None);
    let is_mr = mr::is_managed(obj);
    let resource = is_mr
        .then(|| mr::Mr(obj).annotation(RESOURCE_NAME).map(str::to_string))
        .flatten();
    let api_version = obj["apiVersion"].as_str().unwrap_or("");
    let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
    let kind = obj["kind"].as_str().unwrap_or("");
    let findings = a
        .findings
        .into_iter()
        .filter(|f| {
            !is_mr
                || match &resource {
                    Some(r) => &f.resource == r,
                    None => f.group == group && f.kind == kind,
                }
        })
        .collect();
    Patches {
        composition: composition["metadata"]["name"]
            .as_str()
            .unwrap_or("")
            .to_string(),
        resource,
        findings,
        notes: a.notes,
    }
}

impl Patches {
    /// The text section.
    pub fn render_text(&self, label: &str) -> String {
        let of = match &self.resource {
            Some(r) => format!(", resource {r:?}"),
            None => String::new(),
        };
        let mut s = format!(
            "\nComposition {:?}{of}: patches into immutable fields of {label}\n",
            self.composition
        );
        if self.findings.is_empty() {
            s.push_str("  none: a change on the XR reaches no immutable field here\n");
        }
        for f in &self.findings {
            s.push_str(&format!("  - {}\n    fix: {}\n", f.message(), f.fix()));
        }
        for n in &self.notes {
            s.push_str(&format!("  note: {n}\n"));
        }
        s
    }

    /// The JSON section.
    pub fn to_json(&self) -> Value {
        json!({
            "name": self.composition,
            "resource": self.resource,
            "patches": self.findings.iter().map(|f| json!({
                "step": f.step,
                "resource": f.resource,
                "patch": f.patch.to_string(),
                "type": f.patch_type,
                "sources": f.sources,
                "target": f.target,
                "immutable": f.immutable,
                "message": f.message(),
                "fix": f.fix(),
            })).collect::<Vec<_>>(),
            "notes": self.notes,
        })
    }
}
