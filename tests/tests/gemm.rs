//! `dot_general` in f32 (and f16/bf16, which compute in f32) against an f64 reference on
//! the host, eager and under `jit`, for shapes on both sides of the GEMM-runtime threshold:
//! plain, transposed and batched operands, several batch/contracting dims in any order,
//! size-0 and size-1 dims, and operands that are transposes inside the traced function.

use jax::ir::ConvDims;
use jax::prelude::*;

use jaxrepl_tests::host_array as host;

fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// The f64 reference of `dot_general` (output dims: batch, lhs free, rhs free).
#[allow(clippy::too_many_arguments)]
fn reference(ls: &[usize], lv: &[f64], rs: &[usize], rv: &[f64], lc: &[usize], rc: &[usize], lb: &[usize], rb: &[usize]) -> (Vec<usize>, Vec<f64>) {
    let lfree: Vec<usize> = (0..ls.len()).filter(|i| !lc.contains(i) && !lb.contains(i)).collect();
    let rfree: Vec<usize> = (0..rs.len()).filter(|i| !rc.contains(i) && !rb.contains(i)).collect();
    let mut oshape: Vec<usize> = lb.iter().map(|&i| ls[i]).collect();
    oshape.extend(lfree.iter().map(|&i| ls[i]));
    oshape.extend(rfree.iter().map(|&i| rs[i]));
    let cshape: Vec<usize> = lc.iter().map(|&i| ls[i]).collect();
    let (lst, rst, ost, cst) = (strides(ls), strides(rs), strides(&oshape), strides(&cshape));
    let on: usize = oshape.iter().product();
    let cn: usize = cshape.iter().product();
    let mut out = vec![0.0; on];
    for (o, slot) in out.iter_mut().enumerate() {
        let oi: Vec<usize> = (0..oshape.len()).map(|d| o / ost[d] % oshape[d]).collect();
        let (mut lbase, mut rbase) = (0, 0);
        for (j, (&l, &r)) in lb.iter().zip(rb).enumerate() {
            lbase += oi[j] * lst[l];
            rbase += oi[j] * rst[r];
        }
        for (j, &l) in lfree.iter().enumerate() {
            lbase += oi[lb.len() + j] * lst[l];
        }
        for (j, &r) in rfree.iter().enumerate() {
            rbase += oi[lb.len() + lfree.len() + j] * rst[r];
        }
        let mut acc = 0.0;
        for c in 0..cn {
            let (mut li, mut ri) = (lbase, rbase);
            for (j, (&l, &r)) in lc.iter().zip(rc).enumerate() {
                let ci = c / cst[j] % cshape[j];
                li += ci * lst[l];
                ri += ci * rst[r];
            }
            acc += lv[li] * rv[ri];
        }
        *slot = acc;
    }
    (oshape, out)
}

fn check(name: &str, got: &Array, shape: &[usize], want: &[f64], tol: f64) {
    assert_eq!(got.shape(), shape, "{name}: shape");
    let g = got.to_vec::<f64>().unwrap();
    assert_eq!(g.len(), want.len(), "{name}: length");
    for (i, (a, b)) in g.iter().zip(want).enumerate() {
        assert!((a - b).abs() <= tol * (1.0 + b.abs()), "{name}[{i}]: got {a}, want {b}");
    }
}

