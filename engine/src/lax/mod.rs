//! `lax`: thin, typed wrappers over primitives, plus JAX's type promotion and numpy
//! broadcasting used by `jnp`. Every function returns `Result`; the user's line comes
//! from `#[track_caller]`.

pub mod array_ops;
pub mod control;
pub mod parallel;
pub mod precision;
pub mod promotion;
pub mod shape;
pub mod shape_ops;

pub use array_ops::*;
pub use promotion::promote_types;
pub use parallel::{all_gather, all_to_all, axis_index, axis_size, pcast, pmax, pmean, pmin, ppermute, psum, psum_scatter};
pub use control::{cond, fori_loop, fori_loop_dynamic, map, scan, switch, while_loop};

use crate::error::{Error, Result};
use crate::ir::{DType, Primitive, Scalar, ShapedArray};
pub use crate::ir::{DotAlgorithmPreset, DotPrecision, IntoPrecision, Precision};
pub use precision::{default_matmul_precision, set_default_matmul_precision, with_default_matmul_precision, DefaultPrecisionGuard};
use crate::trace::{bind, Array, Operand};
use std::panic::Location;

/// Binds a single-output primitive.
#[track_caller]
pub fn bind1(p: Primitive, operands: Vec<Operand>) -> Result<Array> {
    let loc = Location::caller();
    let mut outs = bind(p, operands, loc)?;
    outs.pop().ok_or_else(|| Error::type_error("primitive produced no output"))
}

/// JAX's type promotion with weak types: the result dtype of a binary op on operands of
/// types `a` and `b`, and whether it is weak (the least upper bound in JAX's lattice,
/// `promotion::promote_lattice`; 64-bit results become 32-bit while `jax_enable_x64`
/// is off). See <https://docs.jax.dev/en/latest/type_promotion.html>.
pub fn promote(a: &ShapedArray, b: &ShapedArray) -> (DType, bool) {
    let (d, weak) = promotion::promote_lattice((a.dtype, a.weak_type), (b.dtype, b.weak_type));
    (crate::trace::array::canonicalize_dtype(d), weak)
}

/// numpy broadcasting of two shapes. Errors name the op and both shapes.
pub fn broadcast_shapes(op: &str, a: &[usize], b: &[usize]) -> Result<Vec<usize>> {
    let n = a.len().max(b.len());
    let mut out = vec![0; n];
    for i in 0..n {
        let da = if i + a.len() >= n { a[i + a.len() - n] } else { 1 };
        let db = if i + b.len() >= n { b[i + b.len() - n] } else { 1 };
        out[i] = if da == db || db == 1 {
            da
        } else if da == 1 {
            db
        } else {
            return Err(Error::type_error(format!(
                "{op} got incompatible shapes for broadcasting: {}, {}.",
                py_shape(a),
                py_shape(b)
            )));
        };
    }
    Ok(out)
}

/// Python tuple text of a shape: `(3,)`, `(2, 4)`.
pub fn py_shape(s: &[usize]) -> String {
    crate::ir::pretty::py_tuple(s)
}

/// Converts `x` to `dtype` (no-op when equal), keeping or setting the weak flag.
#[track_caller]
pub fn convert(x: Operand, dtype: DType, weak: bool) -> Result<Operand> {
    let a = x.aval();
    if a.dtype == dtype && a.weak_type == weak {
        return Ok(x);
    }
    match x {
        Operand::Lit(v, aval) => Ok(Operand::Lit(v.cast(dtype), ShapedArray { dtype, weak_type: weak, ..aval })),
        Operand::Array(arr) => {
            if a.dtype == dtype {
                // Only the weak flag differs: JAX still records a convert.
                return Ok(Operand::Array(bind1(Primitive::ConvertElementType { new_dtype: dtype, weak_type: weak }, vec![Operand::Array(arr)])?));
            }
            Ok(Operand::Array(bind1(Primitive::ConvertElementType { new_dtype: dtype, weak_type: weak }, vec![Operand::Array(arr)])?))
        }
    }
}

