//! Host callbacks (JAX 201-07, inventory §8): `pure_callback` and `io_callback` under
//! eager, `jit`, `scan`, `vmap` (every `vmap_method`) and `grad`; dead-code elimination of
//! unused pure callbacks; errors of the callback reaching the caller naming it; a
//! callback on sharded data under `jit` called once with the global array. Values are
//! checked against f64 references; jaxprs and messages against JAX 0.10.2's text
//! (captured with `.venv-jax`). 8 devices: its own test binary.

use jax::prelude::*;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use jaxrepl_tests::{eight_cpu_devices, serial};

/// The host function of the page: sin of the operand, in its dtype.
fn host_sin(args: &[Array]) -> jax::Result<Vec<Array>> {
    let x = args[0].to_vec::<f32>()?;
    Ok(vec![Array::from_vec(x.iter().map(|v| v.sin()).collect(), &args[0].shape())?])
}

fn sin_ref(n: usize) -> Vec<f64> {
    (0..n).map(|i| (i as f64).sin()).collect()
}

fn close(a: &Array, want: &[f64]) {
    let got = a.to_vec::<f64>().unwrap();
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() < 1e-6, "{got:?} vs {want:?}");
    }
}

fn f_pure(x: Array) -> jax::Result<Array> {
    Ok(pure_callback(host_sin, &[ShapeDtypeStruct::like(&x)], &[x], Some("sequential"))?.remove(0))
}

#[test]
fn pure_callback_eager_jit_scan_vmap() {
    eight_cpu_devices();
    let _l = serial();
    let x = jnp::arange(5.0);
    close(&f_pure(x.clone()).unwrap(), &sin_ref(5));
    close(&jit(f_pure).call(&x).unwrap(), &sin_ref(5));
    // Inside scan: one call per step on a 0-d value.
    let (_, ys) = lax::scan(|(c, xi): (Array, Array)| -> jax::Result<(Array, Array)> { Ok((c, f_pure(xi)?)) }, Array::scalar(0.0f32), x.clone(), None, false, 1).unwrap();
    close(&ys, &sin_ref(5));
    close(&vmap(f_pure)(x.clone()).unwrap(), &sin_ref(5));
    // vmap of jit, 2-d.
    let m = jnp::arange(6.0).reshape(&[3, 2]);
    close(&vmap(|r: Array| jit(f_pure).call(&r))(m).unwrap(), &sin_ref(6));
}

#[test]
fn pure_callback_jaxpr_text() {
    eight_cpu_devices();
    let j = make_jaxpr(f_pure, &jnp::arange(5.0)).unwrap();
    assert_eq!(
        j.to_string(),
        "{ lambda ; a:f32[5]. let
    b:f32[5] = pure_callback[
      callback=<function host_sin>
      result_avals=(ShapedArray(float32[5]),)
      sharding=None
      vmap_method=sequential
    ] a
  in (b,) }"
    );
    let g = |x: Array| io_callback(host_sin, &[ShapeDtypeStruct::like(&x)], &[x], true).map(|mut v| v.remove(0));
    let t = make_jaxpr(g, &jnp::arange(5.0)).unwrap().to_string();
    assert!(t.contains("io_callback[\n      callback=<function host_sin>\n      ordered=True\n      result_avals=(ShapedArray(float32[5]),)\n      sharding=None\n    ] a"), "{t}");
}

static CALLS: AtomicUsize = AtomicUsize::new(0);

fn counting(args: &[Array]) -> jax::Result<Vec<Array>> {
    CALLS.fetch_add(1, Ordering::SeqCst);
    Ok(vec![args[0].clone()])
}