type Case = (Vec<usize>, Vec<usize>, [&'static [usize]; 4]);

/// (lhs shape, rhs shape, [lhs contracting, rhs contracting, lhs batch, rhs batch]).
fn cases() -> Vec<Case> {
    vec![
        // 2-D matmuls below and above the threshold, odd sizes.
        (vec![3, 4], vec![4, 5], [&[1], &[0], &[], &[]]),
        (vec![64, 48], vec![48, 80], [&[1], &[0], &[], &[]]),
        (vec![67, 129], vec![129, 33], [&[1], &[0], &[], &[]]),
        // Transposed contracting dims (what grads of matmul produce): A^T B, A B^T, A^T B^T.
        (vec![96, 40], vec![96, 50], [&[0], &[0], &[], &[]]),
        (vec![40, 96], vec![50, 96], [&[1], &[1], &[], &[]]),
        (vec![96, 40], vec![50, 96], [&[0], &[1], &[], &[]]),
        // Matrix-vector, vector-matrix, vector dot, outer product (no contraction is
        // small; k = 1).
        (vec![300, 200], vec![200], [&[1], &[0], &[], &[]]),
        (vec![200], vec![200, 300], [&[0], &[0], &[], &[]]),
        (vec![40000], vec![40000], [&[0], &[0], &[], &[]]),
        (vec![200, 1], vec![1, 300], [&[1], &[0], &[], &[]]),
        // Size-1 dims.
        (vec![1, 512], vec![512, 70], [&[1], &[0], &[], &[]]),
        (vec![70, 512], vec![512, 1], [&[1], &[0], &[], &[]]),
        // Batched, batch dim first / not first / two batch dims / batch in the middle.
        (vec![5, 33, 40], vec![5, 40, 31], [&[2], &[1], &[0], &[0]]),
        (vec![33, 5, 40], vec![40, 5, 31], [&[2], &[0], &[1], &[1]]),
        (vec![2, 3, 20, 40], vec![2, 3, 40, 30], [&[3], &[2], &[0, 1], &[0, 1]]),
        (vec![2, 3, 20, 40], vec![3, 2, 40, 30], [&[3], &[2], &[0, 1], &[1, 0]]),
        (vec![20, 4, 40], vec![4, 40, 30], [&[2], &[1], &[1], &[0]]),
        (vec![6, 4, 5, 40], vec![4, 40, 30], [&[3], &[1], &[1], &[0]]),
        // Batch of many small products (split over threads by the runtime).
        (vec![256, 16, 16], vec![256, 16, 16], [&[2], &[1], &[0], &[0]]),
        // Batches split over threads with an odd count per thread, with transposed
        // operands (A^T B and A B^T per batch), and a batch of products each threaded.
        (vec![7, 65, 70], vec![7, 70, 63], [&[2], &[1], &[0], &[0]]),
        (vec![9, 70, 66], vec![9, 71, 70], [&[1], &[2], &[0], &[0]]),
        (vec![3, 200, 130], vec![3, 130, 190], [&[2], &[1], &[0], &[0]]),
        // One product large enough to be threaded inside, odd sizes.
        (vec![257, 300], vec![300, 129], [&[1], &[0], &[], &[]]),
        // Products the runtime cuts into row or column panels run on two threads
        // (`compile::gemm::plan`), odd sizes: column panels (m <= n), with the rhs
        // transposed (A B^T); row panels (m > n) with the lhs transposed (A^T B); a batch
        // of three with row panels each.
        (vec![130, 257], vec![257, 333], [&[1], &[0], &[], &[]]),
        (vec![150, 200], vec![333, 200], [&[1], &[1], &[], &[]]),
        (vec![200, 390], vec![200, 150], [&[0], &[0], &[], &[]]),
        (vec![3, 100, 300], vec![3, 100, 140], [&[1], &[1], &[0], &[0]]),
        // Two contracting dims, in swapped order on the rhs; several free dims.
        (vec![6, 7, 8, 9], vec![9, 8, 10], [&[2, 3], &[1, 0], &[], &[]]),
        (vec![6, 7, 8, 9], vec![8, 9, 10], [&[3, 2], &[1, 0], &[], &[]]),
        (vec![12, 10, 30], vec![30, 6, 7], [&[2], &[0], &[], &[]]),
        // Size-0 dims: empty output, and empty contraction (zeros).
        (vec![0, 64], vec![64, 64], [&[1], &[0], &[], &[]]),
        (vec![64, 0], vec![0, 64], [&[1], &[0], &[], &[]]),
        (vec![3, 0, 64], vec![3, 64, 64], [&[2], &[1], &[0], &[0]]),
    ]
}

#[test]
fn dot_general_f32_matches_f64_reference() {
    for (i, (ls, rs, [lc, rc, lb, rb])) in cases().into_iter().enumerate() {
        let (a, av) = host(&ls, 2 * i as u64);
        let (b, bv) = host(&rs, 2 * i as u64 + 1);
        let (oshape, want) = reference(&ls, &av, &rs, &bv, lc, rc, lb, rb);
        let k: usize = lc.iter().map(|&d| ls[d]).product();
        let tol = 1e-6 * (k as f64).sqrt().max(1.0) * 4.0;
        let name = format!("{ls:?}x{rs:?} {lc:?}/{rc:?} batch {lb:?}/{rb:?}");
        let eager = lax::dot_general(&a, &b, (lc, rc), (lb, rb), None).unwrap();
        check(&format!("eager {name}"), &eager, &oshape, &want, tol);
        let f = jit(move |(a, b): (Array, Array)| lax::dot_general(&a, &b, (lc, rc), (lb, rb), None).unwrap());
        check(&format!("jit {name}"), &f.call((&a, &b)).unwrap(), &oshape, &want, tol);
    }
}

#[test]
fn matmul_of_transposes_and_slices_inside_jit() {
    let (a, av) = host(&[70, 90], 1);
    let (b, bv) = host(&[110, 70], 2);
    // (a^T @ b^T) computed inside jit from transposes: [90, 110].
    let f = jit(|(a, b): (Array, Array)| a.t().matmul(&b.t()));
    let mut want = vec![0.0; 90 * 110];
    for i in 0..90 {
        for j in 0..110 {
            want[i * 110 + j] = (0..70).map(|k| av[k * 90 + i] * bv[j * 70 + k]).sum();
        }
    }
    check("a.T @ b.T", &f.call((&a, &b)).unwrap(), &[90, 110], &want, 1e-5);
    // The result itself transposed and fed to a second product.
    let g = jit(|(a, b): (Array, Array)| {
        let ab = a.t().matmul(&b.t()); // [90, 110]
        ab.t().matmul(&a.t()) // [110, 90] @ [90, 70]
    });
    let mut want2 = vec![0.0; 110 * 70];
    for i in 0..110 {
        for j in 0..70 {
            want2[i * 70 + j] = (0..90).map(|k| want[k * 110 + i] * av[j * 90 + k]).sum();
        }
    }
    check("(a.T @ b.T).T @ a.T", &g.call((&a, &b)).unwrap(), &[110, 70], &want2, 1e-4);
}

#[test]
fn half_precision_dots_compute_in_f32() {
    for dt in [DType::BF16, DType::F16] {
        let (a, _) = host(&[48, 64], 7);
        let (b, _) = host(&[64, 40], 8);
        let (a, b) = (a.astype(dt), b.astype(dt));
        // The reference sees the half-precision inputs and rounds its f64 result once.
        let av = a.to_vec::<f64>().unwrap();
        let bv = b.to_vec::<f64>().unwrap();
        let (shape, want) = reference(&[48, 64], &av, &[64, 40], &bv, &[1], &[0], &[], &[]);
        let want_arr = Array::from_vec(want.iter().map(|&x| x as f32).collect::<Vec<f32>>(), &shape).unwrap().astype(dt);
        let want_h = want_arr.to_vec::<f64>().unwrap();
        let f = jit(|(a, b): (Array, Array)| a.matmul(&b));
        let got = f.call((&a, &b)).unwrap();
        assert_eq!(got.dtype(), dt);
        // f32 accumulation then one rounding: at most one half-precision ulp from the
        // rounded exact result.
        let ulp = if dt == DType::BF16 { 1.0 / 128.0 } else { 1.0 / 1024.0 };
        check(&format!("{dt:?} matmul"), &got, &shape, &want_h, ulp);
        // preferred_element_type = f32 keeps the f32 accumulator.
        let p = lax::dot_general(&a, &b, (&[1], &[0]), (&[], &[]), Some(DType::F32)).unwrap();
        assert_eq!(p.dtype(), DType::F32);
        check(&format!("{dt:?} matmul -> f32"), &p, &shape, &want, 1e-5);
    }
}

#[test]
fn large_products_call_the_gemm_runtime_without_copies() {
    let (a, _) = host(&[96, 40], 1);
    let (b, _) = host(&[96, 50], 2);
    // A^T B (a grad's dimension numbers): strides make the transpose free.
    let f = jit(|(a, b): (Array, Array)| lax::dot_general(&a, &b, (&[0], &[0]), (&[], &[]), None).unwrap());
    let text = f.lower((&a, &b)).unwrap().as_text();
    assert!(text.contains("call @jaxrepl_gemm_f32"), "{text}");
    assert!(!text.contains("linalg.transpose") && !text.contains("linalg.generic"), "{text}");
    // A batch dim between two lhs free dims: the free dims cannot be one strided dim,
    // so the lhs (only) is transposed.
    let (p, _) = host(&[6, 4, 5, 40], 3);
    let (q, _) = host(&[4, 40, 30], 4);
    let g = jit(|(p, q): (Array, Array)| lax::dot_general(&p, &q, (&[3], &[1]), (&[1], &[0]), None).unwrap());
    let text = g.lower((&p, &q)).unwrap().as_text();
    assert!(text.contains("call @jaxrepl_gemm_f32") && text.matches("linalg.transpose").count() == 1, "{text}");
    // Small products and integer dots stay in MLIR loops.
    let (s, _) = host(&[3, 4], 5);
    let (t, _) = host(&[4, 5], 6);
    let h = jit(|(s, t): (Array, Array)| s.matmul(&t));
    let text = h.lower((&s, &t)).unwrap().as_text();
    assert!(!text.contains("jaxrepl_gemm") && text.contains("linalg.generic"), "{text}");
    let i = jnp::ones(&[64, 64], DType::I32);
    let k = jit(|i: Array| i.matmul(&i));
    assert!(!k.lower(&i).unwrap().as_text().contains("jaxrepl_gemm"));
    assert_eq!(k.call(&i).unwrap().to_vec::<i32>().unwrap(), vec![64; 64 * 64]);
}

#[test]
fn unused_products_are_not_computed() {
    // grad with respect to `w` only of sum(tanh(x @ w)): the cotangent of the closed-over
    // `x` (g @ w^T) is dead code, so the compiled module calls the GEMM runtime twice
    // (forward product and the weight cotangent), not three times.
    let (x, xv) = host(&[96, 80], 21);
    let (w, wv) = host(&[80, 70], 22);
    let f = jit(move |(x, w): (Array, Array)| grad(move |w: Array| x.matmul(&w).tanh().sum())(w).unwrap());
    let compiled = f.lower((&x, &w)).unwrap().compile().unwrap();
    let text = compiled.as_text();
    assert_eq!(text.matches("call @jaxrepl_gemm_f32").count(), 2, "{text}");
    // dL/dw = x^T (1 - tanh(x w)^2).
    let (m, k, n) = (96, 80, 70);
    let mut g = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            let h: f64 = (0..k).map(|p| xv[i * k + p] * wv[p * n + j]).sum();
            g[i * n + j] = 1.0 - h.tanh().powi(2);
        }
    }
    let want: Vec<f64> = (0..k * n).map(|e| (0..m).map(|i| xv[i * k + e / n] * g[i * n + e % n]).sum()).collect();
    check("grad of sum(tanh(x @ w))", &f.call((&x, &w)).unwrap(), &[k, n], &want, 1e-4);
}

