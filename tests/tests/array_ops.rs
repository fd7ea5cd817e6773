//! Issue 3 array language: jnp/lax/nn functions eager and under `jit` against f64
//! references computed here on the host (0-d, empty and size-1 shapes included), plus
//! jaxpr text of the new primitives and their errors.

use jax::ir::WindowOp;
use jax::prelude::*;
use jax::s;

fn arr(shape: &[usize], v: &[f64]) -> Array {
    Array::from_vec(v.iter().map(|&x| x as f32).collect::<Vec<f32>>(), shape).unwrap()
}
fn iarr(shape: &[usize], v: &[i32]) -> Array {
    Array::from_vec(v.to_vec(), shape).unwrap()
}
fn check(name: &str, got: &Array, shape: &[usize], want: &[f64], tol: f64) {
    assert_eq!(got.shape(), shape, "{name}: shape");
    let g = got.to_vec::<f64>().unwrap();
    assert_eq!(g.len(), want.len(), "{name}: length");
    for (i, (a, b)) in g.iter().zip(want).enumerate() {
        let ok = a == b || (a.is_nan() && b.is_nan()) || (a - b).abs() <= tol * (1.0 + b.abs());
        assert!(ok, "{name}[{i}]: got {a}, want {b} (all: {g:?})");
    }
}
/// Runs `f` eagerly and under jit and checks both.
fn both(name: &str, f: fn(&Array) -> Array, x: &Array, shape: &[usize], want: &[f64], tol: f64) {
    check(&format!("eager {name}"), &f(x), shape, want, tol);
    let j = jit(move |x: Array| f(&x));
    check(&format!("jit {name}"), &j.call(x).unwrap(), shape, want, tol);
}

const XS: [f64; 8] = [-2.5, -1.5, -0.5, 0.0, 0.5, 1.5, 2.5, 3.7];

#[test]
fn elementwise_match_f64() {
    let x = arr(&[2, 4], &XS);
    let map = |f: fn(f64) -> f64| XS.iter().map(|&v| f(v as f32 as f64)).collect::<Vec<_>>();
    let half_even = |v: f64| { let r = v.round(); if (v - v.trunc()).abs() == 0.5 { 2.0 * (v / 2.0).round() } else { r } };
    both("sign", |x| x.sign(), &x, &[2, 4], &map(|v| if v > 0.0 { 1.0 } else if v < 0.0 { -1.0 } else { 0.0 }), 0.0);
    both("floor", |x| x.floor(), &x, &[2, 4], &map(f64::floor), 0.0);
    both("ceil", |x| x.ceil(), &x, &[2, 4], &map(f64::ceil), 0.0);
    both("round half even", |x| x.round(), &x, &[2, 4], &map(half_even), 0.0);
    both("log1p", |x| (x.abs()).log1p(), &x, &[2, 4], &map(|v| v.abs().ln_1p()), 1e-6);
    both("expm1", |x| x.expm1(), &x, &[2, 4], &map(f64::exp_m1), 1e-6);
    both("clip", |x| x.clip(-1.0, 2.0), &x, &[2, 4], &map(|v| v.clamp(-1.0, 2.0)), 0.0);
    both("powi 3", |x| x.pow(3), &x, &[2, 4], &map(|v| v * v * v), 1e-6);
    both("powi -2", |x| x.pow(-2), &x, &[2, 4], &map(|v| 1.0 / (v * v)), 1e-6);
    both("sigmoid", |x| nn::sigmoid(x).unwrap(), &x, &[2, 4], &map(|v| 1.0 / (1.0 + (-v).exp())), 1e-6);
    both("relu", |x| nn::relu(x).unwrap(), &x, &[2, 4], &map(|v| v.max(0.0)), 0.0);

    both("gelu exact", |x| nn::gelu(x, false).unwrap(), &x, &[2, 4], &map(|v| v * (1.0 + libm_erf(v / 2f64.sqrt())) / 2.0), 1e-5);
    let c = (2.0 / std::f64::consts::PI).sqrt();
    let g = XS.iter().map(|&v| 0.5 * v * (1.0 + (c * (v + 0.044715 * v * v * v)).tanh())).collect::<Vec<_>>();
    both("gelu tanh", |x| nn::gelu(x, true).unwrap(), &x, &[2, 4], &g, 1e-5);
    // mod (floor) vs fmod (truncated), ints and floats
    let a = iarr(&[6], &[7, -7, 7, -7, 0, 5]);
    let b = iarr(&[6], &[3, 3, -3, -3, 2, 5]);
    check("mod int", &jnp::mod_(&a, &b).unwrap(), &[6], &[1.0, 2.0, -2.0, -1.0, 0.0, 0.0], 0.0);
    check("fmod int", &jnp::fmod(&a, &b).unwrap(), &[6], &[1.0, -1.0, 1.0, -1.0, 0.0, 0.0], 0.0);
    let j = jit(|(a, b): (Array, Array)| jnp::mod_(&a, &b).unwrap());
    let af = arr(&[4], &[5.5, -5.5, 5.5, -5.5]);
    let bf = arr(&[4], &[2.0, 2.0, -2.0, -2.0]);
    check("jit mod float", &j.call((&af, &bf)).unwrap(), &[4], &[1.5, 0.5, -0.5, -1.5], 1e-6);
    // special values
    let s = arr(&[5], &[f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 0.0, -1.0]);
    check("isnan", &s.isnan(), &[5], &[1.0, 0.0, 0.0, 0.0, 0.0], 0.0);
    check("isinf", &s.isinf(), &[5], &[0.0, 1.0, 1.0, 0.0, 0.0], 0.0);
    let j = jit(|x: Array| x.isfinite());
    check("jit isfinite", &j.call(&s).unwrap(), &[5], &[0.0, 0.0, 0.0, 1.0, 1.0], 0.0);
    check("sign nan", &s.sign(), &[5], &[f64::NAN, 1.0, -1.0, 0.0, -1.0], 0.0);
    let p = Array::from_vec(vec![true, true, false, false], &[4]).unwrap();
    let q = Array::from_vec(vec![true, false, true, false], &[4]).unwrap();
    check("and", &jnp::logical_and(&p, &q).unwrap(), &[4], &[1.0, 0.0, 0.0, 0.0], 0.0);
    check("or", &jnp::logical_or(&p, &q).unwrap(), &[4], &[1.0, 1.0, 1.0, 0.0], 0.0);
    check("xor", &jnp::logical_xor(&p, &q).unwrap(), &[4], &[0.0, 1.0, 1.0, 0.0], 0.0);
    check("not", &jnp::logical_not(&p).unwrap(), &[4], &[0.0, 0.0, 1.0, 1.0], 0.0);
    // 0-d and empty
    both("floor 0-d", |x| x.floor(), &arr(&[], &[-0.5]), &[], &[-1.0], 0.0);
    both("sign empty", |x| x.sign(), &arr(&[0, 3], &[]), &[0, 3], &[], 0.0);
}

