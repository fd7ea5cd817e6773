//! Lowering of `conv_general_dilated` and `reduce_window` as `linalg.generic` loop nests:
//! output dims are parallel, the window (and for convolutions the input features) are
//! reductions. The input is read with `tensor.extract` at a computed position
//! `out * stride + window * window_dilation - pad_low`, which is a real element only when
//! it is >= 0, divisible by the input (lhs/base) dilation and inside the input; elsewhere
//! the padding value (0, or the reduction's identity) is used.

use super::array_ops::{combine, identity};
use super::emit::{affine_map, iterator_types, Emitter};
use super::scalar::{self, compute_dtype};
use super::{malformed, Lowerer, Val};
use crate::error::Error;
use crate::ir::{DType, Primitive, ShapedArray, WindowOp};

/// Emits the input coordinate for one windowed dim; returns (clamped index, valid flag).
#[allow(clippy::too_many_arguments)]
fn window_pos(e: &mut Emitter, o: &str, w: &str, stride: usize, wdil: usize, lo: i64, base: usize, n: usize) -> (String, String) {
    let s = Lowerer::cidx(e, stride as i64);
    let wd = Lowerer::cidx(e, wdil as i64);
    let l = Lowerer::cidx(e, lo);
    let a = e.op(&format!("arith.muli {o}, {s} : index"));
    let b = e.op(&format!("arith.muli {w}, {wd} : index"));
    let c = e.op(&format!("arith.addi {a}, {b} : index"));
    let pos = e.op(&format!("arith.subi {c}, {l} : index"));
    let z = Lowerer::cidx(e, 0);
    let bs = Lowerer::cidx(e, base as i64);
    let nn = Lowerer::cidx(e, n as i64);
    let ge = e.op(&format!("arith.cmpi sge, {pos}, {z} : index"));
    let r = e.op(&format!("arith.remsi {pos}, {bs} : index"));
    let div = e.op(&format!("arith.cmpi eq, {r}, {z} : index"));
    let q = e.op(&format!("arith.divsi {pos}, {bs} : index"));
    let lt = e.op(&format!("arith.cmpi slt, {q}, {nn} : index"));
    let v1 = e.op(&format!("arith.andi {ge}, {div} : i1"));
    let valid = e.op(&format!("arith.andi {v1}, {lt} : i1"));
    let idx = Lowerer::clamp_idx(e, &q, 0, n as i64 - 1);
    (idx, valid)
}

