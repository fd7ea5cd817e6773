//! Global-view sharding with 8 simulated CPU devices (own test binary: `jax_num_cpu_devices`
//! is set before the backend starts). Every program's result is compared with the same
//! program on unsharded (single-device) inputs, computed by the engine, and with a host
//! reference; the result shardings are JAX's (inventory §6.2 items 1, 12-15); the error
//! texts are JAX's explicit-sharding errors; `in_shardings`/`out_shardings`,
//! `with_sharding_constraint`, `reshard`, `inspect_array_sharding` inside `jit`.

use jax::prelude::*;
use std::sync::{Arc, Mutex};
use jaxrepl_tests::{assert_close_f32, eight_cpu_devices, put};

fn arange(n: usize) -> Vec<f32> {
    (0..n).map(|i| i as f32).collect()
}

fn mesh42() -> Mesh {
    make_mesh(&[4, 2], &["X", "Y"], None).unwrap()
}

fn close(a: &Array, b: &Array) {
    assert_close_f32(a, b, 1e-5);
}

fn spec_of(a: &Array) -> String {
    format!("{:?}", a.sharding().unwrap().spec().cloned().unwrap_or_default())
}

#[test]
fn elementwise_transpose_and_broadcast_propagate() {
    eight_cpu_devices();
    let mesh = mesh42();
    let host = Array::from_vec(arange(32), &[8, 4]).unwrap();
    let x = put(&host, &mesh, P!("X", "Y"));
    assert_eq!(typeof_(&x).to_string(), "float32[8@X,4@Y]");
    let t = jnp::transpose(&jnp::sin(&x).unwrap(), None).unwrap();
    assert_eq!(typeof_(&t).to_string(), "float32[4@Y,8@X]");
    close(&t, &jnp::transpose(&jnp::sin(&host).unwrap(), None).unwrap());
    // int32[4@X,1] + int32[1,8@Y] -> int32[4@X,8@Y] (inventory §6.2 item 12).
    let a = put(&Array::from_vec((0..4).collect::<Vec<i32>>(), &[4, 1]).unwrap(), &mesh, P!("X", None));
    let b = put(&Array::from_vec((0..8).collect::<Vec<i32>>(), &[1, 8]).unwrap(), &mesh, P!(None, "Y"));
    assert_eq!(typeof_(&a).to_string(), "int32[4@X,1]");
    let c = &a + &b;
    assert_eq!(typeof_(&c).to_string(), "int32[4@X,8@Y]");
    let want: Vec<i32> = (0..4).flat_map(|i| (0..8).map(move |j| i + j)).collect();
    assert_eq!(c.to_vec::<i32>().unwrap(), want);
    // The same under jit.
    let f = jit(|(p, q): (Array, Array)| &p + &q);
    let cj = f.call((&a, &b)).unwrap();
    assert_eq!(typeof_(&cj).to_string(), "int32[4@X,8@Y]");
    assert_eq!(cj.to_vec::<i32>().unwrap(), want);
    // Shards of a propagated result hold the right blocks.
    for s in cj.addressable_shards().unwrap() {
        let (r0, r1) = s.index[0].unwrap();
        let (c0, c1) = s.index[1].unwrap();
        assert_eq!((r1 - r0, c1 - c0), (1, 4));
        let want: Vec<i32> = (r0..r1).flat_map(|i| (c0..c1).map(move |j| (i + j) as i32)).collect();
        assert_eq!(s.data.to_vec::<i32>().unwrap(), want);
    }
}

#[test]
fn reductions_over_sharded_dims_are_replicated_along_them() {
    eight_cpu_devices();
    let mesh = mesh42();
    let host = Array::from_vec(arange(32), &[8, 4]).unwrap();
    let x = put(&host, &mesh, P!("X", "Y"));
    let s0 = jnp::sum(&x, Some(&[0])).unwrap();
    assert_eq!(typeof_(&s0).to_string(), "float32[4@Y]");
    close(&s0, &jnp::sum(&host, Some(&[0])).unwrap());
    let f = jit(|x: Array| (x.clone() * 2.0).sum());
    let s = f.call(&x).unwrap();
    assert_eq!(typeof_(&s).to_string(), "float32[]");
    assert_eq!(s.item::<f32>().unwrap(), 2.0 * (0..32).sum::<i32>() as f32);
    let g = jit(|x: Array| jnp::sum(&jnp::exp(&x).unwrap(), Some(&[1])).unwrap());
    let r = g.call(&x).unwrap();
    assert_eq!(typeof_(&r).to_string(), "float32[8@X]");
    close(&r, &g.call(&host).unwrap());
}

