//! `linearize`: primal outputs and the linear jvp function, checked against `jvp` and
//! against central finite differences (f64, x64 on: this file's own process), for an
//! elementwise chain, an MLP layer (matmul), `cond` and `scan`, and pytrees; the linear
//! jaxpr of `sin` against JAX 0.10.2's; composition with jit, vmap, jvp and grad; and
//! that `f` is traced (and its primal equations evaluated) once.

use jax::prelude::*;
use std::sync::atomic::{AtomicUsize, Ordering};

fn x64() {
    config::update("jax_enable_x64", true).unwrap();
}

fn f64s(a: &Array) -> Vec<f64> {
    a.to_vec::<f64>().unwrap()
}

fn assert_close(got: &[f64], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() <= tol * (1.0 + w.abs()), "{what}: got {got:?} want {want:?}");
    }
}

/// Central difference of `f` at `x` in direction `t` (flattened output).
fn fd_dir(f: &dyn Fn(&[f64]) -> Vec<f64>, x: &[f64], t: &[f64]) -> Vec<f64> {
    let h = 1e-6;
    let a: Vec<f64> = x.iter().zip(t).map(|(x, t)| x + h * t).collect();
    let b: Vec<f64> = x.iter().zip(t).map(|(x, t)| x - h * t).collect();
    f(&a).iter().zip(f(&b)).map(|(p, m)| (p - m) / (2.0 * h)).collect()
}

/// Checks `linearize(f, x)` against `f(x)`, `jvp(f, x, t)` and finite differences.
fn check(name: &str, f: impl Fn(Array) -> Result<Array> + Clone, x: &[f64], shape: &[usize], t: &[f64]) {
    let xa = Array::from_vec(x.to_vec(), shape).unwrap();
    let ta = Array::from_vec(t.to_vec(), shape).unwrap();
    let (y, f_jvp) = linearize(f.clone(), &xa).unwrap();
    let (y2, t2) = jvp(f.clone(), &xa, &ta).unwrap();
    assert_close(&f64s(&y), &f64s(&y2), 1e-12, &format!("{name}: primal"));
    let lt = f_jvp.call(&ta).unwrap();
    assert_close(&f64s(&lt), &f64s(&t2), 1e-12, &format!("{name}: vs jvp"));
    let shape = shape.to_vec();
    let g = f.clone();
    let want = fd_dir(&|v: &[f64]| f64s(&g(Array::from_vec(v.to_vec(), &shape).unwrap()).unwrap()), x, t);
    assert_close(&f64s(&lt), &want, 1e-6, &format!("{name}: vs finite differences"));
}

#[test]
fn linearize_matches_jvp_and_finite_differences() {
    x64();
    // Elementwise chain.
    check("chain", |x: Array| Ok((x.sin() * &x).exp() + x.cos().tanh()), &[0.3, -1.2, 2.0], &[3], &[1.0, 0.5, -2.0]);
    // An MLP layer: tanh(x @ W + b), linearized in x.
    let w = Array::from_vec((0..12).map(|i| (i as f64 * 0.37).sin()).collect::<Vec<_>>(), &[4, 3]).unwrap();
    let b = Array::from_slice(&[0.1, -0.2, 0.3]);
    check("mlp", move |x: Array| Ok((x.matmul(&w) + &b).tanh()), &[0.5, -0.1, 0.2, 0.9, 1.0, -0.3, 0.4, 0.0], &[2, 4], &[1.0, 0.0, -1.0, 0.5, 0.3, 0.2, -0.4, 1.0]);
    // cond on the primal (known predicate) and scan over a recurrence.
    check("cond", |x: Array| lax::cond(&x.sum().gt(0.0), |x: Array| x.sin() * 3.0, |x: Array| &x * &x, x), &[0.5, 0.7], &[2], &[1.0, -1.0]);
    check("cond_neg", |x: Array| lax::cond(&x.sum().gt(0.0), |x: Array| x.sin() * 3.0, |x: Array| &x * &x, x), &[-0.5, -0.7], &[2], &[1.0, -1.0]);
    check(
        "scan",
        |xs: Array| {
            let (h, ys) = lax::scan(|(h, x): (Array, Array)| {
                let h2 = (&h * 0.8 + x).tanh();
                (h2.clone(), &h2 * &h2)
            }, Array::scalar(0.3f64), xs, None, false, 1)?;
            Ok(ys + h)
        },
        &[0.5, -0.2, 0.1, 0.9],
        &[4],
        &[1.0, 2.0, -1.0, 0.5],
    );
}

#[test]
fn linearize_pytrees_in_and_out() {
    x64();
    let f = |(a, b): (Array, Array)| -> Result<(Array, Array)> { Ok((a.sin() * &b, (&a + &b).exp())) };
    let p = (Array::from_slice(&[0.2, 1.1]), Array::scalar(0.7f64));
    let t = (Array::from_slice(&[1.0, -0.5]), Array::scalar(2.0f64));
    let ((y1, y2), f_jvp) = linearize(f, &p).unwrap();
    let ((z1, z2), (u1, u2)) = jvp(f, &p, &t).unwrap();
    assert_close(&f64s(&y1), &f64s(&z1), 1e-12, "out 0");
    assert_close(&f64s(&y2), &f64s(&z2), 1e-12, "out 1");
    let (l1, l2) = f_jvp.call(&t).unwrap();
    assert_close(&f64s(&l1), &f64s(&u1), 1e-12, "tangent 0");
    assert_close(&f64s(&l2), &f64s(&u2), 1e-12, "tangent 1");
    // By hand: d(sin a * b) = cos a * b * da + sin a * db.
    let want: Vec<f64> = [(0.2f64, 1.0), (1.1, -0.5)].iter().map(|(a, da)| a.cos() * 0.7 * da + a.sin() * 2.0).collect();
    assert_close(&f64s(&l1), &want, 1e-12, "tangent 0 by hand");
    // A tangent of the wrong structure or shape is a TypeError.
    let e = f_jvp.call(&(Array::from_slice(&[1.0, 2.0, 3.0]), Array::scalar(1.0f64))).unwrap_err();
    assert!(e.message.contains("expected shape [2]"), "{}", e.message);
}

