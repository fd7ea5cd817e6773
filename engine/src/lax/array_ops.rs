//! `lax` wrappers of the array-language primitives (issue 3), re-exported from `lax`.
//! Each binds one primitive on already-typed operands (no promotion except where noted);
//! errors come from the type rules in `shape_ops.rs` and name the op and the shapes.

use super::{bind1, convert, literal};
use crate::error::{Error, Result};
use crate::ir::{ConvDims, CumOp, DType, GatherDims, GatherMode, Primitive, Scalar, ScatterDims, ScatterOp, WindowOp};
use crate::trace::{bind, Array, Operand};
use std::panic::Location;

fn op(x: &Array) -> Operand {
    Operand::Array(x.clone())
}

/// Binds a unary primitive on `x`.
#[track_caller]
pub fn unary_prim(p: Primitive, x: &Array) -> Result<Array> {
    bind1(p, vec![op(x)])
}

/// `lax.integer_pow(x, y)`: x ** y by repeated multiplication (`integer_pow[y=..]`).
/// Errors: negative `y` for integer `x`.
#[track_caller]
pub fn integer_pow(x: &Array, y: i32) -> Result<Array> {
    bind1(Primitive::IntegerPow { y }, vec![op(x)])
}

/// `lax.round(x, rounding_method)`: 0 = half away from zero, 1 = half to even.
#[track_caller]
pub fn round(x: &Array, rounding_method: u8) -> Result<Array> {
    bind1(Primitive::Round { rounding_method }, vec![op(x)])
}

/// `lax.reduce_precision(x, exponent_bits, mantissa_bits)` (floats; same dtype out).
#[track_caller]
pub fn reduce_precision(x: &Array, exponent_bits: u32, mantissa_bits: u32) -> Result<Array> {
    bind1(Primitive::ReducePrecision { exponent_bits, mantissa_bits }, vec![op(x)])
}

/// `lax.concatenate(operands, dimension)`: equal dtypes and shapes except `dimension`.
#[track_caller]
pub fn concatenate(xs: &[Array], dimension: usize) -> Result<Array> {
    bind1(Primitive::Concatenate { dimension }, xs.iter().map(op).collect())
}

/// `lax.pad(x, padding_value, padding_config)` with (low, high, interior) per dim;
/// negative low/high trim. `padding_value` is cast to `x`'s dtype.
#[track_caller]
pub fn pad(x: &Array, padding_value: f64, padding_config: &[(i64, i64, i64)]) -> Result<Array> {
    let v = convert(literal(Scalar::F64(padding_value)), x.dtype(), false)?;
    bind1(Primitive::Pad { padding_config: padding_config.to_vec() }, vec![op(x), v])
}

/// `lax.rev(x, dimensions)`: reverse along `dimensions`.
#[track_caller]
pub fn rev(x: &Array, dimensions: &[usize]) -> Result<Array> {
    bind1(Primitive::Rev { dimensions: dimensions.to_vec() }, vec![op(x)])
}

/// `lax.squeeze(x, dimensions)`: drop size-1 `dimensions`.
#[track_caller]
pub fn squeeze(x: &Array, dimensions: &[usize]) -> Result<Array> {
    bind1(Primitive::Squeeze { dimensions: dimensions.to_vec() }, vec![op(x)])
}

/// `lax.expand_dims(x, dimensions)`: insert size-1 dims at `dimensions` of the result
/// (a `broadcast_in_dim`, as JAX does).
#[track_caller]
pub fn expand_dims(x: &Array, dimensions: &[usize]) -> Result<Array> {
    let n = x.ndim() + dimensions.len();
    if let Some(&d) = dimensions.iter().find(|&&d| d >= n) {
        return Err(Error::value_error(format!("expand_dims: dimension {d} out of range for result rank {n} (operand {})", x.aval().short())));
    }
    let mut shape = vec![];
    let mut bd = vec![];
    let mut it = x.shape().into_iter();
    for i in 0..n {
        if dimensions.contains(&i) {
            shape.push(1);
        } else {
            bd.push(i);
            shape.push(it.next().unwrap_or(1));
        }
    }
    bind1(Primitive::BroadcastInDim { shape, broadcast_dimensions: bd }, vec![op(x)])
}

/// `lax.slice(x, start_indices, limit_indices, strides)`.
#[track_caller]
pub fn slice(x: &Array, start_indices: &[usize], limit_indices: &[usize], strides: Option<&[usize]>) -> Result<Array> {
    let strides = strides.filter(|s| s.iter().any(|&k| k != 1)).map(|s| s.to_vec());
    bind1(Primitive::Slice { start_indices: start_indices.to_vec(), limit_indices: limit_indices.to_vec(), strides }, vec![op(x)])
}

/// `lax.dynamic_slice(x, start_indices, slice_sizes)`: starts are 0-d integer arrays,
/// clamped so the slice stays inside `x`.
#[track_caller]
pub fn dynamic_slice(x: &Array, start_indices: &[Array], slice_sizes: &[usize]) -> Result<Array> {
    let mut ops = vec![op(x)];
    ops.extend(start_indices.iter().map(op));
    bind1(Primitive::DynamicSlice { slice_sizes: slice_sizes.to_vec() }, ops)
}

