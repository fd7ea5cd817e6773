//! Lowering of the array-language primitives (issue 3): the dispatcher `array_op` (one
//! output, called by `Lowerer::prim` for primitives it has no rule for) and
//! `array_op_multi` (`sort`, `top_k`, `split`), plus the scalar semantics of the new
//! elementwise primitives. Shapes are in `shape_ops.rs`, gather/scatter in
//! `indexing.rs`, scans and sorts in `sort.rs`, convolution and pooling in `conv.rs`.
//!
//! Invariants: as in `structured.rs`, results have exactly the aval the jaxpr gives, and
//! every index computed at run time is clamped into range before a `tensor.extract` or
//! `tensor.insert` (out-of-range semantics are selects around in-range accesses).

use super::emit::{float_lit, int_lit, Emitter};
use super::scalar::{compute_dtype, from_compute, to_compute};
use super::{malformed, Lowerer, Val};
use crate::error::Error;
use crate::ir::{DType, Primitive, ShapedArray, Var};

impl Lowerer {
    /// One single-output issue-3 primitive with a non-empty result `out`.
    pub(super) fn array_op(&mut self, p: &Primitive, ins: &[Val], out: &ShapedArray) -> Result<Val, Error> {
        use Primitive::*;
        let arity = |n: usize| -> Result<(), Error> {
            if ins.len() == n { Ok(()) } else { Err(malformed(format!("`{}` takes {n} operands, got {}", p.name(), ins.len()))) }
        };
        match p {
            Sign | Floor | Ceil | Round { .. } | IsFinite | Log1p | Expm1 | Logistic | Erf | IntegerPow { .. }
            | ReducePrecision { .. } => {
                arity(1)?;
                let d = ins[0].aval().dtype;
                self.ew(out, ins, &mut |e, a| unary(e, p, &a[0], d))
            }
            ReduceProd { axes } | ReduceAnd { axes } | ReduceOr { axes } => {
                arity(1)?;
                self.reduce_generic(p, &ins[0], out, axes)
            }
            ArgMax { axes, .. } | ArgMin { axes, .. } => {
                arity(1)?;
                self.argminmax(matches!(p, ArgMax { .. }), &ins[0], out, axes[0])
            }
            Cumulative { op, axis, reverse } => {
                arity(1)?;
                self.cumulative(*op, &ins[0], out, *axis, *reverse)
            }
            Concatenate { dimension } => self.concatenate(ins, out, *dimension),
            Pad { padding_config } => {
                arity(2)?;
                self.pad(&ins[0], &ins[1], out, padding_config)
            }
            Rev { dimensions } => {
                arity(1)?;
                self.rev(&ins[0], out, dimensions)
            }
            Squeeze { .. } => {
                arity(1)?;
                self.reshape(&ins[0], out)
            }
            Slice { start_indices, strides, .. } => {
                arity(1)?;
                let st = strides.clone().unwrap_or(vec![1; out.ndim()]);
                self.static_slice(&ins[0], out, start_indices, &st)
            }
            DynamicSlice { .. } => self.dynamic_slice(&ins[0], &ins[1..], out),
            DynamicUpdateSlice => self.dynamic_update_slice(&ins[0], &ins[1], &ins[2..], out),
            Gather { dimension_numbers, slice_sizes, mode, fill_value, .. } => {
                arity(2)?;
                self.gather(&ins[0], &ins[1], out, dimension_numbers, slice_sizes, *mode, *fill_value)
            }
            Scatter { op, dimension_numbers, mode, .. } => {
                arity(3)?;
                self.scatter(*op, &ins[0], &ins[1], &ins[2], out, dimension_numbers, *mode)
            }
            ConvGeneralDilated { .. } => {
                arity(2)?;
                self.conv(p, &ins[0], &ins[1], out)
            }
            ReduceWindow { .. } => {
                arity(1)?;
                self.reduce_window(p, &ins[0], out)
            }
            _ => Err(Error::compile(format!("lowering: no rule for `{}`", p.name()))),
        }
    }