#[test]
fn linear_jaxpr_of_sin_is_one_mul_as_in_jax() {
    // JAX 0.10.2: jax.make_jaxpr(jax.linearize(jnp.sin, 1.0)[1])(1.0) prints
    // { lambda a:f32[]; b:f32[]. let c:f32[] = mul b a in (c,) }
    // Same text, character for character.
    let (y, f_jvp) = linearize(|x: Array| x.sin(), &Array::scalar(1.0f32)).unwrap();
    assert!((y.item::<f32>().unwrap() - 1f32.sin()).abs() < 1e-6);
    let j = f_jvp.jaxpr().unwrap();
    expect_test::expect!["{ lambda a:f32[]; b:f32[]. let c:f32[] = mul b a in (c,) }"].assert_eq(&j.to_string());
    // The residual is cos(1).
    assert!((f_jvp.residuals()[0].item::<f32>().unwrap() - 1f32.cos()).abs() < 1e-6);
    let s = make_jaxpr(move |t: Array| f_jvp.call(&t), Array::scalar(1.0f32)).unwrap().to_string();
    assert!(!s.contains("sin") && !s.contains("cos"), "{s}");
}

#[test]
fn linearize_traces_once_and_composes_with_jit_vmap_jvp_grad() {
    x64();
    static TRACES: AtomicUsize = AtomicUsize::new(0);
    let f = |x: Array| -> Result<Array> {
        TRACES.fetch_add(1, Ordering::SeqCst);
        Ok(x.sin() * x.cos() + &x * &x)
    };
    let x = Array::from_slice(&[0.4, -1.0, 2.5]);
    let (_, f_jvp) = linearize(f, &x).unwrap();
    assert_eq!(TRACES.load(Ordering::SeqCst), 1);
    // No primal (sin/cos) equation is left in the linear jaxpr: calls never recompute it.
    let s = f_jvp.jaxpr().unwrap().to_string();
    assert!(!s.contains("sin") && !s.contains("cos"), "{s}");
    let df = |x: f64| (2.0 * x).cos() + 2.0 * x; // d/dx (sin x cos x + x^2)
    let want = |t: &[f64]| -> Vec<f64> { [0.4, -1.0, 2.5].iter().zip(t).map(|(x, t)| df(*x) * t).collect() };
    let t = Array::from_slice(&[1.0, 2.0, -0.5]);
    assert_close(&f64s(&f_jvp.call(&t).unwrap()), &want(&[1.0, 2.0, -0.5]), 1e-12, "call");
    // jit
    let l = f_jvp.clone();
    let jf = jit(move |t: Array| l.call(&t));
    assert_close(&f64s(&jf.call(t.clone()).unwrap()), &want(&[1.0, 2.0, -0.5]), 1e-12, "jit");
    // vmap over a batch of tangents
    let l = f_jvp.clone();
    let ts = Array::from_vec(vec![1.0, 0.0, 0.0, 0.0, 1.0, 3.0], &[2, 3]).unwrap();
    let b = vmap(move |t: Array| l.call(&t))(ts).unwrap();
    let mut wb = want(&[1.0, 0.0, 0.0]);
    wb.extend(want(&[0.0, 1.0, 3.0]));
    assert_close(&f64s(&b), &wb, 1e-12, "vmap");
    // jvp of the linear function is itself; grad of its sum is the diagonal derivative.
    let l = f_jvp.clone();
    let (_, tt) = jvp(move |t: Array| l.call(&t), &t, &Array::from_slice(&[1.0, 1.0, 1.0])).unwrap();
    assert_close(&f64s(&tt), &want(&[1.0, 1.0, 1.0]), 1e-12, "jvp of f_jvp");
    let l = f_jvp.clone();
    let g = grad(move |t: Array| l.call(&t).map(|y| y.sum()))(t.clone()).unwrap();
    assert_close(&f64s(&g), &want(&[1.0, 1.0, 1.0]), 1e-12, "grad of f_jvp");
    assert_eq!(TRACES.load(Ordering::SeqCst), 1, "f was traced again");
}

#[test]
fn linearize_under_jit() {
    x64();
    let g = jit(|(x, t): (Array, Array)| -> Result<(Array, Array)> {
        let (y, f_jvp) = linearize(|x: Array| x.exp(), &x)?;
        Ok((y, f_jvp.call(&t)?))
    });
    let (y, dy) = g.call((Array::scalar(0.5f64), Array::scalar(2.0f64))).unwrap();
    assert!((y.item::<f64>().unwrap() - 0.5f64.exp()).abs() < 1e-12);
    assert!((dy.item::<f64>().unwrap() - 2.0 * 0.5f64.exp()).abs() < 1e-12);
}
