//! Compiled code lives in one process-wide ORC JIT (`compile::orc::compile_object`):
//! every executable's module defines the same entry names, so many live executables must
//! keep computing their own functions; dropping an executable removes its code; modules of
//! the parallel (OpenMP) pipeline link against libomp there too. Results are checked
//! against f64 references.

use jax::prelude::*;
use jax::transform::pipeline::clear_executable_cache;

fn close(what: &str, got: &[f32], want: &[f64], rtol: f64) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((*g as f64 - w).abs() <= 1e-5 + rtol * w.abs(), "{what}[{i}]: got {g}, want {w}");
    }
}

/// Resident set size in bytes (/proc/self/statm, 4 KiB pages).
fn rss_bytes() -> usize {
    let s = std::fs::read_to_string("/proc/self/statm").expect("/proc/self/statm");
    s.split_whitespace().nth(1).and_then(|p| p.parse::<usize>().ok()).expect("statm field") * 4096
}

/// `x * c + k` for the pair (c, k), compiled at O0 (the shared JIT's tier).
fn affine(c: f32, k: f32, x: &Array) -> jax::transform::Compiled<Array, Array> {
    let (c, k) = (c as f64, k as f64);
    let f = jit(move |v: Array| (v * c + k).sin());
    f.lower(x).unwrap().compile_with(&[("opt_level", "0")]).unwrap()
}

#[test]
fn many_live_tier1_executables_each_compute_their_own_function() {
    let xs: Vec<f32> = (0..37).map(|i| i as f32 * 0.25 - 3.0).collect();
    let x = Array::from_vec(xs.clone(), &[37]).unwrap();
    let compiled: Vec<_> = (0..24).map(|i| affine(1.0 + i as f32 * 0.5, i as f32 * 0.125, &x)).collect();
    for c in &compiled {
        assert_eq!(c.opt_level(), 0);
    }
    // Called in reverse order of compilation, after all of them are linked.
    for (i, c) in compiled.iter().enumerate().rev() {
        let (cf, kf) = ((1.0 + i as f32 * 0.5) as f64, (i as f32 * 0.125) as f64);
        let want: Vec<f64> = xs.iter().map(|&v| (v as f64 * cf + kf).sin()).collect();
        close(&format!("executable {i}"), &c.call(&x).unwrap().to_vec::<f32>().unwrap(), &want, 1e-5);
    }
    // Dropping some keeps the others working.
    let kept: Vec<_> = compiled.into_iter().enumerate().filter(|(i, _)| i % 3 == 0).collect();
    for (i, c) in &kept {
        let (cf, kf) = ((1.0 + *i as f32 * 0.5) as f64, (*i as f32 * 0.125) as f64);
        let want: Vec<f64> = xs.iter().map(|&v| (v as f64 * cf + kf).sin()).collect();
        close(&format!("kept executable {i}"), &c.call(&x).unwrap().to_vec::<f32>().unwrap(), &want, 1e-5);
    }
}

#[test]
fn dropped_tier1_executables_give_their_code_back() {
    let x = Array::from_vec(vec![0.5f32; 16], &[16]).unwrap();
    // Warm up: the JIT, the MLIR context and the allocator's arenas.
    for i in 0..40 {
        let c = affine(2.0 + i as f32, 0.0, &x);
        c.call(&x).unwrap();
        drop(c);
        clear_executable_cache();
    }
    let before = rss_bytes();
    for i in 0..400 {
        let c = affine(100.0 + i as f32, 1.0, &x);
        let got = c.call(&x).unwrap().to_vec::<f32>().unwrap();
        assert!((got[0] as f64 - ((0.5 * (100.0 + i as f32)) as f64 + 1.0).sin()).abs() < 1e-4, "executable {i}: {}", got[0]);
        // The executable cache holds every executable compiled; this drops the last one.
        drop(c);
        clear_executable_cache();
    }
    let grown = rss_bytes().saturating_sub(before) as f64 / (1 << 20) as f64;
    // Kept code would be at least a page of text and one of data per executable
    // (> 3 MiB for 400); the MLIR context's uniqued attributes grow a little per module.
    assert!(grown < 24.0, "RSS grew {grown:.1} MiB over 400 compiled and dropped executables");
}

