//! Loops whose carries are 0-d (lowered as element-typed `scf` iter_args, not 0-d
//! tensors) and 0-d elementwise chains (plain scalar ops): values under jit against
//! Rust loops computed in f64 (f32 rounding allowed for), with scalar and array carries
//! mixed, nested loops, `while_loop` with a traced predicate, `fori_loop` with traced
//! bounds, `scan` over 1-D `xs` (0-d slices and 0-d stacked outputs), `cond` with 0-d
//! results, zero- and one-trip loops, and `grad` through a scalar-carry `scan`. Tensor
//! carries updated in place (`compile::inplace`): no allocation in the loop body, and the
//! values of swapped, re-read and passed-through carries, also on the multi-threaded path.

use jax::prelude::*;
use jaxrepl_tests::central_differences;

fn f64s(a: &Array) -> Vec<f64> {
    a.to_vec::<f64>().unwrap()
}

fn item(a: &Array) -> f64 {
    f64s(a)[0]
}

fn close(got: f64, want: f64, tol: f64, what: &str) {
    assert!((got - want).abs() <= tol * (1.0 + want.abs()), "{what}: got {got}, want {want}");
}

/// The bench's scalar fori body `c*0.999 + sin(i)*1e-3`, with a static and a traced trip
/// count, and the (i, c) while loop.
#[test]
fn scalar_fori_and_while_loops_match_f64_loops() {
    let body = |(i, c): (Array, Array)| c * 0.999 + i.astype(DType::F32).sin() * 1e-3;
    for n in [0i32, 1, 2, 7, 1000] {
        let mut want = 1.0f64;
        for i in 0..n {
            want = want * 0.999 + (i as f64).sin() * 1e-3;
        }
        let fs = jit(move |c: Array| lax::fori_loop(0, n, body, c));
        close(item(&fs.call(Array::scalar(1.0f32)).unwrap()), want, 1e-5, &format!("static fori n={n}"));
        let fd = jit(move |(c, n): (Array, Array)| lax::fori_loop_dynamic(&Array::scalar(0i32), &n, body, c));
        close(item(&fd.call((Array::scalar(1.0f32), Array::scalar(n))).unwrap()), want, 1e-5, &format!("traced fori n={n}"));
    }
    // Traced lower and upper bounds, lower > upper runs no trip.
    let fd = jit(move |(c, lo, hi): (Array, Array, Array)| lax::fori_loop_dynamic(&lo, &hi, body, c));
    for (lo, hi) in [(3i32, 10i32), (5, 5), (9, 2), (-4, 3)] {
        let mut want = 0.5f64;
        for i in lo..hi {
            want = want * 0.999 + (i as f64).sin() * 1e-3;
        }
        let got = fd.call((Array::scalar(0.5f32), Array::scalar(lo), Array::scalar(hi))).unwrap();
        close(item(&got), want, 1e-5, &format!("fori {lo}..{hi}"));
    }
    let w = jit(|(c, n): (Array, Array)| {
        lax::while_loop(move |(i, _c): (Array, Array)| i.lt(&n), |(i, c): (Array, Array)| (i + 1, c * 0.999 + 1e-3), (Array::scalar(0i32), c))
    });
    for n in [0i32, 1, 10_000] {
        let (i, c) = w.call((Array::scalar(2.0f32), Array::scalar(n))).unwrap();
        let mut want = 2.0f64;
        for _ in 0..n {
            want = want * 0.999 + 1e-3;
        }
        assert_eq!(i.item::<i32>().unwrap(), n);
        close(item(&c), want, 1e-4, &format!("while n={n}"));
    }
}