#[test]
fn unused_pure_callback_is_eliminated_io_callback_is_not() {
    eight_cpu_devices();
    let _l = serial();
    let x = jnp::arange(3.0);
    let used = jit(|x: Array| -> jax::Result<Array> { Ok(pure_callback(counting, &[ShapeDtypeStruct::like(&x)], &[x.clone()], None)?.remove(0) + 1.0) });
    let unused = jit(|x: Array| -> jax::Result<Array> {
        let _ = pure_callback(counting, &[ShapeDtypeStruct::like(&x)], &[x.clone()], None)?;
        Ok(x + 1.0)
    });
    CALLS.store(0, Ordering::SeqCst);
    close(&used.call(&x).unwrap(), &[1.0, 2.0, 3.0]);
    assert_eq!(CALLS.load(Ordering::SeqCst), 1);
    CALLS.store(0, Ordering::SeqCst);
    close(&unused.call(&x).unwrap(), &[1.0, 2.0, 3.0]);
    assert_eq!(CALLS.load(Ordering::SeqCst), 0, "an unused pure_callback is dead code");
    // The jaxpr still shows it (JAX eliminates it when lowering, as we do).
    assert!(unused.trace(&x).unwrap().jaxpr().to_string().contains("pure_callback["));
    let io = jit(|x: Array| -> jax::Result<Array> {
        let _ = io_callback(counting, &[ShapeDtypeStruct::like(&x)], &[x.clone()], false)?;
        Ok(x + 1.0)
    });
    CALLS.store(0, Ordering::SeqCst);
    io.call(&x).unwrap().block_until_ready().unwrap();
    jax::effects_barrier().unwrap();
    assert_eq!(CALLS.load(Ordering::SeqCst), 1, "io_callback is never eliminated");
}

#[test]
fn vmap_methods() {
    eight_cpu_devices();
    let _l = serial();
    let shapes: Arc<Mutex<Vec<Vec<Vec<usize>>>>> = Arc::default();
    let record = |shapes: Arc<Mutex<Vec<Vec<Vec<usize>>>>>| {
        move |args: &[Array]| -> jax::Result<Vec<Array>> {
            shapes.lock().unwrap().push(args.iter().map(|a| a.shape()).collect());
            // x + y on the host, broadcasting a leading 1 as numpy would.
            let (x, y) = (args[0].to_vec::<f32>()?, args[1].to_vec::<f32>()?);
            let n = x.len().max(y.len());
            let out: Vec<f32> = (0..n).map(|i| x[i % x.len()] + y[i % y.len()]).collect();
            let shape = if x.len() >= y.len() { args[0].shape() } else { args[1].shape() };
            Ok(vec![Array::from_vec(out, &shape)?])
        }
    };
    let xs = jnp::arange(6.0).reshape(&[3, 2]);
    let y = Array::from_slice(&[10.0f32, 20.0]);
    let want = [10.0, 21.0, 12.0, 23.0, 14.0, 25.0];
    for (method, seen) in [
        ("sequential", vec![vec![vec![2], vec![2]]; 3]),
        ("expand_dims", vec![vec![vec![3, 2], vec![1, 2]]]),
        ("broadcast_all", vec![vec![vec![3, 2], vec![3, 2]]]),
    ] {
        shapes.lock().unwrap().clear();
        let cb = record(shapes.clone());
        let y2 = y.clone();
        let f = move |x: Array| -> jax::Result<Array> {
            let cb = cb.clone();
            Ok(pure_callback(move |a: &[Array]| cb(a), &[ShapeDtypeStruct::like(&x)], &[x.clone(), y2.clone()], Some(method))?.remove(0))
        };
        let out = vmap(f)(xs.clone()).unwrap();
        assert_eq!(out.shape(), vec![3, 2]);
        close(&out, &want);
        assert_eq!(*shapes.lock().unwrap(), seen, "{method}");
    }
    // No vmap_method: JAX's NotImplementedError; an unknown one: ValueError.
    let f = |x: Array| pure_callback(host_sin, &[ShapeDtypeStruct::like(&x)], &[x], None).map(|mut v| v.remove(0));
    let e = vmap(f)(xs.clone()).unwrap_err();
    assert_eq!(e.to_string(), "NotImplementedError: vmap is only supported for the pure_callback primitive when vmap_method is one of 'sequential', 'sequential_unrolled', 'expand_dims', 'broadcast_all', or 'legacy_vectorized'. Got vmap_method=None.");
    let e = pure_callback(host_sin, &[], &[y.clone()], Some("vectorized")).unwrap_err();
    assert!(e.to_string().starts_with("ValueError: vmap_method must be one of the allowed methods"), "{e}");
}

