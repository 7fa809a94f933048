//! Shell completions and the man page, both generated from the clap
//! definition so they can never disagree with the parser.

use std::io::Write;

use clap::Args;

#[derive(Debug, Args)]
pub struct CompletionArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub(crate) shell: clap_complete::Shell,
}

/// Writes the completion script of `cmd` (the whole command line) for
/// the chosen shell to stdout.
pub(crate) fn completion(args: &CompletionArgs, mut cmd: clap::Command) -> i32 {
    clap_complete::generate(args.shell, &mut cmd, "mrguard", &mut std::io::stdout());
    0
}

/// Writes the man page, mrguard(1), in roff to stdout, with a section per
/// subcommand.
pub(crate) fn man(cmd: clap::Command) -> i32 {
    match render_man(cmd) {
        Ok(page) => match std::io::stdout().write_all(&page) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("mrguard man: failed to write the man page: {e}");
                1
            }
        },
        Err(e) => {
            eprintln!("mrguard man: failed to render the man page: {e}");
            1
        }
    }
}

pub(crate) fn render_man(mut cmd: clap::Command) -> std::io::Result<Vec<u8>> {
    cmd.build();
    let mut page = Vec::new();
    let man = clap_mangen::Man::new(cmd.clone());
    man.render_title(&mut page)?;
    man.render_name_section(&mut page)?;
    man.render_synopsis_section(&mut page)?;
    man.render_description_section(&mut page)?;
    man.render_options_section(&mut page)?;
    render_subcommands(&cmd, "mrguard", &mut page)?;
    man.render_version_section(&mut page)?;
    Ok(page)
}

/// One `.SH` section per leaf command, with its usage, about text and
/// options, so that `man mrguard` documents `mrguard check` as fully as
/// `mrguard check --help` does.
fn render_subcommands(cmd: &clap::Command, path: &str, out: &mut Vec<u8>) -> std::io::Result<()> {
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        if sub.get_name() == "help" {
            continue;
        }
        let here = format!("{path} {}", sub.get_name());
        if sub.has_subcommands() {
            render_subcommands(sub, &here, out)?;
            continue;
        }
        writeln!(out, ".SH \"{}\"", here.to_uppercase())?;
        let sub = sub.clone().bin_name(&here);
        let man = clap_mangen::Man::new(sub);
        man.render_synopsis_section(&mut *out)?;
        man.render_description_section(&mut *out)?;
        man.render_options_section(&mut *out)?;
    }
    Ok(())
}
