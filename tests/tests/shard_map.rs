//! `shard_map` and the collectives with 8 simulated CPU devices (`jax_num_cpu_devices = 8`,
//! set before anything starts the backend: this file is its own test binary). Each
//! collective is checked against the reference functions of JAX's shard-map page
//! (`psum_ref`, `all_gather_ref`, `psum_scatter_ref`, `ppermute_ref`, `all_to_all_ref`),
//! written here on host data: exact for integers, against f64 sums for floats; the
//! inventory's printed values (§7.2 item 12, JAX 0.11.1) where it has them; meshes of 4,
//! 8 and 2×4 devices, eager and under `jit`; printing; and the errors for bad specs.

use jax::prelude::*;
use jax::runtime::collectives::device_header;
use jaxrepl_tests::eight_cpu_devices;

/// The x of the inventory's collective examples.
const X16: [i32; 16] = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 1, 2];

fn mesh4() -> Mesh {
    make_mesh(&[4], &["i"], Some(&[AxisType::Auto; 1])).unwrap()
}

fn ints(x: &Array) -> Vec<i32> {
    x.to_vec::<i32>().unwrap()
}

// ---------------------------------------------------------------- host references

/// `blocks[k]` of `x` split in `n` along its only axis.
fn split(x: &[i32], n: usize) -> Vec<Vec<i32>> {
    x.chunks(x.len() / n).map(|c| c.to_vec()).collect()
}

fn psum_ref(blocks: &[Vec<i32>]) -> Vec<Vec<i32>> {
    let s: Vec<i32> = (0..blocks[0].len()).map(|e| blocks.iter().map(|b| b[e]).sum()).collect();
    vec![s; blocks.len()]
}

fn all_gather_ref(blocks: &[Vec<i32>]) -> Vec<Vec<i32>> {
    let all: Vec<i32> = blocks.concat();
    vec![all; blocks.len()]
}

fn psum_scatter_ref(blocks: &[Vec<i32>]) -> Vec<Vec<i32>> {
    let s = &psum_ref(blocks)[0];
    split(s, blocks.len())
}

fn ppermute_ref(blocks: &[Vec<i32>], perm: &[(usize, usize)]) -> Vec<Vec<i32>> {
    let mut out = vec![vec![0; blocks[0].len()]; blocks.len()];
    for &(s, d) in perm {
        out[d] = blocks[s].clone();
    }
    out
}

fn all_to_all_ref(blocks: &[Vec<i32>]) -> Vec<Vec<i32>> {
    let n = blocks.len();
    (0..n).map(|d| blocks.iter().flat_map(|b| split(b, n)[d].clone()).collect()).collect()
}

// ---------------------------------------------------------------- the inventory's examples

#[test]
fn psum_matches_reference_and_inventory() {
    eight_cpu_devices();
    let m = mesh4();
    let f = shard_map(|x: Array| lax::psum(&x, "i"), Some(&m), P!("i"), P!());
    let y = f.call(jnp::array(&X16)).unwrap();
    assert_eq!(ints(&y), vec![22, 20, 12, 17]);
    assert_eq!(ints(&y), psum_ref(&split(&X16, 4))[0]);
    // The result is sharded by the out_spec: replicated over the mesh.
    assert_eq!(format!("{:?}", y.sharding().unwrap()), "NamedSharding(mesh=Mesh('i': 4, axis_types=(Auto,)), spec=P(), memory_kind=device)");
    // Every device's copy is the sum.
    for s in y.addressable_shards().unwrap() {
        assert_eq!(ints(&s.data), vec![22, 20, 12, 17]);
    }
}

#[test]
fn all_gather_tiled_and_untiled() {
    eight_cpu_devices();
    let m = mesh4();
    let x = jnp::array(&[3i32, 9, 5, 2]);
    let f = shard_map(|x: Array| lax::all_gather(&x, "i", 0, true), Some(&m), P!("i"), P!("i"));
    let y = f.call(x.clone()).unwrap();
    let want: Vec<i32> = all_gather_ref(&split(&[3, 9, 5, 2], 4)).concat();
    assert_eq!(ints(&y), want);
    assert_eq!(ints(&y), vec![3, 9, 5, 2, 3, 9, 5, 2, 3, 9, 5, 2, 3, 9, 5, 2]);
    let g = shard_map(|x: Array| lax::all_gather(&x, "i", 0, false), Some(&m), P!("i"), P!("i"));
    let y = g.call(x).unwrap();
    assert_eq!(y.shape(), vec![16, 1]);
    assert_eq!(ints(&y), want);
}

#[test]
fn psum_scatter_ppermute_all_to_all() {
    eight_cpu_devices();
    let m = mesh4();
    let x = jnp::array(&X16);
    let f = shard_map(|x: Array| lax::psum_scatter(&x, "i", 0, true), Some(&m), P!("i"), P!("i"));
    let y = f.call(x.clone()).unwrap();
    assert_eq!(ints(&y), vec![22, 20, 12, 17]);
    assert_eq!(ints(&y), psum_scatter_ref(&split(&X16, 4)).concat());
    let shards: Vec<Vec<i32>> = y.addressable_shards().unwrap().iter().map(|s| ints(&s.data)).collect();
    assert_eq!(shards, vec![vec![22], vec![20], vec![12], vec![17]]);

    let perm: Vec<(usize, usize)> = (0..4).map(|i| (i, (i + 1) % 4)).collect();
    let p2 = perm.clone();
    let f = shard_map(move |x: Array| lax::ppermute(&x, "i", &p2), Some(&m), P!("i"), P!("i"));
    let a8: Vec<i32> = (0..8).collect();
    let y = f.call(jnp::array(&a8)).unwrap();
    assert_eq!(ints(&y), vec![6, 7, 0, 1, 2, 3, 4, 5]);
    assert_eq!(ints(&y), ppermute_ref(&split(&a8, 4), &perm).concat());
    // A device that receives nothing gets zeros.
    let f = shard_map(|x: Array| lax::ppermute(&x, "i", &[(0, 1)]), Some(&m), P!("i"), P!("i"));
    assert_eq!(ints(&f.call(jnp::array(&a8)).unwrap()), ppermute_ref(&split(&a8, 4), &[(0, 1)]).concat());

    let f = shard_map(|x: Array| lax::all_to_all(&x, "i", 0, 0, true), Some(&m), P!("i"), P!("i"));
    let y = f.call(x).unwrap();
    assert_eq!(ints(&y), vec![3, 5, 5, 9, 1, 9, 3, 7, 4, 2, 5, 1, 1, 6, 8, 2]);
    assert_eq!(ints(&y), all_to_all_ref(&split(&X16, 4)).concat());
}

