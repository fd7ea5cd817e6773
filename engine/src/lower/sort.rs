//! Lowering of scans and sorts as `scf.for` loops over tensors (never unrolled):
//! cumulative reductions (a loop over the axis carrying the running value), `sort`
//! (a stable bubble sort per row, O(n²), correctness first) and `top_k` (a stable
//! descending sort of (value, index) pairs, then the first k).
//!
//! Sort order is JAX's: floats compare by total order after -0.0 becomes 0.0 and every
//! NaN the positive quiet NaN, so NaNs sort last; several keys compare lexicographically.

use super::array_ops::{combine, identity};
use super::emit::Emitter;
use super::scalar::{compute_dtype, to_compute};
use super::{malformed, Lowerer, Val};
use crate::error::Error;
use crate::ir::{CumOp, DType, ShapedArray};

impl Lowerer {
    /// `cumsum`/`cumprod`/`cummax`/`cummin` along `axis`.
    pub(super) fn cumulative(&mut self, op: CumOp, x: &Val, out: &ShapedArray, axis: usize, reverse: bool) -> Result<Val, Error> {
        let a = x.aval().clone();
        let d = a.dtype;
        let opn = match op {
            CumOp::Sum => "add",
            CumOp::Prod => "mul",
            CumOp::Max => "max",
            CumOp::Min => "min",
        };
        let rest: Vec<usize> = (0..a.ndim()).filter(|&i| i != axis).map(|i| a.shape[i]).collect();
        let ra = ShapedArray::new(&rest, d);
        let iv0 = self.e.scalar_const(&identity(opn, compute_dtype(d)), compute_dtype(d));
        let iv = super::scalar::from_compute(&mut self.e, &iv0, d);
        let fill = self.splat(&iv, &ra);
        let o0 = self.empty(out);
        let xt = self.tensor(x);
        let n = a.shape[axis];
        let (c0, c1, cn, cl) = (Self::cidx(&mut self.e, 0), Self::cidx(&mut self.e, 1), Self::cidx(&mut self.e, n as i64), Self::cidx(&mut self.e, n as i64 - 1));
        let (rt, ft) = (ra.mlir_tensor(), out.mlir_tensor());
        let res = self.e.fresh("");
        let (k, acc, o) = (self.e.fresh("k"), self.e.fresh("acc"), self.e.fresh("o"));
        self.e.line(&format!("{res}:2 = scf.for {k} = {c0} to {cn} step {c1} iter_args({acc} = {fill}, {o} = {o0}) -> ({rt}, {ft}) {{"));
        self.e.push();
        let kk = if reverse { self.e.op(&format!("arith.subi {cl}, {k} : index")) } else { k.clone() };
        let offs: Vec<String> = (0..a.ndim()).map(|i| if i == axis { kk.clone() } else { "0".into() }).collect();
        let sizes: Vec<String> = (0..a.ndim()).map(|i| if i == axis { "1".into() } else { a.shape[i].to_string() }).collect();
        let ones = vec!["1"; a.ndim()].join(", ");
        let s = self.e.op(&format!("tensor.extract_slice {xt}[{}] [{}] [{ones}] : {} to {rt}", offs.join(", "), sizes.join(", "), a.mlir_tensor()));
        let next = self.ew(&ra, &[Val::T(acc.clone(), ra.clone()), Val::T(s, ra.clone())], &mut |e, v| combine(e, opn, &v[0], &v[1], d))?;
        let nt = self.tensor(&next);
        let o2 = self.e.op(&format!("tensor.insert_slice {nt} into {o}[{}] [{}] [{ones}] : {rt} into {ft}", offs.join(", "), sizes.join(", ")));
        self.e.line(&format!("scf.yield {nt}, {o2} : {rt}, {ft}"));
        self.e.pop();
        self.e.line("}");
        Ok(Val::T(format!("{res}#1"), out.clone()))
    }

    /// Moves `dim` of `x` last and flattens the rest: a `[rows, n]` tensor.
    fn to_rows(&mut self, x: &Val, dim: usize) -> Result<(Val, usize, usize), Error> {
        let a = x.aval().clone();
        let mut perm: Vec<usize> = (0..a.ndim()).filter(|&i| i != dim).collect();
        perm.push(dim);
        let ts: Vec<usize> = perm.iter().map(|&i| a.shape[i]).collect();
        let t = self.transpose(x, &ShapedArray::new(&ts, a.dtype), &perm)?;
        let n = a.shape[dim];
        let rows = a.size() / n.max(1);
        let r = self.reshape(&t, &ShapedArray::new(&[rows, n], a.dtype))?;
        Ok((r, rows, n))
    }

