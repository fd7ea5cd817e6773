//! Sharding semantics a fresh user found wrong (issue 6), with 8 simulated CPU devices:
//! a loop the partitioner runs whole returns its result with the traced out sharding (as
//! JAX's would), not an unsharded value; a sharded value combined with a broadcast of its
//! own reduction (`x - x.mean()`) runs partitioned; a contraction over a sharded dim inside
//! a loop body under `Explicit` axes raises the same ShardingTypeError as at the top level;
//! `%lower` keeps a sharded `pinned_host` result's memory kind; two `shard_map`s over two
//! meshes in one `jit` lower (`@mesh`, `@mesh_0`) and run. Results are compared with the
//! unsharded (or separately run) computation.

use jax::prelude::*;
use jaxrepl_tests::{assert_close_f32, eight_cpu_devices, host_array, put};

fn mesh8() -> Mesh {
    make_mesh(&[8], &["x"], None).unwrap()
}

/// The type the jaxpr text gives its (single) result: `in (d,) }` and `d:f32[8@x] = ...`.
fn out_type(text: &str) -> String {
    let last = text.lines().last().unwrap_or_default().trim();
    let name = last.trim_start_matches("in (").split([',', ')']).next().unwrap_or_default().to_string();
    let head = format!("{name}:");
    text.lines().rev().flat_map(|l| l.split(" = ").next().unwrap_or_default().split_whitespace()).find_map(|t| t.strip_prefix(&head).map(str::to_string)).unwrap_or_else(|| panic!("no type for {name} in\n{text}"))
}

fn spec_text(a: &Array) -> String {
    format!("{:?}", a.sharding().unwrap().spec())
}

/// A `fori_loop` / `while_loop` / `scan` whose body is not shard-local (a `cumsum` along the
/// split dim) runs whole; its result still carries the sharding the trace inferred
/// (`float32[32@x]`), and `sharding()`, `typeof` and `visualize_array_sharding` agree with
/// each other and with a directly sharded array; values equal the unsharded call.
#[test]
fn a_loop_run_whole_returns_the_traced_out_sharding() {
    eight_cpu_devices();
    let mesh = mesh8();
    let (x, _) = host_array(&[32], 41);
    let px = put(&x, &mesh, P!("x"));
    let fori = jit(|x: Array| -> Result<Array> {
        lax::fori_loop(0, 3, |(_, h): (Array, Array)| -> Result<Array> { Ok(jnp::cumsum(&h, Some(0))? * 0.25) }, x)
    });
    let whl = jit(|x: Array| -> Result<Array> {
        let (_, y) = lax::while_loop(
            |(i, _): (Array, Array)| i.lt(2),
            |(i, y): (Array, Array)| -> Result<(Array, Array)> { Ok((i + 1, jnp::cumsum(&y, Some(0))? * 0.5)) },
            (jnp::zeros(&[], DType::I32), x),
        )?;
        Ok(y)
    });
    let scn = jit(|x: Array| -> Result<Array> {
        let xs = jnp::zeros(&[3], DType::F32);
        let (c, _) = lax::scan(|(c, s): (Array, Array)| -> Result<(Array, Array)> { Ok((jnp::cumsum(&c, Some(0))? * 0.5 + &s, s)) }, x, xs, None, false, 1)?;
        Ok(c)
    });
    let reference = px.clone();
    for (name, f) in [("fori_loop", &fori), ("while_loop", &whl), ("scan", &scn)] {
        let y = f.call(&px).unwrap();
        assert_close_f32(&y, &f.call(&x).unwrap(), 1e-5);
        assert_eq!(typeof_(&y).to_string(), "float32[32@x]", "{name}");
        assert_eq!(out_type(&f.trace(&px).unwrap().jaxpr().to_string()), "f32[32@x]", "{name}");
        assert_eq!(spec_text(&y), "Some(P('x',))", "{name}");
        assert_eq!(y.sharding().unwrap().num_devices(), 8, "{name}");
        assert_eq!(
            debug::visualize_array_sharding(&y).unwrap().to_string(),
            debug::visualize_array_sharding(&reference).unwrap().to_string(),
            "{name}"
        );
        // Each device holds its block of the result.
        let shards = y.addressable_shards().unwrap();
        assert_eq!(shards.len(), 8);
        assert!(shards.iter().all(|s| s.data.shape() == [4]), "{name}");
    }
}

