//! `Config`: JAX's flags by their JAX names. Each flag reads its `JAX_…` environment
//! variable at first use and can be changed with `config::update` (process-wide, like
//! `jax.config.update`). See docs/config.md for the table.

use crate::error::{Error, Result};
use std::sync::atomic::{AtomicU8, Ordering};

/// A boolean flag: 0 = unread (use the env var), 1 = false, 2 = true.
struct Flag {
    name: &'static str,
    env: &'static str,
    default: bool,
    state: AtomicU8,
    doc: &'static str,
}

impl Flag {
    fn get(&self) -> bool {
        match self.state.load(Ordering::Relaxed) {
            1 => false,
            2 => true,
            _ => {
                let v = std::env::var(self.env)
                    .map(|v| matches!(v.to_ascii_lowercase().as_str(), "1" | "true" | "yes" | "on"))
                    .unwrap_or(self.default);
                self.state.store(if v { 2 } else { 1 }, Ordering::Relaxed);
                v
            }
        }
    }
    fn set(&self, v: bool) {
        self.state.store(if v { 2 } else { 1 }, Ordering::Relaxed);
    }
}

macro_rules! flags {
    ($($id:ident, $name:expr, $env:expr, $default:expr, $doc:expr;)+) => {
        $(static $id: Flag = Flag { name: $name, env: $env, default: $default, state: AtomicU8::new(0), doc: $doc };)+
        static ALL: &[&Flag] = &[$(&$id),+];
    };
}

flags! {
    ENABLE_X64, "jax_enable_x64", "JAX_ENABLE_X64", false, "Allow 64-bit dtypes; when off, f64/i64 values become f32/i32 as in JAX.";
    EXPLAIN_CACHE_MISSES, "jax_explain_cache_misses", "JAX_EXPLAIN_CACHE_MISSES", false, "Explain each tracing cache miss on stderr.";
    LOG_COMPILES, "jax_log_compiles", "JAX_LOG_COMPILES", false, "Log trace, lowering and compile times of each compilation on stderr.";
    TIERED_COMPILATION, "jaxrepl_tiered_compilation", "JAXREPL_TIERED_COMPILATION", true, "Compile first calls quickly (LLVM O0) and the optimised code (O2) in the background from the second call on.";
}

/// Whether 64-bit dtypes are enabled (`jax_enable_x64`).
pub fn enable_x64() -> bool {
    ENABLE_X64.get()
}
/// `jax_explain_cache_misses`.
pub fn explain_cache_misses() -> bool {
    EXPLAIN_CACHE_MISSES.get()
}
/// `jax_log_compiles`.
pub fn log_compiles() -> bool {
    LOG_COMPILES.get()
}
/// `jaxrepl_tiered_compilation` (see `compile::compile_tiered`).
pub fn tiered_compilation() -> bool {
    TIERED_COMPILATION.get()
}

/// Sets flag `name` (e.g. `"jax_explain_cache_misses"`) to `value`.
/// Errors: `ValueError` naming the known flags for an unknown name.
pub fn update(name: &str, value: bool) -> Result<()> {
    match ALL.iter().find(|f| f.name == name) {
        Some(f) => {
            f.set(value);
            Ok(())
        }
        None => Err(Error::value_error(format!(
            "unknown config flag {name:?}; known flags: {}",
            ALL.iter().map(|f| f.name).collect::<Vec<_>>().join(", ")
        ))),
    }
}

/// Sets a flag that takes a value rather than a boolean, from text (JAX's
/// `jax.config.update(name, "value")`): `jax_default_matmul_precision` (`"highest"`,
/// `"high"`, `"default"`, `"bfloat16"`, `"tensorfloat32"`, `"float32"`, a
/// `DotAlgorithmPreset` name such as `"BF16_BF16_F32"`, or `"none"`; env
/// `JAX_DEFAULT_MATMUL_PRECISION`). Errors: `ValueError` for an unknown name or value.
pub fn update_str(name: &str, value: &str) -> Result<()> {
    match name {
        "jax_default_matmul_precision" => crate::lax::precision::set_from_str(value),
        _ => Err(Error::value_error(format!(
            "unknown config option {name:?} for a text value; known: jax_default_matmul_precision"
        ))),
    }
}

/// Reads flag `name`. Errors for an unknown name.
pub fn read(name: &str) -> Result<bool> {
    ALL.iter()
        .find(|f| f.name == name)
        .map(|f| f.get())
        .ok_or_else(|| Error::value_error(format!("unknown config flag {name:?}")))
}

/// `(name, env var, value, doc)` of every flag, for `%help` and docs.
pub fn describe() -> Vec<(&'static str, &'static str, bool, &'static str)> {
    ALL.iter().map(|f| (f.name, f.env, f.get(), f.doc)).collect()
}

// ---- integer settings (devices) ----

/// Sets an integer setting: `"jax_num_cpu_devices"` (`sharding::set_num_cpu_devices`;
/// env `JAX_NUM_CPU_DEVICES`, default 1; only before the backend starts).
/// Errors: JAX's `RuntimeError` after the backend started, `ValueError` for an unknown
/// name or a bad value.
pub fn update_int(name: &str, value: i64) -> Result<()> {
    match name {
        "jax_num_cpu_devices" => {
            if value < 1 {
                return Err(Error::value_error(format!("jax_num_cpu_devices must be at least 1, got {value}")));
            }
            crate::sharding::set_num_cpu_devices(value as usize)
        }
        _ => Err(Error::value_error(format!("unknown integer config setting {name:?}; known: jax_num_cpu_devices"))),
    }
}
