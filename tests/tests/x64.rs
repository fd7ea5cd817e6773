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

#[test]
fn explicit_64_bit_dtypes_are_kept_without_warning_under_x64() {
    config::update("jax_enable_x64", true).unwrap();
    let before = jax::transform::jit::warnings_issued().len();
    let z = jnp::zeros(&[2], DType::F64);
    assert_eq!(z.dtype(), DType::F64);
    let a = jnp::arange_dtype(0.0, 3.0, 1.0, DType::I64).unwrap();
    assert_eq!((a.dtype(), a.to_vec::<i64>().unwrap()), (DType::I64, vec![0, 1, 2]));
    let l = jnp::linspace_dtype(0.0, 1.0, 3, DType::F64).unwrap();
    assert_eq!((l.dtype(), l.to_vec::<f64>().unwrap()), (DType::F64, vec![0.0, 0.5, 1.0]));
    assert_eq!(jnp::eye(2, None, 0, DType::F64).unwrap().dtype(), DType::F64);
    assert_eq!(jnp::zeros_like(&z, Some(DType::I64)).dtype(), DType::I64);
    let x = Array::from_slice(&[0.1f32, 0.2]);
    let y = x.astype(DType::F64);
    assert_eq!((y.dtype(), y.to_vec::<f64>().unwrap()), (DType::F64, vec![0.1f32 as f64, 0.2f32 as f64]));
    let j = make_jaxpr(|x: Array| x.astype(DType::F64), &x).unwrap();
    assert_eq!(j.to_string(), "{ lambda ; a:f32[2]. let\n    b:f64[2] = convert_element_type[new_dtype=float64 weak_type=False] a\n  in (b,) }");
    let w: Vec<String> = jax::transform::jit::warnings_issued()[before..].iter().filter(|w| w.contains("truncated")).cloned().collect();
    assert!(w.is_empty(), "{w:?}");
}

#[test]
fn f64_row_max_and_min_keep_nan_and_signed_zero() {
    // f64 row reductions of max/min use llvm.intr.maximum/minimum (lower::structured):
    // NaN propagates, max(-0, +0) = +0, min = -0; rows of odd length.
    config::update("jax_enable_x64", true).unwrap();
    let n = 101;
    let mut v: Vec<f64> = (0..3 * n).map(|i| ((i * 37 % 101) as f64 - 50.0) * 1.25).collect();
    v[n + 40] = f64::NAN;
    v[2 * n..3 * n].fill(-0.0);
    v[2 * n + 77] = 0.0;
    let x = Array::from_vec(v.clone(), &[3, n]).unwrap();
    assert_eq!(x.dtype(), DType::F64);
    let f = jit(|x: Array| (jnp::max(&x, Some(&[1])).unwrap(), jnp::min(&x, Some(&[1])).unwrap()));
    let (mx, mn) = f.call(&x).unwrap();
    let (mx, mn) = (mx.to_vec::<f64>().unwrap(), mn.to_vec::<f64>().unwrap());
    assert_eq!((mx[0], mn[0]), (50.0 * 1.25, -50.0 * 1.25));
    assert!(mx[1].is_nan() && mn[1].is_nan(), "{mx:?} {mn:?}");
    assert!(mx[2] == 0.0 && mx[2].is_sign_positive(), "{mx:?}");
    assert!(mn[2] == 0.0 && mn[2].is_sign_negative(), "{mn:?}");
}