#[test]
fn products_are_computed_in_the_output_buffers() {
    // A product returned as is, twice (the second output is a copy of the first), and one
    // also read after the call inside the program: the GEMM writes the first output's
    // buffer directly, with no temporary and no copy of it; values as the reference.
    let (a, av) = host(&[130, 257], 31);
    let (b, bv) = host(&[257, 333], 32);
    let (_, want) = reference(&[130, 257], &av, &[257, 333], &bv, &[1], &[0], &[], &[]);
    let f = jit(|(a, b): (Array, Array)| a.matmul(&b));
    let compiled = f.lower((&a, &b)).unwrap().compile().unwrap();
    let text = compiled.as_text();
    assert!(text.contains("call @jaxrepl_gemm_f32") && !text.contains("memref.alloc") && !text.contains("memref.copy"), "{text}");
    check("a @ b into its output", &f.call((&a, &b)).unwrap(), &[130, 333], &want, 1e-4);
    let g = jit(|(a, b): (Array, Array)| {
        let p = a.matmul(&b);
        (p.clone(), p.clone(), p.tanh())
    });
    let (p, q, t) = g.call((&a, &b)).unwrap();
    check("first output", &p, &[130, 333], &want, 1e-4);
    check("second output", &q, &[130, 333], &want, 1e-4);
    let tw: Vec<f64> = want.iter().map(|v| v.tanh()).collect();
    check("tanh of the product", &t, &[130, 333], &tw, 1e-4);
}

