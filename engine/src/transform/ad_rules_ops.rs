//! Differentiation rules of the array-language primitives (issue 3), called from
//! `ad_rules::jvp_rule`/`vjp_rule` (single-output primitives) and from `ad.rs` for the
//! primitives with several differentiable outputs (`sort`, `split`). Rules follow JAX
//! (`jax/_src/lax/lax.py`, `slicing.py`, `convolution.py`, `windowed_reductions.py`) and
//! are written with `lax` operations, so derivatives are traced, compiled and
//! differentiable again. Zero tangents/cotangents are `None`.
//!
//! Most rules have an explicit transpose (pad ↔ slice, gather ↔ scatter-add, the
//! convolution transposes, ...). Rules whose tangent is a more involved linear map
//! (`reduce_prod`, `cumprod`, `cummax`, scatter-mul/min/max, `reduce_window_max`) build
//! the tangent map once as a function of the tangents and get the VJP by tracing that
//! linear function and pulling the cotangent back through it (`transpose_linear`),
//! which is JAX's linearize-then-transpose in miniature.

use super::interp::trace_to_jaxpr;
use crate::error::{Error, Result};
use crate::ir::{ConvDims, CumOp, DType, GatherDims, GatherMode, Primitive, Scalar, ScatterDims, ScatterOp, ShapedArray, WindowOp};
use crate::lax;
use crate::trace::{Array, Operand};

type Opt = Option<Array>;

// ---------------------------------------------------------------------------------
// small helpers

pub(crate) fn arr(a: &Array) -> Operand {
    Operand::Array(a.clone())
}
fn lit(v: f64, dtype: DType) -> Operand {
    Operand::Lit(Scalar::F64(v).cast(dtype), ShapedArray::weak(&[], dtype))
}
fn b1(p: Primitive, ops: Vec<Operand>) -> Result<Array> {
    lax::bind1(p, ops)
}
fn bin(p: Primitive, a: &Array, b: &Array) -> Result<Array> {
    lax::binary(p, arr(a), arr(b))
}
fn mul(a: &Array, b: &Array) -> Result<Array> {
    bin(Primitive::Mul, a, b)
}
fn add(a: &Array, b: &Array) -> Result<Array> {
    bin(Primitive::Add, a, b)
}
fn sub(a: &Array, b: &Array) -> Result<Array> {
    bin(Primitive::Sub, a, b)
}
fn div(a: &Array, b: &Array) -> Result<Array> {
    bin(Primitive::Div, a, b)
}
fn add_lit(a: &Array, v: f64) -> Result<Array> {
    lax::binary(Primitive::Add, arr(a), lit(v, a.dtype()))
}
fn scale(a: &Array, v: f64) -> Result<Array> {
    lax::binary(Primitive::Mul, arr(a), lit(v, a.dtype()))
}
/// `x` of type `aval` filled with `v`.
pub(crate) fn full(aval: &ShapedArray, v: f64) -> Result<Array> {
    b1(
        Primitive::BroadcastInDim { shape: aval.shape.clone(), broadcast_dimensions: vec![] },
        vec![Operand::Lit(Scalar::F64(v).cast(aval.dtype), ShapedArray::new(&[], aval.dtype))],
    )
}
pub(crate) fn zeros(aval: &ShapedArray) -> Result<Array> {
    full(aval, 0.0)
}
fn to_float(mask: &Array, dtype: DType) -> Result<Array> {
    lax::convert_element_type(mask, dtype)
}
fn reduce_sum(x: &Array, axes: Vec<usize>) -> Result<Array> {
    if axes.is_empty() {
        return Ok(x.clone());
    }
    b1(Primitive::ReduceSum { axes }, vec![arr(x)])
}
fn bcast(x: &Array, shape: &[usize], dims: Vec<usize>) -> Result<Array> {
    b1(Primitive::BroadcastInDim { shape: shape.to_vec(), broadcast_dimensions: dims }, vec![arr(x)])
}
fn select(pred: &Array, on_true: &Array, on_false: &Array) -> Result<Array> {
    lax::select_n(pred, &[on_false.clone(), on_true.clone()])
}
fn is_diff(a: &ShapedArray) -> bool {
    a.dtype.is_float()
}
fn not_impl(p: &Primitive) -> Error {
    Error::type_error(format!("Differentiation rule for '{}' not implemented", p.name()))
}

/// Moves axis `from` of `x` to position `to`.
pub(crate) fn move_axis(x: &Array, from: usize, to: usize) -> Result<Array> {
    if from == to {
        return Ok(x.clone());
    }
    let mut perm: Vec<usize> = (0..x.ndim()).filter(|&i| i != from).collect();
    perm.insert(to, from);
    lax::transpose(x, &perm)
}

/// JAX's `_reshape_axis_into`: merges axis `src` into axis `dst` (numbered after `src`
/// is removed), `src` becoming the major part.
pub(crate) fn reshape_axis_into(src: usize, dst: usize, x: &Array) -> Result<Array> {
    let shape = x.shape();
    let moved = move_axis(x, src, dst)?;
    let mut new_shape: Vec<usize> = shape.iter().enumerate().filter(|&(i, _)| i != src).map(|(_, &s)| s).collect();
    new_shape[dst] *= shape[src];
    lax::reshape(&moved, &new_shape)
}

/// JAX's `_reshape_axis_out_of`: splits axis `src` into `[size1, rest]`.
pub(crate) fn reshape_axis_out_of(src: usize, size1: usize, x: &Array) -> Result<Array> {
    let mut shape = x.shape();
    let n = shape[src];
    shape.splice(src..src + 1, [size1, n / size1]);
    lax::reshape(x, &shape)
}

/// Full index arrays for `take_along_axis`: `idx` along `axis`, iotas elsewhere, as an
/// `[*idx.shape, ndim]` int32 array.
fn along_axis_indices(idx: &Array, axis: usize) -> Result<Array> {
    let shape = idx.shape();
    let n = shape.len();
    let mut full_shape = shape.clone();
    full_shape.push(1);
    let parts = (0..n)
        .map(|d| {
            let v = if d == axis { lax::convert_element_type(idx, DType::I32)? } else { lax::iota(DType::I32, &shape, d)? };
            lax::reshape(&v, &full_shape)
        })
        .collect::<Result<Vec<_>>>()?;
    if parts.len() == 1 {
        return Ok(parts[0].clone());
    }
    lax::concatenate(&parts, n)
}

