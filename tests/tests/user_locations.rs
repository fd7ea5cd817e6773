//! Errors name the user's line, never a line of the engine's sources (a fresh user's
//! findings): an error raised inside a `pure_callback` running in a `shard_map` body
//! (eager, and under `jit`), and errors of `grad`'s own checks under `jit(grad(f))`.

use jax::prelude::*;
use jaxrepl_tests::{eight_cpu_devices, serial};

fn raise_if_negative(args: &[Array]) -> jax::Result<Vec<Array>> {
    if args[0].to_vec::<f32>()?.iter().any(|v| *v <= 0.0) {
        return Err(jax::Error::value_error(format!("value of x is {}", args[0].to_vec::<f32>()?[0])));
    }
    Ok(vec![args[0].clone()])
}

/// The error's location as `file:line` (`None` when it has none).
fn at(e: &jax::Error) -> Option<String> {
    e.location.as_ref().map(|l| format!("{}:{}", l.file, l.line))
}

fn here(line: u32) -> Option<String> {
    Some(format!("{}:{line}", file!()))
}

#[test]
fn a_callback_error_in_a_shard_map_body_names_the_callbacks_line() {
    eight_cpu_devices();
    let _l = serial();
    let m = make_mesh(&[2], &["i"], Some(&[AxisType::Auto; 1])).unwrap();
    let line = line!() + 1;
    let sm = shard_map(|x: Array| pure_callback(raise_if_negative, &[ShapeDtypeStruct::like(&x)], &[x], None).map(|mut v| v.remove(0)), Some(&m), P!("i"), P!("i"));
    let x = Array::from_slice(&[0.0f32, 1.0]);
    let e = sm.call(&x).unwrap_err();
    assert_eq!(e.to_string(), "RuntimeError: pure_callback `raise_if_negative` failed: ValueError: value of x is 0");
    assert_eq!(at(&e), here(line), "{e:?}");
    let e = jit(move |x: Array| sm.call(x)).call(&x).unwrap_err();
    assert_eq!(e.to_string(), "RuntimeError: pure_callback `raise_if_negative` failed: ValueError: value of x is 0");
    assert_eq!(at(&e), here(line), "{e:?}");
}

#[test]
fn grad_errors_under_jit_name_the_users_line() {
    let line = line!() + 1;
    let e = jit(grad(|x: Array| x.sin())).call(&jnp::arange(3.0)).unwrap_err();
    assert_eq!(e.to_string(), "TypeError: Gradient only defined for scalar-output functions. Output had shape: [3].");
    assert_eq!(at(&e), here(line), "{e:?}");
    let line = line!() + 1;
    let e = grad(|x: Array| x.sin())(jnp::arange(3.0)).unwrap_err();
    assert_eq!(at(&e), here(line), "{e:?}");
    let line = line!() + 1;
    let e = jit(grad(|x: Array| Ok(pure_callback(raise_if_negative, &[ShapeDtypeStruct::like(&x)], &[x], None)?.remove(0).sum())))
        .call(&Array::from_slice(&[1.0f32, 2.0]))
        .unwrap_err();
    assert!(e.to_string().starts_with("ValueError: Pure callbacks do not support JVP."), "{e}");
    assert_eq!(at(&e), here(line), "{e:?}");
    // An error of the function itself keeps its own line.
    let line = line!() + 1;
    let e = jit(grad(|x: Array| Ok(jnp::matmul(&x, &jnp::ones(&[5, 6], None))?.sum()))).call(&jnp::ones(&[3, 4], None)).unwrap_err();
    assert!(e.to_string().starts_with("TypeError: dot_general requires contracting dimensions"), "{e}");
    assert_eq!(at(&e), here(line), "{e:?}");
}
