//! `jit(shard_map(f))` compiled (issue 6): the partitioner inlines the `shard_map` body into
//! its per-device program, cut at the collectives into compiled segments that run on the
//! devices' workers. 8 simulated CPU devices (its own test binary). Every jitted result is
//! compared with the eager (per-device, equation by equation) run and with host references
//! (JAX's shard-map page `*_ref` functions); the magics' texts against golden text.

use jax::prelude::*;
use jaxrepl_tests::{eight_cpu_devices, host_array, put};

fn ints(x: &Array) -> Vec<i32> {
    x.to_vec::<i32>().unwrap()
}

fn split(x: &[i32], n: usize) -> Vec<Vec<i32>> {
    x.chunks(x.len() / n).map(|c| c.to_vec()).collect()
}

/// Every collective under jit on 8 devices, on an unsharded and on a sharded argument,
/// with global equations before and after the `shard_map`: runs partitioned and equals
/// the eager run and the references.
#[test]
fn jitted_shard_map_runs_partitioned_and_matches_eager() {
    eight_cpu_devices();
    let m = make_mesh(&[8], &["x"], Some(&[AxisType::Auto; 1])).unwrap();
    let data: Vec<i32> = (0..64).map(|i| (i * 37 + 11) % 23 - 7).collect();
    let perm: Vec<(usize, usize)> = (0..8).map(|i| (i, (i + 3) % 8)).collect();
    let p2 = perm.clone();
    let body = move |x: Array| -> Result<Vec<Array>> {
        Ok(vec![
            lax::psum(&x, "x")?,
            lax::all_gather(&x, "x", 0, true)?,
            lax::psum_scatter(&x, "x", 0, true)?,
            lax::ppermute(&x, "x", &p2)?,
            lax::all_to_all(&x, "x", 0, 0, true)?,
            &x * &(lax::axis_index("x")? + 1),
        ])
    };
    let f = shard_map(body, Some(&m), P!("x"), P!("x"));
    // Host references of f(2x + 1).
    let pre: Vec<i32> = data.iter().map(|v| 2 * v + 1).collect();
    let blocks = split(&pre, 8);
    let psum: Vec<i32> = (0..8).map(|e| blocks.iter().map(|b| b[e]).sum()).collect();
    let gathered = pre.clone();
    let scattered = split(&psum, 8);
    let mut permuted = vec![vec![0; 8]; 8];
    for &(s, d) in &perm {
        permuted[d] = blocks[s].clone();
    }
    let a2a: Vec<Vec<i32>> = (0..8).map(|d| blocks.iter().map(|b| b[d]).collect()).collect();
    let scaled: Vec<i32> = blocks.iter().enumerate().flat_map(|(k, b)| b.iter().map(move |v| v * (k as i32 + 1))).collect();
    let want: Vec<Vec<i32>> = vec![
        psum.repeat(8),
        gathered.repeat(8),
        scattered.concat(),
        permuted.concat(),
        a2a.concat(),
        scaled,
    ];
    let x = jnp::array(&data);
    let f2 = f.clone();
    let eager: Vec<Vec<i32>> = f2.call(&x * 2 + 1).unwrap().iter().map(ints).collect();
    assert_eq!(eager, want);
    let jf = jit(move |x: Array| -> Result<Vec<Array>> {
        let outs = f.call(&x * 2 + 1)?;
        // A global equation after the shard_map, on its sharded result.
        let mut outs = outs;
        let last = outs.pop().unwrap();
        outs.push(&last - 0);
        Ok(outs)
    });
    for arg in [x.clone(), put(&x, &m, P!("x")), put(&x, &m, P!())] {
        let before = jax::sharding::partitioned_calls();
        let got: Vec<Vec<i32>> = jf.call(&arg).unwrap().iter().map(ints).collect();
        assert!(jax::sharding::partitioned_calls() > before, "jit(shard_map) runs partitioned");
        assert_eq!(got, want);
    }
    // The results are sharded by the out_specs.
    let r = jf.call(&x).unwrap();
    assert_eq!(format!("{:?}", r[0].sharding().unwrap()), format!("{:?}", Sharding::Named(NamedSharding::new(&m, P!("x")).unwrap())));
}

