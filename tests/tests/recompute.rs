//! Cheap elementwise producers read by several loop nests are recomputed per consumer
//! (`lower::recompute`) and row reductions of max/min use LLVM's `maximum`/`minimum`
//! intrinsics: results against an f64 reference, for sizes above and below the recompute
//! threshold (2^14 elements), odd row lengths, rows with NaN, ±inf and -0, and 1-element
//! arrays. f32 only: this binary runs without x64 (f64 max/min with NaN and signed zeros
//! are in x64.rs).

use jax::prelude::*;
use jaxrepl_tests::{host_array as host, lcg_f32};

fn check(name: &str, got: &Array, shape: &[usize], want: &[f64], tol: f64) {
    assert_eq!(got.shape(), shape, "{name}: shape");
    let g = got.to_vec::<f64>().unwrap();
    assert_eq!(g.len(), want.len(), "{name}: length");
    for (i, (a, b)) in g.iter().zip(want).enumerate() {
        let same_nan = a.is_nan() && b.is_nan();
        assert!(same_nan || a == b || (a - b).abs() <= tol * (1e-30 + b.abs()), "{name}[{i}]: got {a}, want {b}");
    }
}

/// Row-wise softmax of `v` viewed as `[rows, n]`, in f64.
fn softmax_ref(v: &[f64], n: usize) -> Vec<f64> {
    v.chunks(n.max(1))
        .flat_map(|r| {
            let m = r.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let e: Vec<f64> = r.iter().map(|x| (x - m).exp()).collect();
            let s: f64 = e.iter().sum();
            e.into_iter().map(move |x| x / s)
        })
        .collect()
}

#[test]
fn softmax_matches_f64_reference_above_and_below_the_threshold() {
    for shape in [[67usize, 515], [4, 1024], [1, 1], [3, 5], [130, 130]] {
        let (x, xv) = host(&shape, 7);
        // Spread the inputs so exp covers a wide range.
        let x = x * 9.0;
        let xv: Vec<f64> = xv.iter().map(|v| (*v as f32 * 9.0) as f64).collect();
        let f = jit(|x: Array| nn::softmax(&x, -1).unwrap());
        check(&format!("softmax {shape:?}"), &f.call(&x).unwrap(), &shape, &softmax_ref(&xv, shape[1]), 1e-5);
    }
}

#[test]
fn softmax_lowering_recomputes_exp_per_consumer() {
    let x = jnp::ones(&[64, 1024], DType::F32);
    let f = jit(|x: Array| nn::softmax(&x, -1).unwrap());
    let text = f.lower(&x).unwrap().as_text();
    // The exp(x - max) producer chain is emitted once for the sum and once for the
    // division (each copy then fuses into its consumer); below the threshold, once.
    let subs = |t: &str| t.matches("arith.subf").count();
    let small = jnp::ones(&[4, 1024], DType::F32);
    let small_text = f.lower(&small).unwrap().as_text();
    assert_eq!(subs(&text), 2 * subs(&small_text), "{text}");
    // After fusion no [64, 1024] temporary is allocated (the result is the entry's
    // output argument).
    let opt = f.lower(&x).unwrap().compile().unwrap().as_text();
    assert!(!opt.contains("memref.alloc() {alignment = 64 : i64} : memref<64x1024xf32>"), "{opt}");
    assert!(opt.contains("llvm.intr.maximum"), "{opt}");
}

