//! Differentiation of the issue-3 array primitives: for every differentiable primitive,
//! gradients against central finite differences (f64, `jax_enable_x64` on, so this file
//! is its own process), eagerly and under `jit`; jvp against the vjp transposition
//! (`jvp(f, x, t) == <grad f(x), t>` and `<u, J t> == <J^T u, t>` for vector outputs);
//! zero derivatives of the piecewise-constant and integer-valued ones; and second
//! derivatives through a few rules.

// `s![a..b;-1]` with a > b is numpy's reversed slice, not an empty range.
#![allow(clippy::reversed_empty_ranges)]

use jax::ir::{ConvDims, CumOp, GatherDims, GatherMode, Primitive, ScatterDims, ScatterOp, WindowOp};
use jax::prelude::*;
use jax::s;
use jax::trace::Operand;

fn x64() {
    config::update("jax_enable_x64", true).unwrap();
}

fn f64s(a: &Array) -> Vec<f64> {
    a.to_vec::<f64>().unwrap()
}

/// Fixed, uneven weights of `shape` (so that sums of outputs weigh every element differently).
fn weights(shape: &[usize]) -> Array {
    let n: usize = shape.iter().product();
    Array::from_vec((0..n).map(|i| 0.3 + 0.7 * ((i as f64) * 1.37).sin()).collect::<Vec<f64>>(), shape).unwrap()
}

/// Σ w ⊙ y with `weights` of y's shape.
fn wsum(y: &Array) -> Array {
    (y * &weights(&y.shape())).sum()
}

fn ints(shape: &[usize], v: &[i32]) -> Array {
    Array::from_vec(v.to_vec(), shape).unwrap()
}

fn fd(f: &dyn Fn(Array) -> Array, x: &[f64]) -> Vec<f64> {
    jaxrepl_tests::central_differences(|v| f(Array::from_slice(v)).item::<f64>().unwrap(), x)
}

fn assert_close(got: &[f64], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths {got:?} vs {want:?}");
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() <= tol * (1.0 + w.abs()), "{what}: got {got:?} want {want:?}");
    }
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

type F = fn(Array) -> Array;

/// grad vs finite differences (eager and jit), and jvp vs <grad, t>.
fn check(name: &str, f: F, x0: &[f64]) {
    let want = fd(&f, x0);
    let g = f64s(&grad(f)(Array::from_slice(x0)).unwrap_or_else(|e| panic!("{name}: grad failed: {e}")));
    assert_close(&g, &want, 1e-5, name);
    let gj = jit(grad(f));
    assert_close(&f64s(&gj.call(Array::from_slice(x0)).unwrap()), &want, 1e-5, &format!("jit {name}"));
    let t: Vec<f64> = (0..x0.len()).map(|i| ((i as f64) * 0.77).cos()).collect();
    let (_, jt) = jvp(f, &Array::from_slice(x0), &Array::from_slice(&t)).unwrap_or_else(|e| panic!("{name}: jvp failed: {e}"));
    let jt = jt.item::<f64>().unwrap();
    assert!((jt - dot(&g, &t)).abs() <= 1e-8 * (1.0 + jt.abs()), "{name}: jvp {jt} vs <grad, t> {}", dot(&g, &t));
}

const X6: [f64; 6] = [0.3, -1.2, 0.7, 2.1, -0.4, 1.6];

