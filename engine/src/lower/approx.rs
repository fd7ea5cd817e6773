//! Inline f32 approximations of the transcendental functions, emitted as arith ops so the
//! loops around them vectorise (a libm call per element was measured 45× slower; see
//! /work/shared/mlir-codegen.md §2a). f16/bf16 compute in f32 and use them too; f64 keeps
//! the `math` dialect ops (libm).
//!
//! Every function takes and returns an f32 SSA value and is exact at the special values:
//! NaN in gives NaN out, ±inf give the function's limits, ±0 keep their sign where the
//! function is odd. Polynomial steps are `mulf`+`addf` marked `fastmath<contract>`, so LLVM
//! fuses them into FMAs where the CPU has them (the error bounds below hold with and
//! without fusion).
//!
//! Error bounds (in units of the last place of the correctly rounded f32 result, measured
//! against an f64 reference over dense sweeps of each domain by the tests in
//! `compile::tests_approx`):
//! - `exp`: ≤ 2 ulp (results in the subnormal range: ≤ 1 subnormal ulp absolute).
//! - `log`: ≤ 2 ulp for every positive finite input, subnormals included.
//! - `log1p`, `expm1`: ≤ 3 ulp.
//! - `tanh`: ≤ 5 ulp (largest near |x| ≈ 8, where Eigen's rational saturates), ≤ 3e-7 absolute.
//! - `logistic`: ≤ 3 ulp.
//! - `erf`: ≤ 1 ulp (correctly rounded but within 1e-9 of a rounding boundary).
//! - `sin`, `cos`, `tan`: ≤ 1 ulp for every finite input, the largest included (computed
//!   in f64 with an exact range reduction, rounded once to f32).

use super::emit::{float_lit, Emitter};
use crate::ir::{DType, Primitive};

/// A tiny op builder over an `Emitter` for f32 arithmetic.
struct B<'a> {
    e: &'a mut Emitter,
}

impl B<'_> {
    fn c(&mut self, v: f64) -> String {
        self.e.scalar_const(&float_lit(v, DType::F32), DType::F32)
    }
    fn ci(&mut self, v: i32) -> String {
        self.e.op(&format!("arith.constant {v} : i32"))
    }
    fn bin(&mut self, op: &str, a: &str, b: &str) -> String {
        self.e.op(&format!("arith.{op} {a}, {b} : f32"))
    }
    fn add(&mut self, a: &str, b: &str) -> String {
        self.bin("addf", a, b)
    }
    fn sub(&mut self, a: &str, b: &str) -> String {
        self.bin("subf", a, b)
    }
    fn mul(&mut self, a: &str, b: &str) -> String {
        self.bin("mulf", a, b)
    }
    fn div(&mut self, a: &str, b: &str) -> String {
        self.bin("divf", a, b)
    }
    /// a*b + c, contractible into an FMA.
    fn fma(&mut self, a: &str, b: &str, c: &str) -> String {
        let m = self.e.op(&format!("arith.mulf {a}, {b} fastmath<contract> : f32"));
        self.e.op(&format!("arith.addf {m}, {c} fastmath<contract> : f32"))
    }
    /// Horner evaluation of `cs[0] + cs[1] x + cs[2] x² + ...`.
    fn poly(&mut self, x: &str, cs: &[f64]) -> String {
        let mut p = self.c(cs[cs.len() - 1]);
        for &k in cs[..cs.len() - 1].iter().rev() {
            let kc = self.c(k);
            p = self.fma(&p, x, &kc);
        }
        p
    }
    fn cmp(&mut self, pred: &str, a: &str, b: &str) -> String {
        self.e.op(&format!("arith.cmpf {pred}, {a}, {b} : f32"))
    }
    fn sel(&mut self, c: &str, a: &str, b: &str) -> String {
        self.e.op(&format!("arith.select {c}, {a}, {b} : f32"))
    }
    fn seli(&mut self, c: &str, a: &str, b: &str) -> String {
        self.e.op(&format!("arith.select {c}, {a}, {b} : i32"))
    }
    fn abs(&mut self, a: &str) -> String {
        self.e.op(&format!("math.absf {a} : f32"))
    }
    fn bits(&mut self, a: &str) -> String {
        self.e.op(&format!("arith.bitcast {a} : f32 to i32"))
    }
    fn float(&mut self, a: &str) -> String {
        self.e.op(&format!("arith.bitcast {a} : i32 to f32"))
    }
    fn ibin(&mut self, op: &str, a: &str, b: &str) -> String {
        self.e.op(&format!("arith.{op} {a}, {b} : i32"))
    }
    /// Clamps with NaN-ignoring min/max (a NaN `a` becomes `lo`; callers select NaN back).
    fn clamp(&mut self, a: &str, lo: f64, hi: f64) -> String {
        let (l, h) = (self.c(lo), self.c(hi));
        let m = self.e.op(&format!("arith.maxnumf {a}, {l} : f32"));
        self.e.op(&format!("arith.minnumf {m}, {h} : f32"))
    }
    /// `a` if `x` is NaN, else `r`.
    fn keep_nan(&mut self, x: &str, r: &str) -> String {
        let n = self.cmp("uno", x, x);
        self.sel(&n, x, r)
    }
    /// 2^n for an i32 `n` in [-126, 127], built from the exponent bits.
    fn pow2i(&mut self, n: &str) -> String {
        let (b, s) = (self.ci(127), self.ci(23));
        let biased = self.ibin("addi", n, &b);
        let sh = self.ibin("shli", &biased, &s);
        self.float(&sh)
    }
}

