//! The lowering folds `transpose(dot_general(a, b))` that swaps the result's free-dim
//! groups into `dot_general(b, a)` (the layout reverse-mode AD gives the weight cotangent
//! of `x @ w`). Checked: values against an f64 reference for 2-D, batched and
//! several-free-dim products on both sides of the GEMM threshold, transposes that must not
//! fold (other permutations, a dot result used twice or returned), and the MLP-style grad
//! lowering without any `linalg.transpose`.

use jax::prelude::*;

use jaxrepl_tests::host_array as host;

fn check(name: &str, got: &Array, shape: &[usize], want: &[f64], tol: f64) {
    assert_eq!(got.shape(), shape, "{name}: shape");
    let g = got.to_vec::<f64>().unwrap();
    for (i, (a, b)) in g.iter().zip(want).enumerate() {
        assert!((a - b).abs() <= tol * (1.0 + b.abs()), "{name}[{i}]: got {a}, want {b}");
    }
}

/// `out[b, j, i] = Σ_k a[b, k, i] · c[b, k, j]` (batch `nb`, `a` [nb, k, m], `c` [nb, k, n]):
/// the transpose of `dot_general(a, c, contract 1/1, batch 0/0)`.
fn at_c_transposed(nb: usize, k: usize, m: usize, n: usize, a: &[f64], c: &[f64]) -> Vec<f64> {
    let mut out = vec![0.0; nb * n * m];
    for b in 0..nb {
        for j in 0..n {
            for i in 0..m {
                out[(b * n + j) * m + i] = (0..k).map(|p| a[(b * k + p) * m + i] * c[(b * k + p) * n + j]).sum();
            }
        }
    }
    out
}

#[test]
fn folded_transposes_of_products_match_f64() {
    // (batch, k, m, n): below and above the GEMM threshold, odd sizes, 1-wide dims, k = 1.
    for (nb, k, m, n) in [(1, 3, 4, 5), (1, 128, 96, 80), (1, 67, 33, 129), (1, 1, 40, 50), (1, 200, 1, 300), (3, 40, 33, 31), (4, 64, 64, 64), (2, 0, 5, 6)] {
        let (a, av) = host(&[nb, k, m], (nb * 1000 + k) as u64);
        let (c, cv) = host(&[nb, k, n], (m * 1000 + n) as u64);
        let want = at_c_transposed(nb, k, m, n, &av, &cv);
        let tol = 1e-6 * (k as f64).sqrt().max(1.0) * 4.0;
        let f = jit(|(a, c): (Array, Array)| -> Result<Array> {
            let p = lax::dot_general(&a, &c, (&[1], &[1]), (&[0], &[0]), None)?; // [nb, m, n]
            lax::transpose(&p, &[0, 2, 1])
        });
        check(&format!("batched {nb}x{k}x{m}x{n}"), &f.call((&a, &c)).unwrap(), &[nb, n, m], &want, tol);
        if nb == 1 {
            // The 2-D form AD produces: transpose(dot_general(ct, x, ((0,), (0,)))).
            let (a2, c2) = (a.reshape(&[k as isize, m as isize]), c.reshape(&[k as isize, n as isize]));
            let g = jit(|(a, c): (Array, Array)| -> Result<Array> {
                let p = lax::dot_general(&a, &c, (&[0], &[0]), (&[], &[]), None)?;
                lax::transpose(&p, &[1, 0])
            });
            check(&format!("2-D {k}x{m}x{n}"), &g.call((&a2, &c2)).unwrap(), &[n, m], &want, tol);
        }
    }
    // Two free dims on each side: [m1, m2] x [n1, n2] -> transpose to [n1, n2, m1, m2].
    let (a, av) = host(&[6, 5, 7], 1);
    let (c, cv) = host(&[6, 3, 4], 2);
    let f = jit(|(a, c): (Array, Array)| -> Result<Array> {
        let p = lax::dot_general(&a, &c, (&[0], &[0]), (&[], &[]), None)?; // [5, 7, 3, 4]
        lax::transpose(&p, &[2, 3, 0, 1])
    });
    let want: Vec<f64> = (0..3 * 4 * 5 * 7)
        .map(|o| {
            let (n1, n2, m1, m2) = (o / 140, o / 35 % 4, o / 7 % 5, o % 7);
            (0..6).map(|p| av[p * 35 + m1 * 7 + m2] * cv[p * 12 + n1 * 4 + n2]).sum()
        })
        .collect();
    check("two free dims each", &f.call((&a, &c)).unwrap(), &[3, 4, 5, 7], &want, 1e-5);
}

