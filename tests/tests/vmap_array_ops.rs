//! `vmap` of every issue-3 array primitive against an explicit loop over the mapped
//! axis (eager and under `jit`), including the asymmetric cases: batched indices with an
//! unbatched operand and the reverse for gather/scatter/dynamic slices, batched padding
//! values, and convolutions with a batched lhs, rhs or both (with feature groups).

// `s![a..b;-1]` with a > b is numpy's reversed slice, not an empty range.
#![allow(clippy::reversed_empty_ranges)]

use jax::ir::{ConvDims, CumOp, GatherDims, GatherMode, Primitive, ScatterDims, ScatterOp, WindowOp};
use jax::prelude::*;
use jax::s;
use jax::trace::Operand;

fn vals(a: &Array) -> Vec<f64> {
    a.astype(DType::F32).to_vec::<f32>().unwrap().into_iter().map(|v| v as f64).collect()
}

fn assert_close(got: &[f64], want: &[f64], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: {got:?} vs {want:?}");
    for (g, w) in got.iter().zip(want) {
        let ok = g == w || (g.is_nan() && w.is_nan()) || (g - w).abs() <= 1e-5 * (1.0 + w.abs());
        assert!(ok, "{what}: got {got:?} want {want:?}");
    }
}

fn farr(shape: &[usize], seed: f64) -> Array {
    let n: usize = shape.iter().product();
    Array::from_vec((0..n).map(|i| ((i as f64 + seed) * 0.731).sin() as f32 * 2.0).collect::<Vec<f32>>(), shape).unwrap()
}

fn ints(shape: &[usize], v: &[i32]) -> Array {
    Array::from_vec(v.to_vec(), shape).unwrap()
}

fn row(x: &Array, i: usize) -> Array {
    x.index(s![i as isize])
}

type F = fn(Array) -> Array;

/// vmap(f)(x) (eager and jit) against f on each row of x.
fn check(name: &str, f: F, x: &Array) {
    let want: Vec<f64> = (0..x.shape()[0]).flat_map(|i| vals(&f(row(x, i)))).collect();
    let got = vmap(f)(x.clone()).unwrap_or_else(|e| panic!("{name}: vmap failed: {e}"));
    assert_eq!(got.shape()[0], x.shape()[0], "{name}: batch dim");
    assert_close(&vals(&got), &want, name);
    let gj = jit(vmap(f));
    assert_close(&vals(&gj.call(x).unwrap()), &want, &format!("jit {name}"));
}

type F2 = fn((Array, Array)) -> Array;

/// vmap of a two-argument function with `in_axes` (None: not mapped) against a loop.
fn check2(name: &str, f: F2, a: &Array, b: &Array, axes: [Option<usize>; 2]) {
    let n = if axes[0].is_some() { a.shape()[0] } else { b.shape()[0] };
    let pick = |x: &Array, ax: Option<usize>, i: usize| if ax.is_some() { row(x, i) } else { x.clone() };
    let want: Vec<f64> = (0..n).flat_map(|i| vals(&f((pick(a, axes[0], i), pick(b, axes[1], i))))).collect();
    let got = vmap_axes(f, axes.to_vec(), 0)((a.clone(), b.clone())).unwrap_or_else(|e| panic!("{name}: vmap failed: {e}"));
    assert_close(&vals(&got), &want, name);
    let gj = jit(vmap_axes(f, axes.to_vec(), 0));
    assert_close(&vals(&gj.call((a.clone(), b.clone())).unwrap()), &want, &format!("jit {name}"));
}

