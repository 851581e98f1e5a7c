//! `sample-operator`: see `sample_operator::cli` for the commands.

use std::process::ExitCode;

fn main() -> ExitCode {
    sample_operator::cli::main()
}