/// Elementwise generics of at least this many elements (or inside a loop body) get the
/// inline sin/cos/tan; smaller one-shot ones call libm.
pub(crate) const INLINE_TRIG_MIN_ELEMENTS: usize = 1 << 14;

/// Emits the f32 approximation of `prim` on `x` (an f32 computing a value of dtype `d`:
/// f32, or f16/bf16 widened), or `None` for primitives without one. sin, cos and tan are
/// inline only where `Emitter::inline_trig` is set (the body of an elementwise generic in
/// a `while`/`scan` body or of at least [`INLINE_TRIG_MIN_ELEMENTS`] elements) and the
/// dtype is f32; elsewhere they keep the libm call (glibc's `sinf`/`cosf`):
/// - plain scalar code (a 0-d op outside any generic): one value at a time, glibc's
///   routine beat the inline code (bench `loops`, `fori_static_10k` with a
///   `sin(float(i))` body: 7.2–8.7 ns per iteration with libm, 9.4–10.9 inline, back to
///   back); the inline code pays off where LLVM vectorises it;
/// - small one-shot generics: the inline code (its exact reduction for |x| ≥ 2^20 above
///   all) costs compile time, measured 21 → 34–39 ms for `jit(sin(x)*2+1)` on f32[1024]
///   (bench `compile`), worth it only when the kernel runs many elements or iterations;
/// - f16/bf16: LLVM 22's x86 code generator turned the f64 trig code followed by the
///   expanded bf16 rounding into a `__truncsfbf2` libcall the JIT cannot resolve.
pub(crate) fn unary_for(e: &mut Emitter, prim: &Primitive, x: &str, d: DType) -> Option<String> {
    if (d != DType::F32 || !e.inline_trig) && matches!(prim, Primitive::Sin | Primitive::Cos | Primitive::Tan) {
        return None;
    }
    unary_f32(e, prim, x)
}

/// Emits the f32 approximation of `prim` on `x`, or `None` for primitives without one.
pub(crate) fn unary_f32(e: &mut Emitter, prim: &Primitive, x: &str) -> Option<String> {
    let mut b = B { e };
    Some(match prim {
        Primitive::Exp => exp(&mut b, x),
        Primitive::Log => log(&mut b, x),
        Primitive::Tanh => tanh(&mut b, x),
        Primitive::Logistic => logistic(&mut b, x),
        Primitive::Erf => erf(&mut b, x),
        Primitive::Log1p => log1p(&mut b, x),
        Primitive::Expm1 => expm1(&mut b, x),
        Primitive::Sin => trig(&mut b, x, Trig::Sin),
        Primitive::Cos => trig(&mut b, x, Trig::Cos),
        Primitive::Tan => trig(&mut b, x, Trig::Tan),
        _ => return None,
    })
}

/// Cody–Waite split of ln 2 (Cephes `expf`): `LN2_HI` has 9 significant bits, so
/// `n * LN2_HI` is exact for |n| < 2^15.
const LN2_HI: f64 = 0.693359375;
const LN2_LO: f64 = -2.12194440e-4;