#[test]
fn elementwise_rules_match_finite_differences() {
    x64();
    // Piecewise-constant ops have zero derivative away from their jumps.
    check("sign/floor/ceil/round", |x| wsum(&(&x.sign() * &x + &x.floor() * &x + &x.ceil() * &x * &x + &x.round() * &x)), &X6);
    check("is_finite/xor", |x| {
        let c = jnp::logical_xor(&x.isfinite(), &x.gt(0.5)).unwrap();
        wsum(&jnp::where_(&c, &(&x * &x), &(&x * 3.0)).unwrap())
    }, &X6);
    check("log1p", |x| wsum(&jnp::log1p(&(&x * &x)).unwrap()), &X6);
    check("expm1", |x| wsum(&jnp::expm1(&x).unwrap()), &X6);
    check("logistic", |x| wsum(&jnp::logistic(&(&x * 2.0)).unwrap()), &X6);
    check("erf", |x| wsum(&jnp::erf(&x).unwrap()), &X6);
    check("integer_pow", |x| {
        wsum(&(x.powi(3) + lax::integer_pow(&(&x + 3.0), -2).unwrap() + x.powi(1) + x.powi(0) + x.powi(2)))
    }, &X6);
    // reduce_precision to f64's own format is the identity; its derivative passes through.
    check("reduce_precision", |x| wsum(&(&lax::reduce_precision(&x, 11, 52).unwrap() * &x)), &X6);
    let g = grad(|x: Array| lax::reduce_precision(&x, 8, 7).unwrap().sum())(Array::from_slice(&X6)).unwrap();
    assert_eq!(f64s(&g), vec![1.0; 6], "reduce_precision passes the cotangent through");
}

#[test]
fn zero_derivatives_of_integer_and_boolean_results() {
    x64();
    let x = Array::from_slice(&X6);
    for (name, f) in [
        ("floor", (|x: Array| x.floor().sum()) as F),
        ("sign", |x| x.sign().sum()),
        ("round", |x| x.round().sum()),
        ("ceil", |x| x.ceil().sum()),
        ("argmax as float", |x| x.argmax().astype(DType::F64)),
        ("argmin as float", |x| x.argmin().astype(DType::F64)),
        ("all/any as float", |x| x.gt(0.0).all().astype(DType::F64) + x.gt(0.0).any().astype(DType::F64)),
    ] {
        assert_eq!(f64s(&grad(f)(x.clone()).unwrap()), vec![0.0; 6], "{name}");
        let (_, t) = jvp(f, &x, &x).unwrap();
        assert_eq!(t.item::<f64>().unwrap(), 0.0, "{name} jvp");
    }
}

#[test]
fn reduction_and_cumulative_rules_match_finite_differences() {
    x64();
    check("reduce_prod all", |x| x.prod(), &X6);
    check("reduce_prod axis", |x| wsum(&jnp::prod(&x.reshape(&[2, 3]), Some(&[1])).unwrap()), &X6);
    check("reduce_prod axis 0", |x| wsum(&jnp::prod(&x.reshape(&[3, 2]), Some(&[0])).unwrap()), &X6);
    // Zeros: one zero (its gradient is the product of the others), two zeros (all zero).
    check("reduce_prod one zero", |x| x.prod(), &[0.3, 0.0, 0.7, 2.1, -0.4, 1.6]);
    check("reduce_prod two zeros", |x| wsum(&jnp::prod(&x.reshape(&[2, 3]), Some(&[1])).unwrap()), &[0.0, 1.2, 0.0, 2.1, 0.0, 1.6]);
    check("argmax one-hot", |x| (&nn::one_hot(&x.argmax(), 6, DType::F64).unwrap() * &x).sum() + (&nn::one_hot(&x.argmin(), 6, DType::F64).unwrap() * &x * &x).sum(), &X6);
    check("reduce_and/or in where", |x| {
        let m = x.reshape(&[2, 3]);
        let all = jnp::all(&m.gt(-5.0), Some(&[1])).unwrap();
        let any = jnp::any(&m.gt(2.0), Some(&[1])).unwrap();
        wsum(&jnp::where_(&jnp::logical_and(&all, &any).unwrap(), &m.sum_axes(&[1]), &(m.sum_axes(&[1]) * 2.0)).unwrap())
    }, &X6);
    check("cumsum", |x| wsum(&jnp::cumsum(&x.reshape(&[2, 3]), Some(1)).unwrap()), &X6);
    check("cumsum reverse axis 0", |x| wsum(&lax::cumulative(CumOp::Sum, &x.reshape(&[3, 2]), 0, true).unwrap()), &X6);
    check("cumprod", |x| wsum(&jnp::cumprod(&x, None).unwrap()), &X6);
    check("cumprod with zero", |x| wsum(&jnp::cumprod(&x, None).unwrap()), &[0.3, -1.2, 0.0, 2.1, -0.4, 1.6]);
    check("cumprod reverse", |x| wsum(&lax::cumulative(CumOp::Prod, &x.reshape(&[2, 3]), 1, true).unwrap()), &X6);
    check("cummax", |x| wsum(&jnp::cummax(&x, None).unwrap()), &X6);
    check("cummin axis 0", |x| wsum(&jnp::cummin(&x.reshape(&[3, 2]), Some(0)).unwrap()), &X6);
    check("cummax reverse", |x| wsum(&lax::cumulative(CumOp::Max, &x.reshape(&[2, 3]), 1, true).unwrap()), &X6);
}

