//! Reductions and scans of issue 3: prod, all, any, argmax, argmin, var, std, cumsum,
//! cumprod, cummax, cummin, sort, argsort. Axes may be negative; `None` means all axes
//! (argmax/argmin/cumulative functions then work on the flattened array, as numpy does).
//! Errors: an axis out of range (`ValueError` naming the op and the rank), argmax of an
//! empty axis.

use super::ops::fail;
use super::norm_axes;
use crate::error::{Error, Result};
use crate::ir::{CumOp, DType, Primitive, Scalar};
use crate::lax::{self, literal};
use crate::trace::array::canonicalize_dtype;
use crate::trace::{Array, Operand};

#[track_caller]
fn one_axis(op: &str, axis: isize, ndim: usize) -> Result<usize> {
    Ok(norm_axes(op, Some(&[axis]), ndim)?[0])
}

fn flat(x: &Array) -> Result<Array> {
    lax::reshape(x, &[x.size()])
}

/// The accumulation dtype of `jnp.sum`/`jnp.prod` (JAX 0.10.2): bools and signed ints
/// narrower than the default int accumulate as the default int (int32, or int64 with
/// x64), unsigned ones as uint32 (we have no uint64).
pub(crate) fn small_int_to_i32(x: &Array) -> Result<Array> {
    match x.dtype() {
        DType::Bool | DType::I8 | DType::I16 => lax::convert_element_type(x, canonicalize_dtype(DType::I64)),
        DType::U8 => lax::convert_element_type(x, DType::U32),
        _ => Ok(x.clone()),
    }
}

/// `jnp.prod(x, axis)` (bools and small ints multiply as int32; empty → 1).
#[track_caller]
pub fn prod(x: &Array, axes: Option<&[isize]>) -> Result<Array> {
    let axes = norm_axes("prod", axes, x.ndim())?;
    lax::bind1(Primitive::ReduceProd { axes }, vec![Operand::Array(small_int_to_i32(x)?)])
}

fn truthy(x: &Array) -> Result<Array> {
    if x.dtype().is_bool() {
        Ok(x.clone())
    } else {
        lax::binary(Primitive::Ne, Operand::Array(x.clone()), literal(Scalar::I32(0)))
    }
}

/// `jnp.all(x, axis)`: bool; true for empty.
#[track_caller]
pub fn all(x: &Array, axes: Option<&[isize]>) -> Result<Array> {
    let axes = norm_axes("all", axes, x.ndim())?;
    lax::bind1(Primitive::ReduceAnd { axes }, vec![Operand::Array(truthy(x)?)])
}

/// `jnp.any(x, axis)`: bool; false for empty.
#[track_caller]
pub fn any(x: &Array, axes: Option<&[isize]>) -> Result<Array> {
    let axes = norm_axes("any", axes, x.ndim())?;
    lax::bind1(Primitive::ReduceOr { axes }, vec![Operand::Array(truthy(x)?)])
}

fn arg(is_max: bool, x: &Array, axis: Option<isize>) -> Result<Array> {
    let name = if is_max { "argmax" } else { "argmin" };
    let (x, ax) = match axis {
        None => (flat(x)?, 0),
        Some(a) => (x.clone(), one_axis(name, a, x.ndim())?),
    };
    lax::argminmax(is_max, &x, ax, canonicalize_dtype(DType::I64))
}

/// `jnp.argmax(x, axis)`: index of the first maximum (NaN counts as the maximum); int32.
#[track_caller]
pub fn argmax(x: &Array, axis: Option<isize>) -> Result<Array> {
    arg(true, x, axis)
}

/// `jnp.argmin(x, axis)`: index of the first minimum (NaN counts as the minimum); int32.
#[track_caller]
pub fn argmin(x: &Array, axis: Option<isize>) -> Result<Array> {
    arg(false, x, axis)
}

/// `jnp.var(x, axis, ddof)`: mean of squared deviations, divided by `n - ddof`.
#[track_caller]
pub fn var(x: &Array, axes: Option<&[isize]>, ddof: usize) -> Result<Array> {
    let ax = norm_axes("var", axes, x.ndim())?;
    let x = if x.dtype().is_float() { x.clone() } else { lax::convert_element_type(x, canonicalize_dtype(DType::F64))? };
    let n: usize = ax.iter().map(|&a| x.shape()[a]).product();
    let m = super::mean(&x, Some(&ax.iter().map(|&a| a as isize).collect::<Vec<_>>()))?;
    let keep: Vec<usize> = (0..x.ndim()).map(|i| if ax.contains(&i) { 1 } else { x.shape()[i] }).collect();
    let m = lax::reshape(&m, &keep)?;
    let c = lax::binary(Primitive::Sub, Operand::Array(x.clone()), Operand::Array(m))?;
    let sq = lax::binary(Primitive::Mul, Operand::Array(c.clone()), Operand::Array(c))?;
    let s = lax::bind1(Primitive::ReduceSum { axes: ax }, vec![Operand::Array(sq)])?;
    let den = n as f64 - ddof as f64;
    lax::binary(Primitive::Div, Operand::Array(s), literal(Scalar::F64(den.max(0.0))))
}

