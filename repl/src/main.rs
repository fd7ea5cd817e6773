//! `jaxrepl`: the terminal REPL, headless notebook/script runner and slot warmer.

use jaxrepl::SessionOptions;
use jaxrepl::front::{repl, script};
use std::process::ExitCode;

const USAGE: &str = "\
jaxrepl: Rust cells on the jax engine (evcxr)

Usage:
  jaxrepl                  interactive prompt
  jaxrepl FILE.ipynb       run a notebook's code cells in order, printing every output
  jaxrepl FILE.rs          run a script whose cells are separated by `// %%` lines
  jaxrepl --warm           build the engine in build slot 0 and run one engine cell
  jaxrepl --help           this text

Options:
  --no-prelude             do not load the engine (plain Rust cells)

Environment:
  JAXREPL_ENGINE_DIR       the engine crate (default: found next to the executable)
  JAXREPL_CACHE_DIR        build slots and history (default: ~/.cache/jaxrepl)
  JAXREPL_NO_PRELUDE=1     same as --no-prelude
  JAXREPL_TIMING=1         print timings of start-up and cells on stderr
  NO_COLOR                 no colours

A file run exits with status 1 if a cell fails that is not tagged `raises-exception`
(in a notebook, the cell tag; in a script, the separator line `// %% raises-exception`);
input from a pipe (`printf 'let a = 1;' | jaxrepl`) runs every cell and exits with
status 1 if any failed.
";

fn main() -> ExitCode {
    // evcxr re-executes this binary as the evaluation child: this call never returns there.
    evcxr::runtime_hook();
    let mut opts = SessionOptions::from_env();
    let mut warm = false;
    let mut file = None;
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "-h" | "--help" => {
                print!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            "--warm" => warm = true,
            "--no-prelude" => opts.prelude = false,
            "--" => break,
            a if a.starts_with('-') => {
                eprintln!("jaxrepl: unknown option `{a}`\n\n{USAGE}");
                return ExitCode::from(2);
            }
            _ if file.is_some() => {
                eprintln!("jaxrepl: only one file at a time\n\n{USAGE}");
                return ExitCode::from(2);
            }
            a => file = Some(std::path::PathBuf::from(a)),
        }
    }
    let result = if warm {
        script::warm(opts).map(|()| true)
    } else if let Some(file) = file {
        script::run_file(&file, opts)
    } else {
        repl::run(opts)
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("jaxrepl: {e:#}");
            ExitCode::FAILURE
        }
    }
}