fn pad_value_traced(x: &Array, v: &Array, cfg: &[(i64, i64, i64)]) -> Array {
    lax::bind1(Primitive::Pad { padding_config: cfg.to_vec() }, vec![Operand::Array(x.clone()), Operand::Array(v.clone())]).unwrap()
}

#[test]
fn shape_rules_match_finite_differences() {
    x64();
    check("concatenate", |x| wsum(&jnp::concatenate(&[x.reshape(&[2, 3]), x.reshape(&[2, 3]).sin(), x.reshape(&[2, 3]).index(s![.., 0..1])], 1).unwrap()), &X6);
    check("stack", |x| wsum(&jnp::stack(&[x.clone(), &x * &x], 0).unwrap()), &X6);
    check("pad (negative, interior)", |x| wsum(&lax::pad(&x.reshape(&[2, 3]), 0.5, &[(1, -1, 1), (-1, 2, 0)]).unwrap()), &X6);
    check("pad with traced value", |x| {
        let v = x.index(s![0]) * 2.0;
        wsum(&pad_value_traced(&x.reshape(&[2, 3]).sin(), &v, &[(2, 1, 1), (0, -1, 2)]))
    }, &X6);
    check("rev", |x| wsum(&jnp::flip(&x.reshape(&[2, 3]), Some(&[0, 1])).unwrap()), &X6);
    check("squeeze/expand_dims", |x| wsum(&jnp::squeeze(&jnp::expand_dims(&x, 0).unwrap(), None).unwrap().sin()), &X6);
    check("slice", |x| wsum(&lax::slice(&x.reshape(&[2, 3]), &[0, 1], &[2, 3], None).unwrap()), &X6);
    check("strided slice", |x| wsum(&lax::slice(&x, &[1], &[6], Some(&[2])).unwrap()), &X6);
    check("basic indexing (negative step)", |x| wsum(&x.reshape(&[2, 3]).index(s![.., 2..0;-1])), &X6);
    check("split", |x| {
        let p = jnp::split(&x.reshape(&[3, 2]), 3, 0).unwrap();
        wsum(&(&p[0] * &p[2])) + p[1].sin().sum()
    }, &X6);
    check("split one piece used", |x| wsum(&jnp::split_at(&x, &[2, 5], 0).unwrap()[1]), &X6);
    check("dynamic_slice", |x| {
        let i = Array::scalar(1i32);
        let j = Array::scalar(5i32); // clamped to 1
        wsum(&lax::dynamic_slice(&x.reshape(&[2, 3]), &[i.clone(), j], &[1, 2]).unwrap().sin())
    }, &X6);
    check("dynamic_update_slice", |x| {
        let m = x.reshape(&[2, 3]);
        let u = m.index(s![0..1, 0..2]).sin();
        wsum(&lax::dynamic_update_slice(&m, &u, &[Array::scalar(1i32), Array::scalar(-3i32)]).unwrap())
    }, &X6);
}

fn sidx() -> Array {
    ints(&[4], &[1, 4, 1, 0])
}