fn point_dims(n: usize) -> (GatherDims, ScatterDims) {
    (
        GatherDims { offset_dims: vec![], collapsed_slice_dims: (0..n).collect(), start_index_map: (0..n).collect(), ..Default::default() },
        ScatterDims { update_window_dims: vec![], inserted_window_dims: (0..n).collect(), scatter_dims_to_operand_dims: (0..n).collect(), ..Default::default() },
    )
}

/// `x` gathered along `axis` at `idx` (of `x`'s rank): `np.take_along_axis`.
fn take_along_axis(x: &Array, idx: &Array, axis: usize) -> Result<Array> {
    let full_idx = along_axis_indices(idx, axis)?;
    let (g, _) = point_dims(x.ndim());
    gather_fill0(x, &full_idx, g, &vec![1; x.ndim()], GatherMode::PromiseInBounds)
}

/// The transpose of `take_along_axis`: `ct` added into zeros of `aval` at `idx`.
fn untake_along_axis(ct: &Array, idx: &Array, axis: usize, aval: &ShapedArray) -> Result<Array> {
    let full_idx = along_axis_indices(idx, axis)?;
    let (_, s) = point_dims(aval.ndim());
    lax::scatter(ScatterOp::Add, &zeros(aval)?, &full_idx, ct, s, GatherMode::PromiseInBounds)
}

/// A gather whose out-of-bounds fill (with `FILL_OR_DROP`) is 0, as tangents need.
fn gather_fill0(x: &Array, idx: &Array, dn: GatherDims, slice_sizes: &[usize], mode: GatherMode) -> Result<Array> {
    b1(
        Primitive::Gather {
            dimension_numbers: dn,
            slice_sizes: slice_sizes.to_vec(),
            mode,
            fill_value: if mode == GatherMode::FillOrDrop { Some(0.0) } else { None },
            indices_are_sorted: false,
            unique_indices: false,
        },
        vec![arr(x), arr(idx)],
    )
}

/// The scatter that is the transpose of a gather (same indices and mode).
fn gather_to_scatter(dn: &GatherDims) -> ScatterDims {
    ScatterDims {
        update_window_dims: dn.offset_dims.clone(),
        inserted_window_dims: dn.collapsed_slice_dims.clone(),
        scatter_dims_to_operand_dims: dn.start_index_map.clone(),
        operand_batching_dims: dn.operand_batching_dims.clone(),
        scatter_indices_batching_dims: dn.start_indices_batching_dims.clone(),
    }
}

/// The gather that reads back what a scatter wrote (JAX's `_scatter_transpose_rule`).
fn scatter_to_gather(dn: &ScatterDims, x_ndim: usize, u_shape: &[usize]) -> (GatherDims, Vec<usize>) {
    let g = GatherDims {
        offset_dims: dn.update_window_dims.clone(),
        collapsed_slice_dims: dn.inserted_window_dims.clone(),
        start_index_map: dn.scatter_dims_to_operand_dims.clone(),
        operand_batching_dims: dn.operand_batching_dims.clone(),
        start_indices_batching_dims: dn.scatter_indices_batching_dims.clone(),
    };
    let mut pos = 0;
    let sizes = (0..x_ndim)
        .map(|i| {
            if dn.inserted_window_dims.contains(&i) || dn.operand_batching_dims.contains(&i) {
                1
            } else {
                pos += 1;
                u_shape[dn.update_window_dims[pos - 1]]
            }
        })
        .collect();
    (g, sizes)
}

fn scatter_p(op: ScatterOp, dn: &ScatterDims, mode: GatherMode) -> Primitive {
    Primitive::Scatter { op, dimension_numbers: dn.clone(), mode, indices_are_sorted: false, unique_indices: false }
}

/// The VJP of the linear map `f` (of arguments typed `avals`) at `ct`: `f` is traced
/// and the cotangent pulled back through its jaxpr.
fn transpose_linear(avals: &[ShapedArray], f: impl Fn(&[Array]) -> Result<Array>, ct: &Array) -> Result<Vec<Opt>> {
    let avals: Vec<ShapedArray> = avals.iter().map(|a| a.strong()).collect();
    let lin = trace_to_jaxpr("transpose", &avals, |t| Ok(vec![f(&t)?]))?;
    let zs = avals.iter().map(zeros).collect::<Result<Vec<_>>>()?;
    let (_, g) = super::ad::vjp_jaxpr(&lin.jaxpr, &lin.consts, &zs, &[Some(ct.clone())])?;
    Ok(g)
}

// ---------------------------------------------------------------------------------
// linear maps shared by JVP and (through transposition) VJP

/// The tangent of `reduce_prod(x, axes)` is `Σ_i t_i · Π_{j≠i} x_j` over each reduced
/// group; the exclusive products come from forward and reverse exclusive cumprods, so
/// zeros in `x` are handled exactly.
fn reduce_prod_others(x: &Array, axes: &[usize]) -> Result<(Array, Vec<usize>, Vec<usize>)> {
    let nd = x.ndim();
    let mut axes = axes.to_vec();
    axes.sort();
    let kept: Vec<usize> = (0..nd).filter(|i| !axes.contains(i)).collect();
    let mut perm = axes.clone();
    perm.extend(&kept);
    let shape = x.shape();
    let n: usize = axes.iter().map(|&a| shape[a]).product();
    let mut flat_shape = vec![n];
    flat_shape.extend(kept.iter().map(|&k| shape[k]));
    let xf = lax::reshape(&lax::transpose(x, &perm)?, &flat_shape)?;
    let r = flat_shape.len();
    let cf = lax::cumulative(CumOp::Prod, &xf, 0, false)?;
    let cr = lax::cumulative(CumOp::Prod, &xf, 0, true)?;
    let mut lo = vec![(0, 0, 0); r];
    lo[0] = (1, -1, 0);
    let mut hi = vec![(0, 0, 0); r];
    hi[0] = (-1, 1, 0);
    let left = lax::pad(&cf, 1.0, &lo)?;
    let right = lax::pad(&cr, 1.0, &hi)?;
    Ok((mul(&left, &right)?, perm, flat_shape))
}

