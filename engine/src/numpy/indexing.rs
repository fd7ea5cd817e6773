//! numpy indexing for `Array`: `x.index(s![1.., 0])` reads, `x.at(s![..;2]).set(v)` (and
//! `add`/`mul`/`min`/`max`) writes a copy — JAX's `x[idx]` and `x.at[idx].set(v)`.
//!
//! `s![...]` builds an [`Index`]: comma-separated items, each
//! - an integer (`0`, `-1`: negative counts from the end; the dim is dropped),
//! - a range (`1..`, `..-1`, `2..5`, `..`), optionally with a step: `..;2`, `5..0;-1`,
//! - [`NEW_AXIS`] (a size-1 dim) or [`ELLIPSIS`] (as many `..` as needed),
//! - an `&Array` of integers (advanced indexing; negative entries count from the end;
//!   all index arrays broadcast together) or of bools (a mask, replaced by its nonzero
//!   positions; it must be concrete: under `jit` it is an error like JAX's
//!   NonConcreteBooleanIndexError, because the result shape would depend on values).
//!
//! Integers and ranges only lower to `slice` (`rev` for negative steps) and `squeeze`;
//! advanced indices lower to one `gather` of points (`scatter` for `.at`). As in numpy,
//! the advanced dims of the result go where the first advanced index was when all
//! advanced indices are adjacent, and first otherwise. Out-of-range static integers are
//! errors; out-of-range array entries are clamped (reads) or dropped (writes), like JAX.

use super::ops::fail;
use crate::error::{Error, ErrorKind, Result};
use crate::ir::{DType, GatherDims, GatherMode, Primitive, Scalar, ScatterDims, ScatterOp};
use crate::lax::{self, literal, py_shape};
use crate::trace::{Array, Operand};
use std::ops::{Range, RangeFrom, RangeFull, RangeInclusive, RangeTo};

/// One item of an [`Index`].
#[derive(Clone, Debug)]
pub enum IndexItem {
    Int(isize),
    Slice { start: Option<isize>, stop: Option<isize>, step: isize },
    NewAxis,
    Ellipsis,
    Array(Array),
}

/// `s![..]` item for a new size-1 dimension (numpy's `None`).
pub const NEW_AXIS: IndexItem = IndexItem::NewAxis;
/// `s![..]` item standing for as many full slices as needed (numpy's `...`).
pub const ELLIPSIS: IndexItem = IndexItem::Ellipsis;

impl IndexItem {
    /// Sets the step of a range item (`s![a..b;step]`); other items ignore steps of 1.
    pub fn with_step(self, step: isize) -> IndexItem {
        match self {
            IndexItem::Slice { start, stop, .. } => IndexItem::Slice { start, stop, step },
            other => other,
        }
    }
}

macro_rules! from_ints {
    ($($t:ty),+) => {$(
        impl From<$t> for IndexItem {
            fn from(i: $t) -> Self { IndexItem::Int(i as isize) }
        }
        impl From<Range<$t>> for IndexItem {
            fn from(r: Range<$t>) -> Self { IndexItem::Slice { start: Some(r.start as isize), stop: Some(r.end as isize), step: 1 } }
        }
        impl From<RangeFrom<$t>> for IndexItem {
            fn from(r: RangeFrom<$t>) -> Self { IndexItem::Slice { start: Some(r.start as isize), stop: None, step: 1 } }
        }
        impl From<RangeTo<$t>> for IndexItem {
            fn from(r: RangeTo<$t>) -> Self { IndexItem::Slice { start: None, stop: Some(r.end as isize), step: 1 } }
        }
        impl From<RangeInclusive<$t>> for IndexItem {
            fn from(r: RangeInclusive<$t>) -> Self {
                let e = *r.end() as isize;
                IndexItem::Slice { start: Some(*r.start() as isize), stop: if e == -1 { None } else { Some(e + 1) }, step: 1 }
            }
        }
    )+};
}
from_ints!(i32, i64, isize, usize);

impl From<RangeFull> for IndexItem {
    fn from(_: RangeFull) -> Self {
        IndexItem::Slice { start: None, stop: None, step: 1 }
    }
}
impl From<&Array> for IndexItem {
    fn from(a: &Array) -> Self {
        IndexItem::Array(a.clone())
    }
}
impl From<Array> for IndexItem {
    fn from(a: Array) -> Self {
        IndexItem::Array(a)
    }
}

