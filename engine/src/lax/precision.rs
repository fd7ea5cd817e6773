//! The process-wide default precision of contractions (`jax_default_matmul_precision`),
//! with a scoped override ([`with_default_matmul_precision`], JAX's
//! `with jax.default_matmul_precision(v):`).
//!
//! As in JAX the default does not change jaxprs (their `precision=None` stays); it is read
//! when a `dot_general` with `precision=None` is lowered. A jitted function's trace records
//! the default it was traced under, so calling it under another default retraces and
//! lowers again (JAX keeps the setting in jit's cache key the same way).

use crate::error::Result;
use crate::ir::{DotAlgorithmPreset, DotPrecision, IntoPrecision, Precision};
use std::sync::atomic::{AtomicU8, Ordering};

/// The default, encoded (see `encode`) so that the per-call cache lookup reads one atomic;
/// `UNREAD` until the environment variable has been read.
static STATE: AtomicU8 = AtomicU8::new(UNREAD);
const UNREAD: u8 = u8::MAX;
const LEVELS: [Precision; 3] = [Precision::Default, Precision::High, Precision::Highest];

fn encode(p: Option<DotPrecision>) -> u8 {
    let level = |l: Precision| LEVELS.iter().position(|&x| x == l).unwrap_or(0) as u8;
    match p {
        None => 0,
        Some(DotPrecision::Levels(a, b)) => 1 + 3 * level(a) + level(b),
        Some(DotPrecision::Algorithm(a)) => 16 + DotAlgorithmPreset::ALL.iter().position(|&x| x == a).unwrap_or(0) as u8,
    }
}

fn decode(s: u8) -> Option<DotPrecision> {
    match s {
        0 => None,
        1..=9 => Some(DotPrecision::Levels(LEVELS[(s as usize - 1) / 3], LEVELS[(s as usize - 1) % 3])),
        16.. => DotAlgorithmPreset::ALL.get(s as usize - 16).map(|&a| DotPrecision::Algorithm(a)),
        _ => None,
    }
}

fn state() -> u8 {
    let s = STATE.load(Ordering::Relaxed);
    if s != UNREAD {
        return s;
    }
    // JAX_DEFAULT_MATMUL_PRECISION at first use; an unparsable value is reported on
    // stderr and ignored (the flag stays unset).
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
    let e = encode(v);
    let _ = STATE.compare_exchange(UNREAD, e, Ordering::Relaxed, Ordering::Relaxed);
    STATE.load(Ordering::Relaxed)
}

/// The current default (`None`: the backend's default; on CPU every level computes in
/// the operands' precision).
pub fn default_matmul_precision() -> Option<DotPrecision> {
    decode(state())
}

fn store(v: Option<DotPrecision>) -> Option<DotPrecision> {
    let previous = default_matmul_precision();
    STATE.store(encode(v), Ordering::Relaxed);
    previous
}

/// Sets `jax_default_matmul_precision` process-wide: a level (`"highest"`,
/// `Precision::High`, ...), a preset (`"BF16_BF16_F32"`), or `None::<DotPrecision>` / `"none"` to clear.
/// Errors: `ValueError` for an unknown string.
pub fn set_default_matmul_precision(v: impl IntoPrecision) -> Result<()> {
    store(v.into_precision()?);
    Ok(())
}

/// Restores the previous default when dropped (see [`with_default_matmul_precision`]).
#[must_use = "the override ends when the guard is dropped"]
pub struct DefaultPrecisionGuard {
    previous: Option<DotPrecision>,
}

impl Drop for DefaultPrecisionGuard {
    fn drop(&mut self) {
        store(self.previous);
    }
}

/// JAX's `with jax.default_matmul_precision(v):` as a guard value:
/// `let _g = lax::with_default_matmul_precision("highest")?;` overrides the default until
/// `_g` is dropped (end of the block or cell). The override is process-wide (the engine
/// traces on one thread). Errors: `ValueError` for an unknown string.
pub fn with_default_matmul_precision(v: impl IntoPrecision) -> Result<DefaultPrecisionGuard> {
    let previous = store(v.into_precision()?);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_precision_round_trips_through_the_encoding() {
        let mut all = vec![None];
        for a in LEVELS {
            for b in LEVELS {
                all.push(Some(DotPrecision::Levels(a, b)));
            }
        }
        all.extend(DotAlgorithmPreset::ALL.iter().map(|&p| Some(DotPrecision::Algorithm(p))));
        for p in all {
            assert_eq!(decode(encode(p)), p);
            assert_ne!(encode(p), UNREAD);
        }
    }
}
