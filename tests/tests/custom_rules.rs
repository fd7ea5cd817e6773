//! custom_jvp, custom_vjp and checkpoint: the user's rules are used by differentiation,
//! values are unchanged, and checkpointed functions give the same gradients.

use jax::prelude::*;

fn x64() {
    config::update("jax_enable_x64", true).unwrap();
}

#[test]
fn custom_jvp_rule_is_used_forward_and_reverse() {
    x64();
    // log1pexp with a numerically stable derivative, as in JAX's custom_jvp tutorial.
    let f = custom_jvp(
        |x: Array| (x.exp() + 1.0).log(),
        |x: Array, t: Array| -> Result<(Array, Array)> {
            let y = (x.exp() + 1.0).log();
            let d = 1.0 - 1.0 / (x.exp() + 1.0);
            Ok((y, d * t))
        },
    );
    let x = Array::scalar(100.0f64);
    // The naive derivative exp(x)/(1+exp(x)) is nan at 1000; the rule gives 1.
    let g = grad(|x: Array| f(x))(Array::scalar(1000.0f64)).unwrap();
    assert_eq!(g.item::<f64>().unwrap(), 1.0);
    let (_, t) = jvp(|x: Array| f(x), &x, &Array::scalar(2.0f64)).unwrap();
    assert!((t.item::<f64>().unwrap() - 2.0).abs() < 1e-12);
    let v = jit(move |x: Array| f(x)).call(Array::scalar(0.0f64)).unwrap();
    assert!((v.item::<f64>().unwrap() - 2f64.ln()).abs() < 1e-12);
}

#[test]
fn custom_vjp_uses_fwd_and_bwd() {
    x64();
    // Gradient clipping: identity forward, clipped cotangent backward.
    let clip = custom_vjp(
        |x: Array| x,
        |x: Array| -> Result<(Array, ())> { Ok((x, ())) },
        |_: (), g: Array| -> Result<Array> { Ok(jnp::clip(&g, Some(-1.0), Some(1.0))?) },
    );
    let g = grad(move |x: Array| clip(x).map(|y| (y * 5.0).sum()))(Array::from_slice(&[1.0, 2.0])).unwrap();
    assert_eq!(g.to_vec::<f64>().unwrap(), vec![1.0, 1.0]);
    let c2 = custom_vjp(|x: Array| x.sin(), |x: Array| -> Result<(Array, Array)> { Ok((x.sin(), x.cos())) }, |c: Array, g: Array| -> Result<Array> { Ok(c * g) });
    let e = jvp(move |x: Array| c2(x), &Array::scalar(1.0f64), &Array::scalar(1.0f64)).unwrap_err();
    assert!(e.message.contains("can't apply forward-mode autodiff (jvp) to a custom_vjp function"), "{}", e.message);
}

#[test]
fn checkpoint_keeps_values_and_gradients() {
    x64();
    let w = Array::from_vec(vec![0.5, -0.3, 0.8, 0.1], &[2, 2]).unwrap();
    let layer = move |x: Array| x.matmul(&w).tanh().sin();
    let x0 = Array::from_vec(vec![1.0, 2.0, -1.0, 0.5], &[2, 2]).unwrap();
    let plain = grad({
        let l = layer.clone();
        move |x: Array| l(x).sum()
    })(x0.clone())
    .unwrap();
    for policy in [RematPolicy::NothingSaveable, RematPolicy::DotsSaveable, RematPolicy::EverythingSaveable] {
        let l = layer.clone();
        let c = checkpoint_with_policy(l, policy);
        let g = grad(move |x: Array| c(x).map(|y| y.sum()))(x0.clone()).unwrap();
        let (a, b) = (g.to_vec::<f64>().unwrap(), plain.to_vec::<f64>().unwrap());
        for (p, q) in a.iter().zip(&b) {
            assert!((p - q).abs() < 1e-12, "{policy:?}: {a:?} vs {b:?}");
        }
    }
    let l = layer.clone();
    let j = make_jaxpr(checkpoint(l), x0).unwrap().to_string();
    assert!(j.contains("remat2["), "{j}"); // JAX 0.10.2 names the primitive remat2
    assert!(j.contains("prevent_cse=True"), "{j}");
}

fn rows(x: &Array) -> Vec<Vec<f64>> {
    let s = x.shape();
    let v = x.to_vec::<f64>().unwrap();
    v.chunks(s[1]).map(|c| c.to_vec()).collect()
}

fn assert_rows(got: &Array, want: &[Vec<f64>], what: &str) {
    let g = rows(got);
    assert_eq!(g.len(), want.len(), "{what}");
    for (a, b) in g.iter().zip(want) {
        for (p, q) in a.iter().zip(b) {
            assert!((p - q).abs() <= 1e-12 * (1.0 + q.abs()), "{what}: {g:?} vs {want:?}");
        }
    }
}

