//! Multi-threaded kernels (issue 4): large elementwise ops, reductions and softmax run as
//! OpenMP loops over chunks (`compile::parallel`), long reductions are split into
//! partial results (`lower::REDUCE_SPLIT_*`). Every result is checked against an f64
//! reference, across sizes around the thresholds (odd sizes, 1, 0), every reduction axis of
//! 2-D/3-D arrays, and run twice for bitwise determinism.

use jax::compile::parallel::PAR_MIN_WORK;
use jax::lower::{REDUCE_SPLIT_MIN, REDUCE_SPLIT_PARTS};
use jax::prelude::*;

/// Deterministic values in about [-3, 3] (not on a grid, so sums round).
fn vals(n: usize, seed: u64) -> Vec<f32> {
    jaxrepl_tests::lcg_f32(n, seed, -3.0, 3.0)
}

fn arr(v: &[f32], shape: &[usize]) -> Array {
    Array::from_vec(v.to_vec(), shape).unwrap()
}

fn parallel_ir(f: &Jitted<Array, Array>, x: &Array) -> bool {
    f.lower(x).unwrap().compile().unwrap().as_text().contains("scf.parallel")
}

#[test]
fn elementwise_chain_matches_f64_around_the_threshold() {
    let f = jit(|x: Array| (x.clone() * 1.5 + 0.5).tanh() * x);
    for n in [0, 1, 7, PAR_MIN_WORK - 1, PAR_MIN_WORK, PAR_MIN_WORK + 1, 3 * PAR_MIN_WORK + 5] {
        let v = vals(n, n as u64);
        let x = arr(&v, &[n]);
        let y = f.call(&x).unwrap().to_vec::<f32>().unwrap();
        assert_eq!(y.len(), n);
        for (i, (&a, &r)) in y.iter().zip(&v).enumerate() {
            let r = r as f64;
            let want = (r * 1.5 + 0.5).tanh() * r;
            assert!((a as f64 - want).abs() <= 2e-6 * (1.0 + want.abs()), "n={n} i={i}: {a} vs {want}");
        }
        let again = f.call(&x).unwrap().to_vec::<f32>().unwrap();
        assert!(y.iter().zip(&again).all(|(a, b)| a.to_bits() == b.to_bits()), "n={n}: not deterministic");
        // Only large calls take the multi-threaded path (when the machine has 2+ cores).
        if n < PAR_MIN_WORK {
            assert!(!parallel_ir(&f, &x), "n={n} should stay single-threaded");
        } else if jax::compile::parallel::num_threads() > 1 {
            assert!(parallel_ir(&f, &x), "n={n} should be split over threads");
        }
    }
}

#[test]
fn two_dimensional_elementwise_with_broadcast() {
    // Rows fewer than, equal to and more than the thread count; a broadcast row vector.
    let f = jit(|(x, b): (Array, Array)| x * b + 1.0);
    for (r, c) in [(1, PAR_MIN_WORK + 3), (2, PAR_MIN_WORK / 2 + 1), (3, 50_001), (1001, 263)] {
        let (xv, bv) = (vals(r * c, 3), vals(c, 4));
        let y = f.call((&arr(&xv, &[r, c]), &arr(&bv, &[c]))).unwrap().to_vec::<f32>().unwrap();
        for i in 0..r * c {
            let want = xv[i] as f64 * bv[i % c] as f64 + 1.0;
            assert!((y[i] as f64 - want).abs() <= 1e-6 * (1.0 + want.abs()), "[{r},{c}] i={i}");
        }
    }
}

#[test]
fn donated_output_is_written_in_place_on_the_parallel_path() {
    let n = 2 * PAR_MIN_WORK + 3;
    let f = jit(|x: Array| (x.clone() * 1.5 + 0.5).tanh() * x).donate_argnums(&[0]);
    let v = vals(n, 9);
    let x = arr(&v, &[n]);
    let p = x.unsafe_buffer_pointer().unwrap();
    let y = f.call(&x).unwrap();
    assert_eq!(y.unsafe_buffer_pointer().unwrap(), p, "output not in the donated buffer");
    let y = y.to_vec::<f32>().unwrap();
    for (i, (&a, &r)) in y.iter().zip(&v).enumerate() {
        let r = r as f64;
        let want = (r * 1.5 + 0.5).tanh() * r;
        assert!((a as f64 - want).abs() <= 2e-6 * (1.0 + want.abs()), "i={i}");
    }
}

