//! `jnp`: the numpy-style API over `lax` — creation, elementwise math with broadcasting
//! and promotion, reductions, shape ops and matmul. Named functions return `Result`;
//! methods on `Array` and operators (`ops.rs`) are the readable spelling for cells.

pub mod einsum;
pub mod elementwise;
pub mod indexing;
pub mod manip;
pub mod ops;
pub mod reductions;

pub use einsum::{einsum, einsum_with};
pub use elementwise::remainder as mod_;
pub use elementwise::*;
pub use indexing::{index, At, Index, IndexItem, ELLIPSIS, NEW_AXIS};
pub use manip::*;
pub use reductions::*;

use crate::error::{Error, Result};
use crate::ir::{DType, Primitive, Scalar, ShapedArray};
use crate::lax::promotion::check_user_dtype_supported;
use crate::lax::{self, literal};
use crate::runtime::Buffer;
use crate::trace::array::{canonicalize_dtype, Element};
use crate::trace::{is_tracing, Array, Operand};

/// Scalars that can bound an `arange`/`linspace` or fill an array: `f64` → float32,
/// `i32`/`i64` → int32 (64-bit with `jax_enable_x64`).
pub trait ScalarLike: Copy {
    fn scalar(self) -> Scalar;
}
impl ScalarLike for f64 {
    fn scalar(self) -> Scalar {
        Scalar::F64(self)
    }
}
impl ScalarLike for f32 {
    fn scalar(self) -> Scalar {
        Scalar::F32(self)
    }
}
impl ScalarLike for i32 {
    fn scalar(self) -> Scalar {
        Scalar::I32(self)
    }
}
impl ScalarLike for i64 {
    fn scalar(self) -> Scalar {
        Scalar::I64(self)
    }
}
impl ScalarLike for bool {
    fn scalar(self) -> Scalar {
        Scalar::Bool(self)
    }
}

fn default_dtype(s: Scalar) -> DType {
    match s {
        Scalar::F32(_) | Scalar::F64(_) => canonicalize_dtype(DType::F64),
        Scalar::I32(_) | Scalar::I64(_) => canonicalize_dtype(DType::I64),
        Scalar::Bool(_) => DType::Bool,
    }
}

#[track_caller]
fn host_array(values: impl Iterator<Item = f64>, shape: &[usize], dtype: DType) -> Array {
    let aval = ShapedArray::new(shape, dtype);
    // Checked against the device's memory limit before anything is allocated (an
    // allocation the system cannot give would abort the process and lose the session).
    let mut buf = match Buffer::for_host_values(&aval) {
        Ok(b) => b,
        Err(e) => return ops::fail(e, aval),
    };
    let size = dtype.size_bytes();
    for (chunk, v) in buf.bytes_mut().chunks_exact_mut(size.max(1)).zip(values) {
        chunk.copy_from_slice(&Scalar::F64(v).cast(dtype).to_bytes(dtype));
    }
    Array::from_buffer(buf, false)
}

/// `jnp.arange(stop)`: 0, 1, ..., stop-1; float32 for a float `stop`, int32 for an int.
#[track_caller]
pub fn arange<T: ScalarLike>(stop: T) -> Array {
    let s = stop.scalar();
    arange_dtype(0.0, s.as_f64(), 1.0, default_dtype(s)).unwrap_or_else(|e| ops::fail(e, ShapedArray::new(&[0], default_dtype(s))))
}

/// `jnp.arange(start, stop, step, dtype)` with an explicit dtype (a 64-bit dtype becomes
/// 32-bit with JAX's `UserWarning` while `jax_enable_x64` is off). Errors for a zero step.
#[track_caller]
pub fn arange_dtype(start: f64, stop: f64, step: f64, dtype: DType) -> Result<Array> {
    let dtype = check_user_dtype_supported(dtype, "arange");
    arange_in(start, stop, step, dtype)
}

#[track_caller]
fn arange_in(start: f64, stop: f64, step: f64, dtype: DType) -> Result<Array> {
    if step == 0.0 {
        return Err(Error::value_error("arange: step must not be zero"));
    }
    let n = (((stop - start) / step).ceil()).max(0.0) as usize;
    if is_tracing() {
        let i = lax::iota(dtype, &[n], 0)?;
        if start == 0.0 && step == 1.0 {
            return Ok(i);
        }
        let scaled = if step != 1.0 { lax::binary(Primitive::Mul, Operand::Array(i), lit_of(step, dtype))? } else { i };
        return lax::binary(Primitive::Add, Operand::Array(scaled), lit_of(start, dtype));
    }
    Ok(host_array((0..n).map(|k| start + k as f64 * step), &[n], dtype))
}

