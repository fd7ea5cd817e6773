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
    /// A 0-d result of 0-d operands is emitted as plain scalar ops (a [`Val::S`]).
    pub(super) fn ew(&mut self, out: &ShapedArray, ins: &[Val], body: Body) -> Result<Val, Error> {
        let r = out.ndim();
        if r == 0 && !ins.is_empty() && ins.iter().all(|v| v.aval().ndim() == 0) {
            // A 0-d result is one scalar computation: no generic, no 0-d tensor to
            // bufferize (scalar loop carries stay in registers this way).
            let scalars: Vec<String> = ins.iter().map(|v| self.scalar_of(v)).collect();
            let prev = std::mem::replace(&mut self.e.inline_trig, false);
            let y = body(&mut self.e, &scalars);
            self.e.inline_trig = prev;
            return Ok(Val::S(y?, out.clone()));
        }
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
        let inline = self.e.loop_depth > 0 || out.size() >= super::approx::INLINE_TRIG_MIN_ELEMENTS;
        let prev = std::mem::replace(&mut self.e.inline_trig, inline);
        let y = body(&mut self.e, &scalars);
        self.e.inline_trig = prev;
        let y = y?;
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
        let mut xt = self.tensor(x);
        // Operand dims of size 1 that are broadcast are dropped first (a rank-reducing
        // `tensor.extract_slice`), so the generic's operand map is a projected permutation
        // (`(d0, d1) -> (d0)`, not `(d0, d1) -> (d0, 0)`): linalg's reshape propagation
        // (fold by expansion) only moves reshapes through generics whose maps all are, and
        // a sum that views its input as lanes (`reduce_lanes`) relies on it to fuse a
        // producer that reads a broadcast (softmax's `exp(x - max)`). A `collapse_shape`
        // would not do: that propagation folds it into the consumer by giving the consumer
        // the unit dim back.
        let kept: Vec<usize> = (0..a.ndim()).filter(|&i| !(a.shape[i] == 1 && out.shape[bd[i]] != 1)).collect();
        if kept.len() < a.ndim() {
            let ca = ShapedArray::new(&kept.iter().map(|&i| a.shape[i]).collect::<Vec<_>>(), a.dtype);
            xt = self.drop_unit_dims(&xt, &a, &ca);
        }
        let exprs: Vec<String> = kept.iter().map(|&i| format!("d{}", bd[i])).collect();
        let a = ShapedArray::new(&kept.iter().map(|&i| a.shape[i]).collect::<Vec<_>>(), a.dtype);
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
    pub(super) fn cast_tensor(&mut self, x: &Val, to: DType) -> Result<Val, Error> {
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
        let acc = ShapedArray::new(&out.shape, c);
        let (init, _) = reduce_parts(p, c);
        let iv = self.e.scalar_const(&init, c);
        let mut sorted = axes.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        let (m, kept_n) = (out.size(), a.ndim() - sorted.len());
        let n = a.size() / m.max(1);
        let trailing = sorted.iter().enumerate().all(|(i, &ax)| ax == kept_n + i);
        if trailing && n >= REDUCE_SPLIT_MIN && m <= REDUCE_SPLIT_MAX_OUT {
            let r = self.reduce_split(&xc, m, n, &iv, p)?;
            let v = self.reshape(&r, &acc)?;
            return self.cast_tensor(&v, d);
        }
        let xt = self.tensor(&xc);
        let last = a.ndim() - 1;
        if float_sum(p, c) && a.size() > 0 && sorted.last() == Some(&last) && a.shape[last] >= 2 * SUM_LANES_NARROW {
            let (r, _) = self.reduce_lanes(p, &xt, &ShapedArray::new(&a.shape, c), &sorted, &iv)?;
            return self.cast_tensor(&Val::T(r, acc), d);
        }
        // The longest reduced axis (the first of equal ones) is cut into blocks.
        let longest = sorted.iter().copied().fold(sorted[0], |b, i| if a.shape[i] > a.shape[b] { i } else { b });
        if float_sum(p, c) && n >= REDUCE_SPLIT_MIN && a.shape[longest] >= 2 * REDUCE_SPLIT_PARTS {
            let r = self.reduce_blocks(p, &xt, &ShapedArray::new(&a.shape, c), &sorted, longest, &iv, &acc);
            return self.cast_tensor(&Val::T(r, acc), d);
        }
        let fill = self.splat(&iv, &acc);
        let res = self.reduce_op(p, &xt, &ShapedArray::new(&a.shape, c), &fill, &acc, &sorted);
        self.cast_tensor(&Val::T(res, acc), d)
    }

    /// One `linalg.reduce` of tensor `xt` (aval `xa`, compute dtype) over `dims` into the
    /// init tensor `init` (aval `acc`); returns the result's name.
    fn reduce_op(&mut self, p: &Primitive, xt: &str, xa: &ShapedArray, init: &str, acc: &ShapedArray, dims: &[usize]) -> String {
        let c = xa.dtype;
        let (_, op) = reduce_parts(p, c);
        let res = self.e.fresh("");
        let (i, o) = ("%in", "%acc");
        let (ct, at) = (xa.mlir_tensor(), acc.mlir_tensor());
        self.e.line(&format!("{res} = linalg.reduce ins({xt} : {ct}) outs({init} : {at}) dimensions = {}", int_list(dims)));
        self.e.line(&format!("  ({i}: {}, {o}: {}) {{", c.mlir(), c.mlir()));
        self.e.push();
        self.e.push();
        // No `reassoc` on sums: their association is fixed by the lowering
        // (`reduce_lanes`), so unoptimised and optimised code add in the same order.
        let s = if matches!(c, DType::F32 | DType::F64) && matches!(op, "arith.maximumf" | "arith.minimumf") {
            // `llvm.intr.maximum`/`minimum` have `arith.maximumf`'s semantics (NaN
            // propagates, -0 < +0), but `arith-expand` leaves them alone: expanded into
            // compares and selects, LLVM could not vectorise the reduction loop; as the
            // intrinsic it is an `fmaximum` reduction it vectorises.
            let f = if op == "arith.maximumf" { "maximum" } else { "minimum" };
            let t = c.mlir();
            self.e.op(&format!("llvm.intr.{f}({i}, {o}) : ({t}, {t}) -> {t}"))
        } else {
            self.e.op(&format!("{op} {i}, {o} : {}", c.mlir()))
        };
        self.e.line(&format!("linalg.yield {s} : {}", c.mlir()));
        self.e.pop();
        self.e.pop();
        self.e.line("  }");
        res
    }

    /// A reduction of `x` (compute dtype, `m * n` elements, the reduced axes trailing)
    /// viewed as `[m, n]`, split so that its long inner loop can run on several threads:
    /// the first `P·C` elements of each row (`P = REDUCE_SPLIT_PARTS`, `C = n / P`) are
    /// viewed as `[m, P, C]` (`[P, C]` when m = 1) and reduced over `C` into `[m, P]` partials (a reduction
    /// whose outer loops are parallel, so the compile stage can spread them over
    /// threads), the partials are reduced in order into `[m]`, and the `n - P·C < P`
    /// remaining elements of each row are reduced onto that. The order of operations is
    /// fixed by the shapes alone, so results do not depend on the number of threads.
    /// Float sums take `C` a multiple of [`SUM_LANES_WIDE`] and reduce each part in lanes
    /// (`reduce_lanes`); the remaining `n - P·C < P·SUM_LANES_WIDE` elements are added in
    /// order. `iv` is the init scalar. Returns the `[m]` result (0-d when m = 1).
    fn reduce_split(&mut self, x: &Val, m: usize, n: usize, iv: &str, p: &Primitive) -> Result<Val, Error> {
        let c = x.aval().dtype;
        let parts = REDUCE_SPLIT_PARTS;
        let lanes = float_sum(p, c);
        let cl = if lanes { n / (parts * SUM_LANES_WIDE) * SUM_LANES_WIDE } else { n / parts };
        let rest = n - parts * cl;
        // One result: no leading dim, so the partials' loop is the outermost one.
        let lead: Vec<usize> = if m == 1 { vec![] } else { vec![m] };
        let k = lead.len();
        let sh = |tail: &[usize]| ShapedArray::new(&[lead.as_slice(), tail].concat(), c);
        let x2a = sh(&[n]);
        let x2 = self.reshape(x, &x2a)?;
        let x2t = self.tensor(&x2);
        let lead_s: String = lead.iter().map(|d| format!("{d}, ")).collect();
        let main_a = sh(&[parts * cl]);
        let main = if rest == 0 { x2t.clone() } else { self.slice_axis(&x2t, &x2a, k, 0, parts * cl).0 };
        let x3a = sh(&[parts, cl]);
        let reassoc = if k == 0 { "[[0, 1]]" } else { "[[0], [1, 2]]" };
        let x3 = self.e.op(&format!(
            "tensor.expand_shape {main} {reassoc} output_shape [{lead_s}{parts}, {cl}] : {} into {}",
            main_a.mlir_tensor(),
            x3a.mlir_tensor()
        ));
        let pa = sh(&[parts]);
        let partial = if lanes {
            self.reduce_lanes(p, &x3, &x3a, &[k + 1], iv)?.0
        } else {
            let pfill = self.splat(iv, &pa);
            self.reduce_op(p, &x3, &x3a, &pfill, &pa, &[k + 1])
        };
        let ma = sh(&[]);
        let mfill = self.splat(iv, &ma);
        let s = self.reduce_op(p, &partial, &pa, &mfill, &ma, &[k]);
        if rest == 0 {
            return Ok(Val::T(s, ma));
        }
        let (tail, ta) = self.slice_axis(&x2t, &x2a, k, parts * cl, rest);
        let r = self.reduce_op(p, &tail, &ta, &s, &ma, &[k]);
        Ok(Val::T(r, ma))
    }

    /// A float sum of tensor `xt` (aval `xa`, compute dtype) over `dims` (sorted,
    /// including the last axis, whose length `n` is at least `2 * SUM_LANES_NARROW`) with
    /// its order of additions fixed in the IR, as XLA:CPU's vectorised reductions fix theirs
    /// (explicit vector accumulators): the first `q·L` elements of the last axis
    /// (`L` = [`SUM_LANES_WIDE`] when `n ≥ 4·SUM_LANES_WIDE`, else [`SUM_LANES_NARROW`])
    /// are viewed as `[q, L]` and summed over `q` (and the other reduced axes) into `L`
    /// lane sums (the innermost loop runs over lanes and is parallel, so LLVM vectorises it
    /// with no reassociation); the lanes are added pairwise, halves first
    /// (`lane[i] + lane[i + L/2]`, log2 L rounds, one loop nest), and the last `n mod L` elements are then
    /// added in order. Unoptimised code (tier 1) and LLVM's optimised code perform the same
    /// additions, so a jitted function's first call and its later calls agree bitwise (with
    /// `reassoc` flags LLVM chose the association at O2 only, and they differed by tens of
    /// ulp on large sums). Returns the result's name and aval (the kept dims).
    fn reduce_lanes(&mut self, p: &Primitive, xt: &str, xa: &ShapedArray, dims: &[usize], iv: &str) -> Result<(String, ShapedArray), Error> {
        let c = xa.dtype;
        let r = xa.ndim();
        let n = xa.shape[r - 1];
        let l = if n >= 4 * SUM_LANES_WIDE { SUM_LANES_WIDE } else { SUM_LANES_NARROW };
        let (q, rest) = (n / l, n % l);
        let lead = &xa.shape[..r - 1];
        let kept: Vec<usize> = (0..r - 1).filter(|i| !dims.contains(i)).map(|i| xa.shape[i]).collect();
        let k = kept.len();
        let lead_s: String = lead.iter().map(|d| format!("{d}, ")).collect();
        let main_a = ShapedArray::new(&[lead, &[q * l]].concat(), c);
        let main = if rest == 0 {
            xt.to_string()
        } else {
            self.slice_axis(xt, xa, r - 1, 0, q * l).0
        };
        // [lead..., q·L] -> [lead..., q, L]
        let split_last = |rank: usize| -> String {
            let mut g: Vec<String> = (0..rank - 1).map(|i| format!("[{i}]")).collect();
            g.push(format!("[{}, {}]", rank - 1, rank));
            format!("[{}]", g.join(", "))
        };
        let x3a = ShapedArray::new(&[lead, &[q, l]].concat(), c);
        let x3 = self.e.op(&format!(
            "tensor.expand_shape {main} {} output_shape [{lead_s}{q}, {l}] : {} into {}",
            split_last(r),
            main_a.mlir_tensor(),
            x3a.mlir_tensor()
        ));
        let with = |tail: &[usize]| ShapedArray::new(&[kept.as_slice(), tail].concat(), c);
        let la = with(&[l]);
        let lfill = self.splat(iv, &la);
        let v = self.reduce_op(p, &x3, &x3a, &lfill, &la, dims);
        // Pairwise, in one loop nest over the kept dims: lanes [0, len/2) plus lanes
        // [len/2, len) until one is left, on the lanes read with `tensor.extract` (separate
        // generics per step cost a loop nest, a buffer and a parallel region each; an
        // expand_shape per step would be propagated through the lane sums by the reshape
        // fusion, splitting their lane loop into log2 L loops of 2).
        let out_a = with(&[]);
        let la_t = la.mlir_tensor();
        let t = c.mlir();
        let s = self.ew(&out_a, &[], &mut |e, _| {
            let idx: Vec<String> = (0..k).map(|d| e.op(&format!("linalg.index {d} : index"))).collect();
            let mut vals: Vec<String> = (0..l)
                .map(|j| {
                    let cj = e.op(&format!("arith.constant {j} : index"));
                    let at: Vec<String> = idx.iter().cloned().chain([cj]).collect();
                    e.op(&format!("tensor.extract {v}[{}] : {la_t}", at.join(", ")))
                })
                .collect();
            while vals.len() > 1 {
                let half = vals.len() / 2;
                vals = (0..half).map(|i| e.op(&format!("arith.addf {}, {} : {t}", vals[i], vals[i + half]))).collect();
            }
            Ok(vals.pop().expect("one lane left"))
        })?;
        let s = self.tensor(&s);
        if rest == 0 {
            return Ok((s, out_a));
        }
        let (tail, ta) = self.slice_axis(xt, xa, r - 1, q * l, rest);
        let res = self.reduce_op(p, &tail, &ta, &s, &out_a, dims);
        Ok((res, out_a))
    }

    /// A long float sum of tensor `xt` (aval `xa`, compute dtype) over `dims` (sorted; at
    /// least [`REDUCE_SPLIT_MIN`] elements per result; not a last-axis lane sum) into aval
    /// `out`, in blocks: reduced axis `ax` (its longest, length `s`) is cut into
    /// `P = max(REDUCE_SPLIT_PARTS, ceil(s / 2^20))` contiguous blocks of `q = s / P`
    /// (`[.., P, q, ..]`), each block summed into its own partial result (the `P` loop is
    /// parallel, so the compile stage can spread it over threads), the partials then added
    /// in order and the last `s mod P` slices after them. Summed one element after
    /// another, a column of more than 2^24 ones stops growing at 2^24 in f32 (JAX gives the
    /// exact count); here a block holds at most 2^20 slices of the axis. The order is
    /// fixed by the shapes, so both tiers and any thread count agree bitwise. Returns the
    /// result's name.
    #[allow(clippy::too_many_arguments)]
    fn reduce_blocks(&mut self, p: &Primitive, xt: &str, xa: &ShapedArray, dims: &[usize], ax: usize, iv: &str, out: &ShapedArray) -> String {
        let c = xa.dtype;
        let r = xa.ndim();
        let s = xa.shape[ax];
        let parts = REDUCE_SPLIT_PARTS.max(s.div_ceil(1 << 20));
        let (q, rest) = (s / parts, s % parts);
        let with_ax = |len: usize| -> ShapedArray {
            let mut sh = xa.shape.clone();
            sh[ax] = len;
            ShapedArray::new(&sh, c)
        };
        let sizes = |a: &ShapedArray| a.shape.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ");
        let main_a = with_ax(parts * q);
        let main = if rest == 0 {
            xt.to_string()
        } else {
            self.slice_axis(xt, xa, ax, 0, parts * q).0
        };
        // [.., P·q, ..] -> [.., P, q, ..]
        let mut groups: Vec<String> = vec![];
        for i in 0..r {
            groups.push(if i < ax { format!("[{i}]") } else if i == ax { format!("[{i}, {}]", i + 1) } else { format!("[{}]", i + 1) });
        }
        let mut xsh = xa.shape.clone();
        xsh[ax] = q;
        xsh.insert(ax, parts);
        let x3a = ShapedArray::new(&xsh, c);
        let x3 = self.e.op(&format!(
            "tensor.expand_shape {main} [{}] output_shape [{}] : {} into {}",
            groups.join(", "),
            sizes(&x3a),
            main_a.mlir_tensor(),
            x3a.mlir_tensor()
        ));
        // Reduced: q and the other reduced axes (those from `ax` on shift past P).
        let rdims: Vec<usize> = dims.iter().map(|&d| if d < ax { d } else { d + 1 }).collect();
        // P lands after the kept axes that come before `ax`.
        let at = (0..ax).filter(|i| !dims.contains(i)).count();
        let mut psh = out.shape.clone();
        psh.insert(at, parts);
        let pa = ShapedArray::new(&psh, c);
        let pfill = self.splat(iv, &pa);
        let partial = self.reduce_op(p, &x3, &x3a, &pfill, &pa, &rdims);
        let fill = self.splat(iv, out);
        let sum = self.reduce_op(p, &partial, &pa, &fill, out, &[at]);
        if rest == 0 {
            return sum;
        }
        let (tail, ta) = self.slice_axis(xt, xa, ax, parts * q, rest);
        self.reduce_op(p, &tail, &ta, &sum, out, dims)
    }

    /// Elements `start .. start + len` of tensor `xt` (aval `xa`) along axis `ax`, all of
    /// every other axis: a `tensor.extract_slice`. Returns its name and aval.
    fn slice_axis(&mut self, xt: &str, xa: &ShapedArray, ax: usize, start: usize, len: usize) -> (String, ShapedArray) {
        let r = xa.ndim();
        let mut sh = xa.shape.clone();
        sh[ax] = len;
        let to = ShapedArray::new(&sh, xa.dtype);
        let mut off = vec!["0".to_string(); r];
        off[ax] = start.to_string();
        let sizes = sh.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ");
        let t = self.e.op(&format!(
            "tensor.extract_slice {xt}[{}] [{sizes}] [{}] : {} to {}",
            off.join(", "),
            vec!["1"; r].join(", "),
            xa.mlir_tensor(),
            to.mlir_tensor()
        ));
        (t, to)
    }

    /// Tensor `xt` of aval `a` without some of its unit dims, as aval `to` (the same
    /// elements): a rank-reducing `tensor.extract_slice` of the whole tensor. Returns its
    /// name.
    fn drop_unit_dims(&mut self, xt: &str, a: &ShapedArray, to: &ShapedArray) -> String {
        let r = a.ndim();
        let sizes = a.shape.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ");
        self.e.op(&format!(
            "tensor.extract_slice {xt}[{}] [{sizes}] [{}] : {} to {}",
            vec!["0"; r].join(", "),
            vec!["1"; r].join(", "),
            a.mlir_tensor(),
            to.mlir_tensor()
        ))
    }

    /// `dot_general`. Output dims are batch, lhs free, rhs free.
    ///
    /// Products of f32/f64 compute dtype (f16/bf16 operands and outputs compute in f32,
    /// as before) with at least [`GEMM_MIN_FLOPS`] multiply-adds call the GEMM runtime
    /// (`jaxrepl_gemm_f32`/`_f64`, see [`Lowerer::dot_gemm`]); everything else (small
    /// products, integer and bool dots) is a contraction `linalg.generic` accumulating in
    /// the output's compute dtype, with loops ordered batch, lhs free, contracting, rhs
    /// free (i-k-j: the innermost loop walks the rhs and the output contiguously, so LLVM
    /// vectorises it).
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
        if gemm_eligible(&la, &ra, out, lc) {
            let lg = [lb.clone(), lfree.clone(), lc.clone()];
            let rg = [rb.clone(), rc.clone(), rfree.clone()];
            return self.dot_gemm(lhs, rhs, out, lg, rg, None);
        }
        let (lt, rt) = (self.tensor(lhs), self.tensor(rhs));
        let acc = ShapedArray::new(&out.shape, c);
        let zero = if c.is_float() { super::emit::float_lit(0.0, c) } else { super::emit::int_lit(0, c) };
        let z = self.e.scalar_const(&zero, c);
        let fill = self.splat(&z, &acc);
        let (ltt, rtt, at) = (la.mlir_tensor(), ra.mlir_tensor(), acc.mlir_tensor());
        // Loop dims: [batch, lhs free, contracting, rhs free].
        let (nb, nl, nc, nr) = (lb.len(), lfree.len(), lc.len(), rfree.len());
        let n = nb + nl + nc + nr;
        let map_of = |ndim: usize, batch: &[usize], contract: &[usize], free: &[usize], free_base: usize| {
            let ex: Vec<String> = (0..ndim)
                .map(|i| {
                    if let Some(k) = batch.iter().position(|&b| b == i) {
                        format!("d{k}")
                    } else if let Some(k) = contract.iter().position(|&b| b == i) {
                        format!("d{}", nb + nl + k)
                    } else {
                        format!("d{}", free_base + free.iter().position(|&f| f == i).unwrap())
                    }
                })
                .collect();
            affine_map(n, &ex)
        };
        let lmap = map_of(la.ndim(), lb, lc, &lfree, nb);
        let rmap = map_of(ra.ndim(), rb, rc, &rfree, nb + nl + nc);
        let oex: Vec<String> = (0..nb + nl).chain(nb + nl + nc..n).map(|i| format!("d{i}")).collect();
        let omap = affine_map(n, &oex);
        let mut its = vec!["parallel"; nb + nl];
        its.extend(vec!["reduction"; nc]);
        its.extend(vec!["parallel"; nr]);
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
            // `contract` lets LLVM fuse the multiply-add into an FMA (as XLA's CPU dots do).
            let m = self.e.op(&format!("arith.mulf {xc}, {yc} fastmath<contract> : {t}"));
            self.e.op(&format!("arith.addf {o}, {m} fastmath<contract> : {t}"))
        } else {
            let m = self.e.op(&format!("arith.muli {xc}, {yc} : {t}"));
            self.e.op(&format!("arith.addi {o}, {m} : {t}"))
        };
        self.e.line(&format!("linalg.yield {s} : {t}"));
        self.e.pop();
        self.e.line(&format!("}} -> {at}"));
        self.cast_tensor(&Val::T(res, acc), d)
    }

    /// `init ± scale·dot_general(..)` ([`super::DotUpdate`], found by
    /// [`super::dot_updates`]): one call of `jaxrepl_gemm_acc_*`, which writes `init` into
    /// the result and accumulates `β·lhs·rhs` into it, `β = ±scale` (±1 without a scale).
    /// `out` is the update's aval (the dot's). Errors: a malformed dot (as [`Lowerer::dot`]).
    pub(super) fn dot_update(&mut self, u: &super::DotUpdate, out: &ShapedArray, env: &std::collections::HashMap<u32, Val>) -> Result<Val, Error> {
        let Primitive::DotGeneral { lhs_contracting: lc, rhs_contracting: rc, lhs_batch: lb, rhs_batch: rb, .. } = &u.dot.primitive else {
            return Err(malformed("a fused update without its dot_general".into()));
        };
        let (lhs, rhs) = (self.atom(&u.dot.inputs[0], env)?, self.atom(&u.dot.inputs[1], env)?);
        let init = self.atom(&u.init, env)?;
        let (la, ra) = (lhs.aval().clone(), rhs.aval().clone());
        let ok = lc.len() == rc.len()
            && lb.len() == rb.len()
            && lc.iter().chain(lb).all(|&i| i < la.ndim())
            && rc.iter().chain(rb).all(|&i| i < ra.ndim())
            && lc.iter().zip(rc).chain(lb.iter().zip(rb)).all(|(&l, &r)| la.shape[l] == ra.shape[r])
            && (init.aval().shape == out.shape || out.shape.ends_with(&init.aval().shape))
            && init.aval().dtype == out.dtype;
        if !ok {
            return Err(malformed(format!("update of {} by dot_general of {} and {}", init.aval().short(), la.short(), ra.short())));
        }
        let c = compute_dtype(out.dtype);
        let t = c.mlir();
        let beta = match &u.scale {
            None => self.e.scalar_const(&super::emit::float_lit(1.0, c), c),
            Some(a) => {
                let v = self.atom(a, env)?;
                let sd = v.aval().dtype;
                let s = match &v {
                    Val::S(n, _) => n.clone(),
                    Val::T(n, a) => self.e.op(&format!("tensor.extract {n}[] : {}", a.mlir_tensor())),
                };
                scalar::convert(&mut self.e, &s, sd, c)
            }
        };
        let beta = if u.negate { self.e.op(&format!("arith.negf {beta} : {t}")) } else { beta };
        let lfree: Vec<usize> = (0..la.ndim()).filter(|i| !lc.contains(i) && !lb.contains(i)).collect();
        let rfree: Vec<usize> = (0..ra.ndim()).filter(|i| !rc.contains(i) && !rb.contains(i)).collect();
        let lg = [lb.clone(), lfree, lc.clone()];
        let rg = [rb.clone(), rc.clone(), rfree];
        self.dot_gemm(&lhs, &rhs, out, lg, rg, Some((&init, &beta)))
    }

    /// A `dot_general` through the GEMM runtime (`compile::gemm`). `lg` groups the lhs dims
    /// as [batch, free, contracting], `rg` the rhs dims as [batch, contracting, free] (free
    /// dims ascending, batch and contracting dims paired by position). Operands are
    /// converted to the compute dtype; an operand whose groups cannot each be merged into
    /// one strided dim of its row-major layout is first transposed into group order (so
    /// plain and transposed 2-D operands cost no copy). Emits `bufferization.to_buffer …
    /// read_only` for the operands, a `memref.alloc` for the `[batch…, m…, n…]` result,
    /// the call, and `bufferization.to_tensor … restrict writable`. With `update` = (`init`, a
    /// compute-dtype scalar SSA value `β`), an update `init + β·lhs·rhs` instead
    /// (`jaxrepl_gemm_acc_*`; `init` has `out`'s dtype, which is its compute dtype, and its
    /// shape or its trailing rhs-free dims, a row repeated over the others).
    pub(super) fn dot_gemm(&mut self, lhs: &Val, rhs: &Val, out: &ShapedArray, lg: [Vec<usize>; 3], rg: [Vec<usize>; 3], update: Option<(&Val, &str)>) -> Result<Val, Error> {
        let d = out.dtype;
        let c = compute_dtype(d);
        let (lhs, rhs) = (self.cast_tensor(lhs, c)?, self.cast_tensor(rhs, c)?);
        let (lhs, ls) = self.gemm_view(&lhs, lg)?;
        let (rhs, rs) = self.gemm_view(&rhs, rg)?;
        let size = |a: &ShapedArray, g: &[usize]| g.iter().map(|&i| a.shape[i]).product::<usize>();
        let (la, ra) = (lhs.0.aval().clone(), rhs.0.aval().clone());
        let (b, m, k, n) = (size(&la, &lhs.1[0]), size(&la, &lhs.1[1]), size(&la, &lhs.1[2]), size(&ra, &rhs.1[2]));
        let el = c.mlir();
        let um = format!("memref<*x{el}>");
        let (sym, sig) = match update {
            None => (format!("jaxrepl_gemm_{}", c.short_name()), format!("{um}, {um}, {um}{}", ", i64".repeat(10))),
            Some(_) => (format!("jaxrepl_gemm_acc_{}", c.short_name()), format!("{um}, {um}, {um}, {um}{}, {el}", ", i64".repeat(10))),
        };
        self.decls.insert(format!("func.func private @{sym}({sig})"));
        let mut args = vec![];
        let init = update.map(|(v, _)| v.clone());
        for a in [&lhs.0, &rhs.0].into_iter().chain(init.as_ref()) {
            let av = a.aval().clone();
            let t = self.tensor(a);
            let (tt, mt) = (av.mlir_tensor(), memref_of(&av.mlir_tensor()));
            let mr = self.e.op(&format!("bufferization.to_buffer {t} read_only : {tt} to {mt}"));
            args.push(self.e.op(&format!("memref.cast {mr} : {mt} to {um}")));
        }
        let acc = ShapedArray::new(&out.shape, c);
        let (at, amt) = (acc.mlir_tensor(), memref_of(&acc.mlir_tensor()));
        let om = self.e.op(&format!("memref.alloc() {{alignment = 64 : i64}} : {amt}"));
        let om_cast = self.e.op(&format!("memref.cast {om} : {amt} to {um}"));
        // Operand order: lhs, rhs, out[, init].
        args.insert(2, om_cast);
        for v in [b, m, n, k].iter().map(|&x| x as i64).chain(ls).chain(rs) {
            args.push(self.e.scalar_const(&v.to_string(), DType::I64));
        }
        if let Some((_, beta)) = update {
            args.push(beta.to_string());
        }
        self.e.line(&format!("func.call @{sym}({}) : ({sig}) -> ()", args.join(", ")));
        let r = self.e.op(&format!("bufferization.to_tensor {om} restrict writable : {amt} to {at}"));
        self.cast_tensor(&Val::T(r, acc), d)
    }

    /// `x` viewed for the GEMM runtime: the (possibly transposed) value, its dim groups, and
    /// the element stride of each group in its row-major layout (1 for an empty or all-ones
    /// group). A group merges into one strided dim when, ignoring size-1 dims, each dim's
    /// stride is the next one's stride times its size.
    #[allow(clippy::type_complexity)]
    fn gemm_view(&mut self, x: &Val, groups: [Vec<usize>; 3]) -> Result<((Val, [Vec<usize>; 3]), [i64; 3]), Error> {
        let a = x.aval().clone();
        let strides = row_major_strides(&a.shape);
        let merged = |g: &[usize]| -> Option<i64> {
            let dims: Vec<usize> = g.iter().copied().filter(|&i| a.shape[i] != 1).collect();
            let ok = dims.windows(2).all(|w| strides[w[0]] == strides[w[1]] * a.shape[w[1]] as i64);
            ok.then(|| dims.last().map_or(1, |&i| strides[i]))
        };
        if let (Some(s0), Some(s1), Some(s2)) = (merged(&groups[0]), merged(&groups[1]), merged(&groups[2])) {
            return Ok(((x.clone(), groups), [s0, s1, s2]));
        }
        let perm: Vec<usize> = groups.iter().flatten().copied().collect();
        let shape: Vec<usize> = perm.iter().map(|&p| a.shape[p]).collect();
        let t = self.transpose(x, &ShapedArray::new(&shape, a.dtype), &perm)?;
        let (n0, n1) = (groups[0].len(), groups[1].len());
        let ng = [(0..n0).collect::<Vec<_>>(), (n0..n0 + n1).collect(), (n0 + n1..perm.len()).collect()];
        let ts = row_major_strides(&shape);
        let st = |g: &[usize]| g.last().map_or(1, |&i| ts[i]);
        let s = [st(&ng[0]), st(&ng[1]), st(&ng[2])];
        Ok(((t, ng), s))
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

    /// `pure_callback`/`io_callback`: fires the callback as `callback` does, then fills
    /// one fresh `memref.alloc` per result with `jaxrepl_callback_result_<dtype>(id, index,
    /// memref<*xT>)` and reads it back as a tensor (`to_tensor … restrict writable`, as
    /// `dot_gemm` does). Empty results are `tensor.empty`.
    pub(super) fn host_callback(&mut self, id: CallbackId, ins: &[Val], results: &[ShapedArray]) -> Result<Vec<Val>, Error> {
        self.callback(id, ins)?;
        let idc = self.e.scalar_const(&(id as i64).to_string(), DType::I64);
        let mut outs = vec![];
        for (k, a) in results.iter().enumerate() {
            let a = a.strong();
            if a.size() == 0 {
                outs.push(Val::T(self.empty(&a), a));
                continue;
            }
            let el = a.dtype.mlir();
            let sym = format!("jaxrepl_callback_result_{}", a.dtype.short_name());
            self.decls.insert(format!("func.func private @{sym}(i64, i64, memref<*x{el}>)"));
            let (tt, mt) = (a.mlir_tensor(), memref_of(&a.mlir_tensor()));
            let m = self.e.op(&format!("memref.alloc() {{alignment = 64 : i64}} : {mt}"));
            let u = self.e.op(&format!("memref.cast {m} : {mt} to memref<*x{el}>"));
            let kc = self.e.scalar_const(&k.to_string(), DType::I64);
            self.e.line(&format!("func.call @{sym}({idc}, {kc}, {u}) : (i64, i64, memref<*x{el}>) -> ()"));
            let t = self.e.op(&format!("bufferization.to_tensor {m} restrict writable : {mt} to {tt}"));
            outs.push(Val::T(t, a));
        }
        Ok(outs)
    }
}

