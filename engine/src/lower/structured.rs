//! Lowering of the structured primitives to linalg/tensor ops: elementwise generics,
//! broadcast_in_dim, reshape, transpose, iota, reductions, dot_general, and the host
//! callback calls.
//!
//! Invariant: every function here returns a value whose aval equals the `out` it was given
//! (callers check it again), and never emits a loop over an empty output (the driver turns
//! size-0 results into `tensor.empty()` before calling in).

use super::emit::{affine_map, identity_map, int_list, iterator_types, memref_of, Emitter};
use super::scalar::{self, compute_dtype};
use super::{malformed, Lowerer, Val};
use crate::error::Error;
use crate::ir::{CallbackId, DType, Primitive, ShapedArray};

type Body<'a> = &'a mut dyn FnMut(&mut Emitter, &[String]) -> Result<String, Error>;

impl Lowerer {
    /// An elementwise `linalg.generic` producing `out`. Operands are tensors of `out`'s
    /// shape, 0-d tensors (broadcast through a `() ` map) or scalars (used directly).
    /// `body` gets one scalar per operand, in operand order, and returns the result scalar.
    pub(super) fn ew(&mut self, out: &ShapedArray, ins: &[Val], body: Body) -> Result<Val, Error> {
        let r = out.ndim();
        let mut tins: Vec<(String, String, String)> = vec![]; // name, type, map
        for v in ins {
            if let Val::T(n, a) = v {
                let map = if a.shape == out.shape {
                    identity_map(r)
                } else if a.ndim() == 0 {
                    affine_map(r, &[])
                } else {
                    return Err(malformed(format!("elementwise operand {} does not match result {}", a.short(), out.short())));
                };
                tins.push((n.clone(), a.mlir_tensor(), map));
            }
        }
        let e0 = self.empty(out);
        let ot = out.mlir_tensor();
        let mut maps: Vec<String> = tins.iter().map(|t| t.2.clone()).collect();
        maps.push(identity_map(r));
        let ins_clause = if tins.is_empty() {
            String::new()
        } else {
            let names: Vec<&str> = tins.iter().map(|t| t.0.as_str()).collect();
            let tys: Vec<&str> = tins.iter().map(|t| t.1.as_str()).collect();
            format!("ins({} : {}) ", names.join(", "), tys.join(", "))
        };
        let res = self.e.fresh("");
        self.e.line(&format!(
            "{res} = linalg.generic {{indexing_maps = [{}], iterator_types = {}}} {ins_clause}outs({e0} : {ot}) {{",
            maps.join(", "),
            iterator_types(&vec!["parallel"; r])
        ));
        let mut scalars = vec![];
        let mut bbargs = vec![];
        for v in ins {
            match v {
                Val::T(_, a) => {
                    let n = format!("%in{}", bbargs.len());
                    bbargs.push(format!("{n}: {}", a.dtype.mlir()));
                    scalars.push(n);
                }
                Val::S(n, _) => scalars.push(n.clone()),
            }
        }
        let o = "%out";
        bbargs.push(format!("{o}: {}", out.dtype.mlir()));
        self.e.line(&format!("^bb0({}):", bbargs.join(", ")));
        self.e.push();
        let y = body(&mut self.e, &scalars)?;
        self.e.line(&format!("linalg.yield {y} : {}", out.dtype.mlir()));
        self.e.pop();
        self.e.line(&format!("}} -> {ot}"));
        Ok(Val::T(res, out.clone()))
    }

