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
    // Debugging flags (201-09).
    DEBUG_NANS, "jax_debug_nans", "JAX_DEBUG_NANS", false, "Check every output for NaN; re-run op by op to name the primitive and line that made it (FloatingPointError).";
    DEBUG_INFS, "jax_debug_infs", "JAX_DEBUG_INFS", false, "Like jax_debug_nans, for infinities.";
    DISABLE_JIT, "jax_disable_jit", "JAX_DISABLE_JIT", false, "Run jitted functions eagerly, op by op, on concrete values.";
    CHECK_TRACER_LEAKS, "jax_check_tracer_leaks", "JAX_CHECK_TRACER_LEAKS", false, "Error when a tracer outlives its trace (stored outside the traced function).";
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

/// `jax_debug_nans`.
pub fn debug_nans() -> bool {
    DEBUG_NANS.get()
}
/// `jax_debug_infs`.
pub fn debug_infs() -> bool {
    DEBUG_INFS.get()
}
/// `jax_disable_jit`.
pub fn disable_jit() -> bool {
    DISABLE_JIT.get()
}
/// `jax_check_tracer_leaks`.
pub fn check_tracer_leaks() -> bool {
    CHECK_TRACER_LEAKS.get()
}

/// Restores a boolean flag's previous value when dropped (see `scoped`).
#[must_use = "the override ends when the guard is dropped"]
pub struct FlagGuard {
    flag: &'static Flag,
    before: u8,
}

impl Drop for FlagGuard {
    fn drop(&mut self) {
        self.flag.state.store(self.before, Ordering::Relaxed);
    }
}

/// Sets boolean flag `name` to `value` until the returned guard is dropped (JAX's
/// `with jax.disable_jit():`, `with jax.debug_nans(True):`). Process-wide, like `update`.
/// Errors: `ValueError` for an unknown name.
pub fn scoped(name: &str, value: bool) -> Result<FlagGuard> {
    let flag = *ALL.iter().find(|f| f.name == name).ok_or_else(|| unknown(name))?;
    flag.get(); // read the env var first, so the restored state is a value
    let before = flag.state.load(Ordering::Relaxed);
    flag.set(value);
    Ok(FlagGuard { flag, before })
}

/// The type of flag `name` and the call that sets it (`None` for an unknown name).
fn kind_of(name: &str) -> Option<(&'static str, String)> {
    let (kind, call) = match name {
        "jax_persistent_cache_min_compile_time_secs" => ("a float (seconds)", format!("config::update_float({name:?}, 1.0)")),
        "jax_persistent_cache_min_entry_size_bytes" => ("an int (bytes)", format!("config::update_int({name:?}, 0)")),
        "jax_num_cpu_devices" => ("an int", format!("config::update_int({name:?}, 4)")),
        "jax_default_matmul_precision" => ("a str", format!("config::update_str({name:?}, \"highest\")")),
        _ if ALL.iter().any(|f| f.name == name) => ("a bool", format!("config::update({name:?}, true)")),
        _ if STRINGS.iter().any(|f| f.name == name) => ("a str", format!("config::update_str({name:?}, \"...\")")),
        _ => return None,
    };
    Some((kind, call))
}

/// The error of a setter that does not take flag `name`: a known flag given to the wrong
/// setter names its type and the right setter (`config flag "jax_enable_x64" is a bool:
/// set it with config::update("jax_enable_x64", true)`); an unknown name lists every flag
/// with the setter it takes.
fn unknown(name: &str) -> Error {
    if let Some((kind, call)) = kind_of(name) {
        return Error::value_error(format!("config flag {name:?} is {kind}: set it with {call}"));
    }
    let bools: Vec<&str> = ALL.iter().map(|f| f.name).collect();
    let texts: Vec<&str> = STRINGS.iter().map(|f| f.name).filter(|n| !n.starts_with("jax_persistent_cache_min")).collect();
    Error::value_error(format!(
        "unknown config flag {name:?}; known flags: {} (bool: config::update); {}, jax_default_matmul_precision (str: \
         config::update_str); jax_persistent_cache_min_compile_time_secs (float: config::update_float); \
         jax_num_cpu_devices, jax_persistent_cache_min_entry_size_bytes (int: config::update_int)",
        bools.join(", "),
        texts.join(", ")
    ))
}