#[test]
fn io_callback_vmap_and_scan() {
    eight_cpu_devices();
    let _l = serial();
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let s2 = seen.clone();
    let make = move |ordered: bool| {
        let s = s2.clone();
        move |x: Array| -> jax::Result<Array> {
            let s = s.clone();
            let cb = move |a: &[Array]| -> jax::Result<Vec<Array>> {
                s.lock().unwrap().push(format!("generating {}", a[0].aval().long()));
                Ok(vec![a[0].clone() * 2.0])
            };
            Ok(io_callback(cb, &[ShapeDtypeStruct::like(&x)], &[x.clone()], ordered)?.remove(0))
        }
    };
    let x = jnp::arange(5.0);
    close(&make(false)(x.clone()).unwrap(), &[0.0, 2.0, 4.0, 6.0, 8.0]);
    assert_eq!(*seen.lock().unwrap(), vec!["generating float32[5]"]);
    seen.lock().unwrap().clear();
    close(&vmap(make(false))(x.clone()).unwrap(), &[0.0, 2.0, 4.0, 6.0, 8.0]);
    assert_eq!(*seen.lock().unwrap(), vec!["generating float32[]"; 5]);
    let g = make(true);
    let e = vmap(move |x: Array| jit(g.clone()).call(&x))(x.clone()).unwrap_err();
    assert_eq!(e.to_string(), "ValueError: Cannot `vmap` ordered IO callback.");
    // Ordered inside scan: one call per step, in order.
    seen.lock().unwrap().clear();
    let g = make(true);
    let (_, ys) = lax::scan(move |(c, xi): (Array, Array)| -> jax::Result<(Array, Array)> { Ok((c, g(xi)?)) }, Array::scalar(0.0f32), x.clone(), None, false, 1).unwrap();
    close(&ys, &[0.0, 2.0, 4.0, 6.0, 8.0]);
    assert_eq!(*seen.lock().unwrap(), vec!["generating float32[]"; 5]);
}

#[test]
fn callbacks_are_not_differentiable() {
    eight_cpu_devices();
    let _l = serial();
    let e = grad(|x: Array| -> jax::Result<Array> { Ok(f_pure(x)?.sum()) })(jnp::arange(3.0)).unwrap_err();
    assert_eq!(e.to_string(), "ValueError: Pure callbacks do not support JVP. Please use `custom_jvp` to use callbacks while taking gradients.");
    let e = jvp(|x: Array| f_pure(x), &jnp::arange(3.0), &jnp::ones(&[3], DType::F32)).unwrap_err();
    assert!(e.to_string().contains("Pure callbacks do not support JVP"), "{e}");
    let io = |x: Array| io_callback(host_sin, &[ShapeDtypeStruct::like(&x)], &[x], false).map(|mut v| v.remove(0).sum());
    let e = grad(io)(jnp::arange(3.0)).unwrap_err();
    assert_eq!(e.to_string(), "ValueError: IO callbacks do not support JVP.");
    // A callback off the differentiated path runs and is no error (JAX: `hello`).
    CALLS.store(0, Ordering::SeqCst);
    let c = jnp::arange(3.0);
    let d = grad(move |x: Array| -> jax::Result<Array> {
        let k = io_callback(counting, &[ShapeDtypeStruct::like(&c)], &[c.clone()], false)?.remove(0);
        Ok((x.sin() + k).sum())
    })(jnp::arange(3.0))
    .unwrap();
    close(&d, &[0f64.cos(), 1f64.cos(), 2f64.cos()]);
    assert_eq!(CALLS.load(Ordering::SeqCst), 1);
}

fn raise_if_negative(args: &[Array]) -> jax::Result<Vec<Array>> {
    if args[0].to_vec::<f32>()?.iter().any(|v| *v <= 0.0) {
        return Err(jax::Error::value_error(format!("value of x is {}", args[0].to_vec::<f32>()?[0])));
    }
    Ok(vec![args[0].clone()])
}