    /// `broadcast_in_dim`: operand dim i goes to output dim `bd[i]`; operand dims of size 1
    /// are broadcast along their output dim.
    pub(super) fn broadcast(&mut self, x: &Val, out: &ShapedArray, bd: &[usize]) -> Result<Val, Error> {
        let a = x.aval().clone();
        if bd.len() != a.ndim() || bd.iter().zip(&a.shape).any(|(&d, &s)| d >= out.ndim() || (s != 1 && s != out.shape[d])) {
            return Err(malformed(format!("broadcast_in_dim of {} to {} with dims {:?}", a.short(), out.short(), bd)));
        }
        if let Val::S(s, _) = x {
            let t = self.splat(s, out);
            return Ok(Val::T(t, out.clone()));
        }
        if a.shape == out.shape {
            return Ok(x.clone());
        }
        let xt = self.tensor(x);
        let exprs: Vec<String> = bd
            .iter()
            .zip(&a.shape)
            .map(|(&d, &s)| if s == 1 && out.shape[d] != 1 { "0".to_string() } else { format!("d{d}") })
            .collect();
        let r = out.ndim();
        let e0 = self.empty(out);
        let (it, ot, el) = (a.mlir_tensor(), out.mlir_tensor(), out.dtype.mlir());
        let res = self.e.fresh("");
        let (i, o) = ("%in0", "%out");
        self.e.line(&format!(
            "{res} = linalg.generic {{indexing_maps = [{}, {}], iterator_types = {}}} ins({xt} : {it}) outs({e0} : {ot}) {{",
            affine_map(r, &exprs),
            identity_map(r),
            iterator_types(&vec!["parallel"; r])
        ));
        self.e.line(&format!("^bb0({i}: {el}, {o}: {el}):"));
        self.e.line(&format!("  linalg.yield {i} : {el}"));
        self.e.line(&format!("}} -> {ot}"));
        Ok(Val::T(res, out.clone()))
    }

    /// Row-major `reshape`: collapse to 1-D, then expand (0-d and all-ones shapes use the
    /// empty reassociation).
    pub(super) fn reshape(&mut self, x: &Val, out: &ShapedArray) -> Result<Val, Error> {
        let a = x.aval().clone();
        if a.size() != out.size() {
            return Err(malformed(format!("reshape of {} to {}", a.short(), out.short())));
        }
        if a.shape == out.shape {
            return Ok(x.clone());
        }
        if let Val::S(s, _) = x {
            let t = self.splat(s, out);
            return Ok(Val::T(t, out.clone()));
        }
        let xt = self.tensor(x);
        let flat = ShapedArray::new(&[a.size()], a.dtype);
        // Collapse: to 1-D, or to 0-d when the target is 0-d (all dims are 1).
        let mid = if out.ndim() == 0 {
            let r = self.e.op(&format!("tensor.collapse_shape {xt} [] : {} into {}", a.mlir_tensor(), out.mlir_tensor()));
            return Ok(Val::T(r, out.clone()));
        } else if a.ndim() == 0 {
            let ones = vec![1usize; out.ndim()];
            let r = self.e.op(&format!(
                "tensor.expand_shape {xt} [] output_shape {} : {} into {}",
                int_list(&ones),
                a.mlir_tensor(),
                out.mlir_tensor()
            ));
            return Ok(Val::T(r, out.clone()));
        } else if a.ndim() == 1 {
            xt
        } else {
            let all: Vec<usize> = (0..a.ndim()).collect();
            self.e.op(&format!("tensor.collapse_shape {xt} [{}] : {} into {}", int_list(&all), a.mlir_tensor(), flat.mlir_tensor()))
        };
        if out.ndim() == 1 {
            return Ok(Val::T(mid, out.clone()));
        }
        let all: Vec<usize> = (0..out.ndim()).collect();
        let r = self.e.op(&format!(
            "tensor.expand_shape {mid} [{}] output_shape {} : {} into {}",
            int_list(&all),
            int_list(&out.shape),
            flat.mlir_tensor(),
            out.mlir_tensor()
        ));
        Ok(Val::T(r, out.clone()))
    }

    /// `transpose`: output dim i is operand dim `perm[i]` (`linalg.transpose`).
    pub(super) fn transpose(&mut self, x: &Val, out: &ShapedArray, perm: &[usize]) -> Result<Val, Error> {
        let a = x.aval();
        let mut seen = vec![false; a.ndim()];
        let ok = perm.len() == a.ndim()
            && perm.iter().enumerate().all(|(i, &p)| p < a.ndim() && !std::mem::replace(&mut seen[p], true) && out.shape[i] == a.shape[p]);
        if !ok {
            return Err(malformed(format!("transpose of {} to {} by {:?}", a.short(), out.short(), perm)));
        }
        if perm.iter().enumerate().all(|(i, &p)| i == p) {
            return Ok(x.clone());
        }
        let xt = self.tensor(x);
        let e0 = self.empty(out);
        let r = self.e.op(&format!(
            "linalg.transpose ins({xt} : {}) outs({e0} : {}) permutation = {}",
            a.mlir_tensor(),
            out.mlir_tensor(),
            int_list(perm)
        ));
        Ok(Val::T(r, out.clone()))
    }

