//! Slow-compilation diagnostics (JAX 201-10): equation counts per source line, the
//! unrolled-loop warning, IR dumps per stage (`jax_dump_ir_to`), and `%explain`'s one-line
//! verdict per cache layer with the re-definition hint. Flags are process-wide, so every
//! test here holds one lock.

use jax::prelude::*;
use jaxrepl_tests::serial;

const STEPS: usize = 300;

/// JAX's `unrolled_loop`: a Rust loop adds 1 per step, so the trace has one `add` per step.
fn unrolled(x: Array) -> Array {
    let mut y = x;
    for _ in 0..STEPS {
        y = y + 1.0; // UNROLLED
    }
    y
}

/// A loop body of three lines: each is traced once per step.
fn unrolled_body(x: Array) -> Array {
    let mut y = x;
    for _ in 0..150 {
        y = y.sin(); // BODY FIRST
        y = y * 2.0;
        y = y + 1.0; // BODY LAST
    }
    y.sum()
}

fn line_of(marker: &str) -> usize {
    let src = include_str!("slow_compilation.rs");
    src.lines().position(|l| l.contains(marker) && !l.contains("line_of")).expect("marker") + 1
}

#[test]
fn eqn_counts_per_line_and_unrolled_loop_warning() {
    let _l = serial();
    let x = jnp::zeros(&[4], DType::F32);
    let before = jax::transform::jit::warnings_issued().len();
    let f = jit(unrolled);
    let y = f.call(&x).unwrap();
    assert_eq!(y.to_vec::<f64>().unwrap(), vec![STEPS as f64; 4]);
    let line = line_of("// UNROLLED");
    let counts = jax::magic::eqn_counts(|| f.call(&x)).unwrap().0;
    let file = "tests/tests/slow_compilation.rs";
    assert_eq!(
        counts,
        format!("jit(unrolled): {STEPS} equations\n    eqns   share  line\n     {STEPS} 100.00%  {file}:{line}\n")
    );
    let warnings: Vec<String> = jax::transform::jit::warnings_issued()[before..].to_vec();
    let w = warnings.iter().find(|w| w.contains("unrolled")).expect("an unrolled-loop warning");
    assert!(w.starts_with(&format!("tracing jit(unrolled) staged {STEPS} of its {STEPS} equations at {file}:{line}:")), "{w}");
    assert!(w.contains("Use lax::fori_loop or lax::scan"), "{w}");
    // A re-trace (another shape) warns the same: recorded, but shown only the first time
    // (Python's default warning filter; in a session, only in the cell that caused it).
    assert_eq!(jax::transform::jit::warnings_shown().iter().filter(|s| *s == w).count(), 1);
    let issued = |w: &String| jax::transform::jit::warnings_issued().iter().filter(|s| *s == w).count();
    let n = issued(w);
    f.call(&jnp::zeros(&[5], DType::F32)).unwrap();
    assert_eq!(issued(w), n + 1);
    assert_eq!(jax::transform::jit::warnings_shown().iter().filter(|s| *s == w).count(), 1);

    // A body of three lines: the warning counts all of them and names their range.
    let before = jax::transform::jit::warnings_issued().len();
    let h = jit(unrolled_body);
    h.call(&x).unwrap();
    let (first, last) = (line_of("// BODY FIRST"), line_of("// BODY LAST"));
    let warnings: Vec<String> = jax::transform::jit::warnings_issued()[before..].to_vec();
    let w = warnings.iter().find(|w| w.contains("unrolled")).expect("an unrolled-loop warning");
    assert!(
        w.starts_with(&format!("tracing jit(unrolled_body) staged 450 of its 451 equations at {file}:{first}-{last}: a Rust loop around those lines")),
        "{w}"
    );

    // Traced by make_jaxpr, the warning names make_jaxpr (not a jit the user never wrote).
    let before = jax::transform::jit::warnings_issued().len();
    make_jaxpr(unrolled_body, &x).unwrap();
    let warnings: Vec<String> = jax::transform::jit::warnings_issued()[before..].to_vec();
    let w = warnings.iter().find(|w| w.contains("unrolled")).expect("an unrolled-loop warning");
    assert!(w.starts_with("tracing make_jaxpr(unrolled_body) staged 450 of its 451 equations"), "{w}");

    // The same with fori_loop: the body is traced once, one scan equation, no warning.
    let before = jax::transform::jit::warnings_issued().len();
    let g = jit(|x: Array| lax::fori_loop(0, STEPS as i32, |(_, y): (Array, Array)| y + 1.0, x));
    assert_eq!(g.call(&x).unwrap().to_vec::<f64>().unwrap(), vec![STEPS as f64; 4]);
    let j = g.trace(&x).unwrap().jaxpr().clone();
    assert_eq!(j.jaxpr.eqns.len(), 1);
    assert_eq!(j.jaxpr.eqns[0].primitive.name(), "scan");
    // The scan, and in its body the loop counter's add and the user's add.
    let c = debug::eqn_counts("g", &j.jaxpr);
    assert_eq!(c.total, 3);
    // The loop counter's add (staged by the engine) counts at the user's fori_loop line.
    assert!(c.rows.iter().all(|(l, _)| !l.contains("engine/src")), "{c}");
    assert!(jax::transform::jit::warnings_issued()[before..].iter().all(|w| !w.contains("unrolled")));
}

