//! Elementwise `jnp` functions of issue 3: sign, floor, ceil, round (half to even),
//! remainder (`jnp.mod`, floor mod) and fmod (`lax.rem`, truncated), clip, log1p, expm1,
//! isnan/isinf/isfinite, logical and/or/not/xor, plus the matching `Array` methods.
//! Shapes broadcast as numpy does; integer inputs of float-only functions promote to
//! float32 (floor/ceil/round of an integer array return it unchanged, as in JAX).

use super::ops::fail;
use crate::error::Result;
use crate::ir::{DType, Primitive, Scalar};
use crate::lax::{self, literal};
use crate::trace::array::canonicalize_dtype;
use crate::trace::{Array, Operand};

fn a(x: &Array) -> Operand {
    Operand::Array(x.clone())
}

fn float(x: &Array) -> Result<Array> {
    if x.dtype().is_float() {
        Ok(x.clone())
    } else {
        lax::convert_element_type(x, canonicalize_dtype(DType::F64))
    }
}

/// `jnp.sign`: -1, 0 or 1 (NaN stays NaN; bools are returned unchanged).
#[track_caller]
pub fn sign(x: &Array) -> Result<Array> {
    if x.dtype().is_bool() {
        return Ok(x.clone());
    }
    lax::unary_prim(Primitive::Sign, x)
}

macro_rules! rounding {
    ($($name:ident => $p:expr, $doc:expr);+) => {$(
        #[doc = $doc]
        #[track_caller]
        pub fn $name(x: &Array) -> Result<Array> {
            if !x.dtype().is_float() {
                return Ok(x.clone());
            }
            lax::unary_prim($p, x)
        }
    )+};
}
rounding!(
    floor => Primitive::Floor, "`jnp.floor` (integers unchanged).";
    ceil => Primitive::Ceil, "`jnp.ceil` (integers unchanged).";
    round => Primitive::Round { rounding_method: 1 }, "`jnp.round`: to nearest, ties to even (numpy's rule); integers unchanged."
);

macro_rules! float_unary {
    ($($name:ident => $p:ident, $doc:expr);+) => {$(
        #[doc = $doc]
        #[track_caller]
        pub fn $name(x: &Array) -> Result<Array> {
            lax::unary_prim(Primitive::$p, &float(x)?)
        }
    )+};
}
float_unary!(
    log1p => Log1p, "`jnp.log1p`: log(1 + x), accurate for small x.";
    expm1 => Expm1, "`jnp.expm1`: e^x - 1, accurate for small x.";
    erf => Erf, "`jax.scipy.special.erf` (`lax.erf`).";
    logistic => Logistic, "`lax.logistic`: 1 / (1 + e^-x) (`jax.nn.sigmoid`)."
);

/// `jnp.fmod` / `lax.rem`: remainder with the sign of `x` (truncated division).
#[track_caller]
pub fn fmod(x: &Array, y: &Array) -> Result<Array> {
    lax::binary(Primitive::Rem, a(x), a(y))
}

/// `jnp.remainder` / `jnp.mod`: remainder with the sign of `y` (floor division), as
/// JAX computes it: `r = rem(x, y); where(r != 0 && (r < 0) != (y < 0), r + y, r)`.
#[track_caller]
pub fn remainder(x: &Array, y: &Array) -> Result<Array> {
    let r = lax::binary(Primitive::Rem, a(x), a(y))?;
    let y = lax::broadcast_to(&lax::convert_element_type(y, r.dtype())?, &r.shape())?;
    if r.dtype().is_unsigned() {
        return Ok(r);
    }
    let zero = || literal(Scalar::I32(0));
    let nz = lax::binary(Primitive::Ne, a(&r), zero())?;
    let rn = lax::binary(Primitive::Lt, a(&r), zero())?;
    let yn = lax::binary(Primitive::Lt, a(&y), zero())?;
    let differ = lax::binary(Primitive::Ne, a(&rn), a(&yn))?;
    let fix = lax::binary(Primitive::And, a(&nz), a(&differ))?;
    let ry = lax::binary(Primitive::Add, a(&r), a(&y))?;
    lax::select_n(&fix, &[r, ry])
}

/// `jnp.clip(x, min, max)`: `minimum(maximum(x, min), max)`; `None` leaves a side open.
#[track_caller]
pub fn clip(x: &Array, min: Option<f64>, max: Option<f64>) -> Result<Array> {
    let mut r = x.clone();
    if let Some(lo) = min {
        r = lax::binary(Primitive::Max, a(&r), lit_like(lo, x))?;
    }
    if let Some(hi) = max {
        r = lax::binary(Primitive::Min, a(&r), lit_like(hi, x))?;
    }
    Ok(r)
}