/// Abramowitz-Stegun-free erf reference: a series / continued fraction in f64.
fn libm_erf(x: f64) -> f64 {
    // erf(x) = 2/sqrt(pi) * sum_{n} (-1)^n x^(2n+1) / (n! (2n+1)), converges for |x| < 6.
    let mut sum = 0.0;
    let mut term = x;
    for n in 0..200 {
        sum += term / (2 * n + 1) as f64;
        term *= -x * x / (n + 1) as f64;
    }
    2.0 / std::f64::consts::PI.sqrt() * sum
}

#[test]
fn reductions_and_scans_match_f64() {
    let v: Vec<f64> = vec![3.0, -1.0, 4.0, 1.0, -5.0, 9.0];
    let x = arr(&[2, 3], &v);
    check("prod", &x.prod(), &[], &[3.0 * -1.0 * 4.0 * 1.0 * -5.0 * 9.0], 1e-6);
    check("prod axis 1", &jnp::prod(&x, Some(&[1])).unwrap(), &[2], &[-12.0, -45.0], 1e-6);
    check("prod empty", &arr(&[0], &[]).prod(), &[], &[1.0], 0.0);
    check("all", &jnp::all(&x, Some(&[0])).unwrap(), &[3], &[1.0, 1.0, 1.0], 0.0);
    let z = arr(&[2, 2], &[0.0, 1.0, 0.0, 0.0]);
    check("any axis 1", &jnp::any(&z, Some(&[1])).unwrap(), &[2], &[1.0, 0.0], 0.0);
    check("all empty", &arr(&[0], &[]).all(), &[], &[1.0], 0.0);
    check("argmax", &x.argmax(), &[], &[5.0], 0.0);
    check("argmin axis 1", &jnp::argmin(&x, Some(-1)).unwrap(), &[2], &[1.0, 1.0], 0.0);
    let t = arr(&[5], &[1.0, 7.0, 7.0, f64::NAN, 7.0]);
    check("argmax nan first", &t.argmax(), &[], &[3.0], 0.0);
    check("argmax tie first", &arr(&[4], &[1.0, 7.0, 7.0, 2.0]).argmax(), &[], &[1.0], 0.0);
    let mean = v.iter().sum::<f64>() / 6.0;
    let var = v.iter().map(|a| (a - mean).powi(2)).sum::<f64>() / 6.0;
    check("var", &x.var(), &[], &[var], 1e-5);
    check("std ddof 1", &jnp::std(&x, None, 1).unwrap(), &[], &[(var * 6.0 / 5.0).sqrt()], 1e-5);
    let j = jit(|x: Array| (jnp::cumsum(&x, Some(1)).unwrap(), jnp::cumprod(&x, Some(0)).unwrap(), jnp::cummax(&x, None).unwrap()));
    let (cs, cp, cm) = j.call(&x).unwrap();
    check("cumsum axis 1", &cs, &[2, 3], &[3.0, 2.0, 6.0, 1.0, -4.0, 5.0], 1e-6);
    check("cumprod axis 0", &cp, &[2, 3], &[3.0, -1.0, 4.0, 3.0, 5.0, 36.0], 1e-6);
    check("cummax flat", &cm, &[6], &[3.0, 3.0, 4.0, 4.0, 4.0, 9.0], 0.0);
    check("eager cumsum int", &jnp::cumsum(&iarr(&[4], &[1, 2, 3, 4]), None).unwrap(), &[4], &[1.0, 3.0, 6.0, 10.0], 0.0);
    check("cumsum empty", &jnp::cumsum(&arr(&[0], &[]), None).unwrap(), &[0], &[], 0.0);
}

