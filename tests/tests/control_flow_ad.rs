//! Derivatives through control flow (own process: it turns on `jax_enable_x64`).

use jax::prelude::*;

fn fd(f: &dyn Fn(f64) -> f64, x: f64) -> f64 {
    jaxrepl_tests::central_differences(|v| f(v[0]), &[x])[0]
}

#[test]
fn derivatives_through_cond_scan_and_while() {
    config::update("jax_enable_x64", true).unwrap();
    // cond: piecewise function, both sides of the branch.
    let pw = |x: Array| lax::cond(&x.gt(0.0), |x: Array| x.sin() * 3.0, |x: Array| &x * &x, x);
    for x0 in [0.7, -1.3] {
        let g = grad(pw)(Array::scalar(x0)).unwrap().item::<f64>().unwrap();
        let want = fd(&|x| pw(Array::scalar(x)).unwrap().item::<f64>().unwrap(), x0);
        assert!((g - want).abs() < 1e-6, "cond grad at {x0}: {g} vs {want}");
    }
    // scan: a recurrence h = tanh(w*h + x) over 5 inputs, gradient w.r.t. w, under jit.
    let xs = Array::from_slice(&[0.5, -0.2, 0.1, 0.9, -0.4]);
    let xs2 = xs.clone();
    let loss = move |w: Array| -> Result<Array> {
        let w2 = w.clone();
        let (h, ys) = lax::scan(move |(h, x): (Array, Array)| {
            let h2 = (&w2 * &h + x).tanh();
            (h2.clone(), &h2 * &h2)
        }, Array::scalar(0.3f64), xs2.clone(), None, false, 1)?;
        Ok(h + ys.sum())
    };
    let l2 = loss.clone();
    let g = jit(grad(loss)).call(Array::scalar(0.8f64)).unwrap().item::<f64>().unwrap();
    let want = fd(&|w| l2(Array::scalar(w)).unwrap().item::<f64>().unwrap(), 0.8);
    assert!((g - want).abs() < 1e-6, "scan grad: {g} vs {want}");
    // fori_loop (a scan) differentiates too: d/dx of x*1.1^10; its index has the x64
    // default int type, weak (JAX 0.10.2: `~int64[]`).
    let index = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let i2 = index.clone();
    let g = grad(move |x: Array| {
        let i3 = i2.clone();
        lax::fori_loop(0, 10, move |(i, x): (Array, Array)| {
            *i3.lock().unwrap() = typeof_(&i).to_string();
            x * 1.1
        }, x)
    })(Array::scalar(2.0f64))
    .unwrap();
    assert_eq!(*index.lock().unwrap(), "~int64[]");
    assert!((g.item::<f64>().unwrap() - 1.1f64.powi(10)).abs() < 1e-9);
    // while: forward mode works, reverse mode is an error as in JAX.
    let w = |x: Array| lax::while_loop(|(i, _): (Array, Array)| i.lt(3), |(i, x): (Array, Array)| (i + 1, x.sin()), (Array::scalar(0i32), x));
    let (_, (_, t)) = jvp(w, &Array::scalar(0.5f64), &Array::scalar(1.0f64)).unwrap();
    let want = fd(&|x| x.sin().sin().sin(), 0.5);
    assert!((t.item::<f64>().unwrap() - want).abs() < 1e-6);
    let e = grad(move |x: Array| w(x).map(|(_, y)| y))(Array::scalar(0.5f64)).unwrap_err();
    assert_eq!(e.ename(), "ValueError"); // JAX's class
    assert!(e.message.contains("Reverse-mode differentiation does not work for lax.while_loop"), "{}", e.message);
}
