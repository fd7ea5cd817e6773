//! The process-wide default precision of contractions (`jax_default_matmul_precision`),
//! with a scoped override ([`with_default_matmul_precision`], JAX's
//! `with jax.default_matmul_precision(v):`).
//!
//! As in JAX the default does not change jaxprs (their `precision=None` stays); it is read
//! when a `dot_general` with `precision=None` is lowered. A jitted function's trace records
//! the default it was traced under, so calling it under another default retraces and
//! lowers again (JAX keeps the setting in jit's cache key the same way).

use crate::error::Result;
use crate::ir::{DotPrecision, IntoPrecision};
use std::sync::{Mutex, OnceLock};

fn cell() -> &'static Mutex<Option<DotPrecision>> {
    static C: OnceLock<Mutex<Option<DotPrecision>>> = OnceLock::new();
    C.get_or_init(|| {
        // JAX_DEFAULT_MATMUL_PRECISION at first use; an unparsable value is reported once
        // on stderr and ignored (the flag stays unset).
        let v = match std::env::var("JAX_DEFAULT_MATMUL_PRECISION") {
            Ok(s) if !s.trim().is_empty() && !s.eq_ignore_ascii_case("none") => match DotPrecision::parse(s.trim()) {
                Ok(p) => Some(p),
                Err(e) => {
                    eprintln!("JAX_DEFAULT_MATMUL_PRECISION ignored: {e}");
                    None
                }
            },
            _ => None,
        };
        Mutex::new(v)
    })
}

/// The current default (`None`: the backend's default; on CPU every level computes in
/// the operands' precision).
pub fn default_matmul_precision() -> Option<DotPrecision> {
    *cell().lock().unwrap_or_else(|e| e.into_inner())
}

/// Sets `jax_default_matmul_precision` process-wide: a level (`"highest"`,
/// `Precision::High`, ...), a preset (`"BF16_BF16_F32"`), or `None::<DotPrecision>` / `"none"` to clear.
/// Errors: `ValueError` for an unknown string.
pub fn set_default_matmul_precision(v: impl IntoPrecision) -> Result<()> {
    let v = v.into_precision()?;
    *cell().lock().unwrap_or_else(|e| e.into_inner()) = v;
    Ok(())
}

/// Restores the previous default when dropped (see [`with_default_matmul_precision`]).
#[must_use = "the override ends when the guard is dropped"]
pub struct DefaultPrecisionGuard {
    previous: Option<DotPrecision>,
}

impl Drop for DefaultPrecisionGuard {
    fn drop(&mut self) {
        *cell().lock().unwrap_or_else(|e| e.into_inner()) = self.previous;
    }
}

/// JAX's `with jax.default_matmul_precision(v):` as a guard value:
/// `let _g = lax::with_default_matmul_precision("highest")?;` overrides the default until
/// `_g` is dropped (end of the block or cell). The override is process-wide (the engine
/// traces on one thread). Errors: `ValueError` for an unknown string.
pub fn with_default_matmul_precision(v: impl IntoPrecision) -> Result<DefaultPrecisionGuard> {
    let v = v.into_precision()?;
    let mut c = cell().lock().unwrap_or_else(|e| e.into_inner());
    let previous = std::mem::replace(&mut *c, v);
    Ok(DefaultPrecisionGuard { previous })
}

/// Parses the config value `s` (`"none"`/empty clears it) and sets it.
pub(crate) fn set_from_str(s: &str) -> Result<()> {
    let s = s.trim();
    if s.is_empty() || s.eq_ignore_ascii_case("none") {
        return set_default_matmul_precision(None::<DotPrecision>);
    }
    set_default_matmul_precision(DotPrecision::parse(s)?)
}
