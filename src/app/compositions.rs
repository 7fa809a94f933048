//! `mrguard check` on Compositions (docs/compositions.md): the XR schemas
//! read from `--crd`; [`mrguard_policy::commands::check::composition_report`] puts each
//! patch finding at the line of its `toFieldPath`.

use std::path::Path;

use mrguard_policy::cluster::composition::XrSchemas;

use super::manifests::{self, ManifestError};

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