/// `exp(x)`, after Cephes `expf` (S. Moshier): n = round(x / ln 2), r = x - n ln 2 by a
/// Cody–Waite two-constant reduction (|r| ≤ ln2/2), e^r by Cephes' degree-7 minimax
/// polynomial `1 + r + r² P(r)`, then scaling by 2^n in two halves (2^⌊n/2⌋ · 2^(n-⌊n/2⌋)),
/// so overflow gives inf and results in the subnormal range round once. x is clamped to
/// [-104, 89] first (exp(-104) < min subnormal / 2, exp(89) > f32::MAX).
fn exp(b: &mut B, x: &str) -> String {
    let xc = b.clamp(x, -104.0, 89.0);
    let log2e = b.c(std::f64::consts::LOG2_E);
    let half = b.c(0.5);
    let t = b.fma(&xc, &log2e, &half);
    let nf = b.e.op(&format!("math.floor {t} : f32"));
    let hi = b.c(-LN2_HI);
    let lo = b.c(-LN2_LO);
    let r1 = b.fma(&nf, &hi, &xc);
    let r = b.fma(&nf, &lo, &r1);
    let r2 = b.mul(&r, &r);
    let p = b.poly(&r, &[5.0000001201e-1, 1.6666665459e-1, 4.1665795894e-2, 8.3334519073e-3, 1.3981999507e-3, 1.9875691500e-4]);
    let one = b.c(1.0);
    let r_one = b.add(&r, &one);
    let y = b.fma(&p, &r2, &r_one);
    let n = b.e.op(&format!("arith.fptosi {nf} : f32 to i32"));
    let c1 = b.ci(1);
    let n1 = b.ibin("shrsi", &n, &c1);
    let n2 = b.ibin("subi", &n, &n1);
    let s1 = b.pow2i(&n1);
    let s2 = b.pow2i(&n2);
    let y1 = b.mul(&y, &s1);
    let res = b.mul(&y1, &s2);
    b.keep_nan(x, &res)
}

/// `log(x)`, after Cephes `logf`: x = m · 2^e with m in [√½, √2) (subnormals are scaled by
/// 2^23 first), log(m) = f - f²/2 + f³ P(f) with f = m - 1 and Cephes' degree-8 minimax P,
/// plus e · ln 2 in two parts. log(0) = -inf, log(x<0) = NaN, log(inf) = inf.
fn log(b: &mut B, x: &str) -> String {
    // Scale subnormals into the normal range.
    let tiny = b.c(f32::MIN_POSITIVE as f64);
    let sub = b.cmp("olt", x, &tiny);
    let scale = b.c(8388608.0); // 2^23
    let xs0 = b.mul(x, &scale);
    let xs = b.sel(&sub, &xs0, x);
    let c23 = b.ci(23);
    let c0 = b.ci(0);
    let eadj = b.seli(&sub, &c23, &c0);
    let ix = b.bits(&xs);
    let mant_mask = b.ci(0x007f_ffff);
    let half_bits = b.ci(0x3f00_0000);
    let mb = b.ibin("andi", &ix, &mant_mask);
    let mb = b.ibin("ori", &mb, &half_bits);
    let m = b.float(&mb); // in [0.5, 1)
    let e0 = b.ibin("shrui", &ix, &c23);
    let c126 = b.ci(126);
    let e1 = b.ibin("subi", &e0, &c126);
    let e2 = b.ibin("subi", &e1, &eadj);
    // m < √½: use 2m - 1 and e - 1.
    let sqrth = b.c(std::f64::consts::FRAC_1_SQRT_2);
    let small = b.cmp("olt", &m, &sqrth);
    let one = b.c(1.0);
    let m2 = b.add(&m, &m);
    let mm = b.sel(&small, &m2, &m);
    let f = b.sub(&mm, &one);
    let c1 = b.ci(1);
    let em1 = b.ibin("subi", &e2, &c1);
    let ei = b.seli(&small, &em1, &e2);
    let ef = b.e.op(&format!("arith.sitofp {ei} : i32 to f32"));
    let z = b.mul(&f, &f);
    let p = b.poly(
        &f,
        &[
            3.3333331174e-1,
            -2.4999993993e-1,
            2.0000714765e-1,
            -1.6668057665e-1,
            1.4249322787e-1,
            -1.2420140846e-1,
            1.1676998740e-1,
            -1.1514610310e-1,
            7.0376836292e-2,
        ],
    );
    let fz = b.mul(&f, &z);
    let y0 = b.mul(&fz, &p);
    let lo = b.c(LN2_LO);
    let y1 = b.fma(&ef, &lo, &y0);
    let mhalf = b.c(-0.5);
    let y2 = b.fma(&z, &mhalf, &y1);
    let r0 = b.add(&f, &y2);
    let hi = b.c(LN2_HI);
    let r = b.fma(&ef, &hi, &r0);
    // Special values: 0 → -inf, < 0 → NaN, inf → inf, NaN → NaN.
    let zero = b.c(0.0);
    let ninf = b.c(f64::NEG_INFINITY);
    let inf = b.c(f64::INFINITY);
    let nan = b.c(f64::NAN);
    let is0 = b.cmp("oeq", x, &zero);
    let neg = b.cmp("olt", x, &zero);
    let isinf = b.cmp("oeq", x, &inf);
    let a = b.sel(&isinf, &inf, &r);
    let a = b.sel(&neg, &nan, &a);
    let a = b.sel(&is0, &ninf, &a);
    b.keep_nan(x, &a)
}

