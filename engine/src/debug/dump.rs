//! IR dumps (`jax_dump_ir_to`, `jax_dump_ir_modes`): each compilation writes one file per
//! stage into the directory, numbered in compile order:
//! `jax_ir0003_jit_f.jaxpr.txt`, `jax_ir0003_jit_f_lowered.mlir` (mode `stablehlo`: our
//! lowered module plays StableHLO's part), `jax_ir0003_jit_f_compiled.mlir` (after the
//! pass pipeline) and `jax_ir0003_jit_f.eqn_count.txt` (equations per source line).
//!
//! A dump never fails a compilation: a write error is reported on stderr.

use crate::config;
use crate::ir::ClosedJaxpr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

/// The modes `jax_dump_ir_modes` accepts.
pub const MODES: &[&str] = &["jaxpr", "stablehlo", "compiled", "eqn_count"];

fn file_stem(n: u64, name: &str) -> String {
    let clean: String = name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' }).collect();
    format!("jax_ir{n:04}_jit_{clean}")
}

/// Writes the stages of one compilation of `name` when `jax_dump_ir_to` is set; returns
/// the files written. `lowered` and `compiled` are the MLIR texts.
pub(crate) fn dump_stages(name: &str, jaxpr: &ClosedJaxpr, lowered: &str, compiled: &str) -> Vec<PathBuf> {
    let dir = config::dump_ir_to();
    if dir.is_empty() {
        return vec![];
    }
    static N: AtomicU64 = AtomicU64::new(0);
    let stem = file_stem(N.fetch_add(1, Ordering::Relaxed), name);
    let modes = config::dump_ir_modes();
    let dir = PathBuf::from(dir);
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("jax_dump_ir_to: cannot create {}: {e}", dir.display());
        return vec![];
    }
    let mut written = vec![];
    for mode in modes.split(',').map(str::trim).filter(|m| !m.is_empty()) {
        let (file, text) = match mode {
            "jaxpr" => (format!("{stem}.jaxpr.txt"), jaxpr.to_string()),
            "stablehlo" => (format!("{stem}_lowered.mlir"), lowered.to_string()),
            "compiled" => (format!("{stem}_compiled.mlir"), compiled.to_string()),
            "eqn_count" => (format!("{stem}.eqn_count.txt"), super::eqn_counts(&format!("jit({name})"), &jaxpr.jaxpr).to_string()),
            other => {
                eprintln!("jax_dump_ir_modes: unknown mode {other:?} skipped; the modes are {}", MODES.join(", "));
                continue;
            }
        };
        let path = dir.join(file);
        match std::fs::write(&path, text) {
            Ok(()) => written.push(path),
            Err(e) => eprintln!("jax_dump_ir_to: cannot write {}: {e}", path.display()),
        }
    }
    written
}