fn reduce_prod_lin(others: &Array, perm: &[usize], flat_shape: &[usize], t: &Array) -> Result<Array> {
    let tf = lax::reshape(&lax::transpose(t, perm)?, flat_shape)?;
    reduce_sum(&mul(&tf, others)?, vec![0])
}

/// Matrix `M[j, i, ...]` (axis moved to the front, after reversal if `reverse`) with
/// `tangent_i = Σ_j t_j M[j, i]` for cumprod/cummax/cummin. O(n²) in the axis length.
fn cumulative_matrix(op: CumOp, x: &Array, y: &Array, axis: usize, reverse: bool) -> Result<Array> {
    let prep = |a: &Array| -> Result<Array> {
        let a = if reverse { lax::rev(a, &[axis])? } else { a.clone() };
        move_axis(&a, axis, 0)
    };
    let (xf, yf) = (prep(x)?, prep(y)?);
    let s = xf.shape();
    let n = s[0];
    let mut big = vec![n];
    big.extend(&s);
    let rest: Vec<usize> = (2..big.len()).collect();
    let dims_j: Vec<usize> = std::iter::once(0).chain(rest.iter().copied()).collect();
    let dims_i: Vec<usize> = std::iter::once(1).chain(rest.iter().copied()).collect();
    let ij = lax::iota(DType::I32, &big, 0)?;
    let ii = lax::iota(DType::I32, &big, 1)?;
    let le = bin(Primitive::Le, &ij, &ii)?;
    let d = x.dtype();
    match op {
        CumOp::Prod => {
            let xb = bcast(&xf, &big, dims_i.clone())?; // x_k along dim 1 for each j
            let eq = bin(Primitive::Eq, &ij, &ii)?;
            let xr = select(&eq, &full(&ShapedArray::new(&big, d), 1.0)?, &xb)?;
            let c = lax::cumulative(CumOp::Prod, &xr, 1, false)?;
            select(&le, &c, &zeros(&ShapedArray::new(&big, d))?)
        }
        _ => {
            let xj = bcast(&xf, &big, dims_j)?;
            let yi = bcast(&yf, &big, dims_i)?;
            let hit = lax::binary(Primitive::And, arr(&le), arr(&bin(Primitive::Eq, &xj, &yi)?))?;
            let m = to_float(&hit, d)?;
            let cnt = reduce_sum(&m, vec![0])?;
            let cntb = bcast(&cnt, &big, (1..big.len()).collect())?;
            div(&m, &cntb)
        }
    }
}

fn cumulative_lin(m: &Array, t: &Array, axis: usize, reverse: bool) -> Result<Array> {
    let tf = if reverse { lax::rev(t, &[axis])? } else { t.clone() };
    let tf = move_axis(&tf, axis, 0)?;
    let big = m.shape();
    let dims_j: Vec<usize> = std::iter::once(0).chain(2..big.len()).collect();
    let tb = bcast(&tf, &big, dims_j)?;
    let r = reduce_sum(&mul(&tb, m)?, vec![0])?;
    let r = move_axis(&r, 0, axis)?;
    if reverse { lax::rev(&r, &[axis]) } else { Ok(r) }
}

/// The windows of `reduce_window` as strided slices of the padded, dilated input: one
/// array of the output's shape per window position.
fn window_patches(x: &Array, pad_value: f64, p: &Primitive, out_shape: &[usize]) -> Result<Vec<Array>> {
    let Primitive::ReduceWindow { window_dimensions: w, window_strides, padding, base_dilation, window_dilation, .. } = p else {
        return Err(Error::runtime("internal: window_patches of a non-window op"));
    };
    let n = x.ndim();
    if out_shape.contains(&0) {
        return Ok(vec![full(&ShapedArray::new(out_shape, x.dtype()), pad_value)?]);
    }
    let cfg: Vec<(i64, i64, i64)> = (0..n).map(|i| (padding[i].0, padding[i].1, base_dilation[i] as i64 - 1)).collect();
    let xp = if cfg.iter().all(|&c| c == (0, 0, 0)) { x.clone() } else { lax::pad(x, pad_value, &cfg)? };
    let total: usize = w.iter().product();
    let mut out = vec![];
    for flat in 0..total {
        let mut rem = flat;
        let mut off = vec![0; n];
        for i in (0..n).rev() {
            off[i] = rem % w[i];
            rem /= w[i];
        }
        let start: Vec<usize> = (0..n).map(|i| off[i] * window_dilation[i]).collect();
        let limit: Vec<usize> = (0..n).map(|i| start[i] + (out_shape[i] - 1) * window_strides[i] + 1).collect();
        out.push(lax::slice(&xp, &start, &limit, Some(window_strides))?);
    }
    Ok(out)
}

/// Per window position, the weight of its element in the tangent of a max/min window
/// reduction: 1/count where the element attains the result (ties share), else 0.
fn window_weights(p: &Primitive, x: &Array, y: &Array) -> Result<Vec<Array>> {
    let Primitive::ReduceWindow { op, .. } = p else { unreachable!() };
    let pad_value = if *op == WindowOp::Max { f64::NEG_INFINITY } else { f64::INFINITY };
    let patches = window_patches(x, pad_value, p, &y.shape())?;
    let masks = patches.iter().map(|q| to_float(&bin(Primitive::Eq, q, y)?, x.dtype())).collect::<Result<Vec<_>>>()?;
    let mut cnt = masks[0].clone();
    for m in &masks[1..] {
        cnt = add(&cnt, m)?;
    }
    masks.iter().map(|m| div(m, &cnt)).collect()
}

fn window_lin(p: &Primitive, weights: &[Array], t: &Array, out_shape: &[usize]) -> Result<Array> {
    let tp = window_patches(t, 0.0, p, out_shape)?;
    let mut acc = mul(&tp[0], &weights[0])?;
    for (q, w) in tp.iter().zip(weights).skip(1) {
        acc = add(&acc, &mul(q, w)?)?;
    }
    Ok(acc)
}