/// Reductions over trailing axes with at least this many elements per result (and at most
/// [`REDUCE_SPLIT_MAX_OUT`] results) are split into [`REDUCE_SPLIT_PARTS`] partial
/// reductions (see `Lowerer::reduce_split`), so that the compile stage can run them on
/// several threads. Smaller reductions keep one sequential loop (and their summation order).
pub const REDUCE_SPLIT_MIN: usize = 1 << 16;
/// The most results a split reduction may have (more rows are parallel enough as they are).
pub const REDUCE_SPLIT_MAX_OUT: usize = 64;
/// Number of partial results of a split reduction: a constant, so results are the same on
/// any number of threads.
pub const REDUCE_SPLIT_PARTS: usize = 16;

/// Lane sums of a float sum whose last axis has at least `4 * SUM_LANES_WIDE` elements
/// (`Lowerer::reduce_lanes`): four 512-bit vectors of f32 accumulate independently.
pub const SUM_LANES_WIDE: usize = 64;
/// Lane sums of a float sum whose last axis has `2 * SUM_LANES_NARROW` to
/// `4 * SUM_LANES_WIDE` elements (shorter ones add in order).
pub const SUM_LANES_NARROW: usize = 16;

/// Whether `p` over compute dtype `c` is a float sum (the one reduction whose result
/// depends on the order of its operations).
fn float_sum(p: &Primitive, c: DType) -> bool {
    matches!(p, Primitive::ReduceSum { .. }) && c.is_float()
}