#[test]
fn gather_and_scatter_rules_match_finite_differences() {
    x64();
    check("advanced indexing (duplicates)", |x| wsum(&x.index(s![&ints(&[5], &[3, 0, 3, -1, 2])])), &X6);
    check("2-d advanced indexing", |x| wsum(&x.reshape(&[2, 3]).index(s![&ints(&[2], &[1, 0]), &ints(&[2], &[2, 2])])), &X6);
    check("gather of windows", |x| {
        let dn = GatherDims { offset_dims: vec![1], collapsed_slice_dims: vec![0], start_index_map: vec![0, 1], ..Default::default() };
        let idx = ints(&[3, 2], &[1, 1, 0, 0, 1, 5]);
        wsum(&lax::gather(&x.reshape(&[2, 3]), &idx, dn, &[1, 2], GatherMode::Clip).unwrap())
    }, &X6);
    check("gather fill-or-drop", |x| {
        let dn = GatherDims { offset_dims: vec![], collapsed_slice_dims: vec![0], start_index_map: vec![0], ..Default::default() };
        let idx = ints(&[4, 1], &[1, 7, 4, -1]);
        let g = lax::gather(&x, &idx, dn, &[1], GatherMode::FillOrDrop).unwrap();
        wsum(&jnp::where_(&jnp::isnan(&g).unwrap(), &Array::scalar(0.0f64), &g).unwrap())
    }, &X6);
    check("scatter set (duplicates: last wins)", |x| {
        let u = x.index(s![2..6]).sin();
        wsum(&x.at(s![&sidx()]).set(&u).unwrap())
    }, &X6);
    check("scatter add", |x| wsum(&x.at(s![&sidx()]).add(&(x.index(s![2..6]) * 3.0)).unwrap().sin()), &X6);
    check("scatter mul", |x| wsum(&x.at(s![&sidx()]).mul(&x.index(s![2..6]).cos()).unwrap()), &X6);
    check("scatter mul with zero update", |x| wsum(&x.at(s![&sidx()]).mul(&x.index(s![2..6])).unwrap()), &[0.3, -1.2, 0.7, 0.0, -0.4, 1.6]);
    check("scatter min", |x| wsum(&x.at(s![&sidx()]).min(&(x.index(s![2..6]) * 0.9)).unwrap()), &X6);
    check("scatter max", |x| wsum(&x.at(s![&sidx()]).max(&(x.index(s![2..6]) * 1.1)).unwrap()), &X6);
    check("scatter fill-or-drop", |x| {
        let i = ints(&[3], &[7, 2, -9]);
        wsum(&x.at(s![&i]).set(&x.index(s![0..3]).sin()).unwrap())
    }, &X6);
    check("scatter windows", |x| {
        let dn = ScatterDims { update_window_dims: vec![1], inserted_window_dims: vec![0], scatter_dims_to_operand_dims: vec![0, 1], ..Default::default() };
        let i = ints(&[2, 2], &[0, 1, 1, 0]);
        let u = x.index(s![0..4]).reshape(&[2, 2]).sin();
        wsum(&lax::scatter(ScatterOp::Add, &x.reshape(&[2, 3]), &i, &u, dn, GatherMode::Clip).unwrap())
    }, &X6);
}

#[test]
fn sort_and_top_k_rules_match_finite_differences() {
    x64();
    check("sort", |x| wsum(&jnp::sort(&x, 0).unwrap()), &X6);
    check("sort axis 0 of 2-d", |x| wsum(&jnp::sort(&x.reshape(&[3, 2]), 0).unwrap()), &X6);
    check("sort two operands", |x| {
        let keys = x.cos();
        let out = lax::sort(&[keys, x.sin() * 2.0], 0, 1).unwrap();
        wsum(&out[1]) + wsum(&out[0])
    }, &X6);
    check("argsort gathers", |x| wsum(&x.index(s![&jnp::argsort(&x, 0).unwrap()])), &X6);
    check("top_k", |x| {
        let (v, _) = lax::top_k(&x.reshape(&[2, 3]), 2).unwrap();
        wsum(&v)
    }, &X6);
}

const X12: [f64; 12] = [0.3, -1.2, 0.7, 2.1, -0.4, 1.6, 0.9, -0.8, 1.1, 0.2, -1.7, 0.5];

