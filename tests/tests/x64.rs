//! `jax_enable_x64` on: float64 and int64 arrays compute in 64 bits (own process, since
//! the flag is process-wide as in JAX).

use jax::prelude::*;

#[test]
fn f64_and_i64_under_x64() {
    config::update("jax_enable_x64", true).unwrap();
    let x = Array::from_slice(&[0.1f64, 0.2, 0.3]);
    assert_eq!(x.dtype(), DType::F64);
    let f = jit(|x: Array| (x * 3.0).sin().sum());
    let got = f.call(&x).unwrap().item::<f64>().unwrap();
    let want: f64 = [0.1f64, 0.2, 0.3].iter().map(|v| (v * 3.0).sin()).sum();
    assert!((got - want).abs() < 1e-14, "{got} vs {want}");
    let i = Array::from_slice(&[1i64 << 40, 3]);
    assert_eq!(i.dtype(), DType::I64);
    assert_eq!((&i + &i).to_vec::<i64>().unwrap(), vec![1i64 << 41, 6]);
    assert_eq!(format!("{:?}", jnp::arange(2.0)), "Array([0., 1.], dtype=float64)");
    assert!(config::update("jax_no_such_flag", true).unwrap_err().message.contains("known flags"));
}