#[test]
fn elementwise_and_reductions_match_a_loop() {
    let x = farr(&[3, 2, 4], 0.0);
    let fns: Vec<(&str, F)> = vec![
        ("sign/floor/ceil/round", |x| x.sign() + x.floor() * 2.0 + x.ceil() * 3.0 + x.round() * 4.0),
        ("is_finite", |x| jnp::isfinite(&jnp::log1p(&x).unwrap()).unwrap()),
        ("log1p/expm1", |x| jnp::log1p(&(&x * &x)).unwrap() + jnp::expm1(&x).unwrap()),
        ("logistic/erf", |x| jnp::logistic(&x).unwrap() + jnp::erf(&x).unwrap()),
        ("integer_pow", |x| x.powi(3) + x.powi(-2)),
        ("xor", |x| jnp::logical_xor(&x.gt(0.0), &x.gt(0.5)).unwrap()),
        ("bitwise xor", |x| jnp::bitwise_xor(&(&x * 10.0).astype(DType::I32), &ints(&[4], &[1, 2, 3, 4])).unwrap()),
        ("reduce_precision", |x| lax::reduce_precision(&x, 5, 2).unwrap()),
        ("reduce_prod", |x| jnp::prod(&x, Some(&[1])).unwrap()),
        ("reduce_prod all", |x| x.prod()),
        ("all/any", |x| jnp::all(&x.gt(-1.0), Some(&[1])).unwrap().astype(DType::I32) + jnp::any(&x.gt(1.5), Some(&[0])).unwrap().astype(DType::I32).sum()),
        ("argmax/argmin", |x| jnp::argmax(&x, Some(1)).unwrap() * 10 + jnp::argmin(&x, Some(0)).unwrap().sum()),
        ("cumsum", |x| jnp::cumsum(&x, Some(1)).unwrap()),
        ("cumprod reverse", |x| lax::cumulative(CumOp::Prod, &x, 0, true).unwrap()),
        ("cummax/cummin", |x| jnp::cummax(&x, Some(0)).unwrap() + jnp::cummin(&x, Some(1)).unwrap()),
    ];
    for (name, f) in fns {
        check(name, f, &x);
    }
}

fn pad_traced(x: &Array, v: &Array, cfg: &[(i64, i64, i64)]) -> Array {
    lax::bind1(Primitive::Pad { padding_config: cfg.to_vec() }, vec![Operand::Array(x.clone()), Operand::Array(v.clone())]).unwrap()
}

#[test]
fn shape_ops_match_a_loop() {
    let x = farr(&[3, 2, 4], 1.0);
    let fns: Vec<(&str, F)> = vec![
        ("concatenate with a constant", |x| jnp::concatenate(&[x.clone(), farr(&[2, 1], 5.0), x.sin()], 1).unwrap()),
        ("stack", |x| jnp::stack(&[x.clone(), farr(&[2, 4], 2.0)], 0).unwrap()),
        ("pad", |x| lax::pad(&x, 0.5, &[(1, -1, 1), (-1, 2, 0)]).unwrap()),
        ("pad with a batched value", |x| pad_traced(&x, &x.index(s![0, 0]), &[(1, 0, 1), (2, -1, 0)])),
        ("rev", |x| jnp::flip(&x, Some(&[1])).unwrap()),
        ("squeeze", |x| jnp::squeeze(&x.index(s![0..1, ..]), Some(&[0])).unwrap()),
        ("slice strided", |x| lax::slice(&x, &[0, 1], &[2, 4], Some(&[1, 2])).unwrap()),
        ("negative-step index", |x| x.index(s![.., 3..0;-2])),
        ("split", |x| {
            let p = jnp::split(&x, 2, 1).unwrap();
            &p[0] * 2.0 - &p[1]
        }),
        ("dynamic_slice static starts", |x| lax::dynamic_slice(&x, &[Array::scalar(1i32), Array::scalar(3i32)], &[1, 2]).unwrap()),
        ("dynamic_update_slice static starts", |x| {
            lax::dynamic_update_slice(&x, &farr(&[1, 2], 3.0), &[Array::scalar(0i32), Array::scalar(1i32)]).unwrap()
        }),
        ("dynamic_update_slice batched update", |x| {
            let u = x.index(s![0..1, 0..2]) * 10.0;
            lax::dynamic_update_slice(&farr(&[2, 4], 0.0), &u, &[Array::scalar(1i32), Array::scalar(2i32)]).unwrap()
        }),
    ];
    for (name, f) in fns {
        check(name, f, &x);
    }
    // Batched start indices (data-dependent per lane), operand batched or not.
    let starts = ints(&[3, 2], &[0, 1, 1, 3, 5, -2]);
    let ds: F2 = |(x, i)| lax::dynamic_slice(&x, &[i.index(s![0]), i.index(s![1])], &[1, 2]).unwrap();
    check2("dynamic_slice batched starts", ds, &x, &starts, [Some(0), Some(0)]);
    check2("dynamic_slice batched starts, unbatched operand", ds, &farr(&[2, 4], 7.0), &starts, [None, Some(0)]);
    let dus: F2 = |(x, i)| lax::dynamic_update_slice(&x, &(x.index(s![0..1, 0..2]) * 10.0), &[i.index(s![0]), i.index(s![1])]).unwrap();
    check2("dynamic_update_slice batched starts", dus, &x, &starts, [Some(0), Some(0)]);
    let dus_u: F2 = |(x, i)| lax::dynamic_update_slice(&farr(&[2, 4], 1.0), &x.index(s![1..2, 1..3]), &[i.index(s![0]), i.index(s![1])]).unwrap();
    check2("dynamic_update_slice batched starts and update", dus_u, &x, &starts, [Some(0), Some(0)]);
}

