//! Progress of long commands (`audit`, `check --live`) on stderr: done of
//! total and the rate, drawn by indicatif, only for a person at a terminal.
//! Piped, redirected or `--quiet`, nothing is drawn, so scripts and CI logs
//! see exactly the output they saw before.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A progress bar that may be hidden; every method is a no-op then.
pub(crate) struct Progress(ProgressBar);

impl Progress {
    /// A bar over `total` items named `unit` (e.g. "manifests"), drawn on
    /// stderr when it is a terminal and `quiet` is false.
    pub(crate) fn new(total: u64, unit: &str, quiet: bool) -> Self {
        Self::to(total, unit, !quiet && std::io::stderr().is_terminal())
    }

    fn to(total: u64, unit: &str, shown: bool) -> Self {
        let target = if shown {
            ProgressDrawTarget::stderr()
        } else {
            ProgressDrawTarget::hidden()
        };
        let bar = ProgressBar::with_draw_target(Some(total), target);
        // The template is a constant; a bad one is a bug caught by the tests.
        let style = ProgressStyle::with_template(&format!(
            "{{spinner}} {{bar:30}} {{pos}}/{{len}} {unit} ({{per_sec}}, {{elapsed}}) {{msg}}"
        ))
        .unwrap_or_else(|_| ProgressStyle::default_bar());
        bar.set_style(style);
        bar.enable_steady_tick(std::time::Duration::from_millis(200));
        Self(bar)
    }

    /// Counts one item as done when the returned guard drops, however the
    /// work on it ends (a `continue`, an early return, an error).
    pub(crate) fn item(&self) -> impl Drop + '_ {
        Tick(&self.0)
    }

    /// What is being worked on now, after the counts.
    pub(crate) fn message(&self, msg: String) {
        self.0.set_message(msg);
    }

    /// Clears the bar before the command prints its result.
    pub(crate) fn finish(&self) {
        self.0.finish_and_clear();
    }

    #[cfg(test)]
    fn position(&self) -> u64 {
        self.0.position()
    }
}

struct Tick<'a>(&'a ProgressBar);

impl Drop for Tick<'_> {
    fn drop(&mut self) {
        self.0.inc(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_item_counts_once_however_its_work_ends() {
        let p = Progress::to(3, "manifests", false);
        for i in 0..3 {
            let _done = p.item();
            if i == 1 {
                continue;
            }
        }
        assert_eq!(p.position(), 3);
    }
}
