//! `vmap` against an explicit loop over the mapped axis, for each batching rule, with
//! `in_axes`/`out_axes`, nesting, and composition with `jit` and `grad`.

use jax::prelude::*;

fn f64s(a: &Array) -> Vec<f64> {
    a.to_vec::<f64>().unwrap()
}

fn assert_close(got: &[f64], want: &[f64], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: {got:?} vs {want:?}");
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() <= 1e-5 * (1.0 + w.abs()), "{what}: got {got:?} want {want:?}");
    }
}

/// Row `i` of `x` along axis 0.
fn row(x: &Array, i: usize) -> Array {
    let shape = x.shape();
    let inner: usize = shape[1..].iter().product();
    let v = f64s(x)[i * inner..(i + 1) * inner].iter().map(|&v| v as f32).collect();
    Array::from_vec::<f32>(v, &shape[1..]).unwrap()
}

fn looped(f: &dyn Fn(Array) -> Array, x: &Array) -> Vec<f64> {
    (0..x.shape()[0]).flat_map(|i| f64s(&f(row(x, i)))).collect()
}

type F = fn(Array) -> Array;

#[test]
fn vmap_matches_a_loop_for_each_rule() {
    let w = Array::from_vec((0..12).map(|i| (i as f32 * 0.3).cos()).collect(), &[3, 4]).unwrap();
    let fns: Vec<(&str, F)> = vec![
        ("elementwise+scalar", |x| (x.sin() * 2.0 + 1.0).tanh()),
        ("broadcast", |x| x.clone() + x.sum()),
        ("reductions", |x| x.sum_axes(&[0]) * x.max()),
        ("reshape/transpose", |x| x.reshape(&[4, 3]).t()),
        ("where", |x| jnp::where_(&x.gt(0.5), &x, &(x.clone() * -1.0)).unwrap()),
        ("matmul self", |x| x.matmul(&x.t())),
    ];
    let x = Array::from_vec((0..24).map(|i| (i as f32 * 0.37).sin()).collect(), &[2, 3, 4]).unwrap();
    for (name, f) in fns {
        let got = vmap(f)(x.clone()).unwrap();
        assert_close(&f64s(&got), &looped(&f, &x), name);
        let gj = jit(vmap(f));
        assert_close(&f64s(&gj.call(&x).unwrap()), &looped(&f, &x), &format!("jit {name}"));
    }
    // One operand batched, the other closed over (unbatched): lhs and rhs positions.
    let w2 = w.clone();
    let lhs = move |x: Array| x.matmul(&w2.t()); // [3,4]@[4,3]
    assert_close(&f64s(&vmap(lhs.clone())(x.clone()).unwrap()), &looped(&lhs, &x), "batched lhs");
    let w3 = w.clone();
    let rhs = move |x: Array| w3.matmul(&x.t()); // [3,4]@[4,3]
    assert_close(&f64s(&vmap(rhs.clone())(x.clone()).unwrap()), &looped(&rhs, &x), "batched rhs");
}

#[test]
fn in_axes_out_axes_nesting_and_errors() {
    let x = Array::from_vec((0..6).map(|i| i as f32).collect(), &[2, 3]).unwrap();
    let y = Array::from_vec(vec![10.0f32, 20.0, 30.0], &[3]).unwrap();
    // Map x over axis 1 (columns), y over axis 0: f(col, s) = col * s.
    let f = vmap_axes(|(c, s): (Array, Array)| c * s, vec![Some(1), Some(0)], 1);
    let got = f((x.clone(), y.clone())).unwrap();
    assert_eq!(got.shape(), vec![2, 3]);
    assert_close(&f64s(&got), &[0.0, 20.0, 60.0, 30.0, 80.0, 150.0], "in_axes/out_axes");
    // None: not mapped.
    let g = vmap_axes(|(r, s): (Array, Array)| r * s, vec![Some(0), None], 0);
    assert_close(&f64s(&g((x.clone(), y.clone())).unwrap()), &[0.0, 20.0, 60.0, 30.0, 80.0, 150.0], "None axis");
    // Nested vmap = elementwise.
    let h = vmap(vmap(|v: Array| &v * &v + 1.0));
    assert_close(&f64s(&h(x.clone()).unwrap()), &[1.0, 2.0, 5.0, 10.0, 17.0, 26.0], "nested");
    let e = vmap(|(a, b): (Array, Array)| a + b)((x.clone(), y.clone())).unwrap_err();
    assert!(e.message.contains("vmap got inconsistent sizes for array axes to be mapped: 2 and 3"), "{}", e.message);
}

#[test]
fn per_example_gradients_with_vmap_of_grad() {
    config::update("jax_enable_x64", true).unwrap();
    let w = Array::from_slice(&[0.5, -1.0, 2.0]);
    let xs = Array::from_vec(vec![1.0, 2.0, 3.0, -1.0, 0.5, 0.0], &[2, 3]).unwrap();
    // loss(w; x) = tanh(w·x); grad_w = (1 - tanh²) x, per example.
    let per = vmap_axes(grad(|(w, x): (Array, Array)| (w * x).sum().tanh()), vec![None, Some(0)], 0);
    let (gw, _) = per((w.clone(), xs.clone())).unwrap();
    let wv = [0.5, -1.0, 2.0];
    let mut want = vec![];
    for r in 0..2 {
        let xr: Vec<f64> = f64s(&xs)[r * 3..r * 3 + 3].to_vec();
        let z: f64 = wv.iter().zip(&xr).map(|(a, b)| a * b).sum();
        want.extend(xr.iter().map(|v| (1.0 - z.tanh().powi(2)) * v));
    }
    assert_close(&f64s(&gw), &want, "per-example grads");
}
