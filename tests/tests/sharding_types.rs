//! Shardings and memory spaces in jaxpr types (issue 6), with 8 simulated CPU devices:
//! `make_jaxpr` / `Traced::jaxpr` / `%jaxpr` of functions over arrays sharded on an
//! `Explicit` mesh print `f32[8@x,4@y]`-typed values, over pinned-host arrays
//! `f32<host>[8]`, as JAX 0.10.2 prints them (captured with `.venv-jax`, 8 forced CPU
//! devices); `Auto` meshes and unsharded arguments print plain. Results computed from
//! pinned-host arrays stay in pinned host memory (jit and eager), as JAX's do; mixing host
//! and device operands is JAX's error. Values equal the unsharded results.

use jax::prelude::*;
use jax::sharding::MemoryKind;
use jaxrepl_tests::{eight_cpu_devices, put};

fn arange(n: usize) -> Array {
    jnp::arange(n as f64)
}

/// JAX's `jnp.sin(x).sum(0) * 2` on `f32[8,4]` split `P('x','y')` over a (4,2) explicit
/// mesh (also through `Traced::jaxpr`, `%jaxpr` and a nested `jit`); on an `Auto` mesh
/// and unsharded the types stay plain.
#[test]
fn jaxprs_over_explicitly_sharded_arrays_carry_shardings() {
    eight_cpu_devices();
    let mesh = make_mesh(&[4, 2], &["x", "y"], None).unwrap();
    let x = put(&arange(32).reshape(&[8, 4]), &mesh, P!("x", "y"));
    let f = |x: Array| -> Result<Array> { Ok(jnp::sum(&x.sin(), Some(&[0]))? * 2.0) };
    let want = expect_test::expect![[r#"
        { lambda ; a:f32[8@x,4@y]. let
            b:f32[8@x,4@y] = sin a
            c:f32[4@y] = reduce_sum[axes=(0,) out_sharding=None] b
            d:f32[4@y] = mul c 2.0:f32[]
          in (d,) }"#]];
    want.assert_eq(&make_jaxpr(f, &x).unwrap().to_string());
    want.assert_eq(&jit(f).trace(&x).unwrap().jaxpr().to_string());
    // `%jaxpr` of a call shows the same.
    let jf = jit(f);
    want.assert_eq(&jax::magic::jaxpr(|| jf.call(&x)).unwrap().to_string());
    // The value equals the unsharded call's.
    let host = arange(32).reshape(&[8, 4]);
    // (A split sum adds in another order: equal to rounding.)
    let got = jf.call(&x).unwrap().to_vec::<f32>().unwrap();
    let reference: Vec<f64> = (0..4).map(|c| 2.0 * (0..8).map(|r| ((4 * r + c) as f64).sin()).sum::<f64>()).collect();
    for (g, w) in got.iter().zip(&reference) {
        assert!((*g as f64 - w).abs() < 1e-5, "{got:?} vs {reference:?}");
    }
    // Unsharded: plain, as before.
    expect_test::expect![[r#"
        { lambda ; a:f32[8,4]. let
            b:f32[8,4] = sin a
            c:f32[4] = reduce_sum[axes=(0,) out_sharding=None] b
            d:f32[4] = mul c 2.0:f32[]
          in (d,) }"#]]
    .assert_eq(&make_jaxpr(f, &host).unwrap().to_string());
    // A nested jit (inlined into the trace) types the same.
    let inner = jit(f).with_name("f");
    want.assert_eq(&make_jaxpr(move |x: Array| inner.call(x), &x).unwrap().to_string());
    // Auto axes: no sharding in types (JAX: `a:f32[8,4]`).
    let auto = make_mesh(&[4, 2], &["x", "y"], Some(&[AxisType::Auto, AxisType::Auto])).unwrap();
    let xa = put(&arange(32).reshape(&[8, 4]), &auto, P!("x", "y"));
    assert_eq!(make_jaxpr(f, &xa).unwrap().to_string(), make_jaxpr(f, &host).unwrap().to_string());
}

/// 1-D: elementwise keeps `@x`, a full reduction is replicated, an unsharded operand stays
/// plain, a multi-axis dim prints `@(x,y)` and moves with a transpose (JAX's texts).
#[test]
fn typed_jaxprs_follow_the_propagation() {
    eight_cpu_devices();
    let m1 = make_mesh(&[8], &["x"], None).unwrap();
    let v = put(&arange(8), &m1, P!("x"));
    expect_test::expect![[r#"
        { lambda ; a:f32[8@x]. let
            b:f32[8@x] = mul a 2.0:f32[]
            c:f32[8@x] = add b 1.0:f32[]
          in (c,) }"#]]
    .assert_eq(&make_jaxpr(|v: Array| v * 2.0 + 1.0, &v).unwrap().to_string());
    expect_test::expect![[r#"
        { lambda ; a:f32[8@x]. let
            b:f32[] = reduce_sum[axes=(0,) out_sharding=None] a
          in (b,) }"#]]
    .assert_eq(&make_jaxpr(|v: Array| v.sum(), &v).unwrap().to_string());
    expect_test::expect!["{ lambda ; a:f32[8@x] b:f32[8]. let c:f32[8@x] = add a b in (c,) }"]
        .assert_eq(&make_jaxpr(|(v, w): (Array, Array)| &v + &w, (&v, &jnp::ones(&[8], DType::F32))).unwrap().to_string());
    let m2 = make_mesh(&[4, 2], &["x", "y"], None).unwrap();
    let xx = put(&arange(32).reshape(&[8, 4]), &m2, P!(("x", "y"), None));
    expect_test::expect![[r#"
        { lambda ; a:f32[8@(x,y),4]. let
            b:f32[4,8@(x,y)] = transpose[permutation=(1, 0)] a
          in (b,) }"#]]
    .assert_eq(&make_jaxpr(|v: Array| v.t(), &xx).unwrap().to_string());
}

/// Control flow: loop carries and cond branches keep their operands' shardings (JAX prints
/// `c:i32[] d:f32[8@x]` in the scan body of a `fori_loop` and `f:f32[8@x]` in branches).
#[test]
fn sub_jaxprs_are_typed() {
    eight_cpu_devices();
    let m1 = make_mesh(&[8], &["x"], None).unwrap();
    let v = put(&arange(8), &m1, P!("x"));
    let f = |v: Array| lax::fori_loop(0, 3, |(_, c): (Array, Array)| c * 2.0, v);
    let text = make_jaxpr(f, &v).unwrap().to_string();
    assert!(text.starts_with("{ lambda ; a:f32[8@x]. let"), "{text}");
    assert!(text.contains("c:i32[] d:f32[8@x]. let") && text.contains("f:f32[8@x] = mul d 2.0:f32[]"), "{text}");
    assert!(text.contains(" b:f32[8@x] = scan[") && text.contains("] 0:i32[] a"), "{text}");
    let g = |v: Array| -> Result<Array> { lax::cond(&v.sum().gt(0.0), |c: Array| c + 1.0, |c: Array| c - 1.0, v) };
    let text = make_jaxpr(g, &v).unwrap().to_string();
    assert!(text.contains("{ lambda ; f:f32[8@x]. let g:f32[8@x] = sub f 1.0:f32[] in (g,) }"), "{text}");
    assert!(text.contains("e:f32[8@x] = cond["), "{text}");
    let host = arange(8);
    assert_eq!(jit(f).call(&v).unwrap().to_vec::<f32>().unwrap(), jit(f).call(&host).unwrap().to_vec::<f32>().unwrap());
    assert_eq!(jit(g).call(&v).unwrap().to_vec::<f32>().unwrap(), jit(g).call(&host).unwrap().to_vec::<f32>().unwrap());
}

/// Pinned host memory: `typeof` shows `float32<host>[8@x]`, jaxprs `f32<host>[8@x]`;
/// results computed from pinned-host arrays are in pinned host memory (jit and eager;
/// `out_shardings` in device memory wins); `unpinned_host` is the device memory space
/// (plain types, device results); host and device operands mixed is JAX's error.
#[test]
fn pinned_host_values_stay_in_host_memory() {
    eight_cpu_devices();
    let m1 = make_mesh(&[8], &["x"], None).unwrap();
    let s_dev = NamedSharding::new(&m1, P!("x")).unwrap();
    let s_host = s_dev.with_memory_kind("pinned_host").unwrap();
    let v = device_put(&arange(8), s_host.clone()).unwrap();
    assert_eq!(typeof_(&v).to_string(), "float32<host>[8@x]");
    assert_eq!(format!("{:?}", typeof_(&v)), "ShapedArray(float32<host>[8@x])");
    expect_test::expect!["{ lambda ; a:f32<host>[8@x]. let b:f32<host>[8@x] = mul a 2.0:f32[] in (b,) }"]
        .assert_eq(&make_jaxpr(|v: Array| v * 2.0, &v).unwrap().to_string());
    let want: Vec<f32> = (0..8).map(|i| 2.0 * i as f32).collect();
    // jit: the result stays in pinned host memory, sharded as the input.
    let r = jit(|v: Array| v * 2.0).call(&v).unwrap();
    assert_eq!(r.to_vec::<f32>().unwrap(), want);
    assert_eq!(format!("{:?}", r.sharding().unwrap()), "NamedSharding(mesh=Mesh('x': 8, axis_types=(Explicit,)), spec=P('x',), memory_kind=pinned_host)");
    assert_eq!(typeof_(&r).to_string(), "float32<host>[8@x]");
    // A full reduction too (JAX: `float32<host>[]`).
    let s = jit(|v: Array| v.sum()).call(&v).unwrap();
    assert_eq!(s.sharding().unwrap().memory_kind(), MemoryKind::PinnedHost);
    assert_eq!(s.to_vec::<f32>().unwrap(), vec![28.0]);
    // out_shardings in device memory: a device result.
    let r = jit(|v: Array| v + 1.0).out_shardings(vec![s_dev.clone()]).call(&v).unwrap();
    assert_eq!(r.sharding().unwrap().memory_kind(), MemoryKind::Device);
    assert_eq!(r.to_vec::<f32>().unwrap(), (1..9).map(|i| i as f32).collect::<Vec<_>>());
    // Eager: the same.
    let e = &v * 2.0;
    assert_eq!(e.sharding().unwrap().memory_kind(), MemoryKind::PinnedHost);
    assert_eq!(e.to_vec::<f32>().unwrap(), want);
    // Mixed host and device operands: JAX's error, eager and under jit.
    let w = device_put(&arange(8), s_dev.clone()).unwrap();
    let msg = "memory_space of all inputs passed to `add` must be the same. Got one operand with type: float32<host>[8@x] and another operand with type: float32[8@x]";
    let err = jnp::add(&v, &w).unwrap_err();
    assert!(err.to_string().contains(msg), "{err}");
    let err = jit(|(a, b): (Array, Array)| &a + &b).call((&v, &w)).unwrap_err();
    // Under jit too the types carry their shardings (JAX prints the full types there as well).
    assert!(err.to_string().contains(msg), "{err}");
    // unpinned_host: JAX's device memory space: plain types, device results.
    let sd = SingleDeviceSharding::new(devices()[0]).with_memory_kind("unpinned_host").unwrap();
    let u = device_put(&arange(4), sd).unwrap();
    assert_eq!(typeof_(&u).to_string(), "float32[4]");
    expect_test::expect!["{ lambda ; a:f32[4]. let b:f32[4] = add a 1.0:f32[] in (b,) }"]
        .assert_eq(&make_jaxpr(|u: Array| u + 1.0, &u).unwrap().to_string());
    assert_eq!(jit(|u: Array| u + 1.0).call(&u).unwrap().sharding().unwrap().memory_kind(), MemoryKind::Device);
    // A single-device pinned-host array (Auto: no axes in the type).
    let sh = SingleDeviceSharding::new(devices()[0]).with_memory_kind("pinned_host").unwrap();
    let h = device_put(&arange(4), sh).unwrap();
    expect_test::expect![[r#"
        { lambda ; a:f32<host>[4]. let
            b:f32<host>[4] = sin a
            c:f32<host>[4] = add b a
          in (c,) }"#]]
    .assert_eq(&make_jaxpr(|u: Array| u.sin() + &u, &h).unwrap().to_string());
    let r = jit(|u: Array| u.sin() + &u).call(&h).unwrap();
    assert_eq!(format!("{:?}", r.sharding().unwrap()), "SingleDeviceSharding(device=CpuDevice(id=0), memory_kind=pinned_host)");
    let hv: Vec<f32> = (0..4).map(|i| (i as f32).sin() + i as f32).collect();
    assert_eq!(r.to_vec::<f32>().unwrap(), hv);
}

/// A `PartitionSpec` with no mesh set (this binary never sets one): JAX 0.10.2's texts,
/// each naming the API that was called (fresh user F10: `reshard` spoke of `device_put`).
#[test]
fn a_spec_without_a_mesh_is_an_error_naming_the_api() {
    eight_cpu_devices();
    let x = arange(8);
    let e = reshard(&x, P!("X")).unwrap_err();
    assert_eq!(e.to_string(), "ValueError: Using PartitionSpec when you are not under a mesh context is not allowed. Please pass a NamedSharding instance or enter into a mesh context via `set_mesh`. Got P('X',)");
    let e = with_sharding_constraint(&x, P!("X")).unwrap_err();
    assert!(e.to_string().starts_with("RuntimeError: with_sharding_constraint requires a non-empty mesh in context if you are passing `PartitionSpec`s"), "{e}");
    // Under jit too (it was silently ignored there).
    let e = jit(|x: Array| with_sharding_constraint(&(x * 2.0), P!("X"))).call(&x).unwrap_err();
    assert!(e.message.starts_with("with_sharding_constraint requires a non-empty mesh"), "{e}");
    let e = device_put(&x, P!("X")).unwrap_err();
    assert!(e.to_string().starts_with("ValueError: Please set a mesh via `set_mesh` if a PartitionSpec is passed to device_put"), "{e}");
}