#[test]
fn dot_general_shardings_and_errors() {
    eight_cpu_devices();
    let mesh = mesh42();
    // Batch/free dims: [8@X,16] @ [16,4@Y] -> [8@X,4@Y].
    let ha = Array::from_vec(arange(128).iter().map(|v| v / 100.0).collect(), &[8, 16]).unwrap();
    let hb = Array::from_vec(arange(64).iter().map(|v| v / 50.0).collect(), &[16, 4]).unwrap();
    let a = put(&ha, &mesh, P!("X", None));
    let b = put(&hb, &mesh, P!(None, "Y"));
    let c = jnp::dot(&a, &b).unwrap();
    assert_eq!(typeof_(&c).to_string(), "float32[8@X,4@Y]");
    close(&c, &jnp::dot(&ha, &hb).unwrap());
    // Contracting dims sharded alike: ambiguous without out_sharding (§6.2 item 14).
    let x1 = put(&ha, &mesh, P!(None, "X"));
    let y1 = put(&Array::from_vec(arange(256), &[16, 16]).unwrap(), &mesh, P!("X", None));
    let e = jnp::dot(&x1, &y1).unwrap_err();
    assert_eq!(
        e.to_string(),
        "ShardingTypeError: Contracting dimensions are sharded and it is ambiguous how the output should be sharded. Please specify the output sharding via the `out_sharding` parameter. Got lhs_contracting_spec=('X',) and rhs_contracting_spec=('X',)"
    );
    let z = dot_out_sharding(&x1, &y1, P!("X", None)).unwrap();
    assert_eq!(typeof_(&z).to_string(), "float32[8@X,16]");
    close(&z, &jnp::dot(&ha, &Array::from_vec(arange(256), &[16, 16]).unwrap()).unwrap());
    // Under jit the error is raised at the call, at the user's line.
    let f = jit(|(p, q): (Array, Array)| p.dot(&q)); let dot_line = line!();
    let e = f.call((&x1, &y1)).unwrap_err();
    assert_eq!(e.kind, ErrorKind::ShardingType);
    let loc = e.location.as_ref().expect("the line of p.dot(&q)");
    assert!(loc.file.ends_with("sharding_propagation.rs") && loc.line == dot_line, "{loc:?}");
    assert!(e.message.starts_with("Contracting dimensions are sharded and it is ambiguous"), "{e}");
    // Contracting dims sharded differently.
    let y2 = put(&Array::from_vec(arange(256), &[16, 16]).unwrap(), &mesh, P!("Y", None));
    let e = jnp::dot(&x1, &y2).unwrap_err();
    assert_eq!(
        e.to_string(),
        "ShardingTypeError: Contracting dimensions are sharded differently for lhs and rhs. Make sure both operands have the same sharding for contracting dimensions. Got lhs_contracting_spec=('X',) and rhs_contracting_spec=('Y',)"
    );
}

