//! Tiered compilation (`jaxrepl_tiered_compilation`, on by default): the quick first tier
//! (LLVM O0) and the optimised tier compiled in the background both compute the function,
//! checked against f64 references for elementwise code (odd, 1-element and 0-size
//! arrays), matmuls, scan, while_loop and the gradient of an MLP; the swap to the
//! optimised tier happens (`Compiled::tier`, `tier_runs`), is seen by `jit` calls
//! through the executable cache, and large modules skip the first tier.
//!
//! Each test compiles functions no other test compiles (the executable cache is
//! process-wide and `tier_runs` counts per executable).

use jax::prelude::*;
use std::time::Duration;

/// Long enough for a background O2 compile on a loaded 2-core machine.
const WAIT: Duration = Duration::from_secs(300);

fn close(what: &str, got: &[f64], want: &[f64], rtol: f64, atol: f64) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((g - w).abs() <= atol + rtol * w.abs(), "{what}[{i}]: got {g}, want {w}");
    }
}

fn f64s(a: &Array) -> Vec<f64> {
    a.to_vec::<f64>().unwrap()
}

/// Runs `call` on the first tier, waits for the optimised tier, runs it again, and checks
/// both results against `want` and the per-tier run counts.
macro_rules! both_tiers {
    ($what:expr, $compiled:expr, $call:expr, $want:expr, $rtol:expr, $atol:expr) => {{
        let c = &$compiled;
        assert_eq!(c.tier(), 1, "{}: a light module starts at tier 1", $what);
        let t1: Vec<f64> = $call(c);
        close(&format!("{} tier 1", $what), &t1, &$want, $rtol, $atol);
        assert!(c.wait_optimized(WAIT), "{}: optimised tier not ready: {:?}", $what, c.optimized_tier_error());
        assert_eq!(c.tier(), 2, "{}", $what);
        let t2: Vec<f64> = $call(c);
        close(&format!("{} tier 2", $what), &t2, &$want, $rtol, $atol);
        assert_eq!(c.tier_runs(), (1, 1), "{}: one run on each tier", $what);
        (t1, t2)
    }};
}

#[test]
fn elementwise_both_tiers_match_f64_including_odd_one_and_empty_sizes() {
    for n in [1000usize, 1, 0, 17] {
        let xs: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37).sin() * 3.0 - 0.5).collect();
        let x = Array::from_vec(xs.clone(), &[n]).unwrap();
        let f = jit(|v: Array| (v.sin() * 2.0 + 1.25) * v.tanh() - v.exp() * 0.125);
        let c = f.trace(&x).unwrap().lower().unwrap().compile().unwrap();
        let want: Vec<f64> = xs
            .iter()
            .map(|&v| {
                let v = v as f64;
                (v.sin() * 2.0 + 1.25) * v.tanh() - v.exp() * 0.125
            })
            .collect();
        both_tiers!(format!("elementwise n={n}"), c, |c: &jax::transform::Compiled<Array, Array>| f64s(&c.call(&x).unwrap()), want, 2e-5, 2e-5);
    }
}

fn matmul_ref(a: &[f32], b: &[f32], m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut out = vec![0f64; m * n];
    for i in 0..m {
        for j in 0..n {
            out[i * n + j] = (0..k).map(|p| a[i * k + p] as f64 * b[p * n + j] as f64).sum();
        }
    }
    out
}

#[test]
fn matmul_both_tiers_match_f64() {
    // A small odd product (compiled loops) and a larger one (the GEMM runtime call).
    for (m, k, n) in [(33usize, 65usize, 17usize), (128, 256, 96)] {
        let a: Vec<f32> = (0..m * k).map(|i| ((i * 7 % 13) as f32 - 6.0) * 0.1).collect();
        let b: Vec<f32> = (0..k * n).map(|i| ((i * 5 % 11) as f32 - 5.0) * 0.07).collect();
        let (aa, bb) = (Array::from_vec(a.clone(), &[m, k]).unwrap(), Array::from_vec(b.clone(), &[k, n]).unwrap());
        let f = jit(|(a, b): (Array, Array)| jnp::matmul(&a, &b).map(|p| p + 0.5));
        let c = f.trace((&aa, &bb)).unwrap().lower().unwrap().compile().unwrap();
        let want: Vec<f64> = matmul_ref(&a, &b, m, k, n).into_iter().map(|v| v + 0.5).collect();
        both_tiers!(
            format!("matmul {m}x{k}x{n}"),
            c,
            |c: &jax::transform::Compiled<(Array, Array), Array>| f64s(&c.call((&aa, &bb)).unwrap()),
            want,
            1e-4,
            1e-4
        );
    }
}