/// Quantities of a scatter-mul's tangent that depend on the primals only: the product
/// of all updates landing on each operand element, and for each update the product of
/// the other updates landing with it (zero-safe: zeros are counted, not divided by).
fn scatter_mul_parts(x: &Array, idx: &Array, u: &Array, dn: &ScatterDims, mode: GatherMode) -> Result<(Array, Array)> {
    let d = x.dtype();
    let xa = x.aval().strong();
    let ones_x = full(&xa, 1.0)?;
    let total = b1(scatter_p(ScatterOp::Mul, dn, mode), vec![arr(&ones_x), arr(idx), arr(u)])?;
    let is0 = bin(Primitive::Eq, u, &zeros(&u.aval().strong())?)?;
    let ones_u = full(&u.aval().strong(), 1.0)?;
    let nz = select(&is0, &ones_u, u)?;
    let nz_prod = b1(scatter_p(ScatterOp::Mul, dn, mode), vec![arr(&ones_x), arr(idx), arr(&nz)])?;
    let zc = b1(scatter_p(ScatterOp::Add, dn, mode), vec![arr(&zeros(&xa)?), arr(idx), arr(&to_float(&is0, d)?)])?;
    let (g, sizes) = scatter_to_gather(dn, x.ndim(), &u.shape());
    let gat = |v: &Array, fill: f64| -> Result<Array> {
        b1(
            Primitive::Gather { dimension_numbers: g.clone(), slice_sizes: sizes.clone(), mode, fill_value: Some(fill), indices_are_sorted: false, unique_indices: false },
            vec![arr(v), arr(idx)],
        )
    };
    let others_nz = div(&gat(&nz_prod, 1.0)?, &nz)?;
    let zeros_others = sub(&gat(&zc, 0.0)?, &to_float(&is0, d)?)?;
    let none = bin(Primitive::Eq, &zeros_others, &zeros(&u.aval().strong())?)?;
    let excl = select(&none, &others_nz, &zeros(&u.aval().strong())?)?;
    Ok((total, excl))
}

/// Quantities of a scatter-min/max tangent from the primals: whether the operand kept
/// its value, whether each update won, and the number of winners per element.
fn scatter_extremal_parts(x: &Array, idx: &Array, u: &Array, y: &Array, dn: &ScatterDims, mode: GatherMode) -> Result<(Array, Array, Array)> {
    let d = x.dtype();
    let (g, sizes) = scatter_to_gather(dn, x.ndim(), &u.shape());
    let yg = b1(
        Primitive::Gather { dimension_numbers: g, slice_sizes: sizes, mode, fill_value: None, indices_are_sorted: false, unique_indices: false },
        vec![arr(y), arr(idx)],
    )?;
    let retained = to_float(&bin(Primitive::Eq, x, y)?, d)?;
    let succ = to_float(&bin(Primitive::Eq, u, &yg)?, d)?;
    let won = b1(scatter_p(ScatterOp::Add, dn, mode), vec![arr(&zeros(&x.aval().strong())?), arr(idx), arr(&succ)])?;
    let cnt = add(&retained, &won)?;
    Ok((retained, succ, cnt))
}

/// A convolution's (strides, padding, lhs dilation, rhs dilation, layouts, feature groups).
type ConvParams<'a> = (&'a [usize], &'a [(i64, i64)], &'a [usize], &'a [usize], &'a ConvDims, usize);

fn conv_params(p: &Primitive) -> Result<ConvParams<'_>> {
    match p {
        Primitive::ConvGeneralDilated { window_strides, padding, lhs_dilation, rhs_dilation, dimension_numbers, feature_group_count, .. } => {
            Ok((window_strides, padding, lhs_dilation, rhs_dilation, dimension_numbers, *feature_group_count))
        }
        _ => Err(Error::runtime("internal: not a convolution")),
    }
}

#[allow(clippy::too_many_arguments)]
fn conv(lhs: &Array, rhs: &Array, strides: &[usize], padding: &[(i64, i64)], ld: &[usize], rd: &[usize], dn: &ConvDims, g: usize) -> Result<Array> {
    b1(
        Primitive::ConvGeneralDilated {
            window_strides: strides.to_vec(),
            padding: padding.to_vec(),
            lhs_dilation: ld.to_vec(),
            rhs_dilation: rd.to_vec(),
            dimension_numbers: dn.clone(),
            feature_group_count: g,
            batch_group_count: 1,
            preferred_element_type: None,
        },
        vec![arr(lhs), arr(rhs)],
    )
}

fn dilate(n: usize, d: usize) -> i64 {
    if n == 0 { 0 } else { 1 + d as i64 * (n as i64 - 1) }
}

/// JAX's `_conv_general_vjp_lhs_padding`.
fn vjp_lhs_padding(inp: &[usize], win: &[usize], strides: &[usize], out: &[usize], padding: &[(i64, i64)], ld: &[usize], rd: &[usize]) -> Vec<(i64, i64)> {
    (0..inp.len())
        .map(|i| {
            let l = dilate(inp[i], ld[i]);
            let r = dilate(win[i], rd[i]);
            let o = dilate(out[i], strides[i]);
            let before = r - padding[i].0 - 1;
            let after = l + r - 1 - o - before;
            (before, after)
        })
        .collect()
}

/// JAX's `_conv_general_vjp_rhs_padding`.
fn vjp_rhs_padding(inp: &[usize], win: &[usize], strides: &[usize], out: &[usize], padding: &[(i64, i64)], ld: &[usize], rd: &[usize]) -> Vec<(i64, i64)> {
    (0..inp.len())
        .map(|i| {
            let l = dilate(inp[i], ld[i]);
            let r = dilate(win[i], rd[i]);
            let o = dilate(out[i], strides[i]);
            let lo = padding[i].0;
            (lo, (o - l) + (r - lo - 1))
        })
        .collect()
}

fn take(shape: &[usize], dims: &[usize]) -> Vec<usize> {
    dims.iter().map(|&d| shape[d]).collect()
}

fn swap01(v: &[usize]) -> Vec<usize> {
    let mut w = v.to_vec();
    w.swap(0, 1);
    w
}