/// `log1p(x)` from `log` (the trick of Eigen's `generic_log1p`, after Goldberg's "What every
/// computer scientist should know about floating-point arithmetic"): u = 1 + x; if u == 1
/// the result is x, else log(u) · x / (u - 1), which cancels u's rounding error.
fn log1p(b: &mut B, x: &str) -> String {
    let one = b.c(1.0);
    let u = b.add(x, &one);
    let lu = log(b, &u);
    let um1 = b.sub(&u, &one);
    let q = b.div(x, &um1);
    let r = b.mul(&lu, &q);
    let inf = b.c(f64::INFINITY);
    let isinf = b.cmp("oeq", &u, &inf);
    let r = b.sel(&isinf, &lu, &r);
    let is1 = b.cmp("oeq", &u, &one);
    b.sel(&is1, x, &r)
}

/// `expm1(x)` from `exp` and `log` (Kahan's trick, as in Eigen's `generic_expm1`):
/// u = e^x; if u == 1 the result is x, if u - 1 == -1 it is -1, else (u - 1) · x / log(u).
fn expm1(b: &mut B, x: &str) -> String {
    let u = exp(b, x);
    let one = b.c(1.0);
    let um1 = b.sub(&u, &one);
    let lu = log(b, &u);
    let q = b.div(x, &lu);
    let r = b.mul(&um1, &q);
    let inf = b.c(f64::INFINITY);
    let isinf = b.cmp("oeq", &u, &inf);
    let r = b.sel(&isinf, &u, &r);
    let m1 = b.c(-1.0);
    let ism1 = b.cmp("oeq", &um1, &m1);
    let r = b.sel(&ism1, &m1, &r);
    let is1 = b.cmp("oeq", &u, &one);
    let r = b.sel(&is1, x, &r);
    b.keep_nan(x, &r)
}

/// `tanh(x)`: the [13/6] rational approximation of Eigen's `generic_fast_tanh_float` (also
/// XLA's CPU tanh): x clamped to ±7.90531110763549805 (where the rational reaches 1 within
/// rounding), x itself for |x| < 0.0004. NaN propagates through the clamp.
fn tanh(b: &mut B, x: &str) -> String {
    let lim = b.c(7.905_311_107_635_498);
    let nlim = b.c(-7.905_311_107_635_498);
    let m = b.e.op(&format!("arith.minimumf {x}, {lim} : f32"));
    let xc = b.e.op(&format!("arith.maximumf {m}, {nlim} : f32"));
    let x2 = b.mul(&xc, &xc);
    let p = b.poly(
        &x2,
        &[
            4.89352455891786e-03,
            6.37261928875436e-04,
            1.48572235717979e-05,
            5.12229709037114e-08,
            -8.60467152213735e-11,
            2.00018790482477e-13,
            -2.76076847742355e-16,
        ],
    );
    let num = b.mul(&xc, &p);
    let q = b.poly(&x2, &[4.89352518554385e-03, 2.26843463243900e-03, 1.18534705686654e-04, 1.19825839466702e-06]);
    let r = b.div(&num, &q);
    let ax = b.abs(x);
    let tiny = b.c(0.0004);
    let small = b.cmp("olt", &ax, &tiny);
    let r = b.sel(&small, x, &r);
    // The rational saturates at 1 − 2⁻²² beyond the clamp; from |x| = 9.02 on the
    // correctly rounded result is exactly ±1 (1 − tanh|x| < 2⁻²⁵), as XLA's tanh gives.
    let sat = b.c(9.02);
    let big = b.cmp("oge", &ax, &sat);
    let one = b.c(1.0);
    let signed_one = b.e.op(&format!("math.copysign {one}, {x} : f32"));
    b.sel(&big, &signed_one, &r)
}