/// vmap keeps a custom_vjp's rule: a gradient-clipping `bwd` that deliberately differs
/// from the true derivative, through `vmap(grad)`, `grad(vmap)` and `jit(vmap(grad))`,
/// against the per-example loop and the clipped formula.
#[test]
fn vmap_keeps_custom_vjp_rule() {
    x64();
    let clip = std::rc::Rc::new(custom_vjp(
        |x: Array| x,
        |x: Array| -> Result<(Array, ())> { Ok((x, ())) },
        |_: (), g: Array| -> Result<Array> { Ok(jnp::clip(&g, Some(-0.5), Some(0.5))?) },
    ));
    let w = Array::from_slice(&[0.2, 1.0, -2.0]);
    let per_example = {
        let (clip, w) = (clip.clone(), w.clone());
        move |r: Array| -> Result<Array> { Ok((clip(r.sin() * 3.0)? * &w).sum()) }
    };
    let xs = Array::from_vec(vec![0.1, 0.7, -1.2, 2.0, 0.0, 0.5, -0.3, 1.1, 3.0, 0.9, -2.2, 0.4], &[4, 3]).unwrap();
    // Cotangent w clipped to [0.2, 0.5, -0.5], times d(3 sin r) = 3 cos r (true: w * 3 cos r).
    let clipped = [0.2, 0.5, -0.5];
    let want: Vec<Vec<f64>> = rows(&xs).iter().map(|r| r.iter().zip(clipped).map(|(x, c)| c * 3.0 * x.cos()).collect()).collect();
    let looped: Vec<Vec<f64>> = rows(&xs)
        .iter()
        .map(|r| grad(per_example.clone())(Array::from_slice(r)).unwrap().to_vec::<f64>().unwrap())
        .collect();
    assert_rows(&Array::from_vec(looped.concat(), &[4, 3]).unwrap(), &want, "per-example loop");
    let vg = vmap(grad(per_example.clone()))(xs.clone()).unwrap();
    assert_rows(&vg, &want, "vmap(grad(f))");
    let pe = per_example.clone();
    let gv = grad(move |x: Array| -> Result<Array> { Ok(vmap(pe.clone())(x)?.sum()) })(xs.clone()).unwrap();
    assert_rows(&gv, &want, "grad(vmap(f))");
    let pe = per_example.clone();
    let jvg = jit(move |x: Array| vmap(grad(pe.clone()))(x)).call(&xs).unwrap();
    assert_rows(&jvg, &want, "jit(vmap(grad(f)))");
    let pe = per_example.clone();
    let jgv = jit(move |x: Array| grad(|x: Array| -> Result<Array> { Ok(vmap(pe.clone())(x)?.sum()) })(x)).call(&xs).unwrap();
    assert_rows(&jgv, &want, "jit(grad(vmap(f)))");
    // The vmapped function stays a custom_vjp_call (its values are the primal's).
    let pe = per_example.clone();
    let j = make_jaxpr(move |x: Array| vmap(pe.clone())(x), &xs).unwrap().to_string();
    assert!(j.contains("custom_vjp_call"), "{j}");
}

/// vmap keeps a custom_jvp's rule: JAX's `log1pexp`, whose naive derivative is nan at
/// x = 1000 while the rule gives 1; and a rule scaled by 2 to tell it from the truth.
#[test]
fn vmap_keeps_custom_jvp_rule() {
    x64();
    let log1pexp = std::rc::Rc::new(custom_jvp(
        |x: Array| (x.exp() + 1.0).log(),
        |x: Array, t: Array| -> Result<(Array, Array)> { Ok(((x.exp() + 1.0).log(), (1.0 - 1.0 / (x.exp() + 1.0)) * t * 2.0)) },
    ));
    let xs = Array::from_vec(vec![0.0, 1000.0, -1.0, 2.0, 0.5, 3.0], &[3, 2]).unwrap();
    let d = |x: f64| if x > 500.0 { 2.0 } else { 2.0 * (1.0 - 1.0 / (x.exp() + 1.0)) };
    let want: Vec<Vec<f64>> = rows(&xs).iter().map(|r| r.iter().map(|&x| d(x)).collect()).collect();
    let f = {
        let l = log1pexp.clone();
        move |r: Array| -> Result<Array> { Ok(l(r)?.sum()) }
    };
    let looped: Vec<f64> = rows(&xs).iter().flat_map(|r| grad(f.clone())(Array::from_slice(r)).unwrap().to_vec::<f64>().unwrap()).collect();
    assert_rows(&Array::from_vec(looped, &[3, 2]).unwrap(), &want, "per-example loop");
    assert_rows(&vmap(grad(f.clone()))(xs.clone()).unwrap(), &want, "vmap(grad(f))");
    let f2 = f.clone();
    let gv = grad(move |x: Array| -> Result<Array> { Ok(vmap(f2.clone())(x)?.sum()) })(xs.clone()).unwrap();
    assert_rows(&gv, &want, "grad(vmap(f))");
    let f3 = f.clone();
    assert_rows(&jit(move |x: Array| vmap(grad(f3.clone()))(x)).call(&xs).unwrap(), &want, "jit(vmap(grad(f)))");
    // Forward mode through the vmapped call: the rule's tangent.
    let l = log1pexp.clone();
    let (_, t) = jvp(move |x: Array| vmap(|r: Array| l(r))(x), &xs, &jnp::ones(&[3, 2], DType::F64)).unwrap();
    assert_rows(&t, &want, "jvp(vmap(f))");
}

/// vmap keeps checkpoint as checkpoint, with the same gradients as without it.
#[test]
fn vmap_keeps_checkpoint() {
    x64();
    let w = Array::from_vec(vec![0.5, -0.3, 0.8, 0.1], &[2, 2]).unwrap();
    let layer = move |x: Array| x.matmul(&w).tanh().sin().sum();
    let xs = Array::from_vec(vec![1.0, 2.0, -1.0, 0.5, 0.3, -0.7], &[3, 2]).unwrap();
    let plain = vmap(grad(layer.clone()))(xs.clone()).unwrap();
    let c = std::rc::Rc::new(checkpoint(layer.clone()));
    let c1 = c.clone();
    let j = make_jaxpr(move |x: Array| vmap(|r: Array| c1(r))(x), &xs).unwrap().to_string();
    assert!(j.contains("remat2["), "{j}"); // JAX 0.10.2 names the checkpoint primitive remat2
    let c2 = c.clone();
    let g = grad(move |x: Array| -> Result<Array> { Ok(vmap(|r: Array| c2(r))(x)?.sum()) })(xs.clone()).unwrap();
    assert_rows(&g, &rows(&plain), "grad(vmap(checkpoint(f)))");
}