/// A predicate that depends on the floating carry (Newton's square root until converged),
/// and bool and f16 carries.
#[test]
fn while_with_a_data_dependent_predicate_and_mixed_dtypes() {
    let sqrt = jit(|a: Array| {
        lax::while_loop(
            |(x, prev, k): (Array, Array, Array)| -> Result<Array> { jnp::logical_and(&(&x - &prev).abs().gt(1e-6), &k.lt(100)) },
            |(x, _prev, k): (Array, Array, Array)| -> (Array, Array, Array) { ((&x + &(&a / &x)) * 0.5, x, k + 1) },
            (a.clone(), Array::scalar(0.0f32), Array::scalar(0i32)),
        )
    });
    for a in [2.0f32, 0.25, 1e4, 1.0] {
        let (x, _, k) = sqrt.call(Array::scalar(a)).unwrap();
        close(item(&x), (a as f64).sqrt(), 1e-6, &format!("sqrt {a}"));
        assert!(k.item::<i32>().unwrap() < 100);
    }
    // A bool carry toggled each step and an f16 carry.
    let f = jit(|(b, h): (Array, Array)| {
        lax::fori_loop(0, 5, |(i, (b, h)): (Array, (Array, Array))| -> Result<(Array, Array)> { Ok((jnp::logical_not(&b)?, &h + &i.astype(DType::F16))) }, (b, h))
    });
    let (b, h) = f.call((Array::scalar(true), Array::scalar(0.5f32).astype(DType::F16))).unwrap();
    assert!(!b.item::<bool>().unwrap());
    close(item(&h), 10.5, 0.0, "f16 carry");
}

/// Scalar and array carries in one loop, a loop nested in a loop, and a `cond` with a 0-d
/// result inside a loop.
#[test]
fn mixed_carries_nested_loops_and_scalar_cond() {
    let f = jit(|(s, v): (Array, Array)| {
        lax::fori_loop(
            0,
            6,
            |(i, (s, v)): (Array, (Array, Array))| -> Result<(Array, Array)> {
                let inner = lax::fori_loop(0, 3, |(j, t): (Array, Array)| &t * 0.5 + j.astype(DType::F32), s.clone())?;
                let odd = jnp::remainder(&i, &Array::scalar(2i32))?.eq(1);
                let add = lax::cond(&odd, |x: Array| &x * 2.0, |x: Array| -x, i.astype(DType::F32))?;
                Ok((&inner + &add, &v * 0.9 + &s))
            },
            (s, v),
        )
    });
    let v0: Vec<f32> = (0..5).map(|k| k as f32 - 2.0).collect();
    let (s, v) = f.call((Array::scalar(1.0f32), Array::from_slice(&v0))).unwrap();
    let (mut ws, mut wv): (f64, Vec<f64>) = (1.0, v0.iter().map(|&x| x as f64).collect());
    for i in 0..6 {
        let mut t = ws;
        for j in 0..3 {
            t = t * 0.5 + j as f64;
        }
        let add = if i % 2 == 1 { 2.0 * i as f64 } else { -(i as f64) };
        wv = wv.iter().map(|x| x * 0.9 + ws).collect();
        ws = t + add;
    }
    close(item(&s), ws, 1e-6, "scalar carry");
    for (g, w) in f64s(&v).iter().zip(&wv) {
        close(*g, *w, 1e-6, "array carry");
    }
}

/// `scan` over 1-D `xs` (0-d slices), with 0-d and 1-D stacked outputs, forward and
/// reversed, and the 0- and 1-step scans.
#[test]
fn scan_over_scalars_with_scalar_and_vector_outputs() {
    for n in [0usize, 1, 5, 33] {
        let xs: Vec<f32> = (0..n).map(|k| (k as f32 * 0.37).cos()).collect();
        for reverse in [false, true] {
            let f = jit(move |(c, xs): (Array, Array)| {
                lax::scan(
                    |(c, x): (Array, Array)| -> Result<(Array, (Array, Array))> {
                        let c2 = &c * 0.8 + &x;
                        let pair = jnp::stack(&[c2.clone(), &x * 2.0], 0)?;
                        Ok((c2.clone(), (c2, pair)))
                    },
                    c,
                    xs,
                    None,
                    reverse,
                    1,
                )
            });
            let (c, (ys, pairs)) = f.call((Array::scalar(0.25f32), Array::from_slice(&xs))).unwrap();
            let mut wc = 0.25f64;
            let mut wys = vec![0.0; n];
            let mut wpairs = vec![0.0; 2 * n];
            let order: Vec<usize> = if reverse { (0..n).rev().collect() } else { (0..n).collect() };
            for k in order {
                wc = wc * 0.8 + xs[k] as f64;
                wys[k] = wc;
                wpairs[2 * k] = wc;
                wpairs[2 * k + 1] = xs[k] as f64 * 2.0;
            }
            close(item(&c), wc, 1e-6, &format!("carry n={n} rev={reverse}"));
            assert_eq!(ys.shape(), &[n]);
            assert_eq!(pairs.shape(), &[n, 2]);
            for (g, w) in f64s(&ys).iter().zip(&wys).chain(f64s(&pairs).iter().zip(&wpairs)) {
                close(*g, *w, 1e-6, &format!("ys n={n} rev={reverse}"));
            }
        }
    }
}