/// f64 reference of sum/max/min of `v` (shape `shape`) over `axes`.
fn reference(v: &[f32], shape: &[usize], axes: &[usize], op: &str) -> (Vec<f64>, Vec<f64>) {
    let nd = shape.len();
    let out_shape: Vec<usize> = (0..nd).filter(|i| !axes.contains(i)).map(|i| shape[i]).collect();
    let m: usize = out_shape.iter().product();
    let init = match op {
        "sum" => 0.0,
        "max" => f64::NEG_INFINITY,
        _ => f64::INFINITY,
    };
    let (mut out, mut abs) = (vec![init; m], vec![0.0; m]);
    let mut idx = vec![0usize; nd];
    for &x in v {
        let mut o = 0;
        for i in (0..nd).filter(|i| !axes.contains(i)) {
            o = o * shape[i] + idx[i];
        }
        let x = x as f64;
        out[o] = match op {
            "sum" => out[o] + x,
            "max" => out[o].max(x),
            _ => out[o].min(x),
        };
        abs[o] += x.abs();
        for d in (0..nd).rev() {
            idx[d] += 1;
            if idx[d] < shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    (out, abs)
}

fn check_reduce(shape: &[usize], axes: &[usize]) {
    let n: usize = shape.iter().product();
    let v = vals(n, n as u64 + axes.len() as u64);
    let x = arr(&v, shape);
    let ax: Vec<isize> = axes.iter().map(|&a| a as isize).collect();
    for op in ["sum", "max", "min"] {
        let a2 = ax.clone();
        let f = match op {
            "sum" => jit(move |x: Array| jnp::sum(&x, Some(&a2)).unwrap()),
            "max" => jit(move |x: Array| jnp::max(&x, Some(&a2)).unwrap()),
            _ => jit(move |x: Array| jnp::min(&x, Some(&a2)).unwrap()),
        };
        let y = f.call(&x).unwrap().to_vec::<f32>().unwrap();
        let (want, abs) = reference(&v, shape, axes, op);
        assert_eq!(y.len(), want.len(), "{op} {shape:?} {axes:?}");
        for i in 0..y.len() {
            let tol = if op == "sum" { 1e-6 * abs[i] + 1e-6 } else { 0.0 };
            assert!((y[i] as f64 - want[i]).abs() <= tol, "{op} {shape:?} over {axes:?}, result {i}: {} vs {}", y[i], want[i]);
        }
        let again = f.call(&x).unwrap().to_vec::<f32>().unwrap();
        assert!(y.iter().zip(&again).all(|(a, b)| a.to_bits() == b.to_bits()), "{op} {shape:?} {axes:?}: not deterministic");
    }
}

#[test]
fn full_reductions_around_the_split_threshold() {
    let p = REDUCE_SPLIT_PARTS;
    for n in [1, 2, REDUCE_SPLIT_MIN - 1, REDUCE_SPLIT_MIN, REDUCE_SPLIT_MIN + 1, REDUCE_SPLIT_MIN + p - 1, 16 * PAR_MIN_WORK + 7] {
        check_reduce(&[n], &[0]);
    }
}

#[test]
fn reductions_over_every_axis_of_2d_and_3d_arrays() {
    for shape in [vec![3, 100_003], vec![100_003, 3], vec![517, 1031]] {
        for axes in [vec![0], vec![1], vec![0, 1]] {
            check_reduce(&shape, &axes);
        }
    }
    let shape = [5, 3, 40_009];
    for axes in [vec![0], vec![1], vec![2], vec![0, 1], vec![0, 2], vec![1, 2], vec![0, 1, 2]] {
        check_reduce(&shape, &axes);
    }
}

#[test]
fn empty_and_integer_reductions() {
    // A sum of nothing is 0; an int sum over the split path is exact.
    let f = jit(|x: Array| x.sum());
    let e = Array::from_vec(Vec::<f32>::new(), &[0, 70_000]).unwrap();
    assert_eq!(f.call(&e).unwrap().to_vec::<f32>().unwrap(), vec![0.0]);
    let n = REDUCE_SPLIT_MIN * 3 + 11;
    let iv: Vec<i32> = (0..n as i32).map(|i| (i % 7) - 3).collect();
    let want: i64 = iv.iter().map(|&v| v as i64).sum();
    let x = Array::from_vec(iv, &[n]).unwrap();
    assert_eq!(f.call(&x).unwrap().to_vec::<i32>().unwrap(), vec![want as i32]);
}

#[test]
fn max_propagates_nan_on_the_split_path() {
    let n = 4 * REDUCE_SPLIT_MIN + 3;
    let mut v = vals(n, 5);
    v[n / 2 + 1] = f32::NAN;
    let x = arr(&v, &[n]);
    assert!(jit(|x: Array| x.max()).call(&x).unwrap().to_vec::<f32>().unwrap()[0].is_nan());
    assert!(jit(|x: Array| x.min()).call(&x).unwrap().to_vec::<f32>().unwrap()[0].is_nan());
}

fn softmax_ref(v: &[f32], rows: usize, cols: usize) -> Vec<f64> {
    let mut out = vec![0.0; rows * cols];
    for r in 0..rows {
        let row = &v[r * cols..(r + 1) * cols];
        let m = row.iter().fold(f64::NEG_INFINITY, |a, &b| a.max(b as f64));
        let s: f64 = row.iter().map(|&x| (x as f64 - m).exp()).sum();
        for c in 0..cols {
            out[r * cols + c] = (row[c] as f64 - m).exp() / s;
        }
    }
    out
}

#[test]
fn softmax_matches_f64_fresh_and_donated() {
    for (rows, cols) in [(1, 3), (2, PAR_MIN_WORK / 2 + 7), (1031, 257), (3, 70_001)] {
        let v = vals(rows * cols, rows as u64);
        let want = softmax_ref(&v, rows, cols);
        let f = jit(|x: Array| nn::softmax(&x, -1).unwrap());
        let y = f.call(&arr(&v, &[rows, cols])).unwrap().to_vec::<f32>().unwrap();
        let again = f.call(&arr(&v, &[rows, cols])).unwrap().to_vec::<f32>().unwrap();
        assert!(y.iter().zip(&again).all(|(a, b)| a.to_bits() == b.to_bits()), "[{rows},{cols}] not deterministic");
        let g = jit(|(x, _b): (Array, Array)| nn::softmax(&x, -1).unwrap()).donate_argnums(&[1]);
        let x = arr(&v, &[rows, cols]);
        let b = jnp::zeros(&[rows, cols], DType::F32);
        let p = b.unsafe_buffer_pointer().unwrap();
        let z = g.call((&x, &b)).unwrap();
        assert_eq!(z.unsafe_buffer_pointer().unwrap(), p, "[{rows},{cols}] donated output not reused");
        let z = z.to_vec::<f32>().unwrap();
        for i in 0..rows * cols {
            assert!((y[i] as f64 - want[i]).abs() <= 1e-6 * want[i] + 1e-9, "[{rows},{cols}] i={i}: {} vs {}", y[i], want[i]);
            assert_eq!(y[i].to_bits(), z[i].to_bits(), "[{rows},{cols}] i={i}: donated differs");
        }
    }
}

/// A float sum over a leading axis adds in blocks (`Lowerer::reduce_blocks`): a column of
/// 2^24 + 4096 ones sums to its exact count (one element after another, f32 stops growing
/// at 2^24), as JAX's does; the mean is 1.
#[test]
fn column_sums_of_more_than_2_24_rows_are_exact() {
    let n = (1usize << 24) + 4096;
    let x = jnp::ones(&[n, 2], DType::F32);
    let s = jit(|v: Array| jnp::sum(&v, Some(&[0]))).call(&x).unwrap();
    assert_eq!(s.to_vec::<f32>().unwrap(), vec![n as f32; 2]);
    let m = jit(|v: Array| jnp::mean(&v, Some(&[0]))).call(&x).unwrap();
    assert_eq!(m.to_vec::<f32>().unwrap(), vec![1.0; 2]);
    // The longest reduced axis is cut, whatever its position: over (0, 1) of
    // [8, 2^21 + 4096, 2] (a fresh user's case; JAX gives 16809984).
    let k = (1usize << 21) + 4096;
    let x = jnp::ones(&[8, k, 2], DType::F32);
    let s = jit(|v: Array| jnp::sum(&v, Some(&[0, 1]))).call(&x).unwrap();
    assert_eq!(s.to_vec::<f32>().unwrap(), vec![(8 * k) as f32; 2]);
}
