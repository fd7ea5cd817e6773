//! Scalar semantics of the elementwise primitives: the arith/math ops written inside
//! `linalg.generic` bodies (and reused by reductions, contractions and casts).
//!
//! Invariant: results follow XLA's CPU semantics for every dtype of `ir::DType`:
//! f16/bf16 compute in f32 and round back; integer division by zero gives -1 (`rem`: x)
//! and `MIN / -1` gives `MIN` instead of trapping; integer `pow` with a negative exponent
//! truncates (0 unless the base is ±1); float→int casts truncate toward zero
//! and saturate (NaN → 0); comparisons on floats are ordered except `ne` (`une`);
//! `max`/`min` on floats propagate NaN.

use super::emit::{float_lit, int_lit, Emitter};
use crate::error::Error;
use crate::ir::{DType, Primitive};

/// The type arithmetic is done in: f32 for f16/bf16, the dtype itself otherwise.
pub(crate) fn compute_dtype(d: DType) -> DType {
    match d {
        DType::F16 | DType::BF16 => DType::F32,
        _ => d,
    }
}

fn bits(d: DType) -> u32 {
    if d == DType::Bool { 1 } else { 8 * d.size_bytes() as u32 }
}

fn unsupported(prim: &Primitive, d: DType) -> Error {
    Error::compile(format!("lowering: `{}` is not defined for dtype {}", prim.name(), d.name()))
}

/// Widens a half value to f32 (identity for other dtypes).
pub(crate) fn to_compute(e: &mut Emitter, x: &str, d: DType) -> String {
    match d {
        DType::F16 | DType::BF16 => e.op(&format!("arith.extf {x} : {} to f32", d.mlir())),
        _ => x.to_string(),
    }
}

/// Rounds an f32 value back to a half dtype (identity for other dtypes).
pub(crate) fn from_compute(e: &mut Emitter, x: &str, d: DType) -> String {
    match d {
        DType::F16 | DType::BF16 => e.op(&format!("arith.truncf {x} : f32 to {}", d.mlir())),
        _ => x.to_string(),
    }
}

/// One unary elementwise primitive on a scalar `x` of dtype `d`; returns the result name.
pub(crate) fn unary(e: &mut Emitter, prim: &Primitive, x: &str, d: DType) -> Result<String, Error> {
    use Primitive::*;
    let c = compute_dtype(d);
    let t = c.mlir();
    if d.is_float() {
        let xc = to_compute(e, x, d);
        if c == DType::F32 {
            if let Some(r) = super::approx::unary_for(e, prim, &xc, d) {
                return Ok(from_compute(e, &r, d));
            }
        }
        if matches!(prim, Tan) && c != d {
            // f16/bf16 (see `approx::unary_for`): libm's f32 tan.
            let r = e.op(&format!("math.tan {xc} : {t}"));
            return Ok(from_compute(e, &r, d));
        }
        if matches!(prim, Tan) {
            // tan = sin / cos in f64 (f32 has its own approximation above).
            let s = unary(e, &Sin, &xc, c)?;
            let co = unary(e, &Cos, &xc, c)?;
            let r = e.op(&format!("arith.divf {s}, {co} : {t}"));
            return Ok(from_compute(e, &r, d));
        }
        let r = match prim {
            Neg => e.op(&format!("arith.negf {xc} : {t}")),
            Exp => e.op(&format!("math.exp {xc} : {t}")),
            Log => e.op(&format!("math.log {xc} : {t}")),
            Sin => e.op(&format!("math.sin {xc} : {t}")),
            Cos => e.op(&format!("math.cos {xc} : {t}")),
            Tanh => e.op(&format!("math.tanh {xc} : {t}")),
            Sqrt => e.op(&format!("math.sqrt {xc} : {t}")),
            Abs => e.op(&format!("math.absf {xc} : {t}")),
            ErfInv => super::bits::erf_inv(e, &xc, c),
            _ => return Err(unsupported(prim, d)),
        };
        return Ok(from_compute(e, &r, d));
    }
    match prim {
        Not => {
            let ones = e.scalar_const(&int_lit(-1, d), d);
            Ok(e.op(&format!("arith.xori {x}, {ones} : {t}")))
        }
        Neg if d.is_int() => {
            let z = e.scalar_const("0", d);
            Ok(e.op(&format!("arith.subi {z}, {x} : {t}")))
        }
        Abs if d.is_unsigned() => Ok(x.to_string()),
        Abs if d.is_int() => Ok(e.op(&format!("math.absi {x} : {t}"))),
        _ => Err(unsupported(prim, d)),
    }
}