    /// `iota`: the index along `dim`, cast to `out.dtype`.
    pub(super) fn iota(&mut self, out: &ShapedArray, dim: usize) -> Result<Val, Error> {
        let d = out.dtype;
        if dim >= out.ndim() || d.is_bool() {
            return Err(malformed(format!("iota of {} along dimension {dim}", out.short())));
        }
        self.ew(out, &[], &mut |e, _| {
            let i = e.op(&format!("linalg.index {dim} : index"));
            if d.is_float() {
                let w = e.op(&format!("arith.index_cast {i} : index to i64"));
                let f = e.op(&format!("arith.sitofp {w} : i64 to {}", compute_dtype(d).mlir()));
                Ok(scalar::from_compute(e, &f, d))
            } else {
                let op = if d.is_unsigned() { "index_castui" } else { "index_cast" };
                Ok(e.op(&format!("arith.{op} {i} : index to {}", d.mlir())))
            }
        })
    }

    /// Converts every element of `x` to `to` with an elementwise generic.
    fn cast_tensor(&mut self, x: &Val, to: DType) -> Result<Val, Error> {
        let from = x.aval().dtype;
        if from == to {
            return Ok(x.clone());
        }
        let out = ShapedArray::new(&x.aval().shape, to);
        self.ew(&out, std::slice::from_ref(x), &mut |e, a| Ok(scalar::convert(e, &a[0], from, to)))
    }

    /// `reduce_sum`/`reduce_max`/`reduce_min` over `axes` with `linalg.reduce` (f16/bf16
    /// reduce in f32). Inits: 0, -inf/MIN, +inf/MAX; bools reduce with or/and.
    pub(super) fn reduce(&mut self, p: &Primitive, x: &Val, out: &ShapedArray, axes: &[usize]) -> Result<Val, Error> {
        let a = x.aval().clone();
        let kept: Vec<usize> = (0..a.ndim()).filter(|i| !axes.contains(i)).map(|i| a.shape[i]).collect();
        if axes.iter().any(|&ax| ax >= a.ndim()) || kept != out.shape || out.dtype != a.dtype {
            return Err(malformed(format!("{} of {} over {:?} to {}", p.name(), a.short(), axes, out.short())));
        }
        if axes.is_empty() {
            return Ok(x.clone());
        }
        let d = a.dtype;
        let c = compute_dtype(d);
        let xc = self.cast_tensor(x, c)?;
        let xt = self.tensor(&xc);
        let acc = ShapedArray::new(&out.shape, c);
        let (init, op) = reduce_parts(p, c);
        let iv = self.e.scalar_const(&init, c);
        let fill = self.splat(&iv, &acc);
        let mut sorted = axes.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        let res = self.e.fresh("");
        let (i, o) = ("%in", "%acc");
        let (ct, at) = (ShapedArray::new(&a.shape, c).mlir_tensor(), acc.mlir_tensor());
        self.e.line(&format!("{res} = linalg.reduce ins({xt} : {ct}) outs({fill} : {at}) dimensions = {}", int_list(&sorted)));
        self.e.line(&format!("  ({i}: {}, {o}: {}) {{", c.mlir(), c.mlir()));
        self.e.push();
        self.e.push();
        // Sums may reassociate (as XLA's do), which lets LLVM vectorize them.
        let fm = if op == "arith.addf" { " fastmath<reassoc>" } else { "" };
        let s = self.e.op(&format!("{op} {i}, {o}{fm} : {}", c.mlir()));
        self.e.line(&format!("linalg.yield {s} : {}", c.mlir()));
        self.e.pop();
        self.e.pop();
        self.e.line("  }");
        self.cast_tensor(&Val::T(res, acc), d)
    }