#[test]
fn sort_argsort_top_k() {
    let v = [3.0, f64::NAN, -1.0, 2.0, -1.0, 0.0];
    let x = arr(&[6], &v);
    check("sort", &x.sort(), &[6], &[-1.0, -1.0, 0.0, 2.0, 3.0, f64::NAN], 0.0);
    let j = jit(|x: Array| jnp::argsort(&x, -1).unwrap());
    check("jit argsort stable", &j.call(&x).unwrap(), &[6], &[2.0, 4.0, 5.0, 3.0, 0.0, 1.0], 0.0);
    let m = arr(&[2, 3], &[5.0, 1.0, 3.0, 0.0, 9.0, -2.0]);
    check("sort axis 0", &jnp::sort(&m, 0).unwrap(), &[2, 3], &[0.0, 1.0, -2.0, 5.0, 9.0, 3.0], 0.0);
    let (vals, idx) = lax::top_k(&m, 2).unwrap();
    check("top_k values", &vals, &[2, 2], &[5.0, 3.0, 9.0, 0.0], 0.0);
    check("top_k indices", &idx, &[2, 2], &[0.0, 2.0, 1.0, 0.0], 0.0);
    let ji = iarr(&[5], &[4, -2, 9, 0, -2]);
    check("sort int", &ji.sort(), &[5], &[-2.0, -2.0, 0.0, 4.0, 9.0], 0.0);
    check("sort 1 elem", &arr(&[1], &[2.0]).sort(), &[1], &[2.0], 0.0);
}