#[test]
fn gemm_inside_a_loop_body() {
    // m <- tanh(m @ w) five times, 64x64 (above the threshold), in an scf loop.
    let (m0, mv) = host(&[64, 64], 11);
    let (w, wv) = host(&[64, 64], 12);
    let f = jit(move |(m, w): (Array, Array)| lax::fori_loop(0, 5, move |(_, m): (Array, Array)| m.matmul(&w).tanh(), m).unwrap());
    let mut cur = mv;
    for _ in 0..5 {
        let mut next = vec![0.0; 64 * 64];
        for i in 0..64 {
            for j in 0..64 {
                next[i * 64 + j] = (0..64).map(|k| cur[i * 64 + k] * wv[k * 64 + j]).sum::<f64>().tanh();
            }
        }
        cur = next;
    }
    check("fori_loop of tanh(m @ w)", &f.call((&m0, &w)).unwrap(), &[64, 64], &cur, 1e-4);
}

/// Index of `coords` (given per logical dim: [batch/out-feature, feature/in-feature,
/// spatial…]) in an array of `shape` whose logical dim i is physical dim `spec[i]`.
fn at(shape: &[usize], spec: &[usize], coords: &[usize]) -> usize {
    let st = strides(shape);
    spec.iter().zip(coords).map(|(&d, &c)| st[d] * c).sum()
}

