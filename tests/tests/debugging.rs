//! Debugging aids (JAX 201-09): `debug::print!` formatting and checks, `debug::callback`
//! under jit/vmap/grad, `jax_debug_nans`/`jax_debug_infs` naming the primitive and line,
//! `disable_jit`, tracer-leak checks. Flags are process-wide, so every test here holds
//! one lock.

use jax::prelude::*;
use std::sync::{Arc, Mutex};
use jaxrepl_tests::serial;

/// A callback that records each value it sees (as f64 vectors), in call order.
fn recorder() -> (Arc<Mutex<Vec<Vec<f64>>>>, impl Fn(&[Array]) + Send + Sync + 'static) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    (seen, move |xs: &[Array]| {
        for x in xs {
            s.lock().unwrap().push(x.to_vec::<f64>().unwrap());
        }
    })
}

#[test]
fn format_buffers_placeholders_and_precision() {
    let _l = serial();
    let x = Array::scalar(2.0f32).buffer().unwrap();
    let y = Array::scalar(0.909_297_4f32).buffer().unwrap();
    let v = jnp::arange(3.0).buffer().unwrap();
    let bufs = [(*x).clone(), (*y).clone(), (*v).clone()];
    assert_eq!(
        debug::format_buffers("x={} y={:.2} v={} {{lit}}", &bufs),
        "x=2.0 y=0.91 v=[0. 1. 2.] {lit}"
    );
    assert_eq!(debug::format_buffers("r={:?}", &bufs[2..]), "r=Array([0., 1., 2.], dtype=float32)");
    // {:.N} of an array: every element with N decimals, in numpy's brackets.
    assert_eq!(debug::format_buffers("v={:.2}", &bufs[2..]), "v=[0.00 1.00 2.00]");
    let m = Array::from_vec(vec![1.5f32, -20.25, 3.0, 4.125], &[2, 2]).unwrap().buffer().unwrap();
    assert_eq!(debug::format_buffers("{:.1}", &[(*m).clone()]), "[[  1.5 -20.2]\n [  3.0   4.1]]");
}

#[test]
fn print_argument_count_errors_come_back_from_the_traced_call() {
    let _l = serial();
    let f = jit(|x: Array| {
        debug::print!("hello", x);
        x
    });
    let e = f.call(&jnp::arange(3.0)).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Value);
    assert!(e.message.starts_with("Unused positional arguments to `debug::print!`: [f32[3]]"), "{}", e.message);
    assert!(e.location.is_some());
    let g = jit(|x: Array| {
        debug::print!("{} {}", x);
        x
    });
    let e = g.call(&jnp::arange(3.0)).unwrap_err();
    assert!(e.message.contains("has 2 placeholders but 1 argument was given"), "{}", e.message);
    let h = jit(|x: Array| {
        debug::print!("{x}", x);
        x
    });
    assert!(h.call(&jnp::arange(3.0)).unwrap_err().message.contains("unsupported placeholder \"{x}\""));
    // `ordered = true` is accepted and prints in program order.
    let k = jit(|x: Array| {
        debug::print!(ordered = true; "x: {}", x);
        x + 1.0
    });
    assert_eq!(k.call(&Array::scalar(1.0f32)).unwrap().item::<f32>().unwrap(), 2.0);
}

