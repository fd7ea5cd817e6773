//! Scalar semantics of the bit-level primitives used by `jax::random`: shifts,
//! `bitcast_convert_type`, `nextafter`, and `erf_inv` (the scalar bodies written inside
//! `linalg.generic`, called from `scalar.rs` and `Lowerer::prim`).
//!
//! Invariants: shifts follow XLA, not LLVM: an amount of the bit width or more (read as
//! unsigned) gives 0 (`shift_left`, `shift_right_logical`) or all sign bits
//! (`shift_right_arithmetic`), never poison. `erf_inv` is XLA's single-precision
//! polynomial (the chlo decomposition JAX's CPU backend runs), so `random.normal` matches
//! JAX's values; float64 refines that estimate with two Newton steps on `math.erf`.

use super::emit::{float_lit, int_lit, Emitter};
use crate::error::Error;
use crate::ir::{DType, Primitive};

fn bits(d: DType) -> u32 {
    8 * d.size_bytes() as u32
}

/// The signless integer type of a float's storage: `i16`, `i32`, `i64`.
fn int_of(d: DType) -> DType {
    match d.size_bytes() {
        2 => DType::I16,
        4 => DType::I32,
        _ => DType::I64,
    }
}

/// `shift_left` / `shift_right_logical` / `shift_right_arithmetic` on integers of `d`.
pub(crate) fn shift(e: &mut Emitter, prim: &Primitive, x: &str, y: &str, d: DType) -> Result<String, Error> {
    let t = d.mlir();
    let w = e.scalar_const(&bits(d).to_string(), d);
    // y < width as unsigned: negative amounts count as huge, as in XLA.
    let ok = e.op(&format!("arith.cmpi ult, {y}, {w} : {t}"));
    let zero = e.scalar_const("0", d);
    let ys = e.op(&format!("arith.select {ok}, {y}, {zero} : {t}"));
    Ok(match prim {
        Primitive::ShiftLeft => {
            let r = e.op(&format!("arith.shli {x}, {ys} : {t}"));
            e.op(&format!("arith.select {ok}, {r}, {zero} : {t}"))
        }
        Primitive::ShiftRightLogical => {
            let r = e.op(&format!("arith.shrui {x}, {ys} : {t}"));
            e.op(&format!("arith.select {ok}, {r}, {zero} : {t}"))
        }
        Primitive::ShiftRightArithmetic => {
            let r = e.op(&format!("arith.shrsi {x}, {ys} : {t}"));
            let wm1 = e.scalar_const(&(bits(d) - 1).to_string(), d);
            let fill = e.op(&format!("arith.shrsi {x}, {wm1} : {t}"));
            e.op(&format!("arith.select {ok}, {r}, {fill} : {t}"))
        }
        _ => return Err(Error::compile(format!("lowering: `{}` is not a shift", prim.name()))),
    })
}

/// `bitcast_convert_type` of a scalar between dtypes of one width.
pub(crate) fn bitcast(e: &mut Emitter, x: &str, from: DType, to: DType) -> String {
    if from.mlir() == to.mlir() {
        return x.to_string();
    }
    e.op(&format!("arith.bitcast {x} : {} to {}", from.mlir(), to.mlir()))
}

/// `nextafter(x, y)` on floats of `d`, on their bit patterns as XLA computes it: NaN if
/// either is NaN, `y` when equal (so `nextafter(0, -0) = -0`), the smallest subnormal
/// signed like `y` from ±0, otherwise one ulp toward `y`.
pub(crate) fn nextafter(e: &mut Emitter, x: &str, y: &str, d: DType) -> String {
    let it = int_of(d);
    let t = it.mlir();
    let nb = bits(d);
    let xi = e.op(&format!("arith.bitcast {x} : {} to {t}", d.mlir()));
    let yi = e.op(&format!("arith.bitcast {y} : {} to {t}", d.mlir()));
    let sign: i64 = 1i64.wrapping_shl(nb - 1);
    let k = |e: &mut Emitter, v: i64| e.scalar_const(&int_lit(v, it), it);
    let smask = k(e, sign);
    let amask = k(e, !sign);
    let inf_bits = match d {
        DType::F16 => 0x7c00,
        DType::BF16 => 0x7f80,
        DType::F32 => 0x7f80_0000,
        _ => 0x7ff0_0000_0000_0000,
    };
    let inf = k(e, inf_bits);
    let zero = k(e, 0);
    let one = k(e, 1);
    let m1 = k(e, -1);
    let xa = e.op(&format!("arith.andi {xi}, {amask} : {t}"));
    let ya = e.op(&format!("arith.andi {yi}, {amask} : {t}"));
    let xnan = e.op(&format!("arith.cmpi ugt, {xa}, {inf} : {t}"));
    let ynan = e.op(&format!("arith.cmpi ugt, {ya}, {inf} : {t}"));
    let nan_in = e.op(&format!("arith.ori {xnan}, {ynan} : i1"));
    let xs = e.op(&format!("arith.andi {xi}, {smask} : {t}"));
    let ys = e.op(&format!("arith.andi {yi}, {smask} : {t}"));
    let xz = e.op(&format!("arith.cmpi eq, {xa}, {zero} : {t}"));
    let yz = e.op(&format!("arith.cmpi eq, {ya}, {zero} : {t}"));
    let eq = e.op(&format!("arith.cmpi eq, {xi}, {yi} : {t}"));
    let tiny = e.op(&format!("arith.ori {ys}, {one} : {t}"));
    let disagree = e.op(&format!("arith.cmpi ne, {xs}, {ys} : {t}"));
    let larger = e.op(&format!("arith.cmpi ugt, {xa}, {ya} : {t}"));
    let smaller = e.op(&format!("arith.ori {larger}, {disagree} : i1"));
    let adj = e.op(&format!("arith.select {smaller}, {m1}, {one} : {t}"));
    let step = e.op(&format!("arith.addi {xi}, {adj} : {t}"));
    let from_zero = e.op(&format!("arith.select {yz}, {yi}, {tiny} : {t}"));
    let r = e.op(&format!("arith.select {xz}, {from_zero}, {step} : {t}"));
    let r = e.op(&format!("arith.select {eq}, {yi}, {r} : {t}"));
    let quiet: i64 = match d {
        DType::F16 => 1 << 9,
        DType::BF16 => 1 << 6,
        DType::F32 => 1 << 22,
        _ => 1 << 51,
    };
    let nan = k(e, inf_bits | quiet);
    let r = e.op(&format!("arith.select {nan_in}, {nan}, {r} : {t}"));
    e.op(&format!("arith.bitcast {r} : {t} to {}", d.mlir()))
}