/// Products with fewer multiply-adds than this stay in MLIR loops; larger f32/f64 ones go
/// to the GEMM runtime. Measured with `tests/src/bin/gemm_probe.rs` (see its docs); the
/// environment variable `JAXREPL_GEMM_MIN_FLOPS`, read once per process, overrides it for
/// such measurements (0: every float product through the runtime; a huge value: none).
pub(crate) const GEMM_MIN_FLOPS: usize = 32 * 32 * 32;

/// [`GEMM_MIN_FLOPS`] or its override from `JAXREPL_GEMM_MIN_FLOPS`.
/// Whether a `dot_general` of `la` and `ra` (contracting the lhs dims `lc`) into `out` runs
/// on the GEMM runtime: f32/f64 compute dtype, float operands, at least
/// [`gemm_min_flops`] multiply-adds.
pub(super) fn gemm_eligible(la: &ShapedArray, ra: &ShapedArray, out: &ShapedArray, lc: &[usize]) -> bool {
    let c = compute_dtype(out.dtype);
    let k: usize = lc.iter().filter_map(|&i| la.shape.get(i)).product();
    let flops = out.size().saturating_mul(k);
    matches!(c, DType::F32 | DType::F64) && la.dtype.is_float() && ra.dtype.is_float() && flops >= gemm_min_flops()
}

pub(super) fn gemm_min_flops() -> usize {
    static MIN: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *MIN.get_or_init(|| std::env::var("JAXREPL_GEMM_MIN_FLOPS").ok().and_then(|v| v.parse().ok()).unwrap_or(GEMM_MIN_FLOPS))
}

/// Row-major element strides of `shape`.
fn row_major_strides(shape: &[usize]) -> Vec<i64> {
    let mut s = vec![1i64; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1] as i64;
    }
    s
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
