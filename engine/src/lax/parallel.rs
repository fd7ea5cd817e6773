//! `jax.lax` collectives for per-device code inside `shard_map`: `psum`, `pmean`,
//! `pmax`, `pmin`, `all_gather`, `psum_scatter`, `ppermute`, `all_to_all`, `axis_index`,
//! `axis_size`, and their type rules.
//!
//! Invariant: the axis environment (mesh axis names and sizes bound by the enclosing
//! `shard_map` while it traces its body) is read only when a collective is traced; the
//! equation records every size its type needs, so abstract evaluation and execution never
//! consult it. The semantics are those of the reference functions in JAX's shard-map page
//! (`psum_ref`, `all_gather_ref`, `psum_scatter_ref`, `ppermute_ref`, `all_to_all_ref`).

use super::bind1;
use crate::error::{Error, Result};
use crate::ir::{Collective, DType, Primitive, Scalar, ShapedArray};
use crate::trace::{Array, Operand};
use std::cell::RefCell;

thread_local! {
    /// Mesh axes (name, size) bound by the `shard_map`s whose bodies are being traced.
    static AXIS_ENV: RefCell<Vec<(String, usize)>> = const { RefCell::new(Vec::new()) };
}

/// Binds mesh axes while a `shard_map` body is traced; they are unbound when dropped.
pub(crate) struct AxisEnvGuard(usize);

/// Binds `axes` (name, size) for collectives traced until the guard drops.
pub(crate) fn bind_axes(axes: &[(String, usize)]) -> AxisEnvGuard {
    AXIS_ENV.with(|e| {
        let mut e = e.borrow_mut();
        let n = e.len();
        e.extend(axes.iter().cloned());
        AxisEnvGuard(n)
    })
}

impl Drop for AxisEnvGuard {
    fn drop(&mut self) {
        AXIS_ENV.with(|e| e.borrow_mut().truncate(self.0));
    }
}

/// Axis names accepted by collectives: one name (`"i"`) or several (`["i", "j"]`).
pub struct AxisNames(pub Vec<String>);

impl From<&str> for AxisNames {
    fn from(s: &str) -> Self {
        AxisNames(vec![s.to_string()])
    }
}
impl From<(&str, &str)> for AxisNames {
    fn from(s: (&str, &str)) -> Self {
        AxisNames(vec![s.0.to_string(), s.1.to_string()])
    }
}
impl<const N: usize> From<[&str; N]> for AxisNames {
    fn from(s: [&str; N]) -> Self {
        AxisNames(s.iter().map(|a| a.to_string()).collect())
    }
}
impl From<&[&str]> for AxisNames {
    fn from(s: &[&str]) -> Self {
        AxisNames(s.iter().map(|a| a.to_string()).collect())
    }
}

/// The size of the group over `axes` (product of their sizes).
/// Errors: JAX's `NameError: unbound axis name: k` for a name no enclosing `shard_map` binds.
pub fn group_size(axes: &[String]) -> Result<usize> {
    AXIS_ENV.with(|e| {
        let e = e.borrow();
        let mut n = 1;
        for a in axes {
            match e.iter().rev().find(|(name, _)| name == a) {
                Some((_, s)) => n *= s,
                None => {
                    let bound: Vec<String> = e.iter().map(|(n, _)| format!("'{n}'")).collect();
                    return Err(Error::value_error(format!(
                        "unbound axis name: {a}. The following axis names (e.g. defined by shard_map) are available to collective operations: [{}]",
                        bound.join(", ")
                    )));
                }
            }
        }
        Ok(n)
    })
}

fn check_axes(axes: &AxisNames) -> Result<Vec<String>> {
    if axes.0.is_empty() {
        return Err(Error::value_error("a collective needs at least one axis name"));
    }
    group_size(&axes.0)?;
    Ok(axes.0.clone())
}

/// Binds the collective `c` on `x` (one result).
#[track_caller]
pub(crate) fn coll(c: Collective, x: &Array) -> Result<Array> {
    bind1(Primitive::Collective(c), vec![Operand::Array(x.clone())])
}

/// `jax.lax.psum(x, axis_name)`: the sum of `x` over the devices of the group; every
/// device gets the same sum (summed in device order, so results are bitwise equal).
#[track_caller]
pub fn psum(x: &Array, axis_name: impl Into<AxisNames>) -> Result<Array> {
    let axes = check_axes(&axis_name.into())?;
    coll(Collective::Psum { axes }, x)
}

/// `jax.lax.pmax(x, axis_name)`: elementwise maximum over the group.
#[track_caller]
pub fn pmax(x: &Array, axis_name: impl Into<AxisNames>) -> Result<Array> {
    let axes = check_axes(&axis_name.into())?;
    coll(Collective::Pmax { axes }, x)
}

/// `jax.lax.pmin(x, axis_name)`: elementwise minimum over the group.
#[track_caller]
pub fn pmin(x: &Array, axis_name: impl Into<AxisNames>) -> Result<Array> {
    let axes = check_axes(&axis_name.into())?;
    coll(Collective::Pmin { axes }, x)
}