#[test]
fn conv_rules_match_finite_differences() {
    x64();
    // lhs: the first 10 entries as [1, 2, 5] (N C W); rhs: the last as [2, 2, ...].
    check("conv 1-d", |x| {
        let l = x.index(s![0..10]).reshape(&[1, 2, 5]);
        let r = x.index(s![4..12]).reshape(&[2, 2, 2]);
        wsum(&lax::conv_general_dilated(&l, &r, &[1], &[(0, 0)], None, None, None, 1).unwrap())
    }, &X12);
    check("conv strides + padding", |x| {
        let l = x.index(s![0..10]).reshape(&[1, 2, 5]);
        let r = x.index(s![6..12]).reshape(&[1, 2, 3]);
        wsum(&lax::conv_general_dilated(&l, &r, &[2], &[(1, 2)], None, None, None, 1).unwrap())
    }, &X12);
    check("conv negative padding", |x| {
        let l = x.index(s![0..10]).reshape(&[1, 2, 5]);
        let r = x.index(s![8..12]).reshape(&[1, 2, 2]);
        wsum(&lax::conv_general_dilated(&l, &r, &[1], &[(-1, 1)], None, None, None, 1).unwrap())
    }, &X12);
    check("conv lhs dilation", |x| {
        let l = x.index(s![0..10]).reshape(&[1, 2, 5]);
        let r = x.index(s![6..12]).reshape(&[1, 2, 3]);
        wsum(&lax::conv_general_dilated(&l, &r, &[1], &[(1, 1)], Some(&[2]), None, None, 1).unwrap())
    }, &X12);
    check("conv rhs dilation + stride", |x| {
        let l = x.index(s![0..10]).reshape(&[1, 2, 5]);
        let r = x.index(s![8..12]).reshape(&[1, 2, 2]);
        wsum(&lax::conv_general_dilated(&l, &r, &[2], &[(0, 1)], None, Some(&[2]), None, 1).unwrap())
    }, &X12);
    check("conv feature groups", |x| {
        let l = x.index(s![0..12]).reshape(&[1, 4, 3]);
        let r = x.index(s![2..10]).reshape(&[4, 1, 2]); // 2 groups of 2 output features
        wsum(&lax::conv_general_dilated(&l, &r, &[1], &[(1, 0)], None, None, None, 4).unwrap())
    }, &X12);
    check("conv groups 2 of 2 channels", |x| {
        let l = x.index(s![0..12]).reshape(&[1, 4, 3]);
        let r = x.index(s![0..8]).reshape(&[2, 2, 2]);
        wsum(&lax::conv_general_dilated(&l, &r, &[1], &[(0, 1)], None, None, None, 2).unwrap())
    }, &X12);
    check("conv 2-d NHWC/HWIO", |x| {
        let l = x.index(s![0..12]).reshape(&[1, 3, 2, 2]); // N H W C
        let r = x.index(s![3..11]).reshape(&[2, 1, 2, 2]); // H W I O
        let dn = ConvDims { lhs_spec: vec![0, 3, 1, 2], rhs_spec: vec![3, 2, 0, 1], out_spec: vec![0, 3, 1, 2] };
        wsum(&lax::conv_general_dilated(&l, &r, &[1, 1], &[(1, 0), (0, 1)], None, None, Some(dn), 1).unwrap())
    }, &X12);
    check("conv batch 2, 2-d NCHW with stride", |x| {
        let l = x.index(s![0..12]).reshape(&[2, 1, 2, 3]);
        let r = x.index(s![5..9]).reshape(&[2, 1, 1, 2]);
        wsum(&lax::conv_general_dilated(&l, &r, &[1, 2], &[(0, 0), (1, 1)], None, None, None, 1).unwrap())
    }, &X12);
}

fn window(op: WindowOp, x: &Array, w: &[usize], st: &[usize], pad: &[(i64, i64)], bd: &[usize], wd: &[usize]) -> Array {
    let p = Primitive::ReduceWindow {
        op,
        window_dimensions: w.to_vec(),
        window_strides: st.to_vec(),
        padding: pad.to_vec(),
        base_dilation: bd.to_vec(),
        window_dilation: wd.to_vec(),
    };
    lax::bind1(p, vec![Operand::Array(x.clone())]).unwrap()
}

