//! Defects a fresh user found in the front end, each checked on real values: locations
//! in errors point at the user's line (not the engine), the `%help` table is aligned,
//! `profiler` values print on one line, config errors list every flag, `memory_analysis`
//! reports the code size of an O0 executable, and `jnp::ones`/`zeros` take JAX's default
//! dtype.

use jax::ir::SourceInfo;
use jax::prelude::*;

#[test]
fn source_info_shows_cell_lines_and_file_lines() {
    let cell = SourceInfo { file: "cell 3".into(), line: 2, column: 9 };
    assert_eq!(cell.cell(), Some(3));
    assert_eq!(cell.to_string(), "cell 3, line 2");
    assert_eq!(cell.line_label(), "cell 3, line 2");
    let file = SourceInfo { file: "src/main.rs".into(), line: 10, column: 5 };
    assert_eq!(file.cell(), None);
    assert_eq!(file.to_string(), "src/main.rs:10:5");
    assert_eq!(file.line_label(), "src/main.rs:10");
}

#[test]
fn debug_print_count_mismatch_points_at_the_callers_line() {
    let f = jit(|x: Array| {
        jax::debug::print!("{} and {}", x); // the mismatched print
        x * 2.0
    });
    let e = f.call(&jnp::arange(3.0)).unwrap_err();
    assert_eq!(e.ename(), "ValueError");
    let loc = e.location.expect("a location");
    assert!(loc.file.ends_with("frontend_fixes.rs"), "{loc:?}");
    let src = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/frontend_fixes.rs")).unwrap();
    assert!(src.lines().nth(loc.line as usize - 1).unwrap().contains("the mismatched print"), "{loc:?}");
    // Eagerly too: the error is returned by try_print_values with the caller's line.
    let e = jax::debug::try_print_values("{} {}", &[jnp::arange(2.0)]).unwrap_err();
    let loc = e.location.expect("a location");
    assert!(loc.file.ends_with("frontend_fixes.rs"), "{loc:?}");
}

#[test]
fn help_descriptions_start_in_one_column() {
    let text = jax::magic::help().0;
    let mut cols = Vec::new();
    for line in text.lines().filter(|l| l.starts_with("  %")) {
        // Usage, then at least two spaces (one after a long usage), then the description.
        let usage_end = line[2..].find("  ").map(|i| i + 2);
        let Some(end) = usage_end else { continue };
        let desc = end + line[end..].len() - line[end..].trim_start().len();
        if end - 2 <= 15 {
            cols.push((line.to_string(), desc));
        }
    }
    assert!(cols.len() >= 10, "{text}");
    for (line, c) in &cols {
        assert_eq!(*c, 18, "misaligned: {line:?}");
    }
}

#[test]
fn a_profile_prints_as_one_line() {
    let f = jit(|x: Array| x.sin().sum()).with_name("f");
    let x = jnp::arange(8.0);
    let (v, p) = profiler::profile(|| f.call(&x).unwrap()).unwrap();
    assert!((v.item::<f32>().unwrap() as f64 - (0..8).map(|i| (i as f64).sin()).sum::<f64>()).abs() < 1e-5);
    let shown = format!("{p:?}");
    assert_eq!(shown, p.to_string());
    assert_eq!(shown.lines().count(), 1, "{shown}");
    let n = p.events.len();
    let t = p.threads.len();
    assert!(n > 0 && t > 0);
    let want = format!(
        "Profile({n} event{} on {t} thread{}, in memory)",
        if n == 1 { "" } else { "s" },
        if t == 1 { "" } else { "s" }
    );
    assert_eq!(shown, want);
    assert_eq!(p.text_repr(), want);
}

