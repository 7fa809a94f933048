//! The kinds a Composition composes, and which of them Crossplane v2 has
//! not activated: such a Composition fails at run time with "no matches
//! for kind" (docs/compositions.md, inactive kinds).

use serde_json::Value;

use crate::cluster::activation::Activations;

/// One composed resource's `base`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Composed {
    /// Its `name`, or `resources[i]`.
    pub name: String,
    /// Where its `base` is, as keys from the root (for the line).
    pub location: Vec<String>,
    /// `base.apiVersion`.
    pub api_version: String,
    /// `base.kind`.
    pub kind: String,
}

/// Every composed resource with a `base` apiVersion and kind: the legacy
/// `spec.resources`, and the resources of function-patch-and-transform
/// steps. Other functions' inputs are not read.
pub fn composed(composition: &Value) -> Vec<Composed> {
    let spec = &composition["spec"];
    let mut out = Vec::new();
    let mut read = |body: &Value, at: Vec<String>| {
        for (i, r) in body["resources"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            let (Some(api), Some(kind)) =
                (r["base"]["apiVersion"].as_str(), r["base"]["kind"].as_str())
            else {
                continue;
            };
            let mut location = at.clone();
            location.extend(["resources".into(), i.to_string(), "base".into()]);
            out.push(Composed {
                name: r["name"]
                    .as_str()
                    .map_or_else(|| format!("resources[{i}]"), str::to_string),
                location,
                api_version: api.into(),
                kind: kind.into(),
            });
        }
    };
    read(spec, vec!["spec".into()]);
    for (i, step) in spec["pipeline"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let group = step["input"]["apiVersion"]
            .as_str()
            .and_then(|a| a.split_once('/'))
            .map_or("", |(g, _)| g);
        if group == super::PT_GROUP {
            read(
                &step["input"],
                vec![
                    "spec".into(),
                    "pipeline".into(),
                    i.to_string(),
                    "input".into(),
                ],
            );
        }
    }
    out
}

/// Each composed resource whose kind cannot be used yet, with why: its
/// MRD is inactive (or activated but not yet made a CRD).
pub fn inactive(composition: &Value, known: &Activations) -> Vec<(Composed, String)> {
    if known.is_empty() {
        return Vec::new();
    }
    composed(composition)
        .into_iter()
        .filter_map(|c| {
            let why = known.state_of(&c.api_version, &c.kind).problem()?;
            Some((
                c.clone(),
                format!("composed resource {:?}: {why}; Crossplane fails to compose it with \"no matches for kind\"", c.name),
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn inactive_composed_kinds_are_named() {
        let composition = json!({"apiVersion": "apiextensions.crossplane.io/v1", "kind": "Composition",
            "spec": {"mode": "Pipeline", "pipeline": [
                {"step": "pt", "functionRef": {"name": "function-patch-and-transform"},
                 "input": {"apiVersion": "pt.fn.crossplane.io/v1beta1", "kind": "Resources", "resources": [
                    {"name": "bucket", "base": {"apiVersion": "s3.aws.upbound.io/v1beta1", "kind": "Bucket"}},
                    {"name": "vpc", "base": {"apiVersion": "ec2.aws.upbound.io/v1beta1", "kind": "VPC"}},
                    {"name": "cm", "base": {"apiVersion": "v1", "kind": "ConfigMap"}}]}},
                {"step": "other", "functionRef": {"name": "function-go-templating"},
                 "input": {"apiVersion": "gotemplating.fn.crossplane.io/v1beta1", "kind": "GoTemplate"}}]}});
        let c = composed(&composition);
        assert_eq!(c.len(), 3);
        assert_eq!(
            c[0].location.join("."),
            "spec.pipeline.0.input.resources.0.base"
        );
        let mut known = Activations::default();
        assert!(inactive(&composition, &known).is_empty());
        for (plural, group, kind, state) in [
            ("buckets", "s3.aws.upbound.io", "Bucket", "Inactive"),
            ("vpcs", "ec2.aws.upbound.io", "VPC", "Active"),
        ] {
            known.add(&json!({"apiVersion": "apiextensions.crossplane.io/v1alpha1", "kind": "ManagedResourceDefinition",
                "metadata": {"name": format!("{plural}.{group}")},
                "spec": {"group": group, "names": {"kind": kind, "plural": plural}, "state": state}}));
        }
        let found = inactive(&composition, &known);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].0.name, "bucket");
        assert!(
            found[0]
                .1
                .contains("MRD buckets.s3.aws.upbound.io, which no MRAP activates"),
            "{}",
            found[0].1
        );
        let legacy = json!({"spec": {"resources": [{"base": {"apiVersion": "s3.aws.upbound.io/v1beta1", "kind": "Bucket"}}]}});
        assert_eq!(inactive(&legacy, &known)[0].0.name, "resources[0]");
    }
}
