//! Differentiation: gradients against central finite differences (in f64 with x64 on,
//! so the check is tight), jvp against vjp, composition with jit and with itself, and
//! a small MLP trained by SGD under jit(grad), its loss curve checked against hand-written
//! backpropagation on the host.

use jax::prelude::*;

fn x64() {
    config::update("jax_enable_x64", true).unwrap();
}

fn f64s(a: &Array) -> Vec<f64> {
    a.to_vec::<f64>().unwrap()
}

/// Central differences of a scalar function of a vector.
fn fd(f: &dyn Fn(&Array) -> f64, x: &[f64]) -> Vec<f64> {
    jaxrepl_tests::central_differences(|v| f(&Array::from_slice(v)), x)
}

fn assert_close(got: &[f64], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() <= tol * (1.0 + w.abs()), "{what}: got {got:?} want {want:?}");
    }
}

type Scalar = fn(Array) -> Array;

#[test]
fn grads_of_every_differentiable_primitive_match_finite_differences() {
    x64();
    let fns: Vec<(&str, Scalar)> = vec![
        ("sin*cos", |x| (x.sin() * x.cos()).sum()),
        ("exp/log", |x| (x.exp() + (x.clone() * x.clone() + 1.0).log()).sum()),
        ("tanh", |x| x.tanh().sum()),
        ("sqrt/div", |x| ((x.clone() * x.clone() + 2.0).sqrt() / (x.abs() + 1.0)).sum()),
        ("pow", |x| (x.abs() + 0.5).pow(x.clone() * 0.5 + 1.0).sum()),
        ("max/min", |x| (x.maximum(0.1) * 2.0 + x.minimum(-0.2)).sum()),
        ("neg/sub", |x| (-(x.clone() - 3.0) * x).sum()),
        ("where", |x| jnp::where_(&x.gt(0.0), &(x.clone() * x.clone()), &(x.clone() * 3.0)).unwrap().sum()),
        ("reductions", |x| x.max() * 2.0 + x.mean() + x.min()),
        ("reshape/transpose/matmul", |x| {
            let m = x.reshape(&[2, 3]);
            m.matmul(&m.t()).sum()
        }),
        ("broadcast", |x| {
            let m = x.reshape(&[2, 3]);
            (m.clone() * m.sum_axes(&[0])).sum()
        }),
    ];
    let x0 = vec![0.3, -1.2, 0.7, 2.1, -0.4, 1.5];
    for (name, f) in fns {
        let g = grad(f);
        let got = f64s(&g(Array::from_slice(&x0)).unwrap());
        let want = fd(&|x: &Array| f(x.clone()).item::<f64>().unwrap(), &x0);
        assert_close(&got, &want, 1e-5, name);
        // The same gradient under jit.
        let gj = jit(grad(f));
        assert_close(&f64s(&gj.call(Array::from_slice(&x0)).unwrap()), &want, 1e-5, &format!("jit {name}"));
    }
}

#[test]
fn jvp_agrees_with_vjp_transposition() {
    x64();
    let f = |x: Array| (x.sin() * 3.0).matmul(&x.reshape(&[3, 2])).tanh();
    let x = Array::from_slice(&[0.1, 0.2, -0.3, 0.4, 0.5, -0.6]).reshape(&[2, 3]);
    let t = Array::from_slice(&[1.0, -0.5, 0.25, 2.0, 0.0, 1.0]).reshape(&[2, 3]);
    let u = Array::from_slice(&[0.3, -1.0, 0.5, 0.7]).reshape(&[2, 2]);
    let (_, jt) = jvp(f, &x, &t).unwrap();
    let (_, vu) = vjp(f, &x, &u).unwrap();
    // <u, J t> == <J^T u, t>
    let lhs: f64 = f64s(&jt).iter().zip(f64s(&u)).map(|(a, b)| a * b).sum();
    let rhs: f64 = f64s(&vu).iter().zip(f64s(&t)).map(|(a, b)| a * b).sum();
    assert!((lhs - rhs).abs() < 1e-12, "{lhs} vs {rhs}");
}

#[test]
fn second_derivatives_and_hessian() {
    x64();
    let d2 = grad(grad(|x: Array| (x.clone() * x.clone() * x.clone()).sum() + x.sin().sum()));
    let x = Array::scalar(0.7f64);
    let got = d2(x).unwrap().item::<f64>().unwrap();
    assert!((got - (6.0 * 0.7 - 0.7f64.sin())).abs() < 1e-10, "{got}");
    let h = hessian(|x: Array| (x.clone() * x.clone()).sum() * x.sum());
    let hx = f64s(&h(Array::from_slice(&[1.0, 2.0])).unwrap());
    // f = (a²+b²)(a+b): H = [[6a+2b, 2a+2b], [2a+2b, 2a+6b]] at (1, 2)
    assert_close(&hx, &[10.0, 6.0, 6.0, 14.0], 1e-9, "hessian");
    let jf = jacfwd(|x: Array| x.sin() * 2.0);
    let jr = jacrev(|x: Array| x.sin() * 2.0);
    let x = Array::from_slice(&[0.5, 1.0]);
    let want = [2.0 * 0.5f64.cos(), 0.0, 0.0, 2.0 * 1.0f64.cos()];
    assert_close(&f64s(&jf(x.clone()).unwrap()), &want, 1e-12, "jacfwd");
    assert_close(&f64s(&jr(x).unwrap()), &want, 1e-12, "jacrev");
}

