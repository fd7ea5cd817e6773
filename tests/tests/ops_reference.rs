//! Every primitive of the vertical slice, eager and under `jit`, against an f64
//! reference computed here on the host: shapes include 0-d, size-1 broadcast and empty.

use jax::prelude::*;

fn host(shape: &[usize], f: impl Fn(usize) -> f64) -> (Array, Vec<f64>) {
    let n: usize = shape.iter().product();
    let v: Vec<f64> = (0..n).map(f).collect();
    let a = Array::from_vec(v.iter().map(|&x| x as f32).collect::<Vec<f32>>(), shape).unwrap();
    // The reference sees the same f32-rounded inputs.
    let v = v.iter().map(|&x| x as f32 as f64).collect();
    (a, v)
}

fn check(name: &str, got: &Array, want: &[f64], tol: f64) {
    let g = got.to_vec::<f64>().unwrap();
    assert_eq!(g.len(), want.len(), "{name}: length");
    for (i, (a, b)) in g.iter().zip(want).enumerate() {
        let ok = (a.is_nan() && b.is_nan()) || (a - b).abs() <= tol * (1.0 + b.abs());
        assert!(ok, "{name}[{i}]: got {a}, want {b}");
    }
}

type Unary = (&'static str, fn(&Array) -> Array, fn(f64) -> f64, f64);

#[test]
fn unary_ops_eager_and_jit_match_f64() {
    let ops: Vec<Unary> = vec![
        ("sin", |x| x.sin(), f64::sin, 1e-6),
        ("cos", |x| x.cos(), f64::cos, 1e-6),
        ("exp", |x| x.exp(), f64::exp, 1e-6),
        ("log", |x| (x + 3.5).log(), |v| (v + 3.5).ln(), 1e-6),
        ("tanh", |x| x.tanh(), f64::tanh, 1e-6),
        ("sqrt", |x| (x * x).sqrt(), |v| (v * v).sqrt(), 1e-6),
        ("neg", |x| -x, |v| -v, 0.0),
        ("abs", |x| x.abs(), f64::abs, 0.0),
    ];
    for shape in [vec![], vec![1], vec![7], vec![2, 3], vec![0], vec![2, 0, 3]] {
        let (x, xv) = host(&shape, |i| i as f64 * 0.37 - 1.1);
        for &(name, f, r, tol) in &ops {
            let want: Vec<f64> = xv.iter().map(|&v| r(v)).collect();
            check(&format!("eager {name} {shape:?}"), &f(&x), &want, tol);
            let g = jit(move |x: Array| f(&x));
            check(&format!("jit {name} {shape:?}"), &g.call(&x).unwrap(), &want, tol);
        }
    }
}

type Binary = (&'static str, fn(&Array, &Array) -> Array, fn(f64, f64) -> f64);

#[test]
fn binary_ops_with_broadcasting_match_f64() {
    let ops: Vec<Binary> = vec![
        ("add", |a, b| a + b, |a, b| a + b),
        ("sub", |a, b| a - b, |a, b| a - b),
        ("mul", |a, b| a * b, |a, b| a * b),
        ("div", |a, b| a / (b * b + 1.0), |a, b| a / (b * b + 1.0)),
        ("pow", |a, b| a.abs().pow(b), |a, b| a.abs().powf(b)),
        ("max", |a, b| a.maximum(b), f64::max),
        ("min", |a, b| a.minimum(b), f64::min),
        ("lt", |a, b| a.lt(b), |a, b| (a < b) as i32 as f64),
        ("ge", |a, b| a.ge(b), |a, b| (a >= b) as i32 as f64),
        ("eq", |a, b| a.eq(b), |a, b| (a == b) as i32 as f64),
        ("ne", |a, b| a.ne(b), |a, b| (a != b) as i32 as f64),
    ];
    let cases: Vec<(Vec<usize>, Vec<usize>, Vec<usize>)> = vec![
        (vec![4], vec![4], vec![4]),
        (vec![2, 3], vec![3], vec![2, 3]),
        (vec![3, 1], vec![1, 4], vec![3, 4]),
        (vec![], vec![2, 2], vec![2, 2]),
        (vec![0, 3], vec![3], vec![0, 3]),
    ];
    for (sa, sb, so) in cases {
        let (a, av) = host(&sa, |i| i as f64 * 0.5 - 0.75);
        let (b, bv) = host(&sb, |i| 1.25 - i as f64 * 0.25);
        let idx = |s: &[usize], o: &[usize], flat: usize| -> usize {
            // numpy broadcasting: map an output index to an operand index.
            let mut rem = flat;
            let mut coords = vec![0; o.len()];
            for d in (0..o.len()).rev() {
                coords[d] = rem % o[d].max(1);
                rem /= o[d].max(1);
            }
            let off = o.len() - s.len();
            s.iter().enumerate().fold(0, |acc, (d, &n)| acc * n + if n == 1 { 0 } else { coords[d + off] })
        };
        let n: usize = so.iter().product();
        for &(name, f, r) in &ops {
            let want: Vec<f64> = (0..n).map(|k| r(av[idx(&sa, &so, k)], bv[idx(&sb, &so, k)])).collect();
            let e = f(&a, &b);
            assert_eq!(e.shape(), so, "{name}");
            check(&format!("eager {name} {sa:?} {sb:?}"), &e, &want, 1e-6);
            let g = jit(move |(x, y): (Array, Array)| f(&x, &y));
            check(&format!("jit {name} {sa:?} {sb:?}"), &g.call((&a, &b)).unwrap(), &want, 1e-6);
        }
    }
}

#[test]
fn reductions_over_axes_and_shapes() {
    let (x, xv) = host(&[2, 3, 4], |i| ((i * 7) % 11) as f64 - 5.0);
    let at = |i: usize, j: usize, k: usize| xv[i * 12 + j * 4 + k];
    let sum1: Vec<f64> = (0..2).flat_map(|i| (0..4).map(move |k| (0..3).map(|j| at(i, j, k)).sum())).collect();
    check("sum axis 1", &x.sum_axes(&[1]), &sum1, 0.0);
    let sum02: Vec<f64> = (0..3).map(|j| (0..2).flat_map(|i| (0..4).map(move |k| (i, k))).map(|(i, k)| at(i, j, k)).sum()).collect();
    check("sum axes 0,2", &jnp::sum(&x, Some(&[0, -1])).unwrap(), &sum02, 0.0);
    check("max", &x.max(), &[xv.iter().cloned().fold(f64::MIN, f64::max)], 0.0);
    check("min", &x.min(), &[xv.iter().cloned().fold(f64::MAX, f64::min)], 0.0);
    check("mean", &x.mean(), &[xv.iter().sum::<f64>() / 24.0], 1e-6);
    let g = jit(|x: Array| (x.sum_axes(&[2]), jnp::max(&x, Some(&[0])).unwrap()));
    let (s, m) = g.call(&x).unwrap();
    let s2: Vec<f64> = (0..2).flat_map(|i| (0..3).map(move |j| (i, j))).map(|(i, j)| (0..4).map(|k| at(i, j, k)).sum()).collect();
    check("jit sum axis 2", &s, &s2, 0.0);
    let m0: Vec<f64> = (0..3).flat_map(|j| (0..4).map(move |k| (j, k))).map(|(j, k)| at(0, j, k).max(at(1, j, k))).collect();
    check("jit max axis 0", &m, &m0, 0.0);
    let e = jnp::sum(&x, Some(&[3])).unwrap_err();
    assert_eq!(e.ename(), "ValueError");
    assert!(e.message.contains("axis 3 is out of bounds for array of dimension 3"), "{}", e.message);
    let (empty, _) = host(&[0], |_| 0.0);
    check("sum of empty", &empty.sum(), &[0.0], 0.0);
}

#[test]
fn reshape_transpose_matmul() {
    let (x, xv) = host(&[2, 3], |i| i as f64 + 1.0);
    check("reshape", &x.reshape(&[3, 2]), &xv, 0.0);
    check("transpose", &x.t(), &[1.0, 4.0, 2.0, 5.0, 3.0, 6.0], 0.0);
    let (a, av) = host(&[3, 4], |i| (i as f64 * 0.3).sin());
    let (b, bv) = host(&[4, 5], |i| (i as f64 * 0.7).cos());
    let mut want = vec![0.0; 15];
    for i in 0..3 {
        for j in 0..5 {
            want[i * 5 + j] = (0..4).map(|k| av[i * 4 + k] * bv[k * 5 + j]).sum();
        }
    }
    check("matmul eager", &a.matmul(&b), &want, 1e-5);
    let g = jit(|(a, b): (Array, Array)| a.matmul(&b));
    check("matmul jit", &g.call((&a, &b)).unwrap(), &want, 1e-5);
    let (v, vv) = host(&[4], |i| i as f64 - 1.0);
    let mv: Vec<f64> = (0..3).map(|i| (0..4).map(|k| av[i * 4 + k] * vv[k]).sum()).collect();
    check("matvec", &jnp::dot(&a, &v).unwrap(), &mv, 1e-5);
    let (p, pv) = host(&[2, 2, 3], |i| i as f64 * 0.1);
    let (q, qv) = host(&[2, 3, 2], |i| 1.0 - i as f64 * 0.05);
    let bm = jnp::matmul(&p, &q).unwrap();
    assert_eq!(bm.shape(), vec![2, 2, 2]);
    let mut bw = vec![0.0; 8];
    for b in 0..2 {
        for i in 0..2 {
            for j in 0..2 {
                bw[b * 4 + i * 2 + j] = (0..3).map(|k| pv[b * 6 + i * 3 + k] * qv[b * 6 + k * 2 + j]).sum();
            }
        }
    }
    check("batched matmul", &bm, &bw, 1e-5);
    let e = jnp::matmul(&a, &a).unwrap_err();
    // JAX's text for a (3, 4) @ (3, 4) product.
    assert_eq!(e.message, "dot_general requires contracting dimensions to have the same shape, got (4,) and (3,).");
}

/// numpy's matmul on the host: 1-d operands promoted and dropped, batch dims broadcast.
fn matmul_ref(sa: &[usize], av: &[f64], sb: &[usize], bv: &[f64]) -> (Vec<usize>, Vec<f64>) {
    let (a2, b2) = (sa.len() == 1, sb.len() == 1);
    let sa: Vec<usize> = if a2 { vec![1, sa[0]] } else { sa.to_vec() };
    let sb: Vec<usize> = if b2 { vec![sb[0], 1] } else { sb.to_vec() };
    let (m, k, n) = (sa[sa.len() - 2], sa[sa.len() - 1], sb[sb.len() - 1]);
    let (la, lb) = (&sa[..sa.len() - 2], &sb[..sb.len() - 2]);
    let nb = la.len().max(lb.len());
    let pad = |l: &[usize]| -> Vec<usize> { std::iter::repeat_n(1, nb - l.len()).chain(l.iter().copied()).collect() };
    let (pa, pb) = (pad(la), pad(lb));
    let batch: Vec<usize> = pa.iter().zip(&pb).map(|(&x, &y)| x.max(y)).collect();
    let count: usize = batch.iter().product();
    let mut out = Vec::new();
    for flat in 0..count {
        // Index of this batch element in each operand (size-1 dims broadcast).
        let (mut ia, mut ib, mut rem) = (0, 0, flat);
        let mut idx = vec![0; nb];
        for d in (0..nb).rev() {
            idx[d] = rem % batch[d];
            rem /= batch[d];
        }
        for d in 0..nb {
            ia = ia * pa[d] + if pa[d] == 1 { 0 } else { idx[d] };
            ib = ib * pb[d] + if pb[d] == 1 { 0 } else { idx[d] };
        }
        for i in 0..m {
            for j in 0..n {
                out.push((0..k).map(|l| av[ia * m * k + i * k + l] * bv[ib * k * n + l * n + j]).sum());
            }
        }
    }
    let mut shape = batch;
    if !a2 {
        shape.push(m);
    }
    if !b2 {
        shape.push(n);
    }
    (shape, out)
}

#[test]
fn matmul_broadcasts_batch_dims_like_numpy() {
    // (lhs shape, rhs shape): a fresh user's cases and numpy's 1-d rules.
    let cases: &[(&[usize], &[usize])] = &[
        (&[2, 3, 4], &[4, 5]),
        (&[1, 3, 4], &[4, 3, 4, 2]),
        (&[3, 4], &[2, 4, 5]),
        (&[4], &[2, 4, 5]),
        (&[2, 3, 4], &[4]),
        (&[2, 1, 3, 4], &[5, 4, 2]),
    ];
    for (sa, sb) in cases {
        let (a, av) = host(sa, |i| (i as f64 * 0.37).sin());
        let (b, bv) = host(sb, |i| (i as f64 * 0.21).cos());
        let (shape, want) = matmul_ref(sa, &av, sb, &bv);
        let name = format!("{sa:?} @ {sb:?}");
        let got = jnp::matmul(&a, &b).unwrap();
        assert_eq!(got.shape(), shape, "{name}");
        check(&name, &got, &want, 1e-5);
        let g = jit(|(a, b): (Array, Array)| jnp::matmul(&a, &b));
        check(&format!("jit {name}"), &g.call((&a, &b)).unwrap(), &want, 1e-5);
    }
    let e = jnp::matmul(&jnp::ones(&[2, 3, 4], None), &jnp::ones(&[3, 4, 5], None)).unwrap_err();
    assert_eq!(e.message, "matmul got incompatible shapes for broadcasting: (2,), (3,).");
}

#[test]
fn creation_and_conversion_round_trips() {
    let a = jnp::linspace(0.0, 1.0, 5);
    check("linspace", &a, &[0.0, 0.25, 0.5, 0.75, 1.0], 0.0);
    assert_eq!(format!("{:?}", jnp::arange(3)), "Array([0, 1, 2], dtype=int32)");
    assert_eq!(format!("{:?}", jnp::full(&[2], 7, DType::I32)), "Array([7, 7], dtype=int32)");
    assert_eq!(format!("{:?}", jnp::ones(&[], DType::F32)), "Array(1., dtype=float32)");
    let b = Array::from_vec(vec![true, false, true], &[3]).unwrap();
    assert_eq!(format!("{b:?}"), "Array([ True, False,  True], dtype=bool)");
    assert_eq!(b.sum().item::<i32>().unwrap(), 2);
    let nd = ndarray::arr2(&[[1.0f32, 2.0], [3.0, 4.0]]);
    let x = Array::from_ndarray(&nd);
    assert_eq!(x.to_ndarray::<f32>().unwrap(), nd.into_dyn());
    // jax_enable_x64 is off by default: f64 data becomes float32, as in JAX.
    assert_eq!(Array::from_slice(&[1.5f64]).dtype(), DType::F32);
    assert_eq!(Array::from_slice(&[3i64]).dtype(), DType::I32);
    let i = jnp::arange(4) / 2;
    assert_eq!(i.dtype(), DType::F32, "true division of ints gives float");
    check("int true division", &i, &[0.0, 0.5, 1.0, 1.5], 0.0);
    let w = jnp::where_(&jnp::arange(4).lt(2), &jnp::arange(4), &(jnp::arange(4) * 10)).unwrap();
    check("where", &w, &[0.0, 1.0, 20.0, 30.0], 0.0);
}