#[test]
fn axis_index_and_block_shapes() {
    eight_cpu_devices();
    let m = make_mesh(&[4, 2], &["i", "j"], Some(&[AxisType::Auto; 2])).unwrap();
    let f = shard_map(
        |x: Array| -> Result<Array> {
            assert_eq!(x.shape(), vec![3, 6]);
            let i = lax::axis_index("i")?;
            let j = lax::axis_index("j")?;
            Ok(jnp::reshape(&(i * 10 + j), &[1, 1])?)
        },
        Some(&m),
        P!("i", "j"),
        P!("i", "j"),
    );
    let y = f.call(jnp::zeros(&[12, 12], DType::F32)).unwrap();
    assert_eq!(y.shape(), vec![4, 2]);
    assert_eq!(ints(&y), vec![0, 1, 10, 11, 20, 21, 30, 31]);
    // psum then untile (§7.2 item 5).
    let f4 = shard_map(|x: Array| lax::psum(&x, "i"), Some(&m), P!("i", "j"), P!(None, "j"));
    assert_eq!(f4.call(jnp::zeros(&[12, 12], DType::F32)).unwrap().shape(), vec![3, 12]);
    let f5 = shard_map(|x: Array| lax::psum(&x, ("i", "j")), Some(&m), P!("i", "j"), P!(None, None));
    assert_eq!(f5.call(jnp::zeros(&[12, 12], DType::F32)).unwrap().shape(), vec![3, 6]);
}

#[test]
fn two_dim_psums_match_inventory() {
    eight_cpu_devices();
    let m = make_mesh(&[2, 2], &["i", "j"], Some(&[AxisType::Auto; 2])).unwrap();
    let x = jnp::reshape(&jnp::arange(16), &[4, 4]).unwrap();
    let f = shard_map(|x: Array| lax::psum(&x, "i"), Some(&m), P!("i", "j"), P!(None, "j"));
    assert_eq!(ints(&f.call(x.clone()).unwrap()), vec![8, 10, 12, 14, 16, 18, 20, 22]);
    let f = shard_map(|x: Array| lax::psum(&x, ("i", "j")), Some(&m), P!("i", "j"), P!(None, None));
    assert_eq!(ints(&f.call(x).unwrap()), vec![20, 24, 36, 40]);
}

// ---------------------------------------------------------------- 8 devices, 2x4, floats

/// Float psum/pmean/pmax over 'j' of a 2x4 mesh against f64 references.
#[test]
fn float_collectives_on_2x4_mesh() {
    eight_cpu_devices();
    let m = make_mesh(&[2, 4], &["i", "j"], Some(&[AxisType::Auto; 2])).unwrap();
    let (x, host) = jaxrepl_tests::host_array(&[4, 16], 7);
    // Blocks are [2, 4]: rows split by 'i', columns by 'j'.
    let f = shard_map(
        |x: Array| -> Result<(Array, Array, Array)> { Ok((lax::psum(&x, "j")?, lax::pmean(&x, "j")?, lax::pmax(&x, "j")?)) },
        Some(&m),
        P!("i", "j"),
        P!("i", None),
    );
    let (s, mean, mx) = f.call(x).unwrap();
    assert_eq!(s.shape(), vec![4, 4]);
    let (s, mean, mx) = (s.to_vec::<f32>().unwrap(), mean.to_vec::<f32>().unwrap(), mx.to_vec::<f32>().unwrap());
    for r in 0..4 {
        for c in 0..4 {
            let vals: Vec<f64> = (0..4).map(|jb| host[r * 16 + jb * 4 + c]).collect();
            let sum: f64 = vals.iter().sum();
            assert!((s[r * 4 + c] as f64 - sum).abs() <= 1e-5 * (1.0 + sum.abs()), "psum at ({r},{c})");
            assert!((mean[r * 4 + c] as f64 - sum / 4.0).abs() <= 1e-5 * (1.0 + sum.abs()));
            assert_eq!(mx[r * 4 + c] as f64, vals.iter().cloned().fold(f64::MIN, f64::max));
        }
    }
}

