//! End-to-end tests of the engine's jit path through real MLIR compilation: results
//! against an f64 reference, jaxpr text against JAX's format, caches and their
//! explanations, AOT stages, errors.

use jax::prelude::*;

fn close(got: &[f64], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "length: got {got:?} want {want:?}");
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() <= tol * (1.0 + w.abs()), "got {got:?} want {want:?}");
    }
}

#[test]
fn jit_sin_matches_f64_reference_and_prints_like_jax() {
    let x = jnp::arange(8.0);
    let f = jit(|x: Array| x.sin() * 2.0 + 1.0);
    let y = f.call(&x).unwrap();
    let want: Vec<f64> = (0..8).map(|i| (i as f64).sin() * 2.0 + 1.0).collect();
    close(&y.to_vec::<f64>().unwrap(), &want, 1e-6);
    assert_eq!(y.dtype(), DType::F32);
    assert_eq!(
        format!("{y:?}"),
        "Array([ 1.        ,  2.682942  ,  2.818595  ,  1.28224   , -0.513605  ,\n       -0.9178486 ,  0.44116902,  2.3139732 ], dtype=float32)"
    );
    let j = f.trace(&x).unwrap();
    expect_test::expect![[r#"
        { lambda ; a:f32[8]. let
            b:f32[8] = sin a
            c:f32[8] = mul b 2.0:f32[]
            d:f32[8] = add c 1.0:f32[]
          in (d,) }"#]]
    .assert_eq(&j.jaxpr().to_string());
}

#[test]
fn two_args_tuple_and_weak_int_scalars() {
    let f = jit(|(x, y): (Array, Array)| 2 * x + y);
    let r = f.call((3, 4)).unwrap();
    assert_eq!(format!("{r:?}"), "Array(10, dtype=int32, weak_type=True)");
    expect_test::expect![[r#"
        { lambda ; a:i32[] b:i32[]. let
            c:i32[] = mul 2:i32[] a
            d:i32[] = add c b
          in (d,) }"#]]
    .assert_eq(&f.trace((3, 4)).unwrap().jaxpr().to_string());
}

#[test]
fn trace_cache_hits_and_retraces_on_new_shape() {
    let f = jit(|x: Array| x * 3.0);
    f.call(&jnp::arange(4.0)).unwrap();
    f.call(&jnp::arange(4.0)).unwrap();
    assert_eq!(f.cache_size(), 1);
    f.call(&jnp::arange(5.0)).unwrap();
    assert_eq!(f.cache_size(), 2);
}

#[test]
fn identical_function_redefined_does_not_recompile() {
    let x = jnp::arange(16.0);
    let f1 = jit(|x: Array| (x.cos() - 0.25) * 7.0);
    f1.call(&x).unwrap().block_until_ready().unwrap();
    let before = jax::compile_count();
    let f2 = jit(|x: Array| (x.cos() - 0.25) * 7.0);
    let y = f2.call(&x).unwrap();
    assert_eq!(jax::compile_count(), before, "an identical lowered module must hit the executable cache");
    let want: Vec<f64> = (0..16).map(|i| ((i as f64).cos() - 0.25) * 7.0).collect();
    close(&y.to_vec::<f64>().unwrap(), &want, 1e-5);
}

#[test]
fn side_effect_runs_only_while_tracing() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static TRACES: AtomicUsize = AtomicUsize::new(0);
    let f = jit(|x: Array| {
        TRACES.fetch_add(1, Ordering::SeqCst);
        x + 1.0
    });
    for _ in 0..3 {
        f.call(&jnp::arange(3.0)).unwrap();
    }
    assert_eq!(TRACES.load(Ordering::SeqCst), 1);
}

#[test]
fn bool_conversion_of_tracer_is_an_error_naming_the_argument() {
    let f = jit(|x: Array| -> Result<Array> {
        if x.gt(0.0).sum().gt(0).to_bool()? { Ok(x.clone()) } else { Ok(-x) }
    });
    let e = f.call(&jnp::arange(3.0)).unwrap_err();
    assert_eq!(e.ename(), "TracerBoolConversionError");
    assert!(e.message.contains("Attempted boolean conversion of traced array with shape bool[]"), "{}", e.message);
    assert!(e.message.contains("args[0]"), "{}", e.message);
    // JAX's "The error occurred while tracing the function <lambda> at FILE:LINE for jit".
    let at = format!("The error occurred while tracing the function <lambda> at {}:{} for jit.", file!(), line!() - 8);
    assert!(e.message.contains(&at), "{at}\n{}", e.message);
}

#[test]
fn bool_conversion_under_grad_names_the_function_and_grad() {
    let line = line!() + 1;
    let g = grad(|x: Array| -> Result<Array> { if x.gt(0.0).to_bool()? { Ok(x.sin()) } else { Ok(x) } });
    let e = g(Array::scalar(1.0f32)).unwrap_err();
    assert_eq!(e.ename(), "TracerBoolConversionError");
    let at = format!("The error occurred while tracing the function <lambda> at {}:{line} for grad.", file!());
    assert!(e.message.contains(&at), "{at}\n{}", e.message);
    fn h(x: Array) -> Result<Array> {
        if x.gt(0.0).to_bool()? { Ok(x) } else { Ok(-x) }
    }
    let line = line!() + 1;
    let e = value_and_grad(h)(Array::scalar(1.0f32)).unwrap_err();
    let at = format!("the function h at {}:{line} for value_and_grad.", file!());
    assert!(e.message.contains(&at), "{at}\n{}", e.message);
}

#[test]
fn shape_mismatch_is_an_error_value_naming_op_and_shapes() {
    let e = jnp::add(&jnp::arange(3.0), &jnp::arange(4.0)).unwrap_err();
    assert_eq!(e.ename(), "TypeError");
    assert!(e.message.contains("add got incompatible shapes for broadcasting: (3,), (4,)."), "{}", e.message);
    let f = jit(|(x, y): (Array, Array)| x + y);
    let e = f.call((&jnp::arange(3.0), &jnp::arange(4.0))).unwrap_err();
    assert!(e.message.contains("(3,), (4,)"), "{}", e.message);
    assert!(e.location.is_some());
}

#[test]
fn eager_ops_broadcasting_reductions_matmul() {
    let a = Array::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]).unwrap();
    let b = Array::from_vec(vec![10.0f32, 20.0, 30.0], &[3]).unwrap();
    close(&(&a + &b).to_vec::<f64>().unwrap(), &[11.0, 22.0, 33.0, 14.0, 25.0, 36.0], 0.0);
    close(&a.sum_axes(&[0]).to_vec::<f64>().unwrap(), &[5.0, 7.0, 9.0], 0.0);
    close(&a.sum_axes(&[1]).to_vec::<f64>().unwrap(), &[6.0, 15.0], 0.0);
    close(&a.max().to_vec::<f64>().unwrap(), &[6.0], 0.0);
    close(&a.mean().to_vec::<f64>().unwrap(), &[3.5], 1e-7);
    let m = a.matmul(&a.t());
    close(&m.to_vec::<f64>().unwrap(), &[14.0, 32.0, 32.0, 77.0], 1e-6);
    assert_eq!(m.shape(), vec![2, 2]);
    let w = jnp::where_(&a.gt(3.0), &a, &(&a * 0.0)).unwrap();
    close(&w.to_vec::<f64>().unwrap(), &[0.0, 0.0, 0.0, 4.0, 5.0, 6.0], 0.0);
    let r = a.reshape(&[3, -1]);
    assert_eq!(r.shape(), vec![3, 2]);
    let z = jnp::zeros(&[2, 2], DType::I32);
    assert_eq!(format!("{z:?}"), "Array([[0, 0],\n       [0, 0]], dtype=int32)");
}

#[test]
fn aot_stages_text_cost_and_mismatch_error() {
    let f = jit(|(x, y): (Array, Array)| 2 * x + y);
    let i32s = ShapeDtypeStruct::new(&[], DType::I32);
    let traced = f.trace((&i32s, &i32s)).unwrap();
    let lowered = traced.lower().unwrap();
    let text = lowered.as_text();
    // A closure is JAX's `<lambda>`: `module @jit__lambda`, as JAX lowers `jax.jit(lambda x, y: 2 * x + y)`.
    assert!(text.contains("module @jit__lambda {"), "{text}");
    assert_eq!(f.name(), "<lambda>");
    assert!(text.contains("func.func public @main(%arg0: tensor<i32>, %arg1: tensor<i32>)"), "{text}");
    let compiled = lowered.compile().unwrap();
    assert_eq!(compiled.cost_analysis().flops, 2.0);
    let r = compiled.call((Array::scalar(3i32), Array::scalar(4i32))).unwrap();
    assert_eq!(format!("{r:?}"), "Array(10, dtype=int32)");
    let e = compiled.call((jnp::arange(3), jnp::arange(3))).unwrap_err();
    assert!(e.message.contains("Argument 'args[0]' compiled with int32[] and called with int32[3]"), "{}", e.message);
    assert!(e.message.contains("Argument 'args[1]' compiled with int32[] and called with int32[3]"), "{}", e.message);
}

#[test]
fn static_argument_is_folded_and_keys_the_cache() {
    let f = jit(|(x, n): (Array, Static<i32>)| {
        let mut y = x;
        for _ in 0..*n {
            y = y + 1.0;
        }
        y
    });
    let x = jnp::arange(2.0);
    close(&f.call((&x, Static(3))).unwrap().to_vec::<f64>().unwrap(), &[3.0, 4.0], 0.0);
    close(&f.call((&x, Static(5))).unwrap().to_vec::<f64>().unwrap(), &[5.0, 6.0], 0.0);
    assert_eq!(f.cache_size(), 2);
}

#[test]
fn make_jaxpr_of_rank_dependent_branch_captures_only_taken_branch() {
    let j = make_jaxpr(|x: Array| if x.ndim() == 2 { x.log() / 2.0f64.ln() } else { x }, &jnp::arange(3)).unwrap();
    assert_eq!(j.to_string(), "{ lambda ; a:i32[3]. let  in (a,) }");
}

#[test]
fn explain_cache_misses_text() {
    let f = jit(|x: Array| x * 2);
    let _ = f.call(&jnp::arange(3)).unwrap();
    let _ = f.call(&jnp::arange(3.0)).unwrap();
    let report = jax::magic::explain().0;
    assert!(report.contains("never seen function"), "{report}");
    assert!(report.contains("* at args[0], now f32[3] and before i32[3]"), "{report}");
}

#[test]
fn closures_are_lambdas_told_apart_by_their_definition_site() {
    // JAX names an anonymous function `<lambda>` (`jit(<lambda>)`, module `@jit__lambda`);
    // `%explain` adds where each closure was defined, so two of them are told apart.
    let (la, a) = (line!(), jit(|x: Array| x.sin() + 1.5));
    let (lb, b) = (line!(), jit(|x: Array| x.cos() + 1.5));
    assert_eq!((a.name(), b.name()), ("<lambda>", "<lambda>"));
    close(&a.call(&Array::from_slice(&[0.0f32])).unwrap().to_vec::<f64>().unwrap(), &[1.5], 1e-6);
    close(&b.call(&Array::from_slice(&[0.0f32])).unwrap().to_vec::<f64>().unwrap(), &[2.5], 1e-6);
    let report = jax::transform::explain::report(&jax::transform::explain::recent());
    for l in [la, lb] {
        let want = format!("<lambda> (defined at tests/tests/jit_api.rs:{l}) at tests/tests/jit_api.rs:");
        assert!(report.lines().any(|r| r.starts_with(&want)), "{want}\n{report}");
    }
    // A named function keeps its name.
    fn double(x: Array) -> Array {
        x * 2.0
    }
    assert_eq!(jit(double).name(), "double");
    assert!(jit(double).trace(&jnp::arange(2.0)).unwrap().lower().unwrap().as_text().contains("module @jit_double {"));
}

#[test]
fn rust_value_parameters_are_static_and_key_the_cache() {
    // JAX: jax.jit(f, static_argnums=1) with `x * n if n > 3 else x + n`.
    let f = jit(|(x, n): (Array, usize)| if n > 3 { x * n as f64 } else { x + n as f64 }).static_argnums(&[1]);
    let x = Array::from_slice(&[1.0f32, 2.0]);
    close(&f.call((&x, 2)).unwrap().to_vec::<f64>().unwrap(), &[3.0, 4.0], 0.0);
    close(&f.call((&x, 5)).unwrap().to_vec::<f64>().unwrap(), &[5.0, 10.0], 0.0);
    close(&f.call((&x, 5)).unwrap().to_vec::<f64>().unwrap(), &[5.0, 10.0], 0.0);
    assert_eq!(f.cache_size(), 2);
    // The same without static_argnums: a usize parameter is static by its type.
    let g = jit(|(x, flag, s): (Array, bool, f64)| if flag { x * s } else { x });
    close(&g.call((&x, true, 3.0)).unwrap().to_vec::<f64>().unwrap(), &[3.0, 6.0], 0.0);
    close(&g.call((&x, false, 3.0)).unwrap().to_vec::<f64>().unwrap(), &[1.0, 2.0], 0.0);
    assert_eq!(g.cache_size(), 2);
    // jax 0.10.2: the jaxpr has the static value folded in: `mul a 5.0:f32[]`.
    let j = f.trace((&x, 5)).unwrap().jaxpr().to_string();
    assert_eq!(j, "{ lambda ; a:f32[2]. let b:f32[2] = mul a 5.0:f32[] in (b,) }");
}

#[test]
fn static_argnums_makes_a_rust_scalar_concrete_inside_the_trace() {
    // The parameter is an Array; the Rust scalar passed at position 1 is static, so the
    // function can read its value while tracing.
    let body = |(x, n): (Array, Array)| -> Result<Array> {
        let k = n.item::<i32>()?;
        Ok(if k > 3 { x * 2.0 } else { x + 1.0 })
    };
    let x = Array::from_slice(&[1.0f32, 2.0]);
    let e = jit(body).call((&x, 2)).unwrap_err();
    assert!(e.to_string().contains("ConcretizationTypeError"), "{e}");
    let f = jit(body).static_argnums(&[1]);
    close(&f.call((&x, 2)).unwrap().to_vec::<f64>().unwrap(), &[2.0, 3.0], 0.0);
    close(&f.call((&x, 7)).unwrap().to_vec::<f64>().unwrap(), &[2.0, 4.0], 0.0);
    assert_eq!(f.cache_size(), 2);
    let t = f.trace((&x, 7)).unwrap();
    assert_eq!(t.jaxpr().to_string(), "{ lambda ; a:f32[2]. let b:f32[2] = mul a 2.0:f32[] in (b,) }");
    // AOT: the compiled function takes the same arguments and ignores the static one.
    let c = t.lower().unwrap().compile().unwrap();
    close(&c.call((&x, 7)).unwrap().to_vec::<f64>().unwrap(), &[2.0, 4.0], 0.0);
    // A new static value is explained as JAX 0.10.2 does.
    f.call((&x, 9)).unwrap();
    let reasons: Vec<String> = jax::transform::explain::recent().into_iter().filter_map(|e| e.reason).collect();
    let want = "different input pytree:\n  * at input path [0][1], now <class 'jax._src.tree_util.Static'> with pytree metadata Static(val=9) \
                and before <class 'jax._src.tree_util.Static'> with pytree metadata Static(val=2), so the pytree node metadata does not match";
    assert!(reasons.iter().any(|r| r.contains(want)), "{reasons:#?}");
}

#[test]
fn static_argnums_errors_are_clear() {
    let x = Array::from_slice(&[1.0f32, 2.0]);
    let f = jit(|(x, n): (Array, Array)| x * n).static_argnums(&[5]);
    let e = f.call((&x, 2.0)).unwrap_err();
    assert_eq!(e.message, "Jitted function has static_argnums=(5,), but only accepts 2 positional arguments.");
    let f = jit(|(x, n): (Array, Array)| x * n).static_argnums(&[0]);
    let e = f.call((&x, 2.0)).unwrap_err();
    assert!(e.message.starts_with("Non-hashable static arguments are not supported."), "{}", e.message);
    assert!(e.message.contains("f32[2]"), "{}", e.message);
}

/// JAX's `static_argnames`: Rust has no argument names, so a named static is a static
/// field of a `#[derive(Pytree)]` struct (or any Rust-valued field).
#[derive(Clone, Pytree)]
struct Opts {
    scale: Array,
    #[pytree(static)]
    steps: usize,
}

#[test]
fn static_fields_of_a_struct_play_static_argnames() {
    let f = jit(|(x, o): (Array, Opts)| {
        let mut y = x;
        for _ in 0..o.steps {
            y = y * &o.scale;
        }
        y
    });
    let x = Array::from_slice(&[1.0f32, 2.0]);
    let o = |steps| Opts { scale: Array::from_slice(&[2.0f32, 3.0]), steps };
    close(&f.call((&x, o(2))).unwrap().to_vec::<f64>().unwrap(), &[4.0, 18.0], 0.0);
    close(&f.call((&x, o(3))).unwrap().to_vec::<f64>().unwrap(), &[8.0, 54.0], 0.0);
    close(&f.call((&x, o(3))).unwrap().to_vec::<f64>().unwrap(), &[8.0, 54.0], 0.0);
    assert_eq!(f.cache_size(), 2);
}

/// A builder method on a clone (the function shared) makes a new jitted function instead
/// of panicking (fresh user F10 F8: `in_shardings must be called right after jit`); the
/// original keeps its settings and caches.
#[test]
fn builder_methods_on_a_shared_function_make_a_new_one() {
    let f = jit(|x: Array| x * 2.0).with_name("double");
    let x = jnp::arange(4.0);
    assert_eq!(f.call(&x).unwrap().to_vec::<f32>().unwrap(), vec![0.0, 2.0, 4.0, 6.0]);
    let g = f.clone().with_name("twice").donate_argnums(&[0]).compiler_options(&[("opt_level", "1")]);
    assert!(g.lower(&x).unwrap().as_text().contains("module @jit_twice"));
    assert!(f.lower(&x).unwrap().as_text().contains("module @jit_double"));
    let y = jnp::arange(4.0) + 1.0;
    assert_eq!(g.call(&y).unwrap().to_vec::<f32>().unwrap(), vec![2.0, 4.0, 6.0, 8.0]);
    assert!(y.is_deleted(), "g donates its argument");
    assert_eq!(f.call(&x).unwrap().to_vec::<f32>().unwrap(), vec![0.0, 2.0, 4.0, 6.0]);
    assert!(!x.is_deleted(), "f does not");
}