#[test]
fn parallel_pipeline_at_o0_links_libomp_in_the_shared_jit() {
    let n = jax::compile::parallel::PAR_MIN_WORK * 4 + 3;
    let xs: Vec<f32> = (0..n).map(|i| ((i % 1000) as f32) * 0.002 - 1.0).collect();
    let x = Array::from_vec(xs.clone(), &[n]).unwrap();
    let f = jit(|v: Array| (v.clone() * 1.5 + 0.5).tanh() * v);
    let c = f.lower(&x).unwrap().compile_with(&[("opt_level", "0")]).unwrap();
    assert_eq!(c.opt_level(), 0);
    if jax::compile::parallel::num_threads() > 1 {
        assert!(c.as_text().contains("scf.parallel"), "a {n}-element chain takes the parallel pipeline");
    }
    let want: Vec<f64> = xs.iter().map(|&v| ((v as f64) * 1.5 + 0.5).tanh() * v as f64).collect();
    close("parallel O0", &c.call(&x).unwrap().to_vec::<f32>().unwrap(), &want, 1e-5);
}

/// Tier 1 (no IR optimisation) and the optimised tier give the same bits for multiply-add
/// chains and a scan whose body adds a product: both fuse `a*b+c` into one FMA, formed in
/// the IR before LLVM's passes (`context::fuse_multiply_adds`; left to the code generator
/// through `contract` flags, tier 1's FastISel fused none, and a first call differed from
/// later ones in the last bit).
#[test]
fn both_tiers_give_the_same_bits_for_multiply_adds() {
    let n = 1000;
    let xs: Vec<f32> = (0..n).map(|i| ((i * 7919 % 113) as f32 / 113.0) * 4.0 - 2.0).collect();
    let x = Array::from_vec(xs.clone(), &[n]).unwrap();
    let f = jit(|v: Array| (&v * 0.37 + 0.11) * &v + 1.3);
    let c = f.lower(&x).unwrap().compile().unwrap();
    assert_eq!(c.tier(), 1);
    let t1 = c.call(&x).unwrap().to_vec::<f32>().unwrap();
    // Both multiply-adds are fused (one rounding each), also in tier 1's FastISel code.
    let fused = (0..n).filter(|&i| t1[i].to_bits() == xs[i].mul_add(0.37, 0.11).mul_add(xs[i], 1.3).to_bits()).count();
    assert_eq!(fused, n, "tier 1: {} of {n} elements are not fused multiply-adds", n - fused);
    assert!(c.wait_optimized(std::time::Duration::from_secs(300)), "{:?}", c.optimized_tier_error());
    let t2 = c.call(&x).unwrap().to_vec::<f32>().unwrap();
    let differ = (0..n).filter(|&i| t1[i].to_bits() != t2[i].to_bits()).count();
    assert_eq!(differ, 0, "{differ} of {n} elements differ between the tiers");

    let xs = Array::from_vec((0..96).map(|i| ((i * 31 % 97) as f32 / 97.0) * 2.0 - 1.0).collect::<Vec<f32>>(), &[6, 16]).unwrap();
    let c0 = jnp::zeros(&[16], DType::F32);
    let s = jit(|(c, xs): (Array, Array)| -> Result<(Array, Array)> {
        lax::scan(|(c, x): (Array, Array)| -> Result<(Array, Array)> {
            let c2 = &c * 0.5 + x.tanh();
            Ok((c2.clone(), &c2 * 2.0))
        }, c, xs, None, false, 1)
    });
    let c = s.lower((&c0, &xs)).unwrap().compile().unwrap();
    assert_eq!(c.tier(), 1);
    let (a1, y1) = c.call((&c0, &xs)).unwrap();
    assert!(c.wait_optimized(std::time::Duration::from_secs(300)), "{:?}", c.optimized_tier_error());
    let (a2, y2) = c.call((&c0, &xs)).unwrap();
    let bits = |a: &Array| a.to_vec::<f32>().unwrap().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&a1), bits(&a2), "scan carry differs between the tiers");
    assert_eq!(bits(&y1), bits(&y2), "scan ys differ between the tiers");
}

/// Integer `pow` lowers through `math.ipowi`, which MLIR expands into a `linkonce_odr`
/// helper function in every module using it. Each module keeps its own copy in the shared
/// JIT (made internal): dropping the first executable must not unmap code the second
/// one calls.
#[test]
fn shared_helper_functions_stay_private_to_their_executable() {
    let x = Array::from_vec((0..12).map(|i| i - 5).collect::<Vec<i32>>(), &[12]).unwrap();
    let y = Array::from_vec((0..12).map(|i| i % 4).collect::<Vec<i32>>(), &[12]).unwrap();
    let first = jit(|(v, y): (Array, Array)| v.pow(&y)).lower((&x, &y)).unwrap().compile_with(&[("opt_level", "0")]).unwrap();
    let second = jit(|(v, y): (Array, Array)| v.pow(&y) + 1).lower((&x, &y)).unwrap().compile_with(&[("opt_level", "0")]).unwrap();
    assert!(second.asm().unwrap().contains("ipowi"), "the module has MLIR's ipowi helper");
    let want1: Vec<i32> = (0..12).map(|i: i32| (i - 5).pow((i % 4) as u32)).collect();
    let want2: Vec<i32> = want1.iter().map(|v| v + 1).collect();
    assert_eq!(first.call((&x, &y)).unwrap().to_vec::<i32>().unwrap(), want1);
    assert_eq!(second.call((&x, &y)).unwrap().to_vec::<i32>().unwrap(), want2);
    drop(first);
    clear_executable_cache();
    for _ in 0..3 {
        assert_eq!(second.call((&x, &y)).unwrap().to_vec::<i32>().unwrap(), want2);
    }
}