fn lit_of(v: f64, dtype: DType) -> Operand {
    Operand::Lit(Scalar::F64(v).cast(dtype), ShapedArray::weak(&[], dtype))
}

/// `jnp.linspace(start, stop, num)` (endpoint included), float32 (float64 with x64).
#[track_caller]
pub fn linspace(start: f64, stop: f64, num: usize) -> Array {
    let dtype = canonicalize_dtype(DType::F64);
    linspace_in(start, stop, num, dtype).unwrap_or_else(|e| ops::fail(e, ShapedArray::new(&[num], dtype)))
}

/// `jnp.linspace(start, stop, num, dtype=dtype)`: `num` evenly spaced values of `dtype`
/// (computed in floating point, then cast; a 64-bit dtype becomes 32-bit with JAX's
/// `UserWarning` while `jax_enable_x64` is off).
#[track_caller]
pub fn linspace_dtype(start: f64, stop: f64, num: usize, dtype: DType) -> Result<Array> {
    let dtype = check_user_dtype_supported(dtype, "linspace");
    linspace_in(start, stop, num, dtype)
}

#[track_caller]
fn linspace_in(start: f64, stop: f64, num: usize, dtype: DType) -> Result<Array> {
    let step = if num > 1 { (stop - start) / (num - 1) as f64 } else { 0.0 };
    if is_tracing() {
        let f = if dtype.is_float() { dtype } else { canonicalize_dtype(DType::F64) };
        let v = arange_in(0.0, num as f64, 1.0, f)
            .and_then(|i| lax::binary(Primitive::Mul, Operand::Array(i), lit_of(step, f)))
            .and_then(|i| lax::binary(Primitive::Add, Operand::Array(i), lit_of(start, f)))?;
        return if f == dtype { Ok(v) } else { lax::convert_element_type(&v, dtype) };
    }
    Ok(host_array((0..num).map(|k| if k + 1 == num && num > 1 { stop } else { start + k as f64 * step }), &[num], dtype))
}

/// `jnp.full(shape, value, dtype)`. A 64-bit `dtype` becomes 32-bit with JAX's
/// `UserWarning` (`Explicitly requested dtype float64 requested in full is not
/// available, ...`) while `jax_enable_x64` is off, as for every creation function.
#[track_caller]
pub fn full<T: ScalarLike>(shape: &[usize], value: T, dtype: DType) -> Array {
    full_in("full", shape, value, dtype)
}

#[track_caller]
fn full_in<T: ScalarLike>(fun: &str, shape: &[usize], value: T, dtype: DType) -> Array {
    let dtype = check_user_dtype_supported(dtype, fun);
    if is_tracing() {
        let v = Operand::Lit(value.scalar().cast(dtype), ShapedArray::new(&[], dtype));
        return lax::bind1(Primitive::BroadcastInDim { shape: shape.to_vec(), broadcast_dimensions: vec![] }, vec![v])
            .unwrap_or_else(|e| ops::fail(e, ShapedArray::new(shape, dtype)));
    }
    let n: usize = shape.iter().product();
    host_array(std::iter::repeat_n(value.scalar().as_f64(), n), shape, dtype)
}

/// The dtype of a creation function: the one given, or JAX's default `dtype=None`:
/// float32 (float64 with `jax_enable_x64`).
fn dtype_or_default(dtype: Option<DType>) -> DType {
    dtype.unwrap_or_else(|| canonicalize_dtype(DType::F64))
}

/// `jnp.zeros(shape, dtype)`: `dtype` is a `DType` or `None` for JAX's default (float32;
/// float64 with `jax_enable_x64`): `jnp::zeros(&[2, 3], None)`.
#[track_caller]
pub fn zeros(shape: &[usize], dtype: impl Into<Option<DType>>) -> Array {
    full_in("zeros", shape, 0.0, dtype_or_default(dtype.into()))
}

/// `jnp.ones(shape, dtype)`: `dtype` is a `DType` or `None` for JAX's default (float32;
/// float64 with `jax_enable_x64`): `jnp::ones(&[3], None)`.
#[track_caller]
pub fn ones(shape: &[usize], dtype: impl Into<Option<DType>>) -> Array {
    full_in("ones", shape, 1.0, dtype_or_default(dtype.into()))
}