/// `lax.dynamic_update_slice(x, update, start_indices)` (starts clamped).
#[track_caller]
pub fn dynamic_update_slice(x: &Array, update: &Array, start_indices: &[Array]) -> Result<Array> {
    let mut ops = vec![op(x), op(update)];
    ops.extend(start_indices.iter().map(op));
    bind1(Primitive::DynamicUpdateSlice, ops)
}

/// `lax.split(x, sizes, axis)`: one array per size.
#[track_caller]
pub fn split(x: &Array, sizes: &[usize], axis: usize) -> Result<Vec<Array>> {
    bind(Primitive::Split { sizes: sizes.to_vec(), axis }, vec![op(x)], Location::caller())
}

/// `lax.gather` with XLA dimension numbers (index vector last).
#[track_caller]
pub fn gather(x: &Array, indices: &Array, dimension_numbers: GatherDims, slice_sizes: &[usize], mode: GatherMode) -> Result<Array> {
    bind1(
        Primitive::Gather {
            dimension_numbers,
            slice_sizes: slice_sizes.to_vec(),
            mode,
            fill_value: None,
            indices_are_sorted: false,
            unique_indices: false,
        },
        vec![op(x), op(indices)],
    )
}

/// `lax.scatter` / `scatter_add` / ... with XLA dimension numbers (index vector last).
#[track_caller]
pub fn scatter(kind: ScatterOp, x: &Array, indices: &Array, updates: &Array, dimension_numbers: ScatterDims, mode: GatherMode) -> Result<Array> {
    let p = Primitive::Scatter { op: kind, dimension_numbers, mode, indices_are_sorted: false, unique_indices: false };
    bind1(p, vec![op(x), op(indices), op(updates)])
}

/// `lax.sort(operands, dimension, is_stable, num_keys)`: sorts all operands by the first
/// `num_keys` (NaNs last).
#[track_caller]
pub fn sort(xs: &[Array], dimension: usize, num_keys: usize) -> Result<Vec<Array>> {
    bind(Primitive::Sort { dimension, is_stable: true, num_keys }, xs.iter().map(op).collect(), Location::caller())
}

/// `lax.top_k(x, k)`: the k largest along the last dim and their int32 indices.
#[track_caller]
pub fn top_k(x: &Array, k: usize) -> Result<(Array, Array)> {
    let mut v = bind(Primitive::TopK { k }, vec![op(x)], Location::caller())?;
    let i = v.pop().ok_or_else(|| Error::type_error("top_k: no outputs"))?;
    let x = v.pop().ok_or_else(|| Error::type_error("top_k: no outputs"))?;
    Ok((x, i))
}

/// `lax.cumsum`/`cumprod`/`cummax`/`cummin(x, axis, reverse)`.
#[track_caller]
pub fn cumulative(kind: CumOp, x: &Array, axis: usize, reverse: bool) -> Result<Array> {
    bind1(Primitive::Cumulative { op: kind, axis, reverse }, vec![op(x)])
}

/// `lax.argmax`/`argmin(x, axis, index_dtype)`.
#[track_caller]
pub fn argminmax(is_max: bool, x: &Array, axis: usize, index_dtype: DType) -> Result<Array> {
    let axes = vec![axis];
    let p = if is_max { Primitive::ArgMax { axes, index_dtype } } else { Primitive::ArgMin { axes, index_dtype } };
    bind1(p, vec![op(x)])
}

/// `lax.conv_general_dilated` with NCHW/OIHW/NCHW layout (or explicit `dimension_numbers`).
#[allow(clippy::too_many_arguments)]
#[track_caller]
pub fn conv_general_dilated(
    lhs: &Array,
    rhs: &Array,
    window_strides: &[usize],
    padding: &[(i64, i64)],
    lhs_dilation: Option<&[usize]>,
    rhs_dilation: Option<&[usize]>,
    dimension_numbers: Option<ConvDims>,
    feature_group_count: usize,
) -> Result<Array> {
    let ns = lhs.ndim().saturating_sub(2);
    let ones = vec![1; ns];
    let (dtype, _) = super::promote(&lhs.aval(), &rhs.aval());
    let l = super::convert_element_type(lhs, dtype)?;
    let r = super::convert_element_type(rhs, dtype)?;
    bind1(
        Primitive::ConvGeneralDilated {
            window_strides: window_strides.to_vec(),
            padding: padding.to_vec(),
            lhs_dilation: lhs_dilation.map(|d| d.to_vec()).unwrap_or(ones.clone()),
            rhs_dilation: rhs_dilation.map(|d| d.to_vec()).unwrap_or(ones),
            dimension_numbers: dimension_numbers.unwrap_or(ConvDims::nchw(ns)),
            feature_group_count,
            batch_group_count: 1,
            preferred_element_type: None,
        },
        vec![op(&l), op(&r)],
    )
}

/// `lax.reduce_window` with sum/max/min (`reduce_window_sum`, ...): one entry per dim.
#[track_caller]
pub fn reduce_window(kind: WindowOp, x: &Array, window_dimensions: &[usize], window_strides: &[usize], padding: &[(i64, i64)]) -> Result<Array> {
    let n = x.ndim();
    bind1(
        Primitive::ReduceWindow {
            op: kind,
            window_dimensions: window_dimensions.to_vec(),
            window_strides: window_strides.to_vec(),
            padding: padding.to_vec(),
            base_dilation: vec![1; n],
            window_dilation: vec![1; n],
        },
        vec![op(x)],
    )
}
