//! Interrupting the wait for a partitioned computation on 8 simulated devices (own process:
//! the interrupt flag is process-wide): the wait stops with `KeyboardInterrupt`, the
//! devices finish in the background, and the process stays sound afterwards (a fresh
//! user's session died of SIGSEGV when such a computation ended).

use jax::prelude::*;
use jaxrepl_tests::eight_cpu_devices;

#[test]
fn an_interrupted_partitioned_loop_ends_in_the_background_and_the_process_lives_on() {
    eight_cpu_devices();
    let em = make_mesh(&[4, 2], &["X", "Y"], None).unwrap();
    let w = device_put(&(jnp::ones(&[512, 512], DType::F32) * 0.001), NamedSharding::new(&em, P!("X", None)).unwrap()).unwrap();
    // The body reduces over the split dim (not shard-local): the loop is not block-wise.
    let body = |(_i, c): (Array, Array)| (c.clone() * 0.5 + c.sin()).sum_axes(&[0]).reshape(&[1, 512]) * 0.0 + c;
    let f = jit(move |w: Array| lax::fori_loop(0, 3, body, w.clone()));
    // A psum over X per iteration (two barriers of the 8 device threads each), interrupted
    // as soon as it is dispatched (it runs for seconds).
    let long = jit(move |w: Array| lax::fori_loop(0, 2_000, body, w.clone()));
    let short = f.call(&w).unwrap().to_vec::<f32>().unwrap();
    let y = long.call(&w).unwrap();
    jax::runtime::interrupt::request();
    // Ctrl-C lands while the cell is not yet waiting: the devices' collectives keep
    // running meanwhile and must leave the interrupt to the cell's wait.
    std::thread::sleep(std::time::Duration::from_millis(300));
    let e = y.block_until_ready().unwrap_err();
    assert_eq!(e.ename(), "KeyboardInterrupt", "{e}");
    // The devices were not cut part-way (a worker that took the interrupt poisoned the
    // others' collectives: wrong values, then a crash): waiting again gives the value the
    // unsharded loop computes.
    let unsharded = jnp::ones(&[512, 512], DType::F32) * 0.001;
    let want = long.call(&unsharded).unwrap().to_vec::<f32>().unwrap();
    let got = y.to_vec::<f32>().unwrap();
    let err = got.iter().zip(&want).fold(0f32, |m, (a, b)| m.max((a - b).abs()));
    assert!(err <= 1e-4 * want.iter().fold(0f32, |m, v| m.max(v.abs())), "max error {err}");
    drop(y);
    // The process lives on: later work runs and is right.
    let again = f.call(&w).unwrap().to_vec::<f32>().unwrap();
    assert_eq!(again, short);
    let z = (&w * 2.0).sum().item::<f32>().unwrap();
    assert!((z - 524.288).abs() < 0.2, "{z}");
}