/// `jnp.empty(shape, dtype)`: as in JAX, zero-filled (XLA has no uninitialized arrays);
/// `dtype` `None` is the default float dtype, as for `zeros`.
#[track_caller]
pub fn empty(shape: &[usize], dtype: impl Into<Option<DType>>) -> Array {
    full_in("empty", shape, 0.0, dtype_or_default(dtype.into()))
}

/// `jnp.full_like(x, value, dtype)`: `x`'s shape, `dtype` or else `x`'s dtype.
#[track_caller]
pub fn full_like<T: ScalarLike>(x: &Array, value: T, dtype: Option<DType>) -> Array {
    full_in("full_like", &x.shape(), value, dtype.unwrap_or_else(|| x.dtype()))
}

/// `jnp.zeros_like(x, dtype)`: zeros of `x`'s shape, `dtype` or else `x`'s dtype.
#[track_caller]
pub fn zeros_like(x: &Array, dtype: Option<DType>) -> Array {
    full_in("zeros_like", &x.shape(), 0.0, dtype.unwrap_or_else(|| x.dtype()))
}

/// `jnp.ones_like(x, dtype)`: ones of `x`'s shape, `dtype` or else `x`'s dtype.
#[track_caller]
pub fn ones_like(x: &Array, dtype: Option<DType>) -> Array {
    full_in("ones_like", &x.shape(), 1.0, dtype.unwrap_or_else(|| x.dtype()))
}

/// `jnp.array(data)` for a 1-d slice (64-bit data becomes 32-bit while x64 is off,
/// silently, as for a Python list or numpy array without `dtype=`).
pub fn array<T: Element>(data: &[T]) -> Array {
    Array::from_slice(data)
}

/// `jnp.array(data, dtype=dtype)` for a 1-d slice: the data cast to `dtype` (a 64-bit
/// `dtype` becomes 32-bit with JAX's `UserWarning` while `jax_enable_x64` is off).
#[track_caller]
pub fn array_dtype<T: Element>(data: &[T], dtype: DType) -> Result<Array> {
    let dtype = check_user_dtype_supported(dtype, "array");
    lax::convert_element_type_unchecked(&Array::from_slice(data), dtype)
}

/// `jnp.asarray(x, dtype=dtype)`: `x` itself, or cast to `dtype` (a 64-bit `dtype`
/// becomes 32-bit with JAX's `UserWarning` while `jax_enable_x64` is off).
#[track_caller]
pub fn asarray(x: &Array, dtype: Option<DType>) -> Result<Array> {
    match dtype {
        None => Ok(x.clone()),
        Some(d) => lax::convert_element_type_unchecked(x, check_user_dtype_supported(d, "asarray")),
    }
}

/// `jnp.where(cond, x, y)` with broadcasting and promotion.
#[track_caller]
pub fn where_(cond: &Array, x: &Array, y: &Array) -> Result<Array> {
    let (dtype, weak) = lax::promote(&x.aval(), &y.aval());
    let shape = lax::broadcast_shapes("where", &x.shape(), &y.shape())?;
    let shape = lax::broadcast_shapes("where", &cond.shape(), &shape)?;
    let fix = |a: &Array| -> Result<Array> {
        let a = match lax::convert(Operand::Array(a.clone()), dtype, weak && a.weak_type())? {
            Operand::Array(a) => a,
            _ => unreachable!(),
        };
        lax::broadcast_to(&a, &shape)
    };
    let c = if cond.dtype() != DType::Bool { lax::binary(Primitive::Ne, Operand::Array(cond.clone()), literal(Scalar::I32(0)))? } else { cond.clone() };
    lax::select_n(&lax::broadcast_to(&c, &shape)?, &[fix(y)?, fix(x)?])
}

#[track_caller]
fn norm_axes(op: &str, axes: Option<&[isize]>, ndim: usize) -> Result<Vec<usize>> {
    match axes {
        None => Ok((0..ndim).collect()),
        Some(a) => {
            let mut out = Vec::new();
            for &ax in a {
                let n = if ax < 0 { ax + ndim as isize } else { ax };
                if n < 0 || n as usize >= ndim {
                    return Err(Error::value_error(format!(
                        "{op}: axis {ax} is out of bounds for array of dimension {ndim}"
                    ))
                    .here());
                }
                out.push(n as usize);
            }
            out.sort();
            out.dedup();
            Ok(out)
        }
    }
}