    /// `dot_general`. Output dims are batch, lhs free, rhs free. Canonical forms become
    /// `linalg.matmul` / `linalg.batch_matmul`; anything else a contraction
    /// `linalg.generic` accumulating in the output's compute dtype (f32 for f16/bf16).
    pub(super) fn dot(&mut self, lhs: &Val, rhs: &Val, out: &ShapedArray, dims: [&Vec<usize>; 4]) -> Result<Val, Error> {
        let [lc, rc, lb, rb] = dims;
        let (la, ra) = (lhs.aval().clone(), rhs.aval().clone());
        let lfree: Vec<usize> = (0..la.ndim()).filter(|i| !lc.contains(i) && !lb.contains(i)).collect();
        let rfree: Vec<usize> = (0..ra.ndim()).filter(|i| !rc.contains(i) && !rb.contains(i)).collect();
        let mut expect: Vec<usize> = lb.iter().map(|&i| la.shape[i]).collect();
        expect.extend(lfree.iter().map(|&i| la.shape[i]));
        expect.extend(rfree.iter().map(|&i| ra.shape[i]));
        let ok = lc.len() == rc.len()
            && lb.len() == rb.len()
            && lc.iter().chain(lb).all(|&i| i < la.ndim())
            && rc.iter().chain(rb).all(|&i| i < ra.ndim())
            && lc.iter().zip(rc).chain(lb.iter().zip(rb)).all(|(&l, &r)| la.shape[l] == ra.shape[r])
            && expect == out.shape;
        if !ok {
            return Err(malformed(format!(
                "dot_general of {} and {} (contract {:?}/{:?}, batch {:?}/{:?}) to {}",
                la.short(), ra.short(), lc, rc, lb, rb, out.short()
            )));
        }
        let d = out.dtype;
        let c = compute_dtype(d);
        let (lt, rt) = (self.tensor(lhs), self.tensor(rhs));
        let acc = ShapedArray::new(&out.shape, c);
        let zero = if c.is_float() { super::emit::float_lit(0.0, c) } else { super::emit::int_lit(0, c) };
        let z = self.e.scalar_const(&zero, c);
        let fill = self.splat(&z, &acc);
        let same = la.dtype == d && ra.dtype == d && d == c && !d.is_bool();
        let named = if same && lb.is_empty() && la.ndim() == 2 && ra.ndim() == 2 && lc == &[1] && rc == &[0] {
            Some("matmul")
        } else if same && lb == &[0] && rb == &[0] && la.ndim() == 3 && ra.ndim() == 3 && lc == &[2] && rc == &[1] {
            Some("batch_matmul")
        } else {
            None
        };
        let (ltt, rtt, at) = (la.mlir_tensor(), ra.mlir_tensor(), acc.mlir_tensor());
        if let Some(op) = named {
            let r = self.e.op(&format!("linalg.{op} ins({lt}, {rt} : {ltt}, {rtt}) outs({fill} : {at}) -> {at}"));
            return Ok(Val::T(r, out.clone()));
        }
        // Loop dims: [batch, lhs free, rhs free, contracting].
        let (nb, nl, nr) = (lb.len(), lfree.len(), rfree.len());
        let n = nb + nl + nr + lc.len();
        let map_of = |ndim: usize, batch: &[usize], contract: &[usize], free: &[usize], free_base: usize| {
            let ex: Vec<String> = (0..ndim)
                .map(|i| {
                    if let Some(k) = batch.iter().position(|&b| b == i) {
                        format!("d{k}")
                    } else if let Some(k) = contract.iter().position(|&b| b == i) {
                        format!("d{}", nb + nl + nr + k)
                    } else {
                        format!("d{}", free_base + free.iter().position(|&f| f == i).unwrap())
                    }
                })
                .collect();
            affine_map(n, &ex)
        };
        let lmap = map_of(la.ndim(), lb, lc, &lfree, nb);
        let rmap = map_of(ra.ndim(), rb, rc, &rfree, nb + nl);
        let omap = affine_map(n, &(0..nb + nl + nr).map(|i| format!("d{i}")).collect::<Vec<_>>());
        let mut its = vec!["parallel"; nb + nl + nr];
        its.extend(vec!["reduction"; lc.len()]);
        let res = self.e.fresh("");
        let (x, y, o) = ("%lhs", "%rhs", "%acc");
        self.e.line(&format!(
            "{res} = linalg.generic {{indexing_maps = [{lmap}, {rmap}, {omap}], iterator_types = {}}} ins({lt}, {rt} : {ltt}, {rtt}) outs({fill} : {at}) {{",
            iterator_types(&its)
        ));
        self.e.line(&format!("^bb0({x}: {}, {y}: {}, {o}: {}):", la.dtype.mlir(), ra.dtype.mlir(), c.mlir()));
        self.e.push();
        let xc = scalar::convert(&mut self.e, x, la.dtype, c);
        let yc = scalar::convert(&mut self.e, y, ra.dtype, c);
        let t = c.mlir();
        let s = if c.is_bool() {
            let m = self.e.op(&format!("arith.andi {xc}, {yc} : {t}"));
            self.e.op(&format!("arith.ori {o}, {m} : {t}"))
        } else if c.is_float() {
            let m = self.e.op(&format!("arith.mulf {xc}, {yc} : {t}"));
            self.e.op(&format!("arith.addf {o}, {m} : {t}"))
        } else {
            let m = self.e.op(&format!("arith.muli {xc}, {yc} : {t}"));
            self.e.op(&format!("arith.addi {o}, {m} : {t}"))
        };
        self.e.line(&format!("linalg.yield {s} : {t}"));
        self.e.pop();
        self.e.line(&format!("}} -> {at}"));
        self.cast_tensor(&Val::T(res, acc), d)
    }

