use clap::Parser;

fn main() {
    std::process::exit(mrguard::cli::run(mrguard::cli::Cli::parse()));
}