#[test]
fn grad_errors_and_stop_gradient() {
    x64();
    let e = grad(|x: Array| x.sin())(Array::from_slice(&[1.0, 2.0])).unwrap_err();
    assert!(e.message.contains("Gradient only defined for scalar-output functions. Output had shape: [2]"), "{}", e.message);
    let e = grad(|x: Array| x.sum().astype(DType::F64))(jnp::arange(3)).unwrap_err();
    assert!(e.message.contains("grad requires real-valued inputs"), "{}", e.message);
    let g = grad(|x: Array| (stop_gradient(&x) * x.clone()).sum());
    assert_close(&f64s(&g(Array::from_slice(&[3.0, 4.0])).unwrap()), &[3.0, 4.0], 1e-12, "stop_gradient");
    let vg = value_and_grad(|(w, b): (Array, Array)| (w.clone() * w + b).sum());
    let (v, (gw, gb)) = vg((Array::from_slice(&[1.0, 2.0]), Array::from_slice(&[0.5, 0.5]))).unwrap();
    assert_eq!(v.item::<f64>().unwrap(), 6.0);
    assert_close(&f64s(&gw), &[2.0, 4.0], 0.0, "grad w");
    assert_close(&f64s(&gb), &[1.0, 1.0], 0.0, "grad b");
}

#[test]
fn mlp_trains_under_jit_grad() {
    x64();
    // y = sin(3x) on [-1, 1], a 1-16-16-1 tanh MLP, 100 steps of SGD.
    let xs: Vec<f64> = (0..32).map(|i| -1.0 + 2.0 * i as f64 / 31.0).collect();
    let ys: Vec<f64> = xs.iter().map(|x| (3.0 * x).sin()).collect();
    let x = Array::from_vec(xs.clone(), &[32, 1]).unwrap();
    let y = Array::from_vec(ys.clone(), &[32, 1]).unwrap();
    let init = |r: usize, c: usize, seed: u64| {
        let v: Vec<f64> = (0..r * c)
            .map(|i| (((i as u64 * 2654435761 + seed * 97) % 1000) as f64 / 1000.0 - 0.5) * 2.0 / (r as f64).sqrt())
            .collect();
        Array::from_vec(v, &[r, c]).unwrap()
    };
    type Params = (Array, Array, Array, Array, Array, Array);
    let mut p: Params = (init(1, 16, 1), jnp::zeros(&[16], DType::F64), init(16, 16, 2), jnp::zeros(&[16], DType::F64), init(16, 1, 3), jnp::zeros(&[1], DType::F64));
    let loss = move |(p, x, y): (Params, Array, Array)| {
        let h = (x.matmul(&p.0) + p.1).tanh();
        let h = (h.matmul(&p.2) + p.3).tanh();
        let out = h.matmul(&p.4) + p.5;
        let d = out - y;
        (d.clone() * d).mean()
    };
    let step = jit(move |(p, x, y): (Params, Array, Array)| -> Result<(Params, Array)> {
        let (l, (g, _, _)) = value_and_grad(loss)((p.clone(), x, y))?;
        let upd = |a: &Array, b: &Array| a - &(b * 0.2);
        Ok(((upd(&p.0, &g.0), upd(&p.1, &g.1), upd(&p.2, &g.2), upd(&p.3, &g.3), upd(&p.4, &g.4), upd(&p.5, &g.5)), l))
    });
    let mut losses = vec![];
    for _ in 0..100 {
        let (np, l) = step.call((p.clone(), x.clone(), y.clone())).unwrap();
        p = np;
        losses.push(l.item::<f64>().unwrap());
    }
    assert_eq!(step.cache_size(), 1, "one trace for all 100 steps");
    // The same 100 steps with hand-written backpropagation in f64 on the host.
    let want = host_mlp_sgd(&xs, &ys, [init(1, 16, 1), init(16, 16, 2), init(16, 1, 3)].map(|w| f64s(&w)), 0.2, 100);
    assert_close(&losses, &want, 1e-9, "loss curve against host backpropagation");
    let (first, last) = (losses[0], losses[99]);
    assert!(first > 0.3, "initial loss {first}");
    assert!(last < 0.1 * first, "loss fell from {first} to {last}");
}

/// `a[n×k] · b[k×m]`, row-major.
fn matmul(a: &[f64], b: &[f64], n: usize, k: usize, m: usize) -> Vec<f64> {
    (0..n * m).map(|ij| (0..k).map(|l| a[ij / m * k + l] * b[l * m + ij % m]).sum()).collect()
}

/// `a[n×k]` transposed.
fn transpose(a: &[f64], n: usize, k: usize) -> Vec<f64> {
    (0..n * k).map(|ji| a[ji % n * k + ji / n]).collect()
}