/// Cotangent of a convolution's lhs (JAX's `_conv_general_dilated_transpose_lhs`).
fn conv_transpose_lhs(p: &Primitive, ct: &Array, lhs: &ShapedArray, rhs: &Array) -> Result<Array> {
    let (strides, padding, ld, rd, dn, g) = conv_params(p)?;
    let rhs_shape = rhs.shape();
    let (ls, rs, os) = (&dn.lhs_spec[2..], &dn.rhs_spec[2..], &dn.out_spec[2..]);
    let mut r = rhs.clone();
    if g > 1 {
        r = reshape_axis_out_of(dn.rhs_spec[0], g, &r)?;
        r = reshape_axis_into(dn.rhs_spec[0], dn.rhs_spec[1], &r)?;
    }
    let tdn = ConvDims { lhs_spec: dn.out_spec.clone(), rhs_spec: swap01(&dn.rhs_spec), out_spec: dn.lhs_spec.clone() };
    let pads = vjp_lhs_padding(&take(&lhs.shape, ls), &take(&rhs_shape, rs), strides, &take(&ct.shape(), os), padding, ld, rd);
    let rev = lax::rev(&r, rs)?;
    conv(ct, &rev, ld, &pads, strides, rd, &tdn, g)
}

/// Cotangent of a convolution's rhs (JAX's `_conv_general_dilated_transpose_rhs`); with
/// feature groups, one ungrouped transpose per group (we have no batch groups).
fn conv_transpose_rhs(p: &Primitive, ct: &Array, lhs: &Array, rhs: &ShapedArray) -> Result<Array> {
    let (strides, padding, ld, rd, dn, g) = conv_params(p)?;
    if g > 1 {
        let (cin, cout) = (lhs.shape()[dn.lhs_spec[1]], ct.shape()[dn.out_spec[1]]);
        let (ci, co) = (cin / g, cout / g);
        let mut parts = vec![];
        for k in 0..g {
            let l = slice_axis(lhs, dn.lhs_spec[1], k * ci, (k + 1) * ci)?;
            let c = slice_axis(ct, dn.out_spec[1], k * co, (k + 1) * co)?;
            let mut ra = rhs.clone();
            ra.shape[dn.rhs_spec[0]] = co;
            let p1 = conv_with_groups(p, 1);
            parts.push(conv_transpose_rhs(&p1, &c, &l, &ra)?);
        }
        return lax::concatenate(&parts, dn.rhs_spec[0]);
    }
    let (ls, rs, os) = (&dn.lhs_spec[2..], &dn.rhs_spec[2..], &dn.out_spec[2..]);
    let tdn = ConvDims { lhs_spec: swap01(&dn.lhs_spec), rhs_spec: swap01(&dn.out_spec), out_spec: swap01(&dn.rhs_spec) };
    let pads = vjp_rhs_padding(&take(&lhs.shape(), ls), &take(&rhs.shape, rs), strides, &take(&ct.shape(), os), padding, ld, rd);
    conv(lhs, ct, rd, &pads, ld, strides, &tdn, 1)
}

fn conv_with_groups(p: &Primitive, groups: usize) -> Primitive {
    let mut q = p.clone();
    if let Primitive::ConvGeneralDilated { feature_group_count, .. } = &mut q {
        *feature_group_count = groups;
    }
    q
}

fn slice_axis(x: &Array, axis: usize, start: usize, end: usize) -> Result<Array> {
    let shape = x.shape();
    let mut s = vec![0; shape.len()];
    let mut l = shape.clone();
    s[axis] = start;
    l[axis] = end;
    lax::slice(x, &s, &l, None)
}

/// JAX's `_reduce_window_sum_transpose_rule`.
fn reduce_window_sum_transpose(p: &Primitive, ct: &Array, x: &ShapedArray) -> Result<Array> {
    let Primitive::ReduceWindow { window_dimensions: w, window_strides, padding, base_dilation, window_dilation, .. } = p else { unreachable!() };
    let n = x.ndim();
    let pads = vjp_lhs_padding(&x.shape, w, window_strides, &ct.shape(), padding, base_dilation, window_dilation);
    let cfg: Vec<(i64, i64, i64)> = (0..n).map(|i| (pads[i].0, pads[i].1, window_strides[i] as i64 - 1)).collect();
    let padded = lax::pad(ct, 0.0, &cfg)?;
    b1(
        Primitive::ReduceWindow {
            op: WindowOp::Sum,
            window_dimensions: w.clone(),
            window_strides: base_dilation.clone(),
            padding: vec![(0, 0); n],
            base_dilation: vec![1; n],
            window_dilation: window_dilation.clone(),
        },
        vec![arr(&padded)],
    )
}

// ---------------------------------------------------------------------------------
// JVP