/// `jnp.sum(x, axis)`; bools and small ints sum as int32 (uint8 as uint32), as in JAX.
#[track_caller]
pub fn sum(x: &Array, axes: Option<&[isize]>) -> Result<Array> {
    let axes = norm_axes("sum", axes, x.ndim())?;
    lax::bind1(Primitive::ReduceSum { axes }, vec![Operand::Array(reductions::small_int_to_i32(x)?)])
}

/// `jnp.max(x, axis)`.
#[track_caller]
pub fn max(x: &Array, axes: Option<&[isize]>) -> Result<Array> {
    let axes = norm_axes("max", axes, x.ndim())?;
    lax::bind1(Primitive::ReduceMax { axes }, vec![Operand::Array(x.clone())])
}

/// `jnp.min(x, axis)`.
#[track_caller]
pub fn min(x: &Array, axes: Option<&[isize]>) -> Result<Array> {
    let axes = norm_axes("min", axes, x.ndim())?;
    lax::bind1(Primitive::ReduceMin { axes }, vec![Operand::Array(x.clone())])
}

/// `jnp.mean(x, axis)`: float result (ints are promoted to float32).
#[track_caller]
pub fn mean(x: &Array, axes: Option<&[isize]>) -> Result<Array> {
    let ax = norm_axes("mean", axes, x.ndim())?;
    let n: usize = ax.iter().map(|&a| x.shape()[a]).product();
    let x = if !x.dtype().is_float() { lax::convert_element_type(x, canonicalize_dtype(DType::F64))? } else { x.clone() };
    let s = lax::bind1(Primitive::ReduceSum { axes: ax }, vec![Operand::Array(x)])?;
    lax::binary(Primitive::Div, Operand::Array(s), literal(Scalar::F64(n as f64)))
}

/// `jnp.reshape(x, shape)`; one entry may be -1 (inferred).
#[track_caller]
pub fn reshape(x: &Array, shape: &[isize]) -> Result<Array> {
    let size = x.size();
    let known: usize = shape.iter().filter(|&&d| d >= 0).map(|&d| d as usize).product();
    let infer = shape.iter().filter(|&&d| d < 0).count();
    if infer > 1 || (infer == 1 && (known == 0 || size % known != 0)) || (infer == 0 && known != size) {
        return Err(Error::type_error(format!(
            "cannot reshape array of shape {} (size {size}) into shape {:?}",
            lax::py_shape(&x.shape()),
            shape
        )));
    }
    let dims: Vec<usize> = shape.iter().map(|&d| if d < 0 { size / known } else { d as usize }).collect();
    lax::reshape(x, &dims)
}

/// `jnp.transpose(x, axes)`; `None` reverses the dimensions.
#[track_caller]
pub fn transpose(x: &Array, axes: Option<&[usize]>) -> Result<Array> {
    let perm: Vec<usize> = axes.map(|a| a.to_vec()).unwrap_or_else(|| (0..x.ndim()).rev().collect());
    lax::transpose(x, &perm)
}

/// `jnp.matmul(a, b)` (`a @ b`), numpy's rules: a 1-d `a` is a row vector and a 1-d `b` a
/// column vector (that dim is dropped from the result); operands of more than 2 dims are
/// stacks of matrices whose leading (batch) dims broadcast against each other (`[2,3,4] @
/// [4,5]` is `[2,3,5]`; `[1,3,4] @ [6,4,5]` is `[6,3,5]`). Errors: a 0-d operand
/// (`ValueError`), contracting dims of different sizes or batch dims that do not broadcast
/// (`TypeError`), at the caller's line.
#[track_caller]
pub fn matmul(a: &Array, b: &Array) -> Result<Array> {
    matmul_with(a, b, None::<crate::ir::DotPrecision>)
}

