//! Accuracy of the inline f32 approximations (`lower::approx`), compiled and run, against
//! the f64 reference of Rust's libm over dense sweeps of each function's domain plus the
//! edge cases (±0, ±inf, NaN, subnormals, large |x|). Bounds are in ulps of the f32
//! reference; the bounds asserted here are the ones documented in `lower::approx`.

use super::tests::compile_jaxpr;
use crate::ir::{DType, Primitive, ShapedArray};
use crate::lower::tests::Builder;
use crate::runtime::Buffer;
use Primitive as P;

/// Distance in ulps between an f32 result and the f64 truth (rounded to f32 first).
/// Subnormal truths count ulps of the smallest subnormal.
fn ulps(got: f32, want: f64) -> f64 {
    let w = want as f32;
    if got.is_nan() || w.is_nan() {
        return if got.is_nan() && w.is_nan() { 0.0 } else { f64::INFINITY };
    }
    if got == w {
        return 0.0;
    }
    if got.is_infinite() || w.is_infinite() {
        return f64::INFINITY;
    }
    // ulp of w: 2^(exponent(w) - 23) from its exponent bits (subnormals: the smallest one).
    let e = (w.abs().to_bits() >> 23) as i32;
    let ulp_w = if e == 0 { f32::from_bits(1) as f64 } else { 2f64.powi(e - 127 - 23) };
    (got as f64 - want).abs() / ulp_w
}

/// Runs the unary primitive `p` on `xs` (f32) through the compiler.
fn run(p: P, xs: &[f32]) -> Vec<f32> {
    let mut b = Builder::new();
    let x = b.arg(&[xs.len()], DType::F32);
    let y = b.op(p, &[x], &[xs.len()], DType::F32);
    let exe = compile_jaxpr(&b.finish(&[y]));
    let inb = Buffer::from_slice(&ShapedArray::new(&[xs.len()], DType::F32), xs).unwrap();
    exe.execute(&[&inb]).unwrap()[0].as_slice::<f32>().unwrap().to_vec()
}

/// A sweep of `n` points over [lo, hi], plus every edge case.
fn sweep(lo: f64, hi: f64, n: usize) -> Vec<f32> {
    let mut v: Vec<f32> = (0..=n).map(|i| (lo + (hi - lo) * i as f64 / n as f64) as f32).collect();
    v.extend([0.0, -0.0, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, f32::MIN_POSITIVE, -f32::MIN_POSITIVE, f32::from_bits(1)]);
    v.extend([f32::from_bits(0x0040_0000), -f32::from_bits(0x0040_0000), f32::MAX, f32::MIN, 1e-30, -1e-30, 1e-6, -1e-6, 1e30, -1e30]);
    v
}

/// Log-spaced positive values from 2^lo to 2^hi, both signs when `signed`.
fn logsweep(lo: i32, hi: i32, per_octave: usize, signed: bool) -> Vec<f32> {
    let mut v = vec![];
    for e in lo..hi {
        for k in 0..per_octave {
            let x = 2f64.powf(e as f64 + k as f64 / per_octave as f64) as f32;
            v.push(x);
            if signed {
                v.push(-x);
            }
        }
    }
    v
}

/// Checks `p` against `reference` on `xs`; panics with the worst point above `max_ulps`.
fn check(p: P, xs: Vec<f32>, reference: impl Fn(f64) -> f64, max_ulps: f64) {
    let got = run(p.clone(), &xs);
    let mut worst = (0.0, 0.0f32, 0.0f32, 0.0f64);
    for (&x, &g) in xs.iter().zip(&got) {
        let want = reference(x as f64);
        let u = ulps(g, want);
        if u > worst.0 {
            worst = (u, x, g, want);
        }
    }
    assert!(worst.0 <= max_ulps, "{}: {} ulps at x = {:e}: got {:e}, want {:e}", p.name(), worst.0, worst.1, worst.2, worst.3);
}

fn logistic(x: f64) -> f64 {
    if x >= 0.0 { 1.0 / (1.0 + (-x).exp()) } else { x.exp() / (1.0 + x.exp()) }
}

/// erf in f64 (Rust's std has no erf): W. J. Cody's rational approximations are not needed
/// for a test reference; the Taylor series for |x| < 2.5 and the continued fraction of erfc
/// beyond converge to f64 precision.
fn erf(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    let a = x.abs();
    let r = if a < 2.5 {
        // erf(x) = 2/√π Σ (-1)^n x^(2n+1) / (n! (2n+1))
        let mut term = a;
        let mut sum = a;
        let x2 = a * a;
        let mut n = 0.0;
        while term.abs() > 1e-17 * sum.abs() {
            n += 1.0;
            term *= -x2 / n;
            sum += term / (2.0 * n + 1.0);
        }
        sum * 2.0 / std::f64::consts::PI.sqrt()
    } else if a < 30.0 {
        // erfc(x) = e^(-x²)/√π · 1/(x + 1/2/(x + 1/(x + 3/2/(x + ...)))) (Lentz-free, backward)
        let mut f = a;
        for k in (1..200).rev() {
            f = a + (k as f64 / 2.0) / f;
        }
        1.0 - (-a * a).exp() / (std::f64::consts::PI.sqrt() * f)
    } else {
        1.0
    };
    r.copysign(x)
}