/// JVP of an issue-3 primitive with one differentiable output (`top_k`'s values
/// included); `ad_rules::jvp_rule` has already returned `None` when every tangent is
/// zero or the output is not a float.
pub fn jvp(p: &Primitive, ins: &[Array], outs: &[Array], ts: &[Opt], out_aval: &ShapedArray) -> Result<Opt> {
    use Primitive::*;
    let t = |i: usize| -> Result<Array> {
        match &ts[i] {
            Some(t) => Ok(t.clone()),
            None => zeros(&ins[i].aval().strong()),
        }
    };
    let x = &ins[0];
    let r = match p {
        Sign | Floor | Ceil | Round { .. } | IsFinite | ArgMax { .. } | ArgMin { .. } | ReduceAnd { .. } | ReduceOr { .. } | Xor => {
            return Ok(None)
        }
        Log1p => div(&t(0)?, &add_lit(x, 1.0)?)?,
        Expm1 => mul(&t(0)?, &add_lit(&outs[0], 1.0)?)?,
        Logistic => {
            let y = &outs[0];
            mul(&t(0)?, &mul(y, &lax::binary(Sub, lit(1.0, y.dtype()), arr(y))?)?)?
        }
        Erf => mul(&t(0)?, &erf_factor(x)?)?,
        IntegerPow { y } => {
            if *y == 0 {
                return Ok(None);
            }
            mul(&t(0)?, &integer_pow_factor(x, *y)?)?
        }
        ReducePrecision { .. } | Cumulative { op: CumOp::Sum, .. } | Rev { .. } | Squeeze { .. } | Slice { .. } => {
            b1(p.clone(), vec![arr(&t(0)?)])?
        }
        ReduceWindow { op: WindowOp::Sum, .. } => b1(p.clone(), vec![arr(&t(0)?)])?,
        ReduceProd { axes } => {
            if axes.is_empty() {
                t(0)?
            } else {
                let (others, perm, fs) = reduce_prod_others(x, axes)?;
                reduce_prod_lin(&others, &perm, &fs, &t(0)?)?
            }
        }
        Cumulative { op, axis, reverse } => {
            let m = cumulative_matrix(*op, x, &outs[0], *axis, *reverse)?;
            cumulative_lin(&m, &t(0)?, *axis, *reverse)?
        }
        Concatenate { .. } => b1(p.clone(), (0..ins.len()).map(|i| t(i).map(|a| arr(&a))).collect::<Result<Vec<_>>>()?)?,
        Pad { .. } => b1(p.clone(), vec![arr(&t(0)?), arr(&t(1)?)])?,
        DynamicSlice { .. } => {
            let mut ops = vec![arr(&t(0)?)];
            ops.extend(ins[1..].iter().map(arr));
            b1(p.clone(), ops)?
        }
        DynamicUpdateSlice => {
            let mut ops = vec![arr(&t(0)?), arr(&t(1)?)];
            ops.extend(ins[2..].iter().map(arr));
            b1(p.clone(), ops)?
        }
        Gather { dimension_numbers, slice_sizes, mode, .. } => gather_fill0(&t(0)?, &ins[1], dimension_numbers.clone(), slice_sizes, *mode)?,
        Scatter { op, dimension_numbers: dn, mode, .. } => {
            let (idx, u) = (&ins[1], &ins[2]);
            match op {
                ScatterOp::Set | ScatterOp::Add => b1(p.clone(), vec![arr(&t(0)?), arr(idx), arr(&t(2)?)])?,
                ScatterOp::Mul => {
                    let (total, excl) = scatter_mul_parts(x, idx, u, dn, *mode)?;
                    scatter_mul_lin(x, idx, &total, &excl, dn, *mode, &t(0)?, &t(2)?)?
                }
                ScatterOp::Min | ScatterOp::Max => {
                    let (ret, succ, cnt) = scatter_extremal_parts(x, idx, u, &outs[0], dn, *mode)?;
                    scatter_extremal_lin(idx, &ret, &succ, &cnt, dn, *mode, &t(0)?, &t(2)?)?
                }
            }
        }
        TopK { .. } => take_along_axis(&t(0)?, &outs[1], x.ndim() - 1)?,
        ConvGeneralDilated { .. } => {
            let a = ts[0].as_ref().map(|tl| b1(p.clone(), vec![arr(tl), arr(&ins[1])])).transpose()?;
            let b = ts[1].as_ref().map(|tr| b1(p.clone(), vec![arr(&ins[0]), arr(tr)])).transpose()?;
            match super::ad_rules::add_opt(a, b)? {
                Some(r) => r,
                None => return Ok(None),
            }
        }
        ReduceWindow { .. } => {
            let w = window_weights(p, x, &outs[0])?;
            window_lin(p, &w, &t(0)?, &outs[0].shape())?
        }
        _ => return Err(not_impl(p)),
    };
    Ok(Some(super::ad_rules::fit(r, out_aval)?))
}

fn erf_factor(x: &Array) -> Result<Array> {
    let e = lax::unary(Primitive::Exp, &scale(&mul(x, x)?, -1.0)?)?;
    scale(&e, 2.0 / std::f64::consts::PI.sqrt())
}

fn integer_pow_factor(x: &Array, y: i32) -> Result<Array> {
    let base = if y == 1 { full(&x.aval().strong(), 1.0)? } else { lax::integer_pow(x, y - 1)? };
    scale(&base, y as f64)
}

#[allow(clippy::too_many_arguments)]
fn scatter_mul_lin(x: &Array, idx: &Array, total: &Array, excl: &Array, dn: &ScatterDims, mode: GatherMode, tx: &Array, tu: &Array) -> Result<Array> {
    let a = mul(tx, total)?;
    let s = b1(scatter_p(ScatterOp::Add, dn, mode), vec![arr(&zeros(&x.aval().strong())?), arr(idx), arr(&mul(tu, excl)?)])?;
    add(&a, &mul(x, &s)?)
}

#[allow(clippy::too_many_arguments)]
fn scatter_extremal_lin(idx: &Array, ret: &Array, succ: &Array, cnt: &Array, dn: &ScatterDims, mode: GatherMode, tx: &Array, tu: &Array) -> Result<Array> {
    let a = mul(tx, ret)?;
    let s = b1(scatter_p(ScatterOp::Add, dn, mode), vec![arr(&zeros(&ret.aval().strong())?), arr(idx), arr(&mul(tu, succ)?)])?;
    div(&add(&a, &s)?, cnt)
}

/// JVP of `sort` and `split` (every output differentiable): the outputs and their
/// tangents; `None` for other primitives. `sort` is re-bound with an iota as an extra
/// operand, and the tangents are gathered with the permutation it gives (JAX's
/// `_sort_jvp`).
pub fn jvp_multi(p: &Primitive, ins: &[Array], ts: &[Opt]) -> Result<Option<(Vec<Array>, Vec<Opt>)>> {
    match p {
        Primitive::Sort { dimension, .. } => {
            let (outs, perm) = sort_with_perm(p, ins, *dimension)?;
            let touts = ts
                .iter()
                .zip(&outs)
                .map(|(t, o)| match t {
                    Some(t) if is_diff(&o.aval()) => take_along_axis(t, &perm, *dimension).map(Some),
                    _ => Ok(None),
                })
                .collect::<Result<Vec<_>>>()?;
            Ok(Some((outs, touts)))
        }
        Primitive::Split { .. } => {
            let outs = crate::trace::bind(p.clone(), vec![arr(&ins[0])], std::panic::Location::caller())?;
            let touts = match &ts[0] {
                Some(t) if is_diff(&ins[0].aval()) => crate::trace::bind(p.clone(), vec![arr(t)], std::panic::Location::caller())?.into_iter().map(Some).collect(),
                _ => vec![None; outs.len()],
            };
            Ok(Some((outs, touts)))
        }
        _ => Ok(None),
    }
}