#[test]
fn callback_sees_values_under_jit_vmap_and_grad() {
    let _l = serial();
    // jit: one call with the runtime value; the jaxpr shows the effect.
    let (seen, cb) = recorder();
    let cb = Arc::new(cb);
    let c1 = cb.clone();
    let f = jit(move |x: Array| {
        let c = c1.clone();
        debug::callback(move |v| c(v), &[x.clone()]).unwrap();
        x.sin()
    });
    let y = f.call(&Array::scalar(2.0f32)).unwrap();
    assert!((y.item::<f32>().unwrap() as f64 - 2f64.sin()).abs() < 1e-6);
    assert_eq!(*seen.lock().unwrap(), vec![vec![2.0]]);
    assert!(f.trace(&Array::scalar(2.0f32)).unwrap().jaxpr().to_string().contains("debug_callback[callback=<debug callback> effect=Debug]"));

    // vmap: once per element, in order (JAX's `log: 0.0` … `log: 4.0`).
    seen.lock().unwrap().clear();
    let c2 = cb.clone();
    let g = vmap(move |x: Array| {
        let c = c2.clone();
        debug::callback(move |v| c(v), &[x.clone()]).unwrap();
        x * 2.0
    });
    let out = g(jnp::arange(5.0)).unwrap();
    assert_eq!(out.to_vec::<f64>().unwrap(), vec![0.0, 2.0, 4.0, 6.0, 8.0]);
    assert_eq!(*seen.lock().unwrap(), (0..5).map(|i| vec![i as f64]).collect::<Vec<_>>());

    // grad: the forward value only.
    seen.lock().unwrap().clear();
    let c3 = cb.clone();
    let d = grad(move |x: Array| {
        let c = c3.clone();
        debug::callback(move |v| c(v), &[x.clone()]).unwrap();
        x.sin()
    })(Array::scalar(1.0f32))
    .unwrap();
    assert!((d.item::<f32>().unwrap() as f64 - 1f64.cos()).abs() < 1e-6);
    assert_eq!(*seen.lock().unwrap(), vec![vec![1.0]]);
}

#[test]
fn debug_nans_names_the_primitive_and_line_in_jit_and_eager() {
    let _l = serial();
    let f = jit(|x: Array| {
        let w = x.clone() * x * -3.0;
        w.log() // the NaN comes from here
    });
    // Off: NaN is a value.
    assert!(f.call(&Array::scalar(5.0f32)).unwrap().item::<f32>().unwrap().is_nan());
    let _g = debug_nans(true);
    let e = f.call(&Array::scalar(5.0f32)).unwrap_err();
    assert_eq!(e.ename(), "FloatingPointError");
    assert_eq!(e.message, "invalid value (nan) encountered in log");
    let loc = e.location.expect("the line of w.log()");
    assert!(loc.file.ends_with("debugging.rs"), "{loc:?}");
    let src = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/debugging.rs")).unwrap();
    assert_eq!(src.lines().nth(loc.line as usize - 1).unwrap().trim(), "w.log() // the NaN comes from here");
    // A finite result passes.
    let ok = jit(|x: Array| x.log());
    assert!((ok.call(&Array::scalar(3.0f32)).unwrap().item::<f32>().unwrap() as f64 - 3f64.ln()).abs() < 1e-5);
    // Eager: the op itself fails.
    let e = std::panic::catch_unwind(|| (Array::scalar(-1.0f32)).sqrt()).map(|_| ()).unwrap_err();
    let msg = e.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(msg.contains("invalid value (nan) encountered in sqrt"), "{msg}");
    assert_eq!(jnp::log(&Array::scalar(-1.0f32)).unwrap_err().message, "invalid value (nan) encountered in log");
    drop(_g);
    assert!(jnp::log(&Array::scalar(-1.0f32)).unwrap().item::<f32>().unwrap().is_nan());
}

#[test]
fn debug_infs_in_div() {
    let _l = serial();
    let _g = debug_infs(true);
    let f = jit(|x: Array| x / 0.0);
    let e = f.call(&Array::scalar(1.0f32)).unwrap_err();
    assert_eq!(e.to_string(), "FloatingPointError: invalid value (inf) encountered in div");
    // NaN is not an Inf: 0/0 passes the inf check.
    assert!(f.call(&Array::scalar(0.0f32)).unwrap().item::<f32>().unwrap().is_nan());
}

#[test]
fn disable_jit_runs_on_concrete_values() {
    let _l = serial();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    let f = jit(move |x: Array| {
        s.lock().unwrap().push(x.is_tracer());
        x * 2.0
    });
    assert_eq!(f.call(&Array::scalar(2.0f32)).unwrap().item::<f32>().unwrap(), 4.0);
    {
        let _g = disable_jit();
        assert_eq!(f.call(&Array::scalar(3.0f32)).unwrap().item::<f32>().unwrap(), 6.0);
    }
    assert_eq!(f.call(&Array::scalar(4.0f32)).unwrap().item::<f32>().unwrap(), 8.0);
    // Traced once (tracer), then run eagerly (concrete), then the cached trace.
    assert_eq!(*seen.lock().unwrap(), vec![true, false]);
}

