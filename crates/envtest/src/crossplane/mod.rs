//! Crossplane on the test API server: the package kinds' CRDs
//! ([`packages`]), and a real Crossplane ([`running`]): provider-kubernetes
//! and Crossplane core run as processes, built from their Go modules by
//! `scripts/crossplane.sh`.

pub mod packages;
pub mod running;

pub use packages::{install, PackageKind};
pub use running::{Crossplane, CrossplaneOptions, ObjectKinds};
