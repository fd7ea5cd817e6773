//! Precision of contractions (JAX's `precision=` and `jax_default_matmul_precision`):
//! each dot algorithm preset's CPU emulation against an f64 reference on the host (the
//! error magnitude each format gives, and bit-level agreement with a host emulation of the
//! rounding), on both sides of the GEMM-runtime threshold, eager and jitted; jaxpr and
//! lowered text; the scoped default; errors.
//!
//! The default precision is process-wide, so every test holds `serial()`.

use jax::prelude::*;
use jaxrepl_tests::serial;


/// Deterministic f32 values in about [-1, 1].
fn values(n: usize, seed: u64) -> Vec<f32> {
    jaxrepl_tests::lcg_f32(n, seed, -1.0, 1.0)
}

/// `a[m,k] @ b[k,n]` in f64.
fn matmul_ref(a: &[f64], b: &[f64], m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut out = vec![0.0; m * n];
    for i in 0..m {
        for p in 0..k {
            for j in 0..n {
                out[i * n + j] += a[i * k + p] * b[p * n + j];
            }
        }
    }
    out
}

/// max|y - r| / max|r|.
fn rel_err(y: &[f64], r: &[f64]) -> f64 {
    let scale = r.iter().fold(0f64, |m, x| m.max(x.abs()));
    y.iter().zip(r).fold(0f64, |m, (a, b)| m.max((a - b).abs())) / scale
}

/// Round-to-nearest-even of an f32 to TF32 (10 mantissa bits), on the host.
fn tf32(x: f32) -> f32 {
    let b = x.to_bits();
    f32::from_bits((b + 0xFFF + ((b >> 13) & 1)) & 0xFFFF_E000)
}

fn bf16r(x: f32) -> f32 {
    bf16::from_f32(x).to_f32()
}

fn f16r(x: f32) -> f32 {
    f16::from_f32(x).to_f32()
}

fn to_f64(a: &Array) -> Vec<f64> {
    a.to_vec::<f32>().unwrap().into_iter().map(|x| x as f64).collect()
}

/// Runs `x @ y` with `preset` eagerly and under jit; checks both agree and returns the result.
fn run(preset: &str, xa: &Array, ya: &Array) -> Vec<f64> {
    let eager = jnp::matmul_with(xa, ya, preset).unwrap();
    let p = preset.to_string();
    let f = jit(move |(a, b): (Array, Array)| jnp::matmul_with(&a, &b, p.as_str()));
    let jitted = f.call((xa, ya)).unwrap();
    let (e, j) = (to_f64(&eager), to_f64(&jitted));
    assert_eq!(e, j, "{preset}: eager and jit differ");
    e
}

#[test]
fn presets_emulate_their_formats() {
    let _l = serial();
    // 6x10x5 stays on linalg loops; 64x96x48 goes through the GEMM runtime.
    for &(m, k, n) in &[(6usize, 10usize, 5usize), (64, 96, 48)] {
        let (xv, yv) = (values(m * k, 1), values(k * n, 2));
        let xa = Array::from_vec(xv.clone(), &[m, k]).unwrap();
        let ya = Array::from_vec(yv.clone(), &[k, n]).unwrap();
        let f64v = |v: &[f32], r: &dyn Fn(f32) -> f32| v.iter().map(|&x| r(x) as f64).collect::<Vec<f64>>();
        let exact = matmul_ref(&f64v(&xv, &|x| x), &f64v(&yv, &|x| x), m, k, n);
        // Same-format reference: the product of the rounded inputs, in f64.
        let rounded = |r: &dyn Fn(f32) -> f32| matmul_ref(&f64v(&xv, r), &f64v(&yv, r), m, k, n);
        let mut errs = vec![];
        for (preset, lo, hi, same) in [
            ("BF16_BF16_F32", 3e-4, 2e-2, Some(rounded(&bf16r))),
            ("F16_F16_F32", 3e-5, 3e-3, Some(rounded(&f16r))),
            ("TF32_TF32_F32", 3e-5, 3e-3, Some(rounded(&tf32))),
            ("BF16_BF16_F32_X3", 1e-8, 5e-5, None),
            ("TF32_TF32_F32_X3", 0.0, 2e-6, None),
            ("BF16_BF16_F32_X6", 0.0, 2e-6, None),
            ("BF16_BF16_F32_X9", 0.0, 2e-6, None),
            ("F32_F32_F32", 0.0, 2e-6, None),
            ("DEFAULT", 0.0, 2e-6, None),
            ("highest", 0.0, 2e-6, None),
            ("F64_F64_F64", 0.0, 1.2e-7, None),
        ] {
            let y = run(preset, &xa, &ya);
            let e = rel_err(&y, &exact);
            assert!(e >= lo && e <= hi, "{preset} {m}x{k}x{n}: error {e:e} outside [{lo:e}, {hi:e}]");
            if let Some(r) = same {
                // Up to f32 accumulation, the result is the exact product of rounded inputs.
                let e2 = rel_err(&y, &r);
                assert!(e2 < 2e-6, "{preset}: differs from the product of rounded inputs by {e2:e}");
            }
            errs.push((preset, e));
        }
        // More products, less error: bf16 > bf16x3 > bf16x6.
        let get = |p: &str| errs.iter().find(|(q, _)| *q == p).unwrap().1;
        assert!(get("BF16_BF16_F32") > 10.0 * get("BF16_BF16_F32_X3"));
        assert!(get("BF16_BF16_F32_X3") > get("BF16_BF16_F32_X6"));
        assert!(get("TF32_TF32_F32") > 10.0 * get("TF32_TF32_F32_X3"));
    }
}

