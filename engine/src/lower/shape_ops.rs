//! Lowering of the issue-3 shape primitives and the new reductions: concatenate, pad,
//! rev, slice, dynamic_slice, dynamic_update_slice (tensor slices), reduce_prod/and/or
//! (`linalg.reduce`) and argmax/argmin (a two-output reduction `linalg.generic`).
//!
//! Dynamic start indices are clamped so the slice stays in range, as XLA does.

use super::array_ops::{combine, identity};
use super::emit::{affine_map, identity_map, int_list, iterator_types};
use super::scalar::{self, compute_dtype, to_compute};
use super::{malformed, Lowerer, Val};
use crate::error::Error;
use crate::ir::{DType, Primitive, ShapedArray};

fn ints(xs: &[usize]) -> String {
    xs.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(", ")
}

impl Lowerer {
    /// Elementwise cast of a tensor value to `to` (identity when equal).
    pub(super) fn cast_to(&mut self, x: &Val, to: DType) -> Result<Val, Error> {
        let from = x.aval().dtype;
        if from == to {
            return Ok(x.clone());
        }
        let out = ShapedArray::new(&x.aval().shape, to);
        if out.size() == 0 {
            return Ok(Val::T(self.empty(&out), out));
        }
        self.ew(&out, std::slice::from_ref(x), &mut |e, a| Ok(scalar::convert(e, &a[0], from, to)))
    }

    /// `concatenate` along `dim`: `tensor.insert_slice` of each non-empty operand.
    pub(super) fn concatenate(&mut self, ins: &[Val], out: &ShapedArray, dim: usize) -> Result<Val, Error> {
        let mut acc = self.empty(out);
        let mut off = 0;
        let ot = out.mlir_tensor();
        for v in ins {
            let a = v.aval().clone();
            if a.ndim() != out.ndim() {
                return Err(malformed(format!("concatenate of {} into {}", a.short(), out.short())));
            }
            if a.size() > 0 {
                let t = self.tensor(v);
                let mut offs = vec![0; out.ndim()];
                offs[dim] = off;
                acc = self.e.op(&format!(
                    "tensor.insert_slice {t} into {acc}[{}] [{}] [{}] : {} into {ot}",
                    ints(&offs),
                    ints(&a.shape),
                    ints(&vec![1; a.ndim()]),
                    a.mlir_tensor()
                ));
            }
            off += a.shape[dim];
        }
        if off != out.shape[dim] {
            return Err(malformed(format!("concatenate sizes {off} != {}", out.shape[dim])));
        }
        Ok(Val::T(acc, out.clone()))
    }

    /// `pad`: fill with the padding value, insert the operand with interior strides at the
    /// non-negative low padding, then trim negative padding with a slice.
    pub(super) fn pad(&mut self, x: &Val, v: &Val, out: &ShapedArray, cfg: &[(i64, i64, i64)]) -> Result<Val, Error> {
        let a = x.aval().clone();
        let pv = self.scalar_of(v);
        let grown: Vec<usize> = a
            .shape
            .iter()
            .zip(cfg)
            .map(|(&n, &(lo, hi, int))| {
                let core = if n == 0 { 0 } else { n as i64 + (n as i64 - 1) * int };
                (core + lo.max(0) + hi.max(0)) as usize
            })
            .collect();
        let g = ShapedArray::new(&grown, out.dtype);
        let mut t = self.splat(&pv, &g);
        if a.size() > 0 {
            let xt = self.tensor(x);
            let offs: Vec<usize> = cfg.iter().map(|c| c.0.max(0) as usize).collect();
            let strides: Vec<usize> = cfg.iter().map(|c| c.2 as usize + 1).collect();
            t = self.e.op(&format!(
                "tensor.insert_slice {xt} into {t}[{}] [{}] [{}] : {} into {}",
                ints(&offs),
                ints(&a.shape),
                ints(&strides),
                a.mlir_tensor(),
                g.mlir_tensor()
            ));
        }
        if g.shape == out.shape {
            return Ok(Val::T(t, out.clone()));
        }
        let start: Vec<usize> = cfg.iter().map(|c| (-c.0).max(0) as usize).collect();
        self.static_slice(&Val::T(t, g.clone()), out, &start, &vec![1; out.ndim()])
    }