    /// `debug_callback`: hands each operand to `jaxrepl_callback_arg_<dtype>(id, index,
    /// memref<*xT>)`, then calls `jaxrepl_callback_fire(id, nargs)`. Calls have unknown
    /// effects, so no pass removes or reorders them.
    pub(super) fn callback(&mut self, id: CallbackId, ins: &[Val]) -> Result<(), Error> {
        let idc = self.e.scalar_const(&(id as i64).to_string(), DType::I64);
        for (k, v) in ins.iter().enumerate() {
            let a = v.aval().clone();
            let el = a.dtype.mlir();
            let sym = format!("jaxrepl_callback_arg_{}", a.dtype.short_name());
            self.decls.insert(format!("func.func private @{sym}(i64, i64, memref<*x{el}>)"));
            let t = self.tensor(v);
            let (tt, mt) = (a.mlir_tensor(), memref_of(&a.mlir_tensor()));
            let m = self.e.op(&format!("bufferization.to_buffer {t} read_only : {tt} to {mt}"));
            let u = self.e.op(&format!("memref.cast {m} : {mt} to memref<*x{el}>"));
            let kc = self.e.scalar_const(&k.to_string(), DType::I64);
            self.e.line(&format!("func.call @{sym}({idc}, {kc}, {u}) : (i64, i64, memref<*x{el}>) -> ()"));
        }
        self.decls.insert("func.func private @jaxrepl_callback_fire(i64, i64)".into());
        let nc = self.e.scalar_const(&ins.len().to_string(), DType::I64);
        self.e.line(&format!("func.call @jaxrepl_callback_fire({idc}, {nc}) : (i64, i64) -> ()"));
        Ok(())
    }
}

/// The init spelling and combining op of a reduction in compute dtype `c`.
fn reduce_parts(p: &Primitive, c: DType) -> (String, &'static str) {
    use super::emit::{float_lit, int_lit};
    let bits = 8 * c.size_bytes() as u32;
    match (p, c) {
        (Primitive::ReduceSum { .. }, c) if c.is_bool() => ("false".into(), "arith.ori"),
        (Primitive::ReduceMax { .. }, c) if c.is_bool() => ("false".into(), "arith.ori"),
        (Primitive::ReduceMin { .. }, c) if c.is_bool() => ("true".into(), "arith.andi"),
        (Primitive::ReduceSum { .. }, c) if c.is_float() => (float_lit(0.0, c), "arith.addf"),
        (Primitive::ReduceSum { .. }, c) => (int_lit(0, c), "arith.addi"),
        (Primitive::ReduceMax { .. }, c) if c.is_float() => (float_lit(f64::NEG_INFINITY, c), "arith.maximumf"),
        (Primitive::ReduceMin { .. }, c) if c.is_float() => (float_lit(f64::INFINITY, c), "arith.minimumf"),
        (Primitive::ReduceMax { .. }, c) if c.is_unsigned() => (int_lit(0, c), "arith.maxui"),
        (Primitive::ReduceMin { .. }, c) if c.is_unsigned() => (int_lit(-1, c), "arith.minui"),
        (Primitive::ReduceMax { .. }, c) => (int_lit(i64::MIN >> (64 - bits), c), "arith.maxsi"),
        (_, c) => (int_lit(i64::MAX >> (64 - bits), c), "arith.minsi"),
    }
}