/// `sort` of `ins` plus an iota along `dimension`: the sorted operands and the
/// permutation.
fn sort_with_perm(p: &Primitive, ins: &[Array], dimension: usize) -> Result<(Vec<Array>, Array)> {
    let io = lax::iota(DType::I32, &ins[0].shape(), dimension)?;
    let mut ops: Vec<Operand> = ins.iter().map(arr).collect();
    ops.push(arr(&io));
    let mut outs = crate::trace::bind(p.clone(), ops, std::panic::Location::caller())?;
    let perm = outs.pop().ok_or_else(|| Error::runtime("internal: sort lost its outputs"))?;
    Ok((outs, perm))
}

/// Whether `p` has several differentiable outputs and goes through `jvp_multi`/`vjp_multi`.
pub fn is_multi(p: &Primitive) -> bool {
    matches!(p, Primitive::Sort { .. } | Primitive::Split { .. })
}

/// VJP of `sort` and `split` given every output's cotangent (None: zero).
pub fn vjp_multi(p: &Primitive, ins: &[Array], outs: &[Array], cts: &[Opt]) -> Result<Vec<Opt>> {
    match p {
        Primitive::Sort { dimension, .. } => {
            if cts.iter().all(|c| c.is_none()) {
                return Ok(vec![None; ins.len()]);
            }
            let (_, perm) = sort_with_perm(p, ins, *dimension)?;
            ins.iter()
                .zip(cts)
                .map(|(x, c)| match c {
                    Some(c) if is_diff(&x.aval()) => {
                        let xa = x.aval().strong();
                        untake_along_axis(&super::ad_rules::fit(c.clone(), &xa)?, &perm, *dimension, &xa).map(Some)
                    }
                    _ => Ok(None),
                })
                .collect()
        }
        Primitive::Split { axis, .. } => {
            if !is_diff(&ins[0].aval()) || cts.iter().all(|c| c.is_none()) {
                return Ok(vec![None]);
            }
            let parts = cts
                .iter()
                .zip(outs)
                .map(|(c, o)| match c {
                    Some(c) => super::ad_rules::fit(c.clone(), &o.aval().strong()),
                    None => zeros(&o.aval().strong()),
                })
                .collect::<Result<Vec<_>>>()?;
            Ok(vec![Some(lax::concatenate(&parts, *axis)?)])
        }
        _ => Err(not_impl(p)),
    }
}

// ---------------------------------------------------------------------------------
// VJP