#[test]
fn illegal_and_incompatible_shardings_are_errors() {
    eight_cpu_devices();
    let mesh = mesh42();
    let h = Array::from_vec((0..16).collect::<Vec<i32>>(), &[4, 4]).unwrap();
    let x = put(&h, &mesh, P!("X", None));
    let y = put(&h, &mesh, P!(None, "X"));
    let f = jit(|(p, q): (Array, Array)| &p + &q); let add_line = line!();
    let e = f.call((&x, &y)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "ShardingTypeError: add operation with inputs: i32[4@X,4], i32[4,4@X] produces an illegally sharded result: i32[4@X,4@X]"
    );
    // Raised after tracing (by the partitioner), it still names the line of the `+`.
    assert_eq!(e.location.as_ref().map(|l| l.line), Some(add_line), "{:?}", e.location);
    // The same two arrays laid out one way first give the single-device result.
    let y_again = reshard(&y, NamedSharding::new(&mesh, P!("X", None)).unwrap()).unwrap();
    let ok = f.call((&x, &y_again)).unwrap();
    assert_eq!(typeof_(&ok).to_string(), "int32[4@X,4]");
    assert_eq!(ok.to_vec::<i32>().unwrap(), (0..16).map(|v| 2 * v).collect::<Vec<i32>>());
    // One dim over two different axes.
    let z = put(&h, &mesh, P!("Y", None));
    let e = jnp::add(&x, &z).unwrap_err();
    assert_eq!(e.to_string(), "ShardingTypeError: add got incompatible shardings for broadcasting: ('X', None), ('Y', None).");
    // Over Auto axes the compiler chooses: no error, the value is right.
    let am = mesh.with_axis_types(&[AxisType::Auto, AxisType::Auto]).unwrap();
    let xa = put(&h, &am, P!("X", None));
    let ya = put(&h, &am, P!(None, "X"));
    let s = f.call((&xa, &ya)).unwrap();
    assert_eq!(s.to_vec::<i32>().unwrap(), (0..16).map(|v| 2 * v).collect::<Vec<i32>>());
}

#[test]
fn reshape_keeps_major_dim_sharding() {
    eight_cpu_devices();
    let mesh = mesh42();
    let host = Array::from_vec(arange(64), &[8, 8]).unwrap();
    let x = put(&host, &mesh, P!("X", None));
    let f = jit(|x: Array| x.reshape(&[8, 2, 4]) * 3.0);
    let y = f.call(&x).unwrap();
    assert_eq!(typeof_(&y).to_string(), "float32[8@X,2,4]");
    close(&y, &f.call(&host).unwrap());
    let g = jit(|x: Array| x.reshape(&[64]));
    let y = g.call(&x).unwrap();
    assert_eq!(typeof_(&y).to_string(), "float32[64@X]");
    close(&y, &host.reshape(&[64]));
    // A minor sharded dim merged away moves data: an error over Explicit axes.
    let xc = put(&host, &mesh, P!(None, "X"));
    let e = g.call(&xc).unwrap_err();
    assert_eq!(e.kind, ErrorKind::ShardingType, "{e}");
    assert!(e.message.contains("reshard"), "{e}");
}

#[test]
fn in_and_out_shardings_place_arguments_and_results() {
    eight_cpu_devices();
    let mesh = mesh42();
    let host = Array::from_vec(arange(32), &[8, 4]).unwrap();
    let f = jit(|x: Array| x.sin() * 2.0)
        .in_shardings(vec![Some(NamedSharding::new(&mesh, P!("X", "Y")).unwrap())])
        .out_shardings(vec![NamedSharding::new(&mesh, P!(None, "Y")).unwrap()]);
    let y = f.call(&host).unwrap();
    assert!(y.committed());
    assert_eq!(typeof_(&y).to_string(), "float32[8,4@Y]");
    assert_eq!(spec_of(&y), "P(None, 'Y')");
    let want = (host.sin() * 2.0).to_vec::<f32>().unwrap();
    let got = y.to_vec::<f32>().unwrap();
    assert!(got.iter().zip(&want).all(|(a, b)| (a - b).abs() < 1e-6));
    for s in y.addressable_shards().unwrap() {
        let (c0, c1) = s.index[1].unwrap();
        assert_eq!(s.index[0], None);
        let want = &want;
        let w: Vec<f32> = (0..8).flat_map(|r| (c0..c1).map(move |c| want[r * 4 + c])).collect();
        assert_eq!(s.data.to_vec::<f32>().unwrap(), w);
    }
    // Specs resolve on the mesh set with set_mesh.
    let _g = set_mesh(&mesh);
    let g = jit(|x: Array| x + 1.0).in_shardings(vec![Some(P!("X"))]);
    let z = g.call(&host).unwrap();
    assert_eq!(typeof_(&z).to_string(), "float32[8@X,4]");
    close(&z, &(host.clone() + 1.0));
    // An in_shardings tuple of the wrong length, and a sharding of too high a rank for an
    // argument, are errors naming the jit argument (JAX's pjit texts).
    let two: Vec<Option<PartitionSpec>> = vec![Some(P!("X")), None];
    let e = jit(|x: Array| x.sin()).in_shardings(two).call(&host).unwrap_err();
    assert!(e.message.ends_with("But jit in_shardings is the wrong length: got a tuple or list of length 2 for an args tuple of length 1."), "{e}");
    let e = jit(|x: Array| x.sin()).in_shardings(vec![Some(P!("X", "Y"))]).call(&jnp::arange(8.0)).unwrap_err();
    // JAX 0.10.2's text (its key path is the parameter's name, ours the position).
    assert!(e.message.starts_with("One of pjit arguments with pytree key path args[0] is incompatible with its sharding annotation NamedSharding("), "{e}");
    assert!(e.message.ends_with("is only valid for values of rank at least 2, but was applied to a value of rank 1."), "{e}");
}