/// All 8 devices: psum, all_gather, psum_scatter, ppermute, all_to_all against the
/// references, eager and under jit, with bitwise-equal results between the two.
#[test]
fn eight_devices_eager_and_jit() {
    eight_cpu_devices();
    let m = make_mesh(&[8], &["x"], Some(&[AxisType::Auto; 1])).unwrap();
    let data: Vec<i32> = (0..64).map(|i| (i * 37 + 11) % 23 - 7).collect();
    let blocks = split(&data, 8);
    let perm: Vec<(usize, usize)> = (0..8).map(|i| (i, (i + 3) % 8)).collect();
    let p2 = perm.clone();
    let body = move |x: Array| -> Result<Vec<Array>> {
        Ok(vec![
            lax::psum(&x, "x")?,
            lax::all_gather(&x, "x", 0, true)?,
            lax::psum_scatter(&x, "x", 0, true)?,
            lax::ppermute(&x, "x", &p2)?,
            lax::all_to_all(&x, "x", 0, 0, true)?,
        ])
    };
    let f = shard_map(body, Some(&m), P!("x"), P!("x"));
    let want = [
        psum_ref(&blocks).concat(),
        all_gather_ref(&blocks).concat(),
        psum_scatter_ref(&blocks).concat(),
        ppermute_ref(&blocks, &perm).concat(),
        all_to_all_ref(&blocks).concat(),
    ];
    let x = jnp::array(&data);
    let eager = f.call(x.clone()).unwrap();
    for (got, want) in eager.iter().zip(&want) {
        assert_eq!(&ints(got), want);
    }
    let jf = jit(move |x: Array| f.call(x));
    let jitted = jf.call(&x).unwrap();
    for (got, want) in jitted.iter().zip(&want) {
        assert_eq!(&ints(got), want);
    }
    // Floats: psum is bitwise the same eagerly, under jit and from run to run.
    let (xf, host) = jaxrepl_tests::host_array(&[8, 1000], 3);
    let g = shard_map(|x: Array| lax::psum(&x, "x"), Some(&m), P!("x"), P!());
    let a = g.call(xf.clone()).unwrap().to_vec::<f32>().unwrap();
    let jg = jit(move |x: Array| g.call(x));
    let b = jg.call(&xf).unwrap().to_vec::<f32>().unwrap();
    let c = jg.call(&xf).unwrap().to_vec::<f32>().unwrap();
    assert_eq!(a, b);
    assert_eq!(b, c);
    for e in 0..1000 {
        let r: f64 = (0..8).map(|k| host[k * 1000 + e]).sum();
        assert!((a[e] as f64 - r).abs() <= 1e-5 * (1.0 + r.abs()));
    }
}

/// A sharded input is used shard by shard, and the body computes on its own device.
#[test]
fn sharded_inputs_and_body_ops() {
    eight_cpu_devices();
    let m = make_mesh(&[8], &["x"], Some(&[AxisType::Auto; 1])).unwrap();
    let x = jnp::arange(16).astype(DType::F32);
    let xs = device_put(&x, NamedSharding::new(&m, P!("x")).unwrap()).unwrap();
    let f = shard_map(|x: Array| -> Result<Array> { Ok(x.sin() * 2.0 + lax::axis_index("x")?.astype(DType::F32)) }, Some(&m), P!("x"), P!("x"));
    let y = f.call(xs).unwrap();
    let v = y.to_vec::<f32>().unwrap();
    for (i, got) in v.iter().enumerate() {
        let want = (i as f32).sin() * 2.0 + (i / 2) as f32;
        assert!((got - want).abs() < 1e-5);
    }
    let devs: Vec<String> = y.addressable_shards().unwrap().iter().map(|s| s.device.to_string()).collect();
    assert_eq!(devs, (0..8).map(|k| format!("cpu:{k}")).collect::<Vec<_>>());
    // The mesh from set_mesh.
    let _g = set_mesh(&m);
    let f = shard_map(|x: Array| lax::psum(&x, "x"), None, P!("x"), P!());
    assert_eq!(f.call(x).unwrap().to_vec::<f32>().unwrap(), vec![56.0, 64.0]);
}

// ---------------------------------------------------------------- printing and errors

#[test]
fn jaxpr_of_shard_map() {
    eight_cpu_devices();
    let m = make_mesh(&[2], &["i"], Some(&[AxisType::Auto; 1])).unwrap();
    let f = shard_map(|x: Array| lax::psum(&(x * 2.0), "i"), Some(&m), P!("i"), P!());
    let j = make_jaxpr(move |x: Array| f.call(x), jnp::zeros(&[6], DType::F32)).unwrap();
    expect_test::expect![[r#"
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
          in (b,) }"#]]
    .assert_eq(&j.to_string());
    let g = shard_map(|x: Array| lax::all_gather(&x, "i", 0, true), Some(&m), P!("i"), P!("i"));
    let j = make_jaxpr(move |x: Array| g.call(x), jnp::zeros(&[6], DType::F32)).unwrap();
    let want = "d:f32[6]{V:i} = all_gather[\n            all_gather_dimension=0\n            axis_index_groups=None\n            axis_name=('i',)\n            axis_size=2\n            tiled=True\n          ] c";
    assert!(j.to_string().contains(want), "{j}");
}

#[test]
fn device_headers_match_jax() {
    eight_cpu_devices();
    let m = make_mesh(&[2], &["i"], Some(&[AxisType::Auto; 1])).unwrap();
    assert_eq!(device_header(&m, 1, &[1]), "On cpu:1 at mesh coordinates (i,) = (1,):");
    let m2 = make_mesh(&[2, 2], &["i", "j"], Some(&[AxisType::Auto; 2])).unwrap();
    assert_eq!(device_header(&m2, 0, &[0, 0]), "On cpu:0 at mesh coordinates (i, j,) = (0, 0):");
}

#[test]
fn check_vma_error_matches_jax() {
    eight_cpu_devices();
    let m = make_mesh(&[2], &["i"], Some(&[AxisType::Auto; 1])).unwrap();
    fn _rem_singleton(x: Array) -> Array {
        x
    }
    let f = shard_map(_rem_singleton, Some(&m), P!("i"), P!());
    let e = f.call(jnp::arange(6).astype(DType::F32)).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Value);
    assert_eq!(
        e.message,
        "shard_map applied to the function '_rem_singleton' was given out_specs which require replication which can't be statically inferred given the mesh:\n\n\
         The mesh given has shape (2,) with corresponding axis names ('i',).\n\n\
         out_specs is P() which implies that the corresponding output value is replicated across mesh axis 'i', but could not infer replication over any axes\n\n\
         Check if these output values are meant to be replicated over those mesh axes. If not, consider revising the corresponding out_specs entries. If so, consider disabling the check by passing the check_vma=False argument to `jax.shard_map`."
    );
    // Without the check the first device's block is the result.
    let g = shard_map_with(_rem_singleton, Some(&m), P!("i"), P!(), false);
    assert_eq!(g.call(jnp::arange(6).astype(DType::F32)).unwrap().to_vec::<f32>().unwrap(), vec![0.0, 1.0, 2.0]);
    // A psum over the axis makes it invariant: no error.
    let h = shard_map(|x: Array| lax::psum(&x, "i"), Some(&m), P!("i"), P!());
    assert!(h.call(jnp::arange(6).astype(DType::F32)).is_ok());
}

