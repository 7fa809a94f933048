use super::{Rule, RuleContext, CU};
use crate::admission::model::{Action, Violation};

/// Judges Compositions, not MRs: the admission path for Compositions runs
/// `crate::cluster::composition`; this entry gives the rule its name, default action
/// and place in the configuration and docs/rules.md.
pub(super) struct CompositionImmutablePatch;

impl Rule for CompositionImmutablePatch {
    fn name(&self) -> &'static str {
        crate::cluster::composition::RULE
    }
    fn operations(&self) -> &'static [crate::admission::model::Operation] {
        CU
    }
    fn default_action(&self) -> Action {
        Action::Warn
    }
    fn summary(&self) -> &'static str {
        "A Composition patches an XR field into a field that is immutable for the composed kind: once created, every change of that XR field is a denied update that Crossplane retries forever (judged on Compositions; actions per composed kind)"
    }
    fn fix(&self) -> &'static str {
        "Make the XR field immutable in the XRD (self == oldSelf), patch into spec.initProvider, or keep the field out of patches"
    }
    fn check(&self, _ctx: &RuleContext<'_>) -> Vec<Violation> {
        vec![]
    }
}