const W_LT_5: [f32; 9] = [
    2.810_226_36e-08,
    3.432_739_39e-07,
    -3.523_387_7e-06,
    -4.391_506_54e-06,
    0.000_218_580_87,
    -0.001_253_725_03,
    -0.004_177_681_64,
    0.246_640_727,
    1.501_409_41,
];
const W_GE_5: [f32; 9] = [
    -0.000_200_214_257,
    0.000_100_950_558,
    0.001_349_343_22,
    -0.003_673_428_44,
    0.005_739_507_73,
    -0.007_622_461_3,
    0.009_438_870_47,
    1.001_674_06,
    2.832_976_82,
];

/// `erf_inv` of `x` in the compute dtype `c` (f32 or f64).
///
/// f32: XLA's polynomial (w = -log1p(-x²); Horner in w - 2.5 or sqrt(w) - 3 with the
/// coefficients above; ±1 gives ±inf). f64: the f32 estimate refined by two Newton steps
/// y -= (erf(y) - x) / (2/√π · e^(-y²)).
pub(crate) fn erf_inv(e: &mut Emitter, x: &str, c: DType) -> String {
    if c == DType::F64 {
        let xf = e.op(&format!("arith.truncf {x} : f64 to f32"));
        let y32 = erf_inv(e, &xf, DType::F32);
        let mut y = e.op(&format!("arith.extf {y32} : f32 to f64"));
        let k = e.scalar_const(&float_lit(2.0 / std::f64::consts::PI.sqrt(), c), c);
        for _ in 0..2 {
            let er = e.op(&format!("math.erf {y} : f64"));
            let num = e.op(&format!("arith.subf {er}, {x} : f64"));
            let y2 = e.op(&format!("arith.mulf {y}, {y} : f64"));
            let ny2 = e.op(&format!("arith.negf {y2} : f64"));
            let ex = e.op(&format!("math.exp {ny2} : f64"));
            let den = e.op(&format!("arith.mulf {k}, {ex} : f64"));
            let q = e.op(&format!("arith.divf {num}, {den} : f64"));
            let yn = e.op(&format!("arith.subf {y}, {q} : f64"));
            // Keep ±inf (x = ±1) and NaN as the f32 estimate gave them.
            let a = e.op(&format!("math.absf {y} : f64"));
            let inf = e.scalar_const(&float_lit(f64::INFINITY, c), c);
            let fin = e.op(&format!("arith.cmpf olt, {a}, {inf} : f64"));
            y = e.op(&format!("arith.select {fin}, {yn}, {y} : f64"));
        }
        return y;
    }
    let f = |e: &mut Emitter, v: f32| e.scalar_const(&float_lit(v as f64, DType::F32), DType::F32);
    let nx = e.op(&format!("arith.negf {x} : f32"));
    let mxx = e.op(&format!("arith.mulf {x}, {nx} : f32"));
    let l = super::approx::unary_f32(e, &Primitive::Log1p, &mxx).expect("log1p has an f32 approximation");
    let w = e.op(&format!("arith.negf {l} : f32"));
    let five = f(e, 5.0);
    let lt = e.op(&format!("arith.cmpf olt, {w}, {five} : f32"));
    let c25 = f(e, 2.5);
    let c3 = f(e, 3.0);
    let wa = e.op(&format!("arith.subf {w}, {c25} : f32"));
    let sw = e.op(&format!("math.sqrt {w} : f32"));
    let wb = e.op(&format!("arith.subf {sw}, {c3} : f32"));
    let w = e.op(&format!("arith.select {lt}, {wa}, {wb} : f32"));
    let coef = |e: &mut Emitter, i: usize| {
        let a = f(e, W_LT_5[i]);
        let b = f(e, W_GE_5[i]);
        e.op(&format!("arith.select {lt}, {a}, {b} : f32"))
    };
    let mut p = coef(e, 0);
    for i in 1..9 {
        let ci = coef(e, i);
        let pw = e.op(&format!("arith.mulf {p}, {w} : f32"));
        p = e.op(&format!("arith.addf {ci}, {pw} : f32"));
    }
    let r = e.op(&format!("arith.mulf {p}, {x} : f32"));
    let ax = e.op(&format!("math.absf {x} : f32"));
    let one = f(e, 1.0);
    let is1 = e.op(&format!("arith.cmpf oeq, {ax}, {one} : f32"));
    let inf = f(e, f32::INFINITY);
    let xinf = e.op(&format!("arith.mulf {x}, {inf} : f32"));
    e.op(&format!("arith.select {is1}, {xinf}, {r} : f32"))
}