    /// `rev`: a generic reading the operand through `n - 1 - d` on reversed dims.
    pub(super) fn rev(&mut self, x: &Val, out: &ShapedArray, dims: &[usize]) -> Result<Val, Error> {
        if dims.is_empty() || out.ndim() == 0 {
            return Ok(x.clone());
        }
        let xt = self.tensor(x);
        let r = out.ndim();
        let ex: Vec<String> = (0..r)
            .map(|i| if dims.contains(&i) { format!("-d{i} + {}", out.shape[i] - 1) } else { format!("d{i}") })
            .collect();
        let e0 = self.empty(out);
        let (ot, el) = (out.mlir_tensor(), out.dtype.mlir());
        let res = self.e.fresh("");
        self.e.line(&format!(
            "{res} = linalg.generic {{indexing_maps = [{}, {}], iterator_types = {}}} ins({xt} : {ot}) outs({e0} : {ot}) {{",
            affine_map(r, &ex),
            identity_map(r),
            iterator_types(&vec!["parallel"; r])
        ));
        self.e.line(&format!("^bb0(%in0: {el}, %out: {el}):"));
        self.e.line(&format!("  linalg.yield %in0 : {el}"));
        self.e.line(&format!("}} -> {ot}"));
        Ok(Val::T(res, out.clone()))
    }

    /// A static strided slice starting at `start` (`tensor.extract_slice`).
    pub(super) fn static_slice(&mut self, x: &Val, out: &ShapedArray, start: &[usize], strides: &[usize]) -> Result<Val, Error> {
        let a = x.aval().clone();
        if a.shape == out.shape {
            return Ok(x.clone());
        }
        let xt = self.tensor(x);
        let r = self.e.op(&format!(
            "tensor.extract_slice {xt}[{}] [{}] [{}] : {} to {}",
            ints(start),
            ints(&out.shape),
            ints(strides),
            a.mlir_tensor(),
            out.mlir_tensor()
        ));
        Ok(Val::T(r, out.clone()))
    }

    /// Start offsets of a dynamic slice of `sizes` in `shape`, clamped into range.
    fn dyn_offsets(&mut self, idx: &[Val], shape: &[usize], sizes: &[usize]) -> Vec<String> {
        let mut offs = vec![];
        for (k, v) in idx.iter().enumerate() {
            let d = v.aval().dtype;
            let s = self.scalar_of(v);
            let i = Self::to_index(&mut self.e, &s, d);
            offs.push(Self::clamp_idx(&mut self.e, &i, 0, shape[k] as i64 - sizes[k] as i64));
        }
        offs
    }

    /// `dynamic_slice` at run-time starts (clamped).
    pub(super) fn dynamic_slice(&mut self, x: &Val, idx: &[Val], out: &ShapedArray) -> Result<Val, Error> {
        let a = x.aval().clone();
        if idx.len() != a.ndim() {
            return Err(malformed(format!("dynamic_slice of {} with {} indices", a.short(), idx.len())));
        }
        if a.ndim() == 0 {
            return Ok(x.clone());
        }
        let offs = self.dyn_offsets(idx, &a.shape, &out.shape);
        let xt = self.tensor(x);
        let r = self.e.op(&format!(
            "tensor.extract_slice {xt}[{}] [{}] [{}] : {} to {}",
            offs.join(", "),
            ints(&out.shape),
            ints(&vec![1; a.ndim()]),
            a.mlir_tensor(),
            out.mlir_tensor()
        ));
        Ok(Val::T(r, out.clone()))
    }

    /// `dynamic_update_slice`: `tensor.insert_slice` at run-time starts (clamped).
    pub(super) fn dynamic_update_slice(&mut self, x: &Val, u: &Val, idx: &[Val], out: &ShapedArray) -> Result<Val, Error> {
        let (a, ua) = (x.aval().clone(), u.aval().clone());
        if idx.len() != a.ndim() {
            return Err(malformed(format!("dynamic_update_slice of {} with {} indices", a.short(), idx.len())));
        }
        if ua.size() == 0 {
            return Ok(x.clone());
        }
        if a.ndim() == 0 {
            return Ok(u.clone());
        }
        let offs = self.dyn_offsets(idx, &a.shape, &ua.shape);
        let (xt, ut) = (self.tensor(x), self.tensor(u));
        let r = self.e.op(&format!(
            "tensor.insert_slice {ut} into {xt}[{}] [{}] [{}] : {} into {}",
            offs.join(", "),
            ints(&ua.shape),
            ints(&vec![1; a.ndim()]),
            ua.mlir_tensor(),
            out.mlir_tensor()
        ));
        Ok(Val::T(r, out.clone()))
    }

