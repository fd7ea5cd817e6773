//! Shape manipulation and construction in `jnp` (issue 3): concatenate, stack, split,
//! pad, flip, roll, tile, repeat, squeeze, expand_dims, broadcast_to, eye, tri, tril,
//! triu, diag, outer. Axes may be negative. Errors name the function and the shapes.

use super::norm_axes;
use crate::error::{Error, Result};
use crate::ir::{DType, Primitive, Scalar};
use crate::lax::{self, literal, py_shape};
use crate::trace::array::canonicalize_dtype;
use crate::trace::{Array, Operand};

#[track_caller]
fn axis1(op: &str, axis: isize, ndim: usize) -> Result<usize> {
    Ok(norm_axes(op, Some(&[axis]), ndim)?[0])
}

/// Converts every array to their common (promoted) dtype.
fn promote_all(xs: &[Array]) -> Result<Vec<Array>> {
    let mut aval = xs[0].aval();
    for x in &xs[1..] {
        let (d, w) = lax::promote(&aval, &x.aval());
        aval.dtype = d;
        aval.weak_type = w;
    }
    xs.iter().map(|x| if x.dtype() == aval.dtype { Ok(x.clone()) } else { lax::convert_element_type(x, aval.dtype) }).collect()
}

fn shapes(xs: &[Array]) -> String {
    xs.iter().map(|x| py_shape(&x.shape())).collect::<Vec<_>>().join(", ")
}

/// `jnp.concatenate(xs, axis)` with dtype promotion. Errors: no operands, 0-d operands,
/// shapes that differ off `axis`.
#[track_caller]
pub fn concatenate(xs: &[Array], axis: isize) -> Result<Array> {
    if xs.is_empty() {
        return Err(Error::value_error("concatenate: need at least one array to concatenate"));
    }
    if xs.iter().any(|x| x.ndim() == 0) {
        return Err(Error::value_error(format!("concatenate: zero-dimensional arrays cannot be concatenated, got shapes {}", shapes(xs))));
    }
    let ax = axis1("concatenate", axis, xs[0].ndim())?;
    let xs = promote_all(xs)?;
    if xs.len() == 1 {
        return Ok(xs[0].clone());
    }
    lax::concatenate(&xs, ax)
}

/// `jnp.stack(xs, axis)`: joins equal-shaped arrays along a new axis.
#[track_caller]
pub fn stack(xs: &[Array], axis: isize) -> Result<Array> {
    if xs.is_empty() {
        return Err(Error::value_error("stack: need at least one array to stack"));
    }
    if xs.iter().any(|x| x.shape() != xs[0].shape()) {
        return Err(Error::value_error(format!("stack: all input arrays must have the same shape, got {}", shapes(xs))));
    }
    let ax = axis1("stack", axis, xs[0].ndim() + 1)?;
    let xs = promote_all(xs)?;
    let ex: Vec<Array> = xs.iter().map(|x| lax::expand_dims(x, &[ax])).collect::<Result<_>>()?;
    if ex.len() == 1 {
        return Ok(ex[0].clone());
    }
    lax::concatenate(&ex, ax)
}

/// `jnp.split(x, n, axis)`: `n` equal pieces. Errors when the axis does not divide evenly.
#[track_caller]
pub fn split(x: &Array, n: usize, axis: isize) -> Result<Vec<Array>> {
    let ax = axis1("split", axis, x.ndim())?;
    let len = x.shape()[ax];
    if n == 0 || len % n != 0 {
        return Err(Error::value_error(format!("split: array split does not result in an equal division: {len} into {n} (shape {})", py_shape(&x.shape()))));
    }
    lax::split(x, &vec![len / n; n], ax)
}

/// `jnp.split(x, indices, axis)`: pieces `[..i0], [i0..i1], ..., [ik..]` (indices clamped).
#[track_caller]
pub fn split_at(x: &Array, indices: &[usize], axis: isize) -> Result<Vec<Array>> {
    let ax = axis1("split", axis, x.ndim())?;
    let len = x.shape()[ax];
    let mut sizes = vec![];
    let mut prev = 0;
    for &i in indices.iter().chain(std::iter::once(&len)) {
        let i = i.clamp(prev, len);
        sizes.push(i - prev);
        prev = i;
    }
    lax::split(x, &sizes, ax)
}