#[test]
fn bf16_output_presets_round_the_result() {
    let _l = serial();
    let xa = Array::from_vec(values(24, 3), &[4, 6]).unwrap();
    let ya = Array::from_vec(values(18, 4), &[6, 3]).unwrap();
    for (p, r) in [("BF16_BF16_BF16", bf16r as fn(f32) -> f32), ("F16_F16_F16", f16r)] {
        let y = jnp::matmul_with(&xa, &ya, p).unwrap();
        assert_eq!(y.dtype(), DType::F32, "output dtype follows the inputs");
        for v in y.to_vec::<f32>().unwrap() {
            assert_eq!(v, r(v), "{p}: {v} is not representable in the output format");
        }
    }
}

#[test]
fn einsum_and_dot_general_take_precision() {
    let _l = serial();
    let (xv, yv) = (values(8 * 16, 5), values(16 * 4, 6));
    let xa = Array::from_vec(xv.clone(), &[8, 16]).unwrap();
    let ya = Array::from_vec(yv.clone(), &[16, 4]).unwrap();
    let r: Vec<f64> = matmul_ref(
        &xv.iter().map(|&x| bf16r(x) as f64).collect::<Vec<_>>(),
        &yv.iter().map(|&x| bf16r(x) as f64).collect::<Vec<_>>(),
        8,
        16,
        4,
    );
    let e = jnp::einsum_with("ik,kj->ij", &[xa.clone(), ya.clone()], lax::DotAlgorithmPreset::Bf16Bf16F32).unwrap();
    assert!(rel_err(&to_f64(&e), &r) < 2e-6);
    let d = lax::dot_general_with(&xa, &ya, (&[1], &[0]), (&[], &[]), lax::DotAlgorithmPreset::Bf16Bf16F32, None).unwrap();
    assert!(rel_err(&to_f64(&d), &r) < 2e-6);
    // Levels compute in f32 on CPU.
    let h = jnp::dot_with(&xa, &ya, (lax::Precision::High, lax::Precision::Default)).unwrap();
    let exact = matmul_ref(&xv.iter().map(|&x| x as f64).collect::<Vec<_>>(), &yv.iter().map(|&x| x as f64).collect::<Vec<_>>(), 8, 16, 4);
    assert!(rel_err(&to_f64(&h), &exact) < 2e-6);
}