/// `x - x.mean()` and `x / x.sum()` with `x` split over 'x' run partitioned: the reduction
/// is a local sum all-reduced once (a `psum` in the per-device program), the rest per
/// shard, no all-gather; results keep `x`'s sharding and equal the unsharded call. (A
/// fresh user saw these run whole; at this commit they already run partitioned, also over
/// `Auto` axes, 2-d meshes and keepdims forms: this guards it.)
#[test]
fn a_split_value_with_a_broadcast_of_its_own_reduction_runs_partitioned() {
    eight_cpu_devices();
    let mesh = mesh8();
    let (x, _) = host_array(&[32, 4], 42);
    let px = put(&x, &mesh, P!("x", None));
    let centered = jit(|x: Array| -> Result<Array> { Ok(&x - &jnp::mean(&x, None)?) });
    let normalized = jit(|x: Array| -> Result<Array> { Ok(&x / &jnp::sum(&x, None)?) });
    let rows = jit(|x: Array| -> Result<Array> { Ok(&x - &jnp::mean(&x, Some(&[0]))?) });
    for (name, f) in [("x - x.mean()", &centered), ("x / x.sum()", &normalized), ("x - x.mean(0)", &rows)] {
        let before = jax::sharding::partitioned_calls();
        let y = f.call(&px).unwrap();
        assert!(jax::sharding::partitioned_calls() > before, "{name} runs partitioned");
        assert_close_f32(&y, &f.call(&x).unwrap(), 1e-5);
        assert_eq!(typeof_(&y).to_string(), "float32[32@x,4]", "{name}");
        let text = f.lower(&px).unwrap().compile().unwrap().as_text();
        assert!(text.contains("psum") && !text.contains("all_gather") && text.contains("f32[4,4]"), "{name}:\n{text}");
    }
}

/// Under `Explicit` axes a contraction over a sharded dim inside a `fori_loop` body (or a
/// `scan` body) raises JAX's ShardingTypeError at the body's line, as at the top level.
#[test]
fn a_sharded_contraction_in_a_loop_body_is_a_sharding_type_error() {
    eight_cpu_devices();
    let mesh = mesh8();
    let (a, _) = host_array(&[4, 16], 43);
    let (b, _) = host_array(&[16, 16], 44);
    let pa = put(&a, &mesh, P!(None, "x"));
    let pb = put(&b, &mesh, P!("x", None));
    let top = jit(|(p, q): (Array, Array)| p.matmul(&q));
    let e = top.call((&pa, &pb)).unwrap_err();
    assert_eq!(e.kind, ErrorKind::ShardingType);
    let want = "Contracting dimensions are sharded and it is ambiguous how the output should be sharded. Please specify the output sharding via the `out_sharding` parameter. Got lhs_contracting_spec=('x',) and rhs_contracting_spec=('x',)";
    assert_eq!(e.message, want);
    let f = jit(|(p, q): (Array, Array)| -> Result<Array> {
        lax::fori_loop(0, 2, |(_, h): (Array, Array)| -> Result<Array> {
            let r = h.matmul(&q); // the body's line
            Ok(r)
        }, p)
    });
    let body_line = line!() - 4;
    let e = f.call((&pa, &pb)).unwrap_err();
    assert_eq!(e.kind, ErrorKind::ShardingType, "{e}");
    assert_eq!(e.message, want);
    let loc = e.location.as_ref().expect("the body's line");
    assert!(loc.file.ends_with("sharding_semantics.rs") && loc.line == body_line, "{loc:?}");
    // jnp::dot in a scan body: the same error.
    let g = jit(|(p, q): (Array, Array)| -> Result<Array> {
        let xs = jnp::zeros(&[2], DType::F32);
        let (c, _) = lax::scan(|(c, s): (Array, Array)| -> Result<(Array, Array)> { Ok((jnp::dot(&c, &q)? + &s, s)) }, p, xs, None, false, 1)?;
        Ok(c)
    });
    let e = g.call((&pa, &pb)).unwrap_err();
    assert_eq!((e.kind, e.message.as_str()), (ErrorKind::ShardingType, want));
    // Unsharded operands: the loop runs, equal to a plain loop of matmuls.
    let y = f.call((&a, &b)).unwrap();
    assert_close_f32(&y, &a.matmul(&b).matmul(&b), 1e-5);
}