#[test]
fn reduce_window_rules_match_finite_differences() {
    x64();
    check("reduce_window sum", |x| wsum(&lax::reduce_window(WindowOp::Sum, &x.reshape(&[3, 4]), &[2, 2], &[1, 1], &[(0, 0), (0, 0)]).unwrap()), &X12);
    check("reduce_window sum strided padded", |x| wsum(&lax::reduce_window(WindowOp::Sum, &x.reshape(&[3, 4]), &[2, 3], &[2, 1], &[(1, 0), (1, 2)]).unwrap()), &X12);
    check("reduce_window sum dilated", |x| wsum(&window(WindowOp::Sum, &x.reshape(&[3, 4]), &[2, 2], &[1, 2], &[(0, 1), (1, 0)], &[2, 1], &[1, 2])), &X12);
    check("reduce_window max", |x| wsum(&lax::reduce_window(WindowOp::Max, &x.reshape(&[3, 4]), &[2, 2], &[1, 1], &[(0, 0), (0, 0)]).unwrap()), &X12);
    check("reduce_window max strided padded", |x| wsum(&lax::reduce_window(WindowOp::Max, &x.reshape(&[3, 4]), &[2, 3], &[2, 1], &[(1, 0), (1, 2)]).unwrap()), &X12);
    check("reduce_window min dilated", |x| wsum(&window(WindowOp::Min, &x.reshape(&[3, 4]), &[2, 2], &[1, 2], &[(0, 1), (1, 0)], &[2, 1], &[1, 2])), &X12);
    check("max pool NCHW", |x| wsum(&lax::reduce_window(WindowOp::Max, &x.reshape(&[1, 1, 3, 4]), &[1, 1, 2, 2], &[1, 1, 2, 2], &[(0, 0); 4]).unwrap()), &X12);
}

/// `<u, J t> == <J^T u, t>` for vector-valued `f`.
fn transposes(name: &str, f: F, x0: &[f64]) {
    let x = Array::from_slice(x0);
    let t: Vec<f64> = (0..x0.len()).map(|i| ((i as f64) * 0.77).cos()).collect();
    let (y, jt) = jvp(f, &x, &Array::from_slice(&t)).unwrap_or_else(|e| panic!("{name}: jvp: {e}"));
    let u = weights(&y.shape());
    let (_, ju) = vjp(f, &x, &u).unwrap_or_else(|e| panic!("{name}: vjp: {e}"));
    let a = dot(&f64s(&u), &f64s(&jt));
    let b = dot(&f64s(&ju), &t);
    assert!((a - b).abs() <= 1e-9 * (1.0 + a.abs()), "{name}: <u, Jt> = {a} but <J^T u, t> = {b}");
    // jvp against a central difference along t.
    let h = 1e-6;
    let xp: Vec<f64> = x0.iter().zip(&t).map(|(a, b)| a + h * b).collect();
    let xm: Vec<f64> = x0.iter().zip(&t).map(|(a, b)| a - h * b).collect();
    let d: Vec<f64> = f64s(&f(Array::from_slice(&xp))).iter().zip(f64s(&f(Array::from_slice(&xm)))).map(|(p, m)| (p - m) / (2.0 * h)).collect();
    assert_close(&f64s(&jt), &d, 1e-5, &format!("{name} jvp vs finite differences"));
}