impl Lowerer {
    /// `conv_general_dilated` (batch_group_count 1) accumulating in the output's compute dtype.
    pub(super) fn conv(&mut self, p: &Primitive, lhs: &Val, rhs: &Val, out: &ShapedArray) -> Result<Val, Error> {
        let Primitive::ConvGeneralDilated { window_strides, padding, lhs_dilation, rhs_dilation, dimension_numbers: dn, feature_group_count: g, .. } = p else {
            return Err(malformed("conv".into()));
        };
        let (la, ra) = (lhs.aval().clone(), rhs.aval().clone());
        let n = out.ndim();
        let ns = n - 2;
        if la.size() == 0 || ra.size() == 0 {
            let z = self.e.scalar_const(&if out.dtype.is_float() { super::emit::float_lit(0.0, out.dtype) } else { super::emit::int_lit(0, out.dtype) }, out.dtype);
            return Ok(Val::T(self.splat(&z, out), out.clone()));
        }
        let c = compute_dtype(out.dtype);
        let window: usize = (0..ns).map(|s| ra.shape[dn.rhs_spec[s + 2]]).product();
        let flops = out.size().saturating_mul(ra.shape[dn.rhs_spec[1]]).saturating_mul(window);
        if matches!(c, DType::F32 | DType::F64) && la.dtype.is_float() && ra.dtype.is_float() && flops >= super::structured::gemm_min_flops() {
            return self.conv_gemm(p, lhs, rhs, out);
        }
        let (lt, rt) = (self.tensor(lhs), self.tensor(rhs));
        let acc = ShapedArray::new(&out.shape, c);
        let zl = if c.is_float() { super::emit::float_lit(0.0, c) } else { super::emit::int_lit(0, c) };
        let z = self.e.scalar_const(&zl, c);
        let fill = self.splat(&z, &acc);
        let cout = ra.shape[dn.rhs_spec[0]];
        let ci = ra.shape[dn.rhs_spec[1]];
        let per_group = cout / g;
        // Loop dims: output dims (out layout), then ci, then kernel spatial dims.
        let total = n + 1 + ns;
        let mut rex = vec![String::new(); n];
        rex[dn.rhs_spec[0]] = format!("d{}", dn.out_spec[1]);
        rex[dn.rhs_spec[1]] = format!("d{n}");
        for s in 0..ns {
            rex[dn.rhs_spec[s + 2]] = format!("d{}", n + 1 + s);
        }
        let omap = affine_map(total, &(0..n).map(|i| format!("d{i}")).collect::<Vec<_>>());
        let mut its = vec!["parallel"; n];
        its.extend(vec!["reduction"; 1 + ns]);
        let res = self.e.fresh("");
        let at = acc.mlir_tensor();
        self.e.line(&format!(
            "{res} = linalg.generic {{indexing_maps = [{}, {omap}], iterator_types = {}}} ins({rt} : {}) outs({fill} : {at}) {{",
            affine_map(total, &rex),
            iterator_types(&its),
            ra.mlir_tensor()
        ));
        self.e.line(&format!("^bb0(%w: {}, %acc: {}):", ra.dtype.mlir(), c.mlir()));
        self.e.push();
        let e = &mut self.e;
        let ix = |e: &mut Emitter, i: usize| e.op(&format!("linalg.index {i} : index"));
        let b = ix(e, dn.out_spec[0]);
        let o = ix(e, dn.out_spec[1]);
        let cix = ix(e, n);
        let pg = Lowerer::cidx(e, per_group as i64);
        let grp = e.op(&format!("arith.divui {o}, {pg} : index"));
        let cic = Lowerer::cidx(e, ci as i64);
        let gb = e.op(&format!("arith.muli {grp}, {cic} : index"));
        let ch = e.op(&format!("arith.addi {gb}, {cix} : index"));
        let mut coords = vec![String::new(); n];
        coords[dn.lhs_spec[0]] = b;
        coords[dn.lhs_spec[1]] = ch;
        let mut valid: Option<String> = None;
        for s in 0..ns {
            let os = ix(e, dn.out_spec[s + 2]);
            let ws = ix(e, n + 1 + s);
            let (i, v) = window_pos(e, &os, &ws, window_strides[s], rhs_dilation[s], padding[s].0, lhs_dilation[s], la.shape[dn.lhs_spec[s + 2]]);
            coords[dn.lhs_spec[s + 2]] = i;
            valid = Some(match valid {
                None => v,
                Some(a) => e.op(&format!("arith.andi {a}, {v} : i1")),
            });
        }
        let x = e.op(&format!("tensor.extract {lt}[{}] : {}", coords.join(", "), la.mlir_tensor()));
        let xc = scalar::convert(e, &x, la.dtype, c);
        let wc = scalar::convert(e, "%w", ra.dtype, c);
        let xv = match valid {
            Some(v) => e.op(&format!("arith.select {v}, {xc}, {z} : {}", c.mlir())),
            None => xc,
        };
        let prod = scalar::binary(e, &Primitive::Mul, &xv, &wc, c)?;
        let sum = scalar::binary(e, &Primitive::Add, "%acc", &prod, c)?;
        e.line(&format!("linalg.yield {sum} : {}", c.mlir()));
        self.e.pop();
        self.e.line(&format!("}} -> {at}"));
        self.cast_to(&Val::T(res, acc), out.dtype)
    }