/// A string-valued flag (`jax_dump_ir_to`): `None` until read from its env var or set.
struct StrFlag {
    name: &'static str,
    env: &'static str,
    default: &'static str,
    value: std::sync::Mutex<Option<String>>,
    doc: &'static str,
}

impl StrFlag {
    fn get(&self) -> String {
        let mut v = self.value.lock().unwrap_or_else(|e| e.into_inner());
        v.get_or_insert_with(|| std::env::var(self.env).unwrap_or_else(|_| self.default.to_string())).clone()
    }
}

static DUMP_IR_TO: StrFlag = StrFlag {
    name: "jax_dump_ir_to",
    env: "JAX_DUMP_IR_TO",
    default: "",
    value: std::sync::Mutex::new(None),
    doc: "Directory to dump each compiled function's IR to, one file per stage (empty: off).",
};
static DUMP_IR_MODES: StrFlag = StrFlag {
    name: "jax_dump_ir_modes",
    env: "JAX_DUMP_IR_MODES",
    default: "jaxpr,stablehlo,compiled,eqn_count",
    value: std::sync::Mutex::new(None),
    doc: "Comma-separated stages to dump: jaxpr, stablehlo (our lowered MLIR), compiled (optimized MLIR), eqn_count.",
};
// ---- persistent compilation cache (501 compilation-cache; see compile::persistent) ----
static COMPILATION_CACHE_DIR: StrFlag = StrFlag {
    name: "jax_compilation_cache_dir",
    env: "JAX_COMPILATION_CACHE_DIR",
    default: "",
    value: std::sync::Mutex::new(None),
    doc: "Directory of the persistent compilation cache (native code reused by later processes); empty: off.",
};
static PERSISTENT_MIN_COMPILE_TIME: StrFlag = StrFlag {
    name: "jax_persistent_cache_min_compile_time_secs",
    env: "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS",
    default: "1.0",
    value: std::sync::Mutex::new(None),
    doc: "Only executables that took at least this many seconds to compile are written to the persistent cache.",
};
static PERSISTENT_MIN_ENTRY_SIZE: StrFlag = StrFlag {
    name: "jax_persistent_cache_min_entry_size_bytes",
    env: "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES",
    default: "0",
    value: std::sync::Mutex::new(None),
    doc: "Only entries of at least this many bytes are written to the persistent cache (0 or -1: no minimum).",
};

/// `jax_compilation_cache_dir` (empty when the persistent cache is off).
pub fn compilation_cache_dir() -> String {
    COMPILATION_CACHE_DIR.get()
}
/// `jax_persistent_cache_min_compile_time_secs` (default 1.0, JAX's; a value that does
/// not parse as a number counts as the default).
pub fn persistent_cache_min_compile_time_secs() -> f64 {
    PERSISTENT_MIN_COMPILE_TIME.get().trim().parse().unwrap_or(1.0)
}
/// `jax_persistent_cache_min_entry_size_bytes` (default 0: no minimum; -1 too).
pub fn persistent_cache_min_entry_size_bytes() -> i64 {
    PERSISTENT_MIN_ENTRY_SIZE.get().trim().parse().unwrap_or(0)
}
/// `from jax.experimental.compilation_cache import compilation_cache as cc;
/// cc.set_cache_dir(path)`: the same as `update_str("jax_compilation_cache_dir", path)`.
pub fn set_cache_dir(path: &str) -> Result<()> {
    update_str("jax_compilation_cache_dir", path)
}
/// Sets a number-valued flag: `jax_persistent_cache_min_compile_time_secs` (seconds, at
/// least 0) or `jax_persistent_cache_min_entry_size_bytes` (whole bytes, -1 or more).
/// Errors: `ValueError` for a value out of range, or for another flag (naming its type
/// and setter, see `update`).
pub fn update_float(name: &str, value: f64) -> Result<()> {
    match name {
        "jax_persistent_cache_min_entry_size_bytes" if value.fract() != 0.0 => {
            Err(Error::value_error(format!("{name} takes a whole number of bytes, got {value}")))
        }
        "jax_persistent_cache_min_compile_time_secs" | "jax_persistent_cache_min_entry_size_bytes" => update_str(name, &value.to_string()),
        _ => Err(unknown(name)),
    }
}
/// Checks a text value of a persistent-cache number flag.
fn check_persistent_value(name: &str, value: &str) -> Result<()> {
    let bad = match name {
        "jax_persistent_cache_min_compile_time_secs" => !value.trim().parse::<f64>().is_ok_and(|v| v >= 0.0 && v.is_finite()),
        "jax_persistent_cache_min_entry_size_bytes" => !value.trim().parse::<i64>().is_ok_and(|v| v >= -1),
        _ => false,
    };
    if bad {
        let what = if name.ends_with("_secs") { "a number of seconds >= 0" } else { "a whole number of bytes >= -1" };
        return Err(Error::value_error(format!("{name} must be {what}, got {value:?}")));
    }
    Ok(())
}
// ---- end persistent compilation cache ----