/// `logistic(x)`: with e = e^-|x| (inline `exp`, never overflowing), 1 / (1 + e) for
/// x ≥ 0 and e / (1 + e) for x < 0, so large negative x keep their tiny (even subnormal)
/// results instead of 1 / inf. NaN propagates.
fn logistic(b: &mut B, x: &str) -> String {
    let ax = b.abs(x);
    let nx = b.e.op(&format!("arith.negf {ax} : f32"));
    let ex = exp(b, &nx);
    let one = b.c(1.0);
    let den = b.add(&one, &ex);
    let zero = b.c(0.0);
    let neg = b.cmp("olt", x, &zero);
    let num = b.sel(&neg, &ex, &one);
    b.div(&num, &den)
}

/// Number of Taylor terms of `erf`: at |x| = 4 the first omitted term is below 1e-13.
const ERF_TERMS: usize = 64;

/// `erf(x)`: its Maclaurin series 2/√π Σ (-1)^n x^(2n+1) / (n! (2n+1)), 64 terms evaluated
/// by Horner in x² in f64 and rounded once to f32, on x clamped to [-4, 4] (|erf| rounds to 1
/// in f32 beyond 3.92). In f64 the cancellation costs at most 4e6 · 2^-53 ≈ 5e-10 absolute at
/// |x| = 4, so results are the correctly rounded ones except within 1e-9 of a rounding
/// boundary. (Eigen's/XLA's [13/8] rational `generic_fast_erf_float` is cheaper but off by
/// 1–5 ulp, which moved `truncated_normal` samples, drawn through erf and erf_inv, 13 ulp
/// away from JAX's.) ±0 and NaN propagate.
fn erf(b: &mut B, x: &str) -> String {
    let lim = b.c(4.0);
    let nlim = b.c(-4.0);
    let m = b.e.op(&format!("arith.minimumf {x}, {lim} : f32"));
    let xc32 = b.e.op(&format!("arith.maximumf {m}, {nlim} : f32"));
    let xc = b.e.op(&format!("arith.extf {xc32} : f32 to f64"));
    let x2 = b.e.op(&format!("arith.mulf {xc}, {xc} : f64"));
    let mut cs = Vec::with_capacity(ERF_TERMS);
    let mut fact = 1.0f64;
    for n in 0..ERF_TERMS {
        if n > 0 {
            fact *= n as f64;
        }
        let sign = if n % 2 == 0 { 1.0 } else { -1.0 };
        cs.push(sign * std::f64::consts::FRAC_2_SQRT_PI / (fact * (2 * n + 1) as f64));
    }
    let mut p = b.e.scalar_const(&float_lit(cs[ERF_TERMS - 1], DType::F64), DType::F64);
    for &k in cs[..ERF_TERMS - 1].iter().rev() {
        let kc = b.e.scalar_const(&float_lit(k, DType::F64), DType::F64);
        let m = b.e.op(&format!("arith.mulf {p}, {x2} fastmath<contract> : f64"));
        p = b.e.op(&format!("arith.addf {m}, {kc} fastmath<contract> : f64"));
    }
    let r64 = b.e.op(&format!("arith.mulf {xc}, {p} : f64"));
    b.e.op(&format!("arith.truncf {r64} : f64 to f32"))
}

/// Which of the trigonometric functions [`trig`] computes.
#[derive(Clone, Copy, PartialEq)]
enum Trig {
    Sin,
    Cos,
    Tan,
}

/// 2/π in 24-bit chunks (fdlibm's `ipio2` table of `k_rem_pio2.c`): 2/π = Σ
/// `TWO_OVER_PI_24[j]` · 2^(-24(j+1)); 9 chunks (216 bits) reduce every finite f32 exactly
/// enough (see [`trig`]).
const TWO_OVER_PI_24: [u32; 9] = [0xA2F983, 0x6E4E44, 0x1529FC, 0x2757D1, 0xF534DD, 0xC0DB62, 0x95993C, 0x439041, 0xFE5163];