#[test]
fn jaxpr_prints_precision() {
    let _l = serial();
    let x = jnp::ones(&[2, 2], DType::F32);
    let j = make_jaxpr(|a: Array| jnp::dot_with(&a, &a, "highest"), &x).unwrap();
    expect_test::expect![[r#"
        { lambda ; a:f32[2,2]. let
            b:f32[2,2] = dot_general[
              dimension_numbers=(([1], [0]), ([], []))
              precision=(Precision.HIGHEST, Precision.HIGHEST)
              preferred_element_type=float32
            ] a a
          in (b,) }"#]]
    .assert_eq(&j.to_string());
    let j = make_jaxpr(|a: Array| jnp::dot_with(&a, &a, (lax::Precision::High, lax::Precision::Default)), &x).unwrap();
    assert!(j.to_string().contains("precision=(Precision.HIGH, Precision.DEFAULT)"), "{j}");
}

/// The inventory's exact jaxpr (JAX 0.10): autodiff carries the algorithm to the transposed dot.
#[test]
fn grad_keeps_the_algorithm() {
    let _l = serial();
    let loss = |(x, w): (Array, Array)| jnp::matmul_with(&x, &w, "BF16_BF16_F32").map(|y| y.sum());
    let g = jit(grad_argnums(loss, &[1]));
    let t = g.trace((&jnp::ones(&[4, 8], DType::F32), &jnp::ones(&[8, 2], DType::F32))).unwrap();
    let text = t.jaxpr().to_string();
    // As JAX's: the cotangent of w is dot_general(ct, x) over the batch rows, then transposed.
    // (Our grad_argnums also returns x's zero cotangent, whose dead product is printed `_`.)
    let expected = "    f:f32[2,8] = dot_general[
      dimension_numbers=(([0], [0]), ([], []))
      precision=BF16_BF16_F32
      preferred_element_type=float32
    ] e a
    g:f32[8,2] = transpose[permutation=(1, 0)] f
";
    assert!(text.contains(expected), "{text}");
    assert!(text.matches("precision=BF16_BF16_F32").count() >= 2, "{text}");
}

#[test]
fn default_precision_is_scoped_and_lowered() {
    let _l = serial();
    let f = jit(|(a, b): (Array, Array)| jnp::matmul(&a, &b));
    let (xv, yv) = (values(64 * 64, 7), values(64 * 64, 8));
    let xa = Array::from_vec(xv.clone(), &[64, 64]).unwrap();
    let ya = Array::from_vec(yv.clone(), &[64, 64]).unwrap();
    let exact = matmul_ref(&xv.iter().map(|&x| x as f64).collect::<Vec<_>>(), &yv.iter().map(|&x| x as f64).collect::<Vec<_>>(), 64, 64, 64);
    let plain = f.lower((&xa, &ya)).unwrap().as_text();
    assert!(!plain.contains("precision ="), "{plain}");
    {
        let _g = lax::with_default_matmul_precision("highest").unwrap();
        let l = f.lower((&xa, &ya)).unwrap();
        assert!(l.as_text().contains("// dot_general precision = [HIGHEST, HIGHEST]"), "{}", l.as_text());
        // The jaxpr keeps precision=None (as in JAX).
        assert!(f.trace((&xa, &ya)).unwrap().jaxpr().to_string().contains("precision=None"));
    }
    {
        let _g = lax::with_default_matmul_precision(lax::DotAlgorithmPreset::Bf16Bf16F32).unwrap();
        assert_eq!(lax::default_matmul_precision().unwrap().short(), "BF16_BF16_F32");
        let e = rel_err(&to_f64(&f.call((&xa, &ya)).unwrap()), &exact);
        assert!(e > 3e-4, "jit under BF16_BF16_F32 default: {e:e}");
        let e = rel_err(&to_f64(&jnp::matmul(&xa, &ya).unwrap()), &exact);
        assert!(e > 3e-4, "eager under BF16_BF16_F32 default: {e:e}");
        // An explicit precision wins over the default.
        let e = rel_err(&to_f64(&jnp::matmul_with(&xa, &ya, "F32_F32_F32").unwrap()), &exact);
        assert!(e < 2e-6, "{e:e}");
        assert!(f.lower((&xa, &ya)).unwrap().as_text().contains("algorithm = <lhs_precision_type = bf16"));
    }
    // Guard dropped: back to f32 (the jit cache is keyed on the default).
    assert_eq!(lax::default_matmul_precision(), None);
    let e = rel_err(&to_f64(&f.call((&xa, &ya)).unwrap()), &exact);
    assert!(e < 2e-6, "{e:e}");
    let e = rel_err(&to_f64(&jnp::matmul(&xa, &ya).unwrap()), &exact);
    assert!(e < 2e-6, "{e:e}");
    // The config flag by name.
    config::update_str("jax_default_matmul_precision", "tensorfloat32").unwrap();
    assert_eq!(lax::default_matmul_precision().unwrap().short(), "high");
    config::update_str("jax_default_matmul_precision", "none").unwrap();
    assert_eq!(lax::default_matmul_precision(), None);
    assert!(config::update_str("jax_default_matmul_precision", "medium").is_err());
}

#[test]
fn precision_compare_table() {
    let _l = serial();
    let xa = Array::from_vec(values(32 * 40, 9), &[32, 40]).unwrap();
    let ya = Array::from_vec(values(40 * 16, 10), &[40, 16]).unwrap();
    let f = jit(|(a, b): (Array, Array)| jnp::matmul(&a, &b));
    let rows = jax::magic::precision_compare_rows(|| f.call((&xa, &ya))).unwrap();
    assert_eq!(rows.len(), 1 + jax::magic::COMPARED_PRESETS.len());
    let get = |p: &str| rows.iter().find(|r| r.precision == p).unwrap().max_rel_error;
    assert!(get("BF16_BF16_F32") > 3e-4 && get("BF16_BF16_F32") < 2e-2);
    assert!(get("BF16_BF16_F32_X3") < 5e-5);
    assert!(get("DEFAULT") < 1e-6);
    assert_eq!(lax::default_matmul_precision(), None, "the compare restores the default");
    let t = jax::magic::precision_compare(|| f.call((&xa, &ya))).unwrap().0;
    println!("{t}");
    assert!(t.starts_with("precision"), "{t}");
    assert!(t.contains("F64_F64_F64 (reference)"), "{t}");
    assert!(!t.contains("every preset gave the reference's values"), "{t}");
    // A call without a contraction: every row's error is 0, and the table says why.
    let g = jit(|(a, b): (Array, Array)| &a.sin() + &b.sum());
    let t = jax::magic::precision_compare(|| g.call((&xa, &ya))).unwrap().0;
    assert!(t.contains("every preset gave the reference's values: the precision applies only to contractions"), "{t}");
}

#[test]
fn errors() {
    let _l = serial();
    let x = jnp::ones(&[4, 4], DType::F32);
    let e = jnp::dot_with(&x, &x, "ANY_F8_ANY_F8_F32").unwrap_err();
    assert!(e.to_string().contains("The precision 'ANY_F8_ANY_F8_F32' is not supported by dot_general on CPU"), "{e}");
    let e = jnp::dot_with(&x, &x, "medium").unwrap_err();
    assert!(e.to_string().contains("Unrecognized precision: 'medium'"), "{e}");
    let i = jnp::ones(&[2, 2], DType::I32);
    let e = jnp::dot_with(&i, &i, "BF16_BF16_F32").unwrap_err();
    assert!(e.to_string().contains("needs floating-point operands"), "{e}");
    // Levels on integers are fine (they do not change integer products).
    assert_eq!(jnp::dot_with(&i, &i, "highest").unwrap().to_vec::<i32>().unwrap(), vec![2, 2, 2, 2]);
}

#[test]
fn a_retrace_for_another_default_precision_is_explained_as_a_context_change() {
    let _l = serial();
    jax::transform::explain::clear();
    let a = Array::from_vec(values(8 * 8, 11), &[8, 8]).unwrap();
    let f = jit(|a: Array| jnp::matmul(&a, &a));
    f.call(&a).unwrap();
    {
        let _g = lax::with_default_matmul_precision("BF16_BF16_F32").unwrap();
        f.call(&a).unwrap();
    }
    let report = jax::magic::explain().0;
    assert!(
        report.contains("  different tracing context, e.g. due to config or context manager:\n")
            && report.contains("  * jax_default_matmul_precision: now BF16_BF16_F32 and before None"),
        "{report}"
    );
    assert!(report.contains("trace: miss (different tracing context, e.g. due to config or context manager: jax_default_matmul_precision: now BF16_BF16_F32 and before None)"), "{report}");
    assert!(!report.contains("different static arguments"), "{report}");
    // "default" is the level (as in JAX), "DEFAULT" the preset; the table's errors print as Python's `.2e`.
    assert_eq!(lax::DotPrecision::parse("default").unwrap(), lax::DotPrecision::Levels(lax::Precision::Default, lax::Precision::Default));
    assert_eq!(lax::DotPrecision::parse("DEFAULT").unwrap(), lax::DotPrecision::Algorithm(lax::DotAlgorithmPreset::Default));
    assert_eq!(jax::magic::scientific(0.0), "0.00e+00");
    assert_eq!(jax::magic::scientific(0.001234), "1.23e-03");
    assert_eq!(jax::magic::scientific(12345.0), "1.23e+04");
}