#[test]
fn transposes_that_must_not_fold_keep_their_values() {
    let (a, av) = host(&[6, 5, 7], 3);
    let (c, cv) = host(&[6, 3], 4);
    let prod = |m1: usize, m2: usize, n: usize| -> f64 { (0..6).map(|p| av[p * 35 + m1 * 7 + m2] * cv[p * 3 + n]).sum() };
    // A permutation that is not the free-group swap: [5, 7, 3] -> [7, 3, 5].
    let f = jit(|(a, c): (Array, Array)| -> Result<Array> {
        let p = lax::dot_general(&a, &c, (&[0], &[0]), (&[], &[]), None)?;
        lax::transpose(&p, &[1, 2, 0])
    });
    let want: Vec<f64> = (0..7 * 3 * 5).map(|o| prod(o % 5, o / 15, o / 5 % 3)).collect();
    check("other permutation", &f.call((&a, &c)).unwrap(), &[7, 3, 5], &want, 1e-5);
    // The product also used (and returned) untransposed.
    let (x, xv) = host(&[4, 3], 5);
    let (y, yv) = host(&[4, 2], 6);
    let g = jit(|(x, y): (Array, Array)| -> Result<(Array, Array)> {
        let p = lax::dot_general(&x, &y, (&[0], &[0]), (&[], &[]), None)?; // [3, 2]
        Ok((lax::transpose(&p, &[1, 0])?, p))
    });
    let (t, p) = g.call((&x, &y)).unwrap();
    let pw: Vec<f64> = (0..6).map(|o| (0..4).map(|k| xv[k * 3 + o / 2] * yv[k * 2 + o % 2]).sum()).collect();
    let tw: Vec<f64> = (0..6).map(|o| pw[(o % 3) * 2 + o / 3]).collect();
    check("untransposed use", &p, &[3, 2], &pw, 1e-6);
    check("transposed use", &t, &[2, 3], &tw, 1e-6);
}

/// The weight gradients of a two-layer MLP: values against an f64 backprop, and no
/// materialised transpose in the lowered module.
#[test]
fn mlp_weight_grads_need_no_transpose() {
    let (bsz, din, dh) = (16usize, 48usize, 40usize);
    let (x, xv) = host(&[bsz, din], 7);
    let (w1, w1v) = host(&[din, dh], 8);
    let (w2, w2v) = host(&[dh, 1], 9);
    let loss = move |(w1, w2): (Array, Array)| -> Result<Array> {
        let h = jnp::maximum(&x.matmul(&w1), &Array::scalar(0.0f32))?;
        Ok(h.matmul(&w2).sum())
    };
    let g = jit(grad(loss));
    let text = g.lower((&w1, &w2)).unwrap().as_text();
    assert!(!text.contains("linalg.transpose"), "{text}");
    let (g1, g2) = g.call((&w1, &w2)).unwrap();
    // Reference backprop: z = x w1, h = relu(z), out = Σ h w2.
    let mut z = vec![0.0; bsz * dh];
    for b in 0..bsz {
        for j in 0..dh {
            z[b * dh + j] = (0..din).map(|i| xv[b * din + i] * w1v[i * dh + j]).sum();
        }
    }
    let g2w: Vec<f64> = (0..dh).map(|j| (0..bsz).map(|b| z[b * dh + j].max(0.0)).sum()).collect();
    let mut g1w = vec![0.0; din * dh];
    for i in 0..din {
        for j in 0..dh {
            g1w[i * dh + j] = (0..bsz).map(|b| if z[b * dh + j] > 0.0 { xv[b * din + i] * w2v[j] } else { 0.0 }).sum();
        }
    }
    check("dL/dw1", &g1, &[din, dh], &g1w, 1e-5);
    check("dL/dw2", &g2, &[dh, 1], &g2w, 1e-5);
}