/// Broadcasts `x` to `shape` with numpy's trailing alignment.
#[track_caller]
pub fn broadcast_to(x: &Array, shape: &[usize]) -> Result<Array> {
    let s = x.shape();
    if s == shape {
        return Ok(x.clone());
    }
    broadcast_shapes("broadcast_to", &s, shape)?;
    if s.len() > shape.len() {
        return Err(Error::value_error(format!("cannot broadcast {} to {}", py_shape(&s), py_shape(shape))));
    }
    let off = shape.len() - s.len();
    bind1(
        Primitive::BroadcastInDim { shape: shape.to_vec(), broadcast_dimensions: (off..shape.len()).collect() },
        vec![Operand::Array(x.clone())],
    )
}

/// A binary elementwise op with jnp's promotion and broadcasting.
/// Errors: incompatible shapes (`TypeError` naming the op and both shapes), with the
/// caller's line.
#[track_caller]
pub fn binary(p: Primitive, x: Operand, y: Operand) -> Result<Array> {
    let loc = crate::trace::source_info(Location::caller());
    binary_inner(p, x, y).map_err(|e| e.at(Some(loc)))
}

#[track_caller]
fn binary_inner(p: Primitive, x: Operand, y: Operand) -> Result<Array> {
    let (ax, ay) = (x.aval(), y.aval());
    let shape = broadcast_shapes(p.name(), &ax.shape, &ay.shape)?;
    let (mut dtype, weak) = promote(&ax, &ay);
    if p == Primitive::Div && !dtype.is_float() {
        // numpy's true division: integer operands divide as float32 (`jnp.true_divide`).
        dtype = crate::trace::array::canonicalize_dtype(DType::F64);
    }
    // Operands take the result's weak flag (`int32 * 2.0` converts to weak float32, as JAX).
    let x = convert(x, dtype, weak)?;
    let y = convert(y, dtype, weak)?;
    let fit = |o: Operand| -> Result<Operand> {
        match o {
            Operand::Array(a) if a.ndim() > 0 && a.shape() != shape => Ok(Operand::Array(broadcast_to(&a, &shape)?)),
            o => Ok(o),
        }
    };
    let (x, y) = (fit(x)?, fit(y)?);
    if p.is_comparison() || matches!(p, Primitive::And | Primitive::Or) {
        return bind1(p, vec![x, y]);
    }
    bind1(p, vec![x, y])
}

/// A unary elementwise op; transcendental ops promote integers and bools to float32.
#[track_caller]
pub fn unary(p: Primitive, x: &Array) -> Result<Array> {
    let a = x.aval();
    let needs_float = !matches!(p, Primitive::Neg | Primitive::Abs | Primitive::Not);
    let x = if needs_float && !a.dtype.is_float() {
        match convert(Operand::Array(x.clone()), crate::trace::array::canonicalize_dtype(DType::F64), a.weak_type)? {
            Operand::Array(a) => a,
            Operand::Lit(..) => unreachable!("arrays stay arrays"),
        }
    } else {
        x.clone()
    };
    bind1(p, vec![Operand::Array(x)])
}

/// A Rust scalar as a weakly typed literal operand.
pub fn literal(v: Scalar) -> Operand {
    let dtype = match v {
        Scalar::F32(_) | Scalar::F64(_) => crate::trace::array::canonicalize_dtype(DType::F64),
        Scalar::I32(_) | Scalar::I64(_) => crate::trace::array::canonicalize_dtype(DType::I64),
        Scalar::Bool(_) => DType::Bool,
    };
    Operand::Lit(v.cast(dtype), ShapedArray::weak(&[], dtype))
}

/// `lax.dot_general`: contracting and batch dimension pairs, at the default precision
/// (see [`dot_general_with`]).
#[track_caller]
pub fn dot_general(
    x: &Array,
    y: &Array,
    contracting: (&[usize], &[usize]),
    batch: (&[usize], &[usize]),
    preferred_element_type: Option<DType>,
) -> Result<Array> {
    dot_general_with(x, y, contracting, batch, None::<DotPrecision>, preferred_element_type)
}