#[test]
fn shape_ops_match_f64() {
    let a = arr(&[2, 3], &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
    let b = arr(&[1, 3], &[6.0, 7.0, 8.0]);
    check("concatenate", &jnp::concatenate(&[a.clone(), b.clone()], 0).unwrap(), &[3, 3], &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0], 0.0);
    let j = jit(|(a, b): (Array, Array)| jnp::concatenate(&[b.t(), a.t()], -1).unwrap());
    check("jit concatenate axis -1", &j.call((&a, &b)).unwrap(), &[3, 3], &[6.0, 0.0, 3.0, 7.0, 1.0, 4.0, 8.0, 2.0, 5.0], 0.0);
    check("stack axis 1", &jnp::stack(&[b.clone(), b.clone()], 1).unwrap(), &[1, 2, 3], &[6.0, 7.0, 8.0, 6.0, 7.0, 8.0], 0.0);
    let parts = jnp::split(&arr(&[6], &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]), 3, 0).unwrap();
    check("split 2", &parts[2], &[2], &[4.0, 5.0], 0.0);
    let parts = jnp::split_at(&a, &[1], 1).unwrap();
    check("split_at", &parts[1], &[2, 2], &[1.0, 2.0, 4.0, 5.0], 0.0);
    both("pad", |x| jnp::pad(x, &[(1, 0), (0, 2)], -1.0).unwrap(), &a, &[3, 5], &[-1.0, -1.0, -1.0, -1.0, -1.0, 0.0, 1.0, 2.0, -1.0, -1.0, 3.0, 4.0, 5.0, -1.0, -1.0], 0.0);
    both("lax.pad interior negative", |x| lax::pad(x, 9.0, &[(0, 0, 0), (-1, 1, 1)]).unwrap(), &a, &[2, 5], &[9.0, 1.0, 9.0, 2.0, 9.0, 9.0, 4.0, 9.0, 5.0, 9.0], 0.0);
    both("flip", |x| jnp::flip(x, Some(&[1])).unwrap(), &a, &[2, 3], &[2.0, 1.0, 0.0, 5.0, 4.0, 3.0], 0.0);
    both("roll", |x| jnp::roll(x, 1, Some(1)).unwrap(), &a, &[2, 3], &[2.0, 0.0, 1.0, 5.0, 3.0, 4.0], 0.0);
    both("roll flat", |x| jnp::roll(x, -2, None).unwrap(), &a, &[2, 3], &[2.0, 3.0, 4.0, 5.0, 0.0, 1.0], 0.0);
    both("tile", |x| jnp::tile(x, &[2]).unwrap(), &b, &[1, 6], &[6.0, 7.0, 8.0, 6.0, 7.0, 8.0], 0.0);
    both("repeat", |x| jnp::repeat(x, 2, Some(1)).unwrap(), &b, &[1, 6], &[6.0, 6.0, 7.0, 7.0, 8.0, 8.0], 0.0);
    both("squeeze", |x| jnp::squeeze(x, None).unwrap(), &b, &[3], &[6.0, 7.0, 8.0], 0.0);
    both("expand_dims", |x| jnp::expand_dims(x, -1).unwrap(), &b, &[1, 3, 1], &[6.0, 7.0, 8.0], 0.0);
    both("broadcast_to", |x| jnp::broadcast_to(x, &[2, 3]).unwrap(), &b, &[2, 3], &[6.0, 7.0, 8.0, 6.0, 7.0, 8.0], 0.0);
    both("lax.slice strides", |x| lax::slice(x, &[0, 0], &[2, 3], Some(&[1, 2])).unwrap(), &a, &[2, 2], &[0.0, 2.0, 3.0, 5.0], 0.0);
    check("eye k=1", &jnp::eye(2, Some(3), 1, DType::F32).unwrap(), &[2, 3], &[0.0, 1.0, 0.0, 0.0, 0.0, 1.0], 0.0);
    check("tri", &jnp::tri(3, None, 0, DType::I32).unwrap(), &[3, 3], &[1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0], 0.0);
    check("diag 1-d k=-1", &jnp::diag(&arr(&[2], &[4.0, 5.0]), -1).unwrap(), &[3, 3], &[0.0, 0.0, 0.0, 4.0, 0.0, 0.0, 0.0, 5.0, 0.0], 0.0);
    check("diag 2-d k=1", &jnp::diag(&a, 1).unwrap(), &[2], &[1.0, 5.0], 0.0);
    check("outer", &jnp::outer(&arr(&[2], &[1.0, 2.0]), &b).unwrap(), &[2, 3], &[6.0, 7.0, 8.0, 12.0, 14.0, 16.0], 0.0);
    check("triu", &jnp::triu(&a, 0).unwrap(), &[2, 3], &[0.0, 1.0, 2.0, 0.0, 4.0, 5.0], 0.0);
    // dynamic slices with traced starts (clamped)
    let j = jit(|(x, i): (Array, Array)| lax::dynamic_slice(&x, &[i.clone(), i], &[1, 2]).unwrap());
    check("dynamic_slice", &j.call((&a, &Array::scalar(1i32))).unwrap(), &[1, 2], &[4.0, 5.0], 0.0);
    check("dynamic_slice clamped", &j.call((&a, &Array::scalar(7i32))).unwrap(), &[1, 2], &[4.0, 5.0], 0.0);
    let j = jit(|(x, u, i): (Array, Array, Array)| lax::dynamic_update_slice(&x, &u, &[Array::scalar(0i32), i]).unwrap());
    check("dynamic_update_slice", &j.call((&a, &b, &Array::scalar(0i32))).unwrap(), &[2, 3], &[6.0, 7.0, 8.0, 3.0, 4.0, 5.0], 0.0);
}