#[test]
fn large_convolutions_through_im2col_match_f64_reference() {
    // (lhs spec, rhs spec, out spec) for NCHW/OIHW and NHWC/HWIO.
    let layouts = [(vec![0, 1, 2, 3], vec![0, 1, 2, 3], vec![0, 1, 2, 3]), (vec![0, 3, 1, 2], vec![3, 2, 0, 1], vec![0, 3, 1, 2])];
    // (batch, in features, out features, groups, in size, kernel, stride, pad, lhs dil, rhs dil)
    let cfgs = [(2, 8, 16, 1, 12, 3, 1, 1, 1, 1), (3, 6, 8, 2, 15, 3, 2, 2, 1, 2), (4, 4, 12, 4, 9, 2, 1, 0, 2, 1)];
    for (li, (ls, rs, os)) in layouts.iter().enumerate() {
        for (ci, &(nb, cin, cout, g, hw, k, st, pad, ld, rd)) in cfgs.iter().enumerate() {
            let phys = |spec: &Vec<usize>, logical: [usize; 4]| {
                let mut s = vec![0; 4];
                for i in 0..4 {
                    s[spec[i]] = logical[i];
                }
                s
            };
            let xs = phys(ls, [nb, cin, hw, hw]);
            let ws = phys(rs, [cout, cin / g, k, k]);
            let (x, xv) = host(&xs, 100 + ci as u64);
            let (w, wv) = host(&ws, 200 + ci as u64);
            let dil_in = (hw - 1) * ld + 1;
            let dil_k = (k - 1) * rd + 1;
            let oh = (dil_in + 2 * pad - dil_k) / st + 1;
            let osh = phys(os, [nb, cout, oh, oh]);
            let mut want = vec![0.0; osh.iter().product()];
            let pg = cout / g;
            for b in 0..nb {
                for o in 0..cout {
                    for y in 0..oh {
                        for xx in 0..oh {
                            let mut acc = 0.0;
                            for c in 0..cin / g {
                                for ky in 0..k {
                                    for kx in 0..k {
                                        let py = (y * st + ky * rd) as i64 - pad as i64;
                                        let px = (xx * st + kx * rd) as i64 - pad as i64;
                                        if py < 0 || px < 0 || py % ld as i64 != 0 || px % ld as i64 != 0 {
                                            continue;
                                        }
                                        let (iy, ix) = ((py / ld as i64) as usize, (px / ld as i64) as usize);
                                        if iy >= hw || ix >= hw {
                                            continue;
                                        }
                                        let ch = (o / pg) * (cin / g) + c;
                                        acc += xv[at(&xs, ls, &[b, ch, iy, ix])] * wv[at(&ws, rs, &[o, c, ky, kx])];
                                    }
                                }
                            }
                            want[at(&osh, os, &[b, o, y, xx])] = acc;
                        }
                    }
                }
            }
            let dn = ConvDims { lhs_spec: ls.clone(), rhs_spec: rs.clone(), out_spec: os.clone() };
            let f = jit(move |(x, w): (Array, Array)| {
                lax::conv_general_dilated(&x, &w, &[st, st], &[(pad as i64, pad as i64); 2], Some(&[ld, ld]), Some(&[rd, rd]), Some(dn.clone()), g).unwrap()
            });
            let name = format!("conv layout {li} cfg {ci}");
            let text = f.lower((&x, &w)).unwrap().as_text();
            assert!(text.contains("call @jaxrepl_gemm_f32"), "{name}: {text}");
            check(&name, &f.call((&x, &w)).unwrap(), &osh, &want, 1e-5);
        }
    }
}