#[test]
fn gather_and_scatter_match_a_loop() {
    let x = farr(&[3, 5], 2.0);
    let idx = ints(&[3, 4], &[0, 4, 4, 1, 2, 2, 3, -1, 1, 0, 9, 3]);
    let take: F2 = |(x, i)| x.index(s![&i]);
    check2("gather: batched operand and indices", take, &x, &idx, [Some(0), Some(0)]);
    check2("gather: batched operand", take, &x, &idx.index(s![0]), [Some(0), None]);
    check2("gather: batched indices", take, &x.index(s![1]), &idx, [None, Some(0)]);
    let windows: F2 = |(x, i)| {
        let dn = GatherDims { offset_dims: vec![1], collapsed_slice_dims: vec![0], start_index_map: vec![0, 1], ..Default::default() };
        lax::gather(&x.reshape(&[1, 5]), &i.reshape(&[2, 2]), dn, &[1, 3], GatherMode::Clip).unwrap()
    };
    check2("gather windows: batched both", windows, &x, &idx, [Some(0), Some(0)]);
    check2("gather windows: batched indices", windows, &x.index(s![2]), &idx, [None, Some(0)]);
    check2("gather windows: batched operand", windows, &x, &idx.index(s![1]), [Some(0), None]);
    let fill: F2 = |(x, i)| {
        let dn = GatherDims { offset_dims: vec![], collapsed_slice_dims: vec![0], start_index_map: vec![0], ..Default::default() };
        lax::gather(&x, &i.reshape(&[4, 1]), dn, &[1], GatherMode::FillOrDrop).unwrap()
    };
    check2("gather fill-or-drop: batched both", fill, &x, &idx, [Some(0), Some(0)]);

    let scatters: Vec<(&str, F2)> = vec![
        ("set", |(x, i)| x.at(s![&i]).set(&(x.index(s![0..4]) * 10.0)).unwrap()),
        ("add", |(x, i)| x.at(s![&i]).add(&x.index(s![1..5])).unwrap()),
        ("mul", |(x, i)| x.at(s![&i]).mul(&x.index(s![1..5])).unwrap()),
        ("min", |(x, i)| x.at(s![&i]).min(&(x.index(s![1..5]) - 0.5)).unwrap()),
        ("max", |(x, i)| x.at(s![&i]).max(&(x.index(s![1..5]) + 0.5)).unwrap()),
    ];
    // Unique indices for `set` so the result does not depend on the order of duplicates.
    let uidx = ints(&[3, 4], &[0, 4, 2, 1, 2, 0, 3, -1, 1, 0, 9, 3]);
    for (name, f) in scatters {
        check2(&format!("scatter {name}: batched operand and indices"), f, &x, &uidx, [Some(0), Some(0)]);
        check2(&format!("scatter {name}: batched operand"), f, &x, &uidx.index(s![1]), [Some(0), None]);
        check2(&format!("scatter {name}: batched indices"), f, &x.index(s![0]), &uidx, [None, Some(0)]);
    }
    let upd_only: F2 = |(u, i)| farr(&[5], 4.0).at(s![&i]).add(&u.index(s![0..4])).unwrap();
    check2("scatter add: batched updates only", upd_only, &x, &idx.index(s![0]), [Some(0), None]);
    let windows: F2 = |(x, i)| {
        let dn = ScatterDims { update_window_dims: vec![1], inserted_window_dims: vec![0], scatter_dims_to_operand_dims: vec![0, 1], ..Default::default() };
        let u = x.index(s![0..4]).reshape(&[2, 2]);
        lax::scatter(ScatterOp::Add, &x.reshape(&[1, 5]), &i.reshape(&[2, 2]), &u, dn, GatherMode::Clip).unwrap()
    };
    check2("scatter windows: batched both", windows, &x, &idx, [Some(0), Some(0)]);
    check2("scatter windows: batched operand", windows, &x, &idx.index(s![2]), [Some(0), None]);
}