/// A committed argument laid out otherwise than its `in_shardings` entry is JAX's
/// `ValueError`, not a silent reshard (texts and cases from JAX 0.10.2 with 8 host
/// devices); replicated layouts may move (one device onto `P()`, or to another device);
/// an uncommitted argument is placed; the fix the message asks for (`device_put`) works.
#[test]
fn in_shardings_refuse_a_committed_argument_laid_out_otherwise() {
    eight_cpu_devices();
    let mesh = mesh42();
    let here = NamedSharding::new(&mesh, P!("X", "Y")).unwrap();
    let there = NamedSharding::new(&mesh, P!("Y", "X")).unwrap();
    let host = jnp::ones(&[8, 16], DType::F32);
    let x = device_put(&host, here.clone()).unwrap();
    let f = jit(|a: Array| a * 2.0).in_shardings(vec![Some(there.clone())]);
    let e = f.call(&x).unwrap_err();
    // It names the call's line (fresh user F10 F3: no line at all).
    assert_eq!(e.location.as_ref().map(|l| (l.file.ends_with("sharding_propagation.rs"), l.line)), Some((true, line!() - 2)), "{:?}", e.location);
    assert_eq!(e.kind, ErrorKind::Value);
    assert_eq!(
        e.message,
        "Sharding passed to jit does not match the sharding on the respective arg. Got jit sharding: \
         NamedSharding(mesh=Mesh('X': 4, 'Y': 2, axis_types=(Explicit, Explicit)), spec=P('Y', 'X'), memory_kind=device),\n\
         arg sharding: NamedSharding(mesh=Mesh('X': 4, 'Y': 2, axis_types=(Explicit, Explicit)), spec=P('X', 'Y'), memory_kind=device) \
         for arg type: float32[8@X,16@Y]"
    );
    // The same function places an uncommitted argument, and takes x once it is moved.
    assert_eq!(spec_of(&f.call(&host).unwrap()), "P('Y', 'X')");
    let moved = device_put(&x, there.clone()).unwrap();
    assert_eq!(f.call(&moved).unwrap().to_vec::<f32>().unwrap(), vec![2.0; 128]);
    // A committed single-device array against a split layout is refused too ...
    let one = device_put(&host, jax::devices()[3]).unwrap();
    let e = jit(|a: Array| a * 2.0).in_shardings(vec![Some(here.clone())]).call(&one).unwrap_err();
    assert!(e.message.ends_with("arg sharding: SingleDeviceSharding(device=CpuDevice(id=3), memory_kind=device) for arg type: float32[8,16]"), "{e}");
    // ... but replicated layouts move: onto P() on the mesh, or to another device.
    let r = jit(|a: Array| a * 2.0).in_shardings(vec![Some(NamedSharding::new(&mesh, P!()).unwrap())]).call(&one).unwrap();
    assert_eq!(format!("{:?}", r.sharding().unwrap()), format!("{:?}", NamedSharding::new(&mesh, P!()).unwrap()));
    let r = jit(|a: Array| a * 2.0).in_shardings(vec![Some(jax::devices()[2])]).call(&one).unwrap();
    assert_eq!(format!("{:?}", r.sharding().unwrap()), "SingleDeviceSharding(device=CpuDevice(id=2), memory_kind=device)");
    assert_eq!(r.to_vec::<f32>().unwrap(), vec![2.0; 128]);
    // The second argument of two, and a split argument against replicated: refused.
    let rep = NamedSharding::new(&mesh, P!()).unwrap();
    let two = jit(|(a, b): (Array, Array)| a * b).in_shardings(vec![Some(here.clone()), Some(rep.clone())]);
    let e = two.call((&x, &x)).unwrap_err();
    assert!(e.message.contains("Got jit sharding: NamedSharding(mesh=Mesh('X': 4, 'Y': 2, axis_types=(Explicit, Explicit)), spec=P(), memory_kind=device),"), "{e}");
    // The same layout in another memory kind: JAX's memory-kind error.
    let g = jit(|a: Array| a * 2.0).in_shardings(vec![Some(here.with_memory_kind("pinned_host").unwrap())]);
    let e = g.call(&x).unwrap_err();
    assert_eq!(
        e.message,
        "Memory kinds passed to jax.jit does not match memory kind on the respective arg. Got jit memory kind: pinned_host, \
         arg memory kind: device for arg type: float32[8@X,16@Y]"
    );
    // A spec on the mesh set with set_mesh is the same NamedSharding.
    let _g = set_mesh(&mesh);
    let e = jit(|a: Array| a + 1.0).in_shardings(vec![Some(P!("Y"))]).call(&x).unwrap_err();
    assert!(e.message.starts_with("Sharding passed to jit does not match"), "{e}");
    assert_eq!(jit(|a: Array| a + 1.0).in_shardings(vec![Some(P!("X", "Y"))]).call(&x).unwrap().to_vec::<f32>().unwrap(), vec![2.0; 128]);
}