/// A numpy index: a list of items, built with `s![...]`.
#[derive(Clone, Debug, Default)]
pub struct Index(pub Vec<IndexItem>);

/// Builds an [`Index`]: `s![1.., 0]`, `s![..;2, NEW_AXIS]`, `s![&idx]`, `s![ELLIPSIS, -1]`.
/// (ndarray's `s!` is a different macro; this one is `jax::s`.)
#[macro_export]
macro_rules! s {
    ($($e:expr $(; $step:expr)?),* $(,)?) => {
        $crate::numpy::indexing::Index(vec![$(
            $crate::numpy::indexing::IndexItem::from($e).with_step({
                #[allow(unused_mut)]
                let mut st: isize = 1;
                $( st = ($step) as isize; )?
                st
            })
        ),*])
    };
}

/// A normalized item per operand dim.
enum Dim {
    /// positions start, start+step, ... (len of them); `drop` for integers
    Basic { start: usize, step: isize, len: usize, drop: bool },
    Adv(Array),
}

fn index_error(msg: String) -> Error {
    Error::new(ErrorKind::Value, format!("IndexError: {msg}"))
}

/// numpy's slice normalization: (start, step, len).
fn norm_slice(start: Option<isize>, stop: Option<isize>, step: isize, n: usize) -> Result<(usize, isize, usize)> {
    if step == 0 {
        return Err(Error::value_error("slice step cannot be zero"));
    }
    let n = n as isize;
    let fix = |v: isize, lo: isize, hi: isize| (if v < 0 { v + n } else { v }).clamp(lo, hi);
    let (s, e) = if step > 0 {
        (start.map(|v| fix(v, 0, n)).unwrap_or(0), stop.map(|v| fix(v, 0, n)).unwrap_or(n))
    } else {
        (start.map(|v| fix(v, -1, n - 1)).unwrap_or(n - 1), stop.map(|v| fix(v, -1, n - 1)).unwrap_or(-1))
    };
    let len = if step > 0 { (e - s + step - 1) / step } else { (s - e + (-step) - 1) / (-step) };
    Ok((s.max(0) as usize, step, len.max(0) as usize))
}