#[test]
fn sort_and_top_k_match_a_loop() {
    let x = farr(&[3, 2, 5], 3.0);
    let fns: Vec<(&str, F)> = vec![
        ("sort last axis", |x| jnp::sort(&x, -1).unwrap()),
        ("sort axis 0", |x| jnp::sort(&x, 0).unwrap()),
        ("argsort", |x| jnp::argsort(&x, 1).unwrap()),
        ("sort two operands", |x| {
            let o = lax::sort(&[x.cos(), x.clone()], 1, 1).unwrap();
            &o[1] * 2.0 + &o[0]
        }),
        ("sort with an unbatched operand", |x| {
            let o = lax::sort(&[x.clone(), farr(&[2, 5], 9.0)], 1, 1).unwrap();
            o[1].clone()
        }),
        ("top_k values", |x| lax::top_k(&x, 3).unwrap().0),
        ("top_k indices", |x| lax::top_k(&x, 2).unwrap().1),
    ];
    for (name, f) in fns {
        check(name, f, &x);
    }
}

#[test]
fn conv_and_reduce_window_match_a_loop() {
    let lhs = farr(&[3, 1, 4, 5], 0.0); // per lane: N=1, C=4, W=5
    let rhs = farr(&[3, 4, 2, 3], 1.0); // per lane: O=4, I=2, W=3 (2 groups) or reshaped
    let c1: F2 = |(l, r)| lax::conv_general_dilated(&l, &r.reshape(&[2, 4, 3]), &[1], &[(1, 1)], None, None, None, 1).unwrap();
    check2("conv batched lhs", c1, &lhs, &rhs.index(s![0]), [Some(0), None]);
    check2("conv batched rhs", c1, &lhs.index(s![1]), &rhs, [None, Some(0)]);
    check2("conv batched both", c1, &lhs, &rhs, [Some(0), Some(0)]);
    let c2: F2 = |(l, r)| lax::conv_general_dilated(&l, &r, &[2], &[(0, 1)], None, Some(&[2]), None, 2).unwrap();
    check2("grouped conv batched lhs", c2, &lhs, &rhs.index(s![0]), [Some(0), None]);
    check2("grouped conv batched rhs", c2, &lhs.index(s![2]), &rhs, [None, Some(0)]);
    check2("grouped conv batched both", c2, &lhs, &rhs, [Some(0), Some(0)]);
    let c3: F2 = |(l, r)| {
        // N W C / W I O layout, 2 images per lane
        let dn = ConvDims { lhs_spec: vec![0, 2, 1], rhs_spec: vec![2, 1, 0], out_spec: vec![0, 2, 1] };
        lax::conv_general_dilated(&l.reshape(&[2, 5, 2]), &r.reshape(&[3, 2, 4]), &[1], &[(1, 0)], Some(&[2]), None, Some(dn), 1).unwrap()
    };
    check2("conv NWC batched both", c3, &lhs, &rhs, [Some(0), Some(0)]);
    check2("conv NWC batched rhs", c3, &lhs.index(s![0]), &rhs, [None, Some(0)]);

    let x = farr(&[3, 4, 5], 6.0);
    let fns: Vec<(&str, F)> = vec![
        ("reduce_window sum", |x| lax::reduce_window(WindowOp::Sum, &x, &[2, 2], &[1, 2], &[(1, 0), (0, 1)]).unwrap()),
        ("reduce_window max", |x| lax::reduce_window(WindowOp::Max, &x, &[2, 3], &[2, 1], &[(0, 1), (1, 1)]).unwrap()),
        ("reduce_window min", |x| lax::reduce_window(WindowOp::Min, &x, &[3, 2], &[1, 1], &[(0, 0), (0, 0)]).unwrap()),
    ];
    for (name, f) in fns {
        check(name, f, &x);
    }
}