#[test]
fn with_sharding_constraint_and_reshard() {
    eight_cpu_devices();
    let mesh = mesh42();
    let _g = set_mesh(&mesh);
    let host = Array::from_vec(arange(32), &[8, 4]).unwrap();
    let x = device_put(&host, P!("X", "Y")).unwrap();
    let r = reshard(&x, P!(("X", "Y"))).unwrap();
    assert_eq!(typeof_(&r).to_string(), "float32[8@(X,Y),4]");
    assert_eq!(r.to_vec::<f32>().unwrap(), arange(32));
    let c = reshard(&x, NamedSharding::new(&mesh, P!()).unwrap()).unwrap();
    assert_eq!(typeof_(&c).to_string(), "float32[8,4]");
    assert_eq!(c.addressable_shards().unwrap().len(), 8);
    // On an all-Explicit mesh with_sharding_constraint only asserts the layout (JAX's
    // AssertionError), eagerly and inside jit; a matching one is the identity on values.
    let e = with_sharding_constraint(&x, NamedSharding::new(&mesh, P!()).unwrap()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "AssertionError: `with_sharding_constraint` acts as an assert when all axes of mesh are of type `Explicit`. The array sharding: P('X', 'Y') did not match the sharding provided: P(None, None). Please use `jax.sharding.reshard` to shard your input to the sharding you want."
    );
    let e = jit(|x: Array| with_sharding_constraint(&(x.clone() * 2.0), P!("X", None))).call(&x).unwrap_err();
    assert!(e.message.contains("The array sharding: P('X', 'Y') did not match the sharding provided: P('X', None)."), "{e}");
    let f = jit(|x: Array| with_sharding_constraint(&(x.clone() * 2.0), P!("X", "Y")).unwrap());
    let y = f.call(&x).unwrap();
    close(&y, &(host * 2.0));
    assert_eq!(typeof_(&y).to_string(), "float32[8@X,4@Y]");
    // reshard names only Explicit axes; it does not move an array committed elsewhere.
    let am = make_mesh(&[4, 2], &["X", "Y"], Some(&[AxisType::Auto, AxisType::Auto])).unwrap();
    let e = reshard(&x, NamedSharding::new(&am, P!("X")).unwrap()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "ValueError: PartitionSpec passed to reshard cannot contain axis names that are of type Auto or Manual. Got PartitionSpec: P('X',) with axis name: X of type: AxisType.Auto."
    );
    let one = device_put(&jnp::arange(8.0), devices()[0]).unwrap();
    let e = reshard(&one, P!("X")).unwrap_err();
    assert_eq!(
        e.to_string(),
        "ValueError: Received incompatible devices for jitted computation. Got argument args[0] of reshard with shape float32[8] and with device ids [0] on platform CPU and jit's context mesh with device ids [0, 1, 2, 3, 4, 5, 6, 7] on platform CPU"
    );
    assert_eq!(typeof_(&reshard(&jnp::arange(8.0), P!("X")).unwrap()).to_string(), "float32[8@X]");
}

