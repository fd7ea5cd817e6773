//! `jnp::tan` / `Array::tan` (JAX's `lax.tan`): values against f64 `tan`, eagerly and
//! under `jit`, in float32 and float64, and its derivative (1 + tan²) against central
//! finite differences. Enables x64 (process-wide), so it has its own file.

use jax::prelude::*;

const XS: [f64; 7] = [-1.2, -0.7, -0.1, 0.0, 0.3, 0.9, 1.4];

#[test]
fn tan_matches_f64_eagerly_and_under_jit() {
    config::update("jax_enable_x64", true).unwrap();
    let x64 = Array::from_vec(XS.to_vec(), &[XS.len()]).unwrap();
    let want: Vec<f64> = XS.iter().map(|x| x.tan()).collect();
    let eager = jnp::tan(&x64).unwrap().to_vec::<f64>().unwrap();
    let jitted = jit(|x: Array| x.tan()).call(&x64).unwrap().to_vec::<f64>().unwrap();
    for ((e, j), w) in eager.iter().zip(&jitted).zip(&want) {
        assert!((e - w).abs() <= 1e-12 * (1.0 + w.abs()), "eager {eager:?} vs {want:?}");
        assert!((j - w).abs() <= 1e-12 * (1.0 + w.abs()), "jit {jitted:?} vs {want:?}");
    }
    let x32 = Array::from_vec(XS.iter().map(|&x| x as f32).collect::<Vec<_>>(), &[XS.len()]).unwrap();
    let got32 = jit(|x: Array| jnp::tan(&x)).call(&x32).unwrap();
    assert_eq!(got32.dtype(), DType::F32);
    for (g, x) in got32.to_vec::<f32>().unwrap().iter().zip(XS) {
        let w = (x as f32 as f64).tan();
        assert!((*g as f64 - w).abs() <= 2e-6 * (1.0 + w.abs()), "f32 tan({x}) = {g}, want {w}");
    }
    // An int input promotes to float (JAX: jnp.tan(1) is float).
    let i = jnp::tan(&Array::from_vec(vec![1i32], &[1]).unwrap()).unwrap();
    assert!(i.dtype().is_float(), "{:?}", i.dtype());
    let jaxpr = make_jaxpr(|x: Array| x.tan(), &x64).unwrap().to_string();
    assert!(jaxpr.contains("tan "), "{jaxpr}");
}

#[test]
fn tan_gradient_is_one_plus_tan_squared_and_matches_finite_differences() {
    config::update("jax_enable_x64", true).unwrap();
    let f = |x: Array| x.tan().sum();
    let g = grad(f)(Array::from_vec(XS.to_vec(), &[XS.len()]).unwrap()).unwrap().to_vec::<f64>().unwrap();
    let fd = jaxrepl_tests::central_differences(|v| v.iter().map(|x| x.tan()).sum(), &XS);
    for ((got, want), x) in g.iter().zip(&fd).zip(XS) {
        assert!((got - want).abs() <= 1e-6 * (1.0 + want.abs()), "d tan({x}): {got} vs finite differences {want}");
        let exact = 1.0 + x.tan() * x.tan();
        assert!((got - exact).abs() <= 1e-12 * exact, "d tan({x}): {got} vs {exact}");
    }
    // Second derivative through the JVP rule: 2 tan (1 + tan²).
    let gg = grad(|x: Array| grad(|y: Array| y.tan().sum())(x).unwrap().sum())(Array::from_vec(vec![0.5f64], &[1]).unwrap())
        .unwrap()
        .to_vec::<f64>()
        .unwrap();
    let t = 0.5f64.tan();
    assert!((gg[0] - 2.0 * t * (1.0 + t * t)).abs() < 1e-10, "{gg:?}");
}
