//! `jax.nn`: activations and normalizers built from `jnp`/`lax` ops — relu, gelu (tanh
//! approximation or exact erf, JAX's `approximate` flag), sigmoid, softmax, log_softmax,
//! logsumexp (numerically stable: the maximum is subtracted before `exp`, as JAX does)
//! and one_hot. Axes may be negative.

use crate::error::Result;
use crate::ir::{DType, Primitive, Scalar};
use crate::lax::{self, literal};
use crate::numpy as jnp;
use crate::trace::{Array, Operand};

fn a(x: &Array) -> Operand {
    Operand::Array(x.clone())
}
fn f(v: f64) -> Operand {
    literal(Scalar::F64(v))
}

/// `jax.nn.relu`: `max(x, 0)`.
#[track_caller]
pub fn relu(x: &Array) -> Result<Array> {
    let z = if x.dtype().is_float() { f(0.0) } else { literal(Scalar::I32(0)) };
    lax::binary(Primitive::Max, a(x), z)
}

/// `jax.nn.sigmoid`: `logistic(x)`.
#[track_caller]
pub fn sigmoid(x: &Array) -> Result<Array> {
    jnp::logistic(x)
}

/// `jax.nn.gelu(x, approximate)`: `approximate` uses
/// `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`, otherwise `x (1 + erf(x / sqrt 2)) / 2`.
#[track_caller]
pub fn gelu(x: &Array, approximate: bool) -> Result<Array> {
    let x = if x.dtype().is_float() { x.clone() } else { lax::convert_element_type(x, crate::trace::array::canonicalize_dtype(DType::F64))? };
    if approximate {
        let c = (2.0 / std::f64::consts::PI).sqrt();
        let x3 = lax::integer_pow(&x, 3)?;
        let inner = lax::binary(Primitive::Add, a(&x), Operand::Array(lax::binary(Primitive::Mul, f(0.044715), a(&x3))?))?;
        let t = lax::unary(Primitive::Tanh, &lax::binary(Primitive::Mul, f(c), a(&inner))?)?;
        let one = lax::binary(Primitive::Add, f(1.0), a(&t))?;
        let h = lax::binary(Primitive::Mul, a(&x), a(&one))?;
        lax::binary(Primitive::Mul, a(&h), f(0.5))
    } else {
        let s = lax::binary(Primitive::Div, a(&x), f(std::f64::consts::SQRT_2))?;
        let e = jnp::erf(&s)?;
        let one = lax::binary(Primitive::Add, f(1.0), a(&e))?;
        let h = lax::binary(Primitive::Mul, a(&x), a(&one))?;
        lax::binary(Primitive::Div, a(&h), f(2.0))
    }
}

/// Reduces with `max` over `axis` keeping the reduced dims as size 1; over a zero-size
/// axis the maximum is `-inf` (JAX's `initial=-inf` in softmax and logsumexp), so their
/// results are empty or `-inf` rather than an error.
fn max_keep(x: &Array, axis: &[isize]) -> Result<Array> {
    let n = x.ndim() as isize;
    let ax: Vec<usize> = axis.iter().map(|&i| if i < 0 { (i + n) as usize } else { i as usize }).collect();
    let keep: Vec<usize> = (0..x.ndim()).map(|i| if ax.contains(&i) { 1 } else { x.shape()[i] }).collect();
    if ax.iter().any(|&i| i < x.ndim() && x.shape()[i] == 0) {
        // Integer inputs: a float -inf, which the later arithmetic promotes to.
        let d = if x.dtype().is_float() { x.dtype() } else { DType::F32 };
        return Ok(jnp::full(&keep, f64::NEG_INFINITY, d));
    }
    let m = jnp::max(x, Some(axis))?;
    lax::reshape(&m, &keep)
}

fn sum_keep(x: &Array, axis: &[isize]) -> Result<Array> {
    let m = jnp::sum(x, Some(axis))?;
    let n = x.ndim() as isize;
    let ax: Vec<usize> = axis.iter().map(|&i| if i < 0 { (i + n) as usize } else { i as usize }).collect();
    let keep: Vec<usize> = (0..x.ndim()).map(|i| if ax.contains(&i) { 1 } else { x.shape()[i] }).collect();
    lax::reshape(&m, &keep)
}

/// `jax.nn.softmax(x, axis)`: `exp(x - max) / sum(exp(x - max))`.
#[track_caller]
pub fn softmax(x: &Array, axis: isize) -> Result<Array> {
    let m = max_keep(x, &[axis])?;
    let e = lax::unary(Primitive::Exp, &lax::binary(Primitive::Sub, a(x), a(&m))?)?;
    let s = sum_keep(&e, &[axis])?;
    lax::binary(Primitive::Div, a(&e), a(&s))
}

/// `jax.nn.log_softmax(x, axis)`: `(x - max) - log(sum(exp(x - max)))`.
#[track_caller]
pub fn log_softmax(x: &Array, axis: isize) -> Result<Array> {
    let m = max_keep(x, &[axis])?;
    let sh = lax::binary(Primitive::Sub, a(x), a(&m))?;
    let s = sum_keep(&lax::unary(Primitive::Exp, &sh)?, &[axis])?;
    lax::binary(Primitive::Sub, a(&sh), a(&lax::unary(Primitive::Log, &s)?))
}

/// `jax.nn.logsumexp(x, axis)` (`None`: all axes): `log(sum(exp(x - m))) + m` with `m` the
/// maximum (0 where it is not finite), so large inputs do not overflow.
#[track_caller]
pub fn logsumexp(x: &Array, axis: Option<&[isize]>) -> Result<Array> {
    let all: Vec<isize> = (0..x.ndim() as isize).collect();
    let ax = axis.unwrap_or(&all);
    let m = max_keep(x, ax)?;
    let fin = jnp::isfinite(&m)?;
    let m = lax::select_n(&fin, &[jnp::zeros(&m.shape(), m.dtype()), m])?;
    let e = lax::unary(Primitive::Exp, &lax::binary(Primitive::Sub, a(x), a(&m))?)?;
    let s = jnp::sum(&e, Some(ax))?;
    let ms = jnp::reshape(&m, &s.shape().iter().map(|&d| d as isize).collect::<Vec<_>>())?;
    lax::binary(Primitive::Add, a(&lax::unary(Primitive::Log, &s)?), a(&ms))
}

/// `jax.nn.one_hot(x, num_classes, dtype)`: `x[..., None] == arange(num_classes)` as `dtype`
/// (out-of-range entries give all zeros).
#[track_caller]
pub fn one_hot(x: &Array, num_classes: usize, dtype: DType) -> Result<Array> {
    let mut shape = x.shape();
    shape.push(num_classes);
    let x = lax::expand_dims(x, &[x.ndim()])?;
    let x = lax::broadcast_to(&x, &shape)?;
    let i = lax::iota(x.dtype(), &shape, shape.len() - 1)?;
    let e = lax::binary(Primitive::Eq, a(&x), a(&i))?;
    lax::convert_element_type(&e, crate::trace::array::canonicalize_dtype(dtype))
}
