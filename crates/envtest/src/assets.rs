//! Where the API server's binaries are: the folder `KUBEBUILDER_ASSETS`
//! names (controller-runtime's envtest layout), which `scripts/envtest.sh`
//! builds. Read by the cluster that runs them and by the version check
//! that gates tests, neither of which uses the other for it.

use std::path::PathBuf;

/// Where the binaries come from (the controller-runtime envtest convention).
pub const ASSETS_ENV: &str = "KUBEBUILDER_ASSETS";

/// Where kube-apiserver and etcd are, when `KUBEBUILDER_ASSETS` names a
/// folder holding both.
pub fn assets() -> Result<PathBuf, String> {
    let dir = std::env::var_os(ASSETS_ENV)
        .filter(|d| !d.is_empty())
        .ok_or_else(|| format!("{ASSETS_ENV} is not set"))?;
    let dir = PathBuf::from(dir);
    for bin in ["kube-apiserver", "etcd"] {
        if !dir.join(bin).is_file() {
            return Err(format!("{ASSETS_ENV}={} has no {bin}", dir.display()));
        }
    }
    Ok(dir)
}