#[test]
fn indexing_and_at_match_numpy() {
    let v: Vec<f64> = (0..12).map(|i| i as f64).collect();
    let x = arr(&[3, 4], &v);
    check("x[1]", &x.index(s![1]), &[4], &[4.0, 5.0, 6.0, 7.0], 0.0);
    check("x[-1, 1:]", &x.index(s![-1, 1..]), &[3], &[9.0, 10.0, 11.0], 0.0);
    check("x[:, ::2]", &x.index(s![.., ..;2]), &[3, 2], &[0.0, 2.0, 4.0, 6.0, 8.0, 10.0], 0.0);
    check("x[::-1, -1]", &x.index(s![..;-1, -1]), &[3], &[11.0, 7.0, 3.0], 0.0);
    check("x[None, 0, 3:0:-2]", &x.index(s![NEW_AXIS, 0, 3..0;-2]), &[1, 2], &[3.0, 1.0], 0.0);
    check("x[..., 0]", &x.index(s![ELLIPSIS, 0]), &[3], &[0.0, 4.0, 8.0], 0.0);
    let i = iarr(&[2], &[2, -3]);
    check("x[[2,-3]]", &x.index(s![&i]), &[2, 4], &[8.0, 9.0, 10.0, 11.0, 0.0, 1.0, 2.0, 3.0], 0.0);
    let j = iarr(&[2], &[3, 0]);
    check("x[i, j]", &x.index(s![&i, &j]), &[2], &[11.0, 0.0], 0.0);
    check("x[1:, j]", &x.index(s![1.., &j]), &[2, 2], &[7.0, 4.0, 11.0, 8.0], 0.0);
    let mask = Array::from_vec(vec![true, false, true], &[3]).unwrap();
    check("x[mask]", &x.index(s![&mask]), &[2, 4], &[0.0, 1.0, 2.0, 3.0, 8.0, 9.0, 10.0, 11.0], 0.0);
    let gj = jit(|(x, i): (Array, Array)| x.index(s![.., &i]));
    check("jit x[:, i]", &gj.call((&x, &j)).unwrap(), &[3, 2], &[3.0, 0.0, 7.0, 4.0, 11.0, 8.0], 0.0);
    // .at[...]
    let one = Array::scalar(1.0f32);
    check("at[1, 2].set", &x.at(s![1, 2]).set(&Array::scalar(-1.0f32)).unwrap(), &[3, 4], &{ let mut w = v.clone(); w[6] = -1.0; w }, 0.0);
    let dup = iarr(&[3], &[0, 0, 2]);
    let a = arr(&[4], &[0.0; 4]);
    check("at[dup].add", &a.at(s![&dup]).add(&one).unwrap(), &[4], &[2.0, 0.0, 1.0, 0.0], 0.0);
    let ja = jit(|(x, i): (Array, Array)| x.at(s![&i, 1..3]).mul(&Array::scalar(10.0f32)).unwrap());
    let mut w = v.clone();
    for r in [2, 0] { for c in 1..3 { w[r * 4 + c] *= 10.0; } }
    check("jit at[i, 1:3].mul", &ja.call((&x, &i)).unwrap(), &[3, 4], &w, 0.0);
    check("at[::2].max", &a.at(s![..;2]).max(&arr(&[2], &[5.0, -5.0])).unwrap(), &[4], &[5.0, 0.0, 0.0, 0.0], 0.0);
    check("at[-1].min", &a.at(s![-1]).min(&Array::scalar(-3.0f32)).unwrap(), &[4], &[0.0, 0.0, 0.0, -3.0], 0.0);
    // errors
    let e = jnp::index(&x, &s![3]).unwrap_err();
    assert!(e.message.contains("index 3 is out of bounds for axis 0 with size 3"), "{}", e.message);
    let bad = jit(|(x, m): (Array, Array)| x.index(s![&m]));
    let e = bad.call((&x, &mask)).unwrap_err();
    assert!(e.message.contains("NonConcreteBooleanIndexError"), "{}", e.message);
}