/// Losses of `steps` SGD steps of the 1-16-16-1 tanh MLP (`mlp_trains_under_jit_grad`) with
/// backpropagation written out by hand (biases start at zero).
fn host_mlp_sgd(xs: &[f64], ys: &[f64], mut w: [Vec<f64>; 3], lr: f64, steps: usize) -> Vec<f64> {
    let n = xs.len();
    let dims = [1, 16, 16, 1];
    let mut b: Vec<Vec<f64>> = dims[1..].iter().map(|&d| vec![0.0; d]).collect();
    let mut losses = vec![];
    for _ in 0..steps {
        // Forward: a[0] = x, a[l+1] = act(a[l] W[l] + b[l]) (no tanh on the last layer).
        let mut a = vec![xs.to_vec()];
        for l in 0..3 {
            let z = matmul(&a[l], &w[l], n, dims[l], dims[l + 1]);
            let z: Vec<f64> = z.iter().enumerate().map(|(i, v)| v + b[l][i % dims[l + 1]]).collect();
            a.push(if l < 2 { z.iter().map(|v| v.tanh()).collect() } else { z });
        }
        let d: Vec<f64> = a[3].iter().zip(ys).map(|(o, y)| o - y).collect();
        losses.push(d.iter().map(|v| v * v).sum::<f64>() / n as f64);
        // Backward: delta = dL/dz of layer l.
        let mut delta: Vec<f64> = d.iter().map(|v| 2.0 * v / n as f64).collect();
        for l in (0..3).rev() {
            let gw = matmul(&transpose(&a[l], n, dims[l]), &delta, dims[l], n, dims[l + 1]);
            let gb: Vec<f64> = (0..dims[l + 1]).map(|j| (0..n).map(|i| delta[i * dims[l + 1] + j]).sum()).collect();
            if l > 0 {
                let da = matmul(&delta, &transpose(&w[l], dims[l], dims[l + 1]), n, dims[l + 1], dims[l]);
                delta = da.iter().zip(&a[l]).map(|(g, h)| g * (1.0 - h * h)).collect();
            }
            w[l].iter_mut().zip(&gw).for_each(|(p, g)| *p -= lr * g);
            b[l].iter_mut().zip(&gb).for_each(|(p, g)| *p -= lr * g);
        }
    }
    losses
}

#[test]
fn grad_argnums_differentiates_only_the_chosen_positions() {
    x64();
    // f(x, w, n) = sum(sin(x) * w) * n, with n an integer array (a constant of the trace).
    let f = |(x, w, n): (Array, Array, Array)| (x.sin() * &w).sum() * n.astype(DType::F64);
    let x = Array::from_slice(&[0.5f64, -1.0, 2.0]);
    let w = Array::from_slice(&[1.5f64, 0.25, -2.0]);
    let n = Array::scalar(3i32);
    let (xs, ws) = (f64s(&x), f64s(&w));
    let (v, (gx, gw, gn)) = value_and_grad_argnums(f, &[0])((x.clone(), w.clone(), n.clone())).unwrap();
    let want_v: f64 = xs.iter().zip(&ws).map(|(a, b)| a.sin() * b).sum::<f64>() * 3.0;
    assert_close(&f64s(&v), &[want_v], 1e-12, "value");
    let fx = |xa: &Array| f64s(&f((xa.clone(), w.clone(), n.clone())))[0];
    assert_close(&f64s(&gx), &fd(&fx, &xs), 1e-6, "d/dx against finite differences");
    // Positions outside argnums are zeros of their own shapes and dtypes.
    assert_eq!((f64s(&gw), gn.dtype(), gn.to_vec::<i32>().unwrap()), (vec![0.0; 3], DType::I32, vec![0]));
    let (gx2, gw2, _) = grad_argnums(f, &[0, 1])((x.clone(), w.clone(), n.clone())).unwrap();
    assert_close(&f64s(&gx2), &f64s(&gx), 1e-12, "same d/dx");
    let fw = |wa: &Array| f64s(&f((x.clone(), wa.clone(), n.clone())))[0];
    assert_close(&f64s(&gw2), &fd(&fw, &ws), 1e-6, "d/dw against finite differences");
    // Under jit, and a position past the end is a ValueError.
    let jg = jit(move |(x, w, n): (Array, Array, Array)| grad_argnums(f, &[1])((x, w, n)));
    let (_, gw3, _) = jg.call((&x, &w, &n)).unwrap();
    assert_close(&f64s(&gw3), &f64s(&gw2), 1e-12, "jit(grad_argnums)");
    let e = grad_argnums(f, &[3])((x, w, n)).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Value);
}

#[test]
fn small_int_sums_accumulate_as_jax_does() {
    // jax 0.10.2: jnp.ones(3, int8).sum().dtype == int32 (x64 on: int64); uint8 -> uint32.
    x64();
    let s = jnp::ones(&[3], DType::I8).sum();
    assert_eq!((s.dtype(), s.to_vec::<i64>().unwrap()), (DType::I64, vec![3]));
    let s = jnp::ones(&[300], DType::U8).sum();
    assert_eq!((s.dtype(), s.to_vec::<u32>().unwrap()), (DType::U32, vec![300]));
}