#[test]
fn dump_ir_writes_one_file_per_stage() {
    let _l = serial();
    let dir = std::env::temp_dir().join(format!("jaxrepl-dump-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    config::update_str("jax_dump_ir_to", dir.to_str().unwrap()).unwrap();
    let f = jit(|x: Array| (x.sin() * 2.0).sum()).with_name("dumped_fn");
    let y = f.call(&jnp::arange(8.0)).unwrap();
    config::update_str("jax_dump_ir_to", "").unwrap();
    let want: f64 = (0..8).map(|i| (i as f64).sin() * 2.0).sum();
    assert!((y.item::<f32>().unwrap() as f64 - want).abs() < 1e-5);
    let mut names: Vec<String> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    names.retain(|n| n.contains("jit_dumped_fn"));
    names.sort();
    let stem = names[0].split('.').next().unwrap().trim_end_matches("_compiled").to_string();
    assert!(stem.starts_with("jax_ir") && stem.ends_with("_jit_dumped_fn"), "{names:?}");
    assert_eq!(
        names,
        vec![format!("{stem}.eqn_count.txt"), format!("{stem}.jaxpr.txt"), format!("{stem}_compiled.mlir"), format!("{stem}_lowered.mlir")]
    );
    let read = |n: &str| std::fs::read_to_string(dir.join(n)).unwrap();
    assert_eq!(read(&format!("{stem}.jaxpr.txt")), f.trace(&jnp::arange(8.0)).unwrap().jaxpr().to_string());
    assert!(read(&format!("{stem}_lowered.mlir")).contains("func.func public @main"));
    let n = f.trace(&jnp::arange(8.0)).unwrap().jaxpr().jaxpr.eqns.len();
    let counts = read(&format!("{stem}.eqn_count.txt"));
    assert!(counts.starts_with(&format!("jit(dumped_fn): {n} equations\n")), "{counts}");
    assert!(!read(&format!("{stem}_compiled.mlir")).is_empty());
    // Unknown names are a clear error.
    assert!(config::update_str("jax_dump_ir_too", "x").unwrap_err().message.contains("known flags"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn explain_gives_one_verdict_line_per_call_with_the_redefinition_hint() {
    let _l = serial();
    jax::transform::explain::clear();
    let x = jnp::arange(3.0);
    for _ in 0..2 {
        let f = jit(|x: Array| x * 3.0 + 1.0); // REDEFINED
        f.call(&x).unwrap();
    }
    let report = jax::magic::explain().0;
    let verdicts: Vec<&str> = report.lines().filter(|l| l.contains("  trace: ")).collect();
    assert_eq!(verdicts.len(), 2, "{report}");
    // First: new function, compiled; second: same line again, identical module reused.
    assert!(verdicts[0].contains("trace: miss (never seen function), traced in "), "{report}");
    assert!(verdicts[0].contains("| executable: miss (new lowered module), lowered+compiled in "), "{report}");
    assert!(verdicts[0].ends_with("| persistent: off (jax_compilation_cache_dir is not set)"), "{report}");
    assert!(verdicts[1].contains("re-defined in a loop? define it once outside"), "{report}");
    assert!(verdicts[1].contains("| executable: hit (identical module compiled before), 0 ms | persistent: not consulted"), "{report}");
    assert!(report.contains("being re-defined repeatedly, preventing caching?"), "{report}");
    let line = line_of("// REDEFINED");
    assert!(report.contains(&format!("defined at tests/tests/slow_compilation.rs:{line}")), "{report}");
}

#[test]
fn short_reason_summarises_type_changes() {
    let r = "TRACING CACHE MISS at a.rs:1:2:\n  for f defined at a.rs:1\n  all previously seen cache keys differ. For the closest previous key:\n  different input types:\n  * at args[0], now f32[3] and before i32[3]";
    assert_eq!(jax::transform::explain::short_reason(r), "different input types: at args[0], now f32[3] and before i32[3]");
}