    /// Inverse of `to_rows` for a result whose sorted dim has size `k`, giving `out`.
    fn from_rows(&mut self, r: &Val, out: &ShapedArray, dim: usize) -> Result<Val, Error> {
        let mut perm: Vec<usize> = (0..out.ndim()).filter(|&i| i != dim).collect();
        perm.push(dim);
        let ts: Vec<usize> = perm.iter().map(|&i| out.shape[i]).collect();
        let t = self.reshape(r, &ShapedArray::new(&ts, out.dtype))?;
        let mut inv = vec![0; perm.len()];
        for (i, &p) in perm.iter().enumerate() {
            inv[p] = i;
        }
        self.transpose(&t, out, &inv)
    }

    /// `sort` of `ins` along `dim` by the first `num_keys` operands (stable).
    pub(super) fn sort(&mut self, ins: &[Val], outs: &[ShapedArray], dim: usize, num_keys: usize, descending: bool) -> Result<Vec<Val>, Error> {
        if ins.len() != outs.len() {
            return Err(malformed(format!("sort of {} operands to {} results", ins.len(), outs.len())));
        }
        let mut rows = vec![];
        let (mut nr, mut n) = (0, 0);
        for v in ins {
            let (r, a, b) = self.to_rows(v, dim)?;
            rows.push(r);
            (nr, n) = (a, b);
        }
        let sorted = self.sort_rows(&rows, nr, n, num_keys, descending)?;
        sorted.iter().zip(outs).map(|(s, o)| self.from_rows(s, o, dim)).collect()
    }

    /// `top_k` along the last dim: values and int32 indices of the k largest, in order.
    pub(super) fn top_k(&mut self, x: &Val, outs: &[ShapedArray]) -> Result<Vec<Val>, Error> {
        let a = x.aval().clone();
        let dim = a.ndim() - 1;
        let k = outs[0].shape[dim];
        let (r, nr, n) = self.to_rows(x, dim)?;
        let ia = ShapedArray::new(&[nr, n], DType::I32);
        let iota = self.ew(&ia, &[], &mut |e, _| {
            let i = e.op("linalg.index 1 : index");
            Ok(e.op(&format!("arith.index_cast {i} : index to i32")))
        })?;
        let s = self.sort_rows(&[r, iota], nr, n, 1, true)?;
        let mut res = vec![];
        for (v, o) in s.iter().zip(outs) {
            let part = ShapedArray::new(&[nr, k], o.dtype);
            let p = self.static_slice(v, &part, &[0, 0], &[1, 1])?;
            res.push(self.from_rows(&p, o, dim)?);
        }
        Ok(res)
    }