/// Expands NEW_AXIS (reshaping `x`), ELLIPSIS and bool masks; one `Dim` per dim of the
/// returned array.
fn normalize(x: &Array, idx: &Index) -> Result<(Array, Vec<Dim>)> {
    let mut items: Vec<IndexItem> = vec![];
    for it in &idx.0 {
        match it {
            IndexItem::Array(a) if a.dtype() == DType::Bool => {
                if a.is_tracer() {
                    return Err(Error::new(
                        ErrorKind::Concretization,
                        format!(
                            "NonConcreteBooleanIndexError: Array boolean indices must be concrete; got bool{}. \
                             Use jnp::where_ instead, or index outside jit.",
                            py_shape(&a.shape())
                        ),
                    ));
                }
                let v = a.to_vec::<bool>()?;
                let s = a.shape();
                let mut coords: Vec<Vec<i32>> = vec![vec![]; s.len().max(1)];
                for (flat, &b) in v.iter().enumerate() {
                    if b {
                        let mut r = flat;
                        for d in (0..s.len()).rev() {
                            coords[d].push((r % s[d]) as i32);
                            r /= s[d];
                        }
                    }
                }
                if s.is_empty() {
                    return Err(index_error("0-d boolean indices are not supported".into()));
                }
                items.extend(coords.into_iter().map(|c| IndexItem::Array(Array::from_slice(&c))));
            }
            other => items.push(other.clone()),
        }
    }
    let used = items.iter().filter(|i| !matches!(i, IndexItem::NewAxis | IndexItem::Ellipsis)).count();
    if items.iter().filter(|i| matches!(i, IndexItem::Ellipsis)).count() > 1 {
        return Err(index_error("an index can only have a single ellipsis".into()));
    }
    if used > x.ndim() {
        return Err(index_error(format!("too many indices for array: array is {}-dimensional, but {used} were indexed", x.ndim())));
    }
    let mut full = vec![];
    for it in items {
        if matches!(it, IndexItem::Ellipsis) {
            full.extend((0..x.ndim() - used).map(|_| IndexItem::from(..)));
        } else {
            full.push(it);
        }
    }
    while full.iter().filter(|i| !matches!(i, IndexItem::NewAxis)).count() < x.ndim() {
        full.push(IndexItem::from(..));
    }
    // New axes become size-1 dims of x indexed by a full slice.
    let mut shape = vec![];
    let mut src = x.shape().into_iter();
    for it in &full {
        shape.push(if matches!(it, IndexItem::NewAxis) { 1 } else { src.next().unwrap_or(1) });
    }
    let x = lax::reshape(x, &shape)?;
    let mut dims = vec![];
    for (d, it) in full.into_iter().enumerate() {
        let n = shape[d];
        dims.push(match it {
            IndexItem::Int(i) => {
                let j = if i < 0 { i + n as isize } else { i };
                if j < 0 || j >= n as isize {
                    return Err(index_error(format!("index {i} is out of bounds for axis {d} with size {n}")));
                }
                Dim::Basic { start: j as usize, step: 1, len: 1, drop: true }
            }
            IndexItem::Slice { start, stop, step } => {
                let (s, st, len) = norm_slice(start, stop, step, n)?;
                Dim::Basic { start: s, step: st, len, drop: false }
            }
            IndexItem::NewAxis | IndexItem::Ellipsis => Dim::Basic { start: 0, step: 1, len: 1, drop: false },
            IndexItem::Array(a) => {
                if !a.dtype().is_int() {
                    return Err(index_error(format!("indices must be integers or bools, got {}", a.aval().short())));
                }
                // Negative entries count from the end.
                let neg = lax::binary(Primitive::Lt, Operand::Array(a.clone()), literal(Scalar::I32(0)))?;
                let plus = lax::binary(Primitive::Add, Operand::Array(a.clone()), literal(Scalar::I64(n as i64)))?;
                Dim::Adv(lax::select_n(&neg, &[lax::convert_element_type(&a, plus.dtype())?, plus])?)
            }
        });
    }
    Ok((x, dims))
}

/// Basic indexing: `rev` for negative steps, one `slice`, `squeeze` of integer dims.
fn basic(x: &Array, dims: &[Dim]) -> Result<Array> {
    let shape = x.shape();
    let mut x = x.clone();
    let rev: Vec<usize> = dims.iter().enumerate().filter(|(_, d)| matches!(d, Dim::Basic { step, len, .. } if *step < 0 && *len > 0)).map(|(i, _)| i).collect();
    if !rev.is_empty() {
        x = lax::rev(&x, &rev)?;
    }
    let (mut st, mut li, mut sd) = (vec![], vec![], vec![]);
    for (i, d) in dims.iter().enumerate() {
        let Dim::Basic { start, step, len, .. } = d else { unreachable!() };
        // An empty selection (possibly of an empty dim) reads nothing from position 0.
        let (s, k) = if *len == 0 {
            (0, step.unsigned_abs())
        } else if *step < 0 {
            (shape[i] - 1 - start, (-step) as usize)
        } else {
            (*start, *step as usize)
        };
        st.push(s);
        li.push(if *len == 0 { 0 } else { s + (len - 1) * k + 1 });
        sd.push(k);
    }
    if st.iter().any(|&s| s != 0) || li != shape || sd.iter().any(|&k| k != 1) {
        x = lax::slice(&x, &st, &li, Some(&sd))?;
    }
    let drop: Vec<usize> = dims.iter().enumerate().filter(|(_, d)| matches!(d, Dim::Basic { drop: true, .. })).map(|(i, _)| i).collect();
    if drop.is_empty() { Ok(x) } else { lax::squeeze(&x, &drop) }
}