#[test]
fn config_errors_list_every_flag_with_its_setter() {
    let e = config::update("jax_no_such_flag", true).unwrap_err();
    assert_eq!(e.ename(), "ValueError");
    for name in ["jax_enable_x64", "jax_debug_nans", "jax_dump_ir_to", "jax_default_matmul_precision", "jax_num_cpu_devices"] {
        assert!(e.message.contains(name), "{name} missing from: {}", e.message);
    }
    let e2 = config::update_str("jax_no_such_flag", "x").unwrap_err();
    assert_eq!(e2.message, e.message, "one list for every setter");
    for name in ["jax_persistent_cache_min_compile_time_secs", "jax_persistent_cache_min_entry_size_bytes"] {
        assert!(e.message.contains(name), "{name} missing from: {}", e.message);
    }
    // A known flag given to the wrong setter: its type and the setter that takes it.
    let wrong = config::update("jax_dump_ir_to", true).unwrap_err();
    assert_eq!(wrong.message, "config flag \"jax_dump_ir_to\" is a str: set it with config::update_str(\"jax_dump_ir_to\", \"...\")");
    let wrong = config::update_str("jax_enable_x64", "1").unwrap_err();
    assert_eq!(wrong.message, "config flag \"jax_enable_x64\" is a bool: set it with config::update(\"jax_enable_x64\", true)");
    let wrong = config::update("jax_persistent_cache_min_compile_time_secs", true).unwrap_err();
    assert_eq!(wrong.ename(), "ValueError");
    assert_eq!(
        wrong.message,
        "config flag \"jax_persistent_cache_min_compile_time_secs\" is a float (seconds): set it with config::update_float(\"jax_persistent_cache_min_compile_time_secs\", 1.0)"
    );
    let wrong = config::update("jax_persistent_cache_min_entry_size_bytes", false).unwrap_err();
    assert_eq!(
        wrong.message,
        "config flag \"jax_persistent_cache_min_entry_size_bytes\" is an int (bytes): set it with config::update_int(\"jax_persistent_cache_min_entry_size_bytes\", 0)"
    );
    let wrong = config::update_float("jax_num_cpu_devices", 4.0).unwrap_err();
    assert_eq!(wrong.message, "config flag \"jax_num_cpu_devices\" is an int: set it with config::update_int(\"jax_num_cpu_devices\", 4)");
    let wrong = config::update_int("jax_debug_nans", 1).unwrap_err();
    assert_eq!(wrong.message, "config flag \"jax_debug_nans\" is a bool: set it with config::update(\"jax_debug_nans\", true)");
    let wrong = config::update("jax_default_matmul_precision", true).unwrap_err();
    assert_eq!(
        wrong.message,
        "config flag \"jax_default_matmul_precision\" is a str: set it with config::update_str(\"jax_default_matmul_precision\", \"highest\")"
    );
}

#[test]
fn memory_analysis_reports_code_size_at_every_opt_level() {
    let f = jit(|x: Array| (x.sin() * 2.0 + 1.0).sum());
    let lowered = f.trace(&jnp::arange(16.0)).unwrap().lower().unwrap();
    for level in ["0", "1", "2", "3"] {
        let c = lowered.compile_with(&[("opt_level", level)]).unwrap();
        let size = c.memory_analysis().generated_code_size_in_bytes;
        assert!(size > 0, "opt_level {level}: generated_code_size_in_bytes = 0");
        // The same executable's assembly has instructions for that code.
        assert!(c.asm().unwrap().lines().count() > 10);
    }
    // The default compile is tiered: the O0 first tier, then the optimised one.
    let g = jit(|x: Array| (x.cos() * 3.0 - 1.0).sum());
    let c = g.trace(&jnp::arange(16.0)).unwrap().lower().unwrap().compile().unwrap();
    let first = c.memory_analysis().generated_code_size_in_bytes;
    assert!(first > 0, "tier {}: generated_code_size_in_bytes = 0", c.tier());
    if c.wait_optimized(std::time::Duration::from_secs(300)) {
        let second = c.memory_analysis().generated_code_size_in_bytes;
        assert!(second > 0, "tier {}: generated_code_size_in_bytes = 0", c.tier());
    }
}

