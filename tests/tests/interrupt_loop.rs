//! An interrupt stops a Rust loop of short engine calls (own process: the interrupt flag
//! is process-wide). Each eager op and each cached jitted call polls the flag, so a loop
//! whose calls never wait still stops at its next call, and what it made stays usable.

use jax::prelude::*;
use std::time::{Duration, Instant};

/// Requests an interrupt from another thread after `ms` milliseconds (as SIGUSR2 does).
fn interrupt_after(ms: u64) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(ms));
        jax::runtime::interrupt::request();
    })
}

#[test]
fn a_loop_of_eager_ops_and_jitted_calls_stops_at_its_next_call() {
    // Cached jitted calls: the loop sees `KeyboardInterrupt` as the call's error.
    let f = jit(|a: Array| a.cos());
    let mut y = jnp::arange(8.0);
    y = f.call(&y).unwrap();
    let t = interrupt_after(200);
    let t0 = Instant::now();
    let mut calls = 0u64;
    let e = loop {
        match f.call(&y) {
            Ok(v) => y = v,
            Err(e) => break e,
        }
        calls += 1;
        assert!(t0.elapsed() < Duration::from_secs(60), "the loop was not interrupted");
    };
    t.join().unwrap();
    assert_eq!(e.ename(), "KeyboardInterrupt");
    assert!(calls > 0);
    // The flag is taken: the next call runs, and `y` is the fixed point of cos it neared.
    let z = f.call(&y).unwrap().to_vec::<f32>().unwrap();
    let yv = y.to_vec::<f32>().unwrap();
    assert!(z.iter().zip(&yv).all(|(a, b)| (a - b.cos()).abs() < 1e-6), "{z:?} {yv:?}");

    // Eager ops: an operator cannot return the error, so it panics with it (a cell's
    // panic keeps the session's variables).
    let kept = jnp::arange(4.0);
    let t = interrupt_after(200);
    let r = std::panic::catch_unwind(|| {
        let mut x = jnp::arange(8.0);
        let t0 = Instant::now();
        loop {
            x = x.sin() + 0.5;
            assert!(t0.elapsed() < Duration::from_secs(60), "the loop was not interrupted");
        }
    });
    t.join().unwrap();
    let msg = r.unwrap_err();
    let text = msg.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(text.starts_with("KeyboardInterrupt: interrupted by the user"), "{text}");
    assert_eq!(kept.to_vec::<f32>().unwrap(), [0.0, 1.0, 2.0, 3.0]);
    assert_eq!((kept.sin() * 0.0).to_vec::<f32>().unwrap(), [0.0; 4]);
}