fn lit_like(v: f64, x: &Array) -> Operand {
    if x.dtype().is_float() { literal(Scalar::F64(v)) } else { literal(Scalar::I64(v as i64)) }
}

/// `jnp.isnan` (false for integers and bools).
#[track_caller]
pub fn isnan(x: &Array) -> Result<Array> {
    if !x.dtype().is_float() {
        return Ok(super::full(&x.shape(), false, DType::Bool));
    }
    lax::binary(Primitive::Ne, a(x), a(x))
}

/// `jnp.isinf`: ±inf (false for integers and bools).
#[track_caller]
pub fn isinf(x: &Array) -> Result<Array> {
    if !x.dtype().is_float() {
        return Ok(super::full(&x.shape(), false, DType::Bool));
    }
    let ab = lax::unary(Primitive::Abs, x)?;
    lax::binary(Primitive::Eq, a(&ab), literal(Scalar::F64(f64::INFINITY)))
}

/// `jnp.isfinite` (`is_finite`; true for integers and bools).
#[track_caller]
pub fn isfinite(x: &Array) -> Result<Array> {
    if !x.dtype().is_float() {
        return Ok(super::full(&x.shape(), true, DType::Bool));
    }
    lax::unary_prim(Primitive::IsFinite, x)
}

fn truthy(x: &Array) -> Result<Array> {
    if x.dtype().is_bool() {
        Ok(x.clone())
    } else {
        lax::binary(Primitive::Ne, a(x), literal(Scalar::I32(0)))
    }
}

/// `jnp.logical_and` (operands are tested against zero).
#[track_caller]
pub fn logical_and(x: &Array, y: &Array) -> Result<Array> {
    lax::binary(Primitive::And, a(&truthy(x)?), a(&truthy(y)?))
}

/// `jnp.logical_or`.
#[track_caller]
pub fn logical_or(x: &Array, y: &Array) -> Result<Array> {
    lax::binary(Primitive::Or, a(&truthy(x)?), a(&truthy(y)?))
}

/// `jnp.logical_xor`.
#[track_caller]
pub fn logical_xor(x: &Array, y: &Array) -> Result<Array> {
    lax::binary(Primitive::Xor, a(&truthy(x)?), a(&truthy(y)?))
}

/// `jnp.logical_not`.
#[track_caller]
pub fn logical_not(x: &Array) -> Result<Array> {
    lax::unary(Primitive::Not, &truthy(x)?)
}

/// `jnp.bitwise_xor` / `x ^ y` on integers and bools.
#[track_caller]
pub fn bitwise_xor(x: &Array, y: &Array) -> Result<Array> {
    lax::binary(Primitive::Xor, a(x), a(y))
}

#[track_caller]
fn ok(r: Result<Array>, like: &Array) -> Array {
    r.unwrap_or_else(|e| fail(e, like.aval()))
}

impl Array {
    /// `jnp.sign(x)`.
    #[track_caller]
    pub fn sign(&self) -> Array {
        ok(sign(self), self)
    }
    /// `jnp.floor(x)`.
    #[track_caller]
    pub fn floor(&self) -> Array {
        ok(floor(self), self)
    }
    /// `jnp.ceil(x)`.
    #[track_caller]
    pub fn ceil(&self) -> Array {
        ok(ceil(self), self)
    }
    /// `jnp.round(x)` (ties to even).
    #[track_caller]
    pub fn round(&self) -> Array {
        ok(round(self), self)
    }
    /// `jnp.log1p(x)`.
    #[track_caller]
    pub fn log1p(&self) -> Array {
        ok(log1p(self), self)
    }
    /// `jnp.expm1(x)`.
    #[track_caller]
    pub fn expm1(&self) -> Array {
        ok(expm1(self), self)
    }
    /// `jnp.clip(x, lo, hi)`.
    #[track_caller]
    pub fn clip(&self, lo: f64, hi: f64) -> Array {
        ok(clip(self, Some(lo), Some(hi)), self)
    }
    /// `jnp.isnan(x)`.
    #[track_caller]
    pub fn isnan(&self) -> Array {
        ok(isnan(self), self)
    }
    /// `jnp.isinf(x)`.
    #[track_caller]
    pub fn isinf(&self) -> Array {
        ok(isinf(self), self)
    }
    /// `jnp.isfinite(x)`.
    #[track_caller]
    pub fn isfinite(&self) -> Array {
        ok(isfinite(self), self)
    }
    /// `jnp.remainder(x, y)` (floor mod, sign of y).
    #[track_caller]
    pub fn rem_euclid_like(&self, y: &Array) -> Array {
        ok(remainder(self, y), self)
    }
    /// `x ** y` for a static integer `y` (`integer_pow[y=..]`).
    #[track_caller]
    pub fn powi(&self, y: i32) -> Array {
        ok(lax::integer_pow(self, y), self)
    }
}
