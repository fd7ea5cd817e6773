//! Updates `w ± c·(a @ b)` fused into the GEMM runtime (`lower::dot_updates`,
//! `jaxrepl_gemm_acc_f32`): the SGD step `w - lr·grad` and residuals `x + h @ w`, with the
//! factor a literal or a 0-d argument, donated or not, batched, and the cases the fusion
//! must leave alone (the product also used elsewhere, a product below the GEMM threshold).
//! Every result is checked against an f64 reference on the host; a residual layer's
//! gradient against central finite differences.

use jax::prelude::*;
use jaxrepl_tests::host_array as host;

/// The f64 product of row-major `a` (m×k) and `b` (k×n).
fn matmul(a: &[f64], b: &[f64], m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut c = vec![0.0; m * n];
    for i in 0..m {
        for t in 0..k {
            let x = a[i * k + t];
            for j in 0..n {
                c[i * n + j] += x * b[t * n + j];
            }
        }
    }
    c
}

fn check(name: &str, got: &Array, want: &[f64], tol: f64) {
    let g = got.to_vec::<f64>().unwrap();
    assert_eq!(g.len(), want.len(), "{name}: length");
    for (i, (a, b)) in g.iter().zip(want).enumerate() {
        assert!((a - b).abs() <= tol * (1.0 + b.abs()), "{name}[{i}]: got {a}, want {b}");
    }
}

/// `w + beta·a@b` in f64.
fn update(w: &[f64], p: &[f64], beta: f64) -> Vec<f64> {
    w.iter().zip(p).map(|(w, p)| w + beta * p).collect()
}

const ACC: &str = "call @jaxrepl_gemm_acc_f32";

#[test]
fn sgd_step_with_a_literal_or_a_0d_learning_rate() {
    let (m, k, n) = (64, 48, 80);
    let (w, wv) = host(&[m, n], 1);
    let (a, av) = host(&[m, k], 2);
    let (b, bv) = host(&[k, n], 3);
    let p = matmul(&av, &bv, m, k, n);

    // w - (a@b)·0.01, literal factor.
    let f = jit(|(w, a, b): (Array, Array, Array)| w - a.matmul(&b) * 0.01);
    let text = f.lower((&w, &a, &b)).unwrap().compile().unwrap().as_text();
    assert!(text.contains(ACC) && !text.contains("call @jaxrepl_gemm_f32("), "{text}");
    check("w - (a@b)*0.01", &f.call((&w, &a, &b)).unwrap(), &update(&wv, &p, -0.01), 1e-5);

    // w - lr·(a@b), lr a 0-d argument (factor first).
    let lr = Array::scalar(0.25f32);
    let g = jit(|(w, a, b, lr): (Array, Array, Array, Array)| w - lr * a.matmul(&b));
    assert!(g.lower((&w, &a, &b, &lr)).unwrap().as_text().contains("jaxrepl_gemm_acc_f32"));
    check("w - lr*(a@b)", &g.call((&w, &a, &b, &lr)).unwrap(), &update(&wv, &p, -0.25), 1e-5);

    // w + (a@b)·lr and plain residuals x + a@b, a@b + x, x - a@b.
    let h = jit(|(w, a, b, lr): (Array, Array, Array, Array)| w + a.matmul(&b) * lr);
    check("w + (a@b)*lr", &h.call((&w, &a, &b, &lr)).unwrap(), &update(&wv, &p, 0.25), 1e-5);
    let r = jit(|(w, a, b): (Array, Array, Array)| (w.clone() + a.matmul(&b), a.matmul(&b) + w.clone(), w - a.matmul(&b)));
    let text = r.lower((&w, &a, &b)).unwrap().as_text();
    assert_eq!(text.matches("call @jaxrepl_gemm_acc_f32").count(), 3, "{text}");
    let (r1, r2, r3) = r.call((&w, &a, &b)).unwrap();
    check("w + a@b", &r1, &update(&wv, &p, 1.0), 1e-5);
    check("a@b + w", &r2, &update(&wv, &p, 1.0), 1e-5);
    check("w - a@b", &r3, &update(&wv, &p, -1.0), 1e-5);
}

