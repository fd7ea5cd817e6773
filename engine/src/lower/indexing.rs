//! Lowering of XLA's `gather` and `scatter` (index vector last; an operand batching dim
//! is read at the batch coordinate of its paired indices dim, never clamped).
//!
//! `gather` is an elementwise `linalg.generic` over the output whose body reads the
//! index vector and then the operand with `tensor.extract`. `scatter` is an `scf.for`
//! over every update element (sequential, so later duplicates win for `scatter` and
//! combine in order for `scatter-add`/...). Window starts are clamped into range (`CLIP`,
//! `PROMISE_IN_BOUNDS`); with `FILL_OR_DROP` a gather yields the fill value and a scatter
//! skips the element when the window would leave the operand.

use super::array_ops::combine;
use super::emit::{float_lit, int_lit, Emitter};
use super::{malformed, Lowerer, Val};
use crate::error::Error;
use crate::ir::{DType, GatherDims, GatherMode, ScatterDims, ScatterOp, ShapedArray};

/// JAX's default gather fill value for `dtype`: NaN, the minimum signed / maximum
/// unsigned integer, or `true`.
fn default_fill(d: DType) -> String {
    let bits = 8 * d.size_bytes() as u32;
    match d {
        DType::Bool => "true".into(),
        d if d.is_float() => float_lit(f64::NAN, d),
        d if d.is_unsigned() => int_lit(-1, d),
        d => int_lit(i64::MIN >> (64 - bits), d),
    }
}

/// Reads entry `k` of the index vector at batch coordinates `batch` as an `index`.
fn index_entry(e: &mut Emitter, idx: &str, ia: &ShapedArray, batch: &[String], k: usize) -> String {
    let kc = Lowerer::cidx(e, k as i64);
    let mut coords = batch.to_vec();
    coords.push(kc);
    let v = e.op(&format!("tensor.extract {idx}[{}] : {}", coords.join(", "), ia.mlir_tensor()));
    Lowerer::to_index(e, &v, ia.dtype)
}

/// Folds `0 <= v <= hi` into the running in-bounds flag `ok`.
fn in_bounds(e: &mut Emitter, ok: Option<String>, v: &str, hi: i64) -> String {
    let z = Lowerer::cidx(e, 0);
    let h = Lowerer::cidx(e, hi);
    let a = e.op(&format!("arith.cmpi sge, {v}, {z} : index"));
    let b = e.op(&format!("arith.cmpi sle, {v}, {h} : index"));
    let c = e.op(&format!("arith.andi {a}, {b} : i1"));
    match ok {
        None => c,
        Some(o) => e.op(&format!("arith.andi {o}, {c} : i1")),
    }
}

