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
    assert!(j.contains("checkpoint["), "{j}");
    assert!(j.contains("prevent_cse=True"), "{j}");
}