/// Floats on a 2×4 mesh: psum over one axis, all_gather over the other; jitted equals
/// eager bitwise (collectives sum in group order) and the f64 reference.
#[test]
fn two_axis_mesh_floats_bitwise_equal_eager() {
    eight_cpu_devices();
    let m = make_mesh(&[2, 4], &["a", "b"], Some(&[AxisType::Auto; 2])).unwrap();
    let (x, host) = host_array(&[8, 16], 5);
    let f = shard_map(
        |x: Array| -> Result<Vec<Array>> { Ok(vec![lax::psum(&x.sin(), "a")?, lax::all_gather(&x, "b", 1, true)?]) },
        Some(&m),
        P!("a", "b"),
        [P!(None, "b"), P!("a", "b")],
    );
    let eager = f.call(x.clone()).unwrap();
    let f2 = f.clone();
    let jf = jit(move |x: Array| f2.call(x));
    let before = jax::sharding::partitioned_calls();
    let got = jf.call(&x).unwrap();
    assert!(jax::sharding::partitioned_calls() > before);
    for (g, e) in got.iter().zip(&eager) {
        assert_eq!(g.shape(), e.shape());
        assert_eq!(g.to_vec::<f32>().unwrap(), e.to_vec::<f32>().unwrap());
    }
    // psum over "a" of sin: rows r and r+4 summed (blocks of 4 rows along "a").
    let s = got[0].to_vec::<f32>().unwrap();
    assert_eq!(got[0].shape(), &[4, 16]);
    for r in 0..4 {
        for c in 0..16 {
            let want = host[r * 16 + c].sin() + host[(r + 4) * 16 + c].sin();
            assert!((s[r * 16 + c] as f64 - want).abs() < 1e-5, "({r},{c})");
        }
    }
    // all_gather over "b" along dim 1: every device of row block a holds its rows whole;
    // assembled along "b": each row repeated 4 times.
    assert_eq!(got[1].shape(), &[8, 64]);
    let g = got[1].to_vec::<f32>().unwrap();
    for r in 0..8 {
        for c in 0..64 {
            assert_eq!(g[r * 64 + c] as f64, host[r * 16 + c % 16], "({r},{c})");
        }
    }
}

/// Gradients through a jitted shard_map (its VJP is a `shard_map` with `check_vma=False`)
/// match the analytic derivative and the eager grad.
#[test]
fn grad_of_jitted_shard_map_matches_analytic_and_eager() {
    eight_cpu_devices();
    let m = make_mesh(&[8], &["x"], Some(&[AxisType::Auto; 1])).unwrap();
    let (x, host) = host_array(&[16], 9);
    let sm = shard_map(|x: Array| lax::psum(&(&x * &x).sin(), "x"), Some(&m), P!("x"), P!());
    let sm2 = sm.clone();
    let g = jit(grad(move |x: Array| -> Result<Array> { Ok(sm.call(x)?.sum()) }));
    let got = g.call(&x).unwrap().to_vec::<f32>().unwrap();
    // f(x) = sum_e psum_k sin(x_{k,e}^2): d/dx_i = cos(x_i^2) 2 x_i; eager grad alike.
    let eager = grad(move |x: Array| -> Result<Array> { Ok(sm2.call(x)?.sum()) })(x.clone()).unwrap().to_vec::<f32>().unwrap();
    for (i, gi) in got.iter().enumerate() {
        assert!((gi - eager[i]).abs() <= 1e-6 * (1.0 + gi.abs()), "{i}: jit {gi} vs eager {}", eager[i]);
        let want = host[i].powi(2).cos() * 2.0 * host[i];
        assert!((*gi as f64 - want).abs() < 1e-4 * (1.0 + want.abs()), "{i}: {gi} vs {want}");
    }
}

