//! `jax::profiler`: Chrome-trace files in JAX's layout with the engine's events,
//! annotations, `named_scope` as MLIR locations, and what `%profile` shows.
//! Profiles are process-wide, so the tests that record one take `serial()`.

use jax::prelude::*;
use std::io::Read;
use jaxrepl_tests::serial;


fn read_gz_json(path: &std::path::Path) -> serde_json::Value {
    let mut s = String::new();
    flate2::read::GzDecoder::new(std::fs::File::open(path).unwrap()).read_to_string(&mut s).unwrap();
    serde_json::from_str(&s).unwrap()
}

#[test]
fn trace_writes_chrome_json_in_jax_layout() {
    let _g = serial();
    let dir = std::env::temp_dir().join(format!("jaxrepl-profile-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let f = jit(|x: Array| (x.sin() * 2.0 + 1.0).sum()).with_name("f");
    let x = jnp::arange(64.0);
    let (v, p) = profiler::trace(&dir, || {
        let _step = profiler::step_trace_annotation("train", 3);
        let _host = Array::from_vec(vec![1.0f32; 4], &[4]).unwrap();
        f.call(&x).unwrap().to_vec::<f32>().unwrap()
    })
    .unwrap();
    let want: f64 = (0..64).map(|i| (i as f64).sin() * 2.0 + 1.0).sum();
    assert!((v[0] as f64 - want).abs() < 1e-3, "{} vs {want}", v[0]);

    // <dir>/plugins/profile/<YYYY_MM_DD_HH_MM_SS>/<host>.trace.json.gz
    let path = p.path.clone().unwrap();
    let run = path.parent().unwrap();
    assert_eq!(run.parent().unwrap(), dir.join("plugins").join("profile"));
    let ts = run.file_name().unwrap().to_str().unwrap();
    assert_eq!(ts.len(), 19, "{ts}");
    assert!(ts.chars().enumerate().all(|(i, c)| if [4, 7, 10, 13, 16].contains(&i) { c == '_' } else { c.is_ascii_digit() }), "{ts}");
    assert_eq!(path.file_name().unwrap().to_str().unwrap(), format!("{}.trace.json.gz", profiler::hostname()));

    let j = read_gz_json(&path);
    let evs = j["traceEvents"].as_array().unwrap();
    let x_events: Vec<&serde_json::Value> = evs.iter().filter(|e| e["ph"] == "X").collect();
    let named = |n: &str| x_events.iter().find(|e| e["name"] == n).copied().unwrap_or_else(|| panic!("no event {n}: {evs:?}"));
    let call = named("PjitFunction(f)");
    assert_eq!(call["cat"], "jit");
    for n in ["trace jit(f)", "lower jit(f)", "compile jit(f)", "jit(f)", "train"] {
        let e = named(n);
        assert!(e["ts"].as_f64().unwrap() >= 0.0 && e["dur"].as_f64().unwrap() >= 0.0, "{e}");
        assert!(e["pid"].is_u64() && e["tid"].is_u64(), "{e}");
    }
    // The first call traced, lowered and compiled inside the call's span.
    let (c0, c1) = (call["ts"].as_f64().unwrap(), call["ts"].as_f64().unwrap() + call["dur"].as_f64().unwrap());
    let tr = named("trace jit(f)");
    assert!(tr["ts"].as_f64().unwrap() >= c0 && tr["ts"].as_f64().unwrap() <= c1, "{tr} inside {call}");
    assert_eq!(named("train")["args"]["step_num"], "3");
    assert_eq!(named("device_put f32[4]")["cat"], "transfer");
    assert_eq!(named("device_get f32[]")["cat"], "transfer");
    // Thread names as metadata events.
    assert!(evs.iter().any(|e| e["ph"] == "M" && e["name"] == "thread_name"), "{evs:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn start_and_stop_errors_as_jax() {
    let _g = serial();
    let e = profiler::stop_trace().unwrap_err();
    assert_eq!((e.ename(), e.message.as_str()), ("RuntimeError", "No profile started"));
    let dir = std::env::temp_dir().join(format!("jaxrepl-profile2-{}", std::process::id()));
    profiler::start_trace(&dir).unwrap();
    let e = profiler::start_trace(&dir).unwrap_err();
    assert_eq!(e.message, "Profile has already been started. Only one profile may be run at a time.");
    let p = profiler::stop_trace().unwrap();
    assert!(p.path.unwrap().exists());
    std::fs::remove_dir_all(&dir).unwrap();
    // Annotations outside a profile cost nothing and change nothing.
    assert_eq!(profiler::annotate_function("h", || 1.0 + 1.0), 2.0);
}

#[test]
fn named_scope_becomes_mlir_locations_not_equations() {
    // Serial: its calls would be recorded by a profile another test is taking.
    let _g = serial();
    let f = jit(|x: Array| named_scope("my_scope", || x.sin() * 2.0)).with_name("g");
    let x = Array::from_vec(vec![0.5f32, 1.0, 2.0], &[3]).unwrap();
    let text = f.lower(&x).unwrap().as_text();
    // JAX 0.10.2, `as_text(debug_info=True)`: loc("jit(g)/my_scope/sin"(...)).
    assert!(text.contains("loc(\"jit(g)/my_scope/sin\")"), "{text}");
    assert!(text.contains("loc(\"jit(g)/my_scope/mul\")"), "{text}");
    // The jaxpr is unchanged by the scope (JAX keeps it in source info, not as equations).
    let jaxpr = make_jaxpr(|x: Array| named_scope("my_scope", || x.sin() * 2.0), &x).unwrap().to_string();
    assert_eq!(jaxpr, make_jaxpr(|x: Array| x.sin() * 2.0, &x).unwrap().to_string());
    // Nested scopes join with `/`; outside a scope nothing is located.
    let h = jit(|x: Array| named_scope("outer", || named_scope("inner", || x.cos())) + 1.0).with_name("h");
    let t = h.lower(&x).unwrap().as_text();
    assert!(t.contains("loc(\"jit(h)/outer/inner/cos\")"), "{t}");
    assert!(!t.contains("/add"), "{t}");
    let got = f.call(&x).unwrap().to_vec::<f32>().unwrap();
    for (g, v) in got.iter().zip([0.5f64, 1.0, 2.0]) {
        assert!((*g as f64 - v.sin() * 2.0).abs() < 1e-6);
    }
}

#[test]
fn profile_magic_shows_a_table_and_an_svg_timeline() {
    let _g = serial();
    let f = jit(|x: Array| x.matmul(&x)).with_name("mm");
    let x = jnp::ones(&[64, 64], DType::F32);
    let view = jax::magic::profile(|| f.call(&x)).unwrap();
    let table = view.text_repr();
    let first = table.lines().next().unwrap();
    assert!(first.starts_with("category") && first.contains("calls") && first.contains("% wall"), "{table}");
    for n in ["PjitFunction(mm)", "compile jit(mm)", "jit(mm)"] {
        assert!(table.lines().any(|l| l.contains(n)), "{n} missing from\n{table}");
    }
    assert!(table.lines().last().unwrap().contains("events on"), "{table}");
    assert!(!table.contains("nothing was traced"), "{table}");
    // Plain Rust: no event, and the table says what the profiler records.
    let plain = jax::magic::profile(|| 1 + 1).unwrap().text_repr();
    assert!(plain.contains("0 events on 0 thread(s)") && plain.contains("(nothing was traced, compiled, run or annotated"), "{plain}");
    let rich = view.rich();
    assert_eq!(rich[0].0, "image/svg+xml");
    let svg = &rich[0].1;
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"), "{svg}");
    assert!(svg.contains("<rect") && svg.contains("PjitFunction(mm)"), "{svg}");
    // A second (cached) call has no compile event.
    let view = jax::magic::profile(|| f.call(&x)).unwrap();
    assert!(view.0.events.iter().all(|e| e.cat != "compile" && e.cat != "trace"), "{:?}", view.0.events);
    assert!(view.0.events.iter().any(|e| e.name == "jit(mm)" && e.cat == "execute"));
    // An error in CALL is the magic's error.
    let bad = jit(|x: Array| x.matmul(&jnp::ones(&[3], DType::F32)));
    assert!(jax::magic::profile(|| bad.call(&x)).is_err());
    // A panic inside a profile (an eager shape error in a cell) ends it.
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| jax::magic::profile(|| x.matmul(&jnp::ones(&[3], DType::F32)))));
    assert!(panicked.is_err());
    assert!(!profiler::active());
    assert!(jax::magic::profile(|| f.call(&x)).is_ok());
}
