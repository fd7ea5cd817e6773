//! Interrupting a wait for a running computation (own process: the interrupt flag is
//! process-wide): the wait stops with `KeyboardInterrupt`, the message says the
//! computation runs on, and its value arrives later.

use jax::prelude::*;

#[test]
fn interrupting_a_wait_says_the_computation_runs_on_and_its_value_arrives() {
    // A loop whose trip count is an argument: compiled once on a short run, then dispatched
    // long (asynchronously: `call` returns a pending array).
    let f = jit(|(v, n): (Array, Array)| lax::fori_loop_dynamic(&Array::scalar(0i32), &n, |(_i, v): (Array, Array)| v * 0.999 + 1e-3, v));
    let v = jnp::ones(&[1024], DType::F32);
    f.call((&v, Array::scalar(10i32))).unwrap().block_until_ready().unwrap();
    let n = 2_000_000i32;
    let y = f.call((&v, Array::scalar(n))).unwrap();
    jax::runtime::interrupt::request();
    let e = y.block_until_ready().unwrap_err();
    assert_eq!(e.ename(), "KeyboardInterrupt");
    assert!(e.message.contains("keeps running in the background until it ends"), "{e}");
    assert!(e.message.contains("using its result, or work queued behind it on the same device, waits for it to end"), "{e}");
    // Work that uses the result is queued behind the loop: when its value is there, the
    // loop's is too.
    let z = (&y + 1.0).block_until_ready().unwrap();
    assert!(y.is_ready(), "a computation on the loop's result finished before the loop");
    assert!(z.to_vec::<f32>().unwrap().iter().all(|g| (g - 2.0).abs() < 1e-3));
    // The array is still usable: waiting again gives the loop's value (the fixed point of
    // v * 0.999 + 1e-3 is 1, and v starts at 1).
    let got = y.to_vec::<f32>().unwrap();
    assert!(got.iter().all(|g| (g - 1.0).abs() < 1e-3), "{:?}", &got[..4]);
}