/// `grad` through a scan whose carry is 0-d: d/dw of the final carry of c ← tanh(w·c + x).
#[test]
fn grad_through_a_scalar_carry_scan_matches_finite_differences() {
    let xs: Vec<f32> = (0..20).map(|k| ((k as f32) * 0.7).sin() * 0.5).collect();
    let xs_a = Array::from_slice(&xs);
    let loss = move |w: Array| -> Result<Array> {
        let (c, ys) = lax::scan(|(c, x): (Array, Array)| {
            let c2 = (&w * &c + &x).tanh();
            (c2.clone(), c2)
        }, Array::scalar(0.3f32), xs_a.clone(), None, false, 1)?;
        Ok(&c + &ys.sum())
    };
    let g = jit(grad(loss));
    let reference = |w: f64| -> f64 {
        let (mut c, mut s) = (0.3f64, 0.0);
        for &x in &xs {
            c = (w * c + x as f64).tanh();
            s += c;
        }
        c + s
    };
    for w in [0.5f64, -1.2, 2.0] {
        let fd = central_differences(|v: &[f64]| reference(v[0]), &[w])[0];
        close(item(&g.call(Array::scalar(w as f32)).unwrap()), fd, 1e-3, &format!("grad at {w}"));
    }
}

/// The optimized module of a scalar fori_loop keeps one loop and no per-iteration buffer:
/// its only allocation is the returned 0-d result.
#[test]
fn a_scalar_loop_carries_registers_not_buffers() {
    let f = jit(|c: Array| lax::fori_loop(0, 10_000, |(i, c): (Array, Array)| c * 0.999 + i.astype(DType::F32).sin() * 1e-3, c));
    let opt = f.trace(Array::scalar(1.0f32)).unwrap().lower().unwrap().compile().unwrap().as_text_stage(Stage::Optimized).unwrap();
    assert_eq!(opt.matches("scf.for").count(), 1, "{opt}");
    assert!(opt.matches("memref.alloc").count() <= 1, "{opt}");
    let w = jit(|c: Array| lax::while_loop(|(i, _c): (Array, Array)| i.lt(10_000), |(i, c): (Array, Array)| (i + 1, c * 0.999 + 1e-3), (Array::scalar(0i32), c)));
    let opt = w.trace(Array::scalar(1.0f32)).unwrap().lower().unwrap().compile().unwrap().as_text_stage(Stage::Optimized).unwrap();
    assert_eq!(opt.matches("scf.while").count(), 1, "{opt}");
    assert!(opt.matches("memref.alloc").count() <= 2, "{opt}");
}