#[test]
fn jvp_agrees_with_vjp_transposition_for_vector_outputs() {
    x64();
    let fns: Vec<(&str, F)> = vec![
        ("elementwise", |x| jnp::log1p(&(&x * &x)).unwrap() + jnp::expm1(&x).unwrap() + jnp::erf(&x).unwrap() + jnp::logistic(&x).unwrap() + x.powi(3)),
        ("cumulative", |x| jnp::cumsum(&x, None).unwrap() + jnp::cumprod(&x, None).unwrap() + jnp::cummax(&x, None).unwrap()),
        ("reduce_prod", |x| jnp::prod(&x.reshape(&[4, 3]), Some(&[0])).unwrap()),
        ("pad/slice/rev", |x| lax::pad(&jnp::flip(&x, None).unwrap(), 0.0, &[(2, -1, 1)]).unwrap().index(s![1..;2])),
        ("gather/scatter", |x| x.at(s![&ints(&[3], &[1, 1, 5])]).mul(&x.index(s![&ints(&[3], &[0, 2, 4])])).unwrap()),
        ("scatter max", |x| x.at(s![&ints(&[3], &[1, 1, 5])]).max(&x.index(s![0..3])).unwrap()),
        ("sort/top_k", |x| {
            let (v, _) = lax::top_k(&x, 4).unwrap();
            jnp::concatenate(&[jnp::sort(&x, 0).unwrap(), v], 0).unwrap()
        }),
        ("conv", |x| {
            let l = x.index(s![0..10]).reshape(&[1, 2, 5]);
            let r = x.index(s![4..12]).reshape(&[2, 2, 2]);
            lax::conv_general_dilated(&l, &r, &[2], &[(1, 1)], None, Some(&[2]), None, 1).unwrap().reshape(&[-1])
        }),
        ("reduce_window", |x| {
            let m = x.reshape(&[3, 4]);
            jnp::concatenate(&[
                lax::reduce_window(WindowOp::Max, &m, &[2, 2], &[1, 1], &[(0, 1), (0, 0)]).unwrap().reshape(&[-1]),
                lax::reduce_window(WindowOp::Sum, &m, &[3, 2], &[1, 2], &[(1, 1), (0, 0)]).unwrap().reshape(&[-1]),
            ], 0).unwrap()
        }),
        ("dynamic slices", |x| {
            let m = x.reshape(&[3, 4]);
            let d = lax::dynamic_slice(&m, &[Array::scalar(1i32), Array::scalar(1i32)], &[2, 2]).unwrap();
            lax::dynamic_update_slice(&m, &d.sin(), &[Array::scalar(0i32), Array::scalar(2i32)]).unwrap().reshape(&[-1])
        }),
    ];
    for (name, f) in fns {
        transposes(name, f, &X12);
    }
}

#[test]
fn second_derivatives_through_array_rules() {
    x64();
    // Hessian-vector products of f = Σ w·g(x) via jvp of grad, against differences of grads.
    let fns: Vec<(&str, F)> = vec![
        ("cumprod", |x| wsum(&jnp::cumprod(&x, None).unwrap())),
        ("conv", |x| {
            let l = x.index(s![0..10]).reshape(&[1, 2, 5]);
            let r = x.index(s![6..12]).reshape(&[1, 2, 3]);
            wsum(&lax::conv_general_dilated(&l, &r, &[2], &[(1, 2)], None, None, None, 1).unwrap().sin())
        }),
        ("gather/scatter/pad", |x| {
            let y = x.at(s![&ints(&[2], &[3, 3])]).mul(&x.index(s![0..2])).unwrap();
            wsum(&lax::pad(&y, 0.0, &[(1, 1, 1)]).unwrap().sin())
        }),
        ("sort/logistic", |x| wsum(&jnp::logistic(&jnp::sort(&(&x * &x), 0).unwrap()).unwrap())),
    ];
    for (name, f) in fns {
        let t: Vec<f64> = (0..12).map(|i| ((i as f64) * 0.41).sin()).collect();
        let g = grad(f);
        let (_, hv) = jvp(&g, &Array::from_slice(&X12), &Array::from_slice(&t)).unwrap_or_else(|e| panic!("{name}: {e}"));
        let h = 1e-5;
        let xp: Vec<f64> = X12.iter().zip(&t).map(|(a, b)| a + h * b).collect();
        let xm: Vec<f64> = X12.iter().zip(&t).map(|(a, b)| a - h * b).collect();
        let want: Vec<f64> = f64s(&g(Array::from_slice(&xp)).unwrap()).iter().zip(f64s(&g(Array::from_slice(&xm)).unwrap())).map(|(p, m)| (p - m) / (2.0 * h)).collect();
        assert_close(&f64s(&hv), &want, 1e-5, &format!("{name} hessian-vector"));
    }
}