    /// A multi-output issue-3 primitive (`sort`, `top_k`, `split`).
    pub(super) fn array_op_multi(&mut self, p: &Primitive, ins: &[Val], outs: &[Var]) -> Result<Vec<Val>, Error> {
        let avals: Vec<ShapedArray> = outs.iter().map(|v| v.aval.strong()).collect();
        if avals.iter().all(|a| a.size() == 0) {
            return Ok(avals.iter().map(|a| Val::T(self.empty(a), a.clone())).collect());
        }
        match p {
            Primitive::Sort { dimension, num_keys, .. } => self.sort(ins, &avals, *dimension, *num_keys, false),
            Primitive::TopK { .. } => self.top_k(&ins[0], &avals),
            Primitive::Split { sizes, axis } => {
                let mut res = vec![];
                let mut start = 0;
                for (a, &s) in avals.iter().zip(sizes) {
                    let mut st = vec![0; a.ndim()];
                    st[*axis] = start;
                    start += s;
                    res.push(if a.size() == 0 { Val::T(self.empty(a), a.clone()) } else { self.static_slice(&ins[0], a, &st, &vec![1; a.ndim()])? });
                }
                Ok(res)
            }
            _ => Err(Error::compile(format!("lowering: no multi-output rule for `{}`", p.name()))),
        }
    }

    /// The scalar SSA value of a 0-d value (`tensor.extract` of a 0-d tensor).
    pub(super) fn scalar_of(&mut self, v: &Val) -> String {
        match v {
            Val::S(n, _) => n.clone(),
            Val::T(n, a) => self.e.op(&format!("tensor.extract {n}[] : {}", a.mlir_tensor())),
        }
    }

    /// An integer scalar as an `index`, sign-extended.
    pub(super) fn to_index(e: &mut Emitter, s: &str, d: DType) -> String {
        if d.is_unsigned() || d.is_bool() {
            e.op(&format!("arith.index_castui {s} : {} to index", d.mlir()))
        } else {
            e.op(&format!("arith.index_cast {s} : {} to index", d.mlir()))
        }
    }

    /// An `index` constant.
    pub(super) fn cidx(e: &mut Emitter, v: i64) -> String {
        e.op(&format!("arith.constant {v} : index"))
    }

    /// Clamps an `index` value into `[lo, hi]` (signed).
    pub(super) fn clamp_idx(e: &mut Emitter, x: &str, lo: i64, hi: i64) -> String {
        let l = Self::cidx(e, lo);
        let h = Self::cidx(e, hi.max(lo));
        let a = e.op(&format!("arith.maxsi {x}, {l} : index"));
        e.op(&format!("arith.minsi {a}, {h} : index"))
    }
}

/// The identity of a combining op in compute dtype `c`: `add`/`mul`/`max`/`min`.
pub(super) fn identity(op: &str, c: DType) -> String {
    let bits = if c.is_bool() { 1 } else { 8 * c.size_bytes() as u32 };
    match (op, c.is_float()) {
        (_, _) if c.is_bool() => if matches!(op, "mul" | "min") { "true".into() } else { "false".into() },
        ("add", true) => float_lit(0.0, c),
        ("add", false) => int_lit(0, c),
        ("mul", true) => float_lit(1.0, c),
        ("mul", false) => int_lit(1, c),
        ("max", true) => float_lit(f64::NEG_INFINITY, c),
        ("min", true) => float_lit(f64::INFINITY, c),
        ("max", false) if c.is_unsigned() => int_lit(0, c),
        ("min", false) if c.is_unsigned() => int_lit(-1, c),
        ("max", false) => int_lit(i64::MIN >> (64 - bits), c),
        _ => int_lit(i64::MAX >> (64 - bits), c),
    }
}