/// One binary elementwise primitive on scalars of dtype `d`; comparisons return `i1`.
pub(crate) fn binary(e: &mut Emitter, prim: &Primitive, x: &str, y: &str, d: DType) -> Result<String, Error> {
    use Primitive::*;
    if matches!(prim, NextAfter) && d.is_float() {
        return Ok(super::bits::nextafter(e, x, y, d));
    }
    if d.is_float() {
        let c = compute_dtype(d);
        let t = c.mlir();
        let (xc, yc) = (to_compute(e, x, d), to_compute(e, y, d));
        let cmp = |e: &mut Emitter, p: &str| e.op(&format!("arith.cmpf {p}, {xc}, {yc} : {t}"));
        let r = match prim {
            Add | AddAny => e.op(&format!("arith.addf {xc}, {yc} : {t}")),
            Sub => e.op(&format!("arith.subf {xc}, {yc} : {t}")),
            Mul => e.op(&format!("arith.mulf {xc}, {yc} : {t}")),
            Div => e.op(&format!("arith.divf {xc}, {yc} : {t}")),
            Rem => e.op(&format!("arith.remf {xc}, {yc} : {t}")),
            Pow => e.op(&format!("math.powf {xc}, {yc} : {t}")),
            Max => e.op(&format!("arith.maximumf {xc}, {yc} : {t}")),
            Min => e.op(&format!("arith.minimumf {xc}, {yc} : {t}")),
            Eq => return Ok(cmp(e, "oeq")),
            Ne => return Ok(cmp(e, "une")),
            Lt => return Ok(cmp(e, "olt")),
            Le => return Ok(cmp(e, "ole")),
            Gt => return Ok(cmp(e, "ogt")),
            Ge => return Ok(cmp(e, "oge")),
            _ => return Err(unsupported(prim, d)),
        };
        return Ok(from_compute(e, &r, d));
    }
    let t = d.mlir();
    let b = d.is_bool();
    let u = d.is_unsigned() || b;
    let cmp = |e: &mut Emitter, p: &str| e.op(&format!("arith.cmpi {p}, {x}, {y} : {t}"));
    Ok(match prim {
        Add | AddAny if b => e.op(&format!("arith.ori {x}, {y} : {t}")),
        Mul | Min | And if b => e.op(&format!("arith.andi {x}, {y} : {t}")),
        Max | Or if b => e.op(&format!("arith.ori {x}, {y} : {t}")),
        Add | AddAny => e.op(&format!("arith.addi {x}, {y} : {t}")),
        Sub if !b => e.op(&format!("arith.subi {x}, {y} : {t}")),
        Mul => e.op(&format!("arith.muli {x}, {y} : {t}")),
        Div | Rem if !b => int_div(e, prim, x, y, d),
        Pow if !b => int_pow(e, x, y, d),
        Max => e.op(&format!("arith.{} {x}, {y} : {t}", if u { "maxui" } else { "maxsi" })),
        Min => e.op(&format!("arith.{} {x}, {y} : {t}", if u { "minui" } else { "minsi" })),
        And => e.op(&format!("arith.andi {x}, {y} : {t}")),
        Xor => e.op(&format!("arith.xori {x}, {y} : {t}")),
        ShiftLeft | ShiftRightLogical | ShiftRightArithmetic if !b => super::bits::shift(e, prim, x, y, d)?,
        Or => e.op(&format!("arith.ori {x}, {y} : {t}")),
        Eq => cmp(e, "eq"),
        Ne => cmp(e, "ne"),
        Lt => cmp(e, if u { "ult" } else { "slt" }),
        Le => cmp(e, if u { "ule" } else { "sle" }),
        Gt => cmp(e, if u { "ugt" } else { "sgt" }),
        Ge => cmp(e, if u { "uge" } else { "sge" }),
        _ => return Err(unsupported(prim, d)),
    })
}