/// 0-d elementwise chains outside loops (now plain scalar ops) against f64, including
/// integer, comparison and select ops and a 0-d result returned as an array.
#[test]
fn scalar_chains_match_f64() {
    let f = jit(|(x, y, k): (Array, Array, Array)| -> Result<(Array, Array, Array)> {
        let a = (&x * &y + 1.0).tanh() - x.exp() / (&y * &y + 1.0);
        let b = jnp::where_(&x.gt(&y), &a, &(&a * -3.0))?;
        let m = jnp::remainder(&(&k * 7 + 3), &Array::scalar(5i32))?;
        Ok((b, m, x.lt(0.0)))
    });
    for (x, y, k) in [(0.3f32, -1.5f32, 4i32), (-2.0, 0.5, -9), (1.0, 1.0, 0)] {
        let (b, m, neg) = f.call((Array::scalar(x), Array::scalar(y), Array::scalar(k))).unwrap();
        let (xd, yd) = (x as f64, y as f64);
        let a = (xd * yd + 1.0).tanh() - xd.exp() / (yd * yd + 1.0);
        let want = if xd > yd { a } else { -3.0 * a };
        close(item(&b), want, 1e-5, &format!("chain at {x},{y}"));
        assert_eq!(m.item::<i32>().unwrap(), (k * 7 + 3).rem_euclid(5));
        assert_eq!(neg.item::<bool>().unwrap(), x < 0.0);
        assert_eq!(b.shape(), &[] as &[usize]);
    }
}

/// Tensor carries updated in place (`compile::inplace`): a fori_loop over f32[1024] and a
/// while_loop over f32[8, 16] each keep one buffer for their carry (no allocation inside
/// the loop), and give the f64 loop's values.
#[test]
fn tensor_carries_are_updated_in_place() {
    let v0: Vec<f32> = (0..1024).map(|i| (i as f32 * 0.37).sin()).collect();
    let f = jit(|v: Array| lax::fori_loop(0, 1000, |(_i, v): (Array, Array)| v * 0.999 + 1e-3, v));
    let x = Array::from_vec(v0.clone(), &[1024]).unwrap();
    let opt = f.trace(&x).unwrap().lower().unwrap().compile().unwrap().as_text_stage(Stage::Optimized).unwrap();
    let body = &opt[opt.find("scf.for").unwrap()..];
    assert!(!body[..body.find("scf.yield").unwrap()].contains("memref.alloc"), "{opt}");
    let got = f64s(&f.call(&x).unwrap());
    for (g, &v) in got.iter().zip(&v0) {
        let mut want = v as f64;
        for _ in 0..1000 {
            want = want * 0.999 + 1e-3;
        }
        close(*g, want, 1e-5, "fori f32[1024]");
    }
    let w = jit(|(m, n): (Array, Array)| {
        lax::while_loop(move |(i, _m): (Array, Array)| i.lt(&n), |(i, m): (Array, Array)| (i + 1, (m * 0.5).tanh() + 0.25), (Array::scalar(0i32), m))
    });
    let m0: Vec<f32> = (0..128).map(|i| i as f32 / 64.0 - 1.0).collect();
    let ma = Array::from_vec(m0.clone(), &[8, 16]).unwrap();
    let opt = w.trace((&ma, Array::scalar(37i32))).unwrap().lower().unwrap().compile().unwrap().as_text_stage(Stage::Optimized).unwrap();
    let body = &opt[opt.find("} do {").unwrap()..];
    assert!(!body[..body.find("scf.yield").unwrap()].contains("memref.alloc"), "{opt}");
    let (i, m) = w.call((Array::from_vec(m0.clone(), &[8, 16]).unwrap(), Array::scalar(37i32))).unwrap();
    assert_eq!(i.item::<i32>().unwrap(), 37);
    for (g, &v) in f64s(&m).iter().zip(&m0) {
        let mut want = v as f64;
        for _ in 0..37 {
            want = (want * 0.5).tanh() + 0.25;
        }
        close(*g, want, 1e-5, "while f32[8,16]");
    }
}