/// `jnp.pad(x, pad_width, constant_values=value)`: `(before, after)` per dim.
#[track_caller]
pub fn pad(x: &Array, pad_width: &[(usize, usize)], value: f64) -> Result<Array> {
    if pad_width.len() != x.ndim() {
        return Err(Error::value_error(format!("pad: pad_width has {} entries for an array of shape {}", pad_width.len(), py_shape(&x.shape()))));
    }
    let cfg: Vec<(i64, i64, i64)> = pad_width.iter().map(|&(a, b)| (a as i64, b as i64, 0)).collect();
    lax::pad(x, value, &cfg)
}

/// `jnp.flip(x, axis)`: reverse along `axes` (`None`: all) — `rev`.
#[track_caller]
pub fn flip(x: &Array, axes: Option<&[isize]>) -> Result<Array> {
    let ax = norm_axes("flip", axes, x.ndim())?;
    lax::rev(x, &ax)
}

/// `jnp.roll(x, shift, axis)`: `None` rolls the flattened array.
#[track_caller]
pub fn roll(x: &Array, shift: isize, axis: Option<isize>) -> Result<Array> {
    let Some(axis) = axis else {
        let f = lax::reshape(x, &[x.size()])?;
        return lax::reshape(&roll(&f, shift, Some(0))?, &x.shape());
    };
    let ax = axis1("roll", axis, x.ndim())?;
    let n = x.shape()[ax];
    if n == 0 {
        return Ok(x.clone());
    }
    let s = shift.rem_euclid(n as isize) as usize;
    if s == 0 {
        return Ok(x.clone());
    }
    let shape = x.shape();
    let part = |a: usize, b: usize| -> Result<Array> {
        let mut st = vec![0; shape.len()];
        let mut li = shape.clone();
        st[ax] = a;
        li[ax] = b;
        lax::slice(x, &st, &li, None)
    };
    lax::concatenate(&[part(n - s, n)?, part(0, n - s)?], ax)
}

/// `jnp.tile(x, reps)`.
#[track_caller]
pub fn tile(x: &Array, reps: &[usize]) -> Result<Array> {
    let n = reps.len().max(x.ndim());
    let mut shape = vec![1; n - x.ndim()];
    shape.extend(x.shape());
    let mut r = vec![1; n - reps.len()];
    r.extend(reps);
    let x = lax::reshape(x, &shape)?;
    let big: Vec<usize> = (0..n).flat_map(|i| [r[i], shape[i]]).collect();
    let b = lax::bind1(Primitive::BroadcastInDim { shape: big, broadcast_dimensions: (0..n).map(|i| 2 * i + 1).collect() }, vec![Operand::Array(x)])?;
    let out: Vec<usize> = (0..n).map(|i| r[i] * shape[i]).collect();
    lax::reshape(&b, &out)
}

/// `jnp.repeat(x, repeats, axis)`: each element `repeats` times; `None` flattens first.
#[track_caller]
pub fn repeat(x: &Array, repeats: usize, axis: Option<isize>) -> Result<Array> {
    let (x, ax) = match axis {
        None => (lax::reshape(x, &[x.size()])?, 0),
        Some(a) => (x.clone(), axis1("repeat", a, x.ndim())?),
    };
    let s = x.shape();
    let mut big = s[..=ax].to_vec();
    big.push(repeats);
    big.extend(&s[ax + 1..]);
    let bd: Vec<usize> = (0..s.len()).map(|i| if i <= ax { i } else { i + 1 }).collect();
    let b = lax::bind1(Primitive::BroadcastInDim { shape: big, broadcast_dimensions: bd }, vec![Operand::Array(x)])?;
    let mut out = s.clone();
    out[ax] *= repeats;
    lax::reshape(&b, &out)
}

/// `jnp.squeeze(x, axis)`: drop size-1 `axes` (`None`: every size-1 dim). Errors for an
/// axis whose size is not 1.
#[track_caller]
pub fn squeeze(x: &Array, axes: Option<&[isize]>) -> Result<Array> {
    let ax = match axes {
        None => (0..x.ndim()).filter(|&i| x.shape()[i] == 1).collect(),
        Some(a) => norm_axes("squeeze", Some(a), x.ndim())?,
    };
    if ax.is_empty() {
        return Ok(x.clone());
    }
    lax::squeeze(x, &ax)
}

/// `jnp.expand_dims(x, axis)`: a size-1 dim at `axis` of the result.
#[track_caller]
pub fn expand_dims(x: &Array, axis: isize) -> Result<Array> {
    let ax = axis1("expand_dims", axis, x.ndim() + 1)?;
    lax::expand_dims(x, &[ax])
}

/// `jnp.broadcast_to(x, shape)`. Errors: shapes that do not broadcast.
#[track_caller]
pub fn broadcast_to(x: &Array, shape: &[usize]) -> Result<Array> {
    lax::broadcast_to(x, shape)
}

