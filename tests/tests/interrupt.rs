//! Interrupts stop engine waits with `KeyboardInterrupt` and leave state usable
//! (own process: the interrupt flag is process-wide).

use jax::prelude::*;

#[test]
fn interrupt_stops_a_compile_and_the_retry_succeeds() {
    let x = jnp::arange(64.0);
    let f = jit(|x: Array| (x.tanh() * 3.0 - x.cos()).sum());
    jax::runtime::interrupt::request();
    let e = f.call(&x).unwrap_err();
    assert_eq!(e.ename(), "KeyboardInterrupt");
    // The variable and the function are intact; the retry gets a value.
    let want: f64 = (0..64).map(|i| (i as f64).tanh() * 3.0 - (i as f64).cos()).sum();
    let got = f.call(&x).unwrap().item::<f32>().unwrap() as f64;
    assert!((got - want).abs() < 1e-3 * want.abs().max(1.0), "{got} vs {want}");
    assert_eq!(x.shape(), vec![64]);
}