/// Carries the in-place rewrite must not break: a swap `(a, b) -> (b, a + b)` (Fibonacci
/// on vectors: `a` is yielded after the update reads it), a carry read after its update in
/// the same body, a carry passed through unchanged, and a scan whose carry feeds a
/// reduction stacked as output.
#[test]
fn swapped_and_reread_tensor_carries_keep_their_values() {
    let fib = jit(|(a, b): (Array, Array)| lax::fori_loop(0, 20, |(_i, (a, b)): (Array, (Array, Array))| (b.clone(), a + b), (a, b)));
    let a0 = Array::from_vec(vec![0.0f32, 1.0, 2.0], &[3]).unwrap();
    let b0 = Array::from_vec(vec![1.0f32, 1.0, -1.0], &[3]).unwrap();
    let (a, b) = fib.call((&a0, &b0)).unwrap();
    for k in 0..3 {
        let (mut x, mut y) = (f64s(&a0)[k], f64s(&b0)[k]);
        for _ in 0..20 {
            (x, y) = (y, x + y);
        }
        close(f64s(&a)[k], x, 0.0, "fib a");
        close(f64s(&b)[k], y, 0.0, "fib b");
    }
    // v' = v * 0.5 + 1, then u' = u + v' (reads the new v) and w passes through unchanged.
    let g = jit(|(v, u, w): (Array, Array, Array)| {
        lax::fori_loop(0, 10, |(_i, (v, u, w)): (Array, (Array, Array, Array))| {
            let nv = v * 0.5 + 1.0;
            let nu = &u + &nv;
            (nv, nu, w)
        }, (v, u, w))
    });
    let v0 = Array::from_vec(vec![4.0f32, -2.0], &[2]).unwrap();
    let u0 = Array::from_vec(vec![0.0f32, 10.0], &[2]).unwrap();
    let (v, u, w) = g.call((&v0, &u0, &v0)).unwrap();
    for k in 0..2 {
        let (mut x, mut s) = (f64s(&v0)[k], f64s(&u0)[k]);
        for _ in 0..10 {
            x = x * 0.5 + 1.0;
            s += x;
        }
        close(f64s(&v)[k], x, 1e-6, "v");
        close(f64s(&u)[k], s, 1e-6, "u");
        close(f64s(&w)[k], f64s(&v0)[k], 0.0, "w");
    }
    // The bench's scan: c' = 0.9 c + sin(x), y = sum(c').
    let xs: Vec<f32> = (0..50 * 4).map(|i| (i as f32 * 0.61).cos() * 3.0).collect();
    let sc = jit(|(c, xs): (Array, Array)| lax::scan(|(c, x): (Array, Array)| -> Result<(Array, Array)> {
        let c = c * 0.9 + x.sin();
        let s = c.sum();
        Ok((c, s))
    }, c, xs, None, false, 1));
    let (c, ys) = sc.call((jnp::zeros(&[4], DType::F32), Array::from_vec(xs.clone(), &[50, 4]).unwrap())).unwrap();
    let mut cw = [0.0f64; 4];
    let ys = f64s(&ys);
    for t in 0..50 {
        for k in 0..4 {
            cw[k] = cw[k] * 0.9 + (xs[t * 4 + k] as f64).sin();
        }
        close(ys[t], cw.iter().sum(), 1e-5, "scan y");
    }
    for k in 0..4 {
        close(f64s(&c)[k], cw[k], 1e-5, "scan c");
    }
}

/// A carry large enough for the multi-threaded compile path (2^18 elements: the in-place
/// rewrite runs there too, between its fusion and bufferization steps), beside a
/// top-level elementwise op that path splits over threads.
#[test]
fn a_large_tensor_carry_on_the_parallel_path() {
    let n = 1usize << 18;
    let v0: Vec<f32> = (0..n).map(|i| (i % 1000) as f32 * 0.01 - 5.0).collect();
    let f = jit(|v: Array| -> Result<Array> {
        let w = lax::fori_loop(0, 5, |(_i, v): (Array, Array)| (v * 0.5 + 1.0).sin(), v.clone())?;
        Ok(w + v * 2.0)
    });
    let got = f64s(&f.call(Array::from_vec(v0.clone(), &[n]).unwrap()).unwrap());
    for k in (0..n).step_by(997) {
        let mut x = v0[k] as f64;
        for _ in 0..5 {
            x = (x * 0.5 + 1.0).sin();
        }
        close(got[k], x + 2.0 * v0[k] as f64, 1e-5, &format!("element {k}"));
    }
}

