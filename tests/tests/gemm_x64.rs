//! `dot_general` in f64 (x64 on, own process): products through the f64 GEMM runtime
//! against an f64 reference, and gradients of matmuls (whose transposes are
//! `dot_general`s with other dimension numbers) against central finite differences.

use jax::prelude::*;

fn vals(n: usize, seed: f64) -> Vec<f64> {
    (0..n).map(|i| ((i as f64 + 1.0) * seed).sin()).collect()
}

fn assert_close(got: &[f64], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, (a, b)) in got.iter().zip(want).enumerate() {
        assert!((a - b).abs() <= tol * (1.0 + b.abs()), "{what}[{i}]: got {a}, want {b}");
    }
}

#[test]
fn f64_products_and_matmul_gradients() {
    config::update("jax_enable_x64", true).unwrap();
    let (m, k, n) = (40, 36, 30);
    let (av, bv) = (vals(m * k, 0.37), vals(k * n, 0.71));
    let a = Array::from_vec(av.clone(), &[m, k]).unwrap();
    let b = Array::from_vec(bv.clone(), &[k, n]).unwrap();
    assert_eq!(a.dtype(), DType::F64);
    let mm = jit(|(a, b): (Array, Array)| a.matmul(&b));
    assert!(mm.lower((&a, &b)).unwrap().as_text().contains("call @jaxrepl_gemm_f64"));
    let mut want = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            want[i * n + j] = (0..k).map(|t| av[i * k + t] * bv[t * n + j]).sum();
        }
    }
    assert_close(&mm.call((&a, &b)).unwrap().to_vec::<f64>().unwrap(), &want, 1e-13, "f64 matmul");

    // loss(a, b) = sum(tanh(a @ b) * w): its grads are (g @ b^T, a^T @ g).
    let w = Array::from_vec(vals(m * n, 0.13), &[m, n]).unwrap();
    let loss = move |a: &Array, b: &Array, w: &Array| (a.matmul(b).tanh() * w).sum();
    let (w1, w2) = (w.clone(), w.clone());
    let ga = jit(grad(move |(a, b): (Array, Array)| loss(&a, &b, &w1)));
    let (da, db) = ga.call((&a, &b)).unwrap();
    let f = jit(move |(a, b): (Array, Array)| loss(&a, &b, &w2));
    let h = 1e-6;
    let eval = |a: &[f64], b: &[f64]| {
        let a = Array::from_vec(a.to_vec(), &[m, k]).unwrap();
        let b = Array::from_vec(b.to_vec(), &[k, n]).unwrap();
        f.call((&a, &b)).unwrap().item::<f64>().unwrap()
    };
    let (da, db) = (da.to_vec::<f64>().unwrap(), db.to_vec::<f64>().unwrap());
    for i in (0..m * k).step_by(37) {
        let (mut p, mut q) = (av.clone(), av.clone());
        p[i] += h;
        q[i] -= h;
        let fd = (eval(&p, &bv) - eval(&q, &bv)) / (2.0 * h);
        assert!((da[i] - fd).abs() <= 1e-6 * (1.0 + fd.abs()), "d/da[{i}]: {} vs {fd}", da[i]);
    }
    for i in (0..k * n).step_by(29) {
        let (mut p, mut q) = (bv.clone(), bv.clone());
        p[i] += h;
        q[i] -= h;
        let fd = (eval(&av, &p) - eval(&av, &q)) / (2.0 * h);
        assert!((db[i] - fd).abs() <= 1e-6 * (1.0 + fd.abs()), "d/db[{i}]: {} vs {fd}", db[i]);
    }

    // Batched: grads of sum(bmm(p, q) * v) are (v @ q^T, p^T @ v) per batch.
    let (bs, m2, k2, n2) = (3, 20, 24, 70);
    let (pv, qv, vv) = (vals(bs * m2 * k2, 0.3), vals(bs * k2 * n2, 0.5), vals(bs * m2 * n2, 0.9));
    let p = Array::from_vec(pv.clone(), &[bs, m2, k2]).unwrap();
    let q = Array::from_vec(qv.clone(), &[bs, k2, n2]).unwrap();
    let v = Array::from_vec(vv.clone(), &[bs, m2, n2]).unwrap();
    let gb = jit(grad(move |(p, q): (Array, Array)| (jnp::matmul(&p, &q).unwrap() * &v).sum()));
    let (dp, dq) = gb.call((&p, &q)).unwrap();
    let (mut wp, mut wq) = (vec![0.0; bs * m2 * k2], vec![0.0; bs * k2 * n2]);
    for s in 0..bs {
        for i in 0..m2 {
            for t in 0..k2 {
                wp[(s * m2 + i) * k2 + t] = (0..n2).map(|j| vv[(s * m2 + i) * n2 + j] * qv[(s * k2 + t) * n2 + j]).sum();
            }
        }
        for t in 0..k2 {
            for j in 0..n2 {
                wq[(s * k2 + t) * n2 + j] = (0..m2).map(|i| pv[(s * m2 + i) * k2 + t] * vv[(s * m2 + i) * n2 + j]).sum();
            }
        }
    }
    assert_close(&dp.to_vec::<f64>().unwrap(), &wp, 1e-12, "d/dp");
    assert_close(&dq.to_vec::<f64>().unwrap(), &wq, 1e-12, "d/dq");
}