#[test]
fn errors_inside_callbacks_name_the_callback() {
    eight_cpu_devices();
    let _l = serial();
    let f = jit(|x: Array| pure_callback(raise_if_negative, &[ShapeDtypeStruct::like(&x)], &[x], None).map(|mut v| v.remove(0)));
    let e = f.call(&Array::from_slice(&[0.0f32])).unwrap_err();
    assert_eq!(e.to_string(), "RuntimeError: pure_callback `raise_if_negative` failed: ValueError: value of x is 0");
    // Under vmap (sequential: one call per element) the first failing element's error.
    let g_line = line!() + 1;
    let g = |x: Array| pure_callback(raise_if_negative, &[ShapeDtypeStruct::like(&x)], &[x], Some("sequential")).map(|mut v| v.remove(0));
    let e = vmap(g)(Array::from_slice(&[1.0f32, 0.0, 2.0])).unwrap_err();
    assert_eq!(e.to_string(), "RuntimeError: pure_callback `raise_if_negative` failed: ValueError: value of x is 0");
    // Traced at the user's line (the closure `g` above), not at the engine's batching code
    // (fresh user F8 N-b: `traced at …/engine/src/transform/batching.rs:404`).
    let at = e.location.as_ref().expect("a traced-at location");
    assert!(at.file.ends_with("tests/callbacks.rs") && at.line == g_line, "{at:?}");
    let e = jit(vmap(g)).call(&Array::from_slice(&[1.0f32, -2.0])).unwrap_err();
    assert_eq!(e.to_string(), "RuntimeError: pure_callback `raise_if_negative` failed: ValueError: value of x is -2");
    // Fired from compiled code, the failure still names the pure_callback's line (fresh
    // user F10 F2: no line at all under jit).
    assert_eq!(e.location.as_ref().map(|l| l.line), Some(g_line), "{:?}", e.location);
    let f_line = line!() - 17;
    let e = f.call(&Array::from_slice(&[-1.0f32])).unwrap_err();
    assert_eq!(e.location.as_ref().map(|l| l.line), Some(f_line), "{:?}", e.location);
    // The session (and the jitted function) keep working after the error.
    close(&f.call(&Array::from_slice(&[3.0f32])).unwrap(), &[3.0]);
    // Eager: the same message.
    let e = pure_callback(raise_if_negative, &[ShapeDtypeStruct::new(&[1], DType::F32)], &[Array::from_slice(&[-1.0f32])], None).unwrap_err();
    assert_eq!(e.to_string(), "RuntimeError: pure_callback `raise_if_negative` failed: ValueError: value of x is -1");
    // Wrong shape and dtype, and a panic: caught, never unwinding into compiled code.
    let wrong = jit(|x: Array| pure_callback(|_: &[Array]| Ok(vec![jnp::ones(&[4], DType::F32)]), &[ShapeDtypeStruct::like(&x)], &[x], None).map(|mut v| v.remove(0)));
    let e = wrong.call(&jnp::ones(&[3], DType::F32)).unwrap_err();
    assert_eq!(e.to_string(), "RuntimeError: pure_callback `<closure>` failed: Incorrect output shape for return value #0: Expected: (3,), Actual: (4,)");
    let wrong = jit(|x: Array| pure_callback(|a: &[Array]| Ok(vec![a[0].astype(DType::I32)]), &[ShapeDtypeStruct::like(&x)], &[x], None).map(|mut v| v.remove(0)));
    let e = wrong.call(&jnp::ones(&[3], DType::F32)).unwrap_err();
    assert_eq!(e.to_string(), "RuntimeError: pure_callback `<closure>` failed: Incorrect output dtype for return value #0: Expected: float32, Actual: int32");
    let boom = jit(|x: Array| io_callback(|_: &[Array]| -> jax::Result<Vec<Array>> { panic!("boom") }, &[ShapeDtypeStruct::like(&x)], &[x], true).map(|mut v| v.remove(0)));
    let e = boom.call(&jnp::ones(&[3], DType::F32)).unwrap_err();
    assert_eq!(e.to_string(), "RuntimeError: io_callback `<closure>` failed: the callback panicked: boom");
}