/// `jax.lax.pmean(x, axis_name)`: `psum(x) / group size`; integer inputs give float32
/// (as JAX's true division).
#[track_caller]
pub fn pmean(x: &Array, axis_name: impl Into<AxisNames>) -> Result<Array> {
    let axes = check_axes(&axis_name.into())?;
    let n = group_size(&axes)?;
    let x = if x.aval().dtype.is_float() { x.clone() } else { super::convert_element_type(x, DType::F32)? };
    let s = coll(Collective::Psum { axes }, &x)?;
    let dt = s.aval().dtype;
    bind1(Primitive::Div, vec![Operand::Array(s), Operand::Lit(Scalar::F64(n as f64).cast(dt), ShapedArray::scalar(dt))])
}

/// `jax.lax.all_gather(x, axis_name, axis=axis, tiled=tiled)`: every device gets the
/// group's values stacked along a new dimension `axis` (shape `[..n..]`), or with
/// `tiled` concatenated along `axis` (that dimension multiplied by the group size).
#[track_caller]
pub fn all_gather(x: &Array, axis_name: impl Into<AxisNames>, axis: usize, tiled: bool) -> Result<Array> {
    let axes = check_axes(&axis_name.into())?;
    let axis_size = group_size(&axes)?;
    coll(Collective::AllGather { axes, axis_size, dimension: axis, tiled }, x)
}

/// `jax.lax.psum_scatter(x, axis_name, scatter_dimension=d, tiled=tiled)`: the group's
/// sum, device k keeping block k along `scatter_dimension` (tiled: that dimension divided
/// by the group size; untiled: it must equal the group size and is removed).
#[track_caller]
pub fn psum_scatter(x: &Array, axis_name: impl Into<AxisNames>, scatter_dimension: usize, tiled: bool) -> Result<Array> {
    let axes = check_axes(&axis_name.into())?;
    let axis_size = group_size(&axes)?;
    coll(Collective::ReduceScatter { axes, axis_size, scatter_dimension, tiled }, x)
}

/// `jax.lax.ppermute(x, axis_name, perm)`: device `src` sends its value to `dst` for each
/// `(src, dst)` pair of group positions; a device that receives nothing gets zeros.
/// Errors: a position out of range, or one used twice as a source or a destination.
#[track_caller]
pub fn ppermute(x: &Array, axis_name: impl Into<AxisNames>, perm: &[(usize, usize)]) -> Result<Array> {
    let axes = check_axes(&axis_name.into())?;
    let n = group_size(&axes)?;
    let mut srcs = vec![false; n];
    let mut dsts = vec![false; n];
    for &(s, d) in perm {
        if s >= n || d >= n {
            return Err(Error::value_error(format!("ppermute perm pair ({s}, {d}) is out of range for axis size {n}")));
        }
        if std::mem::replace(&mut srcs[s], true) || std::mem::replace(&mut dsts[d], true) {
            return Err(Error::value_error(format!("ppermute sources and destinations must be unique, got {perm:?}")));
        }
    }
    coll(Collective::Ppermute { axes, perm: perm.to_vec() }, x)
}

/// `jax.lax.all_to_all(x, axis_name, split_axis, concat_axis, tiled=True)`: splits `x`
/// into group-size blocks along `split_axis`, sends block k to device k and concatenates
/// the received blocks (in device order) along `concat_axis`. Only the tiled form exists.
#[track_caller]
pub fn all_to_all(x: &Array, axis_name: impl Into<AxisNames>, split_axis: usize, concat_axis: usize, tiled: bool) -> Result<Array> {
    let axes = check_axes(&axis_name.into())?;
    let axis_size = group_size(&axes)?;
    if !tiled {
        return Err(Error::value_error("all_to_all with tiled=false is not supported yet: pass tiled=true"));
    }
    coll(Collective::AllToAll { axes, axis_size, split_axis, concat_axis, tiled }, x)
}

/// `jax.lax.axis_index(axis_name)`: this device's position along the axis (int32[]).
#[track_caller]
pub fn axis_index(axis_name: impl Into<AxisNames>) -> Result<Array> {
    let axes = check_axes(&axis_name.into())?;
    bind1(Primitive::Collective(Collective::AxisIndex { axes }), vec![])
}