    /// A large float `conv_general_dilated` as im2col + GEMM: a patches tensor
    /// `[G, B, out spatial…, CI, window…]` (G = feature groups, CI = input features per
    /// group; padding and dilations as in [`Lowerer::conv`]), multiplied per group with the
    /// kernel viewed as `[G, CO/G, CI, window…]` through the GEMM runtime
    /// ([`Lowerer::dot_gemm`]), then transposed into the output layout.
    fn conv_gemm(&mut self, p: &Primitive, lhs: &Val, rhs: &Val, out: &ShapedArray) -> Result<Val, Error> {
        let Primitive::ConvGeneralDilated { window_strides, padding, lhs_dilation, rhs_dilation, dimension_numbers: dn, feature_group_count: g, .. } = p else {
            return Err(malformed("conv".into()));
        };
        let g = *g;
        let (la, ra) = (lhs.aval().clone(), rhs.aval().clone());
        let n = out.ndim();
        let ns = n - 2;
        let c = compute_dtype(out.dtype);
        let (cout, ci) = (ra.shape[dn.rhs_spec[0]], ra.shape[dn.rhs_spec[1]]);
        if g == 0 || cout % g != 0 {
            return Err(malformed(format!("conv with {cout} output features in {g} groups")));
        }
        let pg = cout / g;
        let bsz = out.shape[dn.out_spec[0]];
        let osz: Vec<usize> = (0..ns).map(|s| out.shape[dn.out_spec[s + 2]]).collect();
        let ksz: Vec<usize> = (0..ns).map(|s| ra.shape[dn.rhs_spec[s + 2]]).collect();
        // Patches [G, B, OS…, CI, KS…].
        let mut pshape = vec![g, bsz];
        pshape.extend(&osz);
        pshape.push(ci);
        pshape.extend(&ksz);
        let pa = ShapedArray::new(&pshape, c);
        let lt = self.tensor(lhs);
        let zl = super::emit::float_lit(0.0, c);
        let (lspec, lty, ldt) = (dn.lhs_spec.clone(), la.mlir_tensor(), la.dtype);
        let (strides, pads, ldil, rdil) = (window_strides.clone(), padding.clone(), lhs_dilation.clone(), rhs_dilation.clone());
        let patches = self.ew(&pa, &[], &mut |e, _| {
            let ix = |e: &mut Emitter, i: usize| e.op(&format!("linalg.index {i} : index"));
            let (gi, b, cix) = (ix(e, 0), ix(e, 1), ix(e, 2 + ns));
            let cic = Lowerer::cidx(e, ci as i64);
            let gb = e.op(&format!("arith.muli {gi}, {cic} : index"));
            let ch = e.op(&format!("arith.addi {gb}, {cix} : index"));
            let mut coords = vec![String::new(); n];
            coords[lspec[0]] = b;
            coords[lspec[1]] = ch;
            let mut valid: Option<String> = None;
            for s in 0..ns {
                let os = ix(e, 2 + s);
                let ws = ix(e, 3 + ns + s);
                let (i, v) = window_pos(e, &os, &ws, strides[s], rdil[s], pads[s].0, ldil[s], la.shape[lspec[s + 2]]);
                coords[lspec[s + 2]] = i;
                valid = Some(match valid {
                    None => v,
                    Some(a) => e.op(&format!("arith.andi {a}, {v} : i1")),
                });
            }
            let x = e.op(&format!("tensor.extract {lt}[{}] : {lty}", coords.join(", ")));
            let xc = scalar::convert(e, &x, ldt, c);
            Ok(match valid {
                Some(v) => {
                    let z = e.op(&format!("arith.constant {zl} : {}", c.mlir()));
                    e.op(&format!("arith.select {v}, {xc}, {z} : {}", c.mlir()))
                }
                None => xc,
            })
        })?;
        // Kernel: split its output-feature dim into (G, CO/G) (a row-major reshape).
        let o = dn.rhs_spec[0];
        let mut wshape = ra.shape.clone();
        wshape.splice(o..o + 1, [g, pg]);
        let w = self.reshape(rhs, &ShapedArray::new(&wshape, ra.dtype))?;
        let wpos = |d: usize| if d < o { d } else { d + 1 };
        let mut wcontract = vec![wpos(dn.rhs_spec[1])];
        wcontract.extend((0..ns).map(|s| wpos(dn.rhs_spec[s + 2])));
        let lg = [vec![0], (1..2 + ns).collect(), (2 + ns..3 + 2 * ns).collect()];
        let rg = [vec![o], wcontract, vec![o + 1]];
        let mut rshape = vec![g, bsz];
        rshape.extend(&osz);
        rshape.push(pg);
        let r = self.dot_gemm(&patches, &w, &ShapedArray::new(&rshape, out.dtype), lg, rg, None)?;
        // [G, B, OS…, PG] -> out layout, with (G, PG) adjacent at the feature position.
        let mut perm = vec![];
        for i in 0..n {
            if i == dn.out_spec[0] {
                perm.push(1);
            } else if i == dn.out_spec[1] {
                perm.extend([0, 2 + ns]);
            } else {
                let s = (0..ns).find(|&s| dn.out_spec[s + 2] == i).ok_or_else(|| malformed("conv output spec".into()))?;
                perm.push(2 + s);
            }
        }
        let tshape: Vec<usize> = perm.iter().map(|&k| rshape[k]).collect();
        let t = self.transpose(&r, &ShapedArray::new(&tshape, out.dtype), &perm)?;
        self.reshape(&t, out)
    }