/// `lax.dot_general(x, y, dimension_numbers, precision=, preferred_element_type=)`.
/// `precision` is a [`Precision`] level, a `(lhs, rhs)` pair of levels, a
/// [`DotAlgorithmPreset`], `None::<DotPrecision>` or a string (`"highest"`,
/// `"BF16_BF16_F32_X3"`); it is printed in the jaxpr and honoured when compiled (levels
/// compute in the operand precision on CPU, presets are emulated: see `lower/precision.rs`).
/// Errors: `ValueError` for an unknown precision string, or a preset other than DEFAULT
/// on non-float operands; the type rule's errors.
#[track_caller]
pub fn dot_general_with(
    x: &Array,
    y: &Array,
    contracting: (&[usize], &[usize]),
    batch: (&[usize], &[usize]),
    precision: impl IntoPrecision,
    preferred_element_type: Option<DType>,
) -> Result<Array> {
    let precision = precision.into_precision()?;
    let (dtype, _) = promote(&x.aval(), &y.aval());
    if let Some(DotPrecision::Algorithm(p)) = precision {
        if p != DotAlgorithmPreset::Default && !dtype.is_float() {
            return Err(Error::value_error(format!(
                "dot_general: the algorithm {} needs floating-point operands, got {}; use precision=None for integer dots",
                p.name(),
                dtype.name()
            )));
        }
    }
    let x = match convert(Operand::Array(x.clone()), dtype, false)? {
        Operand::Array(a) => a,
        _ => unreachable!(),
    };
    let y = match convert(Operand::Array(y.clone()), dtype, false)? {
        Operand::Array(a) => a,
        _ => unreachable!(),
    };
    bind1(
        Primitive::DotGeneral {
            lhs_contracting: contracting.0.to_vec(),
            rhs_contracting: contracting.1.to_vec(),
            lhs_batch: batch.0.to_vec(),
            rhs_batch: batch.1.to_vec(),
            precision,
            preferred_element_type: Some(preferred_element_type.unwrap_or(dtype)),
            out_sharding: crate::sharding_rules::dot_out_sharding_in_scope(),
        },
        vec![Operand::Array(x), Operand::Array(y)],
    )
}

/// `lax.iota`: 0, 1, ... along `dimension` of `shape`.
#[track_caller]
pub fn iota(dtype: DType, shape: &[usize], dimension: usize) -> Result<Array> {
    bind1(Primitive::Iota { dtype, shape: shape.to_vec(), dimension }, vec![])
}

/// `lax.select_n(which, cases)`.
#[track_caller]
pub fn select_n(which: &Array, cases: &[Array]) -> Result<Array> {
    let mut ops = vec![Operand::Array(which.clone())];
    ops.extend(cases.iter().cloned().map(Operand::Array));
    bind1(Primitive::SelectN, ops)
}

/// `lax.convert_element_type(x, dtype)`: a strongly typed cast. A 64-bit `dtype` becomes
/// 32-bit with JAX's `UserWarning` while `jax_enable_x64` is off, so converting a float32
/// array to float64 is then the identity (no equation), as in JAX.
#[track_caller]
pub fn convert_element_type(x: &Array, dtype: DType) -> Result<Array> {
    convert_element_type_unchecked(x, promotion::check_user_dtype_supported(dtype, "convert_element_type"))
}

/// `convert_element_type` for a dtype already checked by the caller (no x64 warning):
/// `dtype` is used as given.
#[track_caller]
pub fn convert_element_type_unchecked(x: &Array, dtype: DType) -> Result<Array> {
    match convert(Operand::Array(x.clone()), dtype, false)? {
        Operand::Array(a) => Ok(a),
        _ => unreachable!(),
    }
}

/// `lax.reshape` to `new_sizes`.
#[track_caller]
pub fn reshape(x: &Array, new_sizes: &[usize]) -> Result<Array> {
    if x.shape() == new_sizes {
        return Ok(x.clone());
    }
    bind1(Primitive::Reshape { new_sizes: new_sizes.to_vec() }, vec![Operand::Array(x.clone())])
}

/// `lax.transpose` with `permutation`.
#[track_caller]
pub fn transpose(x: &Array, permutation: &[usize]) -> Result<Array> {
    bind1(Primitive::Transpose { permutation: permutation.to_vec() }, vec![Operand::Array(x.clone())])
}