/// A result whose `out_shardings` is a sharded NamedSharding in `pinned_host` memory: the
/// lowered text (`Jitted::lower(..).as_text()` and `%lower` of the call) gives it both its
/// memory kind and its Shardy sharding, as JAX 0.10 lowers it
/// (`-> (tensor<16xf32> {mhlo.memory_kind = "pinned_host", sdy.sharding = ...})`).
#[test]
fn a_sharded_pinned_host_out_sharding_lowers_with_its_memory_kind() {
    eight_cpu_devices();
    let _l = jaxrepl_tests::serial();
    let mesh = mesh8();
    let s_dev = NamedSharding::new(&mesh, P!("x")).unwrap();
    let s_host = s_dev.with_memory_kind("pinned_host").unwrap();
    let x = device_put(&jnp::arange(16.0), s_dev.clone()).unwrap();
    let f = jit(|x: Array| x.sin() * 2.0).out_shardings(vec![s_host.clone()]);
    let want = r#"-> (tensor<16xf32> {mhlo.memory_kind = "pinned_host", sdy.sharding = #sdy.sharding<@mesh, [{"x"}]>})"#;
    let text = f.lower(&x).unwrap().as_text();
    assert!(text.contains(want), "{text}");
    let magic = jax::magic::lower(|| f.call(&x).unwrap()).unwrap().0;
    assert!(magic.contains(want), "{magic}");
    let y = f.call(&x).unwrap();
    assert_eq!(y.sharding().unwrap().memory_kind(), MemoryKind::PinnedHost);
    assert_eq!(typeof_(&y).to_string(), "float32<host>[16@x]");
    let w: Vec<f32> = (0..16).map(|i| (i as f32).sin() * 2.0).collect();
    for (a, b) in y.to_vec::<f32>().unwrap().iter().zip(&w) {
        assert!((a - b).abs() <= 1e-5, "{a} vs {b}");
    }
}