/// `jnp.matmul(a, b, precision=...)`: `precision` is a `lax::Precision` level, a
/// `(lhs, rhs)` pair, a `lax::DotAlgorithmPreset` or a string (`"highest"`,
/// `"BF16_BF16_F32_X3"`); see `lax::dot_general_with`. Errors: as `matmul`, plus an
/// unknown precision string.
#[track_caller]
pub fn matmul_with(a: &Array, b: &Array, precision: impl crate::ir::IntoPrecision) -> Result<Array> {
    let precision = precision.into_precision()?;
    let (na, nb) = (a.ndim(), b.ndim());
    if na == 0 || nb == 0 {
        return Err(Error::value_error("matmul: operands must not be 0-d (use * for scalars)").here());
    }
    let (sa, sb) = (a.shape(), b.shape());
    let ka = na - 1;
    let kb = if nb == 1 { 0 } else { nb - 2 };
    if sa[ka] != sb[kb] {
        // JAX's text (`jnp.matmul` raises lax.dot_general's error), at the caller's line.
        return Err(Error::type_error(format!(
            "dot_general requires contracting dimensions to have the same shape, got ({},) and ({},).",
            sa[ka], sb[kb]
        ))
        .here());
    }
    if na <= 2 && nb <= 2 {
        return lax::dot_general_with(a, b, (&[ka], &[kb]), (&[], &[]), precision, None);
    }
    if nb <= 2 {
        // Only `a` has leading dims: one product over them, result `a.lead + [m] (+ [n])`.
        return lax::dot_general_with(a, b, (&[ka], &[kb]), (&[], &[]), precision, None);
    }
    if na == 1 {
        // A vector times a stack: result `b.lead + [n]`.
        return lax::dot_general_with(a, b, (&[0], &[kb]), (&[], &[]), precision, None);
    }
    // Both are matrices or stacks of them: the leading (batch) dims broadcast as numpy's do.
    let batch_shape = lax::broadcast_shapes("matmul", &sa[..na - 2], &sb[..nb - 2]).map_err(|e| e.here())?;
    let stack = |x: &Array, s: &[usize]| {
        let mut shape = batch_shape.clone();
        shape.extend_from_slice(&s[s.len() - 2..]);
        lax::broadcast_to(x, &shape)
    };
    let (a, b) = (stack(a, &sa)?, stack(b, &sb)?);
    let nbatch = batch_shape.len();
    let batch: Vec<usize> = (0..nbatch).collect();
    lax::dot_general_with(&a, &b, (&[nbatch + 1], &[nbatch]), (&batch, &batch), precision, None)
}

/// `jnp.dot(a, b)` (same as matmul for 1-d and 2-d operands).
#[track_caller]
pub fn dot(a: &Array, b: &Array) -> Result<Array> {
    matmul(a, b)
}

/// `jnp.dot(a, b, precision=...)` (see `matmul_with`).
#[track_caller]
pub fn dot_with(a: &Array, b: &Array, precision: impl crate::ir::IntoPrecision) -> Result<Array> {
    matmul_with(a, b, precision)
}

macro_rules! unary_fns {
    ($($name:ident => $p:ident: $doc:expr),+) => {$(
        #[doc = $doc]
        #[track_caller]
        pub fn $name(x: &Array) -> Result<Array> {
            lax::unary(Primitive::$p, x)
        }
    )+};
}
unary_fns!(
    exp => Exp: "`jnp.exp`: e^x (ints promote to float32).",
    log => Log: "`jnp.log`: natural logarithm.",
    sin => Sin: "`jnp.sin`.",
    cos => Cos: "`jnp.cos`.",
    tan => Tan: "`jnp.tan`: sin(x)/cos(x) (ints promote to float32); derivative 1 + tan(x)².",
    tanh => Tanh: "`jnp.tanh`.",
    sqrt => Sqrt: "`jnp.sqrt`.",
    negative => Neg: "`jnp.negative`: -x.",
    abs => Abs: "`jnp.abs`: |x|."
);

macro_rules! binary_fns {
    ($($name:ident => $p:ident: $doc:expr),+) => {$(
        #[doc = $doc]
        #[track_caller]
        pub fn $name(x: &Array, y: &Array) -> Result<Array> {
            lax::binary(Primitive::$p, Operand::Array(x.clone()), Operand::Array(y.clone()))
        }
    )+};
}
binary_fns!(
    add => Add: "`jnp.add` with broadcasting. Errors: incompatible shapes (`TypeError` naming both).",
    subtract => Sub: "`jnp.subtract`.",
    multiply => Mul: "`jnp.multiply`.",
    divide => Div: "`jnp.divide` (true division for floats).",
    power => Pow: "`jnp.power`.",
    maximum => Max: "`jnp.maximum`.",
    minimum => Min: "`jnp.minimum`.",
    equal => Eq: "`jnp.equal` (bool result).",
    not_equal => Ne: "`jnp.not_equal`.",
    less => Lt: "`jnp.less`.",
    less_equal => Le: "`jnp.less_equal`.",
    greater => Gt: "`jnp.greater`.",
    greater_equal => Ge: "`jnp.greater_equal`."
);