#[test]
fn large_conv_gradients_match_finite_differences() {
    config::update("jax_enable_x64", true).unwrap();
    // NCHW [2, 4, 20, 20] * OIHW [12, 2, 3, 3], 2 groups, stride 2, padding 1, rhs dilation
    // 1: the conv and both of its transposes (convs with other dimension numbers, lhs
    // dilation) go through im2col + GEMM.
    let (xs, ws) = ([2usize, 4, 20, 20], [12usize, 2, 3, 3]);
    let (xv, wv) = (vals(xs.iter().product(), 0.21), vals(ws.iter().product(), 0.43));
    let conv = |x: &Array, w: &Array| lax::conv_general_dilated(x, w, &[2, 2], &[(1, 1), (1, 1)], None, None, None, 2).unwrap();
    let x = Array::from_vec(xv.clone(), &xs).unwrap();
    let w = Array::from_vec(wv.clone(), &ws).unwrap();
    let out_shape = conv(&x, &w).shape();
    let v = Array::from_vec(vals(out_shape.iter().product(), 0.77), &out_shape).unwrap();
    let v2 = v.clone();
    let loss = jit(move |(x, w): (Array, Array)| (conv(&x, &w).tanh() * &v).sum());
    let g = jit(grad(move |(x, w): (Array, Array)| (conv(&x, &w).tanh() * &v2).sum()));
    assert!(loss.lower((&x, &w)).unwrap().as_text().contains("call @jaxrepl_gemm_f64"));
    let (dx, dw) = g.call((&x, &w)).unwrap();
    let (dx, dw) = (dx.to_vec::<f64>().unwrap(), dw.to_vec::<f64>().unwrap());
    let eval = |a: &[f64], b: &[f64]| {
        let a = Array::from_vec(a.to_vec(), &xs).unwrap();
        let b = Array::from_vec(b.to_vec(), &ws).unwrap();
        loss.call((&a, &b)).unwrap().item::<f64>().unwrap()
    };
    let h = 1e-6;
    for i in (0..xv.len()).step_by(41) {
        let (mut p, mut q) = (xv.clone(), xv.clone());
        p[i] += h;
        q[i] -= h;
        let fd = (eval(&p, &wv) - eval(&q, &wv)) / (2.0 * h);
        assert!((dx[i] - fd).abs() <= 1e-6 * (1.0 + fd.abs()), "d/dx[{i}]: {} vs {fd}", dx[i]);
    }
    for i in (0..wv.len()).step_by(5) {
        let (mut p, mut q) = (wv.clone(), wv.clone());
        p[i] += h;
        q[i] -= h;
        let fd = (eval(&xv, &p) - eval(&xv, &q)) / (2.0 * h);
        assert!((dw[i] - fd).abs() <= 1e-6 * (1.0 + fd.abs()), "d/dw[{i}]: {} vs {fd}", dw[i]);
    }
}

#[test]
fn f64_update_fused_into_the_gemm() {
    // `w - 0.3·(a @ b)` through `jaxrepl_gemm_acc_f64` (`lower::dot_updates`), and with a
    // 0-d f64 factor argument.
    config::update("jax_enable_x64", true).unwrap();
    let (m, k, n) = (40, 36, 30);
    let (av, bv, wv) = (vals(m * k, 0.29), vals(k * n, 0.53), vals(m * n, 0.91));
    let a = Array::from_vec(av.clone(), &[m, k]).unwrap();
    let b = Array::from_vec(bv.clone(), &[k, n]).unwrap();
    let w = Array::from_vec(wv.clone(), &[m, n]).unwrap();
    let mut p = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            p[i * n + j] = (0..k).map(|t| av[i * k + t] * bv[t * n + j]).sum();
        }
    }
    let f = jit(|(w, a, b): (Array, Array, Array)| w - a.matmul(&b) * 0.3);
    assert!(f.lower((&w, &a, &b)).unwrap().as_text().contains("call @jaxrepl_gemm_acc_f64"));
    let want: Vec<f64> = wv.iter().zip(&p).map(|(w, p)| w - 0.3 * p).collect();
    assert_close(&f.call((&w, &a, &b)).unwrap().to_vec::<f64>().unwrap(), &want, 1e-13, "f64 w - 0.3*(a@b)");
    let c = Array::scalar(-1.75f64);
    let g = jit(|(w, a, b, c): (Array, Array, Array, Array)| w + c * a.matmul(&b));
    assert!(g.lower((&w, &a, &b, &c)).unwrap().as_text().contains("call @jaxrepl_gemm_acc_f64"));
    let want: Vec<f64> = wv.iter().zip(&p).map(|(w, p)| w - 1.75 * p).collect();
    assert_close(&g.call((&w, &a, &b, &c)).unwrap().to_vec::<f64>().unwrap(), &want, 1e-13, "f64 w + c*(a@b)");
}