/// `cols - rows` compared with `k` as an `[n, m]` bool mask (`cmp` on `(col - row, k)`).
fn diag_mask(n: usize, m: usize, k: isize, cmp: Primitive) -> Result<Array> {
    let it = canonicalize_dtype(DType::I64);
    let r = lax::iota(it, &[n, m], 0)?;
    let c = lax::iota(it, &[n, m], 1)?;
    let d = lax::binary(Primitive::Sub, Operand::Array(c), Operand::Array(r))?;
    lax::binary(cmp, Operand::Array(d), literal(Scalar::I64(k as i64)))
}

/// `jnp.eye(n, m, k, dtype)`: ones on the k-th diagonal.
#[track_caller]
pub fn eye(n: usize, m: Option<usize>, k: isize, dtype: DType) -> Result<Array> {
    let dtype = lax::promotion::check_user_dtype_supported(dtype, "eye");
    lax::convert_element_type_unchecked(&diag_mask(n, m.unwrap_or(n), k, Primitive::Eq)?, dtype)
}

/// `jnp.tri(n, m, k, dtype)`: ones at and below the k-th diagonal.
#[track_caller]
pub fn tri(n: usize, m: Option<usize>, k: isize, dtype: DType) -> Result<Array> {
    let dtype = lax::promotion::check_user_dtype_supported(dtype, "tri");
    lax::convert_element_type_unchecked(&diag_mask(n, m.unwrap_or(n), k, Primitive::Le)?, dtype)
}

fn tri_select(x: &Array, k: isize, lower: bool) -> Result<Array> {
    let s = x.shape();
    if s.len() < 2 {
        return Err(Error::value_error(format!("{}: input array must be at least 2-d, got shape {}", if lower { "tril" } else { "triu" }, py_shape(&s))));
    }
    let (n, m) = (s[s.len() - 2], s[s.len() - 1]);
    let mask = if lower { diag_mask(n, m, k, Primitive::Le)? } else { diag_mask(n, m, k, Primitive::Ge)? };
    let zero = super::zeros(&[], x.dtype());
    super::where_(&lax::broadcast_to(&mask, &s)?, x, &zero)
}

/// `jnp.tril(x, k)`: zero above the k-th diagonal (last two dims).
#[track_caller]
pub fn tril(x: &Array, k: isize) -> Result<Array> {
    tri_select(x, k, true)
}

/// `jnp.triu(x, k)`: zero below the k-th diagonal.
#[track_caller]
pub fn triu(x: &Array, k: isize) -> Result<Array> {
    tri_select(x, k, false)
}

/// `jnp.diag(x, k)`: for 1-d `x` the square matrix with `x` on the k-th diagonal; for 2-d
/// `x` its k-th diagonal. Errors for other ranks.
#[track_caller]
pub fn diag(x: &Array, k: isize) -> Result<Array> {
    match x.ndim() {
        1 => {
            let n = x.shape()[0] + k.unsigned_abs();
            let v = lax::pad(x, 0.0, &[(0, k.unsigned_abs() as i64, 0)])?;
            let b = if k >= 0 { lax::expand_dims(&v, &[1])? } else { lax::expand_dims(&v, &[0])? };
            let b = lax::broadcast_to(&b, &[n, n])?;
            let zero = super::zeros(&[], x.dtype());
            super::where_(&diag_mask(n, n, k, Primitive::Eq)?, &b, &zero)
        }
        2 => {
            let (n, m) = (x.shape()[0] as isize, x.shape()[1] as isize);
            let (r0, c0) = if k >= 0 { (0, k) } else { (-k, 0) };
            let len = (n - r0).min(m - c0).max(0) as usize;
            let rows: Vec<i32> = (0..len).map(|i| (r0 + i as isize) as i32).collect();
            let cols: Vec<i32> = (0..len).map(|i| (c0 + i as isize) as i32).collect();
            super::indexing::index(x, &crate::s![&Array::from_slice(&rows), &Array::from_slice(&cols)])
        }
        _ => Err(Error::value_error(format!("diag: input must be 1-d or 2-d, got shape {}", py_shape(&x.shape())))),
    }
}

/// `jnp.outer(a, b)`: `a.ravel()[:, None] * b.ravel()[None, :]`.
#[track_caller]
pub fn outer(a: &Array, b: &Array) -> Result<Array> {
    let a = lax::reshape(a, &[a.size(), 1])?;
    let b = lax::reshape(b, &[1, b.size()])?;
    lax::binary(Primitive::Mul, Operand::Array(a), Operand::Array(b))
}