/// π/2 as the f64 `PIO2_1` plus the f64 nearest to the rest, `PIO2_2` (|error| < 2^-107).
const PIO2_1: f64 = std::f64::consts::FRAC_PI_2;
const PIO2_2: f64 = 6.123233995736766e-17;

/// Below this |x| the fast reduction (two FMAs) is used; above it the exact one.
const TRIG_FAST_LIMIT: f64 = 1048576.0; // 2^20

/// `sin`, `cos` or `tan` of an f32 `x`, computed in f64 and rounded once.
///
/// Range reduction to r = x - k·π/2 with |r| ≤ π/4 (+ a rounding margin), k's quadrant
/// k mod 4 kept as an f64 in {0, 1, 2, 3}:
/// - |x| < 2^20 (an `scf.if` branch; LLVM if-converts it in vectorised loops): k =
///   roundeven(x·2/π), r = fma(-k, PIO2_2, fma(-k, PIO2_1, x)). The first FMA is exact
///   (x is a multiple of 2^-24 and k·PIO2_1 of 2^-52, the difference below 2 in
///   magnitude), the second rounds once relative to r, and the omitted k·(π/2 - PIO2_1 -
///   PIO2_2) < 2^-86 is far below the smallest |r| of an f32 (≈ 2^-30 in the worst case).
/// - larger |x| (Payne–Hanek in f64, no table lookup): x·2/π mod 4 as Σ_j (x·C_j mod 4)
///   over the 24-bit chunks C_j of [`TWO_OVER_PI_24`]. Each product of the 24-bit
///   significand of x and a 24-bit chunk is exact in f64, so is each `p - 4·floor(p/4)`;
///   the running sum is split after every term into an integer (added to k) and a
///   fraction in [-½, ½], so the fraction keeps the low bits a cancellation needs. r =
///   fraction·π/2.
///
/// Then sin r and cos r by their Taylor polynomials to r^11 and r^12 (truncation error
/// below 1e-12 relative on |r| ≤ π/4), combined by quadrant: sin x = (s, c, -s, -c)[q],
/// cos x = (c, -s, -c, s)[q], tan x = sin x / cos x in f64; sin(±0) = tan(±0) = ±0. NaN and ±inf give NaN (the quadrant comparisons are all false on NaN
/// and the NaN r flows through the polynomials).
fn trig(b: &mut B, x: &str, which: Trig) -> String {
    let e = &mut *b.e;
    let d = |e: &mut Emitter, v: f64| e.scalar_const(&float_lit(v, DType::F64), DType::F64);
    let bin = |e: &mut Emitter, op: &str, a: &str, c: &str| e.op(&format!("arith.{op} {a}, {c} : f64"));
    let fma = |e: &mut Emitter, a: &str, m: &str, c: &str| e.op(&format!("math.fma {a}, {m}, {c} : f64"));
    let xd = e.op(&format!("arith.extf {x} : f32 to f64"));
    let ax = e.op(&format!("math.absf {xd} : f64"));
    let lim = d(e, TRIG_FAST_LIMIT);
    let big = e.op(&format!("arith.cmpf oge, {ax}, {lim} : f64"));
    let n = e.fresh("");
    e.line(&format!("{n}:2 = scf.if {big} -> (f64, f64) {{"));
    e.push();
    {
        // Exact reduction (|x| ≥ 2^20, and ±inf, whose products give NaN).
        let (zero, quarter, four) = (d(e, 0.0), d(e, 0.25), d(e, 4.0));
        let (mut f, mut k) = (zero.clone(), zero);
        for (j, &c) in TWO_OVER_PI_24.iter().enumerate() {
            let cj = d(e, c as f64 * 2f64.powi(-24 * (j as i32 + 1)));
            let p = bin(e, "mulf", &xd, &cj);
            let p4 = bin(e, "mulf", &p, &quarter);
            let fl = e.op(&format!("math.floor {p4} : f64"));
            let nf = e.op(&format!("arith.negf {fl} : f64"));
            let q = fma(e, &nf, &four, &p);
            let s = bin(e, "addf", &f, &q);
            let ki = e.op(&format!("math.roundeven {s} : f64"));
            f = bin(e, "subf", &s, &ki);
            k = bin(e, "addf", &k, &ki);
        }
        let pio2 = d(e, PIO2_1);
        let r = bin(e, "mulf", &f, &pio2);
        e.line(&format!("scf.yield {k}, {r} : f64, f64"));
    }
    e.pop();
    e.line("} else {");
    e.push();
    {
        let two_pi = d(e, std::f64::consts::FRAC_2_PI);
        let t = bin(e, "mulf", &xd, &two_pi);
        let k = e.op(&format!("math.roundeven {t} : f64"));
        let nk = e.op(&format!("arith.negf {k} : f64"));
        let (p1, p2) = (d(e, PIO2_1), d(e, PIO2_2));
        let r1 = fma(e, &nk, &p1, &xd);
        // |x| ≤ π/4 gives k = ±0 and r = x exactly (but r = +0 for x = -0, see below).
        let r = fma(e, &nk, &p2, &r1);
        e.line(&format!("scf.yield {k}, {r} : f64, f64"));
    }
    e.pop();
    e.line("}");
    let (k, r) = (format!("{n}#0"), format!("{n}#1"));
    // q = k mod 4 in {0, 1, 2, 3} (k is an integer-valued f64).
    let (quarter, four) = (d(e, 0.25), d(e, 4.0));
    let k4 = bin(e, "mulf", &k, &quarter);
    let fl = e.op(&format!("math.floor {k4} : f64"));
    let nf = e.op(&format!("arith.negf {fl} : f64"));
    let q = fma(e, &nf, &four, &k);
    let r2 = bin(e, "mulf", &r, &r);
    let poly = |e: &mut Emitter, cs: &[f64]| -> String {
        let mut p = d(e, cs[cs.len() - 1]);
        for &c in cs[..cs.len() - 1].iter().rev() {
            let cc = d(e, c);
            p = fma(e, &p, &r2, &cc);
        }
        p
    };
    // sin r = r + r·r²·S(r²), cos r = 1 + r²·C(r²), Taylor coefficients.
    let sp = poly(e, &[-1.0 / 6.0, 1.0 / 120.0, -1.0 / 5040.0, 1.0 / 362880.0, -1.0 / 39916800.0]);
    let rr2 = bin(e, "mulf", &r, &r2);
    let sin_r = fma(e, &rr2, &sp, &r);
    let cp = poly(e, &[-0.5, 1.0 / 24.0, -1.0 / 720.0, 1.0 / 40320.0, -1.0 / 3628800.0, 1.0 / 479001600.0]);
    let one = d(e, 1.0);
    let cos_r = fma(e, &r2, &cp, &one);
    let (two, three) = (d(e, 2.0), d(e, 3.0));
    let is1 = e.op(&format!("arith.cmpf oeq, {q}, {one} : f64"));
    let is2 = e.op(&format!("arith.cmpf oeq, {q}, {two} : f64"));
    let is3 = e.op(&format!("arith.cmpf oeq, {q}, {three} : f64"));
    let odd = e.op(&format!("arith.ori {is1}, {is3} : i1"));
    let signed = |e: &mut Emitter, neg: &str, v: &str| {
        let nv = e.op(&format!("arith.negf {v} : f64"));
        e.op(&format!("arith.select {neg}, {nv}, {v} : f64"))
    };
    let sin_of = |e: &mut Emitter| {
        let v = e.op(&format!("arith.select {odd}, {cos_r}, {sin_r} : f64"));
        let neg = e.op(&format!("arith.ori {is2}, {is3} : i1"));
        signed(e, &neg, &v)
    };
    let cos_of = |e: &mut Emitter| {
        let v = e.op(&format!("arith.select {odd}, {sin_r}, {cos_r} : f64"));
        let neg = e.op(&format!("arith.ori {is1}, {is2} : i1"));
        signed(e, &neg, &v)
    };
    let res = match which {
        Trig::Sin => sin_of(e),
        Trig::Cos => cos_of(e),
        Trig::Tan => {
            let s = sin_of(e);
            let c = cos_of(e);
            bin(e, "divf", &s, &c)
        }
    };
    let res = if which == Trig::Cos {
        res
    } else {
        // sin(±0) = tan(±0) = ±0 (the polynomial's r + r³·S gives +0 for -0).
        let z = d(e, 0.0);
        let is0 = e.op(&format!("arith.cmpf oeq, {xd}, {z} : f64"));
        e.op(&format!("arith.select {is0}, {xd}, {res} : f64"))
    };
    e.op(&format!("arith.truncf {res} : f64 to f32"))
}
