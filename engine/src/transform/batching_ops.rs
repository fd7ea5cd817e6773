//! Batching rules of the array-language primitives (issue 3), called from
//! `batching::batch_eqn`. The batch dimension is always first. Shape ops shift their
//! dimension params by one; `gather`/`scatter` with batched indices and operand pair
//! the two batch dims as `operand_batching_dims`/`start_indices_batching_dims`, as
//! current JAX does; `dynamic_slice`/`dynamic_update_slice` with batched starts become
//! such a gather/scatter; convolutions fold the batch into the lhs batch dim, the
//! rhs output features, or (both batched) feature groups, as JAX's
//! `_conv_general_dilated_batch_rule`.

use super::ad_rules_ops::{arr, move_axis, reshape_axis_into, reshape_axis_out_of};
use super::batching::{to_full, BVal};
use crate::error::{Error, Result};
use crate::ir::{DType, GatherDims, GatherMode, Primitive, ScatterDims, ShapedArray};
use crate::lax;
use crate::trace::{bind, Array, Operand};
use std::panic::Location;

fn shift(v: &[usize]) -> Vec<usize> {
    v.iter().map(|d| d + 1).collect()
}
fn b1(p: Primitive, ops: Vec<Operand>) -> Result<Array> {
    lax::bind1(p, ops)
}
fn logical_shape(v: &BVal) -> Vec<usize> {
    let s = v.x.shape();
    if v.batched { s[1..].to_vec() } else { s }
}
/// The value with a leading batch dim of size `b` (broadcast when unbatched).
fn full_b(v: &BVal, b: usize) -> Result<Array> {
    to_full(v, b, &logical_shape(v))
}
fn batched(x: Array) -> BVal {
    BVal { x, batched: true }
}

/// Start indices (0-d each) as one `[b, n]` int32 index array (at least one start).
fn stacked_starts(starts: &[BVal], b: usize) -> Result<Array> {
    let parts = starts
        .iter()
        .map(|v| {
            let x = lax::convert_element_type(&v.x, DType::I32)?;
            let x = to_full(&BVal { x, batched: v.batched }, b, &[])?;
            lax::reshape(&x, &[b, 1])
        })
        .collect::<Result<Vec<_>>>()?;
    if parts.is_empty() {
        return Err(Error::runtime("internal: batched start indices without starts"));
    }
    lax::concatenate(&parts, 1)
}