#[test]
fn bad_specs_are_errors() {
    eight_cpu_devices();
    let m = mesh4();
    let f = shard_map(|x: Array| x, Some(&m), P!("k"), P!("k"));
    let e = f.call(jnp::arange(8)).unwrap_err();
    assert!(e.message.starts_with("Resource axis: k of P('k',) is not found in mesh: ('i',)."), "{e}");
    let f = shard_map(|x: Array| x, Some(&m), P!("i"), P!("i"));
    let e = f.call(jnp::arange(6)).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Value);
    assert!(e.message.contains("which maps array axis 0 (of size 6) to mesh axis 'i' (of size 4), but 4 does not evenly divide 6"), "{e}");
    let f = shard_map(|x: Array| lax::psum(&x, "k"), Some(&m), P!("i"), P!());
    let e = f.call(jnp::arange(8)).unwrap_err();
    assert!(e.message.starts_with("unbound axis name: k."), "{e}");
    let e = lax::psum(&jnp::arange(8), "i").unwrap_err();
    assert!(e.message.starts_with("unbound axis name: i."), "{e}");
    let f = shard_map(|x: Array| x, Some(&m), P!("i", None), P!("i"));
    let e = f.call(jnp::arange(8)).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Value);
    assert!(e.message.contains(
        "was given an in_specs entry which is too long to be compatible with the corresponding input value from the function:\n\n\
         in_specs is P('i', None) which has length 2, but the passed args[0] has shape int32[8], which has rank 1 (and 1 < 2)\n\n\
         Entries in in_specs must be of length no greater than the number of axes in the corresponding input value."
    ), "{e}");
    let f = shard_map(|x: Array| x.sum(), Some(&m), P!("i"), P!("i"));
    let e = f.call(jnp::arange(8)).unwrap_err();
    assert!(e.message.contains("out_specs is P('i',) which has length 1, but "), "{e}");
    assert!(e.message.contains("(*args) has shape int32[], which has rank 0 (and 0 < 1)"), "{e}");
    // One mesh axis for two dimensions: JAX 0.10.2's DuplicateSpecError, word for word.
    let m2 = make_mesh(&[2, 4], &["X", "Y"], None).unwrap();
    let e = NamedSharding::new(&m2, P!("X", "X")).unwrap_err();
    assert_eq!(e.ename(), "DuplicateSpecError");
    assert_eq!(
        e.message,
        "A single NamedSharding spec specification can map every mesh axis to at most one positional dimension, but P('X', 'X') has duplicate entries for `X`"
    );
}

// ---------------------------------------------------------------- differentiation

/// grad through a shard_map with psum (the data-parallel loss of the page) against
/// central differences of the same function evaluated at f64 on the host.
#[test]
fn grad_through_psum_matches_finite_differences() {
    eight_cpu_devices();
    let m = make_mesh(&[4], &["i"], Some(&[AxisType::Auto; 1])).unwrap();
    let (x, xh) = jaxrepl_tests::host_array(&[8, 3], 11);
    let (w, wh) = jaxrepl_tests::host_array(&[3], 12);
    // loss = sum_i psum(sum(sin(x_blk * w)))  (w replicated, x split over rows)
    let sm = shard_map(
        |(x, w): (Array, Array)| -> Result<Array> { lax::psum(&(x * w).sin().sum(), "i") },
        Some(&m),
        [P!("i"), P!()],
        P!(),
    );
    let g = grad(move |xw: (Array, Array)| sm.call(xw));
    let (gx, gw) = g((x.clone(), w.clone())).unwrap();
    let loss = |xs: &[f64], ws: &[f64]| -> f64 { (0..8).flat_map(|r| (0..3).map(move |c| (r, c))).map(|(r, c)| (xs[r * 3 + c] * ws[c]).sin()).sum() };
    let fd_x = jaxrepl_tests::central_differences(|v| loss(v, &wh), &xh);
    let fd_w = jaxrepl_tests::central_differences(|v| loss(&xh, v), &wh);
    for (a, b) in gx.to_vec::<f32>().unwrap().iter().zip(&fd_x) {
        assert!((*a as f64 - b).abs() < 1e-3, "dx {a} vs {b}");
    }
    for (a, b) in gw.to_vec::<f32>().unwrap().iter().zip(&fd_w) {
        assert!((*a as f64 - b).abs() < 1e-3 * (1.0 + b.abs()), "dw {a} vs {b}");
    }
    // Under jit, and through all_gather (its transpose is psum_scatter): every device
    // returns sin of the whole gathered x, so loss = 4 * sum(sin(x)) and grad = 4 cos(x).
    let sm2 = shard_map(|x: Array| -> Result<Array> { Ok(lax::all_gather(&x, "i", 0, true)?.sin()) }, Some(&m), P!("i"), P!("i"));
    let g2 = jit(grad(move |x: Array| -> Result<Array> { Ok(sm2.call(x)?.sum()) }));
    let v: Vec<f64> = (0..8).map(|k| k as f64 * 0.3).collect();
    let xv = Array::from_vec(v.iter().map(|&a| a as f32).collect::<Vec<f32>>(), &[8]).unwrap();
    let got = g2.call(&xv).unwrap().to_vec::<f32>().unwrap();
    for (a, b) in got.iter().zip(&v) {
        assert!((*a as f64 - 4.0 * b.cos()).abs() < 1e-4, "{a} vs {}", 4.0 * b.cos());
    }
}