/// `%jaxpr`, `%lower`, `%compile` on `jit(shard_map(..))` and on a bare `shard_map(..)` call.
#[test]
fn magics_show_shard_map_calls() {
    eight_cpu_devices();
    let m = make_mesh(&[2], &["i"], Some(&[AxisType::Auto; 1])).unwrap();
    let f = shard_map(|x: Array| lax::psum(&(x * 2.0), "i"), Some(&m), P!("i"), P!());
    let x = jnp::arange(6.0f32);
    let want_jaxpr = expect_test::expect![[r#"
        { lambda ; a:f32[6]. let
            b:f32[3] = shard_map[
              check_vma=True
              in_specs=(P('i',),)
              jaxpr={ lambda ; c:f32[3]{V:i}. let
                  d:f32[]{V:i} = pvary[axes=('i',)] 2.0:f32[]
                  e:f32[3]{V:i} = mul c d
                  f:f32[3] = psum[axes=('i',) axis_index_groups=None] e
                in (f,) }
              mesh=AbstractMesh('i': 2, axis_types=(Auto,), device_kind=cpu, num_cores=None, platform=cpu)
              newly_manual_axes=frozenset({'i'})
              out_specs=(P(),)
            ] a
          in (b,) }"#]];
    // A bare shard_map call.
    let j = jax::magic::jaxpr(|| f.call(x.clone())).unwrap();
    want_jaxpr.assert_eq(&j.to_string());
    // The same under jit.
    let f2 = f.clone();
    let jf = jit(move |x: Array| f2.call(x));
    let j = jax::magic::jaxpr(|| jf.call(&x)).unwrap();
    want_jaxpr.assert_eq(&j.to_string());
    let c = jax::magic::compile(|| jf.call(&x)).unwrap().0;
    let head: Vec<&str> = c.lines().take_while(|l| l.starts_with("//")).collect();
    expect_test::expect![[r#"
        // jaxrepl: shard_map over Mesh('i': 2, axis_types=(Auto,)), manual axes ('i',); path: partitioned (one per-device program on each of the 2 devices at once, 1 collective per device; no gather).
        // per-device program:
        //   { lambda ; a:f32[6]. let
        //       b:i32[] = axis_index[axis_name=i]
        //       c:i32[] = mul b 3:i32[]
        //       d:f32[3] = dynamic_slice[slice_sizes=(3,)] a c
        //       e:f32[] = pvary[axes=('i',)] 2.0:f32[]
        //       f:f32[3] = mul d e
        //       g:f32[3] = psum[axes=('i',) axis_index_groups=None] f
        //     in (g,) }"#]]
    .assert_eq(&head.join("\n"));
    assert!(c.contains("func.func"), "{c}");
    // `%lower`: the global module, the body a manual computation with its all-reduce
    // (`shard_map_lower.rs` has the whole text).
    let l = jax::magic::lower(|| jf.call(&x)).unwrap().0;
    assert!(l.starts_with("module @jit__lambda attributes {mhlo.num_partitions = 2 : i32}"), "{l}");
    assert!(l.contains("sdy.manual_computation(%arg0) in_shardings=[<@mesh, [{\"i\"}]>] out_shardings=[<@mesh, [{}]>] manual_axes={\"i\"}"), "{l}");
    assert!(l.contains("\"stablehlo.all_reduce\"") && l.contains("mulf"), "{l}");
    let b = jax::magic::compile(|| f.call(x.clone())).unwrap().0;
    assert!(b.starts_with("// jaxrepl: shard_map over"), "{b}");
    let s = jax::magic::compile_stage("llvm", || jf.call(&x)).unwrap_err();
    assert!(s.message.contains("per-device segments"), "{}", s.message);
    // Results are still right when a magic captures them.
    let r = jax::magic::jaxpr(|| {
        let r = f.call(x.clone()).unwrap();
        assert_eq!(r.to_vec::<f32>().unwrap(), vec![6.0, 10.0, 14.0]);
    });
    assert!(r.is_ok());
}

/// A body the partitioner does not take (a debug print: ordered per device) still runs
/// equation by equation; `%jaxpr` shows it, `%lower` the global module and `%compile` why
/// there is no compiled program.
#[test]
fn unpartitionable_body_runs_eagerly_and_magics_explain() {
    eight_cpu_devices();
    let m = make_mesh(&[2], &["i"], Some(&[AxisType::Auto; 1])).unwrap();
    let f = shard_map(
        |x: Array| -> Result<Array> {
            jax::debug::print!("block {}", x);
            lax::psum(&x, "i")
        },
        Some(&m),
        P!("i"),
        P!(),
    );
    let x = jnp::arange(4.0f32);
    let jf = jit(move |x: Array| f.call(x));
    assert_eq!(jf.call(&x).unwrap().to_vec::<f32>().unwrap(), vec![2.0, 4.0]);
    let j = jax::magic::jaxpr(|| jf.call(&x)).unwrap();
    assert!(j.to_string().contains("shard_map["), "{j}");
    // `%lower` still shows the global module (display only, as `jit(f).lower(&x)`), and
    // `%compile` says the call ran equation by equation, with the body per device.
    let l = jax::magic::lower(|| jf.call(&x)).unwrap().0;
    assert!(l.contains("sdy.manual_computation(") && l.contains(r#"sdy.mesh @mesh = <["i"=2]>"#), "{l}");
    assert_eq!(l, jf.lower(&x).unwrap().as_text());
    let c = jax::magic::compile(|| jf.call(&x)).unwrap().0;
    assert!(c.starts_with("// jaxrepl: this call ran equation by equation: the partitioner could not take it"), "{c}");
    assert!(c.contains("// shard_map 1 on Mesh('i': 2") && c.contains("psum"), "{c}");
}

/// An argument committed to a mesh of other devices is JAX 0.10.2's "Received
/// incompatible devices" error (eager and under jit), not a silent move (fresh user F10
/// F9); an argument on the shard_map's own devices, or uncommitted, runs.
#[test]
fn an_argument_committed_to_other_devices_is_an_error() {
    eight_cpu_devices();
    let m8 = make_mesh(&[8], &["i"], None).unwrap();
    // Auto: an uncommitted argument is split by shard_map itself (an Explicit mesh takes
    // only arguments already split, JAX 0.10.2's rule).
    let m4 = Mesh::new(&jax::devices()[..4], &[4], &["i"], vec![AxisType::Auto]).unwrap();
    let x8 = device_put(&jnp::arange(8.0), NamedSharding::new(&m8, P!("i")).unwrap()).unwrap();
    let sm = shard_map(|x: Array| x * 2.0, Some(&m4), P!("i"), P!("i"));
    let e = sm.call(&x8).unwrap_err();
    assert!(
        e.message.starts_with("Received incompatible devices for jitted computation. Got argument args[0] of ")
            && e.message.ends_with("with shape float32[8@i] and with device ids [0, 1, 2, 3, 4, 5, 6, 7] on platform CPU and shard_map inside jit with device ids [0, 1, 2, 3] on platform CPU"),
        "{e}"
    );
    let sm2 = sm.clone();
    let e = jit(move |x: Array| sm2.call(x)).call(&x8).unwrap_err();
    assert!(e.message.starts_with("Received incompatible devices for jitted computation."), "{e}");
    let x4 = device_put(&jnp::arange(8.0), NamedSharding::new(&m4, P!("i")).unwrap()).unwrap();
    assert_eq!(sm.call(&x4).unwrap().to_vec::<f32>().unwrap(), (0..8).map(|v| 2.0 * v as f32).collect::<Vec<_>>());
    let sm3 = sm.clone();
    assert_eq!(jit(move |x: Array| sm3.call(x)).call(&jnp::arange(8.0)).unwrap().to_vec::<f32>().unwrap()[7], 14.0);
}