/// The batched result of an issue-3 primitive with at least one batched operand;
/// `out` is the unbatched type of its first output.
pub(super) fn batch(p: &Primitive, ins: &[BVal], out: &ShapedArray, b: usize) -> Result<Vec<BVal>> {
    use Primitive::*;
    let _ = out;
    let one = |x: Array| Ok(vec![batched(x)]);
    let x = &ins[0];
    match p {
        Sign | Floor | Ceil | Round { .. } | IsFinite | Log1p | Expm1 | Logistic | Erf | IntegerPow { .. } | ReducePrecision { .. } => {
            one(b1(p.clone(), vec![arr(&x.x)])?)
        }
        ReduceProd { axes } => one(b1(ReduceProd { axes: shift(axes) }, vec![arr(&x.x)])?),
        ReduceAnd { axes } => one(b1(ReduceAnd { axes: shift(axes) }, vec![arr(&x.x)])?),
        ReduceOr { axes } => one(b1(ReduceOr { axes: shift(axes) }, vec![arr(&x.x)])?),
        ArgMax { axes, index_dtype } => one(b1(ArgMax { axes: shift(axes), index_dtype: *index_dtype }, vec![arr(&x.x)])?),
        ArgMin { axes, index_dtype } => one(b1(ArgMin { axes: shift(axes), index_dtype: *index_dtype }, vec![arr(&x.x)])?),
        Cumulative { op, axis, reverse } => one(b1(Cumulative { op: *op, axis: axis + 1, reverse: *reverse }, vec![arr(&x.x)])?),
        Rev { dimensions } => one(lax::rev(&x.x, &shift(dimensions))?),
        Squeeze { dimensions } => one(lax::squeeze(&x.x, &shift(dimensions))?),
        Split { sizes, axis } => {
            let outs = bind(Split { sizes: sizes.clone(), axis: axis + 1 }, vec![arr(&x.x)], Location::caller())?;
            Ok(outs.into_iter().map(batched).collect())
        }
        Slice { start_indices, limit_indices, strides } => {
            let mut s = vec![0];
            s.extend(start_indices);
            let mut l = vec![b];
            l.extend(limit_indices);
            let st = strides.as_ref().map(|v| {
                let mut w = vec![1];
                w.extend(v);
                w
            });
            one(b1(Slice { start_indices: s, limit_indices: l, strides: st }, vec![arr(&x.x)])?)
        }
        Concatenate { dimension } => {
            let xs = ins.iter().map(|v| full_b(v, b)).collect::<Result<Vec<_>>>()?;
            one(lax::concatenate(&xs, dimension + 1)?)
        }
        Sort { dimension, is_stable, num_keys } => {
            let xs = ins.iter().map(|v| full_b(v, b).map(|a| arr(&a))).collect::<Result<Vec<_>>>()?;
            let outs = bind(Sort { dimension: dimension + 1, is_stable: *is_stable, num_keys: *num_keys }, xs, Location::caller())?;
            Ok(outs.into_iter().map(batched).collect())
        }
        TopK { .. } => {
            let outs = bind(p.clone(), vec![arr(&x.x)], Location::caller())?;
            Ok(outs.into_iter().map(batched).collect())
        }
        ReduceWindow { op, window_dimensions, window_strides, padding, base_dilation, window_dilation } => {
            let pre = |v: &[usize]| {
                let mut w = vec![1];
                w.extend(v);
                w
            };
            let mut pd = vec![(0, 0)];
            pd.extend(padding);
            one(b1(
                ReduceWindow {
                    op: *op,
                    window_dimensions: pre(window_dimensions),
                    window_strides: pre(window_strides),
                    padding: pd,
                    base_dilation: pre(base_dilation),
                    window_dilation: pre(window_dilation),
                },
                vec![arr(&x.x)],
            )?)
        }
        Pad { padding_config } => {
            let xf = full_b(x, b)?;
            let mut cfg = vec![(0, 0, 0)];
            cfg.extend(padding_config);
            if !ins[1].batched {
                return one(b1(Pad { padding_config: cfg }, vec![arr(&xf), arr(&ins[1].x)])?);
            }
            // A batched padding value: pad with zeros and select the value where padded.
            let zero = lax::pad(&xf, 0.0, &cfg)?;
            let ones = lax::convert_element_type(&super::ad_rules_ops::full(&ShapedArray::new(&xf.shape(), DType::Bool), 1.0)?, DType::Bool)?;
            let mask = lax::pad(&ones, 0.0, &cfg)?;
            let v = to_full(&ins[1], b, &zero.shape()[1..])?;
            one(lax::select_n(&mask, &[v, zero])?)
        }
        DynamicSlice { slice_sizes } => {
            let starts = &ins[1..];
            if starts.iter().all(|v| !v.batched) {
                let zero = lax::convert_element_type(&super::ad_rules_ops::zeros(&ShapedArray::new(&[], DType::I32))?, starts.first().map(|s| s.x.dtype()).unwrap_or(DType::I32))?;
                let mut ops = vec![arr(&x.x), arr(&zero)];
                ops.extend(starts.iter().map(|v| arr(&v.x)));
                let mut sizes = vec![b];
                sizes.extend(slice_sizes);
                return one(b1(DynamicSlice { slice_sizes: sizes }, ops)?);
            }
            // Batched starts: a gather of one window per batch element (clamped, as
            // dynamic_slice clamps).
            let xf = full_b(x, b)?;
            let n = slice_sizes.len();
            let idx = stacked_starts(starts, b)?;
            let dn = GatherDims {
                offset_dims: (1..=n).collect(),
                start_index_map: (1..=n).collect(),
                operand_batching_dims: vec![0],
                start_indices_batching_dims: vec![0],
                ..Default::default()
            };
            let mut sizes = vec![1];
            sizes.extend(slice_sizes);
            one(lax::gather(&xf, &idx, dn, &sizes, GatherMode::Clip)?)
        }
        DynamicUpdateSlice => {
            let starts = &ins[2..];
            let (xf, uf) = (full_b(x, b)?, full_b(&ins[1], b)?);
            if starts.iter().all(|v| !v.batched) {
                let zero = lax::convert_element_type(&super::ad_rules_ops::zeros(&ShapedArray::new(&[], DType::I32))?, starts.first().map(|s| s.x.dtype()).unwrap_or(DType::I32))?;
                let mut ops = vec![arr(&xf), arr(&uf), arr(&zero)];
                ops.extend(starts.iter().map(|v| arr(&v.x)));
                return one(b1(DynamicUpdateSlice, ops)?);
            }
            let n = starts.len();
            let idx = stacked_starts(starts, b)?;
            let dn = ScatterDims {
                update_window_dims: (1..=n).collect(),
                scatter_dims_to_operand_dims: (1..=n).collect(),
                operand_batching_dims: vec![0],
                scatter_indices_batching_dims: vec![0],
                ..Default::default()
            };
            one(lax::scatter(crate::ir::ScatterOp::Set, &xf, &idx, &uf, dn, GatherMode::Clip)?)
        }
        Gather { dimension_numbers: d, slice_sizes, mode, fill_value, indices_are_sorted, unique_indices } => {
            let idx = &ins[1];
            let (dn, sizes, ops) = match (x.batched, idx.batched) {
                (true, false) => {
                    let mut od = vec![0];
                    od.extend(shift(&d.offset_dims));
                    let dn = GatherDims {
                        offset_dims: od,
                        collapsed_slice_dims: shift(&d.collapsed_slice_dims),
                        start_index_map: shift(&d.start_index_map),
                        operand_batching_dims: shift(&d.operand_batching_dims),
                        start_indices_batching_dims: d.start_indices_batching_dims.clone(),
                    };
                    let mut sizes = vec![b];
                    sizes.extend(slice_sizes);
                    (dn, sizes, vec![arr(&x.x), arr(&idx.x)])
                }
                (false, true) => {
                    let dn = GatherDims {
                        offset_dims: shift(&d.offset_dims),
                        start_indices_batching_dims: shift(&d.start_indices_batching_dims),
                        ..d.clone()
                    };
                    (dn, slice_sizes.clone(), vec![arr(&x.x), arr(&idx.x)])
                }
                _ => {
                    // Both batched: the batch dims are paired (StableHLO batching dims).
                    let xi = full_b(idx, b)?;
                    let mut obd = vec![0];
                    obd.extend(shift(&d.operand_batching_dims));
                    let mut sibd = vec![0];
                    sibd.extend(shift(&d.start_indices_batching_dims));
                    let dn = GatherDims {
                        offset_dims: shift(&d.offset_dims),
                        collapsed_slice_dims: shift(&d.collapsed_slice_dims),
                        start_index_map: shift(&d.start_index_map),
                        operand_batching_dims: obd,
                        start_indices_batching_dims: sibd,
                    };
                    let mut sizes = vec![1];
                    sizes.extend(slice_sizes);
                    (dn, sizes, vec![arr(&x.x), arr(&xi)])
                }
            };
            let q = Gather {
                dimension_numbers: dn,
                slice_sizes: sizes,
                mode: *mode,
                fill_value: *fill_value,
                indices_are_sorted: *indices_are_sorted,
                unique_indices: *unique_indices,
            };
            one(b1(q, ops)?)
        }
        Scatter { op, dimension_numbers: d, mode, indices_are_sorted, unique_indices } => {
            let (idx, u) = (&ins[1], &ins[2]);
            let (xf, uf) = (full_b(x, b)?, full_b(u, b)?);
            let (dn, iv) = if !idx.batched {
                let mut uw = vec![0];
                uw.extend(shift(&d.update_window_dims));
                let dn = ScatterDims {
                    update_window_dims: uw,
                    inserted_window_dims: shift(&d.inserted_window_dims),
                    scatter_dims_to_operand_dims: shift(&d.scatter_dims_to_operand_dims),
                    operand_batching_dims: shift(&d.operand_batching_dims),
                    scatter_indices_batching_dims: d.scatter_indices_batching_dims.clone(),
                };
                (dn, idx.x.clone())
            } else {
                let mut obd = vec![0];
                obd.extend(shift(&d.operand_batching_dims));
                let mut sibd = vec![0];
                sibd.extend(shift(&d.scatter_indices_batching_dims));
                let dn = ScatterDims {
                    update_window_dims: shift(&d.update_window_dims),
                    inserted_window_dims: shift(&d.inserted_window_dims),
                    scatter_dims_to_operand_dims: shift(&d.scatter_dims_to_operand_dims),
                    operand_batching_dims: obd,
                    scatter_indices_batching_dims: sibd,
                };
                (dn, idx.x.clone())
            };
            let q = Scatter { op: *op, dimension_numbers: dn, mode: *mode, indices_are_sorted: *indices_are_sorted, unique_indices: *unique_indices };
            one(b1(q, vec![arr(&xf), arr(&iv), arr(&uf)])?)
        }
        ConvGeneralDilated { dimension_numbers: dn, feature_group_count: g, .. } => {
            let (l, r) = (&ins[0], &ins[1]);
            let with = |groups: usize| {
                let mut q = p.clone();
                if let ConvGeneralDilated { feature_group_count, .. } = &mut q {
                    *feature_group_count = groups;
                }
                q
            };
            if !r.batched {
                // Fold the batch into the lhs batch dim.
                let nl = reshape_axis_into(0, dn.lhs_spec[0], &l.x)?;
                let o = b1(p.clone(), vec![arr(&nl), arr(&r.x)])?;
                let o = reshape_axis_out_of(dn.out_spec[0], b, &o)?;
                return one(move_axis(&o, dn.out_spec[0], 0)?);
            }
            if !l.batched && *g == 1 {
                // Fold the batch into the rhs output features.
                let nr = reshape_axis_into(0, dn.rhs_spec[0], &r.x)?;
                let o = b1(p.clone(), vec![arr(&l.x), arr(&nr)])?;
                let o = reshape_axis_out_of(dn.out_spec[1], b, &o)?;
                return one(move_axis(&o, dn.out_spec[1], 0)?);
            }
            // Both batched: the batch becomes feature groups.
            let lf = full_b(l, b)?;
            let nl = reshape_axis_into(0, dn.lhs_spec[1], &lf)?;
            let nr = reshape_axis_into(0, dn.rhs_spec[0], &r.x)?;
            let o = b1(with(g * b), vec![arr(&nl), arr(&nr)])?;
            let o = reshape_axis_out_of(dn.out_spec[1], b, &o)?;
            one(move_axis(&o, dn.out_spec[1], 0)?)
        }
        // A type change only: the batched operand as it is, marked varying.
        Collective(crate::ir::Collective::Pvary { .. }) => one(b1(p.clone(), vec![Operand::Array(x.x.clone())])?),
        _ => Err(Error::type_error(format!("Batching rule for '{}' not implemented", p.name()))),
    }
}