/// `jnp.std(x, axis, ddof)`: `sqrt(var)`.
#[track_caller]
pub fn std(x: &Array, axes: Option<&[isize]>, ddof: usize) -> Result<Array> {
    lax::unary(Primitive::Sqrt, &var(x, axes, ddof)?)
}

fn cum(kind: CumOp, name: &str, x: &Array, axis: Option<isize>) -> Result<Array> {
    let (x, ax) = match axis {
        None => (flat(x)?, 0),
        Some(a) => (x.clone(), one_axis(name, a, x.ndim())?),
    };
    let x = if matches!(kind, CumOp::Sum | CumOp::Prod) { small_int_to_i32(&x)? } else { x };
    lax::cumulative(kind, &x, ax, false)
}

/// `jnp.cumsum(x, axis)` (`cumsum[axis=.. reverse=False]`); `None` flattens.
#[track_caller]
pub fn cumsum(x: &Array, axis: Option<isize>) -> Result<Array> {
    cum(CumOp::Sum, "cumsum", x, axis)
}

/// `jnp.cumprod(x, axis)`.
#[track_caller]
pub fn cumprod(x: &Array, axis: Option<isize>) -> Result<Array> {
    cum(CumOp::Prod, "cumprod", x, axis)
}

/// `lax.cummax` along `axis`.
#[track_caller]
pub fn cummax(x: &Array, axis: Option<isize>) -> Result<Array> {
    cum(CumOp::Max, "cummax", x, axis)
}

/// `lax.cummin` along `axis`.
#[track_caller]
pub fn cummin(x: &Array, axis: Option<isize>) -> Result<Array> {
    cum(CumOp::Min, "cummin", x, axis)
}

/// `jnp.sort(x, axis)` (stable; NaNs last). 0-d arrays are returned unchanged.
#[track_caller]
pub fn sort(x: &Array, axis: isize) -> Result<Array> {
    if x.ndim() == 0 {
        return Ok(x.clone());
    }
    let ax = one_axis("sort", axis, x.ndim())?;
    lax::sort(std::slice::from_ref(x), ax, 1)?.pop().ok_or_else(|| Error::type_error("sort: no output"))
}

/// `jnp.argsort(x, axis)` (stable): int32 indices that sort `x` along `axis`.
#[track_caller]
pub fn argsort(x: &Array, axis: isize) -> Result<Array> {
    let x = if x.ndim() == 0 { lax::reshape(x, &[1])? } else { x.clone() };
    let ax = one_axis("argsort", axis, x.ndim())?;
    let i = lax::iota(canonicalize_dtype(DType::I64), &x.shape(), ax)?;
    lax::sort(&[x, i], ax, 1)?.pop().ok_or_else(|| Error::type_error("argsort: no output"))
}

#[track_caller]
fn ok(r: Result<Array>, like: &Array) -> Array {
    r.unwrap_or_else(|e| fail(e, like.aval()))
}

impl Array {
    /// Product of all elements.
    #[track_caller]
    pub fn prod(&self) -> Array {
        ok(prod(self, None), self)
    }
    /// Whether all elements are non-zero.
    #[track_caller]
    pub fn all(&self) -> Array {
        ok(all(self, None), self)
    }
    /// Whether any element is non-zero.
    #[track_caller]
    pub fn any(&self) -> Array {
        ok(any(self, None), self)
    }
    /// Index of the maximum of the flattened array.
    #[track_caller]
    pub fn argmax(&self) -> Array {
        ok(argmax(self, None), self)
    }
    /// Index of the minimum of the flattened array.
    #[track_caller]
    pub fn argmin(&self) -> Array {
        ok(argmin(self, None), self)
    }
    /// Variance of all elements (ddof 0).
    #[track_caller]
    pub fn var(&self) -> Array {
        ok(var(self, None, 0), self)
    }
    /// Standard deviation of all elements (ddof 0).
    #[track_caller]
    pub fn std(&self) -> Array {
        ok(std(self, None, 0), self)
    }
    /// Cumulative sum along `axis`.
    #[track_caller]
    pub fn cumsum(&self, axis: isize) -> Array {
        ok(cumsum(self, Some(axis)), self)
    }
    /// Sorted along the last axis.
    #[track_caller]
    pub fn sort(&self) -> Array {
        ok(sort(self, -1), self)
    }
}