#[test]
fn ones_and_zeros_default_to_float32_like_jax() {
    let o = jnp::ones(&[2, 3], None);
    assert_eq!((o.dtype(), o.shape().to_vec()), (DType::F32, vec![2, 3]));
    assert_eq!(o.to_vec::<f32>().unwrap(), vec![1.0; 6]);
    let z = jnp::zeros(&[4], None);
    assert_eq!((z.dtype(), z.to_vec::<f32>().unwrap()), (DType::F32, vec![0.0; 4]));
    // The explicit form is unchanged.
    let i = jnp::ones(&[2], DType::I32);
    assert_eq!((i.dtype(), i.to_vec::<i32>().unwrap()), (DType::I32, vec![1, 1]));
    // Inside a trace as well.
    let f = jit(|x: Array| x + jnp::ones(&[3], None));
    assert_eq!(f.call(&jnp::arange(3.0)).unwrap().to_vec::<f32>().unwrap(), vec![1.0, 2.0, 3.0]);
}

/// The line of this file holding `marker` (1-based).
fn line_of(marker: &str) -> u32 {
    let src = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/frontend_fixes.rs")).unwrap();
    let hits: Vec<usize> = src.lines().enumerate().filter(|(_, l)| l.contains(marker) && !l.contains("line_of(") && !l.contains("located_at(")).map(|(i, _)| i + 1).collect();
    assert_eq!(hits.len(), 1, "marker {marker:?} on lines {hits:?}");
    hits[0] as u32
}

fn located_at(e: &Error, marker: &str) {
    let loc = e.location.as_ref().unwrap_or_else(|| panic!("no location: {e}"));
    assert!(loc.file.ends_with("frontend_fixes.rs"), "{loc:?}");
    assert_eq!(loc.line, line_of(marker), "{e}");
}

#[test]
fn argument_checks_before_bind_carry_the_users_line() {
    // An axis out of range is found before the primitive is bound: the error still names
    // the line, through the method (which cannot return Result) and through jnp's `?`.
    let f = jit(|x: Array| x.sum_axes(&[1])); // axis-method
    let e = f.call(jnp::arange(3.0)).unwrap_err();
    assert_eq!(e.to_string(), "ValueError: sum: axis 1 is out of bounds for array of dimension 1");
    located_at(&e, "// axis-method");
    let g = jit(|x: Array| -> Result<Array> {
        let y = jnp::sum(&x, Some(&[-2]))?; // axis-fn
        Ok(y)
    });
    let e = g.call(jnp::arange(3.0)).unwrap_err();
    assert_eq!(e.message, "sum: axis -2 is out of bounds for array of dimension 1");
    located_at(&e, "// axis-fn");
    // Eagerly, jnp's Result carries it too.
    let e = jnp::max(&jnp::arange(3.0), Some(&[3])).unwrap_err(); // axis-eager
    located_at(&e, "// axis-eager");
    // The function still works on valid input: the sum of rows of [[0,1,2],[3,4,5]].
    let ok = f.call(jnp::reshape(&jnp::arange(6.0), &[2, 3]).unwrap()).unwrap();
    assert_eq!(ok.to_vec::<f32>().unwrap(), vec![3.0, 12.0]);
}