/// At O2 the optimiser inlines the entry into the packed wrapper; the wrapper carries the
/// entry's attributes, so `prefer-vector-width=512` still holds and an f32 chain is
/// vectorised with zmm registers on an AVX-512 host (the assembly is emitted as the JIT
/// compiles: same wrapper, linkage and code generator level).
#[test]
fn optimised_code_keeps_512_bit_vectors_on_avx512_hosts() {
    let avx512 = std::fs::read_to_string("/proc/cpuinfo").map(|c| c.split_whitespace().any(|w| w == "avx512f")).unwrap_or(false);
    let x = Array::from_vec((0..4096).map(|i| i as f32 * 0.001).collect::<Vec<f32>>(), &[4096]).unwrap();
    let c = jit(|v: Array| (&v * 1.5 + 0.5).tanh() * &v).lower(&x).unwrap().compile_with(&[("opt_level", "2")]).unwrap();
    let asm = c.asm().unwrap();
    assert!(asm.contains("jaxrepl_packed"), "the assembly has the packed entry");
    if avx512 && std::env::var_os("JAXREPL_PREFER_VECTOR_WIDTH").is_none() {
        assert!(asm.contains("zmm"), "no 512-bit vectors at O2 on an AVX-512 host");
    }
    let got = c.call(&x).unwrap().to_vec::<f32>().unwrap();
    let want: Vec<f64> = (0..4096).map(|i| { let v = (i as f32 * 0.001) as f64; (v * 1.5 + 0.5).tanh() * v }).collect();
    close("tanh chain O2", &got, &want, 1e-5);
}