/// Integer `div`/`rem` that never traps: y == 0 gives -1 (div) or x (rem); MIN / -1
/// divides by 1 instead, giving MIN (div) and 0 (rem), as XLA does.
fn int_div(e: &mut Emitter, prim: &Primitive, x: &str, y: &str, d: DType) -> String {
    let t = d.mlir();
    let zero = e.scalar_const("0", d);
    let one = e.scalar_const("1", d);
    let yz = e.op(&format!("arith.cmpi eq, {y}, {zero} : {t}"));
    let bad = if d.is_unsigned() {
        yz.clone()
    } else {
        let m1 = e.scalar_const("-1", d);
        let min = e.scalar_const(&int_lit(i64::MIN >> (64 - bits(d)), d), d);
        let ym1 = e.op(&format!("arith.cmpi eq, {y}, {m1} : {t}"));
        let xmin = e.op(&format!("arith.cmpi eq, {x}, {min} : {t}"));
        let ovf = e.op(&format!("arith.andi {xmin}, {ym1} : i1"));
        e.op(&format!("arith.ori {yz}, {ovf} : i1"))
    };
    let sy = e.op(&format!("arith.select {bad}, {one}, {y} : {t}"));
    let (opname, on_zero) = match (prim, d.is_unsigned()) {
        (Primitive::Div, false) => ("divsi", None),
        (Primitive::Div, true) => ("divui", None),
        (_, false) => ("remsi", Some(x)),
        (_, true) => ("remui", Some(x)),
    };
    let q = e.op(&format!("arith.{opname} {x}, {sy} : {t}"));
    let z = match on_zero {
        Some(x) => x.to_string(),
        None => e.scalar_const("-1", d),
    };
    e.op(&format!("arith.select {yz}, {z}, {q} : {t}"))
}

/// Integer `pow`. Negative exponents truncate like integer division: 1 for x == 1,
/// ±1 for x == -1 (by parity), 0 otherwise (0 too for x == 0, where `math.ipowi`'s
/// expansion would divide by zero).
fn int_pow(e: &mut Emitter, x: &str, y: &str, d: DType) -> String {
    let t = d.mlir();
    let zero = e.scalar_const("0", d);
    let one = e.scalar_const("1", d);
    let m1 = e.scalar_const("-1", d);
    let neg = e.op(&format!("arith.cmpi slt, {y}, {zero} : {t}"));
    let ys = e.op(&format!("arith.select {neg}, {zero}, {y} : {t}"));
    let p = e.op(&format!("math.ipowi {x}, {ys} : {t}"));
    let low = e.op(&format!("arith.andi {y}, {one} : {t}"));
    let odd = e.op(&format!("arith.cmpi ne, {low}, {zero} : {t}"));
    let sign = e.op(&format!("arith.select {odd}, {m1}, {one} : {t}"));
    let xm1 = e.op(&format!("arith.cmpi eq, {x}, {m1} : {t}"));
    let x1 = e.op(&format!("arith.cmpi eq, {x}, {one} : {t}"));
    let r1 = e.op(&format!("arith.select {xm1}, {sign}, {zero} : {t}"));
    let r2 = e.op(&format!("arith.select {x1}, {one}, {r1} : {t}"));
    e.op(&format!("arith.select {neg}, {r2}, {p} : {t}"))
}