/// JAX 0.10.2 on a mesh whose axes are all `Explicit` (`make_mesh`'s default): shard_map
/// takes each argument only already split as its in_spec says (an uncommitted one is
/// `P(None,)`), eagerly and under `jit`; `reshard` first is the fix; a mesh with an Auto
/// axis keeps splitting arguments itself. The message's first sentence is JAX's
/// (captured with `.venv-jax`, 8 forced host devices; found by a fresh user).
#[test]
fn explicit_mesh_arguments_must_match_in_specs() {
    eight_cpu_devices();
    let mesh = make_mesh(&[4, 2], &["X", "Y"], None).unwrap();
    let host = jnp::arange(32.0).reshape(&[8, 4]);
    let x = device_put(&host, NamedSharding::new(&mesh, P!("X", "Y")).unwrap()).unwrap();
    let sm = shard_map(|b: Array| b * 2.0, Some(&mesh), P!("X"), P!("X"));
    let jax_text = "in_specs passed to shard_map: P('X', None) does not match the specs of the input: P('X', 'Y') for arg: float32[8@X,4@Y].";
    let e = sm.call(&x).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Value);
    assert!(e.message.starts_with(jax_text) && e.message.contains("you can use `reshard` on the arguments"), "{e}");
    let sm2 = sm.clone();
    let e = jit(move |a: Array| sm2.call(a)).call(&x).unwrap_err();
    assert!(e.message.starts_with(jax_text), "{e}");
    let e = sm.call(&host).unwrap_err();
    assert!(e.message.starts_with("in_specs passed to shard_map: P('X', None) does not match the specs of the input: P(None, None) for arg: float32[8,4]."), "{e}");
    // The fix: reshard to the in_spec first.
    let _m = set_mesh(&mesh);
    let fixed = sm.call(reshard(&x, P!("X", None)).unwrap()).unwrap();
    assert_eq!(fixed.to_vec::<f32>().unwrap(), host.to_vec::<f32>().unwrap().iter().map(|v| v * 2.0).collect::<Vec<_>>());
    let same = shard_map(|b: Array| b * 2.0, Some(&mesh), P!("X", "Y"), P!("X", "Y"));
    assert_eq!(same.call(&x).unwrap().to_vec::<f32>().unwrap(), fixed.to_vec::<f32>().unwrap());
    // A scalar with P() matches; a mixed (Explicit, Auto) mesh splits by itself.
    let scaled = shard_map(|(b, s): (Array, Array)| b * s, Some(&mesh), [P!("X", "Y"), P!()], P!("X", "Y"));
    assert_eq!(scaled.call((&x, Array::scalar(3.0f32))).unwrap().to_vec::<f32>().unwrap()[1], 3.0);
    let mixed = make_mesh(&[4, 2], &["X", "Y"], Some(&[AxisType::Explicit, AxisType::Auto])).unwrap();
    let on_mixed = shard_map(|b: Array| b * 2.0, Some(&mixed), P!(None, "Y"), P!(None, "Y"));
    assert_eq!(on_mixed.call(&host).unwrap().to_vec::<f32>().unwrap(), fixed.to_vec::<f32>().unwrap());
}

/// `typeof_` inside a `shard_map` body shows the block type and the mesh axes the value
/// varies over, as JAX 0.10.2 prints them (`float32[1,2]{V:(X,Y)}`; `psum` over X leaves
/// `{V:Y}`; a value invariant over every axis shows none); with `check_vma` off, none.
#[test]
fn typeof_in_a_body_shows_the_varying_axes() {
    eight_cpu_devices();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let body = |seen: std::sync::Arc<std::sync::Mutex<Vec<String>>>, axis: &'static str| {
        move |b: Array| -> Result<Array> {
            let s = lax::psum(&b, axis)?;
            let mut l = seen.lock().unwrap();
            l.push(typeof_(&b).to_string());
            l.push(typeof_(&s).to_string());
            l.push(typeof_(&b.sum()).to_string());
            Ok(b)
        }
    };
    let x = jnp::arange(16.0).reshape(&[8, 2]);
    let explicit = make_mesh(&[2, 4], &["X", "Y"], None).unwrap();
    let xs = device_put(&x, NamedSharding::new(&explicit, P!(("X", "Y"))).unwrap()).unwrap();
    let f = shard_map(body(seen.clone(), "X"), Some(&explicit), P!(("X", "Y")), P!(("X", "Y")));
    assert_eq!(f.call(&xs).unwrap().to_vec::<f32>().unwrap(), x.to_vec::<f32>().unwrap());
    assert_eq!(*seen.lock().unwrap(), ["float32[1,2]{V:(X,Y)}", "float32[1,2]{V:Y}", "float32[]{V:(X,Y)}"]);
    seen.lock().unwrap().clear();
    let auto = make_mesh(&[2, 4], &["X", "Y"], Some(&[AxisType::Auto; 2])).unwrap();
    let f = shard_map(body(seen.clone(), "X"), Some(&auto), P!("X"), P!("X"));
    f.call(&x).unwrap();
    assert_eq!(*seen.lock().unwrap(), ["float32[4,2]{V:X}", "float32[4,2]", "float32[]{V:X}"]);
    seen.lock().unwrap().clear();
    let f = shard_map_with(body(seen.clone(), "X"), Some(&auto), P!("X"), P!("X"), false);
    f.call(&x).unwrap();
    assert_eq!(*seen.lock().unwrap(), ["float32[4,2]", "float32[4,2]", "float32[]"]);
}

