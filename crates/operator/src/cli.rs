//! The command line: one clap `Args` struct per command.

use std::io::Write;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "sample-operator",
    version,
    about = "Kubernetes controllers for Network, Foo and MyCustomResource"
)]
pub struct Args {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Print the CustomResourceDefinitions of all resources as multi-document YAML.
    Crd,
}

/// Entry point of the binary.
pub fn main() -> ExitCode {
    let args = Args::parse();
    match args.command {
        Command::Crd => print_crds(),
    }
}

fn print_crds() -> ExitCode {
    let yaml = match sample_operator_api::crds_yaml() {
        Ok(yaml) => yaml,
        Err(e) => {
            eprintln!("error: cannot serialise the CRDs: {e}");
            return ExitCode::FAILURE;
        }
    };
    match std::io::stdout().lock().write_all(yaml.as_bytes()) {
        Ok(()) => ExitCode::SUCCESS,
        // A closed pipe (`| head`) is not worth a panic.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