/// VJP of an issue-3 primitive with one differentiable output: one cotangent per input.
pub fn vjp(p: &Primitive, ins: &[Array], outs: &[Array], ct: &Array) -> Result<Vec<Opt>> {
    use Primitive::*;
    let avals: Vec<ShapedArray> = ins.iter().map(|a| a.aval().strong()).collect();
    let back = |i: usize, x: Array| -> Result<Opt> {
        if is_diff(&avals[i]) { Ok(Some(super::ad_rules::fit(x, &avals[i])?)) } else { Ok(None) }
    };
    let nones = || vec![None; ins.len()];
    let x = &ins[0];
    match p {
        Sign | Floor | Ceil | Round { .. } | IsFinite | ArgMax { .. } | ArgMin { .. } | ReduceAnd { .. } | ReduceOr { .. } | Xor => Ok(nones()),
        Log1p => Ok(vec![back(0, div(ct, &add_lit(x, 1.0)?)?)?]),
        Expm1 => Ok(vec![back(0, mul(ct, &add_lit(&outs[0], 1.0)?)?)?]),
        Logistic => {
            let y = &outs[0];
            Ok(vec![back(0, mul(ct, &mul(y, &lax::binary(Sub, lit(1.0, y.dtype()), arr(y))?)?)?)?])
        }
        Erf => Ok(vec![back(0, mul(ct, &erf_factor(x)?)?)?]),
        IntegerPow { y } => {
            if *y == 0 {
                return Ok(vec![None]);
            }
            Ok(vec![back(0, mul(ct, &integer_pow_factor(x, *y)?)?)?])
        }
        ReducePrecision { .. } | Rev { .. } => Ok(vec![back(0, b1(p.clone(), vec![arr(ct)])?)?]),
        Squeeze { .. } => Ok(vec![back(0, lax::reshape(ct, &avals[0].shape)?)?]),
        Cumulative { op: CumOp::Sum, axis, reverse } => Ok(vec![back(0, lax::cumulative(CumOp::Sum, ct, *axis, !reverse)?)?]),
        Cumulative { op, axis, reverse } => {
            let m = cumulative_matrix(*op, x, &outs[0], *axis, *reverse)?;
            let g = transpose_linear(&avals[..1], |t: &[Array]| cumulative_lin(&m, &t[0], *axis, *reverse), ct)?;
            Ok(vec![back(0, g.into_iter().next().flatten().map(Ok).unwrap_or_else(|| zeros(&avals[0]))?)?])
        }
        ReduceProd { axes } => {
            if axes.is_empty() {
                return Ok(vec![back(0, ct.clone())?]);
            }
            let (others, perm, fs) = reduce_prod_others(x, axes)?;
            let g = transpose_linear(&avals[..1], |t: &[Array]| reduce_prod_lin(&others, &perm, &fs, &t[0]), ct)?;
            Ok(vec![back(0, g.into_iter().next().flatten().map(Ok).unwrap_or_else(|| zeros(&avals[0]))?)?])
        }
        Concatenate { dimension } => {
            let mut off = 0;
            let mut v = vec![];
            for a in &avals {
                let n = a.shape[*dimension];
                v.push(back(v.len(), slice_axis(ct, *dimension, off, off + n)?)?);
                off += n;
            }
            Ok(v)
        }
        Pad { padding_config } => {
            let n = avals[0].ndim();
            let unpad: Vec<(i64, i64, i64)> = padding_config.iter().map(|&(lo, hi, _)| (-lo, -hi, 0)).collect();
            let unpadded = lax::pad(ct, 0.0, &unpad)?;
            let strides: Vec<usize> = padding_config.iter().map(|&(_, _, i)| i as usize + 1).collect();
            let t_op = lax::slice(&unpadded, &vec![0; n], &unpadded.shape(), Some(&strides))?;
            let all = |a: &Array| reduce_sum(a, (0..a.ndim()).collect());
            let t_v = sub(&all(ct)?, &all(&t_op)?)?;
            Ok(vec![back(0, t_op)?, back(1, t_v)?])
        }
        Slice { start_indices, limit_indices, strides } => {
            let shape = &avals[0].shape;
            let cs = ct.shape();
            let cfg: Vec<(i64, i64, i64)> = (0..shape.len())
                .map(|i| {
                    let s = strides.as_ref().map(|v| v[i]).unwrap_or(1);
                    if s == 1 {
                        (start_indices[i] as i64, shape[i] as i64 - limit_indices[i] as i64, 0)
                    } else {
                        let real_limit = start_indices[i] as i64 + if cs[i] == 0 { 0 } else { 1 + (cs[i] as i64 - 1) * s as i64 };
                        (start_indices[i] as i64, shape[i] as i64 - real_limit, s as i64 - 1)
                    }
                })
                .collect();
            Ok(vec![back(0, lax::pad(ct, 0.0, &cfg)?)?])
        }
        DynamicSlice { .. } => {
            let z = zeros(&avals[0])?;
            let mut v = vec![back(0, lax::dynamic_update_slice(&z, ct, &ins[1..])?)?];
            v.extend(ins[1..].iter().map(|_| None));
            Ok(v)
        }
        DynamicUpdateSlice => {
            let idx = &ins[2..];
            let tx = lax::dynamic_update_slice(ct, &zeros(&avals[1])?, idx)?;
            let tu = lax::dynamic_slice(ct, idx, &avals[1].shape)?;
            let mut v = vec![back(0, tx)?, back(1, tu)?];
            v.extend(idx.iter().map(|_| None));
            Ok(v)
        }
        Gather { dimension_numbers, mode, .. } => {
            let s = gather_to_scatter(dimension_numbers);
            let r = b1(scatter_p(ScatterOp::Add, &s, *mode), vec![arr(&zeros(&avals[0])?), arr(&ins[1]), arr(ct)])?;
            Ok(vec![back(0, r)?, None])
        }
        Scatter { op, dimension_numbers: dn, mode, .. } => {
            let (idx, u) = (&ins[1], &ins[2]);
            let (g, sizes) = scatter_to_gather(dn, avals[0].ndim(), &avals[2].shape);
            let gat = |v: &Array| gather_fill0(v, idx, g.clone(), &sizes, *mode);
            match op {
                ScatterOp::Add => Ok(vec![back(0, ct.clone())?, None, back(2, gat(ct)?)?]),
                ScatterOp::Set => {
                    let tx = b1(p.clone(), vec![arr(ct), arr(idx), arr(&zeros(&avals[2])?)])?;
                    let mask = scatter_winners(idx, &avals[0], &avals[2], dn, *mode)?;
                    let tu = select(&mask, &gat(ct)?, &zeros(&avals[2])?)?;
                    Ok(vec![back(0, tx)?, None, back(2, tu)?])
                }
                ScatterOp::Mul => {
                    let (total, excl) = scatter_mul_parts(x, idx, u, dn, *mode)?;
                    let lin = |t: &[Array]| scatter_mul_lin(x, idx, &total, &excl, dn, *mode, &t[0], &t[1]);
                    let g = transpose_linear(&[avals[0].clone(), avals[2].clone()], lin, ct)?;
                    Ok(vec![g[0].clone(), None, g[1].clone()])
                }
                ScatterOp::Min | ScatterOp::Max => {
                    let (ret, succ, cnt) = scatter_extremal_parts(x, idx, u, &outs[0], dn, *mode)?;
                    let lin = |t: &[Array]| scatter_extremal_lin(idx, &ret, &succ, &cnt, dn, *mode, &t[0], &t[1]);
                    let g = transpose_linear(&[avals[0].clone(), avals[2].clone()], lin, ct)?;
                    Ok(vec![g[0].clone(), None, g[1].clone()])
                }
            }
        }
        TopK { .. } => Ok(vec![back(0, untake_along_axis(ct, &outs[1], x.ndim() - 1, &avals[0])?)?]),
        ConvGeneralDilated { .. } => {
            let dl = if is_diff(&avals[0]) { Some(conv_transpose_lhs(p, ct, &avals[0], &ins[1])?) } else { None };
            let dr = if is_diff(&avals[1]) { Some(conv_transpose_rhs(p, ct, &ins[0], &avals[1])?) } else { None };
            Ok(vec![dl.map(|d| back(0, d)).transpose()?.flatten(), dr.map(|d| back(1, d)).transpose()?.flatten()])
        }
        ReduceWindow { op: WindowOp::Sum, .. } => Ok(vec![back(0, reduce_window_sum_transpose(p, ct, &avals[0])?)?]),
        ReduceWindow { .. } => {
            let w = window_weights(p, x, &outs[0])?;
            let os = outs[0].shape();
            let g = transpose_linear(&avals[..1], |t: &[Array]| window_lin(p, &w, &t[0], &os), ct)?;
            Ok(vec![back(0, g.into_iter().next().flatten().map(Ok).unwrap_or_else(|| zeros(&avals[0]))?)?])
        }
        _ => Err(not_impl(p)),
    }
}

/// For a `scatter` (set): whether each update is the one that ends up in the result
/// (later duplicates win), by scattering update ids and reading them back.
fn scatter_winners(idx: &Array, x: &ShapedArray, u: &ShapedArray, dn: &ScatterDims, mode: GatherMode) -> Result<Array> {
    let batch: Vec<usize> = (0..u.ndim()).filter(|d| !dn.update_window_dims.contains(d)).collect();
    let bshape: Vec<usize> = batch.iter().map(|&d| u.shape[d]).collect();
    let count: usize = bshape.iter().product();
    let ids = add_lit(&lax::iota(DType::I32, &[count], 0)?, 1.0)?;
    let ids = lax::reshape(&ids, &bshape)?;
    let ids = bcast(&ids, &u.shape, batch)?;
    let xi = zeros(&ShapedArray::new(&x.shape, DType::I32))?;
    let placed = b1(scatter_p(ScatterOp::Set, dn, mode), vec![arr(&xi), arr(idx), arr(&ids)])?;
    let (g, sizes) = scatter_to_gather(dn, x.ndim(), &u.shape);
    let back = b1(
        Primitive::Gather { dimension_numbers: g, slice_sizes: sizes, mode, fill_value: None, indices_are_sorted: false, unique_indices: false },
        vec![arr(&placed), arr(idx)],
    )?;
    bin(Primitive::Eq, &back, &ids)
}