#[test]
fn vmap_of_grad_through_array_ops() {
    let x = farr(&[3, 6], 4.0);
    let f: F = |x| {
        let g = grad(|x: Array| {
            let y = jnp::cumprod(&x, None).unwrap() + jnp::sort(&x, 0).unwrap();
            let p = lax::pad(&y, 0.0, &[(1, 1, 1)]).unwrap();
            lax::reduce_window(WindowOp::Max, &p, &[3], &[2], &[(0, 0)]).unwrap().sum() + x.at(s![&ints(&[2], &[1, 1])]).mul(&x.index(s![2..4])).unwrap().sum()
        });
        g(x).unwrap()
    };
    check("vmap(grad(...))", f, &x);
}

/// vmap of gather/scatter with both operand and indices batched pairs the batch dims as
/// StableHLO batching dims (as jax 0.10.2 prints them), nests (vmap of vmap) and
/// differentiates (the transpose of a batched gather is a batched scatter-add).
#[test]
fn gather_scatter_batching_dims() {
    let x = farr(&[3, 5], 1.0);
    let i = ints(&[3], &[1, 4, 0]);
    let pick: F2 = |(x, i)| x.index(s![&i]);
    let j = make_jaxpr(move |(x, i): (Array, Array)| vmap(pick)((x, i)), (&x, &i)).unwrap().to_string();
    assert!(j.contains("operand_batching_dims=(0,), start_indices_batching_dims=(0,)"), "{j}");
    let want: Vec<f64> = (0..3).map(|r| vals(&x)[r * 5 + [1, 4, 0][r]]).collect();
    assert_close(&vals(&vmap(pick)((x.clone(), i.clone())).unwrap()), &want, "vmap gather");
    let add: F2 = |(x, i)| x.at(s![&i]).add(&Array::scalar(10.0f32)).unwrap();
    let j = make_jaxpr(move |(x, i): (Array, Array)| vmap(add)((x, i)), (&x, &i)).unwrap().to_string();
    assert!(j.contains("operand_batching_dims=(0,), scatter_indices_batching_dims=(0,)"), "{j}");
    let got = vals(&vmap(add)((x.clone(), i.clone())).unwrap());
    let mut want = vals(&x);
    for (r, c) in [1, 4, 0].iter().enumerate() {
        want[r * 5 + c] += 10.0;
    }
    assert_close(&got, &want, "vmap scatter-add");
    // vmap of vmap: batch [2, 3] over rows of 5, both operand and indices batched twice.
    let x2 = farr(&[2, 3, 5], 2.0);
    let i2 = ints(&[2, 3], &[1, 4, 0, 2, 2, 3]);
    let got = vmap(|(x, i): (Array, Array)| vmap(pick)((x, i)))((x2.clone(), i2.clone())).unwrap();
    let xv = vals(&x2);
    let want: Vec<f64> = [1, 4, 0, 2, 2, 3].iter().enumerate().map(|(k, &c)| xv[k * 5 + c]).collect();
    assert_eq!(got.shape(), vec![2, 3]);
    assert_close(&vals(&got), &want, "vmap(vmap(gather))");
    let jj = jit(move |(x, i): (Array, Array)| vmap(|(x, i): (Array, Array)| vmap(pick)((x, i)))((x, i)));
    assert_close(&vals(&jj.call((&x2, &i2)).unwrap()), &want, "jit(vmap(vmap(gather)))");
    // grad through the batched gather: one-hot rows scaled by the weights.
    let w = Array::from_slice(&[1.0f32, 2.0, 3.0]);
    let g = grad(move |x: Array| -> Result<Array> { Ok((vmap(pick)((x, i.clone()))? * &w).sum()) })(x.clone()).unwrap();
    let mut want = vec![0.0; 15];
    for (r, c) in [1, 4, 0].iter().enumerate() {
        want[r * 5 + c] = (r + 1) as f64;
    }
    assert_close(&vals(&g), &want, "grad(vmap(gather))");
}