#[test]
fn scan_and_while_loop_both_tiers_match_f64() {
    // scan: c = c*0.9 + sin(x_i), emitting sum(c), over 100 steps of f32[7].
    let (steps, w) = (100usize, 7usize);
    let xs: Vec<f32> = (0..steps * w).map(|i| (i as f32 * 0.013).cos()).collect();
    let xa = Array::from_vec(xs.clone(), &[steps, w]).unwrap();
    let c0 = Array::from_vec(vec![0.5f32; w], &[w]).unwrap();
    let f = jit(|(c0, xs): (Array, Array)| {
        lax::scan(
            |(c, xi): (Array, Array)| -> Result<(Array, Array)> {
                let c = c * 0.9 + xi.sin();
                let s = c.sum();
                Ok((c, s))
            },
            c0,
            xs,
            None,
            false,
            1,
        )
    });
    let c = f.trace((&c0, &xa)).unwrap().lower().unwrap().compile().unwrap();
    let mut carry = vec![0.5f64; w];
    let mut ys = Vec::new();
    for t in 0..steps {
        for j in 0..w {
            carry[j] = carry[j] * 0.9 + (xs[t * w + j] as f64).sin();
        }
        ys.push(carry.iter().sum::<f64>());
    }
    let mut want = carry.clone();
    want.extend(&ys);
    both_tiers!(
        "scan",
        c,
        |c: &jax::transform::Compiled<(Array, Array), (Array, Array)>| {
            let (cf, ys) = c.call((&c0, &xa)).unwrap();
            let mut v = f64s(&cf);
            v.extend(f64s(&ys));
            v
        },
        want,
        1e-4,
        1e-4
    );

    // while_loop with a data-dependent trip count: halve until below 1e-3, counting.
    let g = jit(|x: Array| {
        lax::while_loop(
            |(v, _): (Array, Array)| v.max().gt(1e-3),
            |(v, k): (Array, Array)| -> Result<(Array, Array)> { Ok((v.clone() * 0.5 + v.sin() * 0.01, k + 1)) },
            (x, Array::scalar(0i32)),
        )
    });
    let x0: Vec<f32> = vec![3.0, 0.25, 1.5, 2.75, 0.125];
    let xa0 = Array::from_vec(x0.clone(), &[5]).unwrap();
    let c = g.trace(&xa0).unwrap().lower().unwrap().compile().unwrap();
    let mut v: Vec<f64> = x0.iter().map(|&x| x as f64).collect();
    let mut k = 0;
    while v.iter().cloned().fold(f64::MIN, f64::max) > 1e-3 {
        v = v.iter().map(|&x| x * 0.5 + x.sin() * 0.01).collect();
        k += 1;
    }
    let mut want = v.clone();
    want.push(k as f64);
    both_tiers!(
        "while_loop",
        c,
        |c: &jax::transform::Compiled<Array, (Array, Array)>| {
            let (v, k) = c.call(&xa0).unwrap();
            let mut out = f64s(&v);
            out.push(k.item::<i32>().unwrap() as f64);
            out
        },
        want,
        1e-3,
        1e-6
    );
}

type Params = Vec<(Array, Array)>;

/// `mean((relu(x W1 + b1) W2 + b2 - y)^2)`.
fn mlp_loss(p: &Params, x: &Array, y: &Array) -> Result<Array> {
    let h = nn::relu(&(jnp::matmul(x, &p[0].0)? + &p[0].1))?;
    let d = jnp::matmul(&h, &p[1].0)? + &p[1].1 - y;
    jnp::mean(&(&d * &d), None)
}