/// `op` ∈ add/mul/max/min on scalars of dtype `d` (halves compute in f32 and round).
pub(super) fn combine(e: &mut Emitter, op: &str, x: &str, y: &str, d: DType) -> Result<String, Error> {
    let p = match op {
        "add" => Primitive::Add,
        "mul" => Primitive::Mul,
        "max" => Primitive::Max,
        _ => Primitive::Min,
    };
    super::scalar::binary(e, &p, x, y, d)
}

fn fconst(e: &mut Emitter, v: f64, c: DType) -> String {
    e.scalar_const(&float_lit(v, c), c)
}

/// One new unary elementwise primitive on a scalar `x` of dtype `d`.
pub(super) fn unary(e: &mut Emitter, p: &Primitive, x: &str, d: DType) -> Result<String, Error> {
    use Primitive::*;
    let c = compute_dtype(d);
    let t = c.mlir();
    if let IntegerPow { y } = p {
        let xc = to_compute(e, x, d);
        let mut acc: Option<String> = None;
        let mut base = xc.clone();
        let mut n = y.unsigned_abs();
        while n > 0 {
            if n & 1 == 1 {
                acc = Some(match acc {
                    None => base.clone(),
                    Some(a) => super::scalar::binary(e, &Primitive::Mul, &a, &base, c)?,
                });
            }
            n >>= 1;
            if n > 0 {
                base = super::scalar::binary(e, &Primitive::Mul, &base, &base, c)?;
            }
        }
        let one = if c.is_float() { float_lit(1.0, c) } else { int_lit(1, c) };
        let r = match acc {
            Some(a) => a,
            None => e.scalar_const(&one, c),
        };
        let r = if *y < 0 {
            let o = e.scalar_const(&one, c);
            e.op(&format!("arith.divf {o}, {r} : {t}"))
        } else {
            r
        };
        return Ok(from_compute(e, &r, d));
    }
    if !d.is_float() {
        return match p {
            Sign if d.is_unsigned() => {
                let z = e.scalar_const("0", d);
                let nz = e.op(&format!("arith.cmpi ne, {x}, {z} : {t}"));
                Ok(e.op(&format!("arith.extui {nz} : i1 to {t}")))
            }
            Sign => {
                let z = e.scalar_const("0", d);
                let one = e.scalar_const("1", d);
                let m1 = e.scalar_const("-1", d);
                let gt = e.op(&format!("arith.cmpi sgt, {x}, {z} : {t}"));
                let lt = e.op(&format!("arith.cmpi slt, {x}, {z} : {t}"));
                let a = e.op(&format!("arith.select {lt}, {m1}, {z} : {t}"));
                Ok(e.op(&format!("arith.select {gt}, {one}, {a} : {t}")))
            }
            _ => Err(Error::compile(format!("lowering: `{}` is not defined for dtype {}", p.name(), d.name()))),
        };
    }
    let xc = to_compute(e, x, d);
    if c == DType::F32 {
        if let Some(r) = super::approx::unary_for(e, p, &xc, d) {
            return Ok(from_compute(e, &r, d));
        }
    }
    let r = match p {
        Sign => {
            let one = fconst(e, 1.0, c);
            let s = e.op(&format!("math.copysign {one}, {xc} : {t}"));
            let z = fconst(e, 0.0, c);
            let keep = e.op(&format!("arith.cmpf ueq, {xc}, {z} : {t}")); // zero or NaN: x itself
            e.op(&format!("arith.select {keep}, {xc}, {s} : {t}"))
        }
        Floor => e.op(&format!("math.floor {xc} : {t}")),
        Ceil => e.op(&format!("math.ceil {xc} : {t}")),
        Round { rounding_method: 0 } => e.op(&format!("math.round {xc} : {t}")),
        Round { .. } => e.op(&format!("math.roundeven {xc} : {t}")),
        IsFinite => {
            let a = e.op(&format!("math.absf {xc} : {t}"));
            let inf = fconst(e, f64::INFINITY, c);
            return Ok(e.op(&format!("arith.cmpf one, {a}, {inf} : {t}")));
        }
        Log1p => e.op(&format!("math.log1p {xc} : {t}")),
        Expm1 => e.op(&format!("math.expm1 {xc} : {t}")),
        Erf => e.op(&format!("math.erf {xc} : {t}")),
        Logistic => {
            let n = e.op(&format!("arith.negf {xc} : {t}"));
            let ex = e.op(&format!("math.exp {n} : {t}"));
            let one = fconst(e, 1.0, c);
            let den = e.op(&format!("arith.addf {one}, {ex} : {t}"));
            e.op(&format!("arith.divf {one}, {den} : {t}"))
        }
        ReducePrecision { exponent_bits, mantissa_bits } => reduce_precision(e, &xc, c, *exponent_bits, *mantissa_bits),
        _ => return Err(Error::compile(format!("lowering: `{}` has no scalar rule", p.name()))),
    };
    Ok(from_compute(e, &r, d))
}