/// JAX 0.10.2's varying-axes rules for loops and `cond` in a body (the shard-map page's
/// "scan-vma" section; texts and values from JAX run with 8 CPU devices): a carry that
/// starts invariant and comes back varying is a TypeError naming `pcast`; `pcast(init, 'i',
/// to='varying')` fixes it; a varying carry the body makes invariant, a `while_loop`'s
/// carry and `cond` branches that differ are TypeErrors too; a scan over varying xs with
/// an invariant carry keeps the carry invariant (`float32[]`, ys `float32[2]{V:i}`).
#[test]
fn loop_carries_and_cond_branches_keep_their_varying_axes() {
    eight_cpu_devices();
    let mesh = mesh4();
    let x = jnp::arange(8.0);
    let err = |f: ShardMapped<Array, Array>| f.call(&x).unwrap_err().to_string();
    let sm = |f: fn(Array) -> Result<Array>| shard_map(f, Some(&mesh), P!("i"), P!("i"));
    let e = err(sm(|b| lax::fori_loop(0, 3, |(_, c): (Array, Array)| c + &b, jnp::zeros(&[2], DType::F32))));
    assert_eq!(
        e.lines().next().unwrap(),
        "TypeError: scan body function carry input and carry output must have equal types, but they differ:"
    );
    assert!(e.contains("\n\nThe input carry component loop_carry[1] has type float32[2] but the corresponding output carry component has type float32[2]{V:i}, so the manual axis types do not match.\n\nThis might be fixed by applying `jax.lax.pcast(..., ('i',), to='varying')`, to the initial carry value corresponding to the input carry component loop_carry[1].\nSee https://docs.jax.dev/en/latest/notebooks/shard_map.html#scan-vma for more information.\n\nRevise the function so that all output types match the corresponding input types."), "{e}");
    // The fix: the initial carry typed as varying; eager and under jit.
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let s2 = seen.clone();
    let fixed = shard_map(
        move |b: Array| -> Result<Array> {
            let c = lax::pcast(&jnp::zeros(&[2], DType::F32), "i", "varying")?;
            s2.lock().unwrap().push(typeof_(&c).to_string());
            lax::fori_loop(0, 3, |(_, c): (Array, Array)| c + &b, c)
        },
        Some(&mesh),
        P!("i"),
        P!("i"),
    );
    let want = [0.0f32, 3.0, 6.0, 9.0, 12.0, 15.0, 18.0, 21.0];
    assert_eq!(fixed.call(&x).unwrap().to_vec::<f32>().unwrap(), want);
    assert_eq!(*seen.lock().unwrap(), ["float32[2]{V:i}"]);
    let f2 = fixed.clone();
    assert_eq!(jit(move |x: Array| f2.call(x)).call(&x).unwrap().to_vec::<f32>().unwrap(), want);
    let f3 = fixed.clone();
    let j = make_jaxpr(move |x: Array| f3.call(x), &x).unwrap().to_string();
    assert!(j.contains("e:f32[2]{V:i} = pvary[axes=('i',)] d"), "{j}");
    // The scan body's values with their axes, as JAX 0.10.2 prints them.
    assert!(j.contains("jaxpr={ lambda ; h:f32[2]{V:i} i:i32[] j:f32[2]{V:i}. let"), "{j}");
    assert!(j.contains("l:f32[2]{V:i} = add j h"), "{j}");
    // A varying carry made invariant: no pcast hint.
    let e = err(sm(|b| lax::fori_loop(0, 3, |(_, _c): (Array, Array)| jnp::zeros(&[2], DType::F32), b)));
    assert!(e.contains("The input carry component loop_carry[1] has type float32[2]{V:i} but the corresponding output carry component has type float32[2], so the manual axis types do not match.\n\nRevise the function"), "{e}");
    // while_loop.
    let e = err(sm(|b| {
        let c = lax::while_loop(|c: Array| c.lt(10.0), |c: Array| c + b.sum(), Array::scalar(0.0f32))?;
        lax::broadcast_to(&c.reshape(&[1]), &[2])
    }));
    assert!(e.starts_with("TypeError: while_loop body function carry input and carry output must have equal types, but they differ:\n\nThe input carry has type float32[] but the corresponding output carry component has type float32[]{V:i}, so the manual axis types do not match.\n\nThis might be fixed by applying `jax.lax.pcast(..., ('i',), to='varying')`"), "{e}");
    // cond branches.
    let e = err(sm(|b| {
        let p = b.index(s![0]).gt(100.0);
        let b2 = b.clone();
        lax::cond(&p, move |_: ()| b2.clone(), |_: ()| jnp::zeros(&[2], DType::F32), ())
    }));
    assert!(e.starts_with("TypeError: cond branches must have equal output types but they differ.\n\nThe output of true_fun has type float32[2]{V:i} but the corresponding output of false_fun has type float32[2], so the manual axis types do not match.\n\nThis might be fixed by applying `jax.lax.pcast(..., ('i',), to='varying')` to the output of false_fun."), "{e}");
    // A scan over varying xs: the carry stays invariant, the ys vary.
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let s2 = seen.clone();
    let scanned = shard_map(
        move |b: Array| -> Result<Array> {
            let (c, ys) = lax::scan(|(c, xi): (Array, Array)| (c.clone() + 1.0, xi * c), Array::scalar(0.0f32), b, None, false, 1)?;
            s2.lock().unwrap().extend([typeof_(&c).to_string(), typeof_(&ys).to_string()]);
            Ok(ys)
        },
        Some(&mesh),
        P!("i"),
        P!("i"),
    );
    assert_eq!(scanned.call(&x).unwrap().to_vec::<f32>().unwrap(), [0.0, 1.0, 0.0, 3.0, 0.0, 5.0, 0.0, 7.0]);
    assert_eq!(*seen.lock().unwrap(), ["float32[]", "float32[2]{V:i}"]);
    // Loops and conds nested in a loop or cond body are checked too (JAX 0.10.2 raises
    // the same errors), and values in a loop body show their axes.
    let inner_loop = "The input carry component loop_carry[1] has type float32[2] but the corresponding output carry component has type float32[2]{V:i}";
    let e = err(sm(|b| {
        let init = lax::pcast(&jnp::zeros(&[2], DType::F32), "i", "varying")?;
        lax::fori_loop(0, 2, |(_, c): (Array, Array)| -> Result<Array> { Ok(c + lax::fori_loop(0, 2, |(_, d): (Array, Array)| d + &b, jnp::zeros(&[2], DType::F32))?) }, init)
    }));
    assert!(e.contains(inner_loop), "{e}");
    let e = err(sm(|b| {
        let p = b.index(s![0]).gt(100.0);
        let b2 = b.clone();
        lax::cond(&p, move |_: ()| lax::fori_loop(0, 2, |(_, d): (Array, Array)| d + &b2, jnp::zeros(&[2], DType::F32)), |_: ()| lax::pcast(&jnp::zeros(&[2], DType::F32), "i", "varying"), ())
    }));
    assert!(e.contains(inner_loop), "{e}");
    let e = err(sm(|_b| {
        let init = lax::pcast(&jnp::zeros(&[2], DType::F32), "i", "varying")?;
        lax::fori_loop(0, 2, |(_, c): (Array, Array)| -> Result<Array> {
            let y = lax::cond(&c.index(s![0]).gt(5.0), |y: Array| y * 2.0, |_: Array| jnp::zeros(&[2], DType::F32), c.clone())?;
            Ok(c + y)
        }, init)
    }));
    assert!(e.starts_with("TypeError: cond branches must have equal output types but they differ."), "{e}");
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let s2 = seen.clone();
    let typed = shard_map(
        move |b: Array| -> Result<Array> {
            let init = lax::pcast(&jnp::zeros(&[2], DType::F32), "i", "varying")?;
            let s3 = s2.clone();
            lax::fori_loop(0, 2, move |(i, c): (Array, Array)| {
                s3.lock().unwrap().extend([typeof_(&i).to_string(), typeof_(&c).to_string(), typeof_(&(c.clone() + &b)).to_string()]);
                c + &b
            }, init)
        },
        Some(&mesh),
        P!("i"),
        P!("i"),
    );
    assert_eq!(typed.call(&x).unwrap().to_vec::<f32>().unwrap(), [0.0, 2.0, 4.0, 6.0, 8.0, 10.0, 12.0, 14.0]);
    assert_eq!(*seen.lock().unwrap(), ["~int32[]", "float32[2]{V:i}", "float32[2]{V:i}"]);
    // With check_vma off nothing is checked and pcast changes nothing.
    let off = shard_map_with(|b: Array| lax::fori_loop(0, 3, |(_, c): (Array, Array)| c + &b, jnp::zeros(&[2], DType::F32)), Some(&mesh), P!("i"), P!("i"), false);
    assert_eq!(off.call(&x).unwrap().to_vec::<f32>().unwrap(), want);
}