#[test]
fn mlp_grad_both_tiers_match_f64_backprop() {
    let (b, i, h, o) = (6usize, 5usize, 9usize, 3usize);
    let mk = |n: usize, s: usize| -> Vec<f32> { (0..n).map(|t| (((t * s + 3) % 17) as f32 - 8.0) * 0.11).collect() };
    let (w1, b1, w2, b2) = (mk(i * h, 7), mk(h, 3), mk(h * o, 5), mk(o, 11));
    let (xv, yv) = (mk(b * i, 13), mk(b * o, 2));
    let arr = |v: &Vec<f32>, s: &[usize]| Array::from_vec(v.clone(), s).unwrap();
    let params: Params = vec![(arr(&w1, &[i, h]), arr(&b1, &[h])), (arr(&w2, &[h, o]), arr(&b2, &[o]))];
    let (x, y) = (arr(&xv, &[b, i]), arr(&yv, &[b, o]));
    let f = jit(|(p, x, y): (Params, Array, Array)| grad(move |p: Params| mlp_loss(&p, &x, &y))(p));
    let c = f.trace((&params, &x, &y)).unwrap().lower().unwrap().compile().unwrap();

    // f64 backprop.
    let d = |v: &Vec<f32>| v.iter().map(|&t| t as f64).collect::<Vec<f64>>();
    let (w1, b1, w2, b2, xv, yv) = (d(&w1), d(&b1), d(&w2), d(&b2), d(&xv), d(&yv));
    let mut z = vec![0f64; b * h];
    for r in 0..b {
        for j in 0..h {
            z[r * h + j] = b1[j] + (0..i).map(|p| xv[r * i + p] * w1[p * h + j]).sum::<f64>();
        }
    }
    let a: Vec<f64> = z.iter().map(|&t| t.max(0.0)).collect();
    let mut g_out = vec![0f64; b * o];
    for r in 0..b {
        for j in 0..o {
            let out = b2[j] + (0..h).map(|p| a[r * h + p] * w2[p * o + j]).sum::<f64>();
            g_out[r * o + j] = 2.0 * (out - yv[r * o + j]) / (b * o) as f64;
        }
    }
    let mut gw2 = vec![0f64; h * o];
    let mut gb2 = vec![0f64; o];
    let mut ga = vec![0f64; b * h];
    for r in 0..b {
        for j in 0..o {
            gb2[j] += g_out[r * o + j];
            for p in 0..h {
                gw2[p * o + j] += a[r * h + p] * g_out[r * o + j];
                ga[r * h + p] += w2[p * o + j] * g_out[r * o + j];
            }
        }
    }
    let gz: Vec<f64> = ga.iter().zip(&z).map(|(&g, &zz)| if zz > 0.0 { g } else { 0.0 }).collect();
    let mut gw1 = vec![0f64; i * h];
    let mut gb1 = vec![0f64; h];
    for r in 0..b {
        for j in 0..h {
            gb1[j] += gz[r * h + j];
            for p in 0..i {
                gw1[p * h + j] += xv[r * i + p] * gz[r * h + j];
            }
        }
    }
    let want: Vec<f64> = [gw1, gb1, gw2, gb2].concat();
    both_tiers!(
        "mlp grad",
        c,
        |c: &jax::transform::Compiled<(Params, Array, Array), Params>| {
            let g = c.call((&params, &x, &y)).unwrap();
            g.iter().flat_map(|(gw, gb)| f64s(gw).into_iter().chain(f64s(gb))).collect::<Vec<f64>>()
        },
        want,
        1e-4,
        1e-5
    );
}

#[test]
fn jit_calls_swap_to_the_optimised_tier_through_the_cache() {
    let x = Array::from_vec((0..257).map(|i| i as f32 * 0.01).collect::<Vec<f32>>(), &[257]).unwrap();
    let want: Vec<f64> = (0..257).map(|i| ((i as f32 * 0.01) as f64).cos() * 3.0 - 0.75).collect();
    let f = jit(|v: Array| v.cos() * 3.0 - 0.75);
    // The first call compiles tier 1; the second asks for tier 2 in the background.
    close("call 1", &f64s(&f.call(&x).unwrap()), &want, 1e-5, 1e-5);
    close("call 2", &f64s(&f.call(&x).unwrap()), &want, 1e-5, 1e-5);
    // The same executable, found in the executable cache by AOT compile.
    let c = f.trace(&x).unwrap().lower().unwrap().compile().unwrap();
    assert!(c.wait_optimized(WAIT), "{:?}", c.optimized_tier_error());
    assert_eq!(c.tier(), 2);
    for k in 0..3 {
        close(&format!("call {}", k + 3), &f64s(&f.call(&x).unwrap()), &want, 1e-5, 1e-5);
    }
    let (t1, t2) = c.tier_runs();
    assert_eq!(t1, 2, "the two calls before the swap ran tier 1");
    assert_eq!(t2, 3, "the calls after the swap ran tier 2");
    // Inspection describes the optimised code whatever tier ran.
    assert!(c.as_text().contains("scf.for"), "{}", c.as_text());
    assert_eq!(c.opt_level(), 2);
}

#[test]
fn large_modules_skip_the_first_tier() {
    let n = jax::compile::HEAVY_ELEMENTS;
    let x = jnp::ones(&[n], DType::F32);
    let c = jit(|v: Array| v * 2.0 + 0.5).trace(&x).unwrap().lower().unwrap().compile().unwrap();
    assert_eq!(c.tier(), 2, "a large module compiles optimised at once");
    let out = c.call(&x).unwrap().to_vec::<f32>().unwrap();
    assert!(out.iter().all(|&v| v == 2.5));
    assert_eq!(c.tier_runs(), (0, 1));
    // A light module of the same function compiles tiered.
    let y = jnp::ones(&[11], DType::F32);
    let c = jit(|v: Array| v - 0.25).trace(&y).unwrap().lower().unwrap().compile().unwrap();
    assert!(c.wait_optimized(WAIT), "{:?}", c.optimized_tier_error());
    assert_eq!(c.call(&y).unwrap().to_vec::<f32>().unwrap(), vec![0.75f32; 11]);
}
