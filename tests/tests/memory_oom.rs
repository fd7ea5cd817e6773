//! The memory limit: `XLA_CLIENT_MEM_FRACTION` read as JAX reads it, and an allocation
//! past the limit is a `RESOURCE_EXHAUSTED` error (never an abort) that names the
//! allocation, its size, what is live and the fixes; the session goes on.
//! Own process with one test: the environment is read once, the limit is process-wide.

use jax::prelude::*;
use jax::runtime::memory;

#[test]
fn fraction_sets_the_limit_and_oom_is_an_error() {
    // SAFETY: set before any engine use, in a test binary with a single test.
    unsafe { std::env::set_var("XLA_PYTHON_CLIENT_MEM_FRACTION", ".50") };
    let c = memory::allocator_config();
    assert_eq!(c.mem_fraction, Some(0.5));
    assert_eq!(c.warnings, vec!["XLA_PYTHON_CLIENT_MEM_FRACTION is deprecated; use XLA_CLIENT_MEM_FRACTION instead"]);
    let half = (memory::machine_memory_bytes() as f64 * 0.5) as usize;
    assert_eq!(memory_stats().bytes_limit, half);

    // A limit 10 MiB above what is in use: two 4 MiB outputs fit, a third does not.
    let n = 1_000_000;
    let x = Array::from_vec(vec![1.0f32; n], &[n]).unwrap();
    memory::set_bytes_limit(Some(memory_stats().bytes_in_use + (10 << 20))).unwrap();
    let f = jit(|x: Array| x + 1.0).with_name("step");
    let a = f.call(&x).unwrap();
    let b = f.call(&x).unwrap();
    let e = f.call(&x).unwrap_err();
    assert_eq!(e.ename(), "RuntimeError");
    let first = e.message.lines().next().unwrap();
    assert_eq!(
        first,
        "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 4194304 bytes (4.00 MiB) for an output f32[1000000] at jit(step)."
    );
    assert!(e.message.contains("  jit(step): 8.00 MiB in 2 buffers"), "{}", e.message);
    for fix in ["donate_argnums", "checkpoint", "smaller batch", "XLA_CLIENT_MEM_FRACTION"] {
        assert!(e.message.contains(fix), "{fix}: {}", e.message);
    }
    // Host data past the limit fails the same way.
    let e = Array::from_vec(vec![0.0f32; n], &[n]).unwrap_err();
    assert!(e.message.starts_with("RESOURCE_EXHAUSTED") && e.message.contains("from host data at device_put"), "{}", e.message);
    // So do the creation functions (they used to bypass the limit), before allocating:
    // the panic carries the error (an eager `jnp` function returns an Array).
    let big = std::panic::catch_unwind(|| jnp::ones(&[4000, 4000], None)).unwrap_err();
    let msg = big.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(
        msg.starts_with("RuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate ")
            && msg.lines().next().unwrap().ends_with(" for an array f32[4000,4000] from host values at device_put."),
        "{msg}"
    );
    // A size no machine has is the same error, not an abort of the process.
    memory::set_bytes_limit(None).unwrap();
    let huge = std::panic::catch_unwind(|| jnp::zeros(&[200_000, 200_000], None)).unwrap_err();
    let msg = huge.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(msg.contains("RESOURCE_EXHAUSTED") && msg.contains("for an array f32[200000,200000] from host values"), "{msg}");
    memory::set_bytes_limit(Some(memory_stats().bytes_in_use + (2 << 20))).unwrap();
    // Nothing was lost: freeing one output makes room again.
    assert_eq!(a.to_vec::<f32>().unwrap()[0], 2.0);
    drop(a);
    let c = f.call(&b).unwrap();
    assert_eq!(c.to_vec::<f32>().unwrap()[n - 1], 3.0);
    assert!(memory::set_bytes_limit(Some(0)).is_err());
    memory::set_bytes_limit(None).unwrap();
    assert_eq!(memory_stats().bytes_limit, half);
}
