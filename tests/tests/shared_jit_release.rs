//! Dropping an executable removes its code from the process-wide JIT
//! (`compile::live_code_count`). The only test in its binary: no other test compiles
//! while it counts.

use jax::prelude::*;
use jax::transform::pipeline::clear_executable_cache;

#[test]
fn dropped_executables_remove_their_code_from_the_shared_jit() {
    let x = Array::from_vec(vec![0.25f32; 8], &[8]).unwrap();
    let base = jax::compile::live_code_count();
    // O0 without tiering: one executable (no background tier) per function.
    let kept: Vec<_> = (0..50)
        .map(|i| {
            let c = i as f64 * 0.5 + 1.0;
            jit(move |v: Array| v * c + 1.0).lower(&x).unwrap().compile_with(&[("opt_level", "0")]).unwrap()
        })
        .collect();
    for (i, c) in kept.iter().enumerate() {
        let want = 0.25 * (i as f32 * 0.5 + 1.0) + 1.0;
        assert_eq!(c.call(&x).unwrap().to_vec::<f32>().unwrap()[0], want, "executable {i}");
    }
    assert_eq!(jax::compile::live_code_count(), base + 50);
    drop(kept);
    clear_executable_cache();
    assert_eq!(jax::compile::live_code_count(), base, "code left in the JIT after every executable dropped");
}