/// XLA's `reduce_precision` on an f32/f64 scalar: round the mantissa to nearest even at
/// `mb` bits, then flush exponents out of range of `eb` bits to ±inf / ±0; NaN stays NaN.
fn reduce_precision(e: &mut Emitter, x: &str, c: DType, eb: u32, mb: u32) -> String {
    let (bits, src_m, src_e) = if c == DType::F64 { (64u32, 52u32, 11u32) } else { (32, 23, 8) };
    let it = format!("i{bits}");
    let ft = c.mlir();
    let k = |e: &mut Emitter, v: i128| e.op(&format!("arith.constant {} : {it}", if bits == 32 { (v as u32 as i32) as i64 } else { v as u64 as i64 }));
    let mut xb = e.op(&format!("arith.bitcast {x} : {ft} to {it}"));
    if mb < src_m {
        let shift = src_m - mb;
        let last = k(e, 1i128 << shift);
        let sh = k(e, shift as i128);
        let bias = k(e, (1i128 << (shift - 1)) - 1);
        let trunc = k(e, !((1i128 << shift) - 1));
        let l = e.op(&format!("arith.andi {xb}, {last} : {it}"));
        let lb = e.op(&format!("arith.shrui {l}, {sh} : {it}"));
        let rb = e.op(&format!("arith.addi {lb}, {bias} : {it}"));
        let s = e.op(&format!("arith.addi {xb}, {rb} : {it}"));
        xb = e.op(&format!("arith.andi {s}, {trunc} : {it}"));
    }
    if eb < src_e {
        let exp_mask = k(e, ((1i128 << src_e) - 1) << src_m);
        let sign_mask = k(e, 1i128 << (bits - 1));
        let bias = (1i128 << (src_e - 1)) - 1;
        let rbias = (1i128 << (eb - 1)) - 1;
        let maxe = k(e, (bias + rbias) << src_m);
        let mine = k(e, (bias - rbias) << src_m);
        let xe = e.op(&format!("arith.andi {xb}, {exp_mask} : {it}"));
        let over = e.op(&format!("arith.cmpi ugt, {xe}, {maxe} : {it}"));
        let under = e.op(&format!("arith.cmpi ule, {xe}, {mine} : {it}"));
        let sz = e.op(&format!("arith.andi {xb}, {sign_mask} : {it}"));
        let si = e.op(&format!("arith.ori {sz}, {exp_mask} : {it}"));
        let a = e.op(&format!("arith.select {over}, {si}, {xb} : {it}"));
        xb = e.op(&format!("arith.select {under}, {sz}, {a} : {it}"));
    }
    let r = e.op(&format!("arith.bitcast {xb} : {it} to {ft}"));
    let nan = e.op(&format!("arith.cmpf uno, {x}, {x} : {ft}"));
    e.op(&format!("arith.select {nan}, {x}, {r} : {ft}"))
}