#[test]
fn donated_weight_and_a_weight_read_elsewhere() {
    let (m, k, n) = (96, 64, 128);
    let (a, av) = host(&[m, k], 5);
    let (b, bv) = host(&[k, n], 6);
    let p = matmul(&av, &bv, m, k, n);
    // Donated: the update's result may be written into the weight's buffer.
    let f = jit(|(w, a, b): (Array, Array, Array)| w - a.matmul(&b) * 0.5).donate_argnums(&[0]);
    let (w, wv) = host(&[m, n], 4);
    assert!(f.lower((&w, &a, &b)).unwrap().as_text().contains("jaxrepl_gemm_acc_f32"));
    let out = f.call((&w, &a, &b)).unwrap();
    check("donated w - (a@b)*0.5", &out, &update(&wv, &p, -0.5), 1e-5);
    assert!(w.is_deleted());
    // Twice more through the donated result.
    let out = f.call((&out, &a, &b)).unwrap();
    let out = f.call((&out, &a, &b)).unwrap();
    check("3 donated steps", &out, &update(&wv, &p, -1.5), 1e-5);

    // The weight is also read after the update (and returned): it must be left unchanged.
    let (w, wv) = host(&[m, n], 7);
    let g = jit(|(w, a, b): (Array, Array, Array)| {
        let u = w.clone() - a.matmul(&b) * 0.5;
        let s = (u.clone() * w.clone()).sum();
        (u, s, w)
    });
    assert!(g.lower((&w, &a, &b)).unwrap().as_text().contains("jaxrepl_gemm_acc_f32"));
    let (u, s, w2) = g.call((&w, &a, &b)).unwrap();
    let uv = update(&wv, &p, -0.5);
    check("u", &u, &uv, 1e-5);
    check("w returned", &w2, &wv, 0.0);
    let sv: f64 = uv.iter().zip(&wv).map(|(u, w)| u * w).sum();
    check("sum(u*w)", &s, &[sv], 1e-4);
}

#[test]
fn batched_update() {
    let (nb, m, k, n) = (3, 40, 64, 72);
    let (w, wv) = host(&[nb, m, n], 8);
    let (a, av) = host(&[nb, m, k], 9);
    let (b, bv) = host(&[nb, k, n], 10);
    let f = jit(|(w, a, b): (Array, Array, Array)| w - a.matmul(&b) * 0.125);
    assert!(f.lower((&w, &a, &b)).unwrap().as_text().contains("jaxrepl_gemm_acc_f32"));
    let mut want = vec![];
    for q in 0..nb {
        let pq = matmul(&av[q * m * k..(q + 1) * m * k], &bv[q * k * n..(q + 1) * k * n], m, k, n);
        want.extend(update(&wv[q * m * n..(q + 1) * m * n], &pq, -0.125));
    }
    check("batched", &f.call((&w, &a, &b)).unwrap(), &want, 1e-5);
}

#[test]
fn not_fused_when_the_product_is_used_elsewhere_or_small() {
    let (m, k, n) = (64, 48, 80);
    let (w, wv) = host(&[m, n], 11);
    let (a, av) = host(&[m, k], 12);
    let (b, bv) = host(&[k, n], 13);
    let p = matmul(&av, &bv, m, k, n);
    // The product is also returned: computed once by the plain GEMM.
    let f = jit(|(w, a, b): (Array, Array, Array)| {
        let g = a.matmul(&b);
        (w - g.clone() * 0.01, g)
    });
    let text = f.lower((&w, &a, &b)).unwrap().as_text();
    assert!(!text.contains("jaxrepl_gemm_acc") && text.contains("jaxrepl_gemm_f32"), "{text}");
    let (u, g) = f.call((&w, &a, &b)).unwrap();
    check("u", &u, &update(&wv, &p, -0.01), 1e-5);
    check("g", &g, &p, 1e-5);
    // c·d also used elsewhere.
    let f = jit(|(w, a, b): (Array, Array, Array)| {
        let t = a.matmul(&b) * 0.01;
        (w - t.clone(), t)
    });
    assert!(!f.lower((&w, &a, &b)).unwrap().as_text().contains("jaxrepl_gemm_acc"));
    let (u, t) = f.call((&w, &a, &b)).unwrap();
    check("u", &u, &update(&wv, &p, -0.01), 1e-5);
    check("t", &t, &update(&vec![0.0; m * n], &p, 0.01), 1e-5);
    // Below the GEMM threshold: the loop lowering, unfused.
    let (ws, wsv) = host(&[4, 5], 14);
    let (as_, asv) = host(&[4, 3], 15);
    let (bs, bsv) = host(&[3, 5], 16);
    let f = jit(|(w, a, b): (Array, Array, Array)| w - a.matmul(&b) * 0.01);
    assert!(!f.lower((&ws, &as_, &bs)).unwrap().as_text().contains("jaxrepl_gemm"));
    check("small", &f.call((&ws, &as_, &bs)).unwrap(), &update(&wsv, &matmul(&asv, &bsv, 4, 3, 5), -0.01), 1e-5);
}

