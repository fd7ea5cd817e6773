//! Compiler options (JAX's "controlling XLA" page): per function
//! (`jit(f).compiler_options(..)`, `Lowered::compile_with`) and process-wide
//! (`JAXREPL_FLAGS`, read at the first compile: this file sets it before anything compiles,
//! so it has one test).

use jax::prelude::*;

#[test]
fn compiler_options_per_function_and_process_wide() {
    // Before the first compile of this process.
    // SAFETY: the only test of this binary; no other thread reads the environment yet.
    unsafe { std::env::set_var("JAXREPL_FLAGS", "--opt_level=1") };
    let x = Array::from_vec(vec![1.0f32, 4.0, 9.0], &[3]).unwrap();
    let want = [2.0f32, 5.0, 10.0];

    // The process-wide default applies to every compile.
    let f = jit(|x: Array| (x.clone() * x).sqrt() + 1.0);
    assert_eq!(f.call(&x).unwrap().to_vec::<f32>().unwrap(), want);
    assert_eq!(f.lower(&x).unwrap().compile().unwrap().opt_level(), 1);

    // Per-function options override it, with JAX's CompilerEffortLevel names.
    for (level, n) in [("O0", 0u8), ("O3", 3), ("CompilerEffortLevel.O2", 2), ("39", 3)] {
        let g = jit(|x: Array| (x.clone() * x).sqrt() + 1.0).compiler_options(&[("optimization_level", level)]);
        assert_eq!(g.call(&x).unwrap().to_vec::<f32>().unwrap(), want, "{level}");
        assert_eq!(g.lower(&x).unwrap().compile().unwrap().opt_level(), n, "{level}");
    }

    // Options are part of the executable-cache key: the same module at another level compiles again.
    let h0 = jit(|x: Array| x.sin() * 3.0).compiler_options(&[("opt_level", "0")]);
    let h3 = jit(|x: Array| x.sin() * 3.0).compiler_options(&[("opt_level", "3")]);
    h0.call(&x).unwrap();
    let n = jax::compile_count();
    h3.call(&x).unwrap();
    assert_eq!(jax::compile_count(), n + 1, "O3 is a new executable");
    let h0b = jit(|x: Array| x.sin() * 3.0).compiler_options(&[("opt_level", "0")]);
    h0b.call(&x).unwrap();
    assert_eq!(jax::compile_count(), n + 1, "the same module and options hit the cache");

    // An unknown option is an error at the first call, with XLA's text.
    let bad = jit(|x: Array| x + 1.0).compiler_options(&[("not_a_real_flag", "1")]);
    let e = bad.call(&x).unwrap_err();
    assert_eq!(e.to_string().lines().next().unwrap(), "ValueError: No such compile option: 'not_a_real_flag'");
    assert!(e.message.ends_with("and XLA's flag names (xla_..., accepted without effect)"), "{e}");
    // XLA's flags (any platform's, as XLA accepts them) run with a warning that they do nothing here.
    let y = jit(|x: Array| x + 1.0).compiler_options(&[("xla_gpu_enable_latency_hiding_scheduler", "true")]).call(&x).unwrap();
    assert_eq!(y.to_vec::<f32>().unwrap(), x.to_vec::<f32>().unwrap().iter().map(|v| v + 1.0).collect::<Vec<_>>());
    assert!(jax::transform::jit::warnings_shown().iter().any(|w| w == "compile option 'xla_gpu_enable_latency_hiding_scheduler' is an XLA flag; jaxrepl compiles through MLIR/LLVM, not XLA, so it has no effect here"));
    let e = jit(|x: Array| x + 1.0).compiler_options(&[("memory_fitting_level", "O7")]).call(&x).unwrap_err();
    assert!(e.to_string().contains("memory_fitting_level must be a CompilerEffortLevel"), "{e}");
    let e = jit(|x: Array| x + 1.0).compiler_options(&[("optimization_level", "O9")]).call(&x).unwrap_err();
    assert!(e.to_string().contains("optimization_level must be a CompilerEffortLevel (UNKNOWN, O0, O1, O2, O3), got 'O9'"), "{e}");
}