static STRINGS: &[&StrFlag] = &[&DUMP_IR_TO, &DUMP_IR_MODES, &COMPILATION_CACHE_DIR, &PERSISTENT_MIN_COMPILE_TIME, &PERSISTENT_MIN_ENTRY_SIZE];

/// `jax_dump_ir_to` (empty when off).
pub fn dump_ir_to() -> String {
    DUMP_IR_TO.get()
}
/// `jax_dump_ir_modes`.
pub fn dump_ir_modes() -> String {
    DUMP_IR_MODES.get()
}

/// `(name, env var, value, doc)` of every string flag.
pub fn describe_strings() -> Vec<(&'static str, &'static str, String, &'static str)> {
    STRINGS.iter().map(|f| (f.name, f.env, f.get(), f.doc)).collect()
}

/// Sets boolean flag `name` (e.g. `"jax_explain_cache_misses"`) to `value`.
/// Errors: `ValueError`: for a flag of another type, its type and the setter to use
/// (`config flag "jax_persistent_cache_min_compile_time_secs" is a float (seconds): set it
/// with config::update_float(..)`); for an unknown name, every flag with its setter.
pub fn update(name: &str, value: bool) -> Result<()> {
    match ALL.iter().find(|f| f.name == name) {
        Some(f) => {
            f.set(value);
            Ok(())
        }
        None => Err(unknown(name)),
    }
}

/// Sets a flag that takes a text value (JAX's `jax.config.update(name, "value")`):
/// `jax_dump_ir_to` (a directory, empty: off), `jax_dump_ir_modes`, and
/// `jax_default_matmul_precision` (`"highest"`, `"high"`, `"default"`, `"bfloat16"`,
/// `"tensorfloat32"`, `"float32"`, a `DotAlgorithmPreset` name such as `"BF16_BF16_F32"`,
/// or `"none"`; env `JAX_DEFAULT_MATMUL_PRECISION`).
/// Errors: `ValueError` for an unknown name or a bad value.
pub fn update_str(name: &str, value: &str) -> Result<()> {
    if name == "jax_default_matmul_precision" {
        return crate::lax::precision::set_from_str(value);
    }
    check_persistent_value(name, value)?;
    match STRINGS.iter().find(|f| f.name == name) {
        Some(f) => {
            *f.value.lock().unwrap_or_else(|e| e.into_inner()) = Some(value.to_string());
            Ok(())
        }
        None => Err(unknown(name)),
    }
}

/// Reads flag `name`. Errors for an unknown name.
pub fn read(name: &str) -> Result<bool> {
    ALL.iter()
        .find(|f| f.name == name)
        .map(|f| f.get())
        .ok_or_else(|| unknown(name))
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
        "jax_persistent_cache_min_entry_size_bytes" | "jax_persistent_cache_min_compile_time_secs" => update_float(name, value as f64),
        _ => Err(unknown(name)),
    }
}