/// The bench's scan (`c = c*0.9 + sin(x_i)`, emitting `sum(c)`) over f32[16] carries: its
/// small buffers (the carry, the sum's 0-d accumulator) are stack allocations
/// (`promote-buffers-to-stack`, no heap allocation left in the optimized module), and the
/// final carry and every emitted sum match an f64 loop.
#[test]
fn a_small_scan_keeps_its_buffers_on_the_stack() {
    let f = jit(|(c0, xs): (Array, Array)| {
        lax::scan(|(c, xi): (Array, Array)| -> Result<(Array, Array)> {
            let c = c * 0.9 + xi.sin();
            let s = c.sum();
            Ok((c, s))
        }, c0, xs, None, false, 1)
    });
    let (steps, n) = (300usize, 16usize);
    let c0: Vec<f32> = (0..n).map(|j| j as f32 * 0.25 - 2.0).collect();
    // Arguments of both signs and magnitudes up to ~3e6 (the exact trig reduction too).
    let xs: Vec<f32> = (0..steps * n).map(|k| ((k as f32 * 0.618).sin() * 4.0).powi(3) * if k % 97 == 0 { 5e4 } else { 1.0 }).collect();
    let (ca, xa) = (Array::from_vec(c0.clone(), &[n]).unwrap(), Array::from_vec(xs.clone(), &[steps, n]).unwrap());
    let opt = f.trace((&ca, &xa)).unwrap().lower().unwrap().compile().unwrap().as_text_stage(Stage::Optimized).unwrap();
    assert!(opt.contains("memref.alloca"), "{opt}");
    assert!(!opt.contains("memref.alloc()"), "{opt}");
    let (c, ys) = f.call((&ca, &xa)).unwrap();
    let mut want: Vec<f64> = c0.iter().map(|&v| v as f64).collect();
    let ys = f64s(&ys);
    assert_eq!(ys.len(), steps);
    for (t, y) in ys.iter().enumerate() {
        for (j, w) in want.iter_mut().enumerate() {
            *w = *w * 0.9 + (xs[t * n + j] as f64).sin();
        }
        close(*y, want.iter().sum(), 1e-4, &format!("sum at step {t}"));
    }
    for (g, w) in f64s(&c).iter().zip(&want) {
        close(*g, *w, 1e-4, "final carry");
    }
}

/// A jitted `scan` (bounded running time) whose fastest run was short runs on the calling
/// thread: after its first calls its result is ready when `call` returns, and equal to
/// the first's (and to the f64 loop). A `while_loop` (running time unbounded) still goes
/// to the device worker, and its result is right too.
#[test]
fn a_short_scan_runs_on_the_calling_thread_after_its_first_call() {
    let f = jit(|c: Array| lax::fori_loop(0, 100, |(i, c): (Array, Array)| c * 0.5 + i.astype(DType::F32), c));
    let c0 = jnp::zeros(&[4], DType::F32);
    let mut want = 0.0f64;
    for i in 0..100 {
        want = want * 0.5 + i as f64;
    }
    let first = f.call(&c0).unwrap();
    // A few more calls: the choice rests on the fastest timed run, so one run preempted
    // on a loaded machine (tests run in parallel) only delays it.
    for _ in 0..4 {
        assert_eq!(f64s(&f.call(&c0).unwrap()), f64s(&first));
    }
    for _ in 0..3 {
        let r = f.call(&c0).unwrap();
        assert!(r.is_ready(), "a short scan's result is ready when call returns");
        assert_eq!(f64s(&r), f64s(&first));
    }
    for v in f64s(&first) {
        close(v, want, 1e-5, "fori_loop");
    }
    let w = jit(|c: Array| lax::while_loop(|(i, _): (Array, Array)| i.lt(100), |(i, c): (Array, Array)| (i + 1, c * 0.5 + 1.0), (jnp::zeros(&[], DType::I32), c)));
    for _ in 0..3 {
        let (i, c) = w.call(&c0).unwrap();
        assert_eq!(item(&i), 100.0);
        close(item(&c.sum()), 4.0 * 2.0, 1e-5, "while_loop");
    }
}