#[test]
fn inspect_array_sharding_inside_jit() {
    eight_cpu_devices();
    let mesh = mesh42();
    let seen: Arc<Mutex<Vec<String>>> = Arc::new(Mutex::new(vec![]));
    let s2 = seen.clone();
    let f = jit(move |x: Array| {
        let y = jnp::transpose(&x.sin(), None).unwrap();
        let s3 = s2.clone();
        debug::inspect_array_sharding(&y, move |s| s3.lock().unwrap().push(format!("{s:?}"))).unwrap();
        y * 2.0
    });
    let host = Array::from_vec(arange(32), &[8, 4]).unwrap();
    let x = put(&host, &mesh, P!("X", "Y"));
    let y = f.call(&x).unwrap();
    assert_eq!(typeof_(&y).to_string(), "float32[4@Y,8@X]");
    assert_eq!(
        seen.lock().unwrap().last().unwrap(),
        "NamedSharding(mesh=Mesh('X': 4, 'Y': 2, axis_types=(Explicit, Explicit)), spec=P('Y', 'X'), memory_kind=device)"
    );
    f.call(&host).unwrap();
    assert_eq!(seen.lock().unwrap().last().unwrap(), "SingleDeviceSharding(device=CpuDevice(id=0), memory_kind=device)");
    // Eagerly: at once.
    let mut got = String::new();
    let out = Arc::new(Mutex::new(String::new()));
    let o2 = out.clone();
    debug::inspect_array_sharding(&x, move |s| *o2.lock().unwrap() = format!("{:?}", s.spec())).unwrap();
    got.push_str(&out.lock().unwrap());
    assert_eq!(got, "Some(P('X', 'Y'))");
}