#[test]
fn tracer_leaks_are_found_and_a_leaked_tracer_is_an_error_later() {
    let _l = serial();
    let leaked: Arc<Mutex<Vec<Array>>> = Arc::new(Mutex::new(Vec::new()));
    let l2 = leaked.clone();
    let f = jit(move |x: Array| {
        l2.lock().unwrap().push(x.clone());
        x + 1.0
    });
    // Without the check the call works.
    assert_eq!(f.call(&Array::scalar(1.0f32)).unwrap().item::<f32>().unwrap(), 2.0);
    let l3 = leaked.clone();
    let g = jit(move |x: Array| {
        l3.lock().unwrap().push(x.clone());
        x + 1.0
    });
    {
        let _c = check_tracer_leaks();
        let e = g.call(&Array::scalar(1.0f32)).unwrap_err();
        assert_eq!(e.kind, ErrorKind::UnexpectedTracer);
        assert!(e.message.starts_with("Leaked trace of jit("), "{}", e.message);
        assert!(e.message.contains("1 of its tracers are still alive"), "{}", e.message);
        // A function that leaks nothing passes the check.
        assert_eq!(jit(|x: Array| x * 3.0).call(&Array::scalar(1.0f32)).unwrap().item::<f32>().unwrap(), 3.0);
    }
    let t = leaked.lock().unwrap()[0].clone();
    let e = jnp::add(&t, &Array::scalar(1.0f32)).unwrap_err();
    assert_eq!(e.ename(), "UnexpectedTracerError");
    assert!(e.message.starts_with("Encountered an unexpected tracer."), "{}", e.message);
    assert!(e.message.contains("with type f32[]"), "{}", e.message);
}

#[test]
fn breakpoint_reads_jdb_commands_and_prints_frame_values() {
    let _l = serial();
    use jax::debug::breakpoint::{set_io, Io};
    struct Sink(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Sink {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    // A scripted terminal: the transcript gets each prompt and the typed command.
    let out = Arc::new(Mutex::new(Vec::<u8>::new()));
    let typed = out.clone();
    let mut cmds: Vec<String> = ["p y", "pp x", "p z", "bogus", "w", "c"].iter().rev().map(|s| s.to_string()).collect();
    set_io(Some(Io {
        read_line: Box::new(move |prompt: &str| {
            let c = cmds.pop()?;
            typed.lock().unwrap().extend_from_slice(format!("{prompt}{c}\n").as_bytes());
            Some(c)
        }),
        out: Box::new(Sink(out.clone())),
    }));
    let f = jit(|x: Array| {
        let y = x.sin();
        debug::breakpoint!(x, y).unwrap(); // BREAK
        y * 2.0
    });
    let r = f.call(&Array::scalar(2.0f32)).unwrap();
    set_io(None);
    assert!((r.item::<f32>().unwrap() as f64 - 2.0 * 2f64.sin()).abs() < 1e-6);
    let text = String::from_utf8(out.lock().unwrap().clone()).unwrap();
    let src = include_str!("debugging.rs");
    let line = src.lines().position(|l| l.contains("// BREAK") && !l.contains("position")).unwrap() + 1;
    let want = format!(
        "Entering jdb:\n> tests/tests/debugging.rs:{line}\n(jdb) p y\n0.9092974\n(jdb) pp x\nArray(2., dtype=float32)\n\
         (jdb) p z\n*** NameError: name 'z' is not defined; the frame has: x, y\n(jdb) bogus\n*** Unknown command \"bogus\"; type help\n\
         (jdb) w\n> tests/tests/debugging.rs:{line}:9\n(jdb) c\n"
    );
    assert_eq!(text, want);
}