/// `select_n(which, cases...)` on scalars: `which` is i1 (false → case 0) or an integer
/// index (out-of-range indices take the last case).
pub(crate) fn select_n(e: &mut Emitter, which: &str, wd: DType, cases: &[String], d: DType) -> String {
    let t = d.mlir();
    let n = cases.len();
    if n == 1 {
        return cases[0].clone();
    }
    if wd.is_bool() {
        return e.op(&format!("arith.select {which}, {}, {} : {t}", cases[1], cases[0]));
    }
    let mut r = cases[n - 1].clone();
    for i in (0..n - 1).rev() {
        let k = e.scalar_const(&i.to_string(), wd);
        let c = e.op(&format!("arith.cmpi eq, {which}, {k} : {}", wd.mlir()));
        r = e.op(&format!("arith.select {c}, {}, {r} : {t}", cases[i]));
    }
    r
}

/// `convert_element_type` of a scalar from `from` to `to` (numpy semantics; float→int
/// truncates and saturates, NaN → 0; anything→bool is `!= 0`).
pub(crate) fn convert(e: &mut Emitter, x: &str, from: DType, to: DType) -> String {
    if from == to || (from.mlir() == to.mlir() && !from.is_float()) {
        return x.to_string();
    }
    let (fc, tc) = (compute_dtype(from), compute_dtype(to));
    if to.is_bool() {
        if from.is_float() {
            let xc = to_compute(e, x, from);
            let z = e.scalar_const(&float_lit(0.0, fc), fc);
            return e.op(&format!("arith.cmpf une, {xc}, {z} : {}", fc.mlir()));
        }
        let z = e.scalar_const("0", from);
        return e.op(&format!("arith.cmpi ne, {x}, {z} : {}", from.mlir()));
    }
    if !from.is_float() && !to.is_float() {
        let (bf, bt) = (bits(from), bits(to));
        return if bf == bt {
            x.to_string()
        } else if bt < bf {
            e.op(&format!("arith.trunci {x} : {} to {}", from.mlir(), to.mlir()))
        } else {
            let op = if from.is_unsigned() || from.is_bool() { "extui" } else { "extsi" };
            e.op(&format!("arith.{op} {x} : {} to {}", from.mlir(), to.mlir()))
        };
    }
    if !from.is_float() {
        let op = if from.is_unsigned() || from.is_bool() { "uitofp" } else { "sitofp" };
        let r = e.op(&format!("arith.{op} {x} : {} to {}", from.mlir(), tc.mlir()));
        return from_compute(e, &r, to);
    }
    let xc = to_compute(e, x, from);
    if to.is_float() {
        // f32 <-> f64 directly; halves always through f32.
        let r = match (fc, tc) {
            (a, b) if a == b => xc,
            (DType::F32, DType::F64) => e.op(&format!("arith.extf {xc} : f32 to f64")),
            _ => e.op(&format!("arith.truncf {xc} : f64 to f32")),
        };
        return from_compute(e, &r, to);
    }
    // float -> int, saturating: t = x < 2^k ? max(x, lo) : 0; r = x >= 2^k ? MAX : fpto*(t)
    let ft = fc.mlir();
    let unsigned = to.is_unsigned();
    let k = if unsigned { bits(to) } else { bits(to) - 1 };
    let hi = e.scalar_const(&float_lit(2f64.powi(k as i32), fc), fc);
    let lo_v = if unsigned { 0.0 } else { -(2f64.powi(k as i32)) };
    let lo = e.scalar_const(&float_lit(lo_v, fc), fc);
    let z = e.scalar_const(&float_lit(0.0, fc), fc);
    let lt = e.op(&format!("arith.cmpf olt, {xc}, {hi} : {ft}"));
    let mx = e.op(&format!("arith.maximumf {xc}, {lo} : {ft}"));
    let t = e.op(&format!("arith.select {lt}, {mx}, {z} : {ft}"));
    let op = if unsigned { "fptoui" } else { "fptosi" };
    let i = e.op(&format!("arith.{op} {t} : {ft} to {}", to.mlir()));
    let ge = e.op(&format!("arith.cmpf oge, {xc}, {hi} : {ft}"));
    let max_v = if unsigned { -1 } else { i64::MAX >> (64 - bits(to)) };
    let max = e.scalar_const(&int_lit(max_v, to), to);
    e.op(&format!("arith.select {ge}, {max}, {i} : {}", to.mlir()))
}