/// `jax.lax.pcast(x, axis_name, to='varying')`: `x` (invariant over the named mesh axes)
/// typed as varying over them, the same value on every device. Needed where a value's
/// varying manual axes must match another's, e.g. a loop carry initialised with a
/// constant that the body combines with a per-device block (see JAX's shard_map page,
/// "scan-vma"). Recorded as `pvary[axes=(...)]` in the jaxpr; its transpose is `psum`.
/// No axes (`[] as [&str; 0]`) or a body traced with `check_vma` off: `x` unchanged.
/// Errors (JAX 0.10.2's texts): `to` other than `"varying"`, `"unreduced"`, `"reduced"`;
/// `"unreduced"`/`"reduced"` (not supported here); outside a `shard_map` body; `x`
/// already varying over all of the axes (`Unsupported pcast from=varying, to='varying'`)
/// or over some of them.
#[track_caller]
pub fn pcast(x: &Array, axis_name: impl Into<AxisNames>, to: &str) -> Result<Array> {
    let axes = axis_name.into().0;
    match to {
        "varying" => {}
        "unreduced" | "reduced" => {
            return Err(Error::new(
                crate::error::ErrorKind::NotImplemented,
                format!("pcast to='{to}': unreduced and reduced manual types are not supported here; only to='varying'"),
            ))
        }
        _ => return Err(Error::value_error("Got unexpected `to` value. Allowed `to` values are: {'unreduced', 'reduced', 'varying'}")),
    }
    if axes.is_empty() {
        return Ok(x.clone());
    }
    if AXIS_ENV.with(|e| e.borrow().is_empty()) {
        return Err(Error::value_error("pvary should be called under jax.shard_map."));
    }
    group_size(&axes)?;
    if let Some((check_vma, varying)) = crate::transform::shard_map::vma_of(x) {
        if !check_vma {
            return Ok(x.clone());
        }
        let already = axes.iter().filter(|a| varying.contains(a)).count();
        if already == axes.len() {
            return Err(Error::value_error("Unsupported pcast from=varying, to='varying'"));
        }
        if already > 0 {
            return Err(Error::value_error(format!(
                "jax.lax.pcast can only accept axis_name which corresponds to one of varying, unreduced, reduced or invarying state of the input. \
                 Got input type: {}, axes: {} and input state: {{'invarying', 'varying'}}",
                crate::sharding::typeof_(x),
                crate::ir::parallel::names_tuple(&axes)
            )));
        }
    }
    coll(Collective::Pvary { axes }, x)
}

/// `jax.lax.axis_size(axis_name)`: the number of devices along the axes (a Rust number).
pub fn axis_size(axis_name: impl Into<AxisNames>) -> Result<usize> {
    group_size(&check_axes(&axis_name.into())?)
}

fn err(c: &Collective, msg: String) -> Error {
    Error::type_error(format!("{}: {msg}", c.name()))
}

/// The type rule of a collective.
pub fn abstract_eval(c: &Collective, ins: &[ShapedArray]) -> Result<Vec<ShapedArray>> {
    if let Collective::AxisIndex { .. } = c {
        return Ok(vec![ShapedArray::scalar(DType::I32)]);
    }
    if ins.len() != 1 {
        return Err(err(c, format!("expected 1 operand, got {}", ins.len())));
    }
    let a = &ins[0];
    let mut shape = a.shape.clone();
    let out_dim = |d: usize, rank: usize| -> Result<()> {
        if d >= rank {
            return Err(err(c, format!("dimension {d} is out of range for an operand of type {}", a.short())));
        }
        Ok(())
    };
    match c {
        Collective::Psum { .. } | Collective::Pmax { .. } | Collective::Pmin { .. } => {
            if a.dtype == DType::Bool && matches!(c, Collective::Psum { .. }) {
                return Err(err(c, format!("requires a numeric operand, got {}", a.short())));
            }
        }
        Collective::AllGather { axis_size, dimension, tiled, .. } => {
            if *tiled {
                out_dim(*dimension, shape.len())?;
                shape[*dimension] *= axis_size;
            } else {
                out_dim(*dimension, shape.len() + 1)?;
                shape.insert(*dimension, *axis_size);
            }
        }
        Collective::ReduceScatter { axis_size, scatter_dimension: d, tiled, .. } => {
            out_dim(*d, shape.len())?;
            if *tiled {
                if shape[*d] % axis_size != 0 {
                    return Err(err(c, format!("dimension {d} of {} must be divisible by the axis size {axis_size}", a.short())));
                }
                shape[*d] /= axis_size;
            } else {
                if shape[*d] != *axis_size {
                    return Err(err(c, format!("dimension {d} of {} must equal the axis size {axis_size} (or pass tiled=true)", a.short())));
                }
                shape.remove(*d);
            }
        }
        Collective::AllToAll { axis_size, split_axis, concat_axis, .. } => {
            out_dim(*split_axis, shape.len())?;
            out_dim(*concat_axis, shape.len())?;
            if shape[*split_axis] % axis_size != 0 {
                return Err(err(c, format!("dimension {split_axis} of {} must be divisible by the axis size {axis_size}", a.short())));
            }
            shape[*split_axis] /= axis_size;
            shape[*concat_axis] *= axis_size;
        }
        Collective::Ppermute { .. } | Collective::Pvary { .. } => {}
        Collective::AxisIndex { .. } => unreachable!("handled above"),
    }
    Ok(vec![ShapedArray { shape, dtype: a.dtype, weak_type: a.weak_type }])
}