    /// `reduce_window_{sum,max,min}`: padding contributes the reduction's identity.
    pub(super) fn reduce_window(&mut self, p: &Primitive, x: &Val, out: &ShapedArray) -> Result<Val, Error> {
        let Primitive::ReduceWindow { op, window_dimensions: wdims, window_strides, padding, base_dilation, window_dilation } = p else {
            return Err(malformed("reduce_window".into()));
        };
        let a = x.aval().clone();
        let d = a.dtype;
        let n = a.ndim();
        let opn = match op {
            WindowOp::Sum => "add",
            WindowOp::Max => "max",
            WindowOp::Min => "min",
        };
        let c = compute_dtype(d);
        let idv = self.e.scalar_const(&identity(opn, c), c);
        let idd = scalar::from_compute(&mut self.e, &idv, d);
        let fill = self.splat(&idd, out);
        if a.size() == 0 {
            return Ok(Val::T(fill, out.clone()));
        }
        let xt = self.tensor(x);
        let win = ShapedArray::new(wdims, DType::I8);
        let wt = self.empty(&win);
        let total = 2 * n;
        let wmap = affine_map(total, &(n..total).map(|i| format!("d{i}")).collect::<Vec<_>>());
        let omap = affine_map(total, &(0..n).map(|i| format!("d{i}")).collect::<Vec<_>>());
        let mut its = vec!["parallel"; n];
        its.extend(vec!["reduction"; n]);
        let res = self.e.fresh("");
        let ot = out.mlir_tensor();
        self.e.line(&format!(
            "{res} = linalg.generic {{indexing_maps = [{wmap}, {omap}], iterator_types = {}}} ins({wt} : {}) outs({fill} : {ot}) {{",
            iterator_types(&its),
            win.mlir_tensor()
        ));
        self.e.line(&format!("^bb0(%w: i8, %acc: {}):", d.mlir()));
        self.e.push();
        let e = &mut self.e;
        let mut coords = vec![];
        let mut valid: Option<String> = None;
        for i in 0..n {
            let o = e.op(&format!("linalg.index {i} : index"));
            let w = e.op(&format!("linalg.index {} : index", n + i));
            let (ix, v) = window_pos(e, &o, &w, window_strides[i], window_dilation[i], padding[i].0, base_dilation[i], a.shape[i]);
            coords.push(ix);
            valid = Some(match valid {
                None => v,
                Some(a) => e.op(&format!("arith.andi {a}, {v} : i1")),
            });
        }
        let v = e.op(&format!("tensor.extract {xt}[{}] : {}", coords.join(", "), a.mlir_tensor()));
        let v = match valid {
            Some(ok) => e.op(&format!("arith.select {ok}, {v}, {idd} : {}", d.mlir())),
            None => v,
        };
        let r = combine(e, opn, "%acc", &v, d)?;
        e.line(&format!("linalg.yield {r} : {}", d.mlir()));
        self.e.pop();
        self.e.line(&format!("}} -> {ot}"));
        Ok(Val::T(res, out.clone()))
    }
}