/// `pcast`'s errors (JAX 0.10.2's texts) and its transpose: the cotangent of a value
/// pcast to varying is summed over the axes (JAX's `psum`), checked against the
/// derivative by hand (d/dw of sum(x * w) is sum(x)).
#[test]
fn pcast_errors_and_gradient() {
    eight_cpu_devices();
    let mesh = make_mesh(&[2, 2], &["i", "j"], Some(&[AxisType::Auto; 2])).unwrap();
    let x = jnp::arange(8.0).reshape(&[2, 4]);
    let run = |f: fn(Array) -> Result<Array>| shard_map(f, Some(&mesh), P!("i"), P!("i")).call(&x).map(|_| ()).unwrap_err().to_string();
    assert_eq!(run(|b| lax::pcast(&b, "i", "varying")), "ValueError: Unsupported pcast from=varying, to='varying'");
    assert_eq!(
        run(|b| lax::pcast(&b, ("i", "j"), "varying")),
        "ValueError: jax.lax.pcast can only accept axis_name which corresponds to one of varying, unreduced, reduced or invarying state of the input. Got input type: float32[1,4]{V:i}, axes: ('i', 'j') and input state: {'invarying', 'varying'}"
    );
    assert_eq!(run(|b| lax::pcast(&b, "j", "sideways")), "ValueError: Got unexpected `to` value. Allowed `to` values are: {'unreduced', 'reduced', 'varying'}");
    assert_eq!(lax::pcast(&x, "i", "varying").unwrap_err().to_string(), "ValueError: pvary should be called under jax.shard_map.");
    // pcast over j of a value varying over i is fine; psum over j brings it back.
    let ok = shard_map(|b: Array| -> Result<Array> { let v = lax::pcast(&jnp::ones(&[4], DType::F32), "j", "varying")?; Ok(b + lax::psum(&v, "j")?) }, Some(&mesh), P!("i"), P!("i"));
    let want: Vec<f32> = (0..8).map(|k| k as f32 + 2.0).collect();
    assert_eq!(ok.call(&x).unwrap().to_vec::<f32>().unwrap(), want);
    // Under vmap (JAX 0.10.2 gives the same): pcast of each row.
    let m3 = mesh.clone();
    let rows = shard_map(|b: Array| -> Result<Array> { Ok(b + vmap(|r: Array| lax::pcast(&r, "i", "varying"))(jnp::ones(&[1, 4], DType::F32))?) }, Some(&m3), P!("i"), P!("i"));
    assert_eq!(rows.call(&x).unwrap().to_vec::<f32>().unwrap(), (0..8).map(|k| k as f32 + 1.0).collect::<Vec<_>>());
    // Gradient through pcast: w (invariant, P()) made varying over i and j, then used per
    // device; the cotangent of w sums every device's block.
    let m2 = mesh.clone();
    let loss = move |w: Array| -> Result<Array> {
        let f = shard_map(
            |(b, w): (Array, Array)| -> Result<Array> { Ok(b * lax::pcast(&w, ("i", "j"), "varying")?) },
            Some(&m2),
            [P!("i", "j"), P!()],
            P!("i", "j"),
        );
        Ok(f.call((jnp::arange(8.0).reshape(&[2, 4]), w))?.sum())
    };
    let g = grad(loss)(Array::scalar(1.5f32)).unwrap();
    assert_eq!(g.item::<f32>().unwrap(), 28.0);
}