/// The point indices `[P, ndim]` of an advanced index, the grid shape `[B..., S...]`,
/// and the permutation from grid order to numpy's result order.
fn points(dims: &[Dim]) -> Result<(Array, Vec<usize>, Vec<usize>)> {
    let it = crate::trace::array::canonicalize_dtype(DType::I64);
    let advs: Vec<Array> = dims.iter().filter_map(|d| if let Dim::Adv(a) = d { Some(a.clone()) } else { None }).collect();
    let mut b = vec![];
    for a in &advs {
        b = lax::broadcast_shapes("index", &b, &a.shape())?;
    }
    // Integers join the advanced indices (as 0-d arrays) when there are any.
    let slices: Vec<(usize, &Dim)> = dims.iter().enumerate().filter(|(_, d)| matches!(d, Dim::Basic { drop: false, .. })).collect();
    let s_lens: Vec<usize> = slices.iter().map(|(_, d)| if let Dim::Basic { len, .. } = d { *len } else { 0 }).collect();
    let mut grid = b.clone();
    grid.extend(&s_lens);
    let nb = b.len();
    let mut cols = vec![];
    for (i, d) in dims.iter().enumerate() {
        let col = match d {
            Dim::Adv(a) => {
                let a = lax::convert_element_type(&lax::broadcast_to(a, &b)?, it)?;
                lax::bind1(Primitive::BroadcastInDim { shape: grid.clone(), broadcast_dimensions: (0..nb).collect() }, vec![Operand::Array(a)])?
            }
            Dim::Basic { start, drop: true, .. } => super::full(&grid, *start as i64, it),
            Dim::Basic { start, step, len, .. } => {
                let j = slices.iter().position(|(k, _)| *k == i).unwrap_or(0);
                let pos: Vec<i64> = (0..*len).map(|k| *start as i64 + k as i64 * *step as i64).collect();
                let p = lax::convert_element_type(&Array::from_slice(&pos), it)?;
                lax::bind1(Primitive::BroadcastInDim { shape: grid.clone(), broadcast_dimensions: vec![nb + j] }, vec![Operand::Array(p)])?
            }
        };
        cols.push(lax::expand_dims(&col, &[grid.len()])?);
    }
    let idx = if cols.len() == 1 { cols[0].clone() } else { lax::concatenate(&cols, grid.len())? };
    let p: usize = grid.iter().product();
    let idx = lax::reshape(&idx, &[p, dims.len()])?;
    // numpy order: advanced dims at the first advanced position when adjacent.
    let adv_pos: Vec<usize> = dims.iter().enumerate().filter(|(_, d)| matches!(d, Dim::Adv(_) | Dim::Basic { drop: true, .. })).map(|(i, _)| i).collect();
    let adjacent = adv_pos.windows(2).all(|w| w[1] == w[0] + 1);
    let before = if adjacent && !adv_pos.is_empty() { slices.iter().filter(|(k, _)| *k < adv_pos[0]).count() } else { 0 };
    let mut perm: Vec<usize> = (nb..nb + before).collect();
    perm.extend(0..nb);
    perm.extend(nb + before..grid.len());
    Ok((idx, grid, perm))
}

fn has_adv(dims: &[Dim]) -> bool {
    dims.iter().any(|d| matches!(d, Dim::Adv(_)))
}

/// `x[idx]`. Errors: too many indices, out-of-range integers (`IndexError`), boolean
/// masks under `jit`, float index arrays.
#[track_caller]
pub fn index(x: &Array, idx: &Index) -> Result<Array> {
    let (x, dims) = normalize(x, idx)?;
    if !has_adv(&dims) {
        return basic(&x, &dims);
    }
    let (pts, grid, perm) = points(&dims)?;
    let n = dims.len();
    let dn = GatherDims { offset_dims: vec![], collapsed_slice_dims: (0..n).collect(), start_index_map: (0..n).collect(), ..Default::default() };
    let g = lax::gather(&x, &pts, dn, &vec![1; n], GatherMode::PromiseInBounds)?;
    let g = lax::reshape(&g, &grid)?;
    lax::transpose(&g, &perm)
}

/// `x.at[idx]`: a pending indexed update; `set`/`add`/`mul`/`min`/`max` return the new array.
pub struct At<'a> {
    x: &'a Array,
    idx: Index,
}