    /// `reduce_prod` / `reduce_and` / `reduce_or` with `linalg.reduce` (halves in f32).
    pub(super) fn reduce_generic(&mut self, p: &Primitive, x: &Val, out: &ShapedArray, axes: &[usize]) -> Result<Val, Error> {
        if axes.is_empty() {
            return Ok(x.clone());
        }
        let d = x.aval().dtype;
        let c = compute_dtype(d);
        let xc = self.cast_to(x, c)?;
        let xt = self.tensor(&xc);
        let acc = ShapedArray::new(&out.shape, c);
        let (init, op) = match p {
            Primitive::ReduceProd { .. } => (identity("mul", c), "mul"),
            Primitive::ReduceAnd { .. } => (if c.is_bool() { "true".into() } else { super::emit::int_lit(-1, c) }, "and"),
            _ => (if c.is_bool() { "false".into() } else { super::emit::int_lit(0, c) }, "or"),
        };
        let iv = self.e.scalar_const(&init, c);
        let fill = self.splat(&iv, &acc);
        let mut sorted = axes.to_vec();
        sorted.sort_unstable();
        let res = self.e.fresh("");
        let ct = ShapedArray::new(&x.aval().shape, c).mlir_tensor();
        self.e.line(&format!("{res} = linalg.reduce ins({xt} : {ct}) outs({fill} : {}) dimensions = {}", acc.mlir_tensor(), int_list(&sorted)));
        self.e.line(&format!("  (%in: {}, %acc: {}) {{", c.mlir(), c.mlir()));
        self.e.push();
        self.e.push();
        let s = match op {
            "mul" => combine(&mut self.e, "mul", "%in", "%acc", c)?,
            "and" => self.e.op(&format!("arith.andi %in, %acc : {}", c.mlir())),
            _ => self.e.op(&format!("arith.ori %in, %acc : {}", c.mlir())),
        };
        self.e.line(&format!("linalg.yield {s} : {}", c.mlir()));
        self.e.pop();
        self.e.pop();
        self.e.line("  }");
        self.cast_to(&Val::T(res, acc), d)
    }

    /// `argmax`/`argmin` along `axis`: first index of the extreme value; NaN wins (first NaN).
    pub(super) fn argminmax(&mut self, is_max: bool, x: &Val, out: &ShapedArray, axis: usize) -> Result<Val, Error> {
        let a = x.aval().clone();
        let d = a.dtype;
        let c = compute_dtype(d);
        let id = out.dtype;
        let xt = self.tensor(x);
        let vacc = ShapedArray::new(&out.shape, d);
        let init = identity(if is_max { "max" } else { "min" }, c);
        let iv0 = self.e.scalar_const(&init, c);
        let iv = scalar::from_compute(&mut self.e, &iv0, d);
        let vfill = self.splat(&iv, &vacc);
        let z = self.e.scalar_const("0", id);
        let ifill = self.splat(&z, out);
        let r = a.ndim();
        let keep: Vec<String> = (0..r).filter(|&i| i != axis).map(|i| format!("d{i}")).collect();
        let its: Vec<&str> = (0..r).map(|i| if i == axis { "reduction" } else { "parallel" }).collect();
        let res = self.e.fresh("");
        let (vt, it) = (vacc.mlir_tensor(), out.mlir_tensor());
        self.e.line(&format!(
            "{res}:2 = linalg.generic {{indexing_maps = [{}, {}, {}], iterator_types = {}}} ins({xt} : {}) outs({vfill}, {ifill} : {vt}, {it}) {{",
            identity_map(r),
            affine_map(r, &keep),
            affine_map(r, &keep),
            iterator_types(&its),
            a.mlir_tensor()
        ));
        self.e.line(&format!("^bb0(%in: {}, %v: {}, %i: {}):", d.mlir(), d.mlir(), id.mlir()));
        self.e.push();
        let e = &mut self.e;
        let k = e.op(&format!("linalg.index {axis} : index"));
        let ki = e.op(&format!("arith.index_cast {k} : index to {}", id.mlir()));
        let take = if d.is_float() {
            let (xc, vc) = (to_compute(e, "%in", d), to_compute(e, "%v", d));
            let t = c.mlir();
            let xn = e.op(&format!("arith.cmpf uno, {xc}, {xc} : {t}"));
            let vn = e.op(&format!("arith.cmpf uno, {vc}, {vc} : {t}"));
            let better = e.op(&format!("arith.cmpf {}, {xc}, {vc} : {t}", if is_max { "ogt" } else { "olt" }));
            let either = e.op(&format!("arith.ori {xn}, {better} : i1"));
            let tr = e.scalar_const("true", DType::Bool);
            let vok = e.op(&format!("arith.xori {vn}, {tr} : i1"));
            e.op(&format!("arith.andi {either}, {vok} : i1"))
        } else {
            let u = d.is_unsigned() || d.is_bool();
            let pred = match (is_max, u) {
                (true, true) => "ugt",
                (true, false) => "sgt",
                (false, true) => "ult",
                (false, false) => "slt",
            };
            e.op(&format!("arith.cmpi {pred}, %in, %v : {}", d.mlir()))
        };
        let nv = e.op(&format!("arith.select {take}, %in, %v : {}", d.mlir()));
        let ni = e.op(&format!("arith.select {take}, {ki}, %i : {}", id.mlir()));
        e.line(&format!("linalg.yield {nv}, {ni} : {}, {}", d.mlir(), id.mlir()));
        self.e.pop();
        self.e.line(&format!("}} -> ({vt}, {it})"));
        Ok(Val::T(format!("{res}#1"), out.clone()))
    }
}