/// Two `shard_map`s over two different meshes (devices 0-3 and 4-7) in one jitted
/// function: `%lower` / `Jitted::lower` show both meshes (`sdy.mesh @mesh`, `@mesh_0`) and
/// one `sdy.manual_computation` each; the call, `%compile` and `compile()` run, with values
/// equal to each `shard_map` run on its own.
#[test]
fn two_shard_maps_over_two_meshes_in_one_jit() {
    eight_cpu_devices();
    let devs = devices();
    // Auto meshes: shard_map splits the unsharded argument itself (an Explicit mesh
    // would take it only already split, JAX 0.10.2's rule).
    let ma = Mesh::new(&devs[..4], &[4], &["a"], vec![AxisType::Auto]).unwrap();
    let mb = Mesh::new(&devs[4..], &[4], &["b"], vec![AxisType::Auto]).unwrap();
    let sa = shard_map(|x: Array| lax::psum(&(x * 2.0), "a"), Some(&ma), P!("a"), P!());
    let sb = shard_map(|x: Array| Ok(x.sin() + 1.0), Some(&mb), P!("b"), P!("b"));
    let x = jnp::arange(16.0f32);
    let ea = sa.call(x.clone()).unwrap().to_vec::<f32>().unwrap();
    let eb = sb.call(x.clone()).unwrap().to_vec::<f32>().unwrap();
    let (sa2, sb2) = (sa.clone(), sb.clone());
    let jf = jit(move |x: Array| -> Result<(Array, Array)> { Ok((sa2.call(x.clone())?, sb2.call(x)?)) }).with_name("two");
    let (ya, yb) = jf.call(&x).unwrap();
    assert_eq!(ya.to_vec::<f32>().unwrap(), ea);
    assert_eq!(yb.to_vec::<f32>().unwrap(), eb);
    for l in [jf.lower(&x).unwrap().as_text(), jax::magic::lower(|| jf.call(&x)).unwrap().0] {
        assert!(l.contains(r#"sdy.mesh @mesh = <["a"=4]>"#) && l.contains(r#"sdy.mesh @mesh_0 = <["b"=4]>"#), "{l}");
        assert_eq!(l.matches("sdy.manual_computation(").count(), 2, "{l}");
        assert!(l.contains(r#"in_shardings=[<@mesh, [{"a"}]>]"#) && l.contains(r#"in_shardings=[<@mesh_0, [{"b"}]>]"#), "{l}");
    }
    let text = jax::magic::compile(|| jf.call(&x)).unwrap().0;
    assert!(text.starts_with("// jaxrepl: this call ran equation by equation: its shard_maps are over 2 meshes (the partitioner runs one mesh per program)"), "{text}");
    assert!(text.contains("// shard_map 1 on Mesh('a': 4") && text.contains("// shard_map 2 on Mesh('b': 4") && text.contains("psum"), "{text}");
    let c = jf.lower(&x).unwrap().compile().unwrap();
    let (ca, cb) = c.call(&x).unwrap();
    assert_eq!(ca.to_vec::<f32>().unwrap(), ea);
    assert_eq!(cb.to_vec::<f32>().unwrap(), eb);
}

/// `debug::visualize_array_sharding` inside a `shard_map` body (JAX's fails on the tracer):
/// at trace time it draws the mesh's devices, each holding one block of the value's type,
/// titled with the mesh axes the value varies over (an argument over its in_spec's axes; a
/// `psum` over 'j' makes it invariant along 'j'; a closed-over constant varies over none).
/// Outside a body a tracer is still the TypeError pointing to `inspect_array_sharding`.
#[test]
fn visualize_array_sharding_inside_a_shard_map_body_draws_the_local_blocks() {
    eight_cpu_devices();
    let m = make_mesh(&[4, 2], &["i", "j"], Some(&[AxisType::Auto; 2])).unwrap();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let log = seen.clone();
    let f = shard_map(
        move |x: Array| -> Result<Array> {
            log.lock().unwrap().push(debug::visualize_array_sharding(&x)?.to_string());
            let s = lax::psum(&x, "j")?;
            log.lock().unwrap().push(debug::visualize_array_sharding(&s)?.to_string());
            let c = jnp::ones(&[2, 2], DType::F32) * 3.0;
            log.lock().unwrap().push(debug::visualize_array_sharding(&c)?.to_string());
            let t = lax::psum(&s, "i")?;
            log.lock().unwrap().push(debug::visualize_array_sharding(&t)?.to_string());
            Ok(&s + &t)
        },
        Some(&m),
        P!("i", "j"),
        P!("i", None),
    );
    let x = jnp::arange(32.0f32).reshape(&[8, 4]);
    let y = f.call(x.clone()).unwrap();
    // The value: per row block, the sum over its two column blocks plus the sum over all blocks.
    let hx = x.to_vec::<f32>().unwrap();
    let mut want = vec![0.0f32; 16];
    for r in 0..8 {
        for c in 0..2 {
            let s = hx[r * 4 + c] + hx[r * 4 + c + 2];
            let t: f32 = (0..4).map(|bi| hx[(bi * 2 + r % 2) * 4 + c] + hx[(bi * 2 + r % 2) * 4 + c + 2]).sum();
            want[r * 2 + c] = s + t;
        }
    }
    assert_eq!(y.to_vec::<f32>().unwrap(), want);
    // Under jit the body is traced again (inside the jit's trace): the same drawings.
    let f2 = f.clone();
    let jf = jit(move |x: Array| f2.call(x));
    assert_eq!(jf.call(&x).unwrap().to_vec::<f32>().unwrap(), want);
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 8, "{seen:?}");
    assert_eq!(seen[..4], seen[4..]);
    let first = |s: &str| s.lines().next().unwrap_or_default().to_string();
    let title = |over: &str| format!("float32[2,2] block on each device of {m}; {over}");
    assert_eq!(first(&seen[0]), title("varies over ('i', 'j')"));
    assert_eq!(first(&seen[1]), title("varies over 'i'"));
    assert_eq!(first(&seen[2]), title("the same block on every device (varies over no mesh axis)"));
    assert_eq!(first(&seen[3]), title("the same block on every device (varies over no mesh axis)"));
    // Below the title, the mesh's grid (as `visualize_mesh`).
    let grid = |s: &str| s.lines().skip(1).collect::<Vec<_>>().join("
");
    assert_eq!(grid(&seen[0]), grid(&jax::sharding::visualize_mesh(&m).to_string()));
    expect_test::expect![[r#"
        float32[2,2] block on each device of Mesh('i': 4, 'j': 2, axis_types=(Auto, Auto)); varies over ('i', 'j')
               j=0     j=1
            ┌───────┬───────┐
        i=0 │ CPU 0 │ CPU 1 │
            ├───────┼───────┤
        i=1 │ CPU 2 │ CPU 3 │
            ├───────┼───────┤
        i=2 │ CPU 4 │ CPU 5 │
            ├───────┼───────┤
        i=3 │ CPU 6 │ CPU 7 │
            └───────┴───────┘
    "#]].assert_eq(&seen[0]);
    // Under jit, outside a shard_map body: the TypeError.
    let g = jit(|x: Array| -> Result<Array> {
        debug::visualize_array_sharding(&x)?;
        Ok(x)
    });
    let e = g.call(&x).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Type);
    assert!(e.message.contains("inspect_array_sharding"), "{e}");
}


/// `jit(f, out_shardings=NamedSharding(mesh, P('x')))` on an *unsharded* argument: the
/// lowered text is on the out sharding's mesh (`mhlo.num_partitions = 8`, `sdy.mesh`), the
/// result has its `sdy.sharding` (after its memory kind, when it has one) and the argument
/// none (an unspecified input sharding, as JAX lowers it); the call gives the out sharding
/// with the single-device values; `%lower` of the call shows the same. On a sharded
/// argument, the result's `sdy.sharding` is the one `out_shardings` asks for, not the
/// propagated one.
#[test]
fn an_out_sharding_on_an_unsharded_argument_lowers_on_its_mesh() {
    eight_cpu_devices();
    let _l = jaxrepl_tests::serial();
    let mesh = mesh8();
    let s_dev = NamedSharding::new(&mesh, P!("x")).unwrap();
    let s_host = s_dev.with_memory_kind("pinned_host").unwrap();
    let x = jnp::arange(16.0);
    let w: Vec<f32> = (0..16).map(|i| (i as f32).sin() * 2.0).collect();
    let close = |y: &Array| {
        for (a, b) in y.to_vec::<f32>().unwrap().iter().zip(&w) {
            assert!((a - b).abs() <= 1e-5, "{a} vs {b}");
        }
    };
    for (s, kind, result, ty) in [
        (&s_dev, MemoryKind::Device, r#"-> (tensor<16xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}]>})"#, "float32[16@x]"),
        (&s_host, MemoryKind::PinnedHost, r#"-> (tensor<16xf32> {mhlo.memory_kind = "pinned_host", sdy.sharding = #sdy.sharding<@mesh, [{"x"}]>})"#, "float32<host>[16@x]"),
    ] {
        let f = jit(|x: Array| x.sin() * 2.0).out_shardings(vec![s.clone()]);
        let text = f.lower(&x).unwrap().as_text();
        assert!(text.contains("mhlo.num_partitions = 8 : i32"), "{text}");
        assert!(text.contains(r#"sdy.mesh @mesh = <["x"=8]>"#), "{text}");
        assert!(text.contains(result), "{text}");
        assert!(text.contains("@main(%arg0: tensor<16xf32>) -> ("), "{text}");
        // `%lower` of the call shows the same.
        let magic = jax::magic::lower(|| f.call(&x).unwrap()).unwrap().0;
        assert!(magic.contains(result) && magic.contains(r#"sdy.mesh @mesh = <["x"=8]>"#), "{magic}");
        let y = f.call(&x).unwrap();
        close(&y);
        assert_eq!(format!("{:?}", y.sharding().unwrap().spec()), "Some(P('x',))");
        assert_eq!(y.sharding().unwrap().memory_kind(), kind);
        assert_eq!(typeof_(&y).to_string(), ty);
        let shards = y.addressable_shards().unwrap();
        assert_eq!(shards.len(), 8);
        assert!(shards.iter().all(|s| s.data.shape() == [2]));
        // The compiled program is the single-device one (no partitioned plan to show).
        assert!(!f.lower(&x).unwrap().compile().unwrap().as_text().contains("// jaxrepl: arguments sharded"));
    }
    // A one-device mesh lowers as a single-device program (JAX: `{jax.result_info = ..,
    // mhlo.memory_kind = "pinned_host"}`, no Shardy annotations).
    let one = Mesh::new(&devices()[1..2], &[1], &["x"], vec![AxisType::Auto]).unwrap();
    let s1 = NamedSharding::new(&one, P!("x")).unwrap().with_memory_kind("pinned_host").unwrap();
    let text = jit(|x: Array| x * 0.5).out_shardings(vec![s1]).lower(&x).unwrap().as_text();
    assert!(text.contains(r#"-> (tensor<16xf32> {mhlo.memory_kind = "pinned_host"})"#) && !text.contains("sdy."), "{text}");
    // A sharded argument with a replicated out sharding: the result's annotation is P().
    let px = put(&x, &mesh, P!("x"));
    let g = jit(|x: Array| x.sin() * 2.0).out_shardings(vec![NamedSharding::new(&mesh, P!()).unwrap()]);
    let text = g.lower(&px).unwrap().as_text();
    let want = r#"@main(%arg0: tensor<16xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}]>}) -> (tensor<16xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}]>})"#;
    assert!(text.contains(want), "{text}");
    let magic = jax::magic::lower(|| g.call(&px).unwrap()).unwrap().0;
    assert!(magic.contains(want), "{magic}");
    let y = g.call(&px).unwrap();
    close(&y);
    assert_eq!(format!("{:?}", y.sharding().unwrap().spec()), "Some(P())");
}

/// `dot_out_sharding` (JAX's `jnp.dot(a, b, out_sharding=P(..))`) under `jit`, on a (4,2)
/// mesh: `a` f32[8,16] P('X','Y') times `b` f32[16,4] P('Y', None) contracts a dim split
/// over 'Y' on both. The out sharding is the `dot_general`'s parameter: the jaxpr shows it
/// and types the result as it says (`f32[8@X,4]`; `P('X','Y')` gives `f32[8@X,4@Y]`); the
/// call runs partitioned, each device's partial product all-reduced over 'Y' (`psum`), or
/// reduce-scattered when the out sharding splits a free dim over 'Y'; no all-gather.
/// Values equal the unsharded product; the eager call gives the same sharding.
#[test]
fn dot_out_sharding_under_jit_types_and_partitions_as_asked() {
    eight_cpu_devices();
    let mesh = make_mesh(&[4, 2], &["X", "Y"], None).unwrap();
    let (a, _) = host_array(&[8, 16], 45);
    let (b, _) = host_array(&[16, 4], 46);
    let (pa, pb) = (put(&a, &mesh, P!("X", "Y")), put(&b, &mesh, P!("Y", None)));
    let want = a.matmul(&b);
    for (spec, ty, coll, jspec) in [
        (P!("X", None), "float32[8@X,4]", "psum[axes=('Y',)", "out_sharding=P('X', None)"),
        (P!("X", "Y"), "float32[8@X,4@Y]", "reduce_scatter[", "out_sharding=P('X', 'Y')"),
    ] {
        let s2 = spec.clone();
        let f = jit(move |(a, b): (Array, Array)| dot_out_sharding(&a, &b, s2.clone()));
        let before = jax::sharding::partitioned_calls();
        let c = f.call((&pa, &pb)).unwrap();
        assert!(jax::sharding::partitioned_calls() > before, "{ty} runs partitioned");
        assert_close_f32(&c, &want, 1e-5);
        assert_eq!(typeof_(&c).to_string(), ty);
        let jaxpr = f.trace((&pa, &pb)).unwrap().jaxpr().to_string();
        assert!(jaxpr.contains(jspec), "{jaxpr}");
        assert_eq!(format!("float32{}", out_type(&jaxpr).trim_start_matches("f32")), ty, "{jaxpr}");
        let text = f.lower((&pa, &pb)).unwrap().compile().unwrap().as_text();
        assert!(text.contains(coll) && !text.contains("all_gather[") && !text.contains("all_to_all["), "{ty}:\n{text}");
        let eager = dot_out_sharding(&pa, &pb, spec).unwrap();
        assert_eq!(typeof_(&eager).to_string(), ty);
        assert_close_f32(&eager, &want, 1e-5);
    }
    // Without an out sharding the contraction stays JAX's ambiguity error under `jit`.
    let g = jit(|(a, b): (Array, Array)| jnp::dot(&a, &b));
    assert_eq!(g.call((&pa, &pb)).unwrap_err().kind, ErrorKind::ShardingType);
}

/// `with_sharding_constraint` on the output of a jitted function of unsharded arguments
/// lays the result out as the constraint says (JAX's "constrain the output" recipe; the
/// call itself runs on one device), as eager `with_sharding_constraint` and `out_shardings`
/// do; values are the unconstrained ones. (A fresh user saw `SingleDeviceSharding`.)
#[test]
fn a_constraint_on_the_output_lays_out_the_result_of_an_unsharded_call() {
    eight_cpu_devices();
    let _l = jaxrepl_tests::serial();
    let am = make_mesh(&[4, 2], &["X", "Y"], Some(&[AxisType::Auto, AxisType::Auto])).unwrap();
    let x = jnp::arange(32.0).reshape(&[8, 4]);
    let want = (&x * 2.0).to_vec::<f32>().unwrap();
    let ns = NamedSharding::new(&am, P!("X", "Y")).unwrap();
    let f = jit(move |x: Array| with_sharding_constraint(&(x * 2.0), ns.clone()));
    let y = f.call(&x).unwrap();
    assert_eq!(spec_text(&y), "Some(P('X', 'Y'))");
    assert_eq!(y.to_vec::<f32>().unwrap(), want);
    {
        let _g = set_mesh(&am);
        let g = jit(|x: Array| with_sharding_constraint(&x, P!("X", None)));
        let y = g.call(&x).unwrap();
        assert_eq!(spec_text(&y), "Some(P('X', None))");
        assert_eq!(y.to_vec::<f32>().unwrap(), x.to_vec::<f32>().unwrap());
    }
    // A constraint in the middle changes no result's layout.
    let h = jit(|x: Array| with_sharding_constraint(&x, NamedSharding::new(&make_mesh(&[8], &["x"], Some(&[AxisType::Auto])).unwrap(), P!("x", None)).unwrap()).map(|c| c.sum()));
    let s = h.call(&x).unwrap();
    assert_eq!(s.item::<f32>().unwrap(), 496.0);
}