    /// Stable bubble sort of `[rows, n]` tensors by the first `num_keys` of them.
    fn sort_rows(&mut self, ops: &[Val], rows: usize, n: usize, num_keys: usize, descending: bool) -> Result<Vec<Val>, Error> {
        if n <= 1 || rows == 0 {
            return Ok(ops.to_vec());
        }
        let ts: Vec<String> = ops.iter().map(|v| v.aval().mlir_tensor()).collect();
        let tys = ts.join(", ");
        let init: Vec<String> = ops.iter().map(|v| self.tensor(v)).collect();
        let (c0, c1, cr, cn, cn1) = (
            Self::cidx(&mut self.e, 0),
            Self::cidx(&mut self.e, 1),
            Self::cidx(&mut self.e, rows as i64),
            Self::cidx(&mut self.e, n as i64),
            Self::cidx(&mut self.e, n as i64 - 1),
        );
        let m = ops.len();
        let level = |this: &mut Lowerer, iv: &str, lo: &str, hi: &str, args: &[String]| -> (String, Vec<String>) {
            let res = this.e.fresh("");
            let its: Vec<String> = (0..m).map(|_| this.e.fresh("t")).collect();
            let binds: Vec<String> = its.iter().zip(args).map(|(a, b)| format!("{a} = {b}")).collect();
            this.e.line(&format!("{res}:{m} = scf.for {iv} = {lo} to {hi} step {c1} iter_args({}) -> ({tys}) {{", binds.join(", ")));
            this.e.push();
            (res, its)
        };
        let (r_iv, i_iv, j_iv) = (self.e.fresh("r"), self.e.fresh("i"), self.e.fresh("j"));
        let (r_res, r_its) = level(self, &r_iv, &c0, &cr, &init);
        let (i_res, i_its) = level(self, &i_iv, &c0, &cn, &r_its);
        let ub = self.e.op(&format!("arith.subi {cn1}, {i_iv} : index"));
        let (j_res, j_its) = level(self, &j_iv, &c0, &ub, &i_its);
        let j1 = self.e.op(&format!("arith.addi {j_iv}, {c1} : index"));
        let mut a_vals = vec![];
        let mut b_vals = vec![];
        for (t, ty) in j_its.iter().zip(&ts) {
            a_vals.push(self.e.op(&format!("tensor.extract {t}[{r_iv}, {j_iv}] : {ty}")));
            b_vals.push(self.e.op(&format!("tensor.extract {t}[{r_iv}, {j1}] : {ty}")));
        }
        // swap when b < a (ascending) or a < b (descending), lexicographic over keys.
        let mut swap: Option<String> = None;
        for key in (0..num_keys).rev() {
            let d = ops[key].aval().dtype;
            let (ka, kb) = (sort_key(&mut self.e, &a_vals[key], d), sort_key(&mut self.e, &b_vals[key], d));
            let kt = key_type(d);
            let pred = if d.is_unsigned() || d.is_bool() { "ult" } else { "slt" };
            let (x, y) = if descending { (&ka, &kb) } else { (&kb, &ka) };
            let lt = self.e.op(&format!("arith.cmpi {pred}, {x}, {y} : {kt}"));
            swap = Some(match swap {
                None => lt,
                Some(rest) => {
                    let eq = self.e.op(&format!("arith.cmpi eq, {x}, {y} : {kt}"));
                    let t = self.e.op(&format!("arith.andi {eq}, {rest} : i1"));
                    self.e.op(&format!("arith.ori {lt}, {t} : i1"))
                }
            });
        }
        let swap = swap.ok_or_else(|| malformed("sort needs at least one key".into()))?;
        let mut new = vec![];
        for (k, (t, ty)) in j_its.iter().zip(&ts).enumerate() {
            let el = ops[k].aval().dtype.mlir();
            let na = self.e.op(&format!("arith.select {swap}, {}, {} : {el}", b_vals[k], a_vals[k]));
            let nb = self.e.op(&format!("arith.select {swap}, {}, {} : {el}", a_vals[k], b_vals[k]));
            let t1 = self.e.op(&format!("tensor.insert {na} into {t}[{r_iv}, {j_iv}] : {ty}"));
            new.push(self.e.op(&format!("tensor.insert {nb} into {t1}[{r_iv}, {j1}] : {ty}")));
        }
        let results = |res: &str| -> Vec<String> { (0..m).map(|k| format!("{res}#{k}")).collect() };
        for (inner, _) in [(new, ()), (results(&j_res), ()), (results(&i_res), ())] {
            self.e.line(&format!("scf.yield {} : {tys}", inner.join(", ")));
            self.e.pop();
            self.e.line("}");
        }
        Ok(results(&r_res).into_iter().zip(ops).map(|(n, v)| Val::T(n, v.aval().clone())).collect())
    }
}

/// The integer type sort keys of dtype `d` compare in.
fn key_type(d: DType) -> &'static str {
    match compute_dtype(d) {
        DType::F32 => "i32",
        DType::F64 => "i64",
        c => c.mlir(),
    }
}

/// A signed integer whose order is JAX's sort order of the float `x` (ints are themselves).
fn sort_key(e: &mut Emitter, x: &str, d: DType) -> String {
    if !d.is_float() {
        return x.to_string();
    }
    let c = compute_dtype(d);
    let (ft, it) = (c.mlir(), key_type(d));
    let bits = if c == DType::F64 { 64 } else { 32 };
    let xc = to_compute(e, x, d);
    let z = e.scalar_const(&super::emit::float_lit(0.0, c), c);
    let nan = e.scalar_const(&super::emit::float_lit(f64::NAN, c), c);
    let isz = e.op(&format!("arith.cmpf oeq, {xc}, {z} : {ft}"));
    let x1 = e.op(&format!("arith.select {isz}, {z}, {xc} : {ft}"));
    let isn = e.op(&format!("arith.cmpf uno, {xc}, {xc} : {ft}"));
    let x2 = e.op(&format!("arith.select {isn}, {nan}, {x1} : {ft}"));
    let i = e.op(&format!("arith.bitcast {x2} : {ft} to {it}"));
    let sh = e.scalar_const(&(bits - 1).to_string(), if bits == 64 { DType::I64 } else { DType::I32 });
    let s = e.op(&format!("arith.shrsi {i}, {sh} : {it}"));
    let max = e.scalar_const(&(if bits == 64 { i64::MAX } else { i32::MAX as i64 }).to_string(), if bits == 64 { DType::I64 } else { DType::I32 });
    let mask = e.op(&format!("arith.andi {s}, {max} : {it}"));
    e.op(&format!("arith.xori {i}, {mask} : {it}"))
}