#[test]
fn shared_producer_with_three_and_four_consumers() {
    let (x, xv) = host(&[33, 1001], 3);
    // y = tanh(1.5 x + 0.5) read by a row sum, a row max and a product (3 consumers);
    // z = exp(x) read by 4 (left materialised).
    let f = jit(|x: Array| {
        let y = (x.clone() * 1.5 + 0.5).tanh();
        let z = x.exp();
        let s = y.sum_axes(&[1]);
        let m = jnp::max(&y, Some(&[1])).unwrap();
        let p = &y * 2.0;
        let zs = z.sum_axes(&[1]) + jnp::min(&z, Some(&[1])).unwrap() + jnp::max(&z, Some(&[1])).unwrap();
        let zz = &z * 3.0;
        (s, m, p, zs, zz)
    });
    let (s, m, p, zs, zz) = f.call(&x).unwrap();
    let n = 1001;
    let y: Vec<f64> = xv.iter().map(|v| (1.5 * v + 0.5).tanh()).collect();
    let z: Vec<f64> = xv.iter().map(|v| v.exp()).collect();
    let rows = |v: &[f64], g: fn(&[f64]) -> f64| v.chunks(n).map(g).collect::<Vec<f64>>();
    check("sum y", &s, &[33], &rows(&y, |r| r.iter().sum()), 1e-5);
    check("max y", &m, &[33], &rows(&y, |r| r.iter().copied().fold(f64::NEG_INFINITY, f64::max)), 1e-6);
    check("2y", &p, &[33, 1001], &y.iter().map(|v| 2.0 * v).collect::<Vec<_>>(), 1e-6);
    let zsum = rows(&z, |r| r.iter().sum::<f64>() + r.iter().copied().fold(f64::INFINITY, f64::min) + r.iter().copied().fold(f64::NEG_INFINITY, f64::max));
    check("z sums", &zs, &[33], &zsum, 1e-5);
    check("3z", &zz, &[33, 1001], &z.iter().map(|v| 3.0 * v).collect::<Vec<_>>(), 1e-6);
}

#[test]
fn row_max_and_min_keep_nan_inf_and_signed_zero() {
    // Rows of odd length (not a multiple of the vector width), long enough to vectorise;
    // row r gets special values at positions depending on r.
    let (rows, n) = (9usize, 203usize);
    let mut v: Vec<f32> = lcg_f32(rows * n, 5, -100.0, 100.0);
    v[n + 7] = f32::NAN; // row 1: NaN early
    v[2 * n + n - 1] = f32::NAN; // row 2: NaN last
    v[3 * n + 100] = f32::INFINITY;
    v[4 * n + 3] = f32::NEG_INFINITY;
    for x in &mut v[5 * n..6 * n] {
        *x = -0.0; // row 5: all -0 → max -0, min -0
    }
    v[6 * n..7 * n].fill(-0.0);
    v[6 * n + 150] = 0.0; // row 6: one +0 → max +0, min -0
    v[7 * n..8 * n].fill(f32::NEG_INFINITY); // row 7: all -inf
    let x = Array::from_vec(v.clone(), &[rows, n]).unwrap();
    let f = jit(|x: Array| (jnp::max(&x, Some(&[1])).unwrap(), jnp::min(&x, Some(&[1])).unwrap()));
    let (mx, mn) = f.call(&x).unwrap();
    let (mx, mn) = (mx.to_vec::<f64>().unwrap(), mn.to_vec::<f64>().unwrap());
    for r in 0..rows {
        let row: Vec<f64> = v[r * n..(r + 1) * n].iter().map(|&x| x as f64).collect();
        let has_nan = row.iter().any(|x| x.is_nan());
        let want_max = if has_nan { f64::NAN } else { row.iter().copied().fold(f64::NEG_INFINITY, f64::max) };
        let want_min = if has_nan { f64::NAN } else { row.iter().copied().fold(f64::INFINITY, f64::min) };
        let same = |a: f64, b: f64| (a.is_nan() && b.is_nan()) || (a == b && a.is_sign_negative() == b.is_sign_negative());
        // Signed zeros: max of {-0, +0} is +0, min is -0 (IEEE maximum/minimum).
        let want_max = if r == 6 { 0.0 } else { want_max };
        let want_min = if r == 5 || r == 6 { -0.0 } else { want_min };
        assert!(same(mx[r], want_max), "max row {r}: got {}, want {want_max}", mx[r]);
        assert!(same(mn[r], want_min), "min row {r}: got {}, want {want_min}", mn[r]);
    }
}