/// JAX's `in_specs=(P('i'), P())` written as a tuple: one spec per argument, the
/// invariant operand replicated on every device (jax-inventory 7.2 item 9).
#[test]
fn tuple_in_specs_and_the_implicit_pvary_of_an_invariant_operand() {
    eight_cpu_devices();
    let mesh = make_mesh(&[2], &["i"], None).unwrap();
    let f = shard_map(|(d, e): (Array, Array)| d * e, Some(&mesh), (P!("i"), P!()), P!("i"));
    let a = device_put(&jnp::arange(6).astype(DType::F32), NamedSharding::new(&mesh, P!("i")).unwrap()).unwrap();
    let b = Array::from_vec(vec![1.0f32, 2.0, 3.0], &[3]).unwrap();
    assert_eq!(f.call((&a, &b)).unwrap().to_vec::<f32>().unwrap(), [0.0, 2.0, 6.0, 3.0, 8.0, 15.0]);
    let f2 = f.clone();
    let j = make_jaxpr(move |(a, b): (Array, Array)| f2.call((a, b)), (&a, &b)).unwrap().to_string();
    assert!(j.starts_with("{ lambda ; a:f32[6@i] b:f32[3]. let\n    c:f32[6@i] = shard_map[\n      check_vma=True\n      in_specs=(P('i',), P())\n"), "{j}");
    // The invariant operand made varying before the product, as JAX records it.
    assert!(
        j.contains("jaxpr={ lambda ; d:f32[3]{V:i} e:f32[3]. let\n          f:f32[3]{V:i} = pvary[axes=('i',)] e\n          g:f32[3]{V:i} = mul d f\n        in (g,) }"),
        "{j}"
    );
    // Under jit, and its gradient: the pvary's transpose sums b's cotangent over 'i'
    // (d/db sum(a * b) = the sum of a's blocks), once.
    let f3 = f.clone();
    assert_eq!(jit(move |(a, b): (Array, Array)| f3.call((a, b))).call((&a, &b)).unwrap().to_vec::<f32>().unwrap(), [0.0, 2.0, 6.0, 3.0, 8.0, 15.0]);
    let f4 = f.clone();
    let (ga, gb) = grad(move |ab: (Array, Array)| -> Result<Array> { Ok(f4.call(ab)?.sum()) })((a.clone(), b.clone())).unwrap();
    assert_eq!(ga.to_vec::<f32>().unwrap(), [1.0, 2.0, 3.0, 1.0, 2.0, 3.0]);
    assert_eq!(gb.to_vec::<f32>().unwrap(), [3.0, 5.0, 7.0]);
    // A literal operand is made varying too (JAX: `pvary[axes=('i',)] 2.0:f32[]`); an
    // operation of two varying values gets none.
    let g = shard_map(|(d, _e): (Array, Array)| &d * 2.0 + &d, Some(&mesh), (P!("i"), P!()), P!("i"));
    let j = make_jaxpr(move |(a, b): (Array, Array)| g.call((a, b)), (&a, &b)).unwrap().to_string();
    assert!(j.contains("f:f32[]{V:i} = pvary[axes=('i',)] 2.0:f32[]\n          g:f32[3]{V:i} = mul d f\n          h:f32[3]{V:i} = add g d\n"), "{j}");
    // psum of an invariant value sums one copy per device: its gradient is the device
    // count (JAX: pvary before the psum, whose transpose sums the cotangents).
    let p = shard_map(|(_d, e): (Array, Array)| lax::psum(&e, "i"), Some(&mesh), (P!("i"), P!()), P!());
    let p2 = p.clone();
    assert_eq!(p.call((&a, &b)).unwrap().to_vec::<f32>().unwrap(), [2.0, 4.0, 6.0]);
    let a2 = a.clone();
    let gb = grad(move |e: Array| -> Result<Array> { Ok(p2.call((a2.clone(), e))?.sum()) })(b.clone()).unwrap();
    assert_eq!(gb.to_vec::<f32>().unwrap(), [2.0, 2.0, 2.0]);
    let a2 = a.clone();
    let j = make_jaxpr(move |e: Array| p.call((a2.clone(), e)), &b).unwrap().to_string();
    assert!(j.contains("= pvary[axes=('i',)] e\n") && j.contains("psum[axes=('i',)"), "{j}");
    // A result varying over fewer axes than its out_spec ends in a pvary; each device's
    // block is the same value, so d/de sum(out) counts it once per device.
    let o = shard_map(|(_d, e): (Array, Array)| e * 2.0, Some(&mesh), (P!("i"), P!()), P!("i"));
    let o2 = o.clone();
    assert_eq!(o.call((&a, &b)).unwrap().to_vec::<f32>().unwrap(), [2.0, 4.0, 6.0, 2.0, 4.0, 6.0]);
    let j = make_jaxpr(move |(a, b): (Array, Array)| o.call((a, b)), (&a, &b)).unwrap().to_string();
    assert!(j.contains("f:f32[3] = mul e 2.0:f32[]\n          g:f32[3]{V:i} = pvary[axes=('i',)] f\n        in (g,) }"), "{j}");
    let a2 = a.clone();
    let gb = grad(move |e: Array| -> Result<Array> { Ok(o2.call((a2.clone(), e))?.sum()) })(b.clone()).unwrap();
    assert_eq!(gb.to_vec::<f32>().unwrap(), [4.0, 4.0, 4.0]);
}