#[test]
fn einsum_nn_conv_pool_match_f64() {
    let a = arr(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let b = arr(&[3, 2], &[1.0, 0.0, -1.0, 2.0, 0.5, 1.0]);
    check("einsum ij,jk->ik", &jnp::einsum("ij,jk->ik", &[a.clone(), b.clone()]).unwrap(), &[2, 2], &[0.5, 7.0, 2.0, 16.0], 1e-6);
    check("einsum ij->ji", &jnp::einsum("ij->ji", &[a.clone()]).unwrap(), &[3, 2], &[1.0, 4.0, 2.0, 5.0, 3.0, 6.0], 0.0);
    check("einsum ij->", &jnp::einsum("ij", &[a.clone()]).unwrap(), &[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], 0.0);
    check("einsum ij,ij->i", &jnp::einsum("ij,ij->i", &[a.clone(), a.clone()]).unwrap(), &[2], &[14.0, 77.0], 1e-6);
    check("einsum i,j (implicit outer)", &jnp::einsum("i,j", &[arr(&[2], &[1.0, 2.0]), arr(&[2], &[3.0, 4.0])]).unwrap(), &[2, 2], &[3.0, 4.0, 6.0, 8.0], 0.0);
    let e = jnp::einsum("ii->i", &[arr(&[2, 2], &[0.0; 4])]).unwrap_err();
    assert!(e.message.contains("einsum") && e.message.contains("(2, 2)"), "{}", e.message);
    // softmax / log_softmax / logsumexp (stable for large inputs)
    let x = arr(&[2, 3], &[1.0, 2.0, 3.0, 1000.0, 1000.0, 1000.0]);
    let sm = |r: &[f64]| { let m = r.iter().cloned().fold(f64::MIN, f64::max); let s: f64 = r.iter().map(|v| (v - m).exp()).sum(); r.iter().map(|v| (v - m).exp() / s).collect::<Vec<_>>() };
    let want: Vec<f64> = [sm(&[1.0, 2.0, 3.0]), sm(&[1000.0; 3])].concat();
    both("softmax", |x| nn::softmax(x, -1).unwrap(), &x, &[2, 3], &want, 1e-6);
    both("log_softmax", |x| nn::log_softmax(x, 1).unwrap(), &x, &[2, 3], &want.iter().map(|v| v.ln()).collect::<Vec<_>>(), 1e-5);
    let lse = |r: &[f64]| { let m = r.iter().cloned().fold(f64::MIN, f64::max); m + r.iter().map(|v| (v - m).exp()).sum::<f64>().ln() };
    both("logsumexp", |x| nn::logsumexp(x, Some(&[1])).unwrap(), &x, &[2], &[lse(&[1.0, 2.0, 3.0]), lse(&[1000.0; 3])], 1e-6);
    // Over a zero-size axis (JAX's initial=-inf): softmax is empty, logsumexp is -inf,
    // eagerly and under jit.
    let e = Array::from_vec(Vec::<f32>::new(), &[3, 0]).unwrap();
    for sm_e in [nn::softmax(&e, -1).unwrap(), jit(|v: Array| nn::softmax(&v, -1)).call(&e).unwrap()] {
        assert_eq!(sm_e.shape(), vec![3, 0]);
    }
    for l in [nn::logsumexp(&e, Some(&[1])).unwrap(), jit(|v: Array| nn::logsumexp(&v, Some(&[1]))).call(&e).unwrap()] {
        assert_eq!(l.to_vec::<f32>().unwrap(), vec![f32::NEG_INFINITY; 3]);
    }
    let ei = Array::from_vec(Vec::<i32>::new(), &[3, 0]).unwrap();
    assert_eq!(nn::softmax(&ei, -1).unwrap().shape(), vec![3, 0]);
    assert_eq!(nn::logsumexp(&ei, Some(&[1])).unwrap().to_vec::<f32>().unwrap(), vec![f32::NEG_INFINITY; 3]);
    check("one_hot", &nn::one_hot(&iarr(&[3], &[0, 2, 5]), 3, DType::F32).unwrap(), &[3, 3], &[1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0], 0.0);
    // conv NCHW/OIHW: 1x1x4x4 input, 2x1x2x2 kernel, stride 1, padding 1 on each side
    let img: Vec<f64> = (0..16).map(|i| i as f64).collect();
    let ker = [1.0, 0.0, 0.0, -1.0, 0.5, 0.5, 0.5, 0.5];
    let x = arr(&[1, 1, 4, 4], &img);
    let k = arr(&[2, 1, 2, 2], &ker);
    let conv_ref = |stride: usize, pad: i64, ldil: usize, rdil: usize| -> (Vec<usize>, Vec<f64>) {
        let n = 4i64;
        let dn = (n - 1) * ldil as i64 + 1 + 2 * pad;
        let dk = (2 - 1) * rdil as i64 + 1;
        let o = ((dn - dk) / stride as i64 + 1) as usize;
        let mut out = vec![];
        for oc in 0..2 { for oy in 0..o { for ox in 0..o {
            let mut s = 0.0;
            for ky in 0..2 { for kx in 0..2 {
                let py = (oy * stride + ky * rdil) as i64 - pad;
                let px = (ox * stride + kx * rdil) as i64 - pad;
                if py < 0 || px < 0 || py % ldil as i64 != 0 || px % ldil as i64 != 0 { continue; }
                let (iy, ix) = (py / ldil as i64, px / ldil as i64);
                if iy >= n || ix >= n { continue; }
                s += img[(iy * n + ix) as usize] * ker[oc * 4 + ky * 2 + kx];
            }}
            out.push(s);
        }}}
        (vec![1, 2, o, o], out)
    };
    for (stride, pad, ldil, rdil) in [(1, 1, 1, 1), (2, 0, 1, 1), (1, 0, 2, 1), (1, 1, 1, 2)] {
        let (shape, want) = conv_ref(stride, pad, ldil, rdil);
        let j = jit(move |(x, k): (Array, Array)| lax::conv_general_dilated(&x, &k, &[stride, stride], &[(pad, pad), (pad, pad)], Some(&[ldil, ldil]), Some(&[rdil, rdil]), None, 1).unwrap());
        check(&format!("conv s{stride} p{pad} l{ldil} r{rdil}"), &j.call((&x, &k)).unwrap(), &shape, &want, 1e-5);
    }
    // feature groups: 2 input channels, 2 groups, depthwise 1x1 kernels
    let x2 = arr(&[1, 2, 1, 2], &[1.0, 2.0, 3.0, 4.0]);
    let k2 = arr(&[2, 1, 1, 1], &[10.0, -1.0]);
    check("conv groups", &lax::conv_general_dilated(&x2, &k2, &[1, 1], &[(0, 0), (0, 0)], None, None, None, 2).unwrap(), &[1, 2, 1, 2], &[10.0, 20.0, -3.0, -4.0], 0.0);
    // pooling
    let p = arr(&[4, 4], &img);
    check("max pool 2x2", &lax::reduce_window(WindowOp::Max, &p, &[2, 2], &[2, 2], &[(0, 0), (0, 0)]).unwrap(), &[2, 2], &[5.0, 7.0, 13.0, 15.0], 0.0);
    let j = jit(|p: Array| lax::reduce_window(WindowOp::Sum, &p, &[3, 3], &[1, 1], &[(1, 1), (1, 1)]).unwrap());
    let mut want = vec![];
    for y in 0..4i64 { for x in 0..4i64 {
        let mut s = 0.0;
        for dy in -1..=1 { for dx in -1..=1 { let (a, b) = (y + dy, x + dx); if (0..4).contains(&a) && (0..4).contains(&b) { s += img[(a * 4 + b) as usize]; } } }
        want.push(s);
    }}
    check("sum pool 3x3 same", &j.call(&p).unwrap(), &[4, 4], &want, 0.0);
}

#[test]
fn reduce_precision_matches_bf16_and_f16_rounding() {
    let vals = [1.0, 1.00390625, 1.01171875, 3.14159, -2.7182817, 1e-3, 65504.0, 70000.0, 1e-8, f64::NAN];
    let x = arr(&[vals.len()], &vals);
    let to = |d: DType| -> Vec<f64> { vals.iter().map(|&v| Array::scalar(v as f32).astype(d).to_vec::<f64>().unwrap()[0]).collect() };
    check("reduce_precision bf16", &lax::reduce_precision(&x, 8, 7).unwrap(), &[vals.len()], &to(DType::BF16), 0.0);
    // f16: exponent range is reduced too (70000 -> inf, 1e-8 -> 0; f16 denormals are flushed).
    let mut want = to(DType::F16);
    want[8] = 0.0;
    let j = jit(|x: Array| lax::reduce_precision(&x, 5, 10).unwrap());
    check("reduce_precision f16", &j.call(&x).unwrap(), &[vals.len()], &want, 0.0);
}

#[test]
fn jaxprs_print_jax_names_and_params() {
    let x = arr(&[3], &[1.0, 2.0, 3.0]);
    let m = arr(&[2, 3], &[0.0; 6]);
    let t1 = make_jaxpr(|x: Array| (x.pow(2), jnp::concatenate(&[x.clone(), x.clone()], 0).unwrap(), jnp::flip(&x, None).unwrap()), &x).unwrap().to_string();
    let t2 = make_jaxpr(|x: Array| (jnp::cumsum(&x, Some(0)).unwrap(), x.argmax(), x.sort()), &x).unwrap().to_string();
    let t = t1 + &t2;
    for want in ["integer_pow[y=2] a", "concatenate[dimension=0] a a", "rev[dimensions=(0,)] a", "cumsum[axis=0 reverse=False] a", "argmax[axes=(0,) index_dtype=int32] a", "sort[dimension=0 is_stable=True num_keys=1] a"] {
        assert!(t.contains(want), "missing {want:?} in\n{t}");
    }
    let t = make_jaxpr(|m: Array| (jnp::pad(&m, &[(1, 1), (0, 0)], 0.0).unwrap(), jnp::squeeze(&m.index(s![0..1]), Some(&[0])).unwrap(), m.index(s![1, ..;2])), &m).unwrap().to_string();
    for want in ["pad[padding_config=((1, 1, 0), (0, 0, 0))] a 0.0:f32[]", "squeeze[dimensions=(0,)]", "slice[\n      limit_indices=(2, 3)\n      start_indices=(1, 0)\n      strides=(1, 2)\n    ] a", "slice[limit_indices=(1, 3) start_indices=(0, 0) strides=None] a"] {
        assert!(t.contains(want), "missing {want:?} in\n{t}");
    }
    let e = jnp::concatenate(&[m.clone(), x.clone()], 0).unwrap_err();
    assert!(e.message.contains("concatenate") && e.message.contains("f32[2,3]") && e.message.contains("f32[3]"), "{}", e.message);
    let e = jnp::squeeze(&m, Some(&[0])).unwrap_err();
    assert!(e.message.contains("squeeze") && e.message.contains("f32[2,3]"), "{}", e.message);
}

/// bfloat16/float16 host arrays through `half`: creation from `Vec`/`ndarray`, read-back,
/// JAX's repr, and compiled arithmetic against an f64 reference rounded after each op
/// (XLA and LLVM compute narrow floats in f32 and round every result to the dtype).
#[test]
fn bf16_and_f16_host_arrays_round_trip_through_compiled_code() {
    use jax::half::{bf16, f16};
    let vals = [1.0f64, 2.5, 3.14159, -0.3333, 1000.7, 1e-3];
    let xb: Vec<bf16> = vals.iter().map(|&v| bf16::from_f64(v)).collect();
    let xh: Vec<f16> = vals.iter().map(|&v| f16::from_f64(v)).collect();
    let ab = Array::from_vec(xb.clone(), &[2, 3]).unwrap();
    let ah = Array::from_vec(xh.clone(), &[2, 3]).unwrap();
    assert_eq!((ab.dtype(), ah.dtype()), (DType::BF16, DType::F16));
    assert_eq!(ab.to_vec::<bf16>().unwrap(), xb);
    assert_eq!(ah.to_vec::<f16>().unwrap(), xh);
    assert_eq!(ab.to_vec::<f64>().unwrap(), xb.iter().map(|v| v.to_f64()).collect::<Vec<_>>());
    let nd = ndarray::Array2::from_shape_vec((2, 3), xb.clone()).unwrap();
    let from_nd = Array::from_ndarray(&nd);
    assert_eq!((from_nd.shape(), from_nd.to_vec::<bf16>().unwrap()), (vec![2, 3], xb.clone()));
    assert_eq!(from_nd.to_ndarray::<bf16>().unwrap().into_dimensionality::<ndarray::Ix2>().unwrap(), nd);
    // jax 0.10.2: repr(jnp.array([1, 2], jnp.bfloat16)), repr(jnp.array([1.5, 2.25, 3.14159], ...)).
    assert_eq!(format!("{:?}", Array::from_slice(&[bf16::from_f32(1.0), bf16::from_f32(2.0)])), "Array([1, 2], dtype=bfloat16)");
    let three = [1.5, 2.25, 3.14159];
    assert_eq!(
        format!("{:?}", Array::from_slice(&three.map(bf16::from_f64))),
        "Array([1.5, 2.25, 3.14062], dtype=bfloat16)"
    );
    assert_eq!(format!("{:?}", Array::from_slice(&three.map(f16::from_f64))), "Array([1.5 , 2.25, 3.14], dtype=float16)");
    // x * y + sin(x) * 2.0, eager and jitted; the reference rounds after every op (1000.7 *
    // -249.7 overflows float16 to -inf, as in JAX).
    let f = |(x, y): (Array, Array)| &x * &y + x.sin() * 2.0;
    let rb = |v: f64| bf16::from_f64(v).to_f64();
    let rh = |v: f64| f16::from_f64(v).to_f64();
    let y: Vec<f64> = vals.iter().map(|v| 0.5 - v / 4.0).collect();
    for (name, round, x, yv) in [
        ("bf16", &rb as &dyn Fn(f64) -> f64, ab.clone(), Array::from_vec(y.iter().map(|&v| bf16::from_f64(v)).collect(), &[2, 3]).unwrap()),
        ("f16", &rh, ah.clone(), Array::from_vec(y.iter().map(|&v| f16::from_f64(v)).collect(), &[2, 3]).unwrap()),
    ] {
        let xs = x.to_vec::<f64>().unwrap();
        let ys = yv.to_vec::<f64>().unwrap();
        let want: Vec<f64> = xs
            .iter()
            .zip(&ys)
            .map(|(&a, &b)| round(round(a * b) + round(round((a as f32).sin() as f64) * 2.0)))
            .collect();
        let eager = f((x.clone(), yv.clone()));
        let jitted = jit(f).call((&x, &yv)).unwrap();
        for (how, got) in [("eager", eager), ("jit", jitted)] {
            assert_eq!(got.dtype(), x.dtype(), "{name} {how}");
            let g = got.to_vec::<f64>().unwrap();
            for (i, (a, b)) in g.iter().zip(&want).enumerate() {
                // f32 sin may differ from the f64 one by an f32 ulp: allow one narrow ulp.
                let ulp = if name == "bf16" { 2f64.powi(-7) } else { 2f64.powi(-10) };
                assert!(a == b || (a - b).abs() <= ulp * b.abs().max(2f64.powi(-14)), "{name} {how}[{i}]: got {a}, want {b}");
            }
        }
    }
    // A reduction in bfloat16 reads back as bfloat16.
    let s = Array::from_slice(&[0.1, 0.2, 0.3].map(bf16::from_f64)).sum();
    assert_eq!(s.dtype(), DType::BF16);
    assert!((s.item::<bf16>().unwrap().to_f64() - 0.6).abs() < 0.01);
}

/// NumPy's rule for max/min of empty arrays: only a reduced axis of length 0 is an error
/// (`zeros((0, 7)).max(axis=1)` has shape (0,); `zeros((3, 0)).max(axis=1)` raises).
#[test]
fn max_min_of_empty_arrays_follow_numpy() {
    let x = jnp::zeros(&[0, 7], DType::F32);
    let m = jnp::max(&x, Some(&[1])).unwrap();
    assert_eq!(m.shape(), &[0]);
    let m = jnp::min(&x, Some(&[-1])).unwrap();
    assert_eq!(m.shape(), &[0]);
    for (shape, axis) in [(&[3usize, 0][..], 1isize), (&[0, 0], 1), (&[0, 7], 0)] {
        let x = jnp::zeros(shape, DType::F32);
        let e = jnp::max(&x, Some(&[axis])).unwrap_err().to_string();
        assert!(e.contains("zero-size array to reduction operation"), "{shape:?} axis {axis}: {e}");
    }
}