#[test]
fn sharded_data_under_jit_is_one_global_call() {
    eight_cpu_devices();
    let _l = serial();
    let mesh = make_mesh(&[8], &["i"], None).unwrap();
    let x = device_put(&jnp::arange(8.0), NamedSharding::new(&mesh, P!("i")).unwrap()).unwrap();
    let seen: Arc<Mutex<Vec<Vec<usize>>>> = Arc::default();
    let s = seen.clone();
    let f = jit(move |x: Array| -> jax::Result<Array> {
        let s = s.clone();
        let cb = move |a: &[Array]| -> jax::Result<Vec<Array>> {
            s.lock().unwrap().push(a[0].shape());
            Ok(vec![a[0].clone() * 2.0])
        };
        Ok(pure_callback(cb, &[ShapeDtypeStruct::like(&x)], &[x.clone()], Some("sequential"))?.remove(0))
    });
    let y = f.call(&x).unwrap();
    close(&y, &[0.0, 2.0, 4.0, 6.0, 8.0, 10.0, 12.0, 14.0]);
    assert_eq!(*seen.lock().unwrap(), vec![vec![8]], "one call with the global array");
}

#[test]
fn a_panicking_callback_reports_only_its_error() {
    eight_cpu_devices();
    let _l = serial();
    // A hook that counts the panics carrying our marker and forwards every other panic.
    let seen = Arc::new(AtomicUsize::new(0));
    let previous = std::panic::take_hook();
    let s = seen.clone();
    std::panic::set_hook(Box::new(move |info| {
        let msg = info.payload().downcast_ref::<String>().cloned().or_else(|| info.payload().downcast_ref::<&str>().map(|m| m.to_string()));
        if msg.is_some_and(|m| m.contains("quiet-marker")) {
            s.fetch_add(1, Ordering::SeqCst);
        } else {
            previous(info);
        }
    }));
    let boom = |_: &[Array]| -> jax::Result<Vec<Array>> { panic!("quiet-marker {}", 42) };
    let f = jit(move |x: Array| pure_callback(boom, &[ShapeDtypeStruct::like(&x)], &[x], None).map(|mut v| v.remove(0)));
    let e = f.call(&jnp::ones(&[3], DType::F32)).unwrap_err();
    assert_eq!(e.to_string(), "RuntimeError: pure_callback `<closure>` failed: the callback panicked: quiet-marker 42");
    let e = pure_callback(boom, &[ShapeDtypeStruct::new(&[1], DType::F32)], &[Array::from_slice(&[1.0f32])], None).unwrap_err();
    assert_eq!(e.to_string(), "RuntimeError: pure_callback `<closure>` failed: the callback panicked: quiet-marker 42");
    // Neither panic reached the hook; a panic outside a callback still does (restored).
    assert_eq!(seen.load(Ordering::SeqCst), 0);
    assert!(std::panic::catch_unwind(|| panic!("quiet-marker outside")).is_err());
    assert_eq!(seen.load(Ordering::SeqCst), 1);
    let _ = std::panic::take_hook(); // back to the default hook
}

#[test]
fn a_callbacks_blocks_in_a_shard_map_live_on_their_devices() {
    eight_cpu_devices();
    let _l = serial();
    let mesh = make_mesh(&[4], &["i"], None).unwrap();
    let xs = device_put(&jnp::arange(8.0), NamedSharding::new(&mesh, P!("i")).unwrap()).unwrap();
    let double = |a: &[Array]| -> jax::Result<Vec<Array>> { Ok(vec![a[0].clone() * 2.0]) };
    let sm = shard_map(
        move |x: Array| -> jax::Result<Array> { Ok(pure_callback(double, &[ShapeDtypeStruct::like(&x)], &[x], None)?.remove(0)) },
        Some(&mesh),
        P!("i"),
        P!("i"),
    );
    for r in [sm.call(&xs).unwrap(), jit(move |x: Array| sm.call(x)).call(&xs).unwrap()] {
        close(&r, &[0.0, 2.0, 4.0, 6.0, 8.0, 10.0, 12.0, 14.0]);
        let shards = r.addressable_shards().unwrap();
        assert_eq!(shards.len(), 4);
        for (k, s) in shards.iter().enumerate() {
            // The block device k holds is data on device k (a callback's result is made on
            // the host, device 0, and is moved to its device).
            assert_eq!((s.device.id, s.data.devices().unwrap().iter().map(|d| d.id).collect::<Vec<_>>()), (k as u32, vec![k as u32]));
            // Committed, device 0's too (it was made there uncommitted; fresh user F8 F7).
            assert!(s.data.committed(), "shard on device {k}");
            close(&s.data, &[4.0 * k as f64, 4.0 * k as f64 + 2.0]);
        }
    }
}