#[test]
fn exp_within_2_ulp() {
    let mut xs = sweep(-110.0, 90.0, 200_000);
    xs.extend(sweep(-1.0, 1.0, 20_000));
    xs.extend(logsweep(-40, 0, 64, true));
    check(P::Exp, xs, f64::exp, 2.0);
}

#[test]
fn log_within_2_ulp() {
    let mut xs = logsweep(-149, 128, 256, false);
    xs.extend(sweep(0.5, 2.0, 100_000));
    xs.extend(sweep(-5.0, 5.0, 1000));
    check(P::Log, xs, f64::ln, 2.0);
}

#[test]
fn log1p_and_expm1_within_3_ulp() {
    let mut xs = logsweep(-60, 100, 128, true);
    xs.extend(sweep(-0.999, 3.0, 100_000));
    xs.push(-1.0);
    check(P::Log1p, xs, f64::ln_1p, 3.0);
    let mut xs = logsweep(-60, 7, 256, true);
    xs.extend(sweep(-100.0, 89.0, 100_000));
    check(P::Expm1, xs, f64::exp_m1, 3.0);
}

#[test]
fn tanh_within_5_ulp() {
    let mut xs = sweep(-12.0, 12.0, 200_000);
    xs.extend(logsweep(-60, 6, 256, true));
    check(P::Tanh, xs, f64::tanh, 5.0);
}

/// Large |x| give exactly ±1 (JAX's `tanh(20.0)` is `1.0`), so sums of saturated values
/// are exact: 256·256 ones sum to 65536.
#[test]
fn tanh_saturates_to_exactly_one() {
    let xs = [9.02f32, 9.5, 20.0, 257.0, 1e30, f32::INFINITY, -9.02, -30.0, f32::NEG_INFINITY];
    let got = run(P::Tanh, &xs);
    let want: Vec<f32> = xs.iter().map(|x| x.signum()).collect();
    assert_eq!(got, want);
}

#[test]
fn logistic_within_3_ulp() {
    let mut xs = sweep(-110.0, 110.0, 200_000);
    xs.extend(logsweep(-60, 7, 128, true));
    check(P::Logistic, xs, logistic, 3.0);
}

#[test]
fn erf_within_1_ulp() {
    let mut xs = sweep(-6.0, 6.0, 200_000);
    xs.extend(logsweep(-60, 4, 256, true));
    check(P::Erf, xs, erf, 1.0);
}

/// Inputs for sin/cos/tan: a dense sweep, every octave up to f32::MAX, 200k f32 bit
/// patterns spread over all finite values (LCG), and the f32s nearest to k·π/2 (the
/// inputs whose reduced argument cancels the most) for k up to 2^17, plus k·2^m·π/2.
fn trig_inputs() -> Vec<f32> {
    // (more than `INLINE_TRIG_MIN_ELEMENTS`, so the inline code is what runs)
    let mut xs = sweep(-20.0, 20.0, 100_000);
    xs.extend(logsweep(-60, 128, 64, true));
    let mut s = 0x9E37_79B9_7F4A_7C15u64;
    for _ in 0..200_000 {
        s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let f = f32::from_bits((s >> 32) as u32);
        if f.is_finite() {
            xs.push(f);
        }
    }
    for k in 1..(1 << 17) {
        let v = (k as f64 * std::f64::consts::FRAC_PI_2) as f32;
        xs.extend([v, -v, f32::from_bits(v.to_bits() + 1), f32::from_bits(v.to_bits() - 1)]);
    }
    for m in 0..100 {
        for k in 1..64 {
            xs.push((k as f64 * 2f64.powi(m) * std::f64::consts::FRAC_PI_2) as f32);
        }
    }
    xs.extend([1048575.9f32, 1048576.0, 1048576.1, -1048576.0, 16367173.0 * 2f32.powi(72), 3.0 * 2f32.powi(126)]);
    xs
}

#[test]
fn sin_cos_tan_within_1_ulp_over_the_whole_range() {
    check(P::Sin, trig_inputs(), f64::sin, 1.0);
    check(P::Cos, trig_inputs(), f64::cos, 1.0);
    check(P::Tan, trig_inputs(), f64::tan, 1.0);
}

#[test]
fn sin_cos_special_values() {
    // Padded to the size from which elementwise trig is inline (smaller ones call libm).
    let mut xs = vec![0.0f32, -0.0, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, 1e-30, -1e-30, f32::from_bits(1)];
    xs.resize(crate::lower::approx::INLINE_TRIG_MIN_ELEMENTS, 0.5);
    let s = run(P::Sin, &xs);
    let c = run(P::Cos, &xs);
    let (xs, s, c) = (&xs[..8], &s[..8], &c[..8]);
    assert_eq!(s[0].to_bits(), 0.0f32.to_bits());
    assert_eq!(s[1].to_bits(), (-0.0f32).to_bits());
    assert!(s[2].is_nan() && s[3].is_nan() && s[4].is_nan());
    assert!(c[2].is_nan() && c[3].is_nan() && c[4].is_nan());
    assert_eq!(&s[5..], &xs[5..]);
    assert_eq!(&c[..2], &[1.0, 1.0]);
    assert_eq!(&c[5..], &[1.0, 1.0, 1.0]);
}