/// Float sums add in an order fixed by the lowering (64 or 16 lane sums added pairwise,
/// then the remainder; `Lowerer::reduce_lanes`), not chosen by LLVM at O2, so tier 1 and
/// the optimised tier agree bitwise: a full sum of 300 007 values (the split, threaded
/// path), row sums of [97, 1031] and [40, 100] (the two lane counts), a sum over the first
/// and last axes of [5, 7, 300], long sums over a leading axis (blocks,
/// `Lowerer::reduce_blocks`), a fused `sum(x * x)`, a softmax, and a long elementwise
/// chain (where inlining, CSE and hoisting at O2 used to change which products fused).
/// Sums are checked against f64 sums within 1e-6 · Σ|x|.
#[test]
fn both_tiers_give_the_same_bits_for_float_sums() {
    let bits = |a: &Array| a.to_vec::<f32>().unwrap().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    let vals = |n: usize| -> Vec<f32> { (0..n).map(|i| ((i as f64 * 0.618_033_988_7).fract() * 2.0 - 0.7) as f32).collect() };
    type Case = (&'static str, Vec<usize>, Box<dyn Fn(Array) -> Result<Array> + Send + Sync>, Option<Vec<usize>>);
    let cases: Vec<Case> = vec![
        ("full sum", vec![300_007], Box::new(|v: Array| jnp::sum(&v, None)), Some(vec![0])),
        ("rows of 1031", vec![97, 1031], Box::new(|v: Array| jnp::sum(&v, Some(&[1]))), Some(vec![1])),
        ("rows of 100", vec![40, 100], Box::new(|v: Array| jnp::sum(&v, Some(&[-1]))), Some(vec![1])),
        ("axes 0 and 2", vec![5, 7, 300], Box::new(|v: Array| jnp::sum(&v, Some(&[0, 2]))), Some(vec![0, 2])),
        ("columns of 70 001", vec![70_001, 3], Box::new(|v: Array| jnp::sum(&v, Some(&[0]))), Some(vec![0])),
        ("axes 0 and 2 in blocks", vec![40_003, 2, 3], Box::new(|v: Array| jnp::sum(&v, Some(&[0, 2]))), Some(vec![0, 2])),
        ("axes 0 and 1, the second longest", vec![3, 30_011, 2], Box::new(|v: Array| jnp::sum(&v, Some(&[0, 1]))), Some(vec![0, 1])),
        ("sum of squares", vec![70_001], Box::new(|v: Array| jnp::sum(&(&v * &v), None)), None),
        ("softmax", vec![64, 1000], Box::new(|v: Array| jax::nn::softmax(&v, -1)), None),
        (
            "long elementwise chain",
            vec![5000],
            Box::new(|v: Array| Ok(((&v * 1.1 + 0.3) * &v - 0.7) * (&v * 0.5) + v.tanh() * &v - (&v * &v).exp() * 0.25 + (&v * 3.0 - 1.0).sin())),
            None,
        ),
    ];
    for (what, shape, f, axes) in cases {
        let n: usize = shape.iter().product();
        let xs = vals(n);
        let x = Array::from_vec(xs.clone(), &shape).unwrap();
        let c = jit(move |v: Array| f(v)).lower(&x).unwrap().compile().unwrap();
        assert_eq!(c.tier(), 1, "{what}");
        let t1 = c.call(&x).unwrap();
        assert!(c.wait_optimized(std::time::Duration::from_secs(300)), "{what}: {:?}", c.optimized_tier_error());
        let t2 = c.call(&x).unwrap();
        let (b1, b2) = (bits(&t1), bits(&t2));
        let differ = b1.iter().zip(&b2).filter(|(a, b)| a != b).count();
        assert_eq!(differ, 0, "{what}: {differ} of {} results differ between the tiers", b1.len());
        let Some(axes) = axes else { continue };
        // f64 reference over `axes` of the row-major array.
        let kept: Vec<usize> = (0..shape.len()).filter(|i| !axes.contains(i)).collect();
        let m: usize = kept.iter().map(|&i| shape[i]).product();
        let (mut want, mut abs) = (vec![0f64; m], vec![0f64; m]);
        for (flat, &v) in xs.iter().enumerate() {
            let (mut rem, mut idx) = (flat, vec![0usize; shape.len()]);
            for d in (0..shape.len()).rev() {
                idx[d] = rem % shape[d];
                rem /= shape[d];
            }
            let o = kept.iter().fold(0, |acc, &d| acc * shape[d] + idx[d]);
            want[o] += v as f64;
            abs[o] += (v as f64).abs();
        }
        let got = t1.to_vec::<f32>().unwrap();
        for i in 0..m {
            assert!((got[i] as f64 - want[i]).abs() <= 1e-6 * abs[i], "{what}[{i}]: got {}, f64 {}", got[i], want[i]);
        }
    }
}

/// `pow` calls libm in both tiers (`orc::opaque_pow`): LLVM's optimiser no longer rewrites
/// `pow(x, 0.5)`, `pow(x, 2)`, `pow(x, -1)` or `pow(2, y)` into `sqrt`, `x*x`, `1/x` or
/// `exp2` in the optimised tier only, where those differed from libm's bits on a few of
/// 4096 inputs (f32 and f64).
#[test]
fn both_tiers_give_the_same_bits_for_pow() {
    let xs: Vec<f32> = (0..4096).map(|i| 0.001 + i as f32 * 0.37).collect();
    let ys: Vec<f32> = (0..4096).map(|i| -20.0 + i as f32 * 0.0123).collect();
    type F = Box<dyn Fn(Array) -> Result<Array> + Send + Sync>;
    let cases: Vec<(&str, &Vec<f32>, F)> = vec![
        ("x^0.5", &xs, Box::new(|v: Array| Ok(v.pow(0.5)))),
        ("x^2", &xs, Box::new(|v: Array| Ok(v.pow(2.0)))),
        ("x^-1", &xs, Box::new(|v: Array| Ok(v.pow(-1.0)))),
        ("2^y", &ys, Box::new(|v: Array| Ok(jnp::full_like(&v, 2.0, None).pow(&v)))),
    ];
    for (what, vals, f) in cases {
        let x = Array::from_vec(vals.clone(), &[vals.len()]).unwrap();
        let c = jit(move |v: Array| f(v)).lower(&x).unwrap().compile().unwrap();
        assert_eq!(c.tier(), 1, "{what}");
        let t1 = c.call(&x).unwrap().to_vec::<f32>().unwrap();
        assert!(c.wait_optimized(std::time::Duration::from_secs(300)), "{what}: {:?}", c.optimized_tier_error());
        let t2 = c.call(&x).unwrap().to_vec::<f32>().unwrap();
        let differ = t1.iter().zip(&t2).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
        assert_eq!(differ, 0, "{what}: {differ} of {} elements differ between the tiers", t1.len());
        // libm's values (powf), within 1 ulp of the f64 result.
        for (i, &v) in vals.iter().enumerate() {
            let want = match what {
                "x^0.5" => (v as f64).sqrt(),
                "x^2" => (v as f64) * (v as f64),
                "x^-1" => 1.0 / v as f64,
                _ => 2f64.powf(v as f64),
            };
            assert!((t1[i] as f64 - want).abs() <= want.abs() * 2.4e-7, "{what}[{i}]: {} vs {want}", t1[i]);
        }
    }
}