#[test]
fn tracer_bool_conversion_names_the_conversions_line_and_the_function() {
    let h = jit(|x: Array| -> Result<Array> {
        let y = x.sin();
        if y.sum().gt(0.0).to_bool()? { Ok(y) } else { Ok(x) } // the bool conversion
    });
    let e = h.call(&jnp::arange(3.0)).unwrap_err();
    assert_eq!(e.ename(), "TracerBoolConversionError");
    located_at(&e, "// the bool conversion");
    // The message keeps JAX's "while tracing the function <lambda> at LINE".
    assert!(e.message.contains("The error occurred while tracing the function <lambda> at "), "{e}");
    let fn_line = line_of("let h = jit(|x: Array| -> Result<Array> {");
    assert!(e.message.contains(&format!("frontend_fixes.rs:{fn_line}")), "{e}");
    // item() and to_vec() of a tracer: ConcretizationTypeError at their own lines.
    let k = jit(|x: Array| -> Result<Array> {
        let _v: f32 = x.sum().item()?; // item of a tracer
        Ok(x)
    });
    let e = k.call(&jnp::arange(3.0)).unwrap_err();
    assert_eq!(e.ename(), "ConcretizationTypeError");
    located_at(&e, "// item of a tracer");
    let k2 = jit(|x: Array| -> Result<Array> {
        let _v = x.to_vec::<f32>()?; // to_vec of a tracer
        Ok(x)
    });
    let e = k2.call(&jnp::arange(3.0)).unwrap_err();
    located_at(&e, "// to_vec of a tracer");
}

#[test]
fn matmul_shape_mismatch_reads_like_jaxs_dot_general_error() {
    const JAX: &str = "TypeError: dot_general requires contracting dimensions to have the same shape, got (4,) and (5,).";
    let a = jnp::ones(&[3, 4], None);
    let b = jnp::ones(&[5, 6], None);
    let e = jnp::matmul(&a, &b).unwrap_err(); // eager matmul
    assert_eq!(e.to_string(), JAX);
    located_at(&e, "// eager matmul");
    let e = jnp::dot(&jnp::ones(&[4], None), &jnp::ones(&[5], None)).unwrap_err();
    assert_eq!(e.to_string(), JAX);
    let m = jit(|(a, b): (Array, Array)| a.matmul(&b)); // jitted matmul
    let e = m.call((&a, &b)).unwrap_err();
    assert_eq!(e.to_string(), JAX);
    located_at(&e, "// jitted matmul");
    // lax.dot_general itself: the same texts as JAX's shape rule, batch dims first.
    let e = lax::dot_general(&a, &b, (&[1], &[0]), (&[], &[]), None).unwrap_err();
    assert_eq!(e.to_string(), JAX);
    let e = lax::dot_general(&jnp::ones(&[2, 3, 4], None), &jnp::ones(&[3, 4, 5], None), (&[2], &[1]), (&[0], &[0]), None).unwrap_err();
    assert_eq!(
        e.to_string(),
        "TypeError: dot_general requires lhs batch dimensions and rhs batch dimensions to have the same shape, got (2,) and (3,)."
    );
    // Matching shapes still multiply: ones(3,4) @ ones(4,2) is all 4s.
    let ok = jnp::matmul(&a, &jnp::ones(&[4, 2], None)).unwrap();
    assert_eq!(ok.to_vec::<f32>().unwrap(), vec![4.0; 6]);
}

#[test]
fn magics_show_the_error_of_a_call_that_fails_to_trace() {
    // `%jaxpr f.call(&x)` on a function whose trace fails gives the call's own error (with
    // the user's line), not "the expression made no jitted call".
    let f = jit(|x: Array| x.sum_axes(&[5])); // magic-trace-error
    let x = jnp::ones(&[4, 5], None);
    let alone = f.call(&x).unwrap_err();
    for e in [
        jax::magic::jaxpr(|| f.call(&x)).unwrap_err(),
        jax::magic::lower(|| f.call(&x)).unwrap_err(),
        jax::magic::cost(|| f.call(&x)).unwrap_err(),
    ] {
        assert_eq!(e, alone);
        assert_eq!(e.to_string(), "ValueError: sum: axis 5 is out of bounds for array of dimension 2");
        located_at(&e, "// magic-trace-error");
    }
    // An expression with no jitted call still says so; a later good call is shown.
    let e = jax::magic::jaxpr(|| 1 + 1).unwrap_err();
    assert!(e.message.contains("made no jitted call"), "{e}");
    let g = jit(|x: Array| x.sum_axes(&[1]));
    assert!(jax::magic::jaxpr(|| g.call(&x)).unwrap().to_string().contains("reduce_sum"));
}
