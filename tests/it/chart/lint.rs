//! `helm lint --strict` with the default values and with
//! tests/fixtures/values-ha-off.yaml.

use crate::support::helm::{chart, helm, ok, NS};

use super::ha_off;

#[test]
fn helm_lint_is_clean_with_both_values_files() {
    let chart = chart();
    let c = chart.to_str().unwrap();
    let ha_off = ha_off();
    for extra in [&[][..], &["-f", ha_off.as_str()][..]] {
        let mut args = vec!["lint", "--strict", c, "-n", NS];
        args.extend_from_slice(extra);
        let out = ok(&helm(&args), "helm lint");
        assert!(out.contains("0 chart(s) failed"), "{out}");
        assert!(
            !out.contains("[WARNING]") && !out.contains("[ERROR]"),
            "{out}"
        );
    }
}