#[test]
fn half_dtypes_use_the_f32_approximations() {
    // bf16 exp and tanh: computed in f32, rounded once to bf16 (within 1 bf16 ulp); bf16
    // sin, cos and tan (libm in f32, see `lower::approx::unary_for`) compile and agree too.
    for p in [P::Exp, P::Tanh, P::Log1p, P::Erf, P::Sin, P::Cos, P::Tan] {
        let xs: Vec<f64> = (0..64).map(|i| -4.0 + i as f64 * 0.125).collect();
        let a = ShapedArray::new(&[xs.len()], DType::BF16);
        let bytes: Vec<u8> = xs.iter().flat_map(|&x| crate::ir::Scalar::F64(x).to_bytes(DType::BF16)).collect();
        let mut b = Builder::new();
        let x = b.arg(&[xs.len()], DType::BF16);
        let y = b.op(p.clone(), &[x], &[xs.len()], DType::BF16);
        let exe = compile_jaxpr(&b.finish(&[y]));
        let out = exe.execute(&[&Buffer::from_bytes(&a, &bytes).unwrap()]).unwrap()[0].to_f64_vec();
        for (x, g) in xs.iter().zip(out) {
            let want = match p {
                P::Exp => x.exp(),
                P::Tanh => x.tanh(),
                P::Log1p => x.ln_1p(),
                P::Sin => x.sin(),
                P::Cos => x.cos(),
                P::Tan => x.tan(),
                _ => erf(*x),
            };
            if want.is_nan() || want.is_infinite() {
                assert!(g.is_nan() == want.is_nan() && (want.is_nan() || g == want), "{} bf16 at {x}: {g} vs {want}", p.name());
                continue;
            }
            // (one bf16 ulp of the result, or of 2^-8 where the result cancels to ~0)
            assert!((g - want).abs() <= want.abs() / 128.0 + if matches!(p, P::Sin | P::Cos | P::Tan) { 1e-3 } else { 1e-30 }, "{} bf16 at {x}: {g} vs {want}", p.name());
        }
    }
}

/// Float sums add in lanes (`Lowerer::reduce_lanes`: 64 or 16 partial sums, added
/// pairwise, as XLA's vectorised reductions): the result must stay within f32 summation
/// error of the f64 sum — |error| ≤ n · 2^-24 · Σ|x| is the worst case for any order; the
/// lane order is far better, and this asserts 1e-6 · Σ|x| for a full and a row-wise
/// reduction with sizes that leave a remainder after any lane count.
#[test]
fn lane_sums_stay_close_to_the_f64_sum() {
    let n = 1_000_003usize;
    let xs: Vec<f32> = (0..n).map(|i| ((i as f64 * 0.618_033_988_7).fract() * 2.0 - 0.7) as f32).collect();
    let exact: f64 = xs.iter().map(|&x| x as f64).sum();
    let abs: f64 = xs.iter().map(|&x| (x as f64).abs()).sum();
    let mut b = Builder::new();
    let x = b.arg(&[n], DType::F32);
    let y = b.op(P::ReduceSum { axes: vec![0] }, &[x], &[], DType::F32);
    let exe = compile_jaxpr(&b.finish(&[y]));
    let inb = Buffer::from_slice(&ShapedArray::new(&[n], DType::F32), &xs).unwrap();
    let got = exe.execute(&[&inb]).unwrap()[0].as_slice::<f32>().unwrap()[0] as f64;
    assert!((got - exact).abs() <= 1e-6 * abs, "sum: got {got}, f64 {exact} (Σ|x| = {abs})");
    // Rows of 1031 (prime) elements: [967, 1031] → [967].
    let (r, c) = (967usize, 1031usize);
    let mut b = Builder::new();
    let x = b.arg(&[r, c], DType::F32);
    let y = b.op(P::ReduceSum { axes: vec![1] }, &[x], &[r], DType::F32);
    let exe = compile_jaxpr(&b.finish(&[y]));
    let inb = Buffer::from_slice(&ShapedArray::new(&[r, c], DType::F32), &xs[..r * c]).unwrap();
    let out = exe.execute(&[&inb]).unwrap()[0].as_slice::<f32>().unwrap().to_vec();
    for (i, &g) in out.iter().enumerate() {
        let row = &xs[i * c..(i + 1) * c];
        let e: f64 = row.iter().map(|&x| x as f64).sum();
        let a: f64 = row.iter().map(|&x| (x as f64).abs()).sum();
        assert!((g as f64 - e).abs() <= 1e-6 * a, "row {i}: got {g}, f64 {e}");
    }
}