impl At<'_> {
    #[track_caller]
    fn apply(&self, op: ScatterOp, v: &Array) -> Result<Array> {
        let (xr, dims) = normalize(self.x, &self.idx)?;
        if dims.is_empty() {
            // A 0-d array indexed by `()`: the update applies to its one element.
            return whole_update(op, &xr, v);
        }
        // Every indexed element becomes one point (basic indices too).
        let dims: Vec<Dim> = dims.into_iter().collect();
        let (pts, grid, perm) = points(&dims)?;
        let mut res_shape = vec![0; perm.len()];
        for (i, &p) in perm.iter().enumerate() {
            res_shape[i] = grid[p];
        }
        let v = if v.dtype() == xr.dtype() { v.clone() } else { lax::convert_element_type(v, xr.dtype())? };
        let v = lax::broadcast_to(&v, &res_shape)
            .map_err(|_| Error::value_error(format!("at[].{}: cannot broadcast updates of shape {} to the indexed shape {}", name(op), py_shape(&v.shape()), py_shape(&res_shape))))?;
        let mut inv = vec![0; perm.len()];
        for (i, &p) in perm.iter().enumerate() {
            inv[p] = i;
        }
        let v = lax::transpose(&v, &inv)?;
        let p: usize = grid.iter().product();
        let v = lax::reshape(&v, &[p])?;
        let n = dims.len();
        let dn = ScatterDims { update_window_dims: vec![], inserted_window_dims: (0..n).collect(), scatter_dims_to_operand_dims: (0..n).collect(), ..Default::default() };
        let r = lax::scatter(op, &xr, &pts, &v, dn, GatherMode::FillOrDrop)?;
        lax::reshape(&r, &self.x.shape())
    }
    /// `x.at[idx].set(v)` (`v` broadcasts to `x[idx]`'s shape).
    #[track_caller]
    pub fn set(&self, v: &Array) -> Result<Array> {
        self.apply(ScatterOp::Set, v)
    }
    /// `x.at[idx].add(v)` (repeated indices accumulate).
    #[track_caller]
    pub fn add(&self, v: &Array) -> Result<Array> {
        self.apply(ScatterOp::Add, v)
    }
    /// `x.at[idx].mul(v)`.
    #[track_caller]
    pub fn mul(&self, v: &Array) -> Result<Array> {
        self.apply(ScatterOp::Mul, v)
    }
    /// `x.at[idx].min(v)`.
    #[track_caller]
    pub fn min(&self, v: &Array) -> Result<Array> {
        self.apply(ScatterOp::Min, v)
    }
    /// `x.at[idx].max(v)`.
    #[track_caller]
    pub fn max(&self, v: &Array) -> Result<Array> {
        self.apply(ScatterOp::Max, v)
    }
    /// `x.at[idx].get()` (same as `x.index(idx)`).
    #[track_caller]
    pub fn get(&self) -> Result<Array> {
        index(self.x, &self.idx)
    }
}

/// `x.at[()].op(v)` for a 0-d `x`: `v` (broadcast to `()`) combined with `x` by `op`.
fn whole_update(op: ScatterOp, x: &Array, v: &Array) -> Result<Array> {
    let v = if v.dtype() == x.dtype() { v.clone() } else { lax::convert_element_type(v, x.dtype())? };
    let v = lax::broadcast_to(&v, &[])
        .map_err(|_| Error::value_error(format!("at[].{}: cannot broadcast updates of shape {} to the indexed shape ()", name(op), py_shape(&v.shape()))))?;
    let prim = match op {
        ScatterOp::Set => return Ok(v),
        ScatterOp::Add => Primitive::Add,
        ScatterOp::Mul => Primitive::Mul,
        ScatterOp::Min => Primitive::Min,
        ScatterOp::Max => Primitive::Max,
    };
    lax::binary(prim, Operand::Array(x.clone()), Operand::Array(v))
}

fn name(op: ScatterOp) -> &'static str {
    match op {
        ScatterOp::Set => "set",
        ScatterOp::Add => "add",
        ScatterOp::Mul => "mul",
        ScatterOp::Min => "min",
        ScatterOp::Max => "max",
    }
}

impl Array {
    /// `x[idx]` (see the module docs for `s![...]`). Inside `jit` errors are recorded in
    /// the trace; eagerly they panic (use `jnp::indexing::index` for a `Result`).
    #[track_caller]
    pub fn index(&self, idx: Index) -> Array {
        let r = index(self, &idx);
        r.unwrap_or_else(|e| fail(e, self.aval()))
    }
    /// `x.at[idx]`: then `.set(&v)`, `.add(&v)`, `.mul(&v)`, `.min(&v)`, `.max(&v)` (each a `Result`).
    pub fn at(&self, idx: Index) -> At<'_> {
        At { x: self, idx }
    }
}