impl Lowerer {
    /// `gather` of `x` at `indices` producing `out`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn gather(
        &mut self,
        x: &Val,
        indices: &Val,
        out: &ShapedArray,
        dn: &GatherDims,
        slice_sizes: &[usize],
        mode: GatherMode,
        fill: Option<f64>,
    ) -> Result<Val, Error> {
        let (a, ia) = (x.aval().clone(), indices.aval().clone());
        if slice_sizes.len() != a.ndim() || ia.ndim() == 0 {
            return Err(malformed(format!("gather of {} at {}", a.short(), ia.short())));
        }
        let (xt, it) = (self.tensor(x), self.tensor(indices));
        let fill_lit = match fill {
            Some(f) if a.dtype.is_float() => float_lit(f, a.dtype),
            Some(f) => int_lit(f as i64, a.dtype),
            None => default_fill(a.dtype),
        };
        let fv = self.e.scalar_const(&fill_lit, a.dtype);
        let r = out.ndim();
        self.ew(out, &[], &mut |e, _| {
            let o: Vec<String> = (0..r).map(|i| e.op(&format!("linalg.index {i} : index"))).collect();
            let batch: Vec<String> = (0..r).filter(|i| !dn.offset_dims.contains(i)).map(|i| o[i].clone()).collect();
            let mut start: Vec<Option<String>> = vec![None; a.ndim()];
            let mut ok = None;
            for (k, &od) in dn.start_index_map.iter().enumerate() {
                let v = index_entry(e, &it, &ia, &batch, k);
                let hi = a.shape[od] as i64 - slice_sizes[od] as i64;
                if mode == GatherMode::FillOrDrop {
                    ok = Some(in_bounds(e, ok, &v, hi));
                }
                start[od] = Some(Lowerer::clamp_idx(e, &v, 0, hi));
            }
            let mut off = dn.offset_dims.iter();
            let mut coords = vec![];
            for (i, s) in start.iter().enumerate() {
                if let Some(k) = dn.operand_batching_dims.iter().position(|&b| b == i) {
                    coords.push(batch[dn.start_indices_batching_dims[k]].clone());
                    continue;
                }
                let w = if dn.collapsed_slice_dims.contains(&i) { None } else { off.next().map(|&od| o[od].clone()) };
                coords.push(match (s, w) {
                    (Some(s), Some(w)) => e.op(&format!("arith.addi {s}, {w} : index")),
                    (Some(s), None) => s.clone(),
                    (None, Some(w)) => w,
                    (None, None) => Lowerer::cidx(e, 0),
                });
            }
            let v = e.op(&format!("tensor.extract {xt}[{}] : {}", coords.join(", "), a.mlir_tensor()));
            Ok(match ok {
                Some(ok) => e.op(&format!("arith.select {ok}, {v}, {fv} : {}", a.dtype.mlir())),
                None => v,
            })
        })
    }

    /// `scatter` (`op` combining) of `updates` into `x` at `indices`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn scatter(
        &mut self,
        op: ScatterOp,
        x: &Val,
        indices: &Val,
        updates: &Val,
        out: &ShapedArray,
        dn: &ScatterDims,
        mode: GatherMode,
    ) -> Result<Val, Error> {
        let (a, ia, ua) = (x.aval().clone(), indices.aval().clone(), updates.aval().clone());
        if ua.size() == 0 {
            return Ok(x.clone());
        }
        let (xt, it, ut) = (self.tensor(x), self.tensor(indices), self.tensor(updates));
        let d = a.dtype;
        let (c0, c1, cu) = (Self::cidx(&mut self.e, 0), Self::cidx(&mut self.e, 1), Self::cidx(&mut self.e, ua.size() as i64));
        let ot = out.mlir_tensor();
        let (res, u, t) = (self.e.fresh(""), self.e.fresh("u"), self.e.fresh("t"));
        self.e.line(&format!("{res} = scf.for {u} = {c0} to {cu} step {c1} iter_args({t} = {xt}) -> ({ot}) {{"));
        self.e.push();
        let e = &mut self.e;
        // Update coordinates, row-major from the flat counter.
        let mut coords = vec![String::new(); ua.ndim()];
        let mut rem = u.clone();
        for i in (0..ua.ndim()).rev() {
            let n = Lowerer::cidx(e, ua.shape[i] as i64);
            coords[i] = e.op(&format!("arith.remui {rem}, {n} : index"));
            rem = e.op(&format!("arith.divui {rem}, {n} : index"));
        }
        let batch: Vec<String> = (0..ua.ndim()).filter(|i| !dn.update_window_dims.contains(i)).map(|i| coords[i].clone()).collect();
        // Window size of each operand dim: 1 for inserted dims, the update's size otherwise.
        let mut wdims = dn.update_window_dims.iter();
        let wsize: Vec<(usize, Option<usize>)> = (0..a.ndim())
            .map(|i| if dn.inserted_window_dims.contains(&i) || dn.operand_batching_dims.contains(&i) { (1, None) } else { let w = *wdims.next().unwrap_or(&0); (ua.shape.get(w).copied().unwrap_or(1), Some(w)) })
            .collect();
        let mut start: Vec<Option<String>> = vec![None; a.ndim()];
        let mut ok = None;
        for (k, &od) in dn.scatter_dims_to_operand_dims.iter().enumerate() {
            let v = index_entry(e, &it, &ia, &batch, k);
            let hi = a.shape[od] as i64 - wsize[od].0 as i64;
            if mode != GatherMode::Clip {
                ok = Some(in_bounds(e, ok, &v, hi));
            }
            start[od] = Some(Lowerer::clamp_idx(e, &v, 0, hi));
        }
        let mut oc = vec![];
        for i in 0..a.ndim() {
            if let Some(k) = dn.operand_batching_dims.iter().position(|&b| b == i) {
                oc.push(batch[dn.scatter_indices_batching_dims[k]].clone());
                continue;
            }
            let w = wsize[i].1.map(|wd| coords[wd].clone());
            oc.push(match (&start[i], w) {
                (Some(s), Some(w)) => e.op(&format!("arith.addi {s}, {w} : index")),
                (Some(s), None) => s.clone(),
                (None, Some(w)) => w,
                (None, None) => Lowerer::cidx(e, 0),
            });
        }
        let ocs = oc.join(", ");
        let old = e.op(&format!("tensor.extract {t}[{ocs}] : {ot}"));
        let upd = e.op(&format!("tensor.extract {ut}[{}] : {}", coords.join(", "), ua.mlir_tensor()));
        let new = match op {
            ScatterOp::Set => upd,
            ScatterOp::Add => combine(e, "add", &old, &upd, d)?,
            ScatterOp::Mul => combine(e, "mul", &old, &upd, d)?,
            ScatterOp::Min => combine(e, "min", &old, &upd, d)?,
            ScatterOp::Max => combine(e, "max", &old, &upd, d)?,
        };
        let new = match ok {
            Some(ok) => e.op(&format!("arith.select {ok}, {new}, {old} : {}", d.mlir())),
            None => new,
        };
        let t2 = e.op(&format!("tensor.insert {new} into {t}[{ocs}] : {ot}"));
        e.line(&format!("scf.yield {t2} : {ot}"));
        self.e.pop();
        self.e.line("}");
        Ok(Val::T(res, out.clone()))
    }
}