/// `%sharding`'s three forms: JAX's plain table, ANSI blocks in JAX's `tab20b` colour
/// order (white text on dark colours), HTML with per-device bytes; `%mesh`'s grid.
#[test]
fn sharding_and_mesh_views() {
    eight_cpu_devices();
    let mesh = mesh42();
    let x = put(&Array::from_vec(arange(32), &[8, 4]).unwrap(), &mesh, P!("X", "Y"));
    let v = jax::magic::sharding(&x).unwrap();
    assert!(v.plain.starts_with("┌───────┬───────┐\n│ CPU 0 │ CPU 1 │\n"), "{}", v.plain);
    // Block k of 8 gets tab20b[int(idx/7*20)] with idx stepping by 8/2+1 mod 8: 0, 5, 2, ...; dark: white text
    assert!(v.ansi.starts_with("\x1b[38;2;255;255;255m\x1b[48;2;57;59;121m CPU 0 \x1b[0m\x1b[38;2;255;255;255m\x1b[48;2;214;97;107m CPU 1 \x1b[0m\n"), "{:?}", v.ansi);
    assert_eq!(v.ansi.lines().count(), 4);
    assert!(!v.ansi.contains('│'));
    assert_eq!(v.html.matches(">16 B<").count(), 8, "{}", v.html);
    assert!(v.html.contains("float32[8@X,4@Y] · 128 B"), "{}", v.html);
    let r = jax::magic::sharding(&reshard(&x, NamedSharding::new(&mesh, P!("X", None)).unwrap()).unwrap()).unwrap();
    assert_eq!(r.html.matches(">32 B on each<").count(), 4, "{}", r.html);
    // Row heights in whole tenths of an em (9 lines of P(None, 'Y') on (8, 4) were 11.700000000000001em).
    let cols = jax::magic::sharding(&reshard(&x, NamedSharding::new(&mesh, P!(None, "Y")).unwrap()).unwrap()).unwrap();
    let rows = cols.html.split("grid-template-rows:").nth(1).and_then(|r| r.split(';').next()).unwrap().to_string();
    assert!(rows.split(' ').all(|h| h.strip_suffix("em").is_some_and(|n| n.split('.').nth(1).is_none_or(|d| d.len() == 1))), "{rows}");
    let e = jax::magic::sharding(&Array::from_vec(arange(8), &[2, 2, 2]).unwrap()).unwrap_err();
    assert_eq!(e.to_string(), "ValueError: `visualize_sharding` only works for shapes with 1 and 2 dimensions.");
    // Axis names longer than the squeezed columns (fresh user F10: a usize underflow
    // panic): each column keeps its `CPU k` label, heads are cut to the column.
    let long = make_mesh(&[2, 4], &["rows_axis_long_name", "cols_axis_long_name"], None).unwrap();
    let v = visualize_mesh(&long);
    for k in 0..8 {
        assert!(v.plain.contains(&format!("CPU {k}")) && v.ansi.contains(&format!("CPU {k}")), "{}", v.plain);
    }
    assert!(v.plain.contains("rows_axis_long_name=1 │"), "{}", v.plain);
    assert!(v.plain.lines().skip(1).all(|l| l.chars().count() <= 80), "{}", v.plain);
    assert!(v.plain.contains(" …_long_name=0 …_long_name=1 "), "{}", v.plain);
    let one = make_mesh(&[8], &["a_very_long_axis_name_that_goes_on_and_on"], None).unwrap();
    let v = jax::magic::mesh(Some(&one)).unwrap();
    assert!(v.plain.contains("CPU 7") && v.plain.lines().skip(1).all(|l| l.chars().count() <= 80), "{}", v.plain);

    let t = |s: &str| s.lines().map(|l| l.strip_prefix("        ").unwrap_or(l)).collect::<Vec<_>>().join("\n") + "\n";
    assert_eq!(
        jax::magic::mesh(Some(&mesh)).unwrap().plain,
        t("Mesh('X': 4, 'Y': 2, axis_types=(Explicit, Explicit))
                  Y=0     Y=1
               ┌───────┬───────┐
           X=0 │ CPU 0 │ CPU 1 │
               ├───────┼───────┤
           X=1 │ CPU 2 │ CPU 3 │
               ├───────┼───────┤
           X=2 │ CPU 4 │ CPU 5 │
               ├───────┼───────┤
           X=3 │ CPU 6 │ CPU 7 │
               └───────┴───────┘")
        .replace("\n   ", "\n")
    );
    let m4 = make_mesh(&[4], &["x"], None).unwrap();
    assert_eq!(
        jax::magic::mesh(Some(&m4)).unwrap().plain,
        "Mesh('x': 4, axis_types=(Explicit,))\n   x=0     x=1     x=2     x=3\n┌───────┬───────┬───────┬───────┐\n│ CPU 0 │ CPU 1 │ CPU 2 │ CPU 3 │\n└───────┴───────┴───────┴───────┘\n"
    );
    assert!(jax::magic::mesh(Some(&m4)).unwrap().html.contains("CPU 3"));
}

/// The lowered text shows JAX's Shardy annotations; the compiled text names its path.
#[test]
fn lowered_text_shows_shardings() {
    eight_cpu_devices();
    let mesh = mesh42();
    let x = put(&Array::from_vec(arange(32), &[8, 4]).unwrap(), &mesh, P!("X", "Y"));
    let f = jit(|x: Array| jnp::sum(&x, Some(&[0])).unwrap()).with_name("f");
    let lowered = f.lower(&x).unwrap();
    let text = lowered.as_text();
    assert!(text.starts_with("module @jit_f attributes {mhlo.num_partitions = 8 : i32} {\n  sdy.mesh @mesh = <[\"X\"=4, \"Y\"=2]>\n"), "{text}");
    assert!(
        text.contains("@main(%arg0: tensor<8x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{\"X\"}, {\"Y\"}]>}) -> (tensor<4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{\"Y\"}]>})"),
        "{text}"
    );
    let compiled = lowered.compile().unwrap();
    assert!(compiled.as_text().starts_with("// jaxrepl: arguments sharded over Mesh('X': 4, 'Y': 2"), "{}", compiled.as_text());
    assert!(compiled.as_text().contains("path: partitioned") && compiled.as_text().contains("psum[axes=('X',)"), "{}", compiled.as_text());
    // Unsharded arguments: the plain module.
    let plain = f.lower(&Array::from_vec(arange(32), &[8, 4]).unwrap()).unwrap().as_text();
    assert!(plain.starts_with("module @jit_f {\n"), "{plain}");
    assert!(!plain.contains("sdy."));
}

/// Shard-local programs (no collectives needed) run per device without a gather: each device's result shard is
/// computed on that device's worker from its own input shards; values equal the
/// single-device run; a chain of such calls stays partitioned.
#[test]
fn shard_local_programs_are_partitioned() {
    eight_cpu_devices();
    let mesh = mesh42();
    let host = Array::from_vec(arange(64).iter().map(|v| v / 10.0).collect(), &[8, 8]).unwrap();
    let x = put(&host, &mesh, P!("X", "Y"));
    let y = put(&(host.clone() * 0.5), &mesh, P!("X", "Y"));
    let f = jit(|(a, b): (Array, Array)| (a.sin() * &b + 1.0).exp() - b).with_name("f");
    let before = jax::sharding::partitioned_calls();
    let z = f.call((&x, &y)).unwrap();
    assert!(jax::sharding::partitioned_calls() > before, "a shard-local call runs partitioned");
    assert_eq!(typeof_(&z).to_string(), "float32[8@X,8@Y]");
    // Shards are per device and hold their blocks of the single-device result.
    let want = f.call((&host, &(host.clone() * 0.5))).unwrap();
    let w = want.to_vec::<f32>().unwrap();
    for (k, s) in z.addressable_shards().unwrap().iter().enumerate() {
        assert_eq!(s.device.id as usize, k);
        assert_eq!(s.data.devices().unwrap(), vec![s.device]);
        let (r0, r1) = s.index[0].unwrap();
        let (c0, c1) = s.index[1].unwrap();
        let got = s.data.to_vec::<f32>().unwrap();
        let mut i = 0;
        for r in r0..r1 {
            for c in c0..c1 {
                assert!((got[i] - w[r * 8 + c]).abs() <= 1e-5 * (1.0 + w[r * 8 + c].abs()));
                i += 1;
            }
        }
    }
    close(&z, &want);
    // Chained: the result's shards feed the next call directly.
    let z2 = f.call((&z, &y)).unwrap();
    close(&z2, &f.call((&want, &(host.clone() * 0.5))).unwrap());
    // The compiled text names the path.
    let text = f.lower((&x, &y)).unwrap().compile().unwrap().as_text();
    assert!(text.starts_with("// jaxrepl: arguments sharded over Mesh('X': 4, 'Y': 2, axis_types=(Explicit, Explicit)); path: partitioned (one per-device program on each of the 8 devices at once, 0 collectives per device; no gather)."), "{text}");
    assert!(text.contains("f32[2,4]"), "blocks of shape [2,4]: {text}");
    let g = jit(|a: Array| jnp::sum(&a, Some(&[0])).unwrap());
    // A reduction over a sharded dim: partitioned with a psum over X (tests/partitioner.rs).
    close(&g.call(&x).unwrap(), &jnp::sum(&host, Some(&[0])).unwrap());
    assert!(g.lower(&x).unwrap().compile().unwrap().as_text().contains("psum[axes=('X',)"));
    // Replicated along Y: blocks are repeated on both devices of a row.
    let xr = put(&host, &mesh, P!("X", None));
    let zr = f.call((&xr, &put(&(host.clone() * 0.5), &mesh, P!("X", None)))).unwrap();
    assert_eq!(typeof_(&zr).to_string(), "float32[8@X,8]");
    close(&zr, &want);
}