#[test]
fn residual_layer_gradient_matches_finite_differences() {
    // loss(w) = sum(tanh(x + h @ w)^2): the forward residual is fused; so is the train
    // step w - 0.1·grad.
    let (m, k, n) = (48, 40, 48);
    let (x, _) = host(&[m, n], 17);
    let (hh, _) = host(&[m, k], 18);
    let (w, wv) = host(&[k, n], 19);
    let (x1, h1) = (x.clone(), hh.clone());
    let loss = move |w: &Array| {
        let y = (x1.clone() + h1.matmul(w)).tanh();
        (y.clone() * y).sum()
    };
    let l2 = loss.clone();
    let lj = jit(move |w: Array| loss(&w));
    assert!(lj.lower(&w).unwrap().as_text().contains("jaxrepl_gemm_acc_f32"));
    let gj = jit(grad(move |w: Array| l2(&w)));
    let g = gj.call(&w).unwrap().to_vec::<f64>().unwrap();
    let eps = 1e-2f64;
    for i in (0..k * n).step_by(97) {
        let mut p = wv.clone();
        let mut q = wv.clone();
        p[i] += eps;
        q[i] -= eps;
        let fp = lj.call(&Array::from_vec(p.iter().map(|&v| v as f32).collect(), &[k, n]).unwrap()).unwrap().item::<f64>().unwrap();
        let fq = lj.call(&Array::from_vec(q.iter().map(|&v| v as f32).collect(), &[k, n]).unwrap()).unwrap().item::<f64>().unwrap();
        let fd = (fp - fq) / (2.0 * eps);
        assert!((g[i] - fd).abs() <= 2e-2 * (1.0 + fd.abs()), "d/dw[{i}]: {} vs {fd}", g[i]);
    }
    // The SGD step on top of the gradient equals w - 0.1·g.
    let (x2, h2) = (x, hh);
    let step = jit(move |w: Array| {
        let g = grad(|w: Array| {
            let y = (x2.clone() + h2.matmul(&w)).tanh();
            (y.clone() * y).sum()
        })(w.clone())
        .unwrap();
        w - g * 0.1
    });
    let want: Vec<f64> = wv.iter().zip(&g).map(|(w, g)| w - 0.1 * g).collect();
    check("sgd step", &step.call(&w).unwrap(), &want, 1e-4);
}

#[test]
fn bias_rows_fused_and_other_broadcasts_not() {
    let (m, k, n) = (72, 40, 96);
    let (a, av) = host(&[m, k], 20);
    let (b, bv) = host(&[k, n], 21);
    let (bias, biasv) = host(&[n], 22);
    let p = matmul(&av, &bv, m, k, n);
    let rows: Vec<f64> = (0..m * n).map(|i| biasv[i % n]).collect();
    // h @ w + b and b + h @ w: the bias row is the GEMM's initial value (no broadcast).
    let f = jit(|(a, b, bias): (Array, Array, Array)| (a.matmul(&b) + bias.clone(), bias - a.matmul(&b) * 2.0));
    let text = f.lower((&a, &b, &bias)).unwrap().as_text();
    assert_eq!(text.matches("call @jaxrepl_gemm_acc_f32").count(), 2, "{text}");
    let (u, v) = f.call((&a, &b, &bias)).unwrap();
    check("a@b + bias", &u, &update(&rows, &p, 1.0), 1e-5);
    check("bias - 2*(a@b)", &v, &update(&rows, &p, -2.0), 1e-5);
    // A batched product with a bias over its last dim.
    let nb = 2;
    let (ab, abv) = host(&[nb, m, k], 23);
    let g = jit(|(a, b, bias): (Array, Array, Array)| a.matmul(&b) + bias);
    assert!(g.lower((&ab, &b, &bias)).unwrap().as_text().contains("jaxrepl_gemm_acc_f32"));
    let mut want = vec![];
    for q in 0..nb {
        want.extend(update(&rows, &matmul(&abv[q * m * k..(q + 1) * m * k], &bv, m, k, n), 1.0));
    }
    check("batched a@b + bias", &g.call((&ab, &b, &bias)).unwrap(), &want, 1e-5);
    // A column bias (one value per row, broadcast along the columns) and a broadcast scalar
    // are not rows of the output: not fused (the broadcast would be materialised), still
    // right.
    let (cb, cbv) = host(&[m, 1], 24);
    let h = jit(|(a, b, cb): (Array, Array, Array)| (a.matmul(&b) + cb, a.matmul(&b) + 3.0));
    let text = h.lower((&a, &b, &cb)).unwrap().as_text();
    assert!(!text.contains("jaxrepl_gemm_acc"), "{text}");
    let (u, v) = h.call((&a, &b, &cb)).unwrap();
    let cols: Vec<f64> = (0..m * n).map(|i| cbv[i / n]).collect();
    check("a@b + column", &u, &update(&cols, &p, 1.0), 1e-5);
    check("a@b + 3", &v, &update(&vec![3.0; m * n], &p, 1.0), 1e-5);
}
