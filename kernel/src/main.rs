//! `jaxrepl-kernel`: the Jupyter kernel binary.
//!
//! ```text
//! jaxrepl-kernel --connection-file FILE   run the kernel (what kernel.json's argv does)
//! jaxrepl-kernel --install DIR            write DIR/kernels/jaxrepl/kernel.json for this binary
//! ```
//! evcxr re-executes this same binary as the session's evaluation child, so the first
//! thing `main` does is hand over to evcxr when that is what we were started as.

use std::path::PathBuf;
use std::process::ExitCode;

const USAGE: &str = "usage: jaxrepl-kernel --connection-file FILE | --install DIR | --version";

fn main() -> ExitCode {
    if std::env::var_os("EVCXR_IS_RUNTIME").is_some() {
        exit_with_parent();
    }
    evcxr::runtime_hook();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
        ["--connection-file" | "-f", file] => jaxrepl_kernel::server::run(&PathBuf::from(file), || {
            jaxrepl::Session::start(jaxrepl::SessionOptions::from_env())
        }),
        ["--install", dir] => jaxrepl_kernel::spec::install(&PathBuf::from(dir)).map(|file| {
            println!("installed kernelspec {}", file.display());
        }),
        ["--version"] => {
            println!("jaxrepl-kernel {}", env!("CARGO_PKG_VERSION"));
            Ok(())
        }
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("jaxrepl-kernel: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// In the evaluation child: exit when the kernel process is gone. The child only notices
/// a closed stdin between cells, so a cell stuck in plain Rust would otherwise outlive a
/// killed kernel forever.
fn exit_with_parent() {
    let parent = std::os::unix::process::parent_id();
    if parent == 1 {
        return;
    }
    std::thread::spawn(move || {
        loop {
            std::thread::sleep(std::time::Duration::from_millis(500));
            if std::os::unix::process::parent_id() != parent {
                std::process::exit(1);
            }
        }
    });
}
